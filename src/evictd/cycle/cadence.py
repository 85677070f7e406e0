"""When the housekeeping loop runs its next cycle: one pure schedule, `Cadence` (no I/O, no clock reads: every
time is an argument, in monotonic seconds), and the staleness rule the loop's timing implies (`stale_after_s`).

The loop tells the cadence how each cycle ended and what woke it; the cadence answers how long to wait
(`wait_s`). Its rules:

- After a cycle, the next one starts one housekeeping interval after this one started (the interval minus the
  cycle's duration; at once, with no wait shorter than 0, when the cycle took longer).
- After a failed cycle, the same: no back-off, the next tick retries (a failed cycle decides nothing, so the
  follow-ups of a notification under way go on).
- After a memory notification (memcg, PSI, the memory watch) the kernel may still be charging or freeing the pages
  that crossed the level, so the cycle it triggers may see the old side. Cycles then follow at the short delays
  `NOTIFICATION_FOLLOW_UPS_S` (never later than the interval's tick) until one sees a memory threshold met (newly:
  the loop tells, one held met before is not this crossing); from then only the last delay is left: one cycle
  confirms the settled state a second later.
- A cycle that finds every memory threshold more than a step from met (`near_crossing`) ends the follow-ups: the
  re-armed memcg level announces the crossing when it comes. A cycle that holds pressure (`held`) and saw no
  memory threshold newly met and none unmet within a step of its level (`unmet_near`) ends them but the confirming
  one, as a cycle that saw a threshold met does: the notification that brought it was about a threshold already
  decided (a level of it crossed again, the memory watch and a memcg level firing for the same crossing), and
  chasing it would run every follow-up (22 cycles in 1.5 s on the real cluster's held minute,
  `tests/cluster/test_held_pressure_real.py`) to find nothing new.
- A cycle whose memory crossing its confirming reading did not show (`evictd.core.settled`: page cache that came
  and went, a dip shorter than the hold) ends the follow-ups: the crossing was read, and was not one.
- A soft threshold met whose grace period is still running makes the next cycle due just after that period
  ends (`GRACE_END_MARGIN_S` later), never later than the tick: the soft eviction is decided within milliseconds
  of its grace period's end, not up to an interval later as the kubelet's 10 s tick does (issue #37). The end of
  a memory stall signal's settle time (`evictd.core.engine_rules.STALL_SETTLE_S`) counts as a grace period's end
  (`Assessment.next_decision_in_s`): the threshold waiting for it holds pressure meanwhile.
- A cycle a PSI firing brought that left a stall threshold unmet is followed by one more `WINDOW_FOLLOW_UP_S`
  (1.05 s) after it started (`stall_follow_up`; `evictd.core.psi_window`): the firing comes at a stall's onset, when
  evictd's own share cannot show it yet, and the next firing up to 2 s later. One cycle a firing, no chase.
- After an eviction and the wait for its pods to go (the kubelet's `waitForPodsCleanup`), the next cycle runs at
  once, with no wait at all (as the kubelet); the eviction ends a notification's follow-ups but the confirming one.
- The timer, a stop request, a memcg crossing (``memcg``: the notifier set judged it may change the decision),
  the memory watch, the refault watch and the pid watch make the next cycle due. The last two are not memory
  notifications: they start no follow-ups (their figures are not pages still being charged) and earn their cycle
  at once while pressure is held or memory flaps (a crossing of another threshold; while flapping, once the loop
  listens to its notifiers again, `Cadence.listening`).
- A memory threshold that flaps earns no chase (issue #37, item 3): a cycle that no longer sees a memory threshold
  the previous cycle saw met, with nothing evictd did since to relieve it (no eviction, reclaim or Eviction API
  request carried out; a dry run's do not count), or whose crossing its confirming reading did not show, is a
  *change*: memory that went back by itself. With
  `FLAP_CHANGES` changes within `FLAP_WINDOW_S` the memory is flapping, and until a window holds none, a cycle
  has no follow-ups and a memory notification makes the next cycle due 0.5-1.5 s (`flap_cycle_s`, a second on
  average) after the last one started, not at once (the tick still comes at its time). A tenant crossing the level
  20 times a second ran 37 cycles a second, 15-17 % of a core; the kubelet reads it once per 10 s tick. A crossing
  that holds is still read within `FLAP_CYCLE_MAX_S` (and confirmed), so a flapping tenant over a hard threshold is
  decided in about 1 cycle in 3 (6-8 times in 20 s on the flapping benchmark, a dry run).
- Wake-ups that earn no cycle keep the deadline, and the loop waits again for what is left of it (issue #29):
  ``memcg_rearm`` never earns one (page cache coming and going: the memcg notifier set re-armed itself on two
  fresh figures), nor ``psi_far`` (a stall with every memory threshold far from met, judged the same way);
  while pressure is held (the last cycle saw a threshold met and acted on it, or had nothing left to act on:
  `after_cycle`'s `held`), ``psi`` does not either (the stall of a pressure already decided). So a node under
  sustained pressure cycles once per interval (and the 1 s confirmation after a memory notification), unless
  a crossing of another threshold, a threshold no longer met or a stop wakes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from evictd.core.psi_window import WINDOW_FOLLOW_UP_S
from evictd.core.settled import spread

# A memory notification fires at the moment usage crosses a level, often while the kernel is still
# charging or freeing pages; the cycle it triggers may see the old side. Cycles follow at these delays after
# a notification until one sees a memory threshold met: a crossing that was a few pages short is decided
# within milliseconds, and the last one confirms the settled state a second later, instead of waiting a whole
# housekeeping interval. (One second alone left 2 of 50 black-box crossings decided ~1 s late; a first
# follow-up 5 ms after a cycle of a few ms left some decided 15 ms late.) Beside a writer the level fires early
# too: page cache written since it was armed counts in usage, not in the working set, so the crossing comes tens
# of milliseconds after the notification; the delays stay at 5 ms for 50 ms and at 10 ms for 100 ms (with 10,
# 20 and 50 ms there, 2 of 10 crossings under a 256 MiB fsync loop were decided 20-24 ms late). At most 22 cycles
# per notification that finds nothing met, a cycle costing 1-2 ms at 100 pods.
NOTIFICATION_FOLLOW_UPS_S = (0.001, 0.001, 0.002, *(0.005,) * 9, *(0.01,) * 5, 0.02, 0.05, 0.1, 0.25, 1.0)
# A cycle due at a grace period's end runs this much after it: the cycle's clock and the loop's are read at
# different moments, and a cycle a hair early would find the grace period still running.
GRACE_END_MARGIN_S = 0.002
# A memory threshold flaps when memory goes back by itself this many times within this window (a threshold met no
# longer met with no eviction since, a crossing its confirming reading did not show): a short dip every 2 s (3 in
# 6 s, the settled-figures test) stays under 4; 10 s is the kubelet's housekeeping interval. Successive pods
# crossing and evicted are not flapping, however fast they come.
FLAP_CHANGES = 4
FLAP_WINDOW_S = 10.0
# While flapping, memory notifications bring a cycle about this often, on average (the kubelet: one per 10 s tick).
FLAP_CYCLE_S = 1.0
# ...varied between half and one and a half of it (`flap_cycle_s`).
FLAP_CYCLE_MAX_S = 1.5 * FLAP_CYCLE_S
# The Waiter's causes that are memory notifications (the others: "signal", a stop request or a wake).
NOTIFICATION_CAUSES = frozenset({"memcg", "psi", "memory_watch"})
# Wake-ups that never earn a cycle: the memcg notifier set re-armed itself, or a PSI trigger fired with every
# memory threshold far from met (judged on fresh figures: the decision cannot have changed).
NO_CYCLE_CAUSES = frozenset({"memcg_rearm", "psi_far"})
# ...and those that earn none while pressure is held (`Cadence.held`): a stall of memory already under pressure.
HELD_NO_CYCLE_CAUSES = NO_CYCLE_CAUSES | {"psi"}

# What the loop has not done for this many housekeeping intervals is stale (a loop that finished no cycle, a
# recording whose newest cycle is that old, a saved engine state that old: an outage, not a restart)...
STALE_AFTER_INTERVALS = 3
# ...but never before this, so that a 1 s interval does not call one slow cycle or one restart stale.
MIN_STALE_AFTER_S = 30.0


def flap_cycle_s(count: int) -> float:
    """How long after the last cycle's start the `count`-th (0, 1, ...) cycle a notification brings while memory flaps
    is due: between half and one and a half `FLAP_CYCLE_S`, a second on average, varied so that the readings do not
    keep step with a periodic tenant (at exactly 1 s, a tenant flapping at 20 Hz was read at the same phase, above the
    level for 11 cycles in a row, then below: no change for 10 s, flapping ended and the crossing was chased again)."""
    return FLAP_CYCLE_S * (0.5 + spread(count))


def stale_after_s(housekeeping_interval_s: float) -> float:
    """How long after the loop's last cycle (or the state it wrote) that cycle is stale."""
    return max(STALE_AFTER_INTERVALS * housekeeping_interval_s, MIN_STALE_AFTER_S)


@dataclass(frozen=True, slots=True)
class Cadence:
    """The loop's schedule between two cycles (see the module's description). Immutable: each method returns
    the next one."""

    interval_s: float
    # When the next cycle is due (monotonic seconds); None: at once, without waiting.
    due_at: float | None = None
    # The delays of the notification's follow-up cycles still to come, the next first.
    follow_ups: tuple[float, ...] = ()
    # The last cycle saw a threshold met and acted on it or had nothing left to act on: pressure is held.
    held: bool = False
    # When memory went back by itself within the last FLAP_WINDOW_S (monotonic seconds, oldest first).
    changes: tuple[float, ...] = ()
    # When the last cycle started (monotonic seconds; None: none yet).
    last_started_at: float | None = None
    # Memory flaps: it went back by itself `FLAP_CHANGES` times or more within `FLAP_WINDOW_S`, and has gone back at
    # least once within the last `FLAP_WINDOW_S` since (`after_cycle`).
    flapping: bool = False
    # How many cycles a notification brought while flapping (`flap_cycle_s`'s count).
    flap_cycles: int = 0

    @property
    def listening(self) -> bool:
        """Whether a memory notification can bring the next cycle sooner; False while flapping once the next cycle is
        due within `FLAP_CYCLE_MAX_S` of the last one's start (the loop then need not even look at the notifiers: a
        flapping level fires 40 times a second, and judging each firing cost more than the cycles)."""
        if not self.flapping or self.last_started_at is None or self.due_at is None:
            return True
        return self.due_at > self.last_started_at + FLAP_CYCLE_MAX_S

    def after_cycle(self, started_at: float, now: float, *, memory_threshold_met: bool, held: bool = False,
                    grace_ends_in_s: float | None = None, crossing_unconfirmed: bool = False,
                    near_crossing: bool = True, unmet_near: bool = True, memory_receded: bool = False,
                    stall_follow_up: bool = False) -> Cadence:
        """A cycle that started at `started_at` ended at `now`; it saw a memory threshold met or not, and held
        pressure or not (a threshold met, acted on or with nothing left to act on); `grace_ends_in_s`: how long
        the first grace period still running had left when the cycle decided (None: none runs), counted from
        `now`, a few milliseconds late rather than early; `crossing_unconfirmed`: the cycle read a memory threshold
        newly met that its confirming reading did not show (`evictd.core.settled`: page cache, a short dip), which
        ends the follow-ups, as does a cycle that saw no memory threshold `near_crossing` (`evictd.core.settled`),
        and a cycle that holds pressure with no memory threshold newly met and none unmet within a step of its level
        (`unmet_near`: `evictd.core.settled.near_unmet_crossing`) ends them but the confirming one;
        `memory_receded`: a memory threshold the previous cycle saw met is not met in this one, with nothing evictd
        did since to relieve it (flapping counts those and unconfirmed crossings); `stall_follow_up`: a PSI
        firing brought the cycle and a stall threshold is not met (one more cycle `WINDOW_FOLLOW_UP_S` after it
        started)."""
        changes = tuple(t for t in self.changes if now - t < FLAP_WINDOW_S)
        if memory_receded or crossing_unconfirmed:
            changes = (*changes, now)
        # Once flapping, until a whole window passes with no change: read about once a second, a flapping tenant shows
        # fewer changes than when it was chased, and a window with fewer than FLAP_CHANGES must not restart the chase.
        flapping = len(changes) >= FLAP_CHANGES or (self.flapping and bool(changes))
        nothing_new_near = held and not memory_threshold_met and not unmet_near
        if crossing_unconfirmed or not near_crossing or flapping:
            follow_ups: tuple[float, ...] = ()
        else:
            follow_ups = self.follow_ups[-1:] if memory_threshold_met or nothing_new_near else self.follow_ups
        due_at = started_at + self.interval_s
        if grace_ends_in_s is not None:
            due_at = min(due_at, now + grace_ends_in_s + GRACE_END_MARGIN_S)
        if stall_follow_up:
            due_at = min(due_at, started_at + WINDOW_FOLLOW_UP_S)
        if follow_ups:
            due_at = min(due_at, now + follow_ups[0])
            follow_ups = follow_ups[1:]
        return replace(self, due_at=due_at, follow_ups=follow_ups, held=held, changes=changes,
                       last_started_at=started_at, flapping=flapping)

    def after_failure(self, started_at: float, now: float) -> Cadence:
        """A cycle that started at `started_at` failed at `now`: the next tick retries (it decided nothing, so it
        holds nothing)."""
        return self.after_cycle(started_at, now, memory_threshold_met=False)

    def after_cleanup(self) -> Cadence:
        """A cycle evicted and the wait for the evicted pods to go has ended: the next cycle runs at once. The
        eviction saw its crossing, so of a notification's follow-ups only the confirming one is left (as after a
        cycle that saw a threshold met)."""
        return replace(self, due_at=None, follow_ups=self.follow_ups[-1:])

    def wait_s(self, now: float) -> float | None:
        """How long to wait at `now` for the next cycle (0: only look whether something woke the loop);
        None: run it at once, without waiting."""
        return None if self.due_at is None else max(0.0, self.due_at - now)

    def woken(self, causes: Iterable[str]) -> Cadence:
        """The wait ended with `causes` (none: the timer). A wake-up that earns a cycle makes it due (a memory
        notification starts its follow-ups afresh); one that does not keeps the deadline."""
        causes = frozenset(causes)
        if causes and causes <= (HELD_NO_CYCLE_CAUSES if self.held else NO_CYCLE_CAUSES):
            return self
        if causes and causes <= NOTIFICATION_CAUSES | NO_CYCLE_CAUSES and self.flapping \
                and self.last_started_at is not None:
            # Flapping: the notification brings the next cycle no sooner than about FLAP_CYCLE_S after the last one.
            due_at = self.last_started_at + flap_cycle_s(self.flap_cycles)
            return replace(self, due_at=due_at if self.due_at is None else min(self.due_at, due_at), follow_ups=(),
                           flap_cycles=self.flap_cycles + 1)
        follow_ups = NOTIFICATION_FOLLOW_UPS_S if NOTIFICATION_CAUSES & causes else self.follow_ups
        return replace(self, due_at=None, follow_ups=follow_ups)

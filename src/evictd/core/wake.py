"""Between-cycle attention: what woke the loop (`Wake`), how each reading is watched (`WATCHES`), when the next cycle
is due (`WakeState` and its transitions `after_cycle`, `sensed`, `timer`, each returning the new state and a `Plan`).

A cycle is due one interval after the last started, or sooner: a memory notification (memcg, PSI, memory watch)
starts follow-ups at `NOTIFICATION_FOLLOW_UPS_S` until a cycle sees a threshold newly met (then one confirms a
second later); a grace period's end; one more `WINDOW_FOLLOW_UP_S` after a PSI firing left a stall threshold
unmet; at once after an eviction's clean-up and on a stop, the timer or another reading's watch. Wake-ups that
can change nothing (`NO_CYCLE`; `psi` too while pressure is held) keep the deadline. Follow-ups end with a
crossing not confirmed, every threshold far from met, or nothing new near while held. Memory that goes back by
itself `FLAP_CHANGES` times within `FLAP_WINDOW_S` flaps: no follow-ups, and a notification brings a cycle about
`FLAP_CYCLE_S` after the last (`flap_cycle_s`), not at once.
Invariants: pure (no I/O, no clock: every time is an argument, monotonic seconds); states are immutable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from evictd.core.engine import Assessment
from evictd.core.psi_window import WINDOW_FOLLOW_UP_S, window_follow_up_wanted
from evictd.core.settled import near_crossing, near_unmet_crossing, spread
from evictd.core.signals import spec_of
from evictd.core.thresholds import Threshold


class Wake(StrEnum):
    """Every cause of a wake-up: the metric's label, the schedule's input, the adapters' `cause`."""

    TIMER = "timer"
    MEMCG = "memcg"  # a memcg level crossed (may change the decision)
    MEMCG_REARM = "memcg_rearm"  # page cache came and went: the memcg set re-armed itself
    PSI = "psi"
    PSI_FAR = "psi_far"  # a PSI firing with every memory threshold far from met
    MEMORY_WATCH = "memory_watch"
    REFAULT_WATCH = "refault_watch"
    PID_WATCH = "pid_watch"
    SIGNAL = "signal"  # a stop request or another thread's wake
    EVICTION = "eviction"  # the wait for evicted pods ended


# Memory notifications: the pages that crossed may still be charging, so their cycles are followed up.
NOTIFICATIONS = frozenset({Wake.MEMCG, Wake.PSI, Wake.MEMORY_WATCH})
# Wake-ups that never earn a cycle (judged on fresh figures: the decision cannot have changed)...
NO_CYCLE = frozenset({Wake.MEMCG_REARM, Wake.PSI_FAR})
# ...and those that earn none while pressure is held: a stall of memory already decided.
HELD_NO_CYCLE = NO_CYCLE | {Wake.PSI}

# Delays of the cycles after a memory notification: fine at first (a crossing a few pages short), 1 s last (confirm).
NOTIFICATION_FOLLOW_UPS_S = (0.001, 0.001, 0.002, *(0.005,) * 9, *(0.01,) * 5, 0.02, 0.05, 0.1, 0.25, 1.0)
# A cycle due at a grace period's end runs this much after it, so that it never finds the period still running.
GRACE_END_MARGIN_S = 0.002
# Memory flaps after this many changes (gone back by itself) within this window (10 s: the kubelet's interval).
FLAP_CHANGES = 4
FLAP_WINDOW_S = 10.0
# While flapping, a notification brings a cycle about this often (the kubelet reads once per 10 s tick)...
FLAP_CYCLE_S = 1.0
# ...varied between half and one and a half of it (`flap_cycle_s`).
FLAP_CYCLE_MAX_S = 1.5 * FLAP_CYCLE_S
# What the loop has not done for this many intervals is stale (an outage, not a restart)...
STALE_AFTER_INTERVALS = 3
# ...but never before this, so that a 1 s interval does not call one slow cycle stale.
MIN_STALE_AFTER_S = 30.0


def flap_cycle_s(count: int) -> float:
    """When the `count`-th cycle a notification brings while flapping is due after the last start: spread over
    [0.5, 1.5) `FLAP_CYCLE_S`, so that the readings never keep step with a periodic tenant."""
    return FLAP_CYCLE_S * (0.5 + spread(count))


def stale_after_s(housekeeping_interval_s: float) -> float:
    """How long after the loop's last cycle (or the state it wrote) that cycle is stale."""
    return max(STALE_AFTER_INTERVALS * housekeeping_interval_s, MIN_STALE_AFTER_S)


@dataclass(frozen=True, slots=True)
class CycleSeen:
    """What the schedule needs of a finished cycle (`of`): the memory thresholds met, whether pressure is held,
    the crossing not confirmed, a memory threshold near (met or unmet), the first grace end, a stall threshold
    left unmet, whether evictd acted for real; `cycle_failed`: no report; `cleaned_up`: evicted, pods waited for."""

    started_at: float
    memory_met: frozenset[Threshold] = frozenset()
    held: bool = False
    crossing_unconfirmed: bool = False
    near_crossing: bool = True
    unmet_near: bool = True
    grace_ends_in_s: float | None = None
    stall_unmet: bool = False
    acted: bool = False
    cycle_failed: bool = False
    cleaned_up: bool = False

    @classmethod
    def of(cls, started_at: float, thresholds: Sequence[Threshold], assessment: Assessment, *,
           crossing_unconfirmed: bool, eviction_failed: bool, acted: bool, cleaned_up: bool = False) -> CycleSeen:
        """The one place a cycle's report becomes what the schedule sees."""
        met = tuple(status.threshold for status in assessment.thresholds)
        return cls(started_at, frozenset(t for t in met if spec_of(t.signal).is_memory),
                   held=bool(met and not assessment.stale_signals and not eviction_failed),
                   crossing_unconfirmed=crossing_unconfirmed,
                   near_crossing=near_crossing(thresholds, assessment.observations),
                   unmet_near=near_unmet_crossing(thresholds, assessment.observations),
                   grace_ends_in_s=assessment.next_decision_in_s(),
                   stall_unmet=window_follow_up_wanted(thresholds, met), acted=acted, cleaned_up=cleaned_up)


@dataclass(frozen=True, slots=True)
class Sensed:
    """What ended a wait: the causes the sensors reported (`Wake` values), none being the timer."""

    causes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """What the loop does next: run the cycle at `due_at` (None: at once) and, while waiting, listen to the
    notifiers or not (flapping, once the cycle is due within `FLAP_CYCLE_MAX_S` of the last one's start)."""

    due_at: float | None
    listening: bool = True

    def wait_s(self, now: float) -> float | None:
        """How long to wait at `now` (0: only look for wake-ups); None: run the cycle at once."""
        return None if self.due_at is None else max(0.0, self.due_at - now)


@dataclass(frozen=True, slots=True)
class WakeState:
    """The schedule between two cycles. `follow_ups`: the delays still to come; `held`: the last cycle held
    pressure; `changes`: when memory went back by itself within `FLAP_WINDOW_S`; `memory_met`, `acted`: the last
    cycle's; `woken`: what ended the last wait (cleared by a cycle)."""

    interval_s: float
    due_at: float | None = None
    follow_ups: tuple[float, ...] = ()
    held: bool = False
    changes: tuple[float, ...] = ()
    last_started_at: float | None = None
    flapping: bool = False
    flap_cycles: int = 0
    memory_met: frozenset[Threshold] = frozenset()
    acted: bool = False
    woken: frozenset[str] = field(default_factory=frozenset)

    @property
    def plan(self) -> Plan:
        listening = (not self.flapping or self.last_started_at is None or self.due_at is None
                     or self.due_at > self.last_started_at + FLAP_CYCLE_MAX_S)
        return Plan(self.due_at, listening)


def after_cycle(state: WakeState, seen: CycleSeen, now: float) -> tuple[WakeState, Plan]:
    """The cycle `seen` ended at `now`."""
    if seen.cleaned_up:
        new = replace(state, due_at=None, follow_ups=state.follow_ups[-1:], memory_met=seen.memory_met,
                      acted=seen.acted, woken=frozenset())
        return new, new.plan
    if seen.cycle_failed:
        new = _scheduled(state, seen.started_at, now, CycleSeen(seen.started_at), newly_met=False, receded=False,
                         stall_follow_up=False)
        return new, new.plan
    new = _scheduled(state, seen.started_at, now, seen, newly_met=bool(seen.memory_met - state.memory_met),
                     receded=bool(state.memory_met - seen.memory_met) and not state.acted,
                     stall_follow_up=Wake.PSI in state.woken and seen.stall_unmet)
    new = replace(new, memory_met=seen.memory_met, acted=seen.acted)
    return new, new.plan


def _scheduled(state: WakeState, started_at: float, now: float, seen: CycleSeen, *, newly_met: bool, receded: bool,
               stall_follow_up: bool) -> WakeState:
    changes = tuple(t for t in state.changes if now - t < FLAP_WINDOW_S)
    if receded or seen.crossing_unconfirmed:
        changes = (*changes, now)
    # Once flapping, until a window passes with no change: read once a second, a flapping tenant shows fewer.
    flapping = len(changes) >= FLAP_CHANGES or (state.flapping and bool(changes))
    nothing_new_near = seen.held and not newly_met and not seen.unmet_near
    if seen.crossing_unconfirmed or not seen.near_crossing or flapping:
        follow_ups: tuple[float, ...] = ()
    else:
        follow_ups = state.follow_ups[-1:] if newly_met or nothing_new_near else state.follow_ups
    due_at = started_at + state.interval_s
    if seen.grace_ends_in_s is not None:
        due_at = min(due_at, now + seen.grace_ends_in_s + GRACE_END_MARGIN_S)
    if stall_follow_up:
        due_at = min(due_at, started_at + WINDOW_FOLLOW_UP_S)
    if follow_ups:
        due_at = min(due_at, now + follow_ups[0])
        follow_ups = follow_ups[1:]
    return replace(state, due_at=due_at, follow_ups=follow_ups, held=seen.held, changes=changes,
                   last_started_at=started_at, flapping=flapping, woken=frozenset())


def sensed(state: WakeState, what: Sensed, now: float) -> tuple[WakeState, Plan]:
    """A wait ended with `what` at `now`: a wake-up that earns a cycle makes it due (a notification restarts the
    follow-ups); one that does not keeps the deadline."""
    causes = frozenset(what.causes)
    new = replace(_woken(state, causes), woken=causes)
    return new, new.plan


def timer(state: WakeState, now: float) -> tuple[WakeState, Plan]:
    """A wait ended at `now` with nothing sensed: the cycle is due."""
    new = replace(state, due_at=None, woken=frozenset({Wake.TIMER}))
    return new, new.plan


def _woken(state: WakeState, causes: frozenset[str]) -> WakeState:
    if not causes:
        return replace(state, due_at=None)
    if causes <= (HELD_NO_CYCLE if state.held else NO_CYCLE):
        return state
    if causes <= NOTIFICATIONS | NO_CYCLE and state.flapping and state.last_started_at is not None:
        due_at = state.last_started_at + flap_cycle_s(state.flap_cycles)
        return replace(state, due_at=due_at if state.due_at is None else min(state.due_at, due_at), follow_ups=(),
                       flap_cycles=state.flap_cycles + 1)
    follow_ups = NOTIFICATION_FOLLOW_UPS_S if NOTIFICATIONS & causes else state.follow_ups
    return replace(state, due_at=None, follow_ups=follow_ups)


def wakes(causes: Iterable[str]) -> tuple[Wake, ...]:
    """The causes of a wait as `Wake` values, the timer when none."""
    return tuple(Wake(cause) for cause in causes) or (Wake.TIMER,)

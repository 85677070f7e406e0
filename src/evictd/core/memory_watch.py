"""The memory watch's arithmetic: what to watch between ticks, and how often to look.

cgroup v2 has no memory usage threshold notifier (v1's ``cgroup.event_control`` is gone), and a kernel built
without PSI has nothing else that wakes a loop when memory fills: a crossing waits for the next housekeeping
tick (up to 10 s). On v1 a usage level cannot announce a crossing that charges nothing (a file read again turns
its cached pages active: the working set grows while usage stays put), nor in time one whose level was armed for
more inactive file than is left: the watch looks there too, beside the levels (`evictd.core.memcg_wakeups`). The
watch looks at the memory figure itself, closely only while a crossing could happen before that tick, as earlyoom
adapts its polling to the distance left:

* after each cycle, every memory threshold not met in that cycle's readings becomes a `WatchTarget`: the
  cgroup whose working set the signal comes from (the root for ``memory.available``, the pods cgroup for
  ``allocatableMemory.available``), the capacity the cycle saw, and the available amount below which the
  threshold is met (the kubelet's threshold quantity, rounded up to a byte; for an integer amount of bytes,
  ``available < quantity`` is ``available < ceil(quantity)``);
* `watch_period_s`: assuming memory fills at most `ASSUMED_FILL_BYTES_PER_S`, the margin left cannot be used
  up sooner than ``margin / rate``; the next look is then, but never sooner than `MIN_PERIOD_S`, and none at
  all when that is not before the next tick (the cycle looks then anyway) or when the threshold is met;
* a steady margin (issue 37 item 3: within ~20 MiB of a threshold that rule looked every 20 ms for as long as the
  node stayed there, 9.9 CPU s a minute in the 6.1 guest): `LookHistory` remembers what the looks at a target saw
  since the watch began looking at it (the adapter keeps it across armings that hand the same target, drops it
  when the watch idles). Once the looks have seen the margin shrink by no more than `STEADY_TOLERANCE_BYTES` for
  `STEADY_WINDOW_S` (a fill observed no faster than `FLOOR_FILL_BYTES_PER_S`), the margin is steady and the
  next look may wait as long as a fill of the floor rate needs to use it up, capped at `STEADY_MAX_PERIOD_S`
  (never less than the fast rule gives). The first look that sees it shrink by more is back at the fast pace at
  once, and stays there for a window at least.

On cgroup v2, where the watch is the only wake-up without PSI, the cap follows what a look costs (issue 37 items 3
and 5): `steady_max_period_s` makes it as long as the looks need to spend no more than `LOOK_CPU_SHARE` of a CPU
(0.75 CPU s a minute) at a steady margin, from the watch thread's own CPU per look, within `MIN_PERIOD_S` and
`STEADY_MAX_PERIOD_S`: in the 6.1 user-mode guest on a quiet host (0.5-0.8 ms a look) it was 38-64 ms; computed,
not measured: on a loaded host, where the guest's accounting charges a look 2-4 ms, 160-250 ms, and on a host
whose looks cost tens of microseconds the fast rule's 20 ms. On v1 the watch is the memcg levels' backstop and
keeps the fixed cap.

What the steady pace gives up, and what it keeps: the looks are never further apart than `STEADY_MAX_PERIOD_S`
within ~250 MiB of a threshold (the fast rule's own period there), so any crossing from a steady margin (a burst,
a ramp) is read at most that long after the kernel's figure crossed, plus the look and the cycle; a fill no
faster than `FLOOR_FILL_BYTES_PER_S` is still seen before it crosses (the steady period is at most the margin
over that rate); a faster one is found shrinking within two capped periods of its start and watched at the fast
pace from then on.

A look (`look`) judges what the adapter read of each target's cgroup: the target found met (the loop is woken:
the decision is the cycle's, on its own fresh stats), or when to look next, and what the looks saw.
Invariants: no I/O, no clock (times are arguments); thresholds already met are not watched (their crossing is
decided), and nothing else is watched while a hard memory threshold is met (issue 37: the watch looked 24-25 times
a second at the allocatable copy of a hard threshold whose node figure was met): the looks only ask, every
`HELD_PERIOD_S`, whether it is met still (`watch_plan`), so a node that stays under hard pressure costs the watch
two small reads a second, and one that comes out of it with no cycle (nothing evicted) is watched again at once;
under a soft threshold whose grace period runs, the hard ones are still watched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from evictd.core.signals import Operator, Reading, Signal, spec_of
from evictd.core.summary import Summary, signal_observations
from evictd.core.thresholds import Threshold, threshold_quantity

# The fastest the watch assumes memory fills: 1 GiB/s (a process writing fresh pages on one core of these
# machines fills 1-2 GiB/s; a faster fill is read at the next look, which may come up to margin / 1 GiB/s after it
# crossed).
ASSUMED_FILL_BYTES_PER_S = 1 << 30
# On cgroup v1 the watch is the usage levels' backstop, for a notification the kernel sends late (bench
# earlyoom_side_by_side.py --kernel-trace: 11-854 ms late in 3-8 crossings of 50 at load 6-7, the allocator filling
# 1-2 GiB/s): it looks as if memory filled at up to 4 GiB/s, so that a fill that fast is still read within
# MIN_PERIOD_S of its crossing. A look on a real host costs tens of microseconds (two preads), and a steady margin
# is still looked at no more often than STEADY_MAX_PERIOD_S.
V1_BACKSTOP_FILL_BYTES_PER_S = 4 << 30
# Never look more often than this: 50 looks a second at most, each a few small cgroupfs reads.
MIN_PERIOD_S = 0.02
# A look that finds the margin no more than this below the look before's sees it steady: the figure moves by a few
# pages while nothing fills (evictd's own cycle, the kernel's per-CPU charge batches of 64 pages are 256 KiB).
STEADY_TOLERANCE_BYTES = 1 << 20
# While the margin is steady, a look at least this often: a burst from a steady margin is read at most this long
# after it crossed (plus the look and the cycle). In the 6.1 guest on a loaded host each look cost ~3-4 ms of the
# guest's CPU accounting (0.6-0.7 ms on a quiet host): 100 ms (10 looks a second) still cost 2.7 CPU s a minute
# there, 250 ms (4) kept it under 1. It is also the fast rule's own period ~250 MiB from a threshold. On v1 the cap;
# on v2 the longest `steady_max_period_s` gives.
STEADY_MAX_PERIOD_S = 0.25
# On cgroup v2 (`steady_max_period_s`): the share of one CPU the looks at a steady margin may spend, three quarters
# of issue 37 item 3's bound of 1 CPU s a minute (the rest for the noise of the measure: the user-mode guest's
# thread clock moves in 10 ms ticks). With half of it (0.5) a burst from the margin was read up to ~80 ms after it
# crossed, with 0.75 up to ~65 ms (item 5's 100 ms includes the cycle after the look, 20-50 ms in that guest).
LOOK_CPU_SHARE = 0.75 / 60
# The fill a steady margin is still watched for before it crosses: one that never shrinks the margin by more than
# the tolerance within one capped period (4 MiB/s); a faster one shows as shrinking within two.
FLOOR_FILL_BYTES_PER_S = STEADY_TOLERANCE_BYTES / STEADY_MAX_PERIOD_S
# How long the looks must have seen the margin within the tolerance before it is steady: as long as the capped period,
# so that a fill faster than the floor rate, which shrinks the margin past the tolerance within one capped period,
# is never found steady, whatever pace the looks had (issue 37 item 3 names the rule: the fill rate observed across
# the last looks). That is ~12 looks at the fast pace after the watch begins looking at a target.
STEADY_WINDOW_S = STEADY_MAX_PERIOD_S
# While a hard memory threshold is met the watch looks at nothing else, but once every this long at whether it is met
# still: a threshold met with no eviction to follow (dry-run, no pod to evict, memory given back by itself) is
# released with no cycle to hand the watch its targets again, and a crossing after that would wait for the tick.
# Two looks a second should cost the 6.1 guest about half of what STEADY_MAX_PERIOD_S's four were measured at (under
# 1 CPU s a minute; not measured at this pace); the release itself needs no hurry, the next crossing is a full
# threshold away.
HELD_PERIOD_S = 0.5


@dataclass(frozen=True, slots=True)
class WatchTarget:
    """One memory threshold to watch: met once ``capacity_bytes - working set of cgroup < met_below_bytes``.

    `cgroup` is relative to the memory hierarchy's root (``""``: the root, for ``memory.available``).
    """

    signal: Signal
    cgroup: str
    capacity_bytes: int
    met_below_bytes: int
    description: str

    def margin_bytes(self, working_set_bytes: int) -> int:
        """How many bytes more the working set can grow before the threshold is met (<= 0: met)."""
        return self.capacity_bytes - working_set_bytes - self.met_below_bytes + 1


def watch_plan(thresholds: Sequence[Threshold], summary: Summary,
               pods_cgroup: str) -> tuple[tuple[WatchTarget, ...], tuple[WatchTarget, ...]]:
    """Return what the watch is handed after a cycle that read `summary`: the targets to watch and the held ones.
    The targets are the memory thresholds with an observation and not met in it. With a hard memory threshold met
    the loop acts on every cycle, at the pace its Cadence sets, and another crossing would wake it for nothing: the
    hard memory thresholds met are then held targets (their margin <= 0), which the looks only ask about every
    `HELD_PERIOD_S` (`look`'s `held`), and the targets, watched once none is met any more, are those held, then the
    others not met. `pods_cgroup` is where ``allocatableMemory.available`` is read from."""
    targets, held = _memory_targets(thresholds, summary, pods_cgroup)
    return ((*held, *targets), held) if held else (targets, ())


def _memory_targets(thresholds: Sequence[Threshold], summary: Summary,
                    pods_cgroup: str) -> tuple[tuple[WatchTarget, ...], tuple[WatchTarget, ...]]:
    """The memory thresholds with an observation in `summary` as targets: those not met, and the hard ones met."""
    observations = signal_observations(summary)
    targets: list[WatchTarget] = []
    held: list[WatchTarget] = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        spec = spec_of(threshold.signal)
        if not spec.memcg_watched or observed is None or threshold.operator is not Operator.LESS_THAN:
            continue
        met_below = threshold_quantity(threshold.value, observed.capacity).ceil_int()
        met = observed.available.ceil_int() < met_below
        if met and not threshold.is_hard:
            continue  # met already: decided by this cycle, not a crossing to catch
        cgroup = pods_cgroup if spec.reading is Reading.PODS_MEMORY else ""
        kind = "hard" if threshold.is_hard else "soft"
        (held if met else targets).append(WatchTarget(threshold.signal, cgroup, observed.capacity.ceil_int(),
                                                      met_below, f"{kind} {threshold.signal} threshold"))
    return tuple(targets), tuple(held)


@dataclass(frozen=True, slots=True)
class LookHistory:
    """What the looks at one target saw since the watch began looking at it: the margin the current steady run is
    measured from (the highest a look saw since that run began), when that run began, and whether it is long
    enough."""

    reference_bytes: int
    since_s: float
    steady: bool


def steady_max_period_s(look_cpu_s: float | None) -> float:
    """Return the steady cap on cgroup v2 for looks that each cost `look_cpu_s` of the watch thread's CPU (from one
    look to the next: the look and the wait before it; None: not measured yet): as long as looks of that cost need
    to spend no more than `LOOK_CPU_SHARE` of a CPU, within `MIN_PERIOD_S` and `STEADY_MAX_PERIOD_S` (the fixed cap,
    also before the first measure). The window and the floor fill rate follow the cap (`look_history`,
    `watch_period_s`)."""
    if look_cpu_s is None:
        return STEADY_MAX_PERIOD_S
    return min(max(look_cpu_s / LOOK_CPU_SHARE, MIN_PERIOD_S), STEADY_MAX_PERIOD_S)


def look_history(previous: LookHistory | None, margin_bytes: int, now: float, *,
                 steady_max_s: float = STEADY_MAX_PERIOD_S) -> LookHistory:
    """Return the history after a look at `now` (monotonic seconds) found `margin_bytes` left, `previous` being the
    history before it (None: the first look at it). The margin is steady once the looks have
    seen it shrink by no more than `STEADY_TOLERANCE_BYTES` below the run's reference for a window as long as the
    steady cap `steady_max_s` (`STEADY_WINDOW_S` for the fixed cap): the fill observed over that window is at most
    the floor fill rate (the tolerance over the cap). A look that sees it shrink by more starts a new run from its
    own margin: not steady, back to the fast pace at once."""
    if previous is None or previous.reference_bytes - margin_bytes > STEADY_TOLERANCE_BYTES:
        return LookHistory(margin_bytes, now, False)
    reference = max(previous.reference_bytes, margin_bytes)
    return LookHistory(reference, previous.since_s, now - previous.since_s >= steady_max_s)


def watch_period_s(margin_bytes: int, until_tick_s: float, *, steady: bool = False,
                   fill_bytes_per_s: int = ASSUMED_FILL_BYTES_PER_S,
                   steady_max_s: float = STEADY_MAX_PERIOD_S) -> float | None:
    """Return how long to wait before the next look, with `margin_bytes` left and the next tick `until_tick_s`
    away, the margin `steady` or not (`LookHistory.steady`), memory assumed to fill at most `fill_bytes_per_s`
    (`V1_BACKSTOP_FILL_BYTES_PER_S` on v1), the steady cap `steady_max_s` (`steady_max_period_s` on v2); None for
    no look before the tick (far from the threshold, or met already)."""
    if margin_bytes <= 0:
        return None
    period = max(margin_bytes / fill_bytes_per_s, MIN_PERIOD_S)
    if steady:
        floor_fill = STEADY_TOLERANCE_BYTES / steady_max_s  # FLOOR_FILL_BYTES_PER_S for the fixed cap
        period = max(period, min(margin_bytes / floor_fill, steady_max_s))
    return period if period < until_tick_s else None


@dataclass(frozen=True, slots=True)
class Look:
    """What one look found: what the looks saw of each target (to hand to the next look), the target found met
    (None: none; the loop is woken and the watch idles), and how long until the next look (None: none before the
    tick, or one met)."""

    histories: Mapping[WatchTarget, LookHistory]
    met: WatchTarget | None
    period_s: float | None
    # `look` was given held targets and found every one released: the targets are watched from this look on.
    released: bool = False


def look(histories: Mapping[WatchTarget, LookHistory], targets: Sequence[WatchTarget],
         working_sets: Mapping[str, int], now: float, until_tick_s: float, *,
         fill_bytes_per_s: int = ASSUMED_FILL_BYTES_PER_S, held: Sequence[WatchTarget] = (),
         steady_max_s: float = STEADY_MAX_PERIOD_S) -> Look:
    """Judge a look at `now` (monotonic seconds), the next tick `until_tick_s` away: `working_sets` is what it read of
    each target's cgroup (a cgroup missing: unreadable, that target skipped; the cycle reports it), `histories` what
    the looks saw before. Only the targets handed keep a history: a target the cycle hands again keeps what the looks
    saw of it (a margin steady across the 10 s tick is not looked at fast for a window after each cycle: ~12 looks
    of 52 a 10 s at the margin), a new one (another threshold, capacity or level) starts with none.

    `held`: hard thresholds a cycle found met and no look since has found released (`watch_plan`). While one is
    met still (or unreadable) the look judges nothing else and comes back after `HELD_PERIOD_S`; once none is, the
    look is `released` and judges `targets` at once (`watch_plan`'s, which include the held ones). `steady_max_s`:
    the steady cap (`steady_max_period_s` on v2)."""
    if held:
        for target in held:
            working_set = working_sets.get(target.cgroup)
            if working_set is None or target.margin_bytes(working_set) <= 0:
                return Look({}, None, HELD_PERIOD_S if until_tick_s > HELD_PERIOD_S else None)
        return replace(look(histories, targets, working_sets, now, until_tick_s, fill_bytes_per_s=fill_bytes_per_s,
                            steady_max_s=steady_max_s), released=True)
    kept = {target: history for target, history in histories.items() if target in targets}
    period: float | None = None
    for target in targets:
        working_set = working_sets.get(target.cgroup)
        if working_set is None:
            continue
        margin = target.margin_bytes(working_set)
        if margin <= 0:
            return Look(kept, target, None)
        history = kept[target] = look_history(kept.get(target), margin, now, steady_max_s=steady_max_s)
        next_look = watch_period_s(margin, until_tick_s, steady=history.steady, fill_bytes_per_s=fill_bytes_per_s,
                                   steady_max_s=steady_max_s)
        if next_look is not None:
            period = next_look if period is None else min(period, next_look)
    return Look(kept, None, period)

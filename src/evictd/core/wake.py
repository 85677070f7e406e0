"""Between-cycle attention: what woke the loop (`Wake`), how each reading is watched (`WATCHES`), and `WakeState`'s
transitions `after_cycle` and `sensed`, each returning the new state and a `Plan` (what to arm, when to run).
Over 500 lines because it is the one model of between-cycle attention: the schedule and the watches' rules together.

A cycle is due one interval after the last started, or sooner: a memory notification starts follow-ups
(`NOTIFICATION_FOLLOW_UPS_S`) until a cycle sees a threshold newly met (one confirms a second later); a grace
period's end; `WINDOW_FOLLOW_UP_S` after a PSI firing left a stall threshold unmet; `SNAPSHOT_SPACING_S` after a
stall met found no pod grown yet; at once after the wait for evicted pods, a stop, the timer or another watch.
`NO_CYCLE` wake-ups (and `psi` while pressure is held) keep the deadline. Memory that goes back by itself
`FLAP_CHANGES` times in `FLAP_WINDOW_S` flaps: no follow-ups, a cycle about `FLAP_CYCLE_S` after the last. Memory
that flaps only with crossings met on usage cgroup v1's statistics do not count yet (`lagging`: page cache written
and freed) still hears the memory watch, armed on the figures they account for: its crossing is real, and decided
at once. cgroup v1's memcg levels are their own model (`evictd.core.memcg`); `arming` hands them a cycle's
figures. Pure: every time is an argument (monotonic seconds), states are immutable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from evictd.core.daemon_refault import (
    DAEMON_MIN_MEMORY_BYTES,
    DAEMON_REFAULT_MIN_SPAN_S,
    DAEMON_REFAULT_STALE_S,
    DAEMON_REFAULT_WINDOW_S,
    DAEMONS_BASELINE_SHARE,
)
from evictd.core.engine import NO_STALL_CANDIDATE, Assessment
from evictd.core.errors import SampleError
from evictd.core.memcg import MemoryFigures, memory_stats_for
from evictd.core.pod_growth import SNAPSHOT_SPACING_S
from evictd.core.psi_window import WINDOW_FOLLOW_UP_S, window_follow_up_wanted
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.refault import (
    REFAULT_MIN_SPAN_S,
    REFAULT_WINDOW_S,
    RefaultSample,
    memory_capacity_bytes,
    next_samples,
    refault_figure,
)
from evictd.core.settled import near_crossing, near_unmet_crossing, spread
from evictd.core.signals import Operator, Reading, Signal, spec_of
from evictd.core.stall_gate import STALL_RECLAIM_WINDOW_S, CounterTrend, next_trend
from evictd.core.summary import STALL_BASIS_POINTS, SYSTEM_CONTAINER_PODS, Observation, Summary, signal_observations
from evictd.core.thresholds import Threshold, threshold_quantity


class Wake(StrEnum):
    """Every cause of a wake-up: the metric's label, the schedule's input, the adapters' `cause`."""

    TIMER = "timer"
    MEMCG = "memcg"  # a memcg level crossed (may change the decision)
    MEMCG_REARM = "memcg_rearm"  # page cache came and went: the memcg set re-armed itself
    PSI = "psi"
    PSI_FAR = "psi_far"  # a PSI firing with every memory threshold far from met
    MEMORY_WATCH = "memory_watch"
    REFAULT_WATCH = "refault_watch"
    DAEMONS_REFAULT_WATCH = "daemons_refault_watch"
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
# While flapping, a notification brings a cycle about this often, varied up to `FLAP_CYCLE_MAX_S` (`flap_cycle_s`).
FLAP_CYCLE_S = 1.0
FLAP_CYCLE_MAX_S = 1.5 * FLAP_CYCLE_S


@dataclass(frozen=True, slots=True)
class WatchRow:
    """How one reading is watched between cycles: the wake-up's cause; the fastest its figure is assumed to move (0:
    no margin judged, a look every `min_period_s`), on cgroup v1 `v1_rate_per_s` (None: the same); the shortest
    period between looks; the longest at a steady margin (`steady_cap_s`; None: a steady margin keeps the pace); and
    whether it is a count `look` judges (`counted`: the sensors' `COUNT_READERS` read it)."""

    cause: Wake
    rate_per_s: float
    min_period_s: float
    v1_rate_per_s: float | None = None
    steady_cap_s: float | None = None
    counted: bool = False

    def rate(self, v1: bool) -> float:
        """The fastest move assumed on cgroup v1 (`v1`) or v2."""
        return self.v1_rate_per_s if v1 and self.v1_rate_per_s is not None else self.rate_per_s


# A cycle is stale this many intervals on (an outage, not a restart), never before `MIN_STALE_AFTER_S` (one slow one).
STALE_AFTER_INTERVALS = 3
MIN_STALE_AFTER_S = 30.0


def flap_cycle_s(count: int) -> float:
    """The `count`-th flapping cycle's delay after the last start, spread over [0.5, 1.5) `FLAP_CYCLE_S` (never in
    step with a periodic tenant)."""
    return FLAP_CYCLE_S * (0.5 + spread(count))


def stale_after_s(housekeeping_interval_s: float) -> float:
    """How long after the loop's last cycle that cycle is stale."""
    return max(STALE_AFTER_INTERVALS * housekeeping_interval_s, MIN_STALE_AFTER_S)


@dataclass(frozen=True, slots=True)
class Target:
    """One threshold a watch looks at: met once ``capacity - used < met_below`` (whole units of `reading`)."""

    reading: Reading
    capacity: int
    met_below: int
    description: str

    def margin(self, used: int) -> int:
        """How much more can be used before the threshold is met (<= 0: met)."""
        return self.capacity - used - self.met_below + 1


def _target(threshold: Threshold, observed: Observation) -> tuple[Target, bool] | None:
    """`threshold`'s target on the cycle's `observed` figure and whether it is met there (None: not a `<` one)."""
    if threshold.operator is not Operator.LESS_THAN:
        return None
    met_below = threshold_quantity(threshold.value, observed.capacity).ceil_int()  # available < ceil(quantity)
    kind = "hard" if threshold.is_hard else "soft"
    return (Target(spec_of(threshold.signal).reading, observed.capacity.ceil_int(), met_below,
                   f"{kind} {threshold.signal} threshold"), observed.available.ceil_int() < met_below)


def watch_targets(thresholds: Sequence[Threshold], signal: Signal, observed: Observation | None
                  ) -> tuple[Target, ...]:
    """The `signal` thresholds not met in `observed` (None: none), none while a hard one is met."""
    judged = [(t, *j) for t in thresholds if observed and t.signal is signal and (j := _target(t, observed))]
    if any(met and threshold.is_hard for threshold, _, met in judged):
        return ()
    return tuple(target for _, target, met in judged if not met)


def used_seen(observed: Observation) -> int:
    """Capacity less available."""
    return observed.capacity.ceil_int() - observed.available.ceil_int()


@dataclass(frozen=True, slots=True)
class Look:
    """What one look found: the target met (None: none), the time to the next look (None: idle); a memory look also
    the histories to hand to the next and whether the held targets were released."""

    met: Target | None
    period_s: float | None
    histories: Mapping[Target, LookHistory] = field(default_factory=dict)
    released: bool = False


@dataclass(frozen=True, slots=True)
class CycleSeen:
    """What the schedule and the sensors need of a finished cycle (`of`; `cycle_failed`: no report)."""

    started_at: float
    memory_met: frozenset[Threshold] = frozenset()
    held: bool = False
    crossing_unconfirmed: bool = False
    crossing_unaccounted: bool = False
    near_crossing: bool = True
    unmet_near: bool = True
    grace_ends_in_s: float | None = None
    stall_unmet: bool = False
    awaiting_growth: bool = False
    acted: bool = False
    cycle_failed: bool = False
    arm: Arming | None = None

    @classmethod
    def of(cls, started_at: float, thresholds: Sequence[Threshold], assessment: Assessment, *,
           crossing_unconfirmed: bool, eviction_failed: bool, acted: bool, summary: Summary | None = None,
           withheld: str | None = None, crossing_unaccounted: bool = False) -> CycleSeen:
        """The one place a cycle's report becomes what the schedule and the sensors see."""
        met = tuple(status.threshold for status in assessment.thresholds)
        # Held: a threshold it could act on (a soft one still in its grace period decided nothing yet, so a stall's
        # wake-up meanwhile is news), its stats fresh, no eviction failed.
        acting = any(status.grace_met for status in assessment.thresholds)
        return cls(started_at, frozenset(t for t in met if spec_of(t.signal).is_memory),
                   held=bool(acting and not assessment.stale_signals and not eviction_failed),
                   crossing_unconfirmed=crossing_unconfirmed, crossing_unaccounted=crossing_unaccounted,
                   near_crossing=near_crossing(thresholds, assessment.observations),
                   unmet_near=near_unmet_crossing(thresholds, assessment.observations),
                   grace_ends_in_s=assessment.next_decision_in_s(),
                   stall_unmet=window_follow_up_wanted(thresholds, met),
                   awaiting_growth=withheld == NO_STALL_CANDIDATE, acted=acted,
                   arm=arming(started_at, thresholds, summary, assessment.observations))


@dataclass(frozen=True, slots=True)
class Plan:
    """What the loop does next: arm the sensors as `arm` says (None: as they are), run the cycle at `due_at` (None:
    at once), and listen to the notifiers meanwhile or not (flapping, the cycle due within `FLAP_CYCLE_MAX_S`)."""

    due_at: float | None
    listening: bool = True
    arm: Arming | None = field(default=None, compare=False)  # plans that schedule alike are alike

    def wait_s(self, now: float) -> float | None:
        """How long to wait at `now` (0: poll once); None: run the cycle at once."""
        return None if self.due_at is None else max(0.0, self.due_at - now)


@dataclass(frozen=True, slots=True)
class WakeState:
    """The schedule between two cycles: the follow-up delays to come, when memory went back by itself within
    `FLAP_WINDOW_S` (`changes`; `lag_changes`: those only the statistics' lag made), the last cycle's facts, and what
    ended the last wait (`woken`)."""

    interval_s: float
    due_at: float | None = None
    follow_ups: tuple[float, ...] = ()
    held: bool = False
    changes: tuple[float, ...] = ()
    lag_changes: tuple[float, ...] = ()
    last_started_at: float | None = None
    flapping: bool = False
    lagging: bool = False  # flapping since the statistics' lag made it, and memory has not flapped without it since
    flap_cycles: int = 0
    memory_met: frozenset[Threshold] = frozenset()
    acted: bool = False
    woken: frozenset[str] = field(default_factory=frozenset)

    @property
    def plan(self) -> Plan:
        listening = (not self.flapping or self.lagging or self.last_started_at is None or self.due_at is None
                     or self.due_at > self.last_started_at + FLAP_CYCLE_MAX_S)
        return Plan(self.due_at, listening)


def after_cycle(state: WakeState, seen: CycleSeen, now: float) -> tuple[WakeState, Plan]:
    """The cycle `seen` ended at `now`: the plan arms the sensors as it left them to watch (a failed cycle: as they
    are, its memory facts kept)."""
    failed, started_at = seen.cycle_failed, seen.started_at
    seen = CycleSeen(started_at) if failed else seen
    newly_met = bool(seen.memory_met - state.memory_met)
    receded = not failed and bool(state.memory_met - seen.memory_met) and not state.acted
    changes = tuple(t for t in state.changes if now - t < FLAP_WINDOW_S)
    lag_changes = tuple(t for t in state.lag_changes if now - t < FLAP_WINDOW_S)
    if receded or seen.crossing_unconfirmed:
        changes = (*changes, now)
        if seen.crossing_unconfirmed and seen.crossing_unaccounted and not receded:
            lag_changes = (*lag_changes, now)
    # Once flapping, until a window passes with no change: read once a second, a flapping tenant shows fewer.
    flapping = len(changes) >= FLAP_CHANGES or (state.flapping and bool(changes))
    lagging = flapping and (state.lagging or not state.flapping) and len(changes) - len(lag_changes) < FLAP_CHANGES
    nothing_new_near = seen.held and not newly_met and not seen.unmet_near
    if seen.crossing_unconfirmed or not seen.near_crossing or flapping:
        follow_ups: tuple[float, ...] = ()
    else:
        follow_ups = state.follow_ups[-1:] if newly_met or nothing_new_near else state.follow_ups
    due_at = started_at + state.interval_s
    if seen.grace_ends_in_s is not None:
        due_at = min(due_at, now + seen.grace_ends_in_s + GRACE_END_MARGIN_S)
    if Wake.PSI in state.woken and seen.stall_unmet:
        due_at = min(due_at, started_at + WINDOW_FOLLOW_UP_S)
    if seen.awaiting_growth:  # a stall met, no pod grown yet: growth is measured from this cycle's reading on
        due_at = min(due_at, started_at + SNAPSHOT_SPACING_S)
    if follow_ups:
        due_at = min(due_at, now + follow_ups[0])
        follow_ups = follow_ups[1:]
    new = replace(state, due_at=due_at, follow_ups=follow_ups, held=seen.held, changes=changes,
                  lag_changes=lag_changes, last_started_at=started_at, flapping=flapping, lagging=lagging,
                  woken=frozenset())
    if not failed:
        new = replace(new, memory_met=seen.memory_met, acted=seen.acted)
    arm = seen.arm if seen.arm is None or not new.lagging else replace(seen.arm, accounted=True)
    return new, replace(new.plan, arm=arm)


def sensed(state: WakeState, causes: Iterable[str]) -> tuple[WakeState, Plan]:
    """A wait ended with `causes` (`Wake` values; none: the timer): a wake-up that earns a cycle makes it due (a
    notification restarts the follow-ups, the end of the wait for evicted pods leaves the confirming one); one that
    does not keeps the deadline."""
    woken = frozenset(wakes(causes))
    new = replace(_woken(state, woken), woken=woken)
    return new, new.plan


def _woken(state: WakeState, causes: frozenset[str]) -> WakeState:
    if Wake.EVICTION in causes:
        return replace(state, due_at=None, follow_ups=state.follow_ups[-1:])
    if causes <= (HELD_NO_CYCLE if state.held else NO_CYCLE):
        return state
    # Lagging, the memory watch looks at the figures the statistics account for: its crossing is not their lag.
    throttled = causes <= NOTIFICATIONS | NO_CYCLE and not (state.lagging and Wake.MEMORY_WATCH in causes)
    if throttled and state.flapping and state.last_started_at is not None:
        due_at = state.last_started_at + flap_cycle_s(state.flap_cycles)
        return replace(state, due_at=due_at if state.due_at is None else min(state.due_at, due_at), follow_ups=(),
                       flap_cycles=state.flap_cycles + 1)
    follow_ups = NOTIFICATION_FOLLOW_UPS_S if NOTIFICATIONS & causes else state.follow_ups
    return replace(state, due_at=None, follow_ups=follow_ups)


def wakes(causes: Iterable[str]) -> tuple[Wake, ...]:
    """`causes` as `Wake` values, the timer when none."""
    return tuple(Wake(cause) for cause in causes) or (Wake.TIMER,)


# The memory watch (v2's only one without PSI; v1's backstop): each unmet memory threshold a `Target`.
# The fastest fill assumed: a process writing fresh pages on one core fills 1-2 GiB/s.
ASSUMED_FILL_BYTES_PER_S = 1 << 30
# On v1, the backstop of levels the kernel may announce late: a 4 GiB/s fill is still read within MIN_PERIOD_S.
V1_BACKSTOP_FILL_BYTES_PER_S = 4 << 30
# Never look more often than this: 50 looks a second at most, each a few small cgroupfs reads.
MIN_PERIOD_S = 0.02
# A margin that shrank by no more than this since the last look is steady (per-CPU charge batches are 256 KiB).
STEADY_TOLERANCE_BYTES = 1 << 20
# At a steady margin, a look at least this often: a burst from it is read at most this late (the v1 cap, v2's max).
STEADY_MAX_PERIOD_S = 0.25
# On v2 the looks at a steady margin may spend this share of a CPU (0.75 CPU s a minute: `steady_max_period_s`).
LOOK_CPU_SHARE = 0.75 / 60
# While a hard memory threshold is met, the only look: whether it still is, twice a second.
HELD_PERIOD_S = 0.5


def watch_plan(thresholds: Sequence[Threshold], summary: Summary) -> tuple[tuple[Target, ...], tuple[Target, ...]]:
    """The memory watch's targets after a cycle that read `summary`, and those held: the memory thresholds not met;
    with a hard one met, the held ones (looked at every `HELD_PERIOD_S` until released) first."""
    observations = signal_observations(summary)
    targets: list[Target] = []
    held: list[Target] = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if not spec_of(threshold.signal).memcg_watched or observed is None or not (j := _target(threshold, observed)):
            continue
        target, met = j
        if not met or threshold.is_hard:  # a soft one met is decided by this cycle, not a crossing to catch
            (held if met else targets).append(target)
    return (*held, *targets), tuple(held)


@dataclass(frozen=True, slots=True)
class LookHistory:
    """What the looks at one target saw: the margin its steady run is measured from, since when, and if it is steady."""

    reference_bytes: int
    since_s: float
    steady: bool


def steady_max_period_s(look_cpu_s: float | None) -> float:
    """v2's steady cap for looks of `look_cpu_s` each (None: not measured): `LOOK_CPU_SHARE` of a CPU, within
    `MIN_PERIOD_S` and `STEADY_MAX_PERIOD_S`."""
    if look_cpu_s is None:
        return STEADY_MAX_PERIOD_S
    return min(max(look_cpu_s / LOOK_CPU_SHARE, MIN_PERIOD_S), STEADY_MAX_PERIOD_S)


def look_history(previous: LookHistory | None, margin_bytes: int, now: float, *,
                 steady_max_s: float = STEADY_MAX_PERIOD_S) -> LookHistory:
    """The history after a look found `margin_bytes`: steady once it stayed within `STEADY_TOLERANCE_BYTES` of the
    run's reference for `steady_max_s`; shrinking by more starts a new run."""
    if previous is None or previous.reference_bytes - margin_bytes > STEADY_TOLERANCE_BYTES:
        return LookHistory(margin_bytes, now, False)
    reference = max(previous.reference_bytes, margin_bytes)
    return LookHistory(reference, previous.since_s, now - previous.since_s >= steady_max_s)


def look_period_s(row: WatchRow, margin: int, until_tick_s: float, *, steady: bool = False, v1: bool = False,
                  steady_max_s: float | None = None) -> float | None:
    """The next look's delay with `margin` left: margin / the row's rate (on cgroup v1 if `v1`), at least the row's
    minimum; at a `steady` margin up to margin / floor rate, capped at `steady_max_s` (None: the row's cap); None: no
    look before the tick `until_tick_s` away (far, met, or no rate)."""
    rate = row.rate(v1)
    if margin <= 0 or not rate:
        return None
    period = max(margin / rate, row.min_period_s)
    cap_s = row.steady_cap_s if steady_max_s is None else steady_max_s
    if steady and cap_s is not None:
        period = max(period, min(margin / (STEADY_TOLERANCE_BYTES / cap_s), cap_s))
    return period if period < until_tick_s else None


def look(targets: Sequence[Target], figures: Mapping[Reading, int], now: float, until_tick_s: float, *,
         histories: Mapping[Target, LookHistory] | None = None, held: Sequence[Target] = (), v1: bool = False,
         steady_max_s: float | None = None) -> Look:
    """Judge a look that read `figures` (one missing: unreadable, skipped), each target paced by its reading's
    `WATCHES` row (its cgroup v1 rate if `v1`); only targets of a row with a steady cap keep a history, steady over
    `steady_max_s` (None: the row's cap). While one of `held` is met or unreadable nothing else is judged; once none
    is, the look is `released`."""
    if held:
        for target in held:
            figure = figures.get(target.reading)
            if figure is None or target.margin(figure) <= 0:
                return Look(None, HELD_PERIOD_S if until_tick_s > HELD_PERIOD_S else None)
        return replace(look(targets, figures, now, until_tick_s, histories=histories, v1=v1,
                            steady_max_s=steady_max_s), released=True)
    kept = {target: history for target, history in (histories or {}).items() if target in targets}
    period: float | None = None
    for target in targets:
        figure = figures.get(target.reading)
        if figure is None:
            continue
        margin, row = target.margin(figure), WATCHES[target.reading]
        if margin <= 0:
            return Look(target, None, kept)
        steady = False
        if row.steady_cap_s is not None:
            cap_s = row.steady_cap_s if steady_max_s is None else steady_max_s
            history = kept[target] = look_history(kept.get(target), margin, now, steady_max_s=cap_s)
            steady = history.steady
        next_look = look_period_s(row, margin, until_tick_s, steady=steady, v1=v1, steady_max_s=steady_max_s)
        if next_look is not None:
            period = next_look if period is None else min(period, next_look)
    return Look(None, period, kept)


_REFAULT_CAPACITY = Quantity.from_int(STALL_BASIS_POINTS, QuantityFormat.DECIMAL_SI)


@dataclass(frozen=True, slots=True)
class WatchedRefault:
    """What the refault watch keeps between looks: its readings of the last window, the global scan count's trend,
    and when it last woke the loop (None: not yet)."""

    samples: tuple[RefaultSample, ...] = ()
    global_scan: CounterTrend | None = None
    woke_at: float | None = None


def watched_shares(thresholds: Sequence[Threshold], observed: Observation | None,
                   signal: Signal = Signal.MEMORY_REFAULT) -> tuple[int, ...]:
    """The shares (basis points refaulted within the window) at which each threshold on the refault `signal` not met
    in `observed` (None: no figure) is met, lowest first; () while a hard one is met."""
    seen = Observation(_REFAULT_CAPACITY if observed is None else observed.available, _REFAULT_CAPACITY, None)
    # A target's margin with nothing refaulted: the share at which it is met.
    return tuple(sorted(target.margin(0) for target in watch_targets(thresholds, signal, seen)))


@dataclass(frozen=True, slots=True)
class RefaultWindow:
    """How a refault reading's figure is taken: over `window_s` with at least `min_span_s` of readings, of at least
    `min_memory_bytes`, a base older than `stale_s` giving way to a fresher one (None: never); its watch wakes the
    loop again only `rewake_after_s` after the last time, and once at `baseline_share` of the share (None: not) so
    that the cycle it wakes at the share has a reading a window back."""

    window_s: float
    min_span_s: float
    min_memory_bytes: int = 0
    rewake_after_s: float = 0.0
    stale_s: float | None = None
    baseline_share: float | None = None


REFAULT_WINDOWS: Mapping[Reading, RefaultWindow] = MappingProxyType({
    Reading.NODE_MEMORY_REFAULT: RefaultWindow(REFAULT_WINDOW_S, REFAULT_MIN_SPAN_S),
    # A window on: the cycle a wake-up brought averages its gap since the cycle before, a window on it does not.
    Reading.DAEMONS_MEMORY_REFAULT: RefaultWindow(DAEMON_REFAULT_WINDOW_S, DAEMON_REFAULT_MIN_SPAN_S,
                                                  DAEMON_MIN_MEMORY_BYTES, DAEMON_REFAULT_MIN_SPAN_S,
                                                  DAEMON_REFAULT_STALE_S, DAEMONS_BASELINE_SHARE),
})


def refault_look(reading: Reading, last: WatchedRefault, refault_bytes: int | None, memory_bytes: int | None,
                 global_scan_pages: int | None, now: float, shares: Sequence[int], *,
                 gated: bool, low_events: int | None = None, reclaimed_bytes: int | None = None,
                 uncovered_bytes: int | None = None) -> tuple[WatchedRefault, bool]:
    """The watch of `reading` after a look at `now` read `refault_bytes` and `global_scan_pages` (None: not read),
    and the daemons' `low_events`, `reclaimed_bytes` and `uncovered_bytes` (`RefaultSample`), and whether to wake
    the loop: the figure
    over its window (of `memory_bytes`) at or over the lowest share and, when `gated`, global reclaim within the stall
    gate's window; not too soon after its last wake-up."""
    window = REFAULT_WINDOWS[reading]
    sample = None if refault_bytes is None else RefaultSample(now, refault_bytes, low_events=low_events,
                                                              reclaimed_bytes=reclaimed_bytes,
                                                              uncovered_bytes=uncovered_bytes)
    watched = WatchedRefault(next_samples(last.samples, sample, now, window_s=window.window_s),
                             next_trend(last.global_scan, global_scan_pages, now), last.woke_at)
    if not shares or sample is None:
        return watched, False
    memory = None if memory_bytes is None else max(memory_bytes, window.min_memory_bytes)
    figure = refault_figure(watched.samples, memory, window_s=window.window_s, min_span_s=window.min_span_s,
                            stale_s=window.stale_s)
    least = shares[0] if window.baseline_share is None else shares[0] * window.baseline_share
    if figure is None or figure.refaulted_basis_points < least:
        return watched, False
    trend = watched.global_scan
    if gated and (trend is None or trend.increased_at is None or now - trend.increased_at > STALL_RECLAIM_WINDOW_S):
        return watched, False
    # A baseline wake-up (under the share) comes at most once a stale span: its cycle's reading is fresh that long.
    met = figure.refaulted_basis_points >= shares[0]
    rewake_s = window.rewake_after_s if met or window.stale_s is None else window.stale_s
    if last.woke_at is not None and now - last.woke_at < rewake_s:
        return watched, False
    return replace(watched, woke_at=now), True


# One row per reading a watch looks at between cycles (PSI and the memcg levels: the kernel announces them, no row).
WATCHES: Mapping[Reading, WatchRow] = MappingProxyType({
    Reading.NODE_MEMORY: WatchRow(Wake.MEMORY_WATCH, ASSUMED_FILL_BYTES_PER_S, MIN_PERIOD_S,
                                  v1_rate_per_s=V1_BACKSTOP_FILL_BYTES_PER_S, steady_cap_s=STEADY_MAX_PERIOD_S),
    Reading.PODS_MEMORY: WatchRow(Wake.MEMORY_WATCH, ASSUMED_FILL_BYTES_PER_S, MIN_PERIOD_S,
                                  v1_rate_per_s=V1_BACKSTOP_FILL_BYTES_PER_S, steady_cap_s=STEADY_MAX_PERIOD_S),
    # A C fork loop starts ~10,000 tasks a second; 10 reads of /proc/loadavg a second at most.
    Reading.PIDS: WatchRow(Wake.PID_WATCH, 10_000, 0.1, counted=True),
    # No kernel notification: /proc/vmstat read every second while a refault threshold is unmet.
    Reading.NODE_MEMORY_REFAULT: WatchRow(Wake.REFAULT_WATCH, 0, 1.0),
    # system.slice read a quarter of a window apart: a window's re-reads wake the loop within it.
    Reading.DAEMONS_MEMORY_REFAULT: WatchRow(Wake.DAEMONS_REFAULT_WATCH, 0, DAEMON_REFAULT_WINDOW_S / 4),
})


@dataclass(frozen=True, slots=True)
class Arming:
    """What a cycle that began at `at` leaves the sensors to watch (`arming`): the memory targets and those held, each
    refault reading's shares (the node's of `memory_bytes`), each counted reading's targets and count, each memcg
    threshold's figures (None: no Summary, the levels stay; a threshold absent: nothing to watch), and whether the
    memory watch reads the working sets the statistics account for (`accounted`, while `WakeState.lagging`)."""

    at: float
    memory: tuple[Target, ...] = ()
    held: tuple[Target, ...] = ()
    shares: Mapping[Reading, tuple[int, ...]] = field(default_factory=dict)
    memory_bytes: int | None = None
    counts: Mapping[Reading, tuple[tuple[Target, ...], int]] = field(default_factory=dict)
    memcg: Mapping[Threshold, MemoryFigures | SampleError] | None = None
    accounted: bool = False


def arming(at: float, thresholds: Sequence[Threshold], summary: Summary | None,
           observations: Mapping[Signal, Observation]) -> Arming:
    """What a cycle that read `summary` (None: nothing) leaves the sensors to watch; an allocatable threshold on a
    node without a pods container has no level, and that is not a failure."""
    if summary is None:
        return Arming(at)
    memory, held = watch_plan(thresholds, summary)
    counts = {}
    for reading, row in WATCHES.items():
        signal = next((s for s in observations if spec_of(s).reading is reading), None)
        if row.counted and signal is not None:
            counts[reading] = (watch_targets(thresholds, signal, observations[signal]), used_seen(observations[signal]))
    levels: dict[Threshold, MemoryFigures | SampleError] = {}
    pods = SYSTEM_CONTAINER_PODS in summary.node.system_containers
    for threshold in thresholds:
        spec = spec_of(threshold.signal)
        if spec.memcg_watched and (pods or spec.reading is not Reading.PODS_MEMORY):
            try:
                levels[threshold] = memory_stats_for(threshold, summary)
            except SampleError as exc:
                levels[threshold] = exc
    shares = {spec_of(signal).reading: watched_shares(thresholds, observations.get(signal), signal)
              for signal in (Signal.MEMORY_REFAULT, Signal.DAEMONS_REFAULT)}
    return Arming(at, memory, held, shares, memory_capacity_bytes(summary.node.memory), counts, levels)

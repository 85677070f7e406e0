"""evictd's stall gate: a memory stall threshold counts only while the node is short of memory as a whole.

Each cycle decides which stall-family signals (PSI stall, node and daemons refault) may meet their thresholds, from
the reclaim counters in the stats, and keeps the refault readings their rates need. /proc/vmstat ``pgscan_*`` counts
only reclaim that is not a cgroup's own (mm/vmscan.c, ``cgroup_reclaim``): a pod thrashing in its own limit moves
them not. A node signal is **open** only on a real shortage: global scans within `STALL_RECLAIM_WINDOW_S` of at
least `SHORTAGE_SCAN_SHARE` of memory, ``memory.available`` under `SHORTAGE_AVAILABLE_SHARE` of it; a pods-cgroup
signal also when the pods cgroup's ``memory.events.local`` ``max`` grew. After any eviction settled only evidence
read after it counts (`evidence_after`). An unreadable gate figure makes the signal **unknown**, its observation
dropped. Calls: `observe`, `gated_observations`, `split_held_back`, `held_back_reports`.

Invariants: pure (`now` given), inputs never mutated. A counter is compared only with earlier readings of this run:
the first (or one after it went backwards) is a baseline, so the gate opens from the second cycle.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evictd.core.daemon_refault import (
    daemon_memory_bytes,
    daemon_refault_figure,
    daemon_refault_sample,
    daemons_memory,
    next_daemon_samples,
)
from evictd.core.refault import (
    RefaultFigure,
    RefaultSample,
    memory_capacity_bytes,
    next_samples,
    refault_figure,
    refault_observation,
    refault_sample,
)
from evictd.core.signals import EVICTD_SIGNALS, Reading, Signal, spec_of
from evictd.core.summary import STALL_BASIS_POINTS, SYSTEM_CONTAINER_PODS, MemoryStats, Observation, Summary
from evictd.core.thresholds import Threshold

# The EvictdConfiguration key that turns the gate off (docs/configuration.md, "Memory stall thresholds").
STALL_GATE_FIELD = "stallRequiresNodeReclaim"

# The span of the PSI average a stall threshold reads (avg10): reclaim within it says the stall was node-wide.
STALL_RECLAIM_WINDOW_S = 10.0
# Global scans within the window, as a share of the node's memory, that make a shortage: a thrash worth an eviction
# re-reads at least the refault signal's 5 % of memory in 10 s and each page re-read was scanned first; a fifth of
# that is still 160 times a streaming reader's kswapd trickle (32 KiB every 5 s) on a 1 GiB node.
SHORTAGE_SCAN_SHARE = 0.01
# memory.available at or over this share of the node's memory is no shortage however hard reclaim scans: what it
# scans is inactive page cache (a stream's), which memory.available counts as free.
SHORTAGE_AVAILABLE_SHARE = 0.5
# /proc/vmstat counts pages and the Summary carries no page size: 4 KiB (x86-64, most arm64). With 64 KiB pages the
# floor is 16 times stricter (the gate opens later, never sooner).
SCAN_PAGE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class CounterTrend:
    """A cumulative counter as the last cycle read it, when (monotonic s) a cycle last saw it grow (None: no cycle
    has since the baseline), when it was last read, and when the reading before that growth was taken (the growth
    happened after it: `grew_after`)."""

    value: int
    increased_at: float | None = None
    read_at: float | None = None
    grew_after: float | None = None


@dataclass(frozen=True, slots=True)
class ScanSample:
    """One reading of the global scan count (pages since boot) at `read_at` (monotonic s)."""

    read_at: float
    pages: int


@dataclass(frozen=True, slots=True)
class Shortage:
    """The node-wide shortage figures of a cycle: pages scanned within the window (scaled down to it when read over
    longer), the floor they must reach, and memory.available as a share of the node's memory (None: not read)."""

    scanned_pages: int
    floor_pages: int | None
    available_share: float | None

    @property
    def short(self) -> bool:
        """Whether the figures make a shortage: scans at or over the floor, memory.available under its share."""
        return (self.floor_pages is not None and self.available_share is not None
                and self.scanned_pages >= self.floor_pages and self.available_share < SHORTAGE_AVAILABLE_SHARE)


@dataclass(frozen=True, slots=True)
class StallGate:
    """What the gate keeps between cycles: counter trends, the refault readings of the last window, and its last
    verdict (`closed`, `unknown`, the `refault` figure and its observation), which the engine's later calls of that
    cycle apply too."""

    global_scan: CounterTrend | None = None
    pods_limit: CounterTrend | None = None
    closed: frozenset[Signal] = field(default_factory=frozenset)
    unknown: frozenset[Signal] = field(default_factory=frozenset)
    refault_samples: tuple[RefaultSample, ...] = ()
    refault: RefaultFigure | None = None
    refault_observed: Observation | None = None
    scan_samples: tuple[ScanSample, ...] = ()
    shortage: Shortage | None = None
    daemon_samples: tuple[RefaultSample, ...] = ()
    daemons_refault: RefaultFigure | None = None
    daemons_observed: Observation | None = None


@dataclass(frozen=True, slots=True)
class HeldBack:
    """A stall threshold whose share was reached, held back by the gate: the share reached (percent; for refault,
    with `activated_percent` activated), the global scan count read and how long ago a cycle saw it grow (None:
    not since start), and the cycle's shortage figures (None: not made)."""

    threshold: Threshold
    share_percent: float
    global_scan_pages: int | None
    global_reclaim_s_ago: float | None
    activated_percent: float | None = None
    shortage: Shortage | None = None


def next_trend(last: CounterTrend | None, value: int | None, now: float) -> CounterTrend | None:
    """Return the trend of a counter read as `value` at `now` (None: unreadable now, the last trend is kept). A
    value lower than the last is a new baseline (the counter started again) that keeps the last increase."""
    if value is None:
        return last
    if last is None:
        return CounterTrend(value, read_at=now)
    if value > last.value:
        return CounterTrend(value, now, read_at=now, grew_after=last.read_at)
    return CounterTrend(value, last.increased_at, read_at=now, grew_after=last.grew_after)


def evidence_after(evicted_at: float | None, settle_s: float, now: float) -> float | None:
    """Since when evidence counts at `now` (None: any within the window): once the last eviction, of any signal, has
    settled (`settle_s` after `evicted_at`), only what was read after it, so the reclaim and refaults that led to
    that eviction vouch for no second one (the pods' growth counts from the eviction itself: `pod_growth`)."""
    if evicted_at is None or now < evicted_at + settle_s:
        return None  # no eviction, or still settling (the settle rule holds the next stall one back meanwhile)
    return evicted_at + settle_s


def next_scan_samples(samples: Sequence[ScanSample], pages: int | None, now: float) -> tuple[ScanSample, ...]:
    """Return the scan readings to keep after reading `pages` at `now` (None: not read, kept as is): the newest read
    at least `STALL_RECLAIM_WINDOW_S` before `now` and every later one; only the new one when the count went down."""
    if pages is None:
        return tuple(samples)
    sample = ScanSample(now, pages)
    if samples and pages < samples[-1].pages:
        return (sample,)
    kept = (*samples, sample)
    old_enough = [index for index, kept_scan in enumerate(kept) if now - kept_scan.read_at >= STALL_RECLAIM_WINDOW_S]
    return kept[old_enough[-1]:] if old_enough else kept


def scanned_in_window(samples: Sequence[ScanSample], after: float | None) -> int:
    """Pages scanned between the oldest kept reading (read at or after `after`) and the newest, scaled down to the
    window when they span more (never up: a short span must reach the whole floor); 0 with fewer than two."""
    counted = [sample for sample in samples if after is None or sample.read_at >= after]
    if len(counted) < 2:
        return 0
    base, latest = counted[0], counted[-1]
    span_s = latest.read_at - base.read_at
    return int((latest.pages - base.pages) * STALL_RECLAIM_WINDOW_S // max(span_s, STALL_RECLAIM_WINDOW_S))


def shortage_of(memory: MemoryStats | None, samples: Sequence[ScanSample], after: float | None) -> Shortage:
    """The node's shortage figures from its memory block and the kept scan readings (`Shortage`)."""
    capacity = memory_capacity_bytes(memory)
    if memory is None or capacity is None or capacity <= 0 or memory.available_bytes is None:
        return Shortage(scanned_in_window(samples, after), None, None)
    floor = max(1, round(capacity * SHORTAGE_SCAN_SHARE / SCAN_PAGE_BYTES))
    return Shortage(scanned_in_window(samples, after), floor, memory.available_bytes / capacity)


def _recent(trend: CounterTrend | None, now: float, after: float | None) -> bool:
    if trend is None or trend.increased_at is None or now - trend.increased_at > STALL_RECLAIM_WINDOW_S:
        return False
    return after is None or (trend.grew_after is not None and trend.grew_after >= after)


def _reclaim(memory: MemoryStats | None) -> tuple[int | None, int | None]:
    """The (global scan pages, limit events) of a memory block (None: not read)."""
    if memory is None or memory.reclaim is None:
        return None, None
    return memory.reclaim.global_scan_pages, memory.reclaim.limit_events


def observe(last: StallGate, summary: Summary, now: float, *, enabled: bool, after: float | None = None) -> StallGate:
    """Return the gate after the cycle at `now` read `summary`: the trends updated, and (when `enabled`) which stall
    signals are closed or unknown this cycle; `after` (`evidence_after`): scans, limit events and refaults count only
    when read entirely after it. Disabled, nothing is closed or unknown."""
    memory = summary.node.memory
    global_scan, _ = _reclaim(memory)
    pods = summary.node.system_containers.get(SYSTEM_CONTAINER_PODS)
    _, limit_events = _reclaim(pods.memory if pods is not None else None)
    global_trend = next_trend(last.global_scan, global_scan, now)
    pods_trend = next_trend(last.pods_limit, limit_events, now)
    scans = next_scan_samples(last.scan_samples, global_scan, now)
    sample = refault_sample(memory, now)
    samples = next_samples(last.refault_samples, sample, now)
    # Refaults read before `after` (before the last eviction settled) are no evidence either.
    counted = samples if after is None else tuple(kept for kept in samples if kept.read_at >= after)
    refault = None if sample is None else refault_figure(counted, memory_capacity_bytes(memory))
    observed = None if refault is None or memory is None else refault_observation(refault, memory.time)
    daemons = daemons_memory(summary.node)
    daemon_sample = daemon_refault_sample(daemons, now)
    daemon_samples = next_daemon_samples(last.daemon_samples, daemon_sample, now)
    daemon_counted = tuple(kept for kept in daemon_samples if after is None or kept.read_at >= after)
    daemon_figure = None if daemon_sample is None else daemon_refault_figure(daemon_counted,
                                                                             daemon_memory_bytes(daemons))
    daemon_observed = None if daemon_figure is None or daemons is None else refault_observation(daemon_figure,
                                                                                                daemons.time)
    if not enabled:
        return StallGate(global_trend, pods_trend, refault_samples=samples, refault=refault, refault_observed=observed,
                         scan_samples=scans, daemon_samples=daemon_samples, daemons_refault=daemon_figure,
                         daemons_observed=daemon_observed)
    shortage = shortage_of(memory, scans, after)
    global_open = global_scan is not None and _recent(global_trend, now, after) and shortage.short
    pods_open = limit_events is not None and _recent(pods_trend, now, after)
    closed: set[Signal] = set()
    unknown: set[Signal] = set()
    for signal in EVICTD_SIGNALS:
        if spec_of(signal).reading is Reading.PODS_MEMORY_STALL and pods_open:
            continue
        if global_scan is None:
            unknown.add(signal)
        elif not global_open:
            closed.add(signal)
    return StallGate(global_trend, pods_trend, frozenset(closed), frozenset(unknown), samples, refault, observed,
                     scans, shortage, daemon_samples, daemon_figure, daemon_observed)


def gated_observations(observations: Mapping[Signal, Observation], gate: StallGate) -> dict[Signal, Observation]:
    """Return `observations` (a Summary's, `signal_observations`) with the refault signals' of the gate's cycle (rates:
    no single Summary has them), without those of the stall signals whose gate figures could not be read."""
    observed = dict(observations)
    if gate.refault_observed is not None:
        observed[Signal.MEMORY_REFAULT] = gate.refault_observed
    if gate.daemons_observed is not None:
        observed[Signal.DAEMONS_REFAULT] = gate.daemons_observed
    return {signal: observation for signal, observation in observed.items() if signal not in gate.unknown}


def split_held_back(thresholds: Sequence[Threshold], gate: StallGate) -> tuple[list[Threshold], list[Threshold]]:
    """Return (`thresholds` that count, those the gate holds back: on a closed stall signal), each in order."""
    counted = [threshold for threshold in thresholds if threshold.signal not in gate.closed]
    return counted, [threshold for threshold in thresholds if threshold.signal in gate.closed]


def held_back_reports(held: Sequence[Threshold], observations: Mapping[Signal, Observation], gate: StallGate,
                      now: float) -> tuple[HeldBack, ...]:
    """Describe the thresholds `held` back at `now` with their signal's share stalled and the global reclaim."""
    trend = gate.global_scan
    ago = None if trend is None or trend.increased_at is None else now - trend.increased_at
    reports = []
    for threshold in held:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        headroom = observed.available.ceil_int()
        activated = gate.refault.activated_percent \
            if threshold.signal is Signal.MEMORY_REFAULT and gate.refault is not None else None
        reports.append(HeldBack(threshold, share_percent=(STALL_BASIS_POINTS - headroom) / 100,
                                global_scan_pages=None if trend is None else trend.value, global_reclaim_s_ago=ago,
                                activated_percent=activated, shortage=gate.shortage))
    return tuple(reports)


def wake_may_open(gate: StallGate, global_scan_pages: int | None, pods_limit_events: int | None) -> bool:
    """Whether a PSI wake-up, with the counters read now, may change a stall decision: False only while the last
    cycle held stall signals back and neither counter grew since; True when a counter cannot be read. (A pod
    thrashing in its own limit fires PSI every window: each would run a cycle for nothing.)"""
    if not gate.closed:
        return True
    return (_grew(gate.global_scan, global_scan_pages)
            or (gate.pods_limit is not None and _grew(gate.pods_limit, pods_limit_events)))


def _grew(trend: CounterTrend | None, value: int | None) -> bool:
    """Whether `value`, read now, differs from the trend's last reading (True when either is unknown)."""
    return trend is None or value is None or value != trend.value

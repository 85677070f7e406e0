"""Which pods a stall-family eviction may take: those that grew within the window, those stalling themselves first.

A stall or refault threshold says the node thrashes, not who made it: ranked as memory.available ranks, a bystander
that sat still above its request went before the pod that grew (issue 61). So a stall-family eviction takes only a
**candidate**: a pod whose memory grew by at least `POD_GROWTH_MIN_BYTES` within `STALL_RECLAIM_WINDOW_S` (working
set, and usage and anonymous memory where both readings have them: growth that is page cache, a stream pushing the
daemons' files out, is answered by reclaim, not eviction). Where some of them show their own ``memory.pressure``
`some` of at least `POD_STALL_MIN_PERCENT` (its avg10, or its stalled time since the same reading), only those;
where none does, every pod that grew: a leak that kswapd keeps fed stalls the daemons it evicts from the page
cache, not itself (the arena's thrash cell, docs/node-survival.md). Growth is measured from the oldest reading kept
that was read at or after `after` (the last eviction's cycle: growth before an eviction is no evidence after it).

Invariants: pure (`now` given), inputs never mutated; a pod first seen in the newest reading has no growth.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from evictd.core.stall_gate import STALL_RECLAIM_WINDOW_S
from evictd.core.summary import PodStats, Summary

# Growth that counts: more than the charge batches (64 pages a CPU, 8 MiB at 32 CPUs) by which a cgroup pinned at
# its limit overshoots, so a pod thrashing in its own limit has not grown; a leak of 1 MiB/s clears it within 10 s.
POD_GROWTH_MIN_BYTES = 8 << 20
# Readings kept closer together than this are thinned to one (the later): cycles come 20-40 times in 4 s while a
# threshold is near, and a thousand pods' figures a reading would pile up; growth needs no finer a grain.
SNAPSHOT_SPACING_S = 1.0
# A pod's own `some` share (the larger of avg10, evictd's window and its stalled time since the growth's base reading)
# under this took no part in the shortage: one direct-reclaim pass stalls milliseconds, 1 % is 100 ms of the 10 s.
POD_STALL_MIN_PERCENT = 1.0

# A pod's memory as read: (usage bytes or None, working set bytes, `some` stalled microseconds or None, anonymous
# bytes or None).
PodFigures = tuple[int | None, int, int | None, int | None]


@dataclass(frozen=True, slots=True)
class PodMemorySnapshot:
    """The pods' memory figures (by UID) one cycle read at `read_at` (monotonic s)."""

    read_at: float
    figures: Mapping[str, PodFigures]


def pod_figures(summary: Summary) -> dict[str, PodFigures]:
    """The memory figures of each pod of `summary` that has a working set, by UID."""
    figures: dict[str, PodFigures] = {}
    for stats in summary.pods:
        memory = stats.memory
        if memory is not None and memory.working_set_bytes is not None and stats.pod_ref.uid:
            figures[stats.pod_ref.uid] = (memory.usage_bytes, memory.working_set_bytes,
                                          None if memory.psi is None else memory.psi.some.total, memory.rss_bytes)
    return figures


def next_snapshots(snapshots: Sequence[PodMemorySnapshot], summary: Summary,
                   now: float) -> tuple[PodMemorySnapshot, ...]:
    """Return the snapshots to keep after reading `summary` at `now`: the newest read at least `STALL_RECLAIM_WINDOW_S`
    before `now` and every later one, then this cycle's; the one before this cycle's goes when it was read within
    `SNAPSHOT_SPACING_S` of the one before it (at most about one a second is kept)."""
    kept = (*snapshots, PodMemorySnapshot(now, MappingProxyType(pod_figures(summary))))
    if len(kept) >= 3 and kept[-2].read_at - kept[-3].read_at < SNAPSHOT_SPACING_S:
        kept = (*kept[:-2], kept[-1])
    old_enough = [index for index, snapshot in enumerate(kept) if now - snapshot.read_at >= STALL_RECLAIM_WINDOW_S]
    return kept[old_enough[-1]:] if old_enough else kept


def grew(before: PodFigures, now: PodFigures) -> bool:
    """Whether a pod's memory grew by `POD_GROWTH_MIN_BYTES` from `before` to `now`: its working set, its usage where
    both readings have one (a pod pinned at its limit does not grow in usage), and its anonymous memory where both
    have it (growth that is page cache is not the pod's to pay for)."""
    (usage_before, working_set_before, _, anon_before), (usage_now, working_set_now, _, anon_now) = before, now
    if working_set_now - working_set_before < POD_GROWTH_MIN_BYTES:
        return False
    if anon_before is not None and anon_now is not None and anon_now - anon_before < POD_GROWTH_MIN_BYTES:
        return False
    return usage_before is None or usage_now is None or usage_now - usage_before >= POD_GROWTH_MIN_BYTES


def under_pressure(stats: PodStats, stalled_before_us: int | None = None, span_s: float = 0.0) -> bool:
    """Whether a pod shows memory pressure itself: `some` at or over `POD_STALL_MIN_PERCENT`, as avg10, evictd's window,
    or the stalled time since `stalled_before_us` was read `span_s` ago; True where its pressure is not read (cgroup
    v1, no PSI): growth alone decides there."""
    psi = stats.memory.psi if stats.memory is not None else None
    if psi is None:
        return True
    share = max(psi.some.avg10, psi.some.recent or 0.0)
    if stalled_before_us is not None and span_s > 0 and psi.some.total >= stalled_before_us:
        share = max(share, (psi.some.total - stalled_before_us) / (span_s * 10_000))  # us over s, in percent
    return share >= POD_STALL_MIN_PERCENT


def stall_candidates(snapshots: Sequence[PodMemorySnapshot], summary: Summary, after: float | None) -> frozenset[str]:
    """The UIDs of the pods of `summary` (read last, the newest of `snapshots`) a stall-family eviction may take: grown
    since the oldest snapshot read at or after `after` that has them; those under pressure themselves if any is."""
    counted = [snapshot for snapshot in snapshots[:-1] if after is None or snapshot.read_at >= after]
    if not counted:
        return frozenset()
    now = snapshots[-1].read_at
    grown, stalling = set(), set()
    for stats in summary.pods:
        memory = stats.memory
        uid = stats.pod_ref.uid
        if memory is None or memory.working_set_bytes is None or not uid:
            continue
        base = next((snapshot for snapshot in counted if uid in snapshot.figures), None)
        if base is None:
            continue
        before = base.figures[uid]
        if grew(before, (memory.usage_bytes, memory.working_set_bytes, None, memory.rss_bytes)):
            grown.add(uid)
            if under_pressure(stats, before[2], now - base.read_at):
                stalling.add(uid)
    return frozenset(stalling or grown)

"""Decide memory crossings on settled figures: which crossings a cycle must confirm, and how a reading is settled.

A memory signal is usage less inactive file, read from two files (v1: ``memory.usage_in_bytes`` and
``memory.stat``) that the kernel does not update together. Two rules keep a moment between them from deciding an
eviction (issue #37, item 2):

1. **A reading brackets the statistics with two usage reads** (`settled_usage`): usage, ``memory.stat``, usage,
   and the lower usage is used. Page cache dropped between the reads (a deleted 64 MiB file is uncharged in about
   a millisecond) otherwise leaves the old usage beside the new inactive file: the working set reads up to the
   whole file too high (seen: 32 MiB on this host's 6.18 kernel, 43 MiB in the issue's runs). Whatever moves
   between the reads, the lower usage never makes the working set read higher than it was at one of the two
   moments: page cache written or dropped meanwhile makes it read lower (by what changed in well under a
   millisecond), anonymous memory makes it read as of the first read.
2. **A memory threshold newly met is confirmed before the cycle decides** (`crossings_to_confirm`): the cycle
   that reads a memory threshold met that its state did not hold met (nor in its grace period) waits
   `CROSSING_HOLD_S` and reads the stats again; it decides on that second reading only. A crossing the second
   reading does not show (page cache that came and went, a short dip) decides nothing: no condition, no
   eviction, and the notification's follow-up cycles end. A threshold already held met is not confirmed again
   (the kubelet's next cycle evicts again at once while it stays met). The bound, `CROSSING_HOLD_S` (100 ms):
   longer than the kernel's statistics can stay behind on a read here (6.18 flushes memory.stat on read once more
   than 64 pages per CPU are pending: at most ~1 MiB on 2 CPUs; measured: no settled reading more than 4 MiB off
   in 6,629 at 1 ms beside a 64 MiB write-and-delete loop) and longer than a short dip (an 80 ms dip below a hard
   threshold every 2 s evicts no one); a shallow crossing that holds is decided ~100 ms after it was read.

   A crossing that goes deep is not held that long: the cycle reads again `EARLY_CONFIRM_S` (5 ms) after the
   first reading, then at twice that, four times, ... within the hold (5, 10, 20, 40 and 80 ms, then 100 ms:
   `confirming_reads`), and a threshold met at one of these readings by more than `DEEP_CROSSING_BYTES` (8 MiB, the
   memcg notifier's step) past its quantity is decided on that reading (`crossing_deep`); a threshold no longer
   met at one is unconfirmed at once. Only a crossing still shallow at each waits out the hold. A dip of a few MiB
   is what the hold is for; memory filling at 1-2 GiB a second (a process faulting in fresh pages) is 5-10 MiB
   past the level 5 ms on (10-20 MiB 10 ms on), and waiting 100 ms more for it made evictd slower than earlyoom
   (p50 102 ms against 38 ms, black-box). The first reading comes 5 ms on, not 10 as before 2026-11-26: the wait is
   most of evictd's own share of a crossing's latency (p50 13 of 14 ms beside a writer at 10 ms), and no settled
   reading was more than 4 MiB off when read every millisecond (above): the depth, not the wait, tells a dip from
   a fill. A fill slowed down by a busy machine (8 MiB in 10-80 ms: 100-800 MiB/s) is decided at the first reading
   that finds it deep: with one early reading, 4 of 50 crossings beside a test run waited the whole hold (102-106
   ms, where the kernel had woken evictd at the crossing). While the memory flaps only the first early reading is
   taken before the hold's end (a flapping tenant's crossings are shallow: each reading costs a cycle's reading of
   the node).

   Where the stats source can read the node's memory alone (`evictd.adapters.node_stats.NodeStatsSource`
   .memory_summary: the root's and the pods cgroup's files, a few small reads whatever the number of pods), the
   confirming readings of a crossing of ``memory.available`` or ``allocatableMemory.available`` are those, at the
   same times, and the cycle then reads the node in full once and decides on that reading with the node's memory
   figures of the last confirming one (`with_node_memory`: the figures the confirmation judged; a full reading that
   flickered back below the level does not evict). A confirmation at a thousand pods so costs one full reading,
   not up to six. A stall signal's crossing, read from PSI, is confirmed on full readings as before, and so is any
   crossing while the memory flaps. (Readings every 5 ms instead of doubling, tried on 2026-11-26, decided a
   crossing 3-11 ms sooner at p50 under load, but a tenant flapping at 20 Hz then ran 165-186 cycles a minute
   against 129-168, 1.20-1.40 % of a core against 1.05-1.25: item 3's bound weighed more.)

   While the memory flaps (`evictd.core.wake`: four changes in 10 s) the hold varies between `CROSSING_HOLD_S`
   and twice that (`crossing_hold_s`): a fixed hold never confirms a tenant whose period is twice the hold (each
   confirming reading lands in the half of the period below the level: a tenant crossing a hard threshold 5 times
   a second, above it half of the time, was never evicted), while no hold is ever shorter than a dip that must not
   evict. The holds step by the golden ratio's fraction (a low-discrepancy sequence: deterministic, and spread over
   the range after a few cycles).

3. **Follow-ups only near a crossing** (`near_crossing`): a notification's follow-up cycles are there for a crossing a
   few pages short, so they go on only while a memory threshold not met is within `FOLLOW_UP_MARGIN_BYTES` of
   being met. A notification whose cycle finds every memory threshold further away (a watch judged near the level,
   a stall) earns that one cycle: the memcg notifiers, re-armed from its readings, announce the crossing when it
   comes. (Beside the page-cache churn of issue #37 a drop watch 38 MiB below the level ran a cycle and 22
   follow-ups, 4 times in 6 s.)

The same reading of the memory alone, taken before a cycle's full reading, tells whether a memory threshold is met
(`memory_thresholds_met`, soft or hard): the full reading then does not wait long on the container runtime
(`runtime_wait_s`; docs/kubelet-differences.md).

Invariants: no I/O, no clock (the manager sleeps through its clock adapter); nothing here mutates its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from evictd.core.signals import Operator, Signal, spec_of
from evictd.core.summary import SYSTEM_CONTAINER_PODS, MemoryStats, Observation, Summary, signal_observations
from evictd.core.thresholds import Threshold, threshold_quantity, thresholds_met
from evictd.core.unanswered import OVERDUE_S

# How long after a cycle read a memory threshold newly met it reads the stats again and decides on that reading.
# Above the longest dip that must not evict (80 ms, issue #37) and the kernel's statistics lag on a read here
# (~1 MiB: see the module's description); the price is that much latency on a shallow crossing that holds (a deep
# one is decided `EARLY_CONFIRM_S` on).
CROSSING_HOLD_S = 0.1
# The first confirming reading, this long after the first; a crossing this far past its threshold's quantity there is
# decided on it (the memcg notifier set's re-arming step: a dip of a few MiB stays under it).
EARLY_CONFIRM_S = 0.005
DEEP_CROSSING_BYTES = 8 << 20
# A notification's follow-ups go on while a memory threshold is this close to being met: the step by which the memcg
# notifier set re-arms (`evictd.core.memcg.MEMCG_REARM_STEP_BYTES`); further away its re-armed level announces the
# crossing.
FOLLOW_UP_MARGIN_BYTES = 8 << 20


# The fraction of the golden ratio: successive multiples of it, modulo 1, spread evenly over [0, 1).
_GOLDEN_FRACTION = 0.6180339887498949


def spread(count: int) -> float:
    """The `count`-th (0, 1, ...) of a sequence spread evenly over [0, 1) whatever its length (multiples of the golden
    ratio's fraction): waits varied by it never keep step with a periodic tenant."""
    return (count * _GOLDEN_FRACTION) % 1.0


def crossing_hold_s(base_s: float, *, flapping: bool, count: int) -> float:
    """Return how long the `count`-th confirmation (0, 1, ...) waits: `base_s`, or while the memory flaps, between
    `base_s` and twice that (see rule 2 of the module's description)."""
    if not flapping:
        return base_s
    return base_s * (1.0 + spread(count))


def confirming_reads(hold_s: float, *, flapping: bool) -> tuple[float, ...]:
    """Return when the confirming readings of a crossing are taken, in seconds after the reading that found it:
    `EARLY_CONFIRM_S`, doubling while within the hold, and the hold's end (`hold_s`); while the memory flaps, only
    the first of them and the hold's end (see rule 2 of the module's description)."""
    if hold_s <= EARLY_CONFIRM_S:
        return (hold_s,)
    reads = [EARLY_CONFIRM_S]
    while not flapping and reads[-1] * 2 < hold_s:
        reads.append(reads[-1] * 2)
    return (*reads, hold_s)


def with_node_memory(summary: Summary, reading: Summary) -> Summary:
    """Return `summary` (a full reading) with the node-level memory figures of `reading` (a reading of the node's
    memory alone, taken just before it): the node's and the pods cgroup's time,
    available, usage and working set. The cycle then decides on the figures the confirmation judged, with the pods,
    the disks and the pressure of the full reading. A figure `reading` lacks is left as `summary` has it."""
    node = summary.node
    memory = _memory_of(node.memory, reading.node.memory)
    containers = dict(node.system_containers)
    pods = containers.get(SYSTEM_CONTAINER_PODS)
    read_pods = reading.node.system_containers.get(SYSTEM_CONTAINER_PODS)
    if pods is not None and read_pods is not None:
        containers[SYSTEM_CONTAINER_PODS] = replace(pods, memory=_memory_of(pods.memory, read_pods.memory))
    return replace(summary, node=replace(node, memory=memory, system_containers=MappingProxyType(containers)))


def _memory_of(full: MemoryStats | None, read: MemoryStats | None) -> MemoryStats | None:
    if full is None or read is None:
        return full
    return replace(full, time=read.time, available_bytes=read.available_bytes, usage_bytes=read.usage_bytes,
                   working_set_bytes=read.working_set_bytes)


def settled_usage(usage_before_bytes: int, usage_after_bytes: int) -> int:
    """Return the usage to set beside ``memory.stat`` read between `usage_before_bytes` and `usage_after_bytes`:
    the lower of the two (see rule 1 of the module's description)."""
    return min(usage_before_bytes, usage_after_bytes)


def crossings_to_confirm(thresholds: Sequence[Threshold], held: Sequence[Threshold], summary: Summary
                         ) -> tuple[Threshold, ...]:
    """Return the memory thresholds of `thresholds` met in `summary` that are not in `held` (the thresholds the
    engine state holds met or in their grace period): crossings to confirm on a second reading (rule 2)."""
    memory = [t for t in thresholds if spec_of(t.signal).is_memory and t not in held]
    if not memory:
        return ()
    return tuple(thresholds_met(memory, signal_observations(summary), enforce_min_reclaim=False))


def memory_thresholds_met(thresholds: Sequence[Threshold], summary: Summary) -> list[Threshold]:
    """The memory thresholds of `thresholds`, soft or hard, `summary` shows met (no minimum reclaim, no grace period):
    what makes a cycle's full reading urgent, read on the node's memory alone (`EvictionManager`)."""
    memory = [threshold for threshold in thresholds if spec_of(threshold.signal).is_memory]
    return thresholds_met(memory, signal_observations(summary), enforce_min_reclaim=False)


def runtime_wait_s(met: Sequence[Threshold]) -> float | None:
    """How long a cycle's full reading waits for the container runtime's stats, given the memory thresholds the node's
    memory alone showed `met` (`memory_thresholds_met`): `OVERDUE_S` with one met, soft or hard (a memory ranking reads
    the pods' cgroups, the runtime's answer only names the containers in its message; soft too: the hard one may follow
    within milliseconds, during the reading), None (the read's own deadline) with none."""
    return OVERDUE_S if met else None


def crossing_confirmed(crossed: Sequence[Threshold], summary: Summary | None) -> bool:
    """True when the second reading `summary` still has one of `crossed` met (None: it could not be read, which
    confirms nothing: never evict on data that could not be read)."""
    if summary is None or not crossed:
        return False
    return bool(thresholds_met(crossed, signal_observations(summary), enforce_min_reclaim=False))


def crossing_deep(crossed: Sequence[Threshold], summary: Summary | None) -> bool:
    """True when `summary` has one of `crossed` met by more than `DEEP_CROSSING_BYTES` (its available amount that
    much below the threshold's quantity): decided without waiting out the hold (see rule 2)."""
    if summary is None:
        return False
    observations = signal_observations(summary)
    return any((past := _bytes_past(threshold, observations)) is not None and past > DEEP_CROSSING_BYTES
               for threshold in crossed)


def near_crossing(thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]) -> bool:
    """True when a memory threshold of `thresholds` is met in `observations` or within `FOLLOW_UP_MARGIN_BYTES` of
    being met (rule 3); False when every one observed is further away, or none is observed. Only the thresholds on
    bytes of a memory cgroup (`memcg_watched`) count: a stall-family signal is a share that the kernel updates every
    2 s (PSI's averages) or a rate over 10 s, not a crossing a few pages short (its figure in basis points was
    always "near": in the arena's own-limit thrash each PSI firing ran 22 follow-up cycles)."""
    return any(spec_of(threshold.signal).memcg_watched and (past := _bytes_past(threshold, observations)) is not None
               and past > -FOLLOW_UP_MARGIN_BYTES for threshold in thresholds)


def near_unmet_crossing(thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]) -> bool:
    """True when a memory threshold of `thresholds` is not met in `observations` but within
    `FOLLOW_UP_MARGIN_BYTES` of being met: a crossing a notification may still bring (the ones already met are
    decided). Only `memcg_watched` thresholds count, as in `near_crossing`."""
    return any(spec_of(threshold.signal).memcg_watched and (past := _bytes_past(threshold, observations)) is not None
               and -FOLLOW_UP_MARGIN_BYTES < past <= 0 for threshold in thresholds)


def _bytes_past(threshold: Threshold, observations: Mapping[Signal, Observation]) -> int | None:
    """How many bytes the available amount observed is below `threshold`'s quantity (rounded up to a byte): more
    than 0 when met, 0 or less when not; None without an observation, or for a threshold not of the form
    ``available < quantity``."""
    observed = observations.get(threshold.signal)
    if observed is None or threshold.operator is not Operator.LESS_THAN:
        return None
    return threshold_quantity(threshold.value, observed.capacity).ceil_int() - observed.available.ceil_int()

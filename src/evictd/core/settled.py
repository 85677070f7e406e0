"""Decide memory crossings on settled figures: which crossings a cycle confirms, and how a reading is settled.

Memory signals are usage less inactive file, from files the kernel does not update together. Three rules:
1. A reading brackets ``memory.stat`` with two usage reads and keeps the lower usage (`settled_usage`): page cache
   dropped between the reads then never makes the working set read higher than it was at either moment.
2. A memory threshold newly met (not held met nor in grace) is confirmed before the cycle decides
   (`crossings_to_confirm`): readings at `confirming_reads` (5, 10, 20, 40, 80 ms, then the hold's end); one met by
   more than `DEEP_CROSSING_BYTES` is decided there (`crossing_deep`), one no longer met decides nothing. Only
   usage ``memory.stat`` accounts for confirms (`accounted`): a crossing met only by usage its statistics do not
   count yet (page cache written since they were last folded in may be all of it) is read again at `settling_reads`
   (every `SETTLING_READ_EVERY_S` on the node's memory alone) until it is not, or `STATS_CATCH_UP_S` after the first
   reading (`crossing_unsettled`). While the
   memory flaps the hold varies over [hold, 2 x hold) (`crossing_hold_s`) so a periodic tenant cannot dodge it.
   Where the source reads the node's memory alone, confirming reads are those, then one full reading whose node
   memory figures are the last confirming ones (`with_node_memory`).
3. A notification's follow-ups go on only while a memory threshold is near its crossing (`near_crossing`).

Figures: docs/kubelet-differences.md ("settled figures"). No I/O, no clock; inputs are not mutated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from evictd.core.memcg import STATS_CATCH_UP_S
from evictd.core.signals import Operator, Signal, spec_of
from evictd.core.summary import SYSTEM_CONTAINER_PODS, MemoryStats, Observation, Summary, signal_observations
from evictd.core.thresholds import Threshold, threshold_quantity, thresholds_met
from evictd.core.unanswered import OVERDUE_S

# Confirm a newly met memory threshold this long after it was read: longer than a dip that must not evict (80 ms).
CROSSING_HOLD_S = 0.1
# First confirming read; a crossing this far past its quantity there is decided (the memcg notifiers' re-arm step).
EARLY_CONFIRM_S = 0.005
DEEP_CROSSING_BYTES = 8 << 20
# An unsettled crossing is read this often after the hold where the node's memory can be read alone: a churner's page
# cache lives about 100 ms, so readings a hold apart kept step with it for up to 0.9 s (docs/kubelet-differences.md).
SETTLING_READ_EVERY_S = 0.02
# Follow-ups go on while a memory threshold is this close to met; further away the re-armed memcg level announces it.
FOLLOW_UP_MARGIN_BYTES = 8 << 20


# The fraction of the golden ratio: successive multiples of it, modulo 1, spread evenly over [0, 1).
_GOLDEN_FRACTION = 0.6180339887498949


def spread(count: int) -> float:
    """The `count`-th (0, 1, ...) of a sequence spread evenly over [0, 1): waits varied by it never keep step with a
    periodic tenant."""
    return (count * _GOLDEN_FRACTION) % 1.0


def crossing_hold_s(base_s: float, *, flapping: bool, count: int) -> float:
    """Return how long the `count`-th confirmation waits: `base_s`, or while flapping, in [`base_s`, 2 x `base_s`)."""
    if not flapping:
        return base_s
    return base_s * (1.0 + spread(count))


def confirming_reads(hold_s: float, *, flapping: bool) -> tuple[float, ...]:
    """Return when the confirming readings are taken, seconds after the first: `EARLY_CONFIRM_S` doubling within
    `hold_s`, then `hold_s`; while flapping only the first and `hold_s`."""
    if hold_s <= EARLY_CONFIRM_S:
        return (hold_s,)
    reads = [EARLY_CONFIRM_S]
    while not flapping and reads[-1] * 2 < hold_s:
        reads.append(reads[-1] * 2)
    return (*reads, hold_s)


def settling_reads(hold_s: float, every_s: float | None = None) -> tuple[float, ...]:
    """Return when a crossing still unsettled at the hold's end is read again, seconds after the first reading: every
    `every_s` (None: `hold_s`) after the hold, up to `STATS_CATCH_UP_S` (past the kernel's periodic flush of its
    statistics)."""
    step = hold_s if every_s is None else every_s
    if hold_s <= 0 or step <= 0:
        return ()
    return tuple(hold_s + step * n for n in range(1, int((STATS_CATCH_UP_S - hold_s) / step + 1e-9) + 1))


def accounted(summary: Summary) -> Summary:
    """Return `summary` with the node's and the pods cgroup's working sets less the usage their statistics do not
    account for yet (`MemoryStats.unfolded_bytes`), their available memory more: what a crossing is confirmed on."""
    node = summary.node
    memory = _accounted(node.memory)
    containers = node.system_containers
    pods = containers.get(SYSTEM_CONTAINER_PODS)
    pods_memory = None if pods is None else _accounted(pods.memory)
    if memory is node.memory and (pods is None or pods_memory is pods.memory):
        return summary
    if pods is not None and pods_memory is not pods.memory:
        containers = MappingProxyType({**containers, SYSTEM_CONTAINER_PODS: replace(pods, memory=pods_memory)})
    return replace(summary, node=replace(node, memory=memory, system_containers=containers))


def _accounted(memory: MemoryStats | None) -> MemoryStats | None:
    if memory is None or not memory.unfolded_bytes:
        return memory
    unfolded = memory.unfolded_bytes
    return replace(memory, unfolded_bytes=0,
                   available_bytes=None if memory.available_bytes is None else memory.available_bytes + unfolded,
                   working_set_bytes=None if memory.working_set_bytes is None
                   else max(0, memory.working_set_bytes - unfolded))


def with_node_memory(summary: Summary, reading: Summary) -> Summary:
    """Return `summary` (a full reading) with the node and pods cgroup memory figures of `reading` (the node's memory
    alone, read just before): the cycle decides on the figures the confirmation judged. Missing figures are kept."""
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
                   working_set_bytes=read.working_set_bytes, unfolded_bytes=read.unfolded_bytes)


def settled_usage(usage_before_bytes: int, usage_after_bytes: int) -> int:
    """Return the usage to set beside ``memory.stat`` read between the two usage reads: the lower (rule 1)."""
    return min(usage_before_bytes, usage_after_bytes)


def crossings_to_confirm(thresholds: Sequence[Threshold], held: Sequence[Threshold], summary: Summary
                         ) -> tuple[Threshold, ...]:
    """Return the memory thresholds met in `summary` that are not in `held` (met or in grace): crossings to confirm."""
    memory = [t for t in thresholds if spec_of(t.signal).is_memory and t not in held]
    if not memory:
        return ()
    return tuple(thresholds_met(memory, signal_observations(summary), enforce_min_reclaim=False))


def memory_thresholds_met(thresholds: Sequence[Threshold], summary: Summary) -> list[Threshold]:
    """The memory thresholds, soft or hard, `summary` shows met: what makes a cycle's full reading urgent."""
    memory = [threshold for threshold in thresholds if spec_of(threshold.signal).is_memory]
    return thresholds_met(memory, signal_observations(summary), enforce_min_reclaim=False)


def runtime_wait_s(met: Sequence[Threshold]) -> float | None:
    """How long a full reading waits for the runtime's stats: `OVERDUE_S` with a memory threshold `met` (a memory
    ranking reads the pods' cgroups; the runtime only names containers), None (the read's own deadline) without."""
    return OVERDUE_S if met else None


def crossing_confirmed(crossed: Sequence[Threshold], summary: Summary | None) -> bool:
    """True when the second reading still has one of `crossed` met; None (unreadable) confirms nothing."""
    if summary is None or not crossed:
        return False
    return bool(thresholds_met(crossed, signal_observations(summary), enforce_min_reclaim=False))


def crossing_unsettled(crossed: Sequence[Threshold], summary: Summary | None) -> bool:
    """True when `summary` has one of `crossed` met, but none on the usage its statistics account for (`accounted`):
    read again (`settling_reads`) before it confirms."""
    if summary is None or not crossing_confirmed(crossed, summary):
        return False
    return not crossing_confirmed(crossed, accounted(summary))


def crossing_deep(crossed: Sequence[Threshold], summary: Summary | None) -> bool:
    """True when `summary` has one of `crossed` met by more than `DEEP_CROSSING_BYTES` on the usage its statistics
    account for (`accounted`): decided without the hold."""
    if summary is None:
        return False
    observations = signal_observations(accounted(summary))
    return any((past := _bytes_past(threshold, observations)) is not None and past > DEEP_CROSSING_BYTES
               for threshold in crossed)


def near_crossing(thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]) -> bool:
    """True when a memory threshold is met or within `FOLLOW_UP_MARGIN_BYTES` of met in `observations` (rule 3).
    Only `memcg_watched` thresholds count: a stall signal's share is not a crossing a few pages short."""
    return any(spec_of(threshold.signal).memcg_watched and (past := _bytes_past(threshold, observations)) is not None
               and past > -FOLLOW_UP_MARGIN_BYTES for threshold in thresholds)


def near_unmet_crossing(thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]) -> bool:
    """True when a `memcg_watched` memory threshold is not met but within `FOLLOW_UP_MARGIN_BYTES` of met."""
    return any(spec_of(threshold.signal).memcg_watched and (past := _bytes_past(threshold, observations)) is not None
               and -FOLLOW_UP_MARGIN_BYTES < past <= 0 for threshold in thresholds)


def _bytes_past(threshold: Threshold, observations: Mapping[Signal, Observation]) -> int | None:
    """Bytes the observed available amount is below `threshold`'s quantity (> 0 when met); None without an
    observation or for a threshold not of the form ``available < quantity``."""
    observed = observations.get(threshold.signal)
    if observed is None or threshold.operator is not Operator.LESS_THAN:
        return None
    return threshold_quantity(threshold.value, observed.capacity).ceil_int() - observed.available.ceil_int()

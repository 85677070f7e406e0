"""The kubelet Summary API (stats/v1alpha1) as frozen values, and the signal observations made from it.

Holds a Summary document (field names of upstream kubelet ``pkg/apis/stats/v1alpha1/types.go``), derives the
eviction signal observations as ``makeSignalObservations`` does (KUBELET_SPEC §1), and matches pod stats to pods;
parsing is `evictd.core.summary_parser`'s. Invariants: a numeric field None means absent (no observation unless both
of a signal's figures are present; missing usage ranks as 0); counters are non-negative int64-range ints; a Go zero
time is None, every other time timezone-aware.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, assert_never

from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import SIGNAL_SPECS, Filesystem, Reading, Signal, SignalSpec, StallKind

if TYPE_CHECKING:
    from evictd.core.pods import Pod

# The system container of all pods (statsapi.SystemContainerPods): allocatableMemory.available's.
SYSTEM_CONTAINER_PODS = "pods"
# evictd's own system container: the node's daemons (``system.slice``, with kubelet.service), for their refaults.
SYSTEM_CONTAINER_DAEMONS = "evictd.io/daemons"


@dataclass(frozen=True, slots=True)
class PsiData:
    """One line of a PSI file (KEP-4205 ``PSIData``): ``total`` stalled microseconds and the 10/60/300 s averages
    in percent. `recent` is evictd's own (JSON ``evictdRecent``): the share over its 1-10 s window
    (`evictd.core.psi_window`), None where none was made."""

    total: int
    avg10: float
    avg60: float
    avg300: float
    recent: float | None = None


@dataclass(frozen=True, slots=True)
class PsiStats:
    """A memory pressure file (``/proc/pressure/memory``, a cgroup's ``memory.pressure``): JSON ``psi``."""

    some: PsiData
    full: PsiData


@dataclass(frozen=True, slots=True)
class ReclaimCounters:
    """evictd's own reclaim counters (JSON ``reclaim`` of a memory block, None where not read) for the stall gate
    and the refault signal: `global_scan_pages` (node: /proc/vmstat ``pgscan_kswapd + pgscan_direct
    (+ pgscan_khugepaged)``), `limit_events` (pods: ``memory.events.local`` ``max``, v2), `refault_file_bytes` and
    `activate_file_bytes` (node: ``workingset_refault_file``/``workingset_activate_file``, before 5.9 without
    ``_file``; daemons: their cgroup's memory.stat, `evictd.adapters.daemon_cgroups`), `protected_bytes` (daemons,
    v2: the larger of system.slice's ``memory.min`` and ``memory.low``, what the kernel keeps from reclaim),
    `low_events` (daemons, v2: ``memory.events`` ``low``, reclaims below that protection), `reclaimed_bytes`
    (daemons, v2: memory.stat ``pgsteal``, their pages reclaimed), `file_bytes` (daemons, v2: memory.stat ``file``,
    their page cache) and `node_available_bytes` (daemons: the node's /proc/meminfo ``MemAvailable``, read with
    them)."""

    global_scan_pages: int | None = None
    limit_events: int | None = None
    refault_file_bytes: int | None = None
    activate_file_bytes: int | None = None
    protected_bytes: int | None = None
    low_events: int | None = None
    reclaimed_bytes: int | None = None
    file_bytes: int | None = None
    node_available_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Memory usage of the node, a system container, a pod or a container; `psi`: its pressure stall; `reclaim`:
    evictd's reclaim counters (`ReclaimCounters`); `unfolded_bytes`: evictd's, of the pods cgroup's cgroup v1
    reading, the usage the statistics the working set was taken from do not account for yet (0: none past the
    kernel's batches; None: not known), which the working set may overstate (`evictd.core.settled`)."""

    time: datetime | None = None
    available_bytes: int | None = None
    usage_bytes: int | None = None
    working_set_bytes: int | None = None
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None
    psi: PsiStats | None = None
    reclaim: ReclaimCounters | None = None
    unfolded_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class FsStats:
    """Usage of a filesystem (node fs, image fs, container rootfs/logs, pod ephemeral storage)."""

    time: datetime | None = None
    available_bytes: int | None = None
    capacity_bytes: int | None = None
    used_bytes: int | None = None
    inodes_free: int | None = None
    inodes: int | None = None
    inodes_used: int | None = None


@dataclass(frozen=True, slots=True)
class RlimitStats:
    """Process limits of the node: ``max_pid`` (JSON ``maxpid``) and running processes (``curproc``)."""

    time: datetime | None = None
    max_pid: int | None = None
    num_of_running_processes: int | None = None


@dataclass(frozen=True, slots=True)
class ContainerStats:
    """Stats of one container (or of a node system container such as ``pods``)."""

    name: str = ""
    memory: MemoryStats | None = None
    rootfs: FsStats | None = None
    logs: FsStats | None = None


@dataclass(frozen=True, slots=True)
class VolumeStats:
    """Usage of one pod volume; upstream embeds FsStats inline, so its fields sit at the same level."""

    name: str = ""
    time: datetime | None = None
    available_bytes: int | None = None
    capacity_bytes: int | None = None
    used_bytes: int | None = None
    inodes_free: int | None = None
    inodes: int | None = None
    inodes_used: int | None = None


@dataclass(frozen=True, slots=True)
class PodReference:
    """Which pod a PodStats entry describes. Absent fields are empty strings, as in Go."""

    name: str = ""
    namespace: str = ""
    uid: str = ""


@dataclass(frozen=True, slots=True)
class PodStats:
    """Stats of one pod. ``volume_stats`` is JSON ``volume``; ``process_count`` is ``process_stats.process_count``."""

    pod_ref: PodReference = field(default_factory=PodReference)
    memory: MemoryStats | None = None
    containers: tuple[ContainerStats, ...] = ()
    volume_stats: tuple[VolumeStats, ...] = ()
    ephemeral_storage: FsStats | None = None
    process_count: int | None = None


@dataclass(frozen=True, slots=True)
class NodeStats:
    """Node-level stats. ``system_containers`` maps name to stats; the first entry of a name wins."""

    node_name: str = ""
    memory: MemoryStats | None = None
    fs: FsStats | None = None
    image_fs: FsStats | None = None
    container_fs: FsStats | None = None
    rlimit: RlimitStats | None = None
    system_containers: Mapping[str, ContainerStats] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class Summary:
    """A whole Summary API document."""

    node: NodeStats = field(default_factory=NodeStats)
    pods: tuple[PodStats, ...] = ()


@dataclass(frozen=True, slots=True)
class Observation:
    """One signal observation: what is available, out of what capacity, measured when (None = unknown)."""

    available: Quantity
    capacity: Quantity
    time: datetime | None


# --- A pod's blocks, built a thousand times a cycle -----------------------------------------------

# Frozen dataclass __init__ is slow per field: `pod_memory_stats` and `pod_stats` set the slots through their
# descriptors, building objects equal to the constructors' (tests/core/test_summary.py) in half the time.
_new_object = object.__new__


def _slot_setters(cls: type) -> tuple[Callable[[object, object], None], ...]:
    """The `__set__` of each slot of a slotted dataclass `cls`, in field order (which is its `__slots__` order)."""
    return tuple(cls.__dict__[name].__set__ for name in cls.__dict__["__slots__"])


_MEMORY_STATS_SETTERS = _slot_setters(MemoryStats)
_POD_STATS_SETTERS = _slot_setters(PodStats)


def pod_memory_stats(time: datetime, usage_bytes: int, working_set_bytes: int,
                     rss_bytes: int | None = None) -> MemoryStats:
    """Return ``MemoryStats(time=time, usage_bytes=usage_bytes, working_set_bytes=working_set_bytes,
    rss_bytes=rss_bytes)``."""
    (set_time, set_available, set_usage, set_working_set, set_rss, set_page_faults, set_major_page_faults, set_psi,
     set_reclaim, set_unfolded) = _MEMORY_STATS_SETTERS  # one name a field: a field added to MemoryStats fails here
    stats = _new_object(MemoryStats)
    set_time(stats, time)
    set_available(stats, None)
    set_usage(stats, usage_bytes)
    set_working_set(stats, working_set_bytes)
    set_rss(stats, rss_bytes)
    set_page_faults(stats, None)
    set_major_page_faults(stats, None)
    set_psi(stats, None)
    set_reclaim(stats, None)
    set_unfolded(stats, None)
    return stats


def pod_stats(pod_ref: PodReference, memory: MemoryStats | None, containers: tuple[ContainerStats, ...],
              volume_stats: tuple[VolumeStats, ...], ephemeral_storage: FsStats | None,
              process_count: int | None) -> PodStats:
    """Return ``PodStats(pod_ref=pod_ref, memory=memory, ...)`` with every field given."""
    (set_pod_ref, set_memory, set_containers, set_volume_stats, set_ephemeral_storage,
     set_process_count) = _POD_STATS_SETTERS  # as in `pod_memory_stats`
    stats = _new_object(PodStats)
    set_pod_ref(stats, pod_ref)
    set_memory(stats, memory)
    set_containers(stats, containers)
    set_volume_stats(stats, volume_stats)
    set_ephemeral_storage(stats, ephemeral_storage)
    set_process_count(stats, process_count)
    return stats


# --- Observations ---------------------------------------------------------------------------------


def _bytes(value: int) -> Quantity:
    return Quantity.from_int(value, QuantityFormat.BINARY_SI)


def _count(value: int) -> Quantity:
    return Quantity.from_int(value, QuantityFormat.DECIMAL_SI)


def _memory_observation(memory: MemoryStats | None) -> Observation | None:
    if memory is None or memory.available_bytes is None or memory.working_set_bytes is None:
        return None
    return Observation(
        available=_bytes(memory.available_bytes),
        capacity=_bytes(memory.available_bytes + memory.working_set_bytes),
        time=memory.time,
    )


# A stall observation counts the window in basis points: the kernel prints its averages to two decimals.
STALL_BASIS_POINTS = 10_000


def stall_share(line: PsiData) -> float:
    """The share stalled (percent) a stall signal decides on: the larger of avg10 and evictd's `recent`, so the onset
    is met at once (avg10 lags 2-10 s) while relief stays avg10's."""
    return line.avg10 if line.recent is None else max(line.avg10, line.recent)


def _stall_observation(memory: MemoryStats | None, kind: StallKind | None) -> Observation | None:
    """Stall headroom in basis points: 100% - `stall_share` (a stall threshold of X% is met at 100% - X or below)."""
    if memory is None or memory.psi is None:
        return None
    match kind:
        case StallKind.SOME:
            line = memory.psi.some
        case StallKind.FULL:
            line = memory.psi.full
        case None:
            return None
        case _:
            assert_never(kind)
    stalled = min(round(stall_share(line) * STALL_BASIS_POINTS / 100), STALL_BASIS_POINTS)
    return Observation(_count(STALL_BASIS_POINTS - stalled), _count(STALL_BASIS_POINTS), memory.time)


def _filesystem(node: NodeStats, filesystem: Filesystem | None) -> FsStats | None:
    """The Summary block of `filesystem` (None: the signal observes no filesystem, or the block is absent)."""
    match filesystem:
        case Filesystem.NODEFS:
            return node.fs
        case Filesystem.IMAGEFS:
            return node.image_fs
        case Filesystem.CONTAINERFS:
            return node.container_fs
        case None:
            return None
        case _:
            assert_never(filesystem)


def _observation(spec: SignalSpec, node: NodeStats) -> Observation | None:
    """The observation of a signal declared `spec` in `node` (None: a figure it needs is absent)."""
    match spec.reading:
        case Reading.NODE_MEMORY:
            return _memory_observation(node.memory)
        case Reading.PODS_MEMORY:
            pods_container = node.system_containers.get(SYSTEM_CONTAINER_PODS)
            return None if pods_container is None else _memory_observation(pods_container.memory)
        case Reading.FS_BYTES:
            fs = _filesystem(node, spec.filesystem)
            if fs is None or fs.available_bytes is None or fs.capacity_bytes is None:
                return None
            return Observation(_bytes(fs.available_bytes), _bytes(fs.capacity_bytes), fs.time)
        case Reading.FS_INODES:
            fs = _filesystem(node, spec.filesystem)
            if fs is None or fs.inodes_free is None or fs.inodes is None:
                return None
            return Observation(_count(fs.inodes_free), _count(fs.inodes), fs.time)
        case Reading.PIDS:
            rlimit = node.rlimit
            if rlimit is None or rlimit.max_pid is None or rlimit.num_of_running_processes is None:
                return None
            return Observation(_count(rlimit.max_pid - rlimit.num_of_running_processes), _count(rlimit.max_pid),
                               rlimit.time)
        case Reading.NODE_MEMORY_STALL:
            return _stall_observation(node.memory, spec.stall)
        case Reading.PODS_MEMORY_STALL:
            pods_container = node.system_containers.get(SYSTEM_CONTAINER_PODS)
            return None if pods_container is None else _stall_observation(pods_container.memory, spec.stall)
        case Reading.NODE_MEMORY_REFAULT | Reading.DAEMONS_MEMORY_REFAULT:
            return None  # a rate: two readings make it, which one Summary has not (`evictd.core.refault`)
        case _:
            assert_never(spec.reading)


def signal_observations(summary: Summary) -> dict[Signal, Observation]:
    """Return the observation of every signal the summary supports (makeSignalObservations), in `Signal` order: each
    only when both its figures are present; bytes BinarySI, inodes and pids DecimalSI; memory capacity = available +
    working set; allocatableMemory from the ``pods`` container; pid.available may be negative."""
    node = summary.node
    result: dict[Signal, Observation] = {}
    for signal, spec in SIGNAL_SPECS.items():
        observation = _observation(spec, node)
        if observation is not None:
            result[signal] = observation
    return result


# --- Pod stats lookup -----------------------------------------------------------------------------


def pod_stats_lookup(summary: Summary, pods: Sequence[Pod]) -> Callable[[Pod], PodStats | None]:
    """Return a function giving the stats of each pod in `pods` (None: none, or not in `pods`): by uid when the
    stats carry one (cachedStatsFunc), else by namespace and name; the last match wins, as with the kubelet's map."""
    by_uid: dict[str, PodStats] = {}
    by_name: dict[tuple[str, str], PodStats] = {}
    for stats in summary.pods:
        ref = stats.pod_ref
        if ref.uid:
            by_uid[ref.uid] = stats
        else:
            by_name[(ref.namespace, ref.name)] = stats
    index: dict[tuple[str, str, str], PodStats | None] = {}
    for pod in pods:
        found = by_uid.get(pod.uid) if pod.uid else None  # PodStats are always true
        index[(pod.uid, pod.namespace, pod.name)] = found or by_name.get((pod.namespace, pod.name))

    def stats_of(pod: Pod) -> PodStats | None:
        return index.get((pod.uid, pod.namespace, pod.name))

    return stats_of


"""The kubelet Summary API (stats/v1alpha1) as values, its JSON parser, and the signal observations.

Job: turn a Summary API document (``GET /stats/summary``; field names of upstream
``staging/src/k8s.io/kubelet/pkg/apis/stats/v1alpha1/types.go``) into frozen dataclasses, derive the
eviction signal observations from it exactly as the kubelet's ``makeSignalObservations`` does
(KUBELET_SPEC §1), and match pod stats to pods.

Invariants:
* Every numeric field is optional: ``None`` means "absent", which the kubelet treats differently from 0
  (no observation for a signal unless both of its fields are present; missing usage counts as 0 when
  ranking). Counters are non-negative ``int`` no larger than the int64 range.
* A Go zero time (absent, ``null`` or ``0001-01-01T00:00:00Z``) is ``None``; every other time is a
  timezone-aware ``datetime`` (microsecond precision: nanoseconds are truncated).
* ``summary_from_dict`` never mutates its input and raises only ``DecodeError``, whose ``key`` is the
  JSON path of the bad value (``node.memory.availableBytes``, ``pods[2].volume[0].usedBytes``; ``$`` is the
  document itself). Unknown keys are ignored, as Go's JSON decoder ignores them; keys that are not strings
  (possible in YAML, never in JSON) are rejected. The generic checks are `evictd.core.decode`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import TYPE_CHECKING, assert_never

from evictd.core.decode import EMPTY_MAPPING, INT64_MAX, child, integer, invalid, list_of, mapping, sequence, string
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import SIGNAL_SPECS, Filesystem, Reading, Signal, SignalSpec, StallKind

if TYPE_CHECKING:
    from evictd.core.pods import Pod

# Name of the system container that tracks all pods (statsapi.SystemContainerPods); its memory stats
# feed allocatableMemory.available.
SYSTEM_CONTAINER_PODS = "pods"

# The kubelet converts every counter with int64(...); values above this would wrap negative in Go, so
# they are rejected instead of reproduced.
MAX_COUNTER = INT64_MAX

# The error key of the document itself (a document that is not a mapping).
ROOT_KEY = "$"

# RFC 3339 as Go's time.Parse(time.RFC3339, ...) accepts it (fraction optional, '.' or ',' separator).
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))")
_MICROSECOND_DIGITS = 6
_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
# Times already parsed (every pod of a Summary carries the same few): at most this many, then forgotten.
_TIMES: dict[str, datetime | None] = {}
_TIMES_KEPT = 4096


@dataclass(frozen=True, slots=True)
class PsiData:
    """One line of a PSI file (KEP-4205's ``PSIData``): stalled time in microseconds since boot (``total``) and
    the kernel's running averages of the stalled share over 10, 60 and 300 s, in percent."""

    total: int
    avg10: float
    avg60: float
    avg300: float


@dataclass(frozen=True, slots=True)
class PsiStats:
    """A memory pressure file (``/proc/pressure/memory``, a cgroup's ``memory.pressure``): JSON ``psi``."""

    some: PsiData
    full: PsiData


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Memory usage of the node, a system container, a pod or a container; `psi`: its pressure stall."""

    time: datetime | None = None
    available_bytes: int | None = None
    usage_bytes: int | None = None
    working_set_bytes: int | None = None
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None
    psi: PsiStats | None = None


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
    """Stats of one pod.

    ``volume_stats`` is JSON ``volume``; ``process_count`` is ``process_stats.process_count``.
    """

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


# --------------------------------------------------------------------------------------------------
# Parsing


def summary_from_dict(obj: Mapping[str, object]) -> Summary:
    """Return the Summary described by a decoded Summary API JSON document.

    Raises DecodeError (and nothing else) when a value has the wrong type, a counter is negative,
    fractional or out of the int64 range, or a time is not RFC 3339.
    """
    doc = mapping(obj, ROOT_KEY)
    node = _node_stats(doc.get("node"), "node")
    pods = list_of(doc.get("pods"), "pods", _pod_stats, if_null=())
    return Summary(node=node, pods=pods)


class SummaryDecoder:
    """`summary_from_dict` for one document after another that share their unchanged blocks (a recording's
    Summaries, each rebuilt from the one before by `apply_summary_changes`): the node, when it is the very object
    of the document before, and a pod whose values other than `memory` are the very objects of the pod with the
    same `podRef` object in the document before, are not decoded again (its memory is). The same result and
    errors as `summary_from_dict`, as long as the documents are not changed in place between calls."""

    def __init__(self) -> None:
        self._node: tuple[object, NodeStats] | None = None
        # The pods of the document before, by the identity of their `podRef` object (held: ids stay unique).
        self._pods: dict[int, tuple[Mapping[str, object], PodStats]] = {}

    def __call__(self, obj: Mapping[str, object]) -> Summary:
        doc = mapping(obj, ROOT_KEY)
        value = doc.get("node")
        last = self._node
        node = last[1] if last is not None and last[0] is value else _node_stats(value, "node")
        self._node = (value, node)
        items = doc.get("pods")
        if items is None:
            self._pods = {}
            return Summary(node=node, pods=())
        before = self._pods
        known: dict[int, tuple[Mapping[str, object], PodStats]] = {}
        pods: list[PodStats] = []
        for index, item in enumerate(sequence(items, "pods")):
            if type(item) is not dict:
                pods.append(_pod_stats(item, f"pods[{index}]"))
                continue
            ref = item.get("podRef")
            seen = before.get(id(ref))
            if seen is not None and _same_but_memory(seen[0], item):
                old = seen[1]
                stats = PodStats(pod_ref=old.pod_ref, memory=_memory_stats(item.get("memory"), f"pods[{index}].memory"),
                                 containers=old.containers, volume_stats=old.volume_stats,
                                 ephemeral_storage=old.ephemeral_storage, process_count=old.process_count)
            else:
                stats = _pod_stats(item, f"pods[{index}]")
            known[id(ref)] = (item, stats)
            pods.append(stats)
        self._pods = known
        return Summary(node=node, pods=tuple(pods))


_MISSING = object()


def _same_but_memory(before: Mapping[str, object], pod: Mapping[str, object]) -> bool:
    """Whether `pod` has the keys of `before`, each value but `memory` the very same object."""
    if len(before) != len(pod):
        return False
    for name, block in pod.items():
        if name == "memory":
            if name not in before:
                return False
        elif before.get(name, _MISSING) is not block:
            return False
    return True


def _counter(obj: Mapping[str, object], name: str, parent: str) -> int | None:
    """Read an unsigned counter (Go *uint64 later converted with int64(), so at most MAX_COUNTER)."""
    value = obj.get(name)
    if value is None or (type(value) is int and 0 <= value <= MAX_COUNTER):
        return value  # the common case, without building the key an error would name
    return integer(value, child(parent, name), low=0, high=MAX_COUNTER, if_null=None)


def _signed(obj: Mapping[str, object], name: str, parent: str) -> int | None:
    """Read a Go *int64 (the rlimit fields)."""
    return integer(obj.get(name), child(parent, name), if_null=None)


def _time(obj: Mapping[str, object], name: str, parent: str) -> datetime | None:
    """Read a metav1.Time; the Go zero time comes back as None."""
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return _TIMES[value]
        except KeyError:  # not parsed yet (or forgotten meanwhile, by another thread's `clear`)
            pass
    key = child(parent, name)
    if not isinstance(value, str):
        raise invalid("must be an RFC 3339 time string", key, value)
    if len(_TIMES) >= _TIMES_KEPT:
        _TIMES.clear()
    parsed = _TIMES[value] = _parse_time(value, key)
    return parsed


def _parse_time(value: str, key: str) -> datetime | None:
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise invalid("must be an RFC 3339 time (e.g. 2024-01-02T03:04:05Z)", key, value)
    year, month, day, hour, minute, second = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
    fraction = match.group(7) or ""
    microsecond = int(fraction[:_MICROSECOND_DIGITS].ljust(_MICROSECOND_DIGITS, "0"))
    if match.group(8):
        tz = UTC
    else:
        offset = timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
        if offset >= timedelta(hours=24) or int(match.group(11)) >= 60:
            raise invalid("time zone offset out of range", key, value)
        tz = timezone(-offset if match.group(9) == "-" else offset)
    try:
        parsed = datetime(year, month, day, hour, minute, second, microsecond, tzinfo=tz)
    except ValueError as exc:
        raise invalid(f"invalid time: {exc}", key, value) from None
    # Go's zero time is "no time"; digits beyond microseconds still make an instant non-zero.
    if parsed == _GO_ZERO_TIME and fraction.strip("0") == "":
        return None
    return parsed


def _memory_stats(value: object, key: str) -> MemoryStats | None:
    if type(value) is dict:  # the common case (a JSON object whose values are all plainly valid), checked at once
        get = value.get
        time = get("time")
        time = _TIMES.get(time, _MISSING) if type(time) is str else _MISSING if time is not None else None
        counters = (get("availableBytes"), get("usageBytes"), get("workingSetBytes"), get("rssBytes"),
                    get("pageFaults"), get("majorPageFaults"))
        plain = time is not _MISSING and get("psi") is None
        for counter in counters:
            if counter is not None and (type(counter) is not int or not 0 <= counter <= MAX_COUNTER):
                plain = False
        for name in value:
            if type(name) is not str:
                plain = False
        if plain:
            return MemoryStats(time, *counters)  # type: ignore[arg-type]
    obj = mapping(value, key, if_null=None)
    if obj is None:
        return None
    return MemoryStats(
        time=_time(obj, "time", key),
        available_bytes=_counter(obj, "availableBytes", key),
        usage_bytes=_counter(obj, "usageBytes", key),
        working_set_bytes=_counter(obj, "workingSetBytes", key),
        rss_bytes=_counter(obj, "rssBytes", key),
        page_faults=_counter(obj, "pageFaults", key),
        major_page_faults=_counter(obj, "majorPageFaults", key),
        psi=_psi_stats(obj.get("psi"), child(key, "psi")),
    )


# The share of a PSI average, in percent.
PSI_SHARE_MAX = 100.0


def _psi_data(value: object, key: str) -> PsiData:
    obj = mapping(value, key)
    total = _counter(obj, "total", key)
    if total is None:
        raise invalid("must be present", child(key, "total"), None)
    averages = []
    for name in ("avg10", "avg60", "avg300"):
        share = obj.get(name)
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= PSI_SHARE_MAX:
            raise invalid(f"must be a share in percent (0 to {PSI_SHARE_MAX:g})", child(key, name), share)
        averages.append(float(share))
    return PsiData(total, *averages)


def _psi_stats(value: object, key: str) -> PsiStats | None:
    obj = mapping(value, key, if_null=None)
    if obj is None:
        return None
    return PsiStats(some=_psi_data(obj.get("some"), child(key, "some")),
                    full=_psi_data(obj.get("full"), child(key, "full")))


def _fs_stats(value: object, key: str) -> FsStats | None:
    obj = mapping(value, key, if_null=None)
    if obj is None:
        return None
    return FsStats(
        time=_time(obj, "time", key),
        available_bytes=_counter(obj, "availableBytes", key),
        capacity_bytes=_counter(obj, "capacityBytes", key),
        used_bytes=_counter(obj, "usedBytes", key),
        inodes_free=_counter(obj, "inodesFree", key),
        inodes=_counter(obj, "inodes", key),
        inodes_used=_counter(obj, "inodesUsed", key),
    )


# The blocks below are Go structs held by value, not pointers: null decodes like {} into their zero value.


def _volume_stats(value: object, key: str) -> VolumeStats:
    obj = mapping(value, key, if_null=EMPTY_MAPPING)
    return VolumeStats(
        name=string(obj.get("name"), child(key, "name"), if_null=""),
        time=_time(obj, "time", key),
        available_bytes=_counter(obj, "availableBytes", key),
        capacity_bytes=_counter(obj, "capacityBytes", key),
        used_bytes=_counter(obj, "usedBytes", key),
        inodes_free=_counter(obj, "inodesFree", key),
        inodes=_counter(obj, "inodes", key),
        inodes_used=_counter(obj, "inodesUsed", key),
    )


def _container_stats(value: object, key: str) -> ContainerStats:
    obj = mapping(value, key, if_null=EMPTY_MAPPING)
    return ContainerStats(
        name=string(obj.get("name"), child(key, "name"), if_null=""),
        memory=_memory_stats(obj.get("memory"), child(key, "memory")),
        rootfs=_fs_stats(obj.get("rootfs"), child(key, "rootfs")),
        logs=_fs_stats(obj.get("logs"), child(key, "logs")),
    )


def _rlimit_stats(value: object, key: str) -> RlimitStats | None:
    obj = mapping(value, key, if_null=None)
    if obj is None:
        return None
    return RlimitStats(
        time=_time(obj, "time", key),
        max_pid=_signed(obj, "maxpid", key),
        num_of_running_processes=_signed(obj, "curproc", key),
    )


def _pod_reference(value: object, key: str) -> PodReference:
    obj = mapping(value, key, if_null=EMPTY_MAPPING)
    return PodReference(
        name=string(obj.get("name"), child(key, "name"), if_null=""),
        namespace=string(obj.get("namespace"), child(key, "namespace"), if_null=""),
        uid=string(obj.get("uid"), child(key, "uid"), if_null=""),
    )


def _node_stats(value: object, key: str) -> NodeStats:
    obj = mapping(value, key, if_null=EMPTY_MAPPING)
    runtime_key = child(key, "runtime")
    runtime = mapping(obj.get("runtime"), runtime_key, if_null=EMPTY_MAPPING)
    system: dict[str, ContainerStats] = {}
    for stats in list_of(obj.get("systemContainers"), child(key, "systemContainers"), _container_stats, if_null=()):
        # getSysContainer returns the first entry with the name.
        system.setdefault(stats.name, stats)
    return NodeStats(
        node_name=string(obj.get("nodeName"), child(key, "nodeName"), if_null=""),
        memory=_memory_stats(obj.get("memory"), child(key, "memory")),
        fs=_fs_stats(obj.get("fs"), child(key, "fs")),
        image_fs=_fs_stats(runtime.get("imageFs"), child(runtime_key, "imageFs")),
        container_fs=_fs_stats(runtime.get("containerFs"), child(runtime_key, "containerFs")),
        rlimit=_rlimit_stats(obj.get("rlimit"), child(key, "rlimit")),
        system_containers=MappingProxyType(system),
    )


def _pod_stats(value: object, key: str) -> PodStats:
    obj = mapping(value, key, if_null=EMPTY_MAPPING)
    process_key = child(key, "process_stats")
    process = mapping(obj.get("process_stats"), process_key, if_null=EMPTY_MAPPING)
    return PodStats(
        pod_ref=_pod_reference(obj.get("podRef"), child(key, "podRef")),
        memory=_memory_stats(obj.get("memory"), child(key, "memory")),
        containers=list_of(obj.get("containers"), child(key, "containers"), _container_stats, if_null=()),
        volume_stats=list_of(obj.get("volume"), child(key, "volume"), _volume_stats, if_null=()),
        ephemeral_storage=_fs_stats(obj.get("ephemeral-storage"), child(key, "ephemeral-storage")),
        process_count=_counter(process, "process_count", process_key),
    )


# --------------------------------------------------------------------------------------------------
# Observations


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


def _stall_observation(memory: MemoryStats | None, kind: StallKind | None) -> Observation | None:
    """Stall headroom: the share of the kernel's 10 s window NOT stalled (100% - avg10), of the whole window, in
    basis points; a stall threshold of X% is met when the headroom is at most 100% - X (core/thresholds.py)."""
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
    stalled = min(round(line.avg10 * STALL_BASIS_POINTS / 100), STALL_BASIS_POINTS)
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
        case _:
            assert_never(spec.reading)


def signal_observations(summary: Summary) -> dict[Signal, Observation]:
    """Return the observation of every signal the summary can support (makeSignalObservations), in `Signal` order.

    Each signal is read as its `Reading` says, and is present only when both of its figures are present. Byte
    quantities are BinarySI, inode and pid quantities DecimalSI. memory.available: capacity = available +
    working set (Linux); allocatableMemory.available: the same from the ``pods`` system container (absent if it is
    missing); pid.available = maxpid - curproc (may be negative).
    """
    node = summary.node
    result: dict[Signal, Observation] = {}
    for signal, spec in SIGNAL_SPECS.items():
        observation = _observation(spec, node)
        if observation is not None:
            result[signal] = observation
    return result


# --------------------------------------------------------------------------------------------------
# Pod stats lookup


def pod_stats_lookup(summary: Summary, pods: Sequence[Pod]) -> Callable[[Pod], PodStats | None]:
    """Return a function giving the stats of each pod in `pods` (None: no stats, or not in `pods`).

    Stats carrying a uid match the pod with that uid only (the kubelet's cachedStatsFunc keys by uid);
    stats without a uid match by namespace and name. When several stats entries match, the last one
    wins, as with the kubelet's map. Stats of pods that are not in `pods` are ignored.
    """
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


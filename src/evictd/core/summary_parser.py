"""Parsing the kubelet Summary API (stats/v1alpha1): a decoded JSON document into `evictd.core.summary`'s values.

One document at a time (`summary_from_dict`), or one after another sharing unchanged blocks (`SummaryDecoder`, for
a recording's Summaries). Invariants: counters are non-negative int64-range ints; a Go zero time (absent, null,
``0001-01-01T00:00:00Z``) is None, others timezone-aware (nanoseconds truncated). `summary_from_dict` never mutates
its input and raises only `DecodeError` keyed by the JSON path (``pods[2].volume[0].usedBytes``; ``$`` is the
document); unknown keys are ignored as Go's decoder does, non-string keys rejected. `summary_read` (the daemon's)
never rejects a mapping: an invalid figure becomes None, only the smallest value that cannot be decoded without it
is dropped, and each is named in ``refused``; one pod's bad figure never costs another pod or the node theirs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import TypeVar

from evictd.core.decode import EMPTY_MAPPING, INT64_MAX, child, integer, invalid, list_of, mapping, sequence, string
from evictd.core.errors import DecodeError
from evictd.core.summary import (
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodReference,
    PodStats,
    PsiData,
    PsiStats,
    ReclaimCounters,
    RlimitStats,
    Summary,
    VolumeStats,
)

# The kubelet converts counters with int64(...): larger values would wrap, so they are rejected.
MAX_COUNTER = INT64_MAX

# The error key of the document itself (a document that is not a mapping).
ROOT_KEY = "$"

# RFC 3339 as Go's time.Parse(time.RFC3339, ...) accepts it (fraction optional, '.' or ',' separator).
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))",
                      re.ASCII)
_MICROSECOND_DIGITS = 6
_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
# Times already parsed (every pod of a Summary carries the same few): at most this many, then forgotten.
_TIMES: dict[str, datetime | None] = {}
_TIMES_KEPT = 4096


def summary_from_dict(obj: Mapping[str, object]) -> Summary:
    """Return the Summary of a decoded Summary API document. Raises DecodeError (only) for a wrong type, a
    negative, fractional or out-of-range counter, or a time that is not RFC 3339."""
    doc = mapping(obj, ROOT_KEY)
    node = _node_stats(doc.get("node"), "node")
    pods = list_of(doc.get("pods"), "pods", _pod_stats, if_null=())
    return Summary(node=node, pods=pods)


@dataclass(frozen=True, slots=True)
class SummaryReading:
    """A Summary decoded figure by figure: `refused` names each figure (or block) dropped as invalid."""

    summary: Summary
    refused: tuple[DecodeError, ...] = ()


_T = TypeVar("_T")

# A block repaired more often than this is dropped whole (bounds a hostile document's work; a pod has ~60 values).
MAX_REPAIRS_PER_BLOCK = 256
# A path as `evictd.core.decode.child` and `list_of` build it: `.name`, `[name]` (keys with dots) or `[3]`.
_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[([^\]]*)\]")


def summary_read(obj: Mapping[str, object]) -> SummaryReading:
    """Return the Summary of a decoded document with each invalid figure unknown (None) instead: node and pods
    decoded on their own, the value holding a figure dropped where null is not accepted; DecodeError at `$` only
    when the document is not a mapping."""
    try:
        return SummaryReading(summary_from_dict(obj))
    except DecodeError:
        pass  # the rare case: decoded again, block by block
    doc = mapping(obj, ROOT_KEY)
    refused: list[DecodeError] = []
    node = _repaired(doc.get("node"), "node", _node_stats, refused)
    items = doc.get("pods")
    if items is not None and not isinstance(items, list):
        refused.append(invalid("must be a list", "pods", items))
        items = None
    pods = tuple(_repaired(item, f"pods[{index}]", _pod_stats, refused) for index, item in enumerate(items or ()))
    return SummaryReading(Summary(node=node, pods=pods), tuple(refused))


def _repaired(value: object, key: str, decode: Callable[[object, str], _T], refused: list[DecodeError]) -> _T:
    """Return `decode(value, key)`, dropping (nulling) each value it rejects, in a copy, until it decodes."""
    for _ in range(MAX_REPAIRS_PER_BLOCK):
        try:
            return decode(value, key)
        except DecodeError as exc:
            # A null left by an earlier repair, refused in turn, is that repair's consequence, not a new figure.
            if exc.value is not None or not any(r.key.startswith(exc.key) for r in refused):
                refused.append(exc)
            value = _without(value, _path_below(exc.key or "", key))
    return decode(None, key)


def _path_below(key: str, prefix: str) -> list[str]:
    """The parts of `key` below `prefix` (empty: `key` is `prefix` itself, or not below it)."""
    if not key.startswith(prefix):
        return []
    rest = key[len(prefix):]
    parts = []
    position = 0
    while position < len(rest):
        match = _PATH_PART.match(rest, position)
        if match is None:
            return []
        parts.append(match.group(1) if match.group(1) is not None else match.group(2))
        position = match.end()
    return parts


def _without(value: object, path: list[str]) -> object:
    """A copy of `value` with the value at `path` nulled; when that value is null or absent already (null is
    refused there too), its parent is nulled instead; an empty path nulls `value` itself."""
    if not path:
        return None
    head, rest = path[0], path[1:]
    if isinstance(value, Mapping) and head in value:
        if value[head] is None:
            return None
        copy = dict(value)
        copy[head] = _without(value[head], rest)
        return copy
    if isinstance(value, list) and head.isascii() and head.isdigit() and int(head) < len(value):
        if value[int(head)] is None:
            return None
        items = list(value)
        items[int(head)] = _without(value[int(head)], rest)
        return items
    return None  # the path ends here (a value missing is refused): the value holding it goes


class SummaryDecoder:
    """`summary_from_dict` for documents that share unchanged blocks (a recording's, rebuilt by
    `apply_summary_changes`): the node, and a pod whose values other than `memory` are the very objects of the
    document before, are not decoded again. Same results and errors, provided documents are not changed in place."""

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
        plain = time is not _MISSING and get("psi") is None and get("reclaim") is None
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
        reclaim=_reclaim_counters(obj.get("reclaim"), child(key, "reclaim")),
    )


def _reclaim_counters(value: object, key: str) -> ReclaimCounters | None:
    """evictd's own ``reclaim`` block of a memory block (`ReclaimCounters`); absent in the kubelet's Summary."""
    obj = mapping(value, key, if_null=None)
    if obj is None:
        return None
    return ReclaimCounters(global_scan_pages=_counter(obj, "globalScanPages", key),
                           limit_events=_counter(obj, "limitEvents", key),
                           refault_file_bytes=_counter(obj, "refaultFileBytes", key),
                           activate_file_bytes=_counter(obj, "activateFileBytes", key),
                           protected_bytes=_counter(obj, "protectedBytes", key),
                           low_events=_counter(obj, "lowEvents", key),
                           reclaimed_bytes=_counter(obj, "reclaimedBytes", key),
                           file_bytes=_counter(obj, "fileBytes", key),
                           node_available_bytes=_counter(obj, "nodeAvailableBytes", key))


# The share of a PSI average, in percent.
PSI_SHARE_MAX = 100.0


def _psi_share(obj: Mapping[str, object], name: str, key: str) -> float:
    share = obj.get(name)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= PSI_SHARE_MAX:
        raise invalid(f"must be a share in percent (0 to {PSI_SHARE_MAX:g})", child(key, name), share)
    return float(share)


def _psi_data(value: object, key: str) -> PsiData:
    """A PSI line; its ``evictdRecent`` (`PsiData.recent`) is optional (absent from the kubelet and old recordings)."""
    obj = mapping(value, key)
    total = _counter(obj, "total", key)
    if total is None:
        raise invalid("must be present", child(key, "total"), None)
    recent = None if obj.get("evictdRecent") is None else _psi_share(obj, "evictdRecent", key)
    return PsiData(total, _psi_share(obj, "avg10", key), _psi_share(obj, "avg60", key), _psi_share(obj, "avg300", key),
                   recent)


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

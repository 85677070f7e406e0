"""Ranking pods for eviction: the kubelet's rank functions (KUBELET_SPEC §9, helpers.go).

Invariants: ``rank_pods`` returns a permutation of its input, untouched; the sort is stable (upstream's
``sort.Sort`` is an insertion sort, hence stable, up to 12 pods). Comparators follow ``orderedBy``: the first that
tells two pods apart decides; in a usage comparator a pod without stats sorts first. QoS is not a key; priority
(None as 0) is. Disk ranking subtracts the ephemeral-storage request even for inodes (upstream quirk).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import assert_never, cast

from evictd.core.fs_layout import FsLayout, FsStatsType, meaning_of
from evictd.core.pods import Derived, Pod, counts_for_local_disk, derived, pod_priority
from evictd.core.resources import pod_request
from evictd.core.signals import Ranking, Resource, Signal, spec_of
from evictd.core.summary import PodStats

StatsOf = Callable[[Pod], PodStats | None]

# One comparator's key for one pod: pods without stats first; exact numbers (ints where whole, else Fractions).
_Number = Fraction | int
_Key = tuple[int, _Number]
_NO_STATS: _Key = (0, Fraction(0))
_HAS_STATS = 1


def pod_disk_usage(stats: PodStats, pod: Pod, fs_stats: Sequence[FsStatsType]) -> dict[Resource, int]:
    """Return the pod's disk usage in bytes and inodes over `fs_stats` (podDiskUsage): rootfs, logs, the first stats
    entry of each hostPath or local ephemeral volume (spec order); images count nothing; missing fields 0."""
    used_bytes = 0
    inodes_used = 0
    measure_root = FsStatsType.ROOT in fs_stats
    measure_logs = FsStatsType.LOGS in fs_stats
    for container in stats.containers:
        if measure_root and container.rootfs is not None:
            used_bytes += container.rootfs.used_bytes or 0
            inodes_used += container.rootfs.inodes_used or 0
        if measure_logs and container.logs is not None:
            used_bytes += container.logs.used_bytes or 0
            inodes_used += container.logs.inodes_used or 0
    if FsStatsType.LOCAL_VOLUME_SOURCE in fs_stats:
        for volume in pod.volumes:
            if not counts_for_local_disk(volume):
                continue
            for volume_stats in stats.volume_stats:
                if volume_stats.name == volume.name:
                    used_bytes += volume_stats.used_bytes or 0
                    inodes_used += volume_stats.inodes_used or 0
                    break
    return {Resource.EPHEMERAL_STORAGE: used_bytes, Resource.INODES: inodes_used}


def _flag(value: bool) -> int:
    """Key of a boolean comparator: True sorts first (upstream cmpBool)."""
    return 0 if value else 1


def _exact(value: Fraction | int) -> Fraction | int:
    """Return `value` as an int when it is whole: ints compare in C, Fractions in Python (same order)."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return value.numerator
    return value


def _request_value(pod: Pod, resource: str) -> Fraction | int:
    """Return the exact value of the pod's request (remembered on the pod: a request never changes)."""
    return derived(pod, (Derived.RANKING_REQUEST_VALUE, resource), lambda p: _exact(pod_request(p, resource).value))


def _memory_keys(pod: Pod, stats: PodStats | None) -> tuple[_Key, _Number, _Key]:
    """exceedMemoryRequests -> priority -> memory (larger usage above request first)."""
    if stats is None:
        return _NO_STATS, pod_priority(pod), _NO_STATS
    usage = (stats.memory.working_set_bytes if stats.memory is not None else None) or 0
    above_request = _exact(usage - _request_value(pod, Resource.MEMORY))
    return (
        (_HAS_STATS, _flag(above_request > 0)),
        pod_priority(pod),
        (_HAS_STATS, -above_request),
    )


def _pid_keys(pod: Pod, stats: PodStats | None) -> tuple[_Number, _Key]:
    """priority -> process (more processes first)."""
    if stats is None:
        return pod_priority(pod), _NO_STATS
    return pod_priority(pod), (_HAS_STATS, -(stats.process_count or 0))


def _disk_keys(
    pod: Pod, stats: PodStats | None, fs_stats: Sequence[FsStatsType], resource: Resource
) -> tuple[_Key, _Number, _Key]:
    """exceedDiskRequests -> priority -> disk (larger usage minus ephemeral-storage request first)."""
    if stats is None:
        return _NO_STATS, pod_priority(pod), _NO_STATS
    usage = pod_disk_usage(stats, pod, fs_stats)[resource]
    exceeds = usage > _request_value(pod, resource)
    above_request = usage - _request_value(pod, Resource.EPHEMERAL_STORAGE)
    return (
        (_HAS_STATS, _flag(exceeds)),
        pod_priority(pod),
        (_HAS_STATS, -above_request),
    )


# What `rank_pods` sorted one pod by: the key tuple of its signal's rank function (`named_key_parts`: its parts).
SortKey = tuple[object, ...]


def _sort_key_of(signal: Signal, layout: FsLayout) -> Callable[[Pod, PodStats | None], SortKey]:
    """Return the function giving a pod's sort key under pressure on `signal`."""
    spec = spec_of(signal)
    match spec.ranking:
        case Ranking.MEMORY:
            return _memory_keys
        case Ranking.PIDS:
            return _pid_keys
        case Ranking.DISK:
            fs_stats = meaning_of(layout).rank_fs_stats[signal]  # every layout has a row for every disk signal
            resource = spec.resource
            return lambda pod, stats: _disk_keys(pod, stats, fs_stats, resource)
        case _:
            assert_never(spec.ranking)


def rank_pods_with_keys(
    signal: Signal, layout: FsLayout, pods: Sequence[Pod], stats_of: StatsOf
) -> tuple[tuple[Pod, ...], tuple[SortKey, ...]]:
    """Return `rank_pods`' order and, in the same order, the key each pod was sorted by (`named_key_parts`
    names its parts), so that whoever shows the ranking need not compute the keys again."""
    key_of = _sort_key_of(signal, layout)
    keys = [key_of(pod, stats_of(pod)) for pod in pods]
    order = sorted(range(len(keys)), key=keys.__getitem__)  # stable, as sorting the pods by their keys
    return tuple(pods[i] for i in order), tuple(keys[i] for i in order)


def rank_pods(signal: Signal, layout: FsLayout, pods: Sequence[Pod], stats_of: StatsOf) -> list[Pod]:
    """Return `pods` ordered for eviction under pressure on `signal` (first = evicted first), by the signal's
    `Ranking`: memory (exceeds requests, priority, usage), pids (priority, processes), disk (exceeds requests,
    priority, usage over `layout`'s fs stats, bytes or inodes)."""
    return list(rank_pods_with_keys(signal, layout, pods, stats_of)[0])


def sort_key(signal: Signal, layout: FsLayout, pod: Pod, stats: PodStats | None) -> SortKey:
    """Return the key `rank_pods` sorts `pod` by under pressure on `signal`."""
    return _sort_key_of(signal, layout)(pod, stats)


# A part of a sort key as plain data: a flag or number (usage above request: negated back), None without stats.
KeyPart = bool | int | Fraction | None
# The names of a sort key's parts: memory and disk signals, pid.available.
_PARTS = ("exceedsRequests", "priority", "usageAboveRequest")
_PID_PARTS = ("priority", "processes")


def key_part_names(signal: Signal) -> tuple[str, ...]:
    """The names of the parts of a sort key for `signal`, in order (`key_parts`)."""
    return _PID_PARTS if signal is Signal.PID_AVAILABLE else _PARTS


def key_parts(signal: Signal, key: SortKey) -> tuple[KeyPart, ...]:
    """Return the parts of a `rank_pods_with_keys` key as plain data, in `key_part_names` order (None where the pod
    had no stats). Called for every ranked pod every cycle by the recorder."""
    if signal is Signal.PID_AVAILABLE:
        priority, processes = cast(tuple[int, _Key], key)
        return priority, None if processes[0] != _HAS_STATS else _plain(processes[1])
    exceeds, priority, usage = cast(tuple[_Key, int, _Key], key)
    above = usage[1]  # an int, most often: negated back here, without a call
    return (None if exceeds[0] != _HAS_STATS else exceeds[1] == _TRUE_FLAG, priority,
            None if usage[0] != _HAS_STATS else -above if type(above) is int else _plain(above))


def named_key_parts(signal: Signal, key: SortKey) -> dict[str, KeyPart]:
    """Return `key_parts` by name."""
    return dict(zip(key_part_names(signal), key_parts(signal, key), strict=True))


_TRUE_FLAG = _flag(True)


def _plain(negated: _Number) -> int | Fraction:
    """A usage key's value negated back: an int where whole."""
    return -negated if type(negated) is int or negated.denominator != 1 else -negated.numerator


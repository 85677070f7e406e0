"""Local-storage limit evictions (KUBELET_SPEC §12; eviction_manager.go localStorageEviction).

Which pods break an emptyDir ``sizeLimit``, the pod's or a container's ephemeral-storage limit, with message and
metric label. Every pod with stats is checked (several may go in one cycle); per pod emptyDir -> pod -> container,
the first that fires wins; critical pods are never listed; usage must exceed the limit; input order is kept. Always
the 1 s override, no DisruptionTarget condition and no Event annotations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evictd.core.fs_layout import FsLayout, meaning_of
from evictd.core.messages import (
    container_ephemeral_limit_message,
    emptydir_limit_message,
    pod_ephemeral_limit_message,
)
from evictd.core.pods import Derived, Pod, derived, is_critical_pod
from evictd.core.quantity import Quantity
from evictd.core.resources import pod_limit
from evictd.core.signals import (
    CONTAINER_EPHEMERAL_LIMIT_SIGNAL,
    EMPTYDIR_LIMIT_SIGNAL,
    POD_EPHEMERAL_LIMIT_SIGNAL,
    Resource,
)
from evictd.core.summary import PodStats

EMPTY_DIR_KIND = "emptyDir"


@dataclass(frozen=True, slots=True)
class LocalStorageEviction:
    """One pod to evict for a local-storage limit: `signal` is the metric label, `message` the status text."""

    pod: Pod
    signal: str
    message: str


def _limited_emptydirs(pod: Pod) -> tuple[tuple[str, Quantity], ...]:
    """Return (volume name, sizeLimit) of the pod's emptyDir volumes with a positive sizeLimit, in order."""
    return tuple(
        (volume.name, volume.empty_dir_size_limit)
        for volume in pod.volumes
        if volume.kind == EMPTY_DIR_KIND
        and volume.empty_dir_size_limit is not None
        and volume.empty_dir_size_limit.sign() == 1
    )


def _emptydir_eviction(pod: Pod, stats: PodStats) -> LocalStorageEviction | None:
    limited = derived(pod, Derived.LIMITED_EMPTYDIRS, _limited_emptydirs)
    if not limited:
        return None
    # Upstream's name -> usage map: a later entry wins; a nil usedBytes (which would crash the kubelet) is unknown.
    used_by_volume: dict[str, int | None] = {v.name: v.used_bytes for v in stats.volume_stats}
    for name, size_limit in limited:
        used_bytes = used_by_volume.get(name)
        if used_bytes is not None and used_bytes > size_limit.value:
            return LocalStorageEviction(pod, EMPTYDIR_LIMIT_SIGNAL, emptydir_limit_message(name, size_limit))
    return None


def _pod_limit_eviction(pod: Pod, stats: PodStats) -> LocalStorageEviction | None:
    limit = pod_limit(pod, Resource.EPHEMERAL_STORAGE.value)
    if limit is None:
        return None
    usage = (stats.ephemeral_storage.used_bytes if stats.ephemeral_storage is not None else None) or 0
    if usage > limit.value:
        return LocalStorageEviction(pod, POD_EPHEMERAL_LIMIT_SIGNAL, pod_ephemeral_limit_message(limit))
    return None


def _container_limits(pod: Pod) -> dict[str, Quantity]:
    """Return container name -> ephemeral-storage limit of the regular containers whose limit (rounded up) is not 0."""
    limits: dict[str, Quantity] = {}
    for container in pod.containers:
        limit = container.limits.get(Resource.EPHEMERAL_STORAGE.value)
        if limit is not None and limit.ceil_int() != 0:
            limits[container.name] = limit
    return limits


def _container_limit_eviction(pod: Pod, stats: PodStats, rootfs_counts: bool) -> LocalStorageEviction | None:
    limits = derived(pod, Derived.CONTAINER_STORAGE_LIMITS, _container_limits)
    if not limits:
        return None
    # Walk the stats (not the spec), as upstream does: the first offending container in stats order wins.
    for container_stats in stats.containers:
        usage = 0
        if container_stats.logs is not None:
            usage += container_stats.logs.used_bytes or 0
        if rootfs_counts and container_stats.rootfs is not None:
            usage += container_stats.rootfs.used_bytes or 0
        limit = limits.get(container_stats.name)
        if limit is not None and limit.value < usage:
            return LocalStorageEviction(
                pod,
                CONTAINER_EPHEMERAL_LIMIT_SIGNAL,
                container_ephemeral_limit_message(container_stats.name, limit),
            )
    return None


def _storage_limited(pod: Pod) -> bool:
    """Whether any local-storage limit of the pod can evict it (a limited emptyDir, a pod or container limit)."""
    return bool(derived(pod, Derived.LIMITED_EMPTYDIRS, _limited_emptydirs)) or \
        pod_limit(pod, Resource.EPHEMERAL_STORAGE.value) is not None or \
        bool(derived(pod, Derived.CONTAINER_STORAGE_LIMITS, _container_limits))


def local_storage_evictions(
    pods: Sequence[Pod], stats_of: Callable[[Pod], PodStats | None], layout: FsLayout
) -> list[LocalStorageEviction]:
    """Return this cycle's local-storage limit evictions, in the order of `pods` (without stats or critical:
    skipped). A writable layer counts where `layout` has it on nodefs; logs always count."""
    rootfs_counts = meaning_of(layout).container_rootfs_counts
    evictions: list[LocalStorageEviction] = []
    for pod in pods:
        if not derived(pod, Derived.STORAGE_LIMITED, _storage_limited):
            continue  # most pods, every cycle: nothing to compare
        stats = stats_of(pod)
        if stats is None or is_critical_pod(pod):
            continue
        eviction = (
            _emptydir_eviction(pod, stats)
            or _pod_limit_eviction(pod, stats)
            or _container_limit_eviction(pod, stats, rootfs_counts)
        )
        if eviction is not None:
            evictions.append(eviction)
    return evictions

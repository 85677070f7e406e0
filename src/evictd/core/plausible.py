"""Figures a stats source cannot have measured: refused one by one, each named with its value and bound.

Returns a Summary with every impossible figure made unknown (None) and a `Refusal` for each; the kubelet trusts
them (a cAdvisor working set 3x the machine evicted every pod). Bounds (docs/kubelet-differences.md): node, pods
container, pod and container memory at most MemTotal plus `MEMORY_SLACK`; a filesystem's available at most its
capacity, free inodes at most its inodes; a pod's disk figures at most the largest filesystem reported (memory
volumes: the memory bound). Undecodable figures come from the source as Refusals too (`refusal_of_decode`).

Invariants: pure; never mutates its input; nothing refused returns the same object; a refused figure is absent, so
its signals are absent and a pod with a refused working set ranks as using no memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any, TypeVar

from evictd.core.errors import DecodeError
from evictd.core.summary import ContainerStats, FsStats, MemoryStats, PodStats, Summary, VolumeStats

# Excess over MemTotal still plausible: memory reserved at boot (a v1 root's usage counts it) or hot-added since.
MEMORY_SLACK = Fraction(1, 10)

INVALID = "invalid"
IMPOSSIBLE = "impossible"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A figure made unknown: where (`field`, with the pod named: ``pods[default/web].memory.workingSetBytes``),
    its `value`, why (`kind`: INVALID or IMPOSSIBLE, `reason`) and the `bound` it broke (None: not a bound).
    `family` is the field without the pod (``pods.memory.workingSetBytes``), for a metric label."""

    field: str
    value: object
    kind: str
    reason: str
    bound: int | None = None
    family: str = ""


def refusal_of_decode(error: DecodeError) -> Refusal:
    """The Refusal of a figure a source could not decode (its path as the field)."""
    return Refusal(field=error.key, value=error.value, kind=INVALID, reason=error.reason, family=_family(error.key))


def _family(field: str) -> str:
    """The field without list positions or pod names (``pods[3].containers[0].x`` -> ``pods.containers.x``)."""
    parts = []
    depth = 0
    for char in field:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif depth == 0:
            parts.append(char)
    return "".join(parts)


def memory_bound(capacity_bytes: int) -> int:
    """The largest memory figure that can be true on a node of `capacity_bytes` (MemTotal)."""
    return int(capacity_bytes * (1 + MEMORY_SLACK))


def plausible_summary(summary: Summary, memory_capacity_bytes: int | None) -> tuple[Summary, tuple[Refusal, ...]]:
    """Return `summary` without its impossible figures (None instead), and a Refusal for each
    (`memory_capacity_bytes` None: memory not bounded)."""
    refused: list[Refusal] = []
    bound = memory_bound(memory_capacity_bytes) if memory_capacity_bytes else None
    node = summary.node
    memory = _memory(node.memory, bound, "node.memory", refused, available_too=True)
    fs = _fs(node.fs, "node.fs", refused)
    image_fs = _fs(node.image_fs, "node.runtime.imageFs", refused)
    container_fs = _fs(node.container_fs, "node.runtime.containerFs", refused)
    system = {name: _container(stats, bound, None, f"node.systemContainers[{name}]", refused, available_too=True)
              for name, stats in node.system_containers.items()}
    if refused:
        node = replace(node, memory=memory, fs=fs, image_fs=image_fs, container_fs=container_fs,
                       system_containers=MappingProxyType(system))
    pods = summary.pods
    disk = _disk_bounds((fs, image_fs, container_fs), bound)
    if bound is not None or disk is not None:
        checked = tuple(pod if _pod_fits(pod, bound, disk) else _pod(pod, bound, disk, refused) for pod in pods)
        if any(new is not old for new, old in zip(checked, pods, strict=True)):
            pods = checked
    if not refused:
        return summary, ()
    return Summary(node=node, pods=pods), tuple(refused)


@dataclass(frozen=True, slots=True)
class DiskBounds:
    """The most a pod's disk figures can be: bytes and inodes of the largest filesystem the node reports (a volume
    also the memory bound: a memory-backed emptyDir lives in the node's memory)."""

    bytes: int
    inodes: int | None


def _disk_bounds(filesystems: tuple[FsStats | None, ...], memory: int | None) -> DiskBounds | None:
    capacities = [fs.capacity_bytes for fs in filesystems if fs is not None and fs.capacity_bytes is not None]
    if not capacities:
        return None
    inodes = [fs.inodes for fs in filesystems if fs is not None and fs.inodes is not None]
    return DiskBounds(max(capacities + ([memory] if memory is not None else [])), max(inodes) if inodes else None)


def _pod_fits(pod: PodStats, bound: int | None, disk: DiskBounds | None) -> bool:
    """True when `_pod` would refuse none of the pod's figures (the same bounds, nothing named: the common case)."""
    if bound is not None:
        memory = pod.memory
        if memory is not None and not _memory_fits(memory, bound):
            return False
        for container in pod.containers:
            if container.memory is not None and not _memory_fits(container.memory, bound):
                return False
    if disk is None:
        return True
    most, inodes = disk.bytes, disk.inodes
    for container in pod.containers:
        if not _used_fits(container.rootfs, most, inodes) or not _used_fits(container.logs, most, inodes):
            return False
    for volume in pod.volume_stats:
        if not _used_fits(volume, most, inodes):
            return False
    return _used_fits(pod.ephemeral_storage, most, inodes)


def _memory_fits(memory: MemoryStats, bound: int) -> bool:
    """True when `_memory` (available_too False) would refuse nothing of `memory`."""
    working_set, usage = memory.working_set_bytes, memory.usage_bytes
    return (working_set is None or working_set <= bound) and (usage is None or usage <= bound)


def _used_fits(figures: FsStats | VolumeStats | None, most: int, inodes: int | None) -> bool:
    """True when `_used` would refuse nothing of `figures` (bounds `most` bytes and `inodes`)."""
    if figures is None:
        return True
    used, inodes_used = figures.used_bytes, figures.inodes_used
    return ((used is None or used <= most)
            and (inodes is None or inodes_used is None or inodes_used <= inodes))


def _pod(pod: PodStats, bound: int | None, disk: DiskBounds | None, refused: list[Refusal]) -> PodStats:
    ref = pod.pod_ref
    where = f"pods[{ref.namespace}/{ref.name}]"
    memory = _memory(pod.memory, bound, f"{where}.memory", refused, available_too=False)
    containers = tuple(_container(c, bound, disk, f"{where}.containers[{c.name}]", refused, available_too=False)
                       for c in pod.containers)
    volumes = tuple(_used(v, disk, f"{where}.volume[{v.name}]", refused) or v for v in pod.volume_stats)
    ephemeral = _used(pod.ephemeral_storage, disk, f"{where}.ephemeral-storage", refused)
    if (memory is pod.memory and ephemeral is pod.ephemeral_storage
            and all(new is old for new, old in zip(containers, pod.containers, strict=True))
            and all(new is old for new, old in zip(volumes, pod.volume_stats, strict=True))):
        return pod
    return replace(pod, memory=memory, containers=containers, volume_stats=volumes, ephemeral_storage=ephemeral)


def _container(stats: ContainerStats, bound: int | None, disk: DiskBounds | None, where: str, refused: list[Refusal],
               *, available_too: bool) -> ContainerStats:
    memory = _memory(stats.memory, bound, f"{where}.memory", refused, available_too=available_too)
    rootfs = _used(stats.rootfs, disk, f"{where}.rootfs", refused)
    logs = _used(stats.logs, disk, f"{where}.logs", refused)
    if memory is stats.memory and rootfs is stats.rootfs and logs is stats.logs:
        return stats
    return replace(stats, memory=memory, rootfs=rootfs, logs=logs)


Figures = TypeVar("Figures", MemoryStats, FsStats, VolumeStats)


def _used(figures: Figures | None, disk: DiskBounds | None, where: str,
          refused: list[Refusal]) -> Figures | None:
    """`figures` (a pod's filesystem or volume block) without a used figure above what the node could hold."""
    if figures is None or disk is None:
        return figures
    checks = (("usedBytes", "used_bytes", disk.bytes), ("inodesUsed", "inodes_used", disk.inodes))
    return _without_above(figures, checks, where, "above the largest filesystem of the node", refused)


def _without_above(figures: Figures, checks: Iterable[tuple[str, str, int | None]], where: str, reason: str,
                   refused: list[Refusal]) -> Figures:
    """`figures` with each figure above its bound made None (checks: name, attribute, bound), and a Refusal each."""
    changes: dict[str, Any] = {}
    for name, attribute, most in checks:
        value = getattr(figures, attribute)
        if value is not None and most is not None and value > most:
            field = f"{where}.{name}"
            refused.append(Refusal(field, value, IMPOSSIBLE, reason, most, _family(field)))
            changes[attribute] = None
    return replace(figures, **changes) if changes else figures


# (JSON name, dataclass field) of the memory figures bounded by the node's capacity.
_MEMORY_FIGURES = (("workingSetBytes", "working_set_bytes"), ("usageBytes", "usage_bytes"))
_AVAILABLE_FIGURE = ("availableBytes", "available_bytes")


def _memory(memory: MemoryStats | None, bound: int | None, where: str, refused: list[Refusal], *,
            available_too: bool) -> MemoryStats | None:
    """`memory` without its figures above `bound` (a pod's availableBytes, never read, is not bounded)."""
    if memory is None or bound is None:
        return memory
    names = _MEMORY_FIGURES + ((_AVAILABLE_FIGURE,) if available_too else ())
    return _without_above(memory, ((name, attribute, bound) for name, attribute in names), where,
                          "above the node's memory capacity", refused)


def _fs(fs: FsStats | None, where: str, refused: list[Refusal]) -> FsStats | None:
    """`fs` without a free figure above its own capacity figure."""
    if fs is None:
        return None
    return _without_above(fs, (("availableBytes", "available_bytes", fs.capacity_bytes),
                               ("inodesFree", "inodes_free", fs.inodes)), where, "above the filesystem's capacity",
                          refused)

"""Figures a stats source cannot have measured: refused one by one, each named with its value and bound.

Job: given a Summary (from any source: the node's cgroupfs, the kubelet's Summary API, the runtime's CRI stats
behind either) and the node's memory capacity, return the same Summary with every impossible figure made unknown
(None), and a `Refusal` for each. The kubelet trusts these figures (a node working set 3x the machine, the 2026
cAdvisor cgroup v2 bug, gave nodes a false MemoryPressure and evicted every pod); evictd does not decide on them.
Figures a source could not decode at all (a negative counter, cAdvisor's uint64 wrap) are refused by the source
(`evictd.core.summary_parser.summary_read`) and become Refusals here too (`refusal_of_decode`).

The bounds (docs/kubelet-differences.md lists them):
* node memory (and the `pods` system container's): working set, usage and available at most the node's memory
  capacity (MemTotal) plus MEMORY_SLACK;
* a filesystem: available bytes at most its capacity bytes, free inodes at most its inodes;
* a pod's (and a container's) working set and usage at most the node's memory capacity plus MEMORY_SLACK;
* a pod's disk figures (a container's rootfs and logs, a volume, the pod's ephemeral storage: used bytes and used
  inodes) at most the largest the node could hold: the largest filesystem the Summary reports (nodefs, imagefs,
  containerfs) or, for a memory-backed volume, the memory bound. The kubelet trusts them: a runtime's uint64 wrap
  of a writable layer's size (2^64 - 1) would evict its pod for exceeding its ephemeral-storage limit, or rank it
  first for disk pressure. Not bounded when the Summary reports no filesystem capacity.

Invariants: pure (no I/O); never mutates its input; a Summary with nothing to refuse is returned as the very
same object; a refused figure is None afterwards, so signals built on it are absent, as for a figure never read,
and a pod whose working set is refused is ranked as a pod whose cgroup could not be read: as using no memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any, TypeVar

from evictd.core.errors import DecodeError
from evictd.core.summary import ContainerStats, FsStats, MemoryStats, PodStats, Summary, VolumeStats

# A figure may exceed the machine's MemTotal by this share before it is impossible: MemTotal excludes memory the
# kernel reserved at boot, which a cgroup v1 root's usage can count, and memory hot-added since evictd read it.
# A real excess is a few percent at most; the cAdvisor bug above was 200%.
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
    """Return `summary` without its impossible figures (None instead), and a Refusal for each.

    `memory_capacity_bytes`: the node's MemTotal (None: unknown, memory figures are not bounded)."""
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
    """True when `_pod` would refuse none of the pod's figures: the same bounds, compared without naming anything
    (the check of a thousand pods every cycle, nearly always sound)."""
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
    """`figures` with each figure above its bound (checks: JSON name, attribute, bound; None: no bound) made None,
    and a Refusal for each."""
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
    """`memory` without its figures above `bound` (a pod's availableBytes is its limit's headroom, which the
    kubelet never reads: not bounded here)."""
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

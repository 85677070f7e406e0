"""A pod's disk figures as Summary blocks: what the node's Summary (`evictd.adapters.node_stats`) puts in each pod's
stats from the disk walker's figures (`evictd.adapters.pod_disk_usage`).

Invariants: pure translation, no I/O; the blocks of one `PodDiskFigures` object are built once and reused while the
store hands out the same object.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from evictd.adapters.pod_disk_usage import PodDiskFigures
from evictd.core.summary import ContainerStats, FsStats, VolumeStats


@dataclass(frozen=True, slots=True)
class DiskBlocks:
    """A pod's disk figures as Summary blocks, stamped with their measurement time, built once per `PodDiskFigures`
    object (an unchanged pod costs nothing). `log_containers`: each log folder as a container entry;
    `ephemeral_storage`: volumes + logs, without writable layers."""

    figures: PodDiskFigures
    measured_at: datetime
    volume_stats: tuple[VolumeStats, ...]
    used_bytes: int
    inodes_used: int
    log_containers: tuple[ContainerStats, ...]
    ephemeral_storage: FsStats


def disk_blocks(figures: PodDiskFigures) -> DiskBlocks:
    """Return the Summary blocks of a pod's disk figures, all stamped with the time they were measured."""
    at = datetime.fromtimestamp(figures.measured_at_wall, UTC)
    used = sum(usage.used_bytes for _, usage in figures.volumes) + sum(usage.used_bytes for _, usage in figures.logs)
    inodes = (sum(usage.inodes_used for _, usage in figures.volumes)
              + sum(usage.inodes_used for _, usage in figures.logs))
    return DiskBlocks(
        figures=figures,
        measured_at=at,
        volume_stats=tuple(VolumeStats(name=name, time=at, used_bytes=usage.used_bytes, inodes_used=usage.inodes_used)
                           for name, usage in figures.volumes),
        used_bytes=used,
        inodes_used=inodes,
        log_containers=tuple(ContainerStats(name=name, logs=FsStats(time=at, used_bytes=usage.used_bytes,
                                                                    inodes_used=usage.inodes_used))
                             for name, usage in figures.logs),
        ephemeral_storage=FsStats(time=at, used_bytes=used, inodes_used=inodes),
    )

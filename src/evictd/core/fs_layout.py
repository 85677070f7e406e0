"""The node's filesystem layout, and everything it changes in eviction, in one table (KUBELET_SPEC §4.2).

The kubelet builds four things from `HasDedicatedImageFs` and `IsContainerFsSeparateFromImageFs`, each in
its own place: where `containerfs.*` thresholds are copied from (`UpdateContainerFsThresholds`), which
filesystem usage of a pod ranks it for each disk signal (`buildSignalToRankFunc`), which node-level reclaim
functions run for each signal (`buildSignalToNodeReclaimFuncs`), and whether a container's writable layer
counts against its ephemeral-storage limit (`containerEphemeralStorageLimitEviction`). evictd keeps the four
in `MEANINGS`, one row per layout, and the rest of the core reads them there (`meaning_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from evictd.core.signals import Filesystem, Reading, Signal, spec_of


@dataclass(frozen=True, slots=True)
class FsLayout:
    """How the node's filesystems are laid out (KUBELET_SPEC §4.2): `dedicated_imagefs` (images on another device
    than nodefs), `split_containerfs` (writable layers apart from images)."""

    dedicated_imagefs: bool = False
    split_containerfs: bool = False


class FsStatsType(StrEnum):
    """Which parts of a pod's disk usage a disk rank function measures (upstream fsStatsType)."""

    ROOT = "root"
    LOGS = "logs"
    LOCAL_VOLUME_SOURCE = "localVolumeSource"
    # Listed by upstream for image filesystems, but no code path reads it: it adds nothing.
    IMAGES = "images"


class ReclaimAction(StrEnum):
    """A node-level reclaim function (KUBELET_SPEC §8)."""

    CONTAINER_GC = "containerGC"
    IMAGE_GC = "imageGC"
    # evictd's own reclaim before evict (`evictd.core.memory_reclaim`); never in a layout's reclaim actions.
    MEMORY_RECLAIM = "memoryReclaim"


@dataclass(frozen=True, slots=True)
class LayoutMeaning:
    """What one filesystem layout means to eviction: `containerfs_sources` (each `containerfs.*` signal's source),
    `rank_fs_stats` (what each disk rank function measures), `reclaim_actions` (node-level reclaim per signal, in call
    order), `container_rootfs_counts` (a writable layer counts against its limit; logs always do)."""

    containerfs_sources: Mapping[Signal, Signal]
    rank_fs_stats: Mapping[Signal, tuple[FsStatsType, ...]]
    reclaim_actions: Mapping[Signal, tuple[ReclaimAction, ...]]
    container_rootfs_counts: bool


_T = TypeVar("_T")


def _signals_on(filesystem: Filesystem) -> dict[Reading, Signal]:
    """The signals observing `filesystem`, by what they read of it (bytes, inodes): from the signals' specs."""
    return {spec_of(signal).reading: signal for signal in Signal if spec_of(signal).filesystem is filesystem}


def _per_fs(nodefs: _T, imagefs: _T, containerfs: _T) -> dict[Signal, _T]:
    """A row of the table for every disk signal: the value for nodefs, imagefs and containerfs signals."""
    by_filesystem = {Filesystem.NODEFS: nodefs, Filesystem.IMAGEFS: imagefs, Filesystem.CONTAINERFS: containerfs}
    return {signal: value for filesystem, value in by_filesystem.items() for signal in _signals_on(filesystem).values()}


def _containerfs_from(source: Filesystem) -> dict[Signal, Signal]:
    """Each containerfs signal and the signal of `source` reading the same figure (UpdateContainerFsThresholds)."""
    on_source = _signals_on(source)
    return {signal: on_source[reading] for reading, signal in _signals_on(Filesystem.CONTAINERFS).items()}


# containerfs derivation (UpdateContainerFsThresholds)
CONTAINERFS_FROM_NODEFS: dict[Signal, Signal] = _containerfs_from(Filesystem.NODEFS)
CONTAINERFS_FROM_IMAGEFS: dict[Signal, Signal] = _containerfs_from(Filesystem.IMAGEFS)

# ranking (buildSignalToRankFunc, KUBELET_SPEC §9.4)
_ALL_FS_STATS = (FsStatsType.IMAGES, FsStatsType.ROOT, FsStatsType.LOGS, FsStatsType.LOCAL_VOLUME_SOURCE)
_POD_FS_STATS = (FsStatsType.LOGS, FsStatsType.LOCAL_VOLUME_SOURCE)
_LAYER_FS_STATS = (FsStatsType.ROOT, FsStatsType.IMAGES)
SINGLE_FS_SIGNAL_TO_FS_STATS = _per_fs(_ALL_FS_STATS, _ALL_FS_STATS, _ALL_FS_STATS)
IMAGEFS_SIGNAL_TO_FS_STATS = _per_fs(_POD_FS_STATS, _LAYER_FS_STATS, _LAYER_FS_STATS)
# With split image and container filesystems, imagefs ranking measures only "images": nothing.
SPLIT_FS_SIGNAL_TO_FS_STATS = _per_fs((*_POD_FS_STATS, FsStatsType.ROOT), (FsStatsType.IMAGES,),
                                      (*_POD_FS_STATS, FsStatsType.ROOT))

# node-level reclaim (buildSignalToNodeReclaimFuncs, KUBELET_SPEC §8)
_GC_BOTH = (ReclaimAction.CONTAINER_GC, ReclaimAction.IMAGE_GC)
SINGLE_FS_SIGNAL_TO_RECLAIM = _per_fs(_GC_BOTH, _GC_BOTH, _GC_BOTH)
# With an imagefs, nodefs pressure has nothing to collect (the kubelet would delete logs).
IMAGEFS_SIGNAL_TO_RECLAIM = _per_fs((), _GC_BOTH, _GC_BOTH)
SPLIT_FS_SIGNAL_TO_RECLAIM = _per_fs((ReclaimAction.CONTAINER_GC,), (ReclaimAction.IMAGE_GC,),
                                     (ReclaimAction.CONTAINER_GC,))

# --- the table ------------------------------------------------------------------------------------------

MEANINGS: dict[FsLayout, LayoutMeaning] = {
    # One filesystem for everything.
    FsLayout(): LayoutMeaning(CONTAINERFS_FROM_NODEFS, SINGLE_FS_SIGNAL_TO_FS_STATS, SINGLE_FS_SIGNAL_TO_RECLAIM,
                              container_rootfs_counts=True),
    # Writable layers apart, images on nodefs: not seen in practice; upstream treats it as one filesystem.
    FsLayout(split_containerfs=True): LayoutMeaning({}, SINGLE_FS_SIGNAL_TO_FS_STATS, SINGLE_FS_SIGNAL_TO_RECLAIM,
                                                    container_rootfs_counts=True),
    # Images and writable layers on a dedicated image filesystem.
    FsLayout(dedicated_imagefs=True): LayoutMeaning(CONTAINERFS_FROM_IMAGEFS, IMAGEFS_SIGNAL_TO_FS_STATS,
                                                    IMAGEFS_SIGNAL_TO_RECLAIM, container_rootfs_counts=False),
    # Images on a dedicated image filesystem, writable layers apart from them (containerfs, with nodefs).
    FsLayout(dedicated_imagefs=True, split_containerfs=True): LayoutMeaning(
        CONTAINERFS_FROM_NODEFS, SPLIT_FS_SIGNAL_TO_FS_STATS, SPLIT_FS_SIGNAL_TO_RECLAIM,
        container_rootfs_counts=False),
}


def meaning_of(layout: FsLayout) -> LayoutMeaning:
    """Return what `layout` means to eviction (every layout has a row)."""
    return MEANINGS[layout]

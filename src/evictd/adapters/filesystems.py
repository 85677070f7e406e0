"""Filesystem capacity readings (statvfs) and the node's filesystem layout.

Wraps ``statfs(2)``/``stat(2)`` for the nodefs, imagefs and containerfs signals (KUBELET_SPEC §1) and detects
dedicated image and container filesystems (§4.2). Fields as the kubelet's ``pkg/volume/util/fs`` ``Info``:
capacity ``f_blocks``, available ``f_bavail``, used ``f_blocks - f_bfree`` (times ``f_frsize``), inodes ``f_files``
and ``f_ffree`` (reserved blocks make used + available < capacity). Every OS failure becomes ``SampleError(path,
reason)``: no observation, never a guess.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from evictd.core.errors import SampleError, os_error_reason
from evictd.core.fs_layout import FsLayout


@dataclass(frozen=True, slots=True)
class FsReading:
    """One statfs reading of the filesystem holding a path."""

    capacity_bytes: int
    available_bytes: int
    used_bytes: int
    inodes: int
    inodes_free: int
    inodes_used: int


def statvfs_reading(path: str) -> FsReading:
    """Return the capacity, availability and inode counts of the filesystem holding `path`; SampleError(path,
    reason) when it cannot be queried."""
    try:
        vfs = os.statvfs(path)
    except OSError as exc:
        raise SampleError(path, os_error_reason(exc)) from exc
    return FsReading(
        capacity_bytes=vfs.f_blocks * vfs.f_frsize,
        available_bytes=vfs.f_bavail * vfs.f_frsize,
        used_bytes=(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize,
        inodes=vfs.f_files,
        inodes_free=vfs.f_ffree,
        # No fixed inode table (btrfs, some FUSE) reports 0 and 0; clamp so the difference cannot go negative.
        inodes_used=max(vfs.f_files - vfs.f_ffree, 0),
    )


def detect_layout(kubelet_root: str, imagefs_path: str, containerfs_path: str) -> FsLayout:
    """Return the node's filesystem layout from the ``st_dev`` of three paths: ``dedicated_imagefs``
    (HasDedicatedImageFs), ``split_containerfs`` (HasDedicatedContainerFs). SampleError names the first path that
    cannot be stat'ed."""
    root_dev = _device(kubelet_root)
    image_dev = _device(imagefs_path)
    container_dev = _device(containerfs_path)
    return FsLayout(dedicated_imagefs=image_dev != root_dev, split_containerfs=container_dev != image_dev)


def _device(path: str) -> int:
    try:
        return os.stat(path).st_dev
    except OSError as exc:
        raise SampleError(path, os_error_reason(exc)) from exc

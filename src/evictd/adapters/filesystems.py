"""Filesystem capacity readings (statvfs) and the node's filesystem layout.

Job: wrap ``statfs(2)``/``stat(2)`` for the nodefs, imagefs and containerfs signals (KUBELET_SPEC §1) and
detect whether images and writable layers sit on their own devices (KUBELET_SPEC §4.2).

Invariants:
* Field meanings follow the kubelet's ``pkg/volume/util/fs`` ``Info`` (the Summary API fs stats):
  ``capacity_bytes = f_blocks * f_frsize``, ``available_bytes = f_bavail * f_frsize`` (what an unprivileged
  writer can still use), ``used_bytes = (f_blocks - f_bfree) * f_frsize`` (what ``df`` shows as "Used"),
  ``inodes = f_files``, ``inodes_free = f_ffree``, ``inodes_used = f_files - f_ffree``. Because of reserved
  blocks, ``used_bytes + available_bytes`` may be less than ``capacity_bytes``.
* Every OS failure becomes ``SampleError(path, reason)``: a filesystem that cannot be read yields no
  observation, never a guess.
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
    """Return the capacity, availability and inode counts of the filesystem that holds `path`.

    Raises SampleError(path, reason) when `path` cannot be opened or its filesystem cannot be queried.
    """
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
        # Filesystems without a fixed inode table (btrfs, some FUSE ones) report f_files 0 and f_ffree 0;
        # the difference never goes negative for any real filesystem, but clamp so it cannot.
        inodes_used=max(vfs.f_files - vfs.f_ffree, 0),
    )


def detect_layout(kubelet_root: str, imagefs_path: str, containerfs_path: str) -> FsLayout:
    """Return the node's filesystem layout by comparing the devices (``st_dev``) of three paths.

    ``dedicated_imagefs``: the image filesystem is on another device than the kubelet root directory
    (the kubelet's ``HasDedicatedImageFs``). ``split_containerfs``: the container (writable layer)
    filesystem is on another device than the image filesystem (``HasDedicatedContainerFs``).
    Raises SampleError naming the first path that cannot be stat'ed.
    """
    root_dev = _device(kubelet_root)
    image_dev = _device(imagefs_path)
    container_dev = _device(containerfs_path)
    return FsLayout(dedicated_imagefs=image_dev != root_dev, split_containerfs=container_dev != image_dev)


def _device(path: str) -> int:
    try:
        return os.stat(path).st_dev
    except OSError as exc:
        raise SampleError(path, os_error_reason(exc)) from exc

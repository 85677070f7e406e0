"""The kubelet's cgroup drivers (--cgroup-driver / KubeletConfiguration.cgroupDriver), by name.

Apart from `evictd.adapters.cgroups`, which uses them to find pod cgroups, so that reading a configuration
(`evictd check-config`, `simulate`) does not load the cgroup readers.
"""

from __future__ import annotations

from enum import StrEnum


class CgroupDriver(StrEnum):
    """The cgroup drivers the kubelet knows (--cgroup-driver / KubeletConfiguration.cgroupDriver)."""

    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"

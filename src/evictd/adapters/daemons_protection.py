"""The machine's side of evictd's protection of the daemons (`evictd.core.daemons_protection`): system.slice's
``memory.low`` and ``memory.min`` read, ``memory.low`` written, and whether the kernel lets a slice's protection
reach its services.

system.slice sits at the memory hierarchy's root (as `evictd.adapters.node_protection` places it). Reads never raise
(`NodeLow.problem` says what failed); a write raises SampleError. cgroup2's ``memory_recursiveprot`` is a mount
option of the hierarchy (cgroup-v2.rst), read from ``/proc/self/mountinfo``: systemd 247+ mounts it so.
"""

from __future__ import annotations

import os
from pathlib import Path

from evictd.adapters.cgroups import CgroupLayout, cgroup_folder
from evictd.adapters.memory_reclaim import write_cgroup_value
from evictd.adapters.node_protection import cgroup_protection
from evictd.core.daemons_protection import V1_REASON, NodeLow
from evictd.core.errors import SampleError
from evictd.core.node_protection import SYSTEM_SLICE, CgroupFile, memory_file_bytes

RECURSIVE_PROTECTION = "memory_recursiveprot"


def system_slice_low_path(layout: CgroupLayout) -> str:
    return cgroup_folder(str(layout.memory_hierarchy), SYSTEM_SLICE) + "/memory.low"


def _bytes(file: CgroupFile) -> tuple[int | None, str]:
    if file.text is None:
        return 0, f"{file.path}: {file.problem}"
    try:
        return memory_file_bytes(file.text), ""
    except ValueError as exc:
        return 0, f"{file.path}: {exc}"


def read_node_low(layout: CgroupLayout) -> NodeLow:
    """system.slice's memory.low and memory.min now (never raises)."""
    protection = cgroup_protection(str(layout.memory_hierarchy), SYSTEM_SLICE)
    low, low_problem = _bytes(protection.low)
    least, min_problem = _bytes(protection.min)
    return NodeLow(low, least, low_problem or min_problem)


def write_node_low(layout: CgroupLayout, value: int) -> None:
    """Write `value` bytes to system.slice's memory.low. Raises SampleError (EAGAIN too: memory.low never asks for
    a retry)."""
    path = system_slice_low_path(layout)
    if not write_cgroup_value(path, value):
        raise SampleError(path, "the kernel asked to try again (EAGAIN)")


def _mount_options(mountinfo: str, mount_point: str) -> set[str] | None:
    """The options (the mount's and the superblock's) of the cgroup2 mount at `mount_point`, None: none there."""
    found = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, super_fields = left.split(), right.split()
        if len(fields) < 6 or len(super_fields) < 3 or super_fields[0] != "cgroup2":
            continue
        point = fields[4].replace("\\040", " ")
        if point == mount_point:  # the last mount at the point is the one seen
            found = set(fields[5].split(",")) | set(super_fields[2].split(","))
    return found


def protection_unavailable(layout: CgroupLayout, proc_root: str = "/proc") -> str | None:
    """Why evictd cannot protect the daemons with system.slice's memory.low here (None: it can)."""
    if layout.version != 2:
        return V1_REASON
    if not Path(system_slice_low_path(layout)).exists():
        return f"no {system_slice_low_path(layout)}"
    try:
        mountinfo = Path(proc_root, "self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"{proc_root}/self/mountinfo not read: {exc.strerror or exc}"
    options = _mount_options(mountinfo, os.path.realpath(layout.memory_hierarchy))
    if options is None:
        return f"no cgroup2 mount at {layout.memory_hierarchy} in {proc_root}/self/mountinfo"
    if RECURSIVE_PROTECTION not in options:
        return (f"cgroup2 at {layout.memory_hierarchy} is mounted without {RECURSIVE_PROTECTION}, so a memory.low on "
                f"system.slice would not reach its services (systemd 247+ mounts it so)")
    return None

"""The node's side of `evictd.core.protections`: does this kernel give PSI, ``memory.reclaim``, refault counts and
the daemons' (system.slice's) re-read counts.

Each reader returns None where the node gives the figure, else the path and what is missing there. A file that is
there but cannot be read now is not "missing" (a problem of every cycle, logged as such): None too.
"""

from __future__ import annotations

import os

from evictd.adapters import procfs
from evictd.adapters.cgroups import CgroupReader, cgroup_folder
from evictd.adapters.daemon_cgroups import daemons_missing
from evictd.adapters.daemons_protection import protection_unavailable
from evictd.adapters.memory_reclaim import CgroupMemoryReclaimer
from evictd.core.errors import SampleError
from evictd.core.protections import ProtectionFacts


def psi_missing(path: str) -> str | None:
    """Why the memory pressure file at `path` gives nothing (None: it does, or cannot be read now)."""
    try:
        return None if procfs.memory_pressure(path) is not None else f"{path}: absent or not supported (no PSI)"
    except SampleError:
        return None


def node_psi_missing(proc_root: str = "/proc") -> str | None:
    return psi_missing(os.path.join(proc_root, "pressure", "memory"))


def pods_psi_missing(cgroups: CgroupReader) -> str | None:
    """Why the pods cgroup has no ``memory.pressure`` (cgroup v1 has none)."""
    if cgroups.layout.version == 1:
        return "no pods cgroup memory.pressure (cgroup v1)"
    if not cgroups.has_pods_cgroup():
        return "no pods cgroup memory.pressure (no pods cgroup)"
    return psi_missing(cgroup_folder(str(cgroups.layout.memory_hierarchy), cgroups.pods_cgroup()) + "/memory.pressure")


def refault_missing(proc_root: str = "/proc") -> str | None:
    """Why /proc/vmstat counts no page cache refaults."""
    try:
        counts = procfs.vmstat_counts(proc_root)
    except SampleError:
        return None
    if counts.refault_file_bytes is None:
        keys = " or ".join(key.decode() for key in procfs.REFAULT_KEYS)
        return f"{os.path.join(proc_root, 'vmstat')} has no {keys}"
    return None


def read_protection_facts(cgroups: CgroupReader, proc_root: str = "/proc") -> ProtectionFacts:
    """Every fact the protections are judged on, read now. Never raises."""
    return ProtectionFacts(node_psi_missing=node_psi_missing(proc_root), pods_psi_missing=pods_psi_missing(cgroups),
                           memory_reclaim_missing=CgroupMemoryReclaimer(cgroups).unavailable(),
                           refault_missing=refault_missing(proc_root), daemons_missing=daemons_missing(cgroups.layout),
                           daemons_low_missing=protection_unavailable(cgroups.layout, proc_root))

"""The machine's side of the node's memory protection: the cgroup files that say what is really enforced.

For `evictd.core.node_protection`: the kubepods memory limit and, on v2, ``memory.min``/``memory.low`` of
``system.slice`` and ``system.slice/kubelet.service``, placed by the layout `evictd.adapters.cgroups` detected
(system.slice is at the hierarchy root whatever cgroupRoot is). Nothing is written; a missing file is `NOT_FOUND`,
any other failure "unreadable: <reason>"; contents kept as bounded printable text for the core to judge.
"""

from __future__ import annotations

from evictd.adapters.cgroups import CgroupReader, cgroup_folder, read_file_if_present
from evictd.core.errors import SampleError
from evictd.core.node_protection import (
    KUBELET_UNIT,
    NOT_FOUND,
    SYSTEM_SLICE,
    CgroupFile,
    CgroupProtection,
    NodeCgroups,
)

# A memory file holds at most 20 digits or "max"; more is garbage, shown only this far.
MAX_SHOWN_CHARS = 40


def read_node_cgroups(cgroups: CgroupReader) -> NodeCgroups:
    """Return the kubepods memory limit and, on cgroup v2, the daemons' protection, as `cgroups`' layout places
    them. Never raises: what cannot be read is reported in the `CgroupFile`."""
    layout = cgroups.layout
    hierarchy = str(layout.memory_hierarchy)
    pods = cgroup_folder(hierarchy, cgroups.pods_cgroup())
    if layout.version == 1:
        return NodeCgroups(version=1, pods_limit=cgroup_file(pods + "/memory.limit_in_bytes"))
    return NodeCgroups(version=2, pods_limit=cgroup_file(pods + "/memory.max"),
                       system_slice=cgroup_protection(hierarchy, SYSTEM_SLICE),
                       kubelet_unit=cgroup_protection(hierarchy, KUBELET_UNIT))


def cgroup_protection(hierarchy: str, cgroup: str) -> CgroupProtection:
    """Return memory.min and memory.low of the v2 `cgroup` (relative to `hierarchy`)."""
    folder = cgroup_folder(hierarchy, cgroup)
    return CgroupProtection(cgroup, min=cgroup_file(folder + "/memory.min"), low=cgroup_file(folder + "/memory.low"))


def cgroup_file(path: str) -> CgroupFile:
    """Return the file at `path` as read: its stripped text, or `NOT_FOUND`, or "unreadable: <reason>"."""
    try:
        data = read_file_if_present(path)
    except SampleError as exc:
        return CgroupFile(path, problem=f"unreadable: {exc.reason}")
    if data is None:
        return CgroupFile(path, problem=NOT_FOUND)
    text = data.strip()[:MAX_SHOWN_CHARS].decode("ascii", errors="replace")
    return CgroupFile(path, text="".join(char if char.isprintable() else "?" for char in text))

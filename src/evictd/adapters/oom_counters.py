"""The kernel's OOM-kill counters: the machine's, the pods cgroup's and every cgroup below it.

For `evictd.core.oom`: the machine's ``oom_kill`` of vmstat (4.13+); v2 ``memory.events`` ``oom_kill`` and
``oom_group_kill``, hierarchical (removed children still counted); v1 ``memory.oom_control`` ``oom_kill``, local
only, so every cgroup below the pods cgroup is read (a container cgroup removed before the read takes its count with
it: the machine still counts it). And the boot ID: saved counters (`evictd.core.oom_saved`) only mean something
within one boot. Each counter is tagged with its pod UID and container ID as `CgroupReader` names them. A cgroup
removed mid-walk is passed over; other failures raise ``SampleError(path, reason)``. Nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from evictd.adapters.cgroups import (
    CgroupReader,
    cgroup_folder,
    child_cgroups,
    flat_keyed_value,
    join_cgroup,
    read_file,
    read_file_if_present,
)
from evictd.core.errors import SampleError
from evictd.core.oom import CgroupOomCount

OOM_KILL_KEY = b"oom_kill"
GROUP_KILL_KEY = b"oom_group_kill"
V1_OOM_FILE = "memory.oom_control"
V2_EVENTS_FILE = "memory.events"
BOOT_ID_FILE = "sys/kernel/random/boot_id"
# A boot ID is a UUID (36 characters); anything much longer is not one.
MAX_BOOT_ID_CHARS = 64


class OomCounters:
    """Reads the OOM-kill counters of the machine and of the cgroups below the pods cgroup."""

    def __init__(self, cgroups: CgroupReader, proc_root: str | Path = "/proc") -> None:
        self._cgroups = cgroups
        self._memory_dir = str(cgroups.layout.memory_hierarchy)
        self._vmstat = str(Path(proc_root) / "vmstat")
        self._boot_id = str(Path(proc_root) / BOOT_ID_FILE)
        self._v1 = cgroups.layout.version == 1

    @property
    def pods_cgroup_name(self) -> str:
        """Return what names the pods cgroup whose counters these are (its version and folder), whether or not it
        exists: counters saved for another one do not compare with these."""
        version = 1 if self._v1 else 2
        return f"v{version}:{cgroup_folder(self._memory_dir, self._cgroups.pods_cgroup())}"

    def boot_id(self) -> str:
        """Return the running kernel's boot ID (a new one at every boot). Raises SampleError."""
        text = read_file(self._boot_id).decode("ascii", errors="replace").strip()
        if not text or len(text) > MAX_BOOT_ID_CHARS or not text.isprintable():
            raise SampleError(self._boot_id, f"not a boot ID: {text[:MAX_BOOT_ID_CHARS]!r}")
        return text

    def node_kills(self) -> int:
        """Return the machine's OOM kills since boot. Raises SampleError."""
        return flat_keyed_value(self._vmstat, read_file(self._vmstat), OOM_KILL_KEY)

    def pods_kills(self) -> int | None:
        """Return the pods cgroup's hierarchical OOM-kill counter (v2), None on v1 or without one. Raises
        SampleError."""
        if self._v1 or not self._cgroups.has_pods_cgroup():
            return None
        pods = self._cgroups.pods_cgroup()
        found = self._read_if_present(pods)
        if found is None:
            raise SampleError(cgroup_folder(self._memory_dir, pods), "no such cgroup")
        return found[0]

    def cgroup_kills(self) -> tuple[CgroupOomCount, ...]:
        """Return the counters below the pods cgroup, tagged with pods and containers: v1 every cgroup down (local),
        v2 each pod cgroup and its containers (hierarchical). Raises SampleError."""
        if not self._cgroups.has_pods_cgroup():
            return ()
        pods = self._cgroups.pod_cgroups()
        owners: dict[str, tuple[str, str]] = {}
        for uid, pod in pods.items():
            owners[pod.path] = (uid, "")
            for container_id, path in self._cgroups.container_cgroups(pod.path).items():
                owners[path] = (uid, container_id)
        if self._v1:
            return tuple(self._v1_subtree(self._cgroups.pods_cgroup(), owners))
        counts = []
        for path, (uid, container_id) in owners.items():
            read = self._read_if_present(path)
            if read is not None:
                counts.append(CgroupOomCount(path=path, oom_kills=read[0], group_kills=read[1], pod_uid=uid,
                                             container_id=container_id, hierarchical=True))
        return tuple(counts)

    def _v1_subtree(self, top: str, owners: dict[str, tuple[str, str]]) -> list[CgroupOomCount]:
        counts = []
        stack = [(top, ("", ""))]
        while stack:
            path, inherited = stack.pop()
            owner = owners.get(path, inherited)
            read = self._read_if_present(path)
            names = child_cgroups(cgroup_folder(self._memory_dir, path), missing_ok=True)
            if read is None or names is None:
                continue  # removed while walked: it held no process any more
            counts.append(CgroupOomCount(path=path, oom_kills=read[0], pod_uid=owner[0], container_id=owner[1]))
            stack.extend((join_cgroup(path, name), owner) for name in names)
        return counts

    def _read_if_present(self, cgroup: str) -> tuple[int, int] | None:
        """Return (OOM kills, group kills) of `cgroup`, None if the cgroup is gone."""
        path = cgroup_folder(self._memory_dir, cgroup) + "/" + (V1_OOM_FILE if self._v1 else V2_EVENTS_FILE)
        data = read_file_if_present(path)
        if data is None:
            return None
        kills = flat_keyed_value(path, data, OOM_KILL_KEY)
        if self._v1 or (b"\n" + GROUP_KILL_KEY + b" ") not in data:
            return kills, 0  # v1 has no group kills; v2 kernels before 5.17 do not count them
        return kills, flat_keyed_value(path, data, GROUP_KILL_KEY)

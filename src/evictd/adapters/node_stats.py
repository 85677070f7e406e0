"""The node's own stats as a kubelet Summary: cgroupfs, statvfs, procfs and pod folders, read directly.

Job: produce, once per cycle, the Summary the kubelet's stats provider would produce (KUBELET_SPEC §1), so
the engine cannot tell the difference:
- node memory: the root cgroup's working set (usage - inactive_file, floored at 0); capacity = MemTotal;
  available = capacity - working set (floored at 0);
- the `pods` system container (allocatableMemory.available): the pods cgroup (kubepods / kubepods.slice);
  available = its limit - its working set, and no available figure when it has no limit; on a machine with
  no pods cgroup (no kubelet) the container and every pod are simply absent, which is not a problem;
- nodefs: statvfs of the kubelet root folder; imagefs and containerfs: statvfs of the runtime's folders.
  A folder that does not exist yet is measured on the filesystem that would hold it (its nearest existing
  ancestor), so a node without a runtime still shows its disks;
- rlimit: min(pid_max, threads-max) and the kernel's task count, as the kubelet reads them;
- per pod: pod cgroup working set and process count; emptyDir volumes and log folders through the cached
  disk-usage walker; ephemeral-storage = volumes + logs (writable layers come from the runtime, later).

A part that cannot be read is left out of the Summary for this cycle (the signal is then absent: never
guessed) and recorded in `problems` with its path and reason. Every block carries the time it was read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from evictd.adapters import procfs
from evictd.adapters.cgroups import CgroupReader, MemoryReading, PodCgroup
from evictd.adapters.disk_usage import DirUsage, DiskUsageCache, volume_usage
from evictd.adapters.filesystems import FsReading, statvfs_reading
from evictd.core.errors import SampleError
from evictd.core.pods import Pod
from evictd.core.summary import (
    SYSTEM_CONTAINER_PODS,
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodReference,
    PodStats,
    RlimitStats,
    Summary,
    VolumeStats,
)

_T = TypeVar("_T")


class PodList(Protocol):
    """The pods whose stats are wanted (the manager's pod source)."""

    def active_pods(self) -> Sequence[Pod]: ...


def existing_ancestor(path: str) -> str:
    """Return `path` or its nearest existing ancestor (the filesystem that holds or would hold it)."""
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def memory_stats(reading: MemoryReading, capacity_bytes: int | None, at: datetime) -> MemoryStats:
    """Return the Summary memory block of a cgroup reading; `capacity_bytes` None means no available figure."""
    available = None if capacity_bytes is None else max(capacity_bytes - reading.working_set_bytes, 0)
    return MemoryStats(
        time=at,
        available_bytes=available,
        usage_bytes=reading.usage_bytes,
        working_set_bytes=reading.working_set_bytes,
    )


def fs_stats(reading: FsReading, at: datetime) -> FsStats:
    """Return the Summary filesystem block of a statvfs reading."""
    return FsStats(
        time=at,
        available_bytes=reading.available_bytes,
        capacity_bytes=reading.capacity_bytes,
        used_bytes=reading.used_bytes,
        inodes_free=reading.inodes_free,
        inodes=reading.inodes,
        inodes_used=reading.inodes_used,
    )


def _usage_fs(usage: DirUsage, at: datetime) -> FsStats:
    return FsStats(time=at, used_bytes=usage.used_bytes, inodes_used=usage.inodes_used)


class NodeStatsSource:
    """A StatsSource reading this node directly. `problems` lists what could not be read last cycle."""

    def __init__(
        self,
        *,
        node_name: str,
        cgroups: CgroupReader,
        pods: PodList,
        disk_usage: DiskUsageCache,
        kubelet_root: str,
        pod_logs_dir: str,
        image_fs_path: str,
        container_fs_path: str,
        proc_root: str = "/proc",
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._node_name = node_name
        self._cgroups = cgroups
        self._pods = pods
        self._disk_usage = disk_usage
        self._kubelet_root = kubelet_root
        self._pod_logs_dir = pod_logs_dir
        self._image_fs_path = image_fs_path
        self._container_fs_path = container_fs_path
        self._proc_root = proc_root
        self._wall_clock = wall_clock
        self.problems: tuple[SampleError, ...] = ()

    def summary(self) -> Summary:
        """Read the node now and return its Summary (parts that could not be read are absent)."""
        problems: list[SampleError] = []
        at = self._wall_clock()

        def attempt(read: Callable[[], _T]) -> _T | None:
            try:
                return read()
            except SampleError as exc:
                problems.append(exc)
                return None

        node_memory = attempt(lambda: self._cgroups.memory(""))
        capacity = attempt(lambda: procfs.mem_total_bytes(self._proc_root))
        # No pods cgroup means no kubelet-managed pods here: allocatable memory is absent, not unreadable.
        has_pods_cgroup = self._cgroups.has_pods_cgroup()
        pods_memory = attempt(lambda: self._cgroups.memory(self._cgroups.pods_cgroup())) if has_pods_cgroup else None
        nodefs = attempt(lambda: statvfs_reading(existing_ancestor(self._kubelet_root)))
        imagefs = attempt(lambda: statvfs_reading(existing_ancestor(self._image_fs_path)))
        containerfs = attempt(lambda: statvfs_reading(existing_ancestor(self._container_fs_path)))
        max_pid = attempt(lambda: procfs.pid_limit(self._proc_root))
        tasks = attempt(lambda: procfs.running_tasks(self._proc_root))
        system_containers = {}
        if pods_memory is not None:
            system_containers[SYSTEM_CONTAINER_PODS] = ContainerStats(
                name=SYSTEM_CONTAINER_PODS, memory=memory_stats(pods_memory, pods_memory.limit_bytes, at)
            )
        node = NodeStats(
            node_name=self._node_name,
            memory=memory_stats(node_memory, capacity, at) if node_memory is not None and capacity else None,
            fs=fs_stats(nodefs, at) if nodefs is not None else None,
            image_fs=fs_stats(imagefs, at) if imagefs is not None else None,
            container_fs=fs_stats(containerfs, at) if containerfs is not None else None,
            rlimit=RlimitStats(time=at, max_pid=max_pid, num_of_running_processes=tasks),
            system_containers=system_containers,
        )
        pod_stats = self._pod_stats(at, problems) if has_pods_cgroup else ()
        self.problems = tuple(problems)
        return Summary(node=node, pods=pod_stats)

    def _pod_stats(self, at: datetime, problems: list[SampleError]) -> tuple[PodStats, ...]:
        self._disk_usage.start_cycle()
        try:
            cgroups = self._cgroups.pod_cgroups()
        except SampleError as exc:
            problems.append(exc)
            cgroups = {}
        result = []
        for pod in self._pods.active_pods():
            try:
                result.append(self._one_pod(pod, cgroups.get(pod.uid), at))
            except SampleError as exc:
                problems.append(exc)
        return tuple(result)

    def _one_pod(self, pod: Pod, cgroup: PodCgroup | None, at: datetime) -> PodStats:
        memory = None
        process_count = None
        if cgroup is not None:
            memory = memory_stats(self._cgroups.memory(cgroup.path), None, at)
            process_count = self._cgroups.process_count(cgroup.path)
        volumes = volume_usage(self._disk_usage, self._kubelet_root, pod.uid) if pod.uid else {}
        containers = self._container_logs(pod, at)
        used = sum(v.used_bytes for v in volumes.values()) + sum(
            c.logs.used_bytes or 0 for c in containers if c.logs is not None
        )
        inodes = sum(v.inodes_used for v in volumes.values()) + sum(
            c.logs.inodes_used or 0 for c in containers if c.logs is not None
        )
        return PodStats(
            pod_ref=PodReference(name=pod.name, namespace=pod.namespace, uid=pod.uid),
            memory=memory,
            containers=containers,
            volume_stats=tuple(
                VolumeStats(name=name, time=at, used_bytes=usage.used_bytes, inodes_used=usage.inodes_used)
                for name, usage in volumes.items()
            ),
            ephemeral_storage=FsStats(time=at, used_bytes=used, inodes_used=inodes),
            process_count=process_count,
        )

    def _container_logs(self, pod: Pod, at: datetime) -> tuple[ContainerStats, ...]:
        """Return per-container log usage from `<pod logs>/<ns>_<name>_<uid>/<container>/` folders."""
        if not (pod.uid and pod.name and pod.namespace):
            return ()
        folder = os.path.join(self._pod_logs_dir, f"{pod.namespace}_{pod.name}_{pod.uid}")
        containers = []
        try:
            names = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return ()
        except OSError as exc:
            raise SampleError(folder, exc.strerror or str(exc)) from exc
        for name in names:
            usage = self._disk_usage.usage(os.path.join(folder, name))
            if usage is not None:
                containers.append(ContainerStats(name=name, logs=_usage_fs(usage, at)))
        return tuple(containers)

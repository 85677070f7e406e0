"""The node's own stats as a kubelet Summary: cgroupfs, statvfs, procfs and pod folders, read directly.

Once per cycle, the Summary the kubelet's stats provider would produce (KUBELET_SPEC §1; docs/daemon.md "Signals"
lists each figure's source), so the engine cannot tell the difference. A folder not there yet is measured on the
filesystem that would hold it; no pods cgroup means no `pods` container and no pods. With a runtime, containers are
named (one ListContainerStats a cycle; re-reads reuse it; when it does not answer, last named containers are read
from their cgroups); ephemeral-storage is absent until the pod has disk figures; an unreadable pod cgroup leaves its
memory unknown (sandbox stats stand in). With `memory_pressure`, blocks carry PSI and the stall gate's counters
(/proc/vmstat scans, refaults, the pods cgroup's ``memory.events.local`` ``max``); with `daemon_refaults`, the
daemons' (system.slice's) re-reads and usage as the ``evictd.io/daemons`` system container; what the kernel lacks is
absent (the start's "protection" lines name it: `evictd.adapters.protection_facts`).

Unreadable parts are absent (never guessed) and recorded in `problems`; every block carries its read time. Pod
folders are measured by the disk walker (`PodDiskStore`), not by the cycle.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TypeVar

from evictd.adapters import procfs
from evictd.adapters.cgroups import (
    CgroupReader,
    MemoryReading,
    PodCgroup,
    PodFigures,
    cgroup_folder,
    flat_keyed_value,
    read_file_if_present,
)
from evictd.adapters.daemon_cgroups import daemon_counts
from evictd.adapters.filesystems import FsReading, statvfs_reading
from evictd.adapters.pod_disk_blocks import DiskBlocks, disk_blocks
from evictd.adapters.pod_disk_usage import PodDiskStore, PodKey
from evictd.adapters.psi_history import PressureHistory
from evictd.adapters.runtime_stats_worker import RuntimeStatsWorker
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import EvictdError, SampleError, attempt, without_traceback
from evictd.core.followed import hugepage_aware_available
from evictd.core.pods import Derived, Pod, derived
from evictd.core.signals import Reading, Signal, spec_of
from evictd.core.summary import (
    SYSTEM_CONTAINER_DAEMONS,
    SYSTEM_CONTAINER_PODS,
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodReference,
    PodStats,
    PsiStats,
    ReclaimCounters,
    RlimitStats,
    Summary,
    pod_memory_stats,
    pod_stats,
)
from evictd.cri import NO_RUNTIME, ContainerUsage, Runtime

# The sources of the problems recorded when the container runtime did not answer a stats call.
CONTAINER_STATS_SOURCE = "CRI ListContainerStats"
# cgroup v2: the events of the cgroup itself, not of those below it; `max` counts its usage reaching memory.max.
LOCAL_EVENTS_FILE = "memory.events.local"
LIMIT_EVENTS_KEY = b"max"
SANDBOX_STATS_SOURCE = "CRI ListPodSandboxStats"
RUNTIME_SOURCES = frozenset({CONTAINER_STATS_SOURCE, SANDBOX_STATS_SOURCE})


def existing_ancestor(path: str) -> str:
    """Return `path` or its nearest existing ancestor (the filesystem that holds or would hold it)."""
    current = os.path.abspath(path)
    while not os.path.exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def memory_stats(reading: MemoryReading, capacity_bytes: int | None, at: datetime,
                 hugepages_bytes: int = 0) -> MemoryStats:
    """Return the Summary memory block of a cgroup reading; `capacity_bytes` None means no available figure.
    `hugepages_bytes` (the node's, when the kubelet followed is hugepage-aware) is subtracted, clamped at 0."""
    available = None if capacity_bytes is None else max(capacity_bytes - reading.working_set_bytes, 0)
    available = hugepage_aware_available(available, hugepages_bytes)
    return MemoryStats(time=at, available_bytes=available, usage_bytes=reading.usage_bytes,
                       working_set_bytes=reading.working_set_bytes, unfolded_bytes=reading.unfolded_bytes)


def fs_stats(reading: FsReading, at: datetime) -> FsStats:
    """Return the Summary filesystem block of a statvfs reading."""
    return FsStats(time=at, available_bytes=reading.available_bytes, capacity_bytes=reading.capacity_bytes,
                   used_bytes=reading.used_bytes, inodes_free=reading.inodes_free, inodes=reading.inodes,
                   inodes_used=reading.inodes_used)


# A counter reading of the stall gate's (`NodeStatsSource._reclaim`).
T = TypeVar("T")


def pod_key(pod: Pod) -> PodKey:
    """Return what names the pod's folders (one object per pod object, so comparing lists of them is cheap)."""
    return derived(pod, Derived.POD_KEY, lambda p: PodKey(p.uid, p.namespace, p.name))


def _pod_reference(pod: Pod) -> PodReference:
    return derived(pod, Derived.POD_REFERENCE,
                   lambda p: PodReference(name=p.name, namespace=p.namespace, uid=p.uid))


def pods_limit_events(cgroups: CgroupReader) -> int | None:
    """The pods cgroup's own `max` events (v2), None on v1 or where the kernel has no memory.events.local.
    Raises SampleError."""
    if cgroups.layout.version == 1:
        return None
    path = cgroup_folder(str(cgroups.layout.memory_hierarchy), cgroups.pods_cgroup()) + "/" + LOCAL_EVENTS_FILE
    data = read_file_if_present(path)
    return None if data is None else flat_keyed_value(path, data, LIMIT_EVENTS_KEY)


class NodeStatsSource:
    """A StatsSource reading this node directly. `problems` lists what could not be read last cycle; `pod_cgroups`
    finds the listed pods' cgroups (by default by listing the pods cgroup)."""

    def __init__(self, *, node_name: str, cgroups: CgroupReader, disk_usage: PodDiskStore,
                 kubelet_root: str, image_fs_path: str, container_fs_path: str, proc_root: str = "/proc",
                 clock: Clock = SYSTEM_CLOCK, pod_cgroups: Callable[[], Mapping[str, PodCgroup]] | None = None,
                 runtime: Runtime = NO_RUNTIME, memory_pressure: bool = False, daemon_refaults: bool = False,
                 hugepages: Callable[[], int] | None = None) -> None:
        self._node_name = node_name
        # The node's hugepage capacity, read each time when the kubelet followed subtracts it (None: it does not).
        self._hugepages = hugepages
        self._memory_pressure = memory_pressure
        self._daemon_refaults = daemon_refaults
        self._cgroups = cgroups
        self.disk_usage = disk_usage
        self._kubelet_root = kubelet_root
        self._image_fs_path = image_fs_path
        self._container_fs_path = container_fs_path
        self._proc_root = proc_root
        self._clock = clock
        self._pod_cgroups = pod_cgroups if pod_cgroups is not None else cgroups.pod_cgroups
        self._runtime = runtime
        # The runtime's container stats, asked on a thread of their own when a read may not wait (`runtime_wait_s`).
        self._runtime_stats = RuntimeStatsWorker(runtime.container_stats)
        # The memory pressure files' last readings, for each PSI line's `recent` share (evictd.core.psi_window).
        self._pressure_history = PressureHistory(clock)
        # The runtime's last answer: which containers (by ID) of which pod carry which name.
        self._last_runtime_answer: Mapping[str, Sequence[ContainerUsage]] = {}
        # What the last read that asked the runtime got: its answer, or its failure (a re-read takes it again).
        self._cycle_runtime: Mapping[str, Sequence[ContainerUsage]] | SampleError | None = None
        # Each pod's disk figures as Summary blocks, as built last cycle (see DiskBlocks).
        self._disk_blocks: dict[PodKey, DiskBlocks] = {}
        self.problems: tuple[SampleError, ...] = ()

    def wait_for_disk_figures(self, pods: Sequence[Pod], timeout_s: float) -> None:
        """Return once the disk walker has measured every pod of `pods` (one the cycle listed), or after `timeout_s`
        seconds (the manager's `DiskFigures`)."""
        self.disk_usage.wait_for_figures([pod_key(pod) for pod in pods], timeout_s)

    def _pressure_paths(self) -> tuple[str, str | None]:
        """The node's memory pressure file, and the pods cgroup's (None: cgroup v1 or no pods cgroup)."""
        node = os.path.join(self._proc_root, "pressure", "memory")
        if self._cgroups.layout.version == 1 or not self._cgroups.has_pods_cgroup():
            return node, None
        folder = cgroup_folder(str(self._cgroups.layout.memory_hierarchy), self._cgroups.pods_cgroup())
        return node, folder + "/memory.pressure"

    def _daemons(self, at: datetime, problems: list[SampleError]) -> ContainerStats | None:
        """The daemons' system container (with `daemon_refaults`; None: not asked, no system.slice, or unreadable)."""
        if not self._daemon_refaults:
            return None
        counts = attempt(lambda: daemon_counts(self._cgroups.layout), problems)
        if counts is None:
            return None
        available = None if not counts.cache_protected else attempt(
            lambda: procfs.meminfo_bytes("MemAvailable", self._proc_root), problems)
        return ContainerStats(name=SYSTEM_CONTAINER_DAEMONS, memory=MemoryStats(
            time=at, usage_bytes=counts.usage_bytes, rss_bytes=counts.anon_bytes,
            reclaim=ReclaimCounters(refault_file_bytes=counts.refault_bytes, protected_bytes=counts.protected_bytes,
                                    low_events=counts.low_events, reclaimed_bytes=counts.reclaimed_bytes,
                                    file_bytes=counts.file_bytes, node_available_bytes=available)))

    @property
    def _pod_pressure(self) -> bool:
        """Whether pods' own ``memory.pressure`` is read: with stall-family thresholds, on cgroup v2 (a stall eviction
        takes only a pod that stalls itself where that is read, `evictd.core.pod_growth`)."""
        return self._memory_pressure and self._cgroups.layout.version != 1

    def _pod_pressure_path(self, cgroup: PodCgroup) -> str:
        return cgroup_folder(str(self._cgroups.layout.memory_hierarchy), cgroup.path) + "/memory.pressure"

    def _pods_limit_events(self) -> int | None:
        return pods_limit_events(self._cgroups)

    def _reclaim(self, read: Callable[[], T | None], problems: list[SampleError],
                 wrap: Callable[[T], ReclaimCounters]) -> ReclaimCounters | None:
        """The stall gate's counter `read` (only with stall thresholds) as `wrap` places it; None if not read."""
        if not self._memory_pressure:
            return None
        value = attempt(read, problems)
        return None if value is None else wrap(value)

    def note_pressure(self) -> None:
        """Read the memory pressure files now, between cycles, so the next cycle's `recent` share spans the time
        since (a held-back PSI firing's reading starts the window). Failures are the next cycle's problem."""
        if not self._memory_pressure:
            return
        for path in self._pressure_paths():
            if path is not None:
                with contextlib.suppress(SampleError):
                    self._pressure_history.read(path)

    def note_stall_firing(self, signal: Signal, share: float, window_s: float) -> None:
        """Note that the PSI trigger at `share` percent of a `window_s` window for the stall signal `signal` fired
        now (`PressureHistory.note_firing`): the next readings of its file may take that share as `recent`."""
        spec = spec_of(signal)
        if not self._memory_pressure or spec.stall is None:
            return
        node, pods = self._pressure_paths()
        path = pods if spec.reading is Reading.PODS_MEMORY_STALL else node
        if path is not None:
            self._pressure_history.note_firing(path, spec.stall, share, window_s)

    def _pressure(self, path: str | None, problems: list[SampleError]) -> PsiStats | None:
        if not self._memory_pressure or path is None:
            return None
        return attempt(lambda: self._pressure_history.read(path), problems)

    def summary(self, pods: Sequence[Pod], *, reread: bool = False, runtime_wait_s: float | None = None) -> Summary:
        """Read the node now and return its Summary with the stats of `pods` (unreadable parts absent). `reread`: a
        re-read within the cycle; the runtime is not asked again (its last answer or failure stands).
        `runtime_wait_s`: wait that long at most for the runtime, then read its containers from their cgroups
        (`evictd.adapters.runtime_stats_worker`)."""
        problems: list[SampleError] = []
        at = self._clock.wall()
        node_memory, capacity, pods_memory, has_pods_cgroup = self._memory_readings(problems)
        image_path, container_path = self._runtime.filesystem_paths() or (self._image_fs_path, self._container_fs_path)
        nodefs = attempt(lambda: statvfs_reading(existing_ancestor(self._kubelet_root)), problems)
        imagefs = attempt(lambda: statvfs_reading(existing_ancestor(image_path)), problems)
        containerfs = attempt(lambda: statvfs_reading(existing_ancestor(container_path)), problems)
        max_pid = attempt(lambda: procfs.pid_limit(self._proc_root), problems)
        tasks = attempt(lambda: procfs.running_tasks(self._proc_root), problems)
        node_pressure, pods_pressure = self._pressure_paths() if self._memory_pressure else (None, None)
        system_containers = {}
        if pods_memory is not None:
            system_containers[SYSTEM_CONTAINER_PODS] = ContainerStats(
                name=SYSTEM_CONTAINER_PODS, memory=replace(
                    memory_stats(pods_memory, pods_memory.limit_bytes, at), psi=self._pressure(pods_pressure, problems),
                    reclaim=self._reclaim(self._pods_limit_events, problems,
                                          lambda value: ReclaimCounters(limit_events=value))))
        daemons = self._daemons(at, problems)
        if daemons is not None:
            system_containers[SYSTEM_CONTAINER_DAEMONS] = daemons
        hugepages = self._hugepage_bytes(problems)
        node = NodeStats(
            node_name=self._node_name,
            memory=replace(memory_stats(node_memory, capacity, at, hugepages),
                           psi=self._pressure(node_pressure, problems),
                           reclaim=self._reclaim(lambda: procfs.vmstat_counts(self._proc_root), problems,
                                                 lambda counts: ReclaimCounters(
                                                     global_scan_pages=counts.global_scan_pages,
                                                     refault_file_bytes=counts.refault_file_bytes,
                                                     activate_file_bytes=counts.activate_file_bytes)))
            if node_memory is not None and capacity else None,
            fs=fs_stats(nodefs, at) if nodefs is not None else None,
            image_fs=fs_stats(imagefs, at) if imagefs is not None else None,
            container_fs=fs_stats(containerfs, at) if containerfs is not None else None,
            rlimit=RlimitStats(time=at, max_pid=max_pid, num_of_running_processes=tasks),
            system_containers=system_containers,
        )
        pod_stats = self._pod_stats(pods, at, problems, reread, runtime_wait_s) if has_pods_cgroup else ()
        self._cgroups.end_cycle()  # the kept descriptors of pods that went away are closed
        self.problems = tuple(problems)
        return Summary(node=node, pods=pod_stats)

    def _memory_readings(self, problems: list[SampleError]
                         ) -> tuple[MemoryReading | None, int | None, MemoryReading | None, bool]:
        """The root's memory, MemTotal and the pods cgroup's memory (None: unreadable, added to `problems`), and
        whether there is a pods cgroup (without one allocatable memory is absent, not unreadable)."""
        node_memory = attempt(lambda: self._cgroups.memory(""), problems)
        capacity = attempt(lambda: procfs.mem_total_bytes(self._proc_root), problems)
        has_pods_cgroup = self._cgroups.has_pods_cgroup()
        pods_memory = (attempt(lambda: self._cgroups.memory(self._cgroups.pods_cgroup()), problems)
                       if has_pods_cgroup else None)
        return node_memory, capacity, pods_memory, has_pods_cgroup

    def memory_reading(self) -> Callable[[], Summary]:
        """How to read the node's memory alone: `memory_summary` (the manager's confirming readings)."""
        return self.memory_summary

    def memory_summary(self) -> Summary:
        """Read the node's memory alone now (the node's and pods cgroup's memory, no pods): the few small reads that
        confirm a memory crossing (`evictd.core.settled`). Unreadable figures are absent."""
        problems: list[SampleError] = []
        at = self._clock.wall()
        node_memory, capacity, pods_memory, _ = self._memory_readings(problems)
        hugepages = self._hugepage_bytes(problems)
        system_containers = {}
        if pods_memory is not None:
            system_containers[SYSTEM_CONTAINER_PODS] = ContainerStats(
                name=SYSTEM_CONTAINER_PODS, memory=memory_stats(pods_memory, pods_memory.limit_bytes, at))
        return Summary(node=NodeStats(
            node_name=self._node_name,
            memory=memory_stats(node_memory, capacity, at, hugepages) if node_memory is not None and capacity else None,
            system_containers=system_containers))

    def _hugepage_bytes(self, problems: list[SampleError]) -> int:
        """The hugepage capacity to subtract from the node's memory.available: 0 when the kubelet followed does not
        (or it cannot be read: the problem is recorded and the figure left as the kubelet's without a Node)."""
        if self._hugepages is None:
            return 0
        return attempt(self._hugepages, problems) or 0

    def _pod_stats(self, pods: Sequence[Pod], at: datetime, problems: list[SampleError],
                   reread: bool = False, runtime_wait_s: float | None = None) -> tuple[PodStats, ...]:
        keys = [pod_key(pod) for pod in pods]
        self.disk_usage.want(keys)
        now = self._clock.monotonic()
        cgroups = attempt(self._pod_cgroups, problems) or {}
        runtime: Mapping[str, Sequence[ContainerUsage]] = {}
        # Containers to measure from their cgroups: those the runtime named last, when it does not answer now.
        remembered: Mapping[str, Sequence[ContainerUsage]] = {}
        got = self._cycle_runtime if reread and self._cycle_runtime is not None else self._ask_runtime(runtime_wait_s)
        if isinstance(got, SampleError):
            problems.append(got)
            remembered = self._last_runtime_answer
        else:
            runtime = got
        result = []
        built = self._disk_blocks
        blocks_now: dict[PodKey, DiskBlocks] = {}
        one_pod = self._one_pod
        pod_cgroups = [cgroups.get(pod.uid) for pod in pods]
        # Every pod cgroup's files read in batches before the loop (`pod_figures_many`), taken in order in it.
        read = iter(self._cgroups.pod_figures_many([cgroup.path for cgroup in pod_cgroups if cgroup is not None]))
        for pod, key, disk, cgroup in zip(pods, keys, self.disk_usage.readings(keys, now), pod_cgroups, strict=True):
            # The per-pod loop of a cycle (about a thousand pods): what is empty is not looked up.
            blocks = None
            figures = disk.figures
            if figures is not None:
                blocks = built.get(key)
                if blocks is None or blocks.figures is not figures:
                    blocks = disk_blocks(figures)
                blocks_now[key] = blocks
            if disk.problems:
                problems.extend(disk.problems)
            uid = pod.uid
            result.append(one_pod(pod, cgroup, next(read) if cgroup is not None else None,
                                  runtime.get(uid, ()) if runtime else (),
                                  remembered.get(uid, ()) if remembered else (), blocks, at, problems))
        self._disk_blocks = blocks_now
        return self._with_sandbox_fallback(tuple(result), at, problems)

    def _ask_runtime(self, runtime_wait_s: float | None = None) -> Mapping[str, Sequence[ContainerUsage]] | SampleError:
        """Ask the runtime for its containers' stats (at most `runtime_wait_s`; None: its deadline): the answer
        (empty without a runtime) or why not, kept for the cycle's re-reads and as the last answer."""
        got: Mapping[str, Sequence[ContainerUsage]] | SampleError
        came_late, late = self._runtime_stats.take_late()
        if came_late and late is not None:
            self._last_runtime_answer = late
        try:
            answer = self._runtime_stats.stats(runtime_wait_s if self._runtime.attached else None)
            got = {} if answer is None else answer
            if answer is not None:
                self._last_runtime_answer = answer
        except EvictdError as exc:
            got = SampleError(CONTAINER_STATS_SOURCE, str(exc))
        self._cycle_runtime = got
        return got

    def _with_sandbox_fallback(
        self, pods: tuple[PodStats, ...], at: datetime, problems: list[SampleError]
    ) -> tuple[PodStats, ...]:
        """Fill memory and process counts pod cgroups could not give from the runtime's sandbox stats."""
        if not self._runtime.attached or all(p.memory is not None for p in pods):
            return pods
        try:
            sandboxes = self._runtime.sandbox_stats() or {}
        except EvictdError as exc:
            problems.append(SampleError(SANDBOX_STATS_SOURCE, str(exc)))
            return pods
        filled = []
        for stats in pods:
            sandbox = sandboxes.get(stats.pod_ref.uid)
            if stats.memory is None and sandbox is not None and sandbox.working_set_bytes is not None:
                stats = replace(stats, memory=MemoryStats(time=at, working_set_bytes=sandbox.working_set_bytes),
                                process_count=stats.process_count if stats.process_count is not None
                                else sandbox.process_count)
            filled.append(stats)
        return tuple(filled)

    def _one_pod(self, pod: Pod, cgroup: PodCgroup | None, figures: PodFigures | SampleError | None,
                 runtime: Sequence[ContainerUsage], remembered: Sequence[ContainerUsage], disk: DiskBlocks | None,
                 at: datetime, problems: list[SampleError]) -> PodStats:
        # The per-pod hot path: plain loops; blocks built by `pod_memory_stats` and `pod_stats`.
        memory = None
        process_count = None
        # `figures`: its cgroup's (None: no cgroup); unreadable leaves memory unknown, never the stats dropped.
        if isinstance(figures, SampleError):
            problems.append(without_traceback(figures))
        elif figures is not None:
            usage, working_set, count, anon = figures
            memory = pod_memory_stats(at, usage, working_set, anon)
            if self._pod_pressure and cgroup is not None:
                psi = attempt(lambda: procfs.memory_pressure(self._pod_pressure_path(cgroup)), problems)
                if psi is not None:
                    memory = replace(memory, psi=psi)
            if isinstance(count, SampleError):
                problems.append(without_traceback(count))
            else:
                process_count = count
        if not runtime and not remembered:  # no runtime: the disk figures alone, as built once
            if disk is None:
                return pod_stats(_pod_reference(pod), memory, (), (), None, process_count)
            return pod_stats(_pod_reference(pod), memory, disk.log_containers, disk.volume_stats,
                             disk.ephemeral_storage, process_count)
        used = disk.used_bytes if disk is not None else 0
        inodes = disk.inodes_used if disk is not None else 0
        logs = {entry.name: entry.logs for entry in disk.log_containers if entry.logs is not None} \
            if disk is not None else {}
        containers = []
        for measured in runtime:  # the runtime names the containers and measures their writable layers
            rootfs = None
            if measured.writable_layer_bytes is not None:
                rootfs = FsStats(time=at, used_bytes=measured.writable_layer_bytes,
                                 inodes_used=measured.writable_layer_inodes)
                used += measured.writable_layer_bytes
                inodes += measured.writable_layer_inodes or 0
            container_memory = None
            if measured.working_set_bytes is not None:
                container_memory = MemoryStats(time=at, working_set_bytes=measured.working_set_bytes)
            containers.append(ContainerStats(name=measured.name, memory=container_memory, rootfs=rootfs,
                                             logs=logs.pop(measured.name, None)))
        if remembered and cgroup is not None:
            containers.extend(self._containers_from_cgroups(cgroup, remembered, logs, at, problems))
        containers.extend(ContainerStats(name=name, logs=fs) for name, fs in logs.items())
        return PodStats(
            pod_ref=_pod_reference(pod),
            memory=memory,
            containers=tuple(containers),
            volume_stats=disk.volume_stats if disk is not None else (),
            # The total needs the pod's disk figures: unknown without them, whatever the runtime says.
            ephemeral_storage=(FsStats(time=disk.measured_at, used_bytes=used, inodes_used=inodes)
                               if disk is not None else None),
            process_count=process_count,
        )

    def _containers_from_cgroups(self, cgroup: PodCgroup, remembered: Sequence[ContainerUsage],
                                 logs: dict[str, FsStats], at: datetime,
                                 problems: list[SampleError]) -> list[ContainerStats]:
        """Measure the containers the runtime last named in this pod from their cgroups, by name (their logs
        are taken out of `logs`). A container cgroup that is gone or unreadable is left out and recorded."""
        found = attempt(lambda: self._cgroups.container_cgroups(cgroup.path), problems)
        if found is None:
            return []
        measured = []
        for container in sorted(remembered, key=lambda usage: usage.name):
            path = found.get(container.container_id)
            if path is None:
                continue  # restarted or removed since the runtime last answered: its new ID is unknown
            try:
                reading = self._cgroups.memory(path)
            except SampleError as exc:
                problems.append(without_traceback(exc))
                continue
            measured.append(ContainerStats(
                name=container.name,
                memory=MemoryStats(time=at, usage_bytes=reading.usage_bytes,
                                   working_set_bytes=reading.working_set_bytes),
                logs=logs.pop(container.name, None)))
        return measured

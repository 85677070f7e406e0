"""Guest side of the arena's non-memory controls (bench/node_survival_controls.py says what they are).

bench/node_survival_guest.py calls in at three points:

* `evictd_settings`: where evictd looks for nodefs and the pods' disk use. With the guest's own disk mounted
  ($UML_DISK_MOUNT, /run/disk), evictd's ``kubeletRootDir`` is ``/run/disk/kubelet`` and its ``podLogsDir``
  ``/run/disk/pod-logs`` for every workload: nodefs is the guest disk (statfs of the kubelet root). Its
  imagefs and containerfs paths stay on the guest's /run (a tmpfs; the stand-in has no runtime, no images),
  so evictd sees a dedicated imagefs (KUBELET_SPEC §4.2): nodefs signals rank pods by their logs and emptyDir
  volumes and have no node-level reclaim; the kubelet would do the same on such a node. The protector
  ``evictd-pid`` is ``evictd`` with ``pid.available: 25%`` added to the shipped evictionHard (neither the
  shipped configuration nor the kubelet's defaults have a pid threshold). Why 25 % (512 of pid_max 2048): the
  kubelet's figure, min(pid_max, threads-max) less the tasks, counts the 300 pids the kernel keeps back
  (RESERVED_PIDS: once pids wrap, new ones come from 300 up), so the node is out of pids while it still says
  ~270 available; a threshold must be above that to be crossed at all. 25 % is 10 % (the shipped nodefs share)
  above those ~15 %. On a node's pid_max of 32768 or more the 300 are 1 % or less.
* `Controls` (made once the pods started, before their go files): for ``fork-bomb`` sets ``kernel.pid_max``
  to `FORK_BOMB_PID_MAX` (every other workload runs with the guest's own, put back at the end); for the disk
  workloads makes the filler's emptyDir and log folders where evictd looks and names them to it (on the real
  backend the kubelet made them, its root on the guest disk too: the emptyDir of the filler's spec, and its
  container's log, which the filler writes through its stdout); samples every
  100 ms pid.available as the kubelet computes it (min(pid_max, threads-max) less the tasks of /proc/loadavg),
  the guest disk's statfs and each pod's processes (its pod cgroup's pids.current) and disk use (its emptyDir
  and log folders); gives the stand-in kubelet its volume tear-down (a deleted pod's folders removed once its
  processes and cgroups are gone and before its deletion is finished, as the kubelet's status manager deletes
  a pod only once its volumes are gone: evictd, like the kubelet, runs its next cycle once the pod is gone).
* `Controls.finish` (at the end of the run, after the pods were removed): the control figures of the run
  (``control`` in its JSON) and, for every eviction, the pod the kubelet's ranking names for the control's
  signal (pid.available: priority, then processes; nodefs.available: logs and emptyDir use), computed with
  evictd's core ranking over the last sample before the eviction was seen in which the evicted pod still had
  processes (the kubelet writes Evicted after its kill), in place of the memory ranking.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from guest_v2_node import CGROUP
from node_survival_controls import CONTROL_WORKLOADS, FORK_BOMB, FORK_BOMB_PID_MAX, VOLUME
from node_survival_outcomes import below_seconds

from evictd.adapters.filesystems import detect_layout
from evictd.adapters.pod_dirs import EMPTY_DIR_PLUGIN_DIR
from evictd.core.pod_parser import pod_from_dict
from evictd.core.ranking import rank_pods
from evictd.core.signals import Signal
from evictd.core.summary import ContainerStats, FsStats, PodReference, PodStats, VolumeStats

MiB = 1 << 20
DISK = Path(os.environ.get("UML_DISK_MOUNT", "/run/disk"))
KUBELET_ROOT, POD_LOGS = DISK / "kubelet", DISK / "pod-logs"
EVICTD_PID = "evictd-pid"
PID_THRESHOLD = "25%"
REAL_CONTAINER = "app"  # the real backend's pods' one container (node_survival_nodes.Real.start_pod)
PID_MAX = Path("/proc/sys/kernel/pid_max")
GUEST_PID_MAX = int(PID_MAX.read_text()) if PID_MAX.exists() else 0
SAMPLE_PERIOD_S = 0.1
DISK_FULL_BYTES = MiB  # "the disk full": less than this available to an unprivileged writer (f_bavail)


def has_disk() -> bool:
    return os.path.ismount(DISK)


def evictd_settings(kubelet: dict[str, Any], evictd: dict[str, Any], protector: str) -> None:
    if has_disk():
        evictd.update({"kubeletRootDir": str(KUBELET_ROOT), "podLogsDir": str(POD_LOGS)})
    if protector == EVICTD_PID:
        kubelet.setdefault("evictionHard", {})["pid.available"] = PID_THRESHOLD


def pid_available() -> tuple[int, int]:
    """(min(pid_max, threads-max), tasks of /proc/loadavg): the kubelet's MaxPID and running processes."""
    limit = min(int(PID_MAX.read_text()), int(Path("/proc/sys/kernel/threads-max").read_text()))
    return limit, int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])


def folder_bytes(folder: Path) -> int:
    """Bytes allocated to the files below `folder` (st_blocks; 0 when it is gone)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


class Controls:
    """A control workload's set-up, samples and figures (does nothing but `finish` for other workloads)."""

    def __init__(self, spec: Any, pods: dict[str, Any], namespace: str, control: Path, backend: Any) -> None:
        self.spec, self.pods, self.backend, self.control = spec, pods, backend, control
        self.active = spec.name in CONTROL_WORKLOADS
        if GUEST_PID_MAX:
            PID_MAX.write_text(str(FORK_BOMB_PID_MAX if spec.name == FORK_BOMB else GUEST_PID_MAX))
        self.folders: dict[str, tuple[Path, Path]] = {}
        for pod_spec in spec.pods:
            if VOLUME in pod_spec.volumes and has_disk():
                pod = pods[pod_spec.name]
                volume = KUBELET_ROOT / "pods" / pod.uid / "volumes" / EMPTY_DIR_PLUGIN_DIR / VOLUME
                # The real kubelet made both (the pod runs): the emptyDir of its spec, and its container's log
                # folder, into which the runtime writes what the container writes to its stdout.
                real = getattr(backend, "name", "") == "real"
                logs = POD_LOGS / f"{namespace}_{pod.name}_{pod.uid}" / (REAL_CONTAINER if real else pod.name)
                volume.mkdir(parents=True, exist_ok=real)
                logs.mkdir(parents=True, exist_ok=real)
                log = "/proc/self/fd/1" if real else logs / "0.log"
                (control / f"volume.{pod.name}").write_text(f"{volume}\n{log}\n")
                self.folders[pod.name] = (volume, logs)
        self.samples: list[dict[str, Any]] = []
        self.node = getattr(backend, "node", None)  # the stand-in's (the real kubelet tears volumes down itself)
        if self.node is not None and self.folders:
            self.node.tear_down = self._tear_down
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        if self.active:
            self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(Exception):  # a sample missed (a pod going away), the next one follows
                self.samples.append(self.sample())
            time.sleep(SAMPLE_PERIOD_S)

    def sample(self) -> dict[str, Any]:
        at = time.monotonic()
        limit, tasks = pid_available()
        figures: dict[str, Any] = {"at": at, "pidLimit": limit, "tasks": tasks, "pods": {}}
        if has_disk():
            disk = os.statvfs(DISK)
            figures["disk"] = {"capacity": disk.f_blocks * disk.f_frsize, "available": disk.f_bavail * disk.f_frsize,
                               "free": disk.f_bfree * disk.f_frsize}
        for name, pod in self.pods.items():
            try:
                processes = int((CGROUP / pod.cgroup / "pids.current").read_text())
            except OSError:
                processes = 0
            volume, logs = self.folders.get(name, (None, None))
            figures["pods"][name] = {"processes": processes,
                                     "volume": folder_bytes(volume) if volume else 0,
                                     "logs": folder_bytes(logs) if logs else 0}
        return figures

    def _tear_down(self, uid: str) -> None:
        for name, pod in self.pods.items():
            if pod.uid == uid:
                self._remove(name)

    def _remove(self, name: str) -> None:
        """The pod's folders on the disk: <kubelet root>/pods/<uid> and its log folder."""
        if name in self.folders:
            volume, logs = self.folders[name]
            shutil.rmtree(volume.parents[2], ignore_errors=True)
            shutil.rmtree(logs.parent, ignore_errors=True)

    def finish(self, sampler: Any, started: float, ended: float, record: dict[str, Any]) -> dict[str, Any]:
        """The run's record with the control's figures and rankings (unchanged for other workloads)."""
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        if self.node is not None:
            self.node.tear_down = None
        if GUEST_PID_MAX:
            PID_MAX.write_text(str(GUEST_PID_MAX))
        for name in self.folders:  # what the run left on the disk (the pods are gone)
            self._remove(name)
        if not self.active:
            return record
        window = [s for s in self.samples if started <= s["at"] <= ended]
        failures = []
        failures_path = self.control.parent / "heartbeat.failures"
        if failures_path.exists():
            failures = [line.split() for line in failures_path.read_text().splitlines() if line.strip()]
        failures = [f for f in failures if started <= float(f[0]) <= ended]
        kinds: dict[str, int] = {}
        for failure in failures:
            kinds[failure[1]] = kinds.get(failure[1], 0) + 1
        disk = [(s["at"], s["disk"]["available"]) for s in window if "disk" in s]
        control = {
            "pidMax": FORK_BOMB_PID_MAX if self.spec.name == FORK_BOMB else GUEST_PID_MAX,
            "pidAvailableMin": min((s["pidLimit"] - s["tasks"] for s in window), default=None),
            "tasksMax": max((s["tasks"] for s in window), default=None),
            "daemonFailures": len(failures), "daemonFailureKinds": kinds,
            "daemonFirstFailureS": float(failures[0][0]) - started if failures else None,
            "nodefsCapacityMib": window[-1]["disk"]["capacity"] / MiB if disk else None,
            "nodefsAvailableMinMib": min(a for _, a in disk) / MiB if disk else None,
            "diskFullS": below_seconds(disk, DISK_FULL_BYTES) if disk else None,
            "podPeaks": {name: {key: max((s["pods"].get(name, {}).get(key, 0) for s in window), default=0)
                                for key in ("processes", "volume", "logs")} for name in self.pods},
            "samples": len(window),
        }
        signal = Signal.PID_AVAILABLE if self.spec.name == FORK_BOMB else Signal.NODEFS_AVAILABLE
        evicted: set[str] = set()
        for eviction in sorted(record["evictions"], key=lambda e: e["at"]):
            sample = self.ranking_figures(window, started + eviction["at"], eviction["pod"])
            expected = self.ranked_first(signal, sampler.last_seen, sample, evicted) if sample is not None else None
            eviction.update({"expected": expected, "asRanked": expected == eviction["pod"], "rankedBy": str(signal)})
            evicted.add(eviction["pod"])
        return {**record, "control": control}

    @staticmethod
    def ranking_figures(window: list[dict[str, Any]], seen_at: float, evicted: str) -> dict[str, Any] | None:
        """The pods' figures to rank an eviction the API showed at `seen_at` by: the last sample before it in which
        the evicted pod still had processes (`node_survival_outcomes.ranking_sample`'s rule: the kubelet writes
        Evicted after its kill, so the sample just before the API's word may already be without the pod); without
        one, the last sample before it (None: no sample)."""
        before = [sample["pods"] for sample in window if sample["at"] < seen_at]
        running = [pods for pods in before if pods.get(evicted, {}).get("processes", 0) > 0]
        return running[-1] if running else before[-1] if before else None

    @staticmethod
    def ranked_first(signal: Signal, manifests: dict[str, Any], figures: dict[str, Any], gone: set[str]) -> str | None:
        """The pod the kubelet's ranking for `signal` names first among the pods still running in `figures`."""
        candidates = [pod_from_dict(m) for n, m in manifests.items()
                      if n not in gone and figures.get(n, {}).get("processes", 0) > 0]
        stats = {}
        for pod in candidates:
            mine = figures[pod.name]
            stats[pod.name] = PodStats(
                pod_ref=PodReference(pod.name, pod.namespace, pod.uid), process_count=mine["processes"],
                containers=(ContainerStats(name=pod.name, logs=FsStats(used_bytes=mine["logs"])),),
                volume_stats=(VolumeStats(name=VOLUME, used_bytes=mine["volume"]),))
        layout = detect_layout(str(DISK if has_disk() else "/run"), "/run", "/run")
        ranked = rank_pods(signal, layout, candidates, lambda pod: stats.get(pod.name))
        return ranked[0].name if ranked else None

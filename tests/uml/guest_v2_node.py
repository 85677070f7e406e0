"""Guest side of the cgroup v2 tier: a node inside a user-mode Linux guest, `evictd run` on its real v2 tree.

Run by the guest's init (tests/uml/test_evictd_v2.py boots it) as ``python guest_v2_node.py SCENARIO DRIVER``;
it writes ``$UML_OUT/<scenario>-<driver>.json`` and the test on the host asserts on that. Everything lives in
the guest: the pods cgroup of the kubelet's cgroup driver (`PodLayout`), pods whose processes are real Python
processes in their container cgroups, the project's test API server (tests/kube/apiserver.py, in this process)
holding the node and the pods, a stand-in kubelet that kills an evicted pod (``cgroup.kill``) and finishes its
deletion, a sampler reading the kernel's own figures every few milliseconds, and `evictd run` (JSON logs, its
stateDir and flight recording under /run).

Scenarios:

* ``node``: signals as evictd recorded them against the kernel's figures sampled beside it; each pod's working
  set and process count against its cgroup; a real memcg OOM kill in a container cgroup counted by evictd; a
  soft and then a hard ``allocatableMemory.available`` crossing, decided, evicted through the API and
  carried out by the stand-in kubelet; how late each crossing was decided after the kernel's figure crossed.
* ``wakeup``: crossings with the kubelet's 10 s housekeeping interval, once per `memcgWakeups` setting (`on`
  arms the v2 near-threshold memory watch), each decided crossing's lateness measured the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from apiserver import ApiServer
from evictd_process import EvictdProcess
from kube_objects import node_manifest, pod_manifest

from evictd.core.signals import Signal
from evictd.core.summary import signal_observations
from evictd.core.summary_parser import summary_from_dict
from evictd.record.recording import read_recording
from real_cgroups import CHILD_SCRIPT

CGROUP = Path("/sys/fs/cgroup")
MiB = 1 << 20
NODE = "uml-node"
NAMESPACE = "v2"
GUARANTEED_CPU = "100m"
# The pods cgroup's limit: the node's allocatable memory as the kubelet would set it.
ALLOCATABLE = 320 * MiB
HARD_MIB, SOFT_MIB = 60, 140
SAMPLE_PERIOD_S = 0.005
# Task counts are taken every 50 ms (a walk of /proc); a cycle's pid.available is compared with those this near.
PID_PERIOD_S, PID_WINDOW_S = 0.05, 0.2
# Long enough for a hog to pass the hard level after the soft one even when the guest is slow.
SOFT_GRACE_S = 4

# A hog: its memory arrives in one mmap(MAP_POPULATE), faulted in by the kernel itself (a page-by-page write
# goes through the user-mode kernel's ptrace for every page: a few tens of MiB/s on a loaded machine).
HOG_SCRIPT = r"""
import mmap, sys
held = []
for line in iter(sys.stdin.readline, ""):
    size = int(line.split()[1])
    held.append(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE))
    print("ok", flush=True)
"""



@dataclass
class PodLayout:
    """Where the kubelet's cgroup driver puts the pods cgroup, a pod of each QoS class and its container
    (pkg/kubelet/cm: a Guaranteed pod sits right under the pods cgroup, the others under their class's)."""

    driver: str

    @property
    def pods(self) -> str:
        return "kubepods" if self.driver == "cgroupfs" else "kubepods.slice"

    def pod(self, uid: str, qos: str = "burstable") -> str:
        if self.driver == "cgroupfs":
            return f"kubepods/pod{uid}" if qos == "guaranteed" else f"kubepods/{qos}/pod{uid}"
        unit = uid.replace("-", "_")
        if qos == "guaranteed":
            return f"kubepods.slice/kubepods-pod{unit}.slice"
        return f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{unit}.slice"

    def container(self, uid: str, container_id: str, qos: str = "burstable") -> str:
        name = container_id if self.driver == "cgroupfs" else f"cri-containerd-{container_id}.scope"
        return f"{self.pod(uid, qos)}/{name}"


def cg_write(cgroup: str, name: str, value: str) -> None:
    (CGROUP / cgroup / name).write_text(value)


def cg_read(cgroup: str, name: str) -> str:
    return (CGROUP / cgroup / name).read_text()


def stat_value(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise KeyError(key)


def make_cgroup(path: str) -> None:
    """Create `path` and its parents, each delegating memory and pids to its children (as the kubelet's)."""
    current = CGROUP
    for part in path.split("/"):
        current = current / part
        if not current.exists():
            current.mkdir()
    parent = CGROUP
    for part in path.split("/")[:-1]:
        parent = parent / part
        (parent / "cgroup.subtree_control").write_text("+memory +pids")


@dataclass
class Pod:
    """One burstable pod: an API object, a pod cgroup, one container cgroup with a `CHILD_SCRIPT` process in it
    (tests/real_cgroups.py: it allocates, forks sleepers, answers "ok")."""

    name: str
    uid: str
    cgroup: str
    container: str
    proc: subprocess.Popen[str] | None = None

    def do(self, command: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if answer != "ok\n":
            raise RuntimeError(f"pod {self.name}: {command!r} answered {answer!r} (exit {self.proc.poll()})")

    def send(self, command: str) -> None:
        """Send without waiting for the answer (the process may be killed before it gives one)."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()


class Node:
    """The guest node: cgroups of one driver, the test API server, the stand-in kubelet, the kernel sampler."""

    def __init__(self, driver: str, work: Path, *, allocatable_bytes: int | None = ALLOCATABLE,
                 sample: bool = True, namespace: str = NAMESPACE) -> None:
        """`allocatable_bytes` is the pods cgroup's memory.max (None: no limit, as a kubelet with nothing
        reserved); `sample` starts the kernel sampler (`samples`, every SAMPLE_PERIOD_S); pods are made in
        `namespace` (an attribute: set it before the pods of another run)."""
        self.layout = PodLayout(driver)
        self.work = work
        self.namespace = namespace
        self.pods: dict[str, Pod] = {}
        make_cgroup(self.layout.pods + "/x")
        os.rmdir(CGROUP / self.layout.pods / "x")
        if allocatable_bytes is not None:
            cg_write(self.layout.pods, "memory.max", str(allocatable_bytes))
        self.api = ApiServer(work / "apiserver").start()
        self.api.store.create_node(node_manifest(NODE))
        self.deleted: dict[str, float] = {}
        # A deleted pod's UID, once its processes and cgroups are gone, before its deletion is finished (volumes).
        self.tear_down: Callable[[str], None] | None = None
        self.kubelet_errors: list[str] = []
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._kubelet, daemon=True)]
        self._sampling = sample
        if sample:
            self._threads.append(threading.Thread(target=self._sample, daemon=True))
        for thread in self._threads:
            thread.start()

    def add_pod(self, name: str, request_mib: int | None, container_max: int | None = None, *,
                script: str = CHILD_SCRIPT, args: tuple[str, ...] = (), qos: str = "burstable",
                limit_mib: int | None = None, oom_score_adj: int | None = None, volumes: tuple[str, ...] = ()) -> Pod:
        """A pod of QoS class `qos` (its cgroup where the kubelet puts that class) with one process running
        `script` with `args`, which joins its container cgroup (and takes `oom_score_adj`, as the kubelet
        gives a container's processes) before it allocates anything. `limit_mib` is the pod's memory limit,
        in its API object and as the pod cgroup's memory.max. `volumes`: emptyDirs in its spec (no folders made)."""
        uid = str(uuid.uuid4())
        container_id = uuid.uuid4().hex + uuid.uuid4().hex
        pod = Pod(name, uid, self.layout.pod(uid, qos), self.layout.container(uid, container_id, qos))
        make_cgroup(pod.container)
        if container_max is not None:
            cg_write(pod.container, "memory.max", str(container_max))
        if limit_mib is not None:
            cg_write(pod.cgroup, "memory.max", str(limit_mib * MiB))
        requests = {"memory": f"{request_mib}Mi"} if request_mib is not None else {}
        limits = {"memory": f"{limit_mib}Mi"} if limit_mib is not None else {}
        if qos == "guaranteed":  # requests equal to limits for cpu too, or the API would call it Burstable
            requests["cpu"] = limits["cpu"] = GUARANTEED_CPU
        manifest = pod_manifest(name, self.namespace, node_name=NODE, requests=requests, limits=limits)
        manifest["metadata"]["uid"] = uid
        if volumes:
            manifest["spec"]["volumes"] = [{"name": volume, "emptyDir": {}} for volume in volumes]
        self.api.store.create_pod(manifest)
        procs = CGROUP / pod.container / "cgroup.procs"
        adjust = "" if oom_score_adj is None else f" && echo {oom_score_adj} > /proc/self/oom_score_adj"
        pod.proc = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {procs}{adjust} && script="$1" && shift && exec "$0" -c "$script" "$@"',
             sys.executable, script, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pods[uid] = pod
        return pod

    def _kubelet(self) -> None:
        """What the kubelet does with a pod being deleted: kill its processes, remove its cgroups, finish."""
        while not self._stop.is_set():
            for stored in self.api.store.pods(self.namespace):
                meta = stored["metadata"]
                pod = self.pods.get(meta["uid"])
                if meta.get("deletionTimestamp") and pod is not None and meta["uid"] not in self.deleted:
                    self.deleted[meta["uid"]] = seen_at = time.time()
                    # The kernel's sampler reads once more before the kill (a real kubelet takes its grace period): in
                    # the one-CPU guest it went unscheduled for the whole of a hard crossing evicted 245 ms after the
                    # allocation began, and the test could not tell when the kernel's figure crossed (CI, 2026-11-26).
                    self._sampled_since(seen_at, timeout_s=1.0)
                    try:
                        cg_write(pod.cgroup, "cgroup.kill", "1")
                        if pod.proc is not None:
                            pod.proc.wait()
                        for path in (pod.container, pod.cgroup):
                            remove_cgroup(path)
                        if self.tear_down is not None:
                            self.tear_down(meta["uid"])
                        self.api.store.finish_deletion(self.namespace, meta["name"])
                    except Exception as exc:  # reported in the scenario's result, the loop goes on
                        self.kubelet_errors.append(f"{meta['name']}: {type(exc).__name__}: {exc}")
            time.sleep(PID_PERIOD_S)

    def _sample(self) -> None:
        """The kernel's figures, every few milliseconds, each with the wall time it was read at."""
        mem_total = meminfo()["MemTotal"]
        while not self._stop.is_set():
            self.samples.append(kernel_figures(self.layout, mem_total))
            time.sleep(SAMPLE_PERIOD_S)

    def _sampled_since(self, moment: float, *, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) until the kernel's sampler has read the figures after `moment`."""
        deadline = time.monotonic() + timeout_s
        while self._sampling and time.monotonic() < deadline and not self._stop.is_set():
            if self.samples and self.samples[-1]["wall"] > moment:
                return
            time.sleep(SAMPLE_PERIOD_S / 5)

    def first_sample(self, since: float, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        return next((s for s in list(self.samples) if s["wall"] >= since and predicate(s)), None)

    def remove_pods(self) -> None:
        """End every pod's processes, remove its cgroups and its API object (what is left of a run)."""
        for pod in self.pods.values():
            if pod.uid not in self.deleted and (CGROUP / pod.cgroup).exists():
                cg_write(pod.cgroup, "cgroup.kill", "1")
                if pod.proc is not None:
                    pod.proc.wait()
                for path in (pod.container, pod.cgroup):
                    remove_cgroup(path)
        for stored in self.api.store.pods():
            with contextlib.suppress(Exception):  # already gone: the stand-in kubelet finished it
                self.api.store.delete_pod(stored["metadata"]["namespace"], stored["metadata"]["name"], 0)
        self.pods.clear()

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self.remove_pods()
        self.api.stop()


def remove_cgroup(path: str) -> None:
    deadline = time.monotonic() + 10
    while (CGROUP / path).exists():
        try:
            os.rmdir(CGROUP / path)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def meminfo() -> dict[str, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        values[name] = int(rest.split()[0]) * 1024
    return values


def kernel_tasks() -> int:
    """Threads of every process, counted from /proc (the kubelet's figure comes from /proc/loadavg)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(FileNotFoundError):
                count += len(os.listdir(f"/proc/{entry}/task"))
    return count


def kernel_figures(layout: PodLayout, mem_total: int) -> dict[str, Any]:
    """The kernel's own memory figures for the two memory signals, read now: the root's memory.stat, the pods
    cgroup's memory.current, memory.stat and memory.max (pid figures: `pid_figures`, read less often)."""
    wall = time.time()
    root_stat = (CGROUP / "memory.stat").read_text()
    root_ws = stat_value(root_stat, "anon") + stat_value(root_stat, "file") - stat_value(root_stat, "inactive_file")
    pods_stat = cg_read(layout.pods, "memory.stat")
    pods_ws = int(cg_read(layout.pods, "memory.current")) - stat_value(pods_stat, "inactive_file")
    return {"wall": wall, "memory.available": mem_total - root_ws,
            "allocatableMemory.available": int(cg_read(layout.pods, "memory.max")) - pods_ws}


def pid_figures() -> dict[str, int]:
    """pid_max and threads-max against the tasks counted in /proc; beside them /proc/meminfo's MemAvailable and
    MemTotal - MemFree (what older runc reported as the v2 root's usage), for the record, not compared."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    threads_max = int(Path("/proc/sys/kernel/threads-max").read_text())
    memory = meminfo()
    return {"limit": min(pid_max, threads_max), "tasks": kernel_tasks(), "memAvailable": memory["MemAvailable"],
            "memFree": memory["MemFree"]}


def evictd_config(driver: str, work: Path, kubeconfig: Path, *, interval: str, memcg_wakeups: bool) -> dict[str, str]:
    kubelet = (f"cgroupDriver: {driver}\nmergeDefaultEvictionSettings: false\n"
               f"evictionHard:\n  allocatableMemory.available: {HARD_MIB}Mi\n  memory.available: 20Mi\n"
               f"evictionSoft:\n  allocatableMemory.available: {SOFT_MIB}Mi\n"
               f"evictionSoftGracePeriod:\n  allocatableMemory.available: {SOFT_GRACE_S}s\n"
               "evictionPressureTransitionPeriod: 1s\nevictionMaxPodGracePeriod: 1\n")
    evictd = (f"housekeepingInterval: {interval}\nnodeName: {NODE}\nkubeconfig: {kubeconfig}\n"
              f"stateDir: {work / 'state'}\nkubeletRootDir: {work / 'kubelet'}\npodLogsDir: {work / 'pod-logs'}\n"
              f"imageFsPath: {work}\ncontainerFsPath: {work}\n"
              f"memcgWakeups: {'true' if memcg_wakeups else 'false'}\n"
              "containerRuntimeEndpoint: unix:///run/no-runtime.sock\n")
    return {"kubelet": kubelet, "evictd": evictd}


def stamp(event: dict[str, Any]) -> float:
    """The wall time evictd logged `event` at."""
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


@dataclass
class Crossing:
    """One crossing: when the kernel's figure crossed, when evictd logged the threshold met and the eviction."""

    kind: str
    sent_at: float = 0.0
    kernel_crossed_at: float | None = None
    decided_at: float | None = None
    evicted_at: float | None = None
    evicted_pod: str = ""
    wakeups: dict[str, float] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        late = (None if self.kernel_crossed_at is None or self.decided_at is None
                else self.decided_at - self.kernel_crossed_at)
        return {"kind": self.kind, "sentAt": self.sent_at, "kernelCrossedAt": self.kernel_crossed_at, "decidedAt": self.decided_at,
                "evictedAt": self.evicted_at, "evictedPod": self.evicted_pod, "decidedLateS": late,
                "wakeups": self.wakeups}


def wakeup_counts(daemon: EvictdProcess) -> dict[str, float]:
    _, page = daemon.http("/metrics")
    counts = {}
    for line in page.splitlines():
        if line.startswith("evictd_wakeups_total{"):
            cause = line.split('cause="', 1)[1].split('"', 1)[0]
            counts[cause] = float(line.split()[-1])
    return counts


def cross(node: Node, daemon: EvictdProcess, pod: Pod, mib: int, kind: str, level_mib: int,
          *, grace_s: float) -> Crossing:
    """Make `pod` allocate `mib` MiB, which takes allocatableMemory.available below `level_mib`; return when
    the kernel's figure crossed and when evictd decided the crossing and evicted a pod, once evictd saw every
    threshold it met clear again."""
    since = time.time()
    crossing = Crossing(kind, sent_at=since)
    pod.send(f"alloc {mib * MiB}")  # the answer may never come: evicted while it allocates
    threshold = f"allocatableMemory.available<{level_mib}Mi"
    met = daemon.wait_for(lambda e: e.get("event") == "threshold met" and e.get("threshold", "").startswith(
        threshold) and stamp(e) >= since, timeout=30 + grace_s)
    crossing.decided_at = stamp(met)
    evicting = daemon.wait_for(lambda e: e.get("event") == "evicting pod" and stamp(e) >= since,
                               timeout=30 + grace_s)
    crossing.evicted_at = stamp(evicting)
    crossing.evicted_pod = str(evicting["pod"])
    sample = node.first_sample(since, lambda s: s["allocatableMemory.available"] < level_mib * MiB)
    crossing.kernel_crossed_at = None if sample is None else sample["wall"]
    crossing.wakeups = wakeup_counts(daemon)
    # Settled before the next crossing: every threshold this one met is no longer met in evictd's eyes (a soft
    # threshold still met, its grace long run out, would evict the next hog before it reached its level).
    for name in {str(e["threshold"]) for e in daemon.events
                 if e.get("event") == "threshold met" and stamp(e) >= since}:
        daemon.wait_for(lambda e, name=name: e.get("event") == "threshold no longer met"
                        and e.get("threshold") == name and stamp(e) >= since, timeout=30)
    return crossing


def compare_signals(node: Node, records: list[Any], pids: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every recorded cycle, evictd's signals beside the kernel's sample nearest in time."""
    rows = []
    for record in records:
        if record.summary is None:
            continue
        observed = signal_observations(summary_from_dict(record.summary))
        nearest = min(node.samples, key=lambda s: abs(s["wall"] - record.wall))
        pid_nearest = min(pids, key=lambda s: abs(s["wall"] - record.wall))
        # Every task count within PID_WINDOW_S of the cycle: threads of evictd and of this harness (its API server
        # answers each request on a thread) start and end between evictd's count and any one of the sampler's.
        pid_window = [s["limit"] - s["tasks"] for s in pids if abs(s["wall"] - record.wall) <= PID_WINDOW_S]
        rows.append({
            "wall": record.wall,
            "sampleDeltaS": nearest["wall"] - record.wall,
            "evictd": {str(signal): int(observed[signal].available.value) for signal in
                       (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE, Signal.PID_AVAILABLE)
                       if signal in observed},
            "evictdCapacity": {str(signal): int(observed[signal].capacity.value) for signal in
                               (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE) if signal in observed},
            "kernel": {"memory.available": nearest["memory.available"],
                       "allocatableMemory.available": nearest["allocatableMemory.available"],
                       "pid.available": pid_nearest["limit"] - pid_nearest["tasks"],
                       "pid.availableRange": [min(pid_window), max(pid_window)] if pid_window else None},
            "meminfo": {"MemAvailable": pid_nearest["memAvailable"], "MemFree": pid_nearest["memFree"]},
            "pods": [{"uid": pod["podRef"]["uid"], "workingSetBytes": (pod.get("memory") or {}).get("workingSetBytes"),
                      "processCount": (pod.get("process_stats") or pod.get("processStats") or {}).get("process_count")}
                     for pod in record.summary.get("pods", [])],
        })
    return rows


def pod_kernel_figures(node: Node) -> dict[str, dict[str, int]]:
    figures = {}
    for uid, pod in node.pods.items():
        if not (CGROUP / pod.cgroup).exists():
            continue
        stat = cg_read(pod.cgroup, "memory.stat")
        figures[uid] = {"workingSetBytes": int(cg_read(pod.cgroup, "memory.current")) - stat_value(stat, "inactive_file"),
                        "pidsCurrent": int(cg_read(pod.cgroup, "pids.current"))}
    return figures


def start_evictd(work: Path, node: Node, *, interval: str, memcg_wakeups: bool) -> EvictdProcess:
    config = evictd_config(node.layout.driver, work, node.api.kubeconfig_path, interval=interval,
                           memcg_wakeups=memcg_wakeups)
    daemon = EvictdProcess(work, kubelet=config["kubelet"], evictd=config["evictd"])
    daemon.wait_event("evictd started", timeout=60)
    return daemon


def scenario_node(driver: str, work: Path) -> dict[str, Any]:
    node = Node(driver, work)
    result: dict[str, Any] = {"driver": driver, "layout": {"pods": node.layout.pods}}
    daemon = None
    try:
        steady = node.add_pod("steady", request_mib=64)
        steady.do(f"alloc {40 * MiB}")
        steady.do("fork 3")
        oomer = node.add_pod("oomer", request_mib=16, container_max=32 * MiB)
        oomer.do(f"alloc {MiB}")
        result["layout"]["podCgroups"] = {p.name: p.cgroup for p in node.pods.values()}
        result["layout"]["containerCgroups"] = {p.name: p.container for p in node.pods.values()}
        daemon = start_evictd(work, node, interval="500ms", memcg_wakeups=True)
        pids = []
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # quiet: readings compared while nothing moves
            pids.append({"wall": time.time(), **pid_figures()})
            time.sleep(PID_PERIOD_S)
        result["podKernel"] = pod_kernel_figures(node)
        result["podNames"] = {uid: p.name for uid, p in node.pods.items()}
        quiet_until = time.time()

        # A real memcg OOM kill: 64 MiB asked for in a container limited to 32 MiB.
        oomer.send(f"alloc {64 * MiB}")
        oomer_exit = oomer.proc.wait(timeout=60) if oomer.proc is not None else None
        logged = daemon.wait_event("OOM kill", timeout=30)
        result["oom"] = {"exit": oomer_exit, "logged": logged,
                         "memoryEvents": cg_read(oomer.cgroup, "memory.events"),
                         "kernelOomKills": stat_value(cg_read(oomer.cgroup, "memory.events"), "oom_kill")}
        # A group kill: memory.oom.group set, the workload and two sleepers it forked all killed at once.
        grouped = node.add_pod("grouped", request_mib=16, container_max=48 * MiB)
        cg_write(grouped.container, "memory.oom.group", "1")
        grouped.do("fork 2")
        grouped.send(f"alloc {96 * MiB}")
        result["oom"]["groupedExit"] = grouped.proc.wait(timeout=60) if grouped.proc is not None else None
        result["oom"]["groupedLogged"] = daemon.wait_event("OOM kill", timeout=30, pod=f"{NAMESPACE}/grouped")
        result["oom"]["groupedMemoryEvents"] = cg_read(grouped.cgroup, "memory.events")
        daemon.wait_for_cycles(int(daemon.metric("evictd_cycles_total")) + 3, timeout=30)
        result["oom"]["metrics"] = {scope: daemon.metric("evictd_oom_kills_total", scope=scope)
                                    for scope in ("pod", "pods", "node")}

        # Soft, then hard: a hog over the soft level (grace 4 s), evicted; then a bigger one over the hard level.
        soft_hog = node.add_pod("soft-hog", request_mib=8, script=HOG_SCRIPT)
        soft = cross(node, daemon, soft_hog, 150, "soft", SOFT_MIB, grace_s=SOFT_GRACE_S)
        hard_hog = node.add_pod("hard-hog", request_mib=8, script=HOG_SCRIPT)
        hard = cross(node, daemon, hard_hog, 230, "hard", HARD_MIB, grace_s=0)
        result["crossings"] = [soft.json(), hard.json()]
        deadline = time.monotonic() + 20
        while not {soft_hog.uid, hard_hog.uid} <= set(node.deleted) and time.monotonic() < deadline:
            time.sleep(PID_PERIOD_S)
        result["deleted"] = {node.pods[uid].name: at for uid, at in node.deleted.items()}
        result["kubeletErrors"] = node.kubelet_errors
        result["apiPods"] = sorted(p["metadata"]["name"] for p in node.api.store.pods(NAMESPACE))
        result["exit"] = daemon.stop()
        records, _ = read_recording(str(daemon.state_dir / "recording"))
        result["signals"] = compare_signals(node, [r for r in records if r.wall <= quiet_until], pids)
        result["problems"] = [e for e in daemon.events if e.get("event") in (
            "housekeeping cycle failed", "OOM-kill feedback failed", "source unreadable", "cycle error")
            or e.get("level") == "error"]
    finally:
        if daemon is not None and daemon.process.poll() is None:
            daemon.kill()
        node.close()
    return result


def scenario_wakeup(driver: str, work: Path) -> dict[str, Any]:
    """Crossings with the kubelet's 10 s interval: without the v2 memory watch (memcgWakeups off), then with it."""
    result: dict[str, Any] = {"driver": driver, "runs": {}}
    crossings_per_run = int(os.environ.get("V2_WAKEUP_CROSSINGS", "2"))
    modes = os.environ.get("V2_WAKEUP_MODES", "off,on").split(",")  # the bench's --watch-only: "on"
    for wakeups in [mode == "on" for mode in modes]:
        run_dir = work / ("on" if wakeups else "off")
        run_dir.mkdir(parents=True)
        node = Node(driver, run_dir)
        daemon = None
        crossings = []
        try:
            daemon = start_evictd(run_dir, node, interval="10s", memcg_wakeups=wakeups)
            for index in range(crossings_per_run):
                time.sleep(0.5 + (index * 3.7) % 10)  # crossings at different points of the 10 s tick
                hog = node.add_pod(f"hog-{index}", request_mib=8, script=HOG_SCRIPT)
                crossings.append(cross(node, daemon, hog, 270, "hard", HARD_MIB, grace_s=0).json())
                deadline = time.monotonic() + 40
                while hog.uid not in node.deleted and time.monotonic() < deadline:
                    time.sleep(PID_PERIOD_S)
            result["runs"]["on" if wakeups else "off"] = {"crossings": crossings,
                                                          "wakeups": wakeup_counts(daemon)}
            daemon.stop()
        finally:
            if daemon is not None and daemon.process.poll() is None:
                daemon.kill()
            node.close()
            remove_cgroup_tree(node.layout.pods)
    return result


def remove_cgroup_tree(path: str) -> None:
    folder = CGROUP / path
    if not folder.exists():
        return
    for child in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        remove_cgroup(str(child.relative_to(CGROUP)))
    remove_cgroup(path)


SCENARIOS = {"node": scenario_node, "wakeup": scenario_wakeup}


def main() -> int:
    scenario, driver = sys.argv[1], sys.argv[2]
    out = Path(os.environ["UML_OUT"]) / f"{scenario}-{driver}.json"
    work = Path("/run/v2") / f"{scenario}-{driver}"
    work.mkdir(parents=True)
    try:
        result = SCENARIOS[scenario](driver, work)
    except BaseException as exc:  # the host-side test shows it: the scenario's traceback and the guest's log
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}))
        return 1
    out.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Guest side of the node-survival arena (bench/node_survival.py boots the guest and runs this as its work).

``python node_survival_guest.py --backend stand-in --protectors kernel,evictd --workloads be-slow --runs 1``
runs every (protector, workload, run) in turn inside one cgroup v2 guest and appends one JSON document per run
to ``$UML_OUT/runs.jsonl`` as soon as the run ends (a guest that dies mid-way keeps what it finished).

The node. This process plays the kubelet: it moves itself into ``system.slice/kubelet.service`` with
oom_score_adj -999 (the kubelet's own), starts pods as the kubelet's cgroup driver lays them out (cgroupfs:
``kubepods/{besteffort,burstable}/pod<uid>/<id>``, Guaranteed ``kubepods/pod<uid>/<id>``) with the oom_score_adj
the kubelet gives each QoS class, and, for the stand-in backend, serves the pods and the Node from the project's
test API server (tests/kube/apiserver.py) and carries out a deletion as the kubelet does (``cgroup.kill``, then
the deletion finished with grace 0): tests/uml/guest_v2_node.py's `Node`, unchanged. The pods cgroup has no
memory limit (a kubelet with nothing reserved sets it to the node's capacity). The real backend (the real
kubelet, containerd and API server in the guest) is not built yet: ``--backend real`` fails saying so.

Protectors (each started after the pods, before the workload's pressure):
* ``kernel``: nobody evicts; the kernel's OOM killer alone.
* ``evictd``: ``evictd run`` with config/kubelet-config.yaml and config/evictd-config.yaml as shipped (hard
  ``memory.available<200Mi``, soft ``<500Mi`` for 90 s, ``allocatableMemory.available`` copied by
  ``enforceNodeAllocatable: [pods]``, 10 s housekeeping, the memory watch on, memory locked), unscaled; changed
  only where the guest differs from a node: ``cgroupDriver: cgroupfs`` (no systemd in the guest), its node name,
  kubeconfig, state and kubelet folders under /run, no container runtime. It runs in
  ``system.slice/evictd.service`` with oom_score_adj -999, as deploy/systemd/evictd.service gives it.
* ``earlyoom``: Debian's earlyoom with Debian's arguments (/etc/default/earlyoom: ``-r 3600``; its default
  thresholds are percentages of the guest's memory, 10 % SIGTERM and 5 % SIGKILL, so they scale by
  themselves), in ``system.slice/earlyoom.service`` with its unit's ``MemoryMax=50M``.

What each run records (bench/node_survival_outcomes.py reads it): the kernel's ``oom-kill:`` records from
/dev/kmsg, the pods' API objects every 100 ms (an eviction: a deletionTimestamp, reason Evicted, a
DisruptionTarget condition, or the object gone), MemAvailable and every pod cgroup's working set and
``pids.current`` every 100 ms, the system daemon's heartbeats, each pod process's exit status, evictd's
/proc/<pid>/stat. The pod the kubelet's ranking names at an eviction is computed with evictd's own core ranking
(`evictd.core.ranking.rank_pods`, memory) over the pods' API objects and their working sets of the last sample
before the eviction was seen (up to 100 ms older than what the evicter read).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import yaml
from evictd_process import EvictdProcess
from guest_v2_node import CGROUP, NODE, Node, make_cgroup, meminfo
from node_survival_outcomes import (
    heartbeat_max_gap_s,
    low_memory_seconds,
    oom_kill_record,
    pod_uid_of,
    victim_class,
)
from node_survival_workloads import GROWER, HEARTBEAT, PodSpec, Workload, oom_score_adj, workload

from evictd.core.fs_layout import FsLayout
from evictd.core.pod_parser import pod_from_dict
from evictd.core.ranking import rank_pods
from evictd.core.signals import Signal
from evictd.core.summary import MemoryStats, PodReference, PodStats

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20
SAMPLE_PERIOD_S = 0.1
SETTLE_S = 5.0  # after relief: what else happens (a second eviction, a late OOM kill)
EVICTD_READY_S = 60.0
KUBELET_UNIT, EVICTD_UNIT = "system.slice/kubelet.service", "system.slice/evictd.service"
DAEMON_UNIT, EARLYOOM_UNIT = "system.slice/heartbeat.service", "system.slice/earlyoom.service"
KUBELET_OOM_SCORE_ADJ = -999  # the kubelet's own (pkg/kubelet/qos: KubeletOOMScoreAdj)
EVICTD_OOM_SCORE_ADJ = -999  # deploy/systemd/evictd.service OOMScoreAdjust=
EARLYOOM_ARGS = ("-r", "3600")  # Debian's /etc/default/earlyoom
EARLYOOM_MEMORY_MAX = 50 * MiB  # Debian's earlyoom.service MemoryMax=


def join_unit(unit: str, oom_adj: int) -> str:
    """A shell prefix that puts the shell in `unit`'s cgroup with `oom_adj`, before it execs what follows."""
    make_cgroup(unit)
    return f"echo $$ > {CGROUP / unit / 'cgroup.procs'} && echo {oom_adj} > /proc/self/oom_score_adj && "


def proc_stat(pid: int) -> dict[str, float]:
    """CPU seconds and page faults of `pid` from /proc/<pid>/stat (fields 10, 12, 14, 15 of proc(5))."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"cpuS": (int(rest[11]) + int(rest[12])) / ticks, "minorFaults": int(rest[7]),
            "majorFaults": int(rest[9])}


class Kmsg:
    """The kernel's log from now on (/dev/kmsg, read without blocking at the end of a run)."""

    def __init__(self) -> None:
        self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self.fd, 0, os.SEEK_END)

    def lines(self) -> list[str]:
        found = []
        while True:
            try:
                found.append(os.read(self.fd, 8192).decode(errors="replace").rstrip("\n"))
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten before they were read: go on with the next
                continue
        os.close(self.fd)
        return found


class StandIn:
    """The stand-in backend: tests/uml/guest_v2_node.py's Node (test API server, stand-in kubelet)."""

    name = "stand-in"

    def __init__(self, work: Path) -> None:
        self.node = Node("cgroupfs", work, allocatable_bytes=None, sample=False)

    def new_run(self, namespace: str) -> None:
        self.node.remove_pods()
        self.node.namespace = namespace

    def start_pod(self, spec: PodSpec, args: tuple[str, ...], mem_total: int) -> Any:
        return self.node.add_pod(spec.name, spec.request_mib, script=GROWER, args=args, qos=spec.qos,
                                 limit_mib=spec.limit_mib, oom_score_adj=oom_score_adj(spec, mem_total))

    def api_pods(self) -> list[dict[str, Any]]:
        return self.node.api.store.pods(self.node.namespace)

    def evictd_settings(self, work: Path) -> dict[str, Any]:
        return {"nodeName": NODE, "kubeconfig": str(self.node.api.kubeconfig_path)}

    def end_run(self) -> None:
        self.node.remove_pods()

    def close(self) -> None:
        self.node.close()


def evictd_documents(work: Path, settings: dict[str, Any]) -> tuple[str, str]:
    """The shipped configuration (config/), as a KubeletConfiguration body and an EvictdConfiguration body,
    changed only where the guest is not a node (the module's docstring says where)."""
    kubelet = yaml.safe_load((REPO / "config/kubelet-config.yaml").read_text())
    kubelet["cgroupDriver"] = "cgroupfs"
    evictd = yaml.safe_load((REPO / "config/evictd-config.yaml").read_text())
    evictd.update(settings)
    evictd.update({"stateDir": str(work / "state"), "kubeletRootDir": str(work / "kubelet"),
                   "podLogsDir": str(work / "pod-logs"), "imageFsPath": str(work), "containerFsPath": str(work),
                   "containerRuntimeEndpoint": "unix:///run/no-runtime.sock"})
    for key in ("apiVersion", "kind", "metricsBindAddress", "logFormat"):  # EvictdProcess writes these
        kubelet.pop(key, None)
        evictd.pop(key, None)
    return yaml.safe_dump(kubelet, sort_keys=False), yaml.safe_dump(evictd, sort_keys=False)


class Protector:
    """One protector's process (none for `kernel`), started before the pressure, stopped after the run."""

    def __init__(self, name: str, backend: StandIn, work: Path) -> None:
        self.name = name
        self.evictd: EvictdProcess | None = None
        self.earlyoom: subprocess.Popen[bytes] | None = None
        if name == "evictd":
            kubelet, evictd = evictd_documents(work, backend.evictd_settings(work))
            wrapper = ("sh", "-c", join_unit(EVICTD_UNIT, EVICTD_OOM_SCORE_ADJ) + 'exec "$@"', "sh")
            self.evictd = EvictdProcess(work, kubelet=kubelet, evictd=evictd, wrapper=wrapper)
            self.evictd.wait_event("evictd started", timeout=EVICTD_READY_S)
        elif name == "earlyoom":
            prefix = join_unit(EARLYOOM_UNIT, 0)
            (CGROUP / EARLYOOM_UNIT / "memory.max").write_text(str(EARLYOOM_MEMORY_MAX))
            log = open(work / "earlyoom.log", "wb")  # noqa: SIM115 (closed with the process, in stop)
            self.earlyoom = subprocess.Popen(["sh", "-c", prefix + "exec earlyoom " + " ".join(EARLYOOM_ARGS)],
                                             stdout=log, stderr=subprocess.STDOUT)
            self._log = log
            time.sleep(1.0)  # its first poll
            if self.earlyoom.poll() is not None:
                raise RuntimeError(f"earlyoom exited {self.earlyoom.returncode}: {(work / 'earlyoom.log').read_text()}")
        elif name != "kernel":
            raise KeyError(f"unknown protector {name!r} for this backend")

    def stat(self) -> dict[str, Any] | None:
        if self.evictd is None:
            return None
        alive = self.evictd.process.poll() is None
        figures: dict[str, Any] = proc_stat(self.evictd.process.pid) if alive else {}
        return {**figures, "alive": alive, "exit": self.evictd.process.returncode}

    def stop(self) -> dict[str, Any]:
        if self.evictd is not None:
            with contextlib.suppress(Exception):
                return {"evictdExit": self.evictd.stop()}
            self.evictd.process.kill()
        if self.earlyoom is not None:
            alive = self.earlyoom.poll() is None
            self.earlyoom.terminate()
            self.earlyoom.wait()
            self._log.close()
            return {"earlyoomAliveAtEnd": alive}
        return {}


class Sampler(threading.Thread):
    """MemAvailable and every pod cgroup's working set and pids.current, every SAMPLE_PERIOD_S; the pods' API
    objects, with the first moment each was seen evicted and the pod the ranking named then."""

    def __init__(self, backend: StandIn, pods: dict[str, Any], namespace: str) -> None:
        super().__init__(daemon=True)
        self.backend, self.pods, self.namespace = backend, pods, namespace
        self.memory: list[tuple[float, int]] = []
        self.cgroups: list[tuple[float, dict[str, tuple[int, int]]]] = []
        self.evictions: dict[str, dict[str, Any]] = {}
        self.last_seen: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.sample()
            except Exception as exc:  # recorded in the run's JSON; sampling goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(SAMPLE_PERIOD_S)

    def sample(self) -> None:
        now = time.monotonic()
        self.memory.append((now, meminfo()["MemAvailable"]))
        figures = {}
        for name, pod in self.pods.items():
            figures[name] = pod_cgroup_figures(pod.cgroup)
        self.cgroups.append((now, figures))
        seen = {p["metadata"]["name"]: p for p in self.backend.api_pods()}
        for name in self.pods:
            manifest = seen.get(name)
            if name in self.evictions:
                continue
            if manifest is None and name in self.last_seen:
                self.evicted(name, now, self.last_seen[name], gone=True)
            elif manifest is not None and is_evicted(manifest):
                self.evicted(name, now, manifest, gone=False)
        self.last_seen.update(seen)

    def evicted(self, name: str, now: float, manifest: dict[str, Any], *, gone: bool) -> None:
        """Record an eviction of `name` first seen at `now`, and the pod the kubelet's ranking names among the
        pods still running (their last sample before this one)."""
        figures = self.cgroups[-2][1] if len(self.cgroups) > 1 else self.cgroups[-1][1]
        candidates = [pod_from_dict(m) for n, m in self.last_seen.items()
                      if n not in self.evictions and figures.get(n, (0, 0))[1] > 0]
        stats = {pod.name: PodStats(pod_ref=PodReference(pod.name, pod.namespace, pod.uid),
                                    memory=MemoryStats(working_set_bytes=figures[pod.name][0]))
                 for pod in candidates}
        ranked = rank_pods(Signal.MEMORY_AVAILABLE, FsLayout(), candidates, lambda pod: stats.get(pod.name))
        status = manifest.get("status") or {}
        self.evictions[name] = {"pod": name, "at": now, "goneWhenSeen": gone,
                                "expected": ranked[0].name if ranked else None,
                                "reason": status.get("reason"), "message": status.get("message")}


def is_evicted(manifest: dict[str, Any]) -> bool:
    status = manifest.get("status") or {}
    return bool(manifest["metadata"].get("deletionTimestamp") or status.get("reason") == "Evicted"
                or any(c.get("type") == "DisruptionTarget" for c in status.get("conditions") or []))


def pod_cgroup_figures(cgroup: str) -> tuple[int, int]:
    """(working set bytes, pids.current) of a pod cgroup; (0, 0) once it is gone."""
    try:
        current = int((CGROUP / cgroup / "memory.current").read_text())
        stat = (CGROUP / cgroup / "memory.stat").read_text()
        inactive = next(int(line.split()[1]) for line in stat.splitlines() if line.startswith("inactive_file "))
        return max(0, current - inactive), int((CGROUP / cgroup / "pids.current").read_text())
    except (FileNotFoundError, OSError):
        return 0, 0


def wait_memory_settled(timeout_s: float = 30.0) -> None:
    """Until MemAvailable stops rising (a killed pod's memory given back) or `timeout_s`."""
    deadline, last = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        now = meminfo()["MemAvailable"]
        if now - last < 4 * MiB:
            return
        last = now
        time.sleep(1.0)


def one_run(backend: StandIn, protector_name: str, spec: Workload, index: int, args: argparse.Namespace,
            work: Path) -> dict[str, Any]:
    namespace = f"{spec.name}-{protector_name}-{index}"
    work = work / namespace
    work.mkdir(parents=True)
    wait_memory_settled()
    backend.new_run(namespace)
    mem_total = meminfo()["MemTotal"]
    beats_path = work / "heartbeat"
    daemon = subprocess.Popen(["sh", "-c", join_unit(DAEMON_UNIT, 0) + 'exec "$0" -c "$1" "$2"', sys.executable,
                               HEARTBEAT, str(beats_path)])
    pods: dict[str, Any] = {}
    for pod_spec in spec.pods:  # the pods that only hold memory first, at once
        if not pod_spec.pressure:
            pods[pod_spec.name] = backend.start_pod(pod_spec, (str(pod_spec.hold_mib), "0", str(pod_spec.cap_mib)),
                                                   mem_total)
            pods[pod_spec.name].send("go")
            pods[pod_spec.name].proc.stdout.readline()  # "ready": it holds its memory
    time.sleep(1.0)
    protector = Protector(protector_name, backend, work)
    pressure = [p for p in spec.pods if p.pressure]
    wait_memory_settled(10.0)
    head_total = max(0.0, (meminfo()["MemAvailable"] - args.start_available_mib * MiB) / MiB)
    for pod_spec in pressure:
        share = head_total / len(pressure)
        head = min(share, pod_spec.cap_mib) if pod_spec.cap_mib else share
        pods[pod_spec.name] = backend.start_pod(pod_spec, (f"{head:.1f}", str(pod_spec.rate_mib_s),
                                                           str(pod_spec.cap_mib)), mem_total)
    kmsg = Kmsg()
    for pod_spec in pressure:  # the head start, all at once
        pods[pod_spec.name].send("go")
    for pod_spec in pressure:
        answer = pods[pod_spec.name].proc.stdout.readline()
        if answer != "ready\n":
            raise RuntimeError(f"{pod_spec.name} did not take its head start: {answer!r} "
                               f"(exit {pods[pod_spec.name].proc.poll()})")
    sampler = Sampler(backend, pods, namespace)
    evictd_before = protector.stat()
    started = time.monotonic()
    sampler.start()
    for pod_spec in pressure:
        pods[pod_spec.name].send("grow")
    relief: float | None = None
    capped_since: float | None = None
    while time.monotonic() - started < args.run_timeout_s:
        time.sleep(0.2)
        latest = sampler.cgroups[-1][1] if sampler.cgroups else {}
        stopped = [p.name for p in pressure if pods[p.name].proc.poll() is not None
                   or latest.get(p.name, (0, 1))[1] == 0]
        if stopped and relief is None:
            relief = time.monotonic()
        if relief is not None and (len(stopped) == len(pressure) or spec.hold_s) \
                and time.monotonic() - relief >= SETTLE_S:
            break
        if spec.hold_s and relief is None:
            at_cap = all(latest.get(p.name, (0, 0))[0] >= 0.97 * p.cap_mib * MiB for p in pressure)
            capped_since = (capped_since or time.monotonic()) if at_cap else None
            if capped_since is not None and time.monotonic() - capped_since >= spec.hold_s:
                break
    ended = time.monotonic()
    evictd_after = protector.stat()
    sampler.stopping.set()
    sampler.join(timeout=5)
    stopped_protector = protector.stop()
    kills = []
    for line in kmsg.lines():
        record = oom_kill_record(line)
        if record is None:
            continue
        uid = pod_uid_of(record.get("task_memcg", ""))
        pod_name = next((n for n, p in pods.items() if p.uid == uid), None)
        kills.append({"class": victim_class(record.get("task_memcg", "")), "task": record.get("task"),
                      "pid": record.get("pid"), "memcg": record.get("task_memcg"), "pod": pod_name,
                      "constraint": record.get("constraint"), "kernelUsec": record.get("usec")})
    daemon_alive = daemon.poll() is None
    daemon.kill()
    daemon.wait()
    beats = [float(x) for x in beats_path.read_text().split()] if beats_path.exists() else []
    exits = {name: pod.proc.poll() for name, pod in pods.items()}
    evictions = []
    for eviction in sampler.evictions.values():
        evictions.append({**eviction, "at": eviction["at"] - started,
                          "asRanked": eviction["expected"] == eviction["pod"]})
    stopped_how: dict[str, str] = {}
    for name, code in exits.items():
        if code is None and name not in sampler.evictions:
            continue
        if name in sampler.evictions:
            stopped_how[name] = "evicted"
        elif any(k["pod"] == name for k in kills):
            stopped_how[name] = "OOM-killed"
        elif code == -15:
            stopped_how[name] = "SIGTERM"
        else:
            stopped_how[name] = f"exit {code}"
    # The growth the pressure pods achieved (the user-mode kernel may not fault pages in at the rate asked):
    # their summed working set from the first sample to its peak, over that time.
    sums = [(at, sum(figures.get(p.name, (0, 0))[0] for p in pressure)) for at, figures in sampler.cgroups]
    peak_at, peak = max(sums, key=lambda item: item[1]) if sums else (started, 0)
    growth = (peak - sums[0][1]) / MiB / (peak_at - sums[0][0]) if sums and peak_at > sums[0][0] else None
    by_class: dict[str, int] = {}
    for kill in kills:
        by_class[kill["class"]] = by_class.get(kill["class"], 0) + 1
    has_guaranteed = any(p.qos == "guaranteed" for p in spec.pods)
    backend.end_run()
    evictd = None
    if evictd_before is not None and evictd_after is not None and "cpuS" in evictd_after:
        evictd = {"cpuS": evictd_after["cpuS"] - evictd_before["cpuS"],
                  "minorFaults": evictd_after["minorFaults"] - evictd_before["minorFaults"],
                  "majorFaults": evictd_after["majorFaults"] - evictd_before["majorFaults"],
                  "aliveAtEnd": evictd_after["alive"]}
    elif evictd_after is not None:
        evictd = {"aliveAtEnd": False, "exit": evictd_after["exit"]}
    return {
        "backend": backend.name, "workload": spec.name, "protector": protector_name, "run": index,
        "kernel": {"release": platform.release(), "version": platform.version(), "label": args.kernel_label,
                   "psi": Path("/proc/pressure/memory").exists()},
        "memTotalMib": mem_total // MiB, "startAvailableMib": args.start_available_mib,
        "durationS": ended - started, "growthMibPerS": growth, "pressurePeakMib": peak / MiB,
        "oomKills": kills, "oomKillsByClass": by_class,
        "evictions": evictions, "stopped": stopped_how, "exits": exits,
        "lowMemoryS": low_memory_seconds(sampler.memory, mem_total),
        "minAvailableMib": min(a for _, a in sampler.memory) / MiB if sampler.memory else None,
        "reliefS": None if relief is None else relief - started,
        "heartbeatMaxGapS": heartbeat_max_gap_s(beats, started, ended),
        "daemonAlive": daemon_alive,
        "guaranteedAlive": exits.get("guaranteed") is None if has_guaranteed else None,
        "evictd": evictd, "protectorEnd": stopped_protector,
        "samplerErrors": sampler.errors[:5], "kubeletErrors": backend.node.kubelet_errors[:5],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="stand-in", choices=("stand-in", "real"))
    parser.add_argument("--protectors", default="kernel,evictd")
    parser.add_argument("--workloads", default="be-slow")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--start-available-mib", type=int, default=600)
    parser.add_argument("--run-timeout-s", type=float, default=180.0)
    parser.add_argument("--kernel-label", default="")
    args = parser.parse_args()
    out = Path(os.environ["UML_OUT"])
    if args.backend == "real":
        (out / "guest-error.txt").write_text("the real backend is not built yet (bench/node_survival_guest.py)")
        return 2
    make_cgroup(KUBELET_UNIT)
    (CGROUP / KUBELET_UNIT / "cgroup.procs").write_text(str(os.getpid()))
    Path("/proc/self/oom_score_adj").write_text(str(KUBELET_OOM_SCORE_ADJ))
    work = Path("/run/survival")
    work.mkdir(parents=True)
    backend = StandIn(work / "node")
    status = 0
    try:
        mem_total_mib = meminfo()["MemTotal"] // MiB
        for protector in args.protectors.split(","):
            for name in args.workloads.split(","):
                for index in range(args.runs):
                    try:
                        result = one_run(backend, protector, workload(name, mem_total_mib), index, args, work)
                    except Exception as exc:  # the run's failure is its record; the next runs go on
                        result = {"backend": backend.name, "workload": name, "protector": protector, "run": index,
                                  "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                        status = 1
                        with contextlib.suppress(Exception):
                            backend.end_run()
                    with open(out / "runs.jsonl", "a") as runs:
                        runs.write(json.dumps(result, default=str) + "\n")
                    print(f"[guest] {protector} {name} run {index}: "
                          f"{'error' if 'error' in result else 'done'}", flush=True)
    finally:
        backend.close()
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Guest side of the node-survival arena (bench/node_survival.py boots the guest and runs this as its work).

``python node_survival_guest.py --backend stand-in --protectors kernel,evictd --workloads be-slow --runs 1`` runs
every (protector, workload, run) in turn inside one cgroup v2 guest and appends one JSON document per run to
``$UML_OUT/runs.jsonl`` as soon as the run ends (a guest that dies mid-way keeps what it finished).

The node: bench/node_survival_nodes.py (``--backend stand-in``: the test API server and a stand-in kubelet;
``--backend real``: the real kubelet, containerd and API server in the guest). The pods cgroup's memory.max is the
node's capacity, as a kubelet with nothing reserved sets it (the stand-in sets it so too).

Protectors (each started after the pods, before the workload's pressure):
* ``kernel``: nobody evicts (on the real backend the kubelet's thresholds are 0 %); the kernel's OOM killer alone.
* ``kubelet-defaults``, ``kubelet-same`` (real backend only): the kubelet's own eviction with its defaults
  (``memory.available<100Mi``) or with evictd's shipped thresholds; no evictd. ``kubelet-pid``: kubelet-same
  plus ``pid.available: 25%``, the kubelet beside ``evictd-pid`` for the fork bomb.
* ``evictd``: ``evictd run`` with deploy/systemd/config.yaml as shipped, acting (hard ``memory.available<200Mi``,
  soft ``<500Mi`` for 90 s, ``allocatableMemory.available`` copied by ``enforceNodeAllocatable: [pods]``, the
  memory stall signal where the kernel has PSI, reclaim before evict, 10 s housekeeping, memory locked), unscaled;
  the kubelet's thresholds 0 %; changed only where the guest differs from a node: ``cgroupDriver: cgroupfs`` (no
  systemd in the guest), its node name, kubeconfig (the real backend: its DaemonSet identity's token), state and
  kubelet folders, the container runtime (none on the stand-in). It runs in ``system.slice/evictd.service`` with
  oom_score_adj -999, nice -5 and best-effort I/O priority 0, as deploy/systemd/evictd.service gives it.
* ``evictd-stall``: ``evictd`` plus its memory stall signal (PSI), the stall maps of
  config/examples/06-memory-stall.yaml (bench/node_survival_pagecache.py); a run on a kernel without PSI fails.
* ``evictd-refault``: ``evictd`` plus its refault signal (``evictd.io/memory.refault``,
  bench/node_survival_pagecache.py's REFAULT_MAPS), on any kernel.
* ``evictd-reclaim``: ``evictd`` plus reclaim before evict (``memoryReclaimBeforeEviction: true``, the default
  50 ms budget; bench/node_survival_pagecache.py's RECLAIM_SETTINGS).
* ``evictd-daemons-reclaim``: ``evictd`` plus reclaim for the daemons (``daemonsReclaim: true``;
  bench/node_survival_pagecache.py's DAEMONS_RECLAIM_SETTINGS).
* ``evictd-pid``: ``evictd`` plus ``pid.available: 25%`` in evictionHard (bench/node_survival_controls_guest.py).
* ``evictd-no-minreclaim``: ``evictd`` without ``evictionMinimumReclaim``'s ``memory.available: 100Mi``.
* ``kubelet-same-dryrun`` (real backend only): ``kubelet-same``, and ``evictd`` beside it in dry-run (its memory on
  the node, nothing acted on).
* ``earlyoom``: Debian's earlyoom with Debian's arguments (/etc/default/earlyoom: ``-r 3600``; its default
  thresholds are percentages of the guest's memory, 10 % SIGTERM and 5 % SIGKILL, so they scale by
  themselves), in ``system.slice/earlyoom.service`` with its unit's ``MemoryMax=50M``.
* ``systemd-oomd`` (PSI only): Debian's systemd-oomd watching the pods cgroup (bench/node_survival_oomd.py).

What each run records (bench/node_survival_outcomes.py reads it): the kernel's ``oom-kill:`` records from
/dev/kmsg, the pods' API objects every 100 ms (an eviction: a deletionTimestamp, reason Evicted, a
DisruptionTarget condition, or the object gone), MemAvailable and every pod cgroup's working set and its
container cgroup's ``pids.current`` every 100 ms, the system daemon's heartbeats (and, in the page-cache thrash on
the stand-in backend, a kubelet stand-in's, beating after each pass over its own file), each pod process's exit
status (stand-in) or container status (real), evictd's /proc/<pid>/stat and its unit's PSI (memory and CPU
``some``: how long its own tasks stalled), evictd's log and state folder (its flight recording) kept beside
``runs.jsonl``, and on the real backend the node
Lease's renewTime and the Node's Ready condition every second; file pages re-read, the node's PSI stall and
memory.available at the daemon's longest gap (bench/node_survival_catalog.py `PageCacheRun`, which also
writes a page-cache workload's files and drops the caches before each run). The pod the kubelet's ranking names at an
eviction is computed with evictd's own core ranking (`evictd.core.ranking.rank_pods`, memory) over the run's
pods' API objects and their working sets of the last sample before the eviction was seen (up to 100 ms older
than what the evicter read; pods of other namespaces, such as the real backend's identity pod, left out). The
non-memory controls record their own figures (bench/node_survival_controls_guest.py `Controls`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import yaml
from evictd_process import EvictdProcess
from guest_v2_node import CGROUP, make_cgroup, meminfo
from node_survival_catalog import PageCacheRun, workload
from node_survival_controls_guest import EVICTD_PID, Controls, evictd_settings
from node_survival_nodes import (
    BACKENDS,
    KUBELET_PID,
    UNITS_OOM_SCORE_ADJ,
    PodHandle,
    grower_argv,
    join_unit,
    pod_cgroup_figures,
    root_working_set,
    shipped_documents,
)
from node_survival_oomd import OOMD, OomdProcess
from node_survival_outcomes import (
    container_termination,
    crossing_figures,
    heartbeat_max_gap_s,
    host_ran_short,
    is_evicted,
    lease_renew_max_gap_s,
    low_memory_seconds,
    oom_kill_record,
    pod_uid_of,
    ranking_sample,
    victim_class,
)
from node_survival_pagecache import (
    DAEMONS_RECLAIM_PROTECTOR,
    DAEMONS_REFAULT_PROTECTOR,
    STALL_PROTECTORS,
    SYSTEM_MEMORY_LOW_ENV,
    TRACE_ENV,
    kubelet_argv,
    psi_totals,
    reclaim_settings,
    stall_maps,
)
from node_survival_workloads import Workload

from evictd.core.fs_layout import FsLayout
from evictd.core.pod_parser import pod_from_dict
from evictd.core.ranking import rank_pods
from evictd.core.signals import Signal
from evictd.core.summary import MemoryStats, PodReference, PodStats

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20
SAMPLE_PERIOD_S = 0.1
SETTLE_S = 5.0  # after the last pressure pod stopped: what else happens (a late OOM kill)
# A workload whose pods hold at their caps: how long after a stop the run still watches, the demand unchanged,
# for the protector's next act (a second eviction under the minimum reclaim). Three of the kubelet's 10 s
# housekeeping periods: a protector that acts on a tick gets to act.
AFTER_STOP_WATCH_S = 30.0
# After a run's end on the real backend, how long the API is still watched for the word on each pressure pod that
# stopped: the kubelet writes a pod's Evicted status only after it killed it (3 of 9 real disk-fill runs ended first,
# and showed "exit None" where the kubelet's log had an eviction).
FINAL_STATUS_WAIT_S = 15.0
# evictd's start-up takes its node Lease through the API server; the real backend's, in the loaded one-CPU guest,
# took over 60 s to answer at a run's start.
EVICTD_READY_S = 180.0
EVICTD_UNIT = "system.slice/evictd.service"
DAEMON_UNIT, EARLYOOM_UNIT = "system.slice/heartbeat.service", "system.slice/earlyoom.service"
KUBELET_UNIT = "system.slice/kubelet.service"  # the stand-in kubelet's (the arena's own process, node_survival_nodes)
ARENA_OOM_SCORE_ADJ = -999  # the kubelet's own (pkg/kubelet/qos: KubeletOOMScoreAdj): the stand-in kubelet's
HEALTH_PERIOD_S = 1.0
EVICTD_OOM_SCORE_ADJ = -999  # deploy/systemd/evictd.service OOMScoreAdjust=
# deploy/systemd/evictd.service Nice=, IOSchedulingClass= and IOSchedulingPriority= (the DaemonSet's command too).
EVICTD_PRIORITIES = "exec nice -n -5 ionice -c 2 -n 0 \"$@\""
EARLYOOM_ARGS = ("-r", "3600")  # Debian's /etc/default/earlyoom
EARLYOOM_MEMORY_MAX = 50 * MiB  # Debian's earlyoom.service MemoryMax=


# EVICTD_ARENA_TRACE=1: each run also writes trace-<run>.json to $UML_OUT, the kernel counters a node without PSI
# gives (node and system.slice) every SAMPLE_PERIOD_S and the heartbeats, to see when a stall begins against them.
TRACE = os.environ.get(TRACE_ENV) == "1"
TRACE_SITE = Path(__file__).resolve().parent / "trace_site"
TRACE_VMSTAT = ("pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct", "workingset_refault_file",
                "workingset_activate_file", "workingset_restore_file", "pgmajfault", "pgpgin", "allocstall_normal",
                "allocstall_movable",
                # compaction and migration: a locked page migrated faults again where it is touched
                "compact_stall", "compact_migrate_scanned", "pgmigrate_success", "thp_fault_alloc",
                "thp_collapse_alloc")
SLOW_READ_S = 0.05
TRACE_CGROUP = ("workingset_refault_file", "workingset_activate_file", "workingset_restore_file", "pgmajfault",
                "file", "active_file", "inactive_file", "anon", "pgscan", "pgsteal")
# memory.events: ``low`` counts reclaim of a cgroup below its memory.low (the kernel found nothing else to take).
TRACE_EVENTS = ("low", "high", "max")


def trace_counters() -> dict[str, Any]:
    """The node's /proc/vmstat and system.slice's and kubepods' memory.stat counters of TRACE_*, plus MemAvailable."""
    figures: dict[str, Any] = {}
    began = time.monotonic()
    for line in Path("/proc/vmstat").read_text().splitlines():
        key, value = line.split()
        if key in TRACE_VMSTAT:
            figures[key] = int(value)
    read_s = {"vmstat": time.monotonic() - began}
    for prefix, cgroup in (("sys.", "system.slice"), ("pods.", "kubepods")):
        path = CGROUP / cgroup / "memory.stat"
        began = time.monotonic()
        if path.exists():
            for line in path.read_text().splitlines():
                key, value = line.split()
                if key in TRACE_CGROUP:
                    figures[prefix + key] = int(value)
        events = CGROUP / cgroup / "memory.events"
        if events.exists():
            for line in events.read_text().splitlines():
                key, value = line.split()
                if key in TRACE_EVENTS:
                    figures[prefix + "events." + key] = int(value)
        read_s[prefix + "stat"] = time.monotonic() - began
    began = time.monotonic()
    figures["MemAvailable"] = meminfo()["MemAvailable"]
    read_s["meminfo"] = time.monotonic() - began
    began = time.monotonic()
    figures.update(evictd_threads_cpu())
    read_s["threads"] = time.monotonic() - began
    # A read that took long (over SLOW_READ_S) is kept: where the trace itself waited.
    figures.update({f"readS.{what}": round(took, 3) for what, took in read_s.items() if took > SLOW_READ_S})
    return figures


_EVICTD: list[int] = []  # the running `evictd run`'s pid, found once a run
_NAMES: dict[str, str] = {}  # its threads' names by "comm.<tid>", read once


def evictd_threads_cpu() -> dict[str, Any]:
    """utime + stime (clock ticks) of each thread of the `evictd run` process, as ``cpu.<tid>`` (the main thread's tid
    is the pid): which of its threads take the one CPU when."""
    for _ in range(2):
        if not _EVICTD:
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        if b"\0-m\0evictd\0run\0" in (entry / "cmdline").read_bytes():
                            _EVICTD[:] = [int(entry.name)]
                            _NAMES.clear()
                            break
        if not _EVICTD:
            return {}
        try:
            ticks: dict[str, Any] = {}
            for task in Path(f"/proc/{_EVICTD[0]}/task").iterdir():
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                ticks[f"cpu.{task.name}"] = int(fields[11]) + int(fields[12])
                ticks[f"kcpu.{task.name}"] = int(fields[12])  # stime alone: the kernel's work for it (reclaim too)
                ticks[f"flt.{task.name}"] = int(fields[7]) + int(fields[9])  # its page faults, minor and major
                if f"comm.{task.name}" not in _NAMES:
                    with contextlib.suppress(OSError):
                        _NAMES[f"comm.{task.name}"] = (task / "comm").read_text().strip()
                ticks[f"comm.{task.name}"] = _NAMES.get(f"comm.{task.name}", "")
                if fields[0] == "R":  # running: what it is in (a read: of which file)
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        call = (task / "syscall").read_text().split()
                        what = call[0]
                        if call[0] in ("0", "17"):  # read, pread64
                            what += " " + os.readlink(f"/proc/{_EVICTD[0]}/fd/{int(call[1], 16)}")
                        ticks[f"run.{task.name}"] = what
            return ticks
        except OSError:
            _EVICTD.clear()
    return {}


def proc_stat(pid: int) -> dict[str, float]:
    """CPU seconds and page faults of `pid` from /proc/<pid>/stat (fields 10, 12, 14, 15 of proc(5))."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"cpuS": (int(rest[11]) + int(rest[12])) / ticks, "minorFaults": int(rest[7]), "majorFaults": int(rest[9])}


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


# evictd as shipped without the memory.available minimum reclaim (100Mi): what the third pod of many-small on the
# real node is the price of (docs/node-survival.md).
EVICTD_NO_MIN_RECLAIM = "evictd-no-minreclaim"
# The kubelet with evictd's thresholds (kubelet-same) and evictd beside it in dry-run: evictd's own memory (locked)
# on the node, its decisions only logged; what the kubelet decides with evictd's footprint present.
KUBELET_SAME_BESIDE_DRY_RUN = "kubelet-same-dryrun"


def evictd_documents(work: Path, backend: Any, protector: str = "evictd") -> tuple[str, str]:
    """The shipped configuration (`shipped_documents`), as a KubeletConfiguration body and an EvictdConfiguration
    body, changed only where the guest is not a node (the module's docstring says where); evictd-stall's and
    evictd-refault's stall maps."""
    kubelet, evictd = shipped_documents()
    evictd.update({"stateDir": str(work / "state"), "kubeletRootDir": str(work / "kubelet"),
                   "podLogsDir": str(work / "pod-logs"), "imageFsPath": str(work), "containerFsPath": str(work)})
    if protector == DAEMONS_REFAULT_PROTECTOR:
        for key, value in stall_maps(protector).items():
            evictd[key] = {**evictd.get(key, {}), **value}
    else:
        evictd.update(stall_maps(protector))
    evictd.update(reclaim_settings(protector))
    if protector == EVICTD_NO_MIN_RECLAIM:
        kubelet.get("evictionMinimumReclaim", {}).pop("memory.available", None)
    if protector == KUBELET_SAME_BESIDE_DRY_RUN:
        evictd["dryRun"] = True
    backend.evictd_documents(kubelet, evictd)
    evictd_settings(kubelet, evictd, protector)
    for key in ("apiVersion", "kind", "metricsBindAddress", "logFormat"):  # EvictdProcess writes these
        kubelet.pop(key, None)
        evictd.pop(key, None)
    return yaml.safe_dump(kubelet, sort_keys=False), yaml.safe_dump(evictd, sort_keys=False)


class Protector:
    """One protector's process (none for `kernel`), started before the pressure, stopped after the run."""

    def __init__(self, name: str, backend: Any, work: Path) -> None:
        self.name = name
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.evictd: EvictdProcess | None = None
        self.earlyoom: subprocess.Popen[bytes] | None = None
        self.oomd = OomdProcess.for_run(work) if name == OOMD else None
        if name in ("evictd", "evictd-refault", "evictd-reclaim", DAEMONS_RECLAIM_PROTECTOR, DAEMONS_REFAULT_PROTECTOR,
                    *STALL_PROTECTORS,
                    EVICTD_PID, EVICTD_NO_MIN_RECLAIM, KUBELET_SAME_BESIDE_DRY_RUN):
            kubelet, evictd = evictd_documents(work, backend, name)
            # Traced, its threads carry their names at the OS (bench/trace_site/sitecustomize.py), for the trace.
            named = f"export PYTHONPATH={TRACE_SITE}${{PYTHONPATH:+:$PYTHONPATH}}; " if TRACE else ""
            wrapper = ("sh", "-c", join_unit(EVICTD_UNIT, EVICTD_OOM_SCORE_ADJ) + named + EVICTD_PRIORITIES, "sh")
            self.evictd = EvictdProcess(work, kubelet=kubelet, evictd=evictd, wrapper=wrapper)
            try:
                self.evictd.wait_event("evictd started", timeout=EVICTD_READY_S)
            except BaseException:  # never left running into the next runs (it would hold the node's Lease)
                self.evictd.process.kill()
                self.evictd.process.wait()
                raise
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
        elif name not in ("kernel", "kubelet-defaults", "kubelet-same", KUBELET_PID, OOMD):
            raise KeyError(f"unknown protector {name!r} for this backend")

    def stat(self) -> dict[str, Any] | None:
        if self.evictd is None:
            return None
        alive = self.evictd.process.poll() is None
        figures: dict[str, Any] = proc_stat(self.evictd.process.pid) if alive else {}
        # How long evictd's own tasks stalled on memory (direct reclaim) and waited for the CPU: its unit's PSI.
        for resource in ("memory", "cpu"):
            pressure = CGROUP / EVICTD_UNIT / f"{resource}.pressure"
            with contextlib.suppress(OSError, KeyError):
                figures[f"{resource}StallSomeS"] = psi_totals(pressure.read_text())["some"]
        return {**figures, "alive": alive, "exit": self.evictd.process.returncode}

    def stop(self) -> dict[str, Any]:
        if self.evictd is not None:
            try:
                return {"evictdExit": self.evictd.stop()}
            except Exception:  # a hung stop: killed below
                self.evictd.process.kill()
            finally:
                # evictd's own log events, kept to diagnose a run (never read for its outcomes).
                kept = Path(os.environ["UML_OUT"]) / f"evictd-{self.work.parent.name}-{self.work.name}.jsonl"
                kept.write_text("".join(json.dumps(e, default=str) + "\n" for e in self.evictd.events))
                # And its state folder, with the flight recording of every cycle (`evictd explain --state-dir`,
                # `evictd replay <folder>/recording`): what each cycle read and decided, e.g. a stall's onset.
                with contextlib.suppress(OSError):
                    shutil.copytree(self.work / "state", kept.with_name(f"state-{self.work.parent.name}-"
                                                                        f"{self.work.name}"), dirs_exist_ok=True)
        if self.earlyoom is not None:
            alive = self.earlyoom.poll() is None
            self.earlyoom.terminate()
            self.earlyoom.wait()
            self._log.close()
            # Its log (whom it signalled, and why), kept to diagnose a run, as evictd's is.
            with contextlib.suppress(OSError):
                shutil.copyfile(self.work / "earlyoom.log", Path(os.environ["UML_OUT"]) /
                                f"earlyoom-{self.work.parent.name}-{self.work.name}.log")
            return {"earlyoomAliveAtEnd": alive}
        return self.oomd.stop() if self.oomd is not None else {}


class Sampler:
    """Two threads: the kernel's figures (MemAvailable, every pod cgroup's working set and its container's
    pids.current) every SAMPLE_PERIOD_S; the API server's (the pods' objects, with the first moment each was
    seen evicted and the pod the ranking named then; the node's health every HEALTH_PERIOD_S) as often as the
    API server answers, at most every SAMPLE_PERIOD_S. Apart, so that a slow API request (the real API server
    in a loaded guest) does not thin out the kernel's figures."""

    def __init__(self, backend: Any, pods: dict[str, PodHandle], namespace: str) -> None:
        self.backend, self.pods, self.namespace = backend, pods, namespace
        self.health: list[tuple[float, dict[str, Any]]] = []
        self._health_due = 0.0
        self.memory: list[tuple[float, int]] = []
        self.signal: list[tuple[float, int]] = []
        self.cgroups: list[tuple[float, dict[str, tuple[int, int]]]] = []
        self.evictions: dict[str, dict[str, Any]] = {}
        self.last_seen: dict[str, dict[str, Any]] = {}
        self._listed_once = False
        self.errors: list[str] = []
        self.trace: list[tuple[float, dict[str, Any]]] = []
        self.stopping = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(self.sample_kernel,), daemon=True),
                         threading.Thread(target=self._loop, args=(self.sample_api,), daemon=True)]

    def start(self) -> None:
        self.sample_kernel()  # a first figure before the API's
        for thread in self._threads:
            thread.start()

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout=timeout)

    def _loop(self, sample: Any) -> None:
        while not self.stopping.is_set():
            try:
                sample()
            except Exception as exc:  # recorded in the run's JSON; sampling goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(SAMPLE_PERIOD_S)

    def sample_kernel(self) -> None:
        now, info = time.monotonic(), meminfo()
        self.memory.append((now, info["MemAvailable"]))
        self.signal.append((now, info["MemTotal"] - root_working_set()))  # the kubelet's memory.available
        self.cgroups.append((now, {name: pod_cgroup_figures(pod) for name, pod in self.pods.items()}))
        if TRACE:
            self.trace.append((now, trace_counters()))

    def sample_api(self) -> None:
        now = time.monotonic()
        if now >= self._health_due:
            self._health_due = now + HEALTH_PERIOD_S
            health = self.backend.node_health()
            if health is not None:
                self.health.append((now, health))
        seen = {p["metadata"]["name"]: p for p in self.backend.api_pods()}
        now = time.monotonic()
        for name in self.pods:
            manifest = seen.get(name)
            if name in self.evictions:
                continue
            if manifest is None and name in self.last_seen:
                self.evicted(name, now, self.last_seen[name], gone=True)
            elif manifest is None and not self._listed_once:
                # Every pod ran before sampling started: one already gone from the first listing was evicted during
                # the head start (seen in the reclaim cells: the reader evicted 8 s before the first reading).
                self.evicted(name, now, {"metadata": {"name": name}}, gone=True)
            elif manifest is not None and is_evicted(manifest):
                self.evicted(name, now, manifest, gone=False)
        self.last_seen.update(seen)
        self._listed_once = True

    def evicted(self, name: str, now: float, manifest: dict[str, Any], *, gone: bool) -> None:
        """Record an eviction of `name` first seen at `now`, and the pod the kubelet's ranking names among the
        pods running in the last sample in which `name` still ran (`ranking_sample`)."""
        figures = ranking_sample(self.cgroups, name)
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


def status_pending(stopped: set[str], evictions: dict[str, Any], last_seen: dict[str, dict[str, Any]]) -> set[str]:
    """The stopped pods the API has given no last word on yet: not seen evicted, still listed, and in no final
    phase (Failed, Succeeded)."""
    return {name for name in stopped if name not in evictions and name in last_seen
            and (last_seen[name].get("status") or {}).get("phase") not in ("Failed", "Succeeded")}


def run_over(now: float, *, all_stopped: bool, last_stop: float | None, capped_since: float | None,
             hold_s: float) -> bool:
    """Whether a run is over at `now`: SETTLE_S after its last pressure pod stopped; for a workload whose pods hold
    at their caps (`hold_s`), once those still running have held there since `capped_since` for the hold and, after
    a stop, AFTER_STOP_WATCH_S have passed since the last one (what a protector does next under the same demand)."""
    if all_stopped and last_stop is not None and now - last_stop >= SETTLE_S:
        return True
    return bool(hold_s) and capped_since is not None and now - capped_since >= hold_s \
        and (last_stop is None or now - last_stop >= AFTER_STOP_WATCH_S)


def wait_memory_settled(timeout_s: float = 30.0) -> None:
    """Until MemAvailable stops rising (a killed pod's memory given back) or `timeout_s`."""
    deadline, last = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        now = meminfo()["MemAvailable"]
        if now - last < 4 * MiB:
            return
        last = now
        time.sleep(1.0)


def wait_for_file(path: Path, what: str, pod: PodHandle, backend: Any, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if backend.exit_code(pod) is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{pod.name} did not {what} (exit {backend.exit_code(pod)})")
        time.sleep(0.05)


def one_run(backend: Any, protector: Protector, spec: Workload, index: int, args: argparse.Namespace,
            work: Path) -> dict[str, Any]:
    namespace = f"{spec.name}-{protector.name}-{index}"
    work = work / namespace
    control = work / "control"  # the pods' go/ready/grow files (node_survival_workloads.GROWER)
    control.mkdir(parents=True)
    wait_memory_settled()
    backend.new_run(namespace)
    mem_total = meminfo()["MemTotal"]
    beats_path, cache = work / "heartbeat", PageCacheRun(spec, work)  # (files, dropped caches, refaults)
    daemon_args = (spec.daemon, str(beats_path)) if spec.daemon else cache.daemon_argv(beats_path)
    daemon = subprocess.Popen(["sh", "-c", join_unit(DAEMON_UNIT, 0) + 'exec "$0" -c "$@"', sys.executable,
                               *daemon_args])
    # The kubelet stand-in's own file-backed heartbeat (the page-cache thrash, stand-in backend: the real kubelet's
    # Lease is measured on the real one).
    kubelet_beats = work / "kubelet-heartbeat"
    kubelet_args = kubelet_argv(spec, kubelet_beats) if getattr(backend, "name", "") != "real" else None
    kubelet_beat = None if kubelet_args is None else subprocess.Popen(
        ["sh", "-c", join_unit(KUBELET_UNIT, UNITS_OOM_SCORE_ADJ) + 'exec "$0" -c "$@"', sys.executable,
         *kubelet_args])
    pods: dict[str, PodHandle] = {}
    for pod_spec in spec.pods:  # the pods that only hold memory first, at once
        if not pod_spec.pressure:
            pods[pod_spec.name] = backend.start_pod(pod_spec, grower_argv(pod_spec.hold_mib, pod_spec, control),
                                                   mem_total)
            (control / f"go.{pod_spec.name}").touch()
            wait_for_file(control / f"ready.{pod_spec.name}", "take its memory", pods[pod_spec.name], backend)
    cache.before_pressure(backend, control, mem_total, pods)  # a deploy's old pods rolled out (or nothing)
    pressure = [p for p in spec.pods if p.pressure]
    wait_memory_settled(10.0)
    # The kubelet stand-in's file is working set that MemAvailable counts as free: the head start leaves it too, so
    # that the thrash starts with the same margin over its hot files as before the stand-in beat.
    kept_mib = args.start_available_mib + (getattr(spec, "kubelet_file_mib", 0) if kubelet_beat is not None else 0)
    head_total = max(0.0, (meminfo()["MemAvailable"] - kept_mib * MiB) / MiB)
    for pod_spec in pressure:
        share = head_total / len(pressure)
        head = min(share, pod_spec.cap_mib) if pod_spec.cap_mib else share
        pods[pod_spec.name] = backend.start_pod(pod_spec, grower_argv(head, pod_spec, control), mem_total)
    controls = Controls(spec, pods, namespace, control, backend)  # the non-memory controls' (or nothing)
    kmsg = Kmsg()
    for pod_spec in pressure:  # the head start, all at once
        (control / f"go.{pod_spec.name}").touch()
    for pod_spec in pressure:
        wait_for_file(control / f"ready.{pod_spec.name}", "take its head start", pods[pod_spec.name], backend)
    sampler = Sampler(backend, pods, namespace)
    evictd_before = protector.stat()
    started = time.monotonic()
    sampler.start()
    cache.start(pods)
    (control / "grow").touch()
    relief: float | None = None  # the first stop
    last_stop: float | None = None
    capped_since: float | None = None
    stopped: set[str] = set()
    while time.monotonic() - started < args.run_timeout_s:
        time.sleep(0.2)
        now = time.monotonic()
        latest = sampler.cgroups[-1][1] if sampler.cgroups else {}
        now_stopped = {p.name for p in pressure if backend.exit_code(pods[p.name]) is not None
                       or latest.get(p.name, (0, 1))[1] == 0}
        if now_stopped - stopped:
            relief, last_stop = relief or now, now
        stopped = now_stopped
        if spec.hold_s:
            at_cap = all(latest.get(p.name, (0, 0))[0] >= 0.97 * p.cap_mib * MiB
                         for p in pressure if p.name not in stopped)
            capped_since = (capped_since or now) if at_cap else None
        if run_over(now, all_stopped=len(stopped) == len(pressure), last_stop=last_stop, capped_since=capped_since,
                    hold_s=spec.hold_s):
            break
    if getattr(backend, "name", "") == "real":
        final_status_by = time.monotonic() + FINAL_STATUS_WAIT_S
        while time.monotonic() < final_status_by and status_pending(stopped, sampler.evictions, sampler.last_seen):
            time.sleep(0.2)
    ended = time.monotonic()
    evictd_after, cache_figures = protector.stat(), cache.figures(beats_path)
    sampler.stopping.set()
    sampler.join(timeout=5)
    kills = []
    host_short = 0
    for line in kmsg.lines():
        host_short += host_ran_short(line)
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
    kubelet_beat_alive = None if kubelet_beat is None else kubelet_beat.poll() is None
    if kubelet_beat is not None:
        kubelet_beat.kill()
        kubelet_beat.wait()
    kubelet_beat_times = ([float(x) for x in kubelet_beats.read_text().split()] if kubelet_beats.exists()
                          else [])
    if TRACE:
        (Path(os.environ["UML_OUT"]) / f"trace-{namespace}.json").write_text(json.dumps({
            "started": started, "ended": ended, "samples": sampler.trace, "beats": beats,
            "kubeletBeats": kubelet_beat_times, "evictions": list(sampler.evictions.values())}))
    final = sampler.cgroups[-1][1] if sampler.cgroups else {}
    exits = {name: backend.exit_code(pod) for name, pod in pods.items()}
    terminated = {name: container_termination(sampler.last_seen.get(name)) for name in pods}
    evictions = []
    for eviction in sampler.evictions.values():
        evictions.append({**eviction, "at": eviction["at"] - started,
                          "asRanked": eviction["expected"] == eviction["pod"]})
    stopped_how: dict[str, str] = {}
    for name in pods:
        code, ended_by = exits[name], terminated[name]
        oom_killed = any(k["pod"] == name for k in kills)
        if name in sampler.evictions:
            # Evicted, but the kernel killed it before whoever carries evictions out (the kubelet) stopped it.
            stopped_how[name] = "evicted, OOM-killed first" if oom_killed else "evicted"
        elif oom_killed:
            stopped_how[name] = "OOM-killed"
        elif code == -15 or (ended_by or {}).get("exitCode") == 143:
            stopped_how[name] = "SIGTERM"
        elif code is not None or ended_by is not None or final.get(name, (0, 1))[1] == 0:
            stopped_how[name] = f"exit {code if code is not None else (ended_by or {}).get('exitCode')}"
    # The growth the pressure pods achieved (the user-mode kernel may not fault pages in at the rate asked):
    # their summed working set from the first sample to its peak, over that time.
    sums = [(at, sum(figures.get(p.name, (0, 0))[0] for p in pressure)) for at, figures in sampler.cgroups]
    peak_at, peak = max(sums, key=lambda item: item[1]) if sums else (started, 0)
    growth = (peak - sums[0][1]) / MiB / (peak_at - sums[0][0]) if sums and peak_at > sums[0][0] else None
    by_class: dict[str, int] = {}
    for kill in kills:
        by_class[kill["class"]] = by_class.get(kill["class"], 0) + 1
    has_guaranteed = any(p.qos == "guaranteed" for p in spec.pods)
    renewals = [h["renew"] for _, h in sampler.health if h.get("renew") is not None]
    not_ready = sum(1 for _, h in sampler.health if h.get("ready") not in (None, "True"))
    protector_end = protector.stop()  # before the teardown: it acts on nothing of it
    backend.end_run()
    if host_short:  # the run's outcome is the host's, not the protector's
        raise RuntimeError(f"user-mode Linux ran out of memory on the host side {host_short} time(s) (its message on "
                           "the guest's kernel log): a guest process it could not map was killed with SIGSEGV, "
                           "by neither the protector nor the guest's OOM killer; raise the host's vm.max_map_count "
                           "(sysctl vm.max_map_count=262144) and run it again")
    evictd = None
    if evictd_before is not None and evictd_after is not None and "cpuS" in evictd_after:
        evictd = {"cpuS": evictd_after["cpuS"] - evictd_before["cpuS"],
                  "minorFaults": evictd_after["minorFaults"] - evictd_before["minorFaults"],
                  "majorFaults": evictd_after["majorFaults"] - evictd_before["majorFaults"],
                  "aliveAtEnd": evictd_after["alive"]}
        for stall in ("memoryStallSomeS", "cpuStallSomeS"):  # a kernel with PSI
            if stall in evictd_before and stall in evictd_after:
                evictd[stall] = evictd_after[stall] - evictd_before[stall]
    elif evictd_after is not None:
        evictd = {"aliveAtEnd": False, "exit": evictd_after["exit"]}
    return controls.finish(sampler, started, ended, {
        "backend": backend.name, "workload": spec.name, "protector": protector.name, "run": index,
        "kernel": {"release": platform.release(), "version": platform.version(), "label": args.kernel_label,
                   "psi": Path("/proc/pressure/memory").exists()},
        "memTotalMib": mem_total // MiB, "startAvailableMib": args.start_available_mib,
        "systemSliceMemoryLowMib": int((CGROUP / "system.slice" / "memory.low").read_text().split()[0]
                                       .replace("max", str(1 << 62))) // MiB,
        "durationS": ended - started, "growthMibPerS": growth, "pressurePeakMib": peak / MiB,
        "oomKills": kills, "oomKillsByClass": by_class,
        "evictions": evictions, "stopped": stopped_how, "exits": exits,
        "lowMemoryS": low_memory_seconds(sampler.memory, mem_total),
        "minAvailableMib": min(a for _, a in sampler.memory) / MiB if sampler.memory else None,
        **crossing_figures(sampler.signal, started, [e["at"] for e in evictions]),
        "reliefS": None if relief is None else relief - started,
        "heartbeatMaxGapS": heartbeat_max_gap_s(beats, started, ended), "daemonAlive": daemon_alive,
        "kubeletHeartbeatMaxGapS": (None if kubelet_beat is None
                                    else heartbeat_max_gap_s(kubelet_beat_times, started, ended)),
        "kubeletBeatAlive": kubelet_beat_alive,
        "guaranteedAlive": "guaranteed" not in stopped_how if has_guaranteed else None,
        "evictd": evictd, "protectorEnd": protector_end,
        "leaseRenewMaxGapS": lease_renew_max_gap_s(renewals) if sampler.health else None,
        "notReadySamples": not_ready if sampler.health else None,
        "samplerErrors": sampler.errors[:5], "backendErrors": backend.errors(), **cache_figures,
    })


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
    backend_class = BACKENDS[args.backend]
    make_cgroup(backend_class.own_unit)
    (CGROUP / backend_class.own_unit / "cgroup.procs").write_text(str(os.getpid()))
    # cgroup2 as systemd 247+ mounts it on a node: a slice's memory.low reaches its services.
    subprocess.run(["mount", "-o", "remount,memory_recursiveprot", str(CGROUP)], check=True)
    system_low_mib = int(os.environ.get(SYSTEM_MEMORY_LOW_ENV, "0"))
    if system_low_mib:  # the node's own protection of its daemons (an operator's MemoryLow= on system.slice)
        (CGROUP / "system.slice" / "memory.low").write_text(str(system_low_mib * MiB))
    Path("/proc/self/oom_score_adj").write_text(str(ARENA_OOM_SCORE_ADJ))
    work = Path("/run/survival")
    status = 0
    try:
        backend = backend_class(work / "node")
    except Exception as exc:  # every run fails with it
        for protector_name in args.protectors.split(","):
            for name in args.workloads.split(","):
                for index in range(args.runs):
                    write_record(out, {"backend": args.backend, "workload": name, "protector": protector_name,
                                       "run": index, "error": f"{type(exc).__name__}: {exc}",
                                       "traceback": traceback.format_exc()})
        return 1
    try:
        mem_total_mib = meminfo()["MemTotal"] // MiB
        for protector_name in args.protectors.split(","):
            for name in args.workloads.split(","):
                for index in range(args.runs):
                    protector = None
                    try:
                        backend.use_protector(protector_name)  # (a kubelet restart only when it changes)
                        protector = Protector(protector_name, backend, work / protector_name / f"{name}-{index}")
                        spec = workload(name, mem_total_mib, backend.requests_fit_mib(mem_total_mib))
                        result = one_run(backend, protector, spec, index, args,
                                         work / protector_name)
                    except Exception as exc:  # the run's failure is its record; the next runs go on
                        result = {"backend": args.backend, "workload": name, "protector": protector_name,
                                  "run": index, "error": f"{type(exc).__name__}: {exc}",
                                  "traceback": traceback.format_exc()}
                        status = 1
                        with contextlib.suppress(Exception):
                            if protector is not None:
                                protector.stop()
                        with contextlib.suppress(Exception):
                            backend.end_run()
                    write_record(out, result)
    finally:
        backend.close()
    return status


def write_record(out: Path, record: dict[str, Any]) -> None:
    with open(out / "runs.jsonl", "a") as runs:
        runs.write(json.dumps(record, default=str) + "\n")
    print(f"[guest] {record['protector']} {record['workload']} run {record['run']}: "
          f"{record.get('error', 'done')}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

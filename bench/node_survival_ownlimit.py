"""The node-survival arena's own-limit workloads: stalls the stall gate should not act on (#38 item 2, #44 item 4).

evictd's stall gate (src/evictd/core/stall_gate.py, ``stallRequiresNodeReclaim``) counts a node stall threshold only
while /proc/vmstat's global scan counters grew in the last 10 s: the kernel does not count a memory cgroup's
reclaim inside its own limit there. These two workloads make a node stall, or reclaim, without the node being short
of memory, so that the arena shows what the gate holds back (protector ``evictd-stall-nogate``: ``evictd-stall``
with ``stallRequiresNodeReclaim: false``, bench/node_survival_pagecache.py `stall_maps`).

* ``own-limit-thrash``: `THRASHERS` Burstable pods (request `THRASHER_REQUEST_MIB`, limit `THRASHER_LIMIT_MIB`,
  the pod cgroup's memory.max) whose working set is a file of `THRASHER_FILE_MIB` on the guest's disk, every page
  touched through a mapping, pass after pass without a pause (`THRASHER`; ready at once, no warm-up pass, so that
  the thrash starts with the run): each pass re-reads the file from disk and reclaims inside the pod's limit (its
  memory.events ``max`` grows, its memory.pressure and the node's PSI stall), while the node has ~2 GiB free and
  does no node-wide reclaim. Beside them the Guaranteed pod (200 MiB), a BestEffort pod holding `BYSTANDER_MIB` of
  anonymous memory (the first pod of the kubelet's memory ranking: the would-be victim of a stall eviction) and
  the system daemon (HEARTBEAT). The thrashers are the workload's pressure pods: the run ends `OWN_LIMIT_HOLD_S`
  after the start, or 5 s after a thrasher stopped. Expected with ``evictd-stall``: nobody evicted.
* ``backup-stream``: a backup job outside the pods (``system.slice/backup.service``, oom_score_adj 0, as a node's
  backup agent runs) reads a file of `BACKUP_SHARE_OF_MEMTOTAL` x MemTotal once with ``cat`` to /dev/null, from a
  cold page cache, beside the Guaranteed pod and the system daemon: the node's free memory fills with use-once
  page cache and kswapd reclaims it (global scans grow), with nothing worth evicting for. The file is written once
  a boot on the guest's disk (it needs --disk-mib above 1.5 x MemTotal plus `DISK_MARGIN_MIB`; the run fails
  saying so otherwise). The run ends `OWN_LIMIT_HOLD_S` after the start (the stream may end before).

Figures of every run (`OwnLimitRun`, called by bench/node_survival_catalog.py's `PageCacheRun`; ``ownLimit`` in the
run's JSON): each thrasher pod cgroup's memory.events ``max`` and ``oom_kill`` counts and memory.pressure
``some``/``full`` totals over the run (read every `SAMPLE_PERIOD_S`, so that an evicted pod's last reading stays),
summed over the thrashers; the backup job's seconds to stream its file. `node_scan_pages` gives the node's global
scans over the run (``nodeScanMib``, every run). bench/node_survival_outcomes.py `own_limit_rows` tables them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node_survival_nodes import join_unit
from node_survival_pagecache import FilePodSpec, disk, file_path, psi_totals, write_file
from node_survival_workloads import PodSpec, Workload, guaranteed_pod

MiB = 1 << 20
OWN_LIMIT_THRASH, BACKUP_STREAM = "own-limit-thrash", "backup-stream"
OWN_LIMIT_WORKLOADS = (OWN_LIMIT_THRASH, BACKUP_STREAM)
THRASHERS = 1
THRASHER_REQUEST_MIB, THRASHER_LIMIT_MIB, THRASHER_FILE_MIB = 32, 64, 200
BYSTANDER_MIB = 150
OWN_LIMIT_HOLD_S = 60.0
BACKUP_SHARE_OF_MEMTOTAL = 1.5
DISK_MARGIN_MIB = 512  # beside the backup file: the thrashers' files, the kubelet's and the daemon's folders
BACKUP_UNIT = "system.slice/backup.service"
SAMPLE_PERIOD_S = 0.5
# /proc/vmstat's node-wide scans, as the stall gate reads them (the kernel leaves a cgroup's own-limit reclaim out).
GLOBAL_SCANS = ("pgscan_kswapd", "pgscan_direct")
PAGE = 4096


# A thrasher pod's process: argv as GROWER's (only CONTROL_FOLDER and NAME are read); the line before this text sets
# FILE. Once CONTROL_FOLDER/go.NAME exists and the system daemon has beaten once, it creates CONTROL_FOLDER/ready.NAME
# at once (its working set cannot fit in its limit: no warm-up pass) and touches one byte of every page of FILE
# through a mapping, pass after pass, without a pause.
THRASHER = r"""
import mmap, os, sys, time
control, name = sys.argv[4:6]
def wait_for(path, timeout=1e9):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (not os.path.exists(path)
                                           or path.endswith("heartbeat") and not os.path.getsize(path)):
        time.sleep(0.02)
wait_for(os.path.join(control, "go." + name))
wait_for(os.path.join(control, os.pardir, "heartbeat"), timeout=120)
pages = memoryview(mmap.mmap(os.open(FILE, os.O_RDONLY), 0, prot=mmap.PROT_READ))[::4096]
open(os.path.join(control, "ready." + name), "w").close()
while True:
    bytes(pages)  # a major fault for every page reclaimed since the last pass: all of them, past the limit
"""


@dataclass(frozen=True)
class OwnLimitWorkload(Workload):
    backup_mib: int = 0  # the backup job's file (0: no backup job)


def thrasher_names() -> list[str]:
    return ["thrasher"] if THRASHERS == 1 else [f"thrasher-{i}" for i in range(THRASHERS)]


def own_limit_workload(name: str, mem_total_mib: int) -> OwnLimitWorkload:
    """The own-limit workload `name` for a node of `mem_total_mib` (MemTotal); KeyError for another name."""
    if name == OWN_LIMIT_THRASH:
        bystander = PodSpec("bystander", "besteffort", None, None, 0.0, BYSTANDER_MIB, False, hold_mib=BYSTANDER_MIB)
        thrashers = tuple(FilePodSpec(n, "burstable", THRASHER_REQUEST_MIB, THRASHER_LIMIT_MIB, 0.0, 0.0, True,
                                      script=f"FILE = {str(file_path(n, THRASHER_FILE_MIB))!r}\n" + THRASHER,
                                      file_mib=THRASHER_FILE_MIB, period_s=0.0)
                          for n in thrasher_names())
        return OwnLimitWorkload(name, (guaranteed_pod(), bystander, *thrashers), hold_s=OWN_LIMIT_HOLD_S)
    if name == BACKUP_STREAM:
        return OwnLimitWorkload(name, (guaranteed_pod(),), hold_s=OWN_LIMIT_HOLD_S,
                                backup_mib=int(mem_total_mib * BACKUP_SHARE_OF_MEMTOTAL))
    raise KeyError(name)


# --- pure readers (the tests' too) -------------------------------------------------------------------------


def events_counts(text: str) -> dict[str, int]:
    """A memory.events file (``low 0``, ``high 0``, ``max 12``, ``oom 0``, ``oom_kill 0``) as a dict."""
    counts = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            counts[key] = int(value)
    return counts


def node_scan_pages(before: Mapping[str, int], after: Mapping[str, int]) -> int | None:
    """Node-wide reclaim scans (`GLOBAL_SCANS`, pages) between two /proc/vmstat readings; None when not there."""
    if not all(key in before and key in after for key in GLOBAL_SCANS):
        return None
    return sum(after[key] - before[key] for key in GLOBAL_SCANS)


def counter_delta(readings: Sequence[Mapping[str, float]], key: str) -> float | None:
    """`key`'s growth from the first reading to the last (None: fewer than two readings, or not in them)."""
    if len(readings) < 2 or key not in readings[0] or key not in readings[-1]:
        return None
    return readings[-1][key] - readings[0][key]


def sum_or_none(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return sum(measured) if measured else None


# --- the guest side ------------------------------------------------------------------------------------------


def cgroup_reading(folder: Path) -> dict[str, float]:
    """A pod cgroup's memory.events counts and memory.pressure totals (``stallSome``, ``stallFull``, seconds)."""
    reading: dict[str, float] = dict(events_counts((folder / "memory.events").read_text()))
    pressure = folder / "memory.pressure"
    if pressure.exists():
        totals = psi_totals(pressure.read_text())
        reading.update({"stallSome": totals.get("some", 0.0), "stallFull": totals.get("full", 0.0)})
    return reading


class OwnLimitRun:
    """One run's own-limit side (nothing for other workloads): the backup file written at its making (before
    `PageCacheRun` drops the caches); at `start`, the thrashers' cgroups sampled and the backup job started; at
    `figures`, the job stopped and the run's figures."""

    def __init__(self, spec: Workload) -> None:
        self.spec = spec
        self.backup_mib = getattr(spec, "backup_mib", 0)
        self.backup_path = file_path("backup", self.backup_mib)
        if self.backup_mib:
            if not os.path.ismount(disk()):
                raise RuntimeError(f"workload {spec.name} needs the guest's own disk at {disk()} (--disk-mib > 0)")
            stat = os.statvfs(disk())
            free_mib = stat.f_bavail * stat.f_frsize // MiB + (self.backup_path.stat().st_size // MiB
                                                                if self.backup_path.exists() else 0)
            if free_mib < self.backup_mib + DISK_MARGIN_MIB:
                needed = self.backup_mib + DISK_MARGIN_MIB
                raise RuntimeError(f"workload {spec.name} streams a {self.backup_mib} MiB file: the guest disk "
                                   f"has {free_mib} MiB for it, {needed} needed: raise --disk-mib")
            write_file(self.backup_path, self.backup_mib)
        self.readings: dict[str, list[dict[str, float]]] = {}
        self.folders: dict[str, Path] = {}
        self.backup: subprocess.Popen[bytes] | None = None
        self.backup_started = 0.0
        self.backup_ended: float | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def start(self, pods: Mapping[str, Any]) -> None:
        from guest_v2_node import CGROUP

        self.folders = {name: CGROUP / pod.cgroup for name, pod in pods.items() if name.startswith("thrasher")}
        self.readings = {name: [] for name in self.folders}
        if self.backup_mib:
            self.backup_started = time.monotonic()
            self.backup = subprocess.Popen(["sh", "-c", join_unit(BACKUP_UNIT, 0) + 'exec cat "$0" > /dev/null',
                                            str(self.backup_path)])
        if self.folders or self.backup is not None:
            self._read()
            self.thread.start()

    def _read(self) -> None:
        for name, folder in self.folders.items():
            with contextlib.suppress(OSError, ValueError):  # gone (evicted): its last reading stays
                self.readings[name].append(cgroup_reading(folder))
        if self.backup is not None and self.backup_ended is None and self.backup.poll() is not None:
            self.backup_ended = time.monotonic()

    def _sample(self) -> None:
        while not self.stopping.wait(SAMPLE_PERIOD_S):
            self._read()

    def figures(self) -> dict[str, Any]:
        if not self.folders and self.backup is None:
            return {}
        self._read()
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)
        backup = None
        if self.backup is not None:
            exit_code = self.backup.poll()
            if exit_code is None:
                self.backup.kill()
                self.backup.wait()
            backup = {"fileMib": self.backup_mib, "exit": exit_code,
                      "streamedS": None if self.backup_ended is None else self.backup_ended - self.backup_started}
        per_pod = {name: {key: counter_delta(readings, key) for key in ("max", "oom_kill", "stallSome", "stallFull")}
                   for name, readings in self.readings.items()}
        return {"ownLimit": {
            "thrashers": per_pod,
            "thrasherMaxEvents": sum_or_none([p["max"] for p in per_pod.values()]),
            "thrasherOomKills": sum_or_none([p["oom_kill"] for p in per_pod.values()]),
            "thrasherStallS": {"some": sum_or_none([p["stallSome"] for p in per_pod.values()]),
                               "full": sum_or_none([p["stallFull"] for p in per_pod.values()])},
            "backup": backup,
        }}

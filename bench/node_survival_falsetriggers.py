"""The node-survival arena's false triggers: busy nodes that are not short of memory (issue #61 item 4).

Four workloads an operator runs every day, each beside the Guaranteed pod (200 MiB) and the system daemon
(``system.slice/heartbeat.service``, node_survival_workloads.HEARTBEAT: its longest gap is the run's). In every one
the node has memory to spare: expected with evictd as shipped (the stall signal and its gate, reclaim before evict):
**nobody evicted, no kernel OOM kill**. Sizes scale with the node (MemTotal, `mem_total_mib`). The node's large
file (`stream_file_mib`) is the backup stream's (node_survival_ownlimit: 1.5 x MemTotal), written once a boot on the
guest's disk and shared by every workload that reads it:

* ``jvm-warmup``: a Burstable JVM-like pod (request: its heap plus `JVM_OVERHEAD_MIB`, no limit) takes its heap,
  `JVM_HEAP_SHARE` x MemTotal (about half the node's available memory), as fast as the kernel faults it in
  (``-XX:+AlwaysPreTouch``: chunks of `JVM_CHUNK_MIB`, every page populated), then holds it. The node's free memory
  is page cache from before, as on any node that has run a while: before the run a node job (`PRIOR_CACHE_UNIT`)
  reads `PRIOR_CACHE_SHARE` x MemTotal of the node's large file once (`stream_file_mib`; MemFree near the
  watermarks after it), so that the warm-up takes its memory from reclaiming that cache (global scans) while
  ``memory.available`` (inactive file counts) stays well above the thresholds. The run ends
  `FALSE_TRIGGER_HOLD_S` after the start.
* ``db-fits``: a Burstable database pod (request `DB_REQUEST_MIB`, no limit) holding a buffer of `DB_BUFFER_MIB`
  of anonymous memory reads its data file of `DB_FILE_MIB` sequentially (its warm-up), then reads random
  `DB_READ_KIB` KiB pages of it with pread(2), `DB_READS_PER_S` a second, steadily: its whole file in the page cache,
  the pages read twice active (working set, charged to the pod, within its request), no shortage.
* ``log-shipper``: an app pod (Burstable, request `LOGGER_REQUEST_MIB`) appends ~200-byte log lines to a file on the
  node's disk at `LOG_RATE_MIB_S` MiB/s (a write every `LOG_WRITE_PERIOD_S`), and a log shipper pod (Burstable,
  request `SHIPPER_REQUEST_MIB`, limit `SHIPPER_LIMIT_MIB`, as fluent-bit runs) tails it, reading what is new every
  `SHIPPER_PERIOD_S`: dirty page cache and the flusher's writeback for the run (a page written then read once
  stays inactive). The file is removed at the run's end.
* ``compaction``: a Burstable job pod (request `COMPACTOR_REQUEST_MIB`, no limit) streams the node's large file
  (`stream_file_mib`, 1.5 x MemTotal) once with read(2), 1 MiB at a time, writing the first half of each MiB to its
  output (a compacted file of half the input's size), fsyncs the output and exits 0 (the Job completes): the page
  cache fills RAM and kswapd reclaims it (global scans grow), use-once pages and no anonymous shortage. The guest
  disk is nodefs: with 2.25 x MemTotal on it it must keep `NODEFS_KEEP_SHARE` free (above the shipped soft
  nodefs.available, 15 %), so the run needs --disk-mib 8192 on a 2.5 GiB node (9216 in a boot with db-fits, whose
  file stays), and fails saying how much more otherwise. The run ends 5 s after the job completes (or
  `COMPACTION_HOLD_S` after the start); the output is removed then.

Figures of every run (`FalseTriggerRun`, called by bench/node_survival_catalog.py's `PageCacheRun`;
``falseTrigger`` in the run's JSON), read every `SAMPLE_PERIOD_S` from the start: the highest PSI ``some``/``full``
``avg10`` (/proc/pressure/memory), the node's global scans (`GLOBAL_SCANS`) in all and the most within any 10 s
(the stall gate's window), the lowest ``memory.available`` as evictd and the kubelet compute it (MemTotal less the
root cgroup's working set) and the seconds it spent under the shipped soft threshold (500Mi), the highest page
cache (``Cached``), ``Dirty`` and ``Writeback``; and what each pod reported of its work (control/stats.NAME: the
heap's size and seconds, the database's reads, the log bytes written and shipped, the compaction's bytes and
seconds). Who was evicted, the kernel's OOM kills and the daemon's longest gap are every run's
(bench/node_survival_guest.py). bench/node_survival_outcomes.py `false_trigger_rows` tables them. The earlier false
triggers (`EARLIER_FALSE_TRIGGERS`: own-limit-thrash, backup-stream, deploy-burst) record the node's figures too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node_survival_deploy import avg10, peak_in_window
from node_survival_nodes import join_unit, root_working_set
from node_survival_outcomes import below_seconds
from node_survival_ownlimit import BACKUP_SHARE_OF_MEMTOTAL, GLOBAL_SCANS
from node_survival_pagecache import FilePodSpec, disk, file_path, meminfo_kib, vmstat_counters, write_file
from node_survival_workloads import PodSpec, Workload, guaranteed_pod

MiB = 1 << 20
PAGE = 4096
JVM_WARMUP, DB_FITS, LOG_SHIPPER, COMPACTION = "jvm-warmup", "db-fits", "log-shipper", "compaction"
FALSE_TRIGGER_WORKLOADS = (JVM_WARMUP, DB_FITS, LOG_SHIPPER, COMPACTION)
# The arena's earlier false triggers (node_survival_ownlimit, node_survival_deploy): their runs record this module's
# node figures too, so that the whole suite is one table.
EARLIER_FALSE_TRIGGERS = ("own-limit-thrash", "backup-stream", "deploy-burst")
# How long a run goes on from its start (the warm-up, the reads, the logging), as the own-limit workloads.
FALSE_TRIGGER_HOLD_S = 60.0

# jvm-warmup: the heap, 40 % of MemTotal: about half of what a 2.5 GiB node has available with its daemons and the
# Guaranteed pod running (the brief's 40-60 %).
JVM_HEAP_SHARE = 0.40
JVM_OVERHEAD_MIB = 64  # metaspace, code cache, thread stacks: in the request, beside the heap
JVM_CHUNK_MIB = 64  # one populated mapping at a time, as a pre-touching JVM commits its heap in regions
# The page cache from before: as much as the node has free (a node that ran a while has little MemFree), so that the
# heap comes from reclaiming it (0.40 left 132 MiB free after the heap, and kswapd never woke).
PRIOR_CACHE_SHARE = 0.75
PRIOR_CACHE_UNIT = "system.slice/prior-job.service"

# db-fits: a database whose data fits in memory with room to spare.
DB_FILE_MIB = 400
DB_BUFFER_MIB = 128
DB_REQUEST_MIB = 640  # buffer + file + 112 MiB: the pod's working set stays within its request
DB_READ_KIB = 8  # a database page (PostgreSQL's)
DB_READS_PER_S = 500
DB_BATCH_PERIOD_S = 0.01

# log-shipper: a chatty app and its shipper.
LOG_RATE_MIB_S = 4.0
LOG_WRITE_PERIOD_S = 0.05
LOGGER_REQUEST_MIB = 64
SHIPPER_REQUEST_MIB, SHIPPER_LIMIT_MIB = 64, 128
SHIPPER_PERIOD_S = 0.1

# compaction: the input is the node's large file (`stream_file_mib`); the output half of it.
COMPACTOR_REQUEST_MIB = 256
COMPACTION_HOLD_S = 300.0  # an upper bound: the run ends 5 s after the job completes
# The guest disk is nodefs (the kubelet root is on it): with the files and the output written it must keep more than
# the shipped evictionSoft nodefs.available (15 %) free, or the run would be a disk-pressure eviction.
NODEFS_KEEP_SHARE = 0.20

SAMPLE_PERIOD_S = 0.5
SCAN_WINDOW_S = 10.0  # the stall gate's window (src/evictd/core/stall_gate.py)
SOFT_THRESHOLD_MIB = 500  # deploy/systemd/config.yaml's evictionSoft memory.available


def falsetrigger_folder() -> Path:
    """Where the log file and the compaction's output are written (the node's disk), per run."""
    return disk() / "falsetrigger"


def log_path() -> Path:
    return falsetrigger_folder() / "app.log"


def compaction_output() -> Path:
    return falsetrigger_folder() / "compacted.dat"


# Every pod's script starts with this (argv as GROWER's: only CONTROL_FOLDER and NAME are read). `wait_for` waits
# for a control file; `report` replaces CONTROL_FOLDER/stats.NAME with a JSON object of its figures.
PRELUDE = r"""
import json, mmap, os, random, sys, time
control, name = sys.argv[4:6]
def wait_for(path):
    while not os.path.exists(os.path.join(control, path)):
        time.sleep(0.02)
def report(**figures):
    temporary = os.path.join(control, ".stats." + name)
    with open(temporary, "w") as out:
        json.dump(figures, out)
    os.replace(temporary, os.path.join(control, "stats." + name))
wait_for("go." + name)
"""

# The JVM: HEAP_MIB and CHUNK_MIB set before. At the run's start it maps and populates its heap chunk after chunk
# without a pause, reports the seconds, then holds it.
JVM = r"""
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
began, heap, taken = time.monotonic(), [], 0
while taken < HEAP_MIB:
    chunk = min(CHUNK_MIB, HEAP_MIB - taken)
    heap.append(mmap.mmap(-1, chunk << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE))
    taken += chunk
report(heapMib=taken, warmS=time.monotonic() - began)
while True:
    time.sleep(3600)
"""

# The database: FILE, BUFFER_MIB, READ_BYTES, READS_PER_S and BATCH_PERIOD set before. It takes its buffer, then at
# the run's start reads FILE once sequentially and reads random pages of it at READS_PER_S, reporting every second.
DATABASE = r"""
buffer = mmap.mmap(-1, BUFFER_MIB << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
fd = os.open(FILE, os.O_RDONLY)
pages = os.fstat(fd).st_size // READ_BYTES
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
began = time.monotonic()
while os.read(fd, 1 << 20):
    pass
warmed = time.monotonic()
pick, reads, tick, due = random.Random(name), 0, warmed, warmed + 1.0
batch = max(1, round(READS_PER_S * BATCH_PERIOD))
while True:
    for _ in range(batch):
        os.pread(fd, READ_BYTES, pick.randrange(pages) * READ_BYTES)
    reads += batch
    now = time.monotonic()
    tick = max(tick + BATCH_PERIOD, now - 1.0)  # behind by over a second: not caught up in a rush
    if now >= due:
        report(warmS=warmed - began, reads=reads, readingS=now - warmed)
        due = now + 1.0
    time.sleep(max(0.0, tick - now))
"""

# The app that logs: LOG, RATE_BYTES_S and PERIOD set before. From the run's start it appends lines to LOG at
# RATE_BYTES_S, one write every PERIOD, reporting the bytes written every second.
LOGGER = r"""
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
line = (b"2026-11-27T12:00:00.000000Z INFO  http  GET /api/v1/orders/1234567 status=200 bytes=5120 "
        b"duration_ms=12 trace=4bf92f3577b34da6a3ce929d0e0e4736 user=alice@example.com region=eu-west-1\n")
block = line * max(1, round(RATE_BYTES_S * PERIOD / len(line)))
began, written, due = time.monotonic(), 0, time.monotonic() + 1.0
with open(LOG, "ab", buffering=0) as log:
    while True:
        now = time.monotonic()
        if RATE_BYTES_S * (now - began) - written >= len(block):
            log.write(block)
            written += len(block)
        else:
            time.sleep(PERIOD)
        if now >= due:
            report(writtenBytes=written, loggingS=now - began)
            due = now + 1.0
"""

# The log shipper: LOG and PERIOD set before. From the run's start it waits for LOG, then reads whatever is new in it
# every PERIOD (tail -F), reporting the bytes shipped every second.
SHIPPER = r"""
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
while not os.path.exists(LOG):
    time.sleep(PERIOD)
began, shipped, due = time.monotonic(), 0, time.monotonic() + 1.0
with open(LOG, "rb", buffering=0) as log:
    while True:
        data = log.read(1 << 20)
        shipped += len(data)
        now = time.monotonic()
        if now >= due:
            report(shippedBytes=shipped, shippingS=now - began)
            due = now + 1.0
        if not data:
            time.sleep(PERIOD)
"""

# The compaction job: INPUT and OUTPUT set before. At the run's start it streams INPUT once, writing the first half of
# every MiB to OUTPUT + ".tmp", fsyncs it, renames it to OUTPUT (a compacted file replacing the old one) and exits.
COMPACTOR = r"""
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
began, read, written, due = time.monotonic(), 0, 0, time.monotonic() + 1.0
with open(INPUT, "rb", buffering=0) as source, open(OUTPUT + ".tmp", "wb", buffering=0) as target:
    while True:
        block = source.read(1 << 20)
        if not block:
            break
        read += len(block)
        written += target.write(block[:len(block) // 2])
        if time.monotonic() >= due:
            report(readBytes=read, writtenBytes=written, streamingS=time.monotonic() - began, done=False)
            due = time.monotonic() + 1.0
    streamed = time.monotonic()
    os.fsync(target.fileno())
os.replace(OUTPUT + ".tmp", OUTPUT)
ended = time.monotonic()
report(readBytes=read, writtenBytes=written, streamingS=streamed - began, fsyncS=ended - streamed,
       compactionS=ended - began, done=True)
"""


@dataclass(frozen=True)
class FalseTriggerWorkload(Workload):
    # The node's large file: the backup stream's (node_survival_ownlimit), 1.5 x MemTotal, written once a boot and
    # shared by the workloads that read it (one file on the disk for all of them; 0: none).
    stream_file_mib: int = 0
    prior_cache_mib: int = 0  # how much of it a node job reads once before the run (0: none)
    compaction_input_mib: int = 0  # the compaction's input: all of it (0: no compaction)


def _script(settings: Mapping[str, object], body: str) -> str:
    values = "".join(f"{key} = {value!r}\n" for key, value in settings.items())
    return values + PRELUDE + body


def stream_file_mib(mem_total_mib: int) -> int:
    """The node's large file (the backup stream's): 1.5 x MemTotal."""
    return int(mem_total_mib * BACKUP_SHARE_OF_MEMTOTAL)


def jvm_heap_mib(mem_total_mib: int) -> int:
    return int(mem_total_mib * JVM_HEAP_SHARE)


def false_trigger_workload(name: str, mem_total_mib: int) -> FalseTriggerWorkload:
    """The false-trigger workload `name` for a node of `mem_total_mib` (MemTotal); KeyError for another name."""
    if name == JVM_WARMUP:
        heap = jvm_heap_mib(mem_total_mib)
        jvm = PodSpec("jvm", "burstable", heap + JVM_OVERHEAD_MIB, None, 0.0, 0.0, True,
                      script=_script({"HEAP_MIB": heap, "CHUNK_MIB": JVM_CHUNK_MIB}, JVM))
        return FalseTriggerWorkload(name, (guaranteed_pod(), jvm), hold_s=FALSE_TRIGGER_HOLD_S,
                                    stream_file_mib=stream_file_mib(mem_total_mib),
                                    prior_cache_mib=int(mem_total_mib * PRIOR_CACHE_SHARE))
    if name == DB_FITS:
        settings = {"FILE": str(file_path("db", DB_FILE_MIB)), "BUFFER_MIB": DB_BUFFER_MIB,
                    "READ_BYTES": DB_READ_KIB * 1024, "READS_PER_S": DB_READS_PER_S,
                    "BATCH_PERIOD": DB_BATCH_PERIOD_S}
        db = FilePodSpec("db", "burstable", DB_REQUEST_MIB, None, 0.0, 0.0, True, script=_script(settings, DATABASE),
                         file_mib=DB_FILE_MIB)
        return FalseTriggerWorkload(name, (guaranteed_pod(), db), hold_s=FALSE_TRIGGER_HOLD_S)
    if name == LOG_SHIPPER:
        logger = PodSpec("logger", "burstable", LOGGER_REQUEST_MIB, None, 0.0, 0.0, True,
                         script=_script({"LOG": str(log_path()), "RATE_BYTES_S": int(LOG_RATE_MIB_S * MiB),
                                         "PERIOD": LOG_WRITE_PERIOD_S}, LOGGER))
        shipper = PodSpec("shipper", "burstable", SHIPPER_REQUEST_MIB, SHIPPER_LIMIT_MIB, 0.0, 0.0, True,
                          script=_script({"LOG": str(log_path()), "PERIOD": SHIPPER_PERIOD_S}, SHIPPER))
        return FalseTriggerWorkload(name, (guaranteed_pod(), logger, shipper), hold_s=FALSE_TRIGGER_HOLD_S)
    if name == COMPACTION:
        size = stream_file_mib(mem_total_mib)
        settings = {"INPUT": str(file_path("backup", size)), "OUTPUT": str(compaction_output())}
        compactor = PodSpec("compactor", "burstable", COMPACTOR_REQUEST_MIB, None, 0.0, 0.0, True,
                            script=_script(settings, COMPACTOR))
        return FalseTriggerWorkload(name, (guaranteed_pod(), compactor), hold_s=COMPACTION_HOLD_S,
                                    stream_file_mib=size, compaction_input_mib=size)
    raise KeyError(name)


# --- pure readers (the tests' too) -------------------------------------------------------------------------


def disk_short_mib(size_mib: int, free_mib: int, written_mib: int) -> int:
    """How many MiB the disk (`size_mib`, `free_mib` free) lacks to take `written_mib` and keep NODEFS_KEEP_SHARE of
    itself free (0: none). A MiB more disk is a MiB more free, and more to keep: hence the division."""
    lacking = written_mib + NODEFS_KEEP_SHARE * size_mib - free_mib
    return 0 if lacking <= 0 else int(lacking / (1 - NODEFS_KEEP_SHARE)) + 1


def work_figures(name: str, stats: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """What the workload `name`'s pods reported (stats: pod name -> its last report) as the table's figures: the
    heap's seconds, the database's reads a second, the log MiB written and shipped a second and the shipper's lag at
    the end, the compaction's seconds (None: not this workload's, or not reported)."""
    found: dict[str, float | None] = {}
    if name == JVM_WARMUP:
        found["heapWarmS"] = stats.get("jvm", {}).get("warmS")
    if name == DB_FITS:
        db = stats.get("db", {})
        found["dbWarmS"] = db.get("warmS")
        found["dbReadsPerS"] = db["reads"] / db["readingS"] if db.get("readingS") else None
    if name == LOG_SHIPPER:
        logger, shipper = stats.get("logger", {}), stats.get("shipper", {})
        found["logWrittenMibPerS"] = (logger["writtenBytes"] / MiB / logger["loggingS"]
                                      if logger.get("loggingS") else None)
        found["logShippedMibPerS"] = (shipper["shippedBytes"] / MiB / shipper["shippingS"]
                                      if shipper.get("shippingS") else None)
        found["logLagMib"] = (None if "writtenBytes" not in logger or "shippedBytes" not in shipper
                              else max(0.0, (logger["writtenBytes"] - shipper["shippedBytes"]) / MiB))
    if name == COMPACTION:
        compactor = stats.get("compactor", {})
        found["compactionS"] = compactor.get("compactionS") if compactor.get("done") else None
        found["compactionReadMib"] = compactor["readBytes"] / MiB if "readBytes" in compactor else None
    return found


# --- the guest side ------------------------------------------------------------------------------------------


class FalseTriggerRun:
    """One run's false-trigger side (nothing for other workloads): the files written at its making (before
    `PageCacheRun` drops the caches); `before_pressure` reads the prior cache in; `start` samples the node from the
    run's start; `figures` at the end (and removes the log and the compaction's output)."""

    def __init__(self, spec: Workload) -> None:
        self.spec = spec
        self.active = isinstance(spec, FalseTriggerWorkload)
        self.sampling = self.active or spec.name in EARLIER_FALSE_TRIGGERS
        self.stream_mib: int = getattr(spec, "stream_file_mib", 0)
        self.prior_mib: int = getattr(spec, "prior_cache_mib", 0)
        self.input_mib: int = getattr(spec, "compaction_input_mib", 0)
        self.control: Path | None = None
        self.setup: dict[str, Any] = {}
        self.samples: list[dict[str, float]] = []
        self.scans: list[tuple[float, int]] = []
        self.available: list[tuple[float, int]] = []  # (monotonic s, memory.available bytes)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        if not self.active:
            return
        if not os.path.ismount(disk()):  # the log, the files: on the node's disk, not in the guest's tmpfs
            raise RuntimeError(f"workload {spec.name} needs the guest's own disk at {disk()} (--disk-mib > 0)")
        self._remove_outputs()
        files = [(file_path("backup", self.stream_mib), self.stream_mib)] if self.stream_mib else []
        if files:
            stat = os.statvfs(disk())
            free_mib = stat.f_bavail * stat.f_frsize // MiB + sum(
                path.stat().st_size // MiB for path, _ in files if path.exists())
            short = disk_short_mib(stat.f_blocks * stat.f_frsize // MiB, free_mib,
                                   sum(mib for _, mib in files) + self.input_mib // 2)
            if short:
                raise RuntimeError(f"workload {spec.name} writes {sum(mib for _, mib in files)} MiB of files and "
                                   f"{self.input_mib // 2} MiB of output on the guest disk, which has {free_mib} MiB "
                                   f"free for them: that would leave nodefs under {NODEFS_KEEP_SHARE:.0%} available "
                                   f"(a disk-pressure eviction, not a memory one): give --disk-mib {short} more")
        for path, mib in files:
            write_file(path, mib)

    @staticmethod
    def _remove_outputs() -> None:
        for path in (log_path(), compaction_output(), compaction_output().with_name(compaction_output().name + ".tmp")):
            path.unlink(missing_ok=True)
        falsetrigger_folder().mkdir(parents=True, exist_ok=True)

    def before_pressure(self, control: Path) -> None:
        """The node's page cache from before the run (jvm-warmup): a node job reads the start of the large file."""
        if not self.active:
            return
        self.control = control
        if not self.prior_mib:
            return

        began = time.monotonic()
        subprocess.run(["sh", "-c", join_unit(PRIOR_CACHE_UNIT, 0) + 'exec head -c "$1" "$0" > /dev/null',
                        str(file_path("backup", self.stream_mib)), str(self.prior_mib * MiB)], check=True)
        info = meminfo_kib(Path("/proc/meminfo").read_text())
        self.setup = {"priorCacheMib": self.prior_mib, "priorReadS": time.monotonic() - began,
                      "cachedAfterPriorMib": info.get("Cached", 0) / 1024,
                      "memAvailableAfterPriorMib": info.get("MemAvailable", 0) / 1024}

    def start(self) -> None:
        if self.sampling:
            self._read()
            self.thread.start()

    def _read(self) -> None:
        now = time.monotonic()
        sample: dict[str, float] = {}
        with contextlib.suppress(OSError, ValueError, KeyError):
            vmstat = vmstat_counters(Path("/proc/vmstat").read_text())
            self.scans.append((now, sum(vmstat[key] for key in GLOBAL_SCANS)))
        with contextlib.suppress(OSError, ValueError):
            psi = Path("/proc/pressure/memory")
            if psi.exists():
                sample.update({f"psi_{kind}": value for kind, value in avg10(psi.read_text()).items()})
        with contextlib.suppress(OSError, ValueError, KeyError, StopIteration):
            info = meminfo_kib(Path("/proc/meminfo").read_text())
            sample.update({key: info[key] / 1024 for key in ("Cached", "Dirty", "Writeback", "Active(file)")})
            available = info["MemTotal"] * 1024 - root_working_set()
            sample["available"] = available / MiB
            self.available.append((now, available))
        self.samples.append(sample)

    def _sample(self) -> None:
        while not self.stopping.wait(SAMPLE_PERIOD_S):
            self._read()

    def _peak(self, key: str) -> float | None:
        values = [s[key] for s in self.samples if key in s]
        return max(values) if values else None

    def figures(self) -> dict[str, Any]:
        if not self.sampling:
            return {}
        self._read()
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)
        stats: dict[str, dict[str, Any]] = {}
        for pod in self.spec.pods:
            with contextlib.suppress(OSError, ValueError):
                stats[pod.name] = json.loads(((self.control or Path("/nonexistent")) / f"stats.{pod.name}").read_text())
        if self.active:
            self._remove_outputs()
        scan_peak = peak_in_window(self.scans, SCAN_WINDOW_S)
        lowest = min((value for _, value in self.available), default=None)
        psi = {kind: self._peak(f"psi_{kind}") for kind in ("some", "full")}
        return {"falseTrigger": {
            **self.setup,
            "psiAvg10PeakPercent": psi if any(v is not None for v in psi.values()) else None,
            "scanPeak10sMib": None if scan_peak is None else scan_peak * PAGE / MiB,
            "memoryAvailableMinMib": None if lowest is None else lowest / MiB,
            "belowSoftThresholdS": below_seconds(self.available, SOFT_THRESHOLD_MIB * MiB) if self.available else None,
            "cachedPeakMib": self._peak("Cached"), "dirtyPeakMib": self._peak("Dirty"),
            "writebackPeakMib": self._peak("Writeback"), "activeFilePeakMib": self._peak("Active(file)"),
            "pods": stats,
            **work_figures(self.spec.name, stats),
        }}

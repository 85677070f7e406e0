"""The node-survival arena's page-cache workloads and its stall-signal protector (issue #36 items 1 and 5; #44).

Files read through the guest's hostfs root leave no page cache in the guest; these workloads keep their files
on the guest's own ext4 disk (`boot_guest`'s disk, mounted at $UML_DISK_MOUNT, /run/disk; the arena's
--disk-mib), where they do. The arena writes each file once a boot, then, before every run, syncs and drops the
guest's caches, so that a file's pages are charged to the cgroup that reads them in the run (the pod, the daemon)
and every run starts from the same cold cache.

* ``thrash`` ("page-cache heavy"): a Burstable reader pod whose working set is `THRASH_READER_MIB` of file pages
  (its file mapped and every page touched every `THRASH_READER_PERIOD_S`), the system daemon keeping a
  file-backed working set of `THRASH_DAEMON_MIB` (its "binaries, libraries and data", every page touched every
  100 ms, a heartbeat after each pass: issue #44), on the stand-in backend a kubelet stand-in doing the same over
  `THRASH_KUBELET_MIB` (the kubelet's binary), a Guaranteed pod, and a BestEffort pod growing anonymous
  memory at 10 MiB/s without bound. Pages touched through a mapping stay on the inactive list until reclaim
  looks at them, and inactive file counts as available in the kubelet's formula: the node re-reads its own
  working set from disk (refaults) while ``memory.available`` still looks fine.
* ``active-file`` (kubernetes/kubernetes#43916): a BestEffort pod reads the same `ACTIVE_FILE_MIB` file twice
  (read(2), as ``cat`` does; the second read makes every page active, and active file counts as working set),
  beside a Guaranteed pod and a Burstable pod holding anonymous memory within its request (its head start: what
  the node has available beyond --start-available-mib, 600, taken at once; it does not grow). ``memory.available``
  (free + inactive file) ends near 600 - `ACTIVE_FILE_MIB` MiB, under evictd's hard 200 MiB, while the kernel,
  with that much free, reclaims nothing and kills nobody. The run ends `ACTIVE_FILE_HOLD_S` after the head start.

* ``backup-pod`` (issue #74): a BestEffort pod streams a `BACKUP_POD_FILE_MIB` file `BACKUP_POD_PASSES` times
  with read(2) (`STREAMER`) beside the system daemon and the kubelet stand-in of ``thrash`` (file-backed working
  sets) and a Guaranteed pod: the pod's page cache pushes the daemons' files out while nobody needs evicting.
  Sized for a 1.5 GiB node (--mem-mib 1536), the issue's guest. The run ends 5 s after the stream.
  ``backup-pod-long``: the same, the file read `BACKUP_POD_LONG_PASSES` times.
* ``thrash-two-growers`` (issue #74's new shapes): ``thrash`` with a second BestEffort pod growing at
  `SLOW_GROWER_RATE_MIB_S` beside the grower: both grow, the ranking picks.
* ``thrash-moving-daemon``: ``thrash`` whose system daemon's hot set moves: of a `MOVING_DAEMON_MIB` file it
  touches a `MOVING_WINDOW_MIB` window every 100 ms, the window `MOVING_STEP_MIB` further on after each pass
  (`MOVING_HEARTBEAT`), so that its re-reads are not always the same pages.

The daemon of the other workloads is node_survival_workloads.HEARTBEAT, unchanged (`daemon_argv`).

Per run (every workload, node_survival_catalog's `PageCacheRun`): file pages re-read, the delta of /proc/vmstat's
``workingset_refault_file`` (``workingset_refault`` on kernels before 5.9) over the run, in MiB; on a kernel with
PSI, the node's memory stall (/proc/pressure/memory ``some`` and ``full`` totals) over the run, in seconds; and
the kubelet's ``memory.available`` of the node (MemFree + Inactive(file), 100 ms samples) when the system
daemon's longest heartbeat gap began: what evictd and the kubelet saw while the daemon stalled.

The protector ``evictd-stall`` is evictd as shipped plus the stall maps of config/examples/06-memory-stall.yaml
(`STALL_MAPS`) in its EvictdConfiguration. It needs PSI: on a kernel without it (the default user-mode kernel)
the arena refuses it (`stall_maps`), where evictd itself would run on without its stall signal. The protector
``evictd-refault`` is evictd as shipped plus refault thresholds (`REFAULT_MAPS`), on any kernel. ``evictd-reclaim``
is evictd as shipped plus reclaim before evict (`RECLAIM_SETTINGS`: cgroup v2 ``memory.reclaim``, the default budget);
``evictd-daemons-reclaim`` evictd as shipped plus reclaim for the daemons (`DAEMONS_RECLAIM_SETTINGS`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node_survival_workloads import GROWER, HEARTBEAT, PodSpec, Workload, guaranteed_pod

MiB = 1 << 20
PAGE = 4096
DISK_ENV, DISK_DEFAULT = "UML_DISK_MOUNT", "/run/disk"
THRASH_READER_MIB = 400
THRASH_READER_PERIOD_S = 1.0
THRASH_READER_REQUEST_MIB = 256
THRASH_DAEMON_MIB = 150
# The kubelet stand-in's file-backed working set in `thrash` (issue #44's "kubelet stand-in"; a kubelet binary is
# ~100 MiB): on the stand-in backend, where the arena's own process plays the kubelet, a second FILE_HEARTBEAT in
# system.slice/kubelet.service (-999, as the kubelet's unit) beats after each pass over it. On the real backend the
# kubelet itself runs, and its Lease renewals are measured instead.
THRASH_KUBELET_MIB = 100
THRASH_RATE_MIB_S = 10.0
# EVICTD_ARENA_ACTIVE_FILE_MIB overrides it (node_survival.py passes it to the guest): on the real backend the
# control plane's own memory leaves less to read, and 500 MiB did not bring the kubelet's figure to 200 MiB.
ACTIVE_FILE_ENV = "EVICTD_ARENA_ACTIVE_FILE_MIB"
ACTIVE_FILE_MIB = int(os.environ.get(ACTIVE_FILE_ENV, "500"))
ACTIVE_FILE_HOLD_S = 60.0
# The Burstable filler's request, as a share of MemTotal: more than its head start, so that it is within it.
ACTIVE_FILE_FILLER_REQUEST = 0.8
STALL_PROTECTOR = "evictd-stall"
# evictd-stall with its stall gate off (src/evictd/core/stall_gate.py): what the gate holds back, in the arena.
STALL_NOGATE_PROTECTOR = "evictd-stall-nogate"
STALL_PROTECTORS = (STALL_PROTECTOR, STALL_NOGATE_PROTECTOR)
# config/examples/06-memory-stall.yaml's stall maps (an EvictdConfiguration's STALL_FIELDS).
STALL_MAPS: dict[str, dict[str, str]] = {
    "stallEvictionHard": {"evictd.io/memory.stall.full": "20%"},
    "stallEvictionSoft": {"evictd.io/memory.stall.some": "40%"},
    "stallEvictionSoftGracePeriod": {"evictd.io/memory.stall.some": "30s"},
}
REFAULT_PROTECTOR = "evictd-refault"
# The refault signal's thresholds (docs/configuration.md "The refault signal"): the node re-reading 2% of its memory
# from disk within 10 s at once, 1% for 30 s; any kernel (the default user-mode one has no PSI). 10% and 5% were
# never met in the first trial (2026-11-25, host load 7-8): the guest's disk re-read 286 MiB in the whole 56 s run
# (about 2% of its 2.5 GiB per 10 s) while the system daemon stalled 41 s.
REFAULT_MAPS: dict[str, dict[str, str]] = {
    "stallEvictionHard": {"evictd.io/memory.refault": "2%"},
    "stallEvictionSoft": {"evictd.io/memory.refault": "1%"},
    "stallEvictionSoftGracePeriod": {"evictd.io/memory.refault": "30s"},
}
DAEMONS_REFAULT_PROTECTOR = "evictd-daemons-refault"
# evictd as shipped plus a hard daemons refault threshold (issue 74's candidate without PSI; docs/configuration.md,
# "The daemons refault signal"); EVICTD_ARENA_DAEMONS_REFAULT sets its share (25% and 50% ran on qemu psi=0).
DAEMONS_REFAULT_ENV = "EVICTD_ARENA_DAEMONS_REFAULT"
DAEMONS_REFAULT_SHARE = os.environ.get(DAEMONS_REFAULT_ENV, "25%")
# "1": each run writes its kernel counters and heartbeats to trace-<run>.json (bench/node_survival_guest.py).
TRACE_ENV = "EVICTD_ARENA_TRACE"
# MiB: the node's own protection of its daemons, as an operator's `systemctl set-property system.slice MemoryLow=`
# on a systemd node (docs/deployment.md, "The node's own protection"): system.slice's memory.low, with cgroup2
# remounted memory_recursiveprot as systemd mounts it, so the services in the slice share it.
SYSTEM_MEMORY_LOW_ENV = "EVICTD_ARENA_SYSTEM_MEMORY_LOW_MIB"
RECLAIM_PROTECTOR = "evictd-reclaim"
# evictd as shipped plus reclaim before evict (issue 41; docs/configuration.md): its default budget.
RECLAIM_SETTINGS: dict[str, object] = {"memoryReclaimBeforeEviction": True}
DAEMONS_RECLAIM_PROTECTOR = "evictd-daemons-reclaim"
# evictd as shipped plus reclaim for the daemons (issue 74; docs/configuration.md "Reclaim for the daemons").
DAEMONS_RECLAIM_SETTINGS: dict[str, object] = {"daemonsReclaim": True}

# A pod whose working set is a file: argv as GROWER's (only CONTROL_FOLDER and NAME are read); the line before
# this text sets FILE, MODE and PERIOD. Once CONTROL_FOLDER/go.NAME exists and the system daemon has beaten once
# (CONTROL_FOLDER/../heartbeat, one_run's; a file-backed daemon beats once its file is read in), it reads FILE
# twice, creates CONTROL_FOLDER/ready.NAME, then: MODE "mmap-loop": touches every page of FILE through a
# mapping every PERIOD seconds; "read-twice": sleeps.
READER = r"""
import mmap, os, sys, time
control, name = sys.argv[4:6]
DAEMON_BEATS = os.path.join(control, os.pardir, "heartbeat")
def wait_for(path, timeout=None):
    deadline = time.monotonic() + (timeout or 1e9)
    while not os.path.exists(path) or (path == DAEMON_BEATS and not os.path.getsize(path)):
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)
wait_for(os.path.join(control, "go." + name))
wait_for(DAEMON_BEATS, timeout=120)
if MODE == "read-twice":
    for _ in range(2):
        with open(FILE, "rb", buffering=0) as data:
            while data.read(1 << 20):
                pass
    open(os.path.join(control, "ready." + name), "w").close()
    while True:
        time.sleep(3600)
fd = os.open(FILE, os.O_RDONLY)
pages = memoryview(mmap.mmap(fd, 0, prot=mmap.PROT_READ))[::4096]
bytes(pages)
bytes(pages)
open(os.path.join(control, "ready." + name), "w").close()
while True:
    began = time.monotonic()
    bytes(pages)  # one byte of every page: a refault for every page reclaimed since the last pass
    time.sleep(max(0.0, PERIOD - (time.monotonic() - began)))
"""

# A pod streaming a file (backup-pod): argv as GROWER's (only CONTROL_FOLDER and NAME are read); the line before this
# text sets FILE and PASSES. Once CONTROL_FOLDER/go.NAME exists and the system daemon has beaten once (its file read
# in), it is ready (no warm-up); once CONTROL_FOLDER/grow exists it reads FILE PASSES times with read(2), 1 MiB at a
# time, as cat does, then exits 0 (the backup is done).
STREAMER = r"""
import os, sys, time
control, name = sys.argv[4:6]
def wait_for(path, timeout=1e9):
    path, deadline = os.path.join(control, path), time.monotonic() + timeout
    while time.monotonic() < deadline and (not os.path.exists(path)
                                           or path.endswith("heartbeat") and not os.path.getsize(path)):
        time.sleep(0.02)
wait_for("go." + name)
wait_for(os.path.join(os.pardir, "heartbeat"), timeout=120)
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
for _ in range(PASSES):
    with open(FILE, "rb", buffering=0) as data:
        while data.read(1 << 20):
            pass
"""

# The system daemon with a file-backed working set: argv BEATS_FILE; the line before this text sets FILE. Every
# 100 ms it touches every page of FILE through a mapping (its binaries, libraries and data), then beats.
FILE_HEARTBEAT = r"""
import mmap, os, sys, time
pages = memoryview(mmap.mmap(os.open(FILE, os.O_RDONLY), 0, prot=mmap.PROT_READ))[::4096]
with open(sys.argv[1], "a", buffering=1) as beats:
    while True:
        bytes(pages)
        beats.write(f"{time.monotonic():.3f}\n")
        time.sleep(0.1)
"""


# thrash-two-growers: the second grower's rate, a third of the grower's, still over POD_GROWTH_MIN_BYTES in 10 s.
SLOW_GROWER_RATE_MIB_S = 3.0
# thrash-moving-daemon: the daemon's file, the window it touches each pass, and how far the window moves a pass.
MOVING_DAEMON_MIB = 300
MOVING_WINDOW_MIB = 100
MOVING_STEP_MIB = 10

# The system daemon whose hot set moves: argv BEATS_FILE; the line before sets FILE, WINDOW and STEP (bytes).
MOVING_HEARTBEAT = r"""
import mmap, os, sys, time
pages = memoryview(mmap.mmap(os.open(FILE, os.O_RDONLY), 0, prot=mmap.PROT_READ))
size, start = len(pages), 0
with open(sys.argv[1], "a", buffering=1) as beats:
    while True:
        end = start + WINDOW
        bytes(pages[start:min(end, size):4096])
        if end > size:
            bytes(pages[0:end - size:4096])
        beats.write(f"{time.monotonic():.3f}\n")
        start = (start + STEP) % size
        time.sleep(0.1)
"""


# backup-pod (issue 74): a BestEffort pod streams a file of BACKUP_POD_FILE_MIB twice beside the thrash's file-backed
# system daemon and kubelet stand-in and the Guaranteed pod, as the guest (1.5 GiB: --mem-mib 1536) did. The
# run ends 5 s after the stream is done, or BACKUP_POD_HOLD_S after the start.
BACKUP_POD_FILE_MIB = 1000
BACKUP_POD_PASSES = 2
# backup-pod-long: the same pod reading the file this many times (a job re-reading its data set, epoch after epoch):
# a stream that lasts several of evictd's 10 s cycles (backup-pod's is over in about 5 s, within one).
BACKUP_POD_LONG_PASSES = 10
BACKUP_POD_HOLD_S = 300.0

# Where the kubelet's figure (MemFree + Inactive(file)) went at its lowest: the page cache's lists, what is locked
# or unevictable, anonymous and shared memory (/proc/meminfo keys).
MEMINFO_AT_LOWEST = ("MemFree", "MemAvailable", "Active(file)", "Inactive(file)", "Unevictable", "Mlocked",
                     "AnonPages", "Shmem", "SReclaimable")


@dataclass(frozen=True)
class FilePodSpec(PodSpec):
    """A pod whose process reads a file of the guest's disk (READER) instead of growing (GROWER)."""

    file_mib: int = 0
    mode: str = "mmap-loop"  # READER's MODE
    period_s: float = 1.0
    file_name: str = ""  # its file's name ("": the pod's; pods of a deploy's two versions share one)


@dataclass(frozen=True)
class PageCacheWorkload(Workload):
    daemon_file_mib: int = 0  # the system daemon's file-backed working set (0: node_survival_workloads.HEARTBEAT)
    kubelet_file_mib: int = 0  # the kubelet stand-in's (stand-in backend; 0: no kubelet heartbeat)
    daemon_moves: bool = False  # the daemon's hot set moves (MOVING_HEARTBEAT over its file)


THRASH, ACTIVE_FILE, BACKUP_POD, BACKUP_POD_LONG = "thrash", "active-file", "backup-pod", "backup-pod-long"
THRASH_TWO_GROWERS, THRASH_MOVING_DAEMON = "thrash-two-growers", "thrash-moving-daemon"
PAGECACHE_WORKLOADS = (THRASH, ACTIVE_FILE, BACKUP_POD, BACKUP_POD_LONG, THRASH_TWO_GROWERS, THRASH_MOVING_DAEMON)


def disk() -> Path:
    return Path(os.environ.get(DISK_ENV) or DISK_DEFAULT)


def file_path(name: str, mib: int) -> Path:
    return disk() / "pagecache" / f"{name}-{mib}MiB.dat"


def pagecache_workload(name: str, mem_total_mib: int) -> PageCacheWorkload:
    """The page-cache workload `name` for a node of `mem_total_mib`; KeyError for another name."""
    if name in (THRASH, THRASH_TWO_GROWERS, THRASH_MOVING_DAEMON):
        reader = FilePodSpec("reader", "burstable", THRASH_READER_REQUEST_MIB, None, 0.0, 0.0, False,
                             file_mib=THRASH_READER_MIB, mode="mmap-loop", period_s=THRASH_READER_PERIOD_S)
        growers: tuple[PodSpec, ...] = (PodSpec("grower", "besteffort", None, None, THRASH_RATE_MIB_S, 0.0, True),)
        if name == THRASH_TWO_GROWERS:
            growers += (PodSpec("slow-grower", "besteffort", None, None, SLOW_GROWER_RATE_MIB_S, 0.0, True),)
        moves = name == THRASH_MOVING_DAEMON
        return PageCacheWorkload(name, (guaranteed_pod(), reader, *growers),
                                 daemon_file_mib=MOVING_DAEMON_MIB if moves else THRASH_DAEMON_MIB,
                                 kubelet_file_mib=THRASH_KUBELET_MIB, daemon_moves=moves)
    if name == ACTIVE_FILE:
        reader = FilePodSpec("reader", "besteffort", None, None, 0.0, 0.0, False, file_mib=ACTIVE_FILE_MIB,
                             mode="read-twice")
        request = int(mem_total_mib * ACTIVE_FILE_FILLER_REQUEST)
        filler = PodSpec("filler", "burstable", request, None, 0.0, 0.0, True)
        return PageCacheWorkload(name, (guaranteed_pod(), reader, filler), hold_s=ACTIVE_FILE_HOLD_S)
    if name in (BACKUP_POD, BACKUP_POD_LONG):
        passes = BACKUP_POD_PASSES if name == BACKUP_POD else BACKUP_POD_LONG_PASSES
        backup = FilePodSpec("backup", "besteffort", None, None, 0.0, 0.0, True,
                             script=f"FILE, PASSES = {str(file_path('backup-pod', BACKUP_POD_FILE_MIB))!r}, "
                                    f"{passes!r}\n" + STREAMER,
                             file_mib=BACKUP_POD_FILE_MIB, file_name="backup-pod")
        return PageCacheWorkload(name, (guaranteed_pod(), backup), hold_s=BACKUP_POD_HOLD_S,
                                 daemon_file_mib=THRASH_DAEMON_MIB, kubelet_file_mib=THRASH_KUBELET_MIB)
    raise KeyError(name)


def pod_script(spec: PodSpec) -> str:
    """The Python source a pod of `spec` runs: READER (with its file) for a FilePodSpec, else GROWER."""
    if not isinstance(spec, FilePodSpec):
        return GROWER
    binaries = file_path(spec.file_name or spec.name, spec.file_mib)
    return f"FILE, MODE, PERIOD = {str(binaries)!r}, {spec.mode!r}, {spec.period_s!r}\n" + READER


def daemon_argv(spec: Workload, beats: Path) -> tuple[str, ...]:
    """The system daemon's `python -c` arguments: its script and its argv."""
    mib = getattr(spec, "daemon_file_mib", 0)
    if not mib:
        return HEARTBEAT, str(beats)
    if getattr(spec, "daemon_moves", False):
        return (f"FILE, WINDOW, STEP = {str(file_path('daemon', mib))!r}, {MOVING_WINDOW_MIB * MiB}, "
                f"{MOVING_STEP_MIB * MiB}\n" + MOVING_HEARTBEAT, str(beats))
    return f"FILE = {str(file_path('daemon', mib))!r}\n" + FILE_HEARTBEAT, str(beats)


def kubelet_argv(spec: Workload, beats: Path) -> tuple[str, ...] | None:
    """The kubelet stand-in's `python -c` arguments (FILE_HEARTBEAT over its file), None for a workload without."""
    mib = getattr(spec, "kubelet_file_mib", 0)
    if not mib:
        return None
    return f"FILE = {str(file_path('kubelet', mib))!r}\n" + FILE_HEARTBEAT, str(beats)


def files_of(spec: Workload) -> list[tuple[Path, int]]:
    """The files a workload reads (path, MiB)."""
    found = [(file_path(p.file_name or p.name, p.file_mib), p.file_mib) for p in spec.pods
             if isinstance(p, FilePodSpec)]
    for owner in ("daemon", "kubelet"):
        mib = getattr(spec, f"{owner}_file_mib", 0)
        found += [(file_path(owner, mib), mib)] if mib else []
    return found


def write_file(path: Path, mib: int) -> None:
    """A file of `mib` MiB of data (not sparse: every page is read from the disk), written once."""
    if path.exists() and path.stat().st_size == mib * MiB:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    chunk = bytes(range(256)) * (MiB // 256)
    with open(path, "wb") as out:
        for _ in range(mib):
            out.write(chunk)
        os.fsync(out.fileno())


def stall_maps(protector: str, psi: Path = Path("/proc/pressure/memory")) -> dict[str, Any]:
    """The EvictdConfiguration's stall settings for `protector` ({} but for evictd-refault, evictd-stall and
    evictd-stall-nogate, which also turns the stall gate off: ``stallRequiresNodeReclaim: false``); RuntimeError for
    the two PSI ones on a kernel without PSI (no `psi` file), which evictd would run without its stall signal."""
    if protector == REFAULT_PROTECTOR:
        return {key: dict(value) for key, value in REFAULT_MAPS.items()}
    if protector == DAEMONS_REFAULT_PROTECTOR:  # added to the shipped maps (evictd_documents merges it)
        return {"stallEvictionHard": {"evictd.io/daemons.refault": DAEMONS_REFAULT_SHARE}}
    if protector not in STALL_PROTECTORS:
        return {}
    if not psi.exists():
        raise RuntimeError(f"protector {protector} needs a kernel with PSI (/proc/pressure/memory): this "
                           "guest's kernel has none; run the arena with --kernel psi or --vm qemu")
    maps: dict[str, Any] = {key: dict(value) for key, value in STALL_MAPS.items()}
    if protector == STALL_NOGATE_PROTECTOR:
        maps["stallRequiresNodeReclaim"] = False
    return maps


def reclaim_settings(protector: str) -> dict[str, object]:
    """The EvictdConfiguration's reclaim settings for `protector` ({} but for evictd-reclaim, reclaim before evict,
    and evictd-daemons-reclaim, reclaim for the daemons)."""
    if protector == DAEMONS_RECLAIM_PROTECTOR:
        return dict(DAEMONS_RECLAIM_SETTINGS)
    return dict(RECLAIM_SETTINGS) if protector == RECLAIM_PROTECTOR else {}


# --- pure readers (the tests' too) -------------------------------------------------------------------------


def vmstat_counters(text: str) -> dict[str, int]:
    """/proc/vmstat as a dict."""
    counters = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            counters[key] = int(value)
    return counters


def refault_file_mib(before: Mapping[str, int], after: Mapping[str, int], page: int = PAGE) -> float | None:
    """File pages refaulted (evicted, then read again while still in the working-set shadow) between two
    /proc/vmstat readings, in MiB: ``workingset_refault_file`` (5.9 and later), else ``workingset_refault``;
    None when neither is there."""
    for key in ("workingset_refault_file", "workingset_refault"):
        if key in before and key in after:
            return (after[key] - before[key]) * page / MiB
    return None


def psi_totals(text: str) -> dict[str, float]:
    """/proc/pressure/memory's ``total=`` of ``some`` and ``full``, in seconds."""
    totals = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for field in fields:
            if field.startswith("total="):
                totals[kind] = int(field[len("total="):]) / 1e6
    return totals


def value_at(samples: Sequence[tuple[float, int]], at: float) -> int | None:
    """The last sample's value at or before `at` (samples in time order); None before the first."""
    index = bisect.bisect_right([t for t, _ in samples], at)
    return samples[index - 1][1] if index else None


# --- the guest side ------------------------------------------------------------------------------------------


def meminfo_kib(text: str) -> dict[str, int]:
    return {line.split(":")[0]: int(line.split()[1]) for line in text.splitlines() if line.split()[1:]}

"""The node-survival arena's deploy burst: a short burst of file refaults after a deploy (#44 item 4, a false trigger).

``deploy-burst``: `APPS` Burstable app pods (request `APP_REQUEST_MIB`, no limit) each with "binaries" of its own, a
file of `APP_FILE_MIB` on the guest's disk (written once a boot as the page-cache workloads' files are), rolled out
again on the same files (a ``kubectl rollout restart``, a config change, or a new version on the same base layers),
on a node with plenty of memory, beside the Guaranteed pod (200 MiB) and the system daemon, whose binaries,
libraries and data are a file of `DAEMON_FILE_MIB` read twice at its start (`DAEMON`: active), protected as an
operator protects system.slice (``MemoryMin=``: `SYSTEM_MIN_MIB` as system.slice's and the daemon unit's
memory.min for the run). Before the run (`DeployBurstRun.before_pressure`, once the Guaranteed pod holds its memory
and the daemon beat once):

1. the old pods (``app-v1-<i>``) start: each takes `APP_HEAP_MIB` of anonymous memory (its heap) and reads its file
   twice with read(2) (`APP` "old": the second read makes every page active, a running app's working set);
2. earlier pressure pushes their binaries out: the arena writes the sum of their cgroups' page cache to the root
   cgroup's ``memory.reclaim`` (node-wide reclaim, as kswapd's; system.slice is protected, the pods hold anonymous
   memory only otherwise, and there is no swap, so what goes is the old pods' page cache). Reclaim, not
   ``drop_caches``: only reclaim leaves the shadow entries that make the next read of a page a refault (dropping the
   caches leaves none). The reclaim's target names the shadow entries, and the kernel counts a refault only while
   that cgroup exists: a deploy removes the old pods' cgroups, so reclaim through a pod's own cgroup would leave
   nothing to count (measured on both user-mode kernels, 2026-11-25: a 40 MiB file reclaimed through its pod's
   cgroup and re-read from a new pod refaulted 0 MiB; through the parent or the root, 40 MiB). The heap matters too:
   the kernel's shadow shrinker keeps a cgroup's shadow entries only up to about eight times the pages it still
   holds, so a pod holding nothing but its binaries loses them in the same reclaim (measured: 0-0.9 MiB of 40
   refaulted without a heap, 40 with 32 MiB). Why the daemon's active file: the kernel judges a refault to be
   working set (and counts its read as a memory stall, PSI) only when fewer pages were evicted since than the
   evicting cgroup still has active; this guest's own programs run from the host's files and leave no page cache,
   so without it nothing is active, no refault is judged working set and PSI stays 0 (measured: 320 MiB refaulted,
   0 s stalled, in the first trials; reclaim through ``kubepods`` with a busy pod's executable mapping beside, 60 of
   its 160 MiB survived and still 0 s);
3. the rollout: the old pods are deleted through the API server and the arena waits until their cgroups are gone.

Then the new pods (``app-v2-<i>``, `APP` "new", the workload's pressure pods, which take no head start) each take
their heap, and at the run's start all map their binaries and touch every page at once (a process mapping its
binaries and libraries at start): the refault burst, 10-20 s on this guest's disk, with ~1.8 GiB free. After that
each touches every page of its file every `APP_PERIOD_S` (a running app's code, all in cache: no more refaults).
The run ends `DEPLOY_HOLD_S` after the start; system.slice's memory.min is put back to 0 at its end. Expected with
``evictd-stall`` and ``evictd-refault``: nobody evicted, no OOM kill.

Figures of every run (``deployBurst`` in its JSON; bench/node_survival_outcomes.py `deploy_rows` tables them): the
old pods' page cache before and after the push-out (MiB, summed) and what ``memory.reclaim`` said; each new pod's
seconds to read its binaries and the burst's span (the first start to the last pod done); from /proc/vmstat and
/proc/pressure/memory read every `SAMPLE_PERIOD_S`, the most file pages refaulted within any 10 s (the refault
signal's window, as a share of MemTotal) and the highest PSI ``some``/``full`` ``avg10``: the burst's size beside
the thresholds it must not trip (`REFAULT_MAPS`: 2 % in 10 s; `STALL_MAPS`: ``full`` 20 %, ``some`` 40 % for 30 s).
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node_survival_nodes import grower_argv
from node_survival_pagecache import FilePodSpec, file_path, vmstat_counters
from node_survival_workloads import Workload, guaranteed_pod

MiB = 1 << 20
PAGE = 4096
DEPLOY_BURST = "deploy-burst"
DEPLOY_WORKLOADS = (DEPLOY_BURST,)
APPS = 8
APP_FILE_MIB = 40
APP_HEAP_MIB = 32
APP_REQUEST_MIB = 128
APP_PERIOD_S = 1.0
DAEMON_FILE_MIB = 200
# system.slice's memory.min during the run (an operator's MemoryMin=): above the daemon's file and evictd.
SYSTEM_MIN_MIB = 320
SYSTEM_SLICE, DAEMON_UNIT = "system.slice", "system.slice/heartbeat.service"
DEPLOY_HOLD_S = 60.0
SAMPLE_PERIOD_S = 0.5
REFAULT_WINDOW_S = 10.0  # the refault signal's window (src/evictd/core/refault.py)
READY_TIMEOUT_S = 180.0
GONE_TIMEOUT_S = 60.0

# The app of both versions: argv as GROWER's (only CONTROL_FOLDER and NAME are read); the line before this text sets
# FILE, HEAP_MIB, MODE and PERIOD. Once CONTROL_FOLDER/go.NAME exists it takes its heap; then
# MODE "old": reads FILE twice with read(2) (every page active), creates CONTROL_FOLDER/ready.NAME and idles;
# MODE "new": creates CONTROL_FOLDER/ready.NAME, and once CONTROL_FOLDER/grow exists (the run's start) maps FILE and
# touches every page (its start: the refault burst), writes "<monotonic start> <monotonic end>" to
# CONTROL_FOLDER/started.NAME, then touches every page every PERIOD seconds.
APP = r"""
import mmap, os, sys, time
control, name = sys.argv[4:6]
def wait_for(path):
    while not os.path.exists(os.path.join(control, path)):
        time.sleep(0.02)
wait_for("go." + name)
heap = mmap.mmap(-1, HEAP_MIB << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
if MODE == "old":
    for _ in range(2):
        with open(FILE, "rb", buffering=0) as data:
            while data.read(1 << 20):
                pass
    open(os.path.join(control, "ready." + name), "w").close()
    while True:
        time.sleep(3600)
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
began = time.monotonic()
pages = memoryview(mmap.mmap(os.open(FILE, os.O_RDONLY), 0, prot=mmap.PROT_READ))[::4096]
bytes(pages)
with open(os.path.join(control, "started." + name), "w") as out:
    out.write(f"{began:.3f} {time.monotonic():.3f}\n")
while True:
    time.sleep(PERIOD)
    bytes(pages)
"""


def app_name(version: int, index: int) -> str:
    return f"app-v{version}-{index}"


def app_pod(version: int, index: int) -> FilePodSpec:
    """App pod `index` of `version` (1: the old pods, before the run; 2: the new ones, the pressure pods)."""
    binaries = file_path(f"app-{index}", APP_FILE_MIB)
    mode = "old" if version == 1 else "new"
    script = (f"FILE, HEAP_MIB, MODE, PERIOD = {str(binaries)!r}, {APP_HEAP_MIB}, {mode!r}, {APP_PERIOD_S!r}\n"
              + APP)
    return FilePodSpec(app_name(version, index), "burstable", APP_REQUEST_MIB, None, 0.0, 0.0, version == 2,
                       script=script, file_mib=APP_FILE_MIB, file_name=f"app-{index}")


# The system daemon: argv BEATS_FILE; the line before this text sets FILE. It reads FILE twice with read(2) (its
# binaries, libraries and data, active), then writes a heartbeat every 100 ms (node_survival_workloads.HEARTBEAT).
DAEMON = r"""
import sys, time
for _ in range(2):
    with open(FILE, "rb", buffering=0) as data:
        while data.read(1 << 20):
            pass
with open(sys.argv[1], "a", buffering=1) as beats:
    while True:
        beats.write(f"{time.monotonic():.3f}\n")
        time.sleep(0.1)
"""


@dataclass(frozen=True)
class DeployWorkload(Workload):
    old_pods: tuple[FilePodSpec, ...] = ()  # started, pushed out and deleted before the run (DeployBurstRun)
    daemon_file_mib: int = 0  # the system daemon's file (node_survival_pagecache.files_of writes it)


def deploy_workload(name: str, mem_total_mib: int) -> DeployWorkload:
    """The deploy workload `name` (the node's size does not change it); KeyError for another name."""
    if name != DEPLOY_BURST:
        raise KeyError(name)
    daemon = f"FILE = {str(file_path('daemon', DAEMON_FILE_MIB))!r}\n" + DAEMON
    return DeployWorkload(name, (guaranteed_pod(), *(app_pod(2, i) for i in range(APPS))), hold_s=DEPLOY_HOLD_S,
                          daemon=daemon, daemon_file_mib=DAEMON_FILE_MIB,
                          old_pods=tuple(app_pod(1, i) for i in range(APPS)))


# --- pure readers (the tests' too) -------------------------------------------------------------------------


def avg10(text: str) -> dict[str, float]:
    """/proc/pressure/memory's ``avg10`` of ``some`` and ``full``, in percent."""
    found = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for field in fields:
            if field.startswith("avg10="):
                found[kind] = float(field[len("avg10="):])
    return found


def peak_in_window(samples: Sequence[tuple[float, int]], window_s: float) -> int | None:
    """The largest growth of a cumulative counter sampled as (monotonic s, value) within any `window_s` (between two
    samples at most `window_s` apart); None with fewer than two samples."""
    if len(samples) < 2:
        return None
    best, first = 0, 0
    for at, value in samples:
        while at - samples[first][0] > window_s:
            first += 1
        best = max(best, value - samples[first][1])
    return best


def burst_span(starts: Mapping[str, tuple[float, float]]) -> float | None:
    """From the first pod's start of reading to the last pod done (s); None when none read."""
    if not starts:
        return None
    return max(end for _, end in starts.values()) - min(begin for begin, _ in starts.values())


def file_bytes(stat_text: str) -> int:
    """The ``file`` count of a memory.stat."""
    return next((int(line.split()[1]) for line in stat_text.splitlines() if line.startswith("file ")), 0)


# --- the guest side ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cgroup:
    cgroup: str


class DeployBurstRun:
    """One run's deploy side (nothing for other workloads): `before_pressure` rolls the old pods out before the new
    pods start; `start` samples the node's refault and PSI counters from the run's start; `figures` at the end."""

    def __init__(self, spec: Workload) -> None:
        self.old: tuple[FilePodSpec, ...] = getattr(spec, "old_pods", ())
        self.new = [p.name for p in spec.pods if p.name.startswith("app-v2-")]
        self.control: Path | None = None
        self.protected = False
        self.setup: dict[str, Any] = {}
        self.refaults: list[tuple[float, int]] = []
        self.pressure: dict[str, float] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def before_pressure(self, backend: Any, control: Path, mem_total: int, pods: Mapping[str, Any]) -> None:
        """Start the old pods, push their binaries out of the cache, delete them (module docstring, steps 1-3)."""
        if not self.old:
            return
        from guest_v2_node import CGROUP

        self.control = control
        began = time.monotonic()
        handles = []
        for spec in self.old:
            handles.append(backend.start_pod(spec, grower_argv(0.0, spec, control), mem_total))
            (control / f"go.{spec.name}").touch()
        for spec, handle in zip(self.old, handles, strict=True):
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not (control / f"ready.{spec.name}").exists():
                if backend.exit_code(handle) is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{spec.name} did not read its binaries (exit {backend.exit_code(handle)})")
                time.sleep(0.05)
        beats = control.parent / "heartbeat"  # the daemon beats once its file is read in (DAEMON)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (beats.exists() and beats.stat().st_size):
            if time.monotonic() > deadline:
                raise RuntimeError("the system daemon did not read its file in")
            time.sleep(0.05)
        warmed = time.monotonic()

        def cached(of: Sequence[Any]) -> int:
            return sum(file_bytes((CGROUP / h.cgroup / "memory.stat").read_text()) for h in of)

        daemon = [_Cgroup(DAEMON_UNIT)]
        for unit in (SYSTEM_SLICE, DAEMON_UNIT):
            (CGROUP / unit / "memory.min").write_text(str(SYSTEM_MIN_MIB * MiB))
        self.protected = True
        before, daemon_before = cached(handles), cached(daemon)
        answer = "ok"
        try:
            (CGROUP / "memory.reclaim").write_text(str(before))
        except OSError as exc:  # EAGAIN: the kernel reclaimed less than asked (what it did is measured below)
            answer = errno.errorcode.get(exc.errno or 0, str(exc))
        after, daemon_after = cached(handles), cached(daemon)
        pushed = time.monotonic()
        for handle in handles:
            backend.delete_pod(handle)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while any((CGROUP / h.cgroup).exists() for h in handles):
            if time.monotonic() > deadline:
                raise RuntimeError("the old app pods' cgroups were not removed within "
                                   f"{GONE_TIMEOUT_S:.0f} s of their deletion")
            time.sleep(0.05)
        self.setup = {"oldPods": len(handles), "warmS": warmed - began, "oldCacheBeforeMib": before / MiB,
                      "oldCacheAfterMib": after / MiB, "pushedOutMib": (before - after) / MiB,
                      "daemonCacheBeforeMib": daemon_before / MiB, "daemonCacheAfterMib": daemon_after / MiB,
                      "reclaimAnswer": answer, "reclaimCgroup": "/",
                      "pushOutS": pushed - warmed, "oldPodsGoneS": time.monotonic() - pushed}

    def unprotect(self) -> None:
        """system.slice's memory.min back to the guest's own (0), for the next run's workload."""
        from guest_v2_node import CGROUP

        if self.protected:
            for unit in (DAEMON_UNIT, SYSTEM_SLICE):
                with contextlib.suppress(OSError):
                    (CGROUP / unit / "memory.min").write_text("0")
            self.protected = False

    def start(self) -> None:
        if self.old:
            self._read()
            self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            vmstat = vmstat_counters(Path("/proc/vmstat").read_text())
            key = "workingset_refault_file" if "workingset_refault_file" in vmstat else "workingset_refault"
            self.refaults.append((time.monotonic(), vmstat[key]))
        psi = Path("/proc/pressure/memory")
        with contextlib.suppress(OSError, ValueError):
            if psi.exists():
                for kind, value in avg10(psi.read_text()).items():
                    self.pressure[kind] = max(self.pressure.get(kind, 0.0), value)

    def _sample(self) -> None:
        while not self.stopping.wait(SAMPLE_PERIOD_S):
            self._read()

    def figures(self, mem_total: int) -> dict[str, Any]:
        if not self.old:
            return {}
        self._read()
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)
        self.unprotect()
        starts: dict[str, tuple[float, float]] = {}
        for name in self.new:
            path = (self.control or Path("/nonexistent")) / f"started.{name}"
            with contextlib.suppress(OSError, ValueError):
                begin, end = (float(word) for word in path.read_text().split())
                starts[name] = (begin, end)
        peak = peak_in_window(self.refaults, REFAULT_WINDOW_S)
        reads = sorted(end - begin for begin, end in starts.values())
        return {"deployBurst": {
            **self.setup,
            "newPodsStarted": len(starts),
            "burstS": burst_span(starts),
            "readS": {"min": reads[0], "max": reads[-1]} if reads else None,
            "refaultPeak10sMib": None if peak is None else peak * PAGE / MiB,
            "refaultPeak10sPercent": None if peak is None else 100.0 * peak * PAGE / mem_total,
            "psiAvg10PeakPercent": dict(self.pressure) or None,
        }}

"""Side by side with earlyoom: `evictd run` and Debian's earlyoom on the same allocations, timed black-box.

Both detectors run as a user runs them, each as a process of its own, beside each other on this machine:
* `evictd run` (dry-run: no Kubernetes API) with one hard threshold `memory.available < <bytes>` and everything
  else as shipped (10 s housekeeping interval, memcg and PSI wake-ups); its moment of decision is the
  `timestamp` of its JSON log line "threshold met", as a user reads it;
* `earlyoom --dryrun -r 0 -M <KiB> -m 99 -s 99` (1.7, installed with apt-get when missing; the -m/-s
  percentages only keep its defaults from applying, the lower minimum wins); its moment of decision is when
  its first line "low memory! at or below SIGTERM limits" arrives on the pipe from its stderr (earlyoom writes
  unbuffered and prints no time).

Each watches its own metric: evictd `memory.available` = MemTotal - (the root memory cgroup's usage -
total_inactive_file), earlyoom `MemAvailable` of /proc/meminfo. The thresholds are set relative to what is
free at the start (REAL_COMPONENTS.md, "A peer to compare with"): each trips after about 2 GiB more is
allocated. One child process allocates (anonymous memory, every page written, 16 MiB at a time, as fast as it
can) until both metrics are about 512 MiB past their thresholds, holds until both detectors spoke, then
frees. A sampler process reads both metrics every millisecond and notes, for each, the first reading below
its threshold: a detector's lag is its moment of decision minus that reading's time (so it can be slightly
negative: the sampler reads up to a millisecond after the crossing; its median period is printed).

The detectors keep running from crossing to crossing (a random 3-4 s pause between crossings, so crossings
land at random points of earlyoom's polling and of evictd's timer, and are never a flapping tenant to evictd);
when other processes move the machine's free memory so far that a threshold is no longer about 2 GiB away (1.5 to
2.5 GiB), both are restarted with thresholds re-based on the memory free then (counted in the output). A detector
that says nothing within 15 s of a crossing is counted as a miss (evictd's timer alone would decide within 10 s).

`--load` runs the same trials on a busy machine (issue #29): `cpu` starts CPU-count + 1 processes that each spin
in a loop; `write` one process that writes 256 MiB, fdatasyncs it and deletes it, in a loop, in a folder beside
evictd's `stateDir` (the same filesystem), so dirty-page write-back and fsyncs compete with evictd's own writes;
`both` starts both. The load starts before the detectors and runs until the end; the output names it.
`--evictd-nice -5` runs evictd at the nice value the shipped systemd unit gives it. `--kernel-trace` records the
kernel's wake-ups of evictd's threads (`kernel_wakeups.py`: perf, `sched:sched_waking`) and reports, per crossing,
when the kernel woke evictd against the crossing: a late notification shows there, apart from a late evictd; and
when the working set crossed with /proc/meminfo's inactive file (counted at once) against `memory.stat`'s
(folded in late), which the sampler reads beside.

Target: evictd's p99 at most 20 ms over at least 50 crossings. The ratio printed is earlyoom's lag over
evictd's at p50 and at p99. Needs root (reads the root memory cgroup) and cgroup v1; holds at most 3 GiB.

    .venv/bin/python bench/earlyoom_side_by_side.py [--crossings 50] [--load none|cpu|write|both] [--verbose]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

from detection_latency import MEMORY_ROOT, available_bytes, mem_total_bytes, percentile
from kernel_wakeups import KernelWakeups

from evictd.adapters.procfs import inactive_file_bytes, meminfo_bytes

MiB = 1 << 20
GiB = 1 << 30
TRIP_BYTES = 2 * GiB
# A threshold is re-based (both detectors restarted) when it is no longer this far from its metric.
TRIP_RANGE_BYTES = (TRIP_BYTES - 512 * MiB, TRIP_BYTES + 512 * MiB)
PAST_THRESHOLD_BYTES = 512 * MiB
MAX_ALLOCATION_BYTES = 3 * GiB
CHUNK_BYTES = 16 * MiB
SAMPLE_PERIOD_S = 0.001
# After both detectors decided, the sampler reads on this long at most for the metric with /proc/meminfo's inactive
# file to cross (it can cross hundreds of milliseconds after memory.stat's).
MEMINFO_AFTER_S = 1.0
DETECTION_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 30.0
# After a detector is ready, its first poll (earlyoom) or its notifiers (evictd) are in place.
SETTLE_S = 0.5
# The pause between crossings: long enough that crossings are never `FLAP_CHANGES` (4) within `FLAP_WINDOW_S`
# (10 s) of each other (a crossing every 3.5 s or more). In dry-run the memory goes back by itself after each
# crossing (nothing is evicted), so crossings 0.5-1.5 s apart made evictd judge the allocator a flapping tenant
# (`evictd.core.wake`) and decide 2 of 20 crossings a second after the notification; a node evictd acts on
# evicts at the first crossing. The flapping tenant has its own benchmark (bench/flapping_tenant.py).
PAUSE_S = (3.0, 4.0)
TARGET_P99_S = 0.020
EARLYOOM_LOW = "low memory! at or below SIGTERM limits"
EVICTD_MET = "threshold met"
EVICTD_CLEAR = "threshold no longer met"


def meminfo_available_bytes() -> int:
    return meminfo_bytes("MemAvailable")


def ensure_earlyoom() -> str:
    """Return earlyoom's path; install the Debian package first when it is missing (as `make system-deps`)."""
    found = shutil.which("earlyoom")
    if found:
        return found
    print("installing Debian package earlyoom", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-qq", "earlyoom"], check=True, env=env, stdout=subprocess.DEVNULL)
    # The package enables its service; where systemd runs, it must not act beside the benchmark.
    with contextlib.suppress(OSError):
        subprocess.run(["systemctl", "disable", "--now", "earlyoom"], check=False, capture_output=True)
    found = shutil.which("earlyoom")
    if not found:
        raise RuntimeError("earlyoom is not on PATH after apt-get install earlyoom")
    return found


# --------------------------------------------------------------------------------------------------
# The sampler and the allocator: child processes of this script


def available_with_meminfo_inactive(capacity: int) -> int:
    """`memory.available` with /proc/meminfo's ``Inactive(file)`` (counted at once) in place of the root memory
    cgroup's ``total_inactive_file`` (folded in late: docs/measured-figures.md): the working set without that lag."""
    with open(f"{MEMORY_ROOT}/memory.usage_in_bytes", encoding="ascii") as usage_file:
        usage = int(usage_file.read())
    return max(capacity - max(usage - inactive_file_bytes(), 0), 0)


def sampler(evictd_threshold: int, earlyoom_threshold: int, timeout_s: float) -> None:
    """Read both metrics every millisecond until told to stop (a line or end of file on stdin; then for up to
    `MEMINFO_AFTER_S` more, until the metric with /proc/meminfo's inactive file crossed too) or `timeout_s`; print
    one JSON line: when each metric was first read below its threshold (`first_below`) and every change of side
    after that (`changes`: [time, below]). Beside evictd's metric it reads the same with /proc/meminfo's inactive
    file (`evictd_meminfo`).

    memory.stat's inactive file at the root is folded in late, so evictd's metric can read below its threshold
    for a moment and then above again for a hundred milliseconds or more while memory keeps filling (a write of
    256 MiB counted in usage before its pages are in memory.stat; docs/measured-figures.md): a detector that
    decides on a reading taken then sees no crossing. The changes give the crossing that held: the last time the
    metric went below before the detector's decision."""
    capacity = mem_total_bytes()
    first_below: dict[str, float] = {}
    below: dict[str, bool] = {}
    changes: dict[str, list[tuple[float, bool]]] = {"evictd": [], "evictd_meminfo": [], "earlyoom": []}
    periods: list[float] = []
    print("ready", flush=True)
    deadline = time.monotonic() + timeout_s
    previous = None
    stopped_at: float | None = None
    while time.monotonic() < deadline:
        now = time.time()
        if previous is not None:
            periods.append(now - previous)
        previous = now
        for name, is_below in (("evictd", available_bytes(capacity, MEMORY_ROOT) < evictd_threshold),
                               ("evictd_meminfo", available_with_meminfo_inactive(capacity) < evictd_threshold),
                               ("earlyoom", meminfo_available_bytes() < earlyoom_threshold)):
            if is_below and name not in first_below:
                first_below[name] = now
            if name in first_below and below.get(name) != is_below:
                changes[name].append((now, is_below))
            below[name] = is_below
        if stopped_at is not None:
            if "evictd_meminfo" in first_below or time.time() - stopped_at >= MEMINFO_AFTER_S:
                break
            time.sleep(SAMPLE_PERIOD_S)
        elif select.select([sys.stdin], [], [], SAMPLE_PERIOD_S)[0]:
            stopped_at = time.time()  # told to stop: once evictd's metric with /proc/meminfo's inactive file crossed
    print(json.dumps({"first_below": first_below, "changes": changes,
                      "period_s": statistics.median(periods) if periods else None}), flush=True)


def held_crossing(changes: list[tuple[float, bool]], decided: float) -> float | None:
    """The time the metric last went below its threshold at or before `decided` (from the sampler's `changes`): the
    start of the crossing that held until the decision; None when it never did."""
    went_below = [at for at, below in changes if below and at <= decided]
    return went_below[-1] if went_below else None


ALLOCATOR = r"""
import mmap, sys
chunks = []
ones = b"\x01" * int(sys.argv[1])
for line in sys.stdin:
    words = line.split()
    if words[0] == "alloc":
        for _ in range(int(words[1]) // len(ones)):
            chunk = mmap.mmap(-1, len(ones), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            chunk[:] = ones  # every page written, so really charged
            chunks.append(chunk)
    elif words[0] == "free":
        for chunk in chunks:
            chunk.close()
        chunks.clear()
    print("ok", flush=True)
"""


# The loads (`--load`): children of this script, stopped at the end

SPIN = "while True:\n    pass\n"
PR_SET_PDEATHSIG = 1  # prctl(2)
WRITE_BYTES = 256 * MiB
WRITER = r"""
import os, sys
path, size = sys.argv[1], int(sys.argv[2])
block = os.urandom(1 << 20)
while True:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(size // len(block)):
            os.write(fd, block)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    os.unlink(path)
"""


def die_with_parent() -> None:
    """In a child before exec: be killed when this script dies, however it dies (a load left behind by a
    killed run went on writing beside every later run)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def start_load(kind: str, workdir: Path) -> list[subprocess.Popen[bytes]]:
    """Start the background load `kind` (none, cpu, write, both); the writer's file lives in `workdir`."""
    processes: list[subprocess.Popen[bytes]] = []
    if kind in ("cpu", "both"):
        for _ in range((os.cpu_count() or 1) + 1):
            processes.append(subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=die_with_parent))
    if kind in ("write", "both"):
        processes.append(subprocess.Popen([sys.executable, "-c", WRITER, str(workdir / "writer.data"),
                                           str(WRITE_BYTES)], preexec_fn=die_with_parent))
    return processes


def stop_load(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def describe_load(kind: str) -> str:
    return {"none": "no load of its own",
            "cpu": f"{(os.cpu_count() or 1) + 1} CPU-bound loops",
            "write": f"a loop writing {WRITE_BYTES // MiB} MiB with fdatasync, then deleting it, beside stateDir",
            "both": f"{(os.cpu_count() or 1) + 1} CPU-bound loops and a loop writing {WRITE_BYTES // MiB} MiB with "
                    "fdatasync beside stateDir"}[kind]


# --------------------------------------------------------------------------------------------------
# The detectors


@dataclass
class Lines:
    """Lines a process writes to one pipe, each with the wall-clock time it arrived, read by a thread."""

    stream: IO[str]
    lines: list[tuple[float, str]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.stream:
            received = time.time()
            with self.changed:
                self.lines.append((received, line.rstrip("\n")))
                self.changed.notify_all()

    def wait_for(self, predicate: Callable[[str], bool], after: int, timeout_s: float) -> tuple[int, float, str] | None:
        """Return (index, arrival, line) of the first line from index `after` on that `predicate` accepts."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                for index in range(after, len(self.lines)):
                    received, line = self.lines[index]
                    if predicate(line):
                        return index, received, line
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.changed.wait(remaining)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def evictd_event(line: str) -> dict[str, object] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def is_evictd_event(name: str) -> Callable[[str], bool]:
    """Return a predicate: the line is evictd's JSON log event `name`."""

    def matches(line: str) -> bool:
        event = evictd_event(line)
        return event is not None and event.get("event") == name

    return matches


class Detectors:
    """evictd and earlyoom running side by side, with thresholds set from the memory free when they started."""

    def __init__(self, earlyoom: str, workdir: Path, nice: int = 0, crossing_hold: str | None = None) -> None:
        self.workdir = workdir
        self._stderr = (workdir / "evictd.stderr").open("a")  # kept: why an evictd that exited did (`stderr_tail`)
        self.evictd_threshold = available_bytes(mem_total_bytes(), MEMORY_ROOT) - TRIP_BYTES
        self.earlyoom_threshold = meminfo_available_bytes() - TRIP_BYTES
        port = self.port = free_port()
        kubelet = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                   "evictionHard": {"memory.available": str(self.evictd_threshold)}, "enforceNodeAllocatable": []}
        own = {"apiVersion": "evictd.io/v1alpha1", "kind": "EvictdConfiguration", "nodeName": "bench-node",
               "logFormat": "json", "metricsBindAddress": f"127.0.0.1:{port}",
               "stateDir": str(workdir / "state"), "kubeletRootDir": str(workdir / "kubelet"),
               "podLogsDir": str(workdir / "logs")}
        if crossing_hold is not None:
            own["memoryCrossingHold"] = crossing_hold
        config = workdir / "evictd.yaml"
        config.write_text(json.dumps(kubelet) + "\n---\n" + json.dumps(own) + "\n", encoding="utf-8")
        evictd = Path(sys.executable).with_name("evictd")
        # A node lock of its own: other evictd processes on this shared machine must not hold up its start.
        self.evictd = subprocess.Popen([*(["nice", "-n", str(nice)] if nice else []), str(evictd), "run", "--config",
                                        str(config)], stdout=subprocess.PIPE,
                                       stderr=self._stderr, text=True, bufsize=1,
                                       env={**os.environ, "EVICTD_NODE_LOCK": str(workdir / "node.lock")})
        self.earlyoom = subprocess.Popen(
            [earlyoom, "--dryrun", "-r", "0", "-M", str(self.earlyoom_threshold // 1024), "-m", "99", "-s", "99"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1)
        assert self.evictd.stdout is not None and self.earlyoom.stderr is not None
        self.evictd_lines = Lines(self.evictd.stdout)
        self.earlyoom_lines = Lines(self.earlyoom.stderr)
        if self.evictd_lines.wait_for(is_evictd_event("evictd started"), 0, READY_TIMEOUT_S) is None:
            raise RuntimeError(f"evictd did not start: {self.evictd_lines.lines[-5:]}")
        self._wait_first_cycle()
        if self.earlyoom_lines.wait_for(lambda line: line.startswith("sending SIGTERM when"), 0,
                                        READY_TIMEOUT_S) is None:
            raise RuntimeError(f"earlyoom did not start: {self.earlyoom_lines.lines[-5:]}")
        time.sleep(SETTLE_S)

    def metrics(self) -> dict[str, float]:
        """evictd's cycle and wake-up counters from its /metrics (empty when it does not answer)."""
        samples: dict[str, float] = {}
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            body = b""
            while chunk := sock.recv(65536):
                body += chunk
            for line in body.decode(errors="replace").splitlines():
                if line.startswith(("evictd_cycles_total ", "evictd_wakeups_total{")):
                    name, value = line.rsplit(" ", 1)
                    samples[name] = float(value)
        return samples

    def _wait_first_cycle(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.metrics().get("evictd_cycles_total", 0) >= 1:
                return
            time.sleep(0.05)
        raise RuntimeError("evictd ran no cycle")

    def distances(self) -> tuple[int, int]:
        """How far each metric is above its detector's threshold now."""
        return (available_bytes(mem_total_bytes(), MEMORY_ROOT) - self.evictd_threshold,
                meminfo_available_bytes() - self.earlyoom_threshold)

    def stderr_tail(self, size: int = 2000) -> str:
        """The end of what evictd wrote on stderr (a traceback, when it died of one)."""
        try:
            return (self.workdir / "evictd.stderr").read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self) -> None:
        for process in (self.evictd, self.earlyoom):
            if process.poll() is None:
                process.terminate()
        for process in (self.evictd, self.earlyoom):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._stderr.close()


# --------------------------------------------------------------------------------------------------
# The harness


@dataclass(frozen=True)
class EvictdCrossing:
    """One crossing evictd decided, its times in wall-clock seconds: when the sampler saw it (with memory.stat's
    inactive file, and with /proc/meminfo's: None when not within a second of the others), when evictd woke for it
    and decided (its log), what woke it (`woken_by`), how long of that its confirming reading took (its log's
    `confirmed_after_ms`, None when the cycle confirmed nothing), and the daemon's process and threads then."""

    pid: int
    tids: frozenset[int]
    crossed: float
    meminfo_crossed: float | None
    woke: float
    decided: float
    woken_by: str
    confirmed_after_s: float | None = None


@dataclass
class Result:
    evictd_s: list[float] = field(default_factory=list)
    earlyoom_s: list[float] = field(default_factory=list)
    evictd_missed: int = 0
    earlyoom_missed: int = 0
    sampler_periods_s: list[float] = field(default_factory=list)
    restarts: int = 0
    disturbed: int = 0
    # Per crossing decided: the lag from the crossing that held (`held_crossing`) instead of the first reading below.
    evictd_held_s: list[float] = field(default_factory=list)
    earlyoom_held_s: list[float] = field(default_factory=list)
    # Per crossing decided: evictd's time from its wake-up to the decision ("decided_after_ms" of its log line).
    evictd_own_s: list[float] = field(default_factory=list)
    # Per crossing decided, for `--kernel-trace`.
    evictd_crossings: list[EvictdCrossing] = field(default_factory=list)


class Disturbed(Exception):
    """Other processes moved free memory during the crossing: it is retried."""


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            bufsize=1)


def ask(process: subprocess.Popen[str], command: str, expected: str = "ok") -> str:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(command + "\n")
    process.stdin.flush()
    line = process.stdout.readline().strip()
    if not line.startswith(expected):
        raise RuntimeError(f"child answered {line!r} to {command!r}")
    return line


def one_crossing(detectors: Detectors, allocator: subprocess.Popen[str], result: Result, verbose: bool) -> None:
    evictd_distance, earlyoom_distance = detectors.distances()
    if min(evictd_distance, earlyoom_distance) < PAST_THRESHOLD_BYTES:
        raise Disturbed("a metric is already near its threshold")
    size = max(evictd_distance, earlyoom_distance) + PAST_THRESHOLD_BYTES
    if size > MAX_ALLOCATION_BYTES:
        raise Disturbed("the thresholds are too far away")
    size = -(-size // CHUNK_BYTES) * CHUNK_BYTES
    sample = subprocess.Popen(
        [sys.executable, __file__, "--sampler", str(detectors.evictd_threshold), str(detectors.earlyoom_threshold)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert sample.stdout is not None and sample.stdin is not None
    if sample.stdout.readline().strip() != "ready":
        raise RuntimeError("the sampler did not start")
    evictd_from, earlyoom_from = len(detectors.evictd_lines.lines), len(detectors.earlyoom_lines.lines)
    counters_before = detectors.metrics() if verbose else {}
    try:
        ask(allocator, f"alloc {size}")
        found_evictd = detectors.evictd_lines.wait_for(is_evictd_event(EVICTD_MET), evictd_from, DETECTION_TIMEOUT_S)
        counters_at_decision = detectors.metrics() if verbose else {}
        found_earlyoom = detectors.earlyoom_lines.wait_for(lambda line: line.startswith(EARLYOOM_LOW), earlyoom_from,
                                                           DETECTION_TIMEOUT_S)
        with contextlib.suppress(BrokenPipeError):  # timed out and gone: what it printed still counts
            sample.stdin.write("stop\n")
            sample.stdin.close()
        crossed = json.loads(sample.stdout.readline())
    finally:
        with contextlib.suppress(OSError, ValueError):
            sample.stdin.close()
        sample.wait()
        sample.stdout.close()
        ask(allocator, "free")
    first_below = crossed["first_below"]
    if "evictd" not in first_below or "earlyoom" not in first_below:
        raise Disturbed(f"the sampler saw only {sorted(first_below) or 'neither metric'} cross")
    if crossed["period_s"] is not None:
        result.sampler_periods_s.append(crossed["period_s"])
    lags = []
    if found_evictd is None:
        result.evictd_missed += 1
        lags.append("evictd missed")
        if detectors.evictd.poll() is not None:  # say why, and go on with a fresh one (restarted on the next crossing)
            lags.append(f"evictd exited with status {detectors.evictd.returncode}: its last lines "
                        f"{[line for _, line in detectors.evictd_lines.lines[-3:]]}, its stderr's last "
                        f"{detectors.stderr_tail()!r}")
    else:
        event = evictd_event(found_evictd[2])
        assert event is not None
        decided = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
        result.evictd_s.append(decided - first_below["evictd"])
        held = held_crossing(crossed["changes"]["evictd"], decided)
        result.evictd_held_s.append(decided - (first_below["evictd"] if held is None else held))
        # evictd's own share: from the wake-up to the decision (the rest is the kernel's notification and the
        # scheduler's, or a cycle already running when the crossing came, or the crossing seen by a timer tick).
        result.evictd_own_s.append(float(event.get("decided_after_ms", float("nan"))) / 1000)
        woken_by = ",".join(event.get("woken_by", []))
        confirmed_after_ms = event.get("confirmed_after_ms")
        confirmed_after_s = None if confirmed_after_ms is None else float(str(confirmed_after_ms)) / 1000
        result.evictd_crossings.append(EvictdCrossing(
            detectors.evictd.pid, thread_ids(detectors.evictd.pid), first_below["evictd"],
            first_below.get("evictd_meminfo"), decided - result.evictd_own_s[-1], decided, woken_by,
            confirmed_after_s))
        confirmed = "" if confirmed_after_s is None else f", {confirmed_after_s * 1000:.1f} ms of it confirming"
        lags.append(f"evictd {result.evictd_s[-1] * 1000:.1f} ms ({result.evictd_held_s[-1] * 1000:.1f} ms from the "
                    f"crossing that held; woken by {woken_by}, {result.evictd_own_s[-1] * 1000:.1f} ms from wake-up "
                    f"to decision{confirmed})")
    if found_earlyoom is None:
        result.earlyoom_missed += 1
        lags.append("earlyoom missed")
    else:
        result.earlyoom_s.append(found_earlyoom[1] - first_below["earlyoom"])
        held = held_crossing(crossed["changes"]["earlyoom"], found_earlyoom[1])
        result.earlyoom_held_s.append(found_earlyoom[1] - (first_below["earlyoom"] if held is None else held))
        lags.append(f"earlyoom {result.earlyoom_s[-1] * 1000:.1f} ms ({result.earlyoom_held_s[-1] * 1000:.1f} ms "
                    "from the crossing that held)")
    if verbose:
        counters = {name.split("{", 1)[-1].rstrip("}"): value - counters_before.get(name, 0)
                    for name, value in counters_at_decision.items() if value != counters_before.get(name, 0)}
        print(f"crossing {len(result.evictd_s) + result.evictd_missed}: {', '.join(lags)}; evictd counters "
              f"until the decision: {counters}", file=sys.stderr)
    # Both detectors must see the memory back before the next crossing (evictd logs it; earlyoom stops saying so).
    detectors.evictd_lines.wait_for(is_evictd_event(EVICTD_CLEAR), evictd_from, DETECTION_TIMEOUT_S)


def thread_ids(pid: int) -> frozenset[int]:
    """The thread ids of process `pid` now (empty when it is gone)."""
    try:
        return frozenset(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return frozenset()


def kernel_report(result: Result, wakeups: KernelWakeups, wall_minus_monotonic: float,
                  labels: dict[int, str]) -> list[str]:
    """What the kernel's record of evictd's wake-ups says of each crossing: when the kernel woke one of evictd's
    threads for it (the last wake-up caused by a task that is not evictd before evictd's wake-up as it logged it)
    against the crossing, and how long evictd then took to wake and decide."""
    notified: list[float] = []
    scheduled: list[float] = []
    meminfo_offsets: list[float] = []
    slow: list[str] = []
    for index, crossing in enumerate(result.evictd_crossings):
        # On the clock of the kernel's record.
        crossed, woke, decided = (at - wall_minus_monotonic for at in (crossing.crossed, crossing.woke,
                                                                         crossing.decided))
        meminfo = None if crossing.meminfo_crossed is None else crossing.meminfo_crossed - wall_minus_monotonic
        tids = crossing.tids or frozenset({crossing.pid})
        external = [wakeup for wakeup in wakeups.between(crossed - 0.5, woke + 0.0005, tids)
                    if wakeup.waker_tid not in tids]
        cause = external[-1] if external else None
        if cause is not None:
            notified.append(cause.at - crossed)
            scheduled.append(woke - cause.at)
        if meminfo is not None:
            meminfo_offsets.append(meminfo - crossed)
        if decided - crossed > TARGET_P99_S:
            seen = ", ".join(f"{(wakeup.at - crossed) * 1000:+.1f} ms by {labels.get(wakeup.waker_tid, wakeup.waker)}"
                             for wakeup in wakeups.between(crossed, decided, tids) if wakeup.waker_tid not in tids)
            confirming = ("" if crossing.confirmed_after_s is None
                          else f", its confirming reading {crossing.confirmed_after_s * 1000:.1f} ms after the first")
            slow.append(f"    crossing {index + 1}: decided {(decided - crossed) * 1000:.1f} ms after the crossing "
                        f"(woken by {crossing.woken_by}{confirming}); the kernel woke evictd at "
                        + (f"{(cause.at - crossed) * 1000:+.1f} ms (by {labels.get(cause.waker_tid, cause.waker)})"
                           if cause else "no time recorded")
                        + f", evictd woke at {(woke - crossed) * 1000:+.1f} ms; with /proc/meminfo's inactive file "
                        + (f"the sampler saw it cross at {(meminfo - crossed) * 1000:+.1f} ms"
                           if meminfo is not None else "the sampler did not see it cross")
                        + "; every wake-up from the crossing to "
                        f"the decision by another task: {seen or 'none'}")
    lines = ["  kernel's record (perf sched:sched_waking of evictd's threads):",
             distribution("  crossing to the kernel's wake-up of evictd", notified,
                          len(result.evictd_crossings) - len(notified)),
             distribution("  the kernel's wake-up to evictd's", scheduled, 0),
             distribution("  the crossing with /proc/meminfo's inactive file, after memory.stat's", meminfo_offsets,
                          len(result.evictd_crossings) - len(meminfo_offsets))]
    return lines + (["  crossings over the target:", *slow] if slow else [])


def distribution(name: str, values: list[float], missed: int) -> str:
    if not values:
        return f"  {name:9} no detection ({missed} missed)"
    return (f"  {name:9} p50 {statistics.median(values) * 1000:7.1f} ms  p90 {percentile(values, 0.9) * 1000:7.1f} ms"
            f"  p99 {percentile(values, 0.99) * 1000:7.1f} ms  max {max(values) * 1000:7.1f} ms"
            f"  ({len(values)} detected, {missed} missed)")


def load() -> str:
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--crossings", type=int, default=50)
    parser.add_argument("--load", choices=("none", "cpu", "write", "both"), default="none",
                        help="background load during the trials (default none)")
    parser.add_argument("--evictd-nice", type=int, default=0,
                        help="run evictd at this nice value (the systemd unit ships -5; default 0)")
    parser.add_argument("--verbose", action="store_true", help="print each crossing on stderr")
    parser.add_argument("--crossing-hold", metavar="DURATION",
                        help="evictd's memoryCrossingHold (default: as shipped; 0s decides on the first reading, as "
                             "the kubelet does: the wake-up path alone, without the confirming reading)")
    parser.add_argument("--kernel-trace", action="store_true",
                        help="record the kernel's wake-ups of evictd (perf sched:sched_waking) and report, per "
                             "crossing, when the kernel woke evictd against the crossing (kernel_wakeups.py)")
    parser.add_argument("--sampler", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sampler:
        sampler(*args.sampler, timeout_s=2 * DETECTION_TIMEOUT_S + MEMINFO_AFTER_S)  # both detectors' waits
        return 0
    if not os.path.exists(f"{MEMORY_ROOT}/memory.usage_in_bytes"):
        print("earlyoom side by side: no cgroup v1 memory hierarchy here; not measured")
        return 0
    earlyoom = ensure_earlyoom()
    # Stopped with SIGTERM (kill, a time-out), the run still stops what it started (detectors, perf, the load).
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    result = Result()
    load_at_start = load()
    started = time.monotonic()
    allocator = child("-c", ALLOCATOR, str(CHUNK_BYTES))
    detectors: Detectors | None = None
    loads: list[subprocess.Popen[bytes]] = []
    workdir = Path(tempfile.mkdtemp(prefix="evictd-bench-earlyoom-"))
    wakeups = KernelWakeups("evictd", workdir) if args.kernel_trace else None
    wall_minus_monotonic = time.time() - time.monotonic()
    labels = {allocator.pid: "the allocator"}
    try:
        loads = start_load(args.load, workdir)
        labels.update({process.pid: "the load" for process in loads})
        if wakeups is not None:
            wakeups.start()
        while len(result.evictd_s) + result.evictd_missed < args.crossings:
            distances = detectors.distances() if detectors is not None else (0, 0)
            if detectors is None:
                detectors = Detectors(earlyoom, workdir, args.evictd_nice, args.crossing_hold)
            elif detectors.evictd.poll() is not None or detectors.earlyoom.poll() is not None or not all(
                    TRIP_RANGE_BYTES[0] <= d <= TRIP_RANGE_BYTES[1] for d in distances):
                detectors.stop()
                result.restarts += 1
                detectors = Detectors(earlyoom, workdir, args.evictd_nice, args.crossing_hold)
                if args.verbose:
                    print("restarted both with re-based thresholds (distances "
                          + ", ".join(f"{d / MiB:.0f} MiB" for d in distances) + ")", file=sys.stderr)
            time.sleep(random.uniform(*PAUSE_S))
            try:
                one_crossing(detectors, allocator, result, args.verbose)
            except Disturbed as disturbed:
                result.disturbed += 1
                if args.verbose:
                    print(f"disturbed: {disturbed}; retried", file=sys.stderr)
                if result.disturbed > 5 * args.crossings:
                    raise RuntimeError("other processes keep moving free memory: no clean crossing") from None
    finally:
        if wakeups is not None:
            wakeups.stop()
        if detectors is not None:
            detectors.stop()
        stop_load(loads)
        with contextlib.suppress(OSError, ValueError):
            assert allocator.stdin is not None
            allocator.stdin.close()
        allocator.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)
    crossings = len(result.evictd_s) + result.evictd_missed
    evictd_p99 = percentile(result.evictd_s, 0.99) if result.evictd_s and not result.evictd_missed else float("inf")
    met = crossings >= 50 and evictd_p99 <= TARGET_P99_S
    lines = [
        f"earlyoom side by side: {crossings} crossings of about {TRIP_BYTES // GiB} GiB allocated past the free memory "
        f"(restarted {result.restarts} times to re-base, {result.disturbed} disturbed and retried), "
        f"{time.monotonic() - started:.0f} s, load average {load_at_start} -> {load()}"
        + ("" if args.load == "none" else f"; under load: {describe_load(args.load)}")
        + (f"; evictd at nice {args.evictd_nice}" if args.evictd_nice else "")
        + (f"; memoryCrossingHold {args.crossing_hold}" if args.crossing_hold is not None else ""),
        "  lag = detector's decision - the 1 ms sampler's first reading of its metric below its threshold "
        f"(sampler period median {statistics.median(result.sampler_periods_s or [0.0]) * 1000:.2f} ms)",
        distribution("evictd", result.evictd_s, result.evictd_missed),
        distribution("  of which evictd's wake-up to decision", result.evictd_own_s, 0),
        distribution("earlyoom", result.earlyoom_s, result.earlyoom_missed),
        "  the same from the crossing that held (the last reading below before the decision, after which the metric "
        "stayed below until it):",
        distribution("  evictd", result.evictd_held_s, result.evictd_missed),
        distribution("  earlyoom", result.earlyoom_held_s, result.earlyoom_missed),
    ]
    if result.evictd_s and result.earlyoom_s:
        ratio_p50 = statistics.median(result.earlyoom_s) / max(statistics.median(result.evictd_s), 1e-4)
        ratio_p99 = percentile(result.earlyoom_s, 0.99) / max(percentile(result.evictd_s, 0.99), 1e-4)
        lines.append(f"  earlyoom / evictd: {ratio_p50:.0f}x at p50, {ratio_p99:.0f}x at p99")
    if wakeups is not None:
        lines.extend(kernel_report(result, wakeups, wall_minus_monotonic, labels))
    verdict = "met" if met else "NOT met"
    held_p99 = percentile(result.evictd_held_s, 0.99) if result.evictd_held_s and not result.evictd_missed \
        else float("inf")
    held_verdict = "met" if crossings >= 50 and held_p99 <= TARGET_P99_S else "NOT met"
    lines.append(f"  target evictd p99 <= {TARGET_P99_S * 1000:.0f} ms over >= 50 crossings: {verdict} (from the "
                 f"crossing that held: {held_verdict})")
    print("\n".join(lines))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

"""Detection latency: from a real memory threshold crossing to the engine's decision.

Real memory, real daemon: `evictd.run.composition.build_daemon` over this machine's cgroup v1 hierarchy, /proc and
filesystems, run in a thread of this process (JSON logs to /dev/null, no HTTP endpoint, PSI wake-ups off), with
one hard threshold. A child process allocates real memory (anonymous mmap, every page written): first a base
that stays allocated, up to about 96 MiB above the threshold, then, for each crossing, 256 KiB steps until
the signal - computed exactly as the engine computes it - is below the threshold. The child reads the signal
after every step, so the crossing happened after its last reading above the threshold: `decision time - that
reading's time` is an upper bound of the latency (too high by at most one step, shown as "resolution").
The decision time is when `EvictionManager.synchronize()` returns a report with the threshold met (the
manager is wrapped; `Daemon.on_cycle` runs a little later, after metrics and logs). After each decision the
child frees its step memory, and the next crossing waits for a cycle that sees the threshold clear.

Two places where the crossing happens:
* node: `memory.available < <available at start> - 2Gi`, the whole machine (MemTotal minus the root
  cgroup's working set, `memory.usage_in_bytes - total_inactive_file`). Every other process on the machine
  moves this signal too; crossings they disturb are retried and counted, and when they free so much memory
  that the threshold is out of reach (more than 3 GiB away) the threshold is re-based and the daemon rebuilt.
* pods cgroup: `allocatableMemory.available < 512Mi` on a pods cgroup of our own
  (`/sys/fs/cgroup/memory/evictd-bench-<pid>/kubepods` with a 1 GiB limit, `cgroupRoot` pointing at it), the
  child inside `kubepods/burstable/pod<uid>`: the same mechanism with nobody else's memory in the signal.

Modes, each with at least 20 crossings:
* wake-ups on: memcg usage threshold notifications (the kubelet's memcg notifier), interval 10 s; crossings
  start at least `CROSSING_SPACING_S` (3.5 s) apart, never a flapping tenant to evictd;
* wake-ups off: the timer alone. With the default 10 s interval 20 crossings would take minutes and the
  result is known (uniform over 0-10 s), so the interval is 1 s here, with a random 0-1 s pause before each
  crossing so that crossings land at random points of the timer's period. Latency scales with the interval.
Target with wake-ups: p99 at most 50 ms. Allocations stay below 3 GiB and are freed on every exit path; the
benchmark's cgroups are removed at the end.

    .venv/bin/python bench/detection_latency.py [--crossings 20] [--above-mib 2048] [--target node|pods|both]
        [--wakeups on|off|both] [--verbose]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import mmap
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MiB = 1 << 20
MEMORY_ROOT = "/sys/fs/cgroup/memory"
TARGET_P99_S = 0.050
# Stop well before the machine is short of memory: everything this benchmark holds stays under this.
MAX_ALLOCATION_BYTES = 3 << 30
# The base allocation stops this far above the threshold; each crossing then creeps over it in steps.
BASE_MARGIN_BYTES = 96 * MiB
STEP_BYTES = 256 * MiB // 1024  # 256 KiB: the kernel checks memcg thresholds about every 512 KiB charged
# After the crossing the child goes on allocating this much (in steps), then holds it until the decision.
OVERSHOOT_BYTES = 8 * MiB
BASE_CHUNK_BYTES = 64 * MiB
MAX_CREEP_BYTES = 512 * MiB
DECISION_TIMEOUT_S = 25.0
# The isolated pods cgroup: its limit and the allocatableMemory.available threshold below it.
PODS_LIMIT_BYTES = 1 << 30
PODS_THRESHOLD_BYTES = 512 * MiB
ON_INTERVAL = "10s"
OFF_INTERVAL = "1s"
OFF_JITTER_S = 1.0


# --------------------------------------------------------------------------------------------------
# The metric, as the engine computes it (root cgroup working set against MemTotal)


def mem_total_bytes() -> int:
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 16384)
    finally:
        os.close(fd)


def available_bytes(capacity: int, folder: str = MEMORY_ROOT) -> int:
    """Return the signal now: capacity - (usage - total_inactive_file) of the cgroup `folder`, floored at 0 like
    the engine (capacity is MemTotal for the root cgroup, the pods cgroup's limit for allocatable memory)."""
    usage = int(_read(f"{folder}/memory.usage_in_bytes"))
    stat = _read(f"{folder}/memory.stat")
    at = stat.index(b"\ntotal_inactive_file ") + len(b"\ntotal_inactive_file ")
    inactive = int(stat[at:stat.index(b"\n", at)])
    return max(capacity - max(usage - inactive, 0), 0)


# --------------------------------------------------------------------------------------------------
# The allocating child: commands on stdin, one JSON answer per line on stdout


def allocator(join: str | None, watch: str | None) -> None:
    """Serve allocation commands; first move into the cgroup `join` and watch the cgroup `watch` if given."""
    if join:
        with open(f"{join}/cgroup.procs", "w", encoding="ascii") as procs:
            procs.write(str(os.getpid()))
    folder = watch or MEMORY_ROOT
    capacity = int(_read(f"{folder}/memory.limit_in_bytes")) if watch else mem_total_bytes()
    base: list[mmap.mmap] = []
    steps: list[mmap.mmap] = []
    ones = b"\x01" * BASE_CHUNK_BYTES

    def held() -> int:
        return sum(len(m) for m in base) + sum(len(m) for m in steps)

    def allocate(size: int) -> mmap.mmap:
        if held() + size > MAX_ALLOCATION_BYTES:
            raise RuntimeError(f"would hold more than {MAX_ALLOCATION_BYTES >> 20} MiB")
        chunk = mmap.mmap(-1, size)
        chunk[:] = ones[:size]  # write every page, so the memory is really charged
        return chunk

    def answer(**fields: Any) -> None:
        print(json.dumps(fields), flush=True)

    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["op"] == "base":
                threshold = command["threshold"]
                # Follow other processes: give memory back when they took some, take more when they freed.
                while base and available_bytes(capacity, folder) - threshold < BASE_MARGIN_BYTES:
                    base.pop().close()
                while available_bytes(capacity, folder) - threshold > BASE_MARGIN_BYTES + BASE_CHUNK_BYTES:
                    if held() + BASE_CHUNK_BYTES > MAX_ALLOCATION_BYTES - MAX_CREEP_BYTES:
                        answer(skip="other processes freed memory: the threshold is out of reach", out_of_reach=True)
                        break
                    base.append(allocate(BASE_CHUNK_BYTES))
                else:
                    answer(held=held(), available=available_bytes(capacity, folder))
            elif command["op"] == "cross":
                threshold = command["threshold"]
                time.sleep(command.get("pause_s", 0.0))
                before = time.monotonic()
                if available_bytes(capacity, folder) < threshold + STEP_BYTES:
                    answer(skip="other processes took memory: already at the threshold before allocating")
                    continue
                crossed = None
                creep = 0
                while creep < MAX_CREEP_BYTES:
                    steps.append(allocate(STEP_BYTES))
                    creep += STEP_BYTES
                    checked = time.monotonic()
                    if available_bytes(capacity, folder) < threshold:
                        crossed = checked
                        break
                    before = checked
                if crossed is not None:
                    # Keep allocating a little, as a real allocating process does: a crossing by a few pages
                    # can be undone by the memcg's per-CPU charge cache draining, and the kernel only compares
                    # usage with memcg thresholds every ~512 KiB charged.
                    for _ in range(OVERSHOOT_BYTES // STEP_BYTES):
                        steps.append(allocate(STEP_BYTES))
                if crossed is None:
                    answer(skip=f"no crossing after {MAX_CREEP_BYTES >> 20} MiB: other processes freed memory")
                else:
                    answer(above_at=before, below_at=crossed, creep=creep)
            elif command["op"] == "release":
                for chunk in steps:
                    chunk.close()
                steps.clear()
                answer(released_at=time.monotonic())
            elif command["op"] == "quit":
                break
        except (OSError, RuntimeError, ValueError) as exc:
            answer(error=str(exc))
    for chunk in [*steps, *base]:
        chunk.close()


# --------------------------------------------------------------------------------------------------
# The harness


@dataclass
class Cycle:
    started: float
    ended: float
    met: bool
    causes: tuple[str, ...]


@dataclass
class Recorder:
    """Wraps the daemon's manager and waiter: every cycle's end time, whether the threshold was met, and why
    the loop woke up for it."""

    cycles: list[Cycle] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    last_causes: tuple[str, ...] = ("start",)

    def install(self, daemon: Any, signal: Any) -> None:
        synchronize = daemon.manager.synchronize
        wait = daemon.waiter.wait

        def recorded_synchronize(**kwargs: Any) -> Any:
            started = time.monotonic()
            report = synchronize(**kwargs)
            ended = time.monotonic()
            met = any(status.threshold.signal is signal for status in report.decided.assessment.thresholds)
            with self.changed:
                self.cycles.append(Cycle(started, ended, met, self.last_causes))
                self.changed.notify_all()
            return report

        def recorded_wait(timeout_s: float, *, notifiers: bool = True) -> list[str]:
            causes: list[str] = wait(timeout_s, notifiers=notifiers)
            self.last_causes = tuple(causes) or ("timer",)
            return causes

        daemon.manager.synchronize = recorded_synchronize
        daemon.waiter.wait = recorded_wait

    def wait_for(self, after: int, met: bool, timeout_s: float) -> Cycle | None:
        """Return the first cycle after index `after` with the given threshold state, or None on timeout."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                for cycle in self.cycles[after:]:
                    if cycle.met == met:
                        return cycle
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.changed.wait(remaining)


class Skip(Exception):
    """Memory use of other processes moved the node away from the set-up; wait and try that crossing again."""


class Allocator:
    """The child process, driven by JSON lines."""

    def __init__(self, join: str | None = None, watch: str | None = None) -> None:
        command = [sys.executable, __file__, "--allocator"]
        if join and watch:
            command += ["--join", join, "--watch", watch]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise RuntimeError(f"the allocating child ended (exit status {self.process.wait()}) before {command}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        if "skip" in answer:
            raise (OutOfReach if answer.get("out_of_reach") else Skip)(answer["skip"])
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            self.ask(op="quit")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()  # the kernel frees its memory
            self.process.wait()


@dataclass
class Target:
    """Where the crossing happens: the signal, its threshold, and the configuration that puts evictd there."""

    name: str
    signal_name: str  # the KubeletConfiguration signal, e.g. memory.available
    threshold: int
    cgroup_root: str = "/"  # the kubelet's cgroupRoot: the parent of the pods cgroup
    below_available: int | None = None  # set: the threshold follows the signal (rebase), this far below it
    thresholds_used: list[int] = field(default_factory=list)

    def rebase(self) -> bool:
        """Move the threshold to `below_available` under the signal now; False if it is a fixed threshold."""
        if self.below_available is None:
            return False
        self.threshold = available_bytes(mem_total_bytes()) - self.below_available
        return True

    def describe(self) -> str:
        used = sorted({*self.thresholds_used, self.threshold})
        shown = ", ".join(f"{value / MiB:.0f}" for value in used)
        rebased = f" (re-based {len(used) - 1} times as other processes' memory moved)" if len(used) > 1 else ""
        return f"{self.signal_name} < {shown} MiB{rebased}"


@contextlib.contextmanager
def running_daemon(target: Target, *, wakeups: bool, interval: str, workdir: Path,
                   prepare: Callable[[Any], None] | None = None) -> Iterator[Recorder]:
    """Run the real daemon in a thread with one hard threshold; yield its recorder. `prepare(daemon)` runs
    after the recorder is installed and before the loop starts (bench/disk_walk_isolation.py uses it)."""
    from evictd.config import load_configuration
    from evictd.core.signals import Signal
    from evictd.observe.logging_setup import configure_logging
    from evictd.run.composition import build_daemon

    kubelet = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
               "evictionHard": {target.signal_name: str(target.threshold)}, "enforceNodeAllocatable": []}
    own = {"apiVersion": "evictd.io/v1alpha1", "kind": "EvictdConfiguration", "nodeName": "bench-node",
           "housekeepingInterval": interval, "memcgWakeups": wakeups, "psiWakeups": False, "logFormat": "json",
           "kubeletRootDir": str(workdir / "kubelet"), "podLogsDir": str(workdir / "logs"),
           "cgroupRoot": target.cgroup_root}
    path = workdir / f"evictd-{target.name}-{'on' if wakeups else 'off'}.yaml"
    path.write_text(json.dumps(kubelet) + "\n---\n" + json.dumps(own) + "\n")
    with open(os.devnull, "w") as devnull:
        with contextlib.redirect_stdout(devnull):  # build_daemon logs start-up facts to sys.stdout
            daemon = build_daemon(load_configuration([str(path)]), stdout=devnull, serve_http=False)
            configure_logging("json", stream=devnull)
        recorder = Recorder()
        recorder.install(daemon, Signal(target.signal_name))
        if prepare is not None:
            prepare(daemon)
        thread = threading.Thread(target=daemon.run, name="evictd-daemon", daemon=True)
        thread.start()
        try:
            yield recorder
        finally:
            # No signal handlers and no shutdown deadline here (`serve` installs them): the request only stops
            # the loop after its cycle.
            daemon.stop.request("benchmark done")
            thread.join(timeout=20)


@contextlib.contextmanager
def own_pods_cgroup() -> Iterator[tuple[str, str, str]]:
    """Create `<memory>/evictd-bench-<pid>/kubepods/burstable/pod<uid>` with a limited pods cgroup.

    Yields (cgroupRoot for evictd, the pods cgroup folder, the pod cgroup folder); removes them bottom-up.
    """
    base = f"evictd-bench-{os.getpid()}"
    pods = f"{MEMORY_ROOT}/{base}/kubepods"
    pod = f"{pods}/burstable/pod{uuid.uuid4()}"
    os.makedirs(pod)
    try:
        with open(f"{pods}/memory.limit_in_bytes", "w", encoding="ascii") as limit:
            limit.write(str(PODS_LIMIT_BYTES))
        yield f"/{base}", pods, pod
    finally:
        for folder in (pod, os.path.dirname(pod), pods, f"{MEMORY_ROOT}/{base}"):
            for _ in range(50):  # a cgroup whose last process just exited may be busy for a moment
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


@dataclass
class ModeResult:
    latencies_s: list[float]
    resolutions_s: list[float]
    causes: dict[str, int]
    skipped: int = 0
    last_crossing_at: float | None = None  # monotonic; `CROSSING_SPACING_S` from it to the next
    # Cycles that started after the child saw the signal below the threshold and still found it clear: a memcg
    # level armed before other processes' page cache moved, or the signal pushed back by their memory.
    clear_after_crossing: int = 0
    # memcg wake-ups whose cycle found the threshold not met yet: the level was armed (every 10 s, from the
    # readings of that moment) below where the signal really crosses, because inactive file pages grew since.
    early_memcg: int = 0


# Other processes on a shared machine allocate and free memory too; a crossing they disturb is retried after
# this pause, at most this many times per mode.
SKIP_PAUSE_S = 1.0
# How long a crossing waits for the daemon to see the threshold clear first (one 10 s interval and a bit).
CLEAR_TIMEOUT_S = 12.0
MAX_SKIPS = 30
# With wake-ups, crossings start at least this far apart. Nothing is evicted here, so after each crossing the memory
# goes back by itself; 4 such changes within 10 s make evictd judge the allocator a flapping tenant (`FLAP_CHANGES`,
# `FLAP_WINDOW_S`) and read it about once a second: crossings back to back measured that rule, not the wake-ups.
CROSSING_SPACING_S = 3.5


class OutOfReach(Skip):
    """Other processes freed so much memory that the threshold cannot be reached within the allocation cap."""


def run_mode(allocator: Allocator, target: Target, crossings: int, *, wakeups: bool, workdir: Path,
             verbose: bool = False) -> ModeResult:
    """Measure `crossings` crossings; a node threshold left out of reach is re-based (a new daemon)."""
    result = ModeResult([], [], {})
    rng = random.Random(7)
    while len(result.latencies_s) < crossings:
        target.thresholds_used.append(target.threshold)
        try:
            crossings_with_one_daemon(allocator, target, crossings, result, rng, wakeups=wakeups, workdir=workdir,
                                      verbose=verbose)
        except OutOfReach:
            if not target.rebase():
                raise
    return result


def crossings_with_one_daemon(allocator: Allocator, target: Target, crossings: int, result: ModeResult,
                              rng: random.Random, *, wakeups: bool, workdir: Path, verbose: bool) -> None:
    interval = ON_INTERVAL if wakeups else OFF_INTERVAL
    threshold = target.threshold
    with running_daemon(target, wakeups=wakeups, interval=interval, workdir=workdir) as recorder:
        if recorder.wait_for(0, False, DECISION_TIMEOUT_S) is None:
            raise RuntimeError("the daemon never reported the threshold clear before the first crossing")
        while len(result.latencies_s) < crossings:
            try:
                one_crossing(allocator, recorder, threshold, result, rng, wakeups=wakeups, verbose=verbose)
            except Skip as skip:
                result.skipped += 1
                if verbose:
                    print(f"{target.name}: skipped: {skip}", file=sys.stderr)
                if isinstance(skip, OutOfReach):
                    raise
                if result.skipped > MAX_SKIPS:
                    raise RuntimeError(f"gave up after {MAX_SKIPS} disturbed crossings: {skip}") from None
                time.sleep(SKIP_PAUSE_S)


def one_crossing(allocator: Allocator, recorder: Recorder, threshold: int, result: ModeResult,
                 rng: random.Random, *, wakeups: bool, verbose: bool) -> None:
    """Cross the threshold once, record the latency, free the step memory, wait for the threshold to clear."""
    allocator.ask(op="base", threshold=threshold)  # follow other processes' memory between crossings
    with recorder.changed:
        mark = len(recorder.cycles)
        still_met = bool(recorder.cycles) and recorder.cycles[-1].met
    if still_met and recorder.wait_for(mark, False, CLEAR_TIMEOUT_S) is None:
        raise Skip("the daemon still sees the threshold met before the crossing")
    with recorder.changed:
        mark = len(recorder.cycles)
    pause = rng.uniform(0, OFF_JITTER_S) if not wakeups else rng.uniform(0, 0.1)
    if wakeups and result.last_crossing_at is not None:
        pause += max(0.0, result.last_crossing_at + CROSSING_SPACING_S - time.monotonic())
    result.last_crossing_at = time.monotonic() + pause
    try:
        crossed = allocator.ask(op="cross", threshold=threshold, pause_s=pause)
        decision = recorder.wait_for(mark, True, DECISION_TIMEOUT_S)
        with recorder.changed:
            released_mark = len(recorder.cycles)
    finally:
        allocator.ask(op="release")
    if decision is None:
        # Either other processes freed memory right after the crossing (the signal went back above the
        # threshold before a cycle looked) or the daemon missed it: retried, and counted as disturbed.
        raise Skip(f"no decision within {DECISION_TIMEOUT_S:.0f} s of a crossing")
    if recorder.wait_for(released_mark, False, DECISION_TIMEOUT_S) is None:
        raise Skip("the threshold stayed met after the step memory was freed")
    with recorder.changed:
        during = recorder.cycles[mark:recorder.cycles.index(decision)]
    result.clear_after_crossing += sum(1 for cycle in during if cycle.started > crossed["below_at"] and not cycle.met)
    result.early_memcg += sum(1 for cycle in during if "memcg" in cycle.causes and not cycle.met)
    result.latencies_s.append(decision.ended - crossed["above_at"])
    result.resolutions_s.append(crossed["below_at"] - crossed["above_at"])
    cause = "+".join(decision.causes)
    result.causes[cause] = result.causes.get(cause, 0) + 1
    if verbose:
        print(f"crossing {len(result.latencies_s)}: {result.latencies_s[-1] * 1000:.1f} ms, woken by "
              f"{cause}, {crossed['creep'] >> 10} KiB of steps", file=sys.stderr)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 20 values is the largest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--crossings", type=int, default=20)
    parser.add_argument("--above-mib", type=int, default=2048,
                        help="node threshold = available now - this (re-based if other processes free memory)")
    parser.add_argument("--verbose", action="store_true", help="print each crossing on stderr")
    parser.add_argument("--target", choices=("node", "pods", "both"), default="both",
                        help="where the crossings happen: the whole machine, the pods cgroup, or both")
    parser.add_argument("--wakeups", choices=("on", "off", "both"), default="both",
                        help="run the modes with memcg wake-ups on, off, or both")
    parser.add_argument("--allocator", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--join", help=argparse.SUPPRESS)
    parser.add_argument("--watch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.allocator:
        allocator(args.join, args.watch)
        return 0
    if not os.path.exists(f"{MEMORY_ROOT}/cgroup.event_control"):
        print("detection latency: no cgroup v1 memory hierarchy here; not measured")
        return 0
    lines = [f"detection latency, {args.crossings} crossings per mode; latency = decision - last reading above "
             f"the threshold (an upper bound; resolution = one 256 KiB step):"]
    ok = True
    with tempfile.TemporaryDirectory(prefix="evictd-bench-latency-") as workdir, own_pods_cgroup() as cgroups:
        cgroup_root, pods_folder, pod_folder = cgroups
        node_threshold = available_bytes(mem_total_bytes()) - args.above_mib * MiB
        targets = [
            (Target("node", "memory.available", node_threshold, below_available=args.above_mib * MiB),
             Allocator()),
            (Target("pods cgroup", "allocatableMemory.available", PODS_THRESHOLD_BYTES, cgroup_root),
             Allocator(join=pod_folder, watch=pods_folder)),
        ]
        modes = [wakeups for wakeups in (True, False) if args.wakeups in ("both", "on" if wakeups else "off")]
        try:
            for target, child in targets:
                if args.target not in ("both", "node" if target.name == "node" else "pods"):
                    continue
                mode_lines = []
                for wakeups in modes:
                    result = run_mode(child, target, args.crossings, wakeups=wakeups, workdir=Path(workdir),
                                      verbose=args.verbose)
                    line, met = mode_line(result, wakeups)
                    mode_lines.append(line)
                    ok = ok and met
                lines += [f"  {target.name}: {target.describe()}", *mode_lines]
        finally:
            for _, child in targets:
                child.close()
    print("\n".join(lines))
    return 0 if ok else 1


def mode_line(result: ModeResult, wakeups: bool) -> tuple[str, bool]:
    """Return the report line of one mode, and whether it meets the target (only wake-ups on has one)."""
    values = result.latencies_s
    p50, p99 = statistics.median(values), percentile(values, 0.99)
    label = f"wake-ups on  (memcg, {ON_INTERVAL})" if wakeups else f"wake-ups off (timer, {OFF_INTERVAL})"
    met = not wakeups or p99 <= TARGET_P99_S
    verdict = f"; target p99 <= {TARGET_P99_S * 1000:.0f} ms: {'met' if met else 'NOT met'}" if wakeups else ""
    causes = ", ".join(f"{cause} {count}" for cause, count in sorted(result.causes.items()))
    if result.early_memcg:
        causes += f"; {result.early_memcg} memcg wake-ups found the threshold not met yet"
    if result.clear_after_crossing:
        causes += f"; {result.clear_after_crossing} cycles after a crossing still saw the threshold clear"
    if result.skipped:
        causes += f"; {result.skipped} disturbed by other processes, retried"
    return (f"    {label:28} p50 {p50 * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms  max {max(values) * 1000:7.1f} ms"
            f"  resolution {statistics.median(result.resolutions_s) * 1000:.2f} ms"
            f"  (decided after: {causes}){verdict}"), met


if __name__ == "__main__":
    sys.exit(main())

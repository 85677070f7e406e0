"""Memory decisions against a tenant's file count: cycle duration and crossing-to-decision latency.

A tenant pod keeps 0, 100,000 and 1,000,000 empty files in its emptyDir (on a tmpfs under /dev/shm) and a
process creates and removes a file there every 50 ms, so the directory never stays the same and every
measurement of it lists all of it (the disk walk's worst case). The real daemon (`build_daemon`, run in a
thread as `detection_latency.py` runs it: this machine's cgroup v1 hierarchy, a pods cgroup of our own with a
1 GiB limit, the tenant pod in it, `allocatableMemory.available < 512Mi`, memcg wake-ups on, housekeeping
every 250 ms) measures the tenant's folders as it always does. Two ways of walking them:

* `walker process`: evictd as built, the walk in the disk walker process (`disk_walker_process`), here in
  its worst case for the daemon: no pause between passes beyond its own rest (as long as it walked), so it
  walks about half the time instead of once every 10 s;
* `walk in the cycle`: the walk run inside each cycle, before the stats are read, as evictd did before the
  walker process existed (the daemon's background walker is left out and each cycle runs one walker pass in
  the daemon's own thread; the same code, only where it runs differs).

For each file count and way: cycle durations (every `EvictionManager.synchronize()` during a steady phase of
`--seconds` seconds, then during the crossings) as p50/p99/max, the same over the cycles that ran while the
walker process was walking (its CPU time, /proc/<pid>/schedstat, grew during the cycle), and the latency from
a real allocating process crossing the threshold to the decision (`--crossings` crossings, the
`detection_latency.py` harness: an upper bound, counted from the child's last reading above the threshold).
Target: with the walker process, neither p99 grows with the file count by more than 10 ms (the scheduling noise
of this shared machine) and the crossing p99 stays within the 50 ms detection target.

    .venv/bin/python bench/disk_walk_isolation.py [--files 0,100000,1000000] [--seconds 30] [--crossings 10]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from detection_latency import (
    MEMORY_ROOT,
    PODS_THRESHOLD_BYTES,
    TARGET_P99_S,
    Allocator,
    ModeResult,
    Skip,
    Target,
    one_crossing,
    own_pods_cgroup,
    percentile,
    running_daemon,
)
from run_all import machine_lines

from evictd.adapters.disk_usage import DiskUsageCache
from evictd.adapters.disk_walker_process import DiskWalkerProcess
from evictd.adapters.node_stats import NodeStatsSource
from evictd.adapters.pod_dirs import EMPTY_DIR_PLUGIN_DIR
from evictd.adapters.pod_disk_usage import PodDiskWalker

FILE_COUNTS = (0, 100_000, 1_000_000)
TOUCH_INTERVAL_S = 0.05
INTERVAL = "250ms"
STEADY_S = 30.0
CROSSINGS = 10
# What "does not depend on the file count" allows: this machine's scheduling noise between runs.
MAX_GROWTH_S = 0.010
NAMESPACE, NAME, CONTAINER, VOLUME = "tenant", "many-files", "app", "data"
SHM = "/dev/shm"
WAYS = ("walker process", "walk in the cycle")
MAX_SKIPS = 10
UNLIMITED = 1 << 62


@dataclass
class WayResult:
    durations_s: list[float] = field(default_factory=list)
    during_walk_s: list[float] = field(default_factory=list)
    crossings: ModeResult = field(default_factory=lambda: ModeResult([], [], {}))


def pod_folders(workdir: Path, uid: str, files: int) -> Path:
    """Create the tenant's emptyDir with `files` empty files and its log folder; return the emptyDir."""
    volume = workdir / "kubelet" / "pods" / uid / "volumes" / EMPTY_DIR_PLUGIN_DIR / VOLUME
    volume.mkdir(parents=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for index in range(files):
        os.close(os.open(f"{volume}/f{index:07d}", flags, 0o644))
    logs = workdir / "logs" / f"{NAMESPACE}_{NAME}_{uid}" / CONTAINER
    logs.mkdir(parents=True)
    (logs / "0.log").write_bytes(b"2026-11-22T10:00:00Z stdout F started\n" * 100)
    return volume


@contextlib.contextmanager
def toucher(folder: Path) -> Iterator[None]:
    """A process that creates and removes a file in `folder` every TOUCH_INTERVAL_S seconds."""
    script = 'while :; do : > "$1/churn"; rm -f "$1/churn"; sleep "$2"; done'
    process = subprocess.Popen(["sh", "-c", script, "toucher", str(folder), str(TOUCH_INTERVAL_S)])
    try:
        yield
    finally:
        process.kill()
        process.wait()


def walk_time_s(folder: Path) -> float:
    started = time.monotonic()
    DiskUsageCache().usage(str(folder))
    return time.monotonic() - started


def cpu_ns(pid: int | None) -> int:
    """Return the CPU time of process `pid`'s main thread (the walker's walking thread), 0 if unknown."""
    if pid is None:
        return 0
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as schedstat:
            return int(schedstat.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def preparation(way: str, workdir: Path, result: WayResult) -> Callable[[Any], None]:
    """Return the `prepare(daemon)` of `running_daemon` for `way`: times each cycle (and, with the walker
    process, whether the walker was walking meanwhile) and, for the walk in the cycle, moves the walk there."""

    def prepare(daemon: Any) -> None:
        stats = daemon.manager._stats
        assert isinstance(stats, NodeStatsSource)
        walker = next(part for part in daemon.parts if isinstance(part, DiskWalkerProcess))
        # Its worst case for the daemon: a pass as soon as its rest after the last one is over, so it walks
        # about half the time (its most) instead of once every 10 s.
        walker.settings = replace(walker.settings, period_s=0.0)
        synchronize = daemon.manager.synchronize
        if way == "walk in the cycle":
            daemon.parts = tuple(part for part in daemon.parts if part is not walker)
            # As before the walker process: the whole tree in every cycle, no budget.
            in_cycle = PodDiskWalker(kubelet_root=str(workdir / "kubelet"), pod_logs_dir=str(workdir / "logs"),
                                     entry_budget=UNLIMITED)
            summary = stats.summary

            def walked_summary(pods: Any) -> Any:
                for figures in in_cycle.run_pass(stats.disk_usage.wanted()[1]):
                    stats.disk_usage.record(figures)
                return summary(pods)

            stats.summary = walked_summary  # type: ignore[method-assign]

        def timed() -> Any:
            pid = walker.child_pid() if walker in daemon.parts else None
            before = cpu_ns(pid)
            started = time.monotonic()
            report = synchronize()
            duration = time.monotonic() - started
            result.durations_s.append(duration)
            if pid is not None and cpu_ns(pid) > before:
                result.during_walk_s.append(duration)
            return report

        daemon.manager.synchronize = timed

    return prepare


def measure(way: str, files: int, folders: tuple[str, str, str], workdir: Path, seconds: float,
            crossings: int, allocator: Allocator) -> WayResult:
    """Run the daemon with the walk done `way`: a steady phase, then the crossings; return what was timed."""
    cgroup_root, _, _ = folders
    result = WayResult()
    target = Target("pods cgroup", "allocatableMemory.available", PODS_THRESHOLD_BYTES, cgroup_root)
    with running_daemon(target, wakeups=True, interval=INTERVAL, workdir=workdir,
                        prepare=preparation(way, workdir, result)) as recorder:
        time.sleep(seconds)
        steady = len(result.durations_s)
        rng = random.Random(files)
        skipped = 0
        while len(result.crossings.latencies_s) < crossings:
            try:
                one_crossing(allocator, recorder, PODS_THRESHOLD_BYTES, result.crossings, rng, wakeups=True,
                             verbose=False)
            except Skip:
                skipped += 1
                if skipped > MAX_SKIPS:
                    raise
                time.sleep(1.0)
        if steady < 3:
            raise RuntimeError(f"only {steady} cycles in the steady phase")
    return result


def line(label: str, values: list[float]) -> str:
    if not values:
        return f"{label:34} (none)"
    return (f"{label:34} p50 {statistics.median(values) * 1000:8.1f} ms  p99 {percentile(values, 0.99) * 1000:8.1f} "
            f"ms  max {max(values) * 1000:8.1f} ms  ({len(values)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", default=",".join(map(str, FILE_COUNTS)))
    parser.add_argument("--seconds", type=float, default=STEADY_S, help="steady phase per file count and way")
    parser.add_argument("--crossings", type=int, default=CROSSINGS)
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--machine", action="store_true", help="print the machine first (run on its own)")
    args = parser.parse_args()
    if not os.path.exists(f"{MEMORY_ROOT}/cgroup.event_control"):
        print("disk walk isolation: no cgroup v1 memory hierarchy here; not measured")
        return 0
    if args.machine:
        print("\n".join(machine_lines()))
    counts = [int(count) for count in args.files.split(",")]
    ways = args.ways.split(",")
    rows: dict[tuple[str, int], WayResult] = {}
    print(f"tenant files touched every {TOUCH_INTERVAL_S * 1000:.0f} ms, housekeeping every {INTERVAL}, memcg "
          f"wake-ups, {args.seconds:.0f} s steady + {args.crossings} crossings of allocatableMemory.available per row:",
          flush=True)
    for files in counts:
        with own_pods_cgroup() as folders, tempfile.TemporaryDirectory(prefix="evictd-bench-walk-", dir=SHM) as tmp:
            workdir = Path(tmp)
            uid = folders[2].rsplit("/pod", 1)[1]
            created = time.monotonic()
            volume = pod_folders(workdir, uid, files)
            created_s = time.monotonic() - created
            allocator = Allocator(join=folders[2], watch=folders[1])
            try:
                with toucher(volume):
                    walk_s = walk_time_s(volume)
                    print(f"{files:>9,} files (created in {created_s:.1f} s; one walk of them: {walk_s * 1000:.0f} ms)",
                          flush=True)
                    for way in ways:
                        result = rows[(way, files)] = measure(way, files, folders, workdir, args.seconds,
                                                               args.crossings, allocator)
                        print(f"  {way}:", flush=True)
                        print("    " + line("cycle duration", result.durations_s))
                        if way == "walker process":
                            print("    " + line("  cycles while the walker walked", result.during_walk_s))
                        print("    " + line("crossing to decision", result.crossings.latencies_s), flush=True)
            finally:
                allocator.close()
            shutil.rmtree(workdir, ignore_errors=True)
    return verdict(rows, counts)


def verdict(rows: dict[tuple[str, int], WayResult], counts: list[int]) -> int:
    """Print whether the walker process keeps memory decisions independent of the file count."""
    baseline = rows.get(("walker process", counts[0]))
    if baseline is None:
        return 0
    worst_growth = 0.0
    worst_crossing = 0.0
    for files in counts:
        result = rows.get(("walker process", files))
        if result is None:
            continue
        growth = percentile(result.durations_s, 0.99) - percentile(baseline.durations_s, 0.99)
        crossing = percentile(result.crossings.latencies_s, 0.99)
        worst_growth, worst_crossing = max(worst_growth, growth), max(worst_crossing, crossing)
    met = worst_growth <= MAX_GROWTH_S and worst_crossing <= TARGET_P99_S
    print(f"walker process: cycle p99 grows by at most {worst_growth * 1000:.1f} ms from {counts[0]:,} to "
          f"{counts[-1]:,} files, crossing p99 at most {worst_crossing * 1000:.1f} ms; target (p99 growth <= "
          f"{MAX_GROWTH_S * 1000:.0f} ms, crossing p99 <= {TARGET_P99_S * 1000:.0f} ms): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

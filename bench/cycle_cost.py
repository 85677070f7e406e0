"""CPU time of one housekeeping cycle at 110, 250 and 1000 pods, next to the cost of only reading the same files.

On a synthetic node (`synthetic_node.py`: cgroup v1 tree, kubelet root, pod logs) the real adapters run one
full `EvictionManager.synchronize()` over the real `NodeStatsSource` (`CgroupReader`, statvfs, procfs, the
pods' disk figures from its `PodDiskStore`) after warm-up cycles. The pods' volumes and logs are walked by
the disk walker, not the cycle: its pass (`PodDiskWalker.run_pass`, each pod's figures encoded and decoded as
the walker process and the daemon exchange them, then recorded in the store) is measured on its own row,
against the floor of its own file operations, in the steady state of its disk-usage cache. Variants:

* `API pod list`: the pods come with requests and priorities (v1 Pods through `pod_from_dict`, a fixed list
  as the daemon's pod watch cache hands it out); no threshold is met.
* `API pod list, memory.available met`: the root cgroup is rewritten so that `memory.available` is 50Mi
  (< the default hard 100Mi): every cycle ranks all pods, builds the eviction message and decides an eviction.
* `discovered pods (no API)`: the daemon as `evictd.run.composition` builds it without a Kubernetes API (pods
  discovered from pod cgroups and log folders by `DiscoveredPods`, whose listing the stats source reuses);
  no threshold met.

The floor is a loop over the list of file operations one cycle needs (`SyntheticNode.floor_operations`:
open + read + close of each file, scandir of each listed folder, the same stat/lstat/statvfs calls) with no
parsing at all: the least any Python program reading the same data can spend (for the walker's pass:
`SyntheticNode.walk_operations`). CPU time is
`time.process_time()` (user + system of this process) around each cycle; floor passes alternate with the
cycles (so both see the same load on a shared machine); the median per cycle is reported, and the ratio is
the median of the ratios of each cycle to the floor pass right after it.
Target: every variant, and the walker's pass, at most 2x its floor at every size.

`--real-cgroups` (root, cgroup v1) builds the node's cgroups as real, empty cgroups in this machine's v1
memory and pids hierarchies (`synthetic_node.py`), removed afterwards: the figures of real cgroupfs, where
every file read runs kernel code that tmpfs does not. There the reader re-reads the files of every cycle with
``pread`` on kept descriptors (`evictd.adapters.kept_files`), and so does the floor (`floor: pread kept
descriptors`, the cheapest way to read the same data; the open + read + close floor is shown beside it). The
"memory.available met" variant then gets a hard threshold above the machine's memory, since the machine's root
cgroup cannot be rewritten. With an evictd that keeps no descriptors (an older source tree on PYTHONPATH) the
floor stays open + read + close.

    .venv/bin/python bench/cycle_cost.py [--sizes 110,250,1000] [--seconds 1.0] [--profile 1000] [--real-cgroups]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from synthetic_node import MiB, SyntheticNode, build_node, write_config

from evictd.adapters import procfs
from evictd.adapters.cgroups import CgroupReader
from evictd.adapters.disk_walker_process import figures_line, parse_figures_line
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_stats import NodeStatsSource
from evictd.adapters.pod_disk_usage import PodDiskWalker
from evictd.clock import SYSTEM_CLOCK
from evictd.config import load_configuration
from evictd.core.engine import EngineConfig
from evictd.core.pods import Pod
from evictd.core.signals import Signal
from evictd.cycle.manager import EvictionManager
from evictd.cycle.report import CycleReport
from evictd.run.compose_cluster import ReportOnlyEvictor
from evictd.run.compose_node import PathLayout, ReportOnlyReclaimer, build_stats_source

try:
    from evictd.adapters.kept_files import KEPT_FILE_NAMES
except ImportError:  # an evictd from before kept descriptors: every file is opened, read and closed
    KEPT_FILE_NAMES = frozenset()

SIZES = (110, 250, 1000)
TARGET_RATIO = 2.0
WARMUP_CYCLES = 3
MIN_REPETITIONS = 15
# memory.available in the "met" variant: under the kubelet's default hard threshold of 100Mi.
PRESSURE_AVAILABLE_BYTES = 50 * MiB
PRESSURE_INACTIVE_FILE_BYTES = 512 * MiB
# The disk walker's pass is measured once per size, beside this variant, against its own floor.
WALK_MEASURED_WITH = "cycle, API pod list, no threshold met"
WALK_FLOOR = "floor: read the pods' volumes and logs"
WALK = "disk walker pass (walker process)"
FLOOR = "floor: read the same files"
KEPT_FLOOR = "floor: pread kept descriptors"
OPEN_FLOOR = "floor: open+read+close (reference)"


class StaticPods:
    """A pod source that returns a fixed list (what an API-fed pod source returns between watch events)."""

    def __init__(self, pods: Sequence[Pod]) -> None:
        self._pods = list(pods)

    def active_pods(self) -> list[Pod]:
        return self._pods


class DiskPass:
    """One pass of the disk walker over the pods the stats source asked for, run in this process: the walk,
    each pod's figures through the line the walker process sends, recorded in the store the cycle reads."""

    def __init__(self, node: SyntheticNode, stats: NodeStatsSource) -> None:
        self._store = stats.disk_usage
        self._walker = PodDiskWalker(kubelet_root=str(node.kubelet_root), pod_logs_dir=str(node.pod_logs_dir))

    def __call__(self) -> None:
        for figures in self._walker.run_pass(self._store.wanted()[1]):
            self._store.record(parse_figures_line(figures_line(figures)))


def hold_memory_pressure(node: SyntheticNode) -> None:
    """Set the node's root memory usage so that memory.available is PRESSURE_AVAILABLE_BYTES: met."""
    node.set_root_usage(procfs.mem_total_bytes() - PRESSURE_AVAILABLE_BYTES + PRESSURE_INACTIVE_FILE_BYTES,
                        PRESSURE_INACTIVE_FILE_BYTES)


def build_manager(node: SyntheticNode, *, discovered: bool, met: bool = False) -> tuple[EvictionManager, DiskPass]:
    """Return an EvictionManager wired as `evictd.run.composition.build_daemon` wires it, over `node`, and the disk
    walker pass feeding its stats source; with `met` on real cgroups, memory.available's hard threshold is above
    the machine's memory (always met)."""
    kubelet = ({"evictionHard": {"memory.available": f"{procfs.mem_total_bytes() // MiB + 1024}Mi"}}
               if met and node.real_base else None)
    config = load_configuration([str(write_config(node, kubelet=kubelet))])
    settings = config.evictd
    cgroups = CgroupReader(node.layout())
    on_node = DiscoveredPods(cgroups, settings.pod_logs_dir) if discovered else None
    pods = on_node if on_node is not None else StaticPods(node.pods)
    parts = build_stats_source(config, cgroups, settings.node_name, discovered=on_node)
    assert isinstance(parts.disk_figures, NodeStatsSource)  # the node's own source, behind PlausibleStats
    manager = EvictionManager(
        EngineConfig.from_settings(config.eviction), stats=parts.source,
        layout=PathLayout(settings.kubelet_root_dir, settings.image_fs_path, settings.container_fs_path),
        pods=pods, reclaimer=ReportOnlyReclaimer(), evictor=ReportOnlyEvictor(), clock=SYSTEM_CLOCK,
    )
    return manager, DiskPass(node, parts.disk_figures)


def kept_operations(operations: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Return `operations` with the reads the reader keeps descriptors for as ``pread`` ones, and those descriptors
    (opened now, O_CLOEXEC; the caller closes them)."""
    kept: dict[str, int] = {}
    result = []
    for kind, path in operations:
        if kind == "read" and path.rsplit("/", 1)[1] in KEPT_FILE_NAMES:
            kept.setdefault(path, os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            kind = "pread"
        result.append((kind, path))
    return result, kept


def floor_pass(operations: Sequence[tuple[str, str]], kept: dict[str, int] | None = None) -> None:
    """Do the file operations of one cycle and nothing else (``pread`` ones on the descriptors in `kept`)."""
    open_, read, close, scandir, lstat, stat = os.open, os.read, os.close, os.scandir, os.lstat, os.stat
    statvfs, flags, pread, fds = os.statvfs, os.O_RDONLY | os.O_CLOEXEC, os.pread, kept or {}
    for kind, path in operations:
        if kind == "pread":
            pread(fds[path], 16384, 0)
        elif kind == "read":
            fd = open_(path, flags)
            read(fd, 16384)
            close(fd)
        elif kind == "list":
            with scandir(path) as entries:
                for entry in entries:
                    entry.is_dir(follow_symlinks=False)
        elif kind == "list_stat":
            with scandir(path) as entries:
                for entry in entries:
                    entry.stat(follow_symlinks=False)
        elif kind == "lstat":
            lstat(path)
        elif kind == "stat":
            stat(path)
        else:  # statvfs, as statvfs_reading does it
            statvfs(path)


def paired_cpu_times(step: Callable[[], object], floor: Callable[[], object],
                     seconds: float) -> tuple[list[float], list[float]]:
    """Return the CPU times of `step` and of `floor`, called alternately for about `seconds` of CPU in all.

    Alternating puts both under the same conditions (this machine is shared; its load comes and goes).
    """
    steps: list[float] = []
    floors: list[float] = []
    clock = time.process_time
    spent = 0.0
    while len(steps) < MIN_REPETITIONS or spent < seconds:
        start = clock()
        step()
        middle = clock()
        floor()
        end = clock()
        steps.append(middle - start)
        floors.append(end - middle)
        spent += end - start
    return steps, floors


def measure_size(pods: int, seconds: float, real_cgroups: bool = False) -> dict[str, tuple[float, int, float]]:
    """Return variant name -> (median CPU seconds per cycle, repetitions, median ratio to the floor pass run
    right after each cycle) at `pods` pods; the floor first (its ratio is 1)."""
    results: dict[str, tuple[float, int, float]] = {}
    floor_times: list[float] = []
    open_floor_times: list[float] = []
    with build_node(pods, real_cgroups=real_cgroups) as node:
        open_operations = node.floor_operations()
        operations, kept = kept_operations(open_operations) if real_cgroups else (open_operations, {})
        walk_operations = node.walk_operations()

        def floor() -> None:
            floor_pass(operations, kept)

        def run(name: str, built: tuple[EvictionManager, DiskPass], expect_met: bool) -> None:
            manager, disk_pass = built
            for _ in range(WARMUP_CYCLES):
                report = manager.synchronize()
                disk_pass()  # the walker's figures are in the store from the second cycle on
                floor()
            check(report, pods, expect_met)
            times, floors = paired_cpu_times(manager.synchronize, floor, seconds)
            check(manager.synchronize(), pods, expect_met)
            ratios = [step / floor for step, floor in zip(times, floors, strict=True)]
            results[name] = (statistics.median(times), len(times), statistics.median(ratios))
            floor_times.extend(floors)
            if name == WALK_MEASURED_WITH:
                walk_times, walk_floors = paired_cpu_times(disk_pass, lambda: floor_pass(walk_operations), seconds)
                walk_ratios = [step / floor for step, floor in zip(walk_times, walk_floors, strict=True)]
                results[WALK_FLOOR] = (statistics.median(walk_floors), len(walk_floors), 1.0)
                results[WALK] = (statistics.median(walk_times), len(walk_times), statistics.median(walk_ratios))

        run(WALK_MEASURED_WITH, build_manager(node, discovered=False), False)
        run("cycle, discovered pods (no API), none met", build_manager(node, discovered=True), False)
        if not real_cgroups:
            hold_memory_pressure(node)
        run("cycle, API pod list, memory.available met", build_manager(node, discovered=False, met=True), True)
        if kept:  # the open + read + close floor, for reference (not in the ratios)
            open_floor_times, _ = paired_cpu_times(lambda: floor_pass(open_operations), floor, seconds)
        for fd in kept.values():
            os.close(fd)
    walk = {name: results.pop(name) for name in (WALK_FLOOR, WALK)}
    floors = {KEPT_FLOOR if kept else FLOOR: (statistics.median(floor_times), len(floor_times), 1.0)}
    if kept:
        floors[OPEN_FLOOR] = (statistics.median(open_floor_times), len(open_floor_times), 1.0)
    return {**floors, **results, **walk}


def check(report: CycleReport, pods: int, expect_met: bool) -> None:
    """Fail loudly if the cycle did not do what the variant claims (a benchmark of a broken cycle is void)."""
    summary = report.observed.summary
    if report.errors or summary is None or len(summary.pods) != pods:
        raise SystemExit(f"cycle did not read the node: errors={report.errors} "
                         f"pods={len(summary.pods) if summary else None}/{pods}")
    met = {status.threshold.signal for status in report.decided.assessment.thresholds}
    if expect_met != (Signal.MEMORY_AVAILABLE in met) or (not expect_met and met):
        raise SystemExit(f"unexpected thresholds met: {sorted(map(str, met))}")
    ranked, evictions = report.decided.ranked_pods, report.acted.evictions
    if expect_met and (len(ranked) != pods or len(evictions) != 1):
        raise SystemExit(f"memory pressure cycle ranked {len(ranked)} pods, evicted {len(evictions)}")
    stats = next(iter(summary.pods))
    if stats.memory is None or stats.process_count is None or not stats.volume_stats or not stats.containers:
        raise SystemExit(f"pod stats incomplete: {stats}")


def profile(pods: int, discovered: bool, cycles: int = 50, real_cgroups: bool = False) -> None:
    """Print the top functions of `cycles` steady-state cycles (cProfile, cumulative and own time)."""
    with build_node(pods, real_cgroups=real_cgroups) as node:
        manager, disk_pass = build_manager(node, discovered=discovered)
        for _ in range(WARMUP_CYCLES):
            manager.synchronize()
            disk_pass()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(cycles):
            manager.synchronize()
        profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(25)


def report(rows: dict[int, dict[str, tuple[float, int, float]]]) -> tuple[list[str], bool]:
    """Return the printed table and whether every variant is within the target at every size."""
    sizes = list(rows)
    names = list(next(iter(rows.values())))
    lines = [f"{'CPU ms per cycle, median (x floor)':42}" + "".join(f"{f'{n} pods':>18}" for n in sizes)]
    ok = True
    for name in names:
        cells = []
        for size in sizes:
            median, _, ratio = rows[size][name]
            if name.startswith("floor"):
                cells.append(f"{median * 1000:9.2f}        ")
            else:
                ok = ok and ratio <= TARGET_RATIO
                cells.append(f"{median * 1000:9.2f} ({ratio:4.2f}x)")
        lines.append(f"{name:42}" + "".join(f"{cell:>18}" for cell in cells))
    reps = ", ".join(f"{size}: {min(r for _, r, _ in rows[size].values() if r)}" for size in sizes)
    lines.append(f"(x floor = median of cycle/floor pairs run back to back, the walker's pass against the floor of "
                 f"its own operations; at least {reps} pairs per variant; "
                 f"target <= {TARGET_RATIO:g}x: {'met' if ok else 'NOT met'})")
    return lines, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per variant and size")
    parser.add_argument("--profile", type=int, metavar="PODS", help="profile cycles at this many pods instead")
    parser.add_argument("--discovered", action="store_true", help="with --profile: the discovered-pods daemon")
    parser.add_argument("--real-cgroups", action="store_true",
                        help="the node's cgroups as real ones in this machine's cgroup v1 hierarchies (root)")
    args = parser.parse_args()
    if args.profile:
        profile(args.profile, args.discovered, real_cgroups=args.real_cgroups)
        return 0
    rows = {size: measure_size(size, args.seconds, args.real_cgroups) for size in map(int, args.sizes.split(","))}
    lines, ok = report(rows)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

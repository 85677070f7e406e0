"""What the flight recorder costs a cycle: its CPU time next to the cycle's, the wall time of its fdatasync, and the
bytes a cycle takes on disk (so how long 64 MiB lasts), at 110, 250 and 1000 pods.

On `cycle_cost.py`'s synthetic node (the real adapters, pods from a fixed API-style list), each measured
repetition runs one full `EvictionManager.synchronize()` and then the recorder hook (`FlightRecorder`, as
`evictd run` wires it) on that cycle's report, back to back; CPU time is `time.process_time()` around each.
Variants: no threshold met, and memory.available met (every pod ranked, each with its keys, and an eviction
decided). The recorder writes to a stateDir on the machine's disk (`--state-dir`, default a fresh folder under
/var/tmp), so its fdatasync waits for a real device; that wait is measured as wall time minus CPU time of the
hook. Between repetitions the node's readings move (each pod's memory usage changes), as on a real node, so
lines compress as real ones do; the pod list stays (the API's list between watch events), so after the first
line only its absence is written. Bytes per cycle are the segment's growth; compressed, the size of the closed
(gzip) segments over the cycles they hold.

Target: the recorder adds at most 15 % to the CPU time of the cycle at every size (so the cycle-CPU figures
stay where docs/measured-figures.md has them), and RSS: see `memory_rss.py`, whose daemon records as `evictd run` does.

    .venv/bin/python bench/recorder_cost.py [--sizes 110,250,1000] [--seconds 1.0] [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime

from cycle_cost import (
    WARMUP_CYCLES,
    build_manager,
    check,
    disk_pass_for,
    hold_memory_pressure,
)
from synthetic_node import MiB, build_node, write_config

from evictd.config import load_configuration
from evictd.cycle.finished import Cycle
from evictd.record.recorder import FlightRecorder
from evictd.record.recording import segment_paths
from evictd.state_dir import RECORDING_FOLDER

SIZES = (110, 250, 1000)
TARGET_SHARE = 0.15
MIN_REPETITIONS = 15


class Log:
    """The recorder logs only when it cannot write: that fails the benchmark."""

    def warning(self, event: str, **fields: object) -> None:
        raise SystemExit(f"recorder: {event} {fields}")

    def info(self, event: str, **fields: object) -> None:
        return None


def measure(pods: int, seconds: float, state_parent: str) -> dict[str, dict[str, float]]:
    """Return variant -> figures at `pods` pods."""
    results: dict[str, dict[str, float]] = {}
    with build_node(pods) as node:
        config = load_configuration([str(write_config(node))])

        def run(name: str, expect_met: bool) -> None:
            manager = build_manager(node, discovered=False)
            disk_pass = disk_pass_for(node, manager)
            state_dir = tempfile.mkdtemp(prefix="evictd-recorder-bench-", dir=state_parent)
            recorder = FlightRecorder(state_dir, config.eviction, max_bytes=config.evictd.recorder_max_bytes,
                                      max_age_s=config.evictd.recorder_max_age_s, dry_run=False, log=Log())
            folder = os.path.join(state_dir, RECORDING_FOLDER)
            try:
                for _ in range(WARMUP_CYCLES):
                    report = manager.synchronize()
                    disk_pass()
                check(report, pods, expect_met)
                cycle_cpu: list[float] = []
                hook_cpu: list[float] = []
                hook_wall: list[float] = []
                spent = 0.0
                number = 0
                while len(cycle_cpu) < MIN_REPETITIONS or spent < seconds:
                    number += 1
                    node.move_pod_memory(number)
                    start = time.process_time()
                    report = manager.synchronize()
                    middle = time.process_time()
                    wall = time.perf_counter()
                    recorder(Cycle(number=number, report=report, state=manager.state, started_at=report.now,
                                   duration_s=middle - start, wall=datetime.now(UTC)))
                    wall = time.perf_counter() - wall
                    end = time.process_time()
                    cycle_cpu.append(middle - start)
                    hook_cpu.append(end - middle)
                    hook_wall.append(wall)
                    spent += end - start
                check(report, pods, expect_met)
                recorder.close()
                paths = segment_paths(folder)
                compressed = sum(os.path.getsize(p) for p in paths)
                raw = 0
                for path in paths:
                    with gzip.open(path) as handle:
                        raw += len(handle.read())
                results[name] = {
                    "cycle_ms": statistics.median(cycle_cpu) * 1000,
                    "recorder_ms": statistics.median(hook_cpu) * 1000,
                    "share": statistics.median(h / c for h, c in zip(hook_cpu, cycle_cpu, strict=True)),
                    "sync_wait_ms": statistics.median(w - c for w, c in zip(hook_wall, hook_cpu, strict=True)) * 1000,
                    "raw_kib_per_cycle": raw / number / 1024,
                    "gz_kib_per_cycle": compressed / number / 1024,
                    "repetitions": float(number),
                }
            finally:
                shutil.rmtree(state_dir, ignore_errors=True)

        run("no threshold met", False)
        hold_memory_pressure(node)
        run("memory.available met (ranking)", True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per variant and size")
    parser.add_argument("--state-dir", default="/var/tmp", help="where the recordings are written (a real disk)")
    args = parser.parse_args()
    ok = True
    print(f"{'pods / variant':44}{'cycle CPU':>11}{'recorder CPU':>14}{'share':>8}{'fdatasync wait':>16}"
          f"{'KiB/cycle raw':>15}{'gzip':>8}{'64 MiB lasts':>14}")
    for pods in map(int, args.sizes.split(",")):
        for name, r in measure(pods, args.seconds, args.state_dir).items():
            ok = ok and r["share"] <= TARGET_SHARE
            hours = 64 * MiB / (r["gz_kib_per_cycle"] * 1024) * 10 / 3600  # one cycle every 10 s
            print(f"{f'{pods} pods, {name}':44}{r['cycle_ms']:9.2f}ms{r['recorder_ms']:12.2f}ms{r['share']:7.0%}"
                  f"{r['sync_wait_ms']:14.2f}ms{r['raw_kib_per_cycle']:15.1f}{r['gz_kib_per_cycle']:8.1f}"
                  f"{hours:12.1f} h")
    print(f"(medians over at least {MIN_REPETITIONS} cycles; 64 MiB lasts: of gzip segments at one cycle every 10 s; "
          f"target: recorder CPU <= {TARGET_SHARE:.0%} of the cycle's: {'met' if ok else 'NOT met'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

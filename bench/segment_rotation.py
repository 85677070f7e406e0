"""What a recording segment's rotation costs the loop: the flight recorder hook's wall time on the cycles that
close a segment, beside the other cycles', with the recorder wired as `evictd run` wires it (a `WriteBehind`).

On `cycle_cost.py`'s synthetic node at 1000 pods with memory.available met, every line holds the whole ranking
(about 360 KiB), so a segment (1/16 of the default 64 MiB `recorderMaxBytes`) closes about every 11 cycles. Each
cycle runs `EvictionManager.synchronize()` and then the hook; only the hook is timed (`time.perf_counter`), and a
cycle that left a new plain segment in the folder is a rotation. Within the hook, the time spent closing the old
segment (`FlightRecorder._close_segment`, wrapped by name: the gzip, fsync, rename and unlink before the
write-behind took them, the hand-over after) is timed apart: the rest of a rotating cycle's hook is the new
segment's first line (the whole pod list and Summary, encoded in the loop either way). The recording goes to a real disk
(`--state-dir`, default a fresh folder under /var/tmp); `--write-load MIB` runs beside it, on the same
filesystem, a process writing that many MiB with `fdatasync` and deleting them, in a loop (issue #29's writer).
Run it with `PYTHONPATH=<checkout>/src` for another checkout's recorder (before/after).

Target: closing a segment holds the loop at most 20 ms (the issue's crossing-to-decision budget), under write load
too.

    .venv/bin/python bench/segment_rotation.py [--rotations 8] [--write-load 128] [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime

from cycle_cost import (
    WARMUP_CYCLES,
    build_manager,
    check,
    disk_pass_for,
    hold_memory_pressure,
)
from synthetic_node import build_node, write_config

import evictd
from evictd.config import load_configuration
from evictd.cycle.finished import Cycle
from evictd.record.recorder import FlightRecorder
from evictd.record.write_behind import WriteBehind
from evictd.state_dir import RECORDING_FOLDER

PODS = 1000
TARGET_CLOSE_MS = 20.0


class Problems:
    """A log keeping what went wrong (the recorder and its thread log only then): any of it fails the benchmark."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def info(self, event: str, **fields: object) -> None:
        return None

    def warning(self, event: str, **fields: object) -> None:
        self.seen.append(f"{event} {fields}")

    error = exception = warning


def writer_process(folder: str, mib: int) -> subprocess.Popen[bytes]:
    """A loop writing `mib` MiB with fdatasync into `folder`, then deleting them."""
    target = os.path.join(folder, "write-load")
    return subprocess.Popen(["sh", "-c", f"while :; do dd if=/dev/zero of={target} bs=1M count={mib} "
                             f"conv=fdatasync 2>/dev/null; rm -f {target}; done"], start_new_session=True)


def timed(method: Callable[..., None], into: list[float]) -> Callable[..., None]:
    def wrapper(*args: object, **kwargs: object) -> None:
        start = time.perf_counter()
        try:
            method(*args, **kwargs)
        finally:
            into.append((time.perf_counter() - start) * 1000)

    return wrapper


def measure(rotations: int, state_parent: str, write_load: int, log: Problems) -> dict[str, list[float]]:
    """Return the hook's wall times (ms) on rotating cycles and on the others, and the segments' closes'."""
    rotating: list[float] = []
    others: list[float] = []
    closing: list[float] = []
    with build_node(PODS) as node:
        config = load_configuration([str(write_config(node))])
        hold_memory_pressure(node)
        manager = build_manager(node, discovered=False)
        disk_pass = disk_pass_for(node, manager)
        state_dir = tempfile.mkdtemp(prefix="evictd-rotation-bench-", dir=state_parent)
        writer = WriteBehind(log)
        recorder = FlightRecorder(state_dir, config.eviction, max_bytes=config.evictd.recorder_max_bytes,
                                  max_age_s=config.evictd.recorder_max_age_s, dry_run=False, log=log,
                                  writer=writer)
        recorder._close_segment = timed(recorder._close_segment, closing)  # type: ignore[method-assign]
        folder = os.path.join(state_dir, RECORDING_FOLDER)
        load = writer_process(state_dir, write_load) if write_load else None
        try:
            for _ in range(WARMUP_CYCLES):
                report = manager.synchronize()
                disk_pass()
            check(report, PODS, True)
            number = 0
            while len(rotating) < rotations:
                number += 1
                node.move_pod_memory(number)
                report = manager.synchronize()
                before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
                start = time.perf_counter()
                recorder(Cycle(number=number, report=report, state=manager.state, started_at=report.now,
                               duration_s=0.0, wall=datetime.now(UTC)))
                spent = (time.perf_counter() - start) * 1000
                new = {name for name in os.listdir(folder) if name.endswith(".jsonl")} - before
                (rotating if new and number > 1 else others).append(spent)
            recorder.close()
            del closing[len(rotating):]  # the stop's
        finally:
            if load is not None:
                os.killpg(load.pid, 15)
                load.wait()
            writer.flush(60.0)
            shutil.rmtree(state_dir, ignore_errors=True)
    return {"rotating cycles": rotating, "other cycles": others, "closing a segment": closing}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rotations", type=int, default=8)
    parser.add_argument("--write-load", type=int, default=0, help="MiB written with fdatasync in a loop beside")
    parser.add_argument("--state-dir", default="/var/tmp", help="where the recording is written (a real disk)")
    args = parser.parse_args()
    log = Problems()
    figures = measure(args.rotations, args.state_dir, args.write_load, log)
    load = f"beside a {args.write_load} MiB fdatasync writer" if args.write_load else "no write load"
    print(f"evictd from {os.path.dirname(evictd.__file__)}; {PODS} pods, memory.available met; {load}; "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, times in figures.items():
        print(f"  {name:18} {len(times):4}  p50 {statistics.median(times):8.1f} ms  max {max(times):8.1f} ms")
    for problem in log.seen:
        print(f"  recorder: {problem}")
    ok = max(figures["closing a segment"]) <= TARGET_CLOSE_MS and not log.seen
    print(f"target: closing a segment holds the loop at most {TARGET_CLOSE_MS:.0f} ms: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

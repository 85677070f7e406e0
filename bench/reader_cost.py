"""What reading a full flight recording costs: wall time and peak RSS of `evictd explain --last`, `evictd replay`
and `evictd record export` on a recording of 1,000 pods filling `recorderMaxBytes` (60 MiB by default).

The recording is written by the real recorder (`FlightRecorder`, as `evictd run` wires it) from the real
eviction manager on `cycle_cost.py`'s synthetic node (real adapters over a synthetic cgroup tree, pods from a
fixed API-style list) under memory pressure (memory.available below the default hard threshold: every cycle
ranks every pod and decides an eviction, reported only), each pod's memory moving every cycle, until the
closed segments hold `--megabytes` MiB. Then each reader runs as `evictd` itself, in a fresh process of its
own, its stdout to /dev/null; its wall time is measured around it and its peak RSS is the child's `ru_maxrss`
(`os.wait4`). Writing takes a minute or two at 1,000 pods; `--keep DIR` keeps (and reuses) the recording.

Target: each reader within 15 s and 256 MiB.

    .venv/bin/python bench/reader_cost.py [--pods 1000] [--megabytes 60] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from cycle_cost import build_manager, disk_pass_for, hold_memory_pressure
from synthetic_node import MiB, build_node, write_config

from evictd.config import load_configuration
from evictd.cycle.finished import Cycle
from evictd.record.recorder import FlightRecorder
from evictd.record.recording import segment_paths
from evictd.record.segment_files import CLOSED_SUFFIX
from evictd.state_dir import RECORDING_FOLDER

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 15.0
TARGET_RSS_MIB = 256
READERS = {
    "explain --last": ("explain", "--last", "--state-dir", "{state}"),
    "replay": ("replay", "{state}"),
    "record export": ("record", "export", "--state-dir", "{state}"),
}


class Log:
    """The recorder logs only when it cannot write: that fails the benchmark."""

    def warning(self, event: str, **fields: object) -> None:
        raise SystemExit(f"recorder: {event} {fields}")

    def info(self, event: str, **fields: object) -> None:
        return None


def closed_bytes(folder: str) -> int:
    return sum(os.path.getsize(p) for p in segment_paths(folder) if p.endswith(CLOSED_SUFFIX))


def write_recording(state_dir: str, pods: int, megabytes: float) -> int:
    """Record cycles under pressure at `pods` pods until the closed segments hold `megabytes` MiB; return the
    number of cycles written."""
    with build_node(pods) as node:
        config = load_configuration([str(write_config(node))])
        hold_memory_pressure(node)
        manager = build_manager(node, discovered=False)
        disk_pass = disk_pass_for(node, manager)
        disk_pass()
        # Room for the wanted size plus the open segment: nothing is rotated out before it is reached.
        max_bytes = int(megabytes * MiB * 1.2)
        recorder = FlightRecorder(state_dir, config.eviction, max_bytes=max_bytes,
                                  max_age_s=config.evictd.recorder_max_age_s, dry_run=False, log=Log())
        folder = os.path.join(state_dir, RECORDING_FOLDER)
        number = 0
        while closed_bytes(folder) < megabytes * MiB:
            number += 1
            node.move_pod_memory(number)
            report = manager.synchronize()
            recorder(Cycle(number=number, report=report, state=manager.state, started_at=report.now,
                           duration_s=0.0, wall=datetime.now(UTC)))
            if number % 100 == 0:
                print(f"  {number} cycles, {closed_bytes(folder) / MiB:.1f} MiB closed", file=sys.stderr)
        recorder.close()
        return number


def measure(argv: list[str]) -> tuple[float, float, int]:
    """Run `evictd <argv>`; return its wall time (s), peak RSS (MiB) and exit status."""
    with open(os.devnull, "wb") as null:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "evictd", *argv], cwd=ROOT, stdout=null,
                                 stderr=subprocess.PIPE)
        assert child.stderr is not None
        errors = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        print(f"  evictd {' '.join(argv)}: exit {child.returncode}: {errors.decode(errors='replace')[-400:]}",
              file=sys.stderr)
    return wall, usage.ru_maxrss / 1024, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--megabytes", type=float, default=60.0, help="closed segments' size to reach (MiB)")
    parser.add_argument("--keep", help="the stateDir to write the recording to and keep (reused when it has one)")
    args = parser.parse_args()
    state_dir = args.keep or tempfile.mkdtemp(prefix="evictd-reader-bench-", dir="/var/tmp")
    try:
        folder = os.path.join(state_dir, RECORDING_FOLDER)
        if not segment_paths(folder):
            started = time.perf_counter()
            cycles = write_recording(state_dir, args.pods, args.megabytes)
            print(f"recorded {cycles} cycles at {args.pods} pods in {time.perf_counter() - started:.0f} s")
        paths = segment_paths(folder)
        size = sum(os.path.getsize(p) for p in paths)
        print(f"recording: {len(paths)} segments, {size / MiB:.1f} MiB on disk")
        ok = True
        print(f"{'reader':18}{'wall':>9}{'peak RSS':>12}{'exit':>6}")
        for name, argv in READERS.items():
            wall, rss, code = measure([a.format(state=state_dir) for a in argv])
            ok = ok and code == 0 and wall <= TARGET_S and rss <= TARGET_RSS_MIB
            print(f"{name:18}{wall:8.1f}s{rss:9.0f} MiB{code:6}")
        print(f"target: each within {TARGET_S:g} s and {TARGET_RSS_MIB} MiB: {'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

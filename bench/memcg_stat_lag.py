"""How far the root memory cgroup's memory.stat lags /proc/meminfo beside a writer whose files come and go.

The kubelet (through cAdvisor) and evictd take a node's working set as the root memory cgroup's usage less its
``total_inactive_file`` of memory.stat. The kernel counts usage at once, but folds each CPU's statistics into
memory.stat only past a batch and at least every 2 s. This measures that lag, where the memcg notifier's level
(armed with memory.stat's figure) would fire late and the working set jumps when the statistics catch up
(`evictd.core.memcg.armed_inactive_file`, `stats_behind`).

It runs the load of `bench/earlyoom_side_by_side.py --load write` (a loop writing a file with fdatasync, then
deleting it) in a folder given or a temporary one under /var/tmp, and reads every millisecond the root's
memory.stat ``total_inactive_file`` and /proc/meminfo's ``Inactive(file)``. It prints how far apart they were
(p50, p99, max), and each stretch during which memory.stat was more than 8 MiB *above* /proc/meminfo (page
cache already gone that it still counted: the case that delays a crossing), with how long it lasted.
Needs cgroup v1 and read access to the root memory cgroup.

    .venv/bin/python bench/memcg_stat_lag.py [--seconds 30] [--file-mib 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from detection_latency import percentile
from earlyoom_side_by_side import WRITER  # the same write load

from evictd.adapters.cgroups import v1_usage_and_inactive_file
from evictd.adapters.procfs import inactive_file_bytes

MiB = 1 << 20
MEMORY_ROOT = "/sys/fs/cgroup/memory"
STEP_BYTES = 8 * MiB  # evictd.core.memcg.MEMCG_REARM_STEP_BYTES: a smaller difference is not acted on


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument("--folder", type=Path, default=None, help="where the writer writes (default: under /var/tmp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder or "/var/tmp", prefix="evictd-stat-lag-") as folder:
        writer = subprocess.Popen([sys.executable, "-c", WRITER, os.path.join(folder, "writer.data"),
                                   str(args.file_mib * MiB)])
        try:
            differences: list[int] = []
            stretches: list[tuple[float, int]] = []  # (how long, the largest difference in it)
            started_at: float | None = None
            largest = 0
            end = time.monotonic() + args.seconds
            while (now := time.monotonic()) < end:
                difference = v1_usage_and_inactive_file(MEMORY_ROOT)[1] - inactive_file_bytes()
                differences.append(difference)
                if difference > STEP_BYTES:
                    started_at = now if started_at is None else started_at
                    largest = max(largest, difference)
                elif started_at is not None:
                    stretches.append((now - started_at, largest))
                    started_at, largest = None, 0
                time.sleep(0.001)
        finally:
            writer.kill()
            writer.wait()
    absolute = [abs(d) / MiB for d in differences]
    print(f"{len(differences)} readings over {args.seconds:.0f} s beside a writer of {args.file_mib} MiB files "
          f"(load {' '.join(Path('/proc/loadavg').read_text(encoding='ascii').split()[:3])})")
    print(f"  |memory.stat - /proc/meminfo| inactive file: p50 {statistics.median(absolute):.1f} MiB, "
          f"p99 {percentile(absolute, 0.99):.1f} MiB, max {max(absolute):.1f} MiB")
    if stretches:
        durations = [d for d, _ in stretches]
        print(f"  memory.stat more than {STEP_BYTES // MiB} MiB above /proc/meminfo: {len(stretches)} times, "
              f"lasting p50 {statistics.median(durations) * 1000:.0f} ms, max {max(durations) * 1000:.0f} ms, "
              f"by up to {max(m for _, m in stretches) / MiB:.0f} MiB")
    else:
        print(f"  memory.stat was never more than {STEP_BYTES // MiB} MiB above /proc/meminfo")
    return 0


if __name__ == "__main__":
    sys.exit(main())

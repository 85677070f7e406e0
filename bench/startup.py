"""Start-up time of the offline commands (target: well under 0.3 s on the reference machine).

Runs each command N times as a fresh process (as a user or a CI job would) and prints min / median / max wall
time, plus the cost of a bare `python -c pass` as the floor no Python program can beat.

    .venv/bin/python bench/startup.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "evictd check-config": [sys.executable, "-m", "evictd", "check-config", "--config", "config/kubelet-config.yaml"],
    "evictd check-config --output json": [sys.executable, "-m", "evictd", "check-config", "--output", "json"],
    "evictd simulate 01-memory-pressure": [sys.executable, "-m", "evictd", "simulate",
                                           "config/examples/01-memory-pressure.yaml", "--output", "json"],
}


def measure(command: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}")
    print(f"{'command':40} {'min':>8} {'median':>8} {'max':>8}   ({args.runs} runs)")
    for name, command in COMMANDS.items():
        times = measure(command, args.runs)
        print(f"{name:40} {min(times) * 1000:7.0f}ms {statistics.median(times) * 1000:7.0f}ms "
              f"{max(times) * 1000:7.0f}ms")


if __name__ == "__main__":
    main()

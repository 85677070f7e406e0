"""Every evictd benchmark in one command, with the facts of the machine it ran on.

    .venv/bin/python bench/run_all.py

Runs, each in a fresh process with this interpreter: `cycle_cost.py` (CPU time of a housekeeping cycle at
110, 250 and 1000 pods, and of a disk walker pass, against the floor of only reading the same files),
`syscall_parity.py` (those floors make the same file system calls; needs strace), `memory_rss.py` (daemon
RSS after 100 cycles at 250 pods against the import floor), `detection_latency.py` (real memory threshold
crossings to the engine's decision, wake-ups on and off), `earlyoom_side_by_side.py` (`evictd run` and
earlyoom as processes on the same allocations, each timed against a 1 ms sampler), `disk_walk_isolation.py`
(cycle duration and crossing-to-decision latency with a tenant's 0, 100,000 and 1,000,000 churning files, the
walker process only; run it on its own for the comparison with the walk in the cycle), `recorder_cost.py` (the
flight recorder's CPU next to the cycle's, its fdatasync wait and bytes per cycle), `tenant_annotations.py`
(`evictd run` beside 100 pods with 250 KiB annotations: RSS, CPU, recording) and `startup.py` (start-up of the
offline commands). Prints a compact report and a line per target; exits 1 if a target is not met. Takes
about twelve minutes. Needs root (the latency benchmarks create memory cgroups).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (title, script and arguments, target described for the summary)
BENCHMARKS = (
    ("cycle CPU time (synthetic node; target: <= 2x the floor at every size)", ["cycle_cost.py"],
     "cycle CPU time <= 2x the floor"),
    ("file system calls: cycle vs floor (strace)", ["syscall_parity.py", "--pods", "110"], None),
    ("", ["syscall_parity.py", "--pods", "110", "--discovered"], None),
    ("daemon RSS (target: <= 64 MiB after 100 cycles at 250 pods, no growth)", ["memory_rss.py"],
     "RSS <= 64 MiB, no growth"),
    ("detection latency (target with wake-ups: p99 <= 50 ms)", ["detection_latency.py"],
     "detection p99 <= 50 ms with wake-ups"),
    ("side by side with earlyoom (target: evictd p99 <= 20 ms over 50 crossings)",
     ["earlyoom_side_by_side.py", "--crossings", "50"], "evictd p99 <= 20 ms beside earlyoom"),
    ("memory decisions against a tenant's file count (target: p99 the same at 0 and 1,000,000 files)",
     ["disk_walk_isolation.py", "--seconds", "15", "--ways", "walker process"],
     "cycle p99 independent of the file count, crossing p99 <= 50 ms"),
    ("flight recorder (target: its CPU <= 15 % of the cycle's at every size)", ["recorder_cost.py"],
     "recorder CPU <= 15 % of the cycle"),
    ("pods with 250 KiB annotations (target: peak RSS < 128 MiB, recording not growing with them)",
     ["tenant_annotations.py", "--seconds", "30"], None),
    ("start-up of the offline commands", ["startup.py", "--runs", "20"], None),
)


def cpu_model() -> str:
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def physical_cores() -> str:
    cores = set()
    physical = core = None
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
        for line in cpuinfo:
            name, _, value = line.partition(":")
            name = name.strip()
            if name == "physical id":
                physical = value.strip()
            elif name == "core id":
                core = value.strip()
            elif not line.strip() and core is not None:
                cores.add((physical, core))
                physical = core = None
    return str(len(cores)) if cores else "?"


def mem_total_gib() -> float:
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1 << 20)
    return 0.0


def cgroup_mode() -> str:
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        with open("/sys/fs/cgroup/cgroup.controllers", encoding="ascii") as controllers:
            if "memory" in controllers.read().split():
                return "v2"
    return "v1 (hybrid)" if os.path.isdir("/sys/fs/cgroup/memory") else "unknown"


def load() -> str:
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def machine_lines() -> list[str]:
    uname = platform.uname()
    return [
        f"machine: {cpu_model()}, {os.cpu_count()} CPUs ({physical_cores()} cores), {mem_total_gib():.1f} GiB RAM",
        f"         Linux {uname.release} {uname.machine}, cgroup {cgroup_mode()}, "
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average at start {load()}",
    ]


def main() -> int:
    print("\n".join(machine_lines()), flush=True)
    started = time.monotonic()
    verdicts: list[tuple[str, bool]] = []
    for title, command, target in BENCHMARKS:
        began = time.monotonic()
        done = subprocess.run([sys.executable, str(HERE / command[0]), *command[1:]], cwd=HERE.parent,
                              capture_output=True, text=True, check=False)
        if title:
            print(f"\n== {title}  [{time.monotonic() - began:.0f} s]")
        print(done.stdout.rstrip(), flush=True)
        crashed = "Traceback" in done.stderr or done.returncode not in (0, 1)
        if crashed:
            last = done.stderr.strip().splitlines()[-3:] or [f"exit status {done.returncode}"]
            print("(did not finish:\n  " + "\n  ".join(last) + ")")
        if target is not None:
            verdicts.append((target + (" (did not finish)" if crashed else ""), done.returncode == 0))
    print(f"\ntargets (load average at end {load()}, {time.monotonic() - started:.0f} s in all):")
    for target, met in verdicts:
        print(f"  {'met    ' if met else 'NOT met'}  {target}")
    return 0 if all(met for _, met in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())

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

    .venv/bin/python bench/run_all.py --baseline /tmp/before

Before and after in one run: `--baseline` names another checkout of evictd (e.g. `git worktree add /tmp/before
<commit>`); each benchmark runs there first (its own bench/ script over its own src/, same interpreter), then
here, one after the other, so both see the same machine at the same moment. The report starts with the source
line counts of both, per package; the targets are judged on this checkout only.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
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


def source_lines(checkout: Path) -> dict[str, int]:
    """Lines of Python under `checkout`/src/evictd per package ("(top)" for the modules beside them), without
    the generated CRI stubs."""
    package = checkout / "src" / "evictd"
    counts: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        if path.name.startswith("api_pb2"):
            continue
        parts = path.relative_to(package).parts
        name = parts[0] if len(parts) > 1 else "(top)"
        with open(path, "rb") as source:
            counts[name] = counts.get(name, 0) + sum(1 for _ in source)
    return counts


def revision(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%h %cs"], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip() or "(not a git checkout)"


def line_count_lines(baseline: Path) -> list[str]:
    before, after = source_lines(baseline), source_lines(HERE.parent)
    names = sorted(set(before) | set(after), key=lambda name: (name == "(top)", name))
    rows = [f"  {name:<12}{before.get(name, 0):>8}{after.get(name, 0):>8}" for name in names]
    return ["", f"source lines of src/evictd     baseline {revision(baseline)}, this checkout {revision(HERE.parent)}",
            f"  {'package':<12}{'baseline':>8}{'now':>8}", *rows,
            f"  {'all':<12}{sum(before.values()):>8}{sum(after.values()):>8}",
            f"  modules at the top: {len(list((baseline / 'src' / 'evictd').glob('*.py')))} then "
            f"{len(list((HERE.parent / 'src' / 'evictd').glob('*.py')))}"]


def run_benchmark(checkout: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run one benchmark script of `checkout` over that checkout's src/."""
    # A node lock of the benchmarks' own: an evictd running on this machine (or a test's) must not make the
    # benchmark's daemons wait for /run/evictd/node.lock.
    environment = dict(os.environ, PYTHONPATH=str(checkout / "src"),
                       EVICTD_NODE_LOCK=os.path.join(tempfile.gettempdir(), f"evictd-bench-{os.getpid()}.lock"))
    return subprocess.run([sys.executable, str(checkout / "bench" / command[0]), *command[1:]], cwd=checkout,
                          capture_output=True, text=True, check=False, env=environment)


def report(done: subprocess.CompletedProcess[str]) -> bool:
    """Print a benchmark's output; return whether it crashed (rather than met or missed its target)."""
    print(done.stdout.rstrip(), flush=True)
    crashed = "Traceback" in done.stderr or done.returncode not in (0, 1)
    if crashed:
        last = done.stderr.strip().splitlines()[-3:] or [f"exit status {done.returncode}"]
        print("(did not finish:\n  " + "\n  ".join(last) + ")")
    return crashed


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline", type=Path, help="another checkout of evictd, each benchmark run there first")
    args = parser.parse_args()
    print("\n".join(machine_lines()), flush=True)
    if args.baseline is not None:
        print("\n".join(line_count_lines(args.baseline.resolve())), flush=True)
    started = time.monotonic()
    verdicts: list[tuple[str, bool]] = []
    for title, command, target in BENCHMARKS:
        began = time.monotonic()
        baseline = None if args.baseline is None else run_benchmark(args.baseline.resolve(), command)
        done = run_benchmark(HERE.parent, command)
        if title:
            print(f"\n== {title}  [{time.monotonic() - began:.0f} s]")
        if baseline is not None:
            print(f"-- baseline ({revision(args.baseline.resolve())})")
            report(baseline)
            print(f"-- this checkout ({revision(HERE.parent)})")
        crashed = report(done)
        if target is not None:
            verdicts.append((target + (" (did not finish)" if crashed else ""), done.returncode == 0))
    print(f"\ntargets (load average at end {load()}, {time.monotonic() - started:.0f} s in all):")
    for target, met in verdicts:
        print(f"  {'met    ' if met else 'NOT met'}  {target}")
    return 0 if all(met for _, met in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())

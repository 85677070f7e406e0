"""What a tenant flapping across a memory threshold costs evictd (issue #37, item 3: at most 1 % of a core at 20 Hz).

Real cgroups, real daemon: `evictd run` as a process (JSON logs, no Kubernetes API: evictions are reported, not
carried out, so the flapping goes on for the whole run) on a pods cgroup of our own in this machine's cgroup v1
hierarchies (`tests/real_pod_node.py`: ``kubepods`` limited to 512 MiB, one Burstable pod), one memory threshold
on ``allocatableMemory.available`` at 200Mi, a 10 s interval, memcg wake-ups on, PSI wake-ups off. A tenant in
the pod's container (tests/memory_tenant.py) grows the pods cgroup's working set to 4 MiB short of the threshold,
then crosses it `--hz` times a second: 8 MiB more for half of each period, then freed.

Each run reports, over `--seconds` of flapping, evictd's CPU (utime + stime of its process, /proc/<pid>/stat) as
a share of one core, its cycles a minute (``evictd_cycles_total``), and how many times it decided the threshold met
("threshold met" lines) and would have evicted. Beside it a quiet run: the same node, no flapping. Kinds:

* ``hard``: ``evictionHard`` (every confirmed crossing decides an eviction);
* ``soft``: ``evictionSoft`` with a 20 s grace period (the tenant is above the threshold half of the time: the
  kubelet, sampling every 10 s, sees it met on about half of its ticks).

    .venv/bin/python bench/flapping_tenant.py [--hz 5,20] [--kinds hard,soft] [--seconds 30] [--runs 1] [--json]

Needs root (it creates cgroups) and a cgroup v1 memory hierarchy; removes what it made on every exit path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "daemon")]

from evictd_process import EvictdProcess  # noqa: E402

from memory_tenant import start_tenant, stop_tenant  # noqa: E402
from real_pod_node import RealPodNode  # noqa: E402

MiB = 1 << 20
LEVEL_BYTES = 200 * MiB
PODS_LIMIT_BYTES = 512 * MiB
UNDER_BYTES = 4 * MiB
STEP_BYTES = 8 * MiB
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

def kubelet_config(kind: str) -> str:
    if kind == "hard":
        return "evictionHard: {allocatableMemory.available: 200Mi}\nenforceNodeAllocatable: []\n"
    return ("mergeDefaultEvictionSettings: false\nevictionHard: {}\n"
            "evictionSoft: {allocatableMemory.available: 200Mi}\n"
            "evictionSoftGracePeriod: {allocatableMemory.available: 20s}\n"
            "evictionMaxPodGracePeriod: 1\nenforceNodeAllocatable: []\n")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)


def one_run(kind: str, hz: float, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="evictd-flap-") as folder:
        work = Path(folder)
        node = RealPodNode(kubelet_root=work / "kubelet", pod_logs_dir=work / "pod-logs",
                           pods_limit_bytes=PODS_LIMIT_BYTES)
        daemon = None
        tenant = None
        try:
            node.create(volume_files={}, log_bytes=1024)
            evictd = "housekeepingInterval: 10s\npsiWakeups: false\n" + node.evictd_settings(work / "containerd")
            daemon = EvictdProcess(work, kubelet=kubelet_config(kind), evictd=evictd)
            daemon.wait_event("evictd started")
            daemon.wait_for_cycles(1)
            time.sleep(0.3)  # the notifiers are armed after the first cycle
            tenant = start_tenant(node, LEVEL_BYTES, UNDER_BYTES, "flap", str(STEP_BYTES), str(hz))
            time.sleep(1.0)  # past the first crossing's follow-ups
            cycles, cpu, started = daemon.metric("evictd_cycles_total"), cpu_s(daemon.process.pid), time.monotonic()
            seen = len(daemon.events)
            time.sleep(seconds)
            elapsed = time.monotonic() - started
            cycles = daemon.metric("evictd_cycles_total") - cycles
            cpu = cpu_s(daemon.process.pid) - cpu
        finally:
            if tenant is not None:
                stop_tenant(tenant)
            if daemon is not None:
                daemon.stop()
            node.teardown()
        window = daemon.events[seen:]
        return {"kind": kind, "hz": hz, "seconds": round(elapsed, 1),
                "cpuShareOfCore": round(cpu / elapsed, 4), "cyclesPerMinute": round(cycles * 60 / elapsed),
                "thresholdMet": sum(1 for e in window if e.get("event") == "threshold met"),
                "wouldEvict": sum(1 for e in window if e.get("event") == "would evict pod")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hz", default="5,20", help="flapping frequencies, comma-separated (0: a quiet run)")
    parser.add_argument("--kinds", default="hard,soft")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON line per run, no table")
    args = parser.parse_args()
    rows = []
    for kind in args.kinds.split(","):
        for hz in [0.0, *(float(h) for h in args.hz.split(","))]:
            runs = [one_run(kind, hz, args.seconds) for _ in range(args.runs)]
            for run in runs:
                if args.json:
                    print(json.dumps(run), flush=True)
            rows.append((kind, hz, runs))
    if not args.json:
        print(f"{'kind':5} {'Hz':>4} {'CPU % of a core':>16} {'cycles/min':>11} {'met':>5} {'would evict':>12}")
        for kind, hz, runs in rows:
            cpu = statistics.median(r["cpuShareOfCore"] for r in runs) * 100
            cycles = statistics.median(r["cyclesPerMinute"] for r in runs)
            met = statistics.median(r["thresholdMet"] for r in runs)
            evict = statistics.median(r["wouldEvict"] for r in runs)
            print(f"{kind:5} {hz:4.0f} {cpu:16.2f} {cycles:11.0f} {met:5.0f} {evict:12.0f}")
        print(f"median of {args.runs} run(s) of {args.seconds:.0f} s each; {os.cpu_count()} CPUs, "
              f"{os.uname().release}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

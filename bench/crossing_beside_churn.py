"""How fast `evictd run` decides a real anonymous crossing beside issue 76's churner (whose page cache evictd must not
take for a crossing), on cgroup v1.

The node of tests/daemon/test_run_churn_bystander.py without the API (evictions reported, not carried out): a pods
cgroup of our own limited to 1024 MiB (tests/real_pod_node.py), ``enforceNodeAllocatable: [pods]``,
``evictionHard: {memory.available: 200Mi}`` (``allocatableMemory.available<200Mi`` met at a working set of 824 MiB),
a 10 s interval, memcg wake-ups, PSI wake-ups off; a BestEffort pod holding 100 MiB, and (unless ``--no-churn``) the
Burstable churner holding the working set 38 MiB under the level and writing, keeping 50 ms and deleting a 64 MiB
file 10 times a second. Every 4-5 s a second process in the BestEffort pod allocates ``--step-mib`` (64: 26 MiB
past the level, a deep crossing), holds it until evictd says "threshold met", then frees it.

Per crossing: from the start of the allocation to evictd's "threshold met" line (its log timestamp), and the
line's ``confirmed_after_ms`` (how long the confirmation read) and ``woken_by`` (what started the cycle); a
crossing with no decision within 5 s is a miss; and the "threshold met" lines no allocation brought (the churner's
page cache taken for a crossing). Over the run: evictd's cycles a minute and its CPU (a share of one core).
``--root DIR`` runs another checkout's ``src`` (a before/after).

    .venv/bin/python bench/crossing_beside_churn.py [--crossings 20] [--root DIR] [--no-churn] [--json]

Needs root and cgroup v1; removes what it made on every exit path.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "daemon")]

from evictd_process import EvictdProcess  # noqa: E402

from memory_tenant import start_tenant, stop_tenant  # noqa: E402
from real_pod_node import RealPodNode  # noqa: E402

MiB = 1 << 20
PODS_LIMIT_BYTES = 1024 * MiB
LEVEL_BYTES = 200 * MiB
BATCH_BYTES = 100 * MiB
UNDER_BYTES = 38 * MiB
KUBELET = "evictionHard: {memory.available: 200Mi}\nenforceNodeAllocatable: [pods]\n"
DECISION_TIMEOUT_S = 5.0


def logged_at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def process_cpu_s(daemon: EvictdProcess) -> float:
    """The CPU seconds (user and system) the daemon's process has used."""
    fields = Path(f"/proc/{daemon.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(crossings: int, step_bytes: int, churn: bool) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    lags_ms: list[float] = []
    confirmed_ms: list[float] = []
    woken_by: list[str] = []
    misses = unprompted = 0
    cycles_per_min = cpu_share = 0.0
    starts: list[float] = []
    with tempfile.TemporaryDirectory(prefix="evictd-crossing-") as folder:
        work = Path(folder)
        node = RealPodNode(kubelet_root=work / "kubelet", pod_logs_dir=work / "pod-logs",
                           pods_limit_bytes=PODS_LIMIT_BYTES, namespace="tenant", name="churner")
        batch = node.neighbour("innocent", "batch", "besteffort")
        tenants = []
        daemon = None
        try:
            node.create(volume_files={}, log_bytes=1024)
            batch.create(volume_files={}, log_bytes=1024)
            tenants.append(start_tenant(batch, LEVEL_BYTES, PODS_LIMIT_BYTES - LEVEL_BYTES - BATCH_BYTES,
                                        "flap", "0", "0"))
            grower = batch.start_process()
            with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-crossing-") as files:  # a disk
                if churn:
                    tenants.append(start_tenant(node, LEVEL_BYTES, UNDER_BYTES, "churn", files, "0.05"))
                else:  # the same working set, held still
                    tenants.append(start_tenant(node, LEVEL_BYTES, UNDER_BYTES, "flap", "0", "0"))
                daemon = EvictdProcess(work, kubelet=KUBELET, evictd="housekeepingInterval: 10s\npsiWakeups: false\n"
                                       + node.evictd_settings(work / "containerd"))
                daemon.wait_event("evictd started", timeout=60)
                daemon.wait_for_cycles(1, timeout=30)
                cycles_at, cpu_at = daemon.metric("evictd_cycles_total"), process_cpu_s(daemon)
                run_at = time.monotonic()
                for _ in range(crossings):
                    time.sleep(random.uniform(4.0, 5.0))  # never 4 crossings in 10 s: not a flapping tenant
                    started = time.time()
                    starts.append(started)
                    grower.do(f"alloc {step_bytes}")
                    try:
                        met = daemon.wait_for(lambda e, at=started: e.get("event") == "threshold met"
                                              and logged_at(e) >= at, timeout=DECISION_TIMEOUT_S)
                    except AssertionError:
                        misses += 1
                    else:
                        lags_ms.append((logged_at(met) - started) * 1000)
                        confirmed_ms.append(float(met.get("confirmed_after_ms") or 0.0))
                        woken_by.append("+".join(met.get("woken_by") or ["tick"]))
                    grower.do("free")
                minutes = (time.monotonic() - run_at) / 60
                cycles_per_min = (daemon.metric("evictd_cycles_total") - cycles_at) / minutes
                cpu_share = (process_cpu_s(daemon) - cpu_at) / (minutes * 60)
                daemon.stop()
                # Decisions no allocation brought: the churner's page cache taken for a crossing.
                unprompted = sum(1 for e in daemon.events if e.get("event") == "threshold met"
                                 and not any(0 <= logged_at(e) - at < DECISION_TIMEOUT_S for at in starts))
        finally:
            if daemon is not None:
                daemon.kill()
            for tenant in tenants:
                stop_tenant(tenant)
            node.teardown()

    def spread(values: list[float]) -> list[float]:
        ordered = sorted(values)
        if not ordered:
            return []
        return [round(statistics.median(ordered), 1), round(ordered[int(0.9 * (len(ordered) - 1))], 1),
                round(ordered[-1], 1)]

    return {"crossings": crossings, "churn": churn, "step_mib": step_bytes // MiB, "misses": misses,
            "unprompted_decisions": unprompted,
            "lag_p50_p90_max_ms": spread(lags_ms), "confirmed_after_p50_p90_max_ms": spread(confirmed_ms),
            "lags_ms": [round(v, 1) for v in lags_ms], "confirmed_after_ms": confirmed_ms,
            "woken_by": woken_by,
            "cycles_per_min": round(cycles_per_min, 1), "cpu_share_of_a_core": round(cpu_share, 4),
            "load_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--crossings", type=int, default=20)
    parser.add_argument("--step-mib", type=int, default=64)
    parser.add_argument("--no-churn", action="store_true", help="the churner holds still (no files)")
    parser.add_argument("--root", type=Path, default=None, help="run evictd from this checkout's src")
    parser.add_argument("--json", action="store_true", help="one JSON line, no table")
    args = parser.parse_args()
    if args.root is not None:
        os.environ["PYTHONPATH"] = str(args.root.resolve() / "src")
    result = run(args.crossings, args.step_mib * MiB, not args.no_churn)
    result["root"] = str(args.root or REPO)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['crossings']} crossings of {result['step_mib']} MiB, churn {result['churn']}, "
          f"load {result['load_start_end']}, evictd from {result['root']}")
    print(f"  allocation start -> threshold met p50/p90/max {result['lag_p50_p90_max_ms']} ms; "
          f"confirmed after p50/p90/max {result['confirmed_after_p50_p90_max_ms']} ms; misses {result['misses']}; "
          f"decisions with no allocation {result['unprompted_decisions']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

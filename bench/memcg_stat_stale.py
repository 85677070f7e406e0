"""How long a pods cgroup's memory.stat stays behind its usage beside issue 76's churner, and what that reads as.

The node of tests/daemon/test_run_churn_bystander.py, without evictd: a pods cgroup of our own in this machine's
cgroup v1 hierarchies limited to 1024 MiB (tests/real_pod_node.py), a BestEffort pod holding 100 MiB and a
Burstable pod (tests/memory_tenant.py) that holds the pods cgroup's working set 38 MiB under a 200Mi
`allocatableMemory.available` level (824 MiB), then 10 times a second writes a 64 MiB file in 1 MiB writes, keeps it
50 ms, deletes it and sleeps 50 ms. A sampler reads, back to back, as evictd's settled reading of the pods cgroup
does: ``memory.usage_in_bytes``, ``memory.stat``, ``memory.kmem.usage_in_bytes``, the usage again; every other
sample reads the root's ``memory.stat`` first (as evictd's full and confirming readings do: it flushes the whole
tree when the kernel counts enough updates pending there).

Per kind of sample it reports: stretches with memory.stat unchanged while usage moved more than 8 MiB (how long);
readings whose working set (the lower usage less ``total_inactive_file``) is more than 8 MiB above the held memory
(the pods cgroup's lowest-quartile working set) and how far; readings past the level, as read and as
`evictd.core.settled` confirms (less the unaccounted usage below); how many of those the usage memory.stat does not
account for (usage less kernel memory, ``total_rss`` and ``total_cache``, past `evictd.adapters.cgroups`'s slack)
marks, as `evictd.core.settled` needs; and the readings it marks with no such excess.

    .venv/bin/python bench/memcg_stat_stale.py [--seconds 60] [--json]

Needs root and cgroup v1; removes what it made on every exit path.
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
sys.path[:0] = [str(REPO / "tests")]

from evictd.adapters.cgroups import unfolded_slack_bytes  # noqa: E402
from memory_tenant import start_tenant, stop_tenant  # noqa: E402
from real_pod_node import RealPodNode  # noqa: E402

MiB = 1 << 20
PODS_LIMIT_BYTES = 1024 * MiB
LEVEL_BYTES = 200 * MiB
BATCH_BYTES = 100 * MiB
UNDER_BYTES = 38 * MiB
STEP_BYTES = 8 * MiB  # evictd.core.settled.DEEP_CROSSING_BYTES: a reading more than this above is a deep crossing
ROOT_STAT = "/sys/fs/cgroup/memory/memory.stat"
SAMPLE_PAUSE_S = 0.0005
# A reading: time, root's memory.stat read first, settled usage, working set, usage memory.stat does not account
# for (before the slack), total_cache.
Row = tuple[float, bool, int, int, int, int]


def stat_fields(data: bytes) -> dict[bytes, int]:
    return {key: int(value) for key, value in (line.split() for line in data.splitlines())}


def sample(seconds: float, pods_dir: str) -> list[Row]:
    """(time, root read first, settled usage, working set, unaccounted usage, total_cache) every ~1 ms."""
    files = {name: os.open(f"{pods_dir}/{name}", os.O_RDONLY | os.O_CLOEXEC)
             for name in ("memory.usage_in_bytes", "memory.stat", "memory.kmem.usage_in_bytes")}
    root = os.open(ROOT_STAT, os.O_RDONLY | os.O_CLOEXEC)
    usage_fd, stat_fd, kmem_fd = files.values()
    rows: list[Row] = []
    try:
        end = time.monotonic() + seconds
        first = True
        while (now := time.monotonic()) < end:
            first = not first
            if first:
                os.pread(root, 16384, 0)
            usage = int(os.pread(usage_fd, 64, 0))
            stat = stat_fields(os.pread(stat_fd, 16384, 0))
            kmem = int(os.pread(kmem_fd, 64, 0))
            usage = min(usage, int(os.pread(usage_fd, 64, 0)))
            rows.append((now, first, usage, usage - stat[b"total_inactive_file"],
                         usage - kmem - stat[b"total_rss"] - stat[b"total_cache"], stat[b"total_cache"]))
            time.sleep(SAMPLE_PAUSE_S)
    finally:
        for fd in (*files.values(), root):
            os.close(fd)
    return rows


def same_stat_runs(rows: list[Row]) -> list[list[Row]]:
    """Runs of consecutive rows whose memory.stat ``total_cache`` is the same as the run's first."""
    runs: list[list[Row]] = []
    for row in rows:
        if runs and row[5] == runs[-1][0][5]:
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def runs_where(rows: list[Row], holds: Any) -> list[list[Row]]:
    """Runs of consecutive rows for which `holds(row)`."""
    runs: list[list[Row]] = []
    inside = False
    for row in rows:
        if holds(row):
            if inside:
                runs[-1].append(row)
            else:
                runs.append([row])
            inside = True
        else:
            inside = False
    return runs


def span_ms(run: list[Row]) -> float:
    return (run[-1][0] - run[0][0]) * 1000


def report(rows: list[Row], slack: int) -> dict[str, Any]:
    base = statistics.median(sorted(r[3] for r in rows)[:max(1, len(rows) // 4)])
    # memory.stat unchanged (total_cache the same) while usage moved by more than a step.
    stale = [run for run in same_stat_runs(rows) if max(abs(r[2] - run[0][2]) for r in run) > STEP_BYTES]
    over_runs = runs_where(rows, lambda r: r[3] - base > STEP_BYTES)
    over = [r for run in over_runs for r in run]
    marked = [r for r in over if r[4] - slack > 0]
    # Marked although the working set read no more than a step above the held memory.
    needless = [r for r in rows if r[4] - slack > 0 and r[3] - base <= STEP_BYTES]
    unaccounted = sorted(r[4] for r in rows)
    # Past the level as read, and as `evictd.core.settled` confirms: less the unaccounted usage past the slack.
    level = PODS_LIMIT_BYTES - LEVEL_BYTES
    past = [r for r in rows if r[3] > level]
    accounted = [r[3] - max(0, r[4] - slack) for r in rows]
    return {
        "readings": len(rows),
        "stale_stretches": len(stale),
        "stale_longest_ms": round(max((span_ms(run) for run in stale), default=0.0), 1),
        "over_step_readings": len(over),
        "over_step_stretches": len(over_runs),
        "over_step_longest_ms": round(max((span_ms(run) for run in over_runs), default=0.0), 1),
        "over_by_max_mib": round(max((r[3] - base for r in over), default=0) / MiB, 1),
        "over_step_marked": len(marked),
        "marked_needlessly": len(needless),
        "past_level_readings": len(past),
        "past_level_by_max_mib": round(max((r[3] - level for r in past), default=0) / MiB, 1),
        "past_level_on_accounted": sum(1 for a in accounted if a > level),
        "accounted_under_level_min_mib": round((level - max(accounted)) / MiB, 1),
        "unaccounted_p50_p99_max_mib": [round(v / MiB, 2) for v in (
            unaccounted[len(unaccounted) // 2], unaccounted[int(len(unaccounted) * 0.99)], unaccounted[-1])],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", action="store_true", help="one JSON line, no table")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="evictd-stale-") as folder:
        work = Path(folder)
        node = RealPodNode(kubelet_root=work / "kubelet", pod_logs_dir=work / "pod-logs",
                           pods_limit_bytes=PODS_LIMIT_BYTES, namespace="tenant", name="churner")
        tenants = []
        try:
            node.create(volume_files={}, log_bytes=1024)
            batch = node.neighbour("innocent", "batch", "besteffort")
            batch.create(volume_files={}, log_bytes=1024)
            tenants.append(start_tenant(batch, LEVEL_BYTES, PODS_LIMIT_BYTES - LEVEL_BYTES - BATCH_BYTES,
                                        "flap", "0", "0"))
            with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-stale-") as files:  # a disk
                tenants.append(start_tenant(node, LEVEL_BYTES, UNDER_BYTES, "churn", files, "0.05"))
                time.sleep(1.0)
                rows = sample(args.seconds, str(node.memory_file(node.pods_cgroup, "")).rstrip("/"))
        finally:
            for tenant in tenants:
                stop_tenant(tenant)
            node.teardown()
    slack = unfolded_slack_bytes()
    result = {"seconds": args.seconds, "load_start_end": [round(load_before, 2), round(os.getloadavg()[0], 2)],
              "slack_mib": round(slack / MiB, 2),
              "root_first": report([r for r in rows if r[1]], slack),
              "pods_only": report([r for r in rows if not r[1]], slack)}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{len(rows)} readings over {args.seconds:.0f} s beside the churner (load {result['load_start_end']}), "
          f"slack {result['slack_mib']} MiB")
    for kind in ("root_first", "pods_only"):
        got = result[kind]
        print(f"  {kind}: memory.stat behind usage by > 8 MiB {got['stale_stretches']} times, longest "
              f"{got['stale_longest_ms']} ms; working set > 8 MiB above the held memory in {got['over_step_readings']} "
              f"readings ({got['over_step_stretches']} stretches, longest {got['over_step_longest_ms']} ms, by up to "
              f"{got['over_by_max_mib']} MiB), {got['over_step_marked']} of them marked as not accounted for; "
              f"{got['marked_needlessly']} readings marked needlessly; unaccounted p50/p99/max "
              f"{got['unaccounted_p50_p99_max_mib']} MiB; past the level in {got['past_level_readings']} readings "
              f"(by up to {got['past_level_by_max_mib']} MiB), {got['past_level_on_accounted']} on accounted figures "
              f"(at least {got['accounted_under_level_min_mib']} MiB under)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

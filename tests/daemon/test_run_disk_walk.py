"""`evictd run` deciding on memory while a tenant's emptyDir holds 100,000 files it keeps changing.

The pod is the real one of `real_pod_node` (a real process in a real pod cgroup under a 512 MiB pods cgroup),
its emptyDir on a tmpfs mounted as the kubelet root, filled with 100,000 empty files, and a real process
creating and removing a file in it every 50 ms, so the directory is never the same twice and every
measurement of it lists all 100,000 entries. The time one such walk takes on this machine is measured first
(`walk_time_s`). The daemon must not wait for it: with a housekeeping interval of 200 ms, no cycle may take
most of a walk (the largest histogram bucket within 80 % of one: a cycle that walked takes a whole walk; half a
walk was too tight for a cycle slowed by the parallel tier, 1 of 21 over 0.25 s beside a 0.74 s walk in CI), and
the allocation that crosses ``allocatableMemory.available`` must be decided (through the memcg
notification) in less than half a walk. After it, one cycle more may exceed that bucket: the deciding cycle also
stops the pod (in CI on 2026-11-26 one of 27 cycles took over 0.5 s beside a 0.69 s walk, after the allocation). These are coarse orderings against a walk measured on the same
machine at the same time, not speed targets; bench/disk_walk_isolation.py gives the figures. Meanwhile the
disk walker process measures the pod: its figures reach the cycles, with their age (/metrics).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from evictd_process import EvictdProcess

from evictd.adapters.pod_disk_usage import DEFAULT_STALE_AFTER_S
from evictd.observe.metrics import CYCLE_BUCKETS
from real_pod_node import MiB, RealPodNode, crowded_pod, walk_time_s

TENANT_FILES = 100_000
TOUCH_INTERVAL_S = 0.05
POD_LIMIT_BYTES = 512 * MiB
# What share of one walk a cycle's bucket may reach: a cycle that walked the tenant's files takes a whole walk.
WALK_SHARE = 0.8
ALLOCATED_BYTES = 360 * MiB  # past the 200Mi allocatable threshold, well below the limit (no OOM kill)
CYCLES_OBSERVED = 15


@pytest.fixture
def tenant_pod(tmp_path: Path, mount_tmpfs_at: Callable[[Path], Path]) -> Iterator[RealPodNode]:
    with crowded_pod(tmp_path, mount_tmpfs_at, files=TENANT_FILES, touch_interval_s=TOUCH_INTERVAL_S,
                     pods_limit_bytes=POD_LIMIT_BYTES) as node:
        yield node


def wait_for_metric(daemon: EvictdProcess, name: str, accept: Callable[[float], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not accept(daemon.metric(name)):
        assert time.monotonic() < deadline, f"{name} is {daemon.metric(name)} after {timeout_s} s"
        time.sleep(0.05)


def cycles_slower_than(daemon: EvictdProcess, seconds: float) -> tuple[int, int]:
    """Return (cycles that took longer than `seconds`, all cycles), from the cycle duration histogram."""
    within = daemon.metric("evictd_cycle_duration_seconds_bucket", le=str(seconds))
    total = daemon.metric("evictd_cycle_duration_seconds_count")
    return int(total - within), int(total)


def test_memory_decisions_do_not_wait_for_a_tenants_file_walk(
    tmp_path: Path, tenant_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    walk_s = walk_time_s(tenant_pod.volume_dir)
    # The largest histogram bucket within 80 % of a walk: a cycle that walked the volume cannot fit in it.
    bound_s = max(bucket for bucket in CYCLE_BUCKETS if bucket <= walk_s * WALK_SHARE)
    pod_process = tenant_pod.start_process()
    daemon = EvictdProcess(
        tmp_path,
        kubelet="evictionHard: {allocatableMemory.available: 200Mi}\nenforceNodeAllocatable: []\n",
        # No crossing hold: its designed 100 ms wait inside the crossing's cycle is not a walk's (test_run_settled.py).
        evictd=f"housekeepingInterval: 200ms\npsiWakeups: false\nmemoryCrossingHold: 0s\ncgroupRoot: /{tenant_pod.base}\n"
               f"kubeletRootDir: {tenant_pod.kubelet_root}\npodLogsDir: {tenant_pod.pod_logs_dir}\n"
               f"imageFsPath: {tmp_path / 'containerd'}\ncontainerFsPath: {tmp_path / 'containerd'}\n"
               f"containerRuntimeEndpoint: unix://{tmp_path / 'no-runtime.sock'}\n",
    )
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started")
    deadline = time.monotonic() + 30
    while daemon.metric("evictd_cycles_total") < CYCLES_OBSERVED:
        assert time.monotonic() < deadline, "the daemon ran fewer cycles than expected"
        time.sleep(0.05)
    slow, total = cycles_slower_than(daemon, bound_s)
    assert slow == 0, f"{slow} of {total} cycles took longer than {bound_s} s, and one walk takes {walk_s:.3f} s"
    # Meanwhile the walker measured the pod: its figures are used, with their age.
    wait_for_metric(daemon, "evictd_pods_without_disk_usage", lambda pods: pods == 0)
    assert 0 < daemon.metric("evictd_pod_disk_usage_age_seconds") < DEFAULT_STALE_AFTER_S

    pod_process.do(f"alloc {ALLOCATED_BYTES}")
    allocated_at = time.time()
    met = daemon.wait_event("threshold met", timeout=10)
    assert met["threshold"] == "allocatableMemory.available<200Mi (hard)"
    decided_after_s = met["_received"] - allocated_at
    assert decided_after_s < walk_s / 2, (
        f"decided {decided_after_s:.3f} s after the allocation; one walk of the tenant's files takes {walk_s:.3f} s")
    # One cycle more may be slow now: the one that decided also stops the pod (through its cgroup here, no runtime
    # answers), which no other cycle does. A daemon that waited for walks would be slow in every cycle after it.
    slow_after, total_after = cycles_slower_than(daemon, bound_s)
    assert slow_after - slow <= 1, (f"{slow_after - slow} of the {total_after - total} cycles since the allocation "
                                    f"took longer than {bound_s} s, and one walk takes {walk_s:.3f} s")
    assert daemon.stop() == 0

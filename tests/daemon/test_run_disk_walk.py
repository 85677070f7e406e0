"""`evictd run` deciding on memory while a tenant's emptyDir holds 100,000 files it keeps changing.

The pod is the real one of `real_pod_node` (a real process in a real pod cgroup under a 512 MiB pods cgroup),
its emptyDir on a tmpfs mounted as the kubelet root, filled with 100,000 empty files, and a real process
creating and removing a file in it every 50 ms, so the directory is never the same twice and every
measurement of it lists all 100,000 entries. Once the disk walker process has measured the pod, it is frozen
(SIGSTOP): no walk can end. A daemon whose cycle waited for a walk would then run no cycle more; this one must run
its cycles on at the 200 ms interval, using the pod's last figures with their age, and decide the allocation that
crosses ``allocatableMemory.available``. The property holds by construction or not at
all, whatever the machine's load: no wall-clock race against a walk (issue #73: a bound of 80 % of a walk, measured
beside the parallel tier, failed once in CI at 1 of 16 cycles over 1.0 s beside a 2.65 s walk). How fast the cycles
are beside a walk is a speed figure: bench/disk_walk_isolation.py measures it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from evictd_process import EvictdProcess

from evictd.adapters.pod_disk_usage import DEFAULT_STALE_AFTER_S
from real_pod_node import MiB, RealPodNode, crowded_pod

TENANT_FILES = 100_000
TOUCH_INTERVAL_S = 0.05
POD_LIMIT_BYTES = 512 * MiB
ALLOCATED_BYTES = 360 * MiB  # past the 200Mi allocatable threshold, well below the limit (no OOM kill)
CYCLES_OBSERVED = 15
# Generous: 15 cycles at 200 ms take 3 s; a daemon that waited for a walk would run none however long it waited.
CYCLES_TIMEOUT_S = 30.0
WALKER_MODULE = "evictd.adapters.disk_walker_process"


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


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])


def walker_pid(daemon: EvictdProcess) -> int:
    """The pid of the daemon's disk walker process (a descendant running `evictd.adapters.disk_walker_process`)."""
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if not entry.name.isdigit() or WALKER_MODULE not in (entry / "cmdline").read_text():
                continue
            pid = ancestor = int(entry.name)
            while ancestor > 1:
                ancestor = parent_of(ancestor)
                if ancestor == daemon.process.pid:
                    return pid
    raise AssertionError(f"no disk walker process under the daemon ({daemon.process.pid})")


def test_memory_decisions_do_not_wait_for_a_tenants_file_walk(
    tmp_path: Path, tenant_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    pod_process = tenant_pod.start_process()
    daemon = EvictdProcess(
        tmp_path,
        kubelet="evictionHard: {allocatableMemory.available: 200Mi}\nenforceNodeAllocatable: []\n",
        evictd=f"housekeepingInterval: 200ms\npsiWakeups: false\nmemoryCrossingHold: 0s\ncgroupRoot: /{tenant_pod.base}\n"
               f"kubeletRootDir: {tenant_pod.kubelet_root}\npodLogsDir: {tenant_pod.pod_logs_dir}\n"
               f"imageFsPath: {tmp_path / 'containerd'}\ncontainerFsPath: {tmp_path / 'containerd'}\n"
               f"containerRuntimeEndpoint: unix://{tmp_path / 'no-runtime.sock'}\n",
    )
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started")
    # The walker measures the pod (every walk lists all 100,000 entries)... A cycle has used its figures: they have an
    # age, and no pod is without them (before the first cycle's report that gauge reads 0 too: frozen then, the walker
    # had not measured the pod, and under load the test failed so).
    wait_for_metric(daemon, "evictd_pod_disk_usage_age_seconds", lambda age: age > 0)
    wait_for_metric(daemon, "evictd_pods_without_disk_usage", lambda pods: pods == 0)
    walker = walker_pid(daemon)
    os.kill(walker, signal.SIGSTOP)  # ... and now can end no walk
    try:
        frozen_at = daemon.metric("evictd_cycles_total")
        wait_for_metric(daemon, "evictd_cycles_total", lambda cycles: cycles >= frozen_at + CYCLES_OBSERVED,
                        timeout_s=CYCLES_TIMEOUT_S)
        # The pod's last figures are used however old, with their age (read before the crossing: its eviction
        # changes the pod set, and a frozen walker measures nothing again).
        assert daemon.metric("evictd_pods_without_disk_usage") == 0
        assert 0 < daemon.metric("evictd_pod_disk_usage_age_seconds") < DEFAULT_STALE_AFTER_S
        pod_process.do(f"alloc {ALLOCATED_BYTES}")
        met = daemon.wait_event("threshold met", timeout=CYCLES_TIMEOUT_S)
        assert met["threshold"] == "allocatableMemory.available<200Mi (hard)"
        assert Path(f"/proc/{walker}/stat").read_text().rsplit(") ", 1)[1][0] == "T", "the walker ran meanwhile"
    finally:
        os.kill(walker, signal.SIGCONT)
    assert daemon.stop() == 0

"""`evictd run` and a container runtime that comes up only after it: the runtime is attached while it runs.

Real components: the daemon as a process, a real containerd started on the configured endpoint a few
cycles after the daemon, a real tmpfs standing in for the configured image filesystem folder.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from containerd_harness import Containerd
from evictd_process import EvictdProcess

ATTACH_WITHIN_S = 20.0  # the retry period (5 s) plus a containerd start, with room for a slow machine


def capacity_bytes(path: Path) -> float:
    stats = os.statvfs(path)
    return float(stats.f_blocks * stats.f_frsize)


def runtime_info_lines(daemon: EvictdProcess) -> list[str]:
    _, page = daemon.http("/metrics")
    return [line for line in page.splitlines() if line.startswith("evictd_runtime_info{")]


def test_a_runtime_that_starts_after_evictd_is_attached_while_it_runs(
    tmp_path: Path, tmpfs_mount: Path, unstarted_containerd: Containerd, evictd_processes: list[EvictdProcess]
) -> None:
    daemon = EvictdProcess(
        tmp_path,
        kubelet="evictionHard: {imagefs.available: 1%}\n",
        evictd=f"housekeepingInterval: 200ms\npsiWakeups: false\nmemcgWakeups: false\n"
               f"containerRuntimeEndpoint: {unstarted_containerd.endpoint}\n"
               f"kubeletRootDir: {tmp_path / 'kubelet'}\nimageFsPath: {tmpfs_mount}\ncontainerFsPath: {tmpfs_mount}\n",
    )
    evictd_processes.append(daemon)
    absent = daemon.wait_for(lambda e: str(e.get("event")).startswith("no container runtime answers"))
    assert absent["endpoint"] == unstarted_containerd.endpoint and absent["retry_s"] == 5.0
    daemon.wait_event("evictd started")  # the metrics endpoint listens from here on
    deadline = time.monotonic() + 10
    while daemon.metric("evictd_cycles_total") < 3:
        assert time.monotonic() < deadline, "the daemon does not cycle without a runtime"
        time.sleep(0.05)
    # Without the runtime the configured folder is the image filesystem.
    assert daemon.metric("evictd_signal_capacity_bytes", signal="imagefs.available") == capacity_bytes(tmpfs_mount)
    assert runtime_info_lines(daemon) == []

    unstarted_containerd.start()
    attached = daemon.wait_event("container runtime", timeout=ATTACH_WITHIN_S)
    assert attached["runtime"] == "containerd" and attached["api"] == "v1"
    assert attached["unanswered_attempts"] >= 1
    (info,) = runtime_info_lines(daemon)
    assert 'runtime_name="containerd"' in info and 'runtime_api_version="v1"' in info and info.endswith(" 1.0")

    # From now on the runtime names the image filesystem (ImageFsInfo): its snapshotter folder's.
    snapshots = unstarted_containerd.snapshotter_dir
    deadline = time.monotonic() + 10
    while daemon.metric("evictd_signal_capacity_bytes", signal="imagefs.available") != capacity_bytes(snapshots):
        assert time.monotonic() < deadline, "the imagefs signal never moved to the runtime's filesystem"
        time.sleep(0.1)
    assert capacity_bytes(snapshots) != capacity_bytes(tmpfs_mount)
    cycles = daemon.metric("evictd_cycles_total")
    assert daemon.stop() == 0
    assert daemon.wait_event("evictd stopped")["cycles"] >= cycles

"""`evictd run` end to end on a real OOM kill: a real process over its pod cgroup's limit in a test cgroup.

The daemon runs as a user runs it (a process with JSON logs, no Kubernetes API), configured like a kubelet whose
cgroupRoot is a private test cgroup with one burstable pod (tests/real_pod_node.py). The pod cgroup is limited to
64 MiB and its process allocates 256 MiB: the kernel kills it in the pod's container cgroup. evictd must count it
once, in the pod and pods scopes of `evictd_oom_kills_total`, and log it with the pod and the container.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from evictd_process import EvictdProcess

from real_pod_node import MiB, RealPodNode


@pytest.fixture
def real_pod(tmp_path: Path) -> Iterator[RealPodNode]:
    node = RealPodNode(kubelet_root=tmp_path / "kubelet", pod_logs_dir=tmp_path / "pod-logs",
                       pods_limit_bytes=512 * MiB)
    try:
        node.create(volume_files={}, log_bytes=1024)
        yield node
    finally:
        node.teardown()


def wait_cycles(daemon: EvictdProcess, count: float, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while daemon.metric("evictd_cycles_total") < count:
        assert time.monotonic() < deadline, f"fewer than {count} cycles within {timeout_s} s"
        time.sleep(0.05)


def test_a_real_oom_kill_in_a_pod_is_counted_once_logged_and_exported(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    process = real_pod.start_process()
    daemon = EvictdProcess(
        tmp_path,
        evictd=f"housekeepingInterval: 200ms\ncgroupRoot: /{real_pod.base}\nkubeletRootDir: {real_pod.kubelet_root}\n"
               f"podLogsDir: {real_pod.pod_logs_dir}\nimageFsPath: {tmp_path}\ncontainerFsPath: {tmp_path}\n"
               "containerRuntimeEndpoint: unix:///nonexistent/evictd-test.sock\n",
    )
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started")
    wait_cycles(daemon, 2)
    assert daemon.metric("evictd_oom_kills_total", scope="pod") == 0

    real_pod.oom_kill(process, 64 * MiB)
    logged = daemon.wait_event("OOM kill", timeout=10)
    assert logged["pod"] == real_pod.key == "shop/cart-7d9f" and logged["pod_uid"] == real_pod.uid
    assert logged["container_id"] == real_pod.container_id and logged["container"] == ""  # no runtime to name it
    assert logged["cgroup"] == real_pod.pod_cgroup and logged["kills"] == 1
    assert (logged["activity"], logged["too_late"]) == ("idle", False), "no memory threshold is met on this machine"
    assert logged["situation"] == "no memory threshold was met"
    cycles = daemon.metric("evictd_cycles_total")
    wait_cycles(daemon, cycles + 5)
    assert daemon.metric("evictd_oom_kills_total", scope="pod") == 1
    assert daemon.metric("evictd_oom_kills_total", scope="pods") == 1
    assert daemon.metric("evictd_oom_kills_total", scope="node") >= 1
    assert daemon.stop() == 0
    assert [e["pod"] for e in daemon.events if e.get("event") == "OOM kill"] == [real_pod.key], "counted once"
    assert not [e for e in daemon.events if e.get("event") in (
        "OOM-kill counter unreadable; kills it counts are not counted", "housekeeping cycle failed",
        "OOM-kill feedback failed")]

"""`evictd run` end to end on a real OOM kill: a real process over its pod cgroup's limit in a test cgroup.

The daemon runs as a user runs it (a process with JSON logs, no Kubernetes API), configured like a kubelet whose
cgroupRoot is a private test cgroup with one burstable pod (tests/real_pod_node.py). The pod cgroup is limited to
64 MiB and its process allocates 256 MiB: the kernel kills it in the pod's container cgroup. evictd must count it
once, in the pod and pods scopes of `evictd_oom_kills_total`, and log it with the pod and the container.

The same kill while no evictd runs (stopped after it saved its counters in stateDir) must be counted by the next
`evictd run`, once, at its first cycle, as a kill while evictd was not running; and by no run after that.
"""

from __future__ import annotations

import json
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


def settings(tmp_path: Path, real_pod: RealPodNode) -> str:
    return (f"housekeepingInterval: 200ms\ncgroupRoot: /{real_pod.base}\nkubeletRootDir: {real_pod.kubelet_root}\n"
            f"podLogsDir: {real_pod.pod_logs_dir}\nimageFsPath: {tmp_path}\ncontainerFsPath: {tmp_path}\n"
            "containerRuntimeEndpoint: unix:///nonexistent/evictd-test.sock\n")


def test_a_real_oom_kill_in_a_pod_is_counted_once_logged_and_exported(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    process = real_pod.start_process()
    daemon = EvictdProcess(tmp_path, evictd=settings(tmp_path, real_pod))
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


# Kills elsewhere on the machine (other tests run beside this one) are counted outside the pods cgroup: only the
# lines about this test's pods cgroup are this test's.
NOT_RUNNING = "OOM kills while evictd was not running"


def pod_kill_lines(daemon: EvictdProcess) -> list[tuple[str, object]]:
    """The lines about kills in the pods cgroup: per pod, in no pod still present, and the not-running summary's
    count of them."""
    return [(e["event"], e.get("pod", e.get("pods_kills"))) for e in daemon.events
            if e.get("event") in ("OOM kill", "OOM kill in the pods cgroup, in no pod cgroup still present")
            or (e.get("event") == NOT_RUNNING and (e["pods_kills"] or e["pod_kills"]))]


def test_a_real_oom_kill_while_evictd_is_not_running_is_counted_once_by_the_next_start(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    process = real_pod.start_process()
    before = EvictdProcess(tmp_path, evictd=settings(tmp_path, real_pod))
    evictd_processes.append(before)
    before.wait_event("evictd started")
    wait_cycles(before, 2)
    assert before.stop() == 0
    assert before.wait_event("OOM-kill counters none saved; kills before this start are not counted")
    saved = json.loads((before.state_dir / "oom-counters.json").read_text())
    assert saved["bootId"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert saved["podsCgroup"] == f"v1:/sys/fs/cgroup/memory/{real_pod.pods_cgroup}"

    real_pod.oom_kill(process, 64 * MiB)  # no evictd runs
    daemon = EvictdProcess(tmp_path, evictd=settings(tmp_path, real_pod))
    evictd_processes.append(daemon)
    daemon.wait_event("OOM-kill counters restored; kills while evictd was not running are counted at the first cycle")
    summary = daemon.wait_event(NOT_RUNNING, timeout=10)
    assert summary["cycle"] == 1 and summary["pod_kills"] == 1 and summary["pods_kills"] == 1
    assert summary["kills"] == summary["node_kills"] >= 1, "the machine's counter counts it (and any other kill)"
    assert summary["since"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(saved["savedAt"]))
    logged = daemon.wait_event("OOM kill", timeout=10)
    assert logged["pod"] == real_pod.key and logged["container_id"] == real_pod.container_id and logged["kills"] == 1
    assert (logged["cycle"], logged["activity"], logged["too_late"]) == (1, "not-running", False)
    assert logged["situation"] == f"evictd was not running (since {summary['since']})"
    wait_cycles(daemon, daemon.metric("evictd_cycles_total") + 5)
    assert daemon.metric("evictd_oom_kills_total", scope="pod") == 1
    assert daemon.metric("evictd_oom_kills_total", scope="pods") == 1
    assert daemon.metric("evictd_oom_kills_too_late_total", activity="grace-period") == 0
    assert daemon.stop() == 0
    assert pod_kill_lines(daemon) == [(NOT_RUNNING, 1), ("OOM kill", real_pod.key)], "counted once"

    after = EvictdProcess(tmp_path, evictd=settings(tmp_path, real_pod))  # a restart right after
    evictd_processes.append(after)
    after.wait_event("evictd started")
    wait_cycles(after, 3)
    assert after.metric("evictd_oom_kills_total", scope="pod") == 0
    assert after.metric("evictd_oom_kills_total", scope="pods") == 0
    assert after.stop() == 0
    assert pod_kill_lines(after) == [], "nothing counted twice"
    failures = ("housekeeping cycle failed", "OOM-kill feedback failed", "after-cycle step failed",
                "OOM-kill counters not saved: a restart now would count the kills since the last save again, or "
                "(with no file) none before it")
    assert not [e for e in (*before.events, *daemon.events, *after.events) if e.get("event") in failures]

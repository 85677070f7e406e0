"""Fixtures of the daemon tests: `evictd run` processes that never outlive the test that started them, a real pod,
and stand-in kubelet Summary servers (`servers`: the test appends its HostileKubelet objects; all closed at the end)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from evictd_process import EvictdProcess

from hostile_kubelet import HostileKubelet
from real_pod_node import REAL_POD_LIMIT_BYTES, MiB, RealPodNode


@pytest.fixture
def evictd_processes() -> Iterator[list[EvictdProcess]]:
    """A list the test appends its EvictdProcess objects to; every one still running is killed at the end."""
    started: list[EvictdProcess] = []
    yield started
    for process in started:
        process.kill()


@pytest.fixture
def servers() -> Iterator[list[HostileKubelet]]:
    """A list the test appends its stand-in kubelet Summary servers to; every one is closed at the end."""
    started: list[HostileKubelet] = []
    yield started
    for server in started:
        server.close()


@pytest.fixture
def real_pod(ext4_mount: Path) -> Iterator[RealPodNode]:
    """One burstable pod (a 2 MiB file in its emptyDir, a 64 KiB log) whose emptyDir, log folder and kubelet root
    are on a loop-mounted ext4, under a pods cgroup limited to `REAL_POD_LIMIT_BYTES`."""
    node = RealPodNode(kubelet_root=ext4_mount / "kubelet", pod_logs_dir=ext4_mount / "pods-logs",
                       pods_limit_bytes=REAL_POD_LIMIT_BYTES)
    try:
        node.create(volume_files={"data.bin": 2 * MiB}, log_bytes=64 * 1024)
        yield node
    finally:
        node.teardown()

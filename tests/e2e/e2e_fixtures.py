"""The e2e tier's node fixture, registered as a plugin by tests/conftest.py (`pytest_plugins`).

``node``: a `ClusterNode` (e2e_node.py) on the session's real containerd and a fresh test API server; at the end the
API server's armed faults are cleared and every pod and evictd process of the node stopped. A module that needs
another node (tests/e2e/test_disk_pressure_e2e.py: containerd on a small ext4) defines its own ``node``, which wins.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from containerd_harness import Containerd
from cri_fixtures import PodFactory
from e2e_node import ClusterNode


@pytest.fixture
def node(containerd: Containerd, pods: PodFactory, apiserver: ApiServer, tmp_path: Path) -> Iterator[ClusterNode]:
    cluster = ClusterNode(containerd, pods, apiserver, tmp_path)
    try:
        yield cluster
    finally:
        cluster.apiserver.faults.clear()
        cluster.stop_all()

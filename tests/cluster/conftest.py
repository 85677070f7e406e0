"""Fixtures shared by the real-cluster tests of this folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import RealNode
from real_cluster import RealCluster


@pytest.fixture
def node(real_cluster: RealCluster, tmp_path: Path) -> Iterator[RealNode]:
    """The session's real cluster as a node under test (evictd with its DaemonSet identity); its pods are removed
    afterwards."""
    found = RealNode(real_cluster, tmp_path)
    try:
        yield found
    finally:
        found.close()

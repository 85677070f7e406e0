"""The contract tests' node: the stand-ins by default, the real cluster with ``EVICTD_CLUSTER=real``.

`make test` (and CI) run the contract tests on the stand-ins; `make test-cluster` runs the very same tests on a
real kube-apiserver and kubelet (tests/cluster). A real cluster that cannot be started fails the tests there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import RealNode, StandInNode
from e2e_node import ClusterNode
from node_under_test import NodeUnderTest

BACKEND_ENV = "EVICTD_CLUSTER"


@pytest.fixture
def node_under_test(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NodeUnderTest]:
    node: NodeUnderTest
    if os.environ.get(BACKEND_ENV) == "real":
        node = RealNode(request.getfixturevalue("real_cluster"), tmp_path)
    else:
        node = StandInNode(ClusterNode(request.getfixturevalue("containerd"), request.getfixturevalue("pods"),
                                       request.getfixturevalue("apiserver"), tmp_path))
    try:
        yield node
    finally:
        node.close()

"""The ``real_cluster`` fixture: one real kube-apiserver + kubelet cluster (real_cluster.py) per test session.

A pytest plugin registered for the whole suite by tests/conftest.py (``pytest_plugins``), so the contract
tests (tests/contract, with ``EVICTD_CLUSTER=real``) and tests/cluster can ask for it. Nothing starts unless
a test requests the fixture, so `make test` never starts a cluster.

The cluster is started at the first request and stopped at the end of the session. If the binaries are
missing (``EVICTD_K8S_BIN``) or the cluster does not start, the fixture fails (never skips) with how to get
the binaries, or with the cause and the end of the component logs. A teardown that leaves something behind
fails too. ``EVICTD_CLUSTER_KEEP=1`` keeps the base folder (logs, audit log, kubeconfigs) after a clean stop.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_cluster import BASE_PREFIX, ClusterError, RealCluster, k8s_bin_dir

KEEP_ENV = "EVICTD_CLUSTER_KEEP"


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealCluster]:
    """Yield the session's real cluster (Node Ready, evictd's identity and policy applied)."""
    failure = ""
    try:
        bin_dir = k8s_bin_dir()
        cluster = RealCluster(Path(tempfile.mkdtemp(prefix=BASE_PREFIX)), bin_dir)
        cluster.start()  # tears down what it started if it fails
    except ClusterError as exc:
        failure = str(exc)
    if failure:  # failed outside the except clause, so the report is the message alone
        pytest.fail(failure, pytrace=False)
    timings = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in cluster.timings.items())
    print(f"\nreal cluster up in {cluster.base} ({timings})", file=sys.stderr)
    keep = os.environ.get(KEEP_ENV) == "1"
    try:
        yield cluster
    finally:
        problems = cluster.stop(remove_base=not keep)
        steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in cluster.timings.items()
                          if step.startswith("stop-"))
        print(f"\nreal cluster stopped in {cluster.timings.get('stop', 0.0):.1f} s ({steps})"
              + (f"; kept {cluster.base}" if keep or problems else ""), file=sys.stderr)
        if problems:
            pytest.fail("real cluster teardown incomplete: " + "; ".join(problems), pytrace=False)

"""coordination.k8s.io/v1 Leases on the real kube-apiserver v1.36.2: the same checks the test API server passes
(tests/kube/lease_contract.py, tests/kube/test_apiserver_leases.py), so that what evictd's node Lease relies on
(create 201, get 404 NotFound, update with a stale resourceVersion 409, validation 422) is the real server's.
Runs only in `make test-cluster`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from lease_contract import check_lease_semantics
from real_cluster import RealCluster

pytestmark = pytest.mark.real_cluster

NAMESPACE = "lease-contract"


@pytest.fixture
def admin_client(real_cluster: RealCluster) -> Iterator[Any]:
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(real_cluster.admin_kubeconfig))
    try:
        yield client
    finally:
        client.close()


def test_leases_are_served_as_the_test_api_server_serves_them(real_cluster: RealCluster, admin_client: Any) -> None:
    real_cluster.ensure_namespace(NAMESPACE)
    check_lease_semantics(admin_client, NAMESPACE, f"node-{uuid.uuid4().hex[:6]}")

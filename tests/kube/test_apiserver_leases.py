"""coordination.k8s.io/v1 Leases on the test API server, as on the real one (tests/kube/lease_contract.py, which
tests/cluster/test_node_lease_real.py runs against kube-apiserver v1.36.2)."""

from __future__ import annotations

from typing import Any

from lease_contract import check_lease_semantics, lease_body, raw


def test_leases_are_served_as_the_real_api_server_serves_them(api_client: Any) -> None:
    check_lease_semantics(api_client, "evictd-system", "node-1")


def test_a_lease_is_listed_in_its_namespace_only(api_client: Any) -> None:
    for namespace in ("evictd-system", "kube-node-lease"):
        status, _ = raw(api_client, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
                        lease_body(namespace, "node-1", namespace, "2026-11-24T05:00:00.000000Z"))
        assert status == 201
    status, listed = raw(api_client, "GET", "/apis/coordination.k8s.io/v1/namespaces/evictd-system/leases")
    assert status == 200 and listed["kind"] == "LeaseList"
    assert [(i["metadata"]["namespace"], i["spec"]["holderIdentity"]) for i in listed["items"]] == [
        ("evictd-system", "evictd-system")]

"""What evictd relies on of coordination.k8s.io/v1 Leases, checked the same way against the test API server
(tests/kube/test_apiserver_leases.py) and the real kube-apiserver v1.36.2 (tests/cluster/test_node_lease_real.py):
discovery, create (201, the stored Lease; 400 for a MicroTime that is not RFC3339Micro), get (200; 404 with a NotFound Status naming the resource and group),
create of an existing name (409 AlreadyExists), update (PUT) with the stored resourceVersion (200, a new version)
and with a stale one (409 Conflict), validation (422 Invalid), MicroTime normalisation."""

from __future__ import annotations

import json
from typing import Any

GROUP_VERSION = "coordination.k8s.io/v1"


def raw(api_client: Any, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    """One request through the `kubernetes` client's REST layer, whatever its status: (status, JSON body)."""
    response = api_client.rest_client.request(method, api_client.configuration.host + path,
                                              headers={"Accept": "application/json",
                                                       "Content-Type": "application/json"}, body=body)
    response.read()
    return response.status, json.loads(response.data)


def lease_body(namespace: str, name: str, holder: str, renew_time: str, duration_s: int = 40) -> dict[str, Any]:
    return {"apiVersion": GROUP_VERSION, "kind": "Lease", "metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration_s, "renewTime": renew_time,
                     "acquireTime": renew_time, "leaseTransitions": 0}}


def check_lease_semantics(api_client: Any, namespace: str, name: str) -> None:
    """Run every check of the module's description on a Lease `name` in `namespace` that does not exist yet."""
    status, resources = raw(api_client, "GET", f"/apis/{GROUP_VERSION}")
    assert status == 200 and resources["groupVersion"] == GROUP_VERSION, resources
    leases = next(r for r in resources["resources"] if r["name"] == "leases")
    assert (leases["kind"], leases["namespaced"], leases["storageVersionHash"]) == ("Lease", True, "gqkMMb/YqFM=")
    assert {"create", "get", "update", "patch", "list", "watch"} <= set(leases["verbs"])

    path = f"/apis/{GROUP_VERSION}/namespaces/{namespace}/leases"
    status, missing = raw(api_client, "GET", f"{path}/{name}")
    assert status == 404, missing
    assert (missing["kind"], missing["status"], missing["reason"]) == ("Status", "Failure", "NotFound")
    assert missing["message"] == f'leases.coordination.k8s.io "{name}" not found'
    assert missing["details"] == {"name": name, "group": "coordination.k8s.io", "kind": "leases"}

    # A MicroTime is RFC3339Micro, six fraction digits exactly (evictd's `micro_time`); anything else is refused.
    status, refused = raw(api_client, "POST", path, lease_body(namespace, name, "a", "2026-11-24T05:00:00.5Z"))
    assert (status, refused["reason"]) == (400, "BadRequest"), refused
    assert refused["message"] == ('Lease in version "v1" cannot be handled as a Lease: parsing time '
                                  '"2026-11-24T05:00:00.5Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse '
                                  '".5Z" as ".000000"')
    status, created = raw(api_client, "POST", path,
                          lease_body(namespace, name, "a", "2026-11-24T07:00:00.500000+02:00"))
    assert status == 201, created
    assert (created["apiVersion"], created["kind"]) == (GROUP_VERSION, "Lease")
    assert created["metadata"]["resourceVersion"] and created["metadata"]["uid"]
    assert created["spec"]["renewTime"] == "2026-11-24T05:00:00.500000Z"  # stored in UTC
    assert created["spec"]["holderIdentity"] == "a" and created["spec"]["leaseDurationSeconds"] == 40

    status, again = raw(api_client, "POST", path, lease_body(namespace, name, "b", "2026-11-24T05:00:01.000000Z"))
    assert (status, again["reason"]) == (409, "AlreadyExists"), again
    assert again["message"] == f'leases.coordination.k8s.io "{name}" already exists'

    status, read = raw(api_client, "GET", f"{path}/{name}")
    assert status == 200 and read["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    renewed = dict(read, spec=dict(read["spec"], renewTime="2026-11-24T05:00:10.000000Z"))
    status, updated = raw(api_client, "PUT", f"{path}/{name}", renewed)
    assert status == 200, updated
    assert updated["metadata"]["resourceVersion"] != read["metadata"]["resourceVersion"]
    assert updated["spec"]["renewTime"] == "2026-11-24T05:00:10.000000Z"

    stale = dict(read, spec=dict(read["spec"], holderIdentity="b"))  # the resourceVersion read before the update
    status, conflict = raw(api_client, "PUT", f"{path}/{name}", stale)
    assert (status, conflict["reason"]) == (409, "Conflict"), conflict
    assert conflict["message"] == (f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the '
                                   "object has been modified; please apply your changes to the latest version and "
                                   "try again")

    invalid = dict(updated, spec=dict(updated["spec"], leaseDurationSeconds=0))
    status, refused = raw(api_client, "PUT", f"{path}/{name}", invalid)
    assert (status, refused["reason"]) == (422, "Invalid"), refused
    assert "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0" in refused["message"]

"""deploy/kubernetes/node-restriction.yaml on the real kube-apiserver v1.36.2: evictd's identity (its
ServiceAccount with a token bound to a pod on its node, as a DaemonSet pod gets) may make every write evictd
makes on its own node and none on another Node, its pods or its Lease. Each write is sent by evictd's own API
client (`evictd.kube.api.KubeApi`), the same requests the daemon sends. Runs only in `make test-cluster`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from real_cluster import EVICTD_NAMESPACE, RealCluster

from evictd.core.errors import KubeError
from evictd.core.node_status import ConditionMode
from evictd.core.signals import NodeCondition
from evictd.kube.api import KubeApi
from evictd.kube.client import build_api_client
from evictd.kube.events import EventRecorder, ObjectRef
from evictd.kube.node_lease import NodeLease, new_lease, renewed_lease
from evictd.kube.node_writer import NodeStatusWriter
from log_capture import LogCapture

pytestmark = pytest.mark.real_cluster

IDENTITY_POD = "evictd-policy-identity"
NAMESPACE = "policy"
FORBIDDEN = 403
MEMORY = NodeCondition.MEMORY_PRESSURE


def disruption(pod: dict[str, Any]) -> dict[str, Any]:
    """The condition patch evictd sends (evictd.kube.evictor.condition_patch)."""
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
         "message": "The node was low on resource: memory. ", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}


def writer(api: KubeApi, node: str) -> NodeStatusWriter:
    """evictd's node status writer (conditions by strategic merge, taints read-modify-written)."""
    return NodeStatusWriter(api, node, ConditionMode.EVICTD)


def record_node_event(api: KubeApi, node: str) -> None:
    """A node event as evictd records it (evictd.kube.events.EventRecorder), claiming to come from `node`."""
    recorder = EventRecorder(api, node)
    recorder.record(recorder.node_ref(), "Warning", "EvictionThresholdMet", "Attempting to reclaim memory")


def record_pod_event(api: KubeApi, node: str, pod: dict[str, Any]) -> None:
    meta = pod["metadata"]
    EventRecorder(api, node).record(ObjectRef(kind="Pod", name=meta["name"], namespace=meta["namespace"],
                                              uid=meta["uid"]), "Warning", "Evicted", "m")


@pytest.fixture
def evictd_api(real_cluster: RealCluster) -> Iterator[KubeApi]:
    api = build_api_client(str(real_cluster.evictd_kubeconfig(IDENTITY_POD)))
    yield api
    api.close()


def make_pod(cluster: RealCluster, name: str, node: str) -> dict[str, Any]:
    cluster.ensure_namespace(NAMESPACE)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"nodeName": node, "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": cluster.busybox_image, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]}]}}
    cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    pod = cluster.pod(name, NAMESPACE)
    assert pod is not None
    return pod


LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{EVICTD_NAMESPACE}/leases"


def foreign_lease(cluster: RealCluster, node: str) -> dict[str, Any]:
    """The Lease of `node`'s evictd (created as the admin, as that node's evictd would have): stored."""
    cluster.api.create(LEASES, new_lease(EVICTD_NAMESPACE, node, f"{node}/boot/1", 40, datetime.now(UTC)))
    stored = cluster.api.get(f"{LEASES}/{node}")
    assert stored is not None
    return stored


def hold_own_lease(cluster: RealCluster, api: KubeApi, node: str) -> None:
    """Take, renew and release its own node's Lease as the daemon does (`NodeLease`); raise when it could not."""
    lease = NodeLease(api, EVICTD_NAMESPACE, node, log=LogCapture(), wait_s=0.0)
    lease.acquire()
    lease.renew()
    held = (cluster.api.get(f"{LEASES}/{node}") or {}).get("spec", {}).get("holderIdentity")
    lease.release()
    if held != lease.identity:
        raise AssertionError(f"own Lease not held: holder {held!r}")


def status_of(call: Callable[[], object]) -> int:
    try:
        call()
    except KubeError as exc:
        assert exc.status is not None, str(exc)
        return exc.status
    return 200


def test_evictd_may_write_only_on_its_own_node(real_cluster: RealCluster, evictd_api: KubeApi) -> None:
    own = real_cluster.node_name
    other_node = f"evictd-other-{uuid.uuid4().hex[:5]}"
    real_cluster.create_second_node(other_node)
    theirs = make_pod(real_cluster, f"theirs-{uuid.uuid4().hex[:5]}", other_node)  # no kubelet: stays Pending
    ours = make_pod(real_cluster, f"ours-{uuid.uuid4().hex[:5]}", own)
    t = (NAMESPACE, theirs["metadata"]["name"])
    o = (NAMESPACE, ours["metadata"]["name"])
    own_writer = writer(evictd_api, own)
    timeout = {"timeout_s": 10.0}
    theirs_lease = foreign_lease(real_cluster, other_node)
    now = datetime.now(UTC)

    refused = {
        "patch the status of a pod on another node": lambda: evictd_api.patch_pod_status(*t, disruption(theirs),
                                                                                       **timeout),
        "delete a pod on another node": lambda: evictd_api.delete_pod(*t, {"gracePeriodSeconds": 1, "preconditions": {
            "uid": theirs["metadata"]["uid"]}}, **timeout),
        "write its conditions and taint on another node": lambda: writer(evictd_api, other_node).update([MEMORY]),
        "record an event about another node": lambda: record_node_event(evictd_api, other_node),
        "record a pod event as another node": lambda: record_pod_event(evictd_api, other_node, ours),
        "write a pod's phase on its own node": lambda: evictd_api.patch_pod_status(*o, {"status": {
            "phase": "Failed", "reason": "Evicted"}}, **timeout),
        "write the kubelet's MemoryPressure on its own node": lambda: evictd_api.patch_node_status(own, {"status": {
            "conditions": [{"type": "MemoryPressure", "status": "True", "reason": "x", "message": "x"}]}}, **timeout),
        "add a foreign taint on its own node": lambda: evictd_api.patch_node(own, {"spec": {"taints": [
            {"key": "dedicated", "value": "x", "effect": "NoExecute"}]}}, **timeout),
        "renew another node's Lease": lambda: evictd_api.replace_lease(
            EVICTD_NAMESPACE, other_node, renewed_lease(theirs_lease, 40, now), **timeout),
        "create a Lease for a third node": lambda: evictd_api.create_lease(
            EVICTD_NAMESPACE, new_lease(EVICTD_NAMESPACE, f"{other_node}-x", "me", 40, now), **timeout),
        "write a Lease in another namespace": lambda: evictd_api.create_lease(
            NAMESPACE, new_lease(NAMESPACE, own, "me", 40, now), **timeout),
    }
    for what, call in refused.items():
        assert status_of(call) == FORBIDDEN, what

    allowed = {
        "write DisruptionTarget on its own pod": lambda: evictd_api.patch_pod_status(*o, disruption(ours), **timeout),
        "write its conditions and taint on its own node": lambda: own_writer.update([MEMORY]),
        "record an event about its own node": lambda: record_node_event(evictd_api, own),
        "record an event about its own node's pod": lambda: record_pod_event(evictd_api, own, ours),
        "set its conditions Unknown and remove its taint at a clean stop": lambda: own_writer.withdraw(10.0),
        "take, renew and release its own node's Lease": lambda: hold_own_lease(real_cluster, evictd_api, own),
        "delete its own node's pod": lambda: evictd_api.delete_pod(*o, {"gracePeriodSeconds": 1, "preconditions": {
            "uid": ours["metadata"]["uid"]}}, **timeout),
    }
    for what, call in allowed.items():
        try:
            call()
        except KubeError as exc:
            raise AssertionError(f"{what}: {exc}") from None
    still = real_cluster.pod(t[1], NAMESPACE)
    assert still is not None and "deletionTimestamp" not in still["metadata"]
    assert (real_cluster.api.get(f"{LEASES}/{other_node}") or {})["spec"] == theirs_lease["spec"]

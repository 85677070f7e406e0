"""EventRecorder (src/evictd/kube/events.py) against the test API server with evictd's API client.

core/v1 Events as the kubelet records them (involvedObject, source, reportingComponent/Instance), with
client-go's aggregation: a repeat within ten minutes PATCHes the existing Event's count instead of creating one.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client
from kube_faults import RecordedRequest

from clocks import ManualClock
from evictd.core.errors import KubeError
from evictd.kube.events import AGGREGATION_WINDOW_S, EventRecorder, ObjectRef

NODE = "node-1"
START = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
POD = ObjectRef(kind="Pod", name="web-7d9f", namespace="shop", uid="0c6a3b9e-5d1f-4f7e-9a51-2b7c8e4d6f10")
EVICTED = "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def wall() -> ManualClock:
    return ManualClock(0.0, wall_at_zero=START)


@pytest.fixture
def kube_api(apiserver: ApiServer) -> Iterator[Any]:
    client = evictd_api_client(apiserver)
    yield client
    client.close()


def event_writes(apiserver: ApiServer) -> list[RecordedRequest]:
    return [r for r in apiserver.requests if "/events" in r.path]


def test_a_pod_event_is_created_as_the_kubelet_writes_it(apiserver: ApiServer, kube_api: Any, wall: ManualClock) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)

    body = recorder.record(POD, "Warning", "Evicted", EVICTED, {"starved_resource": "memory"})

    [stored] = apiserver.store.events("shop")
    assert stored["metadata"]["name"] == body["metadata"]["name"]
    assert stored["metadata"]["name"].startswith("web-7d9f.")
    assert stored["metadata"]["annotations"] == {"starved_resource": "memory"}
    assert stored["involvedObject"] == {"kind": "Pod", "name": "web-7d9f", "namespace": "shop", "uid": POD.uid,
                                        "apiVersion": "v1"}
    assert (stored["type"], stored["reason"], stored["message"]) == ("Warning", "Evicted", EVICTED)
    assert stored["source"] == {"component": "evictd", "host": NODE}
    assert (stored["reportingComponent"], stored["reportingInstance"]) == ("evictd", NODE)
    assert (stored["count"], stored["firstTimestamp"], stored["lastTimestamp"]) == (1, stamp(START), stamp(START))
    [create] = event_writes(apiserver)
    assert (create.method, create.path, create.status) == ("POST", "/api/v1/namespaces/shop/events", 201)


def test_node_events_go_to_the_default_namespace(apiserver: ApiServer, kube_api: Any, wall: ManualClock) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)

    recorder.record(recorder.node_ref(), "Normal", "NodeHasInsufficientMemory",
                    f"Node {NODE} status is now: NodeHasInsufficientMemory")

    [stored] = apiserver.store.events("default")
    assert stored["involvedObject"]["kind"] == "Node" and stored["involvedObject"]["name"] == NODE
    assert stored["involvedObject"]["uid"] == NODE and not stored["involvedObject"].get("namespace")
    assert stored["type"] == "Normal" and not stored["metadata"].get("annotations")


def test_a_repeat_within_the_window_is_counted_on_the_same_event(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    recorder.record(POD, "Warning", "Evicted", EVICTED)
    second = stamp(wall.advance(30))
    recorder.record(POD, "Warning", "Evicted", EVICTED)
    third = stamp(wall.advance(AGGREGATION_WINDOW_S - 31))
    recorder.record(POD, "Warning", "Evicted", EVICTED)

    [stored] = apiserver.store.events("shop")
    assert (stored["count"], stored["firstTimestamp"], stored["lastTimestamp"]) == (3, stamp(START), third)
    writes = event_writes(apiserver)
    assert [(r.method, r.status) for r in writes] == [("POST", 201), ("PATCH", 200), ("PATCH", 200)]
    name = stored["metadata"]["name"]
    assert writes[1].path == f"/api/v1/namespaces/shop/events/{name}"
    assert writes[1].body == {"count": 2, "lastTimestamp": second}
    assert writes[2].body == {"count": 3, "lastTimestamp": third}


def test_a_repeat_after_the_window_or_with_other_text_creates_a_new_event(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    recorder.record(POD, "Warning", "Evicted", EVICTED)
    recorder.record(POD, "Warning", "Evicted", EVICTED + "Container app was using 2Gi. ")  # other message
    recorder.record(ObjectRef("Pod", "web-7d9f", "shop", "another-uid"), "Warning", "Evicted", EVICTED)  # other pod
    wall.advance(AGGREGATION_WINDOW_S)
    recorder.record(POD, "Warning", "Evicted", EVICTED)  # the window has passed

    assert [r.method for r in event_writes(apiserver)] == ["POST"] * 4
    stored = apiserver.store.events("shop")
    assert len(stored) == 4 and {e["count"] for e in stored} == {1}


def test_dry_run_sends_nothing(apiserver: ApiServer, kube_api: Any, wall: ManualClock) -> None:
    recorder = EventRecorder(kube_api, NODE, dry_run=True, clock=wall)

    created = recorder.record(POD, "Warning", "Evicted", EVICTED, {"starved_resource": "memory"})
    wall.advance(1)
    repeated = recorder.record(POD, "Warning", "Evicted", EVICTED)

    assert created["reason"] == "Evicted" and created["metadata"]["annotations"] == {"starved_resource": "memory"}
    assert repeated["count"] == 2  # what would have been sent
    assert apiserver.requests == [] and apiserver.store.events() == []


def test_failures_raise_kube_errors(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    apiserver.faults.fail_next(1, code=500, method="POST")
    with pytest.raises(KubeError) as caught:
        recorder.record(POD, "Warning", "Evicted", EVICTED)
    assert (caught.value.verb, caught.value.status) == ("create events", 500)

    apiserver.faults.throttle_next(1, method="POST")
    with pytest.raises(KubeError) as throttled:
        recorder.record(POD, "Warning", "Evicted", EVICTED)
    assert throttled.value.status == 429

    # Nothing was stored, so nothing is aggregated into: the next try creates the event.
    recorder.record(POD, "Warning", "Evicted", EVICTED)
    [stored] = apiserver.store.events("shop")
    assert stored["count"] == 1


def test_a_repeat_of_an_event_deleted_meanwhile_creates_it_again(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock, core_v1: Any
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    first = recorder.record(POD, "Warning", "Evicted", EVICTED)
    core_v1.delete_namespaced_event(first["metadata"]["name"], "shop")  # an operator cleaned events up
    wall.advance(5)

    recorder.record(POD, "Warning", "Evicted", EVICTED)

    # As client-go's recorder does when the patch finds no event: create it instead of failing.
    [stored] = apiserver.store.events("shop")
    assert stored["metadata"]["name"] != first["metadata"]["name"] and stored["count"] == 1
    evictd_writes = [(r.method, r.status) for r in event_writes(apiserver) if r.method != "DELETE"]
    assert evictd_writes == [("POST", 201), ("PATCH", 404), ("POST", 201)]
    wall.advance(5)
    recorder.record(POD, "Warning", "Evicted", EVICTED)  # and later repeats count on the new one
    [stored] = apiserver.store.events("shop")
    assert stored["count"] == 2

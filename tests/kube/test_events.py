"""EventRecorder (src/evictd/kube/events.py) against the test API server with evictd's API client.

core/v1 Events as the kubelet records them (involvedObject, source, reportingComponent/Instance), with
client-go's event correlator: a repeat PATCHes the existing Event's count, similar events past ten are combined, and
each object's token bucket (25, one more per 300 s) bounds the writes about it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client
from kube_faults import RecordedRequest

from clocks import ManualClock
from evictd.core.errors import KubeError
from evictd.kube.events import EventRecorder, ObjectRef

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

    assert body is not None
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


def test_a_repeat_is_counted_on_the_same_event_however_late(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    recorder.record(POD, "Warning", "Evicted", EVICTED)
    second = stamp(wall.advance(30))
    recorder.record(POD, "Warning", "Evicted", EVICTED)
    third = stamp(wall.advance(3600))  # client-go's event logger has no window: an hour later still counts
    recorder.record(POD, "Warning", "Evicted", EVICTED)

    [stored] = apiserver.store.events("shop")
    assert (stored["count"], stored["firstTimestamp"], stored["lastTimestamp"]) == (3, stamp(START), third)
    writes = event_writes(apiserver)
    assert [(r.method, r.status) for r in writes] == [("POST", 201), ("PATCH", 200), ("PATCH", 200)]
    name = stored["metadata"]["name"]
    assert writes[1].path == f"/api/v1/namespaces/shop/events/{name}"
    # client-go's two-way merge patch of a repeat: count, lastTimestamp and message.
    assert writes[1].body == {"count": 2, "lastTimestamp": second, "message": EVICTED}
    assert writes[2].body == {"count": 3, "lastTimestamp": third, "message": EVICTED}


def test_other_text_or_another_object_creates_a_new_event(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    recorder.record(POD, "Warning", "Evicted", EVICTED)
    recorder.record(POD, "Warning", "Evicted", EVICTED + "Container app was using 2Gi. ")  # other message
    recorder.record(POD, "Warning", "EvictionTooLate", EVICTED)  # other reason
    recorder.record(ObjectRef("Pod", "web-7d9f", "shop", "another-uid"), "Warning", "Evicted", EVICTED)  # other pod

    assert [r.method for r in event_writes(apiserver)] == ["POST"] * 4
    stored = apiserver.store.events("shop")
    assert len(stored) == 4 and {e["count"] for e in stored} == {1}


def test_dry_run_sends_nothing(apiserver: ApiServer, kube_api: Any, wall: ManualClock) -> None:
    recorder = EventRecorder(kube_api, NODE, dry_run=True, clock=wall)

    created = recorder.record(POD, "Warning", "Evicted", EVICTED, {"starved_resource": "memory"})
    wall.advance(1)
    repeated = recorder.record(POD, "Warning", "Evicted", EVICTED)

    assert created is not None and created["reason"] == "Evicted" and created["metadata"]["annotations"] == {"starved_resource": "memory"}
    assert repeated is not None and repeated["count"] == 2  # what would have been sent
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
    assert first is not None
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


# --- client-go's event correlator: count, spam filter, aggregation ------------------------------------------------


def test_a_burst_of_identical_events_is_one_event_whose_count_grows_until_the_object_runs_out_of_tokens(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    node = recorder.node_ref()
    for _ in range(40):  # ten cycles a second, each saying the same thing
        recorder.record(node, "Warning", "EvictionThresholdMet", "Attempting to reclaim memory")
        wall.advance(0.1)

    [stored] = apiserver.store.events("default")
    writes = event_writes(apiserver)
    # One create, then a PATCH of count per repeat while the node's 25 tokens last; the other 15 are not sent.
    assert [r.method for r in writes] == ["POST"] + ["PATCH"] * 24
    assert stored["count"] == 25 and stored["message"] == "Attempting to reclaim memory"

    wall.advance(300)  # one token back
    last = stamp(wall.wall())
    recorder.record(node, "Warning", "EvictionThresholdMet", "Attempting to reclaim memory")
    [stored] = apiserver.store.events("default")
    # The count says how often it happened, the dropped occurrences included (client-go counts before filtering).
    assert (stored["count"], stored["lastTimestamp"]) == (41, last)
    assert len(event_writes(apiserver)) == 26


def test_more_than_25_events_about_one_object_are_cut_by_its_token_bucket(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    for n in range(30):  # thirty different events about one pod within three seconds
        recorder.record(POD, "Warning", f"Reason{n}", f"message {n}")
        wall.advance(0.1)
    other = ObjectRef("Pod", "db-0", "shop", "another-uid")
    recorder.record(other, "Warning", "Reason0", "message 0")  # another object has a bucket of its own
    recorder.record(POD, "Normal", "Started", "started")  # and so has another type about the same object

    stored = apiserver.store.events("shop")
    about_pod = sorted(int(e["reason"].removeprefix("Reason")) for e in stored
                       if e["involvedObject"]["uid"] == POD.uid and e["type"] == "Warning")
    assert about_pod == list(range(25))
    assert {(e["involvedObject"]["name"], e["type"]) for e in stored} == {
        ("web-7d9f", "Warning"), ("db-0", "Warning"), ("web-7d9f", "Normal")}
    assert [r.method for r in event_writes(apiserver)] == ["POST"] * 27

    wall.advance(290)  # the bucket refills at one token per 300 s: not quite one yet
    assert recorder.record(POD, "Warning", "Reason30", "message 30") is None
    wall.advance(10)
    assert recorder.record(POD, "Warning", "Reason31", "message 31") is not None
    assert len(event_writes(apiserver)) == 28


def test_ten_similar_events_with_different_messages_are_combined_into_one(
    apiserver: ApiServer, kube_api: Any, wall: ManualClock
) -> None:
    recorder = EventRecorder(kube_api, NODE, clock=wall)
    for n in range(14):
        recorder.record(POD, "Warning", "Evicted", f"{EVICTED}attempt {n}", {"starved_resource": "memory"})
        wall.advance(1)

    stored = apiserver.store.events("shop")
    single = sorted(e["message"] for e in stored if e["count"] == 1 and not e["message"].startswith("("))
    assert single == sorted(f"{EVICTED}attempt {n}" for n in range(9))
    [combined] = [e for e in stored if e["message"].startswith("(combined")]
    # The tenth similar event opens the combined one; every later one counts on it and brings its message.
    assert combined["message"] == f"(combined from similar events): {EVICTED}attempt 13"
    assert combined["count"] == 5 and combined["reason"] == "Evicted" and combined["type"] == "Warning"
    assert combined["involvedObject"]["uid"] == POD.uid and combined["source"] == {"component": "evictd",
                                                                                  "host": NODE}
    assert combined["firstTimestamp"] == stamp(START + timedelta(seconds=9))
    assert combined["lastTimestamp"] == stamp(START + timedelta(seconds=13))
    writes = event_writes(apiserver)
    assert [r.method for r in writes] == ["POST"] * 10 + ["PATCH"] * 4
    assert writes[-1].body == {"count": 5, "lastTimestamp": stamp(START + timedelta(seconds=13)),
                               "message": f"(combined from similar events): {EVICTED}attempt 13"}

    wall.advance(601)  # ten minutes without a similar event: each message is an event of its own again
    recorder.record(POD, "Warning", "Evicted", f"{EVICTED}attempt 14")
    assert [r.method for r in event_writes(apiserver)][-1] == "POST"
    assert any(e["message"] == f"{EVICTED}attempt 14" for e in apiserver.store.events("shop"))

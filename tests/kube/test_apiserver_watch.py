"""Watch streams of the test API server, consumed by the real client's `watch.Watch().stream`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from apiserver import ApiServer
from kube_objects import pod_manifest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

WATCH_TIMEOUT_S = 3  # every stream here ends by itself even if an assertion never stops it


def collect(stream: Iterator[dict[str, Any]], watcher: watch.Watch, count: int) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of the first `count` events, then stop the watch."""
    seen: list[tuple[str, str, str]] = []
    for event in stream:
        meta = event["raw_object"]["metadata"]
        seen.append((event["type"], meta.get("name", ""), meta["resourceVersion"]))
        if len(seen) == count:
            watcher.stop()
    return seen


def later(delay_s: float, action: Any) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), action()), daemon=True)
    thread.start()
    return thread


def test_watch_replays_changes_after_a_resource_version_and_resumes(apiserver: ApiServer, core_v1: Any) -> None:
    start = str(apiserver.store.resource_version)
    apiserver.store.create_pod(pod_manifest("p1"))
    apiserver.store.set_pod_status("default", "p1", {"phase": "Failed", "reason": "Evicted"})
    apiserver.store.delete_pod("default", "p1", grace_period_s=0)
    watcher = watch.Watch()
    events = collect(watcher.stream(core_v1.list_namespaced_pod, "default", resource_version=start,
                                    timeout_seconds=WATCH_TIMEOUT_S), watcher, 4)
    assert [(kind, name) for kind, name, _ in events] == [
        ("ADDED", "p1"), ("MODIFIED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]
    versions = [int(rv) for _, _, rv in events]
    assert versions == sorted(versions) and versions[-1] == apiserver.store.resource_version
    resumed = watch.Watch()
    rest = collect(resumed.stream(core_v1.list_namespaced_pod, "default", resource_version=events[1][2],
                                  timeout_seconds=WATCH_TIMEOUT_S), resumed, 2)
    assert rest == events[2:]
    request = apiserver.request_log.matching("GET", "/api/v1/namespaces/default/pods")[0]
    assert request.param("watch") == "True" or request.param("watch") == "true"


def test_watch_events_carry_complete_typed_objects(apiserver: ApiServer, core_v1: Any) -> None:
    start = str(apiserver.store.resource_version)
    apiserver.store.create_pod(pod_manifest("p1"))
    watcher = watch.Watch()
    for event in watcher.stream(core_v1.list_namespaced_pod, "default", resource_version=start,
                                timeout_seconds=WATCH_TIMEOUT_S):
        watcher.stop()
        pod = event["object"]
        assert isinstance(pod, client.V1Pod) and pod.kind == "Pod" and pod.api_version == "v1"
        assert pod.metadata.uid and pod.spec.node_name == "node-a" and pod.status.phase == "Running"
    assert watcher.resource_version == str(apiserver.store.resource_version)


def test_watch_without_resource_version_starts_with_the_current_objects(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    apiserver.store.create_pod(pod_manifest("p2", namespace="other"))
    later(0.3, lambda: apiserver.store.create_pod(pod_manifest("p3")))
    watcher = watch.Watch()
    events = collect(watcher.stream(core_v1.list_pod_for_all_namespaces, timeout_seconds=WATCH_TIMEOUT_S),
                     watcher, 3)
    assert [(kind, name) for kind, name, _ in events] == [("ADDED", "p1"), ("ADDED", "p2"), ("ADDED", "p3")]


def test_watch_ends_after_timeout_seconds(apiserver: ApiServer, core_v1: Any) -> None:
    started = time.monotonic()
    events = list(watch.Watch().stream(core_v1.list_namespaced_pod, "default",
                                       resource_version=str(apiserver.store.resource_version), timeout_seconds=1))
    elapsed = time.monotonic() - started
    assert events == [] and 0.9 <= elapsed < 2.5
    assert apiserver.request_log.matching("GET")[0].param("timeoutSeconds") == "1"


def test_watch_from_a_compacted_resource_version_is_410_gone(apiserver: ApiServer, core_v1: Any) -> None:
    old = str(apiserver.store.resource_version)
    apiserver.store.create_pod(pod_manifest("p1"))
    compacted = apiserver.compact()
    # Without timeout_seconds the client retries a 410 once from the same version, then gives up.
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(core_v1.list_namespaced_pod, "default", resource_version=old):
            pytest.fail("no event may arrive from a compacted version")
    assert caught.value.status == 410
    assert caught.value.reason == f"Expired: too old resource version: {old} ({compacted})"
    watches = apiserver.request_log.matching("GET", "/api/v1/namespaces/default/pods")
    assert [r.param("resourceVersion") for r in watches] == [old, old] and all(r.status == 200 for r in watches)


def raw_watch_lines(api_client: Any, path: str) -> list[dict[str, Any]]:
    response = api_client.rest_client.request("GET", api_client.configuration.host + path,
                                              headers={"Accept": "application/json"})
    response.read()
    assert response.status == 200 and response.headers.get("Transfer-Encoding") == "chunked"
    return [json.loads(line) for line in response.data.decode().splitlines() if line]


def test_compacted_watch_gets_an_error_event_with_the_real_status(apiserver: ApiServer, api_client: Any) -> None:
    old = apiserver.store.resource_version
    apiserver.store.create_pod(pod_manifest("p1"))
    compacted = apiserver.compact()
    lines = raw_watch_lines(api_client, f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={old}")
    assert lines == [{"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: {old} ({compacted})", "reason": "Expired", "code": 410}}]


@pytest.mark.parametrize("value", ["true", "1", "yes", "", "True"])
def test_any_watch_value_but_0_or_false_is_a_watch(apiserver: ApiServer, api_client: Any, value: str) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    lines = raw_watch_lines(api_client, f"/api/v1/namespaces/default/pods?watch={value}&timeoutSeconds=1")
    assert [(line["type"], line["object"]["metadata"]["name"]) for line in lines] == [("ADDED", "p1")]


@pytest.mark.parametrize("value", ["false", "0", "FALSE"])
def test_watch_0_or_false_is_a_list(apiserver: ApiServer, api_client: Any, value: str) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    response = api_client.rest_client.request(
        "GET", api_client.configuration.host + f"/api/v1/namespaces/default/pods?watch={value}")
    response.read()
    assert json.loads(response.data)["kind"] == "PodList"


def test_legacy_watch_path_streams_too(apiserver: ApiServer, api_client: Any) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    lines = raw_watch_lines(api_client, "/api/v1/watch/namespaces/default/pods?timeoutSeconds=1")
    assert [line["type"] for line in lines] == ["ADDED"]


def test_bookmarks_carry_the_latest_resource_version(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.bookmark_interval_s = 0.2
    apiserver.store.create_pod(pod_manifest("p1", namespace="other"))  # a change this watcher does not see
    current = str(apiserver.store.resource_version)
    watcher = watch.Watch()
    events = list(watcher.stream(core_v1.list_namespaced_pod, "default", resource_version="1000",
                                 allow_watch_bookmarks=True, timeout_seconds=1))
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks and len(bookmarks) == len(events)
    assert bookmarks[-1]["raw_object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": current}}
    assert watcher.resource_version == current


def test_no_bookmarks_unless_allowed(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.bookmark_interval_s = 0.1
    events = list(watch.Watch().stream(core_v1.list_namespaced_pod, "default", resource_version="1000",
                                       timeout_seconds=1))
    assert events == []


def test_send_initial_events_ends_with_an_annotated_bookmark(apiserver: ApiServer, api_client: Any) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    lines = raw_watch_lines(api_client, "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true"
                            "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")
    assert [line["type"] for line in lines[:2]] == ["ADDED", "BOOKMARK"]
    assert lines[1]["object"]["metadata"] == {"resourceVersion": str(apiserver.store.resource_version),
                                              "annotations": {"k8s.io/initial-events-end": "true"}}


def test_filtered_watch_sees_objects_enter_and_leave_the_selection(apiserver: ApiServer, core_v1: Any) -> None:
    start = str(apiserver.store.resource_version)
    apiserver.store.create_pod(pod_manifest("p1", labels={"app": "web"}))
    core_v1.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"app": "db"}}})
    core_v1.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"app": "web"}}})
    apiserver.store.create_pod(pod_manifest("p2", labels={"app": "web"}, node_name="node-b"))
    watcher = watch.Watch()
    events = collect(watcher.stream(core_v1.list_namespaced_pod, "default", resource_version=start,
                                    label_selector="app=web", field_selector="spec.nodeName=node-a",
                                    timeout_seconds=WATCH_TIMEOUT_S), watcher, 3)
    assert [(kind, name) for kind, name, _ in events] == [("ADDED", "p1"), ("DELETED", "p1"), ("ADDED", "p1")]
    # The DELETED of an object leaving the selection is its last matching state at the change's version.
    assert int(events[1][2]) == int(events[0][2]) + 1


def test_graceful_deletion_is_seen_as_modified_then_deleted(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_pod(pod_manifest("victim"))
    start = str(apiserver.store.resource_version)
    core_v1.delete_namespaced_pod("victim", "default", body=client.V1DeleteOptions(grace_period_seconds=30))
    later(0.3, lambda: apiserver.finish_deletion("default", "victim"))
    watcher = watch.Watch()
    seen = []
    for event in watcher.stream(core_v1.list_namespaced_pod, "default", resource_version=start,
                                timeout_seconds=WATCH_TIMEOUT_S):
        seen.append((event["type"], event["object"].metadata.deletion_grace_period_seconds))
        if event["type"] == "DELETED":
            watcher.stop()
    assert seen == [("MODIFIED", 30), ("MODIFIED", 0), ("DELETED", 0)]


def test_dropped_watch_breaks_the_stream_and_resumes_from_the_last_version(apiserver: ApiServer,
                                                                          core_v1: Any) -> None:
    start = str(apiserver.store.resource_version)
    apiserver.store.create_pod(pod_manifest("p1"))
    apiserver.store.create_pod(pod_manifest("p2"))
    apiserver.faults.drop_next_watch(after_events=1)
    watcher = watch.Watch()
    seen = []
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for event in watcher.stream(core_v1.list_namespaced_pod, "default", resource_version=start,
                                    timeout_seconds=WATCH_TIMEOUT_S):
            seen.append(event["object"].metadata.name)
    assert seen == ["p1"]
    resumed = watch.Watch()
    rest = collect(resumed.stream(core_v1.list_namespaced_pod, "default", resource_version=watcher.resource_version,
                                  timeout_seconds=WATCH_TIMEOUT_S), resumed, 1)
    assert [name for _, name, _ in rest] == ["p2"]


def test_drop_watches_cuts_open_streams(apiserver: ApiServer, core_v1: Any) -> None:
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for _ in watch.Watch().stream(core_v1.list_namespaced_pod, "default", timeout_seconds=10):
                pass
        except urllib3.exceptions.ProtocolError as exc:
            errors.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while apiserver.faults.open_watches == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert apiserver.faults.drop_watches() == 1
    thread.join(timeout=5)
    assert not thread.is_alive() and len(errors) == 1


def test_expired_watch_is_retried_once_by_the_client_then_fails_when_compacted(apiserver: ApiServer,
                                                                              core_v1: Any) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    start = str(apiserver.store.resource_version)
    outcome: list[Any] = []

    def consume() -> None:
        try:
            for event in watch.Watch().stream(core_v1.list_namespaced_pod, "default", resource_version=start):
                outcome.append(event["object"].metadata.name)
        except ApiException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()

    def wait_watches(count: int) -> None:
        deadline = time.monotonic() + 5
        while len(apiserver.request_log.matching("GET")) < count and time.monotonic() < deadline:
            time.sleep(0.02)

    wait_watches(1)
    assert apiserver.faults.expire_watches() == 1  # in-stream ERROR 410: the client re-watches from its version
    wait_watches(2)
    apiserver.store.create_pod(pod_manifest("p2"))
    deadline = time.monotonic() + 5
    while "p2" not in outcome and time.monotonic() < deadline:
        time.sleep(0.02)
    assert outcome == ["p2"]
    apiserver.store.create_pod(pod_manifest("elsewhere", namespace="other"))  # unseen by this watcher
    apiserver.compact()
    apiserver.faults.expire_watches()  # now its version is compacted away: 410 again, and the client gives up
    thread.join(timeout=5)
    assert isinstance(outcome[-1], ApiException) and outcome[-1].status == 410
    versions = [r.param("resourceVersion") for r in apiserver.request_log.matching("GET")]
    assert versions[:2] == [start, start] and len(versions) == 3


def test_events_k8s_io_watch_streams_the_events_v1_view(apiserver: ApiServer, api_client: Any,
                                                        core_v1: Any) -> None:
    start = str(apiserver.store.resource_version)
    core_v1.create_namespaced_event("default", client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="e1", namespace="default"), reason="Evicted", message="low memory",
        involved_object=client.V1ObjectReference(kind="Pod", name="victim", namespace="default"), type="Warning",
        event_time="2026-01-02T00:00:00.5Z", action="Evicting", reporting_component="kubelet",
        reporting_instance="node-a"))
    watcher = watch.Watch()
    for event in watcher.stream(client.EventsV1Api(api_client).list_namespaced_event, "default",
                                resource_version=start, timeout_seconds=WATCH_TIMEOUT_S):
        watcher.stop()
        assert event["type"] == "ADDED" and event["raw_object"]["apiVersion"] == "events.k8s.io/v1"
        assert event["object"].note == "low memory" and event["object"].regarding.name == "victim"
        assert event["raw_object"]["eventTime"] == "2026-01-02T00:00:00.500000Z"


def test_legacy_core_events_have_a_null_event_time_in_the_events_v1_view(apiserver: ApiServer,
                                                                         api_client: Any, core_v1: Any) -> None:
    core_v1.create_namespaced_event("default", client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="old-style", namespace="default"), reason="Evicted", message="m",
        involved_object=client.V1ObjectReference(kind="Pod", name="victim", namespace="default"), type="Warning"))
    response = api_client.rest_client.request(
        "GET", api_client.configuration.host + "/apis/events.k8s.io/v1/namespaces/default/events/old-style")
    response.read()
    # As from a real server: the events.k8s.io schema has no omitempty on eventTime, so it is null, which the
    # Python client's EventsV1Event model refuses (a known client limitation, not a server fault).
    assert json.loads(response.data)["eventTime"] is None

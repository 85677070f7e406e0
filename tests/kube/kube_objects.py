"""Small manifests for tests: a pod and a node as a kubelet-managed cluster would hold them."""

from __future__ import annotations

from typing import Any


def pod_manifest(name: str, namespace: str = "default", *, node_name: str | None = "node-a",
                 phase: str | None = "Running", labels: dict[str, str] | None = None,
                 requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
                 priority: int | None = None) -> dict[str, Any]:
    """A one-container pod; `phase=None` leaves the status out."""
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    if limits:
        resources["limits"] = dict(limits)
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.local/app:1.0", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
                           "spec": spec}
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def node_manifest(name: str = "node-a", *, ready: bool = True, taints: list[dict[str, str]] | None = None,
                  labels: dict[str, str] | None = None, kubelet_version: str = "v1.37.1") -> dict[str, Any]:
    """A node with a Ready condition, kubelet version (status.nodeInfo.kubeletVersion, as the kubelet's VersionInfo
    setter writes it) and addresses, as a registered kubelet reports it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": list(taints or [])} if taints else {},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available",
                 "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": kubelet_version, "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "kernelVersion": "6.1.0-0-amd64", "containerRuntimeVersion": "containerd://1.6.20",
                         "architecture": "amd64", "operatingSystem": "linux", "bootID": "", "kubeProxyVersion": "",
                         "machineID": "", "systemUUID": ""},
        },
    }

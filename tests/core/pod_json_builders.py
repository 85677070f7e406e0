"""Builders of v1 Pod JSON for the pod-rule tests (pods, resources, QoS, admission).

They return plain dicts exactly as `kubectl get pod -o json` prints them, and `make` parses them with
`pod_from_dict`, so every rule test goes through the real parser. Names follow upstream's test helpers
(`getResourceList` is `rl`).
"""

from __future__ import annotations

from typing import Any

from evictd.core.pods import Pod, pod_from_dict
from evictd.core.quantity import Quantity

Json = dict[str, Any]


def ctr(
    name: str = "c",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    *,
    sidecar: bool = False,
) -> Json:
    """A v1 container; `sidecar` sets restartPolicy Always (meaningful on init containers)."""
    out: Json = {"name": name, "image": "busybox", "resources": {}}
    if requests is not None:
        out["resources"]["requests"] = requests
    if limits is not None:
        out["resources"]["limits"] = limits
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def rl(cpu: str = "", memory: str = "") -> dict[str, str]:
    """A resource list like upstream's getResourceList: empty strings are left out."""
    out = {}
    if cpu:
        out["cpu"] = cpu
    if memory:
        out["memory"] = memory
    return out


def pod_json(
    containers: list[Json] | None = None,
    init: list[Json] | None = None,
    *,
    name: str = "p",
    spec: Json | None = None,
    metadata: Json | None = None,
    status: Json | None = None,
) -> Json:
    body: Json = {"containers": containers if containers is not None else [ctr()]}
    if init:
        body["initContainers"] = init
    body.update(spec or {})
    meta: Json = {"name": name, "namespace": "ns", "uid": "uid-1"}
    meta.update(metadata or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": status or {}}


def make(containers: list[Json] | None = None, init: list[Json] | None = None, **kw: Any) -> Pod:
    return pod_from_dict(pod_json(containers, init, **kw))


def q(text: str) -> Quantity:
    return Quantity.parse(text)

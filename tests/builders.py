"""Builders of real-format Kubernetes documents for tests: v1 Pods and kubelet Summary API documents.

They produce plain dicts exactly as `kubectl get pod -o json` and `/stats/summary` print them, so tests go
through the same parsers as users' data.
"""

from __future__ import annotations

from typing import Any

from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod

Json = dict[str, Any]

Gi = 1 << 30
Mi = 1 << 20
BASE_TIME = "2026-11-21T10:00:{:02d}Z"


def stamp(second: int) -> str:
    """Return an RFC 3339 timestamp `second` seconds after a fixed base (0-59)."""
    return BASE_TIME.format(second)


def container(
    name: str = "app",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    *,
    sidecar: bool = False,
) -> Json:
    """A v1 container running busybox; `sidecar` sets restartPolicy Always (meaningful among init containers)."""
    resources: Json = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    out: Json = {"name": name, "image": "busybox", "resources": resources}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def pod(
    name: str,
    *,
    namespace: str = "default",
    uid: str | None = None,
    priority: int | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    grace: int | None = 30,
    volumes: list[Json] | None = None,
    containers: list[Json] | None = None,
    init_containers: list[Json] | None = None,
    overhead: dict[str, str] | None = None,
    pod_resources: Json | None = None,
    phase: str = "Running",
    generation: int = 1,
    priority_class: str | None = None,
) -> Json:
    """Return a v1 Pod with one container `app` holding `requests` and `limits` (unless `containers` is given).

    The uid is `uid-<name>` unless given; `uid=""` leaves it out. `pod_resources` is the pod-level
    spec.resources, `overhead` the RuntimeClass overhead.
    """
    spec: Json = {
        "nodeName": "node-1",
        "containers": containers if containers is not None else [container("app", requests or None, limits or None)],
    }
    if init_containers:
        spec["initContainers"] = init_containers
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if volumes:
        spec["volumes"] = volumes
    if overhead is not None:
        spec["overhead"] = overhead
    if pod_resources is not None:
        spec["resources"] = pod_resources
    metadata: Json = {"name": name, "namespace": namespace, "generation": generation}
    if uid != "":
        metadata["uid"] = f"uid-{name}" if uid is None else uid
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def core_pod(
    name: str = "p",
    *,
    uid: str | None = None,
    containers: list[Json] | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **fields: Any,
) -> Pod:
    """`pod(...)` parsed into the core's Pod, as upstream's newPod builds it: the uid and the one container
    (holding `requests` and `limits`) take the pod's name unless given."""
    if containers is None:
        containers = [container(name, requests, limits)]
    return pod_from_dict(pod(name, uid=name if uid is None else uid, containers=containers, **fields))


def pod_stats(
    pod_doc: dict[str, Any],
    *,
    memory: int | None = None,
    rootfs: int | None = None,
    logs: int | None = None,
    rootfs_inodes: int | None = None,
    volumes: dict[str, int] | None = None,
    ephemeral: int | None = None,
    processes: int | None = None,
    container: str = "app",
) -> dict[str, Any]:
    """Return the Summary API stats of a pod with one container."""
    meta = pod_doc["metadata"]
    stats: dict[str, Any] = {"podRef": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]}}
    c: dict[str, Any] = {"name": container}
    if memory is not None:
        stats["memory"] = {"workingSetBytes": memory}
        c["memory"] = {"workingSetBytes": memory}
    if rootfs is not None or rootfs_inodes is not None:
        c["rootfs"] = {k: v for k, v in (("usedBytes", rootfs), ("inodesUsed", rootfs_inodes)) if v is not None}
    if logs is not None:
        c["logs"] = {"usedBytes": logs}
    stats["containers"] = [c]
    if volumes:
        stats["volume"] = [{"name": n, "usedBytes": b} for n, b in volumes.items()]
    if ephemeral is not None:
        stats["ephemeral-storage"] = {"usedBytes": ephemeral}
    if processes is not None:
        stats["process_stats"] = {"process_count": processes}
    return stats


def fs(available: int, capacity: int, inodes_free: int = 1_000_000, inodes: int = 2_000_000,
       time: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"availableBytes": available, "capacityBytes": capacity, "usedBytes": capacity - available,
                           "inodesFree": inodes_free, "inodes": inodes, "inodesUsed": inodes - inodes_free}
    if time is not None:
        doc["time"] = time
    return doc


def summary(
    *,
    memory: int = 8 * Gi,
    memory_ws: int = 8 * Gi,
    allocatable: int | None = None,
    allocatable_ws: int = 4 * Gi,
    nodefs: dict[str, Any] | None = None,
    imagefs: dict[str, Any] | None = None,
    containerfs: dict[str, Any] | None = None,
    pids: tuple[int, int] | None = None,
    pods: list[dict[str, Any]] | None = None,
    time: str | None = None,
) -> dict[str, Any]:
    """Return a Summary API document. Timestamps are omitted unless `time` is given (then always fresh)."""
    node: dict[str, Any] = {"nodeName": "node-1",
                            "memory": {"availableBytes": memory, "workingSetBytes": memory_ws}}
    node["fs"] = nodefs if nodefs is not None else fs(80 * Gi, 100 * Gi)
    runtime = {"imageFs": imagefs if imagefs is not None else node["fs"]}
    if containerfs is not None:
        runtime["containerFs"] = containerfs
    node["runtime"] = runtime
    if allocatable is not None:
        node["systemContainers"] = [
            {"name": "pods", "memory": {"availableBytes": allocatable, "workingSetBytes": allocatable_ws}}
        ]
    if pids is not None:
        node["rlimit"] = {"maxpid": pids[0], "curproc": pids[1]}
    if time is not None:
        node["memory"]["time"] = time
        node["fs"] = {**node["fs"], "time": time}
        if pids is not None:
            node["rlimit"]["time"] = time
    return {"node": node, "pods": pods or []}

"""Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for (pkg/printers/internalversion).

Columns and cells follow the real printers for pods (`printPod`: READY, STATUS with Terminating/container
reasons, RESTARTS, AGE, wide IP/NODE), nodes (`printNode`: STATUS with SchedulingDisabled, ROLES from
node-role labels, VERSION) and core events (`printEvent`). Ages use `duration.HumanDuration`. Rows carry the
object as PartialObjectMetadata (the default `includeObject=Metadata`), the whole object, or nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

TABLE_RESOURCES = ("pods", "nodes", "events")
TABLE_MEDIA = ("as=Table", "g=meta.k8s.io")
NODE_ROLE_PREFIX = "node-role.kubernetes.io/"


def wants_table(accept: str) -> bool:
    """True when the Accept header's first acceptable type is a meta.k8s.io Table."""
    for media in accept.split(","):
        params = {p.strip() for p in media.split(";")[1:]}
        if all(p in params for p in TABLE_MEDIA) and ("v=v1" in params or "v=v1beta1" in params):
            return True
        if media.split(";")[0].strip() in ("application/json", "*/*") and not any(p.startswith("as=") for p in params):
            return False
    return False


def human_duration(seconds: float) -> str:
    """`k8s.io/apimachinery/pkg/util/duration.HumanDuration`."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return human_duration((datetime.now(UTC) - moment).total_seconds())


def _column(name: str, description: str, priority: int = 0, fmt: str = "", kind: str = "string") -> dict[str, Any]:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


POD_COLUMNS = [
    _column("Name", "Name must be unique within a namespace.", fmt="name"),
    _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", "The aggregate status of the containers in this pod."),
    _column("Restarts", "The number of times the containers in this pod have been restarted and when the last "
            "container in this pod has restarted."),
    _column("Age", "CreationTimestamp is a timestamp representing the server time when this object was created."),
    _column("IP", "podIP is an IP address allocated to the pod.", 1),
    _column("Node", "nodeName indicates in which node this pod is scheduled.", 1),
    _column("Nominated Node", "nominatedNodeName is set when this pod preempts other pods on the node.", 1),
    _column("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
]
NODE_COLUMNS = [
    _column("Name", "Name must be unique within a namespace.", fmt="name"),
    _column("Status", "The status of the node"),
    _column("Roles", "The roles of the node"),
    _column("Age", "CreationTimestamp is a timestamp representing the server time when this object was created."),
    _column("Version", "Kubelet Version reported by the node."),
    _column("Internal-IP", "List of addresses reachable to the node. Queried from cloud provider, if available.", 1),
    _column("External-IP", "List of addresses reachable to the node. Queried from cloud provider, if available.", 1),
    _column("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).", 1),
    _column("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).", 1),
    _column("Container-Runtime", "Container runtime version reported by the node through runtime remote API "
            "(e.g. containerd://1.4.2).", 1),
]
EVENT_COLUMNS = [
    _column("Last Seen", "Time when last this event was recorded"),
    _column("Type", "Type of this event (Normal, Warning), new types could be added in the future."),
    _column("Reason", "This should be a short, machine understandable string that gives the reason for the "
            "transition into the object's current status."),
    _column("Object", "Object this event is about."),
    _column("Subobject", "Subobject this event is about.", 1),
    _column("Source", "The component reporting this event. Should be a short machine understandable string.", 1),
    _column("Message", "A human-readable description of the status of this operation."),
    _column("First Seen", "The time at which the event was first recorded.", 1),
    _column("Count", "The number of times this event has occurred.", 1),
    _column("Name", "Name must be unique within a namespace.", 1),
]


def _pod_cells(pod: dict[str, Any]) -> list[Any]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(spec.get("containers") or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    reason = status.get("reason") or status.get("phase") or ""
    for container in reversed(statuses):
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if meta.get("deletionTimestamp") and status.get("reason") != "NodeLost":
        reason = "Terminating" if reason not in ("Completed", "Error") else reason
    ips = status.get("podIPs") or []
    gates = spec.get("readinessGates") or []
    true_conditions = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    gates_text = f"{sum(1 for g in gates if g.get('conditionType') in true_conditions)}/{len(gates)}" if gates \
        else "<none>"
    return [meta.get("name", ""), f"{ready}/{total}", reason, str(restarts), _age(meta.get("creationTimestamp")),
            ips[0]["ip"] if ips else status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", gates_text]


def _node_cells(node: dict[str, Any]) -> list[Any]:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    ready = conditions.get("Ready")
    state = ["Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"]
    if spec.get("unschedulable"):
        state.append("SchedulingDisabled")
    roles = sorted(k[len(NODE_ROLE_PREFIX):] for k in (meta.get("labels") or {}) if k.startswith(NODE_ROLE_PREFIX))
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [meta.get("name", ""), ",".join(state), ",".join(roles) or "<none>", _age(meta.get("creationTimestamp")),
            info.get("kubeletVersion", ""), addresses.get("InternalIP", "<none>"),
            addresses.get("ExternalIP", "<none>"), info.get("osImage", "<unknown>"),
            info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion", "<unknown>")]


def _event_cells(event: dict[str, Any]) -> list[Any]:
    meta, involved, source = event.get("metadata") or {}, event.get("involvedObject") or {}, event.get("source") or {}
    first = event.get("firstTimestamp") or event.get("eventTime")
    last = (event.get("series") or {}).get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
    reporter = source.get("component") or event.get("reportingComponent", "")
    host = source.get("host") or event.get("reportingInstance", "")
    count = (event.get("series") or {}).get("count") or event.get("count") or 1
    return [_age(last), event.get("type", ""), event.get("reason", ""),
            f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}", involved.get("fieldPath", ""),
            f"{reporter}, {host}" if host else reporter, event.get("message", ""), _age(first), int(count),
            meta.get("name", "")]


CELLS = {"pods": (POD_COLUMNS, _pod_cells), "nodes": (NODE_COLUMNS, _node_cells), "events": (EVENT_COLUMNS, _event_cells)}


def table_for(info: Any, body: dict[str, Any], include_object: str) -> dict[str, Any]:
    """The Table for a list or a single object of a core resource."""
    columns, cells = CELLS[info.storage]
    items = body.get("items", [body])
    rows = []
    for item in items:
        row: dict[str, Any] = {"cells": cells(item)}
        if include_object == "Object":
            row["object"] = {"kind": info.kind, "apiVersion": info.api_version, **item}
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": item.get("metadata") or {}}
        rows.append(row)
    metadata = dict(body["metadata"]) if "items" in body else {
        "resourceVersion": (body.get("metadata") or {}).get("resourceVersion", "")}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": columns,
            "rows": rows}

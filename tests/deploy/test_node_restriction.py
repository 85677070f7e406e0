"""deploy/kubernetes/node-restriction.yaml evaluated: each CEL expression against example admission requests.

The ValidatingAdmissionPolicy is run here as the API server runs it, with cel-python (`celpy`, a pure-Python
implementation of standard CEL) instead of cel-go:
- the request matches a resource rule (group, version, resource[/subresource], operation) and every
  matchCondition, or the policy does not apply;
- `variables` are evaluated in order, an error surfacing only where the variable is used (the API server
  evaluates them lazily);
- every validation is evaluated; one that is false or fails (failurePolicy Fail) refuses the request, and the
  first refusal's message (messageExpression, else message) is the answer.

`object`/`oldObject`/`request` are given as the API server hands them to CEL: the objects converted to
unstructured JSON (empty strings, lists and maps omitted, structs kept), `object` null for DELETE and
`oldObject` null for CREATE, `request` an admission.k8s.io/v1 AdmissionRequest (`subResource` and
`userInfo.extra` absent when empty). The policy sticks to standard CEL (macros `all`/`exists`/`filter`,
`startsWith`, `has`, `in`) so that both evaluators accept it; what only a real API server can show (its type
checker's warnings, the real token's extra info) is listed in deploy/kubernetes/README.md.

The writes come from evictd's own code where it is pure (node taints, node conditions, events) and are applied
to the stored object the way the API server applies evictd's patches (strategic merge by `type` for
conditions, JSON merge replacing `spec.taints`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes, json_to_cel

from clocks import ManualClock
from evictd.core.node_status import ConditionMode, desired_conditions, desired_taints, stopped_conditions
from evictd.core.signals import NodeCondition
from evictd.kube.events import EventRecorder, ObjectRef
from evictd.kube.node_lease import new_lease, renewed_lease, taken_lease

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
POLICY_FILE = K8S / "node-restriction.yaml"

NODE = "node-a"
OTHER_NODE = "node-b"
NOW = "2026-03-01T12:00:00Z"
EARLIER = "2026-03-01T11:00:00Z"

# The user extra info of a pod-bound token (a DaemonSet pod's projected token) of an evictd pod on NODE.
POD_TOKEN = {
    "authentication.kubernetes.io/credential-id": ["JTI=6a1c0f6e-2a58-4d0a-9b8e-0d6c3b1a7e51"],
    "authentication.kubernetes.io/node-name": [NODE],
    "authentication.kubernetes.io/node-uid": ["0f3c2b7a-8d1e-4c55-b1e2-5a9d8c7b6a43"],
    "authentication.kubernetes.io/pod-name": ["evictd-x7k2p"],
    "authentication.kubernetes.io/pod-uid": ["c5d4e3f2-a1b0-4c9d-8e7f-6a5b4c3d2e1f"],
}
# A TokenRequest bound to no object (`kubectl create token evictd`): a credential id, no node.
UNBOUND_TOKEN = {"authentication.kubernetes.io/credential-id": ["JTI=0b9a8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d"]}
# A long-lived token from a kubernetes.io/service-account-token Secret: no extra info at all.
SECRET_TOKEN = None

STANDARD_MODE_TYPES = "['MemoryPressure', 'DiskPressure', 'PIDPressure']"


# ---------------------------------------------------------------------------------------------- evaluator


def policy_documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(POLICY_FILE.read_text(encoding="utf-8")) if doc is not None]


def the_policy() -> dict[str, Any]:
    found = [doc for doc in policy_documents() if doc["kind"] == "ValidatingAdmissionPolicy"]
    assert len(found) == 1
    return found[0]


def service_account_username() -> str:
    text = (K8S / "serviceaccount.yaml").read_text(encoding="utf-8")
    account = next(doc for doc in yaml.safe_load_all(text) if doc and doc["kind"] == "ServiceAccount")
    return f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"


class CelError(Exception):
    """An expression failed to evaluate (no such key, wrong type, ...)."""


@dataclass(frozen=True)
class Verdict:
    matched: bool
    refusals: tuple[tuple[int, str], ...] = ()  # (validation index, message), in validation order

    @property
    def allowed(self) -> bool:
        return not self.refusals

    @property
    def message(self) -> str:
        return self.refusals[0][1] if self.refusals else ""


class Policy:
    """A ValidatingAdmissionPolicy compiled with celpy and evaluated as the API server evaluates it."""

    def __init__(self, policy: Mapping[str, Any], variable_overrides: Mapping[str, str] | None = None) -> None:
        overrides = dict(variable_overrides or {})
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        self._env = celpy.Environment()
        self._rules = spec["matchConstraints"]["resourceRules"]
        self._conditions = [self._compile(c["expression"]) for c in spec.get("matchConditions", [])]
        names = {v["name"] for v in spec.get("variables", [])}
        assert set(overrides) <= names, f"no such variables: {sorted(set(overrides) - names)}"
        self._variables = [(v["name"], self._compile(overrides.get(v["name"], v["expression"])))
                           for v in spec.get("variables", [])]
        self._validations = [
            (self._compile(v["expression"]), v.get("message", ""),
             self._compile(v["messageExpression"]) if "messageExpression" in v else None)
            for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> Any:
        return self._env.program(self._env.compile(expression))

    @staticmethod
    def _run(program: Any, activation: Mapping[str, Any]) -> Any:
        try:
            result = program.evaluate(dict(activation))
        except celpy.CELEvalError as exc:
            raise CelError(str(exc)) from exc
        if isinstance(result, celpy.CELEvalError):
            raise CelError(str(result))
        return result

    def _matches_rules(self, request: Mapping[str, Any]) -> bool:
        resource = request["resource"]
        name = resource["resource"] + (f"/{request['subResource']}" if request.get("subResource") else "")
        return any(
            resource["group"] in rule["apiGroups"] and resource["version"] in rule["apiVersions"]
            and request["operation"] in rule["operations"] and name in rule["resources"]
            for rule in self._rules
        )

    def review(self, request: Mapping[str, Any], obj: Mapping[str, Any] | None,
               old: Mapping[str, Any] | None) -> Verdict:
        if not self._matches_rules(request):
            return Verdict(matched=False)
        base = {"request": json_to_cel(request), "object": json_to_cel(obj), "oldObject": json_to_cel(old)}
        for condition in self._conditions:
            try:
                if self._run(condition, base) != celtypes.BoolType(True):
                    return Verdict(matched=False)
            except CelError as exc:  # failurePolicy Fail
                return Verdict(matched=True, refusals=((-1, f"matchCondition failed: {exc}"),))
        variables: dict[celtypes.StringType, Any] = {}
        for name, program in self._variables:
            # A variable that fails is left out: it fails whatever uses it ("no such key"), as a lazy one would.
            with contextlib.suppress(CelError):
                activation = {**base, "variables": celtypes.MapType(variables)}
                variables[celtypes.StringType(name)] = self._run(program, activation)
        activation = {**base, "variables": celtypes.MapType(variables)}
        refusals = []
        for index, (program, message, message_program) in enumerate(self._validations):
            try:
                result = self._run(program, activation)
            except CelError as exc:
                refusals.append((index, f"expression {index} resulted in error: {exc}"))
                continue
            if result == celtypes.BoolType(True) and isinstance(result, celtypes.BoolType):
                continue
            text = message
            if message_program is not None:
                try:
                    evaluated = self._run(message_program, activation)
                    if isinstance(evaluated, str) and evaluated and "\n" not in evaluated:
                        text = str(evaluated)
                except CelError:
                    pass  # the static message, as the API server falls back to it
            refusals.append((index, text or f"failed expression {index}"))
        return Verdict(matched=True, refusals=tuple(refusals))


@cache
def shipped_policy() -> Policy:
    return Policy(the_policy())


@cache
def standard_mode_policy() -> Policy:
    return Policy(the_policy(), {"extraNodeConditionTypes": STANDARD_MODE_TYPES})


# ------------------------------------------------------------------------------------ admission requests


@dataclass(frozen=True)
class Review:
    request: dict[str, Any]
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None

    def by(self, extra: Mapping[str, list[str]] | None, username: str | None = None) -> Review:
        """The same request made with other credentials."""
        request = copy.deepcopy(self.request)
        request["userInfo"].pop("extra", None)
        if extra:
            request["userInfo"]["extra"] = copy.deepcopy(dict(extra))
        if username is not None:
            request["userInfo"]["username"] = username
        return Review(request, self.object, self.old_object)


def admission_request(operation: str, resource: str, name: str, *, group: str = "", subresource: str = "",
                      namespace: str = "", kind: str = "") -> dict[str, Any]:
    gvr = {"group": group, "version": "v1", "resource": resource}
    gvk = {"group": group, "version": "v1", "kind": kind or resource[:-1].capitalize()}
    request: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": name,
        "operation": operation,
        "userInfo": {"username": service_account_username(), "uid": "9c2e51f2-0d0a-4b6c-a4d3-7c0e7b7f0e11",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:evictd-system",
                                "system:authenticated"],
                     "extra": copy.deepcopy(POD_TOKEN)},
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.capitalize()}Options"},
    }
    if subresource:
        request["subResource"] = subresource
        request["requestSubResource"] = subresource
    if namespace:
        request["namespace"] = namespace
    return request


def unstructured(value: Any) -> Any:
    """What the API server's unstructured conversion gives CEL: empty strings, lists and maps omitted."""
    if isinstance(value, dict):
        return {k: unstructured(v) for k, v in value.items() if v not in ("", [], {}, None)}
    if isinstance(value, list):
        return [unstructured(v) for v in value]
    return value


def merge_by_type(current: Sequence[Mapping[str, Any]], patch: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A strategic merge of a conditions list (patchMergeKey `type`): merge same types, append new ones."""
    merged = [dict(c) for c in current]
    for item in patch:
        for existing in merged:
            if existing["type"] == item["type"]:
                existing.update(item)
                break
        else:
            merged.append(dict(item))
    return merged


# ------------------------------------------------------------------------------------------------- pods


def pod(node: str | None = NODE, name: str = "web-0", namespace: str = "shop",
        conditions: list[dict[str, Any]] | None = None, phase: str = "Running") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "web", "image": "registry.example/web:1"}],
                            "serviceAccountName": "default", "restartPolicy": "Always"}
    if node is not None:
        spec["nodeName"] = node
    if conditions is None:
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": EARLIER}
            for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
        ]
    return unstructured({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": "1b2c3d4e-5f60-4718-9a0b-1c2d3e4f5a6b",
                     "resourceVersion": "4711", "generation": 1, "labels": {"app": "web"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                          "uid": "aa11bb22-cc33-4d44-8e55-ff6677889900", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions, "hostIP": "10.0.0.11", "podIP": "10.244.1.7",
                   "qosClass": "BestEffort", "startTime": EARLIER},
    })


def disruption_target(reason: str = "TerminationByKubelet", at: str = NOW) -> dict[str, Any]:
    """The condition evictd patches in (type DisruptionTarget, as the kubelet's eviction manager writes it)."""
    return {"type": "DisruptionTarget", "status": "True", "reason": reason,
            "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi. ",
            "observedGeneration": 1, "lastTransitionTime": at}


def delete_pod(target: dict[str, Any]) -> Review:
    request = admission_request("DELETE", "pods", target["metadata"]["name"],
                                namespace=target["metadata"]["namespace"])
    request["options"] = {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions", "gracePeriodSeconds": 30,
                          "preconditions": {"uid": target["metadata"]["uid"]}}
    return Review(request, None, target)


def evict_pod(target: dict[str, Any], **delete_options: Any) -> Review:
    """CREATE pods/eviction as evictd sends it (`evictor.eviction_body`); `delete_options` replace its own."""
    name, namespace = target["metadata"]["name"], target["metadata"]["namespace"]
    request = admission_request("CREATE", "pods", name, subresource="eviction", namespace=namespace,
                                kind="Eviction")
    request["kind"] = request["requestKind"] = {"group": "policy", "version": "v1", "kind": "Eviction"}
    options = {"gracePeriodSeconds": 30, "preconditions": {"uid": target["metadata"]["uid"]}, **delete_options}
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": options}
    return Review(request, unstructured(eviction), None)


def patch_pod_status(old: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> Review:
    new = copy.deepcopy(old)
    change(new)
    request = admission_request("UPDATE", "pods", old["metadata"]["name"], subresource="status",
                                namespace=old["metadata"]["namespace"])
    return Review(request, unstructured(new), old)


def add_conditions(*conditions: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def change(p: dict[str, Any]) -> None:
        p["status"]["conditions"] = merge_by_type(p["status"].get("conditions", []), conditions)
    return change


def set_status(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def change(p: dict[str, Any]) -> None:
        p["status"].update(fields)
        add_conditions(disruption_target())(p)
    return change


def with_conditions(change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> Callable[[dict[str, Any]], None]:
    def apply(p: dict[str, Any]) -> None:
        p["status"]["conditions"] = change(merge_by_type(p["status"]["conditions"], [disruption_target()]))
    return apply


def set_condition(kind: str, **fields: Any) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    return lambda conditions: [{**c, **fields} if c["type"] == kind else c for c in conditions]


def with_metadata(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def apply(obj: dict[str, Any]) -> None:
        obj["metadata"].update(fields)
    return apply


# ------------------------------------------------------------------------------------------------ nodes


FOREIGN_TAINTS = [
    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": EARLIER},
]


def kubelet_conditions() -> list[dict[str, Any]]:
    texts = {
        "MemoryPressure": ("KubeletHasSufficientMemory", "kubelet has sufficient memory available", "False"),
        "DiskPressure": ("KubeletHasNoDiskPressure", "kubelet has no disk pressure", "False"),
        "PIDPressure": ("KubeletHasSufficientPID", "kubelet has sufficient PID available", "False"),
        "Ready": ("KubeletReady", "kubelet is posting ready status", "True"),
    }
    return [{"type": kind, "status": status, "reason": reason, "message": message,
             "lastHeartbeatTime": EARLIER, "lastTransitionTime": EARLIER}
            for kind, (reason, message, status) in texts.items()]


def node(name: str = NODE, taints: list[dict[str, Any]] | None = None,
         conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return unstructured({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": "0f3c2b7a-8d1e-4c55-b1e2-5a9d8c7b6a43", "resourceVersion": "815",
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "providerID": f"kind://docker/{name}",
                 "taints": copy.deepcopy(FOREIGN_TAINTS if taints is None else taints)},
        "status": {
            "capacity": {"cpu": "4", "memory": "8124836Ki", "pods": "110", "ephemeral-storage": "61202244Ki"},
            "allocatable": {"cpu": "4", "memory": "8022436Ki", "pods": "110", "ephemeral-storage": "56403987978"},
            "conditions": kubelet_conditions() if conditions is None else conditions,
            "addresses": [{"type": "InternalIP", "address": "10.0.0.11"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": "v1.36.2", "containerRuntimeVersion": "containerd://2.1.4",
                         "kernelVersion": "6.12.0", "osImage": "Debian GNU/Linux 13", "operatingSystem": "linux",
                         "architecture": "amd64", "machineID": "m", "systemUUID": "s", "bootID": "b",
                         "kubeProxyVersion": ""},
        },
    })


def patch_node(old: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> Review:
    new = copy.deepcopy(old)
    change(new)
    return Review(admission_request("UPDATE", "nodes", old["metadata"]["name"]), unstructured(new), old)


def patch_node_status(old: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> Review:
    new = copy.deepcopy(old)
    change(new)
    request = admission_request("UPDATE", "nodes", old["metadata"]["name"], subresource="status")
    return Review(request, unstructured(new), old)


def evictd_taints(*pressure: NodeCondition, mode: ConditionMode = ConditionMode.EVICTD) -> Callable[[dict[str, Any]], None]:
    """evictd's taint write (desired_taints, sent as a JSON merge patch that replaces spec.taints)."""
    def change(n: dict[str, Any]) -> None:
        n["spec"]["taints"] = desired_taints(n["spec"].get("taints", []), list(pressure), mode)
    return change


def taints(change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> Callable[[dict[str, Any]], None]:
    def apply(n: dict[str, Any]) -> None:
        n["spec"]["taints"] = change(n["spec"].get("taints", []))
    return apply


def set_spec(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def apply(n: dict[str, Any]) -> None:
        n["spec"].update(fields)
    return apply


def evictd_conditions(*pressure: NodeCondition, mode: ConditionMode = ConditionMode.EVICTD) -> Callable[[dict[str, Any]], None]:
    """evictd's node status write (desired_conditions, sent as a strategic merge patch of status.conditions)."""
    def change(n: dict[str, Any]) -> None:
        current = n["status"].get("conditions", [])
        n["status"]["conditions"] = merge_by_type(current, desired_conditions(current, list(pressure), mode, NOW))
    return change


def evictd_stopped(n: dict[str, Any]) -> None:
    current = n["status"].get("conditions", [])
    n["status"]["conditions"] = merge_by_type(current, stopped_conditions(current, ConditionMode.EVICTD, NOW))


def node_conditions(change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> Callable[[dict[str, Any]], None]:
    def apply(n: dict[str, Any]) -> None:
        evictd_conditions(NodeCondition.MEMORY_PRESSURE)(n)
        n["status"]["conditions"] = change(n["status"]["conditions"])
    return apply


def node_status(**fields: Any) -> Callable[[dict[str, Any]], None]:
    def apply(n: dict[str, Any]) -> None:
        evictd_conditions(NodeCondition.MEMORY_PRESSURE)(n)
        for key, value in fields.items():
            n["status"][key] = value
    return apply


def evicted_node(old: dict[str, Any], pressure: NodeCondition) -> dict[str, Any]:
    """The node once evictd recorded `pressure` on it (the stored object of a later write)."""
    new = copy.deepcopy(old)
    evictd_taints(pressure)(new)
    evictd_conditions(pressure)(new)
    return unstructured(new)


# ----------------------------------------------------------------------------------------------- events


def recorder(node_name: str = NODE) -> EventRecorder:
    return EventRecorder(None, node_name, dry_run=True, clock=ManualClock(0.0, wall_at_zero=datetime(2026, 3, 1, 12, tzinfo=UTC)))


POD_REF = ObjectRef(kind="Pod", name="web-0", namespace="shop", uid="1b2c3d4e-5f60-4718-9a0b-1c2d3e4f5a6b")


def core_event(ref: ObjectRef | None = None, reporter: str = NODE, **changes: Any) -> dict[str, Any]:
    """A core/v1 Event as evictd's EventRecorder writes it, reported by `reporter`."""
    events = recorder(reporter)
    body = events.record(ref or POD_REF, "Warning", "Evicted", "The node was low on resource: memory.")
    assert body is not None
    body.update(changes)
    return unstructured(body)


def explained_event() -> dict[str, Any]:
    """An Evicted Event as evictd writes it with the flight recorder on: the decision id among its annotations."""
    event = core_event()
    event["metadata"]["annotations"] = {"offending_containers": "app", "evictd.io/decision": "20261123T100000Z-42/7"}
    return event


def node_event(about: str = NODE, reporter: str = NODE) -> dict[str, Any]:
    ref = ObjectRef(kind="Node", name=about, namespace="", uid=about)
    body = recorder(reporter).record(ref, "Normal", "NodeHasInsufficientMemory",
                                     f"Node {about} status is now: NodeHasInsufficientMemory")
    assert body is not None
    return unstructured(body)


def create_core_event(event: dict[str, Any]) -> Review:
    request = admission_request("CREATE", "events", event["metadata"]["name"],
                                namespace=event["metadata"]["namespace"])
    return Review(request, event, None)


def repeat_core_event(old: dict[str, Any], **changes: Any) -> Review:
    """The count bump of a repeated event: evictd's strategic merge {count, lastTimestamp, message} applied to
    `old`."""
    events = recorder()
    involved = old["involvedObject"]
    ref = ObjectRef(kind=involved["kind"], name=involved["name"], namespace=involved.get("namespace", ""),
                    uid=involved["uid"])
    events.record(ref, old["type"], old["reason"], old["message"])
    patch = events.record(ref, old["type"], old["reason"], old["message"])
    assert patch is not None and set(patch) == {"count", "lastTimestamp", "message"}
    new = {**copy.deepcopy(old), **patch, **changes}
    request = admission_request("UPDATE", "events", old["metadata"]["name"], namespace=old["metadata"]["namespace"])
    return Review(request, unstructured(new), old)


def events_event(regarding_kind: str = "Pod", regarding_name: str = "web-0", reporter: str = NODE) -> dict[str, Any]:
    """An events.k8s.io/v1 Event as a recorder of that API writes it."""
    regarding: dict[str, Any] = {"kind": regarding_kind, "name": regarding_name, "apiVersion": "v1",
                                 "uid": "1b2c3d4e-5f60-4718-9a0b-1c2d3e4f5a6b"}
    if regarding_kind == "Pod":
        regarding["namespace"] = "shop"
    return unstructured({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{regarding_name}.18a2b3c4d5e6f708", "namespace": "shop" if regarding_kind == "Pod"
                     else "default"},
        "eventTime": "2026-03-01T12:00:00.000000Z",
        "reportingController": "evictd",
        "reportingInstance": reporter,
        "action": "Evicting",
        "reason": "Evicted",
        "regarding": regarding,
        "note": "The node was low on resource: memory.",
        "type": "Warning",
    })


def create_events_event(event: dict[str, Any]) -> Review:
    request = admission_request("CREATE", "events", event["metadata"]["name"], group="events.k8s.io",
                                namespace=event["metadata"]["namespace"])
    return Review(request, event, None)


def update_events_event(old: dict[str, Any], **changes: Any) -> Review:
    new = {**copy.deepcopy(old), "series": {"count": 2, "lastObservedTime": "2026-03-01T12:05:00.000000Z"},
           **changes}
    request = admission_request("UPDATE", "events", old["metadata"]["name"], group="events.k8s.io",
                                namespace=old["metadata"]["namespace"])
    return Review(request, unstructured(new), old)


# ----------------------------------------------------------------------------------------------- leases

LEASE_NAMESPACE = "evictd-system"
HOLDER = f"evictd-x7k2p/boot-a/{4242}"
OTHER_HOLDER = "evictd-q9z8w/boot-b/777"
LEASE_NOW = datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC)


def stored_lease(name: str = NODE, holder: str = HOLDER) -> dict[str, Any]:
    """A Lease as stored: evictd's create, with what the API server added."""
    lease = new_lease(LEASE_NAMESPACE, name, holder, 40, datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC))
    lease["metadata"].update(uid="5e4d3c2b-1a09-4f8e-b7d6-c5b4a3928170", resourceVersion="812",
                             creationTimestamp=NOW)
    return unstructured(lease)


def create_lease(name: str) -> Review:
    """CREATE of evictd's Lease for node `name` (`node_lease.new_lease`)."""
    lease = new_lease(LEASE_NAMESPACE, name, HOLDER, 40, LEASE_NOW)
    request = admission_request("CREATE", "leases", name, group="coordination.k8s.io", namespace=LEASE_NAMESPACE,
                                kind="Lease")
    return Review(request, unstructured(lease), None)


def update_lease(old: dict[str, Any], change: Callable[[dict[str, Any]], dict[str, Any]]) -> Review:
    """UPDATE (PUT) of a stored Lease as evictd renews or takes it."""
    request = admission_request("UPDATE", "leases", old["metadata"]["name"], group="coordination.k8s.io",
                                namespace=LEASE_NAMESPACE, kind="Lease")
    return Review(request, unstructured(change(copy.deepcopy(old))), old)


def renew(lease: dict[str, Any]) -> dict[str, Any]:
    return renewed_lease(lease, 40, LEASE_NOW)


def take(lease: dict[str, Any]) -> dict[str, Any]:
    return taken_lease(lease, HOLDER, 40, LEASE_NOW)


# ------------------------------------------------------------------------------------------------ table


@dataclass(frozen=True)
class Case:
    id: str
    review: Callable[[], Review]
    allowed: bool
    says: str = ""  # a fragment of the (first) refusal's message
    standard_mode: bool = False  # evaluated with the policy adjusted for nodeConditionMode: standard
    extra: Mapping[str, list[str]] | None = field(default_factory=lambda: POD_TOKEN)


NO_NODE = "carries no node"
MEM = NodeCondition.MEMORY_PRESSURE

CASES = [
    # ---- pods: DELETE
    Case("delete a pod on its node", lambda: delete_pod(pod()), True),
    Case("delete a pod on another node", lambda: delete_pod(pod(node=OTHER_NODE)), False,
         "evictd on node node-a may only delete or update the status of pods bound to that node; "
         "pod shop/web-0 is bound to node node-b"),
    Case("delete an unscheduled pod", lambda: delete_pod(pod(node=None)), False, "is bound to no node"),
    Case("delete with a Secret token", lambda: delete_pod(pod()), False, NO_NODE, extra=SECRET_TOKEN),
    Case("delete with an unbound token", lambda: delete_pod(pod()), False, NO_NODE, extra=UNBOUND_TOKEN),
    Case("delete with two node names", lambda: delete_pod(pod()), False, NO_NODE,
         extra={**POD_TOKEN, "authentication.kubernetes.io/node-name": [NODE, OTHER_NODE]}),
    # ---- pods/eviction: a soft eviction through the Eviction API (the pod's node is not visible: README)
    Case("evict a pod with a UID precondition and a grace period", lambda: evict_pod(pod()), True),
    Case("evict without a UID precondition", lambda: evict_pod(pod(), preconditions=None), False,
         "may only evict the pod it names with a UID precondition"),
    Case("evict with a forced deletion", lambda: evict_pod(pod(), gracePeriodSeconds=0), False,
         "a grace period of at least 1 s"),
    Case("evict with a Secret token", lambda: evict_pod(pod()), False, NO_NODE, extra=SECRET_TOKEN),
    # ---- pods/status: the DisruptionTarget condition only
    Case("add DisruptionTarget on its node", lambda: patch_pod_status(pod(), add_conditions(disruption_target())),
         True),
    Case("rewrite its own DisruptionTarget (a retry)",
         lambda: patch_pod_status(pod(conditions=[disruption_target(at=EARLIER)]),
                                  add_conditions(disruption_target())), True),
    Case("replace the scheduler's DisruptionTarget",
         lambda: patch_pod_status(pod(conditions=[disruption_target("PreemptionByScheduler", EARLIER)]),
                                  add_conditions(disruption_target())), True),
    Case("add DisruptionTarget on another node",
         lambda: patch_pod_status(pod(node=OTHER_NODE), add_conditions(disruption_target())), False,
         "is bound to node node-b"),
    Case("add DisruptionTarget with a Secret token",
         lambda: patch_pod_status(pod(), add_conditions(disruption_target())), False, NO_NODE, extra=SECRET_TOKEN),
    Case("set phase Failed", lambda: patch_pod_status(pod(), set_status(phase="Failed")), False,
         "status.phase, status.reason or status.message"),
    Case("set reason Evicted", lambda: patch_pod_status(pod(), set_status(reason="Evicted")), False,
         "status.phase, status.reason or status.message"),
    Case("set a message", lambda: patch_pod_status(pod(), set_status(message="The node was low on memory.")),
         False, "status.phase, status.reason or status.message"),
    Case("flip Ready", lambda: patch_pod_status(pod(), with_conditions(set_condition("Ready", status="False"))),
         False, "no pod condition other than DisruptionTarget"),
    Case("drop a condition",
         lambda: patch_pod_status(pod(), with_conditions(lambda cs: [c for c in cs if c["type"] != "Initialized"])),
         False, "no pod condition other than DisruptionTarget"),
    Case("add another condition",
         lambda: patch_pod_status(pod(), add_conditions(disruption_target(),
                                                        {"type": "example.com/Drained", "status": "True"})),
         False, "no pod condition other than DisruptionTarget"),
    Case("DisruptionTarget with another reason",
         lambda: patch_pod_status(pod(), add_conditions(disruption_target("EvictionByEvictionAPI"))), False,
         "reason TerminationByKubelet"),
    Case("DisruptionTarget removed",
         lambda: patch_pod_status(pod(conditions=[disruption_target(at=EARLIER)]),
                                  lambda p: p["status"].pop("conditions")), False, "may not remove it"),
    Case("a pod label through the status", lambda: patch_pod_status(
        pod(), lambda p: (add_conditions(disruption_target())(p), with_metadata(labels={"app": "db"})(p))), False,
        "labels, annotations, owner references or finalizers"),
    Case("a pod finalizer through the status", lambda: patch_pod_status(
        pod(), with_metadata(finalizers=["example.com/hold"])), False,
        "labels, annotations, owner references or finalizers"),
    # ---- nodes: the evictd.io/* taints only
    Case("add its taint", lambda: patch_node(node(), evictd_taints(MEM)), True),
    Case("add its taint to an untainted node", lambda: patch_node(node(taints=[]), evictd_taints(MEM)), True),
    Case("remove its taint", lambda: patch_node(evicted_node(node(), MEM), evictd_taints()), True),
    Case("remove its last taint",
         lambda: patch_node(evicted_node(node(taints=[]), MEM), evictd_taints()), True),
    Case("standard mode removes evictd's taints",
         lambda: patch_node(evicted_node(node(), MEM), evictd_taints(MEM, mode=ConditionMode.STANDARD)), True),
    Case("taint another node", lambda: patch_node(node(OTHER_NODE), evictd_taints(MEM)), False,
         "evictd on node node-a may only patch its own Node, not node-b"),
    Case("taint with a Secret token", lambda: patch_node(node(), evictd_taints(MEM)), False, NO_NODE,
         extra=SECRET_TOKEN),
    Case("remove a foreign taint", lambda: patch_node(node(), taints(lambda ts: ts[1:])), False,
         "only taints whose key starts with evictd.io/"),
    Case("add a foreign taint", lambda: patch_node(node(), taints(lambda ts: [
        *ts, {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}])), False,
         "only taints whose key starts with evictd.io/"),
    Case("change a foreign taint's effect", lambda: patch_node(node(), taints(lambda ts: [
        {**ts[0], "effect": "NoExecute"}, *ts[1:]])), False, "only taints whose key starts with evictd.io/"),
    Case("an evictd.io taint that evicts", lambda: patch_node(node(), taints(lambda ts: [
        *ts, {"key": "evictd.io/memory-pressure", "effect": "NoExecute"}])), False, "effect NoSchedule"),
    Case("cordon", lambda: patch_node(node(), set_spec(unschedulable=True)), False, "spec.unschedulable"),
    Case("change the pod CIDR", lambda: patch_node(node(), set_spec(podCIDR="10.244.9.0/24",
                                                                    podCIDRs=["10.244.9.0/24"])), False,
         "spec.podCIDR"),
    Case("change the provider ID", lambda: patch_node(node(), set_spec(providerID="aws:///x")), False,
         "spec.providerID"),
    Case("label the node", lambda: patch_node(node(), with_metadata(labels={"kubernetes.io/os": "linux",
                                                                            "role": "db"})), False,
         "labels, annotations"),
    Case("annotate the node", lambda: patch_node(node(), with_metadata(annotations={"a": "b"})), False,
         "labels, annotations"),
    Case("give the node an owner", lambda: patch_node(node(), with_metadata(ownerReferences=[
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-000000000000"}])),
         False, "owner references"),
    # ---- nodes/status: the Evictd* conditions only
    Case("write its conditions", lambda: patch_node_status(node(), evictd_conditions(MEM)), True),
    Case("update its conditions",
         lambda: patch_node_status(evicted_node(node(), MEM), evictd_conditions(NodeCondition.DISK_PRESSURE)), True),
    Case("mark its conditions stopped", lambda: patch_node_status(evicted_node(node(), MEM), evictd_stopped), True),
    Case("write another node's conditions", lambda: patch_node_status(node(OTHER_NODE), evictd_conditions(MEM)),
         False, "may only patch its own Node, not node-b"),
    Case("write conditions with an unbound token", lambda: patch_node_status(node(), evictd_conditions(MEM)),
         False, NO_NODE, extra=UNBOUND_TOKEN),
    Case("standard mode, shipped policy",
         lambda: patch_node_status(node(), evictd_conditions(MEM, mode=ConditionMode.STANDARD)), False,
         "only its own node conditions"),
    Case("standard mode, adjusted policy",
         lambda: patch_node_status(node(), evictd_conditions(MEM, mode=ConditionMode.STANDARD)), True,
         standard_mode=True),
    Case("standard mode, adjusted policy, Ready",
         lambda: patch_node_status(node(), node_conditions(set_condition("Ready", status="False"))), False,
         "only its own node conditions", standard_mode=True),
    Case("flip Ready", lambda: patch_node_status(node(), node_conditions(set_condition("Ready", status="False"))),
         False, "only its own node conditions"),
    Case("drop a kubelet condition", lambda: patch_node_status(node(), node_conditions(
        lambda cs: [c for c in cs if c["type"] != "PIDPressure"])), False, "only its own node conditions"),
    Case("change the capacity", lambda: patch_node_status(node(), node_status(
        capacity={"cpu": "64", "memory": "8124836Ki", "pods": "110", "ephemeral-storage": "61202244Ki"})),
         False, "status.capacity"),
    Case("change the allocatable", lambda: patch_node_status(node(), node_status(allocatable={"pods": "0"})),
         False, "status.allocatable"),
    Case("change the addresses", lambda: patch_node_status(node(), node_status(
        addresses=[{"type": "InternalIP", "address": "10.9.9.9"}])), False, "status.addresses"),
    Case("change the kubelet port", lambda: patch_node_status(node(), node_status(
        daemonEndpoints={"kubeletEndpoint": {"Port": 10251}})), False, "status.daemonEndpoints"),
    Case("change the node info", lambda: patch_node_status(node(), node_status(
        nodeInfo={**node()["status"]["nodeInfo"], "kubeletVersion": "v1.99.0"})), False, "status.nodeInfo"),
    Case("a node label through the status", lambda: patch_node_status(node(), lambda n: (
        evictd_conditions(MEM)(n), with_metadata(labels={"role": "db"})(n))), False, "labels, annotations"),
    # ---- core/v1 events
    Case("create a pod event", lambda: create_core_event(core_event()), True),
    Case("create a node event", lambda: create_core_event(node_event()), True),
    Case("create a pod event naming its decision", lambda: create_core_event(explained_event()), True),
    Case("repeat a pod event", lambda: repeat_core_event(core_event()), True),
    Case("repeat a node event", lambda: repeat_core_event(node_event()), True),
    Case("a pod event from another host", lambda: create_core_event(core_event(reporter=OTHER_NODE)), False,
         "evictd on node node-a may only write events whose source.host is that node"),
    Case("a pod event without a host", lambda: create_core_event(
        core_event(source={"component": "evictd"})), False, "source.host"),
    Case("an event about another node", lambda: create_core_event(node_event(about=OTHER_NODE)), False,
         "may only write events about that Node, not node-b"),
    Case("take over another node's event", lambda: repeat_core_event(
        core_event(reporter=OTHER_NODE), source={"component": "evictd", "host": NODE}), False, "source.host"),
    Case("retarget a node event", lambda: repeat_core_event(
        node_event(), involvedObject={"kind": "Node", "name": OTHER_NODE, "uid": OTHER_NODE}), False,
         "events about that Node"),
    Case("an event with a Secret token", lambda: create_core_event(core_event()), False, NO_NODE,
         extra=SECRET_TOKEN),
    # ---- events.k8s.io/v1 events
    Case("create an events.k8s.io pod event", lambda: create_events_event(events_event()), True),
    Case("create an events.k8s.io node event", lambda: create_events_event(events_event("Node", NODE)), True),
    Case("update an events.k8s.io event", lambda: update_events_event(events_event()), True),
    Case("an events.k8s.io event from another instance",
         lambda: create_events_event(events_event(reporter=OTHER_NODE)), False, "reportingInstance"),
    Case("an events.k8s.io event about another node",
         lambda: create_events_event(events_event("Node", OTHER_NODE)), False, "events about its own Node"),
    Case("take over another instance's events.k8s.io event",
         lambda: update_events_event(events_event(reporter=OTHER_NODE), reportingInstance=NODE), False,
         "reportingInstance"),
    Case("an events.k8s.io event with an unbound token", lambda: create_events_event(events_event()), False,
         NO_NODE, extra=UNBOUND_TOKEN),
    # ---- coordination.k8s.io/v1 leases: the one named after its node
    Case("create its node's lease", lambda: create_lease(NODE), True),
    Case("renew its node's lease", lambda: update_lease(stored_lease(), renew), True),
    Case("take over its node's lease from another holder",
         lambda: update_lease(stored_lease(holder=OTHER_HOLDER), take), True),
    Case("create another node's lease", lambda: create_lease(OTHER_NODE), False,
         "evictd on node node-a may only write the Lease named after that node, not node-b"),
    Case("renew another node's lease", lambda: update_lease(stored_lease(OTHER_NODE), renew), False,
         "may only write the Lease named after that node, not node-b"),
    Case("take over another node's lease", lambda: update_lease(stored_lease(OTHER_NODE, OTHER_HOLDER), take),
         False, "may only write the Lease named after that node"),
    Case("renew its lease with a Secret token", lambda: update_lease(stored_lease(), renew), False, NO_NODE,
         extra=SECRET_TOKEN),
]


def verdict(case: Case) -> Verdict:
    policy = standard_mode_policy() if case.standard_mode else shipped_policy()
    review = case.review().by(case.extra)
    return policy.review(review.request, review.object, review.old_object)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_policy_decides(case: Case) -> None:
    result = verdict(case)
    assert result.matched, "the policy must apply to every write evictd makes"
    assert result.allowed == case.allowed, result.refusals
    if not case.allowed:
        assert case.says in result.message, result.refusals
        assert "resulted in error" not in result.message, "a refusal must be the rule's, not an evaluation error"
    if case.extra is None or case.says == NO_NODE:
        assert result.refusals[0][0] == 0, "a token without a node is refused by the first validation"


def test_every_validation_refuses_something() -> None:
    """No dead rule: each validation is the first refusal of at least one case in the table."""
    first = {verdict(case).refusals[0][0] for case in CASES if not case.allowed}
    assert first == set(range(len(the_policy()["spec"]["validations"])))


def test_allowed_writes_pass_every_validation_without_error() -> None:
    for case in CASES:
        if case.allowed:
            assert verdict(case).refusals == (), case.id


@pytest.mark.parametrize(
    ("username", "extra"),
    [
        ("system:node:node-b", {}),  # the kubelet: its own NodeRestriction
        ("system:serviceaccount:kube-system:daemon-set-controller", {}),
        ("system:serviceaccount:evictd-system:default", POD_TOKEN),  # another account of evictd's namespace
        ("kubernetes-admin", {}),
    ],
)
def test_other_identities_are_not_matched(username: str, extra: dict[str, list[str]]) -> None:
    review = delete_pod(pod(node=OTHER_NODE)).by(extra, username=username)
    assert not shipped_policy().review(review.request, review.object, review.old_object).matched


@pytest.mark.parametrize(
    ("operation", "resource", "subresource", "group"),
    [
        ("UPDATE", "pods", "", ""),  # evictd never updates a pod's spec or metadata (nor may it: RBAC)
        ("CREATE", "pods", "", ""),
        ("DELETE", "nodes", "", ""),
        ("DELETE", "events", "", ""),
        ("UPDATE", "configmaps", "", ""),
    ],
)
def test_writes_evictd_does_not_make_are_left_to_rbac(operation: str, resource: str, subresource: str,
                                                      group: str) -> None:
    request = admission_request(operation, resource, "x", subresource=subresource, group=group)
    assert not shipped_policy().review(request, {}, {}).matched


def test_the_standard_mode_adjustment_is_the_documented_one() -> None:
    """The value the YAML comment and the README tell standard-mode users to set is the one tested above."""
    assert STANDARD_MODE_TYPES in POLICY_FILE.read_text(encoding="utf-8")
    assert STANDARD_MODE_TYPES in (K8S / "README.md").read_text(encoding="utf-8")
    shipped = {v["name"]: v["expression"] for v in the_policy()["spec"]["variables"]}
    assert shipped["extraNodeConditionTypes"] == "[]"


def test_an_expression_that_fails_refuses() -> None:
    """failurePolicy Fail as evaluated here: an evaluation error is a refusal, never an admission."""
    policy = copy.deepcopy(the_policy())
    policy["spec"]["validations"].append({"expression": "object.no.such.field == 1", "message": "m"})
    review = delete_pod(pod())
    result = Policy(policy).review(review.request, review.object, review.old_object)
    assert not result.allowed
    assert "resulted in error" in result.message


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("has(x.a)", True),
        ("has(x.missing)", False),
        ("true || x.missing == 1", True),
        ("x.missing == 1 || true", True),  # CEL's commutative || absorbs the error, as cel-go does
        ("(has(x.missing) ? x.missing : []) == []", True),
        ("[{'k': 'v'}] == [{'k': 'v'}]", True),
        ("[1, 2] == [2, 1]", False),  # a filtered list compares in order
        ("{'k': 'v'} in [{'k': 'v'}]", True),
        ("'evictd.io/memory-pressure'.startsWith('evictd.io/')", True),
        ("[1, 2, 3].filter(i, i != 2) == [1, 3]", True),
        ("'a' in []", False),
    ],
)
def test_the_evaluator_follows_cel(expression: str, expected: bool) -> None:
    env = celpy.Environment()
    result = env.program(env.compile(expression)).evaluate({"x": json_to_cel({"a": 1})})
    assert result == celtypes.BoolType(expected)


def test_a_missing_field_is_an_error() -> None:
    env = celpy.Environment()
    with pytest.raises(celpy.CELEvalError):
        env.program(env.compile("x.missing == 1")).evaluate({"x": json_to_cel({"a": 1})})

"""Per-resource rules of the real registry strategies (pkg/registry/core/{pod,node,event}) on JSON objects.

For pods, nodes and events this module holds what kube-apiserver does around storage: defaulting on create
(`SetDefaults_*` plus the Priority and DefaultTolerationSeconds admission plugins for pods), validation with
real field paths, what an update or a status update may change (`PrepareForUpdate` of the main and the
status strategy), the selectable fields (`*ToSelectableFields`), the pod graceful-delete period
(`podStrategy.CheckGracefulDelete`) and the events.k8s.io/v1 <-> core/v1 Event conversion (one storage, two
views, as upstream).

Functions take and return plain dicts; they never touch storage or time except through `now` arguments.
"""

from __future__ import annotations

import copy
import functools
import re
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from kube_status import FieldError

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS1123_SUBDOMAIN_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                             "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                             "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
                             "[a-z0-9])?)*')")

DEFAULT_TERMINATION_GRACE_PERIOD_S = 30  # SetDefaults_PodSpec
DEFAULT_TOLERATION_SECONDS = 300  # DefaultTolerationSeconds admission plugin default
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
EVENT_TYPES = ("Normal", "Warning")
QOS_RESOURCES = ("cpu", "memory")

_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[a-zA-Z]{0,2})$")


def quantity(text: Any) -> Fraction:
    """The value of a resource.Quantity string ("100m", "1Gi", "1e3") as an exact fraction."""
    return _quantity(str(text))


@functools.lru_cache(maxsize=4096)  # pods of thousands of containers repeat a few quantities
def _quantity(text: str) -> Fraction:
    match = _QUANTITY.match(text)
    if not match or (match.group(2) and match.group(2)[0] not in "eE" and match.group(2) not in _SUFFIXES):
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIXES[suffix]


def pod_qos_class(pod: dict[str, Any]) -> str:
    """`ComputePodQOS` over containers and init containers (cpu and memory only)."""
    spec = pod.get("spec") or {}
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for name, value in (resources.get("requests") or {}).items():
            if name in QOS_RESOURCES and quantity(value) > 0:
                requests[name] = requests.get(name, Fraction(0)) + quantity(value)
        found = set()
        for name, value in (resources.get("limits") or {}).items():
            if name in QOS_RESOURCES and quantity(value) > 0:
                found.add(name)
                limits[name] = limits.get(name, Fraction(0)) + quantity(value)
        if not found >= set(QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(n) == v for n, v in requests.items()) and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


def _default_container(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = str(container.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    resources = container.setdefault("resources", {})
    # SetDefaults_Pod: a limit without a request makes the request equal to the limit.
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def default_pod(pod: dict[str, Any]) -> None:
    """Fill the spec defaults kube-apiserver writes on create (defaulting and admission), in place."""
    spec = pod.setdefault("spec", {})
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        _default_container(container)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_PERIOD_S)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    # Priority admission: no priorityClassName and no global default class -> priority 0.
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key and t.get("effect") in ("NoExecute", None, "") for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})


def prepare_pod_for_create(pod: dict[str, Any]) -> None:
    """`podStrategy.PrepareForCreate`: the status a client sends is dropped; Pending with the computed QoS."""
    default_pod(pod)
    pod["status"] = {"phase": "Pending", "qosClass": pod_qos_class(pod)}


def validate_object_name(meta: dict[str, Any]) -> list[FieldError]:
    """`ValidateObjectMeta` name checks (every resource here names objects as DNS-1123 subdomains)."""
    errors: list[FieldError] = []
    name = meta.get("name") or ""
    if not name:
        errors.append(FieldError("required", "metadata.name", "name or generateName is required"))
    elif not DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        errors.append(FieldError("invalid", "metadata.name", DNS1123_SUBDOMAIN_MESSAGE, name))
    return errors


def validate_pod(pod: dict[str, Any]) -> list[FieldError]:
    """The parts of `ValidatePodCreate` that a hand-written test pod can get wrong."""
    errors: list[FieldError] = []
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        errors.append(FieldError("required", "spec.containers", ""))
    seen: set[str] = set()
    for group in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(group) or []):
            path = f"spec.{group}[{index}]"
            name = container.get("name") or ""
            if not name:
                errors.append(FieldError("required", f"{path}.name", ""))
            elif name in seen:
                errors.append(FieldError("duplicate", f"{path}.name", "", name))
            seen.add(name)
            if not container.get("image"):
                errors.append(FieldError("required", f"{path}.image", ""))
    policy = spec.get("restartPolicy")
    if policy not in ("Always", "OnFailure", "Never"):
        errors.append(FieldError("unsupported", "spec.restartPolicy", "", policy,
                                 ("Always", "OnFailure", "Never")))
    return errors


POD_UPDATE_FORBIDDEN = ("pod updates may not change fields other than `spec.containers[*].image`,"
                        "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
                        "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
                        "to 1 if it was previously negative)")


def validate_pod_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """`ValidatePodUpdate`: only images, activeDeadlineSeconds and added tolerations may change in the spec."""
    errors = validate_pod(new)
    new_spec, old_spec = copy.deepcopy(new.get("spec") or {}), old.get("spec") or {}
    for group in ("containers", "initContainers"):
        for index, container in enumerate(new_spec.get(group) or []):
            olds = old_spec.get(group) or []
            if index < len(olds):
                container["image"] = olds[index].get("image")
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if all(t in new_tolerations for t in old_tolerations):
        new_spec["tolerations"] = old_tolerations
    new_spec["activeDeadlineSeconds"] = old_spec.get("activeDeadlineSeconds")
    old_compare = dict(old_spec, activeDeadlineSeconds=old_spec.get("activeDeadlineSeconds"))
    if new_spec != old_compare:
        errors.append(FieldError("forbidden", "spec", POD_UPDATE_FORBIDDEN))
    return errors


def validate_pod_status(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """The status checks of `ValidatePodStatusUpdate` that matter here: phase values, condition types, QoS."""
    errors: list[FieldError] = []
    status = new.get("status") or {}
    phase = status.get("phase")
    if phase is not None and phase not in POD_PHASES:
        errors.append(FieldError("unsupported", "status.phase", "", phase, POD_PHASES))
    for index, condition in enumerate(status.get("conditions") or []):
        if not condition.get("type"):
            errors.append(FieldError("required", f"status.conditions[{index}].type", ""))
    old_qos = (old.get("status") or {}).get("qosClass")
    if old_qos and status.get("qosClass") != old_qos:
        errors.append(FieldError("invalid", "status.qosClass", "field is immutable", status.get("qosClass")))
    return errors


def pod_fields(pod: dict[str, Any]) -> dict[str, str]:
    """`PodToSelectableFields`."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ips = status.get("podIPs") or []
    return {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.restartPolicy": spec.get("restartPolicy", ""),
        "spec.schedulerName": spec.get("schedulerName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
        "status.phase": status.get("phase", ""),
        "status.podIP": ips[0].get("ip", "") if ips else status.get("podIP", ""),
        "status.podIPs": ips[0].get("ip", "") if ips else "",
        "status.nominatedNodeName": status.get("nominatedNodeName", ""),
    }


def node_fields(node: dict[str, Any]) -> dict[str, str]:
    """`NodeToSelectableFields`."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    return {"metadata.name": meta.get("name", ""), "spec.unschedulable": "true" if spec.get("unschedulable") else "false"}


# metav1.MicroTime's UnmarshalJSON parses with RFC3339Micro: exactly six fraction digits.
MICRO_TIME_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
_RFC3339_MICRO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")


def micro_time_problem(obj: dict[str, Any], kind: str, keys: tuple[str, ...]) -> str | None:
    """The decoding error of the first of `obj["spec"][key]` that is not an RFC3339Micro time, worded as the
    API server words it (400 BadRequest), or None."""
    spec = obj.get("spec") or {}
    for key in keys:
        value = spec.get(key)
        if isinstance(value, str) and not _RFC3339_MICRO.match(value):
            fraction = re.search(r"(\.\d*)?(Z|[+-]\d{2}:\d{2})?$", value)
            rest = fraction.group(0) if fraction and fraction.group(0) else value[19:]
            return (f'{kind} in version "v1" cannot be handled as a {kind}: parsing time "{value}" as '
                    f'"{MICRO_TIME_LAYOUT}": cannot parse "{rest}" as ".000000"')
    return None


def generic_fields(obj: dict[str, Any]) -> dict[str, str]:
    """`DefaultNamespaceScopedAttr`: what any namespaced resource without its own selectable fields offers."""
    meta = obj.get("metadata") or {}
    return {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", "")}


def validate_lease(lease: dict[str, Any]) -> list[FieldError]:
    """`ValidateLeaseSpec` (pkg/apis/coordination/validation) without the feature-gated strategy fields."""
    errors: list[FieldError] = []
    spec = lease.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errors.append(FieldError("invalid", "spec.leaseDurationSeconds", "must be greater than 0", duration))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errors.append(FieldError("invalid", "spec.leaseTransitions", "must be greater than or equal to 0",
                                 transitions))
    return errors


def event_fields(event: dict[str, Any]) -> dict[str, str]:
    """`ToSelectableFields` of core/v1 Events (the events.k8s.io view selects on the same stored fields)."""
    meta, involved, source = event.get("metadata") or {}, event.get("involvedObject") or {}, event.get("source") or {}
    fields = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", "")}
    for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
        fields[f"involvedObject.{key}"] = involved.get(key, "")
    fields["reason"] = event.get("reason", "")
    fields["reportingComponent"] = event.get("reportingComponent", "")
    fields["source"] = source.get("component", "")
    fields["type"] = event.get("type", "")
    return fields


def pod_graceful_period(pod: dict[str, Any], requested_s: int | None) -> int:
    """`podStrategy.CheckGracefulDelete`: the grace period a delete of this pod gets."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    period = requested_s if requested_s is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName"):
        period = 0  # never scheduled: nothing to stop
    if status.get("phase") in ("Failed", "Succeeded"):
        period = 0  # already terminated
    return 1 if period < 0 else period


def validate_node(node: dict[str, Any]) -> list[FieldError]:
    """`ValidateNode` name and taint checks."""
    errors: list[FieldError] = []
    for index, taint in enumerate((node.get("spec") or {}).get("taints") or []):
        if not taint.get("key"):
            errors.append(FieldError("required", f"spec.taints[{index}].key", ""))
        effect = taint.get("effect")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append(FieldError("unsupported", f"spec.taints[{index}].effect", "", effect,
                                     ("NoSchedule", "PreferNoSchedule", "NoExecute")))
    return errors


def validate_event(event: dict[str, Any], group: str) -> list[FieldError]:
    """`ValidateEventCreate` for a request to core/v1 (legacy checks only) or events.k8s.io/v1 (strict)."""
    errors: list[FieldError] = []
    meta = event.get("metadata") or {}
    namespace = meta.get("namespace", "")
    involved = event.get("involvedObject") or {}
    if not event.get("eventTime"):
        if not involved.get("namespace"):
            if namespace not in ("", "default"):
                errors.append(FieldError("invalid", "involvedObject.namespace", "does not match event.namespace",
                                         involved.get("namespace", "")))
        elif namespace != involved.get("namespace"):
            errors.append(FieldError("invalid", "involvedObject.namespace", "does not match event.namespace",
                                     involved.get("namespace", "")))
    else:
        if not involved.get("namespace") and namespace not in ("default", "kube-system"):
            errors.append(FieldError("invalid", "involvedObject.namespace", "does not match event.namespace",
                                     involved.get("namespace", "")))
        controller = event.get("reportingComponent", "")
        if not controller:
            errors.append(FieldError("required", "reportingController", ""))
        elif not QUALIFIED_NAME.match(controller.rpartition("/")[2]):
            errors.append(FieldError("invalid", "reportingController", "name part must consist of alphanumeric "
                                     "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                                     "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                                     "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')", controller))
        for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
            value = event.get(field, "")
            if not value:
                errors.append(FieldError("required", field, ""))
            elif len(value) > limit:
                errors.append(FieldError("invalid", field, f"can have at most {limit} characters", ""))
        if len(event.get("message", "")) > 1024:
            errors.append(FieldError("invalid", "message", "can have at most 1024 characters", ""))
    if not DNS1123_SUBDOMAIN.match(namespace):
        errors.append(FieldError("invalid", "namespace", DNS1123_SUBDOMAIN_MESSAGE, namespace))
    if group != "events.k8s.io":
        return errors
    series = event.get("series")
    if series is not None:
        if int(series.get("count") or 0) < 2:
            errors.append(FieldError("invalid", "series.count", "should be at least 2", ""))
        if not series.get("lastObservedTime"):
            errors.append(FieldError("required", "series.lastObservedTime", ""))
    if not event.get("eventTime"):
        errors.append(FieldError("required", "eventTime", ""))
    if event.get("type") not in EVENT_TYPES:
        errors.append(FieldError("invalid", "type", f"has invalid value: {event.get('type', '')}", ""))
    for field in ("firstTimestamp", "lastTimestamp"):
        if event.get(field):
            errors.append(FieldError("invalid", field, "needs to be unset", ""))
    if event.get("count"):
        errors.append(FieldError("invalid", "count", "needs to be unset", ""))
    if (event.get("source") or {}).get("component") or (event.get("source") or {}).get("host"):
        errors.append(FieldError("invalid", "source", "needs to be unset", ""))
    return errors


# events.k8s.io/v1 field -> core/v1 field (k8s.io/kubernetes/pkg/apis/events/v1 conversion).
EVENTS_V1_TO_CORE = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
CORE_TO_EVENTS_V1 = {core: v1 for v1, core in EVENTS_V1_TO_CORE.items()}
_SHARED_EVENT_FIELDS = ("metadata", "eventTime", "series", "action", "reason", "related", "reportingInstance", "type")


def event_from_events_v1(event: dict[str, Any]) -> dict[str, Any]:
    """The stored core/v1 form of an events.k8s.io/v1 Event."""
    core: dict[str, Any] = {"kind": "Event", "apiVersion": "v1"}
    for key, value in event.items():
        if key in _SHARED_EVENT_FIELDS:
            core[key] = copy.deepcopy(value)
        elif key in EVENTS_V1_TO_CORE:
            core[EVENTS_V1_TO_CORE[key]] = copy.deepcopy(value)
    core.setdefault("involvedObject", {})
    return core


def event_to_events_v1(core: dict[str, Any]) -> dict[str, Any]:
    """The events.k8s.io/v1 view of a stored core/v1 Event (eventTime is always present in that schema)."""
    event: dict[str, Any] = {"kind": "Event", "apiVersion": "events.k8s.io/v1"}
    for key, value in core.items():
        if key in _SHARED_EVENT_FIELDS:
            event[key] = copy.deepcopy(value)
        elif key in CORE_TO_EVENTS_V1 and value not in ({}, None, 0, ""):
            event[CORE_TO_EVENTS_V1[key]] = copy.deepcopy(value)
    event.setdefault("eventTime", None)
    return event


def default_core_event(event: dict[str, Any]) -> None:
    """Core/v1 events always serialise these (non-omitempty fields of the Go type)."""
    event.setdefault("involvedObject", {})
    event.setdefault("source", {})
    event.setdefault("firstTimestamp", None)
    event.setdefault("lastTimestamp", None)
    event.setdefault("eventTime", None)
    event.setdefault("reportingComponent", "")
    event.setdefault("reportingInstance", "")


# Keys whose values are metav1.Time (RFC 3339, whole seconds) or metav1.MicroTime (microseconds) in these objects.
TIME_KEYS = frozenset({"creationTimestamp", "deletionTimestamp", "lastTransitionTime", "lastProbeTime",
                       "lastHeartbeatTime", "startTime", "startedAt", "finishedAt", "timeAdded", "firstTimestamp",
                       "lastTimestamp", "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "time"})
MICRO_TIME_KEYS = frozenset({"eventTime", "lastObservedTime", "acquireTime", "renewTime"})


def _normal_time(value: str, micro: bool) -> str:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value  # left as sent; clients only ever send what they read or RFC 3339
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def normalize_times(value: Any) -> Any:
    """Rewrite time fields the way decoding into metav1.Time/MicroTime and encoding back does, in place.

    The Python client sends datetimes as `2026-01-02T00:00:00+00:00`; the server stores and returns
    `2026-01-02T00:00:00Z` (Time drops sub-second digits, MicroTime keeps six).
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and key in TIME_KEYS:
                value[key] = _normal_time(item, micro=False)
            elif isinstance(item, str) and key in MICRO_TIME_KEYS:
                value[key] = _normal_time(item, micro=True)
            else:
                normalize_times(item)
    elif isinstance(value, list):
        for item in value:
            normalize_times(item)
    return value

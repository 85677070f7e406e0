"""Eviction messages and event annotations, byte-exact with the kubelet (KUBELET_SPEC §11, helpers.go).

Formats are upstream's constants verbatim (trailing spaces included); usage prints as BinarySI quantities of whole
bytes (``1k``, ``700Mi``), requests in their parsed format, a missing request as ``0``; Go's ``%q`` is `go_quote`.
Annotations only when the pod has stats; local-storage messages carry none.
"""

from __future__ import annotations

import unicodedata

from evictd.core.pods import Pod
from evictd.core.quantity import ZERO, Quantity, QuantityFormat
from evictd.core.resources import is_pod_level_resources_set
from evictd.core.signals import Resource
from evictd.core.summary import ContainerStats, PodStats

# Event annotation keys (helpers.go constants).
OFFENDING_CONTAINERS_KEY = "offending_containers"
OFFENDING_CONTAINERS_USAGE_KEY = "offending_containers_usage"
OFFENDING_POD_KEY = "offending_pod"
OFFENDING_POD_USAGE_KEY = "offending_pod_usage"
STARVED_RESOURCE_KEY = "starved_resource"

NODE_LOW_MESSAGE_FMT = "The node was low on resource: {resource}. "
THRESHOLD_MET_MESSAGE_FMT = "Threshold quantity: {quantity}, available: {available}. "
CONTAINER_MESSAGE_FMT = (
    "Container {name} was using {usage}, request is {request}, has larger consumption of {resource}. "
)
POD_MESSAGE_FMT = "Pod {name} was using {usage}, request is {request}, has larger consumption of {resource}. "
EMPTY_DIR_MESSAGE_FMT = "Usage of EmptyDir volume {volume} exceeds the limit {limit}. "
POD_EPHEMERAL_MESSAGE_FMT = "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
CONTAINER_EPHEMERAL_MESSAGE_FMT = "Container {name} exceeded its local ephemeral storage limit {limit}. "

# strconv.Quote's short escapes.
_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}
_ASCII_CONTROL_END = 0x20
_ASCII_DELETE = 0x7F
_BMP_END = 0x10000


def go_quote(text: str) -> str:
    """Return `text` as Go's ``%q`` / strconv.Quote prints it: double-quoted, non-printables escaped."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char == " " or (
            code >= _ASCII_CONTROL_END and code != _ASCII_DELETE and unicodedata.category(char)[0] in "LMNPS"
        ):
            out.append(char)
        elif code < _ASCII_CONTROL_END or code == _ASCII_DELETE:
            out.append(f"\\x{code:02x}")
        elif code < _BMP_END:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _bytes(value: int) -> Quantity:
    return Quantity.from_int(value, QuantityFormat.BINARY_SI)


def _container_usage(stats: ContainerStats, resource: Resource) -> Quantity | None:
    """Usage the message compares with the request; None when the stats lack it or for inodes/pids."""
    if resource is Resource.EPHEMERAL_STORAGE:
        rootfs, logs = stats.rootfs, stats.logs
        if rootfs is None or rootfs.used_bytes is None or logs is None or logs.used_bytes is None:
            return None
        return _bytes(rootfs.used_bytes + logs.used_bytes)
    if resource is Resource.MEMORY:
        if stats.memory is None or stats.memory.working_set_bytes is None:
            return None
        return _bytes(stats.memory.working_set_bytes)
    return None


def eviction_message(
    resource: Resource,
    pod: Pod,
    stats: PodStats | None,
    threshold_quantity: Quantity | None,
    available: Quantity | None,
) -> tuple[str, dict[str, str]]:
    """Return the kubelet's eviction message for `pod` and the Event annotations (evictionMessage).
    `threshold_quantity`/`available` are getThresholdMetInfo's (None for both: that sentence is left out); without
    stats the message stops after the threshold sentence and the annotations are empty."""
    annotations: dict[str, str] = {}
    message = NODE_LOW_MESSAGE_FMT.format(resource=resource.value)
    if threshold_quantity is not None and available is not None:
        message += THRESHOLD_MET_MESSAGE_FMT.format(quantity=threshold_quantity, available=available)
    if stats is None:
        return message, annotations

    if resource is Resource.MEMORY:
        # The pod-level spec.resources.requests.memory, when pod-level resources are set.
        pod_request = pod.pod_level_requests.get(resource.value) if is_pod_level_resources_set(pod) else None
        if pod_request is not None and stats.memory is not None:
            pod_usage = _bytes(stats.memory.working_set_bytes or 0)
            message += POD_MESSAGE_FMT.format(
                name=pod.name, usage=pod_usage, request=pod_request, resource=resource.value
            )
            annotations[OFFENDING_POD_KEY] = pod.name
            annotations[OFFENDING_POD_USAGE_KEY] = str(pod_usage)

    # Regular, init and sidecar containers only: ephemeral containers cannot declare requests.
    containers = (*pod.containers, *pod.init_containers)
    offenders: list[str] = []
    usages: list[str] = []
    for container_stats in stats.containers:
        container = next((c for c in containers if c.name == container_stats.name), None)
        if container is None:
            continue
        request = container.requests.get(resource.value, ZERO)
        usage = _container_usage(container_stats, resource)
        if usage is not None and usage.cmp(request) > 0:
            message += CONTAINER_MESSAGE_FMT.format(
                name=container.name, usage=usage, request=request, resource=resource.value
            )
            offenders.append(container.name)
            usages.append(str(usage))
    annotations[OFFENDING_CONTAINERS_KEY] = ",".join(offenders)
    annotations[OFFENDING_CONTAINERS_USAGE_KEY] = ",".join(usages)
    annotations[STARVED_RESOURCE_KEY] = resource.value
    return message, annotations


def emptydir_limit_message(volume_name: str, size_limit: Quantity) -> str:
    """Return the emptyDir size-limit eviction message (both values Go-quoted)."""
    return EMPTY_DIR_MESSAGE_FMT.format(volume=go_quote(volume_name), limit=go_quote(str(size_limit)))


def pod_ephemeral_limit_message(limit: Quantity) -> str:
    """Return the pod ephemeral-storage limit eviction message (limit printed unquoted)."""
    return POD_EPHEMERAL_MESSAGE_FMT.format(limit=limit)


def container_ephemeral_limit_message(container_name: str, limit: Quantity) -> str:
    """Return the container ephemeral-storage limit eviction message (name bare, limit Go-quoted)."""
    return CONTAINER_EPHEMERAL_MESSAGE_FMT.format(name=container_name, limit=go_quote(str(limit)))

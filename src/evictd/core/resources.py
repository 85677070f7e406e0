"""What a pod requests and limits: the kubelet's request and limit arithmetic over a `Pod`.

Job: answer GetResourceRequestQuantity (`pod_request`, used to rank pods) and PodLimits (`pod_limit`, used by
local-storage evictions), and the pod-level-resources predicates the messages need. Requests of regular
containers and sidecars are summed, init containers count by their peak (KEP-753), pod-level spec.resources
replace the container values for the resources they support, and spec.overhead is added to non-zero totals.

Invariants:
- Pure functions of the pod: nothing is mutated. `pod_request` and `pod_limit` remember their answer on
  the pod object (`evictd.core.pods.derived`), so ranking a thousand unchanged pods every cycle does not
  redo the Quantity arithmetic.
- Quantity arithmetic is Go's `resource.Quantity.Add` (a zero receiver takes the addend's format, sums drop
  the cached input text) and entries Go copies are returned as the same object, so results print exactly
  as the kubelet prints them.
- Feature gates as current upstream ships them: PodLevelResources ON, sidecar containers ON, DRA
  node-allocatable resources OFF, in-place resize status ignored (the spec is what counts).

Sources (kubernetes/kubernetes master; KUBELET_SPEC §9.2, §12):
  staging/src/k8s.io/component-helpers/resource/helpers.go     PodRequests, PodLimits, sidecar aggregation,
                                                                IsPodLevelResourcesSet, IsPodLevelRequestsSet
  pkg/api/v1/resource/helpers.go                                GetResourceRequestQuantity
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from evictd.core.pods import Container, Derived, Pod, derived, is_restartable_init_container
from evictd.core.quantity import Quantity, QuantityFormat

# Resources that pod-level spec.resources may set (component-helpers supportedPodLevelResources + hugepages).
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
HUGEPAGES_PREFIX = "hugepages-"
# GetResourceRequestQuantity starts byte-valued resources as BinarySI, every other one as DecimalSI.
BINARY_RESOURCES = frozenset({"memory", "storage", "ephemeral-storage"})


def _add_opt(total: Quantity | None, addend: Quantity | None) -> Quantity | None:
    """Add two optional map entries the way addResourceList does (a missing entry is a copy of the other)."""
    if addend is None:
        return total
    return addend if total is None else total + addend


def _max_opt(current: Quantity | None, candidate: Quantity | None) -> Quantity | None:
    """Return maxResourceList's choice: the candidate when the entry is missing or strictly smaller."""
    if candidate is None:
        return current
    return candidate if current is None or candidate.cmp(current) > 0 else current


def _aggregate(
    pod: Pod, resource: str, pick: Callable[[Container], Mapping[str, Quantity]]
) -> Quantity | None:
    """Return aggregateContainerResourcesByFn for one resource, or None when no container sets it.

    Regular containers and sidecars are summed; init container i needs its own value plus every sidecar
    started before it; the pod needs the larger of the two (KEP-753).
    """
    total: Quantity | None = None
    for container in pod.containers:
        total = _add_opt(total, pick(container).get(resource))
    sidecars: Quantity | None = None
    init_peak: Quantity | None = None
    for container in pod.init_containers:
        own = pick(container).get(resource)
        if is_restartable_init_container(container):
            total = _add_opt(total, own)
            sidecars = _add_opt(sidecars, own)
            init_peak = _max_opt(init_peak, sidecars)
        else:
            init_peak = _max_opt(init_peak, _add_opt(own, sidecars))
    return _max_opt(total, init_peak)


def _is_pod_level_resource(resource: str) -> bool:
    return resource in POD_LEVEL_RESOURCES or resource.startswith(HUGEPAGES_PREFIX)


def _has_pod_level(resources: Mapping[str, Quantity]) -> bool:
    return any(_is_pod_level_resource(name) for name in resources)


def is_pod_level_resources_set(pod: Pod) -> bool:
    """Return True when spec.resources sets a request or limit for a resource pod-level resources support."""
    return pod.resources is not None and (
        _has_pod_level(pod.resources.requests) or _has_pod_level(pod.resources.limits)
    )


def pod_request(pod: Pod, resource: str) -> Quantity:
    """Return GetResourceRequestQuantity(pod, resource): the request the eviction ranking uses.

    When pod-level resources are set (for cpu, memory or hugepages), container requests are ignored
    altogether and only the pod-level request of a supported resource counts, so such a pod requests
    zero ephemeral-storage. Otherwise the KEP-753 aggregate of containers, sidecars and init containers.
    spec.overhead[resource] is added when the total is non-zero. A missing request is a zero quantity.
    """
    return derived(pod, (Derived.REQUEST, resource), lambda p: _pod_request(p, resource))


def _pod_request(pod: Pod, resource: str) -> Quantity:
    # None when no container requests the resource (a request of "0" still counts as made).
    aggregate = None if is_pod_level_resources_set(pod) else _aggregate(pod, resource, lambda c: c.requests)
    if pod.resources is not None and _is_pod_level_resource(resource) and _has_pod_level(pod.resources.requests):
        aggregate = pod.resources.requests.get(resource, aggregate)
    fmt = QuantityFormat.BINARY_SI if resource in BINARY_RESOURCES else QuantityFormat.DECIMAL_SI
    total = Quantity.from_int(0, fmt)
    if aggregate is not None:
        total = total + aggregate
    overhead = pod.overhead.get(resource)
    if overhead is not None and total.sign() != 0:
        total = total + overhead
    return total


def pod_limit(pod: Pod, resource: str) -> Quantity | None:
    """Return PodLimits(pod)[resource], or None when nothing limits that resource.

    The KEP-753 aggregate of container limits (sidecars summed, init containers by their peak), replaced by
    the pod-level limit for cpu/memory/hugepages when pod-level resources are set; spec.overhead is added
    only to a non-zero limit. A container limit of "0" still counts as "set" (the result is then zero).
    """
    return derived(pod, (Derived.LIMIT, resource), lambda p: _pod_limit(p, resource))


def _pod_limit(pod: Pod, resource: str) -> Quantity | None:
    limit = _aggregate(pod, resource, lambda container: container.limits)
    if is_pod_level_resources_set(pod) and _is_pod_level_resource(resource) and pod.resources is not None:
        limit = pod.resources.limits.get(resource, limit)
    overhead = pod.overhead.get(resource)
    if limit is not None and overhead is not None and limit.sign() != 0:
        limit = limit + overhead
    return limit

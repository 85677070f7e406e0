"""What a pod requests and limits: the kubelet's request and limit arithmetic over a `Pod`.

GetResourceRequestQuantity (`pod_request`, for ranking) and PodLimits (`pod_limit`, for local-storage evictions):
containers and sidecars summed, init containers by their peak (KEP-753), pod-level resources replacing them where
supported, overhead added to non-zero totals. Results are memoized on the pod (`derived`); arithmetic is Go's
`Quantity.Add`, so results print as the kubelet's. Gates as upstream ships them: PodLevelResources and sidecars ON,
DRA node-allocatable OFF. Sources: component-helpers resource/helpers.go (PodRequests, PodLimits);
pkg/api/v1/resource/helpers.go (GetResourceRequestQuantity); KUBELET_SPEC §9.2, §12.
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
    """Return aggregateContainerResourcesByFn for one resource (None when no container sets it): the larger of the
    summed containers and sidecars and each init container plus the sidecars before it (KEP-753)."""
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
    """Return GetResourceRequestQuantity(pod, resource): the pod-level request when pod-level resources are set
    (so no ephemeral-storage), else the KEP-753 aggregate; plus overhead when non-zero; missing is zero."""
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
    """Return PodLimits(pod)[resource], or None when nothing limits it: the KEP-753 aggregate or the pod-level limit,
    plus overhead when non-zero; a container limit "0" counts as set."""
    return derived(pod, (Derived.LIMIT, resource), lambda p: _pod_limit(p, resource))


def _pod_limit(pod: Pod, resource: str) -> Quantity | None:
    limit = _aggregate(pod, resource, lambda container: container.limits)
    if is_pod_level_resources_set(pod) and _is_pod_level_resource(resource) and pod.resources is not None:
        limit = pod.resources.limits.get(resource, limit)
    overhead = pod.overhead.get(resource)
    if limit is not None and overhead is not None and limit.sign() != 0:
        limit = limit + overhead
    return limit

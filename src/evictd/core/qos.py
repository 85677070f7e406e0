"""A pod's quality-of-service class and the oom_score_adj the kubelet gives its containers.

Job: answer GetPodQOS / ComputePodQOS (`qos_class`, `compute_qos_class`), which eviction ranking, admission
and the OOM policy depend on, and GetContainerOOMScoreAdjust (`oom_score_adj`).

Invariants:
- Only cpu and memory decide the class. When pod-level spec.resources is present (even empty) only its
  values count; otherwise containers and init containers are summed. A status.qosClass, once set, wins.
- oom_score_adj follows upstream's Go integer arithmetic (division truncates toward zero) and, like
  upstream, has no upper clamp; only an unknown container or a non-positive capacity raises (ValueError).
- Feature gates as current upstream ships them: PodLevelResources ON, sidecar containers ON,
  KubeletOOMScoreAdjTieBreak OFF.

Sources (kubernetes/kubernetes master; KUBELET_SPEC §9.3, §16):
  pkg/apis/core/v1/helper/qos/qos.go                            GetPodQOS / ComputePodQOS
  pkg/kubelet/qos/policy.go, helpers.go                         GetContainerOOMScoreAdjust
"""

from __future__ import annotations

from collections.abc import Mapping

from evictd.core.pods import Container, Pod, QOSClass, is_node_critical_pod, is_restartable_init_container
from evictd.core.quantity import Quantity
from evictd.core.resources import aggregate_container_requests, container_request, is_pod_level_requests_set

# policy.go: guaranteedOOMScoreAdj is -997 since kubelet OOM adjustments were spread (-998 in old releases).
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
KUBELET_OOM_SCORE_ADJ = -999
KUBE_PROXY_OOM_SCORE_ADJ = -999

# Only cpu and memory decide QoS (qos.go supportedQoSComputeResources).
QOS_COMPUTE_RESOURCES = ("cpu", "memory")


# --- QoS (pkg/apis/core/v1/helper/qos) ---------------------------------------------------------------------


def _accumulate_positive(into: dict[str, Quantity], resources: Mapping[str, Quantity]) -> set[str]:
    """Add every positive cpu/memory quantity of `resources` into `into`; return the names that were added."""
    found: set[str] = set()
    for name in QOS_COMPUTE_RESOURCES:
        quantity = resources.get(name)
        if quantity is not None and quantity.sign() > 0:
            found.add(name)
            previous = into.get(name)
            into[name] = quantity if previous is None else quantity + previous
    return found


def compute_qos_class(pod: Pod) -> QOSClass:
    """Return ComputePodQOS: the class computed from cpu and memory only, ignoring status.qosClass.

    When spec.resources is present (even empty) only the pod-level values count, so `resources: {}` makes a
    pod BestEffort whatever its containers set. Otherwise containers and init containers are summed.
    """
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}
    guaranteed = True
    if pod.resources is not None:
        _accumulate_positive(requests, pod.resources.requests)
        if pod.resources.limits:
            found = _accumulate_positive(limits, pod.resources.limits)
            guaranteed = len(found) == len(QOS_COMPUTE_RESOURCES)
    else:
        for container in (*pod.containers, *pod.init_containers):
            _accumulate_positive(requests, container.requests)
            found = _accumulate_positive(limits, container.limits)
            guaranteed = guaranteed and len(found) == len(QOS_COMPUTE_RESOURCES)
    if not requests and not limits:
        return QOSClass.BEST_EFFORT
    matching = len(requests) == len(limits) and all(
        name in limits and limits[name].cmp(quantity) == 0 for name, quantity in requests.items()
    )
    return QOSClass.GUARANTEED if guaranteed and matching else QOSClass.BURSTABLE


def qos_class(pod: Pod) -> QOSClass:
    """Return GetPodQOS: status.qosClass when set, else the computed class."""
    return pod.status_qos_class if pod.status_qos_class is not None else compute_qos_class(pod)


# --- oom_score_adj (pkg/kubelet/qos/policy.go) -------------------------------------------------------------


def _div_trunc(numerator: int, denominator: int) -> int:
    """Integer division truncating toward zero, as Go's int64 `/` does."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator > 0) else -quotient


def _memory_bytes(container: Container) -> int:
    """Return container.Resources.Requests.Memory().Value(): the memory request rounded up to whole bytes."""
    return container_request(container, "memory").ceil_int()


def _remaining_pod_memory_per_container(pod: Pod) -> int:
    """Return the pod-level memory request not claimed by containers, split evenly over all containers."""
    pod_memory = pod.resources.requests.get("memory") if pod.resources is not None else None
    container_count = len(pod.containers) + len(pod.init_containers)
    if pod_memory is None or pod_memory.sign() == 0 or container_count == 0:
        return 0
    claimed = aggregate_container_requests(pod, "memory")
    claimed_bytes = 0 if claimed is None else claimed.ceil_int()
    return _div_trunc(pod_memory.ceil_int() - claimed_bytes, container_count)


def _find_container(pod: Pod, name: str) -> tuple[Container, bool]:
    """Return the named container and whether it is a sidecar (init container, restartPolicy Always)."""
    for container in pod.containers:
        if container.name == name:
            return container, False
    for container in pod.init_containers:
        if container.name == name:
            return container, is_restartable_init_container(container)
    raise ValueError(f"pod {pod.key} has no container named {name!r}")


def oom_score_adj(pod: Pod, container_name: str, memory_capacity_bytes: int) -> int:
    """Return the oom_score_adj the kubelet gives the named container (GetContainerOOMScoreAdjust).

    Node-critical and Guaranteed pods get -997, BestEffort 1000; Burstable containers get
    1000 - 1000*request/capacity (Go integer division) with the unclaimed pod-level memory request spread
    evenly over all containers, a sidecar never above the smallest regular container, then raised to at
    least 3 and 1000 turned into 999. As upstream, there is no upper clamp: a pod-level memory request below
    the containers' sum (which API validation forbids) yields values above 1000. Raises ValueError for an
    unknown container or a non-positive capacity.
    """
    if memory_capacity_bytes <= 0:
        raise ValueError(f"memory capacity must be positive, got {memory_capacity_bytes}")
    container, sidecar = _find_container(pod, container_name)
    if is_node_critical_pod(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = qos_class(pod)
    if qos is QOSClass.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QOSClass.BEST_EFFORT:
        return BESTEFFORT_OOM_SCORE_ADJ
    remaining = _remaining_pod_memory_per_container(pod) if is_pod_level_requests_set(pod) else 0
    adjust = 1000 - _div_trunc(1000 * (_memory_bytes(container) + remaining), memory_capacity_bytes)
    # Upstream indexes Containers[0] here and would panic on a pod without regular containers; we skip.
    if sidecar and pod.containers:
        smallest = min(_memory_bytes(regular) for regular in pod.containers) + remaining
        adjust = min(adjust, 1000 - _div_trunc(1000 * smallest, memory_capacity_bytes))
    if adjust < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adjust == BESTEFFORT_OOM_SCORE_ADJ:
        return adjust - 1
    return adjust

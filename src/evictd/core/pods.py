"""Pods as the eviction manager sees them: parsed from Kubernetes v1 JSON, and the kubelet's rules about them.

Job: turn a `kubectl get pod -o json` object into frozen dataclasses, and answer the questions the kubelet's
eviction manager asks of a pod: is it critical (never evicted, always admitted), what does it request and
limit (`GetResourceRequestQuantity`, `PodLimits`), which volumes live on the node's disk, which QoS class it
has, which oom_score_adj its containers get, and may it be admitted under the current node conditions.

Invariants:
- `pod_from_dict` never mutates its input and raises nothing but `ScenarioError` on any JSON-like input;
  the error's `key` is a path such as ``pods[3].spec.containers[0].resources.requests.memory``. JSON null
  means "absent" (as Go's decoder treats it), except for a quantity in a resource list, where Go stores a
  present zero and so do we.
- Quantity arithmetic is Go's `resource.Quantity.Add` (a zero receiver takes the addend's format, sums drop
  the cached input text) and entries Go copies are returned as the same object, so results print exactly
  as the kubelet prints them.
- Feature gates are fixed as current upstream ships them: PodLevelResources ON, sidecar containers ON,
  LocalStorageCapacityIsolation ON, DRA node-allocatable resources and KubeletOOMScoreAdjTieBreak OFF,
  in-place resize status ignored (the spec is what counts).

Sources (kubernetes/kubernetes master; KUBELET_SPEC §7.2, §9.2, §9.3, §10.5, §12, §16):
  staging/src/k8s.io/component-helpers/resource/helpers.go     PodRequests, PodLimits, sidecar aggregation
  pkg/api/v1/resource/helpers.go                                GetResourceRequestQuantity
  pkg/apis/core/v1/helper/qos/qos.go                            GetPodQOS / ComputePodQOS
  pkg/kubelet/qos/policy.go, helpers.go                         GetContainerOOMScoreAdjust
  pkg/kubelet/types/pod_update.go                               IsStaticPod, IsMirrorPod, IsCriticalPod, ...
  pkg/kubelet/eviction/eviction_manager.go                      Admit
  pkg/volume/util/util.go                                       IsLocalEphemeralVolume
  staging/src/k8s.io/api/core/v1/toleration.go                  Toleration.ToleratesTaint
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from typing import NoReturn, TypeVar

from evictd.core.errors import QuantityError, ScenarioError
from evictd.core.quantity import ERR_NUMERIC, ZERO, Quantity, QuantityFormat
from evictd.core.signals import NodeCondition

# --- vocabulary (pkg/kubelet/types, pkg/apis/scheduling, k8s.io/api/core/v1) ------------------------------

CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
CONFIG_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
API_SERVER_SOURCE = "api"
# scheduling.SystemCriticalPriority: system-cluster-critical is exactly this, system-node-critical is +1000.
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
SYSTEM_NODE_CRITICAL = "system-node-critical"
RESTART_POLICY_ALWAYS = "Always"
DEFAULT_NAMESPACE = "default"
EMPTY_DIR_MEDIUM_DEFAULT = ""

# Admission rejection (eviction_manager.go Reason / nodeConditionMessageFmt).
ADMIT_REJECT_REASON = "Evicted"
NODE_CONDITION_MESSAGE_FMT = "The node had condition: [{}]. "

# policy.go: guaranteedOOMScoreAdj is -997 since kubelet OOM adjustments were spread (-998 in old releases).
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
KUBELET_OOM_SCORE_ADJ = -999
KUBE_PROXY_OOM_SCORE_ADJ = -999

# Only cpu and memory decide QoS (qos.go supportedQoSComputeResources).
QOS_COMPUTE_RESOURCES = ("cpu", "memory")
# Resources that pod-level spec.resources may set (component-helpers supportedPodLevelResources + hugepages).
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
HUGEPAGES_PREFIX = "hugepages-"
# GetResourceRequestQuantity starts byte-valued resources as BinarySI, every other one as DecimalSI.
BINARY_RESOURCES = frozenset({"memory", "storage", "ephemeral-storage"})

# Order in which node conditions are listed in the admission message. Upstream takes them from a Go map
# (random order); evictd lists them in this fixed order, unknown ones last and sorted.
CONDITION_MESSAGE_ORDER = (
    NodeCondition.MEMORY_PRESSURE.value,
    NodeCondition.DISK_PRESSURE.value,
    NodeCondition.PID_PRESSURE.value,
)

_K = TypeVar("_K")
_V = TypeVar("_V")


class FrozenMap(Mapping[_K, _V]):
    """An immutable, hashable mapping (insertion-ordered), so that pods can be dict keys and set members."""

    __slots__ = ("_data",)

    def __init__(self, items: Mapping[_K, _V] | Iterable[tuple[_K, _V]] = ()) -> None:
        self._data: dict[_K, _V] = dict(items)

    def __getitem__(self, key: _K) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


_NO_STRINGS: FrozenMap[str, str] = FrozenMap()
_NO_QUANTITIES: FrozenMap[str, Quantity] = FrozenMap()


# --- the model ---------------------------------------------------------------------------------------------


class QOSClass(StrEnum):
    """A pod's quality-of-service class (v1.PodQOSClass)."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@dataclass(frozen=True, slots=True, kw_only=True)
class Container:
    """A container or init container. `restart_policy` "Always" on an init container makes it a sidecar."""

    name: str
    requests: Mapping[str, Quantity] = _NO_QUANTITIES
    limits: Mapping[str, Quantity] = _NO_QUANTITIES
    restart_policy: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodResources:
    """Pod-level `spec.resources` (PodLevelResources). Present-but-empty differs from absent (QoS)."""

    requests: Mapping[str, Quantity] = _NO_QUANTITIES
    limits: Mapping[str, Quantity] = _NO_QUANTITIES


@dataclass(frozen=True, slots=True, kw_only=True)
class Volume:
    """A pod volume: its name and source `kind` (the JSON key: "emptyDir", "hostPath", "configMap", ...).

    `empty_dir_medium` and `empty_dir_size_limit` are set only for emptyDir volumes (medium "" = node disk).
    """

    name: str
    kind: str
    empty_dir_medium: str | None = None
    empty_dir_size_limit: Quantity | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    """A pod toleration; empty strings mean "unset" exactly as in the Go struct."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    """A node taint to test tolerations against."""

    key: str
    value: str = ""
    effect: str = ""


# The taint the node lifecycle controller puts on a node with MemoryPressure; Admit checks BestEffort pods
# against it.
MEMORY_PRESSURE_TAINT = Taint(key="node.kubernetes.io/memory-pressure", effect="NoSchedule")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pod:
    """The parts of a v1 Pod the eviction manager reads. `priority` None means "unset" (ranked as 0)."""

    name: str
    namespace: str = DEFAULT_NAMESPACE
    uid: str = ""
    annotations: Mapping[str, str] = _NO_STRINGS
    labels: Mapping[str, str] = _NO_STRINGS
    generation: int = 0
    deletion_timestamp: str | None = None
    deletion_grace_period_s: int | None = None
    priority: int | None = None
    priority_class_name: str = ""
    termination_grace_period_s: int | None = None
    node_name: str = ""
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: Mapping[str, Quantity] = _NO_QUANTITIES
    resources: PodResources | None = None
    volumes: tuple[Volume, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    status_phase: str | None = None
    status_qos_class: QOSClass | None = None

    @property
    def key(self) -> str:
        """Return "namespace/name", the kubelet's klog.KObj form."""
        return f"{self.namespace}/{self.name}"

    @property
    def pod_level_requests(self) -> Mapping[str, Quantity]:
        """Return spec.resources.requests (empty when spec.resources is absent)."""
        return _NO_QUANTITIES if self.resources is None else self.resources.requests

    @property
    def pod_level_limits(self) -> Mapping[str, Quantity]:
        """Return spec.resources.limits (empty when spec.resources is absent)."""
        return _NO_QUANTITIES if self.resources is None else self.resources.limits

    @property
    def is_terminating(self) -> bool:
        """True when metadata.deletionTimestamp is set."""
        return self.deletion_timestamp is not None


# --- critical pods (pod_update.go) -------------------------------------------------------------------------


def is_static_pod(pod: Pod) -> bool:
    """Return True when the pod came from a file or URL: config.source annotation present and not "api"."""
    source = pod.annotations.get(CONFIG_SOURCE_ANNOTATION)
    return source is not None and source != API_SERVER_SOURCE


def is_mirror_pod(pod: Pod) -> bool:
    """Return True when the pod is the API mirror of a static pod (config.mirror annotation present)."""
    return CONFIG_MIRROR_ANNOTATION in pod.annotations


def is_critical_pod(pod: Pod) -> bool:
    """Return True for pods the eviction manager never evicts and always admits (KUBELET_SPEC §10.5)."""
    if is_static_pod(pod) or is_mirror_pod(pod):
        return True
    return pod.priority is not None and pod.priority >= SYSTEM_CRITICAL_PRIORITY


def is_node_critical_pod(pod: Pod) -> bool:
    """Return True when the pod is critical and its priority class is system-node-critical."""
    return is_critical_pod(pod) and pod.priority_class_name == SYSTEM_NODE_CRITICAL


def pod_priority(pod: Pod) -> int:
    """Return spec.priority, or 0 when unset (corev1helpers.PodPriority)."""
    return 0 if pod.priority is None else pod.priority


def is_restartable_init_container(container: Container) -> bool:
    """Return True when this init container is a sidecar (restartPolicy Always)."""
    return container.restart_policy == RESTART_POLICY_ALWAYS


# --- requests and limits (component-helpers resource/helpers.go) ------------------------------------------


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


def is_pod_level_requests_set(pod: Pod) -> bool:
    """Return True when spec.resources.requests names a resource pod-level resources support."""
    return pod.resources is not None and _has_pod_level(pod.resources.requests)


def _requests(container: Container) -> Mapping[str, Quantity]:
    return container.requests


def _limits(container: Container) -> Mapping[str, Quantity]:
    return container.limits


def container_request(container: Container, resource: str) -> Quantity:
    """Return the container's own request for `resource`; a missing request is zero."""
    return container.requests.get(resource, ZERO)


def pod_request(pod: Pod, resource: str) -> Quantity:
    """Return GetResourceRequestQuantity(pod, resource): the request the eviction ranking uses.

    When pod-level resources are set (for cpu, memory or hugepages), container requests are ignored
    altogether and only the pod-level request of a supported resource counts, so such a pod requests
    zero ephemeral-storage. Otherwise the KEP-753 aggregate of containers, sidecars and init containers.
    spec.overhead[resource] is added when the total is non-zero. A missing request is a zero quantity.
    """
    aggregate = None if is_pod_level_resources_set(pod) else _aggregate(pod, resource, _requests)
    if is_pod_level_requests_set(pod) and _is_pod_level_resource(resource) and pod.resources is not None:
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
    limit = _aggregate(pod, resource, _limits)
    if is_pod_level_resources_set(pod) and _is_pod_level_resource(resource) and pod.resources is not None:
        limit = pod.resources.limits.get(resource, limit)
    overhead = pod.overhead.get(resource)
    if limit is not None and overhead is not None and limit.sign() != 0:
        limit = limit + overhead
    return limit


# --- volumes (pkg/volume/util) ------------------------------------------------------------------------------


def is_local_ephemeral_volume(volume: Volume) -> bool:
    """Return IsLocalEphemeralVolume: gitRepo, configMap, or emptyDir on the default medium (node disk).

    Memory and hugepages emptyDirs are not counted; neither are secrets, downwardAPI or projected volumes.
    """
    if volume.kind == "emptyDir":
        return volume.empty_dir_medium == EMPTY_DIR_MEDIUM_DEFAULT
    return volume.kind in ("gitRepo", "configMap")


def counts_for_local_disk(volume: Volume) -> bool:
    """Return True when the volume's usage counts towards the pod's disk: hostPath or local ephemeral."""
    return volume.kind == "hostPath" or is_local_ephemeral_volume(volume)


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
    claimed = _aggregate(pod, "memory", _requests)
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


# --- tolerations and admission -----------------------------------------------------------------------------

_GO_INT = re.compile(r"[+-]?[0-9]+\Z")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _parse_go_int64(text: str) -> int | None:
    """Return strconv.ParseInt(text, 10, 64), or None where Go reports an error."""
    if not _GO_INT.match(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def toleration_tolerates_taint(toleration: Toleration, taint: Taint) -> bool:
    """Return Toleration.ToleratesTaint: empty effect or key match any; "" means Equal; Lt/Gt compare ints."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("Lt", "Gt"):
        bound, actual = _parse_go_int64(toleration.value), _parse_go_int64(taint.value)
        if bound is None or actual is None:
            return False
        return actual < bound if toleration.operator == "Lt" else actual > bound
    return False


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Return True when any toleration tolerates the taint."""
    return any(toleration_tolerates_taint(toleration, taint) for toleration in tolerations)


def _ordered_conditions(conditions: AbstractSet[str]) -> list[str]:
    known = [c for c in CONDITION_MESSAGE_ORDER if c in conditions]
    return known + sorted(c for c in conditions if c not in CONDITION_MESSAGE_ORDER)


def admit(pod: Pod, node_conditions: AbstractSet[str]) -> tuple[bool, str, str]:
    """Return (admitted, reason, message) as the eviction manager's Admit decides (KUBELET_SPEC §7.2).

    No condition, or a critical pod: admitted. MemoryPressure alone: admitted unless BestEffort, and a
    BestEffort pod still when it tolerates node.kubernetes.io/memory-pressure:NoSchedule. Anything else:
    rejected with reason "Evicted" and "The node had condition: [A B]. " (conditions in
    CONDITION_MESSAGE_ORDER). Admitted pods get empty reason and message.
    """
    if not node_conditions or is_critical_pod(pod):
        return True, "", ""
    if set(node_conditions) == {NodeCondition.MEMORY_PRESSURE.value}:
        if qos_class(pod) is not QOSClass.BEST_EFFORT:
            return True, "", ""
        if tolerations_tolerate_taint(pod.tolerations, MEMORY_PRESSURE_TAINT):
            return True, "", ""
    message = NODE_CONDITION_MESSAGE_FMT.format(" ".join(_ordered_conditions(node_conditions)))
    return False, ADMIT_REJECT_REASON, message


# --- parsing -----------------------------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
# A JSON integer quantity wider than this cannot be a valid quantity (evictd.core.quantity rejects magnitudes
# of 10**1000 and more) and str() of it may exceed CPython's int-to-str digit limit, so it is refused first.
_MAX_QUANTITY_INT_BITS = 3400


def _child(path: str, name: str) -> str:
    """Return the error path of map entry `name` below `path`, bracketed when the name has dots or slashes."""
    return f"{path}.{name}" if _PLAIN_KEY.match(name) else f"{path}[{name}]"


def _printable(value: object) -> object:
    """Return `value`, or a stand-in when it cannot be repr()'d (CPython refuses ints over 4300 digits)."""
    try:
        repr(value)
    except (ValueError, RecursionError):
        return f"<unprintable {type(value).__name__}>"
    return value


def _fail(reason: str, key: str, value: object) -> NoReturn:
    raise ScenarioError(reason, key=key, value=_printable(value))


def _mapping(value: object, key: str) -> Mapping[str, object]:
    """Return `value` as a string-keyed mapping; None is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _fail("expected an object", key, value)
    for name in value:
        if not isinstance(name, str):
            _fail("object keys must be strings", key, name)
    return value


def _sequence(value: object, key: str) -> Sequence[object]:
    """Return `value` as a list; None is an empty one."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        _fail("expected a list", key, value)
    return value


def _opt_str(value: object, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    _fail("expected a string", key, value)


def _str(value: object, key: str, default: str = "") -> str:
    text = _opt_str(value, key)
    return default if text is None else text


def _required_name(obj: Mapping[str, object], path: str) -> str:
    key = _child(path, "name")
    name = _str(obj.get("name"), key)
    if not name:
        _fail("name is required", key, obj.get("name"))
    return name


def _opt_int(value: object, key: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        _fail("expected an integer", key, value)
    if not low <= value <= high:
        _fail(f"integer out of range [{low}, {high}]", key, value)
    return value


def _quantity(value: object, key: str) -> Quantity:
    """Parse a quantity given as a JSON string or number (Go's Quantity.UnmarshalJSON accepts both)."""
    if value is None:
        return ZERO
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _MAX_QUANTITY_INT_BITS:
            _fail(ERR_NUMERIC, key, value)
        text = str(value)
    elif isinstance(value, float) and math.isfinite(value):
        text = repr(value)
    else:
        _fail("expected a quantity string", key, value)
    try:
        return Quantity.parse(text)
    except QuantityError as exc:
        raise ScenarioError(exc.reason, key=key, value=_printable(value)) from exc


def _resource_list(value: object, key: str) -> FrozenMap[str, Quantity]:
    entries = _mapping(value, key)
    return FrozenMap({name: _quantity(raw, _child(key, name)) for name, raw in entries.items()})


def _string_map(value: object, key: str) -> FrozenMap[str, str]:
    entries = _mapping(value, key)
    return FrozenMap({name: _str(raw, _child(key, name)) for name, raw in entries.items()})


def _container(value: object, key: str) -> Container:
    obj = _mapping(value, key)
    resources_key = _child(key, "resources")
    resources = _mapping(obj.get("resources"), resources_key)
    return Container(
        name=_required_name(obj, key),
        requests=_resource_list(resources.get("requests"), _child(resources_key, "requests")),
        limits=_resource_list(resources.get("limits"), _child(resources_key, "limits")),
        restart_policy=_opt_str(obj.get("restartPolicy"), _child(key, "restartPolicy")),
    )


def _containers(value: object, key: str) -> tuple[Container, ...]:
    return tuple(_container(item, f"{key}[{i}]") for i, item in enumerate(_sequence(value, key)))


def _volume(value: object, key: str) -> Volume:
    obj = _mapping(value, key)
    name = _required_name(obj, key)
    # A v1.Volume is its name plus exactly one source (validation: "must specify exactly 1 volume type").
    sources = [kind for kind, raw in obj.items() if kind != "name" and raw is not None]
    if len(sources) != 1:
        _fail("must specify exactly 1 volume type", key, sorted(sources))
    kind = sources[0]
    source_key = _child(key, kind)
    source = _mapping(obj[kind], source_key)
    if kind != "emptyDir":
        return Volume(name=name, kind=kind)
    size_key = _child(source_key, "sizeLimit")
    raw_size = source.get("sizeLimit")
    return Volume(
        name=name,
        kind=kind,
        empty_dir_medium=_str(source.get("medium"), _child(source_key, "medium")),
        empty_dir_size_limit=None if raw_size is None else _quantity(raw_size, size_key),
    )


def _toleration(value: object, key: str) -> Toleration:
    obj = _mapping(value, key)
    return Toleration(
        key=_str(obj.get("key"), _child(key, "key")),
        operator=_str(obj.get("operator"), _child(key, "operator")),
        value=_str(obj.get("value"), _child(key, "value")),
        effect=_str(obj.get("effect"), _child(key, "effect")),
        toleration_seconds=_opt_int(
            obj.get("tolerationSeconds"), _child(key, "tolerationSeconds"), _INT64_MIN, _INT64_MAX
        ),
    )


def _qos_status(value: object, key: str) -> QOSClass | None:
    text = _opt_str(value, key)
    if not text:
        return None
    try:
        return QOSClass(text)
    except ValueError:
        _fail("unsupported QoS class, expected Guaranteed, Burstable or BestEffort", key, value)


def pod_from_dict(obj: Mapping[str, object], *, where: str = "pod") -> Pod:
    """Return the Pod described by a v1 Pod JSON object (as `kubectl get pod -o json` prints it).

    Unknown fields are ignored. metadata.name, container names and volume names are required; a missing or
    empty namespace is "default". Raises ScenarioError (key = path below `where`) for anything malformed.
    """
    if not isinstance(obj, Mapping):
        _fail("expected a Pod object", where, obj)
    root = _mapping(obj, where)
    meta_key, spec_key, status_key = (_child(where, part) for part in ("metadata", "spec", "status"))
    meta = _mapping(root.get("metadata"), meta_key)
    spec = _mapping(root.get("spec"), spec_key)
    status = _mapping(root.get("status"), status_key)
    resources_key = _child(spec_key, "resources")
    raw_resources = spec.get("resources")
    pod_resources = None
    if raw_resources is not None:
        resources = _mapping(raw_resources, resources_key)
        pod_resources = PodResources(
            requests=_resource_list(resources.get("requests"), _child(resources_key, "requests")),
            limits=_resource_list(resources.get("limits"), _child(resources_key, "limits")),
        )
    volumes_key = _child(spec_key, "volumes")
    tolerations_key = _child(spec_key, "tolerations")
    return Pod(
        name=_required_name(meta, meta_key),
        namespace=_str(meta.get("namespace"), _child(meta_key, "namespace")) or DEFAULT_NAMESPACE,
        uid=_str(meta.get("uid"), _child(meta_key, "uid")),
        annotations=_string_map(meta.get("annotations"), _child(meta_key, "annotations")),
        labels=_string_map(meta.get("labels"), _child(meta_key, "labels")),
        generation=_opt_int(meta.get("generation"), _child(meta_key, "generation"), _INT64_MIN, _INT64_MAX)
        or 0,
        deletion_timestamp=_opt_str(meta.get("deletionTimestamp"), _child(meta_key, "deletionTimestamp")),
        deletion_grace_period_s=_opt_int(
            meta.get("deletionGracePeriodSeconds"),
            _child(meta_key, "deletionGracePeriodSeconds"),
            _INT64_MIN,
            _INT64_MAX,
        ),
        priority=_opt_int(spec.get("priority"), _child(spec_key, "priority"), _INT32_MIN, _INT32_MAX),
        priority_class_name=_str(spec.get("priorityClassName"), _child(spec_key, "priorityClassName")),
        termination_grace_period_s=_opt_int(
            spec.get("terminationGracePeriodSeconds"),
            _child(spec_key, "terminationGracePeriodSeconds"),
            _INT64_MIN,
            _INT64_MAX,
        ),
        node_name=_str(spec.get("nodeName"), _child(spec_key, "nodeName")),
        containers=_containers(spec.get("containers"), _child(spec_key, "containers")),
        init_containers=_containers(spec.get("initContainers"), _child(spec_key, "initContainers")),
        overhead=_resource_list(spec.get("overhead"), _child(spec_key, "overhead")),
        resources=pod_resources,
        volumes=tuple(
            _volume(item, f"{volumes_key}[{i}]")
            for i, item in enumerate(_sequence(spec.get("volumes"), volumes_key))
        ),
        tolerations=tuple(
            _toleration(item, f"{tolerations_key}[{i}]")
            for i, item in enumerate(_sequence(spec.get("tolerations"), tolerations_key))
        ),
        status_phase=_opt_str(status.get("phase"), _child(status_key, "phase")),
        status_qos_class=_qos_status(status.get("qosClass"), _child(status_key, "qosClass")),
    )

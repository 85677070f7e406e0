"""Pods as the eviction manager sees them: the model, and what a pod *is* (static, mirror, critical, priority,
sidecar, local volumes). Parsing is `evictd.core.pod_parser`'s; requests and limits `evictd.core.resources`'.

Invariants: every value is frozen and hashable (`FrozenMap`); a pod holds only what decisions read, bounded
whatever its owner wrote (`DECISION_ANNOTATIONS`, the `MAX_KEPT_*` caps; `fields_dropped` counts what was left
out); values computed from a pod alone are memoized by `derived` (a pod never changes) outside equality and hash.
Feature gates as upstream ships them: sidecars ON, LocalStorageCapacityIsolation ON, in-place resize ignored.

Sources (kubernetes/kubernetes; KUBELET_SPEC §9.2, §10.5, §12, §16): core/v1/types.go; pkg/kubelet/types/
pod_update.go (IsStaticPod, IsMirrorPod, IsCriticalPod); component-helpers corev1 helpers.go (PodPriority);
pkg/api/v1/pod/util.go (IsRestartableInitContainer); pkg/volume/util/util.go (IsLocalEphemeralVolume).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from evictd.core.quantity import Quantity

# --- vocabulary (pkg/kubelet/types, pkg/apis/scheduling, k8s.io/api/core/v1) ------------------------------

CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"
CONFIG_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
API_SERVER_SOURCE = "api"
# The annotations any decision reads (static and mirror pods; the descheduler's eviction-in-progress); no other kept.
EVICTION_IN_PROGRESS_ANNOTATION = "descheduler.alpha.kubernetes.io/eviction-in-progress"
DECISION_ANNOTATIONS = frozenset({CONFIG_SOURCE_ANNOTATION, CONFIG_MIRROR_ANNOTATION, EVICTION_IN_PROGRESS_ANNOTATION})
# Longer than the kubelet's values ("api", a 32-hex mirror hash); a cut value never becomes "api".
MAX_KEPT_VALUE_CHARS = 256
# The shadow comparison reads only the eviction message's first sentence.
MAX_KEPT_MESSAGE_CHARS = 1024
# Containers kept, and as many init containers: the last kept fold in the rest's requests and limits (sums exact).
MAX_KEPT_CONTAINERS = 32
# Volumes kept, those a decision reads (`read_by_decisions`) first.
MAX_KEPT_VOLUMES = 128
# No decision reads tolerations (the flight recording does): a DaemonSet's pod has 6-9, most pods 2.
MAX_KEPT_TOLERATIONS = 32
# The list fields the caps apply to, as `Pod.fields_dropped` names them.
CAPPED_FIELDS = ("containers", "initContainers", "volumes", "tolerations")
# scheduling.SystemCriticalPriority: system-cluster-critical is exactly this, system-node-critical is +1000.
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
RESTART_POLICY_ALWAYS = "Always"
DEFAULT_NAMESPACE = "default"
EMPTY_DIR_MEDIUM_DEFAULT = ""

_K = TypeVar("_K")
_T = TypeVar("_T")
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


# The empty maps every pod without annotations or a resource list shares.
NO_STRINGS: FrozenMap[str, str] = FrozenMap()
NO_QUANTITIES: FrozenMap[str, Quantity] = FrozenMap()
NO_COUNTS: FrozenMap[str, int] = FrozenMap()


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
    requests: Mapping[str, Quantity] = NO_QUANTITIES
    limits: Mapping[str, Quantity] = NO_QUANTITIES
    restart_policy: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodResources:
    """Pod-level `spec.resources` (PodLevelResources). Present-but-empty differs from absent (QoS)."""

    requests: Mapping[str, Quantity] = NO_QUANTITIES
    limits: Mapping[str, Quantity] = NO_QUANTITIES


@dataclass(frozen=True, slots=True, kw_only=True)
class Volume:
    """A pod volume: its name and source `kind` (the JSON key: "emptyDir", "hostPath", ...); `empty_dir_medium` and
    `empty_dir_size_limit` only for emptyDir volumes (medium "" = node disk)."""

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
class Pod:
    """The parts of a v1 Pod the eviction manager reads. `priority` None means "unset" (ranked as 0)."""

    name: str
    namespace: str = DEFAULT_NAMESPACE
    uid: str = ""
    # Only DECISION_ANNOTATIONS, values cut to MAX_KEPT_VALUE_CHARS (`kept_annotations`).
    annotations: Mapping[str, str] = NO_STRINGS
    generation: int = 0
    deletion_timestamp: str | None = None
    deletion_grace_period_s: int | None = None
    priority: int | None = None
    priority_class_name: str = ""
    termination_grace_period_s: int | None = None
    node_name: str = ""
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: Mapping[str, Quantity] = NO_QUANTITIES
    resources: PodResources | None = None
    volumes: tuple[Volume, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    status_phase: str | None = None
    status_reason: str | None = None
    status_message: str | None = None
    # The message of a True DisruptionTarget condition with reason TerminationByKubelet (an eviction's record).
    status_termination_by_kubelet: str | None = None
    status_qos_class: QOSClass | None = None
    # Entries of each list field the parser left out or folded (the caps above); not part of the pod's identity.
    fields_dropped: Mapping[str, int] = field(default=NO_COUNTS, compare=False, repr=False)
    # Values derived from this pod alone (see `derived`); not part of the pod's identity.
    _derived: dict[MemoKey, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def key(self) -> str:
        """Return "namespace/name", the kubelet's klog.KObj form."""
        return f"{self.namespace}/{self.name}"

    @property
    def pod_level_requests(self) -> Mapping[str, Quantity]:
        return NO_QUANTITIES if self.resources is None else self.resources.requests


class Derived(StrEnum):
    """The computations `derived` remembers on a pod, one member each, so that no two share a value."""

    REQUEST = "request"  # evictd.core.resources.pod_request, per resource
    LIMIT = "limit"  # evictd.core.resources.pod_limit, per resource
    RANKING_REQUEST_VALUE = "ranking: request value"  # the exact request the ranking compares, per resource
    LIMITED_EMPTYDIRS = "local storage: limited emptyDirs"
    CONTAINER_STORAGE_LIMITS = "local storage: container limits"
    POD_KEY = "node stats: pod key"
    POD_REFERENCE = "node stats: pod reference"
    CRITICAL = "critical"  # is_critical_pod
    STORAGE_LIMITED = "local storage: any limit"


# What a value is remembered under: the computation, with its argument (a resource name) when it takes one.
MemoKey = Derived | tuple[Derived, str]


def derived(pod: Pod, key: MemoKey, compute: Callable[[Pod], _T]) -> _T:
    """Return `compute(pod)`, computed once per pod object and remembered under `key` (which must name the
    computation and its argument uniquely; `compute` must depend on the pod alone)."""
    memo = pod._derived
    if key in memo:
        return memo[key]  # type: ignore[return-value]
    value = memo[key] = compute(pod)
    return value


# --- critical pods, priority, sidecars (pod_update.go, corev1 helpers, pod/util.go) ------------------------


def is_static_pod(pod: Pod) -> bool:
    """Return True when the pod came from a file or URL: config.source annotation present and not "api"."""
    source = pod.annotations.get(CONFIG_SOURCE_ANNOTATION)
    return source is not None and source != API_SERVER_SOURCE


def is_mirror_pod(pod: Pod) -> bool:
    """Return True when the pod is the API mirror of a static pod (config.mirror annotation present)."""
    return CONFIG_MIRROR_ANNOTATION in pod.annotations


def is_critical_pod(pod: Pod) -> bool:
    """Return True for pods the eviction manager never evicts and always admits (KUBELET_SPEC §10.5)."""
    return derived(pod, Derived.CRITICAL, _is_critical_pod)


def _is_critical_pod(pod: Pod) -> bool:
    if is_static_pod(pod) or is_mirror_pod(pod):
        return True
    return pod.priority is not None and pod.priority >= SYSTEM_CRITICAL_PRIORITY


def never_evicted_reason(pod: Pod) -> str | None:
    """Why the manager never evicts `pod`, in the words every command uses ("a mirror pod"); None: it may. A mirror
    pod (the API's copy of a static pod) carries its static pod's source too: it is called a mirror pod."""
    if is_mirror_pod(pod):
        return "a mirror pod"
    if is_static_pod(pod):
        return "a static pod"
    if is_critical_pod(pod):
        return f"priority {pod.priority} (system-critical, at least {SYSTEM_CRITICAL_PRIORITY})"
    return None


# How a pod the manager never evicts is shown, by `simulate`, the live view and `explain`: one wording.
NEVER_EVICTED = "never evicted: "


def pod_priority(pod: Pod) -> int:
    """Return spec.priority, or 0 when unset (corev1helpers.PodPriority)."""
    return 0 if pod.priority is None else pod.priority


def is_restartable_init_container(container: Container) -> bool:
    """Return True when this init container is a sidecar (restartPolicy Always)."""
    return container.restart_policy == RESTART_POLICY_ALWAYS


# --- volumes (pkg/volume/util) ------------------------------------------------------------------------------


def is_local_ephemeral_volume(volume: Volume) -> bool:
    """Return IsLocalEphemeralVolume: gitRepo, configMap, or emptyDir on the node disk (not memory or hugepages)."""
    if volume.kind == "emptyDir":
        return volume.empty_dir_medium == EMPTY_DIR_MEDIUM_DEFAULT
    return volume.kind in ("gitRepo", "configMap")


def counts_for_local_disk(volume: Volume) -> bool:
    """Return True when the volume's usage counts towards the pod's disk: hostPath or local ephemeral."""
    return volume.kind == "hostPath" or is_local_ephemeral_volume(volume)


def read_by_decisions(volume: Volume) -> bool:
    """Return True when a decision reads this volume by name: its disk usage counts (`counts_for_local_disk`) or it
    is an emptyDir with a sizeLimit (`evictd.core.local_storage`)."""
    return counts_for_local_disk(volume) or (volume.kind == "emptyDir" and volume.empty_dir_size_limit is not None)

"""Dead-container garbage collection: which containers, sandboxes and pod log folders to remove.

The kubelet's `kuberuntime_gc.go` (`byCreated` ordering) as pure functions over what the CRI lists and what the
caller knows of each pod: evictableContainers (not RUNNING, older than `min_age_s`, units by pod UID and name);
evictContainers (units of DELETED pods, and TERMINATED ones at eviction time, go whole; each unit keeps its
`max_per_pod_container` newest; `max_containers` by equal shares then oldest first); removeOldestN (an UNKNOWN
container is stopped first, `kill_first`); evictSandboxes (inactive ones, all but the newest of a live pod); and
evictPodLogsDirectories (DELETED pods' folders, once all sources are ready).

Invariants: a RUNNING container is never planned for removal; inputs are never mutated. Where upstream's order is
Go map order or an unstable sort, keys are sorted, creation-time ties broken by ID, and batches run oldest first;
removal sets are exactly upstream's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from evictd.core.runtime import Container, ContainerState, Sandbox, SandboxState

NANOSECONDS_PER_SECOND = 1_000_000_000
# kuberuntime's minimumGracePeriodInSeconds: killContainer without a pod (the GC's case) stops with it.
UNKNOWN_CONTAINER_STOP_TIMEOUT_S = 2
# Pod log folders are named <namespace>_<name>_<uid> (kubelet logPathDelimiter).
LOG_PATH_DELIMITER = "_"


class PodState(StrEnum):
    """What the caller knows of a pod (the kubelet's podStateProvider in three answers): ACTIVE (or not yet
    vouched for), TERMINATED (`ShouldPodRuntimeBeRemoved`), DELETED (`ShouldPodContentBeRemoved`)."""

    ACTIVE = "active"
    TERMINATED = "terminated"
    DELETED = "deleted"


PodStateFunc = Callable[[str], PodState]


@dataclass(frozen=True, slots=True)
class GCPolicy:
    """The kubelet's container GC policy (`kubecontainer.GCPolicy`): --minimum-container-ttl-duration,
    --maximum-dead-containers-per-container and --maximum-dead-containers (negative: no limit)."""

    min_age_s: float = 0.0
    max_per_pod_container: int = 1
    max_containers: int = -1


@dataclass(frozen=True, slots=True)
class ContainerRemoval:
    """One dead container to remove; `kill_first` when it is in UNKNOWN state (it could still be running)."""

    container_id: str
    pod_uid: str
    name: str
    kill_first: bool = False


# An evict unit: (pod UID, container name) -> its evictable containers.
EvictUnits = dict[tuple[str, str], list[Container]]


def content_removable(state: PodState) -> bool:
    """ShouldPodContentBeRemoved: the pod is gone from the API."""
    return state is PodState.DELETED


def runtime_removable(state: PodState) -> bool:
    """ShouldPodRuntimeBeRemoved: the pod's containers may go (termination requested, finished or deleted)."""
    return state in (PodState.TERMINATED, PodState.DELETED)


def evictable_units(containers: Iterable[Container], min_age_s: float, now_ns: int) -> EvictUnits:
    """Return the not-running containers created at least `min_age_s` before `now_ns`, by evict unit."""
    newest_gc_time_ns = now_ns - round(min_age_s * NANOSECONDS_PER_SECOND)
    units: EvictUnits = {}
    for container in containers:
        if container.state is not ContainerState.RUNNING and container.created_at_ns <= newest_gc_time_ns:
            units.setdefault((container.pod_uid, container.name), []).append(container)
    return units


def _newest_first(containers: Iterable[Container]) -> list[Container]:
    """byCreated: newest first; equal creation times ordered by ID so the result is deterministic."""
    return sorted(containers, key=lambda c: (c.created_at_ns, c.id), reverse=True)


def _removal(container: Container) -> ContainerRemoval:
    return ContainerRemoval(
        container_id=container.id,
        pod_uid=container.pod_uid,
        name=container.name,
        kill_first=container.state is ContainerState.UNKNOWN,
    )


def remove_oldest_n(
    containers: Sequence[Container], to_remove: int, plan: list[ContainerRemoval]
) -> list[Container]:
    """removeOldestN: append the `to_remove` oldest to `plan` (oldest first); return the kept, newest first."""
    ordered = _newest_first(containers)
    keep = max(len(ordered) - to_remove, 0)
    plan.extend(_removal(container) for container in reversed(ordered[keep:]))
    return ordered[:keep]


def _enforce_max_per_unit(units: EvictUnits, max_containers: int, plan: list[ContainerRemoval]) -> None:
    """enforceMaxContainersPerEvictUnit: every unit keeps at most `max_containers` (the newest)."""
    for key in sorted(units):
        to_remove = len(units[key]) - max_containers
        if to_remove > 0:
            units[key] = remove_oldest_n(units[key], to_remove, plan)


def containers_to_remove(
    containers: Iterable[Container],
    policy: GCPolicy,
    pod_state: PodStateFunc,
    *,
    all_sources_ready: bool,
    evict_terminating_pods: bool,
    now_ns: int,
) -> tuple[ContainerRemoval, ...]:
    """Return the dead containers the kubelet's evictContainers removes, in removal order."""
    units = evictable_units(containers, policy.min_age_s, now_ns)
    plan: list[ContainerRemoval] = []
    if all_sources_ready:
        for key in sorted(units):
            state = pod_state(key[0])
            if content_removable(state) or (evict_terminating_pods and runtime_removable(state)):
                remove_oldest_n(units[key], len(units[key]), plan)
                del units[key]
    if policy.max_per_pod_container >= 0:
        _enforce_max_per_unit(units, policy.max_per_pod_container, plan)
    total = sum(len(unit) for unit in units.values())
    if policy.max_containers >= 0 and total > policy.max_containers:
        # Leave an equal number of containers per evict unit (min: 1), then the oldest overall go.
        _enforce_max_per_unit(units, max(policy.max_containers // len(units), 1), plan)
        total = sum(len(unit) for unit in units.values())
        if total > policy.max_containers:
            flattened = [container for key in sorted(units) for container in units[key]]
            remove_oldest_n(flattened, total - policy.max_containers, plan)
    return tuple(plan)


def sandboxes_to_remove(
    sandboxes: Iterable[Sandbox],
    containers: Iterable[Container],
    pod_state: PodStateFunc,
    *,
    evict_terminating_pods: bool,
) -> tuple[str, ...]:
    """Return the sandbox IDs evictSandboxes removes, oldest first per pod; a READY sandbox or one a remaining
    container belongs to is active and never removed."""
    referenced = {container.pod_sandbox_id for container in containers}
    by_pod: dict[str, list[Sandbox]] = {}
    for sandbox in sandboxes:
        by_pod.setdefault(sandbox.uid, []).append(sandbox)
    removed: list[str] = []
    for uid in sorted(by_pod):
        state = pod_state(uid)
        ordered = sorted(by_pod[uid], key=lambda s: (s.created_at_ns, s.id), reverse=True)
        remove_all = content_removable(state) or (evict_terminating_pods and runtime_removable(state))
        keep = 0 if remove_all else 1  # keep the latest sandbox while the pod still exists
        for sandbox in reversed(ordered[keep:]):
            active = sandbox.state is SandboxState.READY or sandbox.id in referenced
            if not active:
                removed.append(sandbox.id)
    return tuple(removed)


def pod_uid_from_log_dir(name: str) -> str:
    """parsePodUIDFromLogsDirectory: the part after the last `_` (the whole name when there is none)."""
    return name.split(LOG_PATH_DELIMITER)[-1]


def pod_log_dirs_to_remove(
    dir_names: Iterable[str], pod_state: PodStateFunc, *, all_sources_ready: bool
) -> tuple[str, ...]:
    """Return the pod log folder names (in the given order) whose pod is DELETED; none until sources are ready."""
    if not all_sources_ready:
        return ()
    return tuple(name for name in dir_names if content_removable(pod_state(pod_uid_from_log_dir(name))))

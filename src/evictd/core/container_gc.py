"""Dead-container garbage collection: which containers, sandboxes and pod log folders to remove.

The kubelet's `pkg/kubelet/kuberuntime/kuberuntime_gc.go` (current upstream, `byCreated` ordering), as pure
functions over what the CRI lists (`evictd.core.runtime`) and what the caller knows of each pod:

* evictable containers (`evictableContainers`): every container that is not RUNNING and was created at least
  `min_age_s` before `now_ns`, grouped into evict units keyed by (pod UID, container name);
* `evictContainers`: when all pod sources are ready, every unit of a pod whose content may be removed
  (DELETED) - and, at eviction time (`evict_terminating_pods`, the kubelet's `evictNonDeletedPods`), of a pod
  whose runtime may be removed (TERMINATED too) - goes entirely; then each unit keeps its
  `max_per_pod_container` newest; then `max_containers` is enforced by first cutting every unit to an equal
  share (at least 1) and then removing the oldest across all units;
* `removeOldestN`: a unit keeps its newest by creation time; a container in UNKNOWN state is stopped before
  it is removed (`ContainerRemoval.kill_first`), and the kubelet skips the removal when that stop fails;
* `evictSandboxes`: a sandbox is active when READY or when any remaining container belongs to it; inactive
  ones are removed, all of them for DELETED pods (TERMINATED too at eviction time), all but the newest
  sandbox of the pod otherwise (`removeOldestNSandboxes`; the newest is kept even when inactive);
* `evictPodLogsDirectories`: when all sources are ready, the `<namespace>_<name>_<uid>` folders of DELETED
  pods; dangling legacy `/var/log/containers/*.log` symlinks of containers that are gone or EXITED.

Invariants: a RUNNING container is never planned for removal; inputs are never mutated; the plan is a pure
function of its arguments. Where upstream's order is Go map order or an unstable sort, evictd fixes it:
units and pods in sorted key order, ties in creation time broken by ID, and every removal batch runs from
oldest to newest (the direction upstream's loops run). Removal sets are exactly upstream's.
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
# Legacy container log symlinks: /var/log/containers/<pod>_<namespace>_<container>-<containerID>.log.
LEGACY_LOG_SUFFIX = ".log"
# "container can be retrieved with container Id as short as 6 characters" (getContainerIDFromLegacyLogSymlink)
MIN_CONTAINER_ID_PREFIX = 6


class PodState(StrEnum):
    """What the caller knows of a pod, by UID (the kubelet's podStateProvider, reduced to three answers).

    ACTIVE: the pod exists and may run (or the caller cannot vouch for it: unknown pods must be ACTIVE until
    every pod source has been synced). TERMINATED: termination was requested or has finished, but the pod is
    still in the API (`ShouldPodRuntimeBeRemoved`). DELETED: gone from the API (`ShouldPodContentBeRemoved`).
    """

    ACTIVE = "active"
    TERMINATED = "terminated"
    DELETED = "deleted"


PodStateFunc = Callable[[str], PodState]


@dataclass(frozen=True, slots=True)
class GCPolicy:
    """The kubelet's container GC policy (`kubecontainer.GCPolicy`) with its flag defaults.

    min_age_s: --minimum-container-ttl-duration (0: no minimum).
    max_per_pod_container: --maximum-dead-containers-per-container (negative: no limit).
    max_containers: --maximum-dead-containers (negative: no limit).
    """

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
    """Return the sandbox IDs the kubelet's evictSandboxes removes, oldest first per pod.

    `containers` are the containers that still exist (listed after the container removals): a sandbox any
    of them belongs to is active, as is a READY one. Active sandboxes are never removed.
    """
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


def container_id_from_legacy_symlink(name: str) -> str | None:
    """getContainerIDFromLegacyLogSymlink: the ID between the last `-` and `.log`, or None if malformed."""
    last = name.split("-")[-1]
    if not last.endswith(LEGACY_LOG_SUFFIX):
        return None
    container_id = last[: -len(LEGACY_LOG_SUFFIX)]
    return container_id if len(container_id) >= MIN_CONTAINER_ID_PREFIX else None


def legacy_log_symlinks_to_remove(dangling: Iterable[str], containers: Iterable[Container]) -> tuple[str, ...]:
    """Return the dangling legacy log symlinks to delete: all but those of containers that are not EXITED.

    As upstream, a symlink whose container cannot be found (or whose name holds no ID) is removed; one whose
    container exists in any state but EXITED is kept (its log may be mid-rotation). IDs match by prefix, as
    the CRI's ContainerStatus resolves them.
    """
    listed = tuple(containers)
    removed: list[str] = []
    for name in dangling:
        container_id = container_id_from_legacy_symlink(name)
        if container_id is not None:
            found = next((c for c in listed if c.id.startswith(container_id)), None)
            if found is not None and found.state is not ContainerState.EXITED:
                continue
        removed.append(name)
    return tuple(removed)

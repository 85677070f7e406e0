"""Whole container-GC passes planned from the core's steps, for tests (the adapter runs the steps one by one).

`plan_container_gc` gives the answer of one GarbageCollect pass when every removal succeeds, and
`pod_state_from_mapping` answers pod states from a dict: test conveniences, not used by evictd itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from evictd.core.container_gc import (
    ContainerRemoval,
    GCPolicy,
    PodState,
    PodStateFunc,
    containers_to_remove,
    pod_log_dirs_to_remove,
    sandboxes_to_remove,
)
from evictd.core.runtime import Container, Sandbox


@dataclass(frozen=True, slots=True)
class ContainerGCPlan:
    """Everything one container GC pass removes, in the order to remove it.

    `log_dirs` are folder names under the pod logs root.
    """

    containers: tuple[ContainerRemoval, ...] = ()
    sandboxes: tuple[str, ...] = ()
    log_dirs: tuple[str, ...] = ()



def remaining_containers(containers: Iterable[Container], removals: Iterable[ContainerRemoval]) -> list[Container]:
    """Return `containers` without the planned removals (what the runtime lists once they succeeded)."""
    gone = {removal.container_id for removal in removals}
    return [container for container in containers if container.id not in gone]


def plan_container_gc(
    containers: Sequence[Container],
    sandboxes: Sequence[Sandbox],
    policy: GCPolicy,
    pod_state: PodStateFunc,
    *,
    all_sources_ready: bool,
    evict_terminating_pods: bool,
    now_ns: int,
    log_dir_names: Iterable[str] = (),
) -> ContainerGCPlan:
    """Return the whole GarbageCollect pass as one plan, assuming every container removal succeeds.

    The adapter runs the steps one after the other and re-lists containers before planning sandboxes, as
    the kubelet does; this function gives the same answer when nothing fails.
    """
    removals = containers_to_remove(
        containers,
        policy,
        pod_state,
        all_sources_ready=all_sources_ready,
        evict_terminating_pods=evict_terminating_pods,
        now_ns=now_ns,
    )
    left = remaining_containers(containers, removals)
    return ContainerGCPlan(
        containers=removals,
        sandboxes=sandboxes_to_remove(sandboxes, left, pod_state, evict_terminating_pods=evict_terminating_pods),
        log_dirs=pod_log_dirs_to_remove(log_dir_names, pod_state, all_sources_ready=all_sources_ready),
    )


def pod_state_from_mapping(states: Mapping[str, PodState], default: PodState = PodState.ACTIVE) -> PodStateFunc:
    """Return a pod-state function answering from `states`, `default` for unknown UIDs."""
    return lambda uid: states.get(uid, default)

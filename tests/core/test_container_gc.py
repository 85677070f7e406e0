"""Tests of evictd.core.container_gc: the kubelet's dead-container GC (kuberuntime_gc.go), as pure plans.

Table cases are upstream pkg/kubelet/kuberuntime/kuberuntime_gc_test.go: TestContainerGC, TestSandboxGC,
TestPodLogDirectoryGC and TestUnknownStateContainerGC, with the same templates and expected survivors.
Upstream's fakePodStateProvider maps onto PodState as: a pod in `runningPods` is ACTIVE, one only in
`existingPods` is TERMINATED (ShouldPodRuntimeBeRemoved), one in neither is DELETED.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from container_gc_plans import plan_container_gc, pod_state_from_mapping
from evictd.core.container_gc import (
    UNKNOWN_CONTAINER_STOP_TIMEOUT_S,
    ContainerRemoval,
    GCPolicy,
    PodState,
    containers_to_remove,
    evictable_units,
    pod_log_dirs_to_remove,
    pod_uid_from_log_dir,
    sandboxes_to_remove,
)
from evictd.core.runtime import (
    CONTAINER_NAME_LABEL,
    POD_UID_LABEL,
    Container,
    ContainerState,
    Sandbox,
    SandboxState,
)

ACTIVE, TERMINATED, DELETED = PodState.ACTIVE, PodState.TERMINATED, PodState.DELETED
EXITED, RUNNING, UNKNOWN, CREATED = (
    ContainerState.EXITED,
    ContainerState.RUNNING,
    ContainerState.UNKNOWN,
    ContainerState.CREATED,
)
READY, NOTREADY = SandboxState.READY, SandboxState.NOTREADY
HOUR_NS = 3600 * 10**9
NOW_NS = 1_700_000_000 * 10**9  # "time.Now()" of the upstream tests
# TestContainerGC's defaultGCPolicy.
DEFAULT_TEST_POLICY = GCPolicy(min_age_s=3600, max_per_pod_container=2, max_containers=6)


def container(pod: str, name: str, attempt: int, created_at_ns: int, state: ContainerState, sandbox: str = "") -> Container:
    """makeGCContainer: the pod's name is also its UID; IDs are unique per (pod, container, attempt)."""
    return Container(
        id=f"{pod}_{name}_{attempt}",
        name=name,
        pod_sandbox_id=sandbox or f"{pod}-sandbox",
        state=state,
        created_at_ns=created_at_ns,
        attempt=attempt,
        labels={POD_UID_LABEL: pod, CONTAINER_NAME_LABEL: name},
    )


def sandbox(uid: str, attempt: int, state: SandboxState, created_at_ns: int) -> Sandbox:
    return Sandbox(
        id=f"{uid}-{attempt}", name=f"pod-{uid}", namespace="new", uid=uid, state=state,
        created_at_ns=created_at_ns, attempt=attempt,
    )


def upstream_pod_states(pods: Sequence[str]) -> Mapping[str, PodState]:
    """makeGCContainer registers "running" as running, every pod but "deleted" as existing."""
    states: dict[str, PodState] = {}
    for pod in pods:
        states[pod] = ACTIVE if pod == "running" else DELETED if pod == "deleted" else TERMINATED
    return states


@dataclass(frozen=True)
class ContainerCase:
    containers: tuple[Container, ...]
    remain: tuple[int, ...]
    policy: GCPolicy = DEFAULT_TEST_POLICY
    evict_terminating_pods: bool = False
    all_sources_ready: bool = True


C = container
CONTAINER_CASES = {
    "all containers should be removed when max container limit is 0": ContainerCase(
        (C("foo", "bar", 0, 0, EXITED),), (), GCPolicy(60, 1, 0)
    ),
    "max containers should be complied when no max per pod container limit is set": ContainerCase(
        tuple(C("foo", "bar", i, i, EXITED) for i in (4, 3, 2, 1, 0)), (0, 1, 2, 3), GCPolicy(60, -1, 4)
    ),
    "no containers should be removed if both max container and per pod container limits are not set": ContainerCase(
        tuple(C("foo", "bar", i, i, EXITED) for i in (2, 1, 0)), (0, 1, 2), GCPolicy(60, -1, -1)
    ),
    "recently started containers should not be removed": ContainerCase(
        tuple(C("foo", "bar", i, NOW_NS, EXITED) for i in (2, 1, 0)), (0, 1, 2)
    ),
    "oldest containers should be removed when per pod container limit exceeded": ContainerCase(
        tuple(C("foo", "bar", i, i, EXITED) for i in (2, 1, 0)), (0, 1)
    ),
    "running containers should not be removed": ContainerCase(
        (C("foo", "bar", 2, 2, EXITED), C("foo", "bar", 1, 1, EXITED), C("foo", "bar", 0, 0, RUNNING)), (0, 1, 2)
    ),
    "no containers should be removed when limits are not exceeded": ContainerCase(
        (C("foo", "bar", 1, 1, EXITED), C("foo", "bar", 0, 0, EXITED)), (0, 1)
    ),
    "max container count should apply per (UID, container) pair": ContainerCase(
        tuple(C(pod, name, i, i, EXITED) for pod, name in (("foo", "bar"), ("foo1", "baz"), ("foo2", "bar")) for i in (2, 1, 0)),
        (0, 1, 3, 4, 6, 7),
    ),
    "max limit should apply and try to keep from every pod": ContainerCase(
        tuple(C(f"foo{k or ''}", f"bar{k or ''}", i, i, EXITED) for k in range(5) for i in (1, 0)),
        (0, 2, 4, 6, 8),
    ),
    "oldest pods should be removed if limit exceeded": ContainerCase(
        (
            C("foo", "bar", 2, 2, EXITED), C("foo", "bar", 1, 1, EXITED),
            C("foo1", "bar1", 2, 2, EXITED), C("foo1", "bar1", 1, 1, EXITED),
            C("foo2", "bar2", 1, 1, EXITED), C("foo3", "bar3", 0, 0, EXITED),
            C("foo4", "bar4", 1, 1, EXITED), C("foo5", "bar5", 0, 0, EXITED),
            C("foo6", "bar6", 2, 2, EXITED), C("foo7", "bar7", 1, 1, EXITED),
        ),
        (0, 2, 4, 6, 8, 9),
    ),
    "all non-running containers should be removed when evictTerminatedPods is set": ContainerCase(
        (
            C("foo", "bar", 2, 2, EXITED), C("foo", "bar", 1, 1, EXITED),
            C("foo1", "bar1", 2, 2, EXITED), C("foo1", "bar1", 1, 1, EXITED),
            C("running", "bar2", 1, 1, EXITED), C("foo3", "bar3", 0, 0, RUNNING),
        ),
        (4, 5),
        evict_terminating_pods=True,
    ),
    "containers for deleted pods should be removed": ContainerCase(
        (
            C("foo", "bar", 1, 1, EXITED), C("foo", "bar", 0, 0, EXITED),
            # deleted pods still respect MinAge.
            C("deleted", "bar1", 2, NOW_NS, EXITED), C("deleted", "bar1", 1, 1, EXITED),
            C("deleted", "bar1", 0, 0, EXITED),
        ),
        (0, 1, 2),
    ),
    "containers for deleted pods may not be removed if allSourcesReady is set false": ContainerCase(
        (C("deleted", "bar1", 0, 0, EXITED),), (0,), evict_terminating_pods=True, all_sources_ready=False
    ),
}


@pytest.mark.parametrize("case", CONTAINER_CASES.values(), ids=CONTAINER_CASES.keys())
def test_container_gc_upstream_cases(case: ContainerCase) -> None:
    states = upstream_pod_states([c.pod_uid for c in case.containers])
    plan = containers_to_remove(
        case.containers,
        case.policy,
        pod_state_from_mapping(states),
        all_sources_ready=case.all_sources_ready,
        evict_terminating_pods=case.evict_terminating_pods,
        now_ns=NOW_NS,
    )
    removed = {r.container_id for r in plan}
    remaining = {c.id for c in case.containers} - removed
    assert remaining == {case.containers[i].id for i in case.remain}
    assert len(plan) == len(removed), "a container is planned once"


def test_unknown_state_container_is_killed_before_removal() -> None:
    """TestUnknownStateContainerGC: StopContainer then RemoveContainer for a container in unknown state."""
    unknown = C("foo", "bar", 0, 0, UNKNOWN)
    plan = containers_to_remove(
        [unknown], GCPolicy(3600, 0, 0), pod_state_from_mapping({"foo": TERMINATED}),
        all_sources_ready=True, evict_terminating_pods=False, now_ns=NOW_NS,
    )
    assert plan == (ContainerRemoval("foo_bar_0", "foo", "bar", kill_first=True),)
    assert UNKNOWN_CONTAINER_STOP_TIMEOUT_S == 2  # kuberuntime minimumGracePeriodInSeconds


def test_created_and_exited_containers_are_evictable_running_is_not() -> None:
    """evictableContainers prunes only RUNNING; a CREATED (never started) container is dead too."""
    units = evictable_units(
        [C("p", "a", 0, 0, CREATED), C("p", "a", 1, 1, EXITED), C("p", "a", 2, 2, RUNNING), C("p", "a", 3, 3, UNKNOWN)],
        min_age_s=0, now_ns=NOW_NS,
    )
    assert [c.attempt for c in units[("p", "a")]] == [0, 1, 3]


def test_min_age_boundary_is_inclusive() -> None:
    """newestGCTime.Before(createdAt) skips: a container created exactly min age ago is evictable."""
    at_boundary = C("p", "a", 0, NOW_NS - HOUR_NS, EXITED)
    just_younger = C("p", "b", 0, NOW_NS - HOUR_NS + 1, EXITED)
    units = evictable_units([at_boundary, just_younger], min_age_s=3600, now_ns=NOW_NS)
    assert list(units) == [("p", "a")]


def test_removals_run_oldest_first_and_newest_is_kept() -> None:
    containers = [C("p", "a", i, created, EXITED) for i, created in enumerate((50, 10, 40, 20, 30))]
    plan = containers_to_remove(
        containers, GCPolicy(0, 1, -1), pod_state_from_mapping({}),
        all_sources_ready=True, evict_terminating_pods=False, now_ns=NOW_NS,
    )
    assert [r.container_id for r in plan] == ["p_a_1", "p_a_3", "p_a_4", "p_a_2"]  # created 10, 20, 30, 40


def test_active_pods_keep_policy_share_at_eviction_time() -> None:
    """evictTerminatingPods only widens removal to TERMINATED pods; ACTIVE pods keep MaxPerPodContainer."""
    containers = [C("live", "a", i, i, EXITED) for i in range(3)] + [C("done", "a", i, i, EXITED) for i in range(3)]
    states = pod_state_from_mapping({"live": ACTIVE, "done": TERMINATED})
    plan = containers_to_remove(
        containers, GCPolicy(), states, all_sources_ready=True, evict_terminating_pods=True, now_ns=NOW_NS
    )
    assert [r.container_id for r in plan] == ["done_a_0", "done_a_1", "done_a_2", "live_a_0", "live_a_1"]
    periodic = containers_to_remove(
        containers, GCPolicy(), states, all_sources_ready=True, evict_terminating_pods=False, now_ns=NOW_NS
    )
    assert [r.container_id for r in periodic] == ["done_a_0", "done_a_1", "live_a_0", "live_a_1"]


# --- sandboxes (TestSandboxGC) ---------------------------------------------------------------------------

POD0, POD1, POD2 = "1234", "5678", "9012"


@dataclass(frozen=True)
class SandboxCase:
    sandboxes: tuple[Sandbox, ...]
    containers: tuple[Container, ...]
    states: Mapping[str, PodState]
    remain: tuple[int, ...]
    evict_terminating_pods: bool = False


def in_sandbox(uid: str, attempt: int) -> Container:
    return C(uid, "bar", 0, 0, EXITED, sandbox=f"{uid}-{attempt}")


SANDBOX_CASES = {
    "notready sandboxes without containers for deleted pods should be garbage collected": SandboxCase(
        (sandbox(POD2, 0, NOTREADY, 0),), (), {POD2: DELETED}, ()
    ),
    "ready sandboxes without containers for deleted pods should not be garbage collected": SandboxCase(
        (sandbox(POD2, 0, READY, 0),), (), {POD2: DELETED}, (0,)
    ),
    "sandboxes for existing pods should not be garbage collected": SandboxCase(
        (sandbox(POD0, 0, READY, 0), sandbox(POD1, 0, NOTREADY, 0)), (), {POD0: TERMINATED, POD1: TERMINATED}, (0, 1)
    ),
    "older exited sandboxes without containers for existing pods should be garbage collected if there are more than one exited sandboxes": SandboxCase(
        (sandbox(POD0, 1, NOTREADY, 1), sandbox(POD0, 0, NOTREADY, 0)), (), {POD0: TERMINATED}, (0,)
    ),
    "older exited sandboxes with containers for existing pods should not be garbage collected even if there are more than one exited sandboxes": SandboxCase(
        (sandbox(POD0, 1, NOTREADY, 1), sandbox(POD0, 0, NOTREADY, 0)), (in_sandbox(POD0, 0),), {POD0: TERMINATED}, (0, 1)
    ),
    "non-running sandboxes for existing pods should be garbage collected if evictTerminatedPods is set": SandboxCase(
        (sandbox(POD0, 0, READY, 0), sandbox(POD1, 0, NOTREADY, 0)), (), {POD0: TERMINATED, POD1: TERMINATED}, (0,),
        evict_terminating_pods=True,
    ),
    "sandbox with containers should not be garbage collected": SandboxCase(
        (sandbox(POD0, 0, NOTREADY, 0),), (in_sandbox(POD0, 0),), {POD0: DELETED}, (0,)
    ),
    "multiple sandboxes should be handled properly": SandboxCase(
        (
            sandbox(POD0, 1, READY, 1),  # running sandbox
            sandbox(POD0, 0, NOTREADY, 0),  # exited sandbox without containers
            sandbox(POD1, 1, NOTREADY, 1),  # exited sandbox with containers
            sandbox(POD1, 0, NOTREADY, 0),  # exited sandbox without containers
            sandbox(POD2, 0, NOTREADY, 0),  # exited sandbox without containers for deleted pods
        ),
        (in_sandbox(POD1, 1),),
        {POD0: TERMINATED, POD1: TERMINATED, POD2: DELETED},
        (0, 2),
    ),
    "the newest sandbox of an active pod is kept even when not ready": SandboxCase(
        (sandbox(POD0, 0, NOTREADY, 5),), (), {POD0: ACTIVE}, (0,), evict_terminating_pods=True
    ),
}


@pytest.mark.parametrize("case", SANDBOX_CASES.values(), ids=SANDBOX_CASES.keys())
def test_sandbox_gc_upstream_cases(case: SandboxCase) -> None:
    removed = sandboxes_to_remove(
        case.sandboxes, case.containers, pod_state_from_mapping(case.states),
        evict_terminating_pods=case.evict_terminating_pods,
    )
    assert set(removed) == {s.id for s in case.sandboxes} - {case.sandboxes[i].id for i in case.remain}


def test_plan_removes_sandbox_emptied_by_container_removal() -> None:
    """evictSandboxes lists containers after evictContainers: a sandbox emptied in this pass goes too."""
    dead = C("gone", "a", 0, 0, EXITED, sandbox="gone-0")
    plan = plan_container_gc(
        [dead], [sandbox("gone", 0, NOTREADY, 0)], GCPolicy(), pod_state_from_mapping({"gone": DELETED}),
        all_sources_ready=True, evict_terminating_pods=False, now_ns=NOW_NS,
        log_dir_names=["ns_pod_gone", "ns_other_live"],
    )
    assert [r.container_id for r in plan.containers] == ["gone_a_0"]
    assert plan.sandboxes == ("gone-0",)
    assert plan.log_dirs == ("ns_pod_gone",)


# --- pod log folders (TestPodLogDirectoryGC) ----------------------------------------------------------------


def test_pod_log_directory_gc() -> None:
    states = pod_state_from_mapping({"123": ACTIVE, "456": ACTIVE, "321": TERMINATED}, default=DELETED)
    files = ["123", "456", "789", "012", "name_namespace_321", "name_namespace_654"]
    assert pod_log_dirs_to_remove(files, states, all_sources_ready=True) == ("789", "012", "name_namespace_654")
    assert pod_log_dirs_to_remove(files, states, all_sources_ready=False) == ()


@pytest.mark.parametrize(
    ("name", "uid"),
    [("kube-system_coredns-5d78c_0a1b2c3d", "0a1b2c3d"), ("123", "123"), ("ns_name_with_underscores_uid9", "uid9")],
)
def test_pod_uid_from_log_dir(name: str, uid: str) -> None:
    assert pod_uid_from_log_dir(name) == uid


# --- properties ------------------------------------------------------------------------------------------

PODS = ("p0", "p1", "p2", "running", "deleted")
STATES = st.sampled_from(list(ContainerState))
container_specs = st.lists(
    st.tuples(st.sampled_from(PODS), st.sampled_from(("a", "b")), st.integers(0, 40), STATES,
              st.integers(0, 3)),
    max_size=25,
    unique_by=lambda t: (t[0], t[1], t[2]),
)
policies = st.builds(GCPolicy, st.sampled_from([0.0, 10e-9, 30e-9]), st.integers(-1, 3), st.integers(-1, 8))
pod_states = st.fixed_dictionaries({pod: st.sampled_from(list(PodState)) for pod in PODS})


def build(specs: Sequence[tuple[str, str, int, ContainerState, int]]) -> list[Container]:
    """(pod, container name, creation time = attempt, state, sandbox attempt) -> containers."""
    return [C(pod, name, created, created, state, sandbox=f"{pod}-{box}") for pod, name, created, state, box in specs]


@settings(max_examples=300, deadline=None)
@given(container_specs, policies, pod_states, st.booleans(), st.booleans(), st.randoms(use_true_random=False))
def test_plan_properties(
    specs: list[tuple[str, str, int, ContainerState, int]],
    policy: GCPolicy,
    states: dict[str, PodState],
    ready: bool,
    evict_terminating: bool,
    rnd: random.Random,
) -> None:
    now_ns = 40
    containers = build(specs)
    sandboxes = [sandbox(pod, box, state, box) for pod in PODS for box, state in enumerate((NOTREADY, READY, NOTREADY))]
    state_of = pod_state_from_mapping(states)
    plan = plan_container_gc(
        containers, sandboxes, policy, state_of, all_sources_ready=ready, evict_terminating_pods=evict_terminating,
        now_ns=now_ns,
    )
    by_id = {c.id: c for c in containers}
    removed = [by_id[r.container_id] for r in plan.containers]
    # A running container is never removed; only not-running containers old enough are.
    assert all(c.state is not RUNNING for c in removed)
    assert all(c.created_at_ns <= now_ns - round(policy.min_age_s * 1e9) for c in removed)
    assert len({c.id for c in removed}) == len(removed)
    assert all(r.kill_first == (by_id[r.container_id].state is UNKNOWN) for r in plan.containers)
    # Within a unit, everything removed is older than everything kept.
    kept_evictable = [c for c in containers if c.state is not RUNNING and c not in removed
                      and c.created_at_ns <= now_ns - round(policy.min_age_s * 1e9)]
    for c in removed:
        for k in kept_evictable:
            if (k.pod_uid, k.name) == (c.pod_uid, c.name):
                assert (c.created_at_ns, c.id) < (k.created_at_ns, k.id)
    if policy.max_per_pod_container >= 0:
        for unit in {(k.pod_uid, k.name) for k in kept_evictable}:
            assert sum(1 for k in kept_evictable if (k.pod_uid, k.name) == unit) <= policy.max_per_pod_container
    if policy.max_containers >= 0:
        assert len(kept_evictable) <= policy.max_containers
    # Sandboxes: never a ready one, never one a remaining container belongs to.
    remaining_sandboxes = {c.pod_sandbox_id for c in containers if c not in removed}
    by_sandbox = {s.id: s for s in sandboxes}
    assert all(by_sandbox[s].state is NOTREADY and s not in remaining_sandboxes for s in plan.sandboxes)
    # Deterministic: the same answer for the same node listed in another order.
    shuffled = list(containers)
    rnd.shuffle(shuffled)
    again = plan_container_gc(
        shuffled, list(reversed(sandboxes)), policy, state_of, all_sources_ready=ready,
        evict_terminating_pods=evict_terminating, now_ns=now_ns,
    )
    assert again == plan

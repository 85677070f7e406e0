"""Shadow mode's comparison of evictd's dry-run decisions with the kubelet's evictions (evictd.core.shadow)."""

from __future__ import annotations

import pytest

from evictd.core.shadow import (
    Outcome,
    ShadowEviction,
    ShadowState,
    compare,
    kubelet_eviction_resource,
    resource_of_signal,
)

WINDOW_S = 60.0


def ev(at: float, pod: str, resource: str = "memory") -> ShadowEviction:
    return ShadowEviction(at, f"uid-{pod}", f"default/{pod}", resource)


def run(steps: list[tuple[float, list[ShadowEviction], list[ShadowEviction]]]) -> list[tuple[str, str, str]]:
    """Feed (now, evictd, kubelet) steps; return every settled (outcome, evictd pod, kubelet pod)."""
    state = ShadowState()
    settled = []
    for now, ours, theirs in steps:
        state, done = compare(state, ours, theirs, now, WINDOW_S)
        settled += [(str(c.outcome), c.evictd.pod_key if c.evictd else "-", c.kubelet.pod_key if c.kubelet else "-")
                    for c in done]
    return settled


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param([(0, [ev(0, "a")], [ev(0, "a")])], [("agree", "default/a", "default/a")], id="same-cycle"),
        pytest.param([(0, [ev(0, "a")], []), (12, [ev(12, "a")], [ev(12, "a")])],
                     [("agree", "default/a", "default/a")], id="kubelet-later-repeated-decision-counts-once"),
        pytest.param([(0, [], [ev(0, "a")]), (5, [ev(5, "a")], [])], [("agree", "default/a", "default/a")],
                     id="evictd-later"),
        pytest.param([(0, [ev(0, "a")], []), (10, [], [ev(10, "b")]), (61, [], [])],
                     [("different-pod", "default/a", "default/b")], id="different-pod"),
        pytest.param([(0, [ev(0, "a")], []), (10, [], [ev(10, "b", "pids")]), (71, [], [])],
                     [("evictd-only", "default/a", "-"), ("kubelet-only", "-", "default/b")],
                     id="different-resources-do-not-pair"),
        pytest.param([(0, [ev(0, "a")], []), (59, [], [])], [], id="held-for-the-window"),
        pytest.param([(0, [ev(0, "a")], []), (61, [], [])], [("evictd-only", "default/a", "-")], id="evictd-only"),
        pytest.param([(0, [], [ev(0, "a")]), (61, [], [])], [("kubelet-only", "-", "default/a")], id="kubelet-only"),
        pytest.param([(0, [ev(0, "a")], []), (61, [], []), (62, [ev(62, "a")], [])],
                     [("evictd-only", "default/a", "-")], id="decided-again-within-the-window-is-not-new"),
        pytest.param([(0, [ev(0, "a")], []), (61, [], []), (122, [ev(122, "a")], []), (183, [], [])],
                     [("evictd-only", "default/a", "-"), ("evictd-only", "default/a", "-")],
                     id="decided-again-after-the-window-is-new"),
    ],
)
def test_comparisons(steps: list[tuple[float, list[ShadowEviction], list[ShadowEviction]]],
                     expected: list[tuple[str, str, str]]) -> None:
    assert run(steps) == expected


def test_compare_does_not_mutate_its_state() -> None:
    state = ShadowState()
    after, _ = compare(state, [ev(0, "a")], [], 0, WINDOW_S)
    assert state == ShadowState() and after.evictd == (ev(0, "a"),)
    assert {o.value for o in Outcome} == {"agree", "different-pod", "evictd-only", "kubelet-only"}


@pytest.mark.parametrize(
    ("phase", "reason", "message", "resource"),
    [
        ("Failed", "Evicted", "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. ",
         "memory"),
        ("Failed", "Evicted", "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, ...",
         "ephemeral-storage"),
        ("Failed", "Evicted", "The node was low on resource: pids. Threshold quantity: 100, available: 50. ", "pids"),
        ("Failed", "Evicted", 'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". ', "ephemeral-storage"),
        ("Failed", "Evicted", "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ",
         "ephemeral-storage"),
        # Admission rejections under pressure are not evictions of a running pod.
        ("Failed", "Evicted", "The node had condition: [MemoryPressure]. ", None),
        ("Running", None, None, None),
        ("Failed", "Error", "boom", None),
        ("Succeeded", "Evicted", "The node was low on resource: memory.", None),
    ],
)
def test_what_counts_as_a_kubelet_eviction(phase: str, reason: str | None, message: str | None,
                                           resource: str | None) -> None:
    assert kubelet_eviction_resource(phase, reason, message) == resource


@pytest.mark.parametrize(("phase", "resource"), [("Succeeded", "memory"), ("Failed", "memory"), ("Running", None)])
def test_a_terminal_pod_with_the_kubelets_disruption_condition_was_evicted(phase: str, resource: str | None) -> None:
    """Seen on the real kubelet v1.36.2: a container that exits 0 on SIGTERM ends Succeeded with no reason;
    only its DisruptionTarget/TerminationByKubelet condition says it was evicted."""
    message = "The node was low on resource: memory. Threshold quantity: 500Mi, available: 504124Ki. "
    assert kubelet_eviction_resource(phase, None, None, message) == resource


@pytest.mark.parametrize(("signal", "resource"), [
    ("memory.available", "memory"), ("allocatableMemory.available", "memory"),
    ("nodefs.available", "ephemeral-storage"), ("imagefs.inodesFree", "inodes"), ("pid.available", "pids"),
    ("emptydirfs.limit", "ephemeral-storage"), ("ephemeralcontainerfs.limit", "ephemeral-storage"),
])
def test_the_resource_of_evictds_signal(signal: str, resource: str) -> None:
    assert resource_of_signal(signal) == resource

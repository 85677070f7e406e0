"""What an evictd eviction leaves in a cluster, beside the kubelet that owns the pod (stand-ins or real: conftest).

The pressure is real: a pod whose container fills a 200 MiB buffer in the node's pods cgroup, against a hard
``allocatableMemory.available`` threshold set 120 MiB below what is available when the test starts, so the hog
alone crosses it. A quiet pod with a memory request stays below its request and is never chosen.

What must hold, seen through the API as a cluster admin (every version of the pod from a watch):
* evictd writes the ``DisruptionTarget`` condition (TerminationByKubelet, the kubelet's message) before its
  DELETE, and never a phase, reason or message: the kubelet owns those;
* the DELETE carries the hard threshold's 1 s and the pod's UID; the kubelet stops the containers (a container
  that ignores SIGTERM only after its 2 s minimum) and reports the pod terminal with no reason or message,
  keeping ``DisruptionTarget``; then it removes the object, unless a finalizer holds it;
* one Warning ``Evicted`` event with the message and the offending-container annotations;
* the node's ``EvictdMemoryPressure`` condition and taint while the pressure lasts, and after a clean stop of
  evictd its conditions ``Unknown`` (EvictdStopped) and no taint of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from evictd_process import EvictdProcess
from node_under_test import (
    MiB,
    NodeUnderTest,
    PodRef,
    Version,
    memory_hog,
    new_name,
    wait_until,
)

from evictd.observe.cycle_logging import FOLLOW_UP_EVENT

HOG_MIB = 200
# Below what is available at the start by less than the hog takes: the hog alone crosses the threshold.
THRESHOLD_BELOW_MIB = 120
SIGNAL = "allocatableMemory.available"
CONDITION = "EvictdMemoryPressure"
TAINT = "evictd.io/memory-pressure:NoSchedule"
HARD_GRACE_PERIOD_S = 1
# The kubelet never gives a container less than this to stop (kuberuntime minimumGracePeriodInSeconds).
KUBELET_MINIMUM_GRACE_S = 2
FINALIZER = "contract.evictd.io/hold"
KUBELET_OWNED_CONDITIONS = {"PodScheduled", "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers"}


def start_evictd_under_memory_threshold(node: NodeUnderTest) -> tuple[EvictdProcess, int]:
    """Start evictd with a hard allocatable-memory threshold the hog will cross; return it and the threshold."""
    threshold_mib = node.settled_allocatable_available_bytes() // MiB - THRESHOLD_BELOW_MIB
    daemon = node.start_evictd(f"evictionHard: {{{SIGNAL}: {threshold_mib}Mi}}\n"
                               "evictionPressureTransitionPeriod: 3s\n")
    daemon.wait_event("evictd started", timeout=30)
    wait_until(lambda: node.condition(CONDITION), 20, f"evictd to write {CONDITION}")
    return daemon, threshold_mib


def first(versions: list[Version], predicate: Callable[[Version], object]) -> Version:
    found = [v for v in versions if predicate(v)]
    assert found, "no version of the pod matches"
    return found[0]


def assert_evicted_as_the_kubelet_leaves_it(node: NodeUnderTest, hog: PodRef, message: str) -> list[Version]:
    """The common end state of an evictd eviction; returns the pod's versions for more checks."""
    versions = node.versions(hog)
    disrupted = first(versions, lambda v: (v.condition("DisruptionTarget") or {}).get("status") == "True")
    deleted = first(versions, lambda v: v.metadata.get("deletionTimestamp"))
    # The condition first: whoever sees the pod terminating (a Job's podFailurePolicy) sees why.
    assert versions.index(disrupted) <= versions.index(deleted)
    condition = disrupted.condition("DisruptionTarget")
    assert condition is not None
    assert (condition["reason"], condition["message"]) == ("TerminationByKubelet", message)
    assert deleted.metadata["deletionGracePeriodSeconds"] == HARD_GRACE_PERIOD_S
    after = versions[versions.index(disrupted):]
    for version in after:
        kept = version.condition("DisruptionTarget")
        assert kept is not None and kept["status"] == "True", "the kubelet dropped DisruptionTarget"
        # Nobody writes the kubelet's reason and message for it; the phase is the kubelet's own view.
        assert version.status.get("reason") is None and version.status.get("message") is None
        assert version.status.get("phase") in ("Running", "Succeeded", "Failed")
    events = node.events(hog, "Evicted")
    assert len(events) == 1
    event = events[0]
    assert (event["type"], event["message"]) == ("Warning", message)
    annotations = event["metadata"]["annotations"]
    assert (annotations["offending_containers"], annotations["starved_resource"]) == ("app", "memory")
    assert event["source"]["component"] == "evictd"
    return versions


def terminal_phase(versions: list[Version]) -> str:
    phases = [v.status.get("phase") for v in versions if v.status.get("phase") in ("Succeeded", "Failed")]
    assert phases, "the kubelet never reported the evicted pod terminal"
    assert len(set(phases)) == 1, f"the terminal phase changed: {phases}"
    return str(phases[0])


def test_an_eviction_is_a_deletion_the_kubelet_carries_out_and_a_clean_stop_leaves_no_taint(
    node_under_test: NodeUnderTest,
) -> None:
    node = node_under_test
    quiet = node.run_pod(new_name("quiet"), 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done',
                         requests={"memory": "64Mi"})
    daemon, threshold_mib = start_evictd_under_memory_threshold(node)
    hog = node.run_pod(new_name("hog"), memory_hog(HOG_MIB), requests={"memory": "32Mi"})

    evicting = daemon.wait_event("evicting pod", timeout=30, pod=f"{hog.namespace}/{hog.name}")
    assert (evicting["signal"], evicting["grace_period_seconds"]) == (SIGNAL, HARD_GRACE_PERIOD_S)
    assert evicting["message"].startswith(
        f"The node was low on resource: memory. Threshold quantity: {threshold_mib}Mi, available: ")
    wait_until(lambda: TAINT in node.taint_keys(), 20, "the pressure taint")
    pressure = node.condition(CONDITION)
    assert pressure is not None and (pressure["status"], pressure["reason"]) == ("True", "KubeletHasInsufficientMemory")

    node.wait_gone(hog)  # the kubelet stops it and removes the object, as it does after any deletion
    versions = assert_evicted_as_the_kubelet_leaves_it(node, hog, evicting["message"])
    assert terminal_phase(versions) == "Succeeded"  # its container exits 0 on SIGTERM
    assert versions[-1].type == "DELETED"
    # One eviction, however many cycles ran while it terminated (issue #73: a second one a second later, before):
    # a cycle that ranks it first again follows that eviction up (stops it on the node again), never evicts again.
    assert [e["pod"] for e in daemon.events if e.get("event") == "evicting pod"] == [f"{hog.namespace}/{hog.name}"]
    follow_ups = [e for e in daemon.events if e.get("event") == FOLLOW_UP_EVENT]
    assert all(e["pod"] == f"{hog.namespace}/{hog.name}" and e["kind"] == "stopped_again" for e in follow_ups)
    print(f"follow-ups of the hog's eviction: {len(follow_ups)}")

    still = node.pod(quiet)
    assert still is not None and "deletionTimestamp" not in still["metadata"]
    assert still["status"]["phase"] == "Running" and not node.events(quiet, "Evicted")

    wait_until(lambda: (node.condition(CONDITION) or {}).get("status") == "False", 30, "the pressure to clear")
    assert daemon.stop() == 0
    stopped = node.condition(CONDITION)
    assert stopped is not None and (stopped["status"], stopped["reason"]) == ("Unknown", "EvictdStopped")
    assert not [key for key in node.taint_keys() if key.startswith("evictd.io/")]


def test_a_pod_that_ignores_sigterm_and_has_a_finalizer_stays_terminal_with_the_disruption_condition(
    node_under_test: NodeUnderTest,
) -> None:
    node = node_under_test
    daemon, _ = start_evictd_under_memory_threshold(node)
    hog = node.run_pod(new_name("hog"), memory_hog(HOG_MIB, on_sigterm=""), requests={"memory": "32Mi"},
                       finalizers=[FINALIZER])

    evicting = daemon.wait_event("evicting pod", timeout=30, pod=f"{hog.namespace}/{hog.name}")

    def terminal() -> bool:
        # From the recorder's watch, which the checks below read (a GET can answer the new phase first).
        return any(v.status.get("phase") in ("Succeeded", "Failed") for v in node.versions(hog))

    wait_until(terminal, 30, "the kubelet to report the evicted pod terminal")
    versions = assert_evicted_as_the_kubelet_leaves_it(node, hog, evicting["message"])
    assert terminal_phase(versions) == "Failed"  # killed: exit code 137
    deleted = first(versions, lambda v: v.metadata.get("deletionTimestamp"))
    ended = first(versions, lambda v: v.status.get("phase") == "Failed")
    stopped_after_s = ended.at - deleted.at
    assert stopped_after_s >= KUBELET_MINIMUM_GRACE_S - 0.5, f"stopped {stopped_after_s:.2f} s after the DELETE"
    [status] = ended.status["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 137

    # The finalizer holds the object: what its controller then sees is the kubelet's record of the eviction.
    held = node.pod(hog)
    assert held is not None and held["metadata"]["deletionTimestamp"]
    assert (held["status"]["phase"], held["status"].get("reason")) == ("Failed", None)
    assert [c["status"] for c in held["status"]["conditions"] if c["type"] == "DisruptionTarget"] == ["True"]
    assert {c["type"] for c in held["status"]["conditions"]} - {"DisruptionTarget"} <= KUBELET_OWNED_CONDITIONS

    node.remove_finalizers(hog)
    node.wait_gone(hog)
    assert daemon.stop() == 0

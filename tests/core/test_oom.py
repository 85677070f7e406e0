"""The OOM-kill feedback's arithmetic: counter deltas, attribution to pods, and the "too late" judgement."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import pod
from evictd.core.engine import Assessment, Eviction, NoneStarved, ThresholdStatus
from evictd.core.kubelet_config import eviction_settings
from evictd.core.oom import (
    OOM_KILL_REASON,
    TOO_LATE_REASON,
    TOO_LATE_WINDOW_S,
    Activity,
    CgroupOomCount,
    OomReading,
    OomReport,
    OomState,
    PodOomKill,
    activity_after_cycle,
    cgroups_walk_needed,
    counter_delta,
    oom_feedback,
    oom_kill_events,
    pod_oom_kills,
)
from evictd.core.pod_parser import pod_from_dict
from evictd.core.signals import Signal
from evictd.core.thresholds import Threshold

THRESHOLDS = {
    t.signal: t for t in eviction_settings({
        "evictionHard": {"memory.available": "500Mi", "nodefs.available": "10%"},
        "evictionSoft": {"allocatableMemory.available": "1Gi"},
        "evictionSoftGracePeriod": {"allocatableMemory.available": "1m"},
        "enforceNodeAllocatable": [],
    }).thresholds()
}
HARD_MEMORY = THRESHOLDS[Signal.MEMORY_AVAILABLE]
SOFT_ALLOCATABLE = THRESHOLDS[Signal.ALLOCATABLE_MEMORY_AVAILABLE]
NODEFS = THRESHOLDS[Signal.NODEFS_AVAILABLE]
HOG = pod_from_dict(pod("hog"))


def met(*statuses: tuple[Threshold, bool]) -> Assessment:
    return Assessment(NoneStarved(), thresholds=tuple(ThresholdStatus(t, grace_met=g, observed_for_s=0.0) for t, g in statuses))


def eviction(threshold: Threshold | None) -> Eviction:
    return Eviction(pod=HOG, signal=str(threshold.signal) if threshold else "ephemeral-storage",
                    grace_period_override_s=1, effective_grace_period_s=1, message="m", annotations={}, conditions=(),
                    threshold=threshold)


@pytest.mark.parametrize(("before", "now", "delta"), [
    pytest.param(3, 5, 2, id="moved"),
    pytest.param(5, 5, 0, id="still"),
    pytest.param(7, 2, 2, id="went-down-made-anew"),
    pytest.param(None, 4, 0, id="no-previous"),
    pytest.param(4, None, 0, id="unreadable-now"),
])
def test_counter_delta(before: int | None, now: int | None, delta: int) -> None:
    assert counter_delta(before, now) == delta


@pytest.mark.parametrize(("state", "node", "pods", "needed"), [
    pytest.param(OomState(), 5, None, True, id="no-walk-yet"),
    pytest.param(OomState(walked=True, node_at_walk=5), 5, None, False, id="v1-node-still"),
    pytest.param(OomState(walked=True, node_at_walk=5), 6, None, True, id="v1-node-moved"),
    pytest.param(OomState(walked=True, node_at_walk=5), None, None, True, id="v1-node-unreadable"),
    pytest.param(OomState(walked=True, node_at_walk=5, pods_at_walk=2), 9, 2, False, id="v2-kill-outside-pods"),
    pytest.param(OomState(walked=True, node_at_walk=5, pods_at_walk=2), 6, 3, True, id="v2-pods-moved"),
])
def test_cgroups_walk_needed(state: OomState, node: int | None, pods: int | None, needed: bool) -> None:
    assert cgroups_walk_needed(state, node, pods) is needed


@pytest.mark.parametrize(("assessment", "evictions", "failed", "dry_run", "activity"), [
    pytest.param(Assessment(NoneStarved()), (), False, False, Activity.IDLE, id="nothing-met"),
    pytest.param(met((NODEFS, True)), (), False, False, Activity.IDLE, id="only-disk-met"),
    pytest.param(met((SOFT_ALLOCATABLE, False)), (), False, False, Activity.GRACE_PERIOD, id="soft-grace-running"),
    pytest.param(met((HARD_MEMORY, True)), (), False, False, Activity.NOT_EVICTED, id="met-nobody-evicted"),
    pytest.param(met((HARD_MEMORY, True)), (eviction(HARD_MEMORY),), False, False, Activity.WAITING_FOR_CLEANUP,
                 id="evicted"),
    pytest.param(met((HARD_MEMORY, True)), (eviction(HARD_MEMORY),), True, False, Activity.EVICTION_FAILED,
                 id="api-down"),
    pytest.param(met((HARD_MEMORY, True)), (eviction(HARD_MEMORY),), False, True, Activity.NOT_EVICTED,
                 id="dry-run"),
    pytest.param(met((NODEFS, True)), (eviction(NODEFS),), False, False, Activity.IDLE, id="disk-eviction"),
    pytest.param(Assessment(NoneStarved()), (eviction(None),), False, False, Activity.IDLE, id="local-storage-eviction"),
])
def test_activity_after_cycle(
    assessment: Assessment, evictions: tuple[Eviction, ...], failed: bool, dry_run: bool, activity: Activity
) -> None:
    assert activity_after_cycle(assessment, evictions, failed, dry_run) is activity


UID_A, UID_B = "aaaa-1111", "bbbb-2222"
CTR_1, CTR_2 = "1" * 64, "2" * 64


def v1(path: str, kills: int, uid: str = "", cid: str = "") -> CgroupOomCount:
    return CgroupOomCount(path=path, oom_kills=kills, pod_uid=uid, container_id=cid)


def v2(path: str, kills: int, uid: str, cid: str = "", groups: int = 0) -> CgroupOomCount:
    return CgroupOomCount(path=path, oom_kills=kills, pod_uid=uid, container_id=cid, group_kills=groups,
                          hierarchical=True)


def test_v1_local_counters_add_up_per_pod_and_container() -> None:
    before = {"kubepods": 0, "kubepods/burstable": 0, f"kubepods/burstable/pod{UID_A}": 0,
              f"kubepods/burstable/pod{UID_A}/{CTR_1}": 1}
    counts = [v1("kubepods", 0), v1("kubepods/burstable", 1), v1(f"kubepods/burstable/pod{UID_A}", 1, UID_A),
              v1(f"kubepods/burstable/pod{UID_A}/{CTR_1}", 3, UID_A, CTR_1),
              v1(f"kubepods/burstable/pod{UID_A}/{CTR_2}", 1, UID_A, CTR_2),  # new since: all its kills are
              v1(f"kubepods/pod{UID_B}", 0, UID_B)]
    kills, total = pod_oom_kills(before, {}, counts)
    pod_a = f"kubepods/burstable/pod{UID_A}"
    assert kills == (PodOomKill(UID_A, "", pod_a, 1), PodOomKill(UID_A, CTR_1, pod_a, 2),
                     PodOomKill(UID_A, CTR_2, pod_a, 1))
    assert total == 5  # the tier's own kill is in the pods total, in no pod


def test_v2_hierarchical_pod_counter_keeps_kills_of_a_removed_container() -> None:
    pod_b = f"kubepods.slice/kubepods-pod{UID_B}.slice"
    before = {pod_b: 2, f"{pod_b}/cri-containerd-{CTR_1}.scope": 2}
    # The container of the earlier kills is gone; a new one was killed once, and once more in a container
    # removed before this reading: the pod's counter says 4 more, its present container only 1.
    counts = [v2(pod_b, 6, UID_B, groups=2), v2(f"{pod_b}/cri-containerd-{CTR_2}.scope", 1, UID_B, CTR_2, groups=1)]
    kills, total = pod_oom_kills(before, {}, counts)
    assert kills == (PodOomKill(UID_B, "", pod_b, 3, group_kills=1), PodOomKill(UID_B, CTR_2, pod_b, 1, 1))
    assert total == 0  # hierarchical counters: the pods total comes from the pods cgroup's own counter


def walk(*counts: CgroupOomCount) -> tuple[CgroupOomCount, ...]:
    return counts


POD_A = f"kubepods/pod{UID_A}"


def test_first_reading_is_the_baseline_then_each_kill_counts_once() -> None:
    state, report = oom_feedback(OomState(), OomReading(node=10, cgroups=walk(v1(POD_A, 4, UID_A))), Activity.IDLE,
                                 now=0.0)
    assert report == OomReport()  # kills before evictd started are not counted
    state, report = oom_feedback(state, OomReading(node=12, cgroups=walk(v1(POD_A, 5, UID_A))), Activity.IDLE, 10.0)
    assert (report.node_kills, report.pods_kills, report.attributed_kills) == (2, 1, 1)
    assert report.outside_pods_kills == 1 and report.unattributed_pods_kills == 0
    assert not report.pods_counted_exactly, "v1: summed over the cgroups still present"
    assert report.pod_kills == (PodOomKill(UID_A, "", POD_A, 1),)
    state, report = oom_feedback(state, OomReading(node=12, cgroups=None), Activity.IDLE, 20.0)
    assert not report.has_kills, "nothing moved: nothing counted again"


def test_a_walk_that_failed_is_made_up_by_the_next_one() -> None:
    state, _ = oom_feedback(OomState(), OomReading(node=1, cgroups=walk(v1(POD_A, 0, UID_A))), Activity.IDLE, 0.0)
    state, report = oom_feedback(state, OomReading(node=2, cgroups=None), Activity.IDLE, 10.0)  # walk failed
    assert (report.node_kills, report.pod_kills) == (1, ())
    assert cgroups_walk_needed(state, 2, None), "the node counter moved since the last walk that worked"
    state, report = oom_feedback(state, OomReading(node=2, cgroups=walk(v1(POD_A, 1, UID_A))), Activity.IDLE, 20.0)
    assert report.node_kills == 0 and report.pod_kills == (PodOomKill(UID_A, "", POD_A, 1),)
    assert not cgroups_walk_needed(state, 2, None)


def test_v2_pods_total_comes_from_the_pods_counter() -> None:
    pod_b = f"kubepods.slice/kubepods-pod{UID_B}.slice"
    state, _ = oom_feedback(OomState(), OomReading(node=5, pods=1, cgroups=walk(v2(pod_b, 1, UID_B))),
                            Activity.IDLE, 0.0)
    state, report = oom_feedback(state, OomReading(node=7, pods=3, cgroups=walk(v2(pod_b, 2, UID_B))),
                                 Activity.IDLE, 10.0)
    assert (report.node_kills, report.pods_kills, report.attributed_kills) == (2, 2, 1)
    assert report.unattributed_pods_kills == 1  # a pod removed since: in the pods counter, in no pod cgroup
    assert report.pods_counted_exactly


def run(steps: list[tuple[int, Activity, float]]) -> list[OomReport]:
    """Feed node counter readings with the activity each cycle leaves, from a baseline at 0."""
    state, _ = oom_feedback(OomState(), OomReading(node=0, cgroups=()), Activity.IDLE, 0.0)
    reports = []
    for node, activity, now in steps:
        state, report = oom_feedback(state, OomReading(node=node, cgroups=()), activity, now)
        reports.append(report)
    return reports


@pytest.mark.parametrize(("steps", "activity", "too_late"), [
    pytest.param([(1, Activity.IDLE, 10.0)], Activity.IDLE, 0, id="no-pressure-not-too-late"),
    pytest.param([(0, Activity.GRACE_PERIOD, 10.0), (2, Activity.GRACE_PERIOD, 20.0)], Activity.GRACE_PERIOD, 2,
                 id="during-grace-period"),
    pytest.param([(0, Activity.EVICTION_FAILED, 10.0), (1, Activity.IDLE, 20.0)], Activity.EVICTION_FAILED, 1,
                 id="api-down"),
    pytest.param([(0, Activity.WAITING_FOR_CLEANUP, 10.0), (1, Activity.IDLE, 40.0)],
                 Activity.WAITING_FOR_CLEANUP, 1, id="while-cleanup-waited"),
    pytest.param([(0, Activity.WAITING_FOR_CLEANUP, 10.0), (0, Activity.IDLE, 40.0), (1, Activity.IDLE, 50.0)],
                 Activity.AFTER_EVICTION, 1, id="in-window-after-eviction"),
    pytest.param([(0, Activity.WAITING_FOR_CLEANUP, 10.0), (0, Activity.IDLE, 40.0),
                  (1, Activity.IDLE, 11.0 + TOO_LATE_WINDOW_S)], Activity.IDLE, 0, id="past-the-window"),
    pytest.param([(1, Activity.GRACE_PERIOD, 10.0)], Activity.PRESSURE_UNSEEN, 1, id="pressure-first-seen-after"),
    pytest.param([(0, Activity.NOT_EVICTED, 10.0), (3, Activity.NOT_EVICTED, 20.0)], Activity.NOT_EVICTED, 3,
                 id="nobody-evictable"),
])
def test_too_late_classification(steps: list[tuple[int, Activity, float]], activity: Activity, too_late: int) -> None:
    last = run(steps)[-1]
    assert (last.activity, last.too_late_kills) == (activity, too_late)


def test_events_name_the_pod_and_container_and_what_evictd_was_doing() -> None:
    report = OomReport(node_kills=4, pods_kills=3, activity=Activity.GRACE_PERIOD, too_late_kills=4, pod_kills=(
        PodOomKill(UID_A, CTR_1, POD_A, 1, pod_key="shop/cart", container_name="app"),
        PodOomKill(UID_B, "", "kubepods/podb", 1)), pods_counted_exactly=True)
    assert oom_kill_events(report) == (
        (TOO_LATE_REASON, "OOM killer killed 1 process in pod shop/cart (container app) while a memory "
                          "threshold was met, its grace period running"),
        (TOO_LATE_REASON, f"OOM killer killed 1 process in pod with UID {UID_B} while a memory threshold "
                          "was met, its grace period running"),
        (TOO_LATE_REASON, "OOM killer killed 1 process in the pods cgroup, in no pod cgroup still present, while "
                          "a memory threshold was met, its grace period running"),
        (TOO_LATE_REASON, "OOM killer killed 1 process outside the pods cgroup while a memory threshold "
                          "was met, its grace period running"),
    )
    quiet = replace(report, activity=Activity.IDLE, too_late_kills=0, pod_kills=(), node_kills=2, pods_kills=0)
    assert oom_kill_events(quiet) == ((OOM_KILL_REASON, "OOM killer killed 2 processes outside the pods cgroup "
                                                        "while no memory threshold was met"),)
    # Summed v1 counters miss container cgroups removed before they were read: the event says so.
    summed = replace(quiet, pods_counted_exactly=False)
    assert oom_kill_events(summed) == ((OOM_KILL_REASON, "OOM killer killed 2 processes outside the pods cgroup or "
                                                         "in a container cgroup removed since while no memory "
                                                         "threshold was met"),)
    unnamed = replace(report, pod_kills=(PodOomKill(UID_A, CTR_1, POD_A, 2),), pods_kills=2, node_kills=2)
    assert oom_kill_events(unnamed)[0][1].startswith(f"OOM killer killed 2 processes in pod with UID {UID_A} "
                                                     f"(container {CTR_1[:12]})")

"""Manager scenarios: the real eviction manager stepped on a fake clock (KUBELET_SPEC §5-§12, §17).

Each test writes a scenario in real Kubernetes formats and checks conditions, thresholds, reclaim, ranking
and the eviction after every step, as the kubelet's own eviction_manager_test.go does.
"""

from __future__ import annotations

from typing import Any

import pytest

from builders import Gi, Mi, fs, pod, pod_stats, stamp, summary
from clocks import ManualClock
from cycle_reports import simulate_steps
from evictd.commands.simulate import (
    FixedLayout,
    RecordingEvictor,
    RecordingReclaimer,
    ScriptedPods,
    ScriptedStats,
    parse_scenario,
)
from evictd.core.engine import EngineConfig, EngineState, ReclaimThenEvict, Skipped, assess
from evictd.core.errors import SampleError, ScenarioError
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings, apply_flags
from evictd.core.pod_parser import pod_from_dict
from evictd.core.summary_parser import summary_from_dict
from evictd.cycle.manager import EvictionManager
from evictd.cycle.report import CycleStep


def evicted(step: dict[str, Any]) -> list[str]:
    return [f"{e['namespace']}/{e['name']}" for e in step["evicted"]]


# --- memory ----------------------------------------------------------------------------------------------

BEST_EFFORT = pod("best-effort")
BURSTABLE_HOG = pod("burstable-hog", requests={"memory": "100Mi"}, priority=0)
BURSTABLE_OK = pod("burstable-ok", requests={"memory": "1Gi"}, priority=0)
GUARANTEED = pod("guaranteed", requests={"memory": "1Gi", "cpu": "1"}, limits={"memory": "1Gi", "cpu": "1"})
HIGH_PRIORITY_HOG = pod("high-priority-hog", requests={"memory": "100Mi"}, priority=1000)
MEMORY_PODS = [GUARANTEED, BURSTABLE_OK, HIGH_PRIORITY_HOG, BURSTABLE_HOG, BEST_EFFORT]


def memory_stats() -> list[dict[str, Any]]:
    return [
        pod_stats(GUARANTEED, memory=900 * Mi),
        pod_stats(BURSTABLE_OK, memory=500 * Mi),
        pod_stats(HIGH_PRIORITY_HOG, memory=2 * Gi),
        pod_stats(BURSTABLE_HOG, memory=1 * Gi),
        pod_stats(BEST_EFFORT, memory=300 * Mi),
    ]


MEMORY_CONFIG = {
    "evictionHard": {"memory.available": "1Gi"},
    "evictionSoft": {"memory.available": "2Gi"},
    "evictionSoftGracePeriod": {"memory.available": "1m30s"},
    "evictionMaxPodGracePeriod": 5,
    "evictionPressureTransitionPeriod": "5m",
}


def memory_step(at: float, available: int, second: int) -> dict[str, Any]:
    return {"at": at, "summary": summary(memory=available, time=stamp(second), pods=memory_stats())}


def test_memory_pressure_soft_then_hard_then_recovery() -> None:
    steps = simulate_steps({
        "config": MEMORY_CONFIG,
        "pods": MEMORY_PODS,
        "steps": [
            memory_step(0, 3 * Gi, 0),
            memory_step(10, 1500 * Mi, 1),   # soft met: condition at once, grace not yet met
            memory_step(100, 1500 * Mi, 2),  # 90 s later: soft grace met -> evict with soft grace
            memory_step(110, 500 * Mi, 3),   # hard met -> evict at once with 1 s
            memory_step(120, 3 * Gi, 4),     # pressure gone, condition lingers
            memory_step(409, 3 * Gi, 5),     # 299 s after the last sighting: still reported
            memory_step(410, 3 * Gi, 6),     # 300 s: strict < clears it
        ],
    })
    assert [s["conditions"] for s in steps] == [[], ["MemoryPressure"], ["MemoryPressure"], ["MemoryPressure"],
                                                ["MemoryPressure"], ["MemoryPressure"], []]
    assert steps[1]["thresholdsMet"] == [
        {"signal": "memory.available", "value": {"quantity": "2Gi"}, "gracePeriodSeconds": 90, "graceMet": False}
    ]
    assert steps[1]["evicted"] == [] and steps[1]["ranking"] == []
    # Ranking: pods over their request first; within them lower priority first; then usage above request.
    # Within each group lower priority first, then the larger usage above request.
    assert steps[2]["ranking"] == ["default/burstable-hog", "default/best-effort", "default/high-priority-hog",
                                   "default/guaranteed", "default/burstable-ok"]
    (soft,) = steps[2]["evicted"]
    assert (soft["name"], soft["signal"], soft["gracePeriodSeconds"], soft["effectiveGracePeriodSeconds"]) == (
        "burstable-hog", "memory.available", 5, 5)
    assert soft["message"] == (
        "The node was low on resource: memory. Threshold quantity: 2Gi, available: 1500Mi. "
        "Container app was using 1Gi, request is 100Mi, has larger consumption of memory. "
    )
    assert soft["annotations"] == {"offending_containers": "app", "offending_containers_usage": "1Gi",
                                   "starved_resource": "memory"}
    assert soft["conditions"] == [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                                   "message": soft["message"], "observedGeneration": 1}]
    (hard,) = steps[3]["evicted"]
    assert (hard["name"], hard["gracePeriodSeconds"]) == ("burstable-hog", 1)
    assert hard["message"].startswith("The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. ")
    assert all(s["evicted"] == [] for s in steps[4:])


def test_hard_threshold_wins_over_soft_in_the_same_cycle() -> None:
    config = {**MEMORY_CONFIG, "evictionSoftGracePeriod": {"memory.available": "0s"}}
    (step,) = simulate_steps({"config": config, "pods": MEMORY_PODS, "steps": [memory_step(0, 500 * Mi, 0)]})
    assert step["evicted"][0]["gracePeriodSeconds"] == 1
    assert "Threshold quantity: 1Gi" in step["evicted"][0]["message"]


@pytest.mark.parametrize(
    ("max_pod_grace", "pod_grace", "override", "effective"),
    # An override of 0 stays 0 in the v1.36 pod worker (its `overridden` flag) and becomes 1 s: not the pod's
    # own grace period (../shared/kubelet-divergences/04-soft-eviction-override-0-effective-grace.yaml).
    [(5, 2, 2, 2), (5, 60, 5, 5), (0, 2, 0, 1), (0, 45, 0, 1), (-1, 30, -1, 1), (5, None, 5, 5)],
    ids=["pod-shorter", "max-shorter", "zero-becomes-1s", "zero-becomes-1s-not-45", "negative-becomes-1s",
         "no-pod-grace"],
)
def test_soft_grace_period_override(max_pod_grace: int, pod_grace: int | None, override: int, effective: int) -> None:
    config = {"evictionHard": {}, "evictionSoft": {"memory.available": "2Gi"},
              "evictionSoftGracePeriod": {"memory.available": "10s"}, "evictionMaxPodGracePeriod": max_pod_grace}
    victim = pod("victim", grace=pod_grace)
    node = summary(memory=1500 * Mi, pods=[pod_stats(victim, memory=Gi)])
    steps = simulate_steps({"config": config, "pods": [victim],
                      "steps": [{"at": 0, "summary": node}, {"at": 10, "summary": node}]})
    assert steps[0]["evicted"] == []
    (eviction,) = steps[1]["evicted"]
    assert (eviction["gracePeriodSeconds"], eviction["effectiveGracePeriodSeconds"]) == (override, effective)


def test_stale_stats_update_conditions_but_never_evict() -> None:
    steps = simulate_steps({
        "config": {"evictionHard": {"memory.available": "1Gi"}},
        "pods": MEMORY_PODS,
        "steps": [memory_step(0, 500 * Mi, 0), memory_step(10, 500 * Mi, 0), memory_step(20, 500 * Mi, 1)],
    })
    assert [len(s["evicted"]) for s in steps] == [1, 0, 1]
    assert all(s["conditions"] == ["MemoryPressure"] for s in steps)


def test_one_pod_per_cycle_and_critical_pods_skipped() -> None:
    static = pod("etcd", namespace="kube-system", annotations={"kubernetes.io/config.source": "file"})
    mirror = pod("apiserver", namespace="kube-system", annotations={"kubernetes.io/config.mirror": "abc"})
    critical = pod("dns", namespace="kube-system", priority=2_000_000_000)
    victim = pod("victim", requests={"memory": "1Gi"})
    stats = [pod_stats(static, memory=3 * Gi), pod_stats(mirror, memory=3 * Gi), pod_stats(critical, memory=3 * Gi),
             pod_stats(victim, memory=100 * Mi)]
    steps = simulate_steps({
        "config": {"evictionHard": {"memory.available": "1Gi"}},
        "pods": [static, mirror, critical, victim],
        "steps": [{"at": 0, "summary": summary(memory=100 * Mi, pods=stats)},
                  {"at": 10, "summary": summary(memory=100 * Mi, pods=stats[:3]), "pods": [static, mirror, critical]}],
    })
    assert steps[0]["ranking"][:3] == ["kube-system/etcd", "kube-system/apiserver", "kube-system/dns"]
    assert evicted(steps[0]) == ["default/victim"]
    assert len(steps[1]["ranking"]) == 3 and steps[1]["evicted"] == []


def test_pods_without_stats_are_ranked_first() -> None:
    quiet = pod("no-stats", requests={"memory": "4Gi"}, priority=100)
    hog = pod("hog")
    (step,) = simulate_steps({
        "config": {"evictionHard": {"memory.available": "1Gi"}},
        "pods": [hog, quiet],
        "steps": [{"at": 0, "summary": summary(memory=100 * Mi, pods=[pod_stats(hog, memory=3 * Gi)])}],
    })
    assert step["ranking"] == ["default/no-stats", "default/hog"]
    assert step["evicted"][0]["message"] == (
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 100Mi. "
    )
    assert step["evicted"][0]["annotations"] == {}


def test_allocatable_memory_copy_raises_memory_pressure() -> None:
    victim = pod("victim")
    (step,) = simulate_steps({
        "config": {"evictionHard": {"memory.available": "500Mi"}},
        "pods": [victim],
        "steps": [{"at": 0, "summary": summary(memory=4 * Gi, allocatable=400 * Mi,
                                               pods=[pod_stats(victim, memory=Gi)])}],
    })
    assert step["conditions"] == ["MemoryPressure"]
    assert [t["signal"] for t in step["thresholdsMet"]] == ["allocatableMemory.available"]
    assert step["evicted"][0]["signal"] == "allocatableMemory.available"


# --- disk ------------------------------------------------------------------------------------------------

DISK_HOG = pod("disk-hog", requests={"ephemeral-storage": "100Mi"})
DISK_OK = pod("disk-ok", requests={"ephemeral-storage": "2Gi"})


def disk_stats() -> list[dict[str, Any]]:
    return [pod_stats(DISK_OK, rootfs=Gi, logs=10 * Mi), pod_stats(DISK_HOG, rootfs=600 * Mi, logs=100 * Mi)]


def test_nodefs_pressure_reclaims_first_and_evicts_only_if_not_enough() -> None:
    steps = simulate_steps({
        "config": {"evictionHard": {"nodefs.available": "2Gi"}, "evictionMinimumReclaim": {"nodefs.available": "1Gi"}},
        "pods": [DISK_OK, DISK_HOG],
        "steps": [
            {"at": 0, "summary": summary(nodefs=fs(1536 * Mi, 100 * Gi), pods=disk_stats()),
             "afterReclaim": summary(nodefs=fs(4 * Gi, 100 * Gi), pods=disk_stats())},
            {"at": 10, "summary": summary(nodefs=fs(1536 * Mi, 100 * Gi), pods=disk_stats()),
             "afterReclaim": summary(nodefs=fs(2560 * Mi, 100 * Gi), pods=disk_stats())},
        ],
    })
    first, second = steps
    assert first["conditions"] == ["DiskPressure"]
    assert (first["reclaim"], first["reclaimSucceeded"], first["ranking"], first["evicted"]) == (
        ["containerGC", "imageGC"], True, [], [])
    # 2.5Gi free is above the threshold but below threshold + minimum reclaim: reclaim is not enough.
    assert (second["reclaim"], second["reclaimSucceeded"]) == (["containerGC", "imageGC"], False)
    assert second["ranking"] == ["default/disk-hog", "default/disk-ok"]
    (eviction,) = second["evicted"]
    assert eviction["message"] == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 2Gi, available: 1536Mi. "
        "Container app was using 700Mi, request is 100Mi, has larger consumption of ephemeral-storage. "
    )


def test_min_reclaim_keeps_a_fired_threshold_met() -> None:
    stats = disk_stats()
    config = {"evictionHard": {"imagefs.available": "1Gi"}, "evictionMinimumReclaim": {"imagefs.available": "500Mi"}}
    steps = simulate_steps({
        "config": config,
        "layout": {"dedicatedImageFs": True},
        "pods": [DISK_OK, DISK_HOG],
        "steps": [
            {"at": 0, "summary": summary(imagefs=fs(900 * Mi, 50 * Gi), pods=stats)},
            {"at": 10, "summary": summary(imagefs=fs(1200 * Mi, 50 * Gi), pods=stats)},
            {"at": 20, "summary": summary(imagefs=fs(1600 * Mi, 50 * Gi), pods=stats)},
        ],
    })
    assert [len(s["evicted"]) for s in steps] == [1, 1, 0]
    assert [s["reclaim"] for s in steps] == [["containerGC", "imageGC"]] * 2 + [[]]


@pytest.mark.parametrize(
    ("layout", "signal", "reclaim"),
    [
        ({}, "nodefs.available", ["containerGC", "imageGC"]),
        ({"dedicatedImageFs": True}, "nodefs.available", []),
        ({"dedicatedImageFs": True}, "imagefs.available", ["containerGC", "imageGC"]),
        ({"dedicatedImageFs": True, "splitContainerFs": True}, "nodefs.available", ["containerGC"]),
        ({"dedicatedImageFs": True, "splitContainerFs": True}, "imagefs.available", ["imageGC"]),
    ],
    ids=["single-fs-nodefs", "imagefs-only-nodefs", "imagefs-only-imagefs", "split-nodefs", "split-imagefs"],
)
def test_reclaim_plan_per_layout(layout: dict[str, bool], signal: str, reclaim: list[str]) -> None:
    low, plenty = fs(Gi, 100 * Gi), fs(50 * Gi, 100 * Gi)
    node = summary(nodefs=low if signal.startswith("nodefs") else plenty,
                   imagefs=low if signal.startswith("imagefs") else plenty, pods=disk_stats())
    (step,) = simulate_steps({"config": {"evictionHard": {signal: "2Gi"}}, "layout": layout,
                        "pods": [DISK_OK, DISK_HOG], "steps": [{"at": 0, "summary": node}]})
    assert step["reclaim"] == reclaim
    assert step["reclaimSucceeded"] is (None if not reclaim else False)
    assert len(step["evicted"]) == 1


def test_imagefs_ranking_with_split_layout_ignores_usage() -> None:
    small_request = pod("small-request", requests={"ephemeral-storage": "1Mi"})
    big_request = pod("big-request", requests={"ephemeral-storage": "1Gi"})
    stats = [pod_stats(big_request, rootfs=10 * Gi), pod_stats(small_request, rootfs=Mi)]
    (step,) = simulate_steps({
        "config": {"evictionHard": {"imagefs.available": "2Gi"}},
        "layout": {"dedicatedImageFs": True, "splitContainerFs": True},
        "pods": [big_request, small_request],
        "steps": [{"at": 0, "summary": summary(imagefs=fs(Gi, 100 * Gi), pods=stats)}],
    })
    assert step["ranking"] == ["default/small-request", "default/big-request"]


def test_local_storage_limits_evict_many_pods_without_conditions() -> None:
    empty_dir = pod("empty-dir", volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "100Mi"}}])
    over_limit = pod("over-limit", limits={"ephemeral-storage": "200Mi"})
    fine = pod("fine", limits={"ephemeral-storage": "1Gi"})
    static = pod("static", annotations={"kubernetes.io/config.source": "file"},
                 limits={"ephemeral-storage": "1Mi"})
    stats = [pod_stats(empty_dir, volumes={"scratch": 200 * Mi}), pod_stats(over_limit, ephemeral=300 * Mi, logs=Mi),
             pod_stats(fine, ephemeral=100 * Mi), pod_stats(static, ephemeral=Gi, logs=Gi)]
    (step,) = simulate_steps({
        "config": {"evictionHard": {"memory.available": "1Gi"}},
        "pods": [empty_dir, over_limit, fine, static],
        "steps": [{"at": 0, "summary": summary(memory=100 * Mi, pods=stats)}],
    })
    assert evicted(step) == ["default/empty-dir", "default/over-limit"]
    assert [e["signal"] for e in step["evicted"]] == ["emptydirfs.limit", "ephemeralpodfs.limit"]
    assert step["evicted"][0]["message"] == 'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". '
    assert all(e["conditions"] == [] and e["annotations"] == {} and e["gracePeriodSeconds"] == 1
               for e in step["evicted"])
    assert step["conditions"] == ["MemoryPressure"] and step["ranking"] == []


# --- pids ------------------------------------------------------------------------------------------------

def test_pid_pressure_ranks_by_priority_then_process_count() -> None:
    few = pod("few", priority=0)
    many = pod("many", priority=0)
    important = pod("important", priority=100)
    stats = [pod_stats(few, processes=10), pod_stats(many, processes=500), pod_stats(important, processes=900)]
    (step,) = simulate_steps({
        "config": {"evictionHard": {"pid.available": "1k"}},
        "pods": [few, important, many],
        "steps": [{"at": 0, "summary": summary(pids=(32768, 32000), pods=stats)}],
    })
    assert step["conditions"] == ["PIDPressure"]
    assert step["ranking"] == ["default/many", "default/few", "default/important"]
    assert step["evicted"][0]["message"] == (
        "The node was low on resource: pids. Threshold quantity: 1k, available: 768. ")


# --- manager behaviour around failures and configuration edges -------------------------------------------

class BreakableStats(ScriptedStats):
    """Scripted stats that can be made unreadable, as a cgroup file that starts failing."""

    broken = False

    def memory_reading(self):  # type: ignore[no-untyped-def]  # confirmed on whole Summaries
        return None

    def summary(self, pods, *, reread=False, runtime_wait_s=None):  # type: ignore[no-untyped-def]
        if self.broken:
            raise SampleError("/sys/fs/cgroup/memory/memory.stat", "Permission denied")
        return super().summary(pods, reread=reread)


def test_unreadable_stats_freeze_conditions_and_evict_nothing() -> None:
    victim = pod_from_dict(pod("victim"))
    config = EngineConfig.from_settings(EvictionSettings(hard={"memory.available": "1Gi"}))
    stats, pods, clock = BreakableStats(), ScriptedPods(), ManualClock(0.0)
    manager = EvictionManager(config, stats=stats, layout=FixedLayout(FsLayout()), pods=pods,
                              reclaimer=RecordingReclaimer(stats), evictor=(evictor := RecordingEvictor()),
                              clock=clock)
    scenario = parse_scenario({"config": {"evictionHard": {"memory.available": "1Gi"}}, "pods": [pod("victim")],
                               "steps": [{"at": 0, "summary": summary(memory=100 * Mi)}]})
    stats.step, pods.pods = scenario.steps[0], (victim,)
    first = manager.synchronize()
    assert first.decided.assessment.node_conditions == ("MemoryPressure",) and len(evictor.evictions) == 1
    stats.broken = True
    clock.now_s = 400  # far past the transition period: conditions would clear if stats were read
    second = manager.synchronize()
    assert second.decided.assessment.node_conditions == ("MemoryPressure",)
    assert second.decided.assessment.next_step == Skipped("stats unavailable") and len(evictor.evictions) == 1
    assert second.errors[0].step is CycleStep.STATS and "Permission denied" in second.errors[0].description


def test_transition_period_zero_never_reports_a_condition() -> None:
    settings = apply_flags(EvictionSettings(hard={"memory.available": "1Gi"}),
                           [("eviction-pressure-transition-period", "0s")])
    config = EngineConfig.from_settings(settings)
    node = summary_from_dict(summary(memory=100 * Mi))
    _, assessment = assess(EngineState(), config, FsLayout(), node, [], now=0.0)
    assert assessment.node_conditions == () and isinstance(assessment.next_step, ReclaimThenEvict)


def test_no_thresholds_and_no_isolation_does_nothing() -> None:
    config = EngineConfig(thresholds=(), local_storage_capacity_isolation=False)
    state, assessment = assess(EngineState(), config, FsLayout(), None, [], now=0.0)
    assert state == EngineState() and isinstance(assessment.next_step, Skipped)


def test_terminal_pods_are_not_active() -> None:
    done = pod("done", phase="Succeeded")
    running = pod("running")
    (step,) = simulate_steps({"config": {"evictionHard": {"memory.available": "1Gi"}}, "pods": [done, running],
                        "steps": [{"at": 0, "summary": summary(memory=Mi)}]})
    assert step["ranking"] == ["default/running"]


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        ({"pods": [{"metadata": {"name": 5}}]}, "pods[0].metadata.name: invalid value 5: must be a string"),
        ({"steps": [{"at": 0, "summary": {"node": {"memory": {"availableBytes": -1}}}}]},
         "steps[0].summary.node.memory.availableBytes: invalid value -1: must be between 0 and 9223372036854775807"),
        ({"steps": [{"at": 0, "summary": []}]}, "steps[0].summary: invalid value []: must be a mapping"),
        ({"steps": 5}, "steps: invalid value 5: must be a list"),
    ],
    ids=["bad-pod", "bad-summary", "summary-not-a-mapping", "steps-not-a-list"],
)
def test_a_bad_pod_or_summary_in_a_scenario_is_a_scenario_error_at_its_path(
    scenario: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario)
    assert str(caught.value) == message


def test_a_step_ranks_on_its_afterdiskwait_summary_and_without_one_as_the_kubelet() -> None:
    """A recorded cycle that waited for pods' disk figures replays on the Summary read after the wait
    (`afterDiskWait`); a scenario without one ranks pods not measured yet as using no disk, as the kubelet."""
    db = pod("db", requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
    filler = pod("filler", volumes=[{"name": "scratch", "emptyDir": {}}])
    unmeasured = summary(nodefs=fs(Gi, 100 * Gi), pods=[pod_stats(db, memory=Gi), pod_stats(filler, memory=Mi)])
    measured = summary(nodefs=fs(Gi, 100 * Gi), pods=[
        pod_stats(db, memory=Gi, logs=4096, ephemeral=4096),
        pod_stats(filler, memory=Mi, logs=4096, volumes={"scratch": 3 * Gi}, ephemeral=3 * Gi + 4096)])

    def first_evicted(step: dict[str, Any]) -> list[str]:
        steps = simulate_steps({"config": {"evictionHard": {"nodefs.available": "10%"}}, "pods": [db, filler],
                                "steps": [step]})
        return [eviction["name"] for eviction in steps[0]["evicted"]]

    assert first_evicted({"at": 0, "summary": unmeasured, "afterReclaim": unmeasured,
                          "afterDiskWait": measured}) == ["filler"]
    assert first_evicted({"at": 0, "summary": unmeasured, "afterReclaim": unmeasured}) == ["db"]

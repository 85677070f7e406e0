"""Metrics (src/evictd/observe/metrics.py): what one cycle's report exports, on the real manager's reports.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from builders import Gi, Mi, fs, stamp
from cycle_reports import (
    CAPACITY,
    MEMORY_CONFIG,
    MEMORY_STEPS,
    NOW_WALL,
    FailingLayout,
    FailingPods,
    Run,
    failing_cycle,
    run,
    with_failed_eviction,
    with_reclaim,
    without_pod_list,
)
from evictd.core.engine import EngineState, FollowUp, FollowUpKind
from evictd.core.errors import SampleError
from evictd.core.fs_layout import ReclaimAction
from evictd.core.signals import NodeCondition
from evictd.cycle.report import CycleReport, ReclaimResult
from evictd.observe.metrics import Metrics

# --------------------------------------------------------------------------------------------------
# Metrics


def recorded(run_: Run, upto: int, *, dry_run: bool = True) -> Metrics:
    """Return metrics fed with the first `upto` reports of a run, each decided 12 s after its stats."""
    metrics = Metrics()
    for report in run_.reports[:upto]:
        metrics.record_cycle(report, run_.state, 0.004, stats_time(report) + timedelta(seconds=12), dry_run)
    return metrics


def stats_time(report: CycleReport) -> datetime:
    summary = report.observed.summary
    assert summary is not None and summary.node.memory is not None
    assert summary.node.memory.time is not None
    return summary.node.memory.time


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def threshold_sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    """The one sample of a per-threshold series whose labels include `labels` (None: none; two fail)."""
    found = [sample_.value for family in metrics.registry.collect() for sample_ in family.samples
             if sample_.name == name and all(sample_.labels.get(k) == v for k, v in labels.items())]
    assert len(found) <= 1, f"{name} {labels} names {len(found)} series"
    return found[0] if found else None


def test_metrics_of_a_calm_cycle(memory_run: Run) -> None:
    metrics = recorded(memory_run, 1)
    assert sample(metrics, "evictd_cycles_total") == 1
    assert sample(metrics, "evictd_cycle_duration_seconds_count") == 1
    assert sample(metrics, "evictd_cycle_duration_seconds_sum") == 0.004
    assert sample(metrics, "evictd_signal_available_bytes", signal="memory.available") == 8 * Gi
    assert sample(metrics, "evictd_signal_capacity_bytes", signal="memory.available") == CAPACITY
    assert sample(metrics, "evictd_signal_available_bytes", signal="nodefs.available") == 80 * Gi
    assert sample(metrics, "evictd_stats_age_seconds", signal="memory.available") == 12
    assert threshold_sample(metrics, "evictd_threshold_bytes", signal="memory.available", kind="hard") == 1 * Gi
    assert threshold_sample(metrics, "evictd_threshold_bytes", signal="memory.available", kind="soft") == 2 * Gi
    # 10% of 100Gi in the kubelet's float32 arithmetic (KUBELET_SPEC §2.5), not 10Gi exactly.
    assert threshold_sample(metrics, "evictd_threshold_bytes", signal="nodefs.available", kind="hard") == 10737418400
    for kind in ("hard", "soft"):
        assert threshold_sample(metrics, "evictd_threshold_met", signal="memory.available", kind=kind) == 0
    for condition in NodeCondition:
        assert sample(metrics, "evictd_node_condition", condition=str(condition)) == 0
    assert sample(metrics, "evictd_dry_run_evictions_total", eviction_signal="memory.available") == 0
    assert sample(metrics, "evictd_errors_total", source="stats") == 0


def test_metrics_follow_thresholds_and_conditions(memory_run: Run) -> None:
    metrics = recorded(memory_run, 2)
    assert threshold_sample(metrics, "evictd_threshold_met", signal="memory.available", kind="soft") == 1
    assert threshold_sample(metrics, "evictd_threshold_met", signal="memory.available", kind="hard") == 0
    assert sample(metrics, "evictd_node_condition", condition="MemoryPressure") == 1
    assert sample(metrics, "evictd_signal_available_bytes", signal="memory.available") == 1536 * Mi
    assert sample(metrics, "evictd_eviction_stats_age_seconds_count", eviction_signal="memory.available") is None
    for report in memory_run.reports[2:5]:
        metrics.record_cycle(report, memory_run.state, 0.001, stats_time(report), True)
    assert threshold_sample(metrics, "evictd_threshold_met", signal="memory.available", kind="soft") == 0
    assert sample(metrics, "evictd_node_condition", condition="MemoryPressure") == 1, "lingers 5 minutes"
    metrics.record_cycle(memory_run.reports[5], memory_run.state, 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_node_condition", condition="MemoryPressure") == 0
    assert sample(metrics, "evictd_cycles_total") == 6


@pytest.mark.parametrize(("dry_run", "counted", "not_counted"), [
    (True, "evictd_dry_run_evictions_total", "evictd_evictions_total"),
    (False, "evictd_evictions_total", "evictd_dry_run_evictions_total"),
], ids=["dry-run", "acting"])
def test_evictions_are_counted_by_signal(memory_run: Run, dry_run: bool, counted: str, not_counted: str) -> None:
    assert [e.pod.name for e in memory_run.reports[3].acted.evictions] == ["web"]
    metrics = recorded(memory_run, 4, dry_run=dry_run)
    assert sample(metrics, counted, eviction_signal="memory.available") == 1
    assert sample(metrics, not_counted, eviction_signal="memory.available") == 0
    # The stats behind the eviction were 12 s old when it was decided (the kubelet's stats-age histogram).
    assert sample(metrics, "evictd_eviction_stats_age_seconds_count", eviction_signal="memory.available") == 1
    assert sample(metrics, "evictd_eviction_stats_age_seconds_sum", eviction_signal="memory.available") == 12


def test_error_counters(memory_run: Run) -> None:
    metrics = Metrics()
    stats_failure = failing_cycle(MEMORY_CONFIG)
    assert len(stats_failure.errors) == 1
    metrics.record_cycle(stats_failure, memory_run.state, 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_errors_total", source="stats") == 1
    troubled = with_failed_eviction(with_reclaim(
        memory_run.reports[3],
        ReclaimResult(ReclaimAction.CONTAINER_GC, freed_bytes=5),
        ReclaimResult(ReclaimAction.IMAGE_GC, error="rpc error: code = Unavailable"),
    ), "default/web: pods \"web\" is forbidden")
    metrics.record_cycle(troubled, memory_run.state, 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_errors_total", source="reclaim") == 1
    assert sample(metrics, "evictd_errors_total", source="eviction") == 1
    assert sample(metrics, "evictd_dry_run_evictions_total", eviction_signal="memory.available") == 1, \
        "a failed eviction still counts, as the kubelet counts it"
    assert sample(metrics, "evictd_reclaimed_bytes_total", action="containerGC") == 5
    assert sample(metrics, "evictd_reclaimed_bytes_total", action="imageGC") == 0, "a failed reclaim frees nothing"


def test_cycle_errors_are_counted_by_the_step_that_failed() -> None:
    metrics = Metrics()
    for source in ("layout", "pods"):
        assert sample(metrics, "evictd_errors_total", source=source) == 0, "exported from the start"
    no_layout = failing_cycle(MEMORY_CONFIG, layout=FailingLayout())
    metrics.record_cycle(no_layout, EngineState(), 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_errors_total", source="layout") == 1
    assert sample(metrics, "evictd_errors_total", source="stats") == 0, "the cycle stopped before reading stats"
    no_pods = failing_cycle(MEMORY_CONFIG, pods=FailingPods())
    metrics.record_cycle(no_pods, EngineState(), 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_errors_total", source="pods") == 1
    assert sample(metrics, "evictd_errors_total", source="stats") == 1
    assert sample(metrics, "evictd_errors_total", source="layout") == 1


def test_each_signal_is_exported_in_the_unit_of_its_resource(memory_run: Run) -> None:
    metrics = recorded(memory_run, 1)
    assert sample(metrics, "evictd_signal_available_inodes", signal="nodefs.inodesFree") == 1_000_000
    assert sample(metrics, "evictd_signal_capacity_inodes", signal="nodefs.inodesFree") == 2_000_000
    assert sample(metrics, "evictd_signal_available_bytes", signal="nodefs.inodesFree") is None
    assert sample(metrics, "evictd_signal_available_inodes", signal="nodefs.available") is None


def test_known_label_values_are_exported_at_zero_from_the_start() -> None:
    metrics = Metrics()
    for signal in ("memory.available", "pid.available", "emptydirfs.limit", "ephemeralcontainerfs.limit"):
        assert sample(metrics, "evictd_evictions_total", eviction_signal=signal) == 0
        assert sample(metrics, "evictd_dry_run_evictions_total", eviction_signal=signal) == 0
    for scope in ("node", "pods", "pod"):
        assert sample(metrics, "evictd_oom_kills_total", scope=scope) == 0
    assert sample(metrics, "evictd_oom_kills_too_late_total", activity="grace-period") == 0
    assert sample(metrics, "evictd_oom_kills_too_late_total", activity="idle") is None, "idle is never too late"
    assert sample(metrics, "evictd_errors_total", source="runtime") == 0
    for cause in ("timer", "memcg", "memcg_rearm", "psi", "signal", "eviction"):  # docs/wake-ups.md's list of causes
        assert sample(metrics, "evictd_wakeups_total", cause=cause) == 0


def test_a_cycle_whose_runtime_stats_calls_failed_counts_as_a_runtime_error() -> None:
    metrics = Metrics()
    metrics.record_stats_problems([SampleError("/sys/fs/cgroup/memory/kubepods/memory.stat", "No such file")])
    assert sample(metrics, "evictd_errors_total", source="runtime") == 0
    metrics.record_stats_problems([SampleError("CRI ListContainerStats", "rpc error: code = Unavailable"),
                                   SampleError("CRI ListPodSandboxStats", "rpc error: code = Unavailable")])
    assert sample(metrics, "evictd_errors_total", source="runtime") == 1, "one per cycle"


def test_healthy_is_the_healthz_rule_at_scrape_time() -> None:
    metrics = Metrics()
    healthy = [True]
    metrics.watch_health(lambda: healthy[0])
    assert sample(metrics, "evictd_healthy") == 1
    healthy[0] = False
    assert sample(metrics, "evictd_healthy") == 0


def test_pod_disk_figures_age_and_pods_without_them(memory_run: Run) -> None:
    from evictd.core.summary import FsStats, PodReference, PodStats

    def with_pods(*ages_s: float | None) -> CycleReport:
        report = memory_run.reports[0]
        assert report.observed.summary is not None
        pods = tuple(PodStats(pod_ref=PodReference(name=f"p{i}", namespace="ns", uid=f"u{i}"),
                              ephemeral_storage=None if age is None else FsStats(
                                  time=NOW_WALL - timedelta(seconds=age), used_bytes=4096, inodes_used=1))
                     for i, age in enumerate(ages_s))
        return replace(report, observed=replace(report.observed, summary=replace(report.observed.summary, pods=pods)))

    metrics = Metrics()
    metrics.record_cycle(with_pods(3.0, None, 17.5, None), memory_run.state, 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_pod_disk_usage_age_seconds") == 17.5
    assert sample(metrics, "evictd_pods_without_disk_usage") == 2
    metrics.record_cycle(with_pods(None), memory_run.state, 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_pod_disk_usage_age_seconds") == 0
    assert sample(metrics, "evictd_pods_without_disk_usage") == 1


def test_a_signal_no_longer_observed_is_no_longer_exported(memory_run: Run) -> None:
    without_nodefs = copy.deepcopy(MEMORY_STEPS[1])
    without_nodefs["summary"]["node"]["runtime"]["imageFs"] = fs(70 * Gi, 100 * Gi, time=stamp(10))
    del without_nodefs["summary"]["node"]["fs"]  # e.g. the kubelet root's filesystem could not be read
    two = run(MEMORY_CONFIG, [MEMORY_STEPS[0], without_nodefs])
    metrics = recorded(two, 1)
    assert sample(metrics, "evictd_signal_available_bytes", signal="nodefs.available") == 80 * Gi
    metrics = recorded(two, 2)
    assert sample(metrics, "evictd_signal_available_bytes", signal="nodefs.available") is None
    assert sample(metrics, "evictd_signal_capacity_inodes", signal="nodefs.inodesFree") is None
    assert sample(metrics, "evictd_stats_age_seconds", signal="nodefs.available") is None
    assert sample(metrics, "evictd_signal_available_bytes", signal="imagefs.available") == 70 * Gi
    assert sample(metrics, "evictd_signal_available_bytes", signal="memory.available") == 1536 * Mi
    # No stats at all: nothing is exported as if it were current.
    metrics.record_cycle(failing_cycle(MEMORY_CONFIG), two.state, 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_signal_available_bytes", signal="memory.available") is None


def test_the_degraded_gauge_follows_the_pod_list(memory_run: Run) -> None:
    metrics = recorded(memory_run, 1)
    assert sample(metrics, "evictd_degraded", reason="pod-list-unavailable") == 0
    for pods_from_node in (True, False):
        metrics.record_cycle(without_pod_list(memory_run.reports[1], pods_from_node=pods_from_node),
                             memory_run.state, 0.001, NOW_WALL, False)
        assert sample(metrics, "evictd_degraded", reason="pod-list-unavailable") == 1
    metrics.record_cycle(memory_run.reports[2], memory_run.state, 0.001, NOW_WALL, False)
    assert sample(metrics, "evictd_degraded", reason="pod-list-unavailable") == 0


FRESH_PAGE = ("from evictd.observe.metrics import Metrics; from prometheus_client import generate_latest; "
              "print(generate_latest(Metrics().registry).decode())")


def test_a_fresh_metrics_page_lists_its_series_in_the_same_order_in_every_process() -> None:
    pages = []
    for seed in ("1", "2", "3"):
        done = subprocess.run([sys.executable, "-c", FRESH_PAGE], env={**os.environ, "PYTHONHASHSEED": seed},
                              capture_output=True, text=True, check=True)
        pages.append([line for line in done.stdout.splitlines() if "_created" not in line])
    assert pages[0] == pages[1] == pages[2]
    assert 'evictd_oom_kills_too_late_total{activity="grace-period"} 0.0' in pages[0]


@pytest.mark.parametrize("allocatable", ["2Gi", "1Gi"], ids=["different-values", "equal-values"])
def test_a_configured_allocatable_threshold_and_the_copy_of_memory_available_are_two_series(allocatable: str) -> None:
    """Issue #38 item 5: keyed by signal and kind only, the two allocatableMemory.available thresholds wrote one
    series each cycle, the last written winning. Here the configured one is met and the copy of memory.available's
    is not (different values), or both are met (equal values: two thresholds for the kubelet, item 7)."""
    node = {"memory": {"availableBytes": 6 * Gi, "workingSetBytes": 2 * Gi, "time": "2026-01-01T00:00:00Z"},
            "systemContainers": [{"name": "pods", "memory": {"availableBytes": 768 * Mi if allocatable == "1Gi"
                                                             else 1536 * Mi, "workingSetBytes": 6 * Gi,
                                                             "time": "2026-01-01T00:00:00Z"}}]}
    both = run({"evictionHard": {"memory.available": "1Gi", "allocatableMemory.available": allocatable}},
               [{"at": 0, "summary": {"node": node, "pods": []}}], pods=())
    metrics = recorded(both, 1)
    configured = {"signal": "allocatableMemory.available", "kind": "hard", "origin": "evictionHard"}
    copy_ = {"signal": "allocatableMemory.available", "kind": "hard", "origin": "memory.available"}
    assert threshold_sample(metrics, "evictd_threshold_met", **configured) == 1
    assert threshold_sample(metrics, "evictd_threshold_met", **copy_) == (1 if allocatable == "1Gi" else 0)
    assert threshold_sample(metrics, "evictd_threshold_bytes", **configured) == (Gi if allocatable == "1Gi" else 2 * Gi)
    assert threshold_sample(metrics, "evictd_threshold_bytes", **copy_) == Gi
    assert threshold_sample(metrics, "evictd_threshold_met", threshold=f"allocatableMemory.available<{allocatable}",
                            origin="evictionHard") == 1


def test_shadow_comparisons_are_counted_by_outcome_and_resource_from_zero() -> None:
    """The fleet's agreement rules (deploy/monitoring) need every node's outcome x resource pairs from zero, and
    the label values bounded: no pod name, a resource name the kubelet may add counted as "other"."""
    from evictd.core.shadow import ShadowEviction, ShadowState, compare

    metrics = Metrics()
    pairs = [(s.labels["outcome"], s.labels["resource"]) for family in metrics.registry.collect()
             for s in family.samples if s.name == "evictd_shadow_comparisons_total"]
    assert len(pairs) == 4 * 4 and all(sample(metrics, "evictd_shadow_comparisons_total", outcome=o, resource=r) == 0
                                      for o, r in pairs)
    hog = ShadowEviction(0.0, "uid-hog", "shop/hog", "memory")
    state, settled = compare(ShadowState(), [hog], [hog], 0.0)
    late = ShadowEviction(1.0, "uid-log", "shop/log", "inodes")
    unknown = ShadowEviction(1.0, "uid-gpu", "shop/gpu", "nvidia.com-gpu")
    state, more = compare(state, [], [late, unknown], 1.0)
    state, more = compare(state, [], [], 100.0)
    for comparison in settled + more:
        metrics.count_shadow_comparison(comparison)
    assert sample(metrics, "evictd_shadow_comparisons_total", outcome="agree", resource="memory") == 1
    assert sample(metrics, "evictd_shadow_comparisons_total", outcome="kubelet-only", resource="inodes") == 1
    assert sample(metrics, "evictd_shadow_comparisons_total", outcome="kubelet-only", resource="other") == 1
    assert sample(metrics, "evictd_shadow_comparisons_total", outcome="kubelet-only", resource="memory") == 0
    assert not [s for family in metrics.registry.collect() for s in family.samples
                if "shop/" in str(s.labels) or "uid-" in str(s.labels)]


def test_a_follow_up_is_counted_by_kind_and_not_as_an_eviction(memory_run: Run) -> None:
    """Issue #73: a pod evicted once and followed up (stopped again) counts one eviction, and one follow-up."""
    evicted = memory_run.reports[3]
    [eviction] = evicted.acted.evictions
    metrics = Metrics()
    metrics.record_cycle(evicted, memory_run.state, 0.001, NOW_WALL, False)
    followed = replace(evicted, acted=replace(evicted.acted, evictions=(), follow_ups=(
        FollowUp(eviction, FollowUpKind.STOPPED_AGAIN, "stopped again through the container runtime"),)))
    metrics.record_cycle(followed, memory_run.state, 0.001, NOW_WALL, False)
    assert sample(metrics, "evictd_evictions_total", eviction_signal="memory.available") == 1
    assert sample(metrics, "evictd_eviction_follow_ups_total", kind="stopped_again") == 1
    assert sample(metrics, "evictd_eviction_follow_ups_total", kind="escalated") == 0

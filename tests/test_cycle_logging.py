"""Cycle logs (src/evictd/observe/cycle_logging.py): only what changed is logged, with pod, signal, threshold and why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builders import Gi, Mi, fs, stamp, summary
from cycle_reports import (
    MEMORY_CONFIG,
    MEMORY_STEPS,
    STATIC_PROXY,
    WEB,
    WEB_MESSAGE,
    Run,
    failing_cycle,
    memory_step,
    run,
    with_failed_eviction,
    with_reclaim,
    without_pod_list,
)
from evictd.core.engine import Skipped, ThresholdStatus
from evictd.core.fs_layout import ReclaimAction
from evictd.core.kubelet_config import eviction_settings
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.refault import RefaultFigure
from evictd.core.summary import Observation
from evictd.core.thresholds import parse_stall_thresholds
from evictd.cycle.render import describe_threshold
from evictd.cycle.report import ReclaimResult
from evictd.observe.cycle_logging import CycleLogger
from log_capture import LogCapture

# --------------------------------------------------------------------------------------------------
# Cycle logs


def log_run(run_: Run, *, dry_run: bool = True) -> list[list[tuple[str, str, dict[str, Any]]]]:
    """Return the log calls of each cycle of a run."""
    log = LogCapture()
    logger = CycleLogger(log, dry_run)
    per_cycle = []
    for number, report in enumerate(run_.reports, start=1):
        logger.log_cycle(number, report)
        per_cycle.append(log.take())
    return per_cycle


def test_describe_threshold() -> None:
    settings = eviction_settings({"evictionHard": {"memory.available": "1Gi", "nodefs.available": "15%"},
                                  "evictionSoft": {"imagefs.available": "20%"},
                                  "evictionSoftGracePeriod": {"imagefs.available": "2m"}})
    assert [describe_threshold(t) for t in settings.thresholds()] == [
        "memory.available<1Gi (hard)", "nodefs.available<15% (hard)", "imagefs.available<20% (soft, grace 120s)",
        "allocatableMemory.available<1Gi (hard, from memory.available)",  # the enforceNodeAllocatable copy
    ]


def test_conditions_and_thresholds_are_logged_only_when_they_change(memory_run: Run) -> None:
    cycles = log_run(memory_run)
    assert cycles[0] == [], "a calm first cycle says nothing"
    assert cycles[1] == [
        ("info", "node conditions changed", {"cycle": 2, "conditions": ["MemoryPressure"], "previous": []}),
        ("warning", "threshold met", {"cycle": 2, "threshold": "memory.available<2Gi (soft, grace 90s)",
                                      "available": "1536Mi", "threshold_quantity": "2Gi"}),
    ]
    assert cycles[2] == [], "the same pressure again: nothing new"
    hard_met = ("warning", "threshold met", {"cycle": 4, "threshold": "memory.available<1Gi (hard)",
                                             "available": "500Mi", "threshold_quantity": "1Gi"})
    assert cycles[3][0] == hard_met
    assert [(level, event) for level, event, _ in cycles[4]] == [("info", "threshold no longer met")] * 2
    assert {fields["threshold"] for _, _, fields in cycles[4]} == {
        "memory.available<2Gi (soft, grace 90s)", "memory.available<1Gi (hard)"}
    assert cycles[5] == [
        ("info", "node conditions changed", {"cycle": 6, "conditions": [], "previous": ["MemoryPressure"]}),
    ]


@pytest.mark.parametrize(("dry_run", "event"), [(True, "would evict pod"), (False, "evicting pod")],
                         ids=["dry-run", "acting"])
def test_an_eviction_is_logged_with_pod_signal_threshold_and_message(memory_run: Run, dry_run: bool,
                                                                     event: str) -> None:
    cycle = log_run(memory_run, dry_run=dry_run)[3]
    assert cycle[1:] == [
        ("info", "cannot evict a critical pod", {"cycle": 4, "pod": "default/static-proxy"}),
        ("warning", event, {
            "cycle": 4, "pod": "default/web", "signal": "memory.available", "grace_period_seconds": 1,
            "message": WEB_MESSAGE, "dry_run": dry_run, "threshold": "memory.available<1Gi (hard)",
            "ranking": ["default/static-proxy", "default/web", "default/db"],
        }),
    ]
    assert memory_run.reports[3].acted.evictions[0].message == WEB_MESSAGE


def test_an_eviction_names_its_decision_with_the_flight_recorders_run(memory_run: Run) -> None:
    log = LogCapture()
    logger = CycleLogger(log, True, run="20261123T100000Z-42")
    for number, report in enumerate(memory_run.reports, start=1):
        logger.log_cycle(number, report)
    evictions = [fields for _, event, fields in log.take() if event == "would evict pod"]
    assert [e["decision"] for e in evictions] == ["20261123T100000Z-42/4"]


def test_only_critical_pods_left_is_logged_as_unable_to_evict() -> None:
    only_critical = run(MEMORY_CONFIG, [memory_step(0, 500 * Mi)], pods=[STATIC_PROXY])
    events = [(level, event, fields.get("ranking", fields.get("pod"))) for level, event, fields in
              log_run(only_critical)[0]]
    assert events[-2:] == [
        ("info", "cannot evict a critical pod", "default/static-proxy"),
        ("warning", "unable to evict any pods from the node", ["default/static-proxy"]),
    ]


def test_stats_errors_are_logged_and_the_frozen_conditions_are_not_reported_as_changes() -> None:
    log = LogCapture()
    logger = CycleLogger(log, True)
    report = failing_cycle(MEMORY_CONFIG)
    assert report.decided.assessment.next_step == Skipped("stats unavailable")
    logger.log_cycle(7, report)
    assert log.take() == [("error", "cycle error", {
        "cycle": 7,
        "error": "eviction manager: failed to get summary stats: "
                 "/sys/fs/cgroup/memory/memory.usage_in_bytes: Permission denied",
    })]


def test_acting_on_the_nodes_pods_is_logged_when_it_starts_and_ends(memory_run: Run) -> None:
    log = LogCapture()
    logger = CycleLogger(log, False)
    calm = memory_run.reports[0]
    logger.log_cycle(1, calm)
    log.take()
    degraded = without_pod_list(calm)
    for number in (2, 3):
        logger.log_cycle(number, degraded)
    assert log.take() == [("warning", "no pod list from the Kubernetes API: hard thresholds act on the pods the "
                           "node shows", {"cycle": 2, "detail": degraded.observed.pod_list_problem.reason})]
    withheld = replace(degraded, decided=replace(
        degraded.decided, withheld="a soft threshold evicts only from the Kubernetes API's pod list"))
    logger.log_cycle(4, withheld)
    logger.log_cycle(5, withheld)
    assert log.take() == [("warning", "threshold not acted on", {
        "cycle": 4, "reason": "a soft threshold evicts only from the Kubernetes API's pod list"})]
    logger.log_cycle(6, calm)
    assert log.take() == [("info", "pod list from the Kubernetes API in use again", {"cycle": 6})]


def test_reclaim_is_logged_action_by_action() -> None:
    disk = {"evictionHard": {"nodefs.available": "10%"}}
    step = {"at": 0, "summary": summary(nodefs=fs(5 * Gi, 100 * Gi, time=stamp(0)), time=stamp(0)),
            "afterReclaim": summary(nodefs=fs(50 * Gi, 100 * Gi, time=stamp(1)), time=stamp(1))}
    reclaimed = run(disk, [step], pods=[WEB])
    (cycle,) = log_run(reclaimed)
    assert [(level, event) for level, event, _ in cycle] == [
        ("info", "node conditions changed"),
        ("warning", "threshold met"),
        ("info", "node-level reclaim"),
        ("info", "node-level reclaim"),
        ("info", "node-level reclaim resolved the pressure; no pod evicted"),
    ]
    assert [fields["action"] for _, event, fields in cycle if event == "node-level reclaim"] == [
        "containerGC", "imageGC"]
    failed = with_reclaim(reclaimed.reports[0], ReclaimResult(ReclaimAction.IMAGE_GC, error="rpc error"),
                          succeeded=False)
    log = LogCapture()
    CycleLogger(log, True).log_cycle(1, failed)
    assert ("error", "node-level reclaim failed", {"cycle": 1, "action": "imageGC", "error": "rpc error"}) in log.lines


def test_eviction_failures_are_logged() -> None:
    failed = with_failed_eviction(run(MEMORY_CONFIG, MEMORY_STEPS[:4]).reports[3], "default/web: HTTP 500")
    log = LogCapture()
    CycleLogger(log, False).log_cycle(4, failed)
    assert ("error", "eviction failed (still counted, as the kubelet counts it)",
            {"cycle": 4, "error": "default/web: HTTP 500"}) in log.lines


def test_stale_stats_are_logged() -> None:
    stale = run(MEMORY_CONFIG, [memory_step(0, 500 * Mi), memory_step(10, 500 * Mi, second=0)])
    assert log_run(stale)[1] == [
        ("info", "stats not updated since last cycle; not acting on them",
         {"cycle": 2, "signals": ["memory.available"]}),
    ]


def test_configuration_warnings_are_logged_once() -> None:
    config = {"evictionHard": {"memory.available": "1Gi", "containerfs.available": "5%"}}
    warned = run(config, [memory_step(0, 8 * Gi), memory_step(10, 8 * Gi)],
                 layout={"dedicatedImageFs": True, "splitContainerFs": True})
    cycles = log_run(warned)
    assert cycles[0] == [("warning", "configuration warning",
                          {"detail": "found containerfs.available for hard eviction. ignoring"})]
    assert cycles[1] == []


@pytest.mark.parametrize(("lost", "field"), [(24 << 20, 24.0), (0, None)])
def test_a_daemons_threshold_met_on_memory_taken_below_their_memory_low_says_how_much(lost: int,
                                                                                      field: float | None) -> None:
    """The daemons refault figure counts what the kernel reclaimed of them below their memory.low as re-read
    (`evictd.core.daemon_refault`): the line says so, so that a 100 % share with few re-reads is explained."""
    (daemons,) = parse_stall_thresholds({"evictd.io/daemons.refault": "10%"}, {}, {}, {})
    report = run(MEMORY_CONFIG, MEMORY_STEPS[:1]).reports[0]
    assessment = replace(report.decided.assessment, thresholds=(ThresholdStatus(daemons, True, 0.0),),
                         observations={daemons.signal: Observation(Quantity.from_int(0, QuantityFormat.DECIMAL_SI),
                                                                   Quantity.from_int(10_000,
                                                                                     QuantityFormat.DECIMAL_SI),
                                                                   None)},
                         daemons_refault=RefaultFigure(lost, None, 2.0, 32 << 20, lost_bytes=lost))
    log = LogCapture()
    CycleLogger(log, True).log_cycle(1, replace(report, decided=replace(report.decided, assessment=assessment)))
    (met,) = [fields for _, event, fields in log.lines if event == "threshold met"]
    assert met["threshold"] == "evictd.io/daemons.refault>=10% (hard)"
    assert met.get("daemons_reclaimed_below_low_mib") == field

"""The after-cycle hooks (src/evictd/run/after_cycle.py), and the sensors armed as a cycle's plan says (`Sensors.arm`,
called by the loop, which logs the notifiers that fail: `NotifierLog` in src/evictd/run/daemon.py).

The memcg notifiers are registered on this machine's root memory cgroup.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from builders import Gi, stamp, summary
from cycle_reports import (
    MEMORY_CONFIG,
    failing_cycle,
    memory_step,
    run,
    with_summary,
)
from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.memcg_set import MemcgNotifierSet
from evictd.adapters.notifiers import PsiNotifier, Waiter
from evictd.adapters.pod_disk_usage import POD_DISK_SOURCE_PREFIX
from evictd.adapters.sensors import Sensors, count_watch, memory_watch
from evictd.core.engine import EngineState
from evictd.core.errors import SampleError
from evictd.core.kubelet_config import eviction_settings
from evictd.core.memcg import MEMCG_REARM_STEP_BYTES, Watch
from evictd.core.signals import Reading
from evictd.core.summary import Summary
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import Threshold
from evictd.core.wake import arming
from evictd.cycle.finished import Cycle
from evictd.cycle.report import CycleReport
from evictd.observe.metrics import Metrics
from evictd.run.after_cycle import log_sample_problems
from evictd.run.daemon import NotifierLog
from log_capture import LogCapture
from real_cgroups import CGROUP_MOUNT, temporary_cgroup

# --------------------------------------------------------------------------------------------------
# Re-arming the memory notifiers


def memory_summary(*, pods_container: bool, usage: bool = True) -> Summary:
    document = summary(memory=8 * Gi, memory_ws=8 * Gi, allocatable=4 * Gi if pods_container else None,
                       allocatable_ws=2 * Gi)
    if usage:
        document["node"]["memory"]["usageBytes"] = 9 * Gi
        for container in document["node"].get("systemContainers", []):
            container["memory"]["usageBytes"] = 3 * Gi
    return summary_from_dict(document)


@pytest.fixture
def waiter() -> Iterator[Waiter]:
    with contextlib.closing(Waiter(time.monotonic)) as real:
        yield real


MEMCG_THRESHOLDS = tuple(eviction_settings({
    "evictionHard": {"memory.available": "1Gi", "allocatableMemory.available": "1Gi"}, "enforceNodeAllocatable": [],
}).thresholds())


def memcg_set(pods_cgroup: str) -> MemcgNotifierSet:
    return MemcgNotifierSet(MEMCG_THRESHOLDS, memory_root="/sys/fs/cgroup/memory", pods_cgroup=pods_cgroup,
                            monotonic=time.monotonic)


def arm(sensors: Sensors, report: CycleReport, thresholds: tuple[Threshold, ...] = MEMCG_THRESHOLDS,
        at: float = 0.0) -> list[str]:
    """Arm `sensors` as the plan after `report` says; the notifiers that failed."""
    armed = arming(at, thresholds, report.observed.summary, report.decided.assessment.observations)
    return [f"{failure.description}: {failure.error}" for failure in sensors.arm(armed)]


NODE_NOTIFIERS = ["hard memory eviction threshold", "hard memory eviction threshold: usage fell"]


def refresh(sensors: Sensors, summary_: Summary | None) -> list[str]:
    return arm(sensors, with_summary(run(MEMORY_CONFIG, [memory_step(0, 8 * Gi)]).reports[0], summary_))


def test_refresh_ignores_missing_allocatable_notifiers_without_a_pods_container(waiter: Waiter) -> None:
    memcg = memcg_set("evictd-test-absent/kubepods")
    sensors = Sensors(waiter, memcg, ())
    try:
        assert refresh(sensors, memory_summary(pods_container=False)) == []
        # Only the node-level notifier and its drop watch, registered on this machine's real root memory cgroup.
        assert waiter.notifiers == (memcg,)
        assert [n.description for n in memcg.armed(Watch.LEVEL, Watch.DROP)] == NODE_NOTIFIERS
        assert [n.cgroup_dir for n in memcg.armed(Watch.LEVEL, Watch.DROP)] == ["/sys/fs/cgroup/memory"] * 2
        assert memcg.armed(Watch.LEVEL)[0].threshold_bytes == 16 * Gi - 1 * Gi + 1 * Gi
        assert memcg.armed(Watch.DROP)[0].threshold_bytes == 9 * Gi - MEMCG_REARM_STEP_BYTES, "a step below usage"
    finally:
        memcg.close()


def test_refresh_reports_a_pods_cgroup_it_cannot_watch(waiter: Waiter) -> None:
    memcg = memcg_set("evictd-test-absent/kubepods")
    sensors = Sensors(waiter, memcg, ())
    try:
        (problem,) = refresh(sensors, memory_summary(pods_container=True))
        assert problem.startswith("hard allocatable memory eviction threshold: "
                                  "/sys/fs/cgroup/memory/evictd-test-absent/kubepods/")
        assert "No such file or directory" in problem
        assert waiter.notifiers == (memcg,)
        assert [n.description for n in memcg.armed(Watch.LEVEL, Watch.DROP)] == NODE_NOTIFIERS
    finally:
        memcg.close()


def test_refresh_reports_incomplete_node_memory(waiter: Waiter) -> None:
    memcg = memcg_set("evictd-test-absent/kubepods")
    sensors = Sensors(waiter, memcg, ())
    try:
        (problem,) = refresh(sensors, memory_summary(pods_container=False, usage=False))
        assert problem.startswith("hard memory eviction threshold: summary node.memory: summary was incomplete.")
        assert waiter.notifiers == (memcg,), "kept in the waiter, to be armed at the next refresh"
        assert memcg.armed(Watch.LEVEL) == memcg.armed(Watch.DROP) == ()
    finally:
        memcg.close()


def test_refresh_keeps_the_psi_notifiers_with_or_without_memcg_and_stats(waiter: Waiter) -> None:
    # A real PSI trigger on this machine's /proc/pressure/memory (a 2 s window: no CAP_SYS_RESOURCE here).
    with contextlib.closing(PsiNotifier("/proc/pressure/memory", 150_000, 2_000_000)) as psi:
        assert refresh(Sensors(waiter, None, (psi,)), memory_summary(pods_container=True)) == []
        assert waiter.notifiers == (psi,), "cgroup v2: PSI only"
        memcg = memcg_set("evictd-test-absent/kubepods")
        try:
            sensors = Sensors(waiter, memcg, (psi,))
            assert arm(sensors, failing_cycle(MEMORY_CONFIG)) == []
            assert memcg.armed(Watch.LEVEL) == (), "no stats: nothing to compute a level from"
            assert waiter.notifiers == (memcg, psi)
            assert refresh(sensors, memory_summary(pods_container=False)) == []
            assert waiter.notifiers == (memcg, psi)
            assert memcg.fileno() >= 0 and psi.fileno() >= 0, "both still open (fileno raises once closed)"
            assert [n.description for n in memcg.armed(Watch.LEVEL)] == ["hard memory eviction threshold"]
        finally:
            memcg.close()


# --------------------------------------------------------------------------------------------------
# Unreadable sources, logged once each way


def test_pods_disk_problems_have_lines_of_their_own_each_logged_once() -> None:
    """A pod's disk figures are used as measured (partly read, or old): "its signals are absent" would be untrue."""
    log = LogCapture()
    problems: list[SampleError] = []
    hook = log_sample_problems(log, Metrics(), lambda: problems, lambda: [])
    report = run(MEMORY_CONFIG, [memory_step(0, 8 * Gi)]).reports[0]

    def cycle(number: int) -> None:
        hook(Cycle(number=number, report=report, state=EngineState(), started_at=0.0, duration_s=0.0,
                   wall=datetime(2026, 11, 23, tzinfo=UTC)))

    old = SampleError(f"{POD_DISK_SOURCE_PREFIX}shop/big", "last complete measurement older than 120 s: used as it is")
    cgroup = SampleError("/sys/fs/cgroup/memory/kubepods/memory.stat", "Permission denied")
    problems[:] = [old, cgroup]
    for number in (1, 2, 3):
        cycle(number)
    problems[:] = []
    cycle(4)
    assert [(level, event, fields["detail"]) for level, event, fields in log.lines] == [
        ("warning", "signal source unreadable; its signals are absent", f"{cgroup.source}: {cgroup.reason}"),
        ("warning", "pod disk usage partly unreadable, old or not measured yet", f"{old.source}: {old.reason}"),
        ("info", "signal source readable again", f"{cgroup.source}: {cgroup.reason}"),
        ("info", "pod disk usage whole and current again", f"{old.source}: {old.reason}"),
    ]


def test_the_v2_memory_watch_is_handed_each_cycles_readings_and_polled_beside_the_rest(
    waiter: Waiter, tmp_path: Path
) -> None:
    # A cgroup v2 tree of plain files whose pods cgroup is already past the allocatable threshold the cycle's
    # readings (capacity 6Gi, threshold 1Gi) left 3 GiB away: the watch's first look finds it met.
    (tmp_path / "kubepods").mkdir()
    (tmp_path / "kubepods" / "memory.current").write_text(f"{5 * Gi + Gi // 2}\n")
    (tmp_path / "kubepods" / "memory.stat").write_text("anon 0\nfile 0\ninactive_file 0\n")
    (tmp_path / "kubepods" / "memory.max").write_text(f"{6 * Gi}\n")
    settings = eviction_settings({"evictionHard": {"allocatableMemory.available": "1Gi"}, "enforceNodeAllocatable": []})
    thresholds = tuple(settings.thresholds())
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic)
    sensors = Sensors(waiter, None, (), [watch])
    assert arm(sensors, failing_cycle(MEMORY_CONFIG), thresholds, time.monotonic()) == []
    assert waiter.notifiers == (watch,)
    assert waiter.wait(0.2) == [], "no stats: nothing watched"
    report = with_summary(run(MEMORY_CONFIG, [memory_step(0, 8 * Gi)]).reports[0], memory_summary(pods_container=True))
    assert arm(sensors, report, thresholds, time.monotonic()) == []
    assert waiter.wait(5.0) == ["memory_watch"]
    assert watch.description == "hard allocatableMemory.available threshold"


def test_the_pid_watch_is_handed_each_cycles_observations_and_polled_beside_the_rest(
    waiter: Waiter, tmp_path: Path
) -> None:
    # The cycle saw 1,500 tasks of 2,048 (a 25% threshold met from 1,537); /proc/loadavg now says 1,600: the watch's
    # first look finds it met.
    (tmp_path / "loadavg").write_text("0.00 0.00 0.00 1/1600 4242\n")
    config = {"evictionHard": {"pid.available": "25%"}}
    settings = eviction_settings({**config, "enforceNodeAllocatable": []})
    thresholds = tuple(settings.thresholds())
    watch = count_watch(Reading.PIDS, interval_s=10.0, monotonic=time.monotonic, proc_root=str(tmp_path))
    sensors = Sensors(waiter, None, (), [watch])
    assert arm(sensors, failing_cycle(config), thresholds, time.monotonic()) == []
    assert waiter.notifiers == (watch,)
    assert waiter.wait(0.2) == [], "no stats: nothing watched"
    report = run(config, [{"at": 0, "summary": summary(pids=(2048, 1500), time=stamp(0))}]).reports[0]
    assert arm(sensors, report, thresholds, time.monotonic()) == []
    assert waiter.wait(5.0) == ["pid_watch"]
    assert watch.description == "hard pid.available threshold"


def test_a_notifier_that_stays_unavailable_is_logged_once_and_once_more_when_it_is_armed(waiter: Waiter) -> None:
    with temporary_cgroup(CGROUP_MOUNT / "memory") as base:
        memcg = memcg_set(f"{base.name}/kubepods")  # not there yet: the pods notifier cannot be armed
        log = LogCapture()
        sensors = Sensors(waiter, memcg, ())
        notifiers = NotifierLog(Metrics(), log)
        base_report = run(MEMORY_CONFIG, [memory_step(0, 8 * Gi)]).reports[0]

        def cycle(number: int) -> None:
            # 11 s apart: past the 10 s re-arm every time; the registrations (made in the notifier set's thread)
            # are given time to finish before the next cycle.
            report = with_summary(base_report, memory_summary(pods_container=True))
            armed = arming(number * 11.0, MEMCG_THRESHOLDS, report.observed.summary, {})
            notifiers.update(number, sensors.arm(armed), sensors.armed)
            deadline = time.monotonic() + 10
            while memcg.rearming and time.monotonic() < deadline:
                time.sleep(0.05)

        try:
            for number in range(1, 7):
                cycle(number)
            assert [(level, event) for level, event, _ in log.lines] == [("warning", "memory notifier unavailable")]
            assert log.lines[0][2]["cycle"] == 1 and f"{base.name}/kubepods" in str(log.lines[0][2]["detail"])
            (base / "kubepods").mkdir()
            for number in range(7, 10):
                cycle(number)
            assert [(level, event) for level, event, _ in log.lines[1:]] == [("info", "memory notifier available again")]
            assert log.lines[1][2]["notifier"] == "hard allocatable memory eviction threshold"
        finally:
            memcg.close()

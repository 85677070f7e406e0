"""Cycle reports from the real EvictionManager, for the tests of what the daemon does with them (metrics, cycle
logs, the live view, the after-cycle hooks).

Builders' Kubernetes documents go through `evictd.commands.simulate.parse_scenario` and `run_scenario` (its scripted
stats and fake clock are the only stand-ins), or through a manager whose stats source fails, exactly as the
daemon would see them. `memory_run` (a fixture, registered in conftest.py) is the memory story below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from clocks import ManualClock
from evictd.commands.simulate import (
    FixedLayout,
    RecordingEvictor,
    RecordingReclaimer,
    ScriptedPods,
    ScriptedStats,
    parse_scenario,
    run_scenario,
)
from evictd.core.engine import EngineState
from evictd.core.errors import CRIError, KubeError, SampleError
from evictd.core.fs_layout import FsLayout
from evictd.core.pods import Pod
from evictd.core.summary import Summary
from evictd.core.thresholds import derive_containerfs_thresholds
from evictd.cycle.manager import EvictionManager, LayoutSource, PodSource
from evictd.cycle.render import step_json
from evictd.cycle.report import CycleError, CycleReport, CycleStep, PodListProblem, ReclaimResult

CAPACITY = 16 * Gi
NOW_WALL = datetime(2026, 11, 21, 10, 0, 42, tzinfo=UTC)
FIXTURE_V1 = Path(__file__).resolve().parent / "fixtures" / "cgroup" / "v1-cgroupfs"
FIXTURE_V2 = FIXTURE_V1.parent / "v2-cgroupfs"


# --------------------------------------------------------------------------------------------------
# Scenario documents and the reports the real manager produces from them


WEB = pod("web", requests={"memory": "100Mi"})
DB = pod("db", priority=1000, requests={"memory": "1Gi"})
STATIC_PROXY = pod("static-proxy", annotations={"kubernetes.io/config.source": "file"})  # critical
PODS = [WEB, DB, STATIC_PROXY]
POD_STATS = [pod_stats(WEB, memory=600 * Mi), pod_stats(DB, memory=700 * Mi), pod_stats(STATIC_PROXY, memory=900 * Mi)]
MEMORY_CONFIG = {
    "evictionHard": {"memory.available": "1Gi", "nodefs.available": "10%"},
    "evictionSoft": {"memory.available": "2Gi"},
    "evictionSoftGracePeriod": {"memory.available": "1m30s"},
}


def memory_step(at: int, available: int, second: int | None = None) -> dict[str, Any]:
    """A step whose node has `available` of CAPACITY memory left, its stats taken at `second` (default `at`)."""
    return {"at": at, "summary": summary(memory=available, memory_ws=CAPACITY - available, pods=POD_STATS,
                                         time=stamp(at if second is None else second))}


# The memory story: calm; soft threshold met (grace running); hard threshold met (an eviction, the static pod
# skipped); calm again (conditions linger); conditions gone after the 5 min transition period.
MEMORY_STEPS = [
    memory_step(0, 8 * Gi),
    memory_step(10, 1536 * Mi),
    memory_step(20, 1536 * Mi),
    memory_step(30, 500 * Mi),
    memory_step(40, 8 * Gi),
    memory_step(400, 8 * Gi, second=50),
]
WEB_MESSAGE = ("The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. "
               "Container app was using 600Mi, request is 100Mi, has larger consumption of memory. ")


@dataclass
class Run:
    """The reports of a scenario and the engine state the daemon would hand to its reporters."""

    reports: list[CycleReport]
    state: EngineState


def run(config: dict[str, Any], steps: list[dict[str, Any]], pods: Sequence[dict[str, Any]] = PODS,
        layout: dict[str, bool] | None = None) -> Run:
    scenario = parse_scenario({"config": config, "pods": list(pods), "steps": steps, "layout": layout or {}})
    # The thresholds are fixed by the first cycle (containerfs derivation): what the manager's state holds.
    thresholds, _ = derive_containerfs_thresholds(scenario.config.thresholds, scenario.layout)
    return Run(run_scenario(scenario), EngineState(layout=scenario.layout, thresholds=tuple(thresholds)))


@pytest.fixture(scope="module")
def memory_run() -> Run:
    return run(MEMORY_CONFIG, MEMORY_STEPS)


class FailingStats:
    """A stats source that cannot be read (an unreadable cgroup file, an unreachable kubelet)."""

    def memory_reading(self) -> None:  # no reading of the memory alone: confirmed on whole Summaries
        return None

    def summary(self, pods: Sequence[Pod], *, reread: bool = False, runtime_wait_s: float | None = None) -> Summary:
        raise SampleError("/sys/fs/cgroup/memory/memory.usage_in_bytes", "Permission denied")


class FailingLayout:
    """A layout that cannot be detected (the container runtime does not answer ImageFsInfo)."""

    def layout(self) -> FsLayout:
        raise CRIError("/runtime.v1.ImageService/ImageFsInfo", "UNAVAILABLE", "connection refused")


class FailingPods:
    """A pod list that cannot be had (the Kubernetes API's pod cache is not synced)."""

    def active_pods(self) -> Sequence[Pod]:
        raise KubeError("list pods", None, "pod cache not synced")


def failing_cycle(config: dict[str, Any], *, layout: LayoutSource | None = None,
                  pods: PodSource | None = None) -> CycleReport:
    """The report of a first cycle whose stats cannot be read (and its `layout` or `pods`, when given)."""
    manager = EvictionManager(
        parse_scenario({"config": config}).config,
        stats=FailingStats(),
        layout=layout or FixedLayout(FsLayout()),
        pods=pods or ScriptedPods(),
        reclaimer=RecordingReclaimer(ScriptedStats()),
        evictor=RecordingEvictor(),
        clock=ManualClock(0.0),
    )
    return manager.synchronize()


def without_pod_list(report: CycleReport, *, pods_from_node: bool = True) -> CycleReport:
    problem = PodListProblem("Kubernetes API list pods failed: pod cache not synced", pods_from_node)
    return replace(report, observed=replace(report.observed, pod_list_problem=problem))


def with_summary(report: CycleReport, summary: Summary | None) -> CycleReport:
    """`report` as if its stats had read `summary` (None: as if they could not be read)."""
    return replace(report, observed=replace(report.observed, summary=summary))


def with_failed_eviction(report: CycleReport, failure: str) -> CycleReport:
    """`report` with its eviction failed as the manager reports it: `failure` names the pod, then what went wrong."""
    pod = failure.split(": ", 1)[0]
    return replace(report, errors=(*report.errors, CycleError(CycleStep.EVICTION, failure, pod=pod)))


def with_reclaim(report: CycleReport, *results: ReclaimResult, succeeded: bool | None = None) -> CycleReport:
    """`report` with the node-level reclaim results `results` (and whether they resolved the pressure)."""
    return replace(report, acted=replace(report.acted, reclaim=results, reclaim_succeeded=succeeded))


def simulate_steps(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """Run a scenario through `evictd simulate`'s engine and return each step as its JSON output shows it."""
    parsed = parse_scenario(scenario)
    return [step_json(step.at, report) for step, report in zip(parsed.steps, run_scenario(parsed), strict=True)]

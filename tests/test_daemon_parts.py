"""The parts of `evictd run` around the eviction manager: health, the HTTP endpoint, metrics, cycle logs, the live
view, and the composition root's notifier refresh, layout detection and stats-source choice.

Cycle reports come from the real EvictionManager: builders' Kubernetes documents go through
`evictd.simulate.parse_scenario` and `run_scenario` (its scripted stats and fake clock are the only stand-ins),
or through a manager whose stats source fails, exactly as the daemon would see them. The HTTP endpoint is
served for real on a loopback port; the memcg notifiers are registered on this machine's root memory cgroup.
"""

from __future__ import annotations

import copy
import re
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from builders import Gi, Mi, fs, pod, pod_stats, stamp, summary
from evictd import http_endpoint
from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.kubelet_summary import ApiProxySummarySource, KubeletSummarySource
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_stats import NodeStatsSource
from evictd.adapters.notifiers import MemcgNotifierSet, PsiNotifier, Waiter
from evictd.composition import Notifiers, PathLayout, build_psi_notifiers, build_stats_source
from evictd.config import load_configuration
from evictd.core.engine import EngineState, ReclaimAction, effective_thresholds
from evictd.core.errors import ConfigError, SampleError
from evictd.core.kubelet_config import eviction_settings
from evictd.core.memcg import MEMCG_REARM_STEP_BYTES
from evictd.core.signals import FsLayout, NodeCondition
from evictd.core.summary import Summary, summary_from_dict
from evictd.cycle_logging import CycleLogger, describe_threshold
from evictd.http_endpoint import Health, HttpEndpoint, parse_bind_address
from evictd.live_view import render
from evictd.manager import CycleReport, EvictionManager, ReclaimResult
from evictd.metrics import Metrics
from evictd.simulate import (
    FakeClock,
    FixedLayout,
    RecordingEvictor,
    RecordingReclaimer,
    ScriptedPods,
    ScriptedStats,
    parse_scenario,
    run_scenario,
)

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
    thresholds, _ = effective_thresholds(scenario.config, scenario.layout)
    return Run(run_scenario(scenario), EngineState(layout=scenario.layout, thresholds=tuple(thresholds)))


@pytest.fixture(scope="module")
def memory_run() -> Run:
    return run(MEMORY_CONFIG, MEMORY_STEPS)


class FailingStats:
    """A stats source that cannot be read (an unreadable cgroup file, an unreachable kubelet)."""

    def summary(self) -> Summary:
        raise SampleError("/sys/fs/cgroup/memory/memory.usage_in_bytes", "Permission denied")


def failing_cycle(config: dict[str, Any]) -> CycleReport:
    pods = ScriptedPods()
    manager = EvictionManager(
        parse_scenario({"config": config}).config,
        stats=FailingStats(),
        layout=FixedLayout(FsLayout()),
        pods=pods,
        reclaimer=RecordingReclaimer(ScriptedStats()),
        evictor=RecordingEvictor(),
        clock=FakeClock(),
    )
    return manager.synchronize()


# --------------------------------------------------------------------------------------------------
# Health


class FakeTime:
    """Stands in for the `time` module inside evictd.http_endpoint: a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(http_endpoint, "time", fake)
    return fake


@pytest.mark.parametrize(("interval_s", "gap_s"), [(1.0, 30.0), (10.0, 30.0), (20.0, 60.0), (3600.0, 10800.0)])
def test_allowed_gap_is_three_intervals_but_at_least_30s(interval_s: float, gap_s: float) -> None:
    assert Health(interval_s).allowed_gap_s == gap_s


def test_health_is_ok_until_no_cycle_ended_for_the_allowed_gap(clock: FakeTime) -> None:
    health = Health(10.0)
    assert health.status() == (True, "ok"), "healthy while the first cycle runs"
    clock.now += 30.0
    assert health.status() == (True, "ok"), "exactly the allowed gap is still healthy"
    clock.now += 1.5
    assert health.status() == (False, "no housekeeping cycle finished for 32s")
    health.cycle_done()
    assert health.status() == (True, "ok")
    clock.now += 29.0
    assert health.status() == (True, "ok")
    clock.now += 45.0
    assert health.status() == (False, "no housekeeping cycle finished for 74s")


def test_health_is_not_ok_while_stopping(clock: FakeTime) -> None:
    health = Health(10.0)
    health.cycle_done()
    health.stopping = True
    assert health.status() == (False, "shutting down")


def test_a_degraded_loop_is_healthy_and_says_why_until_it_stalls(clock: FakeTime) -> None:
    health = Health(10.0)
    health.cycle_done()
    health.degraded = "pod-list-unavailable: no pod list from the Kubernetes API"
    assert health.status() == (True, "degraded: pod-list-unavailable: no pod list from the Kubernetes API")
    clock.now += 31.0
    assert health.status() == (False, "no housekeeping cycle finished for 31s")
    health.cycle_done()
    health.degraded = None
    assert health.status() == (True, "ok")


# --------------------------------------------------------------------------------------------------
# Bind addresses and the HTTP endpoint


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:10262", ("127.0.0.1", 10262)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("localhost:65535", ("localhost", 65535)),
        (":9100", ("0.0.0.0", 9100)),
        ("[::1]:8080", ("::1", 8080)),
        ("[::]:10262", ("::", 10262)),
        ("[fe80::1%eth0]:80", ("fe80::1%eth0", 80)),
    ],
    ids=["ipv4", "port-0", "name", "all-interfaces", "ipv6-loopback", "ipv6-any", "ipv6-zone"],
)
def test_parse_bind_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_bind_address(address) == expected


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1: 80", "[::1]",
     "::1:8080", "[::1:8080", "::1]:8080", "127.0.0.1:８０８０", ""],
    ids=["no-port", "empty-port", "named-port", "port-too-big", "negative-port", "space", "ipv6-without-port",
         "ipv6-without-brackets", "open-bracket", "close-bracket", "non-ascii-digits", "empty"],
)
def test_bad_bind_addresses_are_config_errors_naming_the_setting(address: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_bind_address(address)
    assert (info.value.key, info.value.value) == ("metricsBindAddress", address)
    assert str(info.value).startswith("metricsBindAddress: invalid value")


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


@pytest.fixture
def endpoint() -> Iterator[tuple[HttpEndpoint, Metrics, Health]]:
    metrics = Metrics()
    health = Health(10.0)
    served = HttpEndpoint("127.0.0.1:0", metrics.registry, health)
    try:
        yield served, metrics, health
    finally:
        served.close()


def test_endpoint_serves_metrics_health_and_404(endpoint: tuple[HttpEndpoint, Metrics, Health]) -> None:
    served, metrics, health = endpoint
    assert served.port > 0
    base = f"http://127.0.0.1:{served.port}"
    metrics.cycles.inc(3)
    status, content_type, page = get(base + "/metrics")
    assert (status, content_type) == (200, CONTENT_TYPE_LATEST)
    assert "\nevictd_cycles_total 3.0\n" in page
    assert 'evictd_node_condition{condition="MemoryPressure"} 0.0' in page
    for path in ("/healthz", "/livez", "/readyz", "/healthz?verbose=1"):
        assert get(base + path) == (200, "text/plain; charset=utf-8", "ok"), path
    assert get(base + "/nothing")[:1] == (404,)
    assert get(base + "/metricsx")[0] == 404
    health.stopping = True
    assert get(base + "/healthz") == (503, "text/plain; charset=utf-8", "shutting down")


def test_endpoint_close_stops_listening(endpoint: tuple[HttpEndpoint, Metrics, Health]) -> None:
    served, _, _ = endpoint
    served.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{served.port}/healthz", timeout=2)


def test_endpoint_on_ipv6_loopback() -> None:
    served = HttpEndpoint("[::1]:0", CollectorRegistry(), Health(10.0))
    try:
        assert get(f"http://[::1]:{served.port}/healthz") == (200, "text/plain; charset=utf-8", "ok")
    finally:
        served.close()


def test_endpoint_on_a_busy_port_is_a_config_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        with pytest.raises(ConfigError) as info:
            HttpEndpoint(address, CollectorRegistry(), Health(10.0))
    assert (info.value.key, info.value.value) == ("metricsBindAddress", address)
    assert "Address already in use" in info.value.reason


# --------------------------------------------------------------------------------------------------
# Metrics


def recorded(run_: Run, upto: int, *, dry_run: bool = True) -> Metrics:
    """Return metrics fed with the first `upto` reports of a run, each decided 12 s after its stats."""
    metrics = Metrics()
    for report in run_.reports[:upto]:
        metrics.record_cycle(report, run_.state, 0.004, stats_time(report) + timedelta(seconds=12), dry_run)
    return metrics


def stats_time(report: CycleReport) -> datetime:
    assert report.summary is not None and report.summary.node.memory is not None
    assert report.summary.node.memory.time is not None
    return report.summary.node.memory.time


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_metrics_of_a_calm_cycle(memory_run: Run) -> None:
    metrics = recorded(memory_run, 1)
    assert sample(metrics, "evictd_cycles_total") == 1
    assert sample(metrics, "evictd_cycle_duration_seconds_count") == 1
    assert sample(metrics, "evictd_cycle_duration_seconds_sum") == 0.004
    assert sample(metrics, "evictd_signal_available_bytes", signal="memory.available") == 8 * Gi
    assert sample(metrics, "evictd_signal_capacity_bytes", signal="memory.available") == CAPACITY
    assert sample(metrics, "evictd_signal_available_bytes", signal="nodefs.available") == 80 * Gi
    assert sample(metrics, "evictd_stats_age_seconds", signal="memory.available") == 12
    assert sample(metrics, "evictd_threshold_bytes", signal="memory.available", kind="hard") == 1 * Gi
    assert sample(metrics, "evictd_threshold_bytes", signal="memory.available", kind="soft") == 2 * Gi
    # 10% of 100Gi in the kubelet's float32 arithmetic (KUBELET_SPEC §2.5), not 10Gi exactly.
    assert sample(metrics, "evictd_threshold_bytes", signal="nodefs.available", kind="hard") == 10737418400
    for kind in ("hard", "soft"):
        assert sample(metrics, "evictd_threshold_met", signal="memory.available", kind=kind) == 0
    for condition in NodeCondition:
        assert sample(metrics, "evictd_node_condition", condition=str(condition)) == 0
    assert sample(metrics, "evictd_dry_run_evictions_total", eviction_signal="memory.available") == 0
    assert sample(metrics, "evictd_errors_total", source="stats") == 0


def test_metrics_follow_thresholds_and_conditions(memory_run: Run) -> None:
    metrics = recorded(memory_run, 2)
    assert sample(metrics, "evictd_threshold_met", signal="memory.available", kind="soft") == 1
    assert sample(metrics, "evictd_threshold_met", signal="memory.available", kind="hard") == 0
    assert sample(metrics, "evictd_node_condition", condition="MemoryPressure") == 1
    assert sample(metrics, "evictd_signal_available_bytes", signal="memory.available") == 1536 * Mi
    assert sample(metrics, "evictd_eviction_stats_age_seconds_count", eviction_signal="memory.available") is None
    for report in memory_run.reports[2:5]:
        metrics.record_cycle(report, memory_run.state, 0.001, stats_time(report), True)
    assert sample(metrics, "evictd_threshold_met", signal="memory.available", kind="soft") == 0
    assert sample(metrics, "evictd_node_condition", condition="MemoryPressure") == 1, "lingers 5 minutes"
    metrics.record_cycle(memory_run.reports[5], memory_run.state, 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_node_condition", condition="MemoryPressure") == 0
    assert sample(metrics, "evictd_cycles_total") == 6


@pytest.mark.parametrize(("dry_run", "counted", "not_counted"), [
    (True, "evictd_dry_run_evictions_total", "evictd_evictions_total"),
    (False, "evictd_evictions_total", "evictd_dry_run_evictions_total"),
], ids=["dry-run", "acting"])
def test_evictions_are_counted_by_signal(memory_run: Run, dry_run: bool, counted: str, not_counted: str) -> None:
    assert [e.pod.name for e in memory_run.reports[3].evictions] == ["web"]
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
    troubled = replace(
        memory_run.reports[3],
        reclaim=(ReclaimResult(ReclaimAction.CONTAINER_GC, freed_bytes=5),
                 ReclaimResult(ReclaimAction.IMAGE_GC, error="rpc error: code = Unavailable")),
        eviction_errors=("default/web: pods \"web\" is forbidden",),
    )
    metrics.record_cycle(troubled, memory_run.state, 0.001, NOW_WALL, True)
    assert sample(metrics, "evictd_errors_total", source="reclaim") == 1
    assert sample(metrics, "evictd_errors_total", source="eviction") == 1
    assert sample(metrics, "evictd_dry_run_evictions_total", eviction_signal="memory.available") == 1, \
        "a failed eviction still counts, as the kubelet counts it"
    assert sample(metrics, "evictd_reclaimed_bytes_total", action="containerGC") == 5
    assert sample(metrics, "evictd_reclaimed_bytes_total", action="imageGC") == 0, "a failed reclaim frees nothing"


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
        assert report.summary is not None
        pods = tuple(PodStats(pod_ref=PodReference(name=f"p{i}", namespace="ns", uid=f"u{i}"),
                              ephemeral_storage=None if age is None else FsStats(
                                  time=NOW_WALL - timedelta(seconds=age), used_bytes=4096, inodes_used=1))
                     for i, age in enumerate(ages_s))
        return replace(report, summary=replace(report.summary, pods=pods))

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


def without_pod_list(report: CycleReport, *, pods_from_node: bool = True) -> CycleReport:
    return replace(report, pod_list_problem="Kubernetes API list pods failed (None): pod cache not synced",
                   pods_from_node=pods_from_node)


def test_the_degraded_gauge_follows_the_pod_list(memory_run: Run) -> None:
    metrics = recorded(memory_run, 1)
    assert sample(metrics, "evictd_degraded", reason="pod-list-unavailable") == 0
    for pods_from_node in (True, False):
        metrics.record_cycle(without_pod_list(memory_run.reports[1], pods_from_node=pods_from_node),
                             memory_run.state, 0.001, NOW_WALL, False)
        assert sample(metrics, "evictd_degraded", reason="pod-list-unavailable") == 1
    metrics.record_cycle(memory_run.reports[2], memory_run.state, 0.001, NOW_WALL, False)
    assert sample(metrics, "evictd_degraded", reason="pod-list-unavailable") == 0


# --------------------------------------------------------------------------------------------------
# Cycle logs


class RecordingLog:
    """A structlog-like logger that remembers (level, event, fields) of every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def _record(self, level: str) -> Any:
        def log(event: str, **fields: Any) -> None:
            self.calls.append((level, event, fields))

        return log

    def __getattr__(self, level: str) -> Any:
        if level not in ("debug", "info", "warning", "error", "exception"):
            raise AttributeError(level)
        return self._record(level)

    def take(self) -> list[tuple[str, str, dict[str, Any]]]:
        calls, self.calls = self.calls, []
        return calls


def log_run(run_: Run, *, dry_run: bool = True) -> list[list[tuple[str, str, dict[str, Any]]]]:
    """Return the log calls of each cycle of a run."""
    log = RecordingLog()
    logger = CycleLogger(log, dry_run)
    per_cycle = []
    for number, report in enumerate(run_.reports, start=1):
        logger.log_cycle(number, report, run_.state)
        per_cycle.append(log.take())
    return per_cycle


def test_describe_threshold() -> None:
    settings = eviction_settings({"evictionHard": {"memory.available": "1Gi", "nodefs.available": "15%"},
                                  "evictionSoft": {"imagefs.available": "20%"},
                                  "evictionSoftGracePeriod": {"imagefs.available": "2m"}})
    assert [describe_threshold(t) for t in settings.thresholds()] == [
        "memory.available<1Gi (hard)", "nodefs.available<15% (hard)", "imagefs.available<20% (soft, grace 120s)",
        "allocatableMemory.available<1Gi (hard)",  # the enforceNodeAllocatable copy
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
    assert memory_run.reports[3].evictions[0].message == WEB_MESSAGE


def test_only_critical_pods_left_is_logged_as_unable_to_evict() -> None:
    only_critical = run(MEMORY_CONFIG, [memory_step(0, 500 * Mi)], pods=[STATIC_PROXY])
    events = [(level, event, fields.get("ranking", fields.get("pod"))) for level, event, fields in
              log_run(only_critical)[0]]
    assert events[-2:] == [
        ("info", "cannot evict a critical pod", "default/static-proxy"),
        ("warning", "unable to evict any pods from the node", ["default/static-proxy"]),
    ]


def test_stats_errors_are_logged_and_the_frozen_conditions_are_not_reported_as_changes() -> None:
    log = RecordingLog()
    logger = CycleLogger(log, True)
    report = failing_cycle(MEMORY_CONFIG)
    assert report.assessment.skipped == "stats unavailable"
    logger.log_cycle(7, report, EngineState())
    assert log.take() == [("error", "cycle error", {
        "cycle": 7,
        "error": "eviction manager: failed to get summary stats: "
                 "/sys/fs/cgroup/memory/memory.usage_in_bytes: Permission denied",
    })]


def test_acting_on_the_nodes_pods_is_logged_when_it_starts_and_ends(memory_run: Run) -> None:
    log = RecordingLog()
    logger = CycleLogger(log, False)
    calm = memory_run.reports[0]
    logger.log_cycle(1, calm, memory_run.state)
    log.take()
    degraded = without_pod_list(calm)
    for number in (2, 3):
        logger.log_cycle(number, degraded, memory_run.state)
    assert log.take() == [("warning", "no pod list from the Kubernetes API: hard thresholds act on the pods the "
                           "node shows", {"cycle": 2, "detail": degraded.pod_list_problem})]
    logger.log_cycle(4, replace(degraded, withheld="a soft threshold evicts only from the Kubernetes API's pod list"),
                     memory_run.state)
    logger.log_cycle(5, replace(degraded, withheld="a soft threshold evicts only from the Kubernetes API's pod list"),
                     memory_run.state)
    assert log.take() == [("warning", "threshold not acted on", {
        "cycle": 4, "reason": "a soft threshold evicts only from the Kubernetes API's pod list"})]
    logger.log_cycle(6, calm, memory_run.state)
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
    failed = replace(reclaimed.reports[0], reclaim=(ReclaimResult(ReclaimAction.IMAGE_GC, error="rpc error"),),
                     reclaim_succeeded=False)
    log = RecordingLog()
    CycleLogger(log, True).log_cycle(1, failed, reclaimed.state)
    assert ("error", "node-level reclaim failed", {"cycle": 1, "action": "imageGC", "error": "rpc error"}) in log.calls


def test_eviction_failures_are_logged() -> None:
    failed = replace(run(MEMORY_CONFIG, MEMORY_STEPS[:4]).reports[3], eviction_errors=("default/web: HTTP 500",))
    log = RecordingLog()
    CycleLogger(log, False).log_cycle(4, failed, EngineState())
    assert ("error", "eviction failed (still counted, as the kubelet counts it)",
            {"cycle": 4, "error": "default/web: HTTP 500"}) in log.calls


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


# --------------------------------------------------------------------------------------------------
# The live view


def rows(screen: str) -> dict[str, list[str]]:
    """Return the signal table's rows by signal name, cells split on the column gaps."""
    table: dict[str, list[str]] = {}
    for line in screen.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if "." in cells[0] and len(cells) == 5 and not line.startswith(" "):
            table[cells[0]] = cells[1:]
    return table


def screen_of(run_: Run, index: int, *, dry_run: bool = True, recent: Sequence[str] = ()) -> str:
    return render(run_.reports[index], run_.state, node_name="node-1", cycle=index + 1,
                  now_wall=NOW_WALL, dry_run=dry_run, recent=recent)


def test_live_view_shows_signals_thresholds_and_grace_progress(memory_run: Run) -> None:
    screen = screen_of(memory_run, 2)
    lines = screen.splitlines()
    assert lines[0] == "evictd on node-1 - cycle 3 at 10:00:42 UTC - dry-run: decisions are reported, nothing is changed"
    assert lines[1] == "node conditions: MemoryPressure"
    assert lines[3].split() == ["SIGNAL", "AVAILABLE", "CAPACITY", "THRESHOLDS", "STATE"]
    table = rows(screen)
    assert table["memory.available"] == ["1.5 GiB", "16.0 GiB", "hard 1.0 GiB, soft 2.0 GiB", "grace 10/90s"]
    assert table["nodefs.available"] == ["80.0 GiB", "100.0 GiB", "hard 10.0 GiB", "ok"]
    assert table["imagefs.available"] == ["80.0 GiB", "100.0 GiB", "-", "ok"]
    assert table["nodefs.inodesFree"] == ["1,000,000", "2,000,000", "-", "ok"]
    # Configured (the enforceNodeAllocatable copy) but not observed: this summary has no pods container.
    assert table["allocatableMemory.available"] == ["no data", "-", "hard 1Gi", "-"]
    assert "containerfs.available" in table and "pid.available" not in table, "pid: neither observed nor configured"


def test_live_view_ranking_marks_critical_pods(memory_run: Run) -> None:
    calm = screen_of(memory_run, 1)
    assert "eviction order if memory ran short:\n  1. default/static-proxy (critical, never evicted)\n" \
           "  2. default/web\n  3. default/db" in calm
    acting = screen_of(memory_run, 3)
    assert rows(acting)["memory.available"][-1] == "MET"
    assert "eviction order (this cycle):\n  1. default/static-proxy (critical, never evicted)\n  2. default/web\n" \
           in acting
    assert f"would evict default/web (memory.available): {WEB_MESSAGE}" in acting
    assert "acting on memory.available<1Gi (hard)" in acting
    assert f"evicted default/web (memory.available): {WEB_MESSAGE}" in screen_of(memory_run, 3, dry_run=False)
    assert screen_of(memory_run, 3, dry_run=False).splitlines()[0].endswith(" UTC - acting")


def test_live_view_calm_node_and_recent_events(memory_run: Run) -> None:
    screen = screen_of(memory_run, 0, recent=["10:00:40 threshold met memory.available<2Gi", "10:00:41 x"])
    assert "node conditions: none" in screen
    assert rows(screen)["memory.available"][-1] == "ok"
    assert screen.endswith("recent events:\n10:00:40 threshold met memory.available<2Gi\n10:00:41 x")


def test_live_view_without_pods_or_stats(memory_run: Run) -> None:
    no_pods = run(MEMORY_CONFIG, [memory_step(0, 8 * Gi)], pods=[])
    assert "eviction order: no pods found on this node" in screen_of(no_pods, 0)
    stats_failed = replace(failing_cycle(MEMORY_CONFIG), pods=memory_run.reports[0].pods)
    screen = render(stats_failed, memory_run.state, node_name="node-1", cycle=1, now_wall=NOW_WALL, dry_run=True)
    assert rows(screen)["memory.available"] == ["no data", "-", "hard 1Gi, soft 2Gi", "-"]
    assert "eviction order: unknown (stats unavailable)" in screen


def test_live_view_shows_the_first_five_pods() -> None:
    many = [pod(f"p{i}", requests={"memory": "10Mi"}) for i in range(7)]
    stats = [pod_stats(p, memory=(100 + i) * Mi) for i, p in enumerate(many)]
    step = {"at": 0, "summary": summary(memory=8 * Gi, memory_ws=8 * Gi, pods=stats, time=stamp(0))}
    screen = screen_of(run(MEMORY_CONFIG, [step], pods=many), 0)
    assert "  5. default/p2\n  ... and 2 more" in screen
    assert "  1. default/p6\n" in screen


# --------------------------------------------------------------------------------------------------
# The composition root


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
    with Waiter() as real:
        yield real


def memcg_set(pods_cgroup: str) -> MemcgNotifierSet:
    settings = eviction_settings({"evictionHard": {"memory.available": "1Gi", "allocatableMemory.available": "1Gi"},
                                  "enforceNodeAllocatable": []})
    return MemcgNotifierSet(tuple(settings.thresholds()), memory_root="/sys/fs/cgroup/memory",
                            pods_cgroup=pods_cgroup)


NODE_NOTIFIERS = ["hard memory eviction threshold", "hard memory eviction threshold: usage fell"]


def refresh(notifiers: Notifiers, summary_: Summary | None) -> list[str]:
    report = replace(run(MEMORY_CONFIG, [memory_step(0, 8 * Gi)]).reports[0], summary=summary_)
    return notifiers.refresh(report)


def test_refresh_ignores_missing_allocatable_notifiers_without_a_pods_container(waiter: Waiter) -> None:
    memcg = memcg_set("evictd-test-absent/kubepods")
    notifiers = Notifiers(waiter=waiter, memcg=memcg, psi=())
    try:
        assert refresh(notifiers, memory_summary(pods_container=False)) == []
        # Only the node-level notifier and its drop watch, registered on this machine's real root memory cgroup.
        assert waiter.notifiers == (memcg,)
        assert [n.description for n in (*memcg.levels, *memcg.drop_watches)] == NODE_NOTIFIERS
        assert [n.cgroup_dir for n in (*memcg.levels, *memcg.drop_watches)] == ["/sys/fs/cgroup/memory"] * 2
        assert memcg.levels[0].threshold_bytes == 16 * Gi - 1 * Gi + 1 * Gi
        assert memcg.drop_watches[0].threshold_bytes == 9 * Gi - MEMCG_REARM_STEP_BYTES, "a step below usage"
    finally:
        memcg.close()


def test_refresh_reports_a_pods_cgroup_it_cannot_watch(waiter: Waiter) -> None:
    memcg = memcg_set("evictd-test-absent/kubepods")
    notifiers = Notifiers(waiter=waiter, memcg=memcg, psi=())
    try:
        (problem,) = refresh(notifiers, memory_summary(pods_container=True))
        assert problem.startswith("hard allocatable memory eviction threshold: "
                                  "/sys/fs/cgroup/memory/evictd-test-absent/kubepods/")
        assert "No such file or directory" in problem
        assert waiter.notifiers == (memcg,)
        assert [n.description for n in (*memcg.levels, *memcg.drop_watches)] == NODE_NOTIFIERS
    finally:
        memcg.close()


def test_refresh_reports_incomplete_node_memory(waiter: Waiter) -> None:
    memcg = memcg_set("evictd-test-absent/kubepods")
    notifiers = Notifiers(waiter=waiter, memcg=memcg, psi=())
    try:
        (problem,) = refresh(notifiers, memory_summary(pods_container=False, usage=False))
        assert problem.startswith("hard memory eviction threshold: summary node.memory: summary was incomplete.")
        assert waiter.notifiers == (memcg,), "kept in the waiter, to be armed at the next refresh"
        assert memcg.levels == memcg.drop_watches == ()
    finally:
        memcg.close()


def test_refresh_keeps_the_psi_notifiers_with_or_without_memcg_and_stats(waiter: Waiter) -> None:
    # A real PSI trigger on this machine's /proc/pressure/memory (a 2 s window: no CAP_SYS_RESOURCE here).
    with PsiNotifier("/proc/pressure/memory", 150_000, 2_000_000) as psi:
        assert refresh(Notifiers(waiter=waiter, memcg=None, psi=(psi,)), memory_summary(pods_container=True)) == []
        assert waiter.notifiers == (psi,), "cgroup v2: PSI only"
        memcg = memcg_set("evictd-test-absent/kubepods")
        try:
            notifiers = Notifiers(waiter=waiter, memcg=memcg, psi=(psi,))
            assert notifiers.refresh(failing_cycle(MEMORY_CONFIG)) == []
            assert memcg.levels == (), "no stats: nothing to compute a level from"
            assert waiter.notifiers == (memcg, psi)
            assert refresh(notifiers, memory_summary(pods_container=False)) == []
            assert waiter.notifiers == (memcg, psi)
            assert not memcg.closed and [n.description for n in memcg.levels] == ["hard memory eviction threshold"]
            assert not psi.closed
        finally:
            memcg.close()


def test_psi_wakeups_watch_the_machine_and_on_cgroup_v2_the_pods_cgroup(tmp_path: Path) -> None:
    settings = configuration(tmp_path, "psiStallThreshold: 200ms\npsiWindow: 4s\n").evictd
    log = structlog.get_logger("test")
    v2_root = tmp_path / "cgroup"
    shutil.copytree(FIXTURE_V2, v2_root)  # pods cgroup memory.pressure is a plain file here: we read what is written
    v2 = CgroupLayout(version=2, root=v2_root)
    notifiers = build_psi_notifiers(settings, v2, CgroupReader(v2), log)
    try:
        assert [(n.path, n.description) for n in notifiers] == [  # type: ignore[attr-defined]
            ("/proc/pressure/memory", "node memory pressure stall"),
            (str(v2_root / "kubepods" / "memory.pressure"), "pods cgroup memory pressure stall"),
        ]
        written = (v2_root / "kubepods" / "memory.pressure").read_bytes()
        assert written.startswith(b"some 200000 4000000\0"), "the trigger, NUL-terminated, over the file's text"
        assert (v2_root / "memory.pressure").read_bytes() == FIXTURE_V2.joinpath("memory.pressure").read_bytes(), (
            "the root cgroup's file is not the machine's: /proc/pressure/memory is")
    finally:
        for notifier in notifiers:
            notifier.close()
    v1 = CgroupLayout(version=1, root=FIXTURE_V1)
    machine_only = build_psi_notifiers(settings, v1, CgroupReader(v1), log)
    try:
        assert [n.description for n in machine_only] == ["node memory pressure stall"]  # type: ignore[attr-defined]
    finally:
        for notifier in machine_only:
            notifier.close()
    off = configuration(tmp_path, "psiWakeups: false\n").evictd
    assert build_psi_notifiers(off, v2, CgroupReader(v2), log) == ()


def test_path_layout_compares_the_filesystems_of_the_configured_folders(
    tmp_path: Path, tmpfs_mount: Path, ext4_mount: Path
) -> None:
    kubelet = str(tmp_path / "var" / "lib" / "kubelet")  # none of these folders exist yet
    images = str(tmpfs_mount / "containerd")
    layers = str(ext4_mount / "containerd" / "snapshots")
    assert PathLayout(kubelet, kubelet, kubelet).layout() == FsLayout(dedicated_imagefs=False, split_containerfs=False)
    assert PathLayout(kubelet, images, images).layout() == FsLayout(dedicated_imagefs=True, split_containerfs=False)
    assert PathLayout(kubelet, images, layers).layout() == FsLayout(dedicated_imagefs=True, split_containerfs=True)


def configuration(tmp_path: Path, evictd: str) -> Any:
    path = tmp_path / "evictd.yaml"
    path.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n" + evictd)
    return load_configuration([str(path)])


def test_build_stats_source_picks_the_configured_source(tmp_path: Path) -> None:
    cgroups = CgroupReader(CgroupLayout(version=1, root=FIXTURE_V1))
    pods = DiscoveredPods(cgroups, str(tmp_path / "logs"))
    node = build_stats_source(configuration(tmp_path, f"kubeletRootDir: {tmp_path}\n"), cgroups, pods, "node-1")
    assert isinstance(node, NodeStatsSource)
    assert node.summary().node.node_name == "node-1"
    direct = build_stats_source(
        configuration(tmp_path, "statsSource: kubelet\nkubeletSummaryURL: https://127.0.0.1:10250/stats/summary\nkubeletInsecureTLS: true\n"),
        cgroups, pods, "node-1")
    assert isinstance(direct, KubeletSummarySource)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text('{"apiVersion": "v1", "kind": "Config", "current-context": "c",'
                          '"clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],'
                          '"users": [{"name": "u", "user": {"token": "t"}}],'
                          '"contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}')
    proxy = build_stats_source(configuration(tmp_path, f"statsSource: kubelet\nkubeconfig: {kubeconfig}\n"),
                               cgroups, pods, "node-1")
    assert isinstance(proxy, ApiProxySummarySource)
    with pytest.raises(SampleError) as info:
        proxy.summary()
    assert info.value.source == "/api/v1/nodes/node-1/proxy/stats/summary"

"""A real Prometheus scrapes a real `evictd run` under real memory pressure: the pressure alert fires and every
dashboard query returns data.

The node is kubelet-like in a private test cgroup (tests/real_pod_node.py): the pods cgroup limited to 512 MiB,
one burstable pod whose real process allocates 360 MiB, past the `allocatableMemory.available<200Mi` threshold
(and far from its limit: no OOM kill). evictd runs as a user runs it (no API: evictions are decided and
reported), every signal with a threshold so that each threshold panel has one. Debian's Prometheus (loopback,
a temporary data folder) scrapes it every second and evaluates deploy/monitoring/evictd.rules.yaml every second.
Through Prometheus's HTTP API the test waits for `EvictdNodePressure{condition="MemoryPressure"}` to fire, checks
that no alert about evictd's own health does, and runs each panel query of the dashboard with Grafana's
variables filled in as Grafana would (`$instance` as the node, `$__rate_interval` as four scrape intervals at
least, `$__range` as the time range), asserting each returns data, but for the fleet panels' queries that cannot
on a server started seconds ago with no shadow comparison (`may_be_empty`: Prometheus accepts them, promtool's
tests assert their values). The shadow counters are scraped, every outcome and resource at 0, and the fleet
group's hourly rule records them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from evictd_process import EvictdProcess
from monitoring_files import DASHBOARD, RULES, dashboard_queries
from prometheus_server import PrometheusServer

from real_pod_node import MiB, RealPodNode

NODE = "node-under-test"
POD_LIMIT_BYTES = 512 * MiB
ALLOCATED_BYTES = 360 * MiB
# Grafana's $__rate_interval is at least four scrape intervals (1 s here); 10 s holds about ten samples.
RATE_INTERVAL = "10s"
DASHBOARD_RANGE = "1m"
# The fleet rules that sum whole past hours (a 7-day subquery at whole hours): a server started seconds ago has
# no sample at the last whole hour yet.
WHOLE_HOUR_RULES = ("evictd:shadow_comparisons:increase7d", "evictd:shadow_agreement:ratio7d",
                    "evictd:dry_run_hours:count7d")
SHADOW_OUTCOMES = ("agree", "different-pod", "evictd-only", "kubelet-only")
SHADOW_RESOURCES = ("memory", "ephemeral-storage", "inodes", "pids")
ALERT_TIMEOUT_S = 30.0
# The alerts about evictd's own health: none may fire on a healthy daemon.
HEALTH_ALERTS = ("EvictdDown", "EvictdNotCycling", "EvictdStatsStale", "EvictdJournalWriteErrors")
# Both allocatable thresholds (issue #38 item 5): the configured 200Mi (met under the pod's 360 MiB) and, with
# enforceNodeAllocatable [pods], the kubelet's copy of memory.available's 100Mi (not met): two series.
KUBELET_CONFIG = (
    "evictionHard: {allocatableMemory.available: 200Mi, memory.available: 100Mi, nodefs.available: 1%,\n"
    "  nodefs.inodesFree: 1%, imagefs.available: 1%, imagefs.inodesFree: 1%, pid.available: 1%}\n"
    "enforceNodeAllocatable: [pods]\n"
)


@pytest.fixture
def real_pod(tmp_path: Path) -> Iterator[RealPodNode]:
    node = RealPodNode(kubelet_root=tmp_path / "kubelet", pod_logs_dir=tmp_path / "pod-logs",
                       pods_limit_bytes=POD_LIMIT_BYTES)
    try:
        node.create(volume_files={"data.bin": MiB}, log_bytes=4096)
        yield node
    finally:
        node.teardown()


def firing(server: PrometheusServer, name: str) -> list[dict[str, Any]]:
    return [a for a in server.alerts() if a["labels"]["alertname"] == name and a["state"] == "firing"]


def dashboard_threshold_queries() -> list[tuple[str, str]]:
    return [(title, expr) for title, expr in dashboard_queries() if "evictd_threshold" in expr]


def legend_of(expr: str, labels: dict[str, str]) -> str:
    """The legend Grafana shows for a series of the dashboard's query `expr` (its legendFormat filled in)."""
    [legend] = [target["legendFormat"] for panel in json.loads(DASHBOARD.read_text())["panels"]
                for target in panel.get("targets", ()) if target["expr"] == expr][:1]
    return re.sub(r"\{\{(\w+)\}\}", lambda m: labels.get(m.group(1), ""), legend)


def grafana_expr(expr: str) -> str:
    """Fill in the dashboard's variables as Grafana does for one selected node (a name without regex characters)."""
    assert re.fullmatch(r"[a-z0-9-]+", NODE)
    return expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", DASHBOARD_RANGE).replace(
        "$instance", NODE)


def may_be_empty(expr: str) -> str | None:
    """Why a dashboard query returns nothing here (None: it must return data)."""
    if any(rule in expr for rule in WHOLE_HOUR_RULES):
        return "reads whole past hours"
    if 'outcome!="agree"' in expr and expr.endswith("> 0"):
        return "lists disagreements only"
    return None


def test_pressure_alert_fires_and_every_dashboard_query_returns_data(
    tmp_path: Path, real_pod: RealPodNode
) -> None:
    process = real_pod.start_process()
    (tmp_path / "evictd").mkdir()
    (tmp_path / "prometheus").mkdir()
    daemon = EvictdProcess(
        tmp_path / "evictd", kubelet=KUBELET_CONFIG,
        evictd=f"housekeepingInterval: 1s\ncgroupRoot: /{real_pod.base}\nkubeletRootDir: {real_pod.kubelet_root}\n"
               f"podLogsDir: {real_pod.pod_logs_dir}\nimageFsPath: {tmp_path}\ncontainerFsPath: {tmp_path}\n"
               "containerRuntimeEndpoint: unix:///nonexistent/evictd-test.sock\n")
    server: PrometheusServer | None = None
    try:
        daemon.wait_event("evictd started")
        server = PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{daemon.port}"], [RULES], NODE)
        deadline = time.monotonic() + ALERT_TIMEOUT_S
        while not server.query(f'evictd_cycles_total{{job="evictd", instance="{NODE}"}} > 2'):
            assert time.monotonic() < deadline, "Prometheus did not scrape evictd's cycles"
            time.sleep(0.5)
        assert firing(server, "EvictdNodePressure") == [], "no pressure yet"

        process.do(f"alloc {ALLOCATED_BYTES}")
        daemon.wait_event("node conditions changed", timeout=10)
        deadline = time.monotonic() + ALERT_TIMEOUT_S
        while not (alerts := firing(server, "EvictdNodePressure")):
            assert time.monotonic() < deadline, f"EvictdNodePressure never fired: {server.alerts()}"
            time.sleep(0.5)
        (alert,) = alerts
        assert alert["labels"] == {"alertname": "EvictdNodePressure", "condition": "MemoryPressure",
                                   "instance": NODE, "severity": "warning"}
        assert alert["annotations"]["summary"] == f"{NODE} is under MemoryPressure"

        time.sleep(int(RATE_INTERVAL[:-1]) + 1)  # a whole rate window of samples under pressure
        empty = []
        for title, expr in dashboard_queries():
            if not server.query(grafana_expr(expr)) and may_be_empty(expr) is None:
                empty.append((title, expr))
        assert empty == [], f"dashboard queries without data: {empty}"
        assert [expr for _, expr in dashboard_queries() if may_be_empty(expr)], "the fleet panels are there"
        # The shadow counters, from the first scrape, every pair at 0; the fleet group records them per node.
        shadow = server.query(f'evictd_shadow_comparisons_total{{job="evictd", instance="{NODE}"}}')
        assert sorted((s["metric"]["outcome"], s["metric"]["resource"], float(s["value"][1])) for s in shadow) == \
            sorted((outcome, resource, 0.0) for outcome in SHADOW_OUTCOMES for resource in SHADOW_RESOURCES)
        recorded = server.query(f'evictd:shadow_comparisons:increase1h{{job="evictd", instance="{NODE}"}}')
        assert sorted((s["metric"]["outcome"], s["metric"]["resource"], float(s["value"][1])) for s in recorded) == \
            sorted((outcome, resource, 0.0) for outcome in SHADOW_OUTCOMES for resource in SHADOW_RESOURCES)
        met = server.query(grafana_expr('evictd_threshold_met{job="evictd", instance=~"$instance", '
                                        'signal="allocatableMemory.available"}'))
        assert sorted((s["metric"]["threshold"], s["metric"]["origin"], float(s["value"][1])) for s in met) == [
            ("allocatableMemory.available<100Mi", "memory.available", 0.0),
            ("allocatableMemory.available<200Mi", "evictionHard", 1.0)]
        # Each threshold series of the dashboard has a legend of its own (Grafana's {{label}} filled in).
        for title, expr in dashboard_threshold_queries():
            series = server.query(grafana_expr(expr))
            legends = [legend_of(expr, s["metric"]) for s in series]
            assert len(set(legends)) == len(legends), (title, legends)
        for name in HEALTH_ALERTS:
            assert not [a for a in server.alerts() if a["labels"]["alertname"] == name], name
    finally:
        if server is not None:
            server.stop()
        assert daemon.stop() == 0

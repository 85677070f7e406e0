"""The composition root of `evictd run`: every dependency of the daemon, built from the configuration.

Nothing else in evictd decides which adapter serves which role. Today the daemon observes the node and
decides, but has nothing to act through (the container runtime and the Kubernetes API adapters come later):
node-level reclaim and evictions are therefore reported, not carried out, exactly as in dry-run.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from typing import TextIO

import structlog

from evictd.adapters.cgroups import CgroupReader, detect_cgroup_layout
from evictd.adapters.disk_usage import DiskUsageCache
from evictd.adapters.filesystems import detect_layout
from evictd.adapters.kubelet_summary import ApiProxySummarySource, KubeletSummarySource
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_stats import NodeStatsSource, existing_ancestor
from evictd.adapters.notifiers import (
    SYSTEM_MEMORY_PRESSURE,
    MemcgNotifierSet,
    Notifier,
    PsiNotifier,
    Waiter,
)
from evictd.config import Configuration
from evictd.core.engine import EngineConfig, Eviction, ReclaimAction
from evictd.core.errors import ConfigError, SampleError
from evictd.core.signals import FsLayout
from evictd.core.summary import SYSTEM_CONTAINER_PODS
from evictd.daemon import Daemon
from evictd.http_endpoint import Health, HttpEndpoint
from evictd.logging_setup import configure_logging, resolve_format
from evictd.manager import CycleReport, EvictionManager, StatsSource

MICROSECONDS = 1_000_000


class MonotonicClock:
    """The real monotonic clock: the only place the daemon's decisions read time."""

    def monotonic(self) -> float:
        import time

        return time.monotonic()


class PathLayout:
    """Detects the filesystem layout by device ids of the configured folders."""

    def __init__(self, kubelet_root: str, image_fs_path: str, container_fs_path: str) -> None:
        self._paths = (kubelet_root, image_fs_path, container_fs_path)

    def layout(self) -> FsLayout:
        return detect_layout(*(existing_ancestor(path) for path in self._paths))


class ReportOnlyReclaimer:
    """Node-level reclaim without a runtime: nothing is freed; the cycle reports what it would have run."""

    def reclaim(self, action: ReclaimAction) -> int:
        return 0


class ReportOnlyEvictor:
    """Evictions without the Kubernetes API: decided and reported, not carried out."""

    def evict(self, eviction: Eviction) -> None:
        return None


@dataclass
class Notifiers:
    """The wake-up sources: memcg thresholds (re-armed every 10 s) and PSI triggers (armed once)."""

    waiter: Waiter
    memcg: MemcgNotifierSet | None
    psi: tuple[Notifier, ...]

    def refresh(self, report: CycleReport) -> list[str]:
        """Re-arm the memcg notifiers from the cycle's readings; return what failed, for logging."""
        problems: list[str] = []
        if self.memcg is not None and report.summary is not None:
            no_pods_container = SYSTEM_CONTAINER_PODS not in report.summary.node.system_containers
            for description, error in self.memcg.refresh(report.summary):
                if no_pods_container and "allocatable" in description:
                    continue  # no pods cgroup on this node: nothing to watch, nothing wrong
                problems.append(f"{description}: {error}")
        self.waiter.set_notifiers([*(self.memcg.notifiers if self.memcg else ()), *self.psi])
        return problems


def _psi_notifiers(config: Configuration, log: structlog.typing.FilteringBoundLogger) -> tuple[Notifier, ...]:
    settings = config.evictd
    if not settings.psi_wakeups or not os.path.exists(SYSTEM_MEMORY_PRESSURE):
        return ()
    try:
        return (
            PsiNotifier(SYSTEM_MEMORY_PRESSURE, int(settings.psi_stall_threshold_s * MICROSECONDS),
                        int(settings.psi_window_s * MICROSECONDS), description="node memory pressure stall"),
        )
    except SampleError as exc:
        log.warning("PSI wake-ups unavailable", path=exc.source, reason=exc.reason)
        return ()


def build_stats_source(config: Configuration, cgroups: CgroupReader, pods: DiscoveredPods,
                       node_name: str) -> StatsSource:
    """Return the configured stats source: the node itself, or the kubelet's Summary API."""
    settings = config.evictd
    if settings.stats_source == "kubelet":
        if settings.kubelet_summary_url:
            return KubeletSummarySource(settings.kubelet_summary_url, token_file=settings.kubelet_token_file,
                                        ca_file=settings.kubelet_ca_file)
        return ApiProxySummarySource(node_name, kubeconfig=settings.kubeconfig)
    return NodeStatsSource(
        node_name=node_name,
        cgroups=cgroups,
        pods=pods,
        disk_usage=DiskUsageCache(),
        kubelet_root=settings.kubelet_root_dir,
        pod_logs_dir=settings.pod_logs_dir,
        image_fs_path=settings.image_fs_path,
        container_fs_path=settings.container_fs_path,
    )


def build_daemon(
    config: Configuration,
    *,
    max_cycles: int = 0,
    stdout: TextIO = sys.stdout,
    serve_http: bool = True,
) -> tuple[Daemon, HttpEndpoint | None]:
    """Build the daemon and its HTTP endpoint from `config`. Raises ConfigError for unusable settings."""
    settings = config.evictd
    fmt = resolve_format(settings.log_format, stdout)
    recent = configure_logging(fmt)
    log = structlog.get_logger("evictd")
    node_name = settings.node_name or socket.gethostname()
    layout = detect_cgroup_layout(settings.cgroupfs_path, settings.cgroup_driver, base=settings.cgroup_root.strip("/"))
    cgroups = CgroupReader(layout)
    pods = DiscoveredPods(cgroups, settings.pod_logs_dir)
    stats = build_stats_source(config, cgroups, pods, node_name)
    engine_config = EngineConfig.from_settings(config.eviction)
    manager = EvictionManager(
        engine_config,
        stats=stats,
        layout=PathLayout(settings.kubelet_root_dir, settings.image_fs_path, settings.container_fs_path),
        pods=pods,
        reclaimer=ReportOnlyReclaimer(),
        evictor=ReportOnlyEvictor(),
        clock=MonotonicClock(),
    )
    waiter = Waiter()
    memcg = None
    if settings.memcg_wakeups and layout.version == 1 and settings.stats_source == "node":
        memcg = MemcgNotifierSet(
            engine_config.thresholds,
            memory_root=str(layout.memory_hierarchy),
            pods_cgroup=cgroups.pods_cgroup(),
        )
    notifiers = Notifiers(waiter=waiter, memcg=memcg, psi=_psi_notifiers(config, log))
    from evictd.metrics import Metrics

    metrics = Metrics()
    health = Health(settings.housekeeping_interval_s)
    endpoint = HttpEndpoint(settings.metrics_bind_address, metrics.registry, health) if serve_http else None
    # Nothing to act through yet: every decision is reported as in dry-run (README: "Status").
    dry_run = True
    if not settings.dry_run:
        log.info("no container runtime or Kubernetes API adapter yet: decisions are reported, not carried out")
    if not cgroups.has_pods_cgroup():
        log.info("no pods cgroup on this node (no kubelet?): allocatableMemory.available and pod stats are absent",
                 pods_cgroup=cgroups.pods_cgroup())
    problems_seen: set[str] = set()

    def log_sample_problems(number: int, report: CycleReport) -> None:
        problems = {f"{p.source}: {p.reason}" for p in getattr(stats, "problems", ())}
        for problem in sorted(problems - problems_seen):
            log.warning("signal source unreadable; its signals are absent", cycle=number, detail=problem)
        for problem in sorted(problems_seen - problems):
            log.info("signal source readable again", cycle=number, detail=problem)
        problems_seen.clear()
        problems_seen.update(problems)

    daemon = Daemon(
        manager=manager,
        waiter=waiter,
        metrics=metrics,
        health=health,
        interval_s=settings.housekeeping_interval_s,
        dry_run=dry_run,
        node_name=node_name,
        shutdown_timeout_s=settings.shutdown_timeout_s,
        max_cycles=max_cycles,
        refresh_notifiers=notifiers.refresh,
        live_output=stdout if fmt == "live" else None,
        recent=recent,
        on_cycle=log_sample_problems,
        log=log,
    )
    return daemon, endpoint


def check_settings(config: Configuration) -> None:
    """Raise ConfigError for settings that cannot work on this machine before anything starts."""
    if config.evictd.stats_source == "kubelet" and not config.evictd.kubelet_summary_url and not (
        config.evictd.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST")
    ):
        raise ConfigError("needs kubeletSummaryURL, a kubeconfig, or to run inside a cluster",
                          key="statsSource", value="kubelet")

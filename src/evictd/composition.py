"""The composition root of `evictd run`: every dependency of the daemon, built from the configuration.

Nothing else in evictd decides which adapter serves which role. With a Kubernetes API (a kubeconfig, or the
in-cluster service account inside a pod) pods come from a watch, evictions go through the API and node
conditions, taints and events are written; without one, pods are discovered from the node and every decision
is reported only, as in dry-run. In dry-run nothing is written anywhere: what would be is logged and counted.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from typing import Any, TextIO

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
from evictd.config import Configuration, EvictdSettings
from evictd.core.engine import EngineConfig, Eviction, ReclaimAction
from evictd.core.errors import ConfigError, KubeError, SampleError
from evictd.core.node_status import ConditionMode
from evictd.core.signals import FsLayout
from evictd.core.summary import SYSTEM_CONTAINER_PODS
from evictd.daemon import Daemon
from evictd.http_endpoint import Health, HttpEndpoint
from evictd.kube.client import build_api_client
from evictd.kube.cluster import ClusterSync, EvictablePods
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal
from evictd.kube.node_writer import NodeStatusWriter
from evictd.kube.pod_watch import PodWatcher
from evictd.logging_setup import configure_logging, resolve_format
from evictd.manager import CycleReport, EvictionManager, PodEvictor, PodSource, StatsSource
from evictd.metrics import Metrics

MICROSECONDS = 1_000_000
NODE_NAME_ENV = "EVICTD_NODE_NAME"
# Set in every pod by the kubelet: evictd then uses the in-cluster service account.
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
JOURNAL_FILE = "evictions.json"
# How long start-up waits for the first pod list before running cycles anyway (they evict nobody until then).
POD_SYNC_WAIT_S = 10.0


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
    """Evictions not carried out (no Kubernetes API, or dry-run): decided and reported only."""

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


def build_stats_source(config: Configuration, cgroups: CgroupReader, pods: PodSource,
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


@dataclass
class ClusterParts:
    """The Kubernetes side of the daemon, when an API is configured."""

    pods: EvictablePods
    evictor: PodEvictor
    sync: ClusterSync
    watcher: PodWatcher


def api_configured(settings: EvictdSettings) -> bool:
    """True when evictd should talk to a Kubernetes API: a kubeconfig, or running inside a pod."""
    return bool(settings.kubeconfig or os.environ.get(IN_CLUSTER_ENV))


def build_cluster(config: Configuration, node_name: str, metrics: Metrics, log: Any, dry_run: bool) -> ClusterParts:
    """Build the pod watch, the journaled evictor, the node status writer and the event recorder."""
    settings = config.evictd
    api_client = build_api_client(settings.kubeconfig)

    def api_error(error: KubeError) -> None:
        metrics.api_errors.labels(error.verb).inc()

    watcher = PodWatcher(api_client, node_name, on_error=api_error)
    watcher.start()
    if not watcher.wait_synced(POD_SYNC_WAIT_S):
        log.warning("pod list not synced yet; no pod is evicted until it is", error=str(watcher.last_error))
    journal = EvictionJournal(None if dry_run else os.path.join(settings.state_dir, JOURNAL_FILE))
    events = EventRecorder(api_client, node_name, dry_run=dry_run)
    kube_evictor = None if dry_run else KubePodEvictor(api_client, journal, events, on_api_error=api_error)
    evictor: PodEvictor = kube_evictor if kube_evictor is not None else ReportOnlyEvictor()
    node_writer = NodeStatusWriter(api_client, node_name, ConditionMode(settings.node_condition_mode),
                                   update_period_s=settings.node_status_update_frequency_s, dry_run=dry_run)
    sync = ClusterSync(watcher=watcher, evictor=kube_evictor, node_writer=node_writer, events=events,
                       on_error=api_error, log=log)
    return ClusterParts(pods=EvictablePods(watcher, journal), evictor=evictor, sync=sync, watcher=watcher)


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
    # The DaemonSet passes spec.nodeName through the downward API; otherwise the hostname, as the kubelet.
    node_name = settings.node_name or os.environ.get(NODE_NAME_ENV, "") or socket.gethostname()
    layout = detect_cgroup_layout(settings.cgroupfs_path, settings.cgroup_driver, base=settings.cgroup_root.strip("/"))
    cgroups = CgroupReader(layout)
    metrics = Metrics()
    dry_run = settings.dry_run
    cluster = build_cluster(config, node_name, metrics, log, dry_run) if api_configured(settings) else None
    pods: PodSource = cluster.pods if cluster is not None else DiscoveredPods(cgroups, settings.pod_logs_dir)
    evictor: PodEvictor = cluster.evictor if cluster is not None else ReportOnlyEvictor()
    if cluster is None:
        # Without the API there is nothing to evict through: decisions are reported, as in dry-run.
        dry_run = True
        log.info("no Kubernetes API configured (no kubeconfig, not in a pod): decisions are reported, "
                 "not carried out")
    stats = build_stats_source(config, cgroups, pods, node_name)
    engine_config = EngineConfig.from_settings(config.eviction)
    manager = EvictionManager(
        engine_config,
        stats=stats,
        layout=PathLayout(settings.kubelet_root_dir, settings.image_fs_path, settings.container_fs_path),
        pods=pods,
        reclaimer=ReportOnlyReclaimer(),
        evictor=evictor,
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
    health = Health(settings.housekeeping_interval_s)
    endpoint = HttpEndpoint(settings.metrics_bind_address, metrics.registry, health) if serve_http else None
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
        after_cycle=cluster.sync.after_cycle if cluster is not None else None,
        wait_for_cleanup=cluster.sync.wait_for_cleanup if cluster is not None else None,
    )
    return daemon, endpoint


def check_settings(config: Configuration) -> None:
    """Raise ConfigError for settings that cannot work on this machine before anything starts."""
    if config.evictd.stats_source == "kubelet" and not config.evictd.kubelet_summary_url and not (
        config.evictd.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST")
    ):
        raise ConfigError("needs kubeletSummaryURL, a kubeconfig, or to run inside a cluster",
                          key="statsSource", value="kubelet")

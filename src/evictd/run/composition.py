"""The composition root of `evictd run`: every dependency of the daemon, built from the configuration.

Nothing else in evictd decides which adapter serves which role: docs/daemon.md's table "What `evictd run` acts
through depends on what it finds" (the Kubernetes API, a container runtime, dry-run) is what is built here.

Building starts no thread and waits for nothing, with one exception: evictd first takes the node lock and the
stateDir lock (`state_lock`; a second evictd on the node waits for them, or exits with status 2), because
the engine state, the journal and the record of critical pods are read from stateDir as they are built. What runs
beside the loop or may wait (the pod watch and its first list, the runtime's first answer, the HTTP
endpoint, the disk walker) are the daemon's parts, started in that order by `Daemon.start`.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import structlog

from evictd.adapters.cgroups import CgroupLayout, CgroupReader, detect_cgroup_layout
from evictd.adapters.disk_walker_process import DiskWalkerProcess, WalkerSettings
from evictd.adapters.filesystems import detect_layout
from evictd.adapters.kubelet_summary import ApiProxySummarySource, KubeletSummarySource, summary_deadline_s
from evictd.adapters.memory_watch import MemoryWatch
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_stats import NodeStatsSource, existing_ancestor
from evictd.adapters.notifiers import SYSTEM_MEMORY_PRESSURE, MemcgNotifierSet, Notifier, PsiNotifier, Waiter
from evictd.adapters.oom_counters import OomCounters
from evictd.adapters.pod_disk_usage import PodDiskStore
from evictd.adapters.runtime_gc import CriContainerGC, CriImageGC, RuntimeReclaimer, imagefs_usage
from evictd.adapters.runtime_node import PeriodicGC, RuntimeFilesystems, RuntimeLayout
from evictd.clock import SYSTEM_CLOCK
from evictd.config import Configuration, EvictdSettings, StatsOrigin
from evictd.core.container_gc import GCPolicy, PodState, PodStateFunc
from evictd.core.engine import EngineConfig, Eviction
from evictd.core.errors import ConfigError, EvictdError, KubeError, SampleError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.image_gc import image_gc_policy
from evictd.core.psi import microseconds
from evictd.cri import NO_RUNTIME, Runtime, RuntimeSlot, RuntimeVersion
from evictd.cri.client import CriClient
from evictd.kube.client import build_api_client
from evictd.kube.cluster import ClusterSync, EvictablePods, NodeFallbackPods
from evictd.kube.critical_record import CriticalPodRecord
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import JOURNAL_FILE, EvictionJournal
from evictd.kube.node_writer import NodeStatusWriter
from evictd.kube.pod_watch import TERMINAL_PHASES, PodWatcher
from evictd.kube.shadow import ShadowComparer
from evictd.log import Log
from evictd.observe.http_endpoint import Health, HttpEndpoint
from evictd.observe.logging_setup import configure_logging, resolve_format
from evictd.observe.metrics import Metrics
from evictd.record.engine_state import STATE_FILE, EngineStateFile, restore_window_s
from evictd.record.recorder import FlightRecorder
from evictd.record.recording import CurrentDecision, run_id
from evictd.run.after_cycle import (
    AfterCycle,
    Cycle,
    LiveView,
    NotifierRefresh,
    log_cycles,
    log_sample_problems,
    record_metrics,
)
from evictd.run.daemon import Daemon, Part
from evictd.run.lock import acquire_node_lock, acquire_state_lock
from evictd.run.manager import EvictionManager, ListedPods, PodEvictor, PodSource, StatsSource
from evictd.run.oom_feedback import OomFeedback
from evictd.run.runtime_link import CriRuntime, RuntimeLink
from evictd.run.stop_signal import StopSignal
from evictd.run.write_behind import WriteBehind

NODE_NAME_ENV = "EVICTD_NODE_NAME"
# The DaemonSet passes evictd's own pod UID, so that it never evicts itself.
POD_UID_ENV = "EVICTD_POD_UID"
# Set in every pod by the kubelet: evictd then uses the in-cluster service account.
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
CRITICAL_PODS_FILE = "critical-pods.json"
# How long start-up waits for the first pod list before running cycles anyway (hard thresholds rank the pods
# the node shows until then). A refused connection ends the wait at once.
POD_SYNC_WAIT_S = 10.0


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


def build_psi_notifiers(settings: EvictdSettings, layout: CgroupLayout, cgroups: CgroupReader,
                        log: structlog.typing.FilteringBoundLogger) -> tuple[Notifier, ...]:
    """Return the PSI wake-ups: the machine's /proc/pressure/memory and, on cgroup v2, the pods cgroup's
    memory.pressure (a stall of the pods alone). A trigger the kernel refuses is logged and left out."""
    if not settings.psi_wakeups:
        return ()
    wanted = [(SYSTEM_MEMORY_PRESSURE, "node memory pressure stall")]
    if layout.version == 2:
        pods_pressure = os.path.join(str(layout.memory_hierarchy), cgroups.pods_cgroup(), "memory.pressure")
        wanted.append((pods_pressure, "pods cgroup memory pressure stall"))
    notifiers: list[Notifier] = []
    for path, description in wanted:
        if not os.path.exists(path):
            continue
        try:
            notifiers.append(PsiNotifier(path, microseconds(settings.psi_stall_threshold_s),
                                         microseconds(settings.psi_window_s), description=description))
        except SampleError as exc:
            log.warning("PSI wake-ups unavailable", path=exc.source, reason=exc.reason)
    return tuple(notifiers)


@dataclass(frozen=True)
class StatsParts:
    """The configured stats source, with what the daemon needs of it besides summaries."""

    source: StatsSource
    # What could not be read in the last cycle (logged once per change, counted for the runtime).
    problems: Callable[[], Sequence[SampleError]]
    # The process measuring pods' volumes and logs for the node's own source (None for the kubelet's Summary).
    disk_walker: DiskWalkerProcess | None = None
    # Why the kubelet's Summary endpoint is not verified ("" when it is, or not used).
    insecure_reason: str = ""


def build_stats_source(config: Configuration, cgroups: CgroupReader, pods: PodSource, node_name: str, *,
                       discovered: DiscoveredPods | None = None, runtime: Runtime = NO_RUNTIME,
                       log: Log | None = None) -> StatsParts:
    """Return the configured stats source: the node itself, or the kubelet's Summary API. The node's own
    source measures with the runtime slot's runtime once one answers, reads pods' disk figures from a store its
    disk walker fills and, with `discovered` pods, measures the manager's listing of each cycle instead of
    listing the node again."""
    settings = config.evictd
    if settings.stats_source is StatsOrigin.KUBELET:
        # One fetch ends in time for the next cycle (and for a clean stop), whatever the endpoint does.
        deadline_s = summary_deadline_s(settings.kubelet_summary_timeout_s, settings.housekeeping_interval_s,
                                        settings.shutdown_timeout_s)
        if settings.kubelet_summary_url:
            kubelet = KubeletSummarySource(settings.kubelet_summary_url, token_file=settings.kubelet_token_file,
                                           ca_file=settings.kubelet_ca_file,
                                           insecure_tls=settings.kubelet_insecure_tls, timeout_s=deadline_s)
            return StatsParts(kubelet, lambda: kubelet.problems, insecure_reason=kubelet.insecure_reason)
        proxy = ApiProxySummarySource(node_name, kubeconfig=settings.kubeconfig, timeout_s=deadline_s)
        return StatsParts(proxy, lambda: proxy.problems)
    node = NodeStatsSource(
        node_name=node_name,
        cgroups=cgroups,
        pods=discovered.last_listing if discovered else pods,
        pod_cgroups=discovered.listed_cgroups if discovered else None,
        disk_usage=PodDiskStore(),
        kubelet_root=settings.kubelet_root_dir,
        image_fs_path=settings.image_fs_path,
        container_fs_path=settings.container_fs_path,
        runtime=runtime,
    )
    walker = DiskWalkerProcess(node.disk_usage, WalkerSettings(kubelet_root=settings.kubelet_root_dir,
                                                               pod_logs_dir=settings.pod_logs_dir),
                               log=(log if log is not None else structlog.get_logger("evictd")).warning)
    return StatsParts(node, lambda: node.problems, disk_walker=walker)


@dataclass
class ClusterParts:
    """The Kubernetes side of the daemon, when an API is configured."""

    pods: EvictablePods
    node_pods: NodeFallbackPods  # what hard thresholds rank while the watch has no pod list
    evictor: PodEvictor
    sync: ClusterSync
    watcher: PodWatcher
    shadow: ShadowComparer | None  # dry-run decisions against the kubelet's own evictions; None when acting
    journal: EvictionJournal
    pod_watch: Part  # starts the watch and waits for its first answer


class PodWatchStart:
    """Starts the pod watch and waits (at most `POD_SYNC_WAIT_S`) for its first answer, before the first cycle.

    Its thread is not stopped: it holds nothing the process's exit does not release.
    """

    def __init__(self, watcher: PodWatcher, log: Log) -> None:
        self._watcher = watcher
        self._log = log

    def start(self) -> None:
        self._watcher.start()
        if not self._watcher.wait_first_answer(POD_SYNC_WAIT_S):
            self._log.warning("pod list not synced yet; until it is, hard thresholds act on the pods the node shows",
                              error=str(self._watcher.last_error))

    def stop(self) -> None:
        return None


def attach_runtime(config: Configuration, client: CriClient, version: RuntimeVersion, metrics: Metrics, log: Log,
                   manager: EvictionManager, watcher: PodWatcher | None) -> CriRuntime:
    """Build node-level reclaim and periodic GC over a runtime that answered, hand the manager its layout and
    reclaimer (report-only in dry-run), and return the runtime, which the adapters' slot answers as from then on.
    The same path serves a runtime that answers at start and one that answers later."""
    settings = config.evictd
    pod_state, sources_ready = pod_states(watcher)
    metrics.runtime_info.labels(version.runtime_name, version.runtime_version, version.runtime_api_version).set(1)
    filesystems = RuntimeFilesystems(client, settings.image_fs_path, settings.container_fs_path)
    policy = GCPolicy(min_age_s=settings.container_gc_min_age_s,
                      max_per_pod_container=settings.max_dead_containers_per_container,
                      max_containers=settings.max_dead_containers)
    containers = CriContainerGC(client, policy, pod_state, settings.pod_logs_dir, sources_ready=sources_ready)
    images = CriImageGC(
        client,
        image_gc_policy(config.image_gc, settings.protected_images, settings.image_gc_during_eviction),
        fs_usage=imagefs_usage(client),
        on_image_removed=lambda reason: metrics.image_gc.labels(str(reason)).inc(),
    )
    try:
        images.detect()  # first-detected times start now, as when the kubelet starts
    except EvictdError as exc:
        log.warning("image detection failed when the runtime was attached", error=str(exc))
    periodic = PeriodicGC(containers, images, container_period_s=settings.container_gc_period_s,
                          image_period_s=settings.image_gc_period_s, log=log)
    manager.attach_runtime(RuntimeLayout(settings.kubelet_root_dir, filesystems),
                           ReportOnlyReclaimer() if settings.dry_run else RuntimeReclaimer(containers, images))
    return CriRuntime(client, filesystems, gc=None if settings.dry_run else periodic)


def api_configured(settings: EvictdSettings) -> bool:
    """True when evictd should talk to a Kubernetes API: a kubeconfig, or running inside a pod."""
    return bool(settings.kubeconfig or os.environ.get(IN_CLUSTER_ENV))


def build_cluster(config: Configuration, node_name: str, metrics: Metrics, log: Log, dry_run: bool,
                  discovered: DiscoveredPods, runtime: Runtime = NO_RUNTIME,
                  should_stop: Callable[[], bool] = lambda: False,
                  decision: Callable[[], str | None] = lambda: None) -> ClusterParts:
    """Build the pod watch, the journaled evictor, the node status writer, the event
    recorder and the node's pods for when the watch has no list (with the runtime slot: the local stop, the
    check that an evicted pod stopped, the sandboxes naming the node's pods)."""
    settings = config.evictd
    api_client = build_api_client(settings.kubeconfig)

    def api_error(error: KubeError) -> None:
        metrics.api_errors.labels(error.verb).inc()

    watcher = PodWatcher(api_client, node_name, on_error=api_error)
    journal = EvictionJournal(None if dry_run else os.path.join(settings.state_dir, JOURNAL_FILE), log=log,
                              on_corrupt=metrics.journal_corrupt.inc,
                              on_write_failure=metrics.journal_write_failures.inc)
    events = EventRecorder(api_client, node_name, dry_run=dry_run)
    kube_evictor = None if dry_run else KubePodEvictor(api_client, journal, events, runtime=runtime,
                                                       on_api_error=api_error, decision=decision)
    evictor: PodEvictor = kube_evictor if kube_evictor is not None else ReportOnlyEvictor()
    node_writer = NodeStatusWriter(api_client, node_name, settings.node_condition_mode,
                                   update_period_s=settings.node_status_update_frequency_s, dry_run=dry_run)
    critical = CriticalPodRecord(None if dry_run else os.path.join(settings.state_dir, CRITICAL_PODS_FILE))
    if critical.problem is not None:
        log.warning("critical pods remembered from the last pod list unreadable", error=critical.problem)
    sync = ClusterSync(watcher=watcher, evictor=kube_evictor, node_writer=node_writer, events=events,
                       on_error=api_error, log=log, runtime=runtime, critical=critical, should_stop=should_stop)
    own_uid = os.environ.get(POD_UID_ENV, "")
    pods = EvictablePods(watcher, journal, own_uid=own_uid)
    shadow = ShadowComparer(watcher.pods, settings.state_dir, lambda c: metrics.shadow.labels(str(c.outcome)).inc(),
                            log) if dry_run else None
    return ClusterParts(pods=pods, node_pods=NodeFallbackPods(discovered, journal, own_uid, critical),
                        evictor=evictor, sync=sync, watcher=watcher, shadow=shadow,
                        journal=journal, pod_watch=PodWatchStart(watcher, log))


def build_daemon(
    config: Configuration,
    *,
    max_cycles: int = 0,
    stdout: TextIO = sys.stdout,
    serve_http: bool = True,
) -> Daemon:
    """Take the node and stateDir locks, then build the daemon from `config` (its parts not started). Raises
    ConfigError for unusable settings, StateLockError when another evictd still holds a lock after
    stateLockTimeout."""
    settings = config.evictd
    fmt = resolve_format(settings.log_format, stdout)
    recent = configure_logging(fmt)
    log = structlog.get_logger("evictd")
    # One evictd per node, whatever its stateDir; then nothing in stateDir is read or written before its lock.
    acquire_node_lock(settings.state_lock_timeout_s, log)
    acquire_state_lock(settings.state_dir, settings.state_lock_timeout_s, log)
    for warning in config.warnings:
        log.warning("configuration warning", detail=warning)
    # The DaemonSet passes spec.nodeName through the downward API; otherwise the hostname, as the kubelet.
    node_name = settings.node_name or os.environ.get(NODE_NAME_ENV, "") or socket.gethostname()
    layout = detect_cgroup_layout(settings.cgroupfs_path, settings.cgroup_driver, base=settings.cgroup_root.strip("/"))
    cgroups = CgroupReader(layout)
    metrics = Metrics()
    dry_run = settings.dry_run
    waiter = Waiter()
    stop = StopSignal(waiter.wake, settings.shutdown_timeout_s, log)
    # The adapters hold the runtime slot; it answers as the runtime once one does (`link`, below).
    runtime = RuntimeSlot()
    # The flight recorder's name of this run: with it, evictions' log lines, the live view and Evicted events
    # name their decision (`evictd explain --decision`).
    run = run_id(SYSTEM_CLOCK.wall().timestamp()) if settings.recorder else None
    decision = CurrentDecision(run)
    # The pods the node shows (named by the runtime once it answers).
    discovered = DiscoveredPods(cgroups, settings.pod_logs_dir, runtime)
    cluster = (build_cluster(config, node_name, metrics, log, dry_run, discovered, runtime, stop.is_set, decision)
               if api_configured(settings) else None)
    pods: PodSource = cluster.pods if cluster is not None else discovered
    # With the API, the stats measure the pods each cycle listed: the watch's, or the node's without a list.
    listed = ListedPods()
    evictor: PodEvictor = cluster.evictor if cluster is not None else ReportOnlyEvictor()
    # Evictions need the API; node-level reclaim and periodic GC need only the runtime (unless dry-run).
    evictions_reported_only = dry_run or cluster is None
    if cluster is None:
        log.info("no Kubernetes API configured (no kubeconfig, not in a pod): evictions are reported, "
                 "not carried out")
    stats = build_stats_source(config, cgroups, listed if cluster is not None else pods, node_name,
                               discovered=discovered if cluster is None else None, runtime=runtime, log=log)
    if stats.insecure_reason:
        log.warning("kubelet Summary endpoint not verified", detail=stats.insecure_reason,
                    url=settings.kubelet_summary_url, token_file=settings.kubelet_token_file)
    engine_config = EngineConfig.from_settings(config.eviction)
    manager = EvictionManager(
        engine_config,
        stats=stats.source,
        layout=PathLayout(settings.kubelet_root_dir, settings.image_fs_path, settings.container_fs_path),
        pods=pods,
        reclaimer=ReportOnlyReclaimer(),
        evictor=evictor,
        clock=SYSTEM_CLOCK,
        node_pods=cluster.node_pods if cluster is not None else None,
        listed=listed,
    )
    # Grace periods and pressure history of the last run (not in dry-run, which saves no engine state).
    # The engine state file's writes and the recorder's fdatasync, off the loop (issue #29: one fsync on a node
    # writing hard waits hundreds of ms, and the next crossing's decision waited behind it).
    write_behind = WriteBehind(log)
    state_file = None if dry_run else EngineStateFile(os.path.join(settings.state_dir, STATE_FILE), node_name,
                                                      log=log, on_error=metrics.errors.labels("state").inc,
                                                      writer=write_behind)
    if state_file is not None:
        manager.state = state_file.restore(engine_config, restore_window_s(settings.housekeeping_interval_s))
    client = CriClient(settings.container_runtime_endpoint, settings.runtime_request_timeout_s)
    watcher = cluster.watcher if cluster is not None else None
    link = RuntimeLink(client, lambda version: attach_runtime(config, client, version, metrics, log, manager, watcher),
                       log, slot=runtime)
    memcg = None
    if settings.memcg_wakeups and layout.version == 1 and settings.stats_source is StatsOrigin.NODE:
        memcg = MemcgNotifierSet(
            engine_config.thresholds,
            memory_root=str(layout.memory_hierarchy),
            pods_cgroup=cgroups.pods_cgroup(),
        )
    # cgroup v2 has no memcg threshold notifier: the memory watch looks closely while a crossing is near instead.
    memory_watch = (MemoryWatch(cgroups, engine_config.thresholds, settings.housekeeping_interval_s)
                    if settings.memcg_wakeups and layout.version == 2 and settings.stats_source is StatsOrigin.NODE
                    else None)
    notifiers = NotifierRefresh(waiter, memcg, build_psi_notifiers(settings, layout, cgroups, log), metrics, log,
                                memory_watch)
    health = Health(settings.housekeeping_interval_s, stopping=stop.is_set)
    metrics.watch_health(lambda: health.status()[0])
    other_driver = None if cgroups.has_pods_cgroup() else cgroups.other_driver_pods_cgroup()
    if other_driver is not None:
        log.warning("no pods cgroup for the configured cgroupDriver but one for the other driver: no pods will be "
                    "found unless cgroupDriver is the kubelet's",
                    cgroup_driver=str(settings.cgroup_driver), pods_cgroup=cgroups.pods_cgroup(),
                    other_driver=other_driver[0], other_pods_cgroup=other_driver[1])
    elif not cgroups.has_pods_cgroup():
        log.info("no pods cgroup on this node (no kubelet?): allocatableMemory.available and pod stats are absent",
                 pods_cgroup=cgroups.pods_cgroup())
    oom_feedback = OomFeedback(OomCounters(cgroups), dry_run=evictions_reported_only,
                               container_names=runtime.container_names)
    after_cycle: list[AfterCycle] = [record_metrics(metrics, evictions_reported_only),
                                     log_cycles(log, evictions_reported_only, run)]
    if state_file is not None:
        after_cycle.append(state_file)
    live_view = None
    if fmt == "live":
        live_view = LiveView(stdout, node_name, dry_run=dry_run, no_api=cluster is None, recent=recent, run=run)
        after_cycle.append(live_view)
    after_cycle.append(log_sample_problems(log, metrics, stats.problems, lambda: oom_feedback.problems))
    if cluster is not None:
        after_cycle.append(cluster_bookkeeping(cluster, metrics))
    after_cycle += [runtime_upkeep(link), notifiers]
    on_stop: list[Callable[[], None]] = [cluster.sync.withdraw] if cluster is not None else []
    if live_view is not None:
        on_stop.append(live_view.close)
    if settings.recorder:
        # Last: what the other hooks do never waits for the recorder's disk.
        recorder = FlightRecorder(settings.state_dir, config.eviction, max_bytes=settings.recorder_max_bytes,
                                  max_age_s=settings.recorder_max_age_s, dry_run=evictions_reported_only, log=log,
                                  on_error=metrics.errors.labels("recorder").inc, run=run,
                                  start_state=manager.state, node_name=node_name, writer=write_behind)
        after_cycle.append(recorder)
        on_stop.append(recorder.close)
    if state_file is not None:
        on_stop.append(state_file.close)
    parts: list[Part] = [cluster.pod_watch] if cluster is not None else []
    parts.append(link)
    if serve_http:
        parts.append(HttpEndpoint(settings.metrics_bind_address, metrics.registry, health))
    if stats.disk_walker is not None:
        parts.append(stats.disk_walker)
    return Daemon(
        manager, waiter, stop, metrics, health,
        interval_s=settings.housekeeping_interval_s,
        dry_run=evictions_reported_only,
        node_name=node_name,
        max_cycles=max_cycles,
        after_cycle=after_cycle,
        wait_for_cleanup=cluster.sync.wait_for_cleanup if cluster is not None else None,
        on_stop=on_stop,
        parts=parts,
        oom_feedback=oom_feedback,
        log=log,
        before_cycle=decision.start,
    )


def pod_states(watcher: PodWatcher | None) -> tuple[PodStateFunc, Callable[[], bool]]:
    """Return the container GC's pod-state function and its "all sources ready" flag.

    With the API: a pod in the watch is ACTIVE (TERMINATED once terminal or being deleted); a pod not in it
    is DELETED, but only once the watch has synced. Without the API nothing can be vouched for: every pod is
    ACTIVE and sources are never ready, so GC only removes dead containers beyond the policy.
    """
    if watcher is None:
        return (lambda uid: PodState.ACTIVE), (lambda: False)

    def state(uid: str) -> PodState:
        pod = watcher.pod(uid)
        if pod is None:
            return PodState.DELETED
        if pod.status_phase in TERMINAL_PHASES or pod.deletion_timestamp is not None:
            return PodState.TERMINATED
        return PodState.ACTIVE

    return state, watcher.is_synced


def cluster_bookkeeping(cluster: ClusterParts, metrics: Metrics) -> AfterCycle:
    """Node status, events and the journal's pending writes; the pending evictions exported; in dry-run the
    shadow comparison with the kubelet's own evictions."""

    def update(cycle: Cycle) -> None:
        cluster.sync.after_cycle(cycle.report)
        metrics.journal_pending.set(len(cluster.journal.pending()))
        if cluster.shadow is not None:
            cluster.shadow.after_cycle(cycle.report.evictions)

    return update


def runtime_upkeep(link: RuntimeLink) -> AfterCycle:
    """Periodic garbage collection with a runtime attached; asking again for a runtime that has not answered."""

    def upkeep(cycle: Cycle) -> None:
        link.poll()
        link.slot.collect_garbage()

    return upkeep


def check_settings(config: Configuration) -> None:
    """Raise ConfigError for settings that cannot work on this machine before anything starts."""
    if not os.path.isdir(config.evictd.cgroupfs_path):
        raise ConfigError("no such folder (where cgroupfs is mounted)", key="cgroupfsPath",
                          value=config.evictd.cgroupfs_path)
    if (config.evictd.stats_source is StatsOrigin.KUBELET and not config.evictd.kubelet_summary_url
            and not api_configured(config.evictd)):
        raise ConfigError("needs kubeletSummaryURL, a kubeconfig, or to run inside a cluster",
                          key="statsSource", value="kubelet")

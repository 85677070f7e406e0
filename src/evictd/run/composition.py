"""The composition root of `evictd run`: every dependency of the daemon, built from the configuration.

Nothing else in evictd decides which adapter serves which role: docs/daemon.md's table "What `evictd run` acts
through depends on what it finds" (the Kubernetes API, a container runtime, dry-run) is what is built here.

Building starts no thread and waits for nothing, with one exception: evictd first takes the node lock and the
stateDir lock (`state_lock`; a second evictd on the node waits for them, or exits with status 2), because
the engine state, the journal and the record of critical pods are read from stateDir as they are built. What runs
beside the loop or may wait (the pod watch and its first list, the runtime's first answer, the HTTP
endpoint, the disk walker) are the daemon's parts, started in that order by `Daemon.start`.

`build_daemon` reads as its builders, each building one side whole: `build_basics` (node name, cgroups,
waiter, stop), `build_cluster`, `build_stats_source`, `build_engine_state` (the state restored), `build_manager`
(given that state and the `NodeLevel` a runtime attaches to later: never patched), `build_runtime`,
`build_notifiers`, `build_hooks`, `build_parts`.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import structlog

from evictd.adapters.cgroups import CgroupLayout, CgroupReader, detect_cgroup_layout, v1_hierarchy_root
from evictd.adapters.disk_walker_process import DiskWalkerProcess, WalkerSettings
from evictd.adapters.filesystems import detect_layout
from evictd.adapters.kubelet_summary import ApiProxySummarySource, KubeletSummarySource, summary_deadline_s
from evictd.adapters.memcg_notifier_set import MemcgNotifierSet
from evictd.adapters.memory_watch import MemoryWatch
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_stats import NodeStatsSource, existing_ancestor
from evictd.adapters.notifiers import Notifier, Waiter
from evictd.adapters.oom_counters import OomCounters
from evictd.adapters.pod_disk_usage import PodDiskStore
from evictd.adapters.procfs import inactive_file_bytes
from evictd.adapters.psi_notifier import SYSTEM_MEMORY_PRESSURE, PsiNotifier
from evictd.adapters.runtime_gc import CriContainerGC, CriImageGC, RuntimeReclaimer, imagefs_usage
from evictd.adapters.runtime_node import PeriodicGC, RuntimeFilesystems, RuntimeLayout
from evictd.clock import SYSTEM_CLOCK
from evictd.config import Configuration, EvictdSettings, StatsOrigin
from evictd.core.container_gc import GCPolicy, PodState, PodStateFunc
from evictd.core.engine import EngineConfig, EngineState, Eviction
from evictd.core.errors import ConfigError, EvictdError, KubeError, SampleError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.image_gc import image_gc_policy
from evictd.core.psi import microseconds
from evictd.core.signals import EVICTD_SIGNALS
from evictd.core.thresholds import Threshold
from evictd.cri import NO_RUNTIME, Runtime, RuntimeSlot, RuntimeVersion
from evictd.cri.client import CriClient
from evictd.cycle.cadence import stale_after_s
from evictd.cycle.finished import AfterCycle, Cycle
from evictd.cycle.ids import run_id
from evictd.cycle.manager import (
    FRESH_STATE,
    EvictionApiRoute,
    EvictionManager,
    PodEvictor,
    PodSource,
    StatsSource,
)
from evictd.kube.client import build_api_client
from evictd.kube.cluster import ClusterSync, EvictablePods, NodeFallbackPods
from evictd.kube.critical_record import CriticalPodRecord
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal
from evictd.kube.node_lease import NodeLease, lease_namespace
from evictd.kube.node_writer import NodeStatusWriter
from evictd.kube.pod_watch import TERMINAL_PHASES, PodWatcher
from evictd.kube.shadow import ShadowComparer
from evictd.log import Log
from evictd.observe.http_endpoint import Health, HttpEndpoint
from evictd.observe.logging_setup import RecentEvents, configure_logging, flush_logs, resolve_format
from evictd.observe.metrics import Metrics
from evictd.record.engine_state import EngineStateFile
from evictd.record.recorder import FlightRecorder
from evictd.record.recording import CurrentDecision
from evictd.record.write_behind import WriteBehind
from evictd.run.after_cycle import (
    LiveView,
    NotifierRefresh,
    log_cycles,
    log_sample_problems,
    record_metrics,
)
from evictd.run.daemon import Daemon, Hooks, LoopSettings, Part, Reporting, Wakeups
from evictd.run.heap_trim import heap_trimmer
from evictd.run.lock import acquire_node_lock, acquire_state_lock
from evictd.run.oom_feedback import OomFeedback
from evictd.run.runtime_link import CriRuntime, NodeLevel, RuntimeLink
from evictd.run.stop_signal import StopSignal
from evictd.state_dir import StateDir

NODE_NAME_ENV = "EVICTD_NODE_NAME"
# The DaemonSet passes evictd's own pod UID, so that it never evicts itself.
POD_UID_ENV = "EVICTD_POD_UID"
# Set in every pod by the kubelet: evictd then uses the in-cluster service account.
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
# How long start-up waits for the first pod list before running cycles anyway (hard thresholds rank the pods
# the node shows until then). A refused connection ends the wait at once.
POD_SYNC_WAIT_S = 10.0
# When the shutdown deadline ends evictd, how long its queued log lines (the deadline's own error last) may take.
DEADLINE_LOG_FLUSH_S = 2.0


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
                        log: Log, memcg: MemcgNotifierSet | None = None) -> tuple[Notifier, ...]:
    """Return the PSI wake-ups: the machine's /proc/pressure/memory and, on cgroup v2, the pods cgroup's
    memory.pressure (a stall of the pods alone). A trigger the kernel refuses is logged and left out. With
    `memcg`, each firing is judged first (`MemcgNotifierSet.may_change_decision`)."""
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
                                         microseconds(settings.psi_window_s), description=description,
                                         judge=memcg.may_change_decision if memcg is not None else None))
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


def build_stats_source(config: Configuration, cgroups: CgroupReader, node_name: str, *,
                       discovered: DiscoveredPods | None = None, runtime: Runtime = NO_RUNTIME,
                       log: Log | None = None) -> StatsParts:
    """Return the configured stats source: the node itself, or the kubelet's Summary API. The node's own
    source measures the pods each cycle listed (the manager hands them over) with the runtime slot's runtime once
    one answers, reads pods' disk figures from a store its disk walker fills and, with `discovered` pods (the
    manager's pod source), finds their cgroups in that listing instead of listing the node again."""
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
        proxy = ApiProxySummarySource(node_name, api=build_api_client(settings.kubeconfig), timeout_s=deadline_s)
        return StatsParts(proxy, lambda: proxy.problems)
    stall_signals = sorted({threshold.signal for threshold in config.eviction.thresholds()} & EVICTD_SIGNALS)
    node = NodeStatsSource(
        node_name=node_name,
        cgroups=cgroups,
        pod_cgroups=discovered.listed_cgroups if discovered else None,
        disk_usage=PodDiskStore(),
        kubelet_root=settings.kubelet_root_dir,
        image_fs_path=settings.image_fs_path,
        container_fs_path=settings.container_fs_path,
        runtime=runtime,
        memory_pressure=bool(stall_signals),
    )
    for signal, path in node.pressure_missing(stall_signals):
        (log or structlog.get_logger("evictd")).warning(
            "stall signal absent: the kernel gives no memory pressure (PSI)", signal=str(signal), path=path)
    walker = DiskWalkerProcess(node.disk_usage, WalkerSettings(kubelet_root=settings.kubelet_root_dir,
                                                               pod_logs_dir=settings.pod_logs_dir),
                               log=log if log is not None else structlog.get_logger("evictd"))
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
    # Soft evictions through the Eviction API (`softEvictionsThroughEvictionAPI`, never in dry-run); None: off.
    eviction_api: EvictionApiRoute | None = None
    # evictd's Lease for the node (its heartbeat, and one evictd per node); None in dry-run, which writes nothing.
    lease: NodeLease | None = None


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
                   node: NodeLevel, watcher: PodWatcher | None) -> CriRuntime:
    """Build node-level reclaim and periodic GC over a runtime that answered, hand the manager's node level its
    layout and reclaimer (report-only in dry-run), and return the runtime, which the adapters' slot answers as
    from then on. The same path serves a runtime that answers at start and one that answers later."""
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
    node.attach(RuntimeLayout(settings.kubelet_root_dir, filesystems),
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
    journal = EvictionJournal(None if dry_run else StateDir(settings.state_dir).journal, log=log,
                              on_corrupt=metrics.journal_corrupt.inc,
                              on_write_failure=metrics.journal_write_failures.inc)
    events = EventRecorder(api_client, node_name, dry_run=dry_run)
    kube_evictor = None if dry_run else KubePodEvictor(api_client, journal, events, runtime=runtime,
                                                       on_api_error=api_error, decision=decision)
    evictor: PodEvictor = kube_evictor if kube_evictor is not None else ReportOnlyEvictor()
    lease = None if dry_run else NodeLease(
        api_client, lease_namespace(settings.lease_namespace, bool(os.environ.get(IN_CLUSTER_ENV))), node_name,
        log=log, duration_s=settings.node_lease_duration_s, wait_s=settings.state_lock_timeout_s, on_error=api_error)
    node_writer = NodeStatusWriter(api_client, node_name, settings.node_condition_mode,
                                   update_period_s=settings.node_status_update_frequency_s,
                                   report_period_s=settings.node_status_report_frequency_s, heartbeat=lease,
                                   dry_run=dry_run)
    critical = CriticalPodRecord(None if dry_run else StateDir(settings.state_dir).critical_pods)
    if critical.problem is not None:
        log.warning("critical pods remembered from the last pod list unreadable", error=critical.problem)
    sync = ClusterSync(watcher=watcher, evictor=kube_evictor, node_writer=node_writer, events=events,
                       on_error=api_error, log=log, runtime=runtime, critical=critical, should_stop=should_stop,
                       reclaim_event_period_s=settings.housekeeping_interval_s)
    own_uid = os.environ.get(POD_UID_ENV, "")
    pods = EvictablePods(watcher, journal, own_uid=own_uid)
    shadow = ShadowComparer(watcher.pods, settings.state_dir, lambda c: metrics.shadow.labels(str(c.outcome)).inc(),
                            log) if dry_run else None
    route = None
    if kube_evictor is not None and settings.soft_evictions_through_eviction_api:
        route = EvictionApiRoute(kube_evictor, settings.eviction_api_max_candidates, settings.eviction_api_deadline_s)
    return ClusterParts(pods=pods, node_pods=NodeFallbackPods(discovered, journal, own_uid, critical),
                        evictor=evictor, sync=sync, watcher=watcher, shadow=shadow,
                        journal=journal, pod_watch=PodWatchStart(watcher, log), eviction_api=route, lease=lease)


@dataclass(frozen=True)
class Basics:
    """What every builder of `build_daemon` may need: the configuration, the node, the logger and the metrics,
    the loop's waiter and stop signal, the runtime slot, the run's name and the cgroups."""

    config: Configuration
    node_name: str
    log: Log
    metrics: Metrics
    waiter: Waiter
    stop: StopSignal
    # The adapters hold the runtime slot; it answers as the runtime once one does (`build_runtime`).
    runtime: RuntimeSlot
    # The flight recorder's name of this run (None without the recorder): with it, evictions' log lines, the
    # live view and Evicted events name their decision (`evictd explain --decision`).
    run: str | None
    decision: CurrentDecision
    cgroup_layout: CgroupLayout
    cgroups: CgroupReader
    # The engine state file's writes, the recorder's fdatasync and segment closes, off the loop (issue #29: one
    # fsync on a node writing hard waits hundreds of ms, and the next crossing's decision waited behind it).
    write_behind: WriteBehind

    @property
    def settings(self) -> EvictdSettings:
        return self.config.evictd


def build_basics(config: Configuration, log: Log, metrics: Metrics) -> Basics:
    """The node's name, cgroups, waiter, stop signal, runtime slot and run name, beside `log` and `metrics`."""
    settings = config.evictd
    # The DaemonSet passes spec.nodeName through the downward API; otherwise the hostname, as the kubelet.
    node_name = settings.node_name or os.environ.get(NODE_NAME_ENV, "") or socket.gethostname()
    layout = detect_cgroup_layout(settings.cgroupfs_path, settings.cgroup_driver, base=settings.cgroup_root.strip("/"))
    waiter = Waiter()
    run = run_id(SYSTEM_CLOCK.wall().timestamp()) if settings.recorder else None
    return Basics(config=config, node_name=node_name, log=log, metrics=metrics, waiter=waiter,
                  stop=StopSignal(waiter.wake, settings.shutdown_timeout_s, log, exit=exit_after_logs),
                  runtime=RuntimeSlot(), run=run,
                  decision=CurrentDecision(run), cgroup_layout=layout, cgroups=CgroupReader(layout),
                  write_behind=WriteBehind(log))


def build_manager(engine_config: EngineConfig, stats: StatsParts, cluster: ClusterParts | None, pods: PodSource,
                  node: NodeLevel, state: EngineState) -> EvictionManager:
    """The eviction manager, whole: what it reads and acts through, and the state it starts from."""
    return EvictionManager(
        engine_config,
        stats=stats.source,
        layout=node,
        pods=pods,
        reclaimer=node,
        evictor=cluster.evictor if cluster is not None else ReportOnlyEvictor(),
        clock=SYSTEM_CLOCK,
        node_pods=cluster.node_pods if cluster is not None else None,
        state=state,
        layout_changes=lambda: node.changes,
        eviction_api=cluster.eviction_api if cluster is not None else None,
    )


def build_engine_state(basics: Basics, engine_config: EngineConfig) -> tuple[EngineStateFile | None, EngineState]:
    """The engine state file (None in dry-run, which saves no engine state) and the state restored from it:
    grace periods and pressure history of the last run."""
    settings = basics.settings
    if settings.dry_run:
        return None, FRESH_STATE
    state_file = EngineStateFile(StateDir(settings.state_dir).engine_state, basics.node_name, log=basics.log,
                                 on_error=basics.metrics.errors.labels("state").inc, writer=basics.write_behind)
    return state_file, state_file.restore(engine_config, stale_after_s(settings.housekeeping_interval_s))


def build_runtime(basics: Basics, node: NodeLevel, cluster: ClusterParts | None) -> RuntimeLink:
    """The link to the container runtime, which attaches it to `node` and the slot once it answers."""
    settings = basics.settings
    client = CriClient(settings.container_runtime_endpoint, settings.runtime_request_timeout_s)
    watcher = cluster.watcher if cluster is not None else None
    return RuntimeLink(client, lambda version: attach_runtime(basics.config, client, version, basics.metrics,
                                                              basics.log, node, watcher),
                       basics.log, slot=basics.runtime)


def build_notifiers(basics: Basics, engine_config: EngineConfig) -> NotifierRefresh:
    """The memory wake-ups: memcg thresholds (cgroup v1) or the memory watch (v2), and PSI."""
    settings, layout, cgroups = basics.settings, basics.cgroup_layout, basics.cgroups
    node_stats = settings.memcg_wakeups and settings.stats_source is StatsOrigin.NODE
    memcg = build_memcg_notifiers(engine_config.thresholds, layout, cgroups) \
        if node_stats and layout.version == 1 else None
    # cgroup v2 has no memcg threshold notifier: the memory watch looks closely while a crossing is near instead.
    memory_watch = (MemoryWatch(cgroups, engine_config.thresholds, settings.housekeeping_interval_s)
                    if node_stats and layout.version == 2 else None)
    return NotifierRefresh(basics.waiter, memcg, build_psi_notifiers(settings, layout, cgroups, basics.log, memcg),
                           basics.metrics, basics.log, memory_watch)


def build_memcg_notifiers(thresholds: Sequence[Threshold], layout: CgroupLayout,
                          cgroups: CgroupReader) -> MemcgNotifierSet:
    """The memcg thresholds of a cgroup v1 node; where the memory hierarchy is the machine's own (its root), armed
    with /proc/meminfo's inactive file too, fresher than the root's memory.stat (`evictd.core.memcg`)."""
    memory_root = str(layout.memory_hierarchy)
    return MemcgNotifierSet(thresholds, memory_root=memory_root, pods_cgroup=cgroups.pods_cgroup(),
                            fresh_inactive_file=inactive_file_bytes if v1_hierarchy_root(memory_root) else None)


def warn_about_pods_cgroup(basics: Basics) -> None:
    """Say so when the pods cgroup is missing: another cgroupDriver's, or no kubelet on this node."""
    settings, cgroups, log = basics.settings, basics.cgroups, basics.log
    other_driver = None if cgroups.has_pods_cgroup() else cgroups.other_driver_pods_cgroup()
    if other_driver is not None:
        log.warning("no pods cgroup for the configured cgroupDriver but one for the other driver: no pods will be "
                    "found unless cgroupDriver is the kubelet's",
                    cgroup_driver=str(settings.cgroup_driver), pods_cgroup=cgroups.pods_cgroup(),
                    other_driver=other_driver[0], other_pods_cgroup=other_driver[1])
    elif not cgroups.has_pods_cgroup():
        log.info("no pods cgroup on this node (no kubelet?): allocatableMemory.available and pod stats are absent",
                 pods_cgroup=cgroups.pods_cgroup())


@dataclass(frozen=True)
class Observers:
    """How cycles are shown: the output format, the live view (with `live`), the recent log lines it shows."""

    fmt: str
    stdout: TextIO
    recent: RecentEvents | None


def build_hooks(basics: Basics, observers: Observers, *, reported_only: bool, stats: StatsParts,
                cluster: ClusterParts | None, state_file: EngineStateFile | None, link: RuntimeLink,
                notifiers: NotifierRefresh, start_state: EngineState) -> Hooks:
    """What runs around each cycle and at stop: metrics, logs, the saved state, the live view, the cluster's
    bookkeeping, the runtime's upkeep, the notifiers' re-arming, the OOM feedback, the flight recorder and, last,
    the C heap's trim."""
    settings, metrics, log = basics.settings, basics.metrics, basics.log
    oom_feedback = OomFeedback(OomCounters(basics.cgroups), dry_run=reported_only,
                               container_names=basics.runtime.container_names)
    after_cycle: list[AfterCycle] = [record_metrics(metrics, reported_only), log_cycles(log, reported_only, basics.run)]
    if state_file is not None:
        after_cycle.append(state_file)
    on_stop: list[Callable[[], None]] = [cluster.sync.withdraw] if cluster is not None else []
    if observers.fmt == "live":
        live_view = LiveView(observers.stdout, basics.node_name, dry_run=settings.dry_run, no_api=cluster is None,
                             recent=observers.recent, run=basics.run)
        after_cycle.append(live_view)
        on_stop.append(live_view.close)
    after_cycle.append(log_sample_problems(log, metrics, stats.problems, lambda: oom_feedback.problems))
    if cluster is not None:
        after_cycle.append(cluster_bookkeeping(cluster, metrics))
    after_cycle += [runtime_upkeep(link), notifiers]
    if settings.recorder:
        # After the others: what they do never waits for the recorder's disk.
        recorder = FlightRecorder(settings.state_dir, basics.config.eviction, max_bytes=settings.recorder_max_bytes,
                                  max_age_s=settings.recorder_max_age_s, dry_run=reported_only, log=log,
                                  on_error=metrics.errors.labels("recorder").inc, run=basics.run,
                                  start_state=start_state, node_name=basics.node_name, writer=basics.write_behind)
        after_cycle.append(recorder)
        on_stop.append(recorder.close)
    trim = heap_trimmer()
    if trim is not None:  # after the recorder: its line on a new segment is the largest peak a cycle has
        after_cycle.append(trim)
    if state_file is not None:
        on_stop.append(state_file.close)
    return Hooks(before_cycle=basics.decision.start, after_cycle=after_cycle, oom_feedback=oom_feedback,
                 wait_for_cleanup=cluster.sync.wait_for_cleanup if cluster is not None else None, on_stop=on_stop)


def build_parts(basics: Basics, cluster: ClusterParts | None, link: RuntimeLink, stats: StatsParts,
                health: Health, serve_http: bool) -> list[Part]:
    """What the daemon starts before its first cycle, in order: the node Lease (another evictd renewing it: wait,
    then refuse), the pod watch, the runtime link, the HTTP endpoint, the disk walker."""
    parts: list[Part] = []
    if cluster is not None and cluster.lease is not None:
        parts.append(cluster.lease)
    if cluster is not None:
        parts.append(cluster.pod_watch)
    parts.append(link)
    if serve_http:
        parts.append(HttpEndpoint(basics.settings.metrics_bind_address, basics.metrics.registry, health))
    if stats.disk_walker is not None:
        parts.append(stats.disk_walker)
    return parts


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
    metrics = Metrics()
    # Queued: the loop never waits for a slow reader of its log (issue #29).
    observers = Observers(fmt, stdout, configure_logging(fmt, queued=True, on_drop=metrics.log_lines_dropped.inc))
    log = structlog.get_logger("evictd")
    # One evictd per node, whatever its stateDir; then nothing in stateDir is read or written before its lock.
    acquire_node_lock(settings.state_lock_timeout_s, log)
    acquire_state_lock(settings.state_dir, settings.state_lock_timeout_s, log)
    for warning in config.warnings:
        log.warning("configuration warning", detail=warning)
    basics = build_basics(config, log, metrics)
    # The pods the node shows (named by the runtime once it answers).
    discovered = DiscoveredPods(basics.cgroups, settings.pod_logs_dir, basics.runtime)
    cluster = (build_cluster(config, basics.node_name, basics.metrics, log, settings.dry_run, discovered,
                             basics.runtime, basics.stop.is_set, basics.decision)
               if api_configured(settings) else None)
    # Evictions need the API; node-level reclaim and periodic GC need only the runtime (unless dry-run).
    reported_only = settings.dry_run or cluster is None
    if cluster is None:
        log.info("no Kubernetes API configured (no kubeconfig, not in a pod): evictions are reported, "
                 "not carried out")
    pods: PodSource = cluster.pods if cluster is not None else discovered
    # The stats measure the pods each cycle listed: the watch's, or the node's (without a list, or without the API).
    stats = build_stats_source(config, basics.cgroups, basics.node_name,
                               discovered=discovered if cluster is None else None, runtime=basics.runtime, log=log)
    if stats.insecure_reason:
        log.warning("kubelet Summary endpoint not verified", detail=stats.insecure_reason,
                    url=settings.kubelet_summary_url, token_file=settings.kubelet_token_file)
    engine_config = EngineConfig.from_settings(config.eviction)
    state_file, start_state = build_engine_state(basics, engine_config)
    node = NodeLevel(PathLayout(settings.kubelet_root_dir, settings.image_fs_path, settings.container_fs_path),
                     ReportOnlyReclaimer())
    manager = build_manager(engine_config, stats, cluster, pods, node, start_state)
    link = build_runtime(basics, node, cluster)
    notifiers = build_notifiers(basics, engine_config)
    health = Health(settings.housekeeping_interval_s, stopping=basics.stop.is_set)
    basics.metrics.watch_health(lambda: health.status()[0])
    warn_about_pods_cgroup(basics)
    hooks = build_hooks(basics, observers, reported_only=reported_only, stats=stats, cluster=cluster,
                        state_file=state_file, link=link, notifiers=notifiers, start_state=start_state)
    return Daemon(manager, LoopSettings(settings.housekeeping_interval_s, basics.node_name, reported_only, max_cycles),
                  Wakeups(basics.waiter, basics.stop), Reporting(basics.metrics, health, log), hooks,
                  build_parts(basics, cluster, link, stats, health, serve_http))


def exit_after_logs(status: int) -> None:
    """The shutdown deadline's exit: the queued log lines get `DEADLINE_LOG_FLUSH_S`, then the process ends
    at once (`os._exit`: no hung thread can hold it up)."""
    flush_logs(DEADLINE_LOG_FLUSH_S)
    os._exit(status)


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
        cluster.sync.after_cycle(cycle.report.decided.assessment, cycle.report.oom)
        metrics.journal_pending.set(len(cluster.journal.pending()))
        if cluster.shadow is not None:
            cluster.shadow.after_cycle(cycle.report.acted.evictions)

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

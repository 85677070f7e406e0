"""The composition root of `evictd run`: every dependency of the daemon, built from the configuration.

Over 500 lines because it is the one place that chooses adapters (the node's and the cluster's parts are built in
`compose_node` and `compose_cluster`); what stays here is their order, the locks, and the start-up reports.

What is built follows docs/daemon.md's table "What `evictd run` acts through depends on what it finds". Building
starts no thread and waits for nothing, except the node and stateDir locks taken first (`state_lock`: stateDir is
read as things are built) and `protect_self` (memory lock, oom_score_adj). What runs beside the loop is started by
`Daemon.start`. `build_daemon` reads as its builders, each building one side whole: `build_basics`,
`build_cluster`, `build_stats_source`, `build_engine_state`, `build_manager`, `build_runtime`, `build_sensors`,
`build_hooks`, `build_parts`; the API side lives in compose_cluster.py, the node side in compose_node.py, neither
importing this module.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TextIO

import structlog

from evictd.adapters.cgroup_kill import pod_process_killer
from evictd.adapters.cgroups import CgroupLayout, CgroupReader, detect_cgroup_layout
from evictd.adapters.memory_reclaim import CgroupMemoryReclaimer
from evictd.adapters.mode_file import read_mode_file
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_protection import read_node_cgroups
from evictd.adapters.notifiers import Waiter
from evictd.adapters.oom_counters import OomCounters
from evictd.adapters.protection_facts import node_psi_missing, read_protection_facts
from evictd.adapters.self_protection import (
    LOCK_FLAG_NAMES,
    lock_memory,
    memory_figures,
    raise_open_files_limit,
    read_oom_score_adj,
    set_oom_score_adj,
)
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.config import Configuration, EvictdSettings, MetricsAuthorization, StatsOrigin
from evictd.core.daemons_reclaim import DaemonsReclaimSettings
from evictd.core.engine import EngineConfig, EngineState
from evictd.core.errors import ConfigError, SampleError
from evictd.core.handover import racing_signals
from evictd.core.limits_enforcer import Enforcer
from evictd.core.memory_reclaim import CacheHolder, ReclaimPlan, ReclaimSettings
from evictd.core.metrics_access import Verdict
from evictd.core.node_protection import Status, node_protection_findings
from evictd.core.protections import KUBELET_STATS_NO_DAEMONS, protections
from evictd.core.protections import State as ProtectionState
from evictd.core.self_protection import KIB, oom_score_adj_warning
from evictd.core.signals import Signal
from evictd.core.summary import Summary
from evictd.core.wake import stale_after_s
from evictd.cri import RuntimeSlot
from evictd.cri.client import CriClient
from evictd.cycle.daemons_reclaim import DaemonsReclaimStep
from evictd.cycle.finished import AfterCycle
from evictd.cycle.ids import run_id
from evictd.cycle.limits_choice import enforced_as_chosen, limits_choice
from evictd.cycle.manager import FRESH_STATE, EvictionManager, PodSource
from evictd.cycle.reclaim_first import MemoryReclaimStep, Outcome
from evictd.kube.metrics_access import metrics_access_review
from evictd.kubelet_file import KubeletFile
from evictd.log import Log
from evictd.observe.http_endpoint import Health, HttpEndpoint
from evictd.observe.logging_setup import RecentEvents, configure_logging, flush_logs, resolve_format
from evictd.observe.metrics import Metrics
from evictd.observe.metrics_authorization import REVIEW_VERDICTS, MetricsAuthorizer
from evictd.record.engine_state import EngineStateFile
from evictd.record.oom_counters_file import OomCountersFile
from evictd.record.recorder import FlightRecorder
from evictd.record.recording import CurrentDecision
from evictd.record.write_behind import WriteBehind
from evictd.run.after_cycle import (
    LiveView,
    log_cycles,
    log_refused_figures,
    log_sample_problems,
    record_metrics,
    watch_blind_signals,
)
from evictd.run.compose_cluster import (
    ClusterParts,
    ReportOnlyEvictor,
    api_configured,
    build_cluster,
    cluster_bookkeeping,
    withdraw_unless_lost,
)
from evictd.run.compose_node import (
    PathLayout,
    ReportOnlyReclaimer,
    StatsParts,
    attach_runtime,
    build_sensors,
    build_stats_source,
    runtime_upkeep,
)
from evictd.run.daemon import Daemon, Hooks, LoopSettings, Part, Reporting, Wakeups, always_acting
from evictd.run.daemons_protection import daemons_protection
from evictd.run.followed_kubelet import FollowedKubelet
from evictd.run.handover_report import report_handover
from evictd.run.heap_trim import heap_trimmer
from evictd.run.lock import acquire_node_lock, acquire_state_lock
from evictd.run.mode_switch import ModeSwitch
from evictd.run.oom_feedback import OomFeedback
from evictd.run.runtime_link import NodeLevel, RuntimeLink
from evictd.run.stop_signal import StopSignal
from evictd.state_dir import StateDir

NODE_NAME_ENV = "EVICTD_NODE_NAME"
# When the shutdown deadline ends evictd, how long its queued log lines (the deadline's own error last) may take.
DEADLINE_LOG_FLUSH_S = 2.0


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
    # The flight recorder's name of this run (None: no recorder): evictions then name their decision.
    run: str | None
    decision: CurrentDecision
    cgroup_layout: CgroupLayout
    cgroups: CgroupReader
    # The engine state file's writes, the recorder's fdatasync and segment closes, off the loop (an fsync may wait).
    write_behind: WriteBehind
    # The loop's clock: the waiter and the sensors take their times from it, never from one of their own.
    clock: Clock

    @property
    def settings(self) -> EvictdSettings:
        return self.config.evictd


def build_basics(config: Configuration, log: Log, metrics: Metrics, never_acts: bool | None = None) -> Basics:
    """The node's name, cgroups, waiter, stop signal, runtime slot and run name, beside `log` and `metrics`
    (`never_acts`: no mode can make this evictd act; None: the configured dryRun says)."""
    settings = config.evictd
    # The DaemonSet passes spec.nodeName through the downward API; otherwise the hostname, as the kubelet.
    node_name = settings.node_name or os.environ.get(NODE_NAME_ENV, "") or socket.gethostname()
    layout = detect_cgroup_layout(settings.cgroupfs_path, settings.cgroup_driver, base=settings.cgroup_root.strip("/"))
    clock = SYSTEM_CLOCK  # the loop's: the waiter, the sensors and the daemon time by it
    waiter = Waiter(clock.monotonic)
    run = run_id(SYSTEM_CLOCK.wall().timestamp()) if settings.recorder else None
    cgroups = CgroupReader(layout)
    # Until a runtime answers, a pod evicted at once that the API does not delete is stopped via its cgroup.
    never = settings.dry_run if never_acts is None else never_acts
    runtime = RuntimeSlot(kill_processes=None if never else pod_process_killer(cgroups))
    return Basics(config=config, node_name=node_name, log=log, metrics=metrics, waiter=waiter,
                  stop=StopSignal(waiter.wake, settings.shutdown_timeout_s, log, exit=exit_after_logs,
                                   wakeup_fd=waiter.wakeup_fd),
                  runtime=runtime, run=run,
                  decision=CurrentDecision(run), cgroup_layout=layout, cgroups=cgroups,
                  write_behind=WriteBehind(log), clock=clock)


class ModeGatedMemoryReclaimer:
    """Reclaim before evict through `reclaimer`, unavailable while the node's mode is dry-run (`dry_run`)."""

    def __init__(self, reclaimer: CgroupMemoryReclaimer, dry_run: Callable[[], bool]) -> None:
        self._reclaimer = reclaimer
        self._dry_run = dry_run

    def unavailable(self) -> str | None:
        return "the node's mode is dry-run" if self._dry_run() else self._reclaimer.unavailable()

    def holders(self) -> Sequence[CacheHolder]:
        return self._reclaimer.holders()

    def refault_file_bytes(self) -> int | None:
        return self._reclaimer.refault_file_bytes()

    def reclaim(self, plan: ReclaimPlan) -> Outcome:
        return self._reclaimer.reclaim(plan)


def build_memory_reclaim(basics: Basics, reported_only: bool,
                         dry_run: Callable[[], bool] | None = None) -> MemoryReclaimStep | None:
    """Reclaim before evict (None when off); on a node that cannot, or when evictd only reports, it acts as off and
    says why at start; while the node's mode (`dry_run`) is dry-run, it acts as off."""
    settings = basics.settings
    if not settings.memory_reclaim_before_eviction:
        return None
    node_reclaimer = CgroupMemoryReclaimer(basics.cgroups)
    reclaimer = node_reclaimer if dry_run is None else ModeGatedMemoryReclaimer(node_reclaimer, dry_run)
    unavailable = ("evictd only reports (dry run, or no Kubernetes API)" if reported_only
                   else node_reclaimer.unavailable())
    if unavailable is not None:
        basics.log.warning("memory reclaim before eviction unavailable: acts as off", reason=unavailable)
        return None
    basics.log.info("memory reclaim before eviction on", budget_s=settings.memory_reclaim_budget_s)
    return MemoryReclaimStep(ReclaimSettings(enabled=True, budget_s=settings.memory_reclaim_budget_s), reclaimer)


def build_daemons_reclaim(basics: Basics, reported_only: bool,
                          dry_run: Callable[[], bool] | None = None) -> DaemonsReclaimStep | None:
    """Reclaim for the daemons (None when off); as `build_memory_reclaim`, and off where the daemons' figure cannot be
    read (`statsSource: kubelet`: its Summary has no system.slice counts)."""
    settings = basics.settings
    if not settings.daemons_reclaim:
        return None
    node_reclaimer = CgroupMemoryReclaimer(basics.cgroups)
    unavailable = ("evictd only reports (dry run, or no Kubernetes API)" if reported_only
                   else KUBELET_STATS_NO_DAEMONS if settings.stats_source is StatsOrigin.KUBELET
                   else node_reclaimer.unavailable())
    if unavailable is not None:
        basics.log.warning("reclaim for the daemons unavailable: acts as off", reason=unavailable)
        return None
    reclaimer = node_reclaimer if dry_run is None else ModeGatedMemoryReclaimer(node_reclaimer, dry_run)
    basics.log.info("reclaim for the daemons on", budget_s=settings.memory_reclaim_budget_s)
    return DaemonsReclaimStep(DaemonsReclaimSettings(enabled=True, budget_s=settings.memory_reclaim_budget_s),
                              reclaimer)


def build_manager(engine_config: EngineConfig, stats: StatsParts, cluster: ClusterParts | None, pods: PodSource,
                  node: NodeLevel, state: EngineState, *, crossing_hold_s: float,
                  memory_reclaim: MemoryReclaimStep | None = None,
                  daemons_reclaim: DaemonsReclaimStep | None = None) -> EvictionManager:
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
        crossing_hold_s=crossing_hold_s,
        terminating=cluster.terminating if cluster is not None else None,
        disk_figures=stats.disk_figures,
        memory_reclaim=memory_reclaim,
        daemons_reclaim=daemons_reclaim,
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


def build_runtime(basics: Basics, node: NodeLevel, cluster: ClusterParts | None,
                  memory_reading: Callable[[], Summary] | None = None,
                  dry_run: Callable[[], bool] | None = None) -> RuntimeLink:
    """The link to the container runtime, which attaches it to `node` and the slot once it answers (its hard memory
    evictions' stops read the node's memory with `memory_reading`, the stats source's reading of it alone)."""
    settings = basics.settings
    client = CriClient(settings.container_runtime_endpoint, settings.runtime_request_timeout_s)
    watcher = cluster.watcher if cluster is not None else None
    return RuntimeLink(client, lambda version: attach_runtime(basics.config, client, version, basics.metrics,
                                                              basics.log, node, watcher, cgroups=basics.cgroups,
                                                              memory_reading=memory_reading, dry_run=dry_run),
                       basics.log, slot=basics.runtime)


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


def report_node_protection(basics: Basics) -> None:
    """Log how the node protects its daemons' memory, one "node memory protection" line per finding: info when ok,
    warning when not (docs/deployment.md, "The node's own protection"). evictd reports; it changes no cgroup."""
    findings = node_protection_findings(basics.config.reservation, basics.config.eviction.enforce_node_allocatable,
                                        read_node_cgroups(basics.cgroups))
    for finding in findings:
        say = basics.log.info if finding.status is Status.OK else basics.log.warning
        say("node memory protection", **finding.fields())


def report_protections(basics: Basics, reported_only: str | None) -> None:
    """Log each protection against thrash (`evictd.core.protections`), one "protection" line each: info when
    active, warning when asked for and unavailable, wholly or in part; set `evictd_protection`."""
    for verdict in protections(basics.config.protections_wanted(reported_only), read_protection_facts(basics.cgroups)):
        say = basics.log.warning if verdict.state is ProtectionState.UNAVAILABLE or verdict.partial else basics.log.info
        say("protection", **{key: value for key, value in verdict.fields().items() if value})
        for state in ProtectionState:
            if state is not ProtectionState.UNREAD:
                basics.metrics.protection.labels(str(verdict.protection), str(state)).set(state is verdict.state)


POD_CGROUP_SIGNALS = frozenset({Signal.ALLOCATABLE_MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_STALL_SOME,
                                Signal.ALLOCATABLE_MEMORY_STALL_FULL})


def signals_without_source(basics: Basics) -> frozenset[Signal]:
    """The signals this node has no source for at all: those of the pods cgroup where there is none (no kubelet
    here; the node's own stats source only, a kubelet's Summary always has it)."""
    if basics.settings.stats_source is StatsOrigin.NODE and not basics.cgroups.has_pods_cgroup():
        return POD_CGROUP_SIGNALS
    return frozenset()


@dataclass(frozen=True)
class Observers:
    """How cycles are shown: the output format, the live view (with `live`), the recent log lines it shows."""

    fmt: str
    stdout: TextIO
    recent: RecentEvents | None


def build_hooks(basics: Basics, observers: Observers, *, mode: ModeSwitch, stats: StatsParts,
                cluster: ClusterParts | None, state_file: EngineStateFile | None, link: RuntimeLink,
                start_state: EngineState, health: Health) -> Hooks:
    """What runs around each cycle and at stop: metrics, logs, saved state, live view, cluster bookkeeping, runtime
    upkeep, OOM feedback, the flight recorder, the daemons' memory.low and, last, the C heap's trim (the loop arms
    the sensors before them)."""
    settings, metrics, log = basics.settings, basics.metrics, basics.log
    reported_only = mode.reports_only
    oom_feedback = build_oom_feedback(basics, reported_only)
    after_cycle: list[AfterCycle] = [record_metrics(metrics, reported_only), log_cycles(log, reported_only, basics.run)]
    if state_file is not None:
        after_cycle.append(state_file)
    on_stop: list[Callable[[], None]] = [withdraw_unless_lost(cluster)] if cluster is not None else []
    if observers.fmt == "live":
        live_view = LiveView(observers.stdout, basics.node_name, dry_run=mode.dry_run, no_api=cluster is None,
                             recent=observers.recent, run=basics.run)
        after_cycle.append(live_view)
        on_stop.append(live_view.close)
    after_cycle.append(log_sample_problems(log, metrics, stats.problems, lambda: oom_feedback.problems))
    after_cycle.append(log_refused_figures(log, metrics, stats.refused))
    after_cycle.append(watch_blind_signals(log, metrics, health, lambda: signals_without_source(basics)))
    if cluster is not None:
        after_cycle.append(cluster_bookkeeping(cluster, metrics, basics.waiter.pending))
    # After the hooks that log, export and record the kills: a restart never counts them again.
    after_cycle += [oom_feedback.save, runtime_upkeep(link)]
    if settings.recorder:
        # After the others: what they do never waits for the recorder's disk.
        recorder = FlightRecorder(settings.state_dir, basics.config.eviction, max_bytes=settings.recorder_max_bytes,
                                  max_age_s=settings.recorder_max_age_s, dry_run=reported_only, log=log,
                                  on_error=metrics.errors.labels("recorder").inc, run=basics.run,
                                  start_state=start_state, node_name=basics.node_name, writer=basics.write_behind)
        after_cycle.append(recorder)
        on_stop.append(recorder.close)
    protection = daemons_protection(basics.config, basics.cgroup_layout, acting=lambda: not mode.reports_only(),
                                    log=log, gauge=metrics.daemons_memory_low.set)
    if protection is not None:
        after_cycle.append(protection)
        on_stop.append(protection.stop)
    trim = heap_trimmer(basics.config.eviction.thresholds())
    if trim is not None:  # after the recorder: its line on a new segment is the largest peak a cycle has
        after_cycle.append(trim)
    if state_file is not None:
        on_stop.append(state_file.close)
    on_stop += [oom_feedback.close, basics.cgroups.close]
    return Hooks(before_cycle=basics.decision.start, after_cycle=after_cycle, oom_feedback=oom_feedback,
                 wait_for_cleanup=cluster.sync.wait_for_cleanup if cluster is not None else None, on_stop=on_stop,
                 standby=(cluster.lease.standby_reason if cluster is not None and cluster.lease is not None
                          else always_acting), mode=mode)


def build_oom_feedback(basics: Basics, reported_only: bool | Callable[[], bool]) -> OomFeedback:
    """The OOM-kill feedback, resumed from the counters the last run of this boot saved in stateDir (also in
    dry-run: the counters change nothing a real run decides, and a kill is counted once whichever run saw it)."""
    counters = OomCounters(basics.cgroups)
    try:
        boot_id: str | None = counters.boot_id()
    except SampleError as exc:
        basics.log.warning("boot ID unreadable: OOM kills while evictd is not running cannot be counted",
                           path=exc.source, reason=exc.reason)
        boot_id = None
    saved = OomCountersFile(StateDir(basics.settings.state_dir).oom_counters, boot_id=boot_id,
                            pods_cgroup=counters.pods_cgroup_name, log=basics.log,
                            on_error=basics.metrics.errors.labels("state").inc, writer=basics.write_behind)
    feedback = OomFeedback(counters, dry_run=reported_only, container_names=basics.runtime.container_names,
                           saved=saved)
    feedback.resume()
    return feedback


def build_parts(basics: Basics, cluster: ClusterParts | None, link: RuntimeLink, stats: StatsParts,
                health: Health, serve_http: bool) -> list[Part]:
    """What the daemon starts before its first cycle, in order: the node Lease (another evictd renewing it: wait,
    then refuse), the Node's watch (its first read: the mode label, the kubelet's version), the pod watch, the
    runtime link, the HTTP endpoint, the disk walker."""
    parts: list[Part] = []
    if cluster is not None and cluster.lease is not None:
        parts.append(cluster.lease)
    if cluster is not None and cluster.node_watch is not None:  # the first cycle follows the label and version
        parts.append(cluster.node_watch)
    if cluster is not None:
        parts.append(cluster.pod_watch)
    parts.append(link)
    if serve_http:
        authorizer = None
        if basics.settings.metrics_authorization is MetricsAuthorization.WEBHOOK and cluster and cluster.api:
            reviews, log = basics.metrics.metrics_token_reviews, basics.log

            def reviewed(verdict: Verdict) -> None:
                reviews.labels(REVIEW_VERDICTS[verdict.status]).inc()
                if verdict.status == 503:  # at most REVIEWS_PER_S lines a second
                    log.warning("metrics token review failed; the scrape got 503", error=verdict.reason)

            authorizer = MetricsAuthorizer(metrics_access_review(cluster.api), on_review=reviewed)
        parts.append(HttpEndpoint(basics.settings.metrics_bind_address, basics.metrics.registry, health,
                                  authorizer=authorizer))
    if stats.disk_walker is not None:
        parts.append(stats.disk_walker)
    return parts


def build_daemon(
    config: Configuration,
    *,
    max_cycles: int = 0,
    stdout: TextIO = sys.stdout,
    serve_http: bool = True,
    kubelet: KubeletFile | None = None,
    pinned_dry_run: bool = False,
) -> Daemon:
    """Take the node and stateDir locks, then build the daemon from `config` (parts not started). ConfigError for
    unusable settings, StateLockError when a lock is still held after stateLockTimeout. `kubelet`: the node's kubelet
    configuration; `pinned_dry_run` (`--dry-run`): no label makes this evictd act."""
    limits = limits_choice(config, kubelet.eviction if kubelet is not None else None)
    # The without-PSI thresholds join the others on a kernel that gives no PSI (`Configuration.for_kernel`).
    config = enforced_as_chosen(config, limits).for_kernel(node_psi_missing())
    settings = config.evictd
    fmt = resolve_format(settings.log_format, stdout)
    metrics = Metrics()
    # Queued: the loop never waits for a slow reader of its log (issue #29).
    observers = Observers(fmt, stdout, configure_logging(fmt, queued=True, on_drop=metrics.log_lines_dropped.inc))
    log = structlog.get_logger("evictd")
    # One evictd per node, whatever its stateDir; then nothing in stateDir is read or written before its lock.
    acquire_node_lock(settings.state_lock_timeout_s, log)
    acquire_state_lock(settings.state_dir, settings.state_lock_timeout_s, log)
    api = api_configured(settings)
    # The kubelet followed: kubeletVersion, else (with the API) the Node's as its watch reads it.
    followed = FollowedKubelet(settings.kubelet_version, config.eviction.feature_gates, log=log, from_node=api)
    handover = report_handover(config, kubelet, log, metrics, followed)
    (log.warning if limits.enforcer is Enforcer.NOBODY else log.info)(
        "ephemeral-storage limits", enforcer=str(limits.enforcer), reason=limits.reason)
    protect_self(settings, log, metrics)
    # With an API the Node's label may switch the mode at any cycle: an acting evictd is built, gated by the mode.
    never_acts = pinned_dry_run or (settings.dry_run and not api)
    basics = build_basics(config, log, metrics, never_acts=never_acts)
    # The pods the node shows (named by the runtime once it answers).
    discovered = DiscoveredPods(basics.cgroups, settings.pod_logs_dir, basics.runtime)
    # The node-local mode file: read before every cycle, so that a node cut off from the API can still be held in
    # dry-run (`evictd mode dry-run`).
    mode_file = StateDir(settings.state_dir).mode
    mode = ModeSwitch(settings.dry_run, metrics=metrics, log=log, pinned=pinned_dry_run, api=api,
                      racing=[v for v in handover.verdicts if v.signal in racing_signals(handover)],
                      local=partial(read_mode_file, mode_file), local_path=mode_file)
    cluster = (build_cluster(config, basics.node_name, basics.metrics, log, pinned_dry_run, discovered,
                             basics.runtime, basics.stop.is_set, basics.decision, reports_only=mode.reports_only,
                             on_kubelet=followed.node_read)
               if api else None)
    if cluster is not None:
        mode.attach(cluster.mode_watch, cluster.lease)
    # Evictions need the API; node-level reclaim and periodic GC need only the runtime (unless dry-run).
    reported_only = settings.dry_run or cluster is None
    if cluster is None:
        log.info("no Kubernetes API configured (no kubeconfig, not in a pod): evictions are reported, "
                 "not carried out")
    pods: PodSource = cluster.pods if cluster is not None else discovered
    # The stats measure the pods each cycle listed: the watch's, or the node's (without a list, or without the API).
    stats = build_stats_source(config, basics.cgroups, basics.node_name,
                               discovered=discovered if cluster is None else None, runtime=basics.runtime, log=log,
                               hugepage_aware=followed.hugepage_aware)
    if stats.insecure_reason:
        log.warning("kubelet Summary endpoint not verified", detail=stats.insecure_reason,
                    url=settings.kubelet_summary_url, token_file=settings.kubelet_token_file)
    engine_config = EngineConfig.from_settings(config.eviction)
    state_file, start_state = build_engine_state(basics, engine_config)
    node = NodeLevel(PathLayout(settings.kubelet_root_dir, settings.image_fs_path, settings.container_fs_path),
                     ReportOnlyReclaimer())
    manager = build_manager(engine_config, stats, cluster, pods, node, start_state,
                            crossing_hold_s=basics.settings.memory_crossing_hold_s,
                            memory_reclaim=build_memory_reclaim(basics, never_acts or cluster is None,
                                                                None if never_acts else mode.dry_run),
                            daemons_reclaim=build_daemons_reclaim(basics, never_acts or cluster is None,
                                                                  None if never_acts else mode.dry_run))
    link = build_runtime(basics, node, cluster, stats.source.memory_reading(),
                         dry_run=None if never_acts else mode.dry_run)
    sensors = build_sensors(basics.settings, basics.cgroup_layout, basics.cgroups, basics.waiter, basics.log,
                                engine_config, lambda: manager.state.stall_gate, stats.note_pressure,
                                stats.note_firing, monotonic=basics.clock.monotonic)
    health = Health(settings.housekeeping_interval_s, stopping=basics.stop.is_set)
    basics.metrics.watch_health(lambda: health.status()[0])
    warn_about_pods_cgroup(basics)
    report_node_protection(basics)
    report_protections(basics, "evictd only reports (dry run, or no Kubernetes API)"
                       if never_acts or cluster is None else None)
    hooks = build_hooks(basics, observers, mode=mode, stats=stats, cluster=cluster,
                        state_file=state_file, link=link, start_state=start_state,
                        health=health)
    return Daemon(manager, LoopSettings(settings.housekeeping_interval_s, basics.node_name, reported_only, max_cycles),
                  Wakeups(sensors, basics.stop, basics.clock), Reporting(basics.metrics, health, log), hooks,
                  build_parts(basics, cluster, link, stats, health, serve_http))


def protect_self(settings: EvictdSettings, log: Log, metrics: Metrics) -> None:
    """Lock evictd's memory (`lockMemory`), apply `oomScoreAdj` if set and read the one it runs with, each outcome
    in a log line and a metric; a kernel refusal is a warning, never a stop."""
    locked = False
    if not settings.lock_memory:
        log.info("memory not locked", reason="lockMemory is false")
    else:
        outcome = lock_memory()
        locked = outcome.locked
        if not locked:
            log.warning("memory not locked", reason=outcome.reason, error=outcome.error or None)
        else:
            try:
                figures = memory_figures()
            except SampleError as exc:
                log.info("memory locked", flags=LOCK_FLAG_NAMES, figures_unreadable=str(exc))
            else:
                # Resident and locked now; what is touched later is locked as it is faulted in (MCL_ONFAULT).
                log.info("memory locked", flags=LOCK_FLAG_NAMES, locked_kib=figures.locked_resident_bytes // KIB,
                         rss_kib=figures.rss_bytes // KIB, vm_locked_kib=figures.vm_locked_bytes // KIB)
    metrics.memory_locked.set(int(locked))
    before, now = raise_open_files_limit()
    if now != before:
        log.info("open files limit raised", soft_before=before, soft=now)
    try:
        if settings.oom_score_adj is None:
            value = read_oom_score_adj()
        else:
            applied = set_oom_score_adj(settings.oom_score_adj)
            value = applied.value
            if not applied.applied:
                log.warning("oom_score_adj not set", requested=applied.requested, value=value, reason=applied.reason,
                            error=applied.error or None)
    except SampleError as exc:
        log.warning("oom_score_adj unreadable", detail=str(exc))
        return
    metrics.oom_score_adj.set(value)
    exposed = oom_score_adj_warning(value)
    if exposed:
        log.warning("oom_score_adj exposes evictd", oom_score_adj=value, detail=exposed)
    else:
        log.info("oom_score_adj", oom_score_adj=value)


def exit_after_logs(status: int) -> None:
    """The shutdown deadline's exit: the queued log lines get `DEADLINE_LOG_FLUSH_S`, then the process ends
    at once (`os._exit`: no hung thread can hold it up)."""
    flush_logs(DEADLINE_LOG_FLUSH_S)
    os._exit(status)


def check_settings(config: Configuration) -> None:
    """Raise ConfigError for settings that cannot work on this machine before anything starts."""
    if not os.path.isdir(config.evictd.cgroupfs_path):
        raise ConfigError("no such folder (where cgroupfs is mounted)", key="cgroupfsPath",
                          value=config.evictd.cgroupfs_path)
    if config.evictd.metrics_authorization is MetricsAuthorization.WEBHOOK and not api_configured(config.evictd):
        raise ConfigError("needs the Kubernetes API (a kubeconfig, or evictd running in a pod) for its token and "
                          "access reviews; AlwaysAllow needs none", key="metricsAuthorization", value="Webhook")
    if (config.evictd.stats_source is StatsOrigin.KUBELET and not config.evictd.kubelet_summary_url
            and not api_configured(config.evictd)):
        raise ConfigError("needs kubeletSummaryURL, a kubeconfig, or to run inside a cluster",
                          key="statsSource", value="kubelet")
    eviction = config.eviction
    for refault in (str(Signal.MEMORY_REFAULT), str(Signal.DAEMONS_REFAULT)):
        if config.evictd.stats_source is StatsOrigin.KUBELET and (refault in eviction.stall_hard
                                                                  or refault in eviction.stall_soft):
            # Refault figures are made of /proc/vmstat's and system.slice's counts, which the kubelet's Summary has
            # not: never met.
            raise ConfigError(f"{refault} thresholds need statsSource: node (the kubelet's Summary has no refault "
                              "counts)", key="statsSource", value="kubelet")
    if (config.evictd.stats_source is StatsOrigin.KUBELET and eviction.stall_requires_node_reclaim
            and (eviction.stall_hard or eviction.stall_soft)):
        # The kubelet's Summary carries no reclaim counters: the gate would keep every stall threshold from being met.
        raise ConfigError("stall thresholds with stallRequiresNodeReclaim need statsSource: node (the kubelet's "
                          "Summary has no reclaim counters); set stallRequiresNodeReclaim: false to decide on the "
                          "stall share alone", key="statsSource", value="kubelet")

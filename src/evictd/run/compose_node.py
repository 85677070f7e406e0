"""The node side of `evictd run`'s composition: the stats source (the node's own, or the kubelet's Summary), the
filesystem layout, the wake-ups between ticks (`build_sensors`: memcg levels (v1), the memory watch, PSI, the
refault and pid watches), and what a container runtime brings once it answers: node-level reclaim and periodic GC
(`attach_runtime`), upkept after each cycle.

Building starts nothing: the disk walker is a part the daemon starts, and a runtime is attached whenever it first
answers. Without one, or in dry-run, node-level reclaim frees nothing (`ReportOnlyReclaimer`). This module
imports compose_cluster.py (`pod_states`, for the container GC), never composition.py (which imports it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import structlog

from evictd.adapters.cgroup_kill import pod_process_counter, pod_process_killer, pod_process_terminator
from evictd.adapters.cgroups import CgroupLayout, CgroupReader, v1_hierarchy_root
from evictd.adapters.disk_walker_process import DiskWalkerProcess, WalkerSettings
from evictd.adapters.filesystems import detect_layout
from evictd.adapters.hugepages import HUGEPAGES_ROOT, hugepages_bytes
from evictd.adapters.kubelet_summary import ApiProxySummarySource, KubeletSummarySource, summary_deadline_s
from evictd.adapters.memcg_set import MemcgNotifierSet
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_stats import NodeStatsSource, existing_ancestor, pods_limit_events
from evictd.adapters.notifiers import SYSTEM_MEMORY_PRESSURE, Notifier, PsiNotifier, Waiter
from evictd.adapters.pod_disk_usage import PodDiskStore
from evictd.adapters.procfs import global_reclaim_scan_pages, inactive_file_bytes
from evictd.adapters.runtime_gc import CriContainerGC, CriImageGC, RuntimeReclaimer, imagefs_usage
from evictd.adapters.runtime_node import PeriodicGC, RuntimeFilesystems, RuntimeLayout
from evictd.adapters.sensors import (
    RefaultWatch,
    Sensors,
    TargetWatch,
    count_watch,
    daemons_refault_watch,
    memory_watch,
    node_refault_watch,
)
from evictd.config import Configuration, EvictdSettings, StatsOrigin
from evictd.core.container_gc import GCPolicy
from evictd.core.engine import EngineConfig, Eviction
from evictd.core.engine_rules import memory_ran_short
from evictd.core.errors import EvictdError, SampleError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.image_gc import image_gc_policy
from evictd.core.plausible import Refusal
from evictd.core.psi import format_us, microseconds
from evictd.core.psi_window import threshold_triggers
from evictd.core.signals import EVICTD_SIGNALS, Reading, Signal, spec_of
from evictd.core.stall_gate import StallGate, wake_may_open
from evictd.core.summary import Summary, signal_observations
from evictd.core.thresholds import Threshold
from evictd.core.wake import WATCHES
from evictd.cri import NO_RUNTIME, Runtime, RuntimeVersion
from evictd.cri.client import CriClient
from evictd.cycle.finished import AfterCycle, Cycle
from evictd.cycle.manager import DiskFigures, StatsSource
from evictd.kube.client import build_api_client
from evictd.kube.pod_watch import PodWatcher
from evictd.log import Log
from evictd.observe.metrics import Metrics
from evictd.run.compose_cluster import pod_states
from evictd.run.plausible_stats import PlausibleStats, machine_memory_bytes
from evictd.run.runtime_link import CriRuntime, GatedGC, MemoryGuard, NodeLevel, RuntimeLink


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


class GatedReclaimer:
    """Node-level reclaim through `reclaimer` only while the node's mode acts (`dry_run` false); in dry-run nothing
    is freed, as with `ReportOnlyReclaimer`."""

    def __init__(self, reclaimer: RuntimeReclaimer, dry_run: Callable[[], bool]) -> None:
        self._reclaimer = reclaimer
        self._dry_run = dry_run

    def reclaim(self, action: ReclaimAction) -> int:
        return 0 if self._dry_run() else self._reclaimer.reclaim(action)


def psi_judge(memcg: MemcgNotifierSet | None, cgroups: CgroupReader,
              stall_gate: Callable[[], StallGate] | None,
              note_pressure: Callable[[], None] = lambda: None) -> Callable[[], bool] | None:
    """How a PSI firing is judged before it earns a cycle (None: it always does). With stall thresholds
    (`stall_gate`: the engine's gate as the last cycle left it) a firing may change a stall decision unless the
    last cycle held the stall signals back and the reclaim counters that would open the gate have not moved since
    (`evictd.core.stall_gate.wake_may_open`, read now); otherwise, on cgroup v1, it may change a memory threshold's
    decision when `memcg` judges so (`MemcgNotifierSet.may_change_decision`); on v2 the memory watch follows the
    memory thresholds. Each firing judged with stall thresholds first has the pressure files read
    (`note_pressure`, the stats source's), so that a firing held back still starts the window of evictd's own
    stall share for the next one (`evictd.core.psi_window`)."""
    if stall_gate is None:
        return memcg.may_change_decision if memcg is not None else None
    gate_now = stall_gate

    def judge() -> bool:
        note_pressure()
        try:
            scanned: int | None = global_reclaim_scan_pages()
        except SampleError:
            scanned = None
        try:
            limit_events = pods_limit_events(cgroups)
        except SampleError:
            limit_events = None
        if wake_may_open(gate_now(), scanned, limit_events):
            return True
        return memcg.may_change_decision() if memcg is not None else False

    return judge


def build_psi_notifiers(settings: EvictdSettings, layout: CgroupLayout, cgroups: CgroupReader,
                        log: Log, memcg: MemcgNotifierSet | None = None,
                        stall_gate: Callable[[], StallGate] | None = None,
                        note_pressure: Callable[[], None] = lambda: None,
                        thresholds: Sequence[Threshold] = (),
                        note_firing: Callable[[Signal, float, float], None] | None = None) -> tuple[Notifier, ...]:
    """Return the PSI wake-ups: the machine's /proc/pressure/memory and, on cgroup v2, the pods cgroup's
    memory.pressure (a stall of the pods alone), at psiStallThreshold within psiWindow; and, with `note_firing`,
    one trigger per stall threshold of `thresholds` at its share of psiWindow on its signal's file and line, whose
    firings are noted (`note_firing(signal, share %, window s)`: `evictd.core.psi_window.with_firings`). A trigger
    the kernel refuses is logged and left out. Each firing is judged first (`psi_judge`)."""
    if not settings.psi_wakeups:
        return ()
    judge = psi_judge(memcg, cgroups, stall_gate, note_pressure)
    node_path = SYSTEM_MEMORY_PRESSURE
    pods_path = (os.path.join(str(layout.memory_hierarchy), cgroups.pods_cgroup(), "memory.pressure")
                 if layout.version == 2 else None)
    wanted = [(node_path, "node memory pressure stall")]
    if pods_path is not None:
        wanted.append((pods_path, "pods cgroup memory pressure stall"))
    window_us = microseconds(settings.psi_window_s)
    notifiers: list[Notifier] = []

    def add(path: str, stall_us: int, description: str, kind: str = "some",
            on_fire: Callable[[], None] | None = None) -> None:
        if not os.path.exists(path):
            return
        try:
            notifiers.append(PsiNotifier(path, stall_us, window_us, kind, description, judge=judge, on_fire=on_fire))
        except SampleError as exc:
            log.warning("PSI wake-ups unavailable", path=exc.source, reason=exc.reason)

    for path, description in wanted:
        add(path, microseconds(settings.psi_stall_threshold_s), description)
    if note_firing is None:
        return tuple(notifiers)
    for trigger in threshold_triggers(thresholds, window_us):
        file = pods_path if spec_of(trigger.signal).reading is Reading.PODS_MEMORY_STALL else node_path
        if file is None:
            continue  # cgroup v1: no pods cgroup's memory.pressure
        add(file, trigger.stall_us, f"{trigger.signal}>={trigger.share:g}% within {format_us(window_us)}",
            str(trigger.kind), _firing_note(note_firing, trigger.signal, trigger.share, settings.psi_window_s))
    return tuple(notifiers)


def _firing_note(note_firing: Callable[[Signal, float, float], None], signal: Signal, share: float,
                 window_s: float) -> Callable[[], None]:
    """What a stall threshold's trigger tells at each firing: `note_firing` of its signal, share and window."""
    return lambda: note_firing(signal, share, window_s)


def build_memcg_notifiers(thresholds: Sequence[Threshold], layout: CgroupLayout, cgroups: CgroupReader, *,
                          monotonic: Callable[[], float]) -> MemcgNotifierSet:
    """The memcg thresholds of a cgroup v1 node; where the memory hierarchy is the machine's own (its root), armed
    with /proc/meminfo's inactive file too, fresher than the root's memory.stat (`evictd.core.memcg`)."""
    memory_root = str(layout.memory_hierarchy)
    return MemcgNotifierSet(thresholds, memory_root=memory_root, pods_cgroup=cgroups.pods_cgroup(),
                            fresh_inactive_file=inactive_file_bytes if v1_hierarchy_root(memory_root) else None,
                            monotonic=monotonic)


@dataclass(frozen=True)
class StatsParts:
    """The configured stats source, with what the daemon needs of it besides summaries."""

    source: StatsSource
    # What could not be read in the last cycle (logged once per change, counted for the runtime).
    problems: Callable[[], Sequence[SampleError]]
    # The process measuring pods' volumes and logs for the node's own source (None for the kubelet's Summary).
    disk_walker: DiskWalkerProcess | None = None
    # Where a cycle waits for the walker's first figures of pods before a disk ranking (None: nothing to wait for).
    disk_figures: DiskFigures | None = None
    # Why the kubelet's Summary endpoint is not verified ("" when it is, or not used).
    insecure_reason: str = ""
    # The figures the last Summary lost: undecodable or impossible (`PlausibleStats`).
    refused: Callable[[], Sequence[Refusal]] = lambda: ()
    # Reads the memory pressure files between cycles (at a PSI firing), for the stall share's window.
    note_pressure: Callable[[], None] = lambda: None
    # Notes a stall threshold's PSI trigger firing (signal, share %, window s) for the readings after it.
    note_firing: Callable[[Signal, float, float], None] | None = None



def build_sensors(settings: EvictdSettings, layout: CgroupLayout, cgroups: CgroupReader, waiter: Waiter,
                    log: Log, engine_config: EngineConfig,
                    stall_gate: Callable[[], StallGate] | None = None,
                    note_pressure: Callable[[], None] = lambda: None,
                    note_firing: Callable[[Signal, float, float], None] | None = None, *,
                    monotonic: Callable[[], float]) -> Sensors:
    """The wake-ups between ticks: memcg thresholds (cgroup v1) and the memory watch, PSI (its firings judged
    with the engine's `stall_gate` where stall-family thresholds are configured), the refault watch and a watch of
    each counted reading (where their thresholds are configured and the stats are the node's own), timed by the
    loop's `monotonic`."""
    node_stats = settings.stats_source is StatsOrigin.NODE
    thresholds = engine_config.thresholds
    memory_wakeups = settings.memcg_wakeups and node_stats
    memcg = (build_memcg_notifiers(thresholds, layout, cgroups, monotonic=monotonic)
             if memory_wakeups and layout.version == 1 else None)
    # cgroup v2 has no memcg threshold notifier: the memory watch looks closely while a crossing is near instead. On
    # v1 it looks beside the notifiers, for the crossings a usage level cannot announce: page cache turned active
    # (the working set grows, usage does not) or dropped below the level's inactive file, statistics folded late.
    watches: list[TargetWatch | RefaultWatch] = []
    if memory_wakeups:
        watches.append(memory_watch(cgroups, settings.housekeeping_interval_s, v1=layout.version == 1,
                                    look_budget=layout.version == 2, monotonic=monotonic))
    stalls = any(spec_of(threshold.signal).stall_family for threshold in thresholds)
    psi = build_psi_notifiers(settings, layout, cgroups, log, memcg, stall_gate if stalls and node_stats else None,
                              note_pressure, thresholds, note_firing if stalls and node_stats else None)
    # Nothing in the kernel announces page cache thrash without PSI, nor tasks running out: the refault watches read
    # /proc/vmstat and system.slice, a counted reading's watch its count (/proc/loadavg's tasks).
    signals = {threshold.signal for threshold in thresholds} if node_stats else set()
    gated = engine_config.stall_requires_node_reclaim
    if Signal.MEMORY_REFAULT in signals:
        watches.append(node_refault_watch(gated=gated, monotonic=monotonic))
    if Signal.DAEMONS_REFAULT in signals:
        watches.append(daemons_refault_watch(layout, gated=gated, monotonic=monotonic))
    counted = {spec_of(signal).reading for signal in signals} & {r for r, row in WATCHES.items() if row.counted}
    watches += [count_watch(r, settings.housekeeping_interval_s, monotonic=monotonic) for r in sorted(counted)]
    return Sensors(waiter, memcg, psi, watches)


def plausible(parts: StatsParts) -> StatsParts:
    """`parts` with its source behind `PlausibleStats`, bounded by this machine's memory capacity (every source)."""
    checked = PlausibleStats(parts.source, machine_memory_bytes())
    return replace(parts, source=checked, refused=lambda: checked.refused)


def node_hugepages(hugepage_aware: Callable[[], bool], root: str = HUGEPAGES_ROOT) -> Callable[[], int]:
    """The hugepage capacity the node's memory.available subtracts at a reading: the pools' total under `root`
    while `hugepage_aware` (asked each time: the kubelet followed may change), else 0 (nothing read)."""
    return lambda: hugepages_bytes(root) if hugepage_aware() else 0


def build_stats_source(config: Configuration, cgroups: CgroupReader, node_name: str, *,
                       discovered: DiscoveredPods | None = None, runtime: Runtime = NO_RUNTIME,
                       log: Log | None = None, hugepage_aware: Callable[[], bool] | None = None,
                       hugepages_root: str = HUGEPAGES_ROOT) -> StatsParts:
    """Return the configured stats source: the node itself, or the kubelet's Summary API. The node's own measures
    the pods each cycle listed, with the runtime slot once one answers, disk figures from its walker's store, and
    with `discovered` pods their cgroups from that listing; its memory.available less the hugepages under
    `hugepages_root` while `hugepage_aware` says so (None: as the configuration's semantics say, once)."""
    settings = config.evictd
    if settings.stats_source is StatsOrigin.KUBELET:
        # One fetch ends in time for the next cycle (and for a clean stop), whatever the endpoint does.
        deadline_s = summary_deadline_s(settings.kubelet_summary_timeout_s, settings.housekeeping_interval_s,
                                        settings.shutdown_timeout_s)
        if settings.kubelet_summary_url:
            kubelet = KubeletSummarySource(settings.kubelet_summary_url, token_file=settings.kubelet_token_file,
                                           ca_file=settings.kubelet_ca_file,
                                           insecure_tls=settings.kubelet_insecure_tls, timeout_s=deadline_s)
            return plausible(StatsParts(kubelet, lambda: kubelet.problems, insecure_reason=kubelet.insecure_reason))
        proxy = ApiProxySummarySource(node_name, api=build_api_client(settings.kubeconfig), timeout_s=deadline_s)
        return plausible(StatsParts(proxy, lambda: proxy.problems))
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
        # The daemons' figure: for their threshold, or for reclaim for the daemons (which needs no threshold).
        daemon_refaults=Signal.DAEMONS_REFAULT in stall_signals or settings.daemons_reclaim,
        # A 1.37 kubelet (or one with HugepageAwareEviction) subtracts the hugepage capacity; its Summary, read
        # above, has it subtracted already.
        hugepages=(node_hugepages(hugepage_aware, hugepages_root) if hugepage_aware is not None
                   else partial(hugepages_bytes, hugepages_root) if config.semantics().hugepage_aware else None),
    )
    walker = DiskWalkerProcess(node.disk_usage, WalkerSettings(kubelet_root=settings.kubelet_root_dir,
                                                               pod_logs_dir=settings.pod_logs_dir),
                               log=log if log is not None else structlog.get_logger("evictd"))
    return plausible(StatsParts(node, lambda: node.problems, disk_walker=walker, disk_figures=node,
                                note_pressure=node.note_pressure, note_firing=node.note_stall_firing))


def attach_runtime(config: Configuration, client: CriClient, version: RuntimeVersion, metrics: Metrics, log: Log,
                   node: NodeLevel, watcher: PodWatcher | None, cgroups: CgroupReader | None = None,
                   memory_reading: Callable[[], Summary] | None = None,
                   dry_run: Callable[[], bool] | None = None) -> CriRuntime:
    """Build node-level reclaim and periodic GC over a runtime that answered, hand the manager's node level its
    layout and reclaimer (report-only in dry-run or while `dry_run` says so), and return the runtime the slot answers
    as from then on (its hard memory stops guarded: `memory_guard`); at start or later alike."""
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
    # `dry_run` (the node's mode, asked each time) gates what acts; without it the configured dryRun holds throughout.
    never = settings.dry_run and dry_run is None
    mode = dry_run if dry_run is not None else (lambda: False)
    node.attach(RuntimeLayout(settings.kubelet_root_dir, filesystems),
                ReportOnlyReclaimer() if never else GatedReclaimer(RuntimeReclaimer(containers, images), mode))
    acting = None if never else cgroups
    return CriRuntime(client, filesystems, gc=None if never else GatedGC(periodic, mode),
                      kill_processes=None if acting is None else pod_process_killer(acting),
                      memory_guard=None if acting is None else memory_guard(acting, memory_reading))


def memory_guard(cgroups: CgroupReader, memory_reading: Callable[[], Summary] | None) -> MemoryGuard | None:
    """What a hard memory eviction's stop does beside the runtime's (`MemoryGuard`), through the pods' cgroups and on
    `memory_reading` (None: the stats source has no reading of the node's memory alone, so no guard)."""
    if memory_reading is None:
        return None
    read = memory_reading

    def ran_short(eviction: Eviction) -> bool:
        if eviction.threshold is None:
            return False
        try:
            summary = read()
        except EvictdError:
            return False
        return memory_ran_short(eviction.threshold, signal_observations(summary))

    return MemoryGuard(pod_process_terminator(cgroups), pod_process_counter(cgroups), ran_short)


def runtime_upkeep(link: RuntimeLink) -> AfterCycle:
    """Periodic garbage collection with a runtime attached; asking again for a runtime that has not answered."""

    def upkeep(cycle: Cycle) -> None:
        link.poll()
        link.slot.collect_garbage()

    return upkeep

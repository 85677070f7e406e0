"""The Kubernetes API side of `evictd run`'s composition, built when an API is configured (`api_configured`): the
pod watch, the journaled evictor, the node status writer and Lease, events, the Eviction API route and, in
dry-run, the shadow comparison; with them the container GC's view of pods (`pod_states`) and the per-cycle
bookkeeping.

Building starts nothing (the watch, Lease and label watch are daemon parts). The node's mode can change between
cycles, so an acting evictd is built whatever the configured dryRun, its parts writing and evicting nothing in
dry-run (`ModeGatedEvictor`); the Lease is held in both modes. With `--dry-run` nothing that acts is built. Imports
neither composition.py nor compose_node.py (both import it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.pod_dirs import volume_dirs
from evictd.config import Configuration, EvictdSettings
from evictd.core.container_gc import PodState, PodStateFunc
from evictd.core.engine import Eviction, FollowUp, FollowUpKind
from evictd.core.errors import EvictdError, KubeError, NotActingError, SampleError
from evictd.core.followed import NodeKubelet
from evictd.core.pods import Pod
from evictd.cri import NO_RUNTIME, Runtime
from evictd.cycle.eviction_api_route import EvictionApiRoute
from evictd.cycle.finished import AfterCycle, Cycle
from evictd.cycle.manager import PodEvictor
from evictd.cycle.reclaim_first import memory_reclaim_event
from evictd.kube.api import KubeApi
from evictd.kube.client import build_api_client
from evictd.kube.cluster import BackgroundEvictions, ClusterSync, EvictablePods, NodeFallbackPods, TerminatingEvictions
from evictd.kube.critical_record import CriticalPodRecord
from evictd.kube.events import EventRecorder
from evictd.kube.eviction_requests import EvictionRequests
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal
from evictd.kube.node_lease import NodeLease, lease_namespace
from evictd.kube.node_mode import NodeLabelWatch
from evictd.kube.node_writer import NodeStatusWriter
from evictd.kube.pod_watch import TERMINAL_PHASES, PodWatcher
from evictd.kube.shadow import ShadowComparer
from evictd.log import Log
from evictd.observe.metrics import Metrics
from evictd.run.daemon import Part
from evictd.state_dir import StateDir

# The DaemonSet passes evictd's own pod UID, so that it never evicts itself.
POD_UID_ENV = "EVICTD_POD_UID"
# Set in every pod by the kubelet: evictd then uses the in-cluster service account.
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
# How long start-up waits for the first pod list (a refused connection ends it at once).
POD_SYNC_WAIT_S = 10.0
# How a follow-up reads in dry-run, where nothing is carried out.
NOT_CARRIED_OUT = "not carried out (dry-run)"


class LeaseGatedEvictor:
    """Evicts through `evictor` only while evictd may act (`standby_reason` None): the last check before a pod
    is written, so that a process paused mid-cycle past its Lease evicts nothing when it resumes."""

    def __init__(self, evictor: PodEvictor, standby_reason: Callable[[], str | None]) -> None:
        self._evictor = evictor
        self._standby_reason = standby_reason

    def evict(self, eviction: Eviction) -> None:
        reason = self._standby_reason()
        if reason is not None:
            raise NotActingError(eviction.pod.key, reason)
        self._evictor.evict(eviction)

    def follow_up(self, eviction: Eviction) -> FollowUp:
        reason = self._standby_reason()
        if reason is not None:
            raise NotActingError(eviction.pod.key, reason)
        return self._evictor.follow_up(eviction)


class ModeGatedEvictor:
    """Evicts through `evictor` only while the node's mode acts (`reports_only` false); in dry-run the eviction is
    decided and reported only, as `ReportOnlyEvictor` does."""

    def __init__(self, evictor: PodEvictor, reports_only: Callable[[], bool]) -> None:
        self._evictor = evictor
        self._reports_only = reports_only

    def evict(self, eviction: Eviction) -> None:
        if not self._reports_only():
            self._evictor.evict(eviction)

    def follow_up(self, eviction: Eviction) -> FollowUp:
        if self._reports_only():
            return FollowUp(eviction, FollowUpKind.LEFT_TO_KUBELET, NOT_CARRIED_OUT)
        return self._evictor.follow_up(eviction)


class ReportOnlyEvictor:
    """Evictions not carried out (no Kubernetes API, or dry-run): decided and reported only."""

    def evict(self, eviction: Eviction) -> None:
        return None

    def follow_up(self, eviction: Eviction) -> FollowUp:
        return FollowUp(eviction, FollowUpKind.LEFT_TO_KUBELET, NOT_CARRIED_OUT)


@dataclass
class ClusterParts:
    """The Kubernetes side of the daemon, when an API is configured."""

    pods: EvictablePods
    node_pods: NodeFallbackPods  # what hard thresholds rank while the watch has no pod list
    evictor: PodEvictor
    sync: ClusterSync
    watcher: PodWatcher
    shadow: ShadowComparer | None  # dry-run decisions against the kubelet's own evictions (run in dry-run only)
    journal: EvictionJournal
    pod_watch: Part  # starts the watch and waits for its first answer
    # Soft evictions through the Eviction API (`softEvictionsThroughEvictionAPI`, never in dry-run); None: off.
    eviction_api: EvictionApiRoute | None = None
    # evictd's Lease for the node (its heartbeat, and one evictd per node); None with `--dry-run`, which writes nothing.
    lease: NodeLease | None = None
    # The pods evictd evicted with a longer grace period than a hard threshold's, still terminating (escalation).
    terminating: TerminatingEvictions | None = None
    # The Node's evictd.io/mode label and the mode Events (None with `--dry-run`: nothing switches it).
    mode_watch: NodeLabelWatch | None = None
    # What reads the Node (the mode watch; with `--dry-run` one for the kubelet's version alone, not waited for).
    node_watch: NodeLabelWatch | None = None
    # Whether this cycle's evictions are reported only (the node's mode; always with `--dry-run`).
    reports_only: Callable[[], bool] = lambda: False
    api: KubeApi | None = None  # the API client the parts share (the /metrics token reviews use it too)


class PodWatchStart:
    """Starts the pod watch and waits (at most `POD_SYNC_WAIT_S`) for its first answer before the first cycle; its
    thread is never stopped (it holds nothing the exit does not release)."""

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


def always() -> bool:
    return True


def never() -> bool:
    return False


def api_configured(settings: EvictdSettings) -> bool:
    """True when evictd should talk to a Kubernetes API: a kubeconfig, or running inside a pod."""
    return bool(settings.kubeconfig or os.environ.get(IN_CLUSTER_ENV))


def build_cluster(config: Configuration, node_name: str, metrics: Metrics, log: Log, dry_run: bool,
                  discovered: DiscoveredPods, runtime: Runtime = NO_RUNTIME,
                  should_stop: Callable[[], bool] = lambda: False,
                  decision: Callable[[], str | None] = lambda: None,
                  reports_only: Callable[[], bool] | None = None,
                  on_kubelet: Callable[[NodeKubelet], None] = lambda said: None) -> ClusterParts:
    """Build the pod watch, the journaled evictor, the node status writer, the event recorder, the node's pods for
    when the watch has no list, and the Node's watch (each read's kubelet version to `on_kubelet`). `dry_run`: built
    never to act (no journal, Lease or evictor); otherwise what acts asks `reports_only` (the node's mode) each
    time."""
    settings = config.evictd
    api_client = build_api_client(settings.kubeconfig)
    reporting: Callable[[], bool] = (always if dry_run else reports_only if reports_only is not None else never)

    def api_error(error: KubeError) -> None:
        metrics.api_errors.labels(error.verb).inc()

    def fields_dropped(pod: Pod) -> None:
        for field, count in pod.fields_dropped.items():
            metrics.pod_fields_dropped.labels(field).inc(count)
        log.warning("pod fields dropped past evictd's caps (sums of requests and limits kept)", pod=pod.key,
                    **{field: count for field, count in pod.fields_dropped.items()})

    watcher = PodWatcher(api_client, node_name, on_error=api_error, on_dropped=fields_dropped)
    journal = EvictionJournal(None if dry_run else StateDir(settings.state_dir).journal, log=log,
                              on_corrupt=metrics.journal_corrupt.inc,
                              on_write_failure=metrics.journal_write_failures.inc)
    events = EventRecorder(api_client, node_name, dry_run=reporting)
    def local_stop(eviction: Eviction, how: str | None, error: EvictdError | None) -> None:
        if error is None:
            log.info("evicted pod stopped on the node", pod=eviction.pod.key, how=how)
        else:
            log.warning("evicted pod not stopped on the node; the kubelet stops it", pod=eviction.pod.key,
                        error=str(error))

    kube_evictor = None if dry_run else KubePodEvictor(api_client, journal, events, runtime=runtime,
                                                       on_api_error=api_error, on_local_stop=local_stop,
                                                       decision=decision)
    evictor: PodEvictor = kube_evictor if kube_evictor is not None else ReportOnlyEvictor()
    lease = None if dry_run else NodeLease(
        api_client, lease_namespace(settings.lease_namespace, bool(os.environ.get(IN_CLUSTER_ENV))), node_name,
        log=log, duration_s=settings.node_lease_duration_s, wait_s=settings.state_lock_timeout_s, on_error=api_error)
    if lease is not None:
        evictor = ModeGatedEvictor(LeaseGatedEvictor(evictor, lease.standby_reason), reporting)
    node_writer = NodeStatusWriter(api_client, node_name, settings.node_condition_mode,
                                   update_period_s=settings.node_status_update_frequency_s,
                                   report_period_s=settings.node_status_report_frequency_s, heartbeat=lease,
                                   dry_run=reporting,
                                   standby=lease.standby_reason if lease is not None else lambda: None)
    critical = CriticalPodRecord(None if dry_run else StateDir(settings.state_dir).critical_pods)
    if critical.problem is not None:
        log.warning("critical pods remembered from the last pod list unreadable", error=critical.problem)
    # The node's events have a recorder of their own: they are written on the node reporter's thread.
    node_events = EventRecorder(api_client, node_name, dry_run=reporting)
    sync = ClusterSync(watcher=watcher, evictor=kube_evictor, node_writer=node_writer, events=node_events,
                       on_error=api_error, log=log, runtime=runtime, critical=critical, should_stop=should_stop,
                       reclaim_event_period_s=settings.housekeeping_interval_s,
                       standby=lease.standby_reason if lease is not None else lambda: None,
                       volumes_left=disk_volumes_left(settings.kubelet_root_dir), reports_only=reporting)
    own_uid = os.environ.get(POD_UID_ENV, "")
    pods = EvictablePods(watcher, journal, own_uid=own_uid)
    shadow = ShadowComparer(watcher.pods, settings.state_dir, metrics.count_shadow_comparison, log)
    route = None
    if kube_evictor is not None and settings.soft_evictions_through_eviction_api:
        route = EvictionApiRoute(EvictionRequests(kube_evictor), settings.eviction_api_max_candidates,
                                 settings.eviction_api_deadline_s,
                                 pending_release=BackgroundEvictions(watcher, journal).pending_release,
                                 active=lambda: not reporting())
    # The mode's label and Events: a recorder of their own, never in dry-run (they say the mode changed). With
    # `--dry-run` the watch reads the kubelet's version only, its first read not waited for (no label is followed).
    node_watch = NodeLabelWatch(api_client, node_name, EventRecorder(api_client, node_name, dry_run=dry_run), log=log,
                                period_s=settings.node_status_update_frequency_s, on_error=api_error,
                                on_kubelet=on_kubelet, read_at_start=not dry_run)
    mode_watch = None if dry_run else node_watch
    return ClusterParts(pods=pods, node_pods=NodeFallbackPods(discovered, journal, own_uid, critical),
                        evictor=evictor, sync=sync, watcher=watcher, shadow=shadow,
                        journal=journal, pod_watch=PodWatchStart(watcher, log), eviction_api=route, lease=lease,
                        terminating=TerminatingEvictions(watcher, journal), mode_watch=mode_watch,
                        node_watch=node_watch,
                        reports_only=reporting, api=api_client)


def disk_volumes_left(kubelet_root: str) -> Callable[[str], bool]:
    """Whether a pod (by UID) still has disk-backed emptyDir volumes under `kubelet_root` (False where its volumes
    folder cannot be read: the wait after an eviction cannot tell, and does not hang on it)."""
    def left(uid: str) -> bool:
        try:
            return bool(volume_dirs(kubelet_root, uid))
        except SampleError:
            return False
    return left


def pod_states(watcher: PodWatcher | None) -> tuple[PodStateFunc, Callable[[], bool]]:
    """Return the container GC's pod-state function and its "all sources ready" flag: with the API, a watched pod is
    ACTIVE (TERMINATED once terminal or deleting), an unwatched one DELETED once synced; without, every pod is ACTIVE
    and sources never ready."""
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


def acting_elsewhere(cluster: ClusterParts) -> bool:
    """True when another evictd holds the node Lease now (`NodeLease.standby_reason`): nothing is written."""
    return cluster.lease is not None and cluster.lease.standby_reason() is not None


def withdraw_unless_lost(cluster: ClusterParts) -> Callable[[], None]:
    """The stop's withdrawal of the node conditions and taints, skipped when another evictd holds the Lease (they
    are its own)."""

    def withdraw() -> None:
        if not acting_elsewhere(cluster):
            cluster.sync.withdraw()

    return withdraw


def cluster_bookkeeping(cluster: ClusterParts, metrics: Metrics,
                        wake_pending: Callable[[], bool] = lambda: False) -> AfterCycle:
    """Node status, events and the journal's pending writes; the pending evictions exported; in dry-run the
    shadow comparison with the kubelet's own evictions. The wait for the node's report ends early once a wake-up is
    pending (`wake_pending`: the waiter's): the cycle it asks for comes first."""

    def update(cycle: Cycle) -> None:
        if acting_elsewhere(cluster):  # lost during the cycle: the holder writes the node now
            return
        cluster.sync.after_cycle(cycle.report.decided.assessment, cycle.report.oom,
                                 memory_reclaim_event(cycle.report.acted), interrupted=wake_pending)
        metrics.journal_pending.set(len(cluster.journal.pending()))
        if cluster.shadow is not None and cluster.reports_only():
            cluster.shadow.after_cycle(cycle.report.acted.evictions)

    return update

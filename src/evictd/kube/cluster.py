"""What the daemon does in the cluster after each cycle, and the pods it offers the engine.

`ClusterSync.after_cycle` hands node conditions, taints and events (pressure transitions, `EvictionThresholdMet`
at most once per interval as the kubelet, evictd's OOM-kill Warnings) to `NodeReporter`, which writes them off the
loop, and retries the journal's pending writes. `wait_for_cleanup` is the kubelet's `waitForPodsCleanup` (at most
30 s): until each evicted pod is gone from the API or nothing of it runs on the node (the phase is no evidence), ended
early when `pause` says a hard threshold is met (then the next cycle escalates: `TerminatingEvictions`). A pod
evicted at once still running `OVERDUE_MARGIN_S` past its grace period is stopped locally (a starved kubelet may
not have begun; docs/kubelet-differences.md). The engine ranks `EvictablePods`, or `NodeFallbackPods` while there
is no pod list (hard thresholds only, stopped through the runtime, journaled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Assessment, Eviction
from evictd.core.engine_rules import IMMEDIATE_EVICTION_GRACE_PERIOD_S, stop_grace_period_s
from evictd.core.errors import EvictdError, KubeError
from evictd.core.oom import OomReport
from evictd.core.pods import CONFIG_SOURCE_ANNOTATION, EVICTION_IN_PROGRESS_ANNOTATION, Pod
from evictd.core.signals import spec_of
from evictd.cri import NO_RUNTIME, Runtime
from evictd.kube.critical_record import CriticalPodRecord
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import REMEMBER_DONE_S, ApiStep, EvictionJournal
from evictd.kube.node_reporting import REPORT_WAIT_S, NodeReporter
from evictd.kube.node_writer import NodeStatusWriter
from evictd.kube.pod_watch import PodWatcher
from evictd.log import Log

# The kubelet's podCleanupTimeout: how long it waits for evicted pods to disappear.
POD_CLEANUP_TIMEOUT_S = 30.0
# The kubelet polls every second (podCleanupPollFreq); shorter ends the wait sooner for cheap lookups.
POD_CLEANUP_POLL_S = 0.2
# Past its grace by this much a pod evicted at once is stopped locally (a healthy kubelet: 0.5-3.2 s after DELETE).
OVERDUE_MARGIN_S = 3.0

# On a clean stop each node request may wait this long: the stop must finish well inside the shutdown deadline.
WITHDRAW_TIMEOUT_S = 2.0
# Each pending eviction write retried after a cycle waits at most this (on the loop's path).
REPLAY_TIMEOUT_S = 2.0


# Without the API priorities are unknown: kube-system (the critical classes' home) never offers candidates then.
SYSTEM_NAMESPACE = "kube-system"


class EvictablePods:
    """The engine's PodSource over the watch: active pods whose eviction by evictd is not under way, not evictd's
    own. A pod someone else is deleting stays a candidate, as in the kubelet (a tenant's long-grace deletion must not
    make evictd evict everybody else); evicting it shortens its deletion."""

    def __init__(self, watcher: PodWatcher, journal: EvictionJournal, own_uid: str = "") -> None:
        self._watcher = watcher
        self._journal = journal
        self._own_uid = own_uid

    def active_pods(self) -> Sequence[Pod]:
        excluded = self._journal.under_way_uids() | {self._own_uid}
        return [p for p in self._watcher.active_pods() if p.uid not in excluded]


class TerminatingEvictions:
    """The pods evictd evicted that are still listed and may hold what the node lacks, ranked again for a hard
    threshold while `still_running`: those evicted with a longer grace than a hard threshold gives (escalated once,
    with the hard grace), and those stopped on the node (the kubelet may restart them before it sees the deletion).
    `EvictablePods` leaves them out: a soft threshold must not evict them again."""

    def __init__(self, watcher: PodWatcher, journal: EvictionJournal) -> None:
        self._watcher = watcher
        self._journal = journal

    def active_pods(self) -> Sequence[Pod]:
        evicted = self._journal.evicted_uids()
        if not evicted:
            return []
        pods = []
        for pod in self._watcher.active_pods():
            if pod.uid not in evicted:
                continue
            entry = self._journal.get(pod.uid)
            if entry.stopped_locally or entry.grace_period_s > IMMEDIATE_EVICTION_GRACE_PERIOD_S:
                pods.append(pod)
        return pods


# How long a pod evicted in the background holds soft evictions: as long as the journal remembers it.
PENDING_RELEASE_DEADLINE_S = REMEMBER_DONE_S


class BackgroundEvictions:
    """Which pod an accepted eviction is still releasing in the background (someone else carries it out, e.g.
    KubeVirt: annotated `descheduler.alpha.kubernetes.io/eviction-in-progress`, not deleted): `pending_release` until
    deleted, gone or `deadline_s` on; soft evictions wait for it (as the descheduler since v0.37.0)."""

    def __init__(self, watcher: PodWatcher, journal: EvictionJournal, *, deadline_s: float = PENDING_RELEASE_DEADLINE_S,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._watcher = watcher
        self._journal = journal
        self._deadline_s = deadline_s
        self._clock = clock

    def pending_release(self) -> str | None:
        """The pod (namespace/name) pending release, if any; None when none is."""
        now = self._clock.wall().timestamp()
        for uid in self._journal.evicted_uids():
            entry = self._journal.get(uid)
            accepted = entry.eviction_api and ApiStep.DELETION in entry.done
            if not accepted or now - entry.decided_at >= self._deadline_s:
                continue
            pod = self._watcher.pod(uid)
            in_background = pod is not None and EVICTION_IN_PROGRESS_ANNOTATION in pod.annotations
            if pod is not None and in_background and pod.deletion_timestamp is None:
                return pod.key
        return None


class NodePods(Protocol):
    """The pods found on the node without the API (`evictd.adapters.node_pods.DiscoveredPods`), named by the
    container runtime: `sandbox_problem` says why the runtime could not name those of the last listing."""

    @property
    def runtime_attached(self) -> bool: ...

    @property
    def sandbox_problem(self) -> str | None: ...

    def active_pods(self) -> Sequence[Pod]: ...


class NodeFallbackPods:
    """The engine's PodSource while the API gave no pod list: the node's pods in a ready sandbox from the API or a
    static pod (`config.source`); not those of unknown origin, kube-system, recorded critical, evictd's own, or
    already evicted. Raises EvictdError without a runtime or a sandbox listing: nothing could be stopped."""

    def __init__(self, node: NodePods, journal: EvictionJournal, own_uid: str = "",
                 critical: CriticalPodRecord | None = None) -> None:
        self._node = node
        self._journal = journal
        self._own_uid = own_uid
        self._critical = critical if critical is not None else CriticalPodRecord(None)

    def active_pods(self) -> Sequence[Pod]:
        if not self._node.runtime_attached:
            raise EvictdError("no container runtime answers: no pod found on the node could be stopped")
        pods = self._node.active_pods()
        if self._node.sandbox_problem is not None:
            raise EvictdError(self._node.sandbox_problem)
        excluded = self._journal.under_way_uids() | self._critical.uids() | {self._own_uid}
        return [pod for pod in pods if CONFIG_SOURCE_ANNOTATION in pod.annotations
                and pod.namespace != SYSTEM_NAMESPACE and pod.uid not in excluded]


class ClusterSync:
    """Node status and events (handed to `NodeReporter`, written off the loop), journal replay and the record of
    critical pods, after every cycle."""

    def __init__(self, *, watcher: PodWatcher, evictor: KubePodEvictor | None, node_writer: NodeStatusWriter,
                 events: EventRecorder, on_error: Callable[[KubeError], None], log: Log, runtime: Runtime = NO_RUNTIME,
                 critical: CriticalPodRecord | None = None, should_stop: Callable[[], bool] = lambda: False,
                 reclaim_event_period_s: float = 0.0, clock: Clock = SYSTEM_CLOCK,
                 report_wait_s: float = REPORT_WAIT_S, standby: Callable[[], str | None] = lambda: None,
                 volumes_left: Callable[[str], bool] = lambda uid: False,
                 reports_only: Callable[[], bool] = lambda: False) -> None:
        # While the node's mode is dry-run, pending eviction writes wait for it to act again.
        self._reports_only = reports_only
        # Polled during the wait after an eviction: a daemon asked to stop gives up waiting.
        self._should_stop = should_stop
        # Whether a pod (by UID) still has disk-backed emptyDir volumes on this node (False: none, or cannot tell).
        self._volumes_left = volumes_left
        self._runtime = runtime
        self._clock = clock
        self._watcher = watcher
        self._evictor = evictor
        self._log = log
        self._critical = critical
        # `events` is the node's own recorder: written on the reporter's thread (the evictor's pod events have theirs).
        self._reporter = NodeReporter(node_writer, events, on_error=on_error, log=log,
                                      reclaim_event_period_s=reclaim_event_period_s, clock=clock, wait_s=report_wait_s,
                                      standby=standby)

    def after_cycle(self, assessment: Assessment, oom: OomReport | None, note: tuple[str, str] | None = None, *,
                    interrupted: Callable[[], bool] = lambda: False) -> None:
        """Hand the cycle's node `assessment`, OOM kills and `note` (a Normal event) to the reporter, waiting at most
        its `wait_s` or until `interrupted`; retry pending eviction writes (not in dry-run); record critical pods."""
        self._remember_critical_pods()
        self._reporter.submit(assessment, oom, note, interrupted=interrupted)
        if self._evictor is not None and not self._reports_only():
            for error in self._evictor.replay(REPLAY_TIMEOUT_S):
                self._log.warning("pending eviction writes still failing", error=str(error))

    def _remember_critical_pods(self) -> None:
        if self._critical is None or not self._watcher.is_synced():
            return
        before = self._critical.problem
        if self._critical.remember(self._watcher.active_pods()) and self._critical.problem not in (None, before):
            self._log.warning("critical pods not remembered for an API outage", error=self._critical.problem)

    def withdraw(self) -> None:
        """On a clean stop: what the reporter holds written, then evictd's node conditions to Unknown and its taints
        removed (logged, never raised)."""
        try:
            self._reporter.withdraw(WITHDRAW_TIMEOUT_S)
        except KubeError as exc:
            self._log.warning("node conditions and taints left as they were at stop", error=str(exc))
            return
        self._log.info("node conditions set to Unknown and taints removed at stop", node=self._reporter.node_name)

    def wait_for_cleanup(self, evictions: Sequence[Eviction], pause: Callable[[float], bool] | None = None) -> bool:
        """Wait (at most 30 s, until `should_stop`, or until `pause(seconds)` returns True: a hard threshold met)
        for the evicted pods to be cleaned up; return whether they were."""
        waiting = [e.pod.uid for e in evictions]
        # A pod evicted for disk is cleaned up only once its disk-backed emptyDirs are gone too (PodIsFinished).
        for_disk = {e.pod.uid for e in evictions
                    if e.threshold is None or spec_of(e.threshold.signal).filesystem is not None}
        started = self._clock.monotonic()
        deadline = started + POD_CLEANUP_TIMEOUT_S
        # The evictions carried out at once, each with when its pod is overdue (its stop's grace plus the margin).
        overdue = {e.pod.uid: (e, started + stop_grace_period_s(e.effective_grace_period_s) + OVERDUE_MARGIN_S)
                   for e in evictions if self._evictor is not None and (e.threshold is None or e.threshold.is_hard)}
        while True:
            waiting = [uid for uid in waiting
                       if not self._cleaned_up(uid) or (uid in for_disk and self._volumes_left(uid))]
            if not waiting:
                return True
            now = self._clock.monotonic()
            for uid in waiting:
                if uid in overdue and now >= overdue[uid][1]:
                    self._stop_overdue(overdue.pop(uid)[0])
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0 or self._should_stop():
                return False
            if pause is None:
                self._clock.sleep(min(POD_CLEANUP_POLL_S, remaining))
            elif pause(min(POD_CLEANUP_POLL_S, remaining)):
                return False

    def _stop_overdue(self, eviction: Eviction) -> None:
        """Stop locally an evicted pod that still runs past its grace period, and say so (a failure is logged)."""
        assert self._evictor is not None
        try:
            how = self._evictor.stop_overdue(eviction)
        except EvictdError as exc:
            self._log.warning("evicted pod still running past its grace period; local stop failed",
                              pod=eviction.pod.key, error=str(exc))
            return
        if how is not None:
            self._log.warning("evicted pod still running past its grace period: stopped locally", pod=eviction.pod.key,
                              how=how, grace_period_s=stop_grace_period_s(eviction.effective_grace_period_s))

    def _cleaned_up(self, uid: str) -> bool:
        """Gone from the API, or nothing of it runs here (before the first pod list only the runtime can tell)."""
        if self._watcher.is_synced() and self._watcher.pod(uid) is None:
            return True
        return self._runtime.pod_running(uid) is False  # None: no runtime can tell

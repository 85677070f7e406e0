"""What the daemon does in the cluster after each cycle, and the pods it offers the engine.

`ClusterSync.after_cycle` writes the node's conditions and taints, records the kubelet's node events
(pressure transitions, `EvictionThresholdMet: Attempting to reclaim <resource>`) and evictd's own Warning events
for OOM kills (`EvictionTooLate`, `OOMKill`), and retries the journal's pending API writes. `wait_for_cleanup`
is the kubelet's wait after an eviction (`waitForPodsCleanup`, at most 30 s): until each evicted pod is gone
from the API or, with a container runtime, nothing of it runs on the node any more (the part of the kubelet's
`podResourcesAreReclaimed` visible from outside it). The pod's phase is no evidence: a terminal phase can come
before the last container stops, and a pod held by a finalizer stays.
`EvictablePods` is the engine's pod source: the watched pods minus those evictd already evicted (journal), so
no pod is evicted twice; pods others are deleting stay candidates, as in the kubelet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from evictd.core.engine import Eviction
from evictd.core.errors import KubeError
from evictd.core.oom import oom_kill_events
from evictd.core.pods import Pod
from evictd.kube.events import EventRecorder, record_quietly
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal
from evictd.kube.node_writer import NodeStatusWriter
from evictd.kube.pod_watch import PodWatcher
from evictd.manager import CycleReport

# The kubelet's podCleanupTimeout: how long it waits for evicted pods to disappear.
POD_CLEANUP_TIMEOUT_S = 30.0
# The kubelet polls every second (podCleanupPollFreq); a shorter poll ends the wait sooner, for a dict lookup
# and at most two CRI list calls per pod.
POD_CLEANUP_POLL_S = 0.2

# On a clean stop each node request may wait this long: the stop must finish well inside the shutdown deadline.
WITHDRAW_TIMEOUT_S = 2.0

# Whether anything of the pod with this UID still runs on the node; None when the runtime cannot tell.
PodRunning = Callable[[str], bool | None]


class EvictablePods:
    """The engine's PodSource over the watch: active pods not yet evicted by evictd, and not evictd's own.

    A pod someone else is deleting stays a candidate, as in the kubelet (its containers run until its grace
    period ends, and they are what the node is short of): a tenant who deletes its own hog with a one-hour
    grace period and traps SIGTERM must not make evictd evict everybody else. Evicting such a pod shortens its
    deletion (the DELETE with the eviction's grace period; the API server takes a shorter one).
    """

    def __init__(self, watcher: PodWatcher, journal: EvictionJournal, own_uid: str = "") -> None:
        self._watcher = watcher
        self._journal = journal
        self._own_uid = own_uid

    def active_pods(self) -> Sequence[Pod]:
        excluded = self._journal.evicted_uids() | {self._own_uid}
        return [p for p in self._watcher.active_pods() if p.uid not in excluded]


class ClusterSync:
    """Node status, node events and journal replay, after every cycle."""

    def __init__(
        self,
        *,
        watcher: PodWatcher,
        evictor: KubePodEvictor | None,
        node_writer: NodeStatusWriter,
        events: EventRecorder,
        on_error: Callable[[KubeError], None],
        log: Any,
        pod_running: PodRunning | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Polled during the wait: a daemon asked to stop gives up waiting (set by the composition root).
        self.should_stop: Callable[[], bool] = lambda: False
        self._pod_running = pod_running
        self._clock = clock
        self._sleep = sleep
        self._watcher = watcher
        self._evictor = evictor
        self._node_writer = node_writer
        self._events = events
        self._on_error = on_error
        self._log = log

    def use_pod_running(self, pod_running: PodRunning) -> None:
        """Ask the container runtime whether an evicted pod still runs (a runtime that answered late)."""
        self._pod_running = pod_running

    def after_cycle(self, report: CycleReport) -> None:
        """Write what the cycle decided about the node; retry pending eviction writes."""
        assessment = report.assessment
        if assessment.skipped is None:
            try:
                node = self._events.node_ref()
                for reason, condition in self._node_writer.update(assessment.node_conditions):
                    # The kubelet's recordNodeStatusEvent wording: "Node %s status is now: %s".
                    self._event(node, "Normal", reason, f"Node {node.name} status is now: {reason}",
                                condition=condition)
            except KubeError as exc:
                self._on_error(exc)
                self._log.warning("node status not written", error=str(exc))
        if assessment.resource_to_reclaim is not None and not assessment.local_storage_evictions:
            self._event(self._events.node_ref(), "Warning", "EvictionThresholdMet",
                        f"Attempting to reclaim {assessment.resource_to_reclaim}")
        if report.oom is not None:
            for reason, message in oom_kill_events(report.oom):
                self._event(self._events.node_ref(), "Warning", reason, message)
        if self._evictor is not None:
            for error in self._evictor.replay():
                self._log.warning("pending eviction writes still failing", error=str(error))

    def withdraw(self) -> None:
        """On a clean stop: evictd's node conditions to Unknown and its taints removed (logged, never raised)."""
        try:
            self._node_writer.withdraw(WITHDRAW_TIMEOUT_S)
        except KubeError as exc:
            self._on_error(exc)
            self._log.warning("node conditions and taints left as they were at stop", error=str(exc))
            return
        self._log.info("node conditions set to Unknown and taints removed at stop", node=self._events.node_ref().name)

    def _event(self, ref: Any, event_type: str, reason: str, message: str, **fields: Any) -> None:
        def failed(exc: KubeError) -> None:
            self._on_error(exc)
            self._log.warning("event not recorded", reason=reason, error=str(exc), **fields)

        record_quietly(self._events, ref, event_type, reason, message, on_error=failed)

    def wait_for_cleanup(self, evictions: Sequence[Eviction]) -> bool:
        """Wait (at most 30 s, or until `should_stop`) for the evicted pods to be cleaned up; return if they were."""
        waiting = [e.pod.uid for e in evictions]
        deadline = self._clock() + POD_CLEANUP_TIMEOUT_S
        while True:
            waiting = [uid for uid in waiting if not self._cleaned_up(uid)]
            if not waiting:
                return True
            remaining = deadline - self._clock()
            if remaining <= 0 or self.should_stop():
                return False
            self._sleep(min(POD_CLEANUP_POLL_S, remaining))

    def _cleaned_up(self, uid: str) -> bool:
        """Gone from the API (its kubelet deletes it once its containers stopped), or nothing of it runs here."""
        if self._watcher.pod(uid) is None:
            return True
        if self._pod_running is None:
            return False
        return self._pod_running(uid) is False

"""What the daemon does in the cluster after each cycle, and the pods it offers the engine.

`ClusterSync.after_cycle` writes the node's conditions and taints, records the kubelet's node events
(pressure transitions, `EvictionThresholdMet: Attempting to reclaim <resource>`), and retries the journal's
pending API writes. `wait_for_cleanup` is the kubelet's wait after an eviction: poll (here: the watch) until
the evicted pods are gone, at most 30 s. `EvictablePods` is the engine's pod source: the watched pods minus
those evictd already evicted (journal) and those already being deleted, so no pod is evicted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evictd.core.engine import Eviction
from evictd.core.errors import KubeError
from evictd.core.pods import Pod
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal
from evictd.kube.node_writer import NodeStatusWriter
from evictd.kube.pod_watch import PodWatcher
from evictd.manager import CycleReport

# The kubelet's podCleanupTimeout: how long it waits for evicted pods to disappear.
POD_CLEANUP_TIMEOUT_S = 30.0


class EvictablePods:
    """The engine's PodSource over the watch: active pods not yet evicted, not being deleted, and not evictd's own."""

    def __init__(self, watcher: PodWatcher, journal: EvictionJournal, own_uid: str = "") -> None:
        self._watcher = watcher
        self._journal = journal
        self._own_uid = own_uid

    def active_pods(self) -> Sequence[Pod]:
        excluded = self._journal.evicted_uids() | {self._own_uid}
        return [p for p in self._watcher.active_pods() if p.uid not in excluded and p.deletion_timestamp is None]


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
    ) -> None:
        self._watcher = watcher
        self._evictor = evictor
        self._node_writer = node_writer
        self._events = events
        self._on_error = on_error
        self._log = log

    def after_cycle(self, report: CycleReport) -> None:
        """Write what the cycle decided about the node; retry pending eviction writes."""
        assessment = report.assessment
        if assessment.skipped is None:
            try:
                for reason, condition in self._node_writer.update(assessment.node_conditions):
                    self._event(self._events.node_ref(), "Normal", reason,
                                f"Node status is now: {reason}", condition=condition)
            except KubeError as exc:
                self._on_error(exc)
                self._log.warning("node status not written", error=str(exc))
        if assessment.resource_to_reclaim is not None and not assessment.local_storage_evictions:
            self._event(self._events.node_ref(), "Warning", "EvictionThresholdMet",
                        f"Attempting to reclaim {assessment.resource_to_reclaim}")
        if self._evictor is not None:
            for error in self._evictor.replay():
                self._log.warning("pending eviction writes still failing", error=str(error))

    def _event(self, ref: Any, event_type: str, reason: str, message: str, **fields: Any) -> None:
        try:
            self._events.record(ref, event_type, reason, message)
        except KubeError as exc:
            self._on_error(exc)
            self._log.warning("event not recorded", reason=reason, error=str(exc), **fields)

    def wait_for_cleanup(self, evictions: Sequence[Eviction]) -> bool:
        """Wait (at most 30 s) until the evicted pods are gone; return whether they all went."""
        return self._watcher.wait_gone([e.pod.uid for e in evictions], POD_CLEANUP_TIMEOUT_S)

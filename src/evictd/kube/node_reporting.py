"""The node's conditions, taints and events, written on a thread of their own: never on the loop's path to a decision.

What a cycle decided about the node is handed to `NodeReporter.submit` and written by its thread; the loop waits at
most `REPORT_WAIT_S`, and not once a wake-up is pending, so a hung API server (on a node in thrash) never delays a
decision. The kubelet is built the same way (its status loop writes what the eviction manager says). Reports handed
over meanwhile merge: the newest assessment, every OOM report, every reclaim event due. A clean stop writes what is
held (within the deadline) before withdrawing; a report is dropped while evictd stands by (`standby`), so a resumed
process never writes over another holder.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Assessment, ReclaimThenEvict, Skipped
from evictd.core.errors import KubeError
from evictd.core.oom import OomReport, oom_kill_events
from evictd.kube.events import EventRecorder
from evictd.kube.node_writer import NodeStatusWriter, StandingBy
from evictd.log import Log

# How long the loop waits for a report to be written before it goes on (an API that answers takes milliseconds).
REPORT_WAIT_S = 1.0
# How often the wait asks whether a wake-up is pending (a crossing found meanwhile is decided first).
INTERRUPT_POLL_S = 0.02
# The kubelet records EvictionThresholdMet once per monitoring period: one per resource per `reclaim_event_period_s`
# (the interval), the first at once; a cycle ending this share of the period early counts as the next.
RECLAIM_EVENT_EARLY_FRACTION = 0.04


@dataclass
class NodeReport:
    """What is to be written about the node: the newest assessment that sets its status, the OOM kill reports and
    the resources a reclaim event is due for, in the order the cycles found them."""

    assessment: Assessment | None = None
    ooms: list[OomReport] = field(default_factory=list)
    reclaimed: list[tuple[str, float]] = field(default_factory=list)  # (resource, when the cycle asked, monotonic)
    # Normal events of evictd's own on the node, (reason, message): what reclaim before evict did.
    notes: list[tuple[str, str]] = field(default_factory=list)

    def merged(self, newer: NodeReport) -> NodeReport:
        return NodeReport(newer.assessment if newer.assessment is not None else self.assessment,
                          self.ooms + newer.ooms, self.reclaimed + newer.reclaimed, self.notes + newer.notes)


class NodeReporter:
    """Writes node reports on its thread (see the module's description)."""

    def __init__(self, node_writer: NodeStatusWriter, events: EventRecorder, *, on_error: Callable[[KubeError], None],
                 log: Log, reclaim_event_period_s: float = 0.0, clock: Clock = SYSTEM_CLOCK,
                 wait_s: float = REPORT_WAIT_S, standby: Callable[[], str | None] = lambda: None) -> None:
        self._standby = standby
        self._node_writer = node_writer
        self._events = events
        self._on_error = on_error
        self._log = log
        self._reclaim_event_period_s = reclaim_event_period_s
        self._clock = clock
        self._wait_s = wait_s
        self._reclaim_events_at: dict[str, float] = {}  # the last EvictionThresholdMet recorded, by resource
        self._pending: NodeReport | None = None
        self._writing = False
        self._stopped = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def node_name(self) -> str:
        return self._events.node_ref().name

    def submit(self, assessment: Assessment, oom: OomReport | None, note: tuple[str, str] | None = None, *,
               interrupted: Callable[[], bool] = lambda: False) -> None:
        """Hand over what one cycle decided about the node (and `note`, a Normal event), and wait for its write at
        most `wait_s` or until `interrupted` (polled every INTERRUPT_POLL_S)."""
        report = NodeReport(None if isinstance(assessment.next_step, Skipped) else assessment,
                            [] if oom is None else [oom],
                            [(assessment.next_step.resource, self._clock.monotonic())]
                            if isinstance(assessment.next_step, ReclaimThenEvict) else [],
                            [] if note is None else [note])
        with self._changed:
            if self._stopped:
                return
            self._pending = report if self._pending is None else self._pending.merged(report)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="evictd-node-report", daemon=True)
                self._thread.start()
            self._changed.notify_all()
        self.wait_written(self._wait_s, interrupted)

    def wait_written(self, timeout_s: float, interrupted: Callable[[], bool] = lambda: False) -> bool:
        """Wait (at most `timeout_s`, real time: a thread is waited for, and not once `interrupted` says so) until
        everything handed over is written; return whether it is."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._pending is not None or self._writing:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or interrupted():
                    return False
                self._changed.wait(min(remaining, INTERRUPT_POLL_S))
            return True

    def withdraw(self, timeout_s: float) -> None:
        """At a clean stop: write what is held (at most `timeout_s`), stop the thread, then set evictd's conditions to
        Unknown and remove its taints (each request at most `timeout_s`). Raises KubeError."""
        written = self.wait_written(timeout_s)
        with self._changed:
            self._stopped = True
            self._pending = None
            self._changed.notify_all()
        if not written:
            self._log.warning("node report still being written at stop: the withdrawal may be overwritten by it")
        self._node_writer.withdraw(timeout_s)

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._pending is None and not self._stopped:
                    self._changed.wait()
                report = self._pending
                if self._stopped or report is None:
                    return
                self._pending, self._writing = None, True
            try:
                if self._standby() is None:  # another evictd holds the node now (a report held over a pause): its own
                    self._write(report)
            except Exception:  # a loop of its own: a bug in one report must not end the node's reporting
                self._log.exception("node report not written")
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()

    def _write(self, report: NodeReport) -> None:
        if report.assessment is not None:
            try:
                node = self._events.node_ref().name
                for reason, condition in self._node_writer.update(report.assessment.node_conditions):
                    # The kubelet's recordNodeStatusEvent wording: "Node %s status is now: %s".
                    self._node_event("Normal", reason, f"Node {node} status is now: {reason}", condition=condition)
            except StandingBy:
                pass  # paused between the check above and the write: the holder writes the node now
            except KubeError as exc:
                self._on_error(exc)
                self._log.warning("node status not written", error=str(exc))
        for resource, asked_at in report.reclaimed:
            self._reclaim_event(resource, asked_at)
        for oom in report.ooms:
            for reason, message in oom_kill_events(oom):
                self._node_event("Warning", reason, message)
        for reason, message in report.notes:
            self._node_event("Normal", reason, message)

    def _reclaim_event(self, resource: str, asked_at: float) -> None:
        """`EvictionThresholdMet` for `resource`, unless one was recorded less than a period before `asked_at`."""
        last = self._reclaim_events_at.get(resource)
        if last is not None and asked_at - last < self._reclaim_event_period_s * (1 - RECLAIM_EVENT_EARLY_FRACTION):
            return
        self._reclaim_events_at[resource] = asked_at
        self._node_event("Warning", "EvictionThresholdMet", f"Attempting to reclaim {resource}")

    def _node_event(self, event_type: str, reason: str, message: str, **fields: Any) -> None:
        """Record an event on the node; a failure is counted and logged, never raised (events are best effort)."""
        try:
            self._events.record(self._events.node_ref(), event_type, reason, message)
        except KubeError as exc:
            self._on_error(exc)
            self._log.warning("event not recorded", reason=reason, error=str(exc), **fields)

"""`evictd run`: the housekeeping loop of the live daemon.

One synchronous loop: run a cycle (the eviction manager over the adapters), export metrics, log what changed,
redraw the live view, refresh the memory notifiers when due, then sleep until the next tick or until a
notifier or a signal wakes it (a notification is followed by one confirming cycle a second later).
SIGTERM/SIGINT only set a stop flag and wake the loop: the current cycle finishes, `on_stop` withdraws what
evictd keeps on the node (in the cluster: its taints, its conditions to Unknown) and the daemon exits 0; a
hard deadline (a watchdog thread started with the signal handlers, armed by the first signal through a pipe)
ends a hung shutdown with status 1. Only this loop catches
broad exceptions; it logs them with the cycle number and carries on. Work that must never delay a cycle (the
walk of pods' volumes and logs) runs beside the loop, in `background` parts started and stopped with it.

The composition root (`evictd.composition.build_daemon`) builds every dependency from the configuration;
tests pass their own.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Protocol, TextIO

import structlog

from evictd.core.engine import Eviction
from evictd.core.memcg import notifier_refresh_due
from evictd.core.signals import MEMORY_SIGNALS
from evictd.cycle_logging import CycleLogger
from evictd.http_endpoint import Health, HttpEndpoint
from evictd.live_view import CLEAR_SCREEN, render
from evictd.logging_setup import RecentEvents
from evictd.manager import CycleReport, EvictionManager
from evictd.metrics import Metrics
from evictd.oom_feedback import OomFeedback
from evictd.systemd_notify import SystemdNotifier

# Exit status when the shutdown deadline passes with the cycle still running.
EXIT_SHUTDOWN_DEADLINE = 1
# A memory notification fires at the moment usage crosses a level, often while the kernel is still
# charging or freeing pages; the cycle it triggers may see the old side. Cycles follow at these delays after
# a notification until one sees a memory threshold met: a crossing that was a few pages short is decided
# within milliseconds, and the last one confirms the settled state a second later, instead of waiting a whole
# housekeeping interval. (One second alone left 2 of 50 black-box crossings decided ~1 s late.)
NOTIFICATION_FOLLOW_UPS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
NOTIFICATION_CAUSES = frozenset({"memcg", "psi"})


class ShutdownDeadline:
    """Ends a hung shutdown with status 1; armed from a signal handler without taking any Python lock.

    A watchdog thread, started before any signal can arrive, blocks reading a pipe. `arm` writes one byte
    (`os.write` takes no lock and is async-signal-safe); the thread then waits `timeout_s` for `disarm`'s byte
    and calls `on_expiry` if none came. Starting a `threading.Timer` in the handler instead could deadlock: it
    takes threading's internal locks, which the interrupted main thread may be holding.
    """

    ARM = b"a"
    DISARM = b"d"

    def __init__(self, timeout_s: float, on_expiry: Callable[[], None]) -> None:
        self._timeout_s = timeout_s
        self._on_expiry = on_expiry
        self._read_fd, self._write_fd = os.pipe()
        self._thread = threading.Thread(target=self._watch, name="evictd-shutdown-deadline", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        """Start the countdown. Safe in a signal handler."""
        os.write(self._write_fd, self.ARM)

    def disarm(self) -> None:
        """The loop finished: the countdown (running or not) ends without effect, and the thread with it."""
        os.write(self._write_fd, self.DISARM)
        self._thread.join(timeout=1.0)
        for fd in (self._read_fd, self._write_fd):
            os.close(fd)

    def _watch(self) -> None:
        if os.read(self._read_fd, 1) != self.ARM:
            return
        readable, _, _ = select.select([self._read_fd], [], [], self._timeout_s)
        if not readable:
            self._on_expiry()


class Background(Protocol):
    """Work that runs beside the loop for as long as it runs (the disk walker process)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Waiter(Protocol):
    """What the loop sleeps on (evictd.adapters.notifiers.Waiter in production)."""

    def wait(self, timeout_s: float) -> list[str]: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class Daemon:
    """The running daemon; `run()` returns the process exit status."""

    manager: EvictionManager
    waiter: Waiter
    metrics: Metrics
    health: Health
    interval_s: float
    dry_run: bool
    node_name: str
    shutdown_timeout_s: float = 15.0
    max_cycles: int = 0
    refresh_notifiers: Callable[[CycleReport], list[str]] | None = None
    live_output: TextIO | None = None
    recent: RecentEvents | None = None
    on_cycle: Callable[[int, CycleReport], None] | None = None
    # In the cluster: write node status/events and replay pending writes; wait for evicted pods to go.
    after_cycle: Callable[[CycleReport], None] | None = None
    wait_for_cleanup: Callable[[Sequence[Eviction]], bool] | None = None
    # In the cluster: what a clean stop leaves on the node (conditions Unknown, taints removed).
    on_stop: Callable[[], None] | None = None
    # Started before the first cycle, stopped after the last: never waited for by a cycle.
    background: Sequence[Background] = ()
    # The kernel's OOM kills since the last cycle, judged against what evictd was doing.
    oom_feedback: OomFeedback | None = None
    systemd: SystemdNotifier = field(default_factory=SystemdNotifier)
    log: Any = field(default_factory=lambda: structlog.get_logger("evictd"))
    stopping: bool = False
    stop_reason: str = ""
    _deadline: ShutdownDeadline | None = None

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop after the current cycle; arm the hard deadline. Safe to call from a signal handler.

        Nothing here logs or takes a lock: a signal can arrive while the loop holds the logging lock, or
        threading's own locks. The loop logs the reason once it sees the flag.
        """
        if self.stopping:
            return
        self.stop_reason = reason
        # The deadline is armed before the loop is woken, so the loop's exit always finds it to disarm.
        if self._deadline is not None:
            self._deadline.arm()
        self.stopping = True
        self.health.stopping = True
        self.waiter.wake()

    def _deadline_passed(self) -> None:
        self.log.error("shutdown deadline passed with the cycle still running; exiting",
                       deadline_s=self.shutdown_timeout_s)
        os._exit(EXIT_SHUTDOWN_DEADLINE)

    def install_signal_handlers(self) -> None:
        """Stop on SIGTERM/SIGINT; the shutdown deadline's watchdog starts first (a handler cannot start it)."""
        if self._deadline is None:
            self._deadline = ShutdownDeadline(self.shutdown_timeout_s, self._deadline_passed)

        def handler(signum: int, frame: FrameType | None) -> None:
            self.request_stop(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> int:
        """Run cycles until stopped (or `max_cycles` ran); return the exit status."""
        cycle_logger = CycleLogger(self.log, self.dry_run)
        last_refresh: float | None = None
        follow_ups: list[float] = []
        cycle = 0
        self.log.info("evictd started", node=self.node_name, interval_s=self.interval_s, dry_run=self.dry_run)
        for part in self.background:
            part.start()
        try:
            while not self.stopping:
                cycle += 1
                started = time.monotonic()
                report = self._cycle(cycle, cycle_logger)
                if cycle == 1:
                    self.systemd.notify("READY=1")
                self.systemd.notify("WATCHDOG=1")
                refresh_due = notifier_refresh_due(last_refresh, started)
                if report is not None and self.refresh_notifiers is not None and refresh_due:
                    last_refresh = started
                    for problem in self.refresh_notifiers(report):
                        self.metrics.errors.labels("notifier").inc()
                        self.log.warning("memory notifier unavailable", detail=problem)
                if self.max_cycles and cycle >= self.max_cycles:
                    break
                if self.stopping:
                    break
                if report is not None and report.evictions and self.wait_for_cleanup is not None and not self.dry_run:
                    # The kubelet waits for evicted pods to go (at most 30 s), then runs again at once.
                    gone = self.wait_for_cleanup(report.evictions)
                    self.log.info("evicted pods cleaned up" if gone else "evicted pods still present after wait",
                                  pods=[e.pod.key for e in report.evictions])
                    self.metrics.wakeups.labels("eviction").inc()
                    continue
                if report is not None and memory_threshold_met(report):
                    follow_ups = follow_ups[-1:]  # the crossing is decided: only the settled-state check is left
                timeout = max(0.0, self.interval_s - (time.monotonic() - started))
                if follow_ups:
                    timeout = min(timeout, follow_ups.pop(0))
                causes = self.waiter.wait(timeout)
                if NOTIFICATION_CAUSES.intersection(causes):
                    follow_ups = list(NOTIFICATION_FOLLOW_UPS_S)
                for cause in causes or ["timer"]:
                    self.metrics.wakeups.labels(cause).inc()
        finally:
            if self.stopping:
                self.log.info("shutting down", reason=self.stop_reason, deadline_s=self.shutdown_timeout_s)
            self.systemd.notify("STOPPING=1")
            if self.on_stop is not None:
                try:
                    self.on_stop()
                except Exception:  # a failed clean-up must not turn a clean stop into a crash
                    self.log.exception("clean-up at stop failed")
            for part in self.background:
                part.stop()
            self.systemd.close()
            self.waiter.close()
            if self._deadline is not None:
                self._deadline.disarm()
                self._deadline = None
        self.log.info("evictd stopped", cycles=cycle)
        return 0

    def _cycle(self, number: int, cycle_logger: CycleLogger) -> CycleReport | None:
        started = time.monotonic()
        try:
            report = self.manager.synchronize()
        except Exception:  # the loop is the one place that survives anything; the next cycle retries
            self.metrics.errors.labels("cycle").inc()
            self.log.exception("housekeeping cycle failed", cycle=number)
            return None
        if self.oom_feedback is not None:
            try:
                report = replace(report, oom=self.oom_feedback.observe(report))
            except Exception:  # a bug in the feedback must not cost the cycle its metrics, logs and events
                self.metrics.errors.labels("cycle").inc()
                self.log.exception("OOM-kill feedback failed", cycle=number)
        duration = time.monotonic() - started
        now_wall = datetime.now(UTC)
        self.metrics.record_cycle(report, self.manager.state, duration, now_wall, self.dry_run)
        self.health.degraded = report.degraded
        cycle_logger.log_cycle(number, report, self.manager.state)
        self.health.cycle_done()
        if self.live_output is not None:
            screen = render(report, self.manager.state, node_name=self.node_name, cycle=number, now_wall=now_wall,
                            dry_run=self.dry_run, recent=list(self.recent.lines) if self.recent else ())
            self.live_output.write(CLEAR_SCREEN + screen + "\n")
            self.live_output.flush()
        if self.on_cycle is not None:
            self.on_cycle(number, report)
        if self.after_cycle is not None:
            try:
                self.after_cycle(report)
            except Exception:  # cluster bookkeeping must never stop the loop
                self.metrics.errors.labels("cycle").inc()
                self.log.exception("cluster update after the cycle failed", cycle=number)
        return report


def memory_threshold_met(report: CycleReport) -> bool:
    """True when the cycle saw a memory threshold met (what a memory notification announces)."""
    return any(status.threshold.signal in MEMORY_SIGNALS for status in report.assessment.thresholds)


def serve(daemon: Daemon, endpoint: HttpEndpoint | None) -> int:
    """Run `daemon` with signal handling and the HTTP endpoint; return the exit status."""
    daemon.install_signal_handlers()
    try:
        return daemon.run()
    finally:
        if endpoint is not None:
            endpoint.close()


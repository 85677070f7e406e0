"""`evictd run`: the housekeeping loop of the live daemon.

One synchronous loop: run a cycle (the eviction manager over the adapters), run the after-cycle hooks
(metrics, the cycle log, the live view, cluster bookkeeping, garbage collection, the memory notifiers' re-arming:
`evictd.run.after_cycle`), then sleep until the next tick or until a notifier or a stop request wakes it (a
notification is followed by cycles at short delays until one sees the crossing, then one confirming cycle a
second later). After an eviction with the Kubernetes API the loop waits for the pod to go, then runs again at
once, as the kubelet does.

Building a `Daemon` starts nothing. `start` starts its parts in order (the pod watch, the container runtime
link, the HTTP endpoint, the disk walker: whatever the composition root gave it; a part may block, and may
raise to end the start-up); `run` starts them if that was not done, runs cycles until stopped,
then runs the stop hooks (in the cluster: conditions to Unknown, taints removed) and stops the parts in
reverse order. A stop request (`StopSignal`: SIGTERM/SIGINT) lets the current cycle finish and `run` returns
0; the stop signal's deadline ends a hung shutdown with status 1. Only this loop catches broad exceptions: a
failed cycle or hook is logged with the cycle number and counted, and the loop carries on.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

import structlog

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Eviction
from evictd.core.signals import spec_of
from evictd.log import Log
from evictd.observe.http_endpoint import Health
from evictd.observe.metrics import Metrics
from evictd.run.after_cycle import AfterCycle, Cycle
from evictd.run.manager import CycleReport, EvictionManager
from evictd.run.notify import SystemdNotifier
from evictd.run.oom_feedback import OomFeedback
from evictd.run.stop_signal import StopSignal

# A memory notification fires at the moment usage crosses a level, often while the kernel is still
# charging or freeing pages; the cycle it triggers may see the old side. Cycles follow at these delays after
# a notification until one sees a memory threshold met: a crossing that was a few pages short is decided
# within milliseconds, and the last one confirms the settled state a second later, instead of waiting a whole
# housekeeping interval. (One second alone left 2 of 50 black-box crossings decided ~1 s late; a first
# follow-up 5 ms after a cycle of a few ms left some decided 15 ms late.)
NOTIFICATION_FOLLOW_UPS_S = (0.001, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
NOTIFICATION_CAUSES = frozenset({"memcg", "psi", "memory_watch"})


class Part(Protocol):
    """Something the daemon starts before its first cycle and stops after its last."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Waiter(Protocol):
    """What the loop sleeps on (evictd.adapters.notifiers.Waiter in production)."""

    def wait(self, timeout_s: float) -> list[str]: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


# Waits (bounded, and cut short by a stop request) for evicted pods to be gone; returns whether they went.
CleanupWait = Callable[[Sequence[Eviction]], bool]


class Daemon:
    def __init__(self, manager: EvictionManager, waiter: Waiter, stop: StopSignal, metrics: Metrics, health: Health, *,
                 interval_s: float, dry_run: bool, node_name: str, max_cycles: int = 0,
                 after_cycle: Sequence[AfterCycle] = (), wait_for_cleanup: CleanupWait | None = None,
                 on_stop: Sequence[Callable[[], None]] = (), parts: Sequence[Part] = (),
                 oom_feedback: OomFeedback | None = None, clock: Clock = SYSTEM_CLOCK,
                 systemd: SystemdNotifier | None = None, log: Log | None = None,
                 before_cycle: Callable[[int], None] = lambda number: None) -> None:
        self.manager = manager
        self.waiter = waiter
        self.stop = stop
        self.metrics = metrics
        self.health = health
        self.interval_s = interval_s
        self.dry_run = dry_run
        self.node_name = node_name
        self.max_cycles = max_cycles
        self.after_cycle = tuple(after_cycle)
        self.wait_for_cleanup = wait_for_cleanup
        self.on_stop = tuple(on_stop)
        self.parts = tuple(parts)
        self.oom_feedback = oom_feedback
        self.clock = clock
        self.systemd = systemd if systemd is not None else SystemdNotifier()
        self.log = log if log is not None else structlog.get_logger("evictd")
        self._started: list[Part] | None = None
        # Told each cycle's number before it runs (what an eviction's Event names as its decision).
        self.before_cycle = before_cycle

    def start(self) -> None:
        """Start the parts in order; if one raises, stop those already started and raise."""
        if self._started is not None:
            return
        self._started = []
        try:
            for part in self.parts:
                part.start()
                self._started.append(part)
        except BaseException:
            self._stop_parts()
            raise

    def run(self) -> int:
        """Run cycles until stopped (or `max_cycles` ran); return the exit status."""
        self.start()
        follow_ups: list[float] = []
        cycle = 0
        self.log.info("evictd started", node=self.node_name, interval_s=self.interval_s, dry_run=self.dry_run)
        try:
            while not self.stop.is_set():
                cycle += 1
                started = self.clock.monotonic()
                report = self._cycle(cycle, started)
                if cycle == 1:
                    self.systemd.notify("READY=1")
                self.systemd.notify("WATCHDOG=1")
                if (self.max_cycles and cycle >= self.max_cycles) or self.stop.is_set():
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
                timeout = max(0.0, self.interval_s - (self.clock.monotonic() - started))
                if follow_ups:
                    timeout = min(timeout, follow_ups.pop(0))
                causes = self.waiter.wait(timeout)
                if NOTIFICATION_CAUSES.intersection(causes):
                    follow_ups = list(NOTIFICATION_FOLLOW_UPS_S)
                for cause in causes or ["timer"]:
                    self.metrics.wakeups.labels(cause).inc()
        finally:
            if self.stop.is_set():
                self.log.info("shutting down", reason=self.stop.reason, deadline_s=self.stop.deadline_s)
            self.systemd.notify("STOPPING=1")
            for clean_up in self.on_stop:
                try:
                    clean_up()
                except Exception:  # a failed clean-up must not turn a clean stop into a crash
                    self.log.exception("clean-up at stop failed")
            self._stop_parts()
            self.systemd.close()
            self.waiter.close()
            self.stop.close()
        self.log.info("evictd stopped", cycles=cycle)
        return 0

    def _stop_parts(self) -> None:
        for part in reversed(self._started or []):
            part.stop()
        self._started = []

    def _cycle(self, number: int, started: float) -> CycleReport | None:
        self.before_cycle(number)
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
        finished = Cycle(number=number, report=report, state=self.manager.state, started_at=started,
                         duration_s=self.clock.monotonic() - started, wall=self.clock.wall())
        self.health.degraded = report.degraded
        self.health.cycle_done()
        for hook in self.after_cycle:
            try:
                hook(finished)
            except Exception:  # a hook (metrics, logs, cluster bookkeeping, GC) must never stop the loop
                self.metrics.errors.labels("cycle").inc()
                self.log.exception("after-cycle step failed", cycle=number, step=hook_name(hook))
        return report


def hook_name(hook: AfterCycle) -> str:
    """The name a failing hook is logged under: its function's or its class's."""
    return str(getattr(hook, "__qualname__", type(hook).__qualname__))


def memory_threshold_met(report: CycleReport) -> bool:
    """True when the cycle saw a memory threshold met (what a memory notification announces)."""
    return any(spec_of(status.threshold.signal).is_memory for status in report.assessment.thresholds)


def serve(daemon: Daemon) -> int:
    """Start `daemon`'s parts, then stop on SIGTERM/SIGINT, then run it; return the exit status."""
    daemon.start()
    daemon.stop.install()
    # What start-up built lives as long as the process: out of the collector's sight, a full collection takes
    # microseconds instead of ~25 ms (it used to land in a decision cycle now and then).
    gc.freeze()
    return daemon.run()

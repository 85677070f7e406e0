"""`evictd run`: the housekeeping loop of the live daemon.

One synchronous loop: run a cycle (the eviction manager over the adapters), arm the sensors as `evictd.core.wake`
plans, run the after-cycle hooks (metrics, logs, the live view, cluster bookkeeping, garbage collection:
`evictd.run.after_cycle`), then wait as planned: the next tick, a notifier, a stop request. After an eviction with the
Kubernetes API the loop waits for the pod to go, then runs again at once, as the kubelet does; a wait after an
eviction with a longer grace period than a hard threshold's ends early when a hard threshold is met (looked for
on every memory notification and at least every `HARD_CHECK_PERIOD_S`: escalation, issue #43).

Building a `Daemon` starts nothing; `start` starts its parts in order (a part may block, or raise to end the
start-up), `run` runs cycles until stopped, then the stop hooks, then stops the parts in reverse order. A stop
request lets the current cycle finish (exit 0); its deadline ends a hung shutdown with status 1. Only this loop
catches broad exceptions: a failed cycle or hook is logged with the cycle number and counted, and the loop goes on.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from evictd.adapters.notifiers import NotifierFailure
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Eviction
from evictd.core.engine_rules import IMMEDIATE_EVICTION_GRACE_PERIOD_S
from evictd.core.wake import (
    NOTIFICATIONS,
    Arming,
    CycleSeen,
    Plan,
    Wake,
    WakeState,
    after_cycle,
    sensed,
    wakes,
)
from evictd.cycle.finished import AfterCycle, Cycle
from evictd.cycle.manager import EvictionManager
from evictd.cycle.report import CycleReport, CycleStep
from evictd.log import Log
from evictd.observe.http_endpoint import Health
from evictd.observe.metrics import Metrics
from evictd.run.notify import SystemdNotifier
from evictd.run.oom_feedback import OomFeedback
from evictd.run.stop_signal import StopSignal


class Part(Protocol):
    """Something the daemon starts before its first cycle and stops after its last."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Waiter(Protocol):
    """What the loop arms after each cycle and sleeps on (evictd.adapters.sensors.Sensors in production)."""

    def arm(self, arming: Arming) -> Sequence[NotifierFailure]: ...

    @property
    def armed(self) -> frozenset[str]: ...

    def wait(self, timeout_s: float, *, notifiers: bool = True) -> list[str]: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


# Waits (bounded, and cut short by a stop request or when its pause says so) for evicted pods to be gone; returns
# whether they went. The pause sleeps at most the seconds given and returns True when the wait must end now.
CleanupWait = Callable[[Sequence[Eviction], Callable[[float], bool]], bool]
# During the wait after an eviction, a hard threshold is looked for on every memory notification and at least this
# often (a reading of the node's memory, a few milliseconds; the housekeeping interval when shorter): without a
# notification (no memcg, the kubelet's stats) a hard crossing ends the wait within a second.
HARD_CHECK_PERIOD_S = 1.0


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """What the loop is told once: its housekeeping interval, the node it runs for, whether its evictions are
    reported only (dry-run, or no Kubernetes API), and how many cycles to run (0: until stopped)."""

    interval_s: float
    node_name: str
    dry_run: bool
    max_cycles: int = 0


@dataclass(frozen=True, slots=True)
class Wakeups:
    """What the loop waits on between cycles: the notifiers' waiter (cut short by a notifier or a stop
    request), the stop signal, and the clock that measures the interval."""

    waiter: Waiter
    stop: StopSignal
    clock: Clock = SYSTEM_CLOCK


@dataclass(frozen=True, slots=True)
class Reporting:
    """Where the loop tells how it goes: metrics, /healthz, the log, systemd (None: from $NOTIFY_SOCKET)."""

    metrics: Metrics
    health: Health
    log: Log
    systemd: SystemdNotifier | None = None


def _no_decision(number: int) -> None:
    return None


def always_acting() -> str | None:
    return None


# While standing by (the node Lease lost), how often the loop asks again whether it may act.
STANDBY_POLL_S = 1.0


class CycleMode(Protocol):
    """Whether the next cycle acts (`evictd.run.mode_switch.ModeSwitch`): decided before each cycle (`refresh`)."""

    def refresh(self) -> object: ...

    def reports_only(self) -> bool: ...


class FixedMode:
    """A mode nothing switches: reported only when `dry_run`."""

    def __init__(self, dry_run: bool) -> None:
        self._dry_run = dry_run

    def refresh(self) -> object:
        return None

    def reports_only(self) -> bool:
        return self._dry_run


class NotifierLog:
    """Counts every memory notifier that failed to arm and logs it when it first fails, and again once it is armed
    (a failed one is retried only at the next 10 s refresh, so a cycle without its failure does not mean it works)."""

    def __init__(self, metrics: Metrics, log: Log) -> None:
        self._metrics = metrics
        self._log = log
        self._unavailable: set[str] = set()  # the notifiers that failed and are not armed since

    def update(self, number: int, failures: Sequence[NotifierFailure], armed: frozenset[str]) -> None:
        """Cycle `number` armed the notifiers: `failures` failed, those described in `armed` are registered now."""
        for failure in failures:
            self._metrics.errors.labels("notifier").inc()
            if failure.description not in self._unavailable:
                self._unavailable.add(failure.description)
                self._log.warning("memory notifier unavailable", cycle=number,
                                  detail=f"{failure.description}: {failure.error}")
        for description in sorted(self._unavailable & armed):
            self._unavailable.discard(description)
            self._log.info("memory notifier available again", cycle=number, notifier=description)


@dataclass(frozen=True, slots=True)
class Hooks:
    """What runs around each cycle and at stop, besides the manager (see the module's description)."""

    # Told each cycle's number before it runs (what an eviction's Event names as its decision).
    before_cycle: Callable[[int], None] = _no_decision
    after_cycle: Sequence[AfterCycle] = ()
    oom_feedback: OomFeedback | None = None
    # The wait after an eviction for the evicted pods to go (None: no API to tell).
    wait_for_cleanup: CleanupWait | None = None
    on_stop: Sequence[Callable[[], None]] = ()
    # Why the loop must not act now (the node Lease lost: `NodeLease.standby_reason`); None while it may. While it
    # says why, no cycle runs (nothing is evicted, written or withdrawn) and the loop asks again every second.
    standby: Callable[[], str | None] = always_acting
    # Whether each cycle acts, decided before it (None: `LoopSettings.dry_run` throughout).
    mode: CycleMode | None = None


NO_HOOKS = Hooks()


class Daemon:
    """The housekeeping loop over `manager` (see the module's description); built from a few groups: what it is
    told (`LoopSettings`), what it waits on (`Wakeups`), where it reports (`Reporting`), what runs around each
    cycle (`Hooks`) and what it starts and stops (`parts`)."""

    def __init__(self, manager: EvictionManager, settings: LoopSettings, wakeups: Wakeups, reporting: Reporting,
                 hooks: Hooks = NO_HOOKS, parts: Sequence[Part] = ()) -> None:
        self.manager = manager
        self.settings = settings
        self.waiter = wakeups.waiter
        self.stop = wakeups.stop
        self.clock = wakeups.clock
        self.metrics = reporting.metrics
        self.health = reporting.health
        self.log = reporting.log
        self.systemd = reporting.systemd if reporting.systemd is not None else SystemdNotifier()
        self.before_cycle = hooks.before_cycle
        self.after_cycle = tuple(hooks.after_cycle)
        self.oom_feedback = hooks.oom_feedback
        self.wait_for_cleanup = hooks.wait_for_cleanup
        self.on_stop = tuple(hooks.on_stop)
        self.standby = hooks.standby
        self.mode = hooks.mode if hooks.mode is not None else FixedMode(settings.dry_run)
        self._standing_by: str | None = None  # why the loop stood by last (logged once)
        self.parts = tuple(parts)
        self._started: list[Part] | None = None
        # What woke the loop last and when (monotonic), for the next cycle; ((), None) when it did not wait.
        self._woken: tuple[tuple[str, ...], float | None] = ((), None)
        self._wake = WakeState(settings.interval_s)
        # The wait after an eviction: when it last looked for a hard threshold, and whether it found one met.
        self._hard_checked_at = 0.0
        self._hard_met = False
        self._notifiers = NotifierLog(self.metrics, self.log)

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
        settings = self.settings
        cycle = 0
        self.log.info("evictd started", node=settings.node_name, interval_s=settings.interval_s,
                      dry_run=settings.dry_run)
        try:
            while not self.stop.is_set():
                self.mode.refresh()
                if self._stood_by():
                    continue
                cycle += 1
                started = self.clock.monotonic()
                report, plan = self._cycle(cycle, started)
                if cycle == 1:
                    self.systemd.notify("READY=1")
                self.systemd.notify("WATCHDOG=1")
                if (settings.max_cycles and cycle >= settings.max_cycles) or self.stop.is_set():
                    break
                if report is not None and (report.acted.evictions or report.acted.follow_ups) \
                        and self.wait_for_cleanup is not None \
                        and not self.mode.reports_only() and self.standby() is None:
                    # (no wait for evictions refused for a Lease lost meanwhile)
                    self._wait_for_cleanup(report, self.wait_for_cleanup)
                    self._wake, plan = sensed(self._wake, (Wake.EVICTION,))
                self._wake = self._wait(self._wake, plan)
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
            self.stop.close()  # before the waiter closes the descriptor signals write to
            self.waiter.close()
        self.log.info("evictd stopped", cycles=cycle)
        return 0

    def _wait_for_cleanup(self, report: CycleReport, wait_for_cleanup: CleanupWait) -> None:
        """The kubelet waits for evicted pods to go (at most 30 s), then runs again at once; evictd's wait ends
        early on a hard threshold met (the next cycle escalates)."""
        evictions = (*report.acted.evictions, *(f.eviction for f in report.acted.follow_ups))
        pods = [e.pod.key for e in evictions]
        self.log.info("waiting for evicted pods to go", pods=pods)
        self._hard_met = False
        self._hard_checked_at = self.clock.monotonic()
        # Only a pod given a longer grace period than a hard threshold's can be cut short; the wait after a hard
        # eviction is the kubelet's (cut short, it would evict the next pod meanwhile).
        cut_short = any(e.effective_grace_period_s > IMMEDIATE_EVICTION_GRACE_PERIOD_S for e in evictions)
        gone = wait_for_cleanup(evictions, self._cleanup_pause if cut_short else self._cleanup_sleep)
        if self._hard_met:
            self.log.warning("wait for evicted pods cut short: a hard threshold is met", pods=pods)
        else:
            self.log.info("evicted pods cleaned up" if gone else "evicted pods still present after wait", pods=pods)
        self.metrics.wakeups.labels(Wake.EVICTION).inc()

    def _cleanup_sleep(self, timeout_s: float) -> bool:
        """The wait after a hard eviction's pause: sleep on the waiter at most `timeout_s`; never end the wait."""
        self.waiter.wait(timeout_s)
        return False

    def _cleanup_pause(self, timeout_s: float) -> bool:
        """The wait after an eviction's pause: sleep on the waiter at most `timeout_s`; return True (and note it) when
        a hard threshold is met, looked for on a memory notification or once `HARD_CHECK_PERIOD_S` passed."""
        causes = self.waiter.wait(timeout_s)
        now = self.clock.monotonic()
        period_s = min(HARD_CHECK_PERIOD_S, self.settings.interval_s)
        if not (NOTIFICATIONS & set(causes)) and now - self._hard_checked_at < period_s:
            return False
        self._hard_checked_at = now
        self._hard_met = self.manager.hard_threshold_met()
        return self._hard_met

    def _stood_by(self) -> bool:
        """When the loop must not act (`standby`): say so once, stay healthy (the loop is alive and waits as it
        should), wait a poll and return True; else False (and say so once when acting again)."""
        reason = self.standby()
        if reason is None:
            if self._standing_by is not None:
                self._standing_by = None
                self.health.degraded = None
                self.log.info("acting again: the node Lease is held")
            return False
        if self._standing_by is None:
            self.log.warning("standing by: not acting (no eviction, condition, taint or event)", reason=reason)
        self._standing_by = reason
        self.health.degraded = f"standing by: {reason}"
        self.health.cycle_done()
        self.waiter.wait(STANDBY_POLL_S)
        return True

    def _wait(self, wake: WakeState, plan: Plan) -> WakeState:
        """Wait as `plan` says until the next cycle is due (or a stop is requested); count what woke the loop."""
        while not self.stop.is_set():
            wait_s = plan.wait_s(self.clock.monotonic())
            if wait_s is None:
                break
            causes = self.waiter.wait(wait_s, notifiers=plan.listening)
            now = self.clock.monotonic()
            self._woken = (wakes(causes), now)
            for cause in self._woken[0]:
                self.metrics.wakeups.labels(cause).inc()
            wake, plan = sensed(wake, causes)
        return wake

    def _stop_parts(self) -> None:
        for part in reversed(self._started or []):
            part.stop()
        self._started = []

    def _cycle(self, number: int, started: float) -> tuple[CycleReport | None, Plan]:
        """Run cycle `number`, then plan what follows (`after_cycle`), arm the sensors as planned and run the hooks."""
        self.before_cycle(number)
        try:
            report = self.manager.synchronize(flapping=self._wake.flapping and not self._wake.lagging)
        except Exception:  # the loop is the one place that survives anything; the next cycle retries
            self.metrics.errors.labels("cycle").inc()
            self.log.exception("housekeeping cycle failed", cycle=number)
            self._wake, plan = after_cycle(self._wake, CycleSeen(started, cycle_failed=True), self.clock.monotonic())
            return None, plan
        if self.oom_feedback is not None:
            try:
                report = replace(report, oom=self.oom_feedback.observe(report))
            except Exception:  # a bug in the feedback must not cost the cycle its metrics, logs and events
                self.metrics.errors.labels("cycle").inc()
                self.log.exception("OOM-kill feedback failed", cycle=number)
        woken_by, woken_at = self._woken
        self._woken = ((), None)
        acted = not self.mode.reports_only() and (bool(report.acted.evictions) or bool(report.acted.reclaim)
                                                  or report.acted.eviction_api is not None)
        seen = CycleSeen.of(started, self.manager.state.thresholds, report.decided.assessment,
                            crossing_unconfirmed=report.observed.crossing_unconfirmed,
                            crossing_unaccounted=report.observed.crossing_unaccounted,
                            eviction_failed=bool(report.errors_of(CycleStep.EVICTION)), acted=acted,
                            summary=report.observed.summary, withheld=report.decided.withheld)
        self._wake, plan = after_cycle(self._wake, seen, self.clock.monotonic())
        finished = Cycle(number=number, report=report, state=self.manager.state, started_at=started,
                         duration_s=self.clock.monotonic() - started, wall=self.clock.wall(), woken_by=woken_by,
                         woken_at=woken_at)
        self.health.degraded = report.degraded
        self.health.cycle_done()
        self._arm(number, plan)
        for hook in self.after_cycle:
            try:
                hook(finished)
            except Exception:  # a hook (metrics, logs, cluster bookkeeping, GC) must never stop the loop
                self.metrics.errors.labels("cycle").inc()
                self.log.exception("after-cycle step failed", cycle=number, step=hook_name(hook))
        return report, plan

    def _arm(self, number: int, plan: Plan) -> None:
        """Arm the sensors as `plan` says (None: as they are): before the hooks, since some may wait on the API server
        or the runtime, and a crossing meanwhile must still wake the loop. A failure is logged and counted as a hook's
        is; the loop goes on."""
        if plan.arm is None:
            return
        try:
            self._notifiers.update(number, self.waiter.arm(plan.arm), self.waiter.armed)
        except Exception:
            self.metrics.errors.labels("cycle").inc()
            self.log.exception("after-cycle step failed", cycle=number, step="arm sensors")


def hook_name(hook: AfterCycle) -> str:
    """The name a failing hook is logged under: its function's or its class's."""
    return str(getattr(hook, "__qualname__", type(hook).__qualname__))


def serve(daemon: Daemon) -> int:
    """Start `daemon`'s parts, then stop on SIGTERM/SIGINT, then run it; return the exit status."""
    daemon.start()
    daemon.stop.install()
    # What start-up built lives as long as the process: out of the collector's sight, a full collection takes
    # microseconds instead of ~25 ms (it used to land in a decision cycle now and then).
    gc.freeze()
    return daemon.run()

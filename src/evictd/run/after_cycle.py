"""What runs after every housekeeping cycle, one hook each: metrics, the cycle log, the live view, the
sources that became unreadable (and, built by the composition root, the cluster's bookkeeping and the runtime's
garbage collection). The loop itself arms the sensors, before the hooks (`evictd.run.daemon`).

A hook is any callable taking the finished `Cycle`. The daemon runs them in order after each cycle that
produced a report; one that raises is logged and counted (`evictd_errors_total{source="cycle"}`) and the
others still run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TextIO

from evictd.adapters.pod_disk_usage import POD_DISK_SOURCE_PREFIX
from evictd.core.blind import blind_signals, blind_streaks
from evictd.core.errors import SampleError
from evictd.core.plausible import Refusal
from evictd.core.signals import Signal
from evictd.cycle.finished import AfterCycle, Cycle
from evictd.log import Log
from evictd.observe.cycle_logging import CycleLogger, WakeUp
from evictd.observe.http_endpoint import Health
from evictd.observe.live_view import CLEAR_SCREEN, ENTER_ALTERNATE_SCREEN, LEAVE_ALTERNATE_SCREEN, render
from evictd.observe.logging_setup import RecentEvents
from evictd.observe.metrics import Metrics
from evictd.run.plausible_stats import RefusalLog


def now(flag: bool | Callable[[], bool]) -> bool:
    """A flag given as a value, or as a function asked now (the node's mode, which may change between cycles)."""
    return flag() if callable(flag) else flag


def record_metrics(metrics: Metrics, dry_run: bool | Callable[[], bool]) -> AfterCycle:

    def record(cycle: Cycle) -> None:
        metrics.record_cycle(cycle.report, cycle.state, cycle.duration_s, cycle.wall, now(dry_run))

    return record


def log_cycles(log: Log, dry_run: bool | Callable[[], bool], run: str | None = None) -> AfterCycle:
    """Log what changed since the previous cycle (`CycleLogger`)."""
    logger = CycleLogger(log, dry_run, run)

    def log_cycle(cycle: Cycle) -> None:
        logger.log_cycle(cycle.number, cycle.report, wake_up(cycle))

    return log_cycle


def wake_up(cycle: Cycle) -> WakeUp | None:
    """What woke the loop for `cycle`, and how long from that wake-up to the cycle's end (its decision)."""
    if cycle.woken_at is None:
        return None
    return WakeUp(causes=cycle.woken_by, decided_after_s=cycle.started_at + cycle.duration_s - cycle.woken_at)


def terminal_size(output: TextIO) -> tuple[int, int] | None:
    """The columns and rows of the terminal `output` writes to, read again for each frame (a resized window);
    None when it is not a terminal."""
    try:
        size = os.get_terminal_size(output.fileno())
    except (OSError, ValueError, AttributeError):  # not a terminal (io.UnsupportedOperation), closed, no fileno
        return None
    return (size.columns, size.lines) if size.columns > 0 and size.lines > 0 else None


class LiveView:
    """Redraws the terminal's live view after each cycle (`logFormat: live`; with `run`, evictions name their
    decision), on the terminal's alternate screen so that frames do not pile up in the scrollback; `close` goes
    back to the normal screen and leaves the last frame there, once."""

    def __init__(self, output: TextIO, node_name: str, *, dry_run: bool | Callable[[], bool], no_api: bool,
                 recent: RecentEvents | None,
                 run: str | None = None) -> None:
        self._output = output
        self._node_name = node_name
        self._dry_run = dry_run
        self._no_api = no_api
        self._recent = recent
        self._run = run
        self._last: str | None = None

    def __call__(self, cycle: Cycle) -> None:
        screen = render(cycle.report, cycle.state, node_name=self._node_name, cycle=cycle.number, now_wall=cycle.wall,
                        dry_run=now(self._dry_run), no_api=self._no_api,
                        recent=list(self._recent.lines) if self._recent else (), run=self._run,
                        warnings=self._recent.warnings if self._recent else (), size=terminal_size(self._output))
        # No newline after the last line: on a full screen it would scroll the header off.
        self._output.write((ENTER_ALTERNATE_SCREEN if self._last is None else "") + CLEAR_SCREEN + screen)
        self._output.flush()
        self._last = screen

    def close(self) -> None:
        if self._last is not None:
            self._output.write(LEAVE_ALTERNATE_SCREEN + self._last + "\n")
            self._output.flush()
            self._last = None


class ProblemLog:
    """Logs each unreadable source once when it becomes unreadable, and once when it is readable again."""

    def __init__(self, log: Log, gone: str, back: str) -> None:
        self._log = log
        self._gone = gone
        self._back = back
        self._seen: set[str] = set()

    def update(self, number: int, problems: Sequence[SampleError]) -> None:
        now = {f"{p.source}: {p.reason}" for p in problems}
        for problem in sorted(now - self._seen):
            self._log.warning(self._gone, cycle=number, detail=problem)
        for problem in sorted(self._seen - now):
            self._log.info(self._back, cycle=number, detail=problem)
        self._seen = now


def log_sample_problems(log: Log, metrics: Metrics, signal_problems: Callable[[], Sequence[SampleError]],
                        oom_problems: Callable[[], Sequence[SampleError]]) -> AfterCycle:
    """Log the signal sources and OOM-kill counters that became unreadable (or readable again), and pods' disk
    figures that became incomplete, old or overdue (or whole and current again: they are used as measured, so
    they have lines of their own); count a cycle whose runtime stats failed."""
    signals = ProblemLog(log, "signal source unreadable; its signals are absent", "signal source readable again")
    disks = ProblemLog(log, "pod disk usage partly unreadable, old or not measured yet",
                       "pod disk usage whole and current again")
    ooms = ProblemLog(log, "OOM-kill counter unreadable; kills it counts are not counted",
                      "OOM-kill counter readable again")

    def update(cycle: Cycle) -> None:
        problems = signal_problems()
        signals.update(cycle.number, [p for p in problems if not p.source.startswith(POD_DISK_SOURCE_PREFIX)])
        disks.update(cycle.number, [p for p in problems if p.source.startswith(POD_DISK_SOURCE_PREFIX)])
        ooms.update(cycle.number, oom_problems())
        metrics.record_stats_problems(problems)

    return update


def watch_blind_signals(log: Log, metrics: Metrics, health: Health,
                        absent: Callable[[], frozenset[Signal]] = frozenset) -> AfterCycle:
    """Count the cycles in a row without a figure for each thresholded signal; from three (core/blind.py) it is
    blind: one warning, `evictd_signal_blind` and `/readyz` 503 until read again. `absent()`: signals this node has
    no source for at all, absent rather than blind."""
    streaks: dict[Signal, int] = {}
    blind: tuple[Signal, ...] = ()

    def update(cycle: Cycle) -> None:
        nonlocal streaks, blind
        observed = cycle.report.decided.assessment.observations
        without_source = absent()
        streaks = blind_streaks(streaks, (t.signal for t in cycle.state.thresholds if t.signal not in without_source),
                                set(observed))
        now = blind_signals(streaks)
        for signal in now:
            if signal not in blind:
                log.warning("signal blind: no figure for a signal with a threshold; nothing can act on it",
                            cycle=cycle.number, signal=str(signal), cycles=streaks[signal])
        for signal in blind:
            if signal not in now:
                log.info("signal readable again", cycle=cycle.number, signal=str(signal))
                metrics.signal_blind.labels(str(signal)).set(0)
        for signal in now:
            metrics.signal_blind.labels(str(signal)).set(1)
        blind = now
        health.blind = tuple(str(signal) for signal in now)

    return update


def log_refused_figures(log: Log, metrics: Metrics, refused: Callable[[], Sequence[Refusal]]) -> AfterCycle:
    """Log each figure refused as invalid or impossible once per episode, and count every refusal."""
    refusals = RefusalLog(log, metrics)

    def update(cycle: Cycle) -> None:
        refusals.update(cycle.number, cycle.started_at, refused())

    return update


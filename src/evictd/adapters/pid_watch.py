"""The pid watch: a thread that reads the node's task count while a ``pid.available`` crossing is near, and wakes
the loop.

Job: ``pid.available`` is a cycle's figure; without this watch its crossing waited for the next tick, and a fork
bomb can use up a node's pids within it. After every cycle the loop hands the watch what to watch (`follow`: the
``pid.available`` thresholds that cycle did not find met, `evictd.core.pid_watch.watch_targets`); the thread reads
/proc/loadavg's task count (`evictd.adapters.procfs.running_tasks`, what the cycle reads) at the pace
`evictd.core.pid_watch.look` gives for the margin left, and idles (no reads at all) while no crossing can come
before the next tick. When a look finds a threshold met it signals its eventfd once and idles until the next cycle
hands it targets again: the Waiter wakes the loop (cause ``pid_watch``), which decides on its own fresh stats.

Invariants: the Notifier shape and the thread of `evictd.adapters.watch_thread.WatchThread`; a /proc/loadavg that
cannot be read is a look that keeps the pace of the last count read (the cycle's at first; the cycle reports the
source); an arming with nothing to look at before the tick starts no look; `looks` counts the reads made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from evictd.adapters import procfs
from evictd.adapters.watch_thread import WatchThread
from evictd.core.errors import SampleError
from evictd.core.pid_watch import PidTarget, look, tasks_seen, watch_targets
from evictd.core.signals import Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold
from evictd.core.wake import Wake


class PidWatch(WatchThread):
    """A Notifier for the Waiter: its eventfd is signalled when a watched ``pid.available`` threshold is found met."""

    cause = Wake.PID_WATCH

    def __init__(self, thresholds: Sequence[Threshold], interval_s: float, *, proc_root: str = "/proc",
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__("pid watch", "evictd-pid-watch")
        self._thresholds = tuple(t for t in thresholds if t.signal is Signal.PID_AVAILABLE)
        self._interval_s = interval_s
        self._proc_root = proc_root
        self._monotonic = monotonic
        # The generation of the arming a look read the count for, and that count (the thread's own).
        self._last_read: tuple[int, int] | None = None

    def follow(self, observations: Mapping[Signal, Observation] | None, now: float) -> None:
        """Watch what a cycle that began at `now` (monotonic seconds) and observed `observations` left to watch
        (nothing without a ``pid.available`` observation)."""
        observed = (observations or {}).get(Signal.PID_AVAILABLE)
        if observed is None:
            self.arm((), 0, now)
            return
        self.arm(watch_targets(self._thresholds, observed), tasks_seen(observed), now)

    def arm(self, targets: Sequence[PidTarget], tasks: int, now: float) -> None:
        """Watch `targets` from `now` (monotonic seconds, when the cycle that computed them began), `tasks` running
        as the cycle saw; no look at all when none could come before the tick at that count."""
        targets = tuple(targets)
        until_tick_s = self._interval_s - (self._monotonic() - now)
        near = bool(targets) and look(targets, tasks, until_tick_s).period_s is not None
        self._arm((targets, tasks, now), near)

    def _look(self, armed: tuple[tuple[PidTarget, ...], int, float], generation: int) -> float | None:
        """Read the task count; signal the eventfd and return None when `look` finds a target met, else the next
        period."""
        targets, cycle_tasks, armed_at = armed
        self.looks += 1
        try:
            tasks = procfs.running_tasks(self._proc_root)
        except SampleError:  # the cycle reports the unreadable source; the pace stays that of the last count known
            last = self._last_read
            tasks = last[1] if last is not None and last[0] == generation else cycle_tasks
        self._last_read = (generation, tasks)
        now = self._monotonic()
        found = look(targets, tasks, self._interval_s - (now - armed_at))
        if found.met is not None:
            self.description = found.met.description
            self._signal()
        return found.period_s

"""The v2 memory watch: a thread that reads the memory figure closely while a crossing is near, and wakes the loop.

Job: on cgroup v2 (no memcg threshold notifier) the loop would otherwise see a crossing only at its next tick.
After every cycle the loop hands the watch what to watch (`evictd.core.memory_watch.watch_targets`); the thread
reads each target's cgroup with the cycle's own reader and its kept descriptors (`CgroupReader.memory` with
``working_set_only``: the root's ``memory.stat``, the pods cgroup's ``memory.current`` and ``memory.stat``, one
``pread`` each, no limit and no second usage read) at the pace `watch_period_s` gives for the margin left
and whether the looks found it steady (`look_history`: kept across armings for a target the cycle hands again),
and idles (no reads at all) while no crossing can come before the next tick. When a look finds a threshold met
it signals its eventfd once and idles until the next cycle hands it targets again: the Waiter wakes the loop
(cause ``memory_watch``), which runs a normal cycle on fresh stats.

Invariants: the Notifier shape and the thread of `evictd.adapters.watch_thread.WatchThread`; a target that cannot
be read is skipped (the cycle logs unreadable sources); the
thread never holds the lock while reading; `looks` counts the reads made (what the watch costs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from evictd.adapters.cgroups import CgroupReader
from evictd.adapters.watch_thread import WatchThread
from evictd.core.errors import SampleError
from evictd.core.memory_watch import LookHistory, WatchTarget, look_history, watch_period_s, watch_targets
from evictd.core.summary import Summary
from evictd.core.thresholds import Threshold

MEMORY_WATCH_CAUSE = "memory_watch"


class MemoryWatch(WatchThread):
    """A Notifier for the Waiter: its eventfd is signalled when a watched memory threshold is found met."""

    cause = MEMORY_WATCH_CAUSE

    def __init__(self, cgroups: CgroupReader, thresholds: Sequence[Threshold], interval_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__("memory watch", "evictd-memory-watch")
        self._cgroups = cgroups
        self._thresholds = tuple(thresholds)
        self._interval_s = interval_s
        self._monotonic = monotonic
        # What the looks since the last arming saw of each target, and the arming they belong to (the thread's own).
        self._histories: dict[WatchTarget, LookHistory] = {}
        self._watched_generation = -1

    def follow(self, summary: Summary | None, now: float) -> None:
        """Watch what a cycle that began at `now` and read `summary` left to watch (nothing without a Summary)."""
        self.arm(() if summary is None else watch_targets(self._thresholds, summary, self._cgroups.pods_cgroup()), now)

    def arm(self, targets: Sequence[WatchTarget], now: float) -> None:
        """Watch `targets` from `now` (monotonic seconds, when the cycle that computed them began)."""
        self._arm((tuple(targets), now), bool(targets))

    def _idle(self) -> None:
        self._histories = {}  # what the looks saw is no history of the time it did not look

    def _look(self, armed: tuple[tuple[WatchTarget, ...], float], generation: int) -> float | None:
        """Read each target's cgroup; signal the eventfd and return None when one is met, else the next period."""
        targets, armed_at = armed
        if generation != self._watched_generation:
            # Armed again (every cycle): a target the cycle hands again keeps what the looks saw of it, so a margin
            # steady across the 10 s tick is not looked at fast for a window after each cycle (~12 looks of 52 a
            # 10 s at the margin); a new target (another threshold, capacity or level) starts with none.
            self._histories = {target: history for target, history in self._histories.items() if target in targets}
            self._watched_generation = generation
        now = self._monotonic()
        until_tick = self._interval_s - (now - armed_at)
        period: float | None = None
        readings: dict[str, int] = {}
        for target in targets:
            working_set = readings.get(target.cgroup)
            if working_set is None:
                try:
                    working_set = self._cgroups.memory(target.cgroup, working_set_only=True).working_set_bytes
                except SampleError:
                    continue  # the cycle reports the unreadable source
                self.looks += 1
                readings[target.cgroup] = working_set
            margin = target.margin_bytes(working_set)
            if margin <= 0:
                self.description = target.description
                self._signal()
                return None
            history = self._histories[target] = look_history(self._histories.get(target), margin, now)
            next_look = watch_period_s(margin, until_tick, steady=history.steady)
            if next_look is not None:
                period = next_look if period is None else min(period, next_look)
        return period

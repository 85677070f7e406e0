"""The memory watch: a thread that reads the memory figure closely while a crossing is near, and wakes the loop.

Job: on cgroup v2 (no memcg threshold notifier) the loop would otherwise see a crossing only at its next tick; on v1
it looks beside the usage levels, for a crossing that charges nothing (page cache turned active: the working set
grows, usage does not) or that a level armed for more inactive file than is left announces late.
After every cycle the loop hands the watch what to watch (`evictd.core.memory_watch.watch_plan`); the thread
reads each target's cgroup with the cycle's own reader and its kept descriptors (`CgroupReader.memory` with
``working_set_only``: on v2 the root's ``memory.stat``, the pods cgroup's ``memory.current`` and ``memory.stat``,
on v1 a cgroup's ``memory.usage_in_bytes`` and ``memory.stat``, one ``pread`` each, no limit and no second usage
read) at the pace `evictd.core.memory_watch.look` gives for the
margin left and whether the looks found it steady (kept across armings for a target the cycle hands again; on v2 the
steady cap from the thread's own CPU per look, `look_budget`), and
idles (no reads at all) while no crossing can come before the next tick. When a look finds a threshold met
it signals its eventfd once and idles until the next cycle hands it targets again: the Waiter wakes the loop
(cause ``memory_watch``), which runs a normal cycle on fresh stats.

Invariants: the Notifier shape and the thread of `evictd.adapters.watch_thread.WatchThread`; a target that cannot
be read is skipped (the cycle logs unreadable sources); the thread never holds the lock while reading; `looks`
counts the reads made (what the watch costs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from evictd.adapters.cgroups import CgroupReader
from evictd.adapters.watch_thread import WatchThread
from evictd.core.errors import SampleError
from evictd.core.memory_watch import (
    ASSUMED_FILL_BYTES_PER_S,
    STEADY_MAX_PERIOD_S,
    LookHistory,
    WatchTarget,
    look,
    steady_max_period_s,
    watch_plan,
)
from evictd.core.summary import Summary
from evictd.core.thresholds import Threshold
from evictd.core.wake import Wake

# On v2, a look's cost is measured over this many looks at a time (`MemoryWatch._steady_max_s`): 32 looks of ~0.6
# ms are about two 10 ms ticks of a tick-accounting kernel (windows of 16 put the cap anywhere from 40 to 150 ms
# in the user-mode guest).
LOOK_COST_WINDOW = 32


class MemoryWatch(WatchThread):
    """A Notifier for the Waiter: its eventfd is signalled when a watched memory threshold is found met."""

    cause = Wake.MEMORY_WATCH

    def __init__(self, cgroups: CgroupReader, thresholds: Sequence[Threshold], interval_s: float,
                 monotonic: Callable[[], float] = time.monotonic, *,
                 fill_bytes_per_s: int = ASSUMED_FILL_BYTES_PER_S, look_budget: bool = False,
                 thread_cpu: Callable[[], float] = time.thread_time, look_cost_window: int = LOOK_COST_WINDOW) -> None:
        super().__init__("memory watch", "evictd-memory-watch")
        self._cgroups = cgroups
        self._thresholds = tuple(thresholds)
        self._interval_s = interval_s
        self._monotonic = monotonic
        self.fill_bytes_per_s = fill_bytes_per_s  # the fastest fill the looks are paced for
        # What the looks saw of each target (the thread's own), and the arming whose held thresholds a look found
        # released (the thread's own: from then on that arming's targets are watched).
        self._histories: dict[WatchTarget, LookHistory] = {}
        self._released: int | None = None
        # `look_budget` (cgroup v2): the steady cap follows the thread's own CPU per look (`steady_max_period_s`,
        # `_steady_max_s`); the current window of looks: the thread's CPU at its start and the looks since (None:
        # none since the watch idled).
        self.look_budget = look_budget
        self._thread_cpu = thread_cpu
        self._cost_window: tuple[float, int] | None = None
        self._look_cost_window = look_cost_window
        self.look_cpu_s: float | None = None

    def follow(self, summary: Summary | None, now: float) -> None:
        """Watch what a cycle that began at `now` and read `summary` left to watch (nothing without a Summary; while a
        hard memory threshold is met, its release first: `evictd.core.memory_watch.watch_plan`)."""
        if summary is None:
            self.arm((), now)
            return
        targets, held = watch_plan(self._thresholds, summary, self._cgroups.pods_cgroup())
        self.arm(targets, now, held=held)

    def arm(self, targets: Sequence[WatchTarget], now: float, *, held: Sequence[WatchTarget] = ()) -> None:
        """Watch `targets` from `now` (monotonic seconds, when the cycle that computed them began), once none of
        `held` is met any more."""
        self._arm((tuple(targets), tuple(held), now), bool(targets))

    def _idle(self) -> None:
        self._histories = {}  # what the looks saw is no history of the time it did not look
        self._cost_window = None  # a window spans looks only: the next one starts at the next look

    def _steady_max_s(self) -> float:
        """The steady cap of this look: on v2 from the thread's CPU per look (`look_cpu_s`), the fixed cap on v1. The
        thread's CPU clock is read once a look; a look's cost is taken over `LOOK_COST_WINDOW` looks at a time (the
        looks and the waits between them), and the windows' figures smoothed (an eighth of each new one): a kernel
        with tick-based accounting (the user-mode guest's, 10 ms ticks) charges a thread whole ticks, so that one
        look reads 0 or 10 ms."""
        if not self.look_budget:
            return STEADY_MAX_PERIOD_S
        cpu = self._thread_cpu()
        if self._cost_window is None:
            self._cost_window = (cpu, 0)
        else:
            start, looks = self._cost_window
            looks += 1
            if looks < self._look_cost_window:
                self._cost_window = (start, looks)
            else:
                spent = (cpu - start) / looks
                self.look_cpu_s = spent if self.look_cpu_s is None else self.look_cpu_s + (spent - self.look_cpu_s) / 8
                self._cost_window = (cpu, 0)
        return steady_max_period_s(self.look_cpu_s)

    def _look(self, armed: tuple[tuple[WatchTarget, ...], tuple[WatchTarget, ...], float],
              generation: int) -> float | None:
        """Read each target's cgroup once; signal the eventfd and return None when `look` finds one met, else the
        next period."""
        targets, held, armed_at = armed
        steady_max_s = self._steady_max_s()
        if self._released == generation:
            held = ()
        working_sets: dict[str, int] = {}
        for cgroup in dict.fromkeys(target.cgroup for target in targets):
            try:
                working_sets[cgroup] = self._cgroups.memory(cgroup, working_set_only=True).working_set_bytes
            except SampleError:
                continue  # the cycle reports the unreadable source
            self.looks += 1
        now = self._monotonic()
        found = look(self._histories, targets, working_sets, now, self._interval_s - (now - armed_at),
                     fill_bytes_per_s=self.fill_bytes_per_s, held=held, steady_max_s=steady_max_s)
        if found.released:
            self._released = generation
        self._histories = dict(found.histories)
        if found.met is not None:
            self.description = found.met.description
            self._signal()
        return found.period_s

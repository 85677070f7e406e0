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

Invariants: the Notifier shape of `evictd.adapters.notifiers` (one descriptor, O_CLOEXEC, `close` idempotent
and stopping the thread); a target that cannot be read is skipped (the cycle logs unreadable sources); the
thread never holds the lock while reading; `looks` counts the reads made (what the watch costs).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Sequence

from evictd.adapters.cgroups import CgroupReader
from evictd.adapters.notifiers import FdOwner, os_sample_error
from evictd.core.errors import SampleError
from evictd.core.memory_watch import LookHistory, WatchTarget, look_history, watch_period_s, watch_targets
from evictd.core.summary import Summary
from evictd.core.thresholds import Threshold

MEMORY_WATCH_CAUSE = "memory_watch"


class MemoryWatch(FdOwner):
    """A Notifier for the Waiter: its eventfd is signalled when a watched memory threshold is found met."""

    cause = MEMORY_WATCH_CAUSE
    poll_events = select.POLLIN

    def __init__(self, cgroups: CgroupReader, thresholds: Sequence[Threshold], interval_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._cgroups = cgroups
        self._thresholds = tuple(thresholds)
        self._interval_s = interval_s
        self._monotonic = monotonic
        self.description = "memory watch"
        self._cond = threading.Condition()
        self._targets: tuple[WatchTarget, ...] = ()
        self._armed_at = 0.0
        self._generation = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.looks = 0
        self.fired = 0
        try:
            self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        except OSError as exc:
            raise os_sample_error("eventfd", exc) from exc

    def follow(self, summary: Summary | None, now: float) -> None:
        """Watch what a cycle that began at `now` and read `summary` left to watch (nothing without a Summary)."""
        self.arm(() if summary is None else watch_targets(self._thresholds, summary, self._cgroups.pods_cgroup()), now)

    def arm(self, targets: Sequence[WatchTarget], now: float) -> None:
        """Watch `targets` from `now` (monotonic seconds, when the cycle that computed them began)."""
        with self._cond:
            if self._closed:
                return
            self._targets = tuple(targets)
            self._armed_at = now
            self._generation += 1
            self._cond.notify()
            if self._thread is None and self._targets:
                self._thread = threading.Thread(target=self._run, name="evictd-memory-watch", daemon=True)
                self._thread.start()

    def consume(self) -> None:
        try:
            os.eventfd_read(self.fileno())
        except BlockingIOError:
            pass  # already consumed
        except OSError as exc:
            raise os_sample_error("eventfd of the memory watch", exc) from exc

    def _run(self) -> None:
        histories: dict[WatchTarget, LookHistory] = {}
        watched_generation = -1
        while True:
            with self._cond:
                while not self._closed and not self._targets:
                    self._cond.wait()
                if self._closed:
                    return
                targets, armed_at, generation = self._targets, self._armed_at, self._generation
            if generation != watched_generation:
                # Armed again (every cycle): a target the cycle hands again keeps what the looks saw of it, so a margin
                # steady across the 10 s tick is not looked at fast for a window after each cycle (~12 looks of 52 a
                # 10 s at the margin); a new target (another threshold, capacity or level) starts with none.
                histories = {target: history for target, history in histories.items() if target in targets}
                watched_generation = generation
            period = self._look(targets, armed_at, histories)
            with self._cond:
                if self._generation != generation:
                    continue  # re-armed during the look: start over with the new targets
                if period is None:
                    self._targets = ()  # idle until the next cycle hands targets again
                    histories = {}  # and what the looks saw is no history of the time it did not look
                else:
                    self._cond.wait(period)

    def _look(self, targets: Sequence[WatchTarget], armed_at: float,
              histories: dict[WatchTarget, LookHistory]) -> float | None:
        """Read each target's cgroup; signal the eventfd and return None when one is met, else the next period.
        `histories` (updated) holds what the looks since the last arming saw of each target."""
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
                self.fired += 1
                self.description = target.description
                with contextlib.suppress(OSError, ValueError):  # closed meanwhile: nobody left to wake
                    os.eventfd_write(self.fileno(), 1)
                return None
            history = histories[target] = look_history(histories.get(target), margin, now)
            next_look = watch_period_s(margin, until_tick, steady=history.steady)
            if next_look is not None:
                period = next_look if period is None else min(period, next_look)
        return period

    def close(self) -> None:
        """Stop the thread and close the eventfd. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        super().close()

"""The refault watch: a thread that reads /proc/vmstat once a second while a refault threshold is not met, and wakes
the loop when the node's refaults may meet one.

Job: the refault signal (``evictd.io/memory.refault``) is a cycle's figure; without this watch its crossing waited
for the next tick. After every cycle the loop hands the watch what to watch (`follow`: the refault thresholds that
cycle did not find met, and the node's memory capacity it saw); the thread reads /proc/vmstat every
`REFAULT_LOOK_S` and asks `evictd.core.refault_watch.look` whether a cycle may find one met; then it signals its
eventfd once and idles until the next cycle hands it thresholds again: the Waiter wakes the loop (cause
``refault_watch``), which decides on its own fresh stats.

Invariants: the Notifier shape of `evictd.adapters.notifiers` (one descriptor, O_CLOEXEC, `close` idempotent and
stopping the thread); a /proc/vmstat that cannot be read is a look without figures (the cycle reports it); the
thread never holds the lock while reading; `looks` counts the reads made.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Sequence

from evictd.adapters import procfs
from evictd.adapters.notifiers import FdOwner, os_sample_error
from evictd.core.errors import SampleError
from evictd.core.refault import memory_capacity_bytes
from evictd.core.refault_watch import REFAULT_LOOK_S, WatchedRefault, look, watched_shares
from evictd.core.signals import Signal
from evictd.core.summary import Observation, Summary
from evictd.core.thresholds import Threshold

REFAULT_WATCH_CAUSE = "refault_watch"


class RefaultWatch(FdOwner):
    """A Notifier for the Waiter: its eventfd is signalled when the node's refaults may meet a watched threshold."""

    cause = REFAULT_WATCH_CAUSE
    poll_events = select.POLLIN

    def __init__(self, thresholds: Sequence[Threshold], *, gated: bool, proc_root: str = "/proc",
                 monotonic: Callable[[], float] = time.monotonic, look_s: float = REFAULT_LOOK_S) -> None:
        self._thresholds = tuple(t for t in thresholds if t.signal is Signal.MEMORY_REFAULT)
        self._gated = gated
        self._proc_root = proc_root
        self._monotonic = monotonic
        self._look_s = look_s
        self.description = "refault watch"
        self._cond = threading.Condition()
        self._shares: tuple[int, ...] = ()
        self._memory_bytes: int | None = None
        self._generation = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._watched = WatchedRefault()
        self.looks = 0
        self.fired = 0
        try:
            self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        except OSError as exc:
            raise os_sample_error("eventfd", exc) from exc

    def follow(self, summary: Summary | None, observations: dict[Signal, Observation] | None) -> None:
        """Watch what a cycle that read `summary` and observed `observations` left to watch (nothing without a
        Summary)."""
        if summary is None:
            self.arm((), None)
            return
        observed = (observations or {}).get(Signal.MEMORY_REFAULT)
        self.arm(watched_shares(self._thresholds, observed), memory_capacity_bytes(summary.node.memory))

    def arm(self, shares: Sequence[int], memory_bytes: int | None) -> None:
        """Watch for the lowest of `shares` (basis points refaulted within the window) of `memory_bytes`."""
        with self._cond:
            if self._closed:
                return
            self._shares, self._memory_bytes = tuple(sorted(shares)), memory_bytes
            self._generation += 1
            self._cond.notify()
            if self._thread is None and self._shares:
                self._thread = threading.Thread(target=self._run, name="evictd-refault-watch", daemon=True)
                self._thread.start()

    def consume(self) -> None:
        try:
            os.eventfd_read(self.fileno())
        except BlockingIOError:
            pass  # already consumed
        except OSError as exc:
            raise os_sample_error("eventfd of the refault watch", exc) from exc

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._shares:
                    self._cond.wait()
                if self._closed:
                    return
                shares, memory_bytes, generation = self._shares, self._memory_bytes, self._generation
            fired = self._look(shares, memory_bytes)
            with self._cond:
                if self._generation != generation:
                    continue  # re-armed during the look: start over with the new thresholds
                if fired:
                    self._shares = ()  # idle until the next cycle hands thresholds again
                else:
                    self._cond.wait(self._look_s)

    def _look(self, shares: Sequence[int], memory_bytes: int | None) -> bool:
        """Read /proc/vmstat; signal the eventfd and return True when `look` says a cycle may find a threshold met."""
        try:
            counts: procfs.VmstatCounts | None = procfs.vmstat_counts(self._proc_root)
        except SampleError:
            counts = None
        self.looks += 1
        self._watched, wake = look(self._watched, None if counts is None else counts.refault_file_bytes,
                                   None if counts is None else counts.global_scan_pages, self._monotonic(),
                                   memory_bytes, shares, gated=self._gated)
        if wake:
            self.fired += 1
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile: nobody left to wake
                os.eventfd_write(self.fileno(), 1)
        return wake

    def close(self) -> None:
        """Stop the thread and close the eventfd. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        super().close()

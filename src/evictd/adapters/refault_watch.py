"""The refault watch: a thread that reads /proc/vmstat once a second while a refault threshold is not met, and wakes
the loop when the node's refaults may meet one.

Job: the refault signal (``evictd.io/memory.refault``) is a cycle's figure; without this watch its crossing waited
for the next tick. After every cycle the loop hands the watch what to watch (`follow`: the refault thresholds that
cycle did not find met, and the node's memory capacity it saw); the thread reads /proc/vmstat every
`REFAULT_LOOK_S` and asks `evictd.core.refault_watch.look` whether a cycle may find one met; then it signals its
eventfd once and idles until the next cycle hands it thresholds again: the Waiter wakes the loop (cause
``refault_watch``), which decides on its own fresh stats.

Invariants: the Notifier shape and the thread of `evictd.adapters.watch_thread.WatchThread`; a /proc/vmstat that
cannot be read is a look without figures (the cycle reports it); `looks` counts the reads made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from evictd.adapters import procfs
from evictd.adapters.watch_thread import WatchThread
from evictd.core.errors import SampleError
from evictd.core.refault import memory_capacity_bytes
from evictd.core.refault_watch import REFAULT_LOOK_S, WatchedRefault, look, watched_shares
from evictd.core.signals import Signal
from evictd.core.summary import Observation, Summary
from evictd.core.thresholds import Threshold
from evictd.core.wake import Wake


class RefaultWatch(WatchThread):
    """A Notifier for the Waiter: its eventfd is signalled when the node's refaults may meet a watched threshold."""

    cause = Wake.REFAULT_WATCH

    def __init__(self, thresholds: Sequence[Threshold], *, gated: bool, proc_root: str = "/proc",
                 monotonic: Callable[[], float] = time.monotonic, look_s: float = REFAULT_LOOK_S) -> None:
        super().__init__("refault watch", "evictd-refault-watch")
        self._thresholds = tuple(t for t in thresholds if t.signal is Signal.MEMORY_REFAULT)
        self._gated = gated
        self._proc_root = proc_root
        self._monotonic = monotonic
        self._look_s = look_s
        self._watched = WatchedRefault()  # the thread's own readings, kept across armings

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
        self._arm((tuple(sorted(shares)), memory_bytes), bool(shares))

    def _look(self, armed: tuple[tuple[int, ...], int | None], generation: int) -> float | None:
        """Read /proc/vmstat; signal the eventfd and idle when `look` says a cycle may find a threshold met."""
        shares, memory_bytes = armed
        try:
            counts: procfs.VmstatCounts | None = procfs.vmstat_counts(self._proc_root)
        except SampleError:
            counts = None
        self.looks += 1
        self._watched, wake = look(self._watched, None if counts is None else counts.refault_file_bytes,
                                   None if counts is None else counts.global_scan_pages, self._monotonic(),
                                   memory_bytes, shares, gated=self._gated)
        if wake:
            self._signal()
            return None
        return self._look_s

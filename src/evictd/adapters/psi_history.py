"""Memory pressure files read with evictd's own `recent` share: the readings of each file kept between cycles.

Job: read a memory pressure file (`procfs.memory_pressure`) and give each of its PSI lines the share stalled since
an earlier reading of the same file (`PsiData.recent`, by `evictd.core.psi_window`'s rule), keeping per file the
few readings that rule needs (`next_history`). The figure lands in the Summary, so a recording carries it and
replay needs none of this state.

Invariants: one history per path; a file absent or unreadable keeps its history as it was (a window may then
span the gap, up to `MAX_WINDOW_S`), a file without PSI forgets it. Times are the clock's monotonic seconds, read
right after the file.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from evictd.adapters import procfs
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.psi_window import PsiReading, next_history, recent_shares
from evictd.core.summary import PsiStats


class PressureHistory:
    """The readings of each memory pressure file read through `read`, kept for the next `recent` figure."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._readings: dict[str, tuple[PsiReading, ...]] = {}

    def read(self, path: str | Path) -> PsiStats | None:
        """Return the PSI lines of the file at `path` with their `recent` share (None: no earlier reading fits);
        None when the kernel has no PSI there. Raises SampleError as `procfs.memory_pressure` does."""
        key = str(path)
        stats = procfs.memory_pressure(path)
        if stats is None:
            self._readings.pop(key, None)
            return None
        reading = PsiReading(self._clock.monotonic(), stats.some.total, stats.full.total)
        history = self._readings.get(key, ())
        shares = recent_shares(history, reading)
        self._readings[key] = next_history(history, reading)
        if shares is None:
            return stats
        some, full = shares
        return PsiStats(some=replace(stats.some, recent=some), full=replace(stats.full, recent=full))

"""Memory pressure files read with evictd's own `recent` share: the readings of each file kept between cycles.

Reads a PSI file (`procfs.memory_pressure`) and gives each line its share stalled since an earlier reading
(`evictd.core.psi_window`), keeping per file the few readings that needs; noted trigger firings (`note_firing`)
raise `recent` to the threshold's share soon after. The figure lands in the Summary, so replay needs none of this.
One history per path; an unreadable file keeps its history, a file without PSI forgets it; times are the clock's,
read right after the file.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from evictd.adapters import procfs
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.psi_window import (
    FIRING_HOLDS_S,
    PsiReading,
    ThresholdFiring,
    firing_counts,
    next_history,
    recent_shares,
    with_firings,
)
from evictd.core.signals import StallKind
from evictd.core.summary import PsiStats


class PressureHistory:
    """The readings of each memory pressure file read through `read`, kept for the next `recent` figure."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._readings: dict[str, tuple[PsiReading, ...]] = {}
        # Per file, the threshold triggers' firings of the last FIRING_HOLDS_S; per trigger, its last firing.
        self._firings: dict[str, tuple[ThresholdFiring, ...]] = {}
        self._last_fired: dict[tuple[str, StallKind, float], float] = {}

    def note_firing(self, path: str | Path, kind: StallKind, share: float, window_s: float) -> None:
        """Note that the trigger at `share` percent of a `window_s` window on the `kind` line of the file at `path`
        fired now (`ThresholdFiring`; whether it counts: `firing_counts`)."""
        key = str(path)
        now = self._clock.monotonic()
        trigger = (key, kind, share)
        counts = firing_counts(self._last_fired.get(trigger), now, window_s)
        self._last_fired[trigger] = now
        recent = tuple(firing for firing in self._firings.get(key, ()) if now - firing.at <= FIRING_HOLDS_S)
        self._firings[key] = (*recent, ThresholdFiring(now, kind, share, counts))

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
        own_some, own_full = (None, None) if shares is None else shares
        firings = self._firings.get(key, ())
        some = with_firings(own_some, StallKind.SOME, firings, reading.at)
        full = with_firings(own_full, StallKind.FULL, firings, reading.at)
        if some is None and full is None:
            return stats
        return PsiStats(some=replace(stats.some, recent=some), full=replace(stats.full, recent=full))

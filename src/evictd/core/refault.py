"""evictd's refault figure: the share of the node's memory re-read from disk within the last ~10 s.

The observation of ``evictd.io/memory.refault`` from /proc/vmstat's ``workingset_refault_file`` (page cache dropped
and read again) and ``workingset_activate_file`` (the part judged working set): thrashing is the working set not
fitting, so its refault rate measures it, on every supported kernel, with or without PSI, v1 and v2. The figure is
the bytes refaulted over `REFAULT_WINDOW_S` (avg10's span) as a share of the node's memory capacity, in basis
points, so a threshold reads as the stall signals' do ("5%") and means the same on any node size.
`next_samples` keeps the last window's readings (in the stall gate's state); `refault_figure` compares the newest
with the newest a window older (early in a run, the oldest once `REFAULT_MIN_SPAN_S` old), scaled to the window.

Invariants: pure (`now` given), inputs never mutated. The first reading gives no figure (never a false 0); a lower
count is a new baseline; a reading without the count gives no figure and keeps the earlier readings.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.summary import STALL_BASIS_POINTS, MemoryStats, Observation

# A refault figure's span: avg10's, so refault and stall thresholds judge the same 10 s as the stall gate.
REFAULT_WINDOW_S = 10.0
# The shortest span a figure is made over (scaled up): a figure is then at most twice its span's rate.
REFAULT_MIN_SPAN_S = 5.0


@dataclass(frozen=True, slots=True)
class RefaultSample:
    """One reading of the node's cumulative refault count (bytes since boot) and its activations (None: not
    counted), at `read_at` (monotonic s); for the daemons also their reclaims below ``memory.low`` (``low`` events)
    and their bytes reclaimed (``pgsteal``), cumulative (None: not read), and their protected page cache the node's
    available memory no longer covers at `read_at` (`evictd.core.daemon_refault.uncovered_bytes`; None: not read)."""

    read_at: float
    refault_bytes: int
    activate_bytes: int | None = None
    low_events: int | None = None
    reclaimed_bytes: int | None = None
    uncovered_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class RefaultFigure:
    """Refaults over the last window: `refaulted_bytes` and `activated_bytes` (None: not counted) scaled to the window
    (`REFAULT_WINDOW_S` for the node's) from the `span_s` they were read over, of `memory_bytes` (the node's memory
    capacity; the daemons' memory for `evictd.core.daemon_refault`). For the daemons, `refaulted_bytes` is the largest
    of their re-reads, `lost_bytes` (what the kernel reclaimed of them in a span in which it reclaimed below their
    ``memory.low``; 0: it did not, or that is not read) and `uncovered_bytes` (their protected page cache the node's
    available memory no longer covers at the newest reading, a level, not scaled; 0: covered, or not read)."""

    refaulted_bytes: int
    activated_bytes: int | None
    span_s: float
    memory_bytes: int
    lost_bytes: int = 0
    uncovered_bytes: int = 0

    @property
    def refaulted_basis_points(self) -> int:
        """The share of the node's memory refaulted within the window, in basis points (floored: a threshold of X%
        is met only by a share truly at or over X), at most 10000."""
        return min(self.refaulted_bytes * STALL_BASIS_POINTS // self.memory_bytes, STALL_BASIS_POINTS)

    @property
    def activated_percent(self) -> float | None:
        """The share of the node's memory refaulted and activated at once (the working set's own pages), percent."""
        if self.activated_bytes is None:
            return None
        return round(self.activated_bytes * 100 / self.memory_bytes, 2)


def refault_sample(memory: MemoryStats | None, now: float) -> RefaultSample | None:
    """The refault reading of the node's memory block at `now` (None: no refault count in it)."""
    if memory is None or memory.reclaim is None or memory.reclaim.refault_file_bytes is None:
        return None
    return RefaultSample(now, memory.reclaim.refault_file_bytes, memory.reclaim.activate_file_bytes)


def next_samples(samples: Sequence[RefaultSample], sample: RefaultSample | None,
                 now: float, *, window_s: float = REFAULT_WINDOW_S) -> tuple[RefaultSample, ...]:
    """Return the readings to keep after `sample` at `now` (None: not read, kept as is): the newest read at least
    `window_s` before `now` and every later one; only `sample` when its count went down (a new baseline)."""
    if sample is None:
        return tuple(samples)
    if samples and sample.refault_bytes < samples[-1].refault_bytes:
        return (sample,)
    kept = (*samples, sample)
    old_enough = [index for index, kept_sample in enumerate(kept) if now - kept_sample.read_at >= window_s]
    return kept[old_enough[-1]:] if old_enough else kept


def refault_figure(samples: Sequence[RefaultSample], memory_bytes: int | None, *, window_s: float = REFAULT_WINDOW_S,
                   min_span_s: float = REFAULT_MIN_SPAN_S, stale_s: float | None = None) -> RefaultFigure | None:
    """Return the figure of the newest of `samples` (as `next_samples` keeps them) against the oldest kept, scaled to
    `window_s`; None with a single reading, a span under `min_span_s`, or no memory capacity. With `stale_s`, an oldest
    kept older than it gives way to the newest reading at least `min_span_s` old, where one is kept."""
    if len(samples) < 2 or memory_bytes is None or memory_bytes <= 0:
        return None
    base, latest = samples[0], samples[-1]
    if stale_s is not None and latest.read_at - base.read_at > stale_s:
        fresher = [kept for kept in samples[1:-1] if latest.read_at - kept.read_at >= min_span_s]
        base = fresher[-1] if fresher else base
    span_s = latest.read_at - base.read_at
    if span_s < min_span_s:
        return None
    scale = window_s / span_s
    activated = None
    if latest.activate_bytes is not None and base.activate_bytes is not None \
            and latest.activate_bytes >= base.activate_bytes:
        activated = round((latest.activate_bytes - base.activate_bytes) * scale)
    refaulted = round((latest.refault_bytes - base.refault_bytes) * scale)
    lost = round(lost_below_protection(base, latest) * scale)
    uncovered = latest.uncovered_bytes or 0
    return RefaultFigure(max(refaulted, lost, uncovered), activated, span_s, memory_bytes, lost, uncovered)


def lost_below_protection(base: RefaultSample, latest: RefaultSample) -> int:
    """The bytes reclaimed between `base` and `latest` when the kernel reclaimed below ``memory.low`` between them (its
    ``low`` events grew: it found nothing else to take); 0 when it did not, a count is not read or went back."""
    if base.low_events is None or latest.low_events is None or latest.low_events <= base.low_events:
        return 0
    if base.reclaimed_bytes is None or latest.reclaimed_bytes is None or latest.reclaimed_bytes < base.reclaimed_bytes:
        return 0
    return latest.reclaimed_bytes - base.reclaimed_bytes


def memory_capacity_bytes(memory: MemoryStats | None) -> int | None:
    """The node's memory capacity as ``memory.available`` counts it (available + working set; None: not read)."""
    if memory is None or memory.available_bytes is None or memory.working_set_bytes is None:
        return None
    return memory.available_bytes + memory.working_set_bytes


def refault_observation(figure: RefaultFigure, time: datetime | None) -> Observation:
    """The refault signal's observation of `figure`: the headroom (10000 - the basis points refaulted) of 10000, as a
    stall signal's, so that a threshold of X% is met when the share refaulted is at or over X."""
    return Observation(Quantity.from_int(STALL_BASIS_POINTS - figure.refaulted_basis_points, QuantityFormat.DECIMAL_SI),
                       Quantity.from_int(STALL_BASIS_POINTS, QuantityFormat.DECIMAL_SI), time)

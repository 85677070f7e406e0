"""evictd's refault figure: the share of the node's memory re-read from disk within the last ~10 s.

Job: make the observation of ``evictd.io/memory.refault`` (`Signal.MEMORY_REFAULT`) from the cumulative counts the
node's memory block carries (`evictd.core.summary.ReclaimCounters`): /proc/vmstat's ``workingset_refault_file``
(page cache that reclaim dropped and a task then read again from disk) and ``workingset_activate_file`` (the part of
those the kernel judged part of the working set, activated at once). Thrashing is the working set not fitting in
memory: its pages are dropped and re-read over and over, so the rate of refaults measures it. Unlike the kernel's
pressure stall information (PSI) the count exists on every kernel evictd supports (since Linux 3.15; ``_file`` since
5.9), with or without PSI, on cgroup v1 and v2.

The figure: the bytes refaulted over the last `REFAULT_WINDOW_S` (the span of the PSI average the stall signals read,
avg10), as a share of the node's memory capacity (what ``memory.available`` is a part of: MemTotal on the node's own
stats), in basis points, so that a threshold reads as the stall signals' do (``"5%"``: 5 % of the node's memory
re-read from disk within 10 s, met at or above it) and its observation is a headroom of 10000 as theirs is. A share
of the node's memory rather than MiB/s: one threshold means the same on a 4 GiB and a 256 GiB node (re-reading
its whole memory every N seconds), and the stall maps' percentages, validation and rendering apply unchanged.

The counts are cumulative, so a figure needs two readings: `next_samples` keeps the readings of the last window
(the state the stall gate keeps between cycles, `evictd.core.stall_gate.StallGate.refault_samples`), and
`refault_figure` compares the newest with the newest read at least a window before it (or, early in a run, the
oldest, once it is at least `REFAULT_MIN_SPAN_S` old), scaled to the window. Cycles come every 10 s, so the base is
usually the last cycle's reading; a cycle woken sooner compares with the same base as the cycle before it.

Invariants: pure (no I/O; `now` is monotonic seconds given by the caller), inputs never mutated. The first reading of
a run gives no figure (absent, never a false 0); a count lower than the last (a counter that started again) is a new
baseline, so again no figure until the next span; a reading without the count (the kernel has none, or /proc/vmstat
could not be read) gives no figure that cycle and keeps the readings before it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.summary import STALL_BASIS_POINTS, MemoryStats, Observation

# The span a refault figure counts over: avg10's, the average the stall signals read, so that a refault threshold and
# a stall threshold judge the same 10 s, and the stall gate's window (`STALL_RECLAIM_WINDOW_S`) covers both.
REFAULT_WINDOW_S = 10.0
# The shortest span a figure is made over (scaled up to the window): half of it, so that a figure is at most twice
# its span's rate; a wake-up 0.1 s after the first cycle would otherwise scale a 0.1 s burst a hundredfold.
REFAULT_MIN_SPAN_S = 5.0


@dataclass(frozen=True, slots=True)
class RefaultSample:
    """One reading of the node's cumulative refault count (bytes since boot) and its activations (None: not
    counted), at `read_at` (monotonic s)."""

    read_at: float
    refault_bytes: int
    activate_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class RefaultFigure:
    """The node's refaults over the last window: `refaulted_bytes` and `activated_bytes` (None: not counted) scaled to
    `REFAULT_WINDOW_S` from the `span_s` they were read over, of `memory_bytes` (the node's memory capacity)."""

    refaulted_bytes: int
    activated_bytes: int | None
    span_s: float
    memory_bytes: int

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
                 now: float) -> tuple[RefaultSample, ...]:
    """Return the readings to keep after reading `sample` at `now` (None: not read, `samples` kept as they are): the
    newest read at least `REFAULT_WINDOW_S` before `now` and every later one; only `sample` when its count is lower
    than the last (the counter started again: a new baseline)."""
    if sample is None:
        return tuple(samples)
    if samples and sample.refault_bytes < samples[-1].refault_bytes:
        return (sample,)
    kept = (*samples, sample)
    old_enough = [index for index, kept_sample in enumerate(kept) if now - kept_sample.read_at >= REFAULT_WINDOW_S]
    return kept[old_enough[-1]:] if old_enough else kept


def refault_figure(samples: Sequence[RefaultSample], memory_bytes: int | None) -> RefaultFigure | None:
    """Return the figure of the newest of `samples` (as `next_samples` keeps them) against the oldest kept, scaled to
    the window; None with a single reading, a span under `REFAULT_MIN_SPAN_S`, or no memory capacity."""
    if len(samples) < 2 or memory_bytes is None or memory_bytes <= 0:
        return None
    base, latest = samples[0], samples[-1]
    span_s = latest.read_at - base.read_at
    if span_s < REFAULT_MIN_SPAN_S:
        return None
    scale = REFAULT_WINDOW_S / span_s
    activated = None
    if latest.activate_bytes is not None and base.activate_bytes is not None \
            and latest.activate_bytes >= base.activate_bytes:
        activated = round((latest.activate_bytes - base.activate_bytes) * scale)
    return RefaultFigure(round((latest.refault_bytes - base.refault_bytes) * scale), activated, span_s, memory_bytes)


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

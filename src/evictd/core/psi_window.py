"""evictd's own stall share over its own window: the `recent` figure of a PSI line, from the kernel's ``total``.

``avg10`` lags a stall by 2-10 s; ``total`` is exact at every read, so two readings give the share between them.
The window runs from the newest earlier reading at least `MIN_WINDOW_S` old to now; no figure (None: avg10 alone)
when that reading is over `MAX_WINDOW_S` old, missing, or a ``total`` went backwards. The share is Δtotal / Δtime
in percent, two decimals, clamped to 0-100. A threshold's own PSI trigger (`threshold_triggers`) fires sooner: a
firing (`ThresholdFiring`) raises its line's `recent` to the threshold's share for `FIRING_HOLDS_S`
(`with_firings`) when it is its trigger's first for two windows (`firing_counts`: the kernel holds a breach found
within a window of the last signal, psi.c ``update_triggers``' ``pending_event``). The adapter keeps the readings
(`evictd.adapters.psi_history`); the figure lands in the Summary, so replay decides the same.

Invariants: pure (times are given monotonic seconds); `next_history` keeps at most
``MIN_WINDOW_S / HISTORY_SPACING_S + 2`` readings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from evictd.core.signals import Reading, Signal, StallKind, spec_of
from evictd.core.summary import STALL_BASIS_POINTS
from evictd.core.thresholds import Threshold, stall_share_points

# The shortest window a `recent` figure is made over, and the longest (seconds).
MIN_WINDOW_S = 1.0
MAX_WINDOW_S = 10.0
# Readings kept are at least this far apart: the window is then at most this much longer than the ideal one.
HISTORY_SPACING_S = 0.1
_PERCENT = 100.0
# After a PSI firing's cycle leaves a stall threshold unmet, one more cycle this long after (a full window).
WINDOW_FOLLOW_UP_S = MIN_WINDOW_S + 0.05
# How long after a trigger's firing a reading still takes the threshold's share as `recent`.
FIRING_HOLDS_S = MIN_WINDOW_S


@dataclass(frozen=True, slots=True)
class PsiReading:
    """One reading of a memory pressure file: when (monotonic s) and its ``some`` and ``full`` totals (us)."""

    at: float
    some_total: int
    full_total: int


@dataclass(frozen=True, slots=True)
class ThresholdFiring:
    """A stall threshold's PSI trigger fired: at `at` (monotonic s) the kernel found at least `share` percent of
    its trailing window stalled on the `kind` line (`counts`: `firing_counts` said so)."""

    at: float
    kind: StallKind
    share: float
    counts: bool = True


@dataclass(frozen=True, slots=True)
class ThresholdTrigger:
    """A stall threshold's own PSI trigger: on `signal`'s file and `kind` line, `stall_us` within the trigger window,
    at least `share` percent of it (so a firing means the threshold is met over the window)."""

    signal: Signal
    kind: StallKind
    stall_us: int
    share: float


def threshold_triggers(thresholds: Iterable[Threshold], window_us: int) -> tuple[ThresholdTrigger, ...]:
    """The triggers `thresholds` want with a window of `window_us`: one per PSI stall threshold at its share (rounded
    up to the microsecond), one per file, line and stall (a soft and a hard threshold at the same share share one);
    none for the refault signal (it reads no PSI) nor a 0% threshold (always met)."""
    triggers: list[ThresholdTrigger] = []
    made: set[tuple[Reading, StallKind, int]] = set()
    for threshold in thresholds:
        spec = spec_of(threshold.signal)
        points = stall_share_points(threshold.value)
        if spec.stall is None or points <= 0:
            continue
        stall_us = -(-window_us * points // STALL_BASIS_POINTS)
        if (spec.reading, spec.stall, stall_us) in made:
            continue
        made.add((spec.reading, spec.stall, stall_us))
        triggers.append(ThresholdTrigger(threshold.signal, spec.stall, stall_us, points / 100))
    return tuple(triggers)


def firing_counts(previous_at: float | None, at: float, window_s: float) -> bool:
    """Whether a trigger's firing at `at` stands for a breach within its trailing window: it is the first
    (`previous_at` None) or at least two windows after the last (a sooner one may be a held-back older breach)."""
    return previous_at is None or at - previous_at >= 2 * window_s


def with_firings(line_recent: float | None, kind: StallKind, firings: Iterable[ThresholdFiring],
                 now: float) -> float | None:
    """The `recent` share of the `kind` line read at `now`: `line_recent` (evictd's own window, None: none made)
    raised to the largest share of the counting firings on that line at most `FIRING_HOLDS_S` before `now`."""
    shares = [firing.share for firing in firings
              if firing.counts and firing.kind is kind and 0 <= now - firing.at <= FIRING_HOLDS_S]
    if not shares:
        return line_recent
    return max(shares) if line_recent is None else max(line_recent, *shares)


def window_start(history: Sequence[PsiReading], now: float) -> PsiReading | None:
    """The reading of `history` (oldest first) a window ending at `now` starts at: the newest at least
    `MIN_WINDOW_S` old; None when there is none, or it is more than `MAX_WINDOW_S` old."""
    for reading in reversed(history):
        age = now - reading.at
        if age >= MIN_WINDOW_S:
            return reading if age <= MAX_WINDOW_S else None
    return None


def stalled_share(stalled_us: int, elapsed_s: float) -> float:
    """The share of `elapsed_s` stalled, in percent to two decimals, clamped to 0-100."""
    share = round(stalled_us / (elapsed_s * 1_000_000) * _PERCENT, 2)
    return min(max(share, 0.0), _PERCENT)


def recent_shares(history: Sequence[PsiReading], reading: PsiReading) -> tuple[float, float] | None:
    """The (some, full) shares stalled from the window's start (`window_start`) to `reading`; None without a start,
    or when a total of any reading since the start exceeds `reading`'s (the counters went backwards)."""
    start = window_start(history, reading.at)
    if start is None:
        return None
    since = [earlier for earlier in history if earlier.at >= start.at]
    if any(earlier.some_total > reading.some_total or earlier.full_total > reading.full_total for earlier in since):
        return None
    elapsed = reading.at - start.at
    return (stalled_share(reading.some_total - start.some_total, elapsed),
            stalled_share(reading.full_total - start.full_total, elapsed))


def next_history(history: Sequence[PsiReading], reading: PsiReading) -> tuple[PsiReading, ...]:
    """The history to keep after `reading`: with it, without readings no later window can start at or less than
    `HISTORY_SPACING_S` apart; a lower total or an earlier time starts the history anew."""
    if history and (reading.at < history[-1].at or reading.some_total < history[-1].some_total
                    or reading.full_total < history[-1].full_total):
        return (reading,)
    kept = [earlier for earlier in history if reading.at - earlier.at <= MAX_WINDOW_S]
    start = window_start(kept, reading.at)
    if start is not None:
        kept = [earlier for earlier in kept if earlier.at >= start.at]
    if len(kept) >= 2 and kept[-1].at - kept[-2].at < HISTORY_SPACING_S:
        kept.pop()
    return (*kept, reading)


def window_follow_up_wanted(thresholds: Iterable[Threshold], met: Iterable[Threshold]) -> bool:
    """Whether a cycle that a PSI firing brought is followed by one more `WINDOW_FOLLOW_UP_S` after its start: a
    threshold on a PSI stall signal (not the refault signal, which reads no PSI) is configured and not met."""
    met = set(met)
    return any(spec_of(threshold.signal).stall is not None and threshold not in met for threshold in thresholds)

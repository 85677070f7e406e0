"""evictd's own stall share over its own window: the `recent` figure of a PSI line, from the kernel's ``total``.

Job: the rule by which a memory pressure file read now gets, beside the kernel's ``avg10``, the share of time stalled
since an earlier reading of the same file (`PsiData.recent`), and which readings are worth keeping for the next.
``avg10`` lags a stall by 2-10 s (the kernel updates it every 2 s, keeping 82% of the last value); ``total``, the
stalled microseconds since boot, is exact at every read, so two readings of it give the share between them at
once. The adapter that reads the file keeps the readings (`evictd.adapters.psi_history`); the figure lands in the
Summary, so a recording carries it and replay decides the same without that history.

The rule: the window runs from the newest earlier reading at least `MIN_WINDOW_S` old (a shorter one would be
a few scheduler ticks of one task's stall: too noisy to evict on) to now; there is no figure (None: ``avg10``
alone decides) when that reading is more than `MAX_WINDOW_S` old (the span of ``avg10``: a longer window says
less than the kernel's own average), when there is none, or when a ``total`` went backwards since it (a cgroup
made again: its counters start from 0). The share is ``Δtotal / Δtime`` in percent, to two decimals as the kernel
prints its averages, clamped to 0-100 (the read and the clock are a few microseconds apart).

A stall threshold's own trigger says more, and sooner: a PSI trigger registered at the threshold's share of the
trigger window (`threshold_triggers`: ``full 400000 2000000`` for ``memory.stall.full: 20%`` at the default 2 s
``psiWindow``) fires when
the kernel finds that share stalled within its trailing window, 0.4 s into a complete stall, where evictd's own
window needs a reading at least `MIN_WINDOW_S` old. So a firing (`ThresholdFiring`) raises its line's `recent` to
the threshold's share (`with_firings`) for the readings taken within `FIRING_HOLDS_S` of it, when it was the first
firing of its trigger for at least two windows (`firing_counts`): the kernel signals a trigger at most once a window
and keeps a breach found meanwhile for the signal a window after the last (kernel/sched/psi.c, ``update_triggers``'
``pending_event``), so a firing soon after another may stand for a breach up to a window older; evictd's own window
covers a stall that lasts.

Invariants: pure (times are monotonic seconds given by the caller); the history `next_history` keeps is bounded:
readings at least `HISTORY_SPACING_S` apart (but the newest), none older than the one a later reading could still
choose, so at most ``MIN_WINDOW_S / HISTORY_SPACING_S + 2`` (12) readings.
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
# Readings kept are at least this far apart (a burst of cycles keeps one in each tenth of a second): the window
# chosen is then at most this much longer than the newest reading at least MIN_WINDOW_S old would give.
HISTORY_SPACING_S = 0.1
_PERCENT = 100.0
# A cycle a PSI firing brought, with a stall threshold not met, is followed by one more this long after it started:
# the firing's cycle read the stall's first tenths of a second against a window reaching back to the last reading,
# the next firing comes up to a trigger window (2 s) later, and a window of MIN_WINDOW_S from the firing's reading
# is the soonest the share of the stall itself can be read (the margin: the firing's reading is taken just before
# its cycle starts).
WINDOW_FOLLOW_UP_S = MIN_WINDOW_S + 0.05
# How long after a threshold trigger's firing a reading of its file still takes the threshold's share as its line's
# `recent` (seconds): the firing's own cycle reads within milliseconds of it, or later on a node whose CPU the stall
# starves; past this a window of evictd's own (at least MIN_WINDOW_S) can be made from the firing's reading instead.
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
    """Whether a trigger's firing at `at` stands for a breach within its trailing window of `window_s`: it is the
    trigger's first (`previous_at` None) or comes at least two windows after the one before (the kernel signals a
    breach it found within a window of the last signal when that window ends, so a firing sooner than two windows
    after the last may be a breach held back, up to a window older)."""
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
    """The history to keep after `reading`: `history` with it, without what no later window can start at (readings
    older than the newest one at least `MIN_WINDOW_S` old, or more than `MAX_WINDOW_S` old), and without the newest
    earlier reading when it is less than `HISTORY_SPACING_S` after the one before it. A total lower than the last
    reading's (the counters started again) or a time before it starts the history anew."""
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

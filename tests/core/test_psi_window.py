"""evictd's own stall share over its own window (`evictd.core.psi_window`): which earlier reading a window starts at,
the share made from the two totals, and the bounded history kept for the next reading."""

from __future__ import annotations

import pytest

from evictd.core.psi_window import (
    FIRING_HOLDS_S,
    HISTORY_SPACING_S,
    MAX_WINDOW_S,
    MIN_WINDOW_S,
    WINDOW_FOLLOW_UP_S,
    PsiReading,
    ThresholdFiring,
    ThresholdTrigger,
    firing_counts,
    next_history,
    recent_shares,
    stalled_share,
    threshold_triggers,
    window_follow_up_wanted,
    window_start,
    with_firings,
)
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal, StallKind
from evictd.core.thresholds import Threshold, ThresholdValue, parse_stall_thresholds


def at(t: float, some: int = 0, full: int = 0) -> PsiReading:
    return PsiReading(t, some, full)


@pytest.mark.parametrize(
    ("times", "now", "start"),
    [
        ((), 10.0, None),  # no earlier reading
        ((9.5,), 10.0, None),  # too young: 0.5 s
        ((9.0,), 10.0, 9.0),  # exactly MIN_WINDOW_S old
        ((5.0, 8.5, 9.2, 9.9), 10.0, 8.5),  # the newest at least 1 s old, not the oldest
        ((0.0,), 10.0, 0.0),  # exactly MAX_WINDOW_S old
        ((-0.5,), 10.0, None),  # a gap over MAX_WINDOW_S: avg10 alone decides
        ((-5.0, 9.5), 10.0, None),  # the only one old enough is too old; a young one does not stand in
    ],
    ids=["none", "too-young", "min-window", "newest-old-enough", "max-window", "gap-over-max", "old-and-young"],
)
def test_a_window_starts_at_the_newest_reading_at_least_a_second_old(times: tuple[float, ...], now: float,
                                                                      start: float | None) -> None:
    chosen = window_start([at(t) for t in times], now)
    assert (None if chosen is None else chosen.at) == start


@pytest.mark.parametrize(
    ("history", "reading", "shares"),
    [
        # 1.5 s of some and 0.5 s of full stall in 2 s.
        ((at(8.0, 1_000_000, 500_000),), at(10.0, 2_500_000, 1_000_000), (75.0, 25.0)),
        # Two decimals, as the kernel prints avg10: 1/3 of the window.
        ((at(7.0, 0, 0),), at(10.0, 1_000_000, 1), (33.33, 0.0)),
        # Nothing stalled.
        ((at(9.0, 7, 7),), at(10.0, 7, 7), (0.0, 0.0)),
        # More stalled than elapsed (the read and the clock a few microseconds apart): clamped to 100.
        ((at(9.0, 0, 0),), at(10.0, 1_000_050, 1_000_050), (100.0, 100.0)),
        # The newest reading at least 1 s old is the start, not the older one.
        ((at(5.0, 0, 0), at(8.0, 3_000_000, 0), at(9.5, 3_000_000, 0)), at(10.0, 4_000_000, 0), (50.0, 0.0)),
        # Too young, or too old: no figure.
        ((at(9.5, 0, 0),), at(10.0, 500_000, 0), None),
        ((at(-1.0, 0, 0),), at(10.0, 1_000_000, 0), None),
        # A counter went backwards (a pods cgroup made again: its totals start from 0): no figure.
        ((at(8.0, 5_000_000, 100),), at(10.0, 1_000, 200), None),
        ((at(8.0, 100, 5_000_000),), at(10.0, 200, 1_000), None),
        # ... also when it went backwards after the start and has grown past the start's again since.
        ((at(8.0, 1_000, 0), at(9.5, 9_000_000, 0)), at(10.0, 2_000, 0), None),
    ],
    ids=["shares", "two-decimals", "idle", "clamped", "newest-start", "too-young", "too-old", "some-backwards",
         "full-backwards", "backwards-since-start"],
)
def test_the_recent_share_is_the_stalled_time_over_the_window(history: tuple[PsiReading, ...], reading: PsiReading,
                                                              shares: tuple[float, float] | None) -> None:
    assert recent_shares(history, reading) == shares


@pytest.mark.parametrize(("stalled_us", "elapsed_s", "share"),
                         [(0, 1.0, 0.0), (1_234_567, 10.0, 12.35), (2_000_000, 2.0, 100.0), (2_100_000, 2.0, 100.0),
                          (-5, 1.0, 0.0)])
def test_a_share_is_percent_to_two_decimals_clamped(stalled_us: int, elapsed_s: float, share: float) -> None:
    assert stalled_share(stalled_us, elapsed_s) == share


def test_the_history_keeps_what_a_later_window_can_start_at() -> None:
    history = next_history((), at(0.0))
    assert history == (at(0.0),)
    history = next_history(history, at(0.5))
    assert [r.at for r in history] == [0.0, 0.5]
    # At 1.6 the window starts at 0.5: 0.0 can never start one again.
    history = next_history(history, at(1.6))
    assert [r.at for r in history] == [0.5, 1.6]
    # After a gap over MAX_WINDOW_S nothing earlier is kept.
    history = next_history(history, at(1.6 + MAX_WINDOW_S + 0.1))
    assert [r.at for r in history] == [1.6 + MAX_WINDOW_S + 0.1]


def test_a_counter_going_backwards_starts_the_history_anew() -> None:
    history = (at(0.0, 100, 50), at(0.5, 200, 60))
    assert next_history(history, at(1.0, 10, 60)) == (at(1.0, 10, 60),)
    assert next_history(history, at(1.0, 200, 59)) == (at(1.0, 200, 59),)
    assert next_history(history, at(0.4, 300, 70)) == (at(0.4, 300, 70),)  # a time before the last


def test_a_burst_of_readings_keeps_the_history_bounded_and_the_window_near_a_second() -> None:
    """Cycles every millisecond for 30 s (a storm): the history stays a dozen readings, each window 1-1.1 s."""
    history: tuple[PsiReading, ...] = ()
    longest = 0
    windows = []
    for step in range(30_000):
        now = step * 0.001
        reading = at(now, some=step * 500, full=step * 100)  # half the time some-stalled, a tenth full
        shares = recent_shares(history, reading)
        start = window_start(history, now)
        if now >= MIN_WINDOW_S + HISTORY_SPACING_S:
            assert shares == (50.0, 10.0) and start is not None
            windows.append(now - start.at)
        history = next_history(history, reading)
        longest = max(longest, len(history))
    assert longest <= MIN_WINDOW_S / HISTORY_SPACING_S + 2
    assert min(windows) >= MIN_WINDOW_S and max(windows) <= MIN_WINDOW_S + HISTORY_SPACING_S + 0.002


def test_cycles_every_two_seconds_each_see_the_share_since_the_last() -> None:
    """PSI firings during a stall: one per 2 s trigger window, and each cycle's window is the 2 s since the last."""
    history = next_history((), at(0.0, 0, 0))
    for step in range(1, 6):
        reading = at(2.0 * step, some=step * 1_600_000, full=step * 400_000)
        assert recent_shares(history, reading) == (80.0, 20.0)
        history = next_history(history, reading)
        assert len(history) == 2


def threshold(signal: Signal) -> Threshold:
    return Threshold(signal=signal, value=ThresholdValue(quantity=Quantity.parse("1")))


STALL_FULL = threshold(Signal.MEMORY_STALL_FULL)
PODS_STALL_SOME = threshold(Signal.ALLOCATABLE_MEMORY_STALL_SOME)
REFAULT = threshold(Signal.MEMORY_REFAULT)
MEMORY = threshold(Signal.MEMORY_AVAILABLE)


@pytest.mark.parametrize(
    ("configured", "met", "wanted"),
    [
        ((STALL_FULL,), (), True),  # a stall threshold not met: one more cycle once a window can show the stall
        ((STALL_FULL,), (STALL_FULL,), False),  # met: decided
        ((STALL_FULL, PODS_STALL_SOME), (STALL_FULL,), True),  # another one still unmet
        ((REFAULT,), (), False),  # the refault signal reads no PSI: its own watch
        ((MEMORY,), (), False),  # memory thresholds: the memcg notifier / memory watch follow them
        ((), (), False),
    ],
)
def test_a_psi_firings_cycle_is_followed_up_while_a_stall_threshold_is_unmet(
        configured: tuple[Threshold, ...], met: tuple[Threshold, ...], wanted: bool) -> None:
    assert window_follow_up_wanted(configured, met) is wanted


def test_the_follow_up_comes_once_a_window_from_the_firings_reading_is_long_enough() -> None:
    # The firing's reading is taken just before its cycle starts: a cycle WINDOW_FOLLOW_UP_S after the start has a
    # window of at least MIN_WINDOW_S back to it.
    firing_reading = at(99.99)
    assert window_start((firing_reading,), 100.0 + WINDOW_FOLLOW_UP_S) == firing_reading
    assert WINDOW_FOLLOW_UP_S < 2.0, "sooner than the next firing of a 2 s trigger window"


# --- a stall threshold's own trigger -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("previous_at", "at", "counts"),
    [
        (None, 50.0, True),  # the trigger's first firing: the breach is within its window
        (46.0, 50.0, True),  # two 2 s windows after the last: not one held back
        (47.9, 50.0, False),  # sooner: it may be a breach the kernel held back since ~48 s, up to a window older
        (10.0, 50.0, True),  # long after
    ],
    ids=["first", "two-windows-after", "maybe-held-back", "long-after"],
)
def test_a_firing_counts_when_it_is_the_first_of_its_trigger_for_two_windows(
        previous_at: float | None, at: float, counts: bool) -> None:
    assert firing_counts(previous_at, at, 2.0) is counts


def fired(at: float, share: float = 20.0, kind: StallKind = StallKind.FULL, counts: bool = True) -> ThresholdFiring:
    return ThresholdFiring(at, kind, share, counts)


@pytest.mark.parametrize(
    ("line_recent", "firings", "now", "recent"),
    [
        (None, (), 10.0, None),  # nothing fired: the own window's figure, none here
        (3.5, (), 10.0, 3.5),
        (None, (fired(9.9),), 10.0, 20.0),  # the firing's cycle: no window of its own yet, the threshold's share
        (3.5, (fired(9.9),), 10.0, 20.0),  # the own window shows less (its start before the stall)
        (35.0, (fired(9.9),), 10.0, 35.0),  # the own window shows more: it stands
        (None, (fired(10.0 - FIRING_HOLDS_S),), 10.0, 20.0),  # exactly FIRING_HOLDS_S after it: still held
        (3.5, (fired(9.0 - 0.01),), 10.0, 3.5),  # longer: the own window (from the firing's reading) decides
        (None, (fired(10.2),), 10.0, None),  # a firing after the reading says nothing of it
        (3.5, (fired(9.9, kind=StallKind.SOME),), 10.0, 3.5),  # the other line's trigger
        (3.5, (fired(9.9, counts=False),), 10.0, 3.5),  # a rate-limited firing: its breach may be a window older
        (None, (fired(9.5, 20.0), fired(9.8, 40.0), fired(9.9, 60.0, counts=False)), 10.0, 40.0),  # the largest
    ],
    ids=["none", "own-only", "firing-no-window", "firing-over-own", "own-over-firing", "held-to-the-bound",
         "past-the-bound", "after-the-reading", "other-line", "not-counting", "largest-counting"],
)
def test_a_thresholds_firing_raises_its_lines_recent_share_for_a_second(
        line_recent: float | None, firings: tuple[ThresholdFiring, ...], now: float, recent: float | None) -> None:
    assert with_firings(line_recent, StallKind.FULL, firings, now) == recent


def test_each_psi_stall_threshold_wants_a_trigger_at_its_share_of_the_window() -> None:
    thresholds = parse_stall_thresholds(
        {"evictd.io/memory.stall.full": "20%", "evictd.io/allocatableMemory.stall.some": "12.5%",
         "evictd.io/memory.refault": "2%"},
        {"evictd.io/memory.stall.some": "33.33%", "evictd.io/memory.stall.full": "20%",
         "evictd.io/allocatableMemory.stall.full": "0%"},
        {"evictd.io/memory.stall.some": "30s", "evictd.io/memory.stall.full": "30s",
         "evictd.io/allocatableMemory.stall.full": "30s"}, {})
    assert threshold_triggers(thresholds, 2_000_000) == (
        ThresholdTrigger(Signal.MEMORY_STALL_FULL, StallKind.FULL, 400_000, 20.0),  # the soft 20% shares it
        ThresholdTrigger(Signal.ALLOCATABLE_MEMORY_STALL_SOME, StallKind.SOME, 250_000, 12.5),
        ThresholdTrigger(Signal.MEMORY_STALL_SOME, StallKind.SOME, 666_600, 33.33),
    ), "no trigger for the refault signal (no PSI) nor a 0% threshold (always met)"
    # Rounded up to the microsecond: a firing then means at least the share.
    assert threshold_triggers(thresholds[:1], 1_000_001)[0].stall_us == 200_001

"""Blind signals (src/evictd/core/blind.py): a thresholded signal unread for three cycles in a row."""

from __future__ import annotations

from evictd.core.blind import BLIND_AFTER_CYCLES, blind_signals, blind_streaks
from evictd.core.signals import Signal

MEMORY, NODEFS, PID = Signal.MEMORY_AVAILABLE, Signal.NODEFS_AVAILABLE, Signal.PID_AVAILABLE


def test_a_thresholded_signal_unread_three_cycles_in_a_row_is_blind_and_one_reading_clears_it() -> None:
    streaks: dict[Signal, int] = {}
    seen = []
    for observed in ({NODEFS}, {NODEFS}, {NODEFS}, {NODEFS}, {MEMORY, NODEFS}, {NODEFS}):
        streaks = blind_streaks(streaks, [MEMORY, NODEFS], observed)
        seen.append(blind_signals(streaks))
    assert seen == [(), (), (MEMORY,), (MEMORY,), (), ()]
    assert BLIND_AFTER_CYCLES == 3


def test_only_signals_with_a_threshold_count_and_each_once() -> None:
    streaks = blind_streaks({}, [MEMORY, MEMORY], set())
    assert streaks == {MEMORY: 1}, "a signal with two thresholds counts once; pid.available has none here"
    assert blind_streaks({PID: 5}, [MEMORY], set()) == {MEMORY: 1}, "a threshold removed ends its streak"

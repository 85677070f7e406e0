"""Memory pressure files read with evictd's own `recent` share (`evictd.adapters.psi_history`): the readings of each
file kept between reads, on a clock that moves only when told."""

from __future__ import annotations

from pathlib import Path

import pytest

from clocks import ManualClock
from evictd.adapters.psi_history import PressureHistory
from evictd.core.errors import SampleError
from evictd.core.signals import StallKind


def pressure(some_total: int, full_total: int, avg10: float = 0.0) -> str:
    return (f"some avg10={avg10:.2f} avg60=0.00 avg300=0.00 total={some_total}\n"
            f"full avg10={avg10:.2f} avg60=0.00 avg300=0.00 total={full_total}\n")


def shares(history: PressureHistory, path: Path) -> tuple[float | None, float | None] | None:
    stats = history.read(path)
    return None if stats is None else (stats.some.recent, stats.full.recent)


def test_each_file_gets_the_share_stalled_since_its_own_reading_a_second_or_more_before(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = PressureHistory(clock)
    node, pods = tmp_path / "memory", tmp_path / "memory.pressure"
    node.write_text(pressure(1_000_000, 0))
    pods.write_text(pressure(0, 0))
    assert shares(history, node) == (None, None)  # the first reading: no window yet
    assert shares(history, pods) == (None, None)
    clock.advance(0.5)
    node.write_text(pressure(1_400_000, 100_000))
    assert shares(history, node) == (None, None)  # 0.5 s: too young
    clock.advance(1.5)  # 2 s after the first reading, 1.5 s after the second: the window starts at the second
    node.write_text(pressure(2_600_000, 400_000))
    pods.write_text(pressure(500_000, 200_000))
    assert shares(history, node) == (80.0, 20.0)
    assert shares(history, pods) == (25.0, 10.0)  # its own history: 2 s since its first reading
    # The kernel's averages are passed through as read.
    stats = history.read(node)
    assert stats is not None and stats.some.avg10 == 0.0 and stats.some.total == 2_600_000


def test_a_gap_longer_than_the_window_or_a_recreated_cgroup_gives_no_figure(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    history = PressureHistory(clock)
    path = tmp_path / "memory.pressure"
    path.write_text(pressure(5_000_000, 1_000_000))
    history.read(path)
    clock.advance(10.5)
    path.write_text(pressure(6_000_000, 1_000_000))
    assert shares(history, path) == (None, None)  # 10.5 s: avg10 alone decides
    clock.advance(2.0)
    path.write_text(pressure(100, 0))  # the pods cgroup made again: its totals start from 0
    assert shares(history, path) == (None, None)
    clock.advance(2.0)
    path.write_text(pressure(1_000_100, 500_000))
    assert shares(history, path) == (50.0, 25.0)  # the new counters' first reading is the new start


def test_an_unreadable_file_keeps_its_history_and_a_file_gone_forgets_it(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    history = PressureHistory(clock)
    path = tmp_path / "memory.pressure"
    path.write_text(pressure(0, 0))
    history.read(path)
    clock.advance(1.0)
    path.write_text("garbage\n")
    with pytest.raises(SampleError):
        history.read(path)
    clock.advance(1.0)
    path.write_text(pressure(1_000_000, 0))
    assert shares(history, path) == (50.0, 0.0)  # over the 2 s since the last reading that could be read
    path.unlink()
    assert history.read(path) is None
    path.write_text(pressure(2_000_000, 0))
    clock.advance(1.0)
    assert shares(history, path) == (None, None)  # started again


def test_a_thresholds_firing_gives_the_readings_within_a_second_its_share_on_its_file_and_line(
        tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = PressureHistory(clock)
    node, pods = tmp_path / "memory", tmp_path / "memory.pressure"
    node.write_text(pressure(1_000_000, 500_000))
    pods.write_text(pressure(0, 0))
    history.read(node)
    history.read(pods)
    clock.advance(5.0)  # a stall begins; the `full 400ms/2s` trigger of `memory.stall.full: 20%` fires
    history.note_firing(node, StallKind.FULL, 20.0, 2.0)
    node.write_text(pressure(1_200_000, 600_000))  # the window of 5 s since the last reading shows 4% / 2%
    pods.write_text(pressure(100_000, 0))
    assert shares(history, node) == (4.0, 20.0), "the full line takes the threshold's share, some its own window"
    assert shares(history, pods) == (2.0, 0.0), "another file's history is its own"
    clock.advance(0.9)
    node.write_text(pressure(1_300_000, 650_000))
    assert shares(history, node) == (5.08, 20.0), "still within FIRING_HOLDS_S (the window: 5.9 s back)"
    clock.advance(0.2)  # 1.1 s after the firing: the window from the firing's reading decides alone
    node.write_text(pressure(1_800_000, 700_000))
    assert shares(history, node) == (54.55, 9.09)


def test_a_firing_within_two_windows_of_the_last_does_not_count(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = PressureHistory(clock)
    path = tmp_path / "memory"
    path.write_text(pressure(0, 0))
    history.read(path)
    clock.advance(0.5)
    history.note_firing(path, StallKind.SOME, 40.0, 2.0)
    assert shares(history, path) == (40.0, None), "no window of its own yet: the firing's share alone"
    clock.advance(2.1)  # the kernel signals again a window later: maybe a breach it held back, up to 2 s older
    history.note_firing(path, StallKind.SOME, 40.0, 2.0)
    assert shares(history, path) == (0.0, 0.0), "the own window since the first firing's reading (2.1 s) decides"
    clock.advance(4.0)  # the next firing, two windows after the last
    history.note_firing(path, StallKind.SOME, 40.0, 2.0)
    assert shares(history, path) == (40.0, 0.0)
    history.note_firing(path, StallKind.SOME, 60.0, 2.0)  # another threshold's trigger on the same line: its own
    assert shares(history, path) == (60.0, 0.0)

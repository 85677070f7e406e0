"""The refault watch's rule (`evictd.core.wake`): which refault thresholds it watches after a cycle, and when
a look at /proc/vmstat's counts wakes the loop. Pure: readings and times are arguments."""

from __future__ import annotations

import pytest

from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Reading
from evictd.core.summary import Observation
from evictd.core.thresholds import parse_stall_thresholds
from evictd.core.wake import WatchedRefault, watched_shares
from evictd.core.wake import refault_look as look

Mi = 1 << 20
MEMORY = 10_000 * Mi  # so that 1 MiB refaulted within the window is 1 basis point
REFAULT = "evictd.io/memory.refault"
HARD, SOFT = parse_stall_thresholds({REFAULT: "2%"}, {REFAULT: "1%"}, {REFAULT: "30s"}, {})
STALL = parse_stall_thresholds({"evictd.io/memory.stall.some": "10%"}, {}, {}, {})[0]


def observed(share_basis_points: int) -> Observation:
    """The refault signal's observation of a cycle that read `share_basis_points` refaulted (its headroom)."""
    return Observation(Quantity.from_int(10_000 - share_basis_points, QuantityFormat.DECIMAL_SI),
                       Quantity.from_int(10_000, QuantityFormat.DECIMAL_SI), None)


@pytest.mark.parametrize(("share", "expected"), [
    pytest.param(None, (100, 200), id="no-figure-yet-both-watched"),
    pytest.param(50, (100, 200), id="neither-met-both-watched"),
    pytest.param(150, (200,), id="soft-met-its-grace-running-only-the-hard-one-watched"),
    pytest.param(250, (), id="hard-met-nothing-watched"),
])
def test_the_watch_watches_the_refault_thresholds_the_last_cycle_did_not_find_met(share: int | None,
                                                                                  expected: tuple[int, ...]) -> None:
    assert watched_shares((HARD, SOFT, STALL), None if share is None else observed(share)) == expected


def test_no_refault_threshold_nothing_watched() -> None:
    assert watched_shares((STALL,), None) == ()


def looks(refaulted_mib: list[int | None], scanned: list[int | None], *, gated: bool,
          shares: tuple[int, ...] = (100,)) -> list[bool]:
    """Look once a second at cumulative refault counts (MiB) and global scan counts; return each look's verdict."""
    watched, woken = WatchedRefault(), []
    for second, (refault, scans) in enumerate(zip(refaulted_mib, scanned, strict=True)):
        watched, wake = look(Reading.NODE_MEMORY_REFAULT, watched, None if refault is None else refault * Mi, MEMORY,
                             scans, float(second), shares, gated=gated)
        woken.append(wake)
    return woken


def test_a_share_reached_wakes_the_loop_once_the_figure_has_its_span() -> None:
    # 20 MiB a second: 100 basis points (1%) within 10 s are reached at once, but a figure needs 5 s of readings.
    woken = looks([i * 20 for i in range(8)], [0] * 8, gated=False)
    assert woken == [False] * 5 + [True] * 3


def test_a_share_below_the_lowest_watched_wakes_nothing() -> None:
    assert not any(looks([i * 5 for i in range(12)], [0] * 12, gated=False))  # 50 basis points within 10 s


def test_gated_the_watch_wakes_only_with_global_reclaim_within_the_gates_window() -> None:
    refaults = [i * 20 for i in range(20)]
    assert not any(looks(refaults, [1000] * 20, gated=True)), "a pod thrashing in its own limit: no global reclaim"
    assert looks(refaults, [1000] * 6 + [2000] * 14, gated=True)[6:17] == [True] * 11
    reclaim_long_ago = [1000, 2000] + [2000] * 18  # grew at 1 s, then never again
    woken = looks(refaults, reclaim_long_ago, gated=True)
    assert woken[5:12] == [True] * 7 and not any(woken[12:]), "reclaim older than 10 s opens nothing"


def test_unreadable_counts_wake_nothing_and_keep_the_readings_before() -> None:
    refaults: list[int | None] = [0, 20, 40, None, None, 100, 120]
    assert looks(refaults, [0] * 7, gated=False) == [False] * 5 + [True] * 2
    assert not any(looks(refaults, [0] * 7, gated=False, shares=()))  # nothing watched: no figure asked for


def test_a_counter_that_started_again_is_a_new_baseline() -> None:
    assert looks([500, 520, 540, 560, 580, 0, 20, 40, 60, 80, 100, 120], [0] * 12, gated=False) == \
        [False] * 5 + [False] * 5 + [True] * 2

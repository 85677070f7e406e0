"""Which pods a stall-family eviction may take (`evictd.core.pod_growth`): grown by POD_GROWTH_MIN_BYTES within the
window (working set, and usage and anonymous memory where read), since the last eviction after one, and under pressure themselves where
their pressure is read. Tables on plain numbers."""

from __future__ import annotations

import pytest

from evictd.core.pod_growth import (
    POD_GROWTH_MIN_BYTES,
    POD_STALL_MIN_PERCENT,
    PodMemorySnapshot,
    grew,
    next_snapshots,
    stall_candidates,
    under_pressure,
)
from evictd.core.stall_gate import STALL_RECLAIM_WINDOW_S
from evictd.core.summary import MemoryStats, PodReference, PodStats, PsiData, PsiStats, Summary

MiB = 1 << 20
STEP = POD_GROWTH_MIN_BYTES


def stats(uid: str, working_set: int, usage: int | None = None, some: float | None = None,
          recent: float | None = None, anon: int | None = None) -> PodStats:
    psi = None if some is None else PsiStats(PsiData(1, some, 0.0, 0.0, recent), PsiData(0, 0.0, 0.0, 0.0))
    return PodStats(PodReference(uid, "default", uid), MemoryStats(usage_bytes=usage, working_set_bytes=working_set,
                                                                  rss_bytes=anon, psi=psi))


@pytest.mark.parametrize(("before", "now", "expected"), [
    pytest.param((None, 100 * MiB), (None, 100 * MiB + STEP), True, id="working-set-grew-by-the-floor"),
    pytest.param((None, 100 * MiB), (None, 100 * MiB + STEP - 1), False, id="a-byte-short"),
    pytest.param((None, 100 * MiB), (None, 50 * MiB), False, id="shrank"),
    pytest.param((200 * MiB, 100 * MiB), (200 * MiB + STEP, 100 * MiB + STEP), True, id="both-grew"),
    # Pinned at its limit: usage cannot grow, only the split between active and inactive file moves.
    pytest.param((200 * MiB, 100 * MiB), (200 * MiB, 100 * MiB + 3 * STEP), False, id="at-its-limit-usage-flat"),
    pytest.param((200 * MiB, 100 * MiB), (None, 100 * MiB + STEP), True, id="usage-unread-working-set-decides"),
])
def test_grew(before: tuple[int | None, int], now: tuple[int | None, int], expected: bool) -> None:
    assert grew((*before, None, None), (*now, None, None)) is expected


@pytest.mark.parametrize(("anon_before", "anon_now", "expected"), [
    # A leak: its anonymous memory grew with its working set and usage.
    pytest.param(50 * MiB, 50 * MiB + STEP, True, id="anonymous-grew"),
    # A stream whose active page cache grew: working set and usage grew, its anonymous memory did not.
    pytest.param(50 * MiB, 50 * MiB + STEP - 1, False, id="page-cache-grew-not-the-pod-to-pay"),
    pytest.param(None, 50 * MiB, True, id="anonymous-unread-before"),
    pytest.param(50 * MiB, None, True, id="anonymous-unread-now"),
])
def test_growth_that_is_page_cache_does_not_count(anon_before: int | None, anon_now: int | None,
                                                  expected: bool) -> None:
    before = (200 * MiB, 100 * MiB, None, anon_before)
    now = (200 * MiB + 4 * STEP, 100 * MiB + 4 * STEP, None, anon_now)
    assert grew(before, now) is expected


def test_a_stream_beside_a_leak_only_the_leak_is_a_candidate() -> None:
    """Both grew in working set and usage; only the leak in anonymous memory."""
    base = Summary(pods=(stats("stream", 100 * MiB, 150 * MiB, anon=10 * MiB),
                         stats("leak", 100 * MiB, 150 * MiB, anon=90 * MiB)))
    later = Summary(pods=(stats("stream", 100 * MiB + 5 * STEP, 150 * MiB + 5 * STEP, anon=10 * MiB),
                          stats("leak", 100 * MiB + 5 * STEP, 150 * MiB + 5 * STEP, anon=90 * MiB + 5 * STEP)))
    snapshots = next_snapshots(next_snapshots((), base, 0.0), later, 5.0)
    assert stall_candidates(snapshots, later, None) == frozenset({"leak"})


@pytest.mark.parametrize(("some", "recent", "expected"), [
    pytest.param(None, None, True, id="not-read-v1-or-no-psi-growth-alone"),
    pytest.param(POD_STALL_MIN_PERCENT, None, True, id="at-the-floor"),
    pytest.param(0.99, None, False, id="under-the-floor-a-bystander"),
    pytest.param(0.0, 5.0, True, id="evictds-window-shows-it-before-avg10"),
])
def test_under_pressure(some: float | None, recent: float | None, expected: bool) -> None:
    assert under_pressure(stats("a", 1, some=some, recent=recent)) is expected


@pytest.mark.parametrize(("stalled_us", "span_s", "expected"), [
    # avg10 still 0.00 (its first update comes up to 2 s into a stall): the stalled time since the base decides.
    pytest.param(1_000_000, 10.0, True, id="1s-stalled-in-10s-is-10pct"),
    pytest.param(100_000, 10.0, True, id="100ms-in-10s-is-the-floor"),
    pytest.param(99_000, 10.0, False, id="99ms-in-10s-under-it"),
    pytest.param(50_000, 0.5, True, id="50ms-in-half-a-second"),
    pytest.param(-1, 10.0, False, id="total-went-back-no-figure"),
])
def test_under_pressure_from_the_stalled_time_since_the_base(stalled_us: int, span_s: float, expected: bool) -> None:
    pod = stats("a", 1, some=0.0)
    assert pod.memory is not None and pod.memory.psi is not None
    total = pod.memory.psi.some.total  # 1 us in `stats`
    assert under_pressure(pod, total - stalled_us, span_s) is expected


def snapshot(at: float, **figures: int) -> PodMemorySnapshot:
    return PodMemorySnapshot(at, {uid: (None, working_set, None, None) for uid, working_set in figures.items()})


def test_snapshots_keep_the_newest_a_window_old_and_every_later_one() -> None:
    kept: tuple[PodMemorySnapshot, ...] = ()
    for at in (0.0, 4.0, 9.0, 12.0, 16.0):
        kept = next_snapshots(kept, Summary(pods=(stats("a", int(at) * MiB),)), at)
    # At 16 s: the one at 4.0 (12 s old) is the newest at least 10 s old; 0.0 went.
    assert [snapshot.read_at for snapshot in kept] == [4.0, 9.0, 12.0, 16.0]
    assert kept[-1].figures == {"a": (None, 16 * MiB, None, None)}
    assert STALL_RECLAIM_WINDOW_S == 10.0


@pytest.mark.parametrize(("pods_now", "after", "expected"), [
    # grower: +2 steps since 0 s; bystander: still; thrasher: pinned at its limit; newcomer: first seen now.
    pytest.param([stats("grower", 100 * MiB + 2 * STEP), stats("bystander", 500 * MiB), stats("newcomer", 900 * MiB)],
                 None, {"grower"}, id="only-the-pod-that-grew"),
    pytest.param([stats("grower", 100 * MiB + 2 * STEP, some=20.0), stats("bystander", 500 * MiB, some=40.0)],
                 None, {"grower"}, id="a-still-bystander-under-pressure-is-no-candidate"),
    # A leak kswapd keeps fed does not stall itself: with no grown pod stalling, every grown pod is a candidate; with
    # one stalling, only it.
    pytest.param([stats("grower", 100 * MiB + 2 * STEP, some=0.0)], None, {"grower"},
                 id="a-grower-that-does-not-stall-when-none-does"),
    pytest.param([stats("grower", 100 * MiB + 2 * STEP, some=0.0),
                  stats("bystander", 500 * MiB + 2 * STEP, some=5.0)], None, {"bystander"},
                 id="the-grown-pod-that-stalls-first"),
    # After an eviction at 5 s: growth counts from the reading at 5 s (grower +1 step since), not from 0 s.
    pytest.param([stats("grower", 100 * MiB + 2 * STEP)], 5.0, {"grower"}, id="grew-since-the-eviction"),
    pytest.param([stats("grower", 100 * MiB + STEP)], 5.0, set(), id="grew-only-before-the-eviction"),
    pytest.param([stats("grower", 100 * MiB + 2 * STEP)], 8.0, set(), id="no-reading-since-the-eviction-yet"),
])
def test_stall_candidates(pods_now: list[PodStats], after: float | None, expected: set[str]) -> None:
    history = (snapshot(0.0, grower=100 * MiB, bystander=500 * MiB),
               snapshot(5.0, grower=100 * MiB + STEP, bystander=500 * MiB))
    summary = Summary(pods=tuple(pods_now))
    kept = next_snapshots(history, summary, 8.0)
    assert stall_candidates(kept, summary, after) == expected


def test_readings_closer_than_a_second_are_thinned_to_the_later() -> None:
    kept: tuple[PodMemorySnapshot, ...] = ()
    for at in (0.0, 0.3, 0.6, 2.0, 2.5):
        kept = next_snapshots(kept, Summary(pods=(stats("a", MiB),)), at)
    assert [snapshot.read_at for snapshot in kept] == [0.0, 2.0, 2.5]

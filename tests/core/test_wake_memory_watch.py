"""The v2 memory watch's arithmetic: which thresholds are watched after a cycle, how soon the next look is, and what a
look that read the cgroups finds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evictd.core.quantity import Quantity
from evictd.core.signals import Reading, Signal
from evictd.core.summary import SYSTEM_CONTAINER_PODS, ContainerStats, MemoryStats, NodeStats, Summary
from evictd.core.thresholds import Threshold, ThresholdValue, parse_percentage
from evictd.core.wake import (
    ASSUMED_FILL_BYTES_PER_S,
    HELD_PERIOD_S,
    LOOK_CPU_SHARE,
    MIN_PERIOD_S,
    STEADY_MAX_PERIOD_S,
    STEADY_TOLERANCE_BYTES,
    V1_BACKSTOP_FILL_BYTES_PER_S,
    WATCHES,
    Look,
    LookHistory,
    Target,
    look_history,
    look_period_s,
    steady_max_period_s,
    watch_plan,
)
from evictd.core.wake import look as row_look

MI = 1 << 20
GI = 1 << 30

N, P = Reading.NODE_MEMORY, Reading.PODS_MEMORY


def watch_period_s(margin: int, until_tick_s: float, *, steady: bool = False, v1: bool = False,
                   steady_max_s: float | None = None) -> float | None:
    """The memory rows' pace (`look_period_s` of the node memory row, on cgroup v1 if `v1`)."""
    return look_period_s(WATCHES[N], margin, until_tick_s, steady=steady, v1=v1, steady_max_s=steady_max_s)


def look(histories: dict[Target, LookHistory], targets: tuple[Target, ...], working_sets: dict[Reading, int],
         now: float, until_tick_s: float, *, held: tuple[Target, ...] = (),
         steady_max_s: float = STEADY_MAX_PERIOD_S) -> Look:
    """A memory look (`evictd.core.wake.look` with the histories of the looks before)."""
    return row_look(targets, working_sets, now, until_tick_s, histories=histories, held=held,
                    steady_max_s=steady_max_s)


def threshold(text: str, signal: Signal = Signal.MEMORY_AVAILABLE, grace_period_s: float = 0.0) -> Threshold:
    value = (ThresholdValue(percentage=parse_percentage(text)) if text.endswith("%")
             else ThresholdValue(quantity=Quantity.parse(text)))
    return Threshold(signal=signal, value=value, grace_period_s=grace_period_s)


def summary(node_available: int, node_working_set: int, pods: tuple[int, int] | None = None) -> Summary:
    containers = {} if pods is None else {SYSTEM_CONTAINER_PODS: ContainerStats(
        name=SYSTEM_CONTAINER_PODS, memory=MemoryStats(available_bytes=pods[0], working_set_bytes=pods[1]))}
    return Summary(node=NodeStats(memory=MemoryStats(available_bytes=node_available, working_set_bytes=node_working_set),
                                  system_containers=containers))


def watch_targets(thresholds: list[Threshold], summary: Summary) -> tuple[Target, ...]:
    """The targets `watch_plan` hands the watch at once: none while a hard memory threshold is held met."""
    targets, held = watch_plan(thresholds, summary)
    return () if held else targets


def test_each_unmet_memory_threshold_is_watched_in_the_cgroup_its_signal_is_read_from() -> None:
    thresholds = [threshold("100Mi"), threshold("200Mi", Signal.ALLOCATABLE_MEMORY_AVAILABLE, grace_period_s=30),
                  threshold("10%", Signal.NODEFS_AVAILABLE)]
    targets = watch_targets(thresholds, summary(3 * GI, 1 * GI, pods=(1 * GI, 512 * MI)))

    assert [(t.reading, t.capacity, t.met_below, t.description) for t in targets] == [
        (N, 4 * GI, 100 * MI, "hard memory.available threshold"),
        (P, 1 * GI + 512 * MI, 200 * MI,
         "soft allocatableMemory.available threshold"),
    ]


def test_a_threshold_met_in_the_cycle_or_without_an_observation_is_not_watched() -> None:
    met = threshold("100Mi")
    allocatable = threshold("100Mi", Signal.ALLOCATABLE_MEMORY_AVAILABLE)

    assert watch_targets([met, allocatable], summary(100 * MI - 1, 1 * GI)) == ()
    # Exactly at the quantity is not met (available < quantity): watched, one byte from a crossing.
    (target,) = watch_targets([met], summary(100 * MI, 1 * GI))
    assert target.margin(1 * GI) == 1
    assert target.margin(1 * GI + 1) == 0


def test_nothing_is_watched_while_a_hard_memory_threshold_is_met_and_the_hard_ones_are_while_a_soft_one_is() -> None:
    """Issue 37: 24-25 looks a second at the allocatable copy (its pods cgroup still short of it) while the node's
    hard threshold was met and the loop evicting anyway."""
    hard, copy = threshold("1Gi"), threshold("1Gi", Signal.ALLOCATABLE_MEMORY_AVAILABLE)
    soft = threshold("2Gi", grace_period_s=90)
    node_short = summary(1 * GI - 1, 3 * GI, pods=(1 * GI + 20 * MI, 1 * GI))
    assert watch_targets([hard, copy, soft], node_short) == ()
    # Only the soft threshold met (its grace period running): the hard crossing still wakes the loop at once.
    soft_only = summary(1 * GI + 20 * MI, 3 * GI, pods=(1 * GI + 20 * MI, 1 * GI))
    assert [t.reading for t in watch_targets([hard, copy, soft], soft_only)] == [N, P]


def test_while_a_hard_threshold_is_met_its_release_is_awaited_then_every_threshold_not_met_is_watched() -> None:
    hard, copy = threshold("1Gi"), threshold("1Gi", Signal.ALLOCATABLE_MEMORY_AVAILABLE)
    soft = threshold("2Gi", grace_period_s=90)
    node_short = summary(1 * GI - 1, 3 * GI, pods=(1 * GI + 20 * MI, 1 * GI))
    targets, held = watch_plan([hard, copy, soft], node_short)
    assert [t.reading for t in held] == [N]
    # Once released: the held threshold first, then the copy not met; the soft one met in the cycle is not watched.
    assert [t.reading for t in targets] == [N, P]
    assert held[0].margin(3 * GI) <= 0
    # No hard threshold met: nothing held.
    soft_only = summary(1 * GI + 20 * MI, 3 * GI, pods=(1 * GI + 20 * MI, 1 * GI))
    assert watch_plan([hard, copy, soft], soft_only)[1] == ()


def test_a_percentage_is_taken_of_the_capacity_the_cycle_saw() -> None:
    (target,) = watch_targets([threshold("10%")], summary(9 * GI, 1 * GI))
    # float32 10% of 10Gi, truncated, as the kubelet's GetThresholdQuantity.
    assert target.met_below == GI + 16
    assert target.margin(1 * GI) == 8 * GI - 16 + 1


def test_far_from_the_threshold_there_is_no_look_before_the_tick() -> None:
    assert watch_period_s(20 * GI, until_tick_s=10.0) is None
    assert watch_period_s(ASSUMED_FILL_BYTES_PER_S * 10, until_tick_s=10.0) is None
    assert watch_period_s(0, until_tick_s=10.0) is None, "met: the cycle decides it"
    assert watch_period_s(100 * MI, until_tick_s=0.0) is None


def test_the_next_look_is_when_the_margin_could_be_used_up_and_never_sooner_than_the_minimum() -> None:
    assert watch_period_s(512 * MI, until_tick_s=10.0) == 0.5
    assert watch_period_s(1 * MI, until_tick_s=10.0) == MIN_PERIOD_S
    assert watch_period_s(1, until_tick_s=10.0) == MIN_PERIOD_S


@pytest.mark.parametrize(("margin", "steady", "v2", "v1"), [
    (2 * GI, False, 2.0, 0.5),  # the backstop on v1 paces for a fill 4 times as fast
    (512 * MI, False, 0.5, 0.125),
    (40 * MI, False, 40 / 1024, MIN_PERIOD_S),
    (1 * MI, False, MIN_PERIOD_S, MIN_PERIOD_S),
    (2 * GI, True, 2.0, 0.5),  # steady: never sooner than the fast pace
    (200 * MI, True, STEADY_MAX_PERIOD_S, STEADY_MAX_PERIOD_S),  # the steady cap holds on v1 too
    (48 * GI, False, None, None),  # not before the tick either way (12 s on v1)
])
def test_on_v1_the_looks_are_paced_for_a_fill_of_4_gib_a_second_and_the_steady_cap_holds(
        margin: int, steady: bool, v2: float | None, v1: float | None) -> None:
    assert watch_period_s(margin, until_tick_s=10.0, steady=steady) == pytest.approx(v2)
    assert watch_period_s(margin, until_tick_s=10.0, steady=steady, v1=True) == pytest.approx(v1)


def test_the_memory_rows_say_both_cgroup_versions_rates_and_the_steady_cap() -> None:
    for reading in (N, P):
        row = WATCHES[reading]
        assert (row.rate(v1=False), row.rate(v1=True)) == (ASSUMED_FILL_BYTES_PER_S, V1_BACKSTOP_FILL_BYTES_PER_S)
        assert (row.min_period_s, row.steady_cap_s) == (MIN_PERIOD_S, STEADY_MAX_PERIOD_S)


@given(st.integers(min_value=1, max_value=1 << 45), st.floats(min_value=0.001, max_value=60.0))
def test_a_look_never_comes_later_than_the_margin_allows_nor_after_the_tick(margin: int, until_tick_s: float) -> None:
    period = watch_period_s(margin, until_tick_s)
    if period is None:
        assert max(margin / ASSUMED_FILL_BYTES_PER_S, MIN_PERIOD_S) >= until_tick_s
    else:
        assert MIN_PERIOD_S <= period < until_tick_s
        assert period <= max(margin / ASSUMED_FILL_BYTES_PER_S, MIN_PERIOD_S)


# Issue 37 item 3: a steady margin is looked at less often. Each case: the looks as (seconds since arming, margin),
# whether the last one finds the margin steady, and the next period for its margin with the tick 10 s away.
# The looks must see a margin within the tolerance for one capped period before it is steady (`look_history`), so
# the slowest fill still watched for is the one that uses the tolerance up in that period: 4 MiB/s.
W = STEADY_MAX_PERIOD_S
FLOOR_FILL_BYTES_PER_S = STEADY_TOLERANCE_BYTES / STEADY_MAX_PERIOD_S
STEADY_CASES = [
    pytest.param(((0.0, 15 * MI),), False, MIN_PERIOD_S, id="first-look-fast"),
    pytest.param(((0.0, 15 * MI), (W / 2, 15 * MI)), False, MIN_PERIOD_S, id="not-steady-for-a-window-yet"),
    pytest.param(((0.0, 15 * MI), (W / 2, 15 * MI), (W, 15 * MI)), True, STEADY_MAX_PERIOD_S,
                 id="steady-for-a-window-slow-pace-capped"),
    pytest.param(((0.0, 15 * MI), (W, 19 * MI)), True, STEADY_MAX_PERIOD_S, id="growing-is-steady"),
    pytest.param(((0.0, 15 * MI), (W / 2, 15 * MI - STEADY_TOLERANCE_BYTES), (W, 15 * MI - STEADY_TOLERANCE_BYTES)),
                 True, STEADY_MAX_PERIOD_S, id="shrink-within-tolerance-is-steady"),
    pytest.param(((0.0, 15 * MI), (W, 15 * MI), (2 * W, 15 * MI - STEADY_TOLERANCE_BYTES - 1)), False, MIN_PERIOD_S,
                 id="shrink-past-tolerance-back-to-fast-at-once"),
    pytest.param(((0.0, 15 * MI), (W / 2, 15 * MI - MI // 2), (W, 15 * MI - MI), (1.5 * W, 15 * MI - 3 * MI // 2)),
                 False, MIN_PERIOD_S, id="shrinks-within-tolerance-add-up-from-the-reference"),
    pytest.param(((0.0, 15 * MI), (W, 20 * MI), (2 * W, 20 * MI - STEADY_TOLERANCE_BYTES - 1)), False, MIN_PERIOD_S,
                 id="reference-is-the-highest-margin-of-the-run"),
    pytest.param(((0.0, 15 * MI), (W, 15 * MI), (2 * W, 10 * MI), (2.5 * W, 10 * MI)), False, MIN_PERIOD_S,
                 id="after-a-shrink-a-whole-window-again"),
    pytest.param(((0.0, 15 * MI), (W, 15 * MI), (2 * W, 10 * MI), (3 * W, 10 * MI)), True, STEADY_MAX_PERIOD_S,
                 id="after-a-shrink-and-a-window-slow-again"),
    pytest.param(((0.0, MI // 2), (W, MI // 2)), True, (MI // 2) / FLOOR_FILL_BYTES_PER_S,
                 id="tiny-steady-margin-waits-only-what-the-floor-fill-allows"),
    pytest.param(((0.0, 512 * MI), (W, 512 * MI)), True, 0.5, id="far-margin-the-fast-rule-is-slower-already"),
]


@pytest.mark.parametrize(("looks", "steady", "period"), STEADY_CASES)
def test_a_margin_steady_for_a_window_is_looked_at_less_often(looks: tuple[tuple[float, int], ...], steady: bool,
                                                              period: float) -> None:
    history: LookHistory | None = None
    for at, margin in looks:
        history = look_history(history, margin, at)
    assert history is not None
    assert history.steady is steady
    assert watch_period_s(looks[-1][1], until_tick_s=10.0, steady=history.steady) == pytest.approx(period)


def test_a_steady_margin_waits_for_no_look_when_the_tick_comes_first() -> None:
    assert watch_period_s(15 * MI, until_tick_s=0.05, steady=True) is None, "the tick comes first"


@given(st.integers(min_value=1, max_value=1 << 40), st.floats(min_value=0.001, max_value=60.0))
def test_a_steady_look_comes_within_the_cap_and_before_a_floor_fill_could_cross(margin: int, until_tick_s: float) -> None:
    steady = watch_period_s(margin, until_tick_s, steady=True)
    fast = watch_period_s(margin, until_tick_s)
    if steady is None:
        return
    assert fast is not None and fast <= steady
    assert steady <= max(fast, STEADY_MAX_PERIOD_S)
    assert steady <= max(fast, margin / FLOOR_FILL_BYTES_PER_S)


@given(st.floats(min_value=1.01, max_value=1000.0), st.lists(st.floats(min_value=0.001, max_value=0.25), min_size=1,
                                                            max_size=40))
def test_a_fill_faster_than_the_floor_is_never_found_steady(times_floor: float, gaps_s: list[float]) -> None:
    """Whatever the pace of the looks (a loaded machine delays them), a margin shrinking faster than the floor rate
    never counts as steady: the pace never slows on a ramp."""
    rate = FLOOR_FILL_BYTES_PER_S * times_floor
    at, start = 0.0, 1 << 40
    history = look_history(None, start, at)
    for gap in gaps_s:
        at += gap
        history = look_history(history, start - int(rate * at), at)
        assert not history.steady


ROOT_TARGET = Target(N, 2 * GI, 512 * MI, "hard memory.available threshold")
PODS_TARGET = Target(P, GI, 256 * MI,
                          "hard allocatableMemory.available threshold")


@pytest.mark.parametrize(("working_sets", "met", "period_s"), [
    ({N: 1000 * MI, P: 500 * MI}, None, (268 * MI + 1) / ASSUMED_FILL_BYTES_PER_S),  # the pods' margin
    ({N: 1500 * MI, P: 500 * MI}, None, (36 * MI + 1) / ASSUMED_FILL_BYTES_PER_S),  # the root's
    ({N: 1536 * MI, P: 500 * MI}, None, MIN_PERIOD_S),  # a byte short
    ({N: 1536 * MI + 1, P: 500 * MI}, ROOT_TARGET, None),  # met: wake the loop, no look before the cycle
    ({P: 800 * MI}, PODS_TARGET, None),  # the root unreadable: skipped, the cycle reports it
    ({}, None, None),
])
def test_a_look_finds_a_target_met_or_the_next_look_for_the_narrowest_margin(
        working_sets: dict[Reading, int], met: Target | None, period_s: float | None) -> None:
    found = look({}, (ROOT_TARGET, PODS_TARGET), working_sets, now=1.0, until_tick_s=9.0)
    assert found.met == met
    assert found.period_s == period_s


def test_a_look_keeps_what_it_saw_of_the_targets_handed_again_only() -> None:
    steady = LookHistory(reference_bytes=37 * MI, since_s=0.0, steady=True)
    other = Target(N, 2 * GI, 600 * MI, "another level")
    found = look({ROOT_TARGET: steady, other: steady}, (ROOT_TARGET,), {N: 1500 * MI}, now=1.0, until_tick_s=9.0)
    assert dict(found.histories) == {ROOT_TARGET: LookHistory(37 * MI, 0.0, True)}
    assert found.period_s == STEADY_MAX_PERIOD_S, "steady across the arming: the slow pace"
    fresh = look({}, (ROOT_TARGET,), {N: 1500 * MI}, now=1.0, until_tick_s=9.0)
    assert fresh.period_s == (36 * MI + 1) / ASSUMED_FILL_BYTES_PER_S, "no history: the fast pace"


@pytest.mark.parametrize(("working_sets", "until_tick_s", "met", "period_s", "released"), [
    # Still met: nothing else judged (the pods' target is met too), looked at again after HELD_PERIOD_S.
    ({N: 1536 * MI + 1, P: 800 * MI}, 9.0, None, HELD_PERIOD_S, False),
    ({P: 500 * MI}, 9.0, None, HELD_PERIOD_S, False),  # unreadable: held still
    ({N: 1536 * MI + 1}, HELD_PERIOD_S, None, None, False),  # the tick comes first: the cycle arms it again
    # Released: every target judged at once, at the pace of the narrowest margin, or met again.
    ({N: 1500 * MI, P: 500 * MI}, 9.0, None, (36 * MI + 1) / ASSUMED_FILL_BYTES_PER_S, True),
    ({N: 1000 * MI, P: 800 * MI}, 9.0, PODS_TARGET, None, True),
])
def test_a_look_at_held_targets_waits_for_their_release_and_then_judges_the_targets(
        working_sets: dict[Reading, int], until_tick_s: float, met: Target | None, period_s: float | None,
        released: bool) -> None:
    found = look({}, (ROOT_TARGET, PODS_TARGET), working_sets, now=1.0, until_tick_s=until_tick_s,
                 held=(ROOT_TARGET,))
    assert (found.met, found.period_s, found.released) == (met, period_s, released)


# Issue 37 items 3 and 5 on cgroup v2: the steady cap follows what a look costs the watch's thread.
@pytest.mark.parametrize(("look_cpu_s", "cap_s"), [
    (None, STEADY_MAX_PERIOD_S),  # not measured yet: the fixed cap
    (0.00005, MIN_PERIOD_S),  # a real host's look (tens of microseconds): the fast rule's pace
    (0.00065, 0.052),  # the 6.1 user-mode guest on a quiet host
    (0.0025, 0.2),  # the same guest on a loaded host
    (0.004, STEADY_MAX_PERIOD_S),  # and more: the fixed cap bounds the wait
])
def test_on_v2_the_steady_cap_spends_at_most_the_looks_share_of_a_cpu(look_cpu_s: float | None, cap_s: float) -> None:
    assert steady_max_period_s(look_cpu_s) == pytest.approx(cap_s)


@given(st.floats(min_value=0.0, max_value=1.0))
def test_the_budgeted_cap_is_within_the_fast_pace_and_the_fixed_cap_and_keeps_to_the_share_in_between(
        look_cpu_s: float) -> None:
    cap = steady_max_period_s(look_cpu_s)
    assert MIN_PERIOD_S <= cap <= STEADY_MAX_PERIOD_S
    if MIN_PERIOD_S < cap < STEADY_MAX_PERIOD_S:
        assert look_cpu_s / cap == pytest.approx(LOOK_CPU_SHARE)


@pytest.mark.parametrize("cap_s", [MIN_PERIOD_S, 0.052, STEADY_MAX_PERIOD_S])
def test_with_a_budgeted_cap_the_window_and_the_floor_fill_follow_it(cap_s: float) -> None:
    """A margin is steady after a window as long as the cap, and a steady look waits no longer than the cap nor than
    a fill of the tolerance per cap needs to use the margin up; a fill faster than that is never steady."""
    history = look_history(None, 15 * MI, 0.0, steady_max_s=cap_s)
    history = look_history(history, 15 * MI, cap_s * 0.99, steady_max_s=cap_s)
    assert not history.steady
    history = look_history(history, 15 * MI, cap_s, steady_max_s=cap_s)
    assert history.steady
    assert watch_period_s(15 * MI, 10.0, steady=True, steady_max_s=cap_s) == pytest.approx(cap_s)
    tiny = MI // 4
    assert watch_period_s(tiny, 10.0, steady=True, steady_max_s=cap_s) == pytest.approx(
        max(MIN_PERIOD_S, min(cap_s, tiny / (STEADY_TOLERANCE_BYTES / cap_s))))
    rate = STEADY_TOLERANCE_BYTES / cap_s * 1.5
    history = look_history(None, 1 << 40, 0.0, steady_max_s=cap_s)
    for step in range(1, 20):
        at = step * cap_s / 4
        history = look_history(history, (1 << 40) - int(rate * at), at, steady_max_s=cap_s)
        assert not history.steady


def test_a_look_with_a_budgeted_cap_paces_a_steady_margin_by_it() -> None:
    steady = LookHistory(reference_bytes=37 * MI, since_s=0.0, steady=True)
    found = look({ROOT_TARGET: steady}, (ROOT_TARGET,), {N: 1500 * MI}, now=1.0, until_tick_s=9.0,
                 steady_max_s=0.052)
    assert found.period_s == pytest.approx(0.052)
    held = look({ROOT_TARGET: steady}, (ROOT_TARGET,), {N: 1500 * MI}, now=1.0, until_tick_s=9.0,
                held=(ROOT_TARGET,), steady_max_s=0.052)
    assert held.released and held.period_s == pytest.approx(0.052), "released: judged with the same cap"

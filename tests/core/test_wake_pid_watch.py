"""The pid watch as a row of `evictd.core.wake.WATCHES`: which ``pid.available`` thresholds are watched after a
cycle, how soon the next look is, and what a look that read the task count finds."""

from __future__ import annotations

import pytest

from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Reading, Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, ThresholdValue, parse_percentage
from evictd.core.wake import WATCHES, Look, Target, Wake, WatchRow, look_period_s, used_seen
from evictd.core.wake import look as row_look
from evictd.core.wake import watch_targets as row_targets

ROW = WATCHES[Reading.PIDS]
ASSUMED_FORKS_PER_S = 10_000
MIN_PERIOD_S = ROW.min_period_s


def watch_targets(thresholds: list[Threshold], observed: Observation | None) -> tuple[Target, ...]:
    return row_targets(thresholds, Signal.PID_AVAILABLE, observed)


def tasks_seen(observed: Observation) -> int:
    return used_seen(observed)


def watch_period_s(margin: int, until_tick_s: float) -> float | None:
    return look_period_s(ROW, margin, until_tick_s)


def look(targets: list[Target], tasks: int, until_tick_s: float) -> Look:
    return row_look(targets, {Reading.PIDS: tasks}, 0.0, until_tick_s)


def test_the_pid_row_assumes_10000_forks_a_second_and_looks_at_most_10_times_a_second() -> None:
    assert WatchRow(Wake.PID_WATCH, ASSUMED_FORKS_PER_S, 0.1, counted=True) == ROW
    assert look_period_s(WatchRow(Wake.PID_WATCH, 0, 1.0), 5, 10.0) is None, "no rate: no paced look"


PID_MAX = 2048


def threshold(text: str, grace_period_s: float = 0.0, signal: Signal = Signal.PID_AVAILABLE) -> Threshold:
    value = (ThresholdValue(percentage=parse_percentage(text)) if text.endswith("%")
             else ThresholdValue(quantity=Quantity.parse(text)))
    return Threshold(signal=signal, value=value, grace_period_s=grace_period_s)


def observed(tasks: int, capacity: int = PID_MAX) -> Observation:
    """The cycle's ``pid.available`` observation with `tasks` running (as summary.py makes it from the rlimit)."""
    return Observation(Quantity.from_int(capacity - tasks, QuantityFormat.DECIMAL_SI),
                       Quantity.from_int(capacity, QuantityFormat.DECIMAL_SI), None)


HARD = threshold("25%")  # met below 512 of 2048
SOFT = threshold("1k", grace_period_s=30)  # met below 1000


@pytest.mark.parametrize(("thresholds", "tasks", "expected"), [
    pytest.param([HARD, SOFT], 300, [(2048, 512, "hard pid.available threshold"),
                                     (2048, 1000, "soft pid.available threshold")], id="neither-met-both-watched"),
    pytest.param([HARD, SOFT], 1100, [(2048, 512, "hard pid.available threshold")],
                 id="soft-met-its-grace-running-only-the-hard-one-watched"),
    pytest.param([threshold("100", grace_period_s=30), HARD], 1537, [],
                 id="hard-met-nothing-watched-not-even-a-soft-one-not-met"),
    pytest.param([HARD, threshold("100", grace_period_s=30)], 1537, [], id="hard-met-whatever-the-order"),
    pytest.param([HARD], 1536, [(2048, 512, "hard pid.available threshold")], id="exactly-at-the-quantity-not-met"),
    pytest.param([threshold("511500m")], 1536, [(2048, 512, "hard pid.available threshold")],
                 id="a-fractional-quantity-is-met-below-its-ceiling"),
    pytest.param([threshold("100Mi", signal=Signal.MEMORY_AVAILABLE), threshold("10%", signal=Signal.NODEFS_AVAILABLE)],
                 300, [], id="other-signals-not-watched"),
])
def test_the_watch_watches_the_pid_thresholds_the_cycle_did_not_find_met(
        thresholds: list[Threshold], tasks: int, expected: list[tuple[int, int, str]]) -> None:
    targets = watch_targets(thresholds, observed(tasks))
    assert [(t.capacity, t.met_below, t.description) for t in targets] == expected


def test_a_percentage_is_of_the_capacity_the_cycle_saw() -> None:
    # The kubelet's MaxPID is min(pid_max, threads-max): here threads-max, 30,000.
    (target,) = watch_targets([threshold("10%")], observed(1000, capacity=30_000))
    assert (target.capacity, target.met_below) == (30_000, 3000)


def test_without_an_observation_nothing_is_watched() -> None:
    assert watch_targets([HARD, SOFT], None) == ()


def test_the_margin_is_the_tasks_that_can_start_before_the_threshold_is_met() -> None:
    target = Target(Reading.PIDS, PID_MAX, 512, "hard pid.available threshold")
    assert target.margin(1535) == 2
    assert target.margin(1536) == 1, "available 512: not met, one more task meets it"
    assert target.margin(1537) == 0, "available 511 < 512: met"


def test_the_cycles_task_count_is_read_back_from_its_observation() -> None:
    assert tasks_seen(observed(777)) == 777


@pytest.mark.parametrize(("margin", "until_tick_s", "expected"), [
    pytest.param(3000, 10.0, 3000 / ASSUMED_FORKS_PER_S, id="near-margin-over-the-rate"),
    pytest.param(30_000, 10.0, 30_000 / ASSUMED_FORKS_PER_S, id="farther-looked-at-less-often"),
    pytest.param(100_000, 10.0, None, id="far-no-look-before-the-tick"),
    pytest.param(3000, 0.25, None, id="the-tick-comes-first"),
    pytest.param(5, 10.0, MIN_PERIOD_S, id="very-near-never-sooner-than-the-floor"),
    pytest.param(0, 10.0, None, id="met-no-look"),
])
def test_how_soon_the_next_look_is(margin: int, until_tick_s: float, expected: float | None) -> None:
    assert watch_period_s(margin, until_tick_s) == expected


def test_the_assumed_rate_looks_at_a_node_3000_pids_away_about_three_times_a_second() -> None:
    assert watch_period_s(3000, 10.0) == pytest.approx(0.3)
    assert watch_period_s(30_000, 10.0) == pytest.approx(3.0)


NEAR = Target(Reading.PIDS, PID_MAX, 512, "hard pid.available threshold")  # met from 1537 tasks
FAR = Target(Reading.PIDS, PID_MAX, 100, "soft pid.available threshold")  # met from 1949 tasks


@pytest.mark.parametrize(("tasks", "expected"), [
    pytest.param(500, Look(None, (1536 - 500 + 1) / ASSUMED_FORKS_PER_S), id="none-met-the-nearest-sets-the-pace"),
    pytest.param(1000, Look(None, MIN_PERIOD_S), id="near-never-sooner-than-the-floor"),
    pytest.param(1537, Look(NEAR, None), id="the-near-one-met"),
    pytest.param(2000, Look(NEAR, None), id="both-met-the-first-reported"),
])
def test_a_look_finds_a_target_met_or_when_to_look_next(tasks: int, expected: Look) -> None:
    assert look([NEAR, FAR], tasks, 10.0) == expected
    assert look([FAR, NEAR], tasks, 10.0).period_s == expected.period_s


def test_a_look_far_from_every_target_looks_no_more_before_the_tick() -> None:
    assert look([NEAR, FAR], 100, 0.1) == Look(None, None)
    assert look([], 100, 10.0) == Look(None, None)

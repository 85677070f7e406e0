"""The kubelet's helpers.go functions that `assess` is made of, one for one (evictd.core.engine, KUBELET_SPEC
§5-§7): first-observed times, node conditions and their transition period, grace periods, updated stats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from evictd.core.engine import Assessment, NoneStarved, ThresholdStatus
from evictd.core.engine_rules import (
    GRACE_CUT_SHARE,
    memory_ran_short,
    node_conditions,
    node_conditions_last_observed_at,
    node_conditions_observed_since,
    thresholds_first_observed_at,
    thresholds_met_grace_period,
    thresholds_updated_stats,
)
from evictd.core.quantity import Quantity
from evictd.core.signals import NodeCondition, Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, ThresholdValue

HARD_MEMORY = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Quantity.parse("1Gi")))
SOFT_MEMORY = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Quantity.parse("2Gi")), grace_period_s=30,
                        hard=False)
NODEFS = Threshold(Signal.NODEFS_AVAILABLE, ThresholdValue(percentage=0.1))
MEMORY, DISK = NodeCondition.MEMORY_PRESSURE, NodeCondition.DISK_PRESSURE
T0 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


def observed(at: datetime | None) -> Observation:
    return Observation(Quantity.parse("512Mi"), Quantity.parse("8Gi"), at)


def test_thresholds_first_observed_at_keeps_the_first_time_and_drops_thresholds_no_longer_met() -> None:
    first = thresholds_first_observed_at([HARD_MEMORY, SOFT_MEMORY], {SOFT_MEMORY: 5.0, NODEFS: 1.0}, now=10.0)
    assert first == {HARD_MEMORY: 10.0, SOFT_MEMORY: 5.0}


def test_node_conditions_once_each_in_threshold_order() -> None:
    assert node_conditions([NODEFS, HARD_MEMORY, SOFT_MEMORY]) == [DISK, MEMORY]
    assert node_conditions([]) == []


def test_node_conditions_last_observed_at_renews_the_observed_and_keeps_the_others() -> None:
    assert node_conditions_last_observed_at([MEMORY], {MEMORY: 1.0, DISK: 2.0}, now=9.0) == {MEMORY: 9.0, DISK: 2.0}
    assert node_conditions_last_observed_at([DISK], {}, now=3.0) == {DISK: 3.0}


def test_node_conditions_observed_since_is_strictly_within_the_transition_period() -> None:
    last_observed_at = {MEMORY: 0.0, DISK: 5.0}
    assert node_conditions_observed_since(last_observed_at, 300.0, now=299.0) == [MEMORY, DISK]
    assert node_conditions_observed_since(last_observed_at, 300.0, now=300.0) == [DISK]
    assert node_conditions_observed_since(last_observed_at, 0.0, now=5.0) == []


def test_thresholds_met_grace_period_counts_from_the_first_observation() -> None:
    first_observed_at = {HARD_MEMORY: 10.0, SOFT_MEMORY: 0.0}
    assert thresholds_met_grace_period(first_observed_at, now=10.0) == [HARD_MEMORY]
    assert thresholds_met_grace_period(first_observed_at, now=29.9) == [HARD_MEMORY]
    assert thresholds_met_grace_period(first_observed_at, now=30.0) == [HARD_MEMORY, SOFT_MEMORY]


def test_thresholds_updated_stats_keeps_newer_or_untimed_stats_and_drops_unobserved_signals() -> None:
    last = {Signal.MEMORY_AVAILABLE: observed(T0)}
    newer = {Signal.MEMORY_AVAILABLE: observed(T0 + timedelta(seconds=1))}
    assert thresholds_updated_stats([HARD_MEMORY], newer, last) == [HARD_MEMORY]
    assert thresholds_updated_stats([HARD_MEMORY], last, last) == []  # the same stats again
    older = {Signal.MEMORY_AVAILABLE: observed(T0 - timedelta(seconds=1))}
    assert thresholds_updated_stats([HARD_MEMORY], older, last) == []
    untimed = {Signal.MEMORY_AVAILABLE: observed(None)}
    assert thresholds_updated_stats([HARD_MEMORY], untimed, last) == [HARD_MEMORY]
    assert thresholds_updated_stats([HARD_MEMORY], newer, {}) == [HARD_MEMORY]  # the first cycle
    assert thresholds_updated_stats([HARD_MEMORY], newer, {Signal.MEMORY_AVAILABLE: observed(None)}) == [HARD_MEMORY]
    assert thresholds_updated_stats([NODEFS, SOFT_MEMORY], newer, last) == [SOFT_MEMORY]


def test_an_assessment_says_when_the_first_running_grace_period_ends() -> None:
    soft_nodefs = Threshold(Signal.NODEFS_AVAILABLE, ThresholdValue(percentage=0.2), grace_period_s=90, hard=False)

    def assessment(*statuses: tuple[Threshold, bool, float]) -> Assessment:
        return Assessment(NoneStarved(), thresholds=tuple(
            ThresholdStatus(t, grace_met=met, observed_for_s=for_s) for t, met, for_s in statuses))

    assert assessment().grace_ends_in_s() is None
    assert assessment((HARD_MEMORY, True, 0.0)).grace_ends_in_s() is None, "a hard threshold has no grace to end"
    assert assessment((SOFT_MEMORY, False, 12.5), (soft_nodefs, False, 80.0)).grace_ends_in_s() == 10.0
    assert assessment((SOFT_MEMORY, True, 31.0), (soft_nodefs, False, 1.0)).grace_ends_in_s() == 89.0
    assert assessment((SOFT_MEMORY, False, 30.5)).grace_ends_in_s() == 0.0, "never a wait below zero"


def memory_at(available: str, signal: Signal = Signal.MEMORY_AVAILABLE) -> dict[Signal, Observation]:
    return {signal: Observation(Quantity.parse(available), Quantity.parse("8Gi"), T0)}


def test_a_hard_memory_evictions_grace_period_ends_when_memory_falls_to_half_its_threshold() -> None:
    """evictd's own rule (`GRACE_CUT_SHARE`): the kernel's OOM killer is next, and it may choose another process."""
    assert GRACE_CUT_SHARE == 0.5
    assert not memory_ran_short(HARD_MEMORY, memory_at("600Mi")), "met, but more than half the threshold left"
    assert not memory_ran_short(HARD_MEMORY, memory_at("512Mi")), "exactly half: not below it"
    assert memory_ran_short(HARD_MEMORY, memory_at("511Mi"))
    percent = Threshold(Signal.ALLOCATABLE_MEMORY_AVAILABLE, ThresholdValue(percentage=0.1))  # 819.2Mi of 8Gi
    assert memory_ran_short(percent, memory_at("400Mi", Signal.ALLOCATABLE_MEMORY_AVAILABLE))
    assert not memory_ran_short(percent, memory_at("420Mi", Signal.ALLOCATABLE_MEMORY_AVAILABLE))
    assert not memory_ran_short(SOFT_MEMORY, memory_at("100Mi")), "a soft threshold's pod keeps its grace period"
    assert not memory_ran_short(HARD_MEMORY, {}), "no reading: nothing cut"
    assert not memory_ran_short(HARD_MEMORY, memory_at("100Mi", Signal.ALLOCATABLE_MEMORY_AVAILABLE)), "its own signal"
    assert not memory_ran_short(NODEFS, {Signal.NODEFS_AVAILABLE: Observation(Quantity.parse("1Mi"),
                                                                              Quantity.parse("8Gi"), T0)})

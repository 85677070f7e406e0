"""Who evicts on each signal, evictd or the kubelet (src/evictd/core/handover.py): the backstop ordering, the
`0%` hand-over, a hand-over that lost a threshold, dry-run, and what cannot be ordered offline."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from evictd.core.handover import Evicts, Handover, Mode, judge_handover
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.signals import Signal
from evictd.core.thresholds import Threshold

OFF = {"memory.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%",
       "imagefs.inodesFree": "0%"}
EVICTD = {"memory.available": "500Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
          "imagefs.available": "15%", "imagefs.inodesFree": "5%"}


def thresholds(hard: Mapping[str, str], soft: Mapping[str, str] | None = None,
               stall: Mapping[str, str] | None = None) -> list[Threshold]:
    soft = soft or {}
    return EvictionSettings(hard=hard, soft=soft, soft_grace_period={signal: "1m" for signal in soft},
                            stall_hard=stall or {}).thresholds()


def judged(evictd: Mapping[str, str], kubelet: Mapping[str, str] | None, *, dry_run: bool = False,
           kubelet_soft: Mapping[str, str] | None = None, evictd_soft: Mapping[str, str] | None = None) -> Handover:
    theirs = None if kubelet is None else thresholds(kubelet, kubelet_soft)
    return judge_handover(thresholds(evictd, evictd_soft), theirs, evictd_dry_run=dry_run)


def evicts(handover: Handover) -> dict[str, Evicts]:
    return {str(v.signal): v.evicts for v in handover.verdicts}


@pytest.mark.parametrize(("kubelet", "kubelet_soft", "expected", "problem"), [
    pytest.param({"memory.available": "100Mi"}, None, Evicts.EVICTD_FIRST, False, id="kubelet-below-backstop"),
    pytest.param({"memory.available": "500Mi"}, None, Evicts.SAME, True, id="same-threshold-races"),
    pytest.param({"memory.available": "1Gi"}, None, Evicts.KUBELET_FIRST, True, id="kubelet-above"),
    pytest.param({"memory.available": "100Mi"}, {"memory.available": "600Mi"}, Evicts.KUBELET_FIRST, True,
                 id="kubelet-soft-above-evictd-hard"),
    pytest.param({"memory.available": "5%"}, None, Evicts.ORDER_UNKNOWN, True, id="quantity-against-percentage"),
    pytest.param({"memory.available": "0%"}, None, Evicts.EVICTD, False, id="kubelet-off"),
])
def test_the_order_on_one_signal(kubelet: dict[str, str], kubelet_soft: dict[str, str] | None, expected: Evicts,
                                 problem: bool) -> None:
    handover = judged({"memory.available": "500Mi"}, kubelet, kubelet_soft=kubelet_soft)
    [verdict] = [v for v in handover.verdicts if v.signal is Signal.MEMORY_AVAILABLE]
    assert (verdict.evicts, verdict.problem) == (expected, problem), verdict.detail


def test_percentages_compare_as_percentages() -> None:
    handover = judged({"nodefs.available": "10%"}, {"nodefs.available": "5%"})
    assert evicts(handover)["nodefs.available"] is Evicts.EVICTD_FIRST
    assert evicts(judged({"nodefs.available": "10%"}, {"nodefs.available": "10%"}))["nodefs.available"] is Evicts.SAME


def test_backstop_mode_needs_evictd_first_on_every_shared_signal() -> None:
    below = {"memory.available": "100Mi", "nodefs.available": "5%", "nodefs.inodesFree": "3%",
             "imagefs.available": "10%", "imagefs.inodesFree": "3%"}
    backstop = judged(EVICTD, below)
    assert backstop.mode is Mode.BACKSTOP and not backstop.problems
    assert "backstop mode" in backstop.summary
    one_equal = judged(EVICTD, {**below, "nodefs.available": "10%"})
    assert one_equal.mode is Mode.OVERLAP
    assert evicts(one_equal)["nodefs.available"] is Evicts.SAME


def test_the_zero_percent_hand_over_is_evictd_alone() -> None:
    handover = judged(EVICTD, OFF)
    assert handover.mode is Mode.EVICTD_ALONE and not handover.problems
    assert "nothing evicts if evictd stops" in handover.summary


def test_a_hand_over_that_lost_evictds_thresholds_leaves_nobody_and_says_so() -> None:
    handover = judged({}, OFF)
    assert handover.mode is Mode.NONE and handover.summary.startswith("NO EVICTION")
    nobody = {str(v.signal) for v in handover.problems}
    assert nobody == set(OFF), "each signal a kubelet guards by default is a problem"
    assert all(v.evicts is Evicts.NOBODY and v.now == "nobody" for v in handover.problems)


def test_one_lost_threshold_is_named() -> None:
    lost = {key: value for key, value in EVICTD.items() if key != "imagefs.available"}
    handover = judged(lost, OFF)
    assert [str(v.signal) for v in handover.problems] == ["imagefs.available"]
    assert "nobody evicts on imagefs.available" in handover.summary


def test_evictd_in_dry_run_evicts_nothing_today() -> None:
    alone = judged(EVICTD, OFF, dry_run=True)
    assert all(v.now == "nobody (evictd in dry-run)" for v in alone.verdicts if v.evictd), "step 2 done too early"
    assert {str(v.signal) for v in alone.problems} >= set(OFF)
    beside = judged(EVICTD, EVICTD, dry_run=True)
    assert not beside.problems and {v.now for v in beside.verdicts if v.evictd} == {"the kubelet (evictd in dry-run)"}


def test_evictd_with_only_a_soft_threshold_is_not_a_verified_backstop() -> None:
    handover = judged({"memory.available": "0%"}, {"memory.available": "100Mi"}, evictd_soft={"memory.available": "1Gi"})
    assert evicts(handover)["memory.available"] is Evicts.ORDER_UNKNOWN


def test_an_unknown_kubelet_is_no_problem_and_evictds_own_signals_are_listed() -> None:
    handover = judge_handover(thresholds({}, stall={"evictd.io/memory.stall.full": "20%"}), None,
                              evictd_dry_run=False)
    assert handover.mode is Mode.KUBELET_UNKNOWN and not handover.problems
    assert evicts(handover)["evictd.io/memory.stall.full"] is Evicts.EVICTD_UNKNOWN_KUBELET
    assert evicts(handover)["memory.available"] is Evicts.UNKNOWN


@pytest.mark.parametrize(("kubelet", "kubelet_soft", "signal", "raised"), [
    pytest.param({"memory.available": "500Mi"}, None, "memory.available", "memory.available: 1000Mi", id="quantity"),
    pytest.param({"memory.available": "1Gi"}, None, "allocatableMemory.available", "memory.available: 2Gi",
                 id="allocatable-is-memory-key"),
    pytest.param({"nodefs.available": "10%"}, None, "nodefs.available", "nodefs.available: 15%", id="percentage"),
    pytest.param({"imagefs.available": "15%"}, None, "imagefs.available", "imagefs.available: 20%", id="stock-15"),
    pytest.param({"nodefs.inodesFree": "7.5%"}, None, "nodefs.inodesFree", "nodefs.inodesFree: 12%", id="fraction"),
    pytest.param({"memory.available": "100Mi"}, {"memory.available": "800Mi"}, "memory.available",
                 "memory.available: 1600Mi", id="above-the-kubelets-soft-too"),
])
def test_a_race_offers_both_fixes_with_an_evictd_value_that_clears_the_kubelets(
        kubelet: dict[str, str], kubelet_soft: dict[str, str] | None, signal: str, raised: str) -> None:
    verdict = {str(v.signal): v for v in judged(EVICTD, kubelet, kubelet_soft=kubelet_soft).verdicts}[signal]
    assert verdict.evicts in (Evicts.SAME, Evicts.KUBELET_FIRST) and verdict.problem
    assert "fix: lower the kubelet's threshold for this signal below evictd's hard threshold (a backstop), or to 0% " \
           "(evictd alone); or raise evictd's hard threshold above the kubelet's " in verdict.detail
    assert verdict.detail.endswith(f"e.g. `evictionHard: {{{raised}}}` (fleet-wide: the chart's `eviction` value)")


def test_no_value_is_offered_where_five_points_more_reach_100_percent() -> None:
    verdict = {str(v.signal): v for v in judged({"nodefs.available": "96%"}, {"nodefs.available": "95%"}).verdicts}
    assert verdict["nodefs.available"].evicts is Evicts.EVICTD_FIRST
    verdict = {str(v.signal): v for v in judged({"nodefs.available": "95%"}, {"nodefs.available": "95%"}).verdicts}
    assert verdict["nodefs.available"].detail.endswith("or raise evictd's hard threshold above the kubelet's 95%")

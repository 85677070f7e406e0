"""After an eviction for a memory stall signal, the next stall eviction waits for the kernel's average to settle.

The kernel's avg10 lags the relief an eviction brings (updated every 2 s, decaying over 10 s), so a stall
threshold still met on the cycle right after an eviction must not evict a second pod until STALL_SETTLE_S has
passed (docs/configuration.md "After an eviction"); the kubelet's signals never wait.
"""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from cycle_reports import simulate_steps
from evictd.core.engine import Assessment, EngineConfig, EngineState, Eviction, assess, note_evictions
from evictd.core.engine_rules import STALL_SETTLE_S, stall_settling
from evictd.core.fs_layout import FsLayout
from evictd.core.pod_parser import pod_from_dict
from evictd.core.saved_state import restore_state, state_document
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import Threshold, parse_stall_thresholds, parse_threshold_config
from evictd.core.wake import GRACE_END_MARGIN_S, CycleSeen, WakeState, after_cycle, sensed

SOME = "evictd.io/memory.stall.some"
HOG = pod("hog", requests={"memory": "100Mi"}, priority=0)
VICTIM = pod("victim", requests={"memory": "1Gi"}, priority=0)
OTHER = pod("other", requests={"memory": "1Gi"}, priority=0)
PODS = [HOG, VICTIM, OTHER]
STATS = [pod_stats(HOG, memory=1 * Gi), pod_stats(VICTIM, memory=800 * Mi), pod_stats(OTHER, memory=500 * Mi)]
# The stall gate (tests/test_stall_gate.py) is off here: these summaries carry no reclaim counters.
STALL_CONFIG = {"evictionHard": {}, "stallEvictionHard": {SOME: "20%"}, "evictionPressureTransitionPeriod": "5m",
                "stallRequiresNodeReclaim": False}
MEMORY_CONFIG = {"evictionHard": {"memory.available": "1Gi"}, "evictionPressureTransitionPeriod": "5m"}


def psi(some10: float) -> dict[str, Any]:
    return {"some": {"total": 1000, "avg10": some10, "avg60": 0.0, "avg300": 0.0},
            "full": {"total": 500, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0}}


GROWTH = 16 * Mi  # every pod grows this much a reading: a stall may evict any of them (`evictd.core.pod_growth`)


def steps(config: dict[str, Any], shares: list[tuple[float, float, list[dict[str, Any]]]], *,
          available: int = 3 * Gi) -> list[dict[str, Any]]:
    """One cycle per (second, avg10 `some` share, the pods listed then: those not evicted yet), after a quiet
    reading 1 s before the first (its output dropped) from which the pods' growth is measured."""
    scenario: list[dict[str, Any]] = []
    first = shares[0][0]
    for index, (at, share, pods) in enumerate([(first - 1, 0.0, PODS), *shares]):
        grown = [{**stats, "memory": {"workingSetBytes": stats["memory"]["workingSetBytes"] + index * GROWTH}}
                 for stats in STATS]
        document = summary(memory=available, time=stamp(index), pods=grown)
        document["node"]["memory"]["psi"] = psi(share)
        scenario.append({"at": at + 1, "summary": document, "pods": pods})
    return simulate_steps({"config": config, "pods": PODS, "steps": scenario})[1:]


AFTER_HOG = [VICTIM, OTHER]


def evicted(out: list[dict[str, Any]]) -> list[list[str]]:
    return [[e["name"] for e in s["evicted"]] for s in out]


def test_the_settle_time_is_two_updates_of_the_kernels_averages() -> None:
    assert STALL_SETTLE_S == 4.0


def test_a_stall_still_met_for_3s_after_the_eviction_then_cleared_evicts_once() -> None:
    out = steps(STALL_CONFIG, [(0, 30.0, PODS), (0.5, 28.0, AFTER_HOG), (1.5, 26.0, AFTER_HOG), (3, 23.0, AFTER_HOG),
                                (5, 10.0, AFTER_HOG), (7, 2.0, AFTER_HOG)])
    assert evicted(out) == [["hog"], [], [], [], [], []]
    # The threshold stays met and keeps the node condition while the eviction waits; the report says why.
    assert [s["conditions"] for s in out][:4] == [["MemoryPressure"]] * 4
    assert [s.get("stallSettling") for s in out] == [None, [SOME], [SOME], [SOME], None, None]


def test_a_stall_met_past_the_settle_time_evicts_the_next_pod_then() -> None:
    out = steps(STALL_CONFIG, [(0, 30.0, PODS), (1, 29.0, AFTER_HOG), (3.9, 28.0, AFTER_HOG), (4, 27.0, AFTER_HOG),
                                (5, 26.0, [OTHER])])
    assert evicted(out) == [["hog"], [], [], ["victim"], []]


def test_the_kubelets_memory_signal_never_waits() -> None:
    out = steps(MEMORY_CONFIG, [(0, 90.0, PODS), (0.5, 90.0, AFTER_HOG), (1, 90.0, [OTHER])],
                available=500 * Mi)
    assert evicted(out) == [["hog"], ["victim"], ["other"]]
    assert all(s.get("stallSettling") is None for s in out)


# --- the rule, unit by unit ------------------------------------------------------------------------------------

(STALL,) = parse_stall_thresholds({SOME: "20%"}, {}, {}, {})
(MEMORY,) = parse_threshold_config([], {"memory.available": "1Gi"}, {}, {}, {})


def eviction(threshold: Threshold | None) -> Eviction:
    return Eviction(pod=pod_from_dict(HOG), signal=str(threshold.signal) if threshold else "ephemeral-storage",
                    grace_period_override_s=1, effective_grace_period_s=1, message="", annotations={},
                    conditions=(), threshold=threshold)


def test_only_a_stall_threshold_waits_and_only_within_the_settle_time() -> None:
    assert stall_settling([STALL, MEMORY], None, 100.0) == [], "no stall eviction yet"
    assert stall_settling([STALL, MEMORY], 100.0, 100.0) == [STALL]
    assert stall_settling([STALL, MEMORY], 100.0, 100.0 + STALL_SETTLE_S - 0.001) == [STALL]
    assert stall_settling([STALL, MEMORY], 100.0, 100.0 + STALL_SETTLE_S) == []
    assert stall_settling([MEMORY], 100.0, 101.0) == []


@pytest.mark.parametrize("threshold", [STALL, MEMORY, None], ids=["stall", "memory-available", "local-storage"])
def test_every_eviction_starts_the_settle_time_whatever_its_signal(threshold: Threshold | None) -> None:
    # Issue 61: the refault signal evicted the Guaranteed pod 7.7-8.2 s after a memory.available eviction of the
    # leaker, on refaults read before it; the evidence of any eviction's shortage vouches for no second one.
    state = EngineState()
    assert note_evictions(state, [], 50.0) is state
    assert note_evictions(state, [eviction(threshold)], 50.0).stall_evicted_at == 50.0


def test_the_settle_time_survives_a_restart_and_an_older_file_reads_as_none() -> None:
    wall = datetime(2026, 11, 21, 10, 0, 10, tzinfo=UTC).timestamp()
    state = replace(EngineState(), stall_evicted_at=998.5)
    document = json.loads(json.dumps(state_document(state, node_name="n", now=1000.0, now_wall=wall)))
    assert document["stallEvictedAt"] == wall - 1.5

    def restored(doc: object, now: float, at_wall: float) -> float | None:
        return restore_state(doc, node_name="n", thresholds=(STALL,), now=now, now_wall=at_wall,
                             restore_window_s=30.0, transition_period_s=300.0).state.stall_evicted_at

    assert restored(document, 5.0, wall + 1) == 5.0 - 2.5, "2.5 s since the eviction on the new clock too"
    assert restored(document, 5.0, wall + 31) is None, "timers of a state older than the window are dropped"
    del document["stallEvictedAt"]
    assert restored(document, 5.0, wall + 1) is None


# --- while a stall eviction settles: not stale, and when it may act (issue 36 item 3) ---------------------------

def settling_assessment(since_eviction_s: float) -> Assessment:
    """`assess` of a cycle reading `some` at 30% `since_eviction_s` after a stall eviction, on fresh stats."""
    node = summary(memory=3 * Gi, time=stamp(1), pods=STATS)
    node["node"]["memory"]["psi"] = psi(30.0)
    state = replace(EngineState(), stall_evicted_at=100.0)
    config = EngineConfig(thresholds=(STALL,), stall_requires_node_reclaim=False)
    _, assessment = assess(state, config, FsLayout(), summary_from_dict(node),
                           [pod_from_dict(p) for p in PODS], now=100.0 + since_eviction_s)
    return assessment


def test_a_threshold_waiting_to_settle_is_not_called_stale() -> None:
    # The stats are fresh: the threshold waits for the settle time, not for newer stats. Called stale, it logged
    # "stats not updated since last cycle" and kept pressure from counting as held, so every PSI wake-up during
    # the settle time ran a cycle and its ~20 follow-ups (20 cycles a second on a thrashing node's CPU).
    assessment = settling_assessment(1.5)
    assert assessment.stall_settling == (STALL.signal,)
    assert assessment.stale_signals == ()


def test_a_threshold_waiting_to_settle_makes_the_next_cycle_due_when_the_settle_time_ends() -> None:
    assert settling_assessment(1.5).next_decision_in_s() == STALL_SETTLE_S - 1.5
    assert settling_assessment(STALL_SETTLE_S).next_decision_in_s() is None, "no longer settling: it acts now"


def test_while_a_stall_eviction_settles_pressure_is_held_and_psi_wakes_no_cycle_until_the_settle_time_ends() -> None:
    assessment = settling_assessment(0.5)
    state, plan = after_cycle(WakeState(10.0), CycleSeen.of(0.0, (STALL,), assessment, crossing_unconfirmed=False,
                                                             eviction_failed=False, acted=False), 0.01)
    assert state.held == (not assessment.stale_signals)
    assert sensed(state, ("psi",))[1] == plan, "a PSI wake-up of the stall already decided earns no cycle"
    assert plan.wait_s(0.01) == pytest.approx(STALL_SETTLE_S - 0.5 + GRACE_END_MARGIN_S)


@pytest.mark.parametrize(("soft", "held"), [
    pytest.param(True, False, id="a-soft-threshold-in-its-grace-decided-nothing-yet"),
    pytest.param(False, True, id="a-hard-threshold-met-is-acted-on"),
])
def test_a_stalls_wake_up_earns_a_cycle_while_a_soft_memory_threshold_waits_for_its_grace(soft: bool,
                                                                                         held: bool) -> None:
    """The 2-CPU arena node's thrash with PSI: memory.available<500Mi (soft, 90 s) was met, and the PSI firings of
    the stall that followed earned no cycle, so the hard stall threshold was met only at the next 10 s tick (relief
    24.6 / 32.3 s against 13.3 / 13.4 s). A soft threshold in its grace period holds nothing: a firing is news."""
    node = summary(memory=800 * Mi, time=stamp(1), pods=STATS)
    kind = {"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "90s"}} \
        if soft else {"evictionHard": {"memory.available": "1Gi"}}
    thresholds = tuple(parse_threshold_config(("pods",), kind.get("evictionHard", {}), kind.get("evictionSoft", {}),
                                              kind.get("evictionSoftGracePeriod", {}), {}))
    config = EngineConfig(thresholds=thresholds)
    _, assessment = assess(EngineState(), config, FsLayout(), summary_from_dict(node),
                           [pod_from_dict(p) for p in PODS], now=100.0)
    assert [status.grace_met for status in assessment.thresholds] == [not soft]
    state, plan = after_cycle(WakeState(10.0), CycleSeen.of(100.0, thresholds, assessment, crossing_unconfirmed=False,
                                                             eviction_failed=False, acted=False), 100.01)
    assert state.held is held
    woken = sensed(state, ("psi",))[1]
    assert (woken == plan) is held, "held: the firing keeps the deadline; else it makes a cycle due"

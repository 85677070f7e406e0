"""The engine state that survives a restart (src/evictd/core/saved_state.py): saved from one process's engine,
restored into another whose monotonic clock reads something else entirely, then driven by the real `assess`."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest

from builders import Gi, Mi, fs, summary
from evictd.core.engine import Assessment, EngineConfig, EngineState, ReclaimThenEvict, assess
from evictd.core.fs_layout import FsLayout
from evictd.core.saved_state import (
    STATE_VERSION,
    Restored,
    UnusableState,
    restorable_thresholds,
    restore_state,
    state_document,
)
from evictd.core.signals import NodeCondition, Signal
from evictd.core.summary import Summary
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import Threshold, parse_threshold_config

NODE = "node-1"
STATS_TIME = "2026-11-21T10:00:05Z"  # when the first process's stats were measured
WALL = datetime(2026, 11, 21, 10, 0, 10, tzinfo=UTC).timestamp()  # when it saved, on the wall clock
WINDOW_S = 30.0
SINGLE = FsLayout()


def config(soft: dict[str, str] | None = None, grace: dict[str, str] | None = None,
           hard: dict[str, str] | None = None, min_reclaim: dict[str, str] | None = None,
           transition_s: float = 300.0) -> EngineConfig:
    thresholds = parse_threshold_config([], hard or {}, soft or {}, grace or {}, min_reclaim or {})
    return EngineConfig(thresholds=tuple(thresholds), pressure_transition_period_s=transition_s)


SOFT_MEMORY = config(soft={"memory.available": "1Gi"}, grace={"memory.available": "60s"})


def memory(available: int, time: str | None = None) -> Summary:
    return summary_from_dict(summary(memory=available, memory_ws=16 * Gi - available, time=time))


def saved(state: EngineState, now: float, wall: float = WALL) -> object:
    """The document as the file holds it (through JSON text)."""
    return json.loads(json.dumps(state_document(state, node_name=NODE, now=now, now_wall=wall)))


def restore(document: object, cfg: EngineConfig, now: float, wall: float, **overrides: Any) -> Restored:
    return restore_state(document, **{"node_name": NODE, "thresholds": restorable_thresholds(cfg.thresholds),
                                      "now": now, "now_wall": wall, "restore_window_s": WINDOW_S,
                                      "transition_period_s": cfg.pressure_transition_period_s, **overrides})


def step(state: EngineState, cfg: EngineConfig, now: float, stats: Summary,
         layout: FsLayout = SINGLE) -> tuple[EngineState, Any]:
    return assess(state, cfg, layout, stats, [], now)


def acted_on(assessment: Assessment) -> Threshold | None:
    """The threshold the cycle acts on (reclaim, then evict), if any."""
    step = assessment.next_step
    return step.threshold if isinstance(step, ReclaimThenEvict) else None


def test_a_restart_inside_the_grace_period_neither_resets_nor_shortens_it() -> None:
    # The first process (monotonic 1000 s) sees the threshold met, runs on for 30 s, and stops.
    state, _ = step(EngineState(), SOFT_MEMORY, 1000.0, memory(512 * Mi))
    state, seen = step(state, SOFT_MEMORY, 1030.0, memory(512 * Mi))
    assert seen.thresholds[0].observed_for_s == 30 and acted_on(seen) is None
    document = saved(state, now=1030.0)
    # The new process's monotonic clock starts near 0 (a reboot would do the same); 10 s went by on the wall.
    restored = restore(document, SOFT_MEMORY, now=5.0, wall=WALL + 10)
    assert restored.timers_kept and restored.age_s == 10
    assert restored.thresholds == SOFT_MEMORY.thresholds
    assert restored.state.layout is None, "the layout is detected again by the first cycle"
    state, seen = step(restored.state, SOFT_MEMORY, 5.0, memory(512 * Mi))
    assert seen.thresholds[0].observed_for_s == 40 and acted_on(seen) is None
    state, seen = step(state, SOFT_MEMORY, 24.0, memory(512 * Mi))
    assert acted_on(seen) is None, "59 s since the crossing: not yet"
    state, seen = step(state, SOFT_MEMORY, 25.0, memory(512 * Mi))
    assert acted_on(seen) == SOFT_MEMORY.thresholds[0], "60 s since the crossing, as without the restart"
    _, seen = step(EngineState(), SOFT_MEMORY, 25.0, memory(512 * Mi))
    assert seen.thresholds[0].observed_for_s == 0, "what the kubelet does: the grace period starts again"


def test_the_file_holds_wall_clock_times() -> None:
    state, _ = step(EngineState(), SOFT_MEMORY, 1000.0, memory(512 * Mi, time=STATS_TIME))
    document = state_document(state, node_name=NODE, now=1012.5, now_wall=WALL)
    assert document["version"] == STATE_VERSION and document["node"] == NODE and document["savedAt"] == WALL
    assert document["firstObservedAt"] == [{"threshold": {
        "signal": "memory.available", "operator": "LessThan", "value": {"quantity": "1Gi"},
        "gracePeriodSeconds": 60.0, "minReclaim": None, "hard": False}, "at": WALL - 12.5}]
    assert document["conditionLastObservedAt"] == {"MemoryPressure": WALL - 12.5}
    assert document["lastObservations"]["memory.available"] == {
        "available": "512Mi", "capacity": "16Gi", "time": WALL - 5}


def test_a_changed_threshold_starts_afresh_and_an_unchanged_one_keeps_its_time() -> None:
    before = config(soft={"memory.available": "1Gi", "nodefs.available": "30%"},
                    grace={"memory.available": "60s", "nodefs.available": "60s"})
    stats = summary_from_dict(summary(memory=512 * Mi, memory_ws=15 * Gi, nodefs=fs(10 * Gi, 100 * Gi)))
    state, seen = step(EngineState(), before, 1000.0, stats)
    assert len(seen.thresholds) == 2
    document = saved(state, now=1010.0)
    after = config(soft={"memory.available": "2Gi", "nodefs.available": "30%"},
                   grace={"memory.available": "60s", "nodefs.available": "60s"})
    restored = restore(document, after, now=50.0, wall=WALL + 5)
    assert [t.signal for t in restored.thresholds] == [Signal.NODEFS_AVAILABLE]
    assert restored.dropped == 1
    _, seen = step(restored.state, after, 50.0, stats)
    assert {str(s.threshold.signal): s.observed_for_s for s in seen.thresholds} == {
        "memory.available": 0, "nodefs.available": 15}
    # A grace period changed is another threshold too: its timer is not carried over.
    longer = config(soft={"memory.available": "1Gi"}, grace={"memory.available": "90s"})
    assert restore(document, longer, now=50.0, wall=WALL + 5).state.first_observed_at == {}


def test_timers_of_a_state_older_than_the_window_are_dropped_but_its_conditions_are_kept() -> None:
    state, _ = step(EngineState(), SOFT_MEMORY, 1000.0, memory(512 * Mi, time=STATS_TIME))
    document = saved(state, now=1000.0)
    restored = restore(document, SOFT_MEMORY, now=7.0, wall=WALL + WINDOW_S + 1)
    assert not restored.timers_kept
    assert restored.state.first_observed_at == {} and restored.state.last_observations == {}
    # The kubelet would still report the condition: it stays on until the transition period has passed.
    assert restored.state.node_conditions == (NodeCondition.MEMORY_PRESSURE,)
    assert restored.state.condition_last_observed_at == {NodeCondition.MEMORY_PRESSURE: 7.0 - WINDOW_S - 1}
    _, seen = step(restored.state, SOFT_MEMORY, 8.0, memory(4 * Gi))
    assert seen.node_conditions == (NodeCondition.MEMORY_PRESSURE,), "no flap: the pressure went 32 s ago"
    _, seen = step(restored.state, SOFT_MEMORY, 7.0 - WINDOW_S - 1 + 300, memory(4 * Gi))
    assert seen.node_conditions == ()
    gone = restore(document, SOFT_MEMORY, now=7.0, wall=WALL + 300)
    assert gone.state.node_conditions == () and gone.state.condition_last_observed_at == {}


def test_no_restored_time_lies_in_the_future() -> None:
    state, _ = step(EngineState(), SOFT_MEMORY, 1000.0, memory(512 * Mi, time=STATS_TIME))
    document: Any = saved(state, now=1000.0)
    document["firstObservedAt"][0]["at"] = WALL + 3600
    document["conditionLastObservedAt"]["MemoryPressure"] = WALL + 3600
    document["lastObservations"]["memory.available"]["time"] = WALL + 3600
    restored = restore(document, SOFT_MEMORY, now=5.0, wall=WALL + 1)
    assert list(restored.state.first_observed_at.values()) == [5.0]
    assert list(restored.state.condition_last_observed_at.values()) == [5.0]
    observed = restored.state.last_observations[Signal.MEMORY_AVAILABLE].time
    assert observed is not None and observed.timestamp() == WALL + 1
    # Saved "later" than now: the wall clock went back, nothing of it can be placed.
    back = restore(saved(state, now=1000.0), SOFT_MEMORY, now=5.0, wall=WALL - 60)
    assert not back.timers_kept and back.state == EngineState()


def test_the_minimum_reclaim_extension_survives_a_restart() -> None:
    cfg = config(hard={"memory.available": "1Gi"}, min_reclaim={"memory.available": "500Mi"})
    state, seen = step(EngineState(), cfg, 1000.0, memory(900 * Mi))
    assert acted_on(seen) is not None
    restored = restore(saved(state, now=1000.0), cfg, now=3.0, wall=WALL + 2)
    assert restored.state.thresholds_met == cfg.thresholds
    # Above the threshold but short of its minimum reclaim: still met after the restart, as without it.
    _, seen = step(restored.state, cfg, 3.0, memory(1200 * Mi))
    assert acted_on(seen) == cfg.thresholds[0]
    _, fresh = step(EngineState(), cfg, 3.0, memory(1200 * Mi))
    assert acted_on(fresh) is None


def test_the_last_stats_times_survive_a_restart() -> None:
    cfg = config(hard={"memory.available": "1Gi"})
    state, _ = step(EngineState(), cfg, 1000.0, memory(900 * Mi, time=STATS_TIME))
    restored = restore(saved(state, now=1000.0), cfg, now=3.0, wall=WALL + 2)
    _, seen = step(restored.state, cfg, 3.0, memory(900 * Mi, time=STATS_TIME))
    assert seen.stale_signals == (Signal.MEMORY_AVAILABLE,) and acted_on(seen) is None
    _, seen = step(restored.state, cfg, 3.0, memory(900 * Mi, time="2026-11-21T10:00:06Z"))
    assert acted_on(seen) == cfg.thresholds[0]


def test_derived_containerfs_thresholds_are_restored_for_the_layout_detected_again() -> None:
    cfg = config(soft={"imagefs.available": "30%"}, grace={"imagefs.available": "60s"})
    dedicated = FsLayout(dedicated_imagefs=True)
    stats = summary_from_dict(summary(memory=8 * Gi, imagefs=fs(10 * Gi, 100 * Gi), containerfs=fs(10 * Gi, 100 * Gi)))
    state, seen = step(EngineState(), cfg, 1000.0, stats, dedicated)
    assert {str(s.threshold.signal) for s in seen.thresholds} == {"imagefs.available", "containerfs.available"}
    restored = restore(saved(state, now=1020.0), cfg, now=3.0, wall=WALL + 2)
    assert len(restored.thresholds) == 2
    _, seen = step(restored.state, cfg, 3.0, stats, dedicated)
    assert [s.observed_for_s for s in seen.thresholds] == [22, 22]
    assert set(restorable_thresholds(cfg.thresholds)) >= set(state.thresholds)


def valid() -> dict[str, Any]:
    state, _ = step(EngineState(), SOFT_MEMORY, 1000.0, memory(512 * Mi, time=STATS_TIME))
    return state_document(state, node_name=NODE, now=1000.0, now_wall=WALL)


def spoiled(change: Any) -> Any:
    document = valid()
    change(document)
    return document


CORRUPT = {
    "not an object": [1, 2],
    "no version": spoiled(lambda d: d.pop("version")),
    "a field missing": spoiled(lambda d: d.pop("savedAt")),
    "an unknown field": spoiled(lambda d: d.update(extra=1)),
    "a time that is text": spoiled(lambda d: d.update(savedAt="yesterday")),
    "a time that is not finite": spoiled(lambda d: d.update(savedAt=math.inf)),
    "a time that is true": spoiled(lambda d: d["firstObservedAt"][0].update(at=True)),
    "an unknown condition": spoiled(lambda d: d["conditionLastObservedAt"].update(Hungry=WALL)),
    "an unknown signal": spoiled(lambda d: d["lastObservations"].update({"cpu.available": {}})),
    "a bad quantity": spoiled(lambda d: d["lastObservations"]["memory.available"].update(available="lots")),
    "a threshold with a field missing": spoiled(lambda d: d["firstObservedAt"][0]["threshold"].pop("hard")),
    "a list that is an object": spoiled(lambda d: d.update(thresholdsMet={})),
}


@pytest.mark.parametrize("case", CORRUPT)
def test_a_corrupt_document_is_unusable(case: str) -> None:
    with pytest.raises(UnusableState) as raised:
        restore(CORRUPT[case], SOFT_MEMORY, now=5.0, wall=WALL + 1)
    assert not raised.value.foreign and raised.value.reason


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("version", STATE_VERSION + 1, "format version 2, this evictd reads 1"),
    ("version", True, "format version True, this evictd reads 1"),
    ("node", "node-2", "saved by node 'node-2', this is node 'node-1'"),
])
def test_another_nodes_or_versions_document_is_foreign(field: str, value: object, reason: str) -> None:
    document = {**valid(), field: value}
    with pytest.raises(UnusableState) as raised:
        restore(document, SOFT_MEMORY, now=5.0, wall=WALL + 1)
    assert raised.value.foreign and raised.value.reason == reason

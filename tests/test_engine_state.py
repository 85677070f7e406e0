"""The engine state file (src/evictd/record/engine_state.py) on real files: saved after cycles, restored at start,
an unusable file moved aside, and a stateDir that takes no writes (a full and a read-only tmpfs) costing only the
saving."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from builders import Mi, summary
from clocks import ManualClock
from counter import Counter
from evictd.core.engine import EngineConfig, EngineState, assess
from evictd.core.fs_layout import FsLayout
from evictd.core.signals import NodeCondition
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import parse_threshold_config
from evictd.core.wake import stale_after_s
from evictd.cycle.finished import Cycle
from evictd.cycle.report import CycleReport, Decided, Observed
from evictd.record.engine_state import SAVE_EVERY_S, EngineStateFile
from evictd.state_dir import ENGINE_STATE_FILE
from full_filesystem import UnwritableFolder
from log_capture import LogCapture

CONFIG = EngineConfig(thresholds=tuple(parse_threshold_config([], {}, {"memory.available": "1Gi"},
                                                              {"memory.available": "60s"}, {})))
WINDOW_S = stale_after_s(10.0)


def cycle(state: EngineState, clock: ManualClock, available: int = 512 * Mi, number: int = 1) -> Cycle:
    """Run the engine one cycle at the clock's time; return the finished cycle an after-cycle hook gets."""
    new_state, assessment = assess(state, CONFIG, FsLayout(), summary_from_dict(summary(memory=available)), [],
                                   clock.now_s)
    report = CycleReport(now=clock.now_s, observed=Observed(), decided=Decided(assessment))
    return Cycle(number=number, report=report, state=new_state, started_at=clock.now_s, duration_s=0.0,
                 wall=clock.wall())


def state_file(path: Path, clock: ManualClock, log: LogCapture | None = None,
               errors: Counter | None = None) -> EngineStateFile:
    return EngineStateFile(str(path), "node-1", log=log or LogCapture(), on_error=errors or Counter(), clock=clock)


def test_a_saved_state_is_restored_by_the_next_process(tmp_path: Path) -> None:
    path = tmp_path / "state" / ENGINE_STATE_FILE
    clock = ManualClock(now_s=1000.0)
    first = state_file(path, clock)
    assert first.restore(CONFIG, WINDOW_S) == EngineState(), "no file: a fresh start"
    finished = cycle(EngineState(), clock)
    first(finished)
    document = json.loads(path.read_text())
    assert document["savedAt"] == clock.wall().timestamp() and document["node"] == "node-1"
    # Another process 20 s later on the wall clock, its monotonic clock at 7 s.
    later = ManualClock(now_s=7.0, wall_at_zero=clock.wall() + timedelta(seconds=20 - 7))
    log = LogCapture()
    restored = state_file(path, later, log).restore(CONFIG, WINDOW_S)
    assert restored.first_observed_at == {CONFIG.thresholds[0]: 7.0 - 20.0}
    assert restored.node_conditions == (NodeCondition.MEMORY_PRESSURE,)
    assert log.at("info") == [("engine state restored", {
        "path": str(path), "age_s": 20.0, "restore_window_s": WINDOW_S,
        "grace_periods": ["memory.available<1Gi (soft, grace 60s)"], "conditions": ["MemoryPressure"],
        "thresholds_no_longer_configured": 0})]


def test_a_cycle_that_changed_no_timer_is_saved_at_most_once_a_second(tmp_path: Path) -> None:
    path = tmp_path / ENGINE_STATE_FILE
    clock = ManualClock(now_s=1000.0)
    hook = state_file(path, clock)
    state = cycle(EngineState(), clock).state
    hook(cycle(EngineState(), clock))
    written = os.stat(path).st_ino
    clock.advance(SAVE_EVERY_S / 2)
    same = cycle(state, clock)
    hook(same)
    assert os.stat(path).st_ino == written, "a rename replaces the file: no rename, no write"
    clock.advance(SAVE_EVERY_S / 2)
    hook(cycle(same.state, clock))
    assert os.stat(path).st_ino != written
    written = os.stat(path).st_ino
    clock.advance(0.01)
    hook(cycle(same.state, clock, available=4096 * Mi))  # the threshold no longer met: written at once
    assert os.stat(path).st_ino != written
    assert json.loads(path.read_text())["firstObservedAt"] == []


def test_a_calm_node_is_saved_once_and_its_old_file_restores_what_a_fresh_one_would(tmp_path: Path) -> None:
    path = tmp_path / ENGINE_STATE_FILE
    clock = ManualClock(now_s=1000.0)
    hook = state_file(path, clock)
    calm = cycle(EngineState(), clock, available=4096 * Mi)
    hook(calm)
    written = os.stat(path).st_ino
    for _ in range(10):  # a minute and a half of calm cycles, ten seconds apart: no write, no fsync
        clock.advance(10.0)
        calm = cycle(calm.state, clock, available=4096 * Mi)
        hook(calm)
    assert os.stat(path).st_ino == written
    # A restart now finds a file 100 s old, past the restore window: it restores what a file just written would,
    # apart from the last stats times (under which nothing was met), and says it restored it.
    later = ManualClock(now_s=5.0, wall_at_zero=clock.wall() + timedelta(seconds=1 - 5))
    log = LogCapture()
    restored = state_file(path, later, log).restore(CONFIG, WINDOW_S)
    fresh_path = tmp_path / "fresh" / ENGINE_STATE_FILE
    state_file(fresh_path, clock)(calm)
    fresh = state_file(fresh_path, later).restore(CONFIG, WINDOW_S)
    assert restored == EngineState() and fresh.last_observations
    assert restored == replace(fresh, last_observations={})
    assert [event for event, _ in log.at("info")] == ["engine state restored"]
    # The threshold met: written at once, and while it is met at least once a second, as before.
    clock.advance(10.0)
    met = cycle(calm.state, clock)
    hook(met)
    assert os.stat(path).st_ino != written
    assert json.loads(path.read_text())["firstObservedAt"] != []
    written = os.stat(path).st_ino
    clock.advance(SAVE_EVERY_S)
    hook(cycle(met.state, clock))
    assert os.stat(path).st_ino != written


OUT_OF_RANGE_TIMES = {
    # A time no datetime can hold: before the fix `datetime.fromtimestamp` raised OverflowError out of `run`.
    "observation time -1e20": ("lastObservations", {"memory.available": {
        "available": "1Gi", "capacity": "2Gi", "time": -1e20}}, "state.lastObservations[memory.available].time"),
    "observation time 1e300": ("lastObservations", {"memory.available": {
        "available": "1Gi", "capacity": "2Gi", "time": 1e300}}, "state.lastObservations[memory.available].time"),
    "first observed -1e20": ("firstObservedAt", "first observed", "state.firstObservedAt[0].at"),
    "condition 1e20": ("conditionLastObservedAt", {"MemoryPressure": 1e20}, "state.conditionLastObservedAt.MemoryPressure"),
    "savedAt -1e20": ("savedAt", -1e20, "state.savedAt"),
}


@pytest.mark.parametrize("case", ["corrupt", "a directory", "foreign", *sorted(OUT_OF_RANGE_TIMES)])
def test_an_unusable_file_is_moved_aside_counted_and_logged_once(tmp_path: Path, case: str) -> None:
    path = tmp_path / ENGINE_STATE_FILE
    clock = ManualClock(now_s=1000.0)
    if case == "corrupt":
        path.write_bytes(b"\xff\xfe not json")
    elif case == "a directory":
        path.mkdir()
    elif case in OUT_OF_RANGE_TIMES:
        state_file(path, clock)(cycle(EngineState(), clock))
        document = json.loads(path.read_text())
        field, value, _ = OUT_OF_RANGE_TIMES[case]
        if value == "first observed":
            value = [{**document["firstObservedAt"][0], "at": -1e20}]
        path.write_text(json.dumps({**document, field: value}))
    else:
        state_file(path, clock)(cycle(EngineState(), clock))
        document = json.loads(path.read_text())
        path.write_text(json.dumps({**document, "node": "node-2"}))
    log, errors = LogCapture(), Counter()
    assert state_file(path, clock, log, errors).restore(CONFIG, WINDOW_S) == EngineState()
    assert errors.count == 1
    [(event, fields)] = log.at("error")
    suffix = "foreign" if case == "foreign" else "corrupt"
    assert event == ("engine state file of another node or format version: moved aside, starting afresh"
                     if case == "foreign" else "engine state file unusable: moved aside, starting afresh")
    assert fields["moved_to"] == f"{path}.{suffix}-20260101T001640Z" and os.path.lexists(fields["moved_to"])
    assert not os.path.lexists(path)
    if case in OUT_OF_RANGE_TIMES:
        assert fields["reason"].startswith(f"{OUT_OF_RANGE_TIMES[case][2]}: invalid value "), fields["reason"]
        assert "a time" in fields["reason"]
        return
    assert fields["reason"] == {"corrupt": "is not UTF-8 text (byte 0)", "a directory": "is a directory",
                                "foreign": "saved by node 'node-2', this is node 'node-1'"}[case]


def test_temporary_files_of_an_interrupted_write_are_removed(tmp_path: Path) -> None:
    (tmp_path / ".engine-state-abc123").write_bytes(b'{"version": 1, "no')
    (tmp_path / ".journal-keep").write_bytes(b"the journal's own")
    log = LogCapture()
    state_file(tmp_path / ENGINE_STATE_FILE, ManualClock(), log).restore(CONFIG, WINDOW_S)
    assert sorted(os.listdir(tmp_path)) == [".journal-keep"]
    assert log.at("info") == [("removed temporary engine state files left by an interrupted write",
                               {"folder": str(tmp_path), "count": 1})]


def test_a_state_dir_that_takes_no_writes_costs_only_the_saving(unwritable_state: UnwritableFolder) -> None:
    path = unwritable_state.folder / ENGINE_STATE_FILE
    clock = ManualClock(now_s=1000.0)
    log, errors = LogCapture(), Counter()
    hook = state_file(path, clock, log, errors)
    state = EngineState()
    for number in range(1, 4):
        finished = cycle(state, clock, number=number)
        hook(finished)  # never raises into the loop
        state = finished.state
        clock.advance(SAVE_EVERY_S)
    assert errors.count == 3, "every failed write is counted"
    assert log.at("warning") == [("engine state not saved: a restart now would start grace periods afresh",
                                  {"path": str(path), "error": unwritable_state.write_error})], "logged once"
    unwritable_state.make_writable()
    hook(cycle(state, clock, number=4))
    assert log.at("info") == [("engine state saved again", {"path": str(path), "failed_writes": 3})]
    assert json.loads(path.read_text())["node"] == "node-1"

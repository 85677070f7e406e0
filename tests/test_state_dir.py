"""The stateDir's names (src/evictd/state_dir.py): the paths it gives, and that the real writers use them.

The writers run for real on a real folder (the engine state file, the record of critical pods); a real daemon's
stateDir is checked against the same names in tests/daemon/test_run_restart.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from builders import pod
from clocks import ManualClock
from counter import Counter
from evictd.core.engine import EngineConfig, EngineState
from evictd.core.kubelet_config import eviction_settings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import SYSTEM_CRITICAL_PRIORITY
from evictd.cycle.manager import FRESH_STATE
from evictd.kube.critical_record import CriticalPodRecord
from evictd.record.engine_state import EngineStateFile
from evictd.state_dir import (
    CORRUPT_SUFFIX,
    CRITICAL_PODS_TEMPORARY_PREFIX,
    ENGINE_STATE_TEMPORARY_PREFIX,
    JOURNAL_TEMPORARY_PREFIX,
    OOM_COUNTERS_TEMPORARY_PREFIX,
    RECORDING_TEMPORARY_PREFIX,
    StateDir,
)
from log_capture import LogCapture

CONFIG = EngineConfig.from_settings(eviction_settings({"evictionHard": {"memory.available": "1Gi"}}))


def test_every_entry_has_its_path_under_the_state_dir() -> None:
    state = StateDir("/var/lib/evictd")
    assert (state.lock, state.engine_state, state.oom_counters, state.journal, state.critical_pods, state.shadow,
            state.shadow_rotated, state.recording) == (
        "/var/lib/evictd/evictd.lock", "/var/lib/evictd/engine-state.json", "/var/lib/evictd/oom-counters.json",
        "/var/lib/evictd/evictions.json", "/var/lib/evictd/critical-pods.json", "/var/lib/evictd/shadow.jsonl",
        "/var/lib/evictd/shadow.jsonl.1", "/var/lib/evictd/recording")


def test_temporaries_are_hidden_and_no_entry_looks_like_one() -> None:
    state = StateDir("")
    names = [state.lock, state.engine_state, state.oom_counters, state.journal, state.critical_pods, state.shadow,
             state.recording]
    prefixes = (ENGINE_STATE_TEMPORARY_PREFIX, OOM_COUNTERS_TEMPORARY_PREFIX, JOURNAL_TEMPORARY_PREFIX,
                CRITICAL_PODS_TEMPORARY_PREFIX, RECORDING_TEMPORARY_PREFIX)
    assert all(prefix.startswith(".") for prefix in prefixes)
    assert not [name for name in names if name.startswith(prefixes)]
    assert len(set(names)) == len(names)


def test_the_writers_put_their_files_where_the_state_dir_names_them(tmp_path: Path) -> None:
    state = StateDir(str(tmp_path))
    leftover = tmp_path / f"{ENGINE_STATE_TEMPORARY_PREFIX}killed"
    leftover.write_text("{")  # what a process killed in the middle of a write left
    (tmp_path / "engine-state.json").write_text("not JSON")
    log = LogCapture()
    engine_state = EngineStateFile(state.engine_state, "node-1", log=log, on_error=Counter(), clock=ManualClock())
    assert engine_state.restore(CONFIG, 30.0) == FRESH_STATE == EngineState()
    critical = CriticalPodRecord(state.critical_pods)
    assert critical.remember([pod_from_dict(pod("dns", namespace="kube-system", priority=SYSTEM_CRITICAL_PRIORITY))])
    names = sorted(os.listdir(tmp_path))
    assert not leftover.exists(), "the temporary a killed write left is removed at start"
    assert names[0] == "critical-pods.json" and names[0] == os.path.basename(state.critical_pods)
    assert len(names) == 2 and names[1].startswith(os.path.basename(state.engine_state) + CORRUPT_SUFFIX)

"""`evictd run` restarted on a real node: the engine state in stateDir (src/evictd/record/engine_state.py).

The node is a private test cgroup, ``memory/evictd-test-<random>/kubepods`` limited to 512 MiB, with one burstable
pod in it (as in test_run_pods.py). The pod's real process allocates past ``allocatableMemory.available<200Mi``,
a soft threshold with a 6 s grace period, and evictd (no API: the eviction is decided and logged) is restarted
3 s into that grace period. The kubelet would start the grace period again (an eviction ~9 s after the
crossing); evictd restores it from `<stateDir>/engine-state.json` and decides at ~6 s. A state file that is
corrupt, or another node's or format version's, is renamed aside and evictd starts afresh.
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from itertools import groupby
from pathlib import Path

import pytest
import yaml
from evictd_process import EvictdProcess, start_evictd
from evictd_process import evictd_command as evictd

from evictd.commands.replay import replay
from evictd.core.saved_state import STATE_VERSION
from evictd.record.line_json import ABSENT
from evictd.record.recording import read_recording
from evictd.state_dir import LOCK_FILE, RECORDING_FOLDER
from real_pod_node import MiB, RealPodNode
from recorded_lines import decision_document

POD_LIMIT_BYTES = 512 * MiB
ALLOCATED_BYTES = 360 * MiB  # leaves ~150Mi: past the 200Mi threshold, well below the limit (no OOM kill)
GRACE_S = 6.0
RESTART_AFTER_S = 3.0
INTERVAL = "200ms"
THRESHOLD = "allocatableMemory.available<200Mi (soft, grace 6s)"
# A cycle every 200 ms, a decision at most a cycle late; a restart costs the new process's start-up, not more.
LATE_BY_AT_MOST_S = 1.5


@pytest.fixture
def real_pod(ext4_mount: Path) -> Iterator[RealPodNode]:
    node = RealPodNode(kubelet_root=ext4_mount / "kubelet", pod_logs_dir=ext4_mount / "pods-logs",
                       pods_limit_bytes=POD_LIMIT_BYTES)
    try:
        node.create(volume_files={"data.bin": 1 * MiB}, log_bytes=4096)
        yield node
    finally:
        node.teardown()


def start_on_the_node(tmp_path: Path, real_pod: RealPodNode, processes: list[EvictdProcess]) -> EvictdProcess:
    """Start `evictd run` on the real pod's node with the soft allocatable threshold; return after its first cycle."""
    return start_evictd(
        tmp_path, processes,
        kubelet="evictionHard: {memory.available: 1Mi}\nevictionSoft: {allocatableMemory.available: 200Mi}\n"
                f"evictionSoftGracePeriod: {{allocatableMemory.available: {GRACE_S:g}s}}\nenforceNodeAllocatable: []\n",
        evictd=f"housekeepingInterval: {INTERVAL}\npsiWakeups: false\n" + real_pod.evictd_settings(tmp_path / "containerd"),
    )


@pytest.mark.serial  # the restart's age within 3 s: 5.0 s seen beside loaded workers (a slow start)
def test_a_restart_inside_a_soft_grace_period_neither_resets_nor_shortens_it(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    pod_process = real_pod.start_process()
    first = start_on_the_node(tmp_path, real_pod, evictd_processes)
    pod_process.do(f"alloc {ALLOCATED_BYTES}")
    crossed = first.wait_event("threshold met", timeout=10)
    assert crossed["threshold"] == THRESHOLD
    time.sleep(max(0.0, crossed["_received"] + RESTART_AFTER_S - time.time()))
    assert first.stop() == 0
    assert not [e for e in first.events if e.get("event") in ("would evict pod", "evicting pod")], \
        "stopped before the grace period ended"
    state = json.loads((tmp_path / "state" / "engine-state.json").read_text())
    assert [item["threshold"]["signal"] for item in state["firstObservedAt"]] == ["allocatableMemory.available"]

    restarted_at = time.time()
    second = start_on_the_node(tmp_path, real_pod, evictd_processes)
    restored = second.wait_event("engine state restored")
    assert restored["grace_periods"] == [THRESHOLD]
    assert restored["conditions"] == ["MemoryPressure"]
    assert 0 < restored["age_s"] < RESTART_AFTER_S
    evicted = second.wait_event("would evict pod", timeout=GRACE_S + 5)
    assert evicted["pod"] == real_pod.key and evicted["threshold"] == THRESHOLD
    after_crossing = evicted["_received"] - crossed["_received"]
    print(f"crossing -> restart {restarted_at - crossed['_received']:.2f} s, crossing -> eviction "
          f"{after_crossing:.2f} s (grace {GRACE_S:g} s)")
    assert after_crossing >= GRACE_S - 0.3, "the restart shortened the grace period"
    assert after_crossing < GRACE_S + LATE_BY_AT_MOST_S, "the restart started the grace period again"
    # The restored condition never went away: no flap from MemoryPressure to nothing and back.
    changes = [e["conditions"] for e in second.events if e.get("event") == "node conditions changed"]
    assert changes == [["MemoryPressure"]]
    assert second.metric("evictd_errors_total", source="state") == 0
    assert second.stop() == 0

    # The restarted run's recording starts from the state it restored: replayed, every decision as recorded, and
    # `explain` of the eviction shows the grace period first met before the restart.
    state_dir = tmp_path / "state"
    records, _ = read_recording(str(state_dir / RECORDING_FOLDER))
    runs = [run for run, _ in groupby(records, key=lambda record: record.run)]
    assert len(runs) == 2, "a restarted run records under a new run id"
    first_run_start, second_run_start = (next(r for r in records if r.run == run) for run in runs)
    assert first_run_start.engine_state is None, "the first run started afresh"
    saved = second_run_start.engine_state
    assert isinstance(saved, dict)
    assert [item["threshold"]["signal"] for item in saved["firstObservedAt"]] == ["allocatableMemory.available"]
    replayed = evictd("replay", str(state_dir), "--output", "json")
    assert replayed.returncode == 0, replayed.stderr
    result = json.loads(replayed.stdout)
    assert result["runs"] == 2 and result["cycles"] == len([r for r in records if r.summary is not None])
    assert result["identical"] is True, result["differences"][:5]
    explained = evictd("explain", "--decision", evicted["decision"], "--state-dir", str(state_dir),
                       "--output", "json")
    assert explained.returncode == 0, explained.stderr
    why = json.loads(explained.stdout)
    assert (why["pod"], why["source"], why["restoredAtRunStart"]) == (real_pod.key, "recording", True)
    threshold = why["threshold"]
    assert threshold["signal"] == "allocatableMemory.available" and threshold["firstMetRestored"] is True
    first_met = datetime.fromisoformat(threshold["firstMet"].replace("Z", "+00:00")).timestamp()
    # Met at the crossing the first run logged (a cycle's duration apart at most), before the restart.
    assert abs(first_met - crossed["_received"]) < 1.0 and first_met < restarted_at
    assert threshold["metForSeconds"] >= GRACE_S and threshold["graceMet"] is True
    text = evictd("explain", "--decision", evicted["decision"], "--state-dir", str(state_dir))
    assert "before this run of evictd started: restored from engine-state.json" in text.stdout, text.stdout
    # From a fresh engine, as before the state was recorded, the grace period would start again at the restart.
    fresh = replay([replace(r, engine_state=ABSENT) if r is second_run_start else r for r in records])
    assert any(d.what == "evicted" and d.run == second_run_start.run for d in fresh.differences), fresh.differences

    # Exported from the restarted run's first cycle on, the scenario starts from the restored state too, and
    # `simulate` takes the recorded decisions.
    since = datetime.fromtimestamp(math.floor(second_run_start.wall * 1000) / 1000, UTC).isoformat()
    exported = evictd("record", "export", "--state-dir", str(state_dir), "--since", since)
    assert exported.returncode == 0 and exported.stderr == "", exported.stderr
    scenario = yaml.safe_load(exported.stdout)
    # (its savedAt is the first exported step's moment: the run's first cycle's, unless that one read no stats)
    assert {**scenario["engineState"], "savedAt": 0} == {**saved, "savedAt": 0}
    (tmp_path / "restarted.yaml").write_text(exported.stdout)
    simulated = evictd("simulate", str(tmp_path / "restarted.yaml"), "--output", "json")
    assert simulated.returncode == 0, simulated.stderr
    second_run = [r for r in records if r.run == second_run_start.run and r.summary is not None]
    assert [s["evicted"] for s in json.loads(simulated.stdout)["steps"]] == [decision_document(r.decision)["evicted"] for r in second_run]

    # `explain --now` of a recording whose daemon stopped a moment ago: current; it says when that stops being so.
    now = evictd("explain", "--now", "--state-dir", str(state_dir), "--output", "json")
    assert now.returncode == 0 and json.loads(now.stdout)["current"] is True, now.stdout + now.stderr


def saved_document(node: str, version: int = STATE_VERSION) -> dict[str, object]:
    """A well-formed state with the test's threshold met since a second ago."""
    now = time.time()
    record = {"signal": "allocatableMemory.available", "operator": "LessThan", "value": {"quantity": "200Mi"},
              "gracePeriodSeconds": GRACE_S, "minReclaim": None, "hard": False}
    return {"version": version, "node": node, "savedAt": now - 0.5,
            "firstObservedAt": [{"threshold": record, "at": now - 1}], "thresholdsMet": [],
            "conditionLastObservedAt": {"MemoryPressure": now - 1}, "lastObservations": {}}


@pytest.mark.parametrize("case", ["corrupt", "other node", "other version", "time out of range"])
def test_an_unusable_state_file_is_moved_aside_and_evictd_starts_afresh(
    case: str, tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    path = folder / "engine-state.json"
    node = socket.gethostname()
    if case == "corrupt":
        path.write_bytes(b'{"version": 1, "node": "' + node.encode() + b'", "savedAt": 17')  # truncated
    elif case == "time out of range":  # before the fix: `run` exited 1 with an OverflowError at every start
        document = saved_document(node) | {"lastObservations": {"memory.available": {
            "available": "1Gi", "capacity": "2Gi", "time": -1e20}}}
        path.write_text(json.dumps(document))
    else:
        document = saved_document("another-node" if case == "other node" else node,
                                  STATE_VERSION + 1 if case == "other version" else STATE_VERSION)
        path.write_text(json.dumps(document))
    before = path.read_bytes()
    daemon = start_on_the_node(tmp_path, real_pod, evictd_processes)
    suffix = "foreign" if case.startswith("other") else "corrupt"
    event = ("engine state file unusable: moved aside, starting afresh" if suffix == "corrupt"
             else "engine state file of another node or format version: moved aside, starting afresh")
    moved = daemon.wait_event(event)
    assert Path(moved["moved_to"]).read_bytes() == before
    assert Path(moved["moved_to"]).name.startswith(f"engine-state.json.{suffix}-")
    assert moved["reason"], moved
    assert daemon.metric("evictd_errors_total", source="state") == 1
    assert not [e for e in daemon.events if e.get("event") == "engine state restored"]
    # Afresh: the pod's crossing starts a whole grace period, and the new file is this node's.
    pod_process = real_pod.start_process()
    pod_process.do(f"alloc {ALLOCATED_BYTES}")
    crossed = daemon.wait_event("threshold met", timeout=10)
    evicted = daemon.wait_event("would evict pod", timeout=GRACE_S + 5)
    assert evicted["_received"] - crossed["_received"] >= GRACE_S - 0.3
    saved = json.loads(path.read_text())
    assert saved["node"] == node and saved["version"] == STATE_VERSION
    assert daemon.stop() == 0


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_state_is_saved_unless_in_dry_run(tmp_path: Path, dry_run: bool,
                                              evictd_processes: list[EvictdProcess]) -> None:
    daemon = EvictdProcess(tmp_path, kubelet="evictionSoft: {memory.available: 1024Gi}\n"
                           "evictionSoftGracePeriod: {memory.available: 1h}\n",
                           evictd=f"housekeepingInterval: 50ms\ndryRun: {str(dry_run).lower()}\n", args=("--cycles", "3"))
    evictd_processes.append(daemon)
    assert daemon.process.wait(timeout=30) == 0
    state = tmp_path / "state"
    # The flight recording is written in both modes (a dry-run's decisions are what an operator wants to replay).
    assert (state / RECORDING_FOLDER).is_dir()
    # The stateDir lock is taken in both modes, with or without an API (src/evictd/run/lock.py).
    assert (state / "evictd.lock").is_file()
    files = sorted(p.name for p in state.iterdir() if p.name not in (RECORDING_FOLDER, LOCK_FILE))
    # The OOM-kill counters too: they change nothing a later run decides, only what it counts.
    if dry_run:
        assert files == ["oom-counters.json"], "dry-run writes no engine state to stateDir"
    else:
        assert files == ["engine-state.json", "oom-counters.json"]
        saved = json.loads((state / "engine-state.json").read_text())
        assert [item["threshold"]["signal"] for item in saved["firstObservedAt"]] == ["memory.available"]

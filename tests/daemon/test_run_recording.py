"""`evictd run` records what it saw and decided under real pressure; `evictd replay` of that recording gives back
every decision, and with a candidate configuration says which cycles would have differed.

The node is `test_run_pods`'s: a real pod (a real process in a real pod cgroup, its emptyDir on a loop-mounted
ext4 that is also the kubelet root) under a pods cgroup limited to 512 MiB. First the disk fills (a 40 MiB file
beside the pod on the 64 MiB ext4: nodefs.available<50%; node-level reclaim runs, frees nothing, and the pod is
ranked and would be evicted), then the pod allocates past allocatable memory (allocatableMemory.available<200Mi,
acted on before the disk). Without the Kubernetes API evictions are reported only: the decisions are recorded
all the same.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from evictd_process import EvictdProcess, start_evictd
from evictd_process import evictd_command as evictd

from evictd.record.recording import read_recording
from evictd.state_dir import RECORDING_FOLDER
from full_filesystem import UnwritableFolder
from real_pod_node import MiB, RealPodNode
from recorded_lines import decision_document

ALLOCATED_BYTES = 360 * MiB  # leaves ~150Mi of real_pod's 512Mi: past the 200Mi threshold, no OOM kill
THRESHOLDS = "allocatableMemory.available<200Mi,nodefs.available<50%"


def watching(tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess],
             extra: str = "") -> EvictdProcess:
    """`evictd run` on the real pod's node: both thresholds, a cycle every 200 ms; returned after its first cycle."""
    return start_evictd(
        tmp_path, evictd_processes,
        kubelet="evictionHard: {allocatableMemory.available: 200Mi, nodefs.available: 50%}\n"
                "enforceNodeAllocatable: []\n",
        evictd="housekeepingInterval: 200ms\npsiWakeups: false\n" + real_pod.evictd_settings(real_pod.kubelet_root)
               + extra,
    )


def test_a_recording_of_real_memory_and_disk_pressure_replays_to_the_same_decisions(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    pod_process = real_pod.start_process()
    daemon = watching(tmp_path, real_pod, evictd_processes)
    (real_pod.kubelet_root / "big").write_bytes(b"\0" * (40 * MiB))  # 40 of 64 MiB, beside the pod
    disk = daemon.wait_for(lambda e: e.get("event") == "would evict pod" and e["signal"] == "nodefs.available",
                           timeout=15)
    assert disk["pod"] == real_pod.key
    pod_process.do(f"alloc {ALLOCATED_BYTES}")
    memory = daemon.wait_for(lambda e: e.get("event") == "would evict pod"
                             and e["signal"] == "allocatableMemory.available", timeout=15)
    assert memory["pod"] == real_pod.key
    time.sleep(1.0)  # a few more cycles under both pressures
    assert daemon.stop() == 0

    records, skipped = read_recording(str(daemon.state_dir / RECORDING_FOLDER))
    assert skipped == 0 and len(records) >= 5
    assert [r.cycle for r in records] == list(range(1, len(records) + 1)), "every cycle, in order"
    assert all(r.dry_run for r in records), "no API: evictions reported only, and recorded as such"
    signals = {e.signal for r in records for e in r.decision.evicted}
    assert signals == {"nodefs.available", "allocatableMemory.available"}
    assert any(r.after_reclaim is not None for r in records), "the Summary read after node-level reclaim"
    assert {c for r in records for c in r.decision.conditions} == {"MemoryPressure", "DiskPressure"}

    # Replayed with its own configuration: every decision exactly as recorded.
    same = evictd("replay", str(daemon.state_dir), "--output", "json")
    assert same.returncode == 0, same.stderr
    result = json.loads(same.stdout)
    assert result["cycles"] == len(records) and result["runs"] == 1
    assert result["identical"] is True, result["differences"][:5]

    # A candidate with the memory threshold at 100Mi: the ~150Mi left is no pressure, the disk decides instead.
    candidate = evictd("replay", str(daemon.state_dir), "--eviction-hard",
                       "allocatableMemory.available<100Mi,nodefs.available<50%", "--output", "json")
    assert candidate.returncode == 0, candidate.stderr
    differences = json.loads(candidate.stdout)["differences"]
    evicted = [d for d in differences if d["what"] == "evicted"]
    assert evicted, differences
    for difference in evicted:
        assert difference["recorded"][0].startswith(f"{real_pod.key} for allocatableMemory.available")
        assert difference["replayed"][0].startswith(f"{real_pod.key} for nodefs.available")
    assert {d["what"] for d in differences} >= {"thresholdsMet", "evicted"}

    # Each eviction's log line names its decision; `evictd explain` of it is that cycle, replayed.
    for logged in (disk, memory):
        explained = evictd("explain", "--decision", logged["decision"], "--state-dir", str(daemon.state_dir),
                           "--output", "json")
        assert explained.returncode == 0, explained.stderr
        why = json.loads(explained.stdout)
        assert (why["pod"], why["signal"], why["dryRun"]) == (real_pod.key, logged["signal"], True)
        assert why["message"] == logged["message"] and why["ranking"][0]["pod"] == real_pod.key
        assert why["ranking"][0]["outcome"] == "evicted" and why["threshold"]["firstMet"] <= why["time"]
    disk_why = json.loads(evictd("explain", "--decision", disk["decision"], "--state-dir", str(daemon.state_dir),
                                 "--output", "json").stdout)
    assert disk_why["reclaim"] and disk_why["reclaimSucceeded"] is False, "reclaim ran and was not enough"
    memory_why = json.loads(evictd("explain", real_pod.key, "--state-dir", str(daemon.state_dir),
                                   "--output", "json").stdout)
    assert memory_why["signal"] == "allocatableMemory.available", "the pod's last eviction: for memory"
    assert memory_why["ranking"][0]["usageAboveRequest"] >= ALLOCATED_BYTES
    now = evictd("explain", "--now", "--state-dir", str(daemon.state_dir), "--output", "json")
    assert now.returncode == 0, now.stderr
    signals = {s["signal"]: s for s in json.loads(now.stdout)["signals"]}
    assert signals["allocatableMemory.available"]["state"] == "met"
    assert signals["allocatableMemory.available"]["distance"] < 0 < 200 * MiB + signals[
        "allocatableMemory.available"]["distance"]
    assert json.loads(now.stdout)["ranking"]["next"] == real_pod.key

    # The recording exports as a scenario that `simulate` runs to the same decisions.
    exported = evictd("record", "export", "--state-dir", str(daemon.state_dir))
    assert exported.returncode == 0, exported.stderr
    (tmp_path / "night.yaml").write_text(exported.stdout)
    simulated = evictd("simulate", str(tmp_path / "night.yaml"), "--output", "json")
    assert simulated.returncode == 0, simulated.stderr
    steps = json.loads(simulated.stdout)["steps"]
    assert [s["evicted"] for s in steps] == [decision_document(r.decision)["evicted"] for r in records]
    assert [s["conditions"] for s in steps] == [list(r.decision.conditions) for r in records]


def test_a_full_state_dir_stops_the_recorder_not_the_loop(
    tmp_path: Path, real_pod: RealPodNode, evictd_processes: list[EvictdProcess]
) -> None:
    state = UnwritableFolder(tmp_path / "state", "full")
    try:
        state.make_unwritable()
        daemon = watching(tmp_path, real_pod, evictd_processes, extra=f"stateDir: {state.folder}\n")
        problem = daemon.wait_event("flight recorder cannot write; the loop goes on without it", timeout=10)
        assert problem["error"] == "No space left on device"
        cycles = daemon.metric("evictd_cycles_total")
        (real_pod.kubelet_root / "big").write_bytes(b"\0" * (40 * MiB))
        assert daemon.wait_for(lambda e: e.get("event") == "would evict pod", timeout=15)["pod"] == real_pod.key
        assert daemon.metric("evictd_cycles_total") > cycles
        assert daemon.metric("evictd_errors_total", source="recorder") >= 1
        state.make_writable()
        daemon.wait_event("flight recorder writing again", timeout=10)
        assert daemon.stop() == 0
        records, _ = read_recording(str(state.folder / RECORDING_FOLDER))
        assert records and all(r.pods for r in records), "recording again, the pod list whole"
    finally:
        state.unmount()

"""The flight recorder (src/evictd/record/recorder.py) on real files: what the example scenarios' cycles leave in a
stateDir, read back (`evictd record export`, `evictd replay`), bounded, cut by a crash, and on a full or
unwritable stateDir.

Each recording is made by the real hook from the reports of the real `EvictionManager` (driven by `simulate`
through the example scenarios in config/examples), on the test's real folder.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import builders
from clocks import ManualClock
from evictd.commands.replay import replay
from evictd.commands.simulate import Scenario, parse_scenario, run_scenario
from evictd.config import load_configuration
from evictd.config_files import read_documents
from evictd.core.engine import EngineState
from evictd.core.kubelet_config import EvictionSettings, eviction_settings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.saved_state import STATE_VERSION, threshold_record
from evictd.core.summary_parser import summary_from_dict
from evictd.cycle.finished import Cycle
from evictd.cycle.render import step_json, yaml_flow
from evictd.record import recorder as recorder_module
from evictd.record.decision import RankKeys, decision_of
from evictd.record.documents import kubelet_config_document, pod_to_dict
from evictd.record.recorder import FlightRecorder
from evictd.record.recording import read_recording, segment_paths
from evictd.record.segment_files import CLOSED_SUFFIX, OPEN_SUFFIX
from evictd.record.summary_json import summary_to_dict
from evictd.record.write_behind import WriteBehind
from evictd.state_dir import RECORDING_FOLDER
from full_filesystem import UnwritableFolder
from log_capture import LogCapture
from recorded_lines import decision_document

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.yaml"))
# The shipped sample: `evictd simulate config/examples/01-memory-pressure.yaml --record` of it (a stateDir).
SAMPLE = ROOT / "config" / "examples" / "recorded" / "01-memory-pressure"
SAMPLE_SEGMENT = Path(RECORDING_FOLDER) / "19700101T000000.000000Z-simulate.jsonl"
START = datetime(2026, 11, 22, 23, 0, tzinfo=UTC).timestamp()
MiB = 1 << 20


def example(path: Path) -> tuple[dict[str, Any], Scenario, EvictionSettings]:
    document = read_documents(str(path), key="scenario")[0][0]
    scenario = parse_scenario(document)
    return document, scenario, scenario.settings  # what a recording of it keeps (stall maps included)


def cycles(scenario: Scenario, start: float = START, first_number: int = 1) -> Iterator[Cycle]:
    """The scenario's cycles as the daemon hands them to its after-cycle hooks (wall = start + at)."""
    state = EngineState(layout=scenario.layout)
    for number, (step, report) in enumerate(zip(scenario.steps, run_scenario(scenario), strict=True), first_number):
        yield Cycle(number=number, report=report, state=state, started_at=report.now, duration_s=0.001,
                    wall=datetime.fromtimestamp(start + step.at, UTC))


def recorder(state_dir: Path, settings: EvictionSettings, *, log: LogCapture | None = None, errors: list[int] | None = None,
             max_bytes: int = 64 * MiB, max_age_s: float = 86400.0, wall: float = START,
             writer: WriteBehind | None = None) -> FlightRecorder:
    return FlightRecorder(str(state_dir), settings, max_bytes=max_bytes, max_age_s=max_age_s, dry_run=False,
                          log=log or LogCapture(), on_error=lambda: (errors if errors is not None else []).append(1),
                          clock=ManualClock(0.0, datetime.fromtimestamp(wall, UTC)), writer=writer)


def record(scenario: Scenario, hook: FlightRecorder) -> None:
    """Run the scenario's cycles through `hook`, as the daemon runs its after-cycle hooks."""
    for cycle in cycles(scenario):
        hook(cycle)


def simulated(document: dict[str, Any]) -> list[dict[str, Any]]:
    scenario = parse_scenario(document)
    return [step_json(step.at, report) for step, report in zip(scenario.steps, run_scenario(scenario), strict=True)]


def evictd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_an_exported_recording_simulates_to_the_recorded_decisions(tmp_path: Path, path: Path) -> None:
    document, scenario, settings = example(path)
    record(scenario, recorder(tmp_path, settings))

    exported = evictd("record", "export", "--state-dir", str(tmp_path))
    assert exported.returncode == 0, exported.stderr
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(exported.stdout)
    again = evictd("simulate", str(scenario_file), "--output", "json")
    assert again.returncode == 0, again.stderr
    # The same decisions at the same times (the example's steps start at 0).
    assert json.loads(again.stdout)["steps"] == simulated(document)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_replay_with_the_recorded_configuration_reproduces_every_decision(tmp_path: Path, path: Path) -> None:
    _, scenario, settings = example(path)
    record(scenario, recorder(tmp_path, settings))
    records, skipped = read_recording(str(tmp_path / RECORDING_FOLDER))
    assert (len(records), skipped) == (len(scenario.steps), 0)
    result = replay(records)
    assert result.cycles == len(scenario.steps) and result.differences == ()


def test_replay_with_a_candidate_configuration_says_what_would_have_differed(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])  # 01-memory-pressure
    record(scenario, recorder(tmp_path, settings))
    candidate = tmp_path / "candidate.yaml"
    # The candidate changes only what it states, on the recorded configuration: the same hard threshold, and no
    # soft one any more.
    candidate.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                         "evictionHard: {memory.available: 1Gi}\nevictionSoft: {}\n")

    done = evictd("replay", str(tmp_path), "--config", str(candidate), "--output", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["cycles"] == len(scenario.steps) and result["identical"] is False
    by_cycle = {(d["cycle"], d["what"]): d for d in result["differences"]}
    # t=100s (cycle 4): the soft threshold's grace had passed and batch-job went; with no soft threshold, nobody.
    batch = by_cycle[(4, "evicted")]
    assert len(batch["recorded"]) == 1 and batch["recorded"][0].startswith("jobs/batch-job for memory.available")
    assert batch["replayed"] == []
    assert by_cycle[(2, "thresholdsMet")] == {**by_cycle[(2, "thresholdsMet")],
                                              "recorded": ["memory.available<2Gi (in grace)"], "replayed": []}
    # t=110s: the hard threshold evicts shop/web either way (with 1 s grace, not the soft threshold's).
    assert (5, "evicted") not in by_cycle
    pressure = {p["condition"]: p for p in result["pressure"]}["MemoryPressure"]
    assert pressure["recorded"][0]["from"] == datetime.fromtimestamp(START + 10, UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")
    assert pressure["replayed"][0]["from"] == datetime.fromtimestamp(START + 110, UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")

    text = evictd("replay", str(tmp_path), "--config", str(candidate))
    assert text.returncode == 0, text.stderr
    assert "cycles decided differently" in text.stdout and "CONDITION" in text.stdout
    same = evictd("replay", str(tmp_path))
    assert "every decision as recorded" in same.stdout, same.stdout


def test_the_pod_list_is_written_whole_once_then_only_its_changes(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    pods = scenario.steps[0].pods
    moved = replace(pods[0], priority=(pods[0].priority or 0) + 1)
    steps = list(scenario.steps)
    steps[2] = replace(steps[2], pods=pods)  # the same pods again
    steps[3] = replace(steps[3], pods=(moved, *pods[1:]))  # one pod changed
    steps[4] = replace(steps[4], pods=(moved, *pods[2:]))  # one pod gone
    steps[5] = replace(steps[5], pods=tuple(reversed((moved, *pods[2:]))))  # reordered
    scenario = replace(scenario, steps=tuple(steps))
    record(scenario, recorder(tmp_path, settings))

    segment = Path(segment_paths(str(tmp_path / RECORDING_FOLDER))[0])
    lines = [json.loads(line) for line in segment.read_bytes().splitlines()]
    assert len(lines[0]["pods"]) == len(pods) and "podChanges" not in lines[0]
    assert "pods" not in lines[1] and "podChanges" not in lines[1] and "pods" not in lines[2]
    assert [pod_from_dict(p) for p in lines[3]["podChanges"]["set"]] == [moved]
    assert lines[4]["podChanges"] == {"removed": [pods[1].uid or pods[1].key]}
    assert lines[5]["podChanges"]["order"] == [p.uid or p.key for p in reversed((moved, *pods[2:]))]
    assert "config" in lines[0] and "config" not in lines[1]
    # Read back, each cycle has its whole list.
    records, _ = read_recording(str(tmp_path / RECORDING_FOLDER))
    assert [[pod_from_dict(p) for p in r.pods] for r in records] == [list(step.pods) for step in scenario.steps]


def steady_node(pods: int, steps: int) -> dict[str, Any]:
    """`busy_node` whose pods' disk figures stay as they were (only memory moves), each reading with its time;
    then a pod's logs grow, a pod goes, one comes, the order changes, and one pod reads in another time zone."""
    document = busy_node(pods, steps)
    first = document["steps"][0]["summary"]["pods"]
    for number, step in enumerate(document["steps"]):
        for index, pod in enumerate(step["summary"]["pods"]):
            pod["containers"] = first[index]["containers"]
            pod["memory"]["time"] = f"2026-11-23T00:{number // 6:02}:{number % 6 * 10:02}.{index:06}Z"
    steps = document["steps"]
    grown = dict(first[1]["containers"][0], logs={"usedBytes": 1 << 30})
    steps[3]["summary"]["pods"][1] = dict(steps[3]["summary"]["pods"][1], containers=[grown])
    del steps[4]["summary"]["pods"][2]
    steps[5]["summary"]["pods"] = steps[5]["summary"]["pods"][:2] + steps[5]["summary"]["pods"][3:] + [
        {"podRef": {"name": "newcomer", "namespace": "busy", "uid": "n-1"}, "memory": {"workingSetBytes": 7}}]
    steps[6]["summary"]["pods"] = list(reversed(steps[6]["summary"]["pods"]))
    steps[7]["summary"]["pods"][0]["memory"]["time"] = "2026-11-23T02:00:00+02:00"
    return document


def test_summaries_after_a_segments_first_line_are_written_as_changes_and_read_back_whole(tmp_path: Path) -> None:
    document = steady_node(pods=30, steps=12)
    scenario, settings = parse_scenario(document), eviction_settings(document["config"])
    all_cycles = list(cycles(scenario))
    unread = replace(all_cycles[9].report, observed=replace(all_cycles[9].report.observed, summary=None))
    all_cycles[9] = replace(all_cycles[9], report=unread)  # stats unreadable
    hook = recorder(tmp_path, settings)
    for cycle in all_cycles:
        hook(cycle)

    segment = Path(segment_paths(str(tmp_path / RECORDING_FOLDER))[0])
    raw = segment.read_bytes().splitlines()
    lines = [json.loads(line) for line in raw]
    assert "summary" in lines[0] and "summaryChanges" not in lines[0]
    assert all("summaryChanges" in line and "summary" not in line for line in lines[1:9] + lines[10:])
    assert lines[9]["summary"] is None
    # Only the memory readings moved: one row of integers per pod, no disk figures, a fraction of the bytes.
    assert set(lines[1]["summaryChanges"]) == {"node", "memory"} and len(lines[1]["summaryChanges"]["memory"]) == 30
    assert len(raw[1]) < len(raw[0]) / 3
    assert [p["id"] for p in lines[3]["summaryChanges"]["pods"]] == [scenario.steps[3].summary.pods[1].pod_ref.uid]
    assert lines[4]["summaryChanges"]["removed"] == [scenario.steps[3].summary.pods[2].pod_ref.uid]
    assert lines[5]["summaryChanges"]["pods"][0]["podRef"]["name"] == "newcomer"
    assert "order" in lines[6]["summaryChanges"] and "order" not in lines[5]["summaryChanges"]
    assert lines[7]["summaryChanges"]["pods"][0]["memory"]["time"] == "2026-11-23T02:00:00+02:00"
    # Read back, every cycle has its whole Summary, as `simulate` would read it.
    records, skipped = read_recording(str(tmp_path / RECORDING_FOLDER))
    assert skipped == 0
    expected = [None if c.report.observed.summary is None else summary_to_dict(c.report.observed.summary)
                for c in all_cycles]
    assert [r.summary for r in records] == expected
    assert replay(records).differences == ()


def test_a_line_is_in_memory_about_once_while_its_chunks_are_made() -> None:
    """Issue #25 (5,000 pods): a segment's first line (6.6 MiB) was held as its parts and as its chunks at once,
    the daemon's highest peak; each part is let go of once it is in a chunk. Seven parts of 1 MiB and one of 3 MiB
    made into chunks (of 64 KiB, the 3 MiB part cut): at the highest, the line, its largest part (held while it
    is cut) and a chunk or so in memory (before: the line twice, 11 MiB over it)."""
    mib = 1 << 20
    tracemalloc.start()
    try:
        line = ["x" * mib for _ in range(7)] + ["y" * (3 * mib)]
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        chunks = tuple(recorder_module._chunks(line))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert b"".join(chunks) == b"x" * (7 * mib) + b"y" * (3 * mib)  # (10 MiB, in chunks of 1 MiB)
    assert before >= 10 * mib
    assert peak <= before + 5 * mib, f"{(peak - before) / mib:.1f} MiB over the line's parts while chunked"
    assert line == [""] * 8


def test_a_line_written_chunk_by_chunk_is_the_line_written_at_once(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A segment's first line (the whole pod list and Summary: megabytes at thousands of pods) is written a chunk at
    # a time, never built whole as bytes; chunks far smaller than its parts must still give the very same lines.
    document = steady_node(pods=30, steps=12)
    scenario, settings = parse_scenario(document), eviction_settings(document["config"])
    record(scenario, recorder(tmp_path / "at-once", settings))
    monkeypatch.setattr(recorder_module, "WRITE_CHUNK_CHARS", 97)
    record(scenario, recorder(tmp_path / "chunked", settings))
    writer = WriteBehind(LogCapture())  # as `evictd run` records: the chunks handed over, written off the loop
    record(scenario, recorder(tmp_path / "handed-over", settings, writer=writer))
    assert writer.flush(60.0)

    at_once, chunked, handed_over = (Path(segment_paths(str(tmp_path / name / RECORDING_FOLDER))[0]).read_bytes()
                                     for name in ("at-once", "chunked", "handed-over"))
    assert len(at_once.splitlines()[0]) > 100 * 97  # the first line went out in more than a hundred chunks
    assert chunked == at_once and handed_over == at_once
    records, skipped = read_recording(str(tmp_path / "handed-over" / RECORDING_FOLDER))
    assert skipped == 0 and len(records) == len(scenario.steps)
    assert [[pod_from_dict(p) for p in r.pods] for r in records] == [list(step.pods) for step in scenario.steps]


def test_a_line_lost_in_the_middle_of_a_segment_loses_the_changes_after_it_not_their_summaries(
        tmp_path: Path) -> None:
    document = steady_node(pods=5, steps=8)
    scenario, settings = parse_scenario(document), eviction_settings(document["config"])
    record(scenario, recorder(tmp_path, settings))
    segment = Path(segment_paths(str(tmp_path / RECORDING_FOLDER))[0])
    lines = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(b"".join(lines[:3]) + b"{not json\n" + b"".join(lines[4:]))
    records, skipped = read_recording(str(tmp_path / RECORDING_FOLDER))
    # No Summary is made of changes applied to the wrong one: those after the lost line are not read.
    assert [r.cycle for r in records] == [1, 2, 3] and skipped == 5


def test_a_recording_of_format_version_1_is_read(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    folder = tmp_path / RECORDING_FOLDER
    folder.mkdir()
    # What evictd wrote before Summaries were written as changes: every line with its whole Summary.
    version_1 = []
    for cycle in cycles(scenario):
        report = cycle.report
        line = {"v": 1, "run": "20261122T230000Z-1", "cycle": cycle.number, "wall": cycle.wall.timestamp(),
                "now": report.now, "pods": [pod_to_dict(p) for p in report.observed.pods],
                "summary": None if report.observed.summary is None else summary_to_dict(report.observed.summary),
                "decision": decision_document(decision_of(report))}
        if cycle.number == 1:
            line.update(dryRun=False, config=kubelet_config_document(settings))
        version_1.append(json.dumps(line))
    (folder / f"20261122T230000.000000Z-1{OPEN_SUFFIX}").write_text("\n".join(version_1) + "\n")
    (folder / f"20261122T240000.000000Z-1{OPEN_SUFFIX}").write_text(version_1[0].replace('"v": 1', '"v": 3') + "\n")
    records, skipped = read_recording(str(folder))
    assert skipped == 1, "a line of a format this evictd does not know"
    assert [r.summary for r in records] == [summary_to_dict(c.report.observed.summary) for c in cycles(scenario)]
    assert replay(records).differences == ()


def test_the_ranking_is_recorded_with_each_pods_keys(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[1])  # 02-disk-pressure-single-fs: evicts at t=10
    record(scenario, recorder(tmp_path, settings))
    records, _ = read_recording(str(tmp_path / RECORDING_FOLDER))
    evicting = next(r for r in records if r.decision.evicted)
    ranking = evicting.decision.ranking.entries()
    assert [entry.pod for entry in ranking] == ["default/cache", "default/api", "default/logger"]
    cache = ranking[0].keys
    assert cache == RankKeys(exceeds_requests=True, priority=0, ranked_usage=(210 << 20) + (3 << 30) - (500 << 20))
    # Written as text: the same ranking `decision_of` gives (what replay compares).
    report = run_scenario(scenario)[records.index(evicting)]
    assert evicting.decision.ranking == decision_of(report).ranking
    evicted = evicting.decision.evicted[0]
    assert (evicted.name, evicted.grace_period_s) == ("cache", 1)  # a hard threshold: 1 s
    assert evicted.message.startswith("The node was low on resource: ephemeral-storage.")
    assert evicting.after_reclaim is not None, "the Summary read after reclaim decided that it was not enough"


def test_the_summary_read_after_a_wait_for_disk_figures_is_recorded_and_replays_to_the_same_eviction(
        tmp_path: Path) -> None:
    """A disk ranking that waited for pods' disk figures ranked on the Summary read after the wait: it is recorded
    (`afterDiskWait`), exported and replayed, so the replay evicts the pod the cycle evicted."""
    b, gi = builders, builders.Gi
    db = b.pod("db", requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
    filler = b.pod("filler", volumes=[{"name": "scratch", "emptyDir": {}}])
    short = b.fs(gi, 100 * gi)
    unmeasured = b.summary(nodefs=short, pods=[b.pod_stats(db, memory=gi), b.pod_stats(filler, memory=MiB)])
    measured = b.summary(nodefs=short, pods=[
        b.pod_stats(db, memory=gi, logs=4096, ephemeral=4096),
        b.pod_stats(filler, memory=MiB, logs=4096, volumes={"scratch": 3 * gi}, ephemeral=3 * gi + 4096)])
    document = {"config": {"evictionHard": {"nodefs.available": "10%"}}, "pods": [db, filler],
                "steps": [{"at": 0, "summary": unmeasured, "afterReclaim": unmeasured, "afterDiskWait": measured}]}
    scenario = parse_scenario(document)
    record(scenario, recorder(tmp_path, scenario.settings))
    (recorded,), _ = read_recording(str(tmp_path / RECORDING_FOLDER))
    assert [e.name for e in recorded.decision.evicted] == ["filler"]
    assert recorded.after_disk_wait == summary_to_dict(summary_from_dict(measured))
    assert replay([recorded]).differences == ()
    exported = evictd("record", "export", "--state-dir", str(tmp_path))
    assert exported.returncode == 0, exported.stderr
    assert "afterDiskWait" in exported.stdout


def test_a_cut_last_line_is_skipped_and_earlier_cycles_read(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    record(scenario, recorder(tmp_path, settings))
    segment = segment_paths(str(tmp_path / RECORDING_FOLDER))[0]
    whole = Path(segment).read_bytes()
    last = whole.rstrip(b"\n").rsplit(b"\n", 1)[1]
    Path(segment).write_bytes(whole[: len(whole) - len(last) // 2 - 1])  # a crash in the middle of the last write

    records, skipped = read_recording(str(tmp_path / RECORDING_FOLDER))
    assert skipped == 1
    assert [r.cycle for r in records] == list(range(1, len(scenario.steps)))
    # The next run appends to a segment of its own; both read back in order.
    later = recorder(tmp_path, settings, wall=START + 3600)
    for cycle in cycles(scenario, start=START + 3600, first_number=1):
        later(cycle)
    records, skipped = read_recording(str(tmp_path / RECORDING_FOLDER))
    assert skipped == 1 and len(records) == 2 * len(scenario.steps) - 1
    assert len({r.run for r in records}) == 2
    assert replay(records).differences == ()
    # A crash after a segment was compressed and before its plain file was removed: read once, not twice.
    later.close()
    closed = segment_paths(str(tmp_path / RECORDING_FOLDER))[-1]
    with gzip.open(closed) as handle:
        Path(closed[: -len(CLOSED_SUFFIX)] + OPEN_SUFFIX).write_bytes(handle.read())
    assert len(read_recording(str(tmp_path / RECORDING_FOLDER))[0]) == len(records)


def big_node_cycles(scenario: Scenario, count: int, seconds_apart: float) -> Iterator[Cycle]:
    """`count` cycles of the scenario's first step, `seconds_apart` apart."""
    base = next(iter(cycles(replace(scenario, steps=scenario.steps[:1]))))
    for number in range(1, count + 1):
        yield replace(base, number=number, report=replace(base.report, now=number * seconds_apart),
                      wall=datetime.fromtimestamp(START + number * seconds_apart, UTC))


def busy_node(pods: int, steps: int) -> dict[str, Any]:
    """A scenario of a node whose pods' memory moves every 10 s (readings compress as little as real ones)."""
    rng = random.Random(12)
    names = [(f"pod-{i}", str(uuid.UUID(int=rng.getrandbits(128)))) for i in range(pods)]
    return {
        "config": {"evictionHard": {"memory.available": "1Gi"}},
        "pods": [{"metadata": {"name": name, "namespace": "busy", "uid": uid},
                  "spec": {"containers": [{"name": "app", "resources": {"requests": {"memory": "100Mi"}}}]}}
                 for name, uid in names],
        "steps": [{"at": 10 * step, "summary": {
            "node": {"memory": {"availableBytes": rng.randrange(1 << 30, 4 << 30),
                                "workingSetBytes": rng.randrange(1 << 30, 4 << 30)}},
            "pods": [{"podRef": {"name": name, "namespace": "busy", "uid": uid},
                      "memory": {"workingSetBytes": rng.randrange(1 << 30)},
                      "containers": [{"name": "app", "memory": {"workingSetBytes": rng.randrange(1 << 30)},
                                      "rootfs": {"usedBytes": rng.randrange(1 << 30)},
                                      "logs": {"usedBytes": rng.randrange(1 << 30)}}]}
                     for name, uid in names]}} for step in range(steps)],
    }


def test_the_recording_stays_within_its_size_closing_compressed_segments(tmp_path: Path) -> None:
    scenario = parse_scenario(busy_node(pods=40, steps=1500))
    hook = recorder(tmp_path, eviction_settings(busy_node(0, 0)["config"]), max_bytes=1 * MiB)
    folder = tmp_path / RECORDING_FOLDER
    for cycle in cycles(scenario):
        hook(cycle)
        assert sum(os.path.getsize(p) for p in segment_paths(str(folder))) <= 1 * MiB
    paths = segment_paths(str(folder))
    assert paths[-1].endswith(OPEN_SUFFIX) and all(p.endswith(CLOSED_SUFFIX) for p in paths[:-1])
    for path in paths[:-1]:
        with gzip.open(path) as handle:
            assert len(json.loads(handle.readline())["pods"]) == 40, "every segment starts with the whole pod list"
    records, skipped = read_recording(str(folder))
    assert skipped == 0 and records[-1].cycle == 1500
    assert [r.cycle for r in records] == list(range(records[0].cycle, 1501)), "the newest cycles, none missing"
    assert records[0].cycle > 100, "the oldest were deleted"
    assert replay(records).differences == ()


def test_a_first_line_larger_than_a_segments_share_does_not_close_every_segment_after_one_line(
        tmp_path: Path) -> None:
    # 400 pods: a whole line (the pod list and the Summary) is more than a 1 MiB recording's 64 KiB share. Closing a
    # segment whenever a line did not fit after it made every cycle a segment of its own, whole and compressed:
    # at 5,000 pods and the default 64 MiB, 6.6 MiB written and compressed each cycle.
    scenario = parse_scenario(steady_node(pods=400, steps=12))
    hook = recorder(tmp_path, eviction_settings(busy_node(0, 0)["config"]), max_bytes=1 * MiB)
    record(scenario, hook)
    folder = tmp_path / RECORDING_FOLDER
    segments = segment_paths(str(folder))
    lines = Path(segments[-1]).read_bytes().splitlines()
    assert len(lines[0]) > 1 * MiB // 16, "the whole first line is more than a share"
    assert len(lines) > 1 and len(segments) <= 12 // 3, "a segment holds its first line and changes after it"
    records, skipped = read_recording(str(folder))
    assert skipped == 0 and [r.cycle for r in records] == list(range(1, 13))


def test_with_a_write_behind_each_close_compresses_then_enforces_the_size(tmp_path: Path) -> None:
    scenario = parse_scenario(busy_node(pods=40, steps=400))
    writer = WriteBehind(LogCapture())
    errors: list[int] = []
    hook = recorder(tmp_path, eviction_settings(busy_node(0, 0)["config"]), max_bytes=256 << 10, errors=errors,
                    writer=writer)
    folder = tmp_path / RECORDING_FOLDER
    segments = set()
    for cycle in cycles(scenario):
        hook(cycle)
        assert writer.flush(60.0)
        paths = segment_paths(str(folder))
        segments.update(paths)
        assert sum(os.path.getsize(p) for p in paths) <= 256 << 10
        assert paths[-1].endswith(OPEN_SUFFIX) and all(p.endswith(CLOSED_SUFFIX) for p in paths[:-1])
    assert len(segments) > 2 * len(paths), "the oldest were deleted"
    records, skipped = read_recording(str(folder))
    assert skipped == 0 and errors == []
    assert [r.cycle for r in records] == list(range(records[0].cycle, 401)), "the newest cycles, none missing"
    hook.close()
    assert all(p.endswith(CLOSED_SUFFIX) for p in segment_paths(str(folder)))


def test_the_recording_keeps_nothing_older_than_its_age(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    clock = ManualClock(0.0, datetime.fromtimestamp(START, UTC))
    hook = FlightRecorder(str(tmp_path), settings, max_bytes=64 * MiB, max_age_s=3600.0, dry_run=False, log=LogCapture(),
                          clock=clock)
    folder = tmp_path / RECORDING_FOLDER
    for cycle in big_node_cycles(scenario, 3 * 360, 10.0):  # three hours, one cycle every 10 s
        now = cycle.wall.timestamp()
        clock.now_s = now - START
        hook(cycle)
        # Segment files carry their last write as mtime, as on a real node.
        for path in segment_paths(str(folder)):
            if path.endswith(CLOSED_SUFFIX) and os.path.getmtime(path) > now:
                os.utime(path, (now, now))
    records, _ = read_recording(str(folder))
    # Segments go whole once their last cycle is older than maxAge, checked as each segment closes (every
    # maxAge/24): the oldest cycle kept is at most two segments' span older than that.
    assert 3600 - 3600 / 24 <= clock.wall().timestamp() - records[0].wall <= 3600 + 2 * 3600 / 24


def test_a_full_state_dir_degrades_the_recorder_only(tmp_path: Path) -> None:
    document = busy_node(pods=20, steps=12)  # lines of several KiB: none fits in what a full page leaves
    scenario, settings = parse_scenario(document), eviction_settings(document["config"])
    state = UnwritableFolder(tmp_path / "state", "full")
    try:
        log, errors = LogCapture(), []
        hook = recorder(state.folder, settings, log=log, errors=errors)
        all_cycles = list(cycles(scenario))
        for cycle in all_cycles[:2]:
            hook(cycle)
        state.make_unwritable()
        for cycle in all_cycles[2:8]:
            hook(cycle)  # never raises
        assert len(errors) == 6
        warnings = [line for line in log.lines if line[0] == "warning"]
        assert len(warnings) == 1 and warnings[0][2]["error"] == "No space left on device", "logged once"
        state.make_writable()
        for cycle in all_cycles[8:]:
            hook(cycle)
        assert [line[1] for line in log.lines if line[0] == "info"] == ["flight recorder writing again"]
        records, skipped = read_recording(str(state.folder / RECORDING_FOLDER))
        assert skipped == 0, "no cut line left behind by the failed writes"
        segment = Path(segment_paths(str(state.folder / RECORDING_FOLDER))[0])
        lines = [json.loads(line) for line in segment.read_bytes().splitlines()]
        assert [line["cycle"] for line in lines] == [1, 2, 9, 10, 11, 12]
        assert ["summary" in line for line in lines] == [True, False, True, False, False, False], \
            "whole again after the failed writes"
        assert [r.cycle for r in records] == [1, 2, 9, 10, 11, 12]
        assert all(len(r.pods) == 20 for r in records)
        assert replay(records).differences == ()
    finally:
        state.unmount()


def test_an_unwritable_state_dir_degrades_the_recorder_only(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    (tmp_path / "not-a-folder").write_text("")
    log, errors = LogCapture(), []
    hook = recorder(tmp_path / "not-a-folder" / "state", settings, log=log, errors=errors)
    for cycle in cycles(scenario):
        hook(cycle)
    assert len(errors) == len(scenario.steps)
    assert [line[2]["error"] for line in log.lines] == ["Not a directory"]


def test_export_takes_the_configured_state_dir_and_a_time_window(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    record(scenario, recorder(tmp_path / "state", settings))
    config = tmp_path / "evictd.yaml"
    config.write_text(f"apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nstateDir: {tmp_path / 'state'}\n")
    since = datetime.fromtimestamp(START + scenario.steps[2].at, UTC).isoformat().replace("+00:00", "Z")
    done = evictd("record", "export", "--config", str(config), "--since", since)
    assert done.returncode == 0, done.stderr
    exported = yaml.safe_load(done.stdout)
    assert len(exported["steps"]) == len(scenario.steps) - 2 and exported["steps"][0]["at"] == 0
    assert load_configuration([str(config)]).evictd.state_dir == str(tmp_path / "state")

    assert evictd("record", "export", "--state-dir", str(tmp_path / "state"), "--since", "1h").returncode == 1, \
        "nothing recorded in the last hour (the recording is of 2026-11-22)"
    bad = evictd("record", "export", "--state-dir", str(tmp_path / "state"), "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr and "yesterday" in bad.stderr
    empty = evictd("replay", str(tmp_path / "nowhere"))
    assert empty.returncode == 1 and "no recorded cycles" in empty.stderr



def test_an_export_piped_into_simulate_from_stdin_and_a_since_in_days(tmp_path: Path) -> None:
    document, scenario, settings = example(EXAMPLES[0])
    an_hour_ago = datetime.now(UTC).timestamp() - 3600
    hook = recorder(tmp_path, settings, wall=an_hour_ago)
    for cycle in cycles(scenario, start=an_hour_ago):
        hook(cycle)
    hook.close()
    expected = simulated(document)
    for stdin_name in ("-", "/dev/stdin"):
        piped = subprocess.run(
            f"{sys.executable} -m evictd record export --state-dir {tmp_path} --since 1d "
            f"| {sys.executable} -m evictd simulate {stdin_name} -o json",
            shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
        assert piped.returncode == 0, piped.stderr
        assert json.loads(piped.stdout)["steps"] == expected
    assert evictd("record", "export", "--state-dir", str(tmp_path), "--since", "1d2h").returncode == 0
    none = evictd("record", "export", "--state-dir", str(tmp_path), "--since", "30m")
    assert none.returncode == 1 and "no recorded cycles" in none.stderr and "in that time" in none.stderr


def test_replay_text_names_the_run_of_each_cycle_when_the_recording_holds_several(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    runs = ("20261122T230000Z-101", "20261122T233000Z-202")
    for number, run in enumerate(runs):
        start = START + number * 1800
        hook = FlightRecorder(str(tmp_path), settings, max_bytes=64 * MiB, max_age_s=86400.0, dry_run=False,
                              log=LogCapture(), run=run, clock=ManualClock(0.0, datetime.fromtimestamp(start, UTC)))
        for cycle in cycles(scenario, start=start):
            hook(cycle)
        hook.close()
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                         "evictionHard: {memory.available: 1Gi}\nevictionSoft: {}\n")
    text = evictd("replay", str(tmp_path), "--config", str(candidate))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    header = next(line for line in lines if "CYCLE" in line)
    assert header.split()[:2] == ["RUN", "CYCLE"]
    rows = [line.split() for line in lines[lines.index(header) + 1:] if line.split()[:1] and line.split()[0] in runs]
    assert {row[0] for row in rows} == set(runs), text.stdout
    assert {(runs[0], "4"), (runs[1], "4")} <= {(row[0], row[1]) for row in rows}, "cycle 4 of each run, told apart"
    single = tmp_path / "single"
    hook = recorder(single, settings)
    record(scenario, hook)
    hook.close()
    one = evictd("replay", str(single), "--config", str(candidate))
    assert next(line for line in one.stdout.splitlines() if "CYCLE" in line).split()[0] == "CYCLE"


def test_a_wall_clock_stepped_back_at_a_segment_rotation_is_read_in_cycle_order(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    hook = recorder(tmp_path, settings)
    recorded = list(cycles(scenario))
    half = len(recorded) // 2
    for cycle in recorded[:half]:
        hook(cycle)
    hook.close()  # a rotation; then the clock is stepped back an hour (NTP), the monotonic clock goes on
    for cycle in recorded[half:]:
        hook(replace(cycle, wall=cycle.wall - timedelta(hours=1)))
    hook.close()
    names = sorted(os.listdir(tmp_path / RECORDING_FOLDER))
    first_line = gzip.decompress((tmp_path / RECORDING_FOLDER / names[0]).read_bytes()).splitlines()[0]
    assert len(names) == 2 and json.loads(first_line)["cycle"] == half + 1, "the second segment is named first"

    records, skipped = read_recording(str(tmp_path / RECORDING_FOLDER))
    assert skipped == 0 and [r.cycle for r in records] == list(range(1, len(recorded) + 1))
    replayed = evictd("replay", str(tmp_path))
    assert replayed.returncode == 0, replayed.stderr
    assert "every decision as recorded" in replayed.stdout.splitlines()[0]
    explained = evictd("explain", "--last", "--state-dir", str(tmp_path), "--output", "json")
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["pod"] == "shop/web"


def test_segments_dated_in_the_future_age_out_once_the_clock_is_back(tmp_path: Path) -> None:
    """Written while the clock ran a year ahead: dated now when the recorder next looks, gone maxAge later."""
    _, scenario, settings = example(EXAMPLES[0])
    hook = recorder(tmp_path, settings, max_age_s=3600.0)
    record(scenario, hook)
    hook.close()
    folder = tmp_path / RECORDING_FOLDER
    ahead = START + 365 * 86400
    for path in segment_paths(str(folder)):
        os.utime(path, (ahead, ahead))
    clock = ManualClock(0.0, datetime.fromtimestamp(START + 86400, UTC))
    later = FlightRecorder(str(tmp_path), settings, max_bytes=64 * MiB, max_age_s=3600.0, dry_run=False, log=LogCapture(),
                           clock=clock)
    first = next(cycles(scenario, start=START + 86400, first_number=100))
    later(first)  # the start: what earlier runs left is looked at
    old = [p for p in segment_paths(str(folder)) if "-" in p and p.endswith(CLOSED_SUFFIX)]
    assert old, "kept: an hour has not passed since the clock was back"
    assert all(os.path.getmtime(p) == START + 86400 for p in old)
    clock.advance(2 * 3600)
    later(replace(first, number=101, wall=clock.wall()))
    later.close()  # a rotation looks again
    assert not any(os.path.exists(p) for p in old)


def test_runs_are_read_in_the_order_they_ran_whatever_the_wall_clock_said(tmp_path: Path) -> None:
    """Issue 38: a run recorded while the clock ran three years ahead came after every later run (its segments'
    names and run id begin with its wall time), so `explain --last` explained it instead of the newest eviction.
    Each run's first line carries its sequence: one more than the largest in the folder when it began."""
    _, scenario, settings = example(EXAMPLES[0])
    ahead = START + 3 * 365 * 86400
    # (Its files' times ahead too, as that clock would have stamped them; its own bounds judge them by that clock.)
    first = recorder(tmp_path, settings, wall=ahead, max_age_s=10 * 365 * 86400.0)
    for cycle in cycles(scenario, start=ahead):
        first(cycle)
    first.close()
    for path in segment_paths(str(tmp_path / RECORDING_FOLDER)):
        os.utime(path, (ahead, ahead))
    second = recorder(tmp_path, settings)  # the clock set right again
    record(scenario, second)
    second.close()
    records, skipped = read_recording(str(tmp_path / RECORDING_FOLDER))
    runs = list(dict.fromkeys(r.run for r in records))
    assert skipped == 0 and len(runs) == 2
    assert runs[0].startswith(datetime.fromtimestamp(ahead, UTC).strftime("%Y%m%d")), runs  # ran first, read first
    assert next(r.wall for r in records if r.run == runs[1]) == START + scenario.steps[0].at
    heads = [json.loads(gzip.decompress(p.read_bytes()).splitlines()[0])["seq"]
             for p in sorted((tmp_path / RECORDING_FOLDER).iterdir())]
    assert sorted(heads) == [1, 2]


def test_closed_segments_are_owner_only_whatever_the_umask_and_crash_leftovers_are_removed(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])
    folder = tmp_path / RECORDING_FOLDER
    folder.mkdir()
    leftover = folder / ".20261122T230000.000000Z-1.jsonl.gz"  # a crash while compressing
    leftover.write_bytes(b"partial")
    log = LogCapture()
    previous = os.umask(0)  # the DaemonSet's container sets none
    try:
        hook = recorder(tmp_path, settings, log=log)
        record(scenario, hook)
        hook.close()
    finally:
        os.umask(previous)
    assert not leftover.exists()
    assert ("info", "removed temporary recording files left by an interrupted write",
            {"folder": str(folder), "count": 1}) in log.lines
    paths = segment_paths(str(folder))
    assert paths and all(p.endswith(CLOSED_SUFFIX) for p in paths)
    assert {oct(os.stat(p).st_mode & 0o777) for p in paths} == {"0o600"}
    assert [name for name in os.listdir(folder) if name.startswith(".")] == []


TEXT = st.text(st.characters(blacklist_categories=("Cs",)))  # lone surrogates: see the last test below
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
@hypothesis.example(1e-05)
@hypothesis.example({"f": [2e+20, -1.5e-07], "uid": "12e4-9d39", "text": "a: 1e5, [3e-2", "nel": "\x85\u2028\x7f"})
def test_an_exported_step_reads_back_as_the_same_value(value: object) -> None:
    """`record export` writes each step as one line of flow style (render.yaml_flow): any recorded value, any
    string (controls, line separators, lone surrogates, quotes), any number (1e-05 too) reads back the same."""
    line = yaml_flow(value)
    assert "\n" not in line
    assert yaml.load("- " + line, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) == [value]


def test_a_lone_surrogate_which_yaml_cannot_hold_is_exported_as_the_replacement_character() -> None:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert yaml.load("- " + yaml_flow({"name": "a\ud800b"}), Loader=loader) == [{"name": "a\ufffdb"}]


# --- simulate --record, and the sample recording made with it ----------------------------------------------


def test_simulate_record_writes_the_recording_the_daemons_recorder_makes_of_the_same_cycles(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[0])  # 01-memory-pressure
    done = evictd("simulate", str(EXAMPLES[0]), "--record", str(tmp_path / "simulated"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == evictd("simulate", str(EXAMPLES[0])).stdout  # what simulate prints anyway
    assert [Path(p).relative_to(tmp_path / "simulated") for p in
            segment_paths(str(tmp_path / "simulated" / RECORDING_FOLDER))] == [SAMPLE_SEGMENT]
    records, skipped = read_recording(str(tmp_path / "simulated" / RECORDING_FOLDER))

    # The same cycles handed to the recorder as the daemon hands them.
    record(scenario, recorder(tmp_path / "daemon", settings))
    expected, _ = read_recording(str(tmp_path / "daemon" / RECORDING_FOLDER))
    assert skipped == 0 and len(records) == len(expected) == len(scenario.steps) == 8
    assert [r.decision for r in records] == [r.decision for r in expected]
    assert [(r.config, r.layout, r.pods, r.summary, r.after_reclaim) for r in records] == \
        [(r.config, r.layout, r.pods, r.summary, r.after_reclaim) for r in expected]
    # On the scenario's clock (wall: `at` seconds since the epoch), named by `simulate`, as a dry run's.
    assert [(r.run, r.cycle, r.wall, r.now, r.dry_run) for r in records] == [
        ("19700101T000000Z-simulate", number, step.at, step.at, True)
        for number, step in enumerate(scenario.steps, 1)]
    assert records[0].engine_state is None  # started afresh, as the scenario does
    evicted = [(r.cycle, e.namespace, e.name) for r in records for e in r.decision.evicted]
    assert evicted == [(4, "jobs", "batch-job"), (5, "shop", "web")]


def test_simulate_record_starts_from_the_scenarios_engine_state(tmp_path: Path) -> None:
    """01-memory-pressure from t=60 on, its soft grace period (met since t=10) under way in `engineState`: the
    recording's first line carries that state, so that a replay takes the same decisions (batch-job at t=40)."""
    document, full, _ = example(EXAMPLES[0])
    document["steps"] = [{**step, "at": step["at"] - 60} for step in document["steps"] if step["at"] >= 60]
    soft = next(t for t in full.config.thresholds if not t.hard)
    document["engineState"] = {
        "version": STATE_VERSION, "node": "node-1", "savedAt": START,  # the first step's wall-clock time (t=0)
        "firstObservedAt": [{"threshold": threshold_record(soft), "at": START - 50}], "thresholdsMet": [],
        "conditionLastObservedAt": {"MemoryPressure": START}, "lastObservations": {}}
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(document))
    done = evictd("simulate", str(scenario_file), "--record", str(tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    records, _ = read_recording(str(tmp_path / "state" / RECORDING_FOLDER))
    state = records[0].engine_state
    assert isinstance(state, dict) and state["node"] == "node-1" and state["savedAt"] == START
    # The recording's wall clock is the one the engine state gives the scenario.
    assert records[0].run == f"{datetime.fromtimestamp(START, UTC):%Y%m%dT%H%M%SZ}-simulate"
    assert [(r.wall - START, e.name) for r in records for e in r.decision.evicted] == [
        (40.0, "batch-job"), (50.0, "web")]
    assert replay(records).differences == ()  # replayed from the recorded state, to the same decisions


def test_the_shipped_sample_recording_is_its_scenario_recorded_byte_for_byte(tmp_path: Path) -> None:
    """Made with `evictd simulate config/examples/01-memory-pressure.yaml --record SAMPLE`: remade (in another
    process, at another time) it is the same bytes, so the sample stays what the code and the scenario make."""
    done = evictd("simulate", "config/examples/01-memory-pressure.yaml", "--record", str(tmp_path))
    assert done.returncode == 0, done.stderr
    shipped = sorted(p.relative_to(SAMPLE) for p in SAMPLE.rglob("*") if p.is_file())
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert shipped == made == [SAMPLE_SEGMENT]
    assert (SAMPLE / SAMPLE_SEGMENT).read_bytes() == (tmp_path / SAMPLE_SEGMENT).read_bytes(), \
        "regenerate: rm -r config/examples/recorded/01-memory-pressure && evictd simulate " \
        "config/examples/01-memory-pressure.yaml --record config/examples/recorded/01-memory-pressure"
    assert (SAMPLE / SAMPLE_SEGMENT).stat().st_size < 16 << 10  # kept small


def test_replay_of_the_shipped_sample(tmp_path: Path) -> None:
    done = evictd("replay", str(SAMPLE))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ("replayed 8 cycles (1 run of evictd) from 1970-01-01T00:00:00.000Z to "
                                           "1970-01-01T00:06:50.000Z: every decision as recorded")
    assert "MemoryPressure  1970-01-01T00:00:10.000Z - 1970-01-01T00:06:50.000Z" in done.stdout

    # From the kubelet's defaults with a hard threshold of 500Mi (and so no soft one): neither pod would have been
    # evicted.
    candidate = evictd("replay", str(SAMPLE), "--from-defaults", "--eviction-hard", "memory.available<500Mi",
                       "--output", "json")
    assert candidate.returncode == 0, candidate.stderr
    document = json.loads(candidate.stdout)
    assert document["cycles"] == 8 and document["identical"] is False
    evicted = [(d["cycle"], d["recorded"], d["replayed"]) for d in document["differences"] if d["what"] == "evicted"]
    assert evicted == [
        (4, ["jobs/batch-job for memory.available, grace 10s: The node was low on resource: memory. Threshold "
             "quantity: 2Gi, available: 1750Mi. Container worker was using 3Gi, request is 0, has larger consumption "
             "of memory. "], []),
        (5, ["shop/web for memory.available, grace 1s: The node was low on resource: memory. Threshold quantity: "
             "1Gi, available: 700Mi. Container nginx was using 900Mi, request is 256Mi, has larger consumption of "
             "memory. "], []),
    ]
    assert document["pressure"] == [{"condition": "MemoryPressure", "recorded": [
        {"from": "1970-01-01T00:00:10.000Z", "to": "1970-01-01T00:06:50.000Z"}], "replayed": []}]


def test_replay_flags_and_files_change_only_what_they_state_on_the_recorded_configuration(tmp_path: Path) -> None:
    # The recorded value again, as a flag or a file: nothing differs (it once started from the kubelet's defaults,
    # dropped the recorded soft threshold and reported 4 cycles decided differently).
    same = evictd("replay", str(SAMPLE), "--eviction-hard", "memory.available<1Gi")
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines()[0].endswith(": every decision as recorded"), same.stdout
    restated = tmp_path / "same.yaml"
    restated.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                        "evictionHard: {memory.available: 1Gi}\n")
    as_file = json.loads(evictd("replay", str(SAMPLE), "--config", str(restated), "-o", "json").stdout)
    assert as_file["identical"] is True and as_file["differences"] == []
    defaults = evictd("replay", str(SAMPLE), "--from-defaults", "--eviction-hard", "memory.available<1Gi")
    assert "4 cycles decided differently" in defaults.stdout.splitlines()[0], defaults.stdout

    # Only the hard threshold lowered: the soft one (2Gi, grace met) still evicts shop/web in the same cycle, with the
    # soft eviction's grace period (evictionMaxPodGracePeriod 20s) where the hard one gave 1s.
    lowered = json.loads(evictd("replay", str(SAMPLE), "--eviction-hard", "memory.available<500Mi", "-o",
                                "json").stdout)
    changed = {(d["cycle"], d["what"]): d for d in lowered["differences"]}
    assert set(changed) == {(5, "thresholdsMet"), (5, "evicted")}
    assert changed[(5, "thresholdsMet")]["replayed"] == ["memory.available<2Gi (grace met)"]
    assert changed[(5, "evicted")]["replayed"][0].startswith("shop/web for memory.available, grace 20s: ")


def test_replay_from_defaults_needs_a_candidate() -> None:
    done = evictd("replay", str(SAMPLE), "--from-defaults")
    assert done.returncode == 2 and done.stderr.startswith("evictd: --from-defaults"), done.stderr

"""The recording's model and codec (src/evictd/record/model.py): real recorded lines decode and encode back byte for
byte (lines the real recorder writes for the example scenarios, and the shipped sample recording), a line of a
newer format version is refused saying so, and a field that does not fit is named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evictd.commands.scenario_recording import record_scenario
from evictd.commands.simulate import parse_scenario
from evictd.config_files import read_documents
from evictd.core.fs_layout import FsLayout
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.core.ranking import rank_pods_with_keys
from evictd.core.signals import Signal
from evictd.core.summary import PodStats, pod_stats_lookup
from evictd.cycle.report import EvictionApiRefusal, EvictionApiUse
from evictd.record.decision import Decision, RankKeys, rank_keys, rank_keys_text
from evictd.record.line_json import ABSENT, LineError, dumps
from evictd.record.model import FORMAT_VERSION, Line, decode_line, encode_line
from evictd.record.recording import Recording, segment_paths
from evictd.record.segment_files import segment_lines
from evictd.state_dir import RECORDING_FOLDER

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.yaml"))
SAMPLE = ROOT / "config" / "examples" / "recorded" / "01-memory-pressure" / RECORDING_FOLDER


def lines_of(folder: Path) -> list[bytes]:
    problems: list[str] = []
    lines = [raw for path in segment_paths(str(folder)) for raw in segment_lines(path, problems.append)
             if raw is not None]
    assert problems == []
    return lines


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_every_line_the_recorder_writes_decodes_and_encodes_back_byte_for_byte(tmp_path: Path, example: Path) -> None:
    scenario = parse_scenario(read_documents(str(example), key="scenario")[0][0])
    record_scenario(scenario, str(tmp_path / "state"))
    lines = lines_of(tmp_path / "state" / RECORDING_FOLDER)
    assert len(lines) == len(scenario.steps)
    for raw in lines:
        assert encode_line(decode_line(raw)) == raw
    first = decode_line(lines[0])
    # A segment's first line carries the context: configuration, layout, the whole pod list, a whole Summary.
    assert first.version == FORMAT_VERSION and first.config is not None and first.layout == scenario.layout
    assert first.pods is not None and first.summary_changes is None and first.engine_state is not ABSENT


def test_the_shipped_sample_recording_reads_as_typed_lines_and_encodes_back_byte_for_byte() -> None:
    lines = lines_of(SAMPLE)
    decoded = [decode_line(raw) for raw in lines]
    assert [encode_line(line) for line in decoded] == lines
    assert [line.cycle for line in decoded] == list(range(1, len(lines) + 1))
    assert [(line.cycle, e.key, e.signal) for line in decoded for e in line.decision.evicted] == [
        (4, "jobs/batch-job", "memory.available"), (5, "shop/web", "memory.available")]
    evicting = decoded[3].decision
    entries = evicting.ranking.entries()
    assert [entry.pod for entry in entries] == evicting.ranking.pods() and entries[0].pod == "jobs/batch-job"
    assert all(isinstance(entry.keys, RankKeys) and entry.keys.usage_name == "usageAboveRequest" for entry in entries)
    assert evicting.thresholds_met[0].signal == "memory.available" and evicting.conditions == ("MemoryPressure",)


def test_a_line_of_a_newer_format_version_is_refused_saying_so(tmp_path: Path) -> None:
    raw = lines_of(SAMPLE)[0]
    newer = raw.replace(b'{"v":2,', b'{"v":3,', 1)
    with pytest.raises(LineError, match=r"format version 3 is newer than this evictd reads \(up to 2\)"):
        decode_line(newer)
    folder = tmp_path / RECORDING_FOLDER
    folder.mkdir()
    (folder / "20261123T000000.000000Z-1.jsonl").write_bytes(newer)
    problems: list[str] = []
    recording = Recording(str(folder), problem=problems.append)
    assert list(recording) == [] and recording.skipped == 1
    assert len(problems) == 1 and "format version 3 is newer than this evictd reads" in problems[0]


@pytest.mark.parametrize("use", [
    EvictionApiUse(refusals=(EvictionApiRefusal(pod="default/db-0", status=429, reason="DisruptionBudget",
                                                budget="db-pdb", message="Cannot evict pod as it would violate the "
                                                "pod's disruption budget."),
                             EvictionApiRefusal(pod="default/web", status=None, reason="Timeout", budget="",
                                                message="no answer"))),
    EvictionApiUse(),
    EvictionApiUse(bypassed="a hard threshold is met: memory.available<100Mi"),
    EvictionApiUse(asked=("default/db-0", "default/web")),
    EvictionApiUse(waiting="default/db-0", evicted="default/web"),
    EvictionApiUse(failure="default/db-0: timed out", bypassed="hard threshold memory.available met"),
])
def test_how_a_soft_eviction_used_the_eviction_api_reads_back_as_written(use: EvictionApiUse) -> None:
    line = Line(run="r", cycle=1, wall=1.0, now=1.0, decision=Decision(eviction_api=use))
    encoded = encode_line(line)
    assert decode_line(encoded).decision.eviction_api == use
    assert encode_line(decode_line(encoded)) == encoded
    bad = json.loads(encoded)
    bad["decision"]["evictionApi"] = {"refusals": [{"pod": "p", "status": "429", "reason": "", "budget": "",
                                                    "message": ""}]}
    with pytest.raises(LineError, match=r"^decision\.evictionApi\.refusals\[0\]\.status is not an integer$"):
        decode_line(json.dumps(bad))


@pytest.mark.parametrize(("path", "value", "message"), [
    (("decision", "evicted", 0, "name"), 7, "decision.evicted[0].name is not a string"),
    (("decision", "thresholdsMet", 0, "graceMet"), "yes", "decision.thresholdsMet[0].graceMet is not true or false"),
    (("decision", "reclaimResults"), {}, "decision.reclaimResults is not a list"),
    (("cycle",), -1, "cycle is not a cycle number"),
    (("layout", "dedicatedImageFs"), 1, "layout.dedicatedImageFs is not true or false"),
])
def test_a_field_that_does_not_fit_is_named(path: tuple[str | int, ...], value: object, message: str) -> None:
    line = json.loads(lines_of(SAMPLE)[3])  # cycle 4: an eviction, with the segment's context
    line["layout"] = {"dedicatedImageFs": False}
    target = line
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(LineError) as raised:
        decode_line(json.dumps(line))
    assert str(raised.value) == message


def test_a_ranked_pods_keys_are_fetched_only_when_asked_and_name_a_field_that_does_not_fit() -> None:
    line = json.loads(lines_of(SAMPLE)[3])
    line["decision"]["ranking"][1]["keys"]["priority"] = "high"
    decision = decode_line(json.dumps(line)).decision  # the ranking is not read yet: the line reads
    assert decision.ranking.pods()[1] == line["decision"]["ranking"][1]["pod"]
    with pytest.raises(LineError, match=r"^decision.ranking\[1\].keys.priority is not an integer$"):
        decision.ranking.entries()


@pytest.mark.parametrize("signal", [Signal.MEMORY_AVAILABLE, Signal.PID_AVAILABLE, Signal.NODEFS_INODES_FREE])
def test_rank_keys_written_as_text_are_the_keys_as_json(signal: Signal) -> None:
    scenario = parse_scenario(read_documents(str(EXAMPLES[0]), key="scenario")[0][0])
    step = scenario.steps[3]
    assert step.summary is not None
    # A pod requesting 1.5 bytes (its usage above request a fraction) with another's stats, and one without stats.
    fraction = pod_from_dict({"metadata": {"name": "fraction", "namespace": "default", "uid": "f"}, "spec": {
        "containers": [{"name": "c", "resources": {"requests": {"memory": "1500m"}}}]}})
    pods = [*(step.pods if step.pods is not None else scenario.pods), fraction]
    lookup = pod_stats_lookup(step.summary, pods)

    def stats_of(pod: Pod) -> PodStats | None:
        return lookup(pods[0]) if pod is fraction else None if pod is pods[1] else lookup(pod)

    _, keys = rank_pods_with_keys(signal, FsLayout(), pods, stats_of)
    documents = [rank_keys(signal, key).document() for key in keys]
    for key, document in zip(keys, documents, strict=True):
        assert json.loads(rank_keys_text(signal, key)) == document
        assert rank_keys_text(signal, key) == dumps(document)
    usage = "processes" if signal is Signal.PID_AVAILABLE else "usageAboveRequest"
    assert any(document[usage] is None for document in documents), "a pod without stats"
    if signal is Signal.MEMORY_AVAILABLE:
        assert any(isinstance(document[usage], str) and "/" in document[usage] for document in documents)

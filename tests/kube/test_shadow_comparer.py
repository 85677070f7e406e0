"""Shadow mode in the daemon (evictd.kube.shadow) and `evictd shadow-report` (evictd.commands.shadow_report).

The comparer is fed what a dry-run cycle decided (real `Eviction`s from the engine) and the node's pods as the
watch holds them (parsed from Pod documents as the kubelet leaves them after its own evictions); the record
file is real, and `evictd shadow-report` reads it as a user runs it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, summary
from clocks import ManualClock
from evictd.cli import main
from evictd.commands.simulate import parse_scenario, run_scenario
from evictd.core.engine import Eviction
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.kube.shadow import ShadowComparer
from evictd.state_dir import SHADOW_FILE
from log_capture import LogCapture

KUBELET_MESSAGE = "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "


class Node:
    """The node's pods as the watch holds them, the clocks, and a comparer recording into `folder`."""

    def __init__(self, folder: Path) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        # Monotonic 1000 s at the wall time 1_763_800_000 (epoch seconds).
        self.clock = ManualClock(1000.0, wall_at_zero=datetime.fromtimestamp(1_763_800_000.0 - 1000.0, UTC))
        self.log = LogCapture()
        self.outcomes: list[str] = []
        self.comparer = ShadowComparer(self.pods, str(folder), lambda c: self.outcomes.append(str(c.outcome)),
                                       self.log, window_s=60, clock=self.clock)

    def pods(self) -> list[Pod]:
        return [pod_from_dict(doc) for doc in self.docs.values()]

    def kubelet_evicts(self, name: str) -> None:
        """What the kubelet leaves after its own eviction: Failed, Evicted, its message."""
        self.docs[name]["status"] = {"phase": "Failed", "reason": "Evicted", "message": KUBELET_MESSAGE}

    def tick(self, seconds: float, evictions: list[Eviction] | None = None) -> list[str]:
        self.clock.advance(seconds)
        return [str(c.outcome) for c in self.comparer.after_cycle(evictions or [])]


def decided(doc: dict[str, Any]) -> Eviction:
    """The eviction a dry-run cycle decides for `doc` under a hard memory threshold."""
    scenario = parse_scenario({"config": {"evictionHard": {"memory.available": "1Gi"}}, "pods": [doc], "steps": [
        {"at": 0, "summary": summary(memory=512 * Mi, pods=[pod_stats(doc, memory=2 * Gi)])}]})
    [eviction] = run_scenario(scenario)[0].acted.evictions
    return eviction


def test_the_same_pod_evicted_by_the_kubelet_later_agrees_and_is_recorded(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    node = Node(tmp_path)
    hog = pod("hog", requests={"memory": "100Mi"})
    node.docs["hog"] = hog
    node.docs["old"] = pod("old")
    node.kubelet_evicts("old")  # before evictd started: history, never compared
    assert node.tick(0) == []

    assert node.tick(1, [decided(hog)]) == []  # held: the kubelet has not acted yet
    assert node.tick(1, [decided(hog)]) == []  # decided again: not a new decision
    node.kubelet_evicts("hog")
    assert node.tick(8) == ["agree"]
    assert node.tick(120) == []  # nothing left pending, "old" never counted
    assert node.outcomes == ["agree"]
    [(_, event, fields)] = node.log.lines
    assert event == "shadow comparison" and fields["outcome"] == "agree"
    assert fields["kubelet_later_by_s"] == 9.0

    [record] = [json.loads(line) for line in (tmp_path / SHADOW_FILE).read_text().splitlines()]
    assert record["evictd"] == {"pod": "default/hog", "uid": "uid-hog", "resource": "memory"}
    assert record["kubelet"] == record["evictd"] and record["kubeletLaterBySeconds"] == 9.0

    assert main(["shadow-report", "--state-dir", str(tmp_path), "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["comparisons"] == 1 and report["agreement"] == 1.0
    assert report["outcomes"] == {"agree": 1, "different-pod": 0, "evictd-only": 0, "kubelet-only": 0}
    assert report["disagreements"] == []


def test_disagreements_are_reported_by_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = Node(tmp_path)
    for name in ("a", "b", "c"):
        node.docs[name] = pod(name, requests={"memory": "100Mi"})
    node.tick(0)
    node.tick(1, [decided(node.docs["a"])])
    node.kubelet_evicts("b")
    assert node.tick(1) == []
    assert node.tick(61) == ["different-pod"]  # a and b: the same resource within the window
    node.tick(1, [decided(node.docs["c"])])
    assert node.tick(61) == ["evictd-only"]
    node.docs["d"] = pod("d")
    node.tick(1)
    node.kubelet_evicts("d")
    node.tick(1)
    assert node.tick(61) == ["kubelet-only"]

    assert main(["shadow-report", "--state-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "3 comparisons" in text and "agreement 0.0 %" in text
    assert "different-pod  memory" in text and "evictd: default/a  kubelet: default/b" in text
    assert "kubelet-only   memory" in text and "evictd: -  kubelet: default/d" in text


def test_shadow_report_without_records_is_a_configuration_error(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["shadow-report", "--state-dir", str(tmp_path / "nowhere")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("evictd: ") and "stateDir" in error and "nowhere" in error and error[-1] == "\n"


def test_an_unwritable_record_is_logged_once_and_the_comparison_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    node = Node(blocker)  # the record folder is a file: every write fails
    for name in ("a", "b"):
        node.docs[name] = pod(name)
    node.tick(0)
    for name in ("a", "b"):
        node.kubelet_evicts(name)
        assert node.tick(1) == []
        assert node.tick(61) == ["kubelet-only"]
    assert node.log.events().count("shadow comparison not recorded") == 1
    assert node.outcomes == ["kubelet-only", "kubelet-only"]

"""The mode of each cycle as the daemon says it (src/evictd/run/mode_switch.py): the log lines, the Events handed
to the label watch, evictd_mode / evictd_mode_source / evictd_mode_label_invalid / evictd_mode_file_invalid and,
while acting, the races with the kubelet (evictd_handover_conflict and one warning per racing signal each time
evictd starts acting). The node-local mode file is a real file, read by its real reader."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from evictd.adapters.mode_file import read_mode_file, remove_mode_file, write_mode_file
from evictd.core.handover import SignalVerdict, judge_handover, racing_signals
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.run_mode import RunMode
from evictd.observe.metrics import Metrics
from evictd.run.mode_switch import FILE_INVALID_REASON, LABEL_INVALID_REASON, MODE_CHANGED_REASON, ModeSwitch
from log_capture import LogCapture


class Node:
    """The Node's label as a watch last read it, the Lease's standby reason, and the Events announced."""

    def __init__(self, label: str | None = None) -> None:
        self.value = label
        self.standing_by: str | None = None
        self.events: list[tuple[str, str, str]] = []

    def label(self) -> str | None:
        return self.value

    def announce(self, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))

    def standby_reason(self) -> str | None:
        return self.standing_by


def racing_verdicts() -> list[SignalVerdict]:
    """memory.available (and its allocatable copy): the kubelet at evictd's threshold; nodefs.available: the kubelet
    below (a backstop)."""
    ours = EvictionSettings(hard={"memory.available": "500Mi", "nodefs.available": "10%"}).thresholds()
    theirs = EvictionSettings(hard={"memory.available": "500Mi", "nodefs.available": "5%"}).thresholds()
    handover = judge_handover(ours, theirs, evictd_dry_run=True)
    assert {str(s) for s in racing_signals(handover)} == RACING
    return [v for v in handover.verdicts if v.signal in racing_signals(handover)]


RACING = {"memory.available", "allocatableMemory.available"}


def gauge(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def switch(node: Node, configured_dry_run: bool = True, *, pinned: bool = False, api: bool = True,
           mode_file: Path | None = None) -> tuple[ModeSwitch, Metrics, LogCapture]:
    metrics, log = Metrics(), LogCapture()
    local = {} if mode_file is None else {"local": partial(read_mode_file, str(mode_file)), "local_path": str(mode_file)}
    mode = ModeSwitch(configured_dry_run, metrics=metrics, log=log, racing=racing_verdicts(), pinned=pinned, api=api,
                      **local)
    mode.attach(node, node)
    return mode, metrics, log


def test_a_canary_goes_acting_and_back_by_its_label() -> None:
    node = Node()
    mode, metrics, log = switch(node)
    assert mode.refresh().mode is RunMode.DRY_RUN and mode.reports_only() and mode.dry_run()
    assert [e for e, _ in log.at("info")] == ["mode"] and not node.events
    assert gauge(metrics, "evictd_mode", mode="dry-run") == 1 and gauge(metrics, "evictd_mode", mode="acting") == 0
    assert gauge(metrics, "evictd_mode_source", source="config") == 1
    assert gauge(metrics, "evictd_handover_conflict", signal="memory.available") == 0, "dry-run: no race"
    assert not log.at("warning")

    node.value = "acting"
    assert mode.reports_only(), "the mode of a cycle holds until the next refresh"
    assert mode.refresh().mode is RunMode.ACTING and not mode.reports_only()
    changed = [f for e, f in log.at("info") if e == "mode changed"]
    assert changed == [{"previous": "dry-run", "mode": "acting", "source": "node-label", "label": "acting",
                        "configured_dry_run": True}]
    [(event_type, reason, message)] = node.events
    assert (event_type, reason) == ("Normal", MODE_CHANGED_REASON)
    assert message == ("evictd on this node is now acting: it evicts pods under node pressure (node label "
                       "evictd.io/mode=acting; configured dryRun: true)")
    assert gauge(metrics, "evictd_mode", mode="acting") == 1 and gauge(metrics, "evictd_mode", mode="dry-run") == 0
    assert gauge(metrics, "evictd_mode_source", source="node-label") == 1
    # Acting now: the race with the kubelet is said loudly and exported.
    races = log.at("warning")
    assert {e for e, _ in races} == {"kubelet races evictd"} and {f["signal"] for _, f in races} == RACING
    assert all("fix: lower the kubelet's threshold" in f["detail"] for _, f in races)
    assert gauge(metrics, "evictd_handover_conflict", signal="memory.available") == 1
    assert gauge(metrics, "evictd_handover_conflict", signal="nodefs.available") == 0

    mode.refresh()  # still acting: nothing said again
    assert len(node.events) == 1 and len(log.at("warning")) == len(RACING)

    node.value = None  # the label removed: the configured dryRun again
    assert mode.refresh().mode is RunMode.DRY_RUN
    assert node.events[-1][1] == MODE_CHANGED_REASON and "now in dry-run" in node.events[-1][2]
    assert "configured dryRun: true" in node.events[-1][2]
    assert gauge(metrics, "evictd_handover_conflict", signal="memory.available") == 0


def test_a_bad_label_keeps_the_configured_dry_run_and_is_said_once() -> None:
    node = Node("Acting")
    mode, metrics, log = switch(node)
    for _ in range(3):
        assert mode.refresh().mode is RunMode.DRY_RUN
    [(_, fields)] = [(e, f) for e, f in log.at("warning") if e.startswith("node label")]
    assert fields["value"] == "Acting" and fields["accepted"] == "dry-run, acting"
    assert [(t, r) for t, r, _ in node.events] == [("Warning", LABEL_INVALID_REASON)]
    assert gauge(metrics, "evictd_mode_label_invalid") == 1
    assert gauge(metrics, "evictd_mode_source", source="config") == 1
    node.value = "acting"
    assert mode.refresh().mode is RunMode.ACTING
    assert gauge(metrics, "evictd_mode_label_invalid") == 0


def test_standing_by_writes_no_event_and_acting_again_warns_of_the_race_again() -> None:
    node = Node()
    mode, metrics, log = switch(node, configured_dry_run=False)
    assert mode.refresh().mode is RunMode.ACTING
    assert len([e for e, _ in log.at("warning") if e == "kubelet races evictd"]) == len(RACING), "said at start"
    node.standing_by = "another evictd holds the node Lease"
    node.value = "dry-run"
    assert mode.refresh().mode is RunMode.STANDBY and mode.reports_only()
    assert gauge(metrics, "evictd_mode", mode="standby") == 1
    assert not node.events, "a standby writes nothing"
    node.standing_by = None
    node.value = None
    assert mode.refresh().mode is RunMode.ACTING
    assert not node.events, "acting before and after: nothing to tell the Node"
    assert len([e for e, _ in log.at("warning") if e == "kubelet races evictd"]) == 2 * len(RACING)


def test_command_line_dry_run_is_not_overridden_and_no_api_never_races() -> None:
    node = Node("acting")
    mode, _, _ = switch(node, pinned=True)
    assert mode.refresh().mode is RunMode.DRY_RUN and mode.reports_only()
    offline, metrics, log = switch(Node(), configured_dry_run=False, api=False)
    assert offline.refresh().mode is RunMode.ACTING and offline.reports_only(), "no API: evictions reported only"
    assert not log.at("warning") and gauge(metrics, "evictd_handover_conflict", signal="memory.available") == 0


def test_the_node_local_file_rolls_a_label_acting_node_back_and_lets_go(tmp_path: Path) -> None:
    """The API cut off: the label stays `acting` as last read; the file alone takes the node to dry-run and back."""
    mode_file = tmp_path / "mode"
    node = Node("acting")
    mode, metrics, log = switch(node, mode_file=mode_file)
    assert mode.refresh().mode is RunMode.ACTING
    assert "mode_file" not in log.at("info")[0][1], "no file: the start line is as it was"
    assert gauge(metrics, "evictd_handover_conflict", signal="memory.available") == 1

    told = len(node.events)  # the start said "now acting": the configured dryRun is true
    write_mode_file(str(mode_file), "dry-run")
    assert mode.acting(), "the mode of a cycle holds until the next refresh"
    assert mode.refresh().mode is RunMode.DRY_RUN and mode.reports_only() and mode.dry_run()
    [changed] = [f for e, f in log.at("info") if e == "mode changed"]
    assert changed == {"previous": "acting", "mode": "dry-run", "source": "node-file", "label": "acting",
                       "configured_dry_run": True, "mode_file": str(mode_file)}
    [(event_type, reason, message)] = node.events[told:]
    assert (event_type, reason) == ("Normal", MODE_CHANGED_REASON)
    assert message == (f"evictd on this node is now in dry-run: it decides and reports, and evicts nothing (node-local "
                       f"file {mode_file}; evictd mode clear hands the mode back to the label and dryRun)")
    assert gauge(metrics, "evictd_mode", mode="dry-run") == 1 and gauge(metrics, "evictd_mode", mode="acting") == 0
    assert gauge(metrics, "evictd_mode_source", source="node-file") == 1
    assert gauge(metrics, "evictd_mode_source", source="node-label") == 0
    assert gauge(metrics, "evictd_mode_file_invalid") == 0
    assert gauge(metrics, "evictd_handover_conflict", signal="memory.available") == 0, "a dry-run races nobody"
    node.value = "dry-run"  # the label follows meanwhile: the file still says what set the mode
    assert mode.refresh().source.value == "node-file" and len(node.events) == told + 1

    node.value = "acting"
    assert remove_mode_file(str(mode_file))
    assert mode.refresh().mode is RunMode.ACTING
    assert [f["source"] for e, f in log.at("info") if e == "mode changed"] == ["node-file", "node-label"]
    assert "mode_file" not in [f for e, f in log.at("info") if e == "mode changed"][-1]
    assert node.events[-1][1] == MODE_CHANGED_REASON and "now acting" in node.events[-1][2]
    assert gauge(metrics, "evictd_mode_source", source="node-label") == 1
    races = [f["signal"] for e, f in log.at("warning") if e == "kubelet races evictd"]
    assert sorted(races) == sorted([*RACING, *RACING]), "acting again: the races said again"


def test_a_bad_mode_file_holds_dry_run_and_is_said_once(tmp_path: Path) -> None:
    mode_file = tmp_path / "mode"
    mode_file.write_text("acting\n")  # by hand: the file can never make evictd act
    node = Node("acting")
    mode, metrics, log = switch(node, configured_dry_run=False, mode_file=mode_file)
    for _ in range(3):
        assert mode.refresh().mode is RunMode.DRY_RUN
    [fields] = [f for e, f in log.at("warning") if e.startswith("node-local mode file")]
    assert fields == {"path": str(mode_file), "value": "acting", "problem": None, "accepted": "dry-run"}
    [(event_type, _, message)] = [e for e in node.events if e[1] == FILE_INVALID_REASON]
    assert event_type == "Warning"
    assert message == (f"node-local mode file {mode_file} holds 'acting' (accepted: dry-run); evictd holds this node "
                       "in dry-run until the file is corrected or removed (evictd mode clear)")
    assert gauge(metrics, "evictd_mode_file_invalid") == 1
    assert gauge(metrics, "evictd_mode_source", source="node-file") == 1

    mode_file.unlink()
    mode_file.mkdir()  # a folder in its place cannot be read: still dry-run, said with the problem
    assert mode.refresh().mode is RunMode.DRY_RUN
    bad = [f for e, f in log.at("warning") if e.startswith("node-local mode file")]
    assert len(bad) == 2 and bad[-1]["problem"] == "is a directory" and bad[-1]["value"] is None
    mode_file.rmdir()
    write_mode_file(str(mode_file), "dry-run")
    assert mode.refresh().mode is RunMode.DRY_RUN
    assert gauge(metrics, "evictd_mode_file_invalid") == 0
    assert len([e for e in node.events if e[1] == FILE_INVALID_REASON]) == 2

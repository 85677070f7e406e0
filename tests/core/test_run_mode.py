"""The mode of a cycle (src/evictd/core/run_mode.py): the configured dryRun, the Node's evictd.io/mode label, the
node-local mode file, the node Lease and --dry-run, as tables; a label value evictd does not accept never makes it
act, and a mode file, whatever it holds, always holds the node in dry-run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evictd.core.run_mode import ModeFile, ModeSource, RunMode, decide_mode

DRY, ACT, STANDBY = RunMode.DRY_RUN, RunMode.ACTING, RunMode.STANDBY
CONFIG, LABEL, FILE, CLI = ModeSource.CONFIG, ModeSource.NODE_LABEL, ModeSource.NODE_FILE, ModeSource.COMMAND_LINE
HELD = ModeFile("dry-run")


@pytest.mark.parametrize(("configured_dry_run", "label", "standby", "pinned", "mode", "source", "bad"), [
    # No label (or not read yet): the configuration holds.
    pytest.param(True, None, False, False, DRY, CONFIG, None, id="dry-run-config-no-label"),
    pytest.param(False, None, False, False, ACT, CONFIG, None, id="acting-config-no-label"),
    # The label overrides the configuration, either way.
    pytest.param(True, "acting", False, False, ACT, LABEL, None, id="canary-label-acting-over-dry-run"),
    pytest.param(False, "dry-run", False, False, DRY, LABEL, None, id="rollback-label-dry-run-over-acting"),
    pytest.param(True, "dry-run", False, False, DRY, LABEL, None, id="label-agrees-dry-run"),
    pytest.param(False, "acting", False, False, ACT, LABEL, None, id="label-agrees-acting"),
    # A value not accepted: the configuration holds (fail safe), the value is reported.
    pytest.param(True, "Acting", False, False, DRY, CONFIG, "Acting", id="bad-label-case-keeps-dry-run"),
    pytest.param(True, "true", False, False, DRY, CONFIG, "true", id="bad-label-true-keeps-dry-run"),
    pytest.param(True, "", False, False, DRY, CONFIG, "", id="empty-label-keeps-dry-run"),
    pytest.param(False, "off", False, False, ACT, CONFIG, "off", id="bad-label-keeps-acting-config"),
    # Another evictd holds the node: standby, whatever else says.
    pytest.param(False, None, True, False, STANDBY, CONFIG, None, id="standby-over-acting-config"),
    pytest.param(True, "acting", True, False, STANDBY, LABEL, None, id="standby-over-acting-label"),
    pytest.param(True, "bogus", True, False, STANDBY, CONFIG, "bogus", id="standby-with-bad-label"),
    # --dry-run on the command line: no label makes it act.
    pytest.param(True, "acting", False, True, DRY, CLI, None, id="command-line-dry-run-over-label"),
    pytest.param(True, None, False, True, DRY, CLI, None, id="command-line-dry-run"),
    pytest.param(True, "acting", True, True, STANDBY, CLI, None, id="command-line-dry-run-standing-by"),
])
def test_the_mode(configured_dry_run: bool, label: str | None, standby: bool, pinned: bool, mode: RunMode,
                  source: ModeSource, bad: str | None) -> None:
    decision = decide_mode(configured_dry_run, label, standby=standby, pinned=pinned)
    assert (decision.mode, decision.source, decision.bad_label) == (mode, source, bad)
    assert decision.acting is (mode is ACT)


@pytest.mark.parametrize("label", [None, "", "Acting", "ACTING", "acting ", "1", "true", "enabled", "dry-run "])
def test_only_the_exact_label_acting_overrides_a_configured_dry_run(label: str | None) -> None:
    assert decide_mode(True, label, standby=False).mode is DRY
    assert decide_mode(True, "acting", standby=False).mode is ACT


@pytest.mark.parametrize(("configured_dry_run", "label", "local", "standby", "pinned", "mode", "source", "bad_file"), [
    # No file: as before, the label and the configuration decide.
    pytest.param(False, "acting", None, False, False, ACT, LABEL, None, id="no-file-label-acting"),
    # The rollback that needs no API: the file wins over a label acting (the last value read in an outage) ...
    pytest.param(True, "acting", HELD, False, False, DRY, FILE, None, id="file-over-label-acting"),
    # ... and over a configured dryRun: false, with or without a label.
    pytest.param(False, None, HELD, False, False, DRY, FILE, None, id="file-over-acting-config"),
    pytest.param(False, "dry-run", HELD, False, False, DRY, FILE, None, id="file-and-label-agree"),
    pytest.param(False, "Acting", HELD, False, False, DRY, FILE, None, id="file-over-bad-label"),
    # Anything else in the file, or a file that cannot be read: still dry-run (a file there is a request to stop
    # acting), and reported.
    pytest.param(False, "acting", ModeFile("acting"), False, False, DRY, FILE, ModeFile("acting"),
                 id="file-acting-never-acts"),
    pytest.param(False, None, ModeFile("dryrun"), False, False, DRY, FILE, ModeFile("dryrun"), id="file-typo-holds"),
    pytest.param(False, None, ModeFile(""), False, False, DRY, FILE, ModeFile(""), id="empty-file-holds"),
    pytest.param(False, "acting", ModeFile(problem="cannot be opened: Permission denied"), False, False, DRY, FILE,
                 ModeFile(problem="cannot be opened: Permission denied"), id="unreadable-file-holds"),
    pytest.param(False, None, ModeFile(problem="is a directory"), False, False, DRY, FILE,
                 ModeFile(problem="is a directory"), id="folder-in-its-place-holds"),
    # --dry-run on the command line stays first; another evictd holding the node: standby.
    pytest.param(False, "acting", HELD, False, True, DRY, CLI, None, id="command-line-over-file"),
    pytest.param(False, "acting", ModeFile("x"), False, True, DRY, CLI, ModeFile("x"), id="command-line-bad-file"),
    pytest.param(False, "acting", HELD, True, False, STANDBY, FILE, None, id="standby-with-file"),
])
def test_the_mode_with_the_node_local_file(configured_dry_run: bool, label: str | None, local: ModeFile | None,
                                           standby: bool, pinned: bool, mode: RunMode, source: ModeSource,
                                           bad_file: ModeFile | None) -> None:
    decision = decide_mode(configured_dry_run, label, standby=standby, pinned=pinned, local=local)
    assert (decision.mode, decision.source, decision.bad_file) == (mode, source, bad_file)
    if local is not None:
        assert decision.dry_run and not decision.acting


@given(configured_dry_run=st.booleans(), label=st.none() | st.sampled_from(["acting", "dry-run", ""]) | st.text(),
       text=st.sampled_from(["dry-run", "acting", ""]) | st.text(), problem=st.none() | st.text(min_size=1),
       standby=st.booleans(), pinned=st.booleans())
def test_no_mode_file_ever_makes_evictd_act(configured_dry_run: bool, label: str | None, text: str,
                                            problem: str | None, standby: bool, pinned: bool) -> None:
    local = ModeFile(text, problem)
    decision = decide_mode(configured_dry_run, label, standby=standby, pinned=pinned, local=local)
    assert decision.dry_run and not decision.acting
    assert decision.source is (CLI if pinned else FILE)
    assert (decision.bad_file is None) is (problem is None and text == "dry-run")

"""The mode of a cycle (src/evictd/core/run_mode.py): the configured dryRun, the Node's evictd.io/mode label, the
node Lease and --dry-run, as a table; a label value evictd does not accept never makes it act."""

from __future__ import annotations

import pytest

from evictd.core.run_mode import ModeSource, RunMode, decide_mode

DRY, ACT, STANDBY = RunMode.DRY_RUN, RunMode.ACTING, RunMode.STANDBY
CONFIG, LABEL, CLI = ModeSource.CONFIG, ModeSource.NODE_LABEL, ModeSource.COMMAND_LINE


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

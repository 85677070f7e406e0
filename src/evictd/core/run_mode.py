"""Whether evictd acts on this node now: dry-run, acting, or standing by, and what decided it.

The Node label `evictd.io/mode` (`dry-run`, `acting`) overrides the configured `dryRun` for one node. In order: the
Lease held by another evictd: STANDBY; `--dry-run` given: DRY_RUN; a valid label: its mode; absent or unread: the
configured `dryRun`; any other value: the configured `dryRun`, the value returned as `bad_label` (a mistyped label
never makes evictd act). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# The Node label that sets the mode of the evictd on that node.
MODE_LABEL = "evictd.io/mode"


class RunMode(StrEnum):
    DRY_RUN = "dry-run"  # decides and reports; evicts, reclaims and writes nothing to the node
    ACTING = "acting"
    STANDBY = "standby"  # another evictd holds the node's Lease: no cycle runs


class ModeSource(StrEnum):
    CONFIG = "config"  # the configured dryRun (no label, a label not read yet, or a label value not accepted)
    NODE_LABEL = "node-label"
    COMMAND_LINE = "command-line"  # `evictd run --dry-run`


# The label values accepted, and whether each means dry-run.
LABEL_TO_DRY_RUN = {str(RunMode.DRY_RUN): True, str(RunMode.ACTING): False}


@dataclass(frozen=True, slots=True)
class ModeDecision:
    """The mode of this cycle, what decided it (`source`), whether evictd would be in dry-run once it holds the
    Lease (`dry_run`), and the label's value when evictd does not accept it (`bad_label`; None: absent or accepted)."""

    mode: RunMode
    source: ModeSource
    dry_run: bool
    bad_label: str | None = None

    @property
    def acting(self) -> bool:
        return self.mode is RunMode.ACTING


def decide_mode(configured_dry_run: bool, label: str | None, *, standby: bool, pinned: bool = False) -> ModeDecision:
    """The mode for the configured `dryRun`, the Node's `evictd.io/mode` value (`label`; None: absent or unread),
    whether another evictd holds the node (`standby`) and whether `--dry-run` was given (`pinned`)."""
    bad = label if label is not None and label not in LABEL_TO_DRY_RUN else None
    if pinned:
        source, dry_run = ModeSource.COMMAND_LINE, True
    elif label is not None and bad is None:
        source, dry_run = ModeSource.NODE_LABEL, LABEL_TO_DRY_RUN[label]
    else:
        source, dry_run = ModeSource.CONFIG, configured_dry_run
    mode = RunMode.STANDBY if standby else RunMode.DRY_RUN if dry_run else RunMode.ACTING
    return ModeDecision(mode, source, dry_run, bad)

"""Whether evictd acts on this node now: dry-run, acting, or standing by, and what decided it.

Two node-level switches override the configured `dryRun`: the Node label `evictd.io/mode` (`dry-run`, `acting`),
set through the API, and the node-local mode file (`<stateDir>/mode`, `evictd mode dry-run`), set on the node and
read without the API. In order: the Lease held by another evictd: STANDBY; `--dry-run` given: DRY_RUN; a mode file
present: DRY_RUN, whatever it holds (`dry-run` is accepted; anything else, or a file that cannot be read, is
returned as `bad_file`); a valid label: its mode; absent or unread: the configured `dryRun`; any other label value:
the configured `dryRun`, the value returned as `bad_label`. Neither a mistyped label nor any mode file makes evictd
act: the file can only hold a node in dry-run (a rollback that needs no API), never override a rollback. Pure.
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
    NODE_FILE = "node-file"  # the node-local mode file in the stateDir (`evictd mode dry-run`)
    COMMAND_LINE = "command-line"  # `evictd run --dry-run`


# The label values accepted, and whether each means dry-run.
LABEL_TO_DRY_RUN = {str(RunMode.DRY_RUN): True, str(RunMode.ACTING): False}
# What the mode file may hold (surrounding whitespace aside): it only ever holds a node in dry-run.
MODE_FILE_VALUES = (str(RunMode.DRY_RUN),)


@dataclass(frozen=True, slots=True)
class ModeFile:
    """The node-local mode file as read: its text without surrounding whitespace, or why it could not be read
    (`problem`: "is a directory", "cannot be opened: Permission denied", ...)."""

    text: str = ""
    problem: str | None = None

    @property
    def accepted(self) -> bool:
        return self.problem is None and self.text in MODE_FILE_VALUES


@dataclass(frozen=True, slots=True)
class ModeDecision:
    """The mode of this cycle, what decided it (`source`), whether evictd would be in dry-run once it holds the
    Lease (`dry_run`), the label's value when evictd does not accept it (`bad_label`; None: absent or accepted), and
    the mode file when it holds something else than `dry-run` or cannot be read (`bad_file`; None: absent or
    accepted)."""

    mode: RunMode
    source: ModeSource
    dry_run: bool
    bad_label: str | None = None
    bad_file: ModeFile | None = None

    @property
    def acting(self) -> bool:
        return self.mode is RunMode.ACTING


def decide_mode(configured_dry_run: bool, label: str | None, *, standby: bool, pinned: bool = False,
                local: ModeFile | None = None) -> ModeDecision:
    """The mode for the configured `dryRun`, the Node's `evictd.io/mode` value (`label`; None: absent or unread),
    whether another evictd holds the node (`standby`), whether `--dry-run` was given (`pinned`) and the node-local
    mode file (`local`; None: there is none)."""
    bad = label if label is not None and label not in LABEL_TO_DRY_RUN else None
    bad_file = local if local is not None and not local.accepted else None
    if pinned:
        source, dry_run = ModeSource.COMMAND_LINE, True
    elif local is not None:
        source, dry_run = ModeSource.NODE_FILE, True
    elif label is not None and bad is None:
        source, dry_run = ModeSource.NODE_LABEL, LABEL_TO_DRY_RUN[label]
    else:
        source, dry_run = ModeSource.CONFIG, configured_dry_run
    mode = RunMode.STANDBY if standby else RunMode.DRY_RUN if dry_run else RunMode.ACTING
    return ModeDecision(mode, source, dry_run, bad, bad_file)

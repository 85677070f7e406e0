"""The mode of each cycle (dry-run, acting, standby: `evictd.core.run_mode`), decided at its start and said.

`refresh` decides before each cycle from `dryRun`, `--dry-run`, the node-local mode file (read then: it needs no
API), the Node's `evictd.io/mode` label as last read and the node Lease; parts ask `reports_only`/`acting`, so a mode
holds for a whole cycle. Said: the first mode and each change in the log (with what set it), `EvictdModeChanged`
Events between dry-run and acting; a rejected label as a warning, `EvictdModeLabelInvalid` and
`evictd_mode_label_invalid`; a mode file not accepted as a warning, `EvictdModeFileInvalid` and
`evictd_mode_file_invalid`; `evictd_mode{mode}`, `evictd_mode_source{source}`; on starting to act with an API, one
`kubelet races evictd` warning per signal where the kubelet's threshold is at or above evictd's hard one, and
`evictd_handover_conflict{signal}`. Without an API evictions are only reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from evictd.core.handover import KUBELET_SIGNALS, SignalVerdict
from evictd.core.run_mode import (
    LABEL_TO_DRY_RUN,
    MODE_FILE_VALUES,
    MODE_LABEL,
    ModeDecision,
    ModeFile,
    ModeSource,
    RunMode,
    decide_mode,
)
from evictd.core.signals import Signal
from evictd.cycle.render import verdict_fields
from evictd.log import Log
from evictd.observe.metrics import Metrics

MODE_CHANGED_REASON = "EvictdModeChanged"
LABEL_INVALID_REASON = "EvictdModeLabelInvalid"
FILE_INVALID_REASON = "EvictdModeFileInvalid"
# An Event's type and reason, and its message: what the loop hands the label watch to write.
Announce = Callable[[str, str, str], None]


class LabelWatch(Protocol):
    """The Node's label as last read, and the Events' writer (`evictd.kube.node_mode.NodeLabelWatch`)."""

    def label(self) -> str | None: ...

    def announce(self, event_type: str, reason: str, message: str) -> None: ...


class Lease(Protocol):
    """Why evictd must not act now (`evictd.kube.node_lease.NodeLease`): None while it holds the node."""

    def standby_reason(self) -> str | None: ...


def _no_label() -> str | None:
    return None


def _not_standing_by() -> str | None:
    return None


def _no_file() -> ModeFile | None:
    return None


class ModeSwitch:
    """Decides and says the mode of each cycle (see the module's description)."""

    def __init__(self, configured_dry_run: bool, *, metrics: Metrics, log: Log, pinned: bool = False,
                 api: bool = True, label: Callable[[], str | None] = _no_label,
                 standby: Callable[[], str | None] = _not_standing_by, announce: Announce | None = None,
                 racing: Sequence[SignalVerdict] = (), local: Callable[[], ModeFile | None] = _no_file,
                 local_path: str = "") -> None:
        """`local` reads the node-local mode file at `local_path` (`evictd.adapters.mode_file.read_mode_file`)."""
        self._configured = configured_dry_run
        self._local = local
        self._local_path = local_path
        self._file: ModeFile | None = None  # the mode file as the last refresh read it
        self._pinned = pinned
        self._api = api
        self._label = label
        self._standby = standby
        self._announce = announce
        self._metrics = metrics
        self._log = log
        self._racing = tuple(racing)
        self._signals: tuple[Signal, ...] = tuple(dict.fromkeys((*KUBELET_SIGNALS, *(v.signal for v in racing))))
        self._decision: ModeDecision | None = None
        self._announced_dry_run = configured_dry_run or pinned  # what the Node was last told (or the start's)
        self._bad_label: str | None = None
        self._bad_file: ModeFile | None = None
        self._exported: tuple[object, ...] | None = None  # what the mode gauges last said

    def attach(self, label_watch: LabelWatch | None, lease: Lease | None) -> None:
        """Follow the Node's label as `label_watch` last read it, and stand by while `lease` says so; the mode
        Events are written by `label_watch` (built after this switch: the cluster's parts ask it)."""
        if label_watch is not None:
            self._label = label_watch.label
            self._announce = label_watch.announce
        if lease is not None:
            self._standby = lease.standby_reason

    @property
    def decision(self) -> ModeDecision:
        """The mode of this cycle (before the first refresh: what it would decide now, not said)."""
        if self._decision is not None:
            return self._decision
        return decide_mode(self._configured, self._label(), standby=self._standby() is not None, pinned=self._pinned,
                           local=self._local())

    def acting(self) -> bool:
        """Whether this cycle acts: evicts, reclaims, writes the node (never without an API for evictions)."""
        return self.decision.acting

    def dry_run(self) -> bool:
        """Whether this cycle is a dry-run (or a standby): nothing on the node is acted on."""
        return not self.decision.acting

    def reports_only(self) -> bool:
        """Whether this cycle's evictions are decided and reported only: dry-run, standby, or no API."""
        return not self.decision.acting or not self._api

    def refresh(self) -> ModeDecision:
        """Decide the mode of the next cycle, say what changed, export it; return it."""
        before = self._decision
        self._file = self._local()
        decision = decide_mode(self._configured, self._label(), standby=self._standby() is not None,
                               pinned=self._pinned, local=self._file)
        self._decision = decision
        self._say(before, decision)
        racing = frozenset(v.signal for v in self._racing) if not self.reports_only() else frozenset()
        invalid = (decision.bad_label is not None, decision.bad_file is not None)
        exported = (decision.mode, decision.source, invalid, racing)
        if exported != self._exported:  # the gauges hold their values: set them only when one changes
            self._exported = exported
            self._metrics.record_mode(decision.mode, decision.source, *invalid)
            self._metrics.record_handover_conflicts(self._signals, racing)
        return decision

    def _say(self, before: ModeDecision | None, now: ModeDecision) -> None:
        fields: dict[str, object] = {"mode": str(now.mode), "source": str(now.source), "label": self._label(),
                                     "configured_dry_run": self._configured}
        if self._file is not None:  # said only while there is one: a node without it logs as before
            fields["mode_file"] = self._local_path
        if before is None:
            self._log.info("mode", **fields)
        elif (before.mode, before.source) != (now.mode, now.source):
            self._log.info("mode changed", previous=str(before.mode), **fields)
        if now.bad_label != self._bad_label:
            self._bad_label = now.bad_label
            if now.bad_label is not None:
                accepted = ", ".join(LABEL_TO_DRY_RUN)
                self._log.warning("node label value not accepted: the configured dryRun holds", label=MODE_LABEL,
                                  value=now.bad_label, accepted=accepted, configured_dry_run=self._configured)
                self._tell("Warning", LABEL_INVALID_REASON,
                           f"label {MODE_LABEL}={now.bad_label!r} not accepted (accepted: {accepted}); evictd keeps "
                           f"its configured dryRun: {str(self._configured).lower()}", now)
        if now.bad_file != self._bad_file:
            self._bad_file = now.bad_file
            if now.bad_file is not None:
                self._say_bad_file(now.bad_file, now)
        if now.mode is not RunMode.STANDBY and now.dry_run != self._announced_dry_run:
            self._announced_dry_run = now.dry_run
            what = ("now in dry-run: it decides and reports, and evicts nothing" if now.dry_run
                    else "now acting: it evicts pods under node pressure")
            self._tell("Normal", MODE_CHANGED_REASON,
                       f"evictd on this node is {what} ({_why(now, self._configured, self._local_path)})", now)
        if now.acting and self._api and (before is None or not before.acting):
            for verdict in self._racing:
                self._log.warning("kubelet races evictd", **verdict_fields(verdict))

    def _say_bad_file(self, bad: ModeFile, now: ModeDecision) -> None:
        accepted = ", ".join(MODE_FILE_VALUES)
        what = f"holds {bad.text!r}" if bad.problem is None else bad.problem
        self._log.warning("node-local mode file not accepted: evictd holds this node in dry-run", path=self._local_path,
                          value=bad.text if bad.problem is None else None, problem=bad.problem, accepted=accepted)
        self._tell("Warning", FILE_INVALID_REASON,
                   f"node-local mode file {self._local_path} {what} (accepted: {accepted}); evictd holds this node in "
                   "dry-run until the file is corrected or removed (evictd mode clear)", now)

    def _tell(self, event_type: str, reason: str, message: str, now: ModeDecision) -> None:
        if self._announce is not None and now.mode is not RunMode.STANDBY:
            self._announce(event_type, reason, message)


def _why(decision: ModeDecision, configured_dry_run: bool, local_path: str) -> str:
    if decision.source is ModeSource.NODE_FILE:
        return f"node-local file {local_path}; evictd mode clear hands the mode back to the label and dryRun"
    if decision.source is ModeSource.NODE_LABEL:
        return f"node label {MODE_LABEL}={decision.mode}; configured dryRun: {str(configured_dry_run).lower()}"
    if decision.source is ModeSource.COMMAND_LINE:
        return "--dry-run on the command line"
    return f"configured dryRun: {str(configured_dry_run).lower()}"

"""`evictd explain` of an eviction the flight recording does not hold: what the eviction journal knows of it.

The run may not have recorded, or its segment rotated out. The journal (`<stateDir>/evictions.json`) keeps each API
eviction until ten minutes after its last API step: pod, signal, message, grace period, decision id, API progress.
That is what this explains, saying that the ranking, first-met times and reclaim are in the recording alone. An
entry is in the recording when its `evictd.io/decision` names a recorded cycle. Nothing is journaled in dry-run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evictd.commands.replay import wall_text
from evictd.core.errors import EvictdError, SampleError
from evictd.cycle.ids import decision_id
from evictd.cycle.render import JsonObject, printable
from evictd.kube.evictor import DECISION_ANNOTATION
from evictd.kube.journal import ApiStep, JournalEntry, read_journal
from evictd.state_dir import StateDir

if TYPE_CHECKING:  # `explain` imports this module
    from evictd.commands.explain_cycle import RecordHead

NOT_KNOWN = ("the ranked table, the thresholds' first-met times and grace timing, and what node-level reclaim ran "
             "and freed are not available: the recording does not hold that cycle")
# The API steps as a person reads them, in the order they are made.
STEP_TEXT = {ApiStep.CONDITION: "condition written", ApiStep.DELETION: "pod deleted", ApiStep.EVENT: "event written"}


def journal_entries(state_dir: str) -> tuple[list[JournalEntry], str | None]:
    """Return the journal's entries in `state_dir`, oldest decision first, and why there are none when the
    journal cannot be read (None: read, or no journal at all)."""
    path = StateDir(state_dir).journal
    try:
        entries = read_journal(path)
    except SampleError as exc:
        return [], f"the journal {path} cannot be read: {exc.reason}"
    except OSError as exc:
        return [], f"the journal {path} cannot be read: {exc.strerror or exc}"
    return sorted((entries or {}).values(), key=lambda entry: entry.decided_at), None


def _decision(entry: JournalEntry) -> str | None:
    return entry.annotations.get(DECISION_ANNOTATION)


def unrecorded(entries: Sequence[JournalEntry], records: Sequence[RecordHead]) -> list[JournalEntry]:
    """The entries whose decision the recording does not hold."""
    recorded = {decision_id(record.run, record.cycle) for record in records}
    return [entry for entry in entries if _decision(entry) not in recorded]


def matches(entry: JournalEntry, pod: str | None) -> bool:
    """Whether `entry` is the eviction of `pod` (namespace/name, name or UID; None: any pod)."""
    return pod is None or pod in (entry.key, entry.name, entry.uid)


def by_decision(entries: Sequence[JournalEntry], decision: str) -> JournalEntry | None:
    """The entry of decision id `decision`, if the journal holds it."""
    return next((entry for entry in entries if _decision(entry) == decision), None)


def why_not_recorded(entry: JournalEntry, records: Sequence[RecordHead], recording: str | None) -> str:
    """Why the recording does not hold `entry`'s decision (`recording`: why there is none, if so)."""
    decision = _decision(entry)
    if decision is None:
        return "the run of evictd that decided it did not record (recorder: false)"
    if recording is not None:
        return f"the recording was deleted or cannot be read ({recording})"
    if records and entry.decided_at < records[0].wall:
        return (f"its cycle was rotated out of the recording (which starts at {wall_text(records[0].wall)}), or is "
                "before --since")
    return f"the recording does not hold decision {decision} (its line was lost, or it is outside --since/--until)"


def journal_json(entry: JournalEntry, not_recorded: str) -> JsonObject:
    """The `--output json` document of an eviction known from the journal only."""
    steps: JsonObject = {str(step): step in entry.done for step in ApiStep}
    return {
        "source": "journal",
        "decision": _decision(entry),
        "time": wall_text(entry.decided_at),
        "dryRun": False,
        "pod": entry.key,
        "uid": entry.uid,
        "signal": entry.signal,
        "reason": entry.reason,
        "message": entry.message,
        "effectiveGracePeriodSeconds": entry.grace_period_s,
        "annotations": {k: v for k, v in entry.annotations.items() if k != DECISION_ANNOTATION},
        "apiSteps": {**steps, "delete_sent": entry.delete_sent, "stopped_locally": entry.stopped_locally,
                     "finished": wall_text(entry.done_at)},
        "apiAnswers": {str(outcome): answer for outcome, answer in entry.outcomes.items()},
        "notRecorded": not_recorded,
        "notAvailable": NOT_KNOWN,
    }


def from_journal(state_dir: str, heads: Sequence[RecordHead], *, pod: str | None, decision: str | None,
                 since: float | None, until: float | None, recording_problem: str | None, recorded_at: float | None,
                 not_found: EvictdError | None) -> JournalExplanation | None:
    """The explanation of the eviction asked for (`pod`, `decision`, or the last) when the recording (`heads`) does
    not hold it or only an earlier one (at `recorded_at`); None when the recording's is the one. EvictdError when
    neither holds one (`not_found`: why)."""
    entries, journal_problem = journal_entries(state_dir)
    entries = [e for e in unrecorded(entries, heads)
               if (since is None or e.decided_at >= since) and (until is None or e.decided_at <= until)]
    if decision is not None:
        entry = by_decision(entries, decision) if not_found is not None else None
    else:
        entry = next((e for e in reversed(entries) if matches(e, pod)), None)
        if entry is not None and recorded_at is not None and entry.decided_at <= recorded_at:
            entry = None  # the recorded eviction is the later one
    if entry is None:
        if not_found is not None:
            either = f"the journal cannot be read either ({journal_problem})" if journal_problem else \
                "nor in the journal (it keeps evictions 10 minutes after they finish; none in dry-run)"
            raise EvictdError(f"{not_found}; {either}")
        return None
    return JournalExplanation(entry, why_not_recorded(entry, heads, recording_problem))


@dataclass(frozen=True, slots=True)
class JournalExplanation:
    """An eviction explained from the journal: its entry, and why the recording does not hold it."""

    entry: JournalEntry
    not_recorded: str

    def document(self) -> JsonObject:
        return journal_json(self.entry, self.not_recorded)

    def text(self) -> str:
        """The explanation for people, what the journal says escaped (`printable`)."""
        entry = self.entry
        done = [text for step, text in STEP_TEXT.items() if step in entry.done]
        if entry.stopped_locally:
            done.append("stopped through the container runtime")
        finished = f"; all API steps done at {wall_text(entry.done_at)}" if entry.done_at else "; API steps pending"
        lines = [f"decision {_decision(entry) or '(not named: the run did not record)'} at "
                 f"{wall_text(entry.decided_at)}: evicted {entry.key} for {entry.signal}, grace "
                 f"{entry.grace_period_s}s (from the eviction journal)",
                 f"  message: {entry.message}",
                 f"  API: {', '.join(done) or 'nothing yet'}{finished}"]
        lines += [f"  the API answered ({outcome}): {answer}" for outcome, answer in entry.outcomes.items()]
        lines += ["", f"not in the flight recording: {self.not_recorded}.", f"{NOT_KNOWN}."]
        return "\n".join(printable(line) for line in lines)

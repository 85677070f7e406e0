"""`evictd explain`: why a pod was evicted, or what would be evicted next, from the flight recorder's recording.

The eviction (by pod, decision id `<run>/<cycle>`, or the last) is found and its run replayed through the eviction
manager up to that cycle with the recorded configuration, from the engine state the run started from
(`replay.replayed_runs`), so the explanation is the manager's own report: observations, thresholds with first-met
times and grace periods, the recorded node-level reclaim, the whole ranking with keys, and why pods above were
passed over (for disk, when the pod's figures were measured). `--now` does the same for the newest cycle (distances
to thresholds, head of the eviction order, and its age). `--last`/`--now` find and replay in one reading; a pod or
decision is found first, then its run alone replayed. An eviction the recording lacks is explained from the journal
(`explain_journal`).
"""
from __future__ import annotations

from typing import Protocol

from evictd.commands.explain_cycle import (
    find_decision,
    find_eviction,
    record_head,
    replay_all,
    replay_until,
    replayed_cycle,
)
from evictd.commands.explain_eviction import explain_eviction
from evictd.commands.explain_journal import from_journal
from evictd.commands.explain_now import explain_now
from evictd.commands.explain_ranking import duration_text
from evictd.core.errors import EvictdError
from evictd.core.wake import stale_after_s
from evictd.cycle.render import (
    JsonObject,
)
from evictd.record.recording import Recording
from evictd.record.segment_files import Problem

# --- the command ------------------------------------------------------------------------------------------------


class Explanation(Protocol):
    """What `evictd explain` prints: its `--output json` document, or its text."""

    def document(self) -> JsonObject: ...

    def text(self) -> str: ...


def explain(recording: Recording, state_dir: str, *, pod: str | None = None, decision: str | None = None,
            now: bool = False, housekeeping_interval_s: float, now_wall: float, warn: Problem) -> Explanation:
    """Explain the eviction of `pod` (namespace/name, name or UID), of decision id `decision`, the last one (neither),
    or with `now` the newest cycle, from `recording` or, when it does not hold it, the journal in `state_dir`;
    `warn` is told what a person should know. Raises EvictdError when neither holds it."""
    # --last and --now: one pass, replaying as it reads; a pod or decision: the heads first, then its run.
    newest = now or (pod is None and decision is None)
    passed = replay_all(recording) if newest else None
    heads = passed.heads if passed is not None else [
        record_head(record) for record in recording.cycles(summaries=False)]
    try:
        recording.check_read(bool(heads), warn)
        recording_problem = None
    except EvictdError as exc:  # no recording (recorder off, deleted): the journal may still know
        if now:
            raise
        recording_problem = str(exc)
    recording.quiet = True
    if now:
        assert passed is not None
        newest_cycle = explain_now(replayed_cycle(passed.last, heads[-1]), now_wall=now_wall,
                                   stale_after=stale_after_s(housekeeping_interval_s))
        if not newest_cycle.current:
            warn(f"the newest recorded cycle is {duration_text(round(newest_cycle.age_s, 3))} old: this is not now")
        return newest_cycle
    try:
        if decision is not None:
            index = find_decision(heads, decision)
            if not heads[index].evicted:
                raise EvictdError(f"decision {decision} evicted nobody (`evictd explain --now` shows a cycle)")
            pod_key = heads[index].evicted[0][0]
        else:
            index, pod_key = find_eviction(heads, pod)
    except EvictdError as exc:
        not_found: EvictdError | None = exc if recording_problem is None else EvictdError(recording_problem)
        index = -1
    else:
        not_found = None
    journal = from_journal(state_dir, heads, pod=pod, decision=decision, since=recording.since, until=recording.until,
                           recording_problem=recording_problem, recorded_at=heads[index].wall if index >= 0 else None,
                           not_found=not_found)
    if journal is not None:
        return journal
    target = heads[index]
    explained = replayed_cycle(passed.last_eviction, target) if passed is not None else replay_until(
        recording.cycles(run=target.run), target)
    return explain_eviction(explained, pod_key)

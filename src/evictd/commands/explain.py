"""`evictd explain`: why a pod was evicted, or what would be evicted next, from the flight recorder's recording.

An eviction is found in the recording (by pod, by decision id, or the last one) and the run of evictd that took
it is replayed through the eviction manager up to that cycle with the recorded configuration
(`replay.replayed_runs`), so that the explanation is the manager's own report of that cycle: the observations,
each threshold met with the time it was first met and its grace period, the node-level reclaim (what it freed
is the recorded figure: a replay frees nothing), the whole ranking with each pod's keys, and why the pods
ranked above the evicted one were passed over. The run is replayed from the engine state it started from (the
one it restored after a restart, as its first recorded line says), so a grace period under way across a restart
shows when it was first met, before the restart. `--now` does the same for the newest recorded cycle: how far
each signal is from each threshold, and the head of the eviction order, saying how old that cycle is (and that
it is not now when it is older than a few housekeeping intervals: the daemon stopped, or records nothing).
An eviction the recording does not hold is explained from the journal (`explain_journal`). An eviction for disk
(a disk signal or a local-storage limit) also says when the evicted pod's disk figures were measured: a tree whose
walk takes longer than the disk walker's staleness limit is decided on with its last complete figures, however old.

The last eviction and the newest cycle (`--last`, `--now`) are found and replayed in one reading of the
recording, each run replayed as it is read (its cycles are read once, not once to find the cycle and once more
to replay it); an eviction by pod or decision id is found first, then its run alone is replayed up to it.

A decision id is `<run>/<cycle>`: the run of evictd (its start time and PID, as the recording names it) and
the cycle number, as the eviction's log line and the live view print it.
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
    # --last and --now: one pass, replaying as it reads. A pod or a decision: first what cycles there are (their
    # heads only), then the run of the one explained, replayed up to it.
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

"""The flight recorder's format: one JSON line per cycle, read back as `simulate` scenarios.

A recording is a folder of segment files (`<stateDir>/recording/`), named by the time they were opened so that
their names sort in time order: `<start>-<pid>.jsonl` while written, `.jsonl.gz` once closed. Each line is one
complete cycle:

    {"v": 1, "run": "...", "cycle": 7, "wall": <epoch s>, "now": <monotonic s>,
     "dryRun": false, "config": {...}, "layout": {...},   # the first line of a segment, and after a failed write
     "engineState": {...} or null,                       # the first line of a run only
     "pods": [...]  or  "podChanges": {"set": [...], "removed": [...], "order": [...]},
     "summary": {...} or null, "afterReclaim": {...},      # Summary API documents, as `simulate` reads them
     "decision": {...}}                                    # `decision_json`

`pods` is the whole list (v1 Pod objects, as `simulate` reads them), written on a segment's first line (a segment
reads alone: older ones may have been deleted); after that only what changed: pods added or changed (`set`),
the ids of pods gone (`removed`, an id being the UID, or namespace/name without one), and `order` (every id)
only when the new list's order is not the old order with new pods at the end. `config` is the
KubeletConfiguration the decisions were taken with, `layout` the filesystem layout (written again when it
changes). `engineState`, on the first line a run of evictd writes, is the engine state that run started from:
the one it restored from `engine-state.json` after a restart (`evictd.engine_state_file`), as a saved-state
document (`evictd.core.saved_state`) whose `savedAt` is that line's `wall` (its times convert to the run's
monotonic clock with that line's `wall` and `now`); null when it started afresh. A line that does not decode
(the last one, cut by a crash) is skipped.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from evictd.core.engine import ReclaimThenEvict
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import KUBELET_API_VERSION, KUBELET_KIND
from evictd.core.pods import Pod, is_critical_pod, pod_to_dict
from evictd.core.ranking import ranking_keys
from evictd.core.summary import pod_stats_lookup
from evictd.manager import CycleReport
from evictd.render import JsonObject, step_json

FORMAT_VERSION = 1
RECORDING_FOLDER = "recording"
OPEN_SUFFIX = ".jsonl"
CLOSED_SUFFIX = ".jsonl.gz"


def run_id(wall: float) -> str:
    """The name of one run of evictd (start to stop): its start time in UTC and its PID."""
    return f"{datetime.fromtimestamp(wall, UTC):%Y%m%dT%H%M%SZ}-{os.getpid()}"


def decision_id(run: str, cycle: int) -> str:
    """The id of one cycle's decision, `<run>/<cycle>`: what the eviction's log line and the live view print,
    and `evictd explain --decision` takes."""
    return f"{run}/{cycle}"


class CurrentDecision:
    """The decision id of the cycle under way (None before the first cycle, or without a run to name)."""

    def __init__(self, run: str | None) -> None:
        self.run = run
        self.id: str | None = None

    def start(self, cycle: int) -> None:
        """A cycle starts."""
        if self.run is not None:
            self.id = decision_id(self.run, cycle)

    def __call__(self) -> str | None:
        return self.id


def pod_id(pod: Pod) -> str:
    """The id a recording knows a pod by: its UID, or namespace/name for a pod without one."""
    return pod.uid or pod.key


def _dict_pod_id(pod: Mapping[str, object]) -> str:
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")


def layout_json(layout: FsLayout) -> JsonObject:
    """The scenario form of a filesystem layout."""
    return {"dedicatedImageFs": layout.dedicated_imagefs, "splitContainerFs": layout.split_containerfs}


# --- writing -----------------------------------------------------------------------------------------------


class PodListEncoder:
    """Encodes each cycle's pod list as what changed since the list last written (`commit`)."""

    def __init__(self) -> None:
        self._written: dict[str, Pod] | None = None
        self._order: list[str] = []

    def reset(self) -> None:
        """Write the whole list next time (a new segment, or after a failed write)."""
        self._written = None

    def encode(self, pods: Sequence[Pod]) -> tuple[str, object] | None:
        """Return (field, value) for the line, or None when the list is unchanged."""
        ids = [pod_id(pod) for pod in pods]
        written = self._written
        if written is None or len(set(ids)) != len(ids):
            return "pods", [pod_to_dict(pod) for pod in pods]
        current = set(ids)
        removed = [i for i in self._order if i not in current]
        changed = [pod_to_dict(pod) for i, pod in zip(ids, pods, strict=True)
                   if (old := written.get(i)) is not pod and old != pod]
        kept = [i for i in self._order if i in current]
        predicted = kept + [i for i in ids if i not in written]
        if not removed and not changed and predicted == ids:
            return None
        changes: JsonObject = {}
        if changed:
            changes["set"] = changed
        if removed:
            changes["removed"] = removed
        if predicted != ids:
            changes["order"] = ids
        return "podChanges", changes

    def commit(self, pods: Sequence[Pod]) -> None:
        """Remember `pods` as written."""
        ids = [pod_id(pod) for pod in pods]
        self._written = dict(zip(ids, pods, strict=True))
        self._order = ids


def decision_json(report: CycleReport, layout: FsLayout) -> JsonObject:
    """What a cycle decided, as a recording keeps it: `simulate`'s step (without `at`), the reclaim results,
    and the full ranking with each pod's keys."""
    decision = step_json(report.now, report)
    del decision["at"]
    decision["reclaimResults"] = [
        {"action": str(r.action), "freedBytes": r.freed_bytes, "error": r.error} for r in report.reclaim]
    ranking: list[JsonObject] = []
    if report.ranking and report.summary is not None:
        eviction = report.evictions[0] if report.evictions else None
        step = report.assessment.next_step
        threshold = eviction.threshold if eviction is not None and eviction.threshold is not None \
            else step.threshold if isinstance(step, ReclaimThenEvict) else None
        stats_of = pod_stats_lookup(report.summary, report.ranking)
        for pod in report.ranking:
            keys = ranking_keys(threshold.signal, layout, pod, stats_of(pod)) if threshold is not None else {}
            ranking.append({"pod": pod.key, "uid": pod.uid, "critical": is_critical_pod(pod), "keys": keys})
    decision["ranking"] = ranking
    if report.errors or report.eviction_errors:
        decision["errors"] = [*(error.description for error in report.errors), *report.eviction_errors]
    if report.pod_list_problem is not None:
        decision["podListProblem"] = report.pod_list_problem
        decision["podsFromNode"] = report.pods_from_node
    return decision


# --- reading -----------------------------------------------------------------------------------------------


class Absent:
    """The type of ABSENT: a line that does not say (not None, which says "nothing")."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = Absent()


@dataclass(frozen=True, slots=True)
class Record:
    """One recorded cycle, with the context its segment gave it (configuration, layout, whole pod list)."""

    run: str
    cycle: int
    wall: float
    now: float
    dry_run: bool
    config: Mapping[str, object]
    layout: Mapping[str, object]
    pods: Sequence[object]  # v1 Pod objects; the same list object until it changes
    summary: Mapping[str, object] | None
    after_reclaim: Mapping[str, object] | None
    decision: Mapping[str, object]
    # The run's first line: the engine state it started from (None: afresh). ABSENT on other lines, and in
    # recordings written before evictd recorded it.
    engine_state: Mapping[str, object] | Absent | None = ABSENT


def segment_paths(folder: str) -> list[str]:
    """The segments in `folder`, oldest first (a missing folder holds none; a file is one segment)."""
    if os.path.isfile(folder):
        return [folder]
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    present = set(names)
    # A plain segment beside its compressed copy is what a crash between the two left: the copy is whole.
    return [os.path.join(folder, name) for name in sorted(names)
            if not name.startswith(".") and (name.endswith(CLOSED_SUFFIX) or (
                name.endswith(OPEN_SUFFIX) and name[: -len(OPEN_SUFFIX)] + CLOSED_SUFFIX not in present))]


def _lines(path: str) -> Iterator[bytes]:
    """The lines of a segment; a compressed one cut short (a crash while closing it) yields what it holds."""
    if not path.endswith(".gz"):
        with open(path, "rb") as handle:
            yield from handle
        return
    with gzip.open(path, "rb") as handle:
        try:
            yield from handle
        except (EOFError, OSError, zlib.error):
            return


class _SegmentReader:
    """Rebuilds each line's whole context from the lines before it in the same segment."""

    def __init__(self) -> None:
        self.config: Mapping[str, object] | None = None
        self.layout: Mapping[str, object] = {}
        self.dry_run = False
        self.pods: dict[str, object] | None = None
        self.pod_list: list[object] = []

    def record(self, line: Mapping[str, object]) -> Record | None:
        if "config" in line and isinstance(line["config"], Mapping):
            self.config = line["config"]
        if isinstance(line.get("layout"), Mapping):
            self.layout = line["layout"]  # type: ignore[assignment]
        if isinstance(line.get("dryRun"), bool):
            self.dry_run = bool(line["dryRun"])
        self._pods(line)
        if self.config is None or self.pods is None:
            return None
        summary, after, decision = line.get("summary"), line.get("afterReclaim"), line.get("decision")
        state = line.get("engineState", ABSENT)
        if state is not ABSENT and state is not None and not isinstance(state, Mapping):
            raise ValueError("engineState is not an object")
        return Record(run=str(line.get("run", "")), cycle=int(line.get("cycle", 0)),  # type: ignore[call-overload]
                      wall=float(line["wall"]), now=float(line["now"]),  # type: ignore[arg-type]
                      dry_run=self.dry_run, config=self.config, layout=self.layout, pods=self.pod_list,
                      summary=summary if isinstance(summary, Mapping) else None,
                      after_reclaim=after if isinstance(after, Mapping) else None,
                      decision=decision if isinstance(decision, Mapping) else {},
                      engine_state=state)

    def _pods(self, line: Mapping[str, object]) -> None:
        full = line.get("pods")
        if isinstance(full, list):
            self.pods = {_dict_pod_id(pod): pod for pod in full}
            self.pod_list = full
            return
        changes = line.get("podChanges")
        if not isinstance(changes, Mapping) or self.pods is None:
            return
        pods = dict(self.pods)
        for pod in changes.get("set", ()):
            pods[_dict_pod_id(pod)] = pod
        for gone in changes.get("removed", ()):
            pods.pop(gone, None)
        order = changes.get("order")
        if not isinstance(order, list):
            order = [i for i in self.pods if i in pods] + [i for i in pods if i not in self.pods]
        self.pods = {i: pods[i] for i in order if i in pods}
        self.pod_list = list(self.pods.values())


def read_recording(folder: str, since: float | None = None, until: float | None = None) -> tuple[list[Record], int]:
    """Return the cycles recorded in `folder` between wall times `since` and `until` (epoch seconds), in order,
    and how many lines could not be read (a cut last line, a line written by a newer evictd)."""
    records: list[Record] = []
    skipped = 0
    for path in segment_paths(folder):
        reader = _SegmentReader()
        try:
            lines = list(_lines(path))
        except OSError:
            skipped += 1
            continue
        for raw in lines:
            try:
                line = json.loads(raw)
                if not isinstance(line, dict) or line.get("v") != FORMAT_VERSION:
                    raise ValueError("not a version 1 line")
                record = reader.record(line)
            except (ValueError, KeyError, TypeError):
                skipped += 1
                continue
            if record is None or (since is not None and record.wall < since) or (
                    until is not None and record.wall > until):
                continue
            records.append(record)
    return records, skipped


# --- as scenarios ------------------------------------------------------------------------------------------


def scenario_document(records: Iterable[Record], *, exact_times: bool = False) -> JsonObject:
    """Return the `simulate` scenario of `records` (cycles without a Summary, when stats could not be read and
    the manager's state stood still, are left out).

    Steps are at seconds since the first cycle, kept on the monotonic clock within one run of evictd and on the
    wall clock between runs; with `exact_times` (one run) at the recorded monotonic times themselves, so that a
    replay compares exactly the durations the daemon compared. When the first record is the first of its run,
    the scenario starts from the engine state that run started from (`engineState`: the one it restored after a
    restart); `unknown_start_state` says when that is not known.
    """
    steps: list[JsonObject] = []
    start: Record | None = None
    first: Record | None = None
    previous: Record | None = None
    base_at = base_now = 0.0
    for record in records:
        if first is None and (start is None or start.run != record.run):
            start = record  # the first record of the first scenario step's run
        if record.summary is None:
            continue
        if first is None:
            first = record
            base_now = 0.0 if exact_times else record.now
        elif previous is not None and record.run != previous.run:
            base_at = steps[-1]["at"] + max(0.0, record.wall - previous.wall)  # type: ignore[operator]
            base_now = record.now
        at = base_at + (record.now - base_now)
        # Exported, to the millisecond (a person reads them); replayed, the very times the daemon compared.
        step: JsonObject = {"at": at if exact_times else round(at, 3), "summary": record.summary}
        if record.after_reclaim is not None:
            step["afterReclaim"] = record.after_reclaim
        if previous is not None and record.pods is not previous.pods:
            step["pods"] = record.pods
        steps.append(step)
        previous = record
    if first is None or start is None:
        return {"steps": []}
    document: JsonObject = {
        "config": {"apiVersion": KUBELET_API_VERSION, "kind": KUBELET_KIND, **first.config},
        "layout": dict(first.layout),
        "pods": first.pods,
        "steps": steps,
    }
    state = start.engine_state
    if isinstance(state, Mapping):
        # Taken at the run's first cycle; the scenario starts at its first cycle with a Summary (the state stood
        # still in between): the same times, seen from that cycle's moment.
        saved_at = state.get("savedAt")
        if isinstance(saved_at, int | float) and not isinstance(saved_at, bool):
            state = {**state, "savedAt": saved_at + (first.now - start.now)}
        document["engineState"] = dict(state)
    return document


def unknown_start_state(records: Sequence[Record]) -> str | None:
    """Say why the scenario of `records` (`scenario_document`) starts from a fresh engine state although the run
    of its first step may not have (None: it starts from the state that run started from)."""
    first = next((r for r in records if r.summary is not None), None)
    start = next((r for r in records if first is not None and r.run == first.run), None)
    if start is None or start.engine_state is not ABSENT:
        return None
    return (f"the scenario starts from a fresh engine state: its first cycle ({start.run}/{start.cycle}) is not the "
            "first of its run of evictd (rotated out, or before --since), or was recorded by an evictd that did not "
            "record the state it started from; grace periods under way then start again")

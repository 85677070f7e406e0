"""The flight recorder's format: one JSON line per cycle, read back as `simulate` scenarios.

A recording is a folder of segment files (`<stateDir>/recording/`), named by the time they were opened so that
their names sort in time order: `<start>-<pid>.jsonl` while written, `.jsonl.gz` once closed. Each line is one
complete cycle:

    {"v": 2, "run": "...", "cycle": 7, "wall": <epoch s>, "now": <monotonic s>,
     "dryRun": false, "config": {...}, "layout": {...},   # the first line of a segment, and after a failed write
     "engineState": {...} or null,                       # the first line of a run only
     "pods": [...]  or  "podChanges": {"set": [...], "removed": [...], "order": [...]},
     "summary": {...} or null  or  "summaryChanges": {"node": {...}, "pods": [...], "removed": [...], "order": [...]},
     "afterReclaim": {...},                                # Summary API documents, as `simulate` reads them
     "decision": {...}}                                    # `decision_json`

`pods` is the whole list (v1 Pod objects, as `simulate` reads them), written on a segment's first line (a segment
reads alone: older ones may have been deleted); after that only what changed: pods added or changed (`set`),
the ids of pods gone (`removed`, an id being the UID, or namespace/name without one), and `order` (every id)
only when the new list's order is not the old order with new pods at the end. `config` is the
KubeletConfiguration the decisions were taken with, `layout` the filesystem layout (written again when it
changes). `engineState`, on the first line a run of evictd writes, is the engine state that run started from:
the one it restored from `engine-state.json` after a restart (`evictd.engine_state_file`), as a saved-state
document (`evictd.core.saved_state`) whose `savedAt` is that line's `wall` (its times convert to the run's
monotonic clock with that line's `wall` and `now`); null when it started afresh. `summary` is whole on a
segment's first line and after a failed write, and after that `summaryChanges`: what changed since the last
Summary written (`evictd.core.summary_json`: the node's blocks that changed, each pod's blocks that changed,
its memory as a row of integers, pods gone, the order when it is not the old one with new pods at the end);
`summary` null (the stats could not be read) leaves the last Summary as what changes apply to. A line that does
not decode (the last one, cut by a crash) is skipped, and so is every line of its segment after it that holds
Summary changes, until one holds a whole Summary again. Version 1 lines (every Summary whole) are read too.
"""

from __future__ import annotations

import gzip
import json
import operator
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import KUBELET_API_VERSION, KUBELET_KIND
from evictd.core.pods import Pod, is_critical_pod, pod_to_dict
from evictd.core.ranking import keys_json, keys_text
from evictd.core.summary_json import apply_summary_changes
from evictd.manager import CycleReport
from evictd.render import JsonObject, step_json

# Version 2 writes a Summary as what changed since the line before; version 1 (every Summary whole) is read too.
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
RECORDING_FOLDER = "recording"
OPEN_SUFFIX = ".jsonl"
CLOSED_SUFFIX = ".jsonl.gz"


def run_id(wall: float, process: str | None = None) -> str:
    """The name of one run of evictd (start to stop): its start time in UTC and its PID (or `process`, the name
    a run that is not a daemon's goes by: `simulate`)."""
    return f"{datetime.fromtimestamp(wall, UTC):%Y%m%dT%H%M%SZ}-{process or os.getpid()}"


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
        self._list: tuple[Pod, ...] = ()  # the list written, pod by pod the same objects

    def reset(self) -> None:
        """Write the whole list next time (a new segment, or after a failed write)."""
        self._written = None

    def encode(self, pods: Sequence[Pod]) -> tuple[str, object] | None:
        """Return (field, value) for the line, or None when the list is unchanged."""
        written = self._written
        if self._same_list(pods):
            return None  # the very pods written (the API's list between watch events): nothing to compare
        ids = [pod_id(pod) for pod in pods]
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
        if self._same_list(pods):
            return
        ids = [pod_id(pod) for pod in pods]
        self._written = dict(zip(ids, pods, strict=True))
        self._order = ids
        self._list = tuple(pods)

    def _same_list(self, pods: Sequence[Pod]) -> bool:
        """Whether `pods` are, one by one, the very pod objects last written."""
        return self._written is not None and len(pods) == len(self._list) and all(map(operator.is_, pods, self._list))


def decision_json(report: CycleReport, *, ranking: bool = True) -> JsonObject:
    """What a cycle decided, as a recording keeps it: `simulate`'s step (without `at`), the reclaim results,
    and the full ranking with each pod's keys (`RankingEncoder` writes the same ranking as text; without
    `ranking` it is left out)."""
    decision = step_json(report.now, report)
    del decision["at"]
    decision["reclaimResults"] = [
        {"action": str(r.action), "freedBytes": r.freed_bytes, "error": r.error} for r in report.reclaim]
    del decision["ranking"]  # `step_json`'s names only: replaced by the ranking with each pod's keys
    if ranking:
        # The keys the cycle sorted each pod by, carried in the report (not computed again).
        signal = report.ranking_signal
        decision["ranking"] = [] if signal is None else [
            {**_ranked_pod_json(pod), "keys": keys_json(signal, key)}
            for pod, key in zip(report.ranking, report.ranking_keys, strict=True)]
    if report.errors or report.eviction_errors:
        decision["errors"] = [*(error.description for error in report.errors), *report.eviction_errors]
    if report.pod_list_problem is not None:
        decision["podListProblem"] = report.pod_list_problem
        decision["podsFromNode"] = report.pods_from_node
    return decision


def _ranked_pod_json(pod: Pod) -> JsonObject:
    return {"pod": pod.key, "uid": pod.uid, "critical": is_critical_pod(pod)}


class RankingEncoder:
    """Writes a decision's ranking (`decision_json`'s) as JSON text, keeping the text of each pod's name, UID and
    criticality while it is the same pod object (the pod list keeps them between changes)."""

    def __init__(self, dumps: Callable[[object], str]) -> None:
        self._dumps = dumps
        self._pods: dict[int, tuple[Pod, str]] = {}

    def encode(self, report: CycleReport) -> str:
        """Return the ranking of `report` as compact JSON text."""
        signal = report.ranking_signal
        if signal is None or not report.ranking:
            return "[]"
        known = self._pods
        texts: dict[int, tuple[Pod, str]] = {}
        parts = []
        for pod, key in zip(report.ranking, report.ranking_keys, strict=True):
            entry = known.get(id(pod))
            if entry is None or entry[0] is not pod:
                entry = (pod, self._dumps(_ranked_pod_json(pod))[:-1] + ',"keys":')
            texts[id(pod)] = entry  # held, so that its id is not reused while remembered
            parts.append(entry[1] + keys_text(signal, key) + "}")
        self._pods = texts
        return "[" + ",".join(parts) + "]"


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
        self.summary: Mapping[str, object] | None = None  # the last Summary, which changes apply to

    def lost_line(self) -> None:
        """A line of the segment could not be read: changes after it cannot be applied (to what?)."""
        self.summary = None

    def record(self, line: Mapping[str, object]) -> Record | None:
        if "config" in line and isinstance(line["config"], Mapping):
            self.config = line["config"]
        if isinstance(line.get("layout"), Mapping):
            self.layout = line["layout"]  # type: ignore[assignment]
        if isinstance(line.get("dryRun"), bool):
            self.dry_run = bool(line["dryRun"])
        self._pods(line)
        summary = self._summary(line)
        if self.config is None or self.pods is None:
            return None
        after, decision = line.get("afterReclaim"), line.get("decision")
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

    def _summary(self, line: Mapping[str, object]) -> Mapping[str, object] | None:
        """The line's Summary: written whole, or as changes from the last one (version 2)."""
        changes = line.get("summaryChanges")
        if isinstance(changes, Mapping):
            if self.summary is None:
                raise ValueError("summary changes without a whole summary before them")
            self.summary = apply_summary_changes(self.summary, changes)
            return self.summary
        whole = line.get("summary")
        if isinstance(whole, Mapping):
            self.summary = whole
            return whole
        return None  # the stats could not be read: the next changes are still against the last Summary

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
                if not isinstance(line, dict) or line.get("v") not in READ_VERSIONS:
                    raise ValueError(f"not a version {' or '.join(map(str, READ_VERSIONS))} line")
                record = reader.record(line)
            except (ValueError, KeyError, TypeError):
                skipped += 1
                reader.lost_line()
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

"""The flight recorder's format: one JSON line per cycle, read back as `simulate` scenarios.

Segments in `<stateDir>/recording/`, named to sort in time: `<start>-<pid>.jsonl` while written, `.jsonl.gz` once
closed. A line: ``{"v": 2, "run", "cycle", "wall", "now", "dryRun", "config", "layout", "engineState", "pods" |
"podChanges", "summary" | "summaryChanges", "afterReclaim", "afterDiskWait", "decision"}``. `config` (the
KubeletConfiguration) and `layout` open a segment and follow a failed write or a change; `engineState` (the run's
first line only) is the saved-state document the run started from, its `savedAt` that line's `wall` (null: afresh).
`pods` (v1 Pods) and `summary` (a Summary document) are whole on a segment's first line and after a failed write
(a segment reads alone); after that only changes: `podChanges` {`set`, `removed` ids, `order` when not the old one
plus new pods} and `summaryChanges` (`evictd.record.summary_json`); `summary` null (unreadable stats) keeps the last.
`decision` is `decision_of` (`evictd.record.decision`). A line that does not decode is skipped, and so are its
segment's later change lines until a whole Summary. Version 1 lines (every Summary whole) are read too.
"""

from __future__ import annotations

import gc
import itertools
import operator
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from evictd.core.errors import EvictdError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.kubelet_config import KUBELET_API_VERSION, KUBELET_KIND
from evictd.core.pods import Pod
from evictd.cycle.ids import decision_id
from evictd.cycle.render import JsonObject, printable
from evictd.record.decision import Decision
from evictd.record.documents import PodDocuments, pod_to_dict
from evictd.record.line_json import ABSENT, Absent, Document
from evictd.record.model import Encoded, Line, PodChanges, decode_line, layout_document
from evictd.record.segment_files import CLOSED_SUFFIX, OPEN_SUFFIX, Problem, in_time_order, segment_lines
from evictd.record.summary_json import apply_summary_changes
from evictd.state_dir import StateDir

# So many unreadable lines in a row end the reading of a segment (a file of garbage, or of empty lines).
MAX_LOST_LINES_IN_A_ROW = 100
MAX_REASON_CHARS = 120
# The young generation's threshold while a command reads a recording (see `open_recording`).
READER_GC_THRESHOLD = 50_000


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


def _dict_pod_id(pod: Document) -> str:
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}")


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

    def encode(self, pods: Sequence[Pod]) -> PodDocuments | PodChanges | None:
        """Return the whole list (its documents made as they are written) or its changes for the line, or None when
        the list is unchanged."""
        written = self._written
        if self._same_list(pods):
            return None  # the very pods written (the API's list between watch events): nothing to compare
        ids = [pod_id(pod) for pod in pods]
        if written is None or len(set(ids)) != len(ids):
            return PodDocuments(pods)
        current = set(ids)
        removed = [i for i in self._order if i not in current]
        changed = [pod_to_dict(pod) for i, pod in zip(ids, pods, strict=True)
                   if (old := written.get(i)) is not pod and old != pod]
        kept = [i for i in self._order if i in current]
        predicted = kept + [i for i in ids if i not in written]
        if not removed and not changed and predicted == ids:
            return None
        return PodChanges(set=tuple(changed) or None, removed=tuple(removed) or None,
                          order=tuple(ids) if predicted != ids else None)

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


# --- reading -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One recorded cycle, with the context its segment gave it (configuration, layout, whole pod list)."""

    run: str
    cycle: int
    wall: float
    now: float
    dry_run: bool
    config: Document
    layout: FsLayout
    pods: Sequence[Document]  # v1 Pod objects; the same list object until it changes
    summary: Document | None
    after_reclaim: Document | None
    decision: Decision
    # The run's first line: the engine state it started from (None: afresh); ABSENT elsewhere and in older recordings.
    engine_state: Document | Absent | None = ABSENT
    # The Summary read after the wait for pods' disk figures (None: no wait; `evictd.cycle.manager`).
    after_disk_wait: Document | None = None


def segment_paths(folder: str) -> list[str]:
    """The segments in `folder`, by name (a missing folder holds none; anything but a folder is one segment)."""
    if not os.path.isdir(folder):
        return [folder] if os.path.lexists(folder) else []
    names = os.listdir(folder)
    present = set(names)
    # A plain segment beside its compressed copy is what a crash between the two left: the copy is whole.
    return [os.path.join(folder, name) for name in sorted(names)
            if not name.startswith(".") and (name.endswith(CLOSED_SUFFIX) or (
                name.endswith(OPEN_SUFFIX) and name[: -len(OPEN_SUFFIX)] + CLOSED_SUFFIX not in present))]


def _decoded(value: Document | Encoded | None, name: str) -> Document | None:
    if isinstance(value, Encoded):
        raise ValueError(f"{name} is encoded text, not a decoded line")
    return value


class _SegmentReader:
    """Rebuilds each line's context from the earlier lines of its segment (without `summaries`, a stand-in summary)."""

    def __init__(self, summaries: bool = True) -> None:
        self.summaries = summaries
        self.config: Document | None = None
        self.layout = FsLayout()
        self.dry_run = False
        self.pods: dict[str, Document] | None = None
        self.pod_list: Sequence[Document] = []
        self.summary: Document | None = None  # the last Summary, which changes apply to

    def lost_line(self) -> None:
        """A line of the segment could not be read: changes after it cannot be applied (to what?)."""
        self.summary = None

    def record(self, line: Line) -> Record | None:
        if line.config is not None:
            self.config = line.config
        if line.layout is not None:
            self.layout = line.layout
        if line.dry_run is not None:
            self.dry_run = line.dry_run
        self._pods(line)
        summary = self._summary(line)
        if self.config is None or self.pods is None:
            return None
        return Record(run=line.run, cycle=line.cycle, wall=line.wall, now=line.now, dry_run=self.dry_run,
                      config=self.config, layout=self.layout, pods=self.pod_list, summary=summary,
                      after_reclaim=_decoded(line.after_reclaim, "afterReclaim"), decision=line.decision,
                      engine_state=line.engine_state,
                      after_disk_wait=_decoded(line.after_disk_wait, "afterDiskWait"))

    def _summary(self, line: Line) -> Document | None:
        """The line's Summary: written whole, or as changes from the last one (version 2)."""
        changes = _decoded(line.summary_changes, "summaryChanges")
        if changes is not None:
            if self.summary is None:
                raise ValueError("summary changes without a whole summary before them")
            if not self.summaries:
                return self.summary
            self.summary = apply_summary_changes(self.summary, changes)
            return self.summary
        whole = _decoded(line.summary, "summary")
        if whole is not None:
            self.summary = whole
        return whole  # None: the stats could not be read: the next changes are still against the last Summary

    def _pods(self, line: Line) -> None:
        if line.pods is not None:
            self.pods = {_dict_pod_id(pod): pod for pod in line.pods}
            self.pod_list = line.pods
            return
        changes = line.pod_changes
        if changes is None or self.pods is None:
            return
        pods = dict(self.pods)
        for pod in changes.set or ():
            pods[_dict_pod_id(pod)] = pod
        for gone in changes.removed or ():
            pods.pop(gone, None)
        order = changes.order
        if order is None:
            order = (*(i for i in self.pods if i in pods), *(i for i in pods if i not in self.pods))
        self.pods = {i: pods[i] for i in order if i in pods}
        self.pod_list = list(self.pods.values())


class Recording:
    """The recording at `folder` (or one segment) between wall times `since` and `until`: iterating reads its cycles
    in order holding only the line and its segment's context; unreadable files and lines are skipped, told to
    `problem`, and counted in `skipped`."""

    def __init__(self, folder: str, since: float | None = None, until: float | None = None,
                 problem: Problem = lambda message: None) -> None:
        self.folder = folder
        self.since = since
        self.until = until
        self._problem = problem
        self.skipped = 0
        self.quiet = False  # while it is read again: its problems were told the first time

    def problem(self, message: str) -> None:
        """Tell `problem` what cannot be read (unless `quiet`)."""
        if not self.quiet:
            self._problem(message)

    def check_read(self, seen: bool, warn: Problem) -> None:
        """After reading the recording (`seen`: whether it held a cycle): `warn` about skipped lines; raise
        EvictdError when it held no cycle."""
        if self.skipped:
            warn(f"{self.skipped} recorded lines could not be read and were skipped")
        if not seen:
            raise EvictdError(f"no recorded cycles in {printable(self.folder)}" + (
                " in that time" if self.since is not None or self.until is not None else ""))

    def __iter__(self) -> Iterator[Record]:
        return self.cycles()

    def cycles(self, run: str | None = None, *, summaries: bool = True) -> Iterator[Record]:
        """The recorded cycles, in order (with `run`, that run's only: other runs' segments are not read; without
        `summaries`, each record's summary is only a stand-in saying whether the cycle read stats: faster)."""
        self.skipped = 0
        try:
            segments = in_time_order(segment_paths(self.folder))
        except OSError as exc:
            self.problem(f"{self.folder}: {exc.strerror or exc}")
            self.skipped += 1
            return
        for path, head in segments:
            if run is None or head is None or head[0] == run:
                yield from self._segment(path, run, summaries)

    def _segment(self, path: str, run: str | None, summaries: bool) -> Iterator[Record]:
        reader = _SegmentReader(summaries)
        lost = 0
        for raw in segment_lines(path, self.problem):
            readable, record = (False, None) if raw is None else self._decode(path, raw, reader)
            if not readable:
                self.skipped += 1
                reader.lost_line()
                lost += 1
                if lost >= MAX_LOST_LINES_IN_A_ROW:
                    self.problem(f"{path}: {lost} lines in a row cannot be read: the rest is not read")
                    return
                continue
            lost = 0
            if record is None:
                continue
            if run is not None and record.run != run:
                return  # a segment holds one run
            if (self.since is None or record.wall >= self.since) and (self.until is None or record.wall <= self.until):
                yield record

    def _decode(self, path: str, raw: bytes, reader: _SegmentReader) -> tuple[bool, Record | None]:
        """Whether the line could be read, and its record (None: context only); `problem` is told why not."""
        try:
            return True, reader.record(decode_line(raw))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            if not raw.endswith(b"\n"):
                self.problem(f"{path}: the last line is cut short (a crash while writing it): skipped")
            else:
                reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:MAX_REASON_CHARS]
                self.problem(f"{path}: a line cannot be read ({reason}): skipped")
            return False, None


def open_recording(path: str, since: float | None, until: float | None, problem: Problem) -> Recording:
    """The recording at `path` (a stateDir, its recording folder or a segment), read as it is iterated, for a
    command that reads it whole (the collector tuned for it)."""
    # A reader builds and frees objects by the thousand without reference cycles: frequent collections only cost.
    gc.set_threshold(READER_GC_THRESHOLD, 10, 10)
    if os.path.isdir(StateDir(path).recording):
        path = StateDir(path).recording
    return Recording(path, since, until, problem=problem)


def read_recording(folder: str, since: float | None = None, until: float | None = None) -> tuple[list[Record], int]:
    """Return the cycles recorded in `folder` between `since` and `until`, in order, and how many lines could not be
    read. Holds them all: for tests and small recordings."""
    recording = Recording(folder, since, until)
    records = list(recording)
    return records, recording.skipped


# --- as scenarios ------------------------------------------------------------------------------------------


def scenario_parts(records: Iterable[Record], *, exact_times: bool = False) -> tuple[
        JsonObject | None, Record | None, Iterator[tuple[Record, JsonObject]]]:
    """The `simulate` scenario of `records` in parts, read as it goes: its head (None when no record has a Summary),
    the record its state started from (for `unknown_start_state`), and its steps with their records; cycles without
    a Summary are left out. Steps are at seconds since the first cycle (monotonic within a run, wall between runs;
    `exact_times`: the recorded monotonic times); a run's first record brings the engine state it started from.
    """
    records = iter(records)
    start: Record | None = None
    first: Record | None = None
    for record in records:
        if start is None or start.run != record.run:
            start = record  # the first record of the first scenario step's run
        if record.summary is not None:
            first = record
            break
    if first is None or start is None:
        return None, start, iter(())
    head: JsonObject = {
        "config": {"apiVersion": KUBELET_API_VERSION, "kind": KUBELET_KIND, **first.config},
        "layout": layout_document(first.layout),
        "pods": first.pods,
    }
    state = start.engine_state
    if isinstance(state, Mapping):
        # Taken at the run's first cycle; the scenario starts at its first with a Summary: same times, seen from there.
        saved_at = state.get("savedAt")
        if isinstance(saved_at, int | float) and not isinstance(saved_at, bool):
            state = {**state, "savedAt": saved_at + (first.now - start.now)}
        head["engineState"] = dict(state)
    return head, start, _scenario_steps(first, records, exact_times)


def _scenario_steps(first: Record, records: Iterator[Record], exact_times: bool) -> Iterator[tuple[Record, JsonObject]]:
    previous: Record | None = None
    base_at = 0.0
    base_now = 0.0 if exact_times else first.now
    last_at = 0.0
    for record in itertools.chain((first,), records):
        if record.summary is None:
            continue
        if previous is not None and record.run != previous.run:
            base_at = last_at + max(0.0, record.wall - previous.wall)
            base_now = record.now
        at = last_at = base_at + (record.now - base_now)
        # Exported to the microsecond: at the millisecond a step 0.4 ms short of a grace period's end read as past it.
        step: JsonObject = {"at": at if exact_times else round(at, 6), "summary": record.summary}
        if record.after_reclaim is not None:
            step["afterReclaim"] = record.after_reclaim
        if record.after_disk_wait is not None:
            step["afterDiskWait"] = record.after_disk_wait
        freed = [result.freed_bytes for result in record.decision.reclaim_results
                 if result.action == ReclaimAction.MEMORY_RECLAIM and not result.error]
        if freed:  # reclaim before evict ran: a replay frees what it freed
            step["memoryReclaimed"] = freed[0]
        # A segment's first line holds the whole list again: written (and decoded) only when it changed.
        if previous is not None and record.pods is not previous.pods and record.pods != previous.pods:
            step["pods"] = record.pods
        yield record, step
        previous = record


def unknown_start_state(start: Record | None) -> str | None:
    """Say why a scenario whose state was started from `start` (`scenario_parts`) starts from a fresh engine state
    although the run of its first step may not have (None: it starts from the state that run started from)."""
    if start is None or start.engine_state is not ABSENT:
        return None
    return (f"the scenario starts from a fresh engine state: its first cycle ({start.run}/{start.cycle}) is not the "
            "first of its run of evictd (rotated out, or before --since), or was recorded by an evictd that did not "
            "record the state it started from; grace periods under way then start again")

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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, assert_never

from evictd.adapters.pod_disk_usage import DEFAULT_STALE_AFTER_S
from evictd.commands.render import (
    JsonObject,
    condition_text,
    printable,
    seconds_json,
    table,
    value_json,
    value_text,
)
from evictd.core.engine import EngineConfig, EngineState, Eviction, ReclaimThenEvict
from evictd.core.errors import EvictdError
from evictd.core.fs_layout import FsLayout
from evictd.core.pods import SYSTEM_CRITICAL_PRIORITY, Pod, is_critical_pod, is_mirror_pod, is_static_pod
from evictd.core.quantity import Quantity
from evictd.core.ranking import rank_pods, sort_key
from evictd.core.signals import Ranking, Resource, Signal, spec_of
from evictd.core.summary import pod_stats_lookup
from evictd.core.thresholds import Threshold, derive_containerfs_thresholds, threshold_quantity
from evictd.observe.live_view import human, human_bytes
from evictd.record.explain_journal import from_journal
from evictd.record.model import ABSENT, Absent, Document, EvictionApiUse, KeyValue, RankKeys, rank_keys
from evictd.record.recording import Record, Recording, decision_id
from evictd.record.replay import replayed_runs, wall_text
from evictd.record.segment_files import Problem
from evictd.run.cadence import stale_after_s
from evictd.run.manager import CycleReport

# Pods that are never in the ranking at all, whatever their usage (they are not in the pod list evictd ranks).
NOT_RANKED = ("evictd's own pod", "pods evictd already evicted (its journal)", "pods that finished (Succeeded, "
              "Failed)")
RANKING_SHOWN_NOW = 5
# A first-met time this close to the restored one is that one (the same float, give or take rounding).
RESTORED_TIME_TOLERANCE_S = 1e-6


@dataclass(frozen=True, slots=True)
class Explained:
    """One recorded cycle, replayed: the manager's report of it, with the run's configuration and layout."""

    record: Record
    report: CycleReport
    config: EngineConfig
    layout: FsLayout
    start_state: EngineState  # the state the run was replayed from
    restored: bool | None  # the run started from a restored state (None: the recording does not say)


# --- finding the cycle ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordHead:
    """What finding a cycle takes of a recorded one: a record without its readings, so that the heads of a whole
    recording fit in a reader's memory (the cycle itself is read again, replayed: `replay_until`)."""

    run: str
    cycle: int
    wall: float
    read_stats: bool
    evicted: tuple[tuple[str, str, str], ...]  # each pod evicted: namespace/name, name, UID ("" unknown)


def record_head(record: Record) -> RecordHead:
    """The head of `record`."""
    evictions = record.decision.evicted
    uids = _uids(record) if evictions else {}
    return RecordHead(record.run, record.cycle, record.wall, record.summary is not None,
                      tuple((e.key, e.name, uids.get(e.key, "")) for e in evictions))


def _uids(record: Record) -> dict[str, str]:
    """The UID of each pod of the cycle's list, by namespace/name (kept for the very list of the cycle before:
    records carry the same list object until it changes)."""
    last = _LAST_UIDS[0]
    if last is not None and last[0] is record.pods:
        return last[1]
    uids: dict[str, str] = {}
    for pod in record.pods:
        meta = pod.get("metadata")
        if isinstance(meta, Mapping) and meta.get("uid"):
            uids[f"{meta.get('namespace') or 'default'}/{meta.get('name')}"] = str(meta["uid"])
    _LAST_UIDS[0] = (record.pods, uids)
    return uids


# The last pod list `_uids` read, and its UIDs.
_LAST_UIDS: list[tuple[Sequence[Document], dict[str, str]] | None] = [None]


def find_eviction(heads: Sequence[RecordHead], pod: str | None) -> tuple[int, str]:
    """Return the index of the last cycle that evicted `pod` (namespace/name, name or UID; None: any pod) and
    the pod's namespace/name; raise EvictdError naming the pods evicted when there is none."""
    for index in range(len(heads) - 1, -1, -1):
        for key, name, uid in heads[index].evicted:
            if pod is None or pod in (key, name) or (uid and uid == pod):
                return index, key
    evicted = sorted({key for head in heads for key, _, _ in head.evicted})
    if pod is None:
        raise EvictdError("no eviction in the recording")
    known = f"evicted were: {', '.join(evicted)}" if evicted else "it holds no eviction"
    raise EvictdError(f"no eviction of {pod} in the recording ({known})")


def find_decision(heads: Sequence[RecordHead], decision: str) -> int:
    """Return the index of the cycle `decision` (`<run>/<cycle>`); raise EvictdError when not recorded."""
    for index, head in enumerate(heads):
        if decision_id(head.run, head.cycle) == decision:
            return index
    raise EvictdError(f"no decision {decision} in the recording (decision ids are <run>/<cycle>, as logged)")


def replay_until(run: Iterable[Record], target: RecordHead) -> Explained:
    """Replay the run of `target` from its first recorded cycle up to that one; `run` reads that run's records
    (it may hold others, and cycles after the target: they are not read)."""
    if not target.read_stats:
        raise EvictdError(f"cycle {decision_id(target.run, target.cycle)} read no stats: nothing was decided")

    def until_target() -> Iterator[Record]:
        for record in run:
            if record.run == target.run:
                yield record
                if record.cycle == target.cycle and record.wall == target.wall:
                    return

    last: tuple[Record, CycleReport] | None = None
    replayed = next(replayed_runs(until_target()), None)
    if replayed is not None:
        for last in replayed.cycles:  # noqa: B007 (the last one is the one explained)
            pass
    return _replayed(None if replayed is None or last is None else Explained(
        last[0], last[1], replayed.config, replayed.layout, replayed.start_state, replayed.restored), target)


# --- what a pod's ranking keys say ----------------------------------------------------------------------------


def usage_unit(signal: Signal) -> str:
    """The unit of the usage a signal ranks pods by: that of the resource it starves."""
    match spec_of(signal).resource:
        case Resource.MEMORY | Resource.EPHEMERAL_STORAGE:
            return "bytes"
        case Resource.INODES:
            return "inodes"
        case Resource.PIDS:
            return "processes"
        case resource:
            assert_never(resource)


def _amount(value: KeyValue, signal: Signal) -> str:
    if value is None:
        return "no stats"
    number = int(Fraction(str(value)))
    unit = usage_unit(signal)
    return human_bytes(number) if unit == "bytes" else f"{number:,} {unit}"


def critical_reason(pod: Pod) -> str | None:
    """Why the manager never evicts `pod` (None: it may)."""
    if is_static_pod(pod):
        return "a static pod"
    if is_mirror_pod(pod):
        return "a mirror pod"
    if is_critical_pod(pod):
        return f"priority {pod.priority} (system-critical, at least {SYSTEM_CRITICAL_PRIORITY})"
    return None


def why_before(signal: Signal, first: Pod, first_keys: RankKeys, second: Pod, second_keys: RankKeys) -> str:
    """Say which of `rank_pods`' keys put `first` before `second` (the first key that tells them apart)."""
    a, b = first.key, second.key
    resource = spec_of(signal).resource
    if first_keys.exceeds_requests is not ABSENT and first_keys.exceeds_requests != second_keys.exceeds_requests:
        if first_keys.exceeds_requests is None:
            return f"{a} had no stats (pods without stats rank first)"
        return f"{a} used more {resource} than it requests and {b} did not"
    if first_keys.priority != second_keys.priority:
        return f"{a} has a lower priority ({first_keys.priority}) than {b} ({second_keys.priority})"
    if first_keys.ranked_usage != second_keys.ranked_usage:
        if first_keys.ranked_usage is None:
            return f"{a} had no stats (pods without stats rank first)"
        what = "processes" if first_keys.usage_name == "processes" else "usage above its request"
        return (f"{a} had more {what} ({_amount(first_keys.ranked_usage, signal)}) than {b} "
                f"({_amount(second_keys.ranked_usage, signal)})")
    return f"{a} and {b} tie on every key: the pod list's order decided"


@dataclass(frozen=True, slots=True)
class RankedPod:
    """One pod of a ranking, with the keys it was sorted by and what became of it."""

    pod: Pod
    keys: RankKeys
    outcome: str

    def document(self, rank: int, *, uid: bool) -> JsonObject:
        """The row as the `--output json` documents give it (`uid`: with the pod's UID)."""
        return {"rank": rank, "pod": self.pod.key, **({"uid": self.pod.uid} if uid else {}), **self.keys.document(),
                "outcome": self.outcome or None}


def ranked_pods(signal: Signal, layout: FsLayout, ranking: Sequence[Pod], report: CycleReport,
                evicted: Pod | None) -> list[RankedPod]:
    """The ranking with each pod's keys and outcome: evicted, skipped (why), or not reached."""
    assert report.summary is not None
    stats_of = pod_stats_lookup(report.summary, ranking)
    rows = []
    for pod in ranking:
        reason = critical_reason(pod)
        outcome = ("evicted" if evicted is not None and pod.key == evicted.key
                   else f"skipped: {reason}" if reason is not None else "")
        rows.append(RankedPod(pod, rank_keys(signal, sort_key(signal, layout, pod, stats_of(pod))), outcome))
    return rows


def _ranking_table(signal: Signal, rows: Sequence[RankedPod]) -> str:
    headers: tuple[str, ...]
    cells: list[tuple[str, ...]]
    if spec_of(signal).ranking is not Ranking.PIDS:
        headers = ("#", "POD", "EXCEEDS REQUEST", "PRIORITY", "USAGE - REQUEST", "OUTCOME")
        cells = [(str(n), row.pod.key, _yes_no(row.keys.exceeds_requests), str(row.keys.priority),
                  _amount(row.keys.ranked_usage, signal), row.outcome) for n, row in enumerate(rows, start=1)]
    else:
        headers = ("#", "POD", "PRIORITY", "PROCESSES", "OUTCOME")
        cells = [(str(n), row.pod.key, str(row.keys.priority), _amount(row.keys.ranked_usage, signal), row.outcome)
                 for n, row in enumerate(rows, start=1)]
    return table(headers, [tuple(printable(cell) for cell in row) for row in cells])


def _yes_no(value: bool | Absent | None) -> str:
    return "-" if value is None or value is ABSENT else "yes" if value else "no"


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: 4.2s, 3m12s, 5h07m, 2d03h."""
    if seconds < 60:
        return f"{max(seconds, 0.0):.1f}s"
    whole = int(seconds)
    for unit, size, smaller, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            return f"{whole // size}{unit}{whole % size // small_size:02d}{smaller}"
    return f"{whole}s"


def _bytes(value: int | None) -> str:
    return human_bytes(value or 0)


def _kind(threshold: Threshold) -> str:
    return "hard" if threshold.is_hard else "soft"


# --- explaining an eviction -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThresholdView:
    """One threshold in an explanation: what the cycle read against it (`observation`), and since when it was met
    (`met`: None when it was not)."""

    threshold: Threshold
    observation: tuple[Quantity, Quantity, Quantity] | None  # threshold quantity, available, capacity
    met: tuple[float, float, bool, bool] | None  # first met (wall), met for (s), grace met, restored at run start

    def document(self) -> JsonObject:
        threshold = self.threshold
        item: JsonObject = {
            "signal": str(threshold.signal), "kind": _kind(threshold), "value": value_json(threshold.value),
            "gracePeriodSeconds": seconds_json(threshold.grace_period_s),
            "minReclaim": value_json(threshold.min_reclaim) if threshold.min_reclaim is not None else None,
        }
        if self.observation is not None:
            quantity, available, capacity = self.observation
            item.update(threshold=str(quantity), available=str(available), capacity=str(capacity))
        if self.met is not None:
            first_met, met_for, grace_met, restored = self.met
            item.update(firstMet=wall_text(first_met), metForSeconds=round(met_for, 3), graceMet=grace_met,
                        firstMetRestored=restored)
        return item

    def text(self) -> str:
        threshold = self.threshold
        stall = spec_of(threshold.signal).stall is not None
        checks = condition_text(threshold.signal, threshold.value) if stall else \
            f"{threshold.signal} < {value_text(threshold.value)}"
        line = f"{checks} ({_kind(threshold)}"
        line += ")" if threshold.is_hard else f", grace {seconds_json(threshold.grace_period_s)}s)"
        if self.observation is not None:
            quantity, available, capacity = self.observation
            line += f": available {available} of {capacity}, threshold {quantity}"
            if stall:
                line += " (stall headroom in basis points of the kernel's 10 s window)"
        if self.met is not None:
            first_met, met_for, _, restored = self.met
            line += f"; first met {wall_text(first_met)} ({round(met_for, 3):g}s before"
            line += ", before this run of evictd started: restored from engine-state.json)" if restored else ")"
        return line


def _threshold_view(threshold: Threshold, explained: Explained) -> ThresholdView:
    status = next((s for s in explained.report.assessment.thresholds if s.threshold == threshold), None)
    observation = explained.report.assessment.observations.get(threshold.signal)
    met = None
    if status is not None:
        # First met before this run of evictd started: the time is the one it restored (not met again since).
        restored = explained.start_state.first_observed_at.get(threshold)
        met = (explained.record.wall - status.observed_for_s, status.observed_for_s, status.grace_met,
               restored is not None and abs(explained.report.now - status.observed_for_s - restored)
               < RESTORED_TIME_TOLERANCE_S)
    return ThresholdView(threshold, None if observation is None else (
        threshold_quantity(threshold.value, observation.capacity), observation.available, observation.capacity), met)


@dataclass(frozen=True, slots=True)
class PodDiskFigures:
    """When the evicted pod's disk figures the decision used were measured, and how long before it."""

    measured: float
    age_s: float
    used_bytes: int | None
    inodes_used: int | None

    def document(self) -> JsonObject:
        return {"measured": wall_text(self.measured), "ageSeconds": round(self.age_s, 3), "usedBytes": self.used_bytes,
                "inodesUsed": self.inodes_used}

    def text(self, pod: str) -> str:
        age = round(self.age_s, 3)
        line = (f"disk figures of {pod}: {_bytes(self.used_bytes)} measured {wall_text(self.measured)} "
                f"({duration_text(age)} before this decision)")
        if age > DEFAULT_STALE_AFTER_S:
            line += (f"; older than {duration_text(DEFAULT_STALE_AFTER_S)}: its last complete measurement (a walk "
                     "that long, or the disk walker behind), used as the kubelet uses its last")
        return line


def _pod_disk_figures(explained: Explained, pod: Pod) -> PodDiskFigures | None:
    summary = explained.report.summary
    stats = None if summary is None else pod_stats_lookup(summary, [pod])(pod)
    storage = None if stats is None else stats.ephemeral_storage
    if storage is None or storage.time is None:
        return None
    measured = storage.time.timestamp()
    return PodDiskFigures(measured, explained.record.wall - measured, storage.used_bytes, storage.inodes_used)


@dataclass(frozen=True, slots=True)
class EvictionExplanation:
    """Why a recorded cycle evicted a pod: the eviction as replayed, the thresholds, the recorded reclaim, the
    pod's disk figures (for disk), and the ranking with each pod's keys and why the pods above it were passed over
    (`signal` None: a local-storage limit, no ranking)."""

    record: Record
    restored: bool | None
    eviction: Eviction
    threshold: ThresholdView | None
    thresholds_met: tuple[ThresholdView, ...]
    reclaim_succeeded: bool | None
    disk: PodDiskFigures | Absent | None  # ABSENT: not a disk eviction
    signal: Signal | None
    ranking: tuple[RankedPod, ...]
    why: tuple[str, ...]

    def document(self) -> JsonObject:
        record, eviction = self.record, self.eviction
        document: JsonObject = {
            "source": "recording",
            "decision": decision_id(record.run, record.cycle),
            "time": wall_text(record.wall),
            "dryRun": record.dry_run,
            "restoredAtRunStart": self.restored,
            "pod": eviction.pod.key,
            "uid": eviction.pod.uid,
            "signal": eviction.signal,
            "message": eviction.message,
            "gracePeriodSeconds": eviction.grace_period_override_s,
            "effectiveGracePeriodSeconds": eviction.effective_grace_period_s,
            "threshold": None if self.threshold is None else self.threshold.document(),
            "thresholdsMet": [view.document() for view in self.thresholds_met],
            "reclaim": [result.document() for result in record.decision.reclaim_results],
            "reclaimSucceeded": self.reclaim_succeeded,
        }
        if record.decision.eviction_api is not None:  # as recorded (replay cannot ask the API)
            document["evictionApi"] = record.decision.eviction_api.document()
        if not isinstance(self.disk, Absent):
            document["podDiskFigures"] = None if self.disk is None else self.disk.document()
        if self.signal is None:
            document.update(ranking=[], why=list(self.why))
            return document
        document["unit"] = usage_unit(self.signal)
        document["ranking"] = [row.document(n, uid=True) for n, row in enumerate(self.ranking, start=1)]
        document["why"] = list(self.why)
        document["notRanked"] = list(NOT_RANKED)
        return document

    def text(self) -> str:
        """The explanation for people, what the recording says escaped (`printable`)."""
        record, eviction = self.record, self.eviction
        verb = "would have evicted" if record.dry_run else "evicted"
        lines = [f"decision {decision_id(record.run, record.cycle)} at {wall_text(record.wall)}: {verb} "
                 f"{eviction.pod.key} for {eviction.signal}, grace {eviction.grace_period_override_s}s "
                 f"(effective {eviction.effective_grace_period_s}s)", f"  message: {eviction.message}", ""]
        run_start = _run_start_text(self.restored)
        if run_start is not None:
            lines += [run_start, ""]
        if self.threshold is not None:
            lines.append(f"threshold acted on: {self.threshold.text()}")
        if not isinstance(self.disk, Absent):
            lines.append(f"disk figures of {eviction.pod.key}: none" if self.disk is None
                         else self.disk.text(eviction.pod.key))
        others = [view for view in self.thresholds_met if view != self.threshold]
        if others:
            lines += ["other thresholds met:", *(f"  {view.text()}" for view in others)]
        reclaim = record.decision.reclaim_results
        if reclaim:
            outcome = "enough" if self.reclaim_succeeded else "not enough"
            ran = ", ".join(f"{r.action} " + (f"failed: {r.error}" if r.error else f"freed {_bytes(r.freed_bytes)}")
                            for r in reclaim)
            lines.append(f"node-level reclaim: {ran} ({outcome})")
        else:
            lines.append("node-level reclaim: none for this signal")
        lines += _eviction_api_lines(record.decision.eviction_api)
        lines = [printable(line) for line in lines]
        if self.signal is not None and self.ranking:
            lines += ["", f"ranking for {self.signal} (usage in {usage_unit(self.signal)}):",
                      _ranking_table(self.signal, self.ranking)]
        lines += ["", "why:", *(printable(f"  {reason}") for reason in self.why)]
        if self.ranking:
            lines.append(f"  never ranked at all: {', '.join(NOT_RANKED)}")
        return "\n".join(lines)


def _eviction_api_lines(use: EvictionApiUse | None) -> list[str]:
    """What the Eviction API answered in the cycle (softEvictionsThroughEvictionAPI), as recorded."""
    if use is None:
        return []
    if use.bypassed is not None:
        return [f"Eviction API not used: {use.bypassed}"]
    return ["through the Eviction API" + (", after refusals:" if use.refusals else ""),
            *(f"  {r.pod}: {r.status} {r.reason}" + (f" (budget {r.budget})" if r.budget else "") + f": {r.message}"
              for r in use.refusals)]


def _eviction_of(explained: Explained, pod_key: str) -> Eviction:
    eviction = next((e for e in explained.report.evictions if e.pod.key == pod_key), None)
    if eviction is None:
        replayed = ", ".join(e.pod.key for e in explained.report.evictions) or "nobody"
        record = explained.record
        cause = (" (the recording does not hold the run's first cycle: it was replayed from a fresh engine state)"
                 if explained.restored is None else "")
        raise EvictdError(
            f"replaying run {record.run} up to cycle {record.cycle} evicted {replayed}, not {pod_key} as recorded"
            f"{cause}; see `evictd replay` for the differences")
    return eviction


def explain_eviction(explained: Explained, pod_key: str) -> EvictionExplanation:
    """Explain the eviction of `pod_key` in the explained cycle."""
    report = explained.report
    eviction = _eviction_of(explained, pod_key)
    threshold = eviction.threshold
    resource = None if threshold is None else spec_of(threshold.signal).resource
    disk: PodDiskFigures | Absent | None = ABSENT
    if threshold is None or resource in (Resource.EPHEMERAL_STORAGE, Resource.INODES):
        disk = _pod_disk_figures(explained, eviction.pod)
    signal = None if threshold is None else threshold.signal
    rows = () if signal is None else tuple(ranked_pods(signal, explained.layout, report.ranking, report, eviction.pod))
    # A local-storage limit: no ranking, the pod itself broke its limit.
    why = (f"{eviction.pod.key} exceeded a local storage limit: {eviction.message}",) if signal is None else \
        _why(signal, rows)
    return EvictionExplanation(
        record=explained.record, restored=explained.restored, eviction=eviction,
        threshold=None if threshold is None else _threshold_view(threshold, explained),
        thresholds_met=tuple(_threshold_view(s.threshold, explained) for s in report.assessment.thresholds),
        reclaim_succeeded=report.reclaim_succeeded, disk=disk, signal=signal, ranking=rows, why=why)


def _why(signal: Signal, rows: Sequence[RankedPod]) -> tuple[str, ...]:
    position = next(i for i, row in enumerate(rows) if row.outcome == "evicted")
    chosen = rows[position]
    why = [f"{row.pod.key} ranked above it but is never evicted: {row.outcome.removeprefix('skipped: ')}"
           for row in rows[:position]]
    # Against the next pod that could have gone instead (critical pods below it never could).
    following = next((row for row in rows[position + 1:] if not row.outcome), None)
    if following is not None:
        why.append(why_before(signal, chosen.pod, chosen.keys, following.pod, following.keys))
    else:
        why.append(f"{chosen.pod.key} was the only pod that could be evicted")
    return tuple(why)


def _run_start_text(restored: bool | None) -> str | None:
    """What the explanation says about the engine state the run was replayed from (None: nothing to say)."""
    if restored is True:
        return ("this run of evictd started from the engine state it restored after a restart (engine-state.json): "
                "grace periods and conditions under way then went on")
    if restored is None:
        return ("the recording does not hold this run's first cycle (rotated out, or before --since): it was "
                "replayed from a fresh engine state, so grace periods may show as first met later than they were")
    return None


# --- what would be evicted next -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SignalDistance:
    """One threshold at the newest cycle: its state, and (with a reading) how far the signal is from it."""

    threshold: Threshold
    state: str
    reading: tuple[int, int] | None  # available, threshold quantity

    def document(self) -> JsonObject:
        threshold = self.threshold
        item: JsonObject = {"signal": str(threshold.signal), "kind": _kind(threshold),
                            "value": value_json(threshold.value),
                            "gracePeriodSeconds": seconds_json(threshold.grace_period_s), "state": self.state}
        if self.reading is not None:
            available, quantity = self.reading
            item.update(available=available, threshold=quantity, distance=available - quantity)
        return item

    def row(self) -> tuple[str, ...]:
        signal = self.threshold.signal
        cells = (str(signal), f"{_kind(self.threshold)} < {value_text(self.threshold.value)}")
        if self.reading is None:
            return (*cells, "no data", "-", "-", self.state)
        available, quantity = self.reading
        return (*cells, human(available, signal), human(quantity, signal), human(available - quantity, signal),
                self.state)


@dataclass(frozen=True, slots=True)
class NowExplanation:
    """The newest recorded cycle: how old it is at the time asked (`current`: recent enough to be now), each
    threshold's distance from its signal's reading, and the head of the eviction order (`basis`: which)."""

    record: Record
    age_s: float
    current: bool
    conditions: tuple[str, ...]
    signals: tuple[SignalDistance, ...]
    signal: Signal
    basis: str
    ranking: tuple[RankedPod, ...]

    @property
    def next_to_go(self) -> str | None:
        return next((row.pod.key for row in self.ranking if not row.outcome), None)

    def document(self) -> JsonObject:
        record = self.record
        return {
            "decision": decision_id(record.run, record.cycle),
            "time": wall_text(record.wall),
            "ageSeconds": round(self.age_s, 3),
            "current": self.current,
            "conditions": list(self.conditions),
            "signals": [item.document() for item in self.signals],
            "ranking": {"signal": str(self.signal), "basis": self.basis, "unit": usage_unit(self.signal),
                        "next": self.next_to_go,
                        "pods": [row.document(n, uid=False)
                                 for n, row in enumerate(self.ranking[:RANKING_SHOWN_NOW], start=1)],
                        "more": max(0, len(self.ranking) - RANKING_SHOWN_NOW)},
        }

    def text(self) -> str:
        """The newest cycle for people, what the recording says escaped (`printable`)."""
        record = self.record
        decision, time = decision_id(record.run, record.cycle), wall_text(record.wall)
        age = duration_text(round(self.age_s, 3))
        if self.current:
            lines = [f"as of cycle {decision} at {time} (the newest recorded, {age} ago)"]
        else:
            lines = [f"NOT NOW: the newest recorded cycle, {decision} at {time}, is {age} old (evictd is not running "
                     "with its recorder on, or --until asked for an earlier one); the node as it was then:"]
        lines = [printable(line) for line in (*lines, f"node conditions: {', '.join(self.conditions) or 'none'}")]
        lines += ["", table(("SIGNAL", "THRESHOLD", "AVAILABLE", "THRESHOLD NOW", "DISTANCE", "STATE"),
                            [item.row() for item in self.signals]), ""]
        if not self.ranking:
            lines.append(f"eviction order: none ({self.basis})")
            return "\n".join(lines)
        lines += [printable(f"eviction order: {self.basis}; next to go: {self.next_to_go or 'nobody (all critical)'}"),
                  _ranking_table(self.signal, self.ranking[:RANKING_SHOWN_NOW])]
        if len(self.ranking) > RANKING_SHOWN_NOW:
            lines.append(f"... and {len(self.ranking) - RANKING_SHOWN_NOW} more")
        return "\n".join(lines)


def explain_now(explained: Explained, *, now_wall: float, stale_after: float) -> NowExplanation:
    """The newest cycle at `now_wall`, current when it is at most `stale_after` seconds old; the eviction order is
    this cycle's ranking, or the one for the signal nearest a threshold."""
    record, report = explained.record, explained.report
    assessment = report.assessment
    met = {status.threshold: status for status in assessment.thresholds}
    thresholds, _ = derive_containerfs_thresholds(explained.config.thresholds, explained.layout)
    signals: list[SignalDistance] = []
    nearest: tuple[float, Signal] | None = None
    for threshold in thresholds:
        if threshold.operator is None:
            continue
        observation = assessment.observations.get(threshold.signal)
        status = met.get(threshold)
        state = ("no reading" if observation is None else "ok" if status is None
                 else "met" if threshold.is_hard or status.grace_met
                 else f"in grace {status.observed_for_s:.0f}/{threshold.grace_period_s:g}s")
        reading = None
        if observation is not None:
            quantity = threshold_quantity(threshold.value, observation.capacity).ceil_int()
            available = observation.available.ceil_int()
            reading = (available, quantity)
            share = (available - quantity) / max(1, observation.capacity.ceil_int())
            if nearest is None or share < nearest[0]:
                nearest = (share, threshold.signal)
        signals.append(SignalDistance(threshold, state, reading))
    step = assessment.next_step
    if report.ranking and isinstance(step, ReclaimThenEvict):
        signal, ranking, why = step.threshold.signal, report.ranking, "this cycle's ranking"
    elif nearest is not None and report.summary is not None:
        signal = nearest[1]
        stats_of = pod_stats_lookup(report.summary, report.pods)
        ranking = tuple(rank_pods(signal, explained.layout, report.pods, stats_of))
        why = f"the order if {signal} reached its threshold (the signal nearest one)"
    else:
        signal, ranking, why = Signal.MEMORY_AVAILABLE, (), "no thresholds with readings"
    rows = ranked_pods(signal, explained.layout, ranking, report, None) if ranking else []
    age_s = now_wall - record.wall
    return NowExplanation(record=record, age_s=age_s, current=age_s <= stale_after,
                          conditions=tuple(str(c) for c in assessment.node_conditions), signals=tuple(signals),
                          signal=signal, basis=why, ranking=tuple(rows))


# --- the command ------------------------------------------------------------------------------------------------


class Explanation(Protocol):
    """What `evictd explain` prints: its `--output json` document, or its text."""

    def document(self) -> JsonObject: ...

    def text(self) -> str: ...


@dataclass(frozen=True, slots=True)
class _Pass:
    """One pass over a recording: each cycle's head, and the last cycle and the last eviction replayed."""

    heads: list[RecordHead]
    last: Explained | None
    last_eviction: Explained | None


def _replay_all(records: Iterable[Record]) -> _Pass:
    """Read `records` once, keeping each one's head and replaying every run (`--last` and `--now` explain the
    newest: one pass instead of one for the heads and one more for the run explained)."""
    heads: list[RecordHead] = []

    def counted() -> Iterator[Record]:
        for record in records:
            heads.append(record_head(record))
            yield record

    last = last_eviction = None
    for run in replayed_runs(counted()):
        for record, report in run.cycles:
            last = Explained(record, report, run.config, run.layout, run.start_state, run.restored)
            if record.decision.evicted:
                last_eviction = last
    return _Pass(heads, last, last_eviction)


def _replayed(explained: Explained | None, target: RecordHead) -> Explained:
    """`explained`, when it is the cycle `target` (else an EvictdError saying why that cycle is not replayed)."""
    if not target.read_stats:
        raise EvictdError(f"cycle {decision_id(target.run, target.cycle)} read no stats: nothing was decided")
    if explained is None or (explained.record.run, explained.record.cycle, explained.record.wall) != (
            target.run, target.cycle, target.wall):
        raise EvictdError(f"cycle {decision_id(target.run, target.cycle)} cannot be replayed (the recording changed "
                          "while it was read, or its readings do not decode)")
    return explained


def explain(recording: Recording, state_dir: str, *, pod: str | None = None, decision: str | None = None,
            now: bool = False, housekeeping_interval_s: float, now_wall: float, warn: Problem) -> Explanation:
    """Explain the eviction of `pod` (namespace/name, name or UID), of decision id `decision`, the last one (neither),
    or with `now` the newest cycle, from `recording` or, when it does not hold it, the journal in `state_dir`;
    `warn` is told what a person should know. Raises EvictdError when neither holds it."""
    # --last and --now: one pass, replaying as it reads. A pod or a decision: first what cycles there are (their
    # heads only), then the run of the one explained, replayed up to it.
    newest = now or (pod is None and decision is None)
    passed = _replay_all(recording) if newest else None
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
        newest_cycle = explain_now(_replayed(passed.last, heads[-1]), now_wall=now_wall,
                                   stale_after=stale_after_s(housekeeping_interval_s))
        if not newest_cycle.current:
            warn(f"the newest recorded cycle is {round(newest_cycle.age_s, 3):g} s old: this is not now")
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
    explained = _replayed(passed.last_eviction, target) if passed is not None else replay_until(
        recording.cycles(run=target.run), target)
    return explain_eviction(explained, pod_key)

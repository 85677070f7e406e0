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

A decision id is `<run>/<cycle>`: the run of evictd (its start time and PID, as the recording names it) and
the cycle number, as the eviction's log line and the live view print it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from evictd.adapters.pod_disk_usage import DEFAULT_STALE_AFTER_S
from evictd.commands.render import JsonObject, seconds_json, table, value_json
from evictd.core.engine import EngineConfig, EngineState, Eviction, ReclaimThenEvict
from evictd.core.errors import EvictdError
from evictd.core.fs_layout import FsLayout
from evictd.core.pods import SYSTEM_CRITICAL_PRIORITY, Pod, is_critical_pod, is_mirror_pod, is_static_pod
from evictd.core.ranking import rank_pods, sort_key
from evictd.core.signals import BYTE_SIGNALS, SIGNAL_TO_RESOURCE, Resource, Signal
from evictd.core.summary import pod_stats_lookup
from evictd.core.thresholds import Threshold, derive_containerfs_thresholds, threshold_quantity
from evictd.observe.live_view import human
from evictd.record.explain_journal import from_journal, journal_text
from evictd.record.model import Document, rank_keys
from evictd.record.recording import Record, Recording, decision_id
from evictd.record.replay import replayed_runs, wall_text
from evictd.record.segment_files import Problem
from evictd.run.manager import CycleReport

# Pods that are never in the ranking at all, whatever their usage (they are not in the pod list evictd ranks).
NOT_RANKED = ("evictd's own pod", "pods evictd already evicted (its journal)", "pods that finished (Succeeded, "
              "Failed)")
RANKING_SHOWN_NOW = 5
# `--now` calls the newest recorded cycle current while it is at most this many housekeeping intervals old, and
# at least MIN_STALE_AFTER_S (a running daemon's recorder writes every cycle).
STALE_AFTER_INTERVALS = 3
MIN_STALE_AFTER_S = 30.0
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
    """The unit of the usage a signal ranks pods by."""
    resource = SIGNAL_TO_RESOURCE[signal]
    return {Resource.INODES: "inodes", Resource.PIDS: "processes"}.get(resource, "bytes")


def _amount(value: object, signal: Signal) -> str:
    if value is None:
        return "no stats"
    number = int(float(str(value)))
    return human(number, signal) if signal in BYTE_SIGNALS else f"{number:,} {usage_unit(signal)}"


def critical_reason(pod: Pod) -> str | None:
    """Why the manager never evicts `pod` (None: it may)."""
    if is_static_pod(pod):
        return "a static pod"
    if is_mirror_pod(pod):
        return "a mirror pod"
    if is_critical_pod(pod):
        return f"priority {pod.priority} (system-critical, at least {SYSTEM_CRITICAL_PRIORITY})"
    return None


def _usage_key(keys: Mapping[str, object]) -> str:
    return "processes" if "processes" in keys else "usageAboveRequest"


def why_before(signal: Signal, first: Pod, first_keys: Mapping[str, object], second: Pod,
               second_keys: Mapping[str, object]) -> str:
    """Say which of `rank_pods`' keys put `first` before `second` (the first key that tells them apart)."""
    a, b = first.key, second.key
    resource = SIGNAL_TO_RESOURCE[signal]
    if "exceedsRequests" in first_keys and first_keys["exceedsRequests"] != second_keys.get("exceedsRequests"):
        if first_keys["exceedsRequests"] is None:
            return f"{a} had no stats (pods without stats rank first)"
        return f"{a} used more {resource} than it requests and {b} did not"
    if first_keys["priority"] != second_keys["priority"]:
        return f"{a} has a lower priority ({first_keys['priority']}) than {b} ({second_keys['priority']})"
    usage = _usage_key(first_keys)
    if first_keys[usage] != second_keys.get(usage):
        if first_keys[usage] is None:
            return f"{a} had no stats (pods without stats rank first)"
        what = "processes" if usage == "processes" else "usage above its request"
        return (f"{a} had more {what} ({_amount(first_keys[usage], signal)}) than {b} "
                f"({_amount(second_keys[usage], signal)})")
    return f"{a} and {b} tie on every key: the pod list's order decided"


@dataclass(frozen=True, slots=True)
class RankedPod:
    """One pod of a ranking, with the keys it was sorted by and what became of it."""

    pod: Pod
    keys: Mapping[str, object]
    outcome: str


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
        rows.append(RankedPod(pod, rank_keys(signal, sort_key(signal, layout, pod, stats_of(pod))).document(),
                              outcome))
    return rows


# --- explaining an eviction -----------------------------------------------------------------------------------


def _threshold_json(threshold: Threshold, explained: Explained) -> JsonObject:
    status = next((s for s in explained.report.assessment.thresholds if s.threshold == threshold), None)
    observation = explained.report.assessment.observations.get(threshold.signal)
    item: JsonObject = {
        "signal": str(threshold.signal),
        "kind": "hard" if threshold.is_hard else "soft",
        "value": value_json(threshold.value),
        "gracePeriodSeconds": seconds_json(threshold.grace_period_s),
        "minReclaim": value_json(threshold.min_reclaim) if threshold.min_reclaim is not None else None,
    }
    if observation is not None:
        item["threshold"] = str(threshold_quantity(threshold.value, observation.capacity))
        item["available"] = str(observation.available)
        item["capacity"] = str(observation.capacity)
    if status is not None:
        item["firstMet"] = wall_text(explained.record.wall - status.observed_for_s)
        item["metForSeconds"] = round(status.observed_for_s, 3)
        item["graceMet"] = status.grace_met
        # First met before this run of evictd started: the time is the one it restored (not met again since).
        restored = explained.start_state.first_observed_at.get(threshold)
        item["firstMetRestored"] = restored is not None and abs(
            explained.report.now - status.observed_for_s - restored) < RESTORED_TIME_TOLERANCE_S
    return item


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


def explanation_json(explained: Explained, pod_key: str) -> JsonObject:
    """The `--output json` document explaining the eviction of `pod_key` in the explained cycle."""
    record, report = explained.record, explained.report
    eviction = _eviction_of(explained, pod_key)
    document: JsonObject = {
        "source": "recording",
        "decision": decision_id(record.run, record.cycle),
        "time": wall_text(record.wall),
        "dryRun": record.dry_run,
        "restoredAtRunStart": explained.restored,
        "pod": eviction.pod.key,
        "uid": eviction.pod.uid,
        "signal": eviction.signal,
        "message": eviction.message,
        "gracePeriodSeconds": eviction.grace_period_override_s,
        "effectiveGracePeriodSeconds": eviction.effective_grace_period_s,
        "threshold": _threshold_json(eviction.threshold, explained) if eviction.threshold is not None else None,
        "thresholdsMet": [_threshold_json(s.threshold, explained) for s in report.assessment.thresholds],
        "reclaim": _recorded_reclaim(record),
        "reclaimSucceeded": report.reclaim_succeeded,
    }
    signal_resource = None if eviction.threshold is None else SIGNAL_TO_RESOURCE.get(eviction.threshold.signal)
    if eviction.threshold is None or signal_resource in (Resource.EPHEMERAL_STORAGE, Resource.INODES):
        document["podDiskFigures"] = _pod_disk_json(explained, eviction.pod)
    if eviction.threshold is None:  # a local-storage limit: no ranking, the pod itself broke its limit
        document.update(ranking=[], why=[f"{eviction.pod.key} exceeded a local storage limit: {eviction.message}"])
        return document
    signal = eviction.threshold.signal
    rows = ranked_pods(signal, explained.layout, report.ranking, report, eviction.pod)
    document["unit"] = usage_unit(signal)
    document["ranking"] = [{"rank": n, "pod": row.pod.key, "uid": row.pod.uid, **row.keys,
                            "outcome": row.outcome or None} for n, row in enumerate(rows, start=1)]
    document["why"] = _why(signal, rows)
    document["notRanked"] = list(NOT_RANKED)
    return document


def _pod_disk_json(explained: Explained, pod: Pod) -> JsonObject | None:
    """When the pod's disk figures the decision used were measured, and how long before it (None: it had none)."""
    summary = explained.report.summary
    stats = None if summary is None else pod_stats_lookup(summary, [pod])(pod)
    storage = None if stats is None else stats.ephemeral_storage
    if storage is None or storage.time is None:
        return None
    measured = storage.time.timestamp()
    return {"measured": wall_text(measured), "ageSeconds": round(explained.record.wall - measured, 3),
            "usedBytes": storage.used_bytes, "inodesUsed": storage.inodes_used}


def _pod_disk_text(pod: object, figures: object) -> str:
    if not isinstance(figures, Mapping):
        return f"disk figures of {pod}: none"
    age = float(figures["ageSeconds"])
    line = (f"disk figures of {pod}: {_bytes(figures['usedBytes'])} measured {figures['measured']} "
            f"({duration_text(age)} before this decision)")
    if age > DEFAULT_STALE_AFTER_S:
        line += (f"; older than {duration_text(DEFAULT_STALE_AFTER_S)}: its last complete measurement (a walk that "
                 "long, or the disk walker behind), used as the kubelet uses its last")
    return line


def _recorded_reclaim(record: Record) -> list[object]:
    return [result.document() for result in record.decision.reclaim_results]


def _why(signal: Signal, rows: Sequence[RankedPod]) -> list[str]:
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
    return why


def _threshold_line(item: Mapping[str, object]) -> str:
    value = item["value"]
    assert isinstance(value, Mapping)
    shown = value.get("quantity") or f"{float(str(value.get('percentage'))) * 100:.6g}%"
    line = f"{item['signal']} < {shown} ({item['kind']}"
    line += ")" if item["kind"] == "hard" else f", grace {item['gracePeriodSeconds']}s)"
    if "available" in item:
        line += f": available {item['available']} of {item['capacity']}, threshold {item['threshold']}"
    if "firstMet" in item:
        line += f"; first met {item['firstMet']} ({item['metForSeconds']:g}s before"
        line += ", before this run of evictd started: restored from engine-state.json)" \
            if item.get("firstMetRestored") else ")"
    return line


def _run_start_text(restored: object) -> str | None:
    """What the explanation says about the engine state the run was replayed from (None: nothing to say)."""
    if restored is True:
        return ("this run of evictd started from the engine state it restored after a restart (engine-state.json): "
                "grace periods and conditions under way then went on")
    if restored is None:
        return ("the recording does not hold this run's first cycle (rotated out, or before --since): it was "
                "replayed from a fresh engine state, so grace periods may show as first met later than they were")
    return None


def explanation_text(document: Mapping[str, object]) -> str:
    """The text form of `explanation_json`'s document."""
    verb = "would have evicted" if document["dryRun"] else "evicted"
    lines = [f"decision {document['decision']} at {document['time']}: {verb} {document['pod']} for "
             f"{document['signal']}, grace {document['gracePeriodSeconds']}s "
             f"(effective {document['effectiveGracePeriodSeconds']}s)",
             f"  message: {document['message']}", ""]
    run_start = _run_start_text(document.get("restoredAtRunStart"))
    if run_start is not None:
        lines += [run_start, ""]
    threshold = document["threshold"]
    if isinstance(threshold, Mapping):
        lines.append(f"threshold acted on: {_threshold_line(threshold)}")
    if "podDiskFigures" in document:
        lines.append(_pod_disk_text(document["pod"], document["podDiskFigures"]))
    met = [t for t in document["thresholdsMet"] if isinstance(t, Mapping)]  # type: ignore[attr-defined]
    others = [t for t in met if t != threshold]
    if others:
        lines += ["other thresholds met:", *(f"  {_threshold_line(t)}" for t in others)]
    reclaim = [r for r in document["reclaim"] if isinstance(r, Mapping)]  # type: ignore[attr-defined]
    if reclaim:
        outcome = "enough" if document["reclaimSucceeded"] else "not enough"
        ran = ", ".join(f"{r.get('action')} " + (f"failed: {r['error']}" if r.get("error") else
                                                  f"freed {_bytes(r.get('freedBytes'))}") for r in reclaim)
        lines.append(f"node-level reclaim: {ran} ({outcome})")
    else:
        lines.append("node-level reclaim: none for this signal")
    ranking = [r for r in document["ranking"] if isinstance(r, Mapping)]  # type: ignore[attr-defined]
    if ranking:
        signal = Signal(str(document["signal"]))
        lines += ["", f"ranking for {signal} (usage in {document['unit']}):", _ranking_table(signal, ranking)]
    lines += ["", "why:", *(f"  {reason}" for reason in document["why"])]  # type: ignore[attr-defined]
    if ranking:
        lines.append(f"  never ranked at all: {', '.join(NOT_RANKED)}")
    return "\n".join(lines)


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: 4.2s, 3m12s, 5h07m, 2d03h."""
    if seconds < 60:
        return f"{max(seconds, 0.0):.1f}s"
    whole = int(seconds)
    for unit, size, smaller, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            return f"{whole // size}{unit}{whole % size // small_size:02d}{smaller}"
    return f"{whole}s"


def _bytes(value: object) -> str:
    return human(int(str(value or 0)), Signal.NODEFS_AVAILABLE)


def _yes_no(value: object) -> str:
    return "-" if value is None else "yes" if value else "no"


def _ranking_table(signal: Signal, ranking: Sequence[Mapping[str, object]]) -> str:
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]
    if signal is not Signal.PID_AVAILABLE:
        headers = ("#", "POD", "EXCEEDS REQUEST", "PRIORITY", "USAGE - REQUEST", "OUTCOME")
        rows = [(str(r["rank"]), str(r["pod"]), _yes_no(r.get("exceedsRequests")), str(r["priority"]),
                 _amount(r.get("usageAboveRequest"), signal), str(r.get("outcome") or "")) for r in ranking]
    else:
        headers = ("#", "POD", "PRIORITY", "PROCESSES", "OUTCOME")
        rows = [(str(r["rank"]), str(r["pod"]), str(r["priority"]), _amount(r.get("processes"), signal),
                 str(r.get("outcome") or "")) for r in ranking]
    return table(headers, rows)


# --- what would be evicted next -------------------------------------------------------------------------------


def stale_after_s(housekeeping_interval_s: float) -> float:
    """How old the newest recorded cycle may be and still be "now": a running recorder writes every cycle."""
    return max(STALE_AFTER_INTERVALS * housekeeping_interval_s, MIN_STALE_AFTER_S)


def now_json(explained: Explained, *, now_wall: float, stale_after: float) -> JsonObject:
    """The `--now` document: how old the cycle is at `now_wall` and whether it is current (at most `stale_after`
    seconds old), each threshold's distance from its signal's reading, and the head of the eviction order (this
    cycle's ranking, or the one for the signal nearest a threshold)."""
    record, report = explained.record, explained.report
    age_s = now_wall - record.wall
    assessment = report.assessment
    met = {status.threshold: status for status in assessment.thresholds}
    thresholds, _ = derive_containerfs_thresholds(explained.config.thresholds, explained.layout)
    signals: list[JsonObject] = []
    nearest: tuple[float, Signal] | None = None
    for threshold in thresholds:
        if threshold.operator is None:
            continue
        observation = assessment.observations.get(threshold.signal)
        item: JsonObject = {"signal": str(threshold.signal), "kind": "hard" if threshold.is_hard else "soft",
                            "value": value_json(threshold.value),
                            "gracePeriodSeconds": seconds_json(threshold.grace_period_s)}
        status = met.get(threshold)
        item["state"] = ("no reading" if observation is None else "ok" if status is None
                         else "met" if threshold.is_hard or status.grace_met
                         else f"in grace {status.observed_for_s:.0f}/{threshold.grace_period_s:g}s")
        if observation is not None:
            quantity = threshold_quantity(threshold.value, observation.capacity).ceil_int()
            available = observation.available.ceil_int()
            item.update(available=available, threshold=quantity, distance=available - quantity)
            share = (available - quantity) / max(1, observation.capacity.ceil_int())
            if nearest is None or share < nearest[0]:
                nearest = (share, threshold.signal)
        signals.append(item)
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
    following = next((row.pod.key for row in rows if not row.outcome), None)
    return {
        "decision": decision_id(record.run, record.cycle),
        "time": wall_text(record.wall),
        "ageSeconds": round(age_s, 3),
        "current": age_s <= stale_after,
        "conditions": [str(c) for c in assessment.node_conditions],
        "signals": signals,
        "ranking": {"signal": str(signal), "basis": why, "unit": usage_unit(signal), "next": following,
                    "pods": [{"rank": n, "pod": row.pod.key, **row.keys, "outcome": row.outcome or None}
                             for n, row in enumerate(rows[:RANKING_SHOWN_NOW], start=1)],
                    "more": max(0, len(rows) - RANKING_SHOWN_NOW)},
    }


def now_text(document: Mapping[str, object]) -> str:
    """The text form of `now_json`'s document."""
    conditions = document["conditions"]
    age = duration_text(float(document["ageSeconds"]))  # type: ignore[arg-type]
    if document["current"]:
        lines = [f"as of cycle {document['decision']} at {document['time']} (the newest recorded, {age} ago)"]
    else:
        lines = [f"NOT NOW: the newest recorded cycle, {document['decision']} at {document['time']}, is {age} old "
                 "(evictd is not running with its recorder on, or --until asked for an earlier one); the node as it "
                 "was then:"]
    lines += [f"node conditions: {', '.join(conditions) or 'none'}", ""]  # type: ignore[arg-type]
    rows = []
    for item in document["signals"]:  # type: ignore[attr-defined]
        signal = Signal(item["signal"])
        value = item["value"]
        shown = value.get("quantity") or f"{float(value.get('percentage')) * 100:.6g}%"
        reading = "available" in item
        rows.append((str(signal), f"{item['kind']} < {shown}",
                     human(item["available"], signal) if reading else "no data",
                     human(item["threshold"], signal) if reading else "-",
                     human(item["distance"], signal) if reading else "-", item["state"]))
    lines.append(table(("SIGNAL", "THRESHOLD", "AVAILABLE", "THRESHOLD NOW", "DISTANCE", "STATE"), rows))
    ranking = document["ranking"]
    assert isinstance(ranking, Mapping)
    pods = ranking["pods"]
    lines.append("")
    if not pods:
        lines.append(f"eviction order: none ({ranking['basis']})")
        return "\n".join(lines)
    signal = Signal(str(ranking["signal"]))
    lines += [f"eviction order: {ranking['basis']}; next to go: {ranking['next'] or 'nobody (all critical)'}",
              _ranking_table(signal, pods)]
    if ranking["more"]:
        lines.append(f"... and {ranking['more']} more")
    return "\n".join(lines)


# --- the command ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Explanation:
    """What `evictd explain` prints: its `--output json` document, and the function writing that as text."""

    document: JsonObject
    text: Callable[[Mapping[str, object]], str]


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
        document = now_json(_replayed(passed.last, heads[-1]), now_wall=now_wall,
                            stale_after=stale_after_s(housekeeping_interval_s))
        if not document["current"]:
            warn(f"the newest recorded cycle is {document['ageSeconds']:g} s old: this is not now")
        return Explanation(document, now_text)
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
        return Explanation(journal, journal_text)
    target = heads[index]
    explained = _replayed(passed.last_eviction, target) if passed is not None else replay_until(
        recording.cycles(run=target.run), target)
    return Explanation(explanation_json(explained, pod_key), explanation_text)

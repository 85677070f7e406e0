"""`evictd explain` of one eviction: each threshold met, the node-level reclaim, the whole ranking with each pod's
keys, and why the pods ranked above the evicted one were passed over."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evictd.adapters.pod_disk_usage import DEFAULT_STALE_AFTER_S
from evictd.commands.explain_cycle import Explained
from evictd.commands.explain_ranking import (
    RankedPod,
    bytes_text,
    duration_text,
    ranked_pods,
    ranking_table,
    threshold_kind,
    usage_unit,
    why_before,
)
from evictd.commands.replay import wall_text
from evictd.core.engine import Eviction
from evictd.core.errors import EvictdError
from evictd.core.pods import NEVER_EVICTED, Pod
from evictd.core.quantity import Quantity
from evictd.core.signals import Resource, Signal, spec_of
from evictd.core.summary import pod_stats_lookup
from evictd.core.thresholds import Threshold, threshold_quantity
from evictd.cycle.ids import decision_id
from evictd.cycle.render import (
    JsonObject,
    condition_text,
    printable,
    seconds_json,
    value_json,
    value_text,
)
from evictd.cycle.report import EvictionApiUse
from evictd.record.decision import eviction_api_document
from evictd.record.line_json import ABSENT, Absent
from evictd.record.recording import Record

# Pods that are never in the ranking at all, whatever their usage (they are not in the pod list evictd ranks).
NOT_RANKED = ("evictd's own pod", "pods evictd already evicted (its journal)", "pods that finished (Succeeded, "
              "Failed)")
# A first-met time this close to the restored one is that one (the same float, give or take rounding).
RESTORED_TIME_TOLERANCE_S = 1e-6


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
            "signal": str(threshold.signal), "kind": threshold_kind(threshold), "value": value_json(threshold.value),
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
        stall = spec_of(threshold.signal).stall_family
        checks = condition_text(threshold.signal, threshold.value) if stall else \
            f"{threshold.signal} < {value_text(threshold.value)}"
        line = f"{checks} ({threshold_kind(threshold)}"
        line += ")" if threshold.is_hard else f", grace {seconds_json(threshold.grace_period_s)}s)"
        if self.observation is not None:
            quantity, available, capacity = self.observation
            line += f": available {available} of {capacity}, threshold {quantity}"
            if stall:
                line += (" (stall headroom in basis points of the kernel's 10 s window)"
                         if spec_of(threshold.signal).stall is not None else
                         " (refault headroom in basis points of the daemons' memory)"
                         if threshold.signal is Signal.DAEMONS_REFAULT else
                         " (refault headroom in basis points of the node's memory)")
        if self.met is not None:
            first_met, met_for, _, restored = self.met
            line += f"; first met {wall_text(first_met)} ({round(met_for, 3):g}s before"
            line += ", before this run of evictd started: restored from engine-state.json)" if restored else ")"
        return line


def _threshold_view(threshold: Threshold, explained: Explained) -> ThresholdView:
    assessment = explained.report.decided.assessment
    status = next((s for s in assessment.thresholds if s.threshold == threshold), None)
    observation = assessment.observations.get(threshold.signal)
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
        line = (f"disk figures of {pod}: {bytes_text(self.used_bytes)} measured {wall_text(self.measured)} "
                f"({duration_text(age)} before this decision)")
        if age > DEFAULT_STALE_AFTER_S:
            line += (f"; older than {duration_text(DEFAULT_STALE_AFTER_S)}: its last complete measurement (a walk "
                     "that long, or the disk walker behind), used as the kubelet uses its last")
        return line


def _pod_disk_figures(explained: Explained, pod: Pod) -> PodDiskFigures | None:
    summary = explained.report.ranked_on
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
            document["evictionApi"] = eviction_api_document(record.decision.eviction_api)
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
            ran = ", ".join(f"{r.action} " + (f"failed: {r.error}" if r.error else f"freed {bytes_text(r.freed_bytes)}")
                            for r in reclaim)
            lines.append(f"node-level reclaim: {ran} ({outcome})")
        else:
            lines.append("node-level reclaim: none for this signal")
        lines += _eviction_api_lines(record.decision.eviction_api)
        lines = [printable(line) for line in lines]
        if self.signal is not None and self.ranking:
            lines += ["", f"ranking for {self.signal} (usage in {usage_unit(self.signal)}):",
                      ranking_table(self.signal, self.ranking)]
        lines += ["", "why:", *(printable(f"  {reason}") for reason in self.why)]
        if self.ranking:
            lines.append(f"  never ranked at all: {', '.join(NOT_RANKED)}")
        return "\n".join(lines)


def _eviction_api_lines(use: EvictionApiUse | None) -> list[str]:
    """What the Eviction API answered in the cycle (softEvictionsThroughEvictionAPI), as recorded."""
    if use is None:
        return []
    lines = [f"Eviction API not used: {use.bypassed}"] if use.bypassed is not None else []
    if use.asked or use.waiting:
        lines.append(f"Eviction API asked off the loop for: {', '.join(use.asked) or use.waiting}")
    if use.evicted is not None or use.refusals or use.failure is not None:
        lines += [("through the Eviction API" if use.evicted is not None else "not evicted through the Eviction API")
                  + (", after refusals:" if use.refusals else ""),
                  *(f"  {r.pod}: {r.status} {r.reason}" + (f" (budget {r.budget})" if r.budget else "")
                    + f": {r.message}" for r in use.refusals)]
    if use.failure is not None:
        lines.append(f"  no answer: {use.failure}")
    return lines


def _eviction_of(explained: Explained, pod_key: str) -> Eviction:
    evictions = explained.report.acted.evictions
    eviction = next((e for e in evictions if e.pod.key == pod_key), None)
    if eviction is None:
        replayed = ", ".join(e.pod.key for e in evictions) or "nobody"
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
    rows = () if signal is None else tuple(ranked_pods(signal, explained.layout, report.decided.ranked_pods, report,
                                                       eviction.pod))
    # A local-storage limit: no ranking, the pod itself broke its limit.
    why = (f"{eviction.pod.key} exceeded a local storage limit: {eviction.message}",) if signal is None else \
        _why(signal, rows)
    return EvictionExplanation(
        record=explained.record, restored=explained.restored, eviction=eviction,
        threshold=None if threshold is None else _threshold_view(threshold, explained),
        thresholds_met=tuple(_threshold_view(s.threshold, explained) for s in report.decided.assessment.thresholds),
        reclaim_succeeded=report.acted.reclaim_succeeded, disk=disk, signal=signal, ranking=rows, why=why)


def _why(signal: Signal, rows: Sequence[RankedPod]) -> tuple[str, ...]:
    position = next(i for i, row in enumerate(rows) if row.outcome == "evicted")
    chosen = rows[position]
    why = [f"{row.pod.key} ranked above it but is never evicted: {row.outcome.removeprefix(NEVER_EVICTED)}"
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

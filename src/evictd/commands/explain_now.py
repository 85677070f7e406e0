"""`evictd explain --now`: how far each signal of the newest recorded cycle is from each threshold, and the head of
the eviction order, with how old that cycle is."""

from __future__ import annotations

from dataclasses import dataclass

from evictd.commands.explain_cycle import Explained
from evictd.commands.explain_ranking import (
    RankedPod,
    duration_text,
    ranked_pods,
    ranking_table,
    threshold_kind,
    usage_unit,
)
from evictd.commands.replay import wall_text
from evictd.core.engine import ReclaimThenEvict
from evictd.core.ranking import rank_pods
from evictd.core.signals import Signal
from evictd.core.summary import pod_stats_lookup
from evictd.core.thresholds import Threshold, derive_containerfs_thresholds, threshold_quantity
from evictd.cycle.ids import decision_id
from evictd.cycle.render import (
    JsonObject,
    human,
    printable,
    seconds_json,
    table,
    value_json,
    value_text,
)
from evictd.record.recording import Record

RANKING_SHOWN_NOW = 5


# --- what would be evicted next -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SignalDistance:
    """One threshold at the newest cycle: its state, and (with a reading) how far the signal is from it."""

    threshold: Threshold
    state: str
    reading: tuple[int, int] | None  # available, threshold quantity

    def document(self) -> JsonObject:
        threshold = self.threshold
        item: JsonObject = {"signal": str(threshold.signal), "kind": threshold_kind(threshold),
                            "value": value_json(threshold.value),
                            "gracePeriodSeconds": seconds_json(threshold.grace_period_s), "state": self.state}
        if self.reading is not None:
            available, quantity = self.reading
            item.update(available=available, threshold=quantity, distance=available - quantity)
        return item

    def row(self) -> tuple[str, ...]:
        signal = self.threshold.signal
        cells = (str(signal), f"{threshold_kind(self.threshold)} < {value_text(self.threshold.value)}")
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
                  ranking_table(self.signal, self.ranking[:RANKING_SHOWN_NOW])]
        if len(self.ranking) > RANKING_SHOWN_NOW:
            lines.append(f"... and {len(self.ranking) - RANKING_SHOWN_NOW} more")
        return "\n".join(lines)


def explain_now(explained: Explained, *, now_wall: float, stale_after: float) -> NowExplanation:
    """The newest cycle at `now_wall`, current when it is at most `stale_after` seconds old; the eviction order is
    this cycle's ranking, or the one for the signal nearest a threshold."""
    record, report = explained.record, explained.report
    assessment, observed = report.decided.assessment, report.observed
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
    if report.decided.ranked_pods and isinstance(step, ReclaimThenEvict):
        signal, ranking, why = step.threshold.signal, report.decided.ranked_pods, "this cycle's ranking"
    elif nearest is not None and observed.summary is not None:
        signal = nearest[1]
        stats_of = pod_stats_lookup(observed.summary, observed.pods)
        ranking = tuple(rank_pods(signal, explained.layout, observed.pods, stats_of))
        why = f"the order if {signal} reached its threshold (the signal nearest one)"
    else:
        signal, ranking, why = Signal.MEMORY_AVAILABLE, (), "no thresholds with readings"
    rows = ranked_pods(signal, explained.layout, ranking, report, None) if ranking else []
    age_s = now_wall - record.wall
    return NowExplanation(record=record, age_s=age_s, current=age_s <= stale_after,
                          conditions=tuple(str(c) for c in assessment.node_conditions), signals=tuple(signals),
                          signal=signal, basis=why, ranking=tuple(rows))

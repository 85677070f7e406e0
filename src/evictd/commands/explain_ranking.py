"""What `evictd explain` says of a ranking: each pod's keys in the signal's units, why one pod ranks before
another, and the ranking as a table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import assert_never

from evictd.core.fs_layout import FsLayout
from evictd.core.pods import NEVER_EVICTED, Pod, never_evicted_reason
from evictd.core.ranking import sort_key
from evictd.core.signals import Ranking, Resource, Signal, spec_of
from evictd.core.summary import pod_stats_lookup
from evictd.core.thresholds import Threshold
from evictd.cycle.render import (
    JsonObject,
    human_bytes,
    printable,
    table,
)
from evictd.cycle.report import CycleReport
from evictd.record.decision import KeyValue, RankKeys, rank_keys
from evictd.record.line_json import ABSENT, Absent

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
    """The ranking with each pod's keys and outcome: evicted, never evicted (why), or not reached."""
    summary = report.ranked_on
    assert summary is not None
    stats_of = pod_stats_lookup(summary, ranking)
    rows = []
    for pod in ranking:
        reason = never_evicted_reason(pod)
        outcome = ("evicted" if evicted is not None and pod.key == evicted.key
                   else f"{NEVER_EVICTED}{reason}" if reason is not None else "")
        rows.append(RankedPod(pod, rank_keys(signal, sort_key(signal, layout, pod, stats_of(pod))), outcome))
    return rows


def ranking_table(signal: Signal, rows: Sequence[RankedPod]) -> str:
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


def bytes_text(value: int | None) -> str:
    return human_bytes(value or 0)


def threshold_kind(threshold: Threshold) -> str:
    return "hard" if threshold.is_hard else "soft"

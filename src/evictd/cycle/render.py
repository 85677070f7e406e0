"""Rendering decisions for people and programs: the JSON documents and text tables of the commands.

The JSON shapes are a public contract (docs/commands.md, the JSON output of each command); text output shows the
same facts as aligned tables. Nothing here decides anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, assert_never

from evictd.core.engine import Eviction
from evictd.core.engine_rules import STALL_SETTLE_S
from evictd.core.handover import Handover, SignalVerdict
from evictd.core.pods import NEVER_EVICTED, Pod, never_evicted_reason
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import EVICTD_SIGNALS, Signal, Unit, spec_of
from evictd.core.thresholds import Threshold, ThresholdValue, stall_share_text
from evictd.cycle.report import CycleReport

JsonObject = dict[str, object]


# What a terminal would act on in recorded text: C0/C1 controls, DEL and the bidirectional overrides.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every character a terminal would act on shown as an escape (\\x1b, \\n, \\u202e)."""
    return _UNPRINTABLE.sub(lambda found: repr(found[0])[1:-1] if ord(found[0]) < 0x100 else
                            f"\\u{ord(found[0]):04x}", text)


def printable_document(document: Mapping[str, object]) -> JsonObject:
    """`document` (a JSON object) with every string in it `printable`, keys too: for text output."""
    return {printable(str(key)): _printable_value(item) for key, item in document.items()}


def _printable_value(value: object) -> object:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, Mapping):
        return printable_document(value)
    if isinstance(value, list | tuple):
        return [_printable_value(item) for item in value]
    return value


# What a YAML reader does not take raw in a double-quoted string (JSON escapes the rest): DEL, C1, NEL, LS, PS, the BOM,
# non-characters, and lone surrogates (not text at all: U+FFFD).
_NOT_YAML = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
# JSON writes an exponent only for a float, always signed (1e-05); found with `str.find`, then `_exponent_hint`.
_SIGNED_EXPONENTS = ("e-", "e+", "E-", "E+")
# A JSON number with an exponent and no point (1e-05), which YAML 1.1 reads as a string, found outside strings.
_STRING_OR_BARE_EXPONENT = re.compile(r'"(?:[^"\\]|\\.)*"|(?<![\d.])(-?\d+)(?=[eE])')


def _yaml_escape(found: re.Match[str]) -> str:
    code = ord(found[0])
    return "\\ufffd" if 0xD800 <= code <= 0xDFFF else f"\\u{code:04x}"


def _exponent_hint(text: str) -> bool:
    """Whether JSON text may hold a number with an exponent and no point: a cheap pre-check before the search."""
    for mark in _SIGNED_EXPONENTS:
        at = text.find(mark)
        while at != -1:
            start = at
            while start > 0 and text[start - 1].isdecimal():
                start -= 1
            if start < at:
                if start > 0 and text[start - 1] == "-":
                    start -= 1
                if start == 0 or text[start - 1] == "[" or text[start - 2:start] in (": ", ", "):
                    return True
            at = text.find(mark, at + 1)
    return False


def _point(found: re.Match[str]) -> str:
    return found[0] if found[1] is None else found[1] + ".0"


def yaml_flow(value: object) -> str:
    """`value` (a JSON document) as one line of YAML flow style that reads back as the same value: JSON text with
    what YAML does not take raw escaped and a point in every exponent. ValueError for NaN or infinity."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
    if _exponent_hint(text):
        text = _STRING_OR_BARE_EXPONENT.sub(_point, text)
    return _NOT_YAML.sub(_yaml_escape, text)


def seconds_json(seconds: float) -> int | float:
    """Return seconds as a JSON number: whole seconds as integers, sub-second values keep their fraction."""
    return int(seconds) if float(seconds).is_integer() else seconds


def value_json(value: ThresholdValue) -> JsonObject:
    """Return `{"quantity": canonical string}` or `{"percentage": float32 fraction}`."""
    if value.quantity is not None:
        return {"quantity": str(value.quantity)}
    return {"percentage": value.percentage}


def value_text(value: ThresholdValue) -> str:
    """Return a threshold value as a person reads it: the quantity, or the percentage of capacity."""
    if value.quantity is not None:
        return str(value.quantity)
    return f"{value.percentage * 100:.6g}%"


def bound_text(signal: Signal, value: ThresholdValue) -> str:
    """Return a threshold's bound as a person reads it: `<1Gi`, `<10%`, or for a stall signal (whose value is a
    headroom threshold) the stall share it stands for, `>=40%`."""
    if spec_of(signal).stall_family:
        return f">={stall_share_text(value)}"
    return f"<{value_text(value)}"


def condition_text(signal: Signal, value: ThresholdValue) -> str:
    """Return what a threshold checks: `memory.available<1Gi`, `evictd.io/memory.stall.some>=40%`."""
    return f"{signal}{bound_text(signal, value)}"


def handover_thresholds_text(signal: Signal, thresholds: Sequence[Threshold] | None) -> str:
    """One side's thresholds on `signal` in the hand-over: `hard <1Gi, soft <2Gi`, `-` (none) or `unknown` (None)."""
    if thresholds is None:
        return "unknown"
    return ", ".join(f"{'hard' if t.is_hard else 'soft'} {bound_text(signal, t.value)}" for t in thresholds) or "-"


def recorded_stall_text(signal: object, quantity: object) -> str | None:
    """`condition_text` of a recorded stall threshold (its signal's name and quantity text); None when it is not
    one (another signal, or a quantity that is not a stall threshold's plain number)."""
    if signal not in EVICTD_SIGNALS or not isinstance(quantity, str) or not (quantity.isascii() and quantity.isdigit()):
        return None
    return condition_text(Signal(str(signal)), ThresholdValue(Quantity.from_int(int(quantity),
                                                                                QuantityFormat.DECIMAL_SI)))


def threshold_json(threshold: Threshold) -> JsonObject:
    """Return the check-config JSON form of one threshold."""
    return {
        "signal": str(threshold.signal),
        "operator": str(threshold.operator),
        "value": value_json(threshold.value),
        "gracePeriodSeconds": seconds_json(threshold.grace_period_s),
        "minReclaim": value_json(threshold.min_reclaim) if threshold.min_reclaim is not None else None,
    }


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Return rows as a left-aligned text table with a header line."""
    body = [list(headers), *[list(row) for row in rows]]
    widths = [max(len(row[i]) for row in body) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in body]
    return "\n".join(lines)


def thresholds_text(thresholds: Sequence[Threshold]) -> str:
    rows = [
        (str(t.signal), "hard" if t.is_hard else "soft", f"< {value_text(t.value)}",
         f"{seconds_json(t.grace_period_s)}s", value_text(t.min_reclaim) if t.min_reclaim is not None else "-")
        for t in thresholds
    ]
    return table(("SIGNAL", "KIND", "THRESHOLD", "GRACE", "MIN-RECLAIM"), rows)


def eviction_json(eviction: Eviction) -> JsonObject:
    """Return the JSON form of one eviction, with the pod status conditions that would be written."""
    return {
        "namespace": eviction.pod.namespace,
        "name": eviction.pod.name,
        "signal": eviction.signal,
        "gracePeriodSeconds": eviction.grace_period_override_s,
        "effectiveGracePeriodSeconds": eviction.effective_grace_period_s,
        "reason": eviction.reason,
        "message": eviction.message,
        "annotations": dict(eviction.annotations),
        "conditions": [condition.to_json() for condition in eviction.conditions],
    }


def step_json(at: float, report: CycleReport) -> JsonObject:
    assessment, acted = report.decided.assessment, report.acted
    step: JsonObject = {
        "at": seconds_json(at),
        "conditions": [str(c) for c in assessment.node_conditions],
        "thresholdsMet": [
            {
                "signal": str(status.threshold.signal),
                "value": value_json(status.threshold.value),
                "gracePeriodSeconds": seconds_json(status.threshold.grace_period_s),
                "graceMet": status.grace_met,
            }
            for status in assessment.thresholds
        ],
        "reclaim": [str(result.action) for result in acted.reclaim],
        "reclaimSucceeded": acted.reclaim_succeeded,
        "ranking": [pod.key for pod in report.decided.ranked_pods],
        "evicted": [eviction_json(eviction) for eviction in acted.evictions],
    }
    if assessment.stall_settling:  # evictd's own: only where a stall eviction waited (STALL_SETTLE_S)
        step["stallSettling"] = [str(s) for s in assessment.stall_settling]
    if assessment.stall_held_back:  # evictd's own: a stall threshold's share reached without node-wide reclaim
        step["stallHeldBack"] = [condition_text(item.threshold.signal, item.threshold.value)
                                 for item in assessment.stall_held_back]
    return step


def simulation_text(steps: Sequence[tuple[float, CycleReport]]) -> str:
    """Return the simulate report as readable text: one summary table, then each eviction in full."""
    rows = []
    details: list[str] = []
    for at, report in steps:
        assessment, acted = report.decided.assessment, report.acted
        met = ", ".join(
            condition_text(s.threshold.signal, s.threshold.value)
            + ("" if s.threshold.is_hard else (" (grace met)" if s.grace_met else " (in grace)"))
            for s in assessment.thresholds
        )
        reclaim = "-"
        if acted.reclaim:
            outcome = "ok" if acted.reclaim_succeeded else "not enough"
            reclaim = f"{'+'.join(str(r.action) for r in acted.reclaim)}: {outcome}"
        if acted.memory_reclaim is not None and acted.memory_reclaim.result is not None:  # reclaim before evict
            reclaim = (f"reclaimed {acted.memory_reclaim.result.freed_bytes >> 20} MiB, "
                       + ("no eviction needed" if acted.reclaim_succeeded else "eviction still needed"))
        evicted = ", ".join(e.pod.key for e in acted.evictions) or (
            f"- (stall settling, {STALL_SETTLE_S:g}s)" if assessment.stall_settling else
            "- (stall held back: no node-wide reclaim)" if assessment.stall_held_back else "-")
        conditions = ",".join(str(c) for c in assessment.node_conditions) or "-"
        rows.append((f"{seconds_json(at)}s", conditions, met or "-", reclaim, evicted))
        for eviction in acted.evictions:
            details.append(
                f"t={seconds_json(at)}s evict {eviction.pod.key} for {eviction.signal}, grace "
                f"{eviction.grace_period_override_s}s (effective {eviction.effective_grace_period_s}s)\n"
                f"  ranking: {' > '.join(ranked(p) for p in report.decided.ranked_pods) or '-'}\n"
                f"  message: {eviction.message}"
                + _annotations_text(eviction.annotations)
            )
    text = table(("AT", "CONDITIONS", "THRESHOLDS MET", "RECLAIM", "EVICTED"), rows)
    return text + ("\n\n" + "\n".join(details) if details else "")


def ranked(pod: Pod) -> str:
    """A pod in an eviction order: its key, and why it is never evicted if it is (as `explain` says it)."""
    reason = never_evicted_reason(pod)
    return pod.key if reason is None else f"{pod.key} ({NEVER_EVICTED}{reason})"


def _annotations_text(annotations: Mapping[str, str]) -> str:
    if not annotations:
        return ""
    return "\n  annotations: " + ", ".join(f"{k}={v}" for k, v in sorted(annotations.items()))


def human(value: int, signal: Signal) -> str:
    """Return a value of `signal`: bytes as GiB/MiB with one decimal, basis points (stall headroom) as a percentage,
    counts as plain numbers."""
    match spec_of(signal).unit:
        case Unit.BYTES:
            return human_bytes(value)
        case Unit.BASIS_POINTS:
            return f"{value / 100:.2f}%"
        case Unit.INODES | Unit.PIDS:
            return f"{value:,}"
        case unit:
            assert_never(unit)


def human_bytes(value: int) -> str:
    """Return bytes as GiB/MiB/KiB with one decimal, or B."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def describe_threshold(threshold: Threshold) -> str:
    """Return e.g. `memory.available<1Gi (hard)` or `nodefs.available<15% (soft, grace 120s)`."""
    kind = "hard" if threshold.is_hard else f"soft, grace {threshold.grace_period_s:g}s"
    copied = "" if threshold.copied_from is None else f", from {threshold.copied_from}"
    return f"{condition_text(threshold.signal, threshold.value)} ({kind}{copied})"


def handover_json(handover: Handover, source: str) -> JsonObject:
    """The hand-over judged (`evictd.core.handover`) as a document; `source` says where the kubelet's came from."""
    return {
        "kubeletConfig": source,
        "mode": str(handover.mode),
        "summary": handover.summary,
        "evictdDryRun": handover.evictd_dry_run,
        "signals": [verdict_fields(v) for v in handover.verdicts],
    }


def verdict_fields(verdict: SignalVerdict) -> JsonObject:
    """One signal's verdict as flat fields (a JSON object, or one log line's)."""
    return {"signal": str(verdict.signal), "evicts": str(verdict.evicts), "now": verdict.now,
            "evictd": handover_thresholds_text(verdict.signal, verdict.evictd),
            "kubelet": handover_thresholds_text(verdict.signal, verdict.kubelet),
            "detail": verdict.detail, "problem": verdict.problem}


def handover_text(document: Mapping[str, Any], title: str = "who evicts") -> str:
    """The hand-over (`handover_json`'s document) as check-config and shadow-report print it: one row per signal
    (`!` marks a problem), the verdict, and what each problem is."""
    signals: list[Mapping[str, Any]] = document["signals"]
    rows = [(s["signal"], s["evictd"], s["kubelet"], ("! " if s["problem"] else "") + s["now"]) for s in signals]
    lines = [f"{title} (the kubelet's configuration: {printable(str(document['kubeletConfig']))}):",
             table(("SIGNAL", "EVICTD", "KUBELET", "WHO EVICTS"), rows), str(document["summary"])]
    lines += [f"  {s['signal']}: {s['detail']}" for s in signals if s["problem"]]
    return "\n".join(lines)

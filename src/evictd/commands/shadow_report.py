"""`evictd shadow-report`: how far evictd's dry-run decisions agreed with the kubelet's own evictions.

Summarises `<stateDir>/shadow.jsonl` (and `.1`): outcome counts, agreement, the kubelet's delay, the disagreements;
with evictd's configuration, who would act on each signal once evictd acts (`with_handover`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

from evictd.core.errors import ConfigError, FilePath
from evictd.core.handover import judge_handover
from evictd.core.shadow import Outcome
from evictd.core.thresholds import Threshold
from evictd.cycle.render import handover_json, handover_text
from evictd.kubelet_file import KubeletFile
from evictd.state_dir import SHADOW_FILE, StateDir

# How many disagreements the text report lists (the JSON report has them all).
SHOWN_DISAGREEMENTS = 20


def read_comparisons(state_dir: str) -> list[dict[str, Any]]:
    """Every recorded comparison, oldest first. Raises ConfigError when there is no record at all."""
    paths = [StateDir(state_dir).shadow_rotated, StateDir(state_dir).shadow]
    found = [p for p in paths if os.path.isfile(p)]
    if not found:
        raise ConfigError("holds no shadow comparisons (evictd run in dry-run with the Kubernetes API writes "
                          f"{SHADOW_FILE} there)", key="stateDir", value=FilePath(state_dir))
    records = []
    for path in found:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                if isinstance(record, dict) and record.get("outcome") in set(Outcome):
                    records.append(record)
    return records


def summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    counts = Counter(str(r["outcome"]) for r in records)
    delays = sorted(float(r["kubeletLaterBySeconds"]) for r in records if "kubeletLaterBySeconds" in r)
    total = len(records)
    return {
        "comparisons": total,
        "outcomes": {str(outcome): counts.get(str(outcome), 0) for outcome in Outcome},
        "agreement": round(counts.get(str(Outcome.AGREE), 0) / total, 4) if total else None,
        "kubeletLaterBySeconds": ({"min": delays[0], "median": delays[len(delays) // 2], "max": delays[-1]}
                                  if delays else None),
        "from": records[0]["time"] if records else None,
        "to": records[-1]["time"] if records else None,
        "disagreements": [r for r in records if r["outcome"] != str(Outcome.AGREE)],
    }


def with_handover(report: dict[str, Any], evictd: Sequence[Threshold], kubelet: KubeletFile) -> dict[str, Any]:
    """`report` with `handover`: who would evict on each signal with evictd acting (dryRun: false) on `evictd`'s
    thresholds beside the kubelet's configuration `kubelet`."""
    handover = judge_handover(evictd, kubelet.thresholds(), evictd_dry_run=False)
    return {**report, "handover": handover_json(handover, kubelet.note)}


def _handover_lines(report: dict[str, Any]) -> list[str]:
    document = report.get("handover")
    if document is None:
        return ["", "who would evict once evictd acts: pass evictd's --config (and --kubelet-config) to see"]
    return ["", handover_text(document, "who would evict once evictd acts (dryRun: false)")]


def summary_text(report: dict[str, Any]) -> str:
    if not report["comparisons"]:
        return "\n".join(["no comparisons recorded yet", *_handover_lines(report)])
    lines = [f"{report['comparisons']} comparisons from {report['from']} to {report['to']}: "
             f"agreement {report['agreement'] * 100:.1f} %"]
    lines += [f"  {outcome:<14} {count}" for outcome, count in report["outcomes"].items()]
    if report["kubeletLaterBySeconds"]:
        delay = report["kubeletLaterBySeconds"]
        lines.append(f"the kubelet's record came {delay['min']:g} to {delay['max']:g} s later "
                     f"(median {delay['median']:g} s) than evictd's decision")
    disagreements = report["disagreements"][-SHOWN_DISAGREEMENTS:]
    if disagreements:
        lines.append(f"disagreements (latest {len(disagreements)}):")
        for record in disagreements:
            ours = record["evictd"]["pod"] if record["evictd"] else "-"
            theirs = record["kubelet"]["pod"] if record["kubelet"] else "-"
            resource = (record["evictd"] or record["kubelet"])["resource"]
            lines.append(f"  {record['time']}  {record['outcome']:<14} {resource:<18} evictd: {ours}  "
                         f"kubelet: {theirs}")
    return "\n".join(lines + _handover_lines(report))

"""The terminal live view of `evictd run`: what the node looks like to the eviction manager, redrawn each cycle.

A pure function of a cycle report (plus the recent-events buffer), rendered to a string; the daemon writes it
to the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from evictd.core.engine import EngineState, ReclaimThenEvict, layout_of
from evictd.core.handover import NO_THRESHOLDS
from evictd.core.ranking import rank_pods
from evictd.core.signals import Signal, spec_of
from evictd.core.summary import Observation, pod_stats_lookup
from evictd.core.thresholds import Threshold, stall_share_text, threshold_quantity
from evictd.cycle.ids import decision_id
from evictd.cycle.render import describe_threshold, human, ranked, table, value_text
from evictd.cycle.report import CycleReport

CLEAR_SCREEN = "\x1b[H\x1b[2J"
# The terminal's alternate screen (xterm, VT100 descendants): frames drawn there never reach the scrollback.
ENTER_ALTERNATE_SCREEN = "\x1b[?1049h"
LEAVE_ALTERNATE_SCREEN = "\x1b[?1049l"
RANKING_SHOWN = 5


def _threshold_cell(thresholds: Sequence[Threshold], observation: Observation | None, signal: Signal) -> str:
    """Each threshold in the AVAILABLE column's units; a percentage also as itself (alone when capacity is unknown)."""
    cells = []
    for threshold in thresholds:  # the signal's, those that can be met
        kind = "hard" if threshold.is_hard else "soft"
        if threshold.value.quantity is not None and spec_of(signal).stall_family:  # headroom, and its share
            cells.append(f"{kind} {human(threshold.value.quantity.ceil_int(), signal)} "
                         f"(stall>={stall_share_text(threshold.value)})")
        elif threshold.value.quantity is not None:
            cells.append(f"{kind} {human(threshold.value.quantity.ceil_int(), signal)}")
        elif observation is not None:
            quantity = threshold_quantity(threshold.value, observation.capacity)
            cells.append(f"{kind} {human(quantity.ceil_int(), signal)} ({value_text(threshold.value)})")
        else:
            cells.append(f"{kind} {value_text(threshold.value)}")
    return ", ".join(cells) or "-"


def mode_text(dry_run: bool, no_api: bool) -> str:
    """The header's last part: whether evictd acts, and if not, why."""
    if dry_run:
        return "dry-run (dryRun: true or --dry-run): decisions are reported, nothing is changed"
    if no_api:
        return "no Kubernetes API (no kubeconfig, not in a pod): evictions are reported, not carried out"
    return "acting"


def render(report: CycleReport, state: EngineState, *, node_name: str, cycle: int, now_wall: datetime, dry_run: bool,
           recent: Sequence[str] = (), run: str | None = None, no_api: bool = False) -> str:
    """Return the whole screen for one cycle (with `run`, the flight recorder's name of this run, each eviction
    names its decision, for `evictd explain --decision`). Evictions are only reported with `dry_run` or `no_api`
    (no Kubernetes API to evict through); the header says which."""
    assessment = report.decided.assessment
    mode = mode_text(dry_run, no_api)
    dry_run = dry_run or no_api
    # Without any threshold every signal would read "ok": the screen says instead that nothing is guarded.
    guarded = any(t.operator is not None for t in state.thresholds)
    lines = [
        f"evictd on {node_name} - cycle {cycle} at {now_wall:%H:%M:%S} UTC - {mode}",
        *([] if guarded else [f"NO EVICTION THRESHOLDS: {NO_THRESHOLDS}"]),
        f"node conditions: {', '.join(str(c) for c in assessment.node_conditions) or 'none'}",
        "",
    ]
    met = {status.threshold: status for status in assessment.thresholds}
    rows = []
    for signal in Signal:
        observation = assessment.observations.get(signal)
        thresholds = [t for t in state.thresholds if t.signal is signal and t.operator is not None]
        if observation is None and not thresholds:
            continue
        state_cell = ("ok" if guarded else "no threshold") if observation is not None else "-"
        for threshold in thresholds:
            status = met.get(threshold)
            if status is None:
                continue
            if threshold.is_hard or status.grace_met:
                state_cell = "MET"
                break
            state_cell = f"grace {status.observed_for_s:.0f}/{threshold.grace_period_s:.0f}s"
        available = human(observation.available.ceil_int(), signal) if observation else "no data"
        capacity = human(observation.capacity.ceil_int(), signal) if observation else "-"
        rows.append((str(signal), available, capacity, _threshold_cell(thresholds, observation, signal), state_cell))
    lines.append(table(("SIGNAL", "AVAILABLE", "CAPACITY", "THRESHOLDS", "STATE"), rows))
    lines.append("")
    lines.extend(_ranking_lines(report, state))
    if report.acted.evictions:
        lines.append("")
        for eviction in report.acted.evictions:
            verb = "would evict" if dry_run else "evicted"
            lines.append(f"{verb} {eviction.pod.key} ({eviction.signal}): {eviction.message}")
        if run is not None:
            lines.append(f"why: evictd explain --decision {decision_id(run, cycle)}")
    if isinstance(assessment.next_step, ReclaimThenEvict):
        lines.append(f"acting on {describe_threshold(assessment.next_step.threshold)}")
    if recent:
        lines += ["", "recent events:", *recent]
    return "\n".join(lines)


def _ranking_lines(report: CycleReport, state: EngineState) -> list[str]:
    pods, summary = report.observed.pods, report.observed.summary
    if not pods:
        return ["eviction order: no pods found on this node"]
    if report.decided.ranked_pods:
        ranking, title = report.decided.ranked_pods, "eviction order (this cycle)"
    elif summary is not None:
        stats_of = pod_stats_lookup(summary, pods)
        ranking = tuple(rank_pods(Signal.MEMORY_AVAILABLE, layout_of(state), pods, stats_of))
        title = "eviction order if memory ran short"
    else:
        return ["eviction order: unknown (stats unavailable)"]
    shown = [f"  {i}. {ranked(p)}" for i, p in enumerate(ranking[:RANKING_SHOWN], start=1)]
    more = len(ranking) - RANKING_SHOWN
    return [f"{title}:", *shown, *([f"  ... and {more} more"] if more > 0 else [])]

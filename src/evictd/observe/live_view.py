"""The terminal live view of `evictd run`: what the node looks like to the eviction manager, redrawn each cycle.

A pure function of a cycle report, the pinned warnings and the recent events (`evictd.observe.live_events`),
rendered to a string; the daemon writes it to the terminal. Given the terminal's size, no line is longer than its
width and the rows go first to the header, conditions and signal table, then the pinned warnings, then the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from evictd.core.engine import Assessment, EngineState, ReclaimThenEvict, layout_of
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
# The pods of the ranking shown at most (a screen is for the first ones; `evictd explain` has them all).
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
        return "dry-run: reports, changes nothing"
    if no_api:
        return "no Kubernetes API: reports only"
    return "acting"


def render(report: CycleReport, state: EngineState, *, node_name: str, cycle: int, now_wall: datetime, dry_run: bool,
           recent: Sequence[str] = (), run: str | None = None, no_api: bool = False, warnings: Sequence[str] = (),
           size: tuple[int, int] | None = None) -> str:
    """Return the whole screen for one cycle (with `run`, the flight recorder's name of this run, each eviction
    names its decision, for `evictd explain --decision`). Evictions are only reported with `dry_run` or `no_api`
    (no Kubernetes API to evict through); the header says which. With `size` (columns, rows) the screen fits it:
    no line longer than the columns, and rows given first to the header, the signal table and the pinned
    `warnings`, then to this cycle's evictions, the ranking, and the newest of the `recent` events."""
    assessment = report.decided.assessment
    mode = mode_text(dry_run, no_api)
    dry_run = dry_run or no_api
    # Without any threshold every signal would read "ok": the screen says instead that nothing is guarded.
    guarded = any(t.operator is not None for t in state.thresholds)
    head = [
        f"evictd on {node_name} - cycle {cycle} at {now_wall:%H:%M:%S} UTC - {mode}",
        *([] if guarded else [f"NO EVICTION THRESHOLDS: {NO_THRESHOLDS}"]),
        f"node conditions: {', '.join(str(c) for c in assessment.node_conditions) or 'none'}",
        "",
        *_signal_table(assessment, state, guarded).splitlines(),
    ]
    pinned = [f"warnings (pinned until resolved, {len(warnings)}):", *(f"! {w}" for w in warnings)] if warnings else []
    actions = _action_lines(report, cycle, dry_run, run)
    ranking = _ranking(report, state)
    events = ["recent events:", *recent] if recent else []
    if size is None:
        sections = [head, pinned, actions, _shown(ranking, RANKING_SHOWN + 2), events]
        return "\n\n".join("\n".join(section) for section in sections if section)
    columns, rows = size
    return "\n".join(line[:columns] for line in _fitted(rows, head, pinned, actions, ranking, events))


def _fitted(rows: int, head: list[str], pinned: list[str], actions: list[str], ranking: list[str],
            events: list[str]) -> list[str]:
    """The screen's lines within `rows`: the head and the pinned warnings first (cut at the bottom when even they do
    not fit), then the actions, then the ranking (at most half of what is left, "... and N more" for the rest) and
    the newest events in what remains; a blank line before each section that has room for one."""
    lines = head[:rows]
    if pinned and len(lines) + 2 <= rows:
        room = rows - len(lines) - 1
        shown = pinned if len(pinned) <= room else [*pinned[:room - 1], f"  ... and {len(pinned) - room + 1} more"]
        lines += ["", *shown]
    if actions and len(lines) + 2 <= rows:
        lines += ["", *actions[:rows - len(lines) - 1]]
    left = rows - len(lines) - 1 - (2 if events else 0)  # a blank line each, and an event at least
    if ranking and left >= 1:
        room = min(RANKING_SHOWN + 2, max(1, left // 2) if events else left)
        lines += ["", *_shown(ranking, room)]
    if events and len(lines) + 3 <= rows:
        room = rows - len(lines) - 2
        lines += ["", events[0], *events[1:][-room:]]
    return lines


def _signal_table(assessment: Assessment, state: EngineState, guarded: bool) -> str:
    """The signals observed or thresholded: the state first, so that a narrow terminal cuts the thresholds."""
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
        rows.append((str(signal), state_cell, available, capacity, _threshold_cell(thresholds, observation, signal)))
    return table(("SIGNAL", "STATE", "AVAILABLE", "CAPACITY", "THRESHOLDS"), rows)


def _action_lines(report: CycleReport, cycle: int, dry_run: bool, run: str | None) -> list[str]:
    """This cycle's evictions (and the decision that explains them) and the threshold acted on."""
    lines = []
    for eviction in report.acted.evictions:
        verb = "would evict" if dry_run else "evicted"
        lines.append(f"{verb} {eviction.pod.key} ({eviction.signal}): {eviction.message}")
    if report.acted.evictions and run is not None:
        lines.append(f"why: evictd explain --decision {decision_id(run, cycle)}")
    next_step = report.decided.assessment.next_step
    if isinstance(next_step, ReclaimThenEvict):
        lines.append(f"acting on {describe_threshold(next_step.threshold)}")
    return lines


def _ranking(report: CycleReport, state: EngineState) -> list[str]:
    """The ranking's title and one line per pod, all of them (or only a title saying why there is none)."""
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
    return [f"{title}:", *(f"  {i}. {ranked(p)}" for i, p in enumerate(ranking, start=1))]


def _shown(ranking: list[str], rows: int) -> list[str]:
    """The ranking within `rows` lines: the first pods and "... and N more", or in one line the count and the
    first pod."""
    if len(ranking) <= rows:
        return ranking
    if rows <= 1:
        first = ranking[1].split(". ", 1)[1]
        return [f"{ranking[0]} {len(ranking) - 1} pods, first {first}"]
    kept = rows - 2
    return [*ranking[:1 + kept], f"  ... and {len(ranking) - 1 - kept} more"]

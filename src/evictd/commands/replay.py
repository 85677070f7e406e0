"""`evictd replay`: run recorded cycles through the eviction manager with another configuration (backtesting).

Each recorded run becomes a `simulate` scenario at the recorded monotonic times (`recording.scenario_parts`), driven
by `simulate.run_scenario` with the candidate; each cycle's decision is compared with the recorded one (the
recording's own configuration gives the recorded decisions). A candidate from files and flags is layered on each
run's recorded configuration (`--from-defaults`: on the kubelet's defaults). A replay follows the recorded node, not
the one the candidate would have made; reclaim frees what the recording says; unreadable cycles are left out; a
node-listed cycle replays those pods. Each run starts from the engine state it started from (first line; for a
candidate, what it would have restored), or fresh when its first cycle is not in the recording.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import groupby

from evictd.commands.simulate import ScenarioRunner, parse_head, parse_step, scenario_pods, start_state
from evictd.core.engine import EngineConfig, EngineState
from evictd.core.errors import DecodeError, ScenarioError
from evictd.core.fs_layout import FsLayout
from evictd.core.pods import Pod
from evictd.core.summary_parser import SummaryDecoder
from evictd.cycle.ids import decision_id
from evictd.cycle.render import JsonObject, printable, recorded_stall_text, table
from evictd.cycle.report import CycleReport
from evictd.record.decision import Decision, RecordedEviction, ThresholdMet, decision_of
from evictd.record.line_json import ABSENT
from evictd.record.recording import Record, scenario_parts

# The parts of a decision compared, by name: what a person reads in a difference.
COMPARED = ("thresholdsMet", "conditions", "reclaim", "evicted", "ranking")


@dataclass(frozen=True, slots=True)
class Difference:
    """One part of one cycle's decision that the replay took differently."""

    run: str
    cycle: int
    wall: float
    what: str
    recorded: tuple[str, ...]
    replayed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Replay:
    """What a replay found: the cycles replayed, the differences, and each condition's pressure intervals."""

    cycles: int
    runs: int
    first_wall: float | None
    last_wall: float | None
    differences: tuple[Difference, ...]
    # condition -> (recorded intervals, replayed intervals), each (from wall, to wall or None: still reported)
    pressure: Mapping[str, tuple[tuple[tuple[float, float | None], ...], tuple[tuple[float, float | None], ...]]]


def _threshold_text(status: ThresholdMet) -> str:
    shown = status.quantity if status.quantity is not None else f"{(status.percentage or 0.0) * 100:.6g}%"
    kind = "" if not status.grace_period_s else (" (grace met)" if status.grace_met else " (in grace)")
    stall = recorded_stall_text(status.signal, shown)  # a stall threshold: the share it stands for
    return f"{stall or status.signal + '<' + shown}{kind}"


def _eviction_text(eviction: RecordedEviction) -> str:
    return (f"{eviction.key} for {eviction.signal}, grace {eviction.grace_period_s}s: {eviction.message}")


def _compared(decision: Decision, ranking: list[str]) -> dict[str, list[str]]:
    """The compared parts of a decision (`ranking`: its pods' names), each as a list of short texts."""
    return {
        "thresholdsMet": [_threshold_text(s) for s in decision.thresholds_met],
        "conditions": list(decision.conditions),
        "reclaim": list(decision.reclaim),
        "evicted": [_eviction_text(e) for e in decision.evicted],
        "ranking": ranking,
    }


def _intervals(timeline: Sequence[tuple[float, Sequence[str]]], condition: str) -> tuple[tuple[float, float | None],
                                                                                       ...]:
    intervals: list[tuple[float, float | None]] = []
    start: float | None = None
    for wall, conditions in timeline:
        if condition in conditions and start is None:
            start = wall
        elif condition not in conditions and start is not None:
            intervals.append((start, wall))
            start = None
    if start is not None:
        intervals.append((start, None))
    return tuple(intervals)


@dataclass(frozen=True, slots=True)
class ReplayedRun:
    """One run of evictd replayed: each recorded cycle with the manager's report (replayed once, as iterated), the
    configuration and layout, and the engine state it started from (`restored`; None: not in the recording)."""

    config: EngineConfig
    layout: FsLayout
    cycles: Iterator[tuple[Record, CycleReport]]
    start_state: EngineState
    restored: bool | None


# The candidate configuration: fixed, or made from each run's recorded one (changing only what it states).
Candidate = EngineConfig | Callable[[Mapping[str, object]], EngineConfig]


def replayed_runs(records: Iterable[Record], config: Candidate | None = None,
                  problem: Callable[[str], None] = lambda message: None) -> Iterator[ReplayedRun]:
    """Run each run in `records` through the eviction manager from its start state with `config` (None: its own;
    a function: made from its recorded one); cycles without a Summary, or that do not decode (`problem` is told), are
    left out. Each run is read and replayed as iterated."""
    for _, group in groupby(records, key=lambda record: record.run):
        head, start, steps = scenario_parts(group, exact_times=True)
        if head is None or start is None:
            continue
        try:
            scenario = parse_head(head)
            pods = scenario_pods(head)
        except (ScenarioError, DecodeError) as exc:
            problem(f"run {start.run} cannot be replayed: {exc}")
            continue
        if isinstance(config, EngineConfig):
            scenario = replace(scenario, config=config)
        elif config is not None:
            recorded = head.get("config")
            scenario = replace(scenario, config=config(recorded if isinstance(recorded, Mapping) else {}))
        first = next(steps)
        try:
            at = first[1]["at"]
            assert isinstance(at, float)  # `scenario_parts` writes each step's time
            state = EngineState() if scenario.engine_state is None else start_state(
                scenario.engine_state, scenario.config, at)
        except ScenarioError as exc:
            problem(f"run {start.run} is replayed from a fresh engine state: {exc}")
            state = EngineState()
        said = start.engine_state
        restored = None if said is ABSENT else said is not None
        runner = ScenarioRunner(scenario.config, scenario.layout, state)
        yield ReplayedRun(scenario.config, scenario.layout,
                          _replayed_cycles(runner, itertools.chain((first,), steps), pods, problem), state, restored)


def _replayed_cycles(runner: ScenarioRunner, steps: Iterator[tuple[Record, JsonObject]], pods: tuple[Pod, ...],
                     problem: Callable[[str], None]) -> Iterator[tuple[Record, CycleReport]]:
    previous = float("-inf")
    summaries = SummaryDecoder()  # a recording's Summaries share their unchanged blocks: decoded once
    for record, raw in steps:
        try:
            step = parse_step(raw, f"cycle {record.cycle}", previous, pods, summaries)
        except (ScenarioError, DecodeError) as exc:
            problem(f"cycle {decision_id(record.run, record.cycle)} cannot be replayed: {exc}")
            continue
        previous, pods = step.at, step.pods
        yield record, runner.step(step)


def replay(records: Iterable[Record], config: Candidate | None = None,
           problem: Callable[[str], None] = lambda message: None) -> Replay:
    """Replay `records` (in order) with `config` (None: each run's own recorded configuration; see `Candidate`);
    `problem` is told about cycles that cannot be replayed."""
    differences: list[Difference] = []
    recorded_timeline: list[tuple[float, list[str]]] = []
    replayed_timeline: list[tuple[float, list[str]]] = []
    cycles = runs = 0
    first_wall: float | None = None
    last_wall: float | None = None
    for run in replayed_runs(records, config, problem):
        runs += 1
        for record, report in run.cycles:
            cycles += 1
            first_wall = record.wall if first_wall is None else first_wall
            last_wall = record.wall
            recorded = _compared(record.decision, record.decision.ranking.pods())
            # The ranking is compared by pod name: its keys are not rendered.
            replayed = _compared(decision_of(report, ranking=False), [pod.key for pod in report.decided.ranked_pods])
            recorded_timeline.append((record.wall, recorded["conditions"]))
            replayed_timeline.append((record.wall, replayed["conditions"]))
            differences.extend(Difference(record.run, record.cycle, record.wall, what, tuple(recorded[what]),
                                          tuple(replayed[what]))
                               for what in COMPARED if recorded[what] != replayed[what])
    conditions = sorted({c for _, cs in (*recorded_timeline, *replayed_timeline) for c in cs})
    pressure = {c: (_intervals(recorded_timeline, c), _intervals(replayed_timeline, c)) for c in conditions}
    return Replay(cycles=cycles, runs=runs, first_wall=first_wall, last_wall=last_wall,
                  differences=tuple(differences), pressure=pressure)


# --- output --------------------------------------------------------------------------------------------------


def wall_text(wall: float | None) -> str | None:
    """An epoch time as RFC 3339 in UTC, to the millisecond."""
    if wall is None:
        return None
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def replay_json(result: Replay) -> JsonObject:
    """The `--output json` document of a replay."""
    return {
        "cycles": result.cycles,
        "runs": result.runs,
        "from": wall_text(result.first_wall),
        "to": wall_text(result.last_wall),
        "identical": not result.differences,
        "differences": [{"run": d.run, "cycle": d.cycle, "time": wall_text(d.wall), "what": d.what,
                         "recorded": list(d.recorded), "replayed": list(d.replayed)} for d in result.differences],
        "pressure": [{"condition": condition,
                      "recorded": [{"from": wall_text(a), "to": wall_text(b)} for a, b in recorded],
                      "replayed": [{"from": wall_text(a), "to": wall_text(b)} for a, b in replayed]}
                     for condition, (recorded, replayed) in result.pressure.items()],
    }


def _intervals_text(intervals: Sequence[tuple[float, float | None]]) -> str:
    return ", ".join(f"{wall_text(a)} - {wall_text(b) if b is not None else '(end)'}" for a, b in intervals) or "-"


def replay_text(result: Replay) -> str:
    """The text report of a replay: a summary line, the differing cycles, and the pressure each reported."""
    changed = len({(d.run, d.cycle) for d in result.differences})
    runs = f"{result.runs} run{'' if result.runs == 1 else 's'} of evictd"
    lines = [f"replayed {result.cycles} cycles ({runs}) from {wall_text(result.first_wall)} "
             f"to {wall_text(result.last_wall)}: "
             + (f"{changed} cycle{'' if changed == 1 else 's'} decided differently" if changed
                else "every decision as recorded")]
    if result.differences:
        # Cycle numbers restart with each run (named with it when several); recorded text is shown escaped.
        run_column = result.runs > 1
        rows = [((printable(d.run),) if run_column else ()) + (
                    f"{d.cycle}", wall_text(d.wall) or "", d.what, printable("; ".join(d.recorded)) or "-",
                    printable("; ".join(d.replayed)) or "-")
                for d in result.differences]
        header = ("RUN",) * run_column + ("CYCLE", "TIME", "WHAT", "RECORDED", "REPLAYED")
        lines += ["", table(header, rows)]
    if result.pressure:
        pressure = [(printable(condition), _intervals_text(recorded), _intervals_text(replayed))
                    for condition, (recorded, replayed) in result.pressure.items()]
        lines += ["", table(("CONDITION", "RECORDED", "REPLAYED"), pressure)]
    return "\n".join(lines)

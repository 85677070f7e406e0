"""`evictd simulate --record DIR`: a scenario's cycles written by the flight recorder, as `evictd run` records them.

DIR is a stateDir (`DIR/recording/`, read by `explain` and `replay`); the hook is the daemon's own `FlightRecorder`
with default bounds. The same scenario always writes the same bytes: the wall clock is the scenario's, the run and
segment are named `simulate`, the segment stays uncompressed. Decisions are recorded as a dry run's.
"""

from __future__ import annotations

from datetime import UTC, datetime

from evictd.commands.simulate import FakeClock, Scenario, run_scenario, start_state
from evictd.config import EvictdSettings
from evictd.core.engine import EngineState
from evictd.core.errors import ConfigError, EvictdError, FilePath
from evictd.cycle.finished import Cycle
from evictd.cycle.ids import run_id
from evictd.cycle.manager import FRESH_STATE
from evictd.cycle.report import CycleReport
from evictd.record.recorder import FlightRecorder
from evictd.record.recording import segment_paths
from evictd.state_dir import StateDir

# What names the run and its segment where the daemon's PID would.
PROCESS = "simulate"


class _Problems:
    """The recorder's logger: keeps why it could not write (it logs a failure and carries on; here that fails)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def warning(self, event: str, **fields: object) -> None:
        self.errors.append(str(fields.get("error", event)))

    error = exception = warning

    def info(self, event: str, **fields: object) -> None:
        pass


class _ScenarioWall(FakeClock):
    """The scenario's clock, its wall time `offset` seconds ahead of its `at` (monotonic) time."""

    def __init__(self, offset: float) -> None:
        super().__init__()
        self._offset = offset

    def wall(self) -> datetime:
        return datetime.fromtimestamp(self.now + self._offset, UTC)


def record_scenario(scenario: Scenario, state_dir: str) -> list[CycleReport]:
    """Run `scenario` with the flight recorder writing its cycles into `state_dir`; return the cycles' reports.
    Raise ConfigError when `state_dir` already holds a recording, EvictdError when it cannot be written."""
    folder = StateDir(state_dir).recording
    try:
        existing = segment_paths(folder)
    except OSError as exc:  # not a folder, or unreadable: the recorder could not write there either
        raise EvictdError(f"cannot write the recording into {folder}: {exc.strerror or exc}") from None
    if existing:
        raise ConfigError(f"already holds a recording ({folder}); record into a new folder", key="--record",
                          value=FilePath(state_dir))
    first_at = scenario.steps[0].at if scenario.steps else 0.0
    state = FRESH_STATE
    node_name = ""
    wall_offset = 0.0  # the wall clock's seconds at the scenario's `at` 0
    if scenario.engine_state is not None:
        state = start_state(scenario.engine_state, scenario.config, first_at)  # checked: savedAt is a number
        node_name = str(scenario.engine_state.get("node"))
        saved_at = scenario.engine_state["savedAt"]
        assert isinstance(saved_at, int | float)  # `start_state` checked it
        wall_offset = saved_at - first_at
    clock = _ScenarioWall(wall_offset)
    clock.now = first_at
    defaults = EvictdSettings()
    problems = _Problems()
    recorder = FlightRecorder(state_dir, scenario.settings, max_bytes=defaults.recorder_max_bytes,
                              max_age_s=defaults.recorder_max_age_s, dry_run=True, log=problems, clock=clock,
                              run=run_id(clock.wall().timestamp(), PROCESS), start_state=state, node_name=node_name,
                              process=PROCESS)
    numbers = iter(range(1, len(scenario.steps) + 1))

    def record(report: CycleReport, state: EngineState) -> None:
        clock.now = report.now
        recorder(Cycle(number=next(numbers), report=report, state=state, started_at=report.now, duration_s=0.0,
                       wall=clock.wall()))

    try:
        reports = run_scenario(scenario, record)
    finally:
        recorder.close(compress=False)
    if problems.errors:
        raise EvictdError(f"cannot write the recording into {folder}: {problems.errors[0]}")
    return reports

"""`evictd simulate`: drive the real eviction manager through a scripted scenario on a fake clock.

The format is docs/commands.md's "`evictd simulate`"; `engineState` (optional) is a saved engine state whose
`savedAt` is the first step's wall-clock time, restored as a restarted daemon restores it. The stand-ins below are
the only fakes; the manager is the daemon's own. Malformed scenarios raise ScenarioError with the path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from evictd.core.decode import list_of, mapping, sequence
from evictd.core.engine import EngineConfig, EngineState, Eviction, FollowUp, FollowUpKind
from evictd.core.errors import ConfigError, DecodeError, ScenarioError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.kubelet_config import (
    KUBELET_API_VERSION,
    KUBELET_KIND,
    EvictionSettings,
    eviction_settings,
    unknown_kubelet_fields,
    with_stall_settings,
)
from evictd.core.memory_reclaim import PODS, CacheHolder, ReclaimPlan, ReclaimSettings
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.core.saved_state import UnusableState, restorable_thresholds, restore_state
from evictd.core.shadow import TERMINAL_PHASES
from evictd.core.summary import Summary
from evictd.core.summary_parser import ROOT_KEY, summary_from_dict
from evictd.core.thresholds import STALL_FIELDS
from evictd.cycle.manager import EvictionManager
from evictd.cycle.reclaim_first import MemoryReclaimStep
from evictd.cycle.report import CycleReport


@dataclass(frozen=True, slots=True)
class Step:
    at: float
    summary: Summary
    after_reclaim: Summary | None
    pods: tuple[Pod, ...]
    # The stats read after the wait for pods' disk figures (None: the step's own Summary again).
    after_disk_wait: Summary | None = None
    # Page cache reclaim before evict freed in this step (None: did not run); its effect is afterReclaim.
    memory_reclaimed: int | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    config: EngineConfig
    layout: FsLayout
    steps: tuple[Step, ...]
    settings: EvictionSettings  # what `config` was built from (what a recording of the scenario keeps)
    engine_state: Mapping[str, object] | None = None  # the saved-state document the first step starts from
    warnings: tuple[str, ...] = ()  # what the kubelet's lenient decoding of `config` lets pass (unknown fields)


def start_state(document: Mapping[str, object], config: EngineConfig, at: float) -> EngineState:
    """Return the engine state a scenario's first step (at `at`) starts from: `document` (a saved engine state
    whose `savedAt` is that step's wall-clock time) restored for `config`. Raises ScenarioError."""
    saved_at = document.get("savedAt")
    if isinstance(saved_at, bool) or not isinstance(saved_at, int | float) or not math.isfinite(saved_at):
        raise ScenarioError("must be a number of seconds (the first step's wall-clock time)",
                            key="engineState.savedAt", value=saved_at)
    try:
        restored = restore_state(document, node_name=str(document.get("node")),
                                 thresholds=restorable_thresholds(config.thresholds), now=at, now_wall=float(saved_at),
                                 restore_window_s=math.inf, transition_period_s=config.pressure_transition_period_s)
    except UnusableState as exc:
        raise ScenarioError(f"engineState: not a usable engine state: {exc.reason}") from None
    return restored.state


def _pods(value: object, key: str) -> tuple[Pod, ...]:
    return list_of(value, key, lambda item, where: pod_from_dict(mapping(item, where), where=where))


def _summary(value: object, key: str, decode: Callable[[Mapping[str, object]], Summary] = summary_from_dict) -> Summary:
    document = mapping(value, key)
    try:
        return decode(document)
    except DecodeError as exc:
        raise exc.at(key if exc.key == ROOT_KEY else f"{key}.{exc.key}") from None


def _config(value: object) -> tuple[EvictionSettings, EngineConfig]:
    document = dict(mapping(value, "config"))
    kind = document.pop("kind", KUBELET_KIND)
    api_version = document.pop("apiVersion", KUBELET_API_VERSION)
    if kind != KUBELET_KIND:
        raise ScenarioError(f"must be {KUBELET_KIND}", key="config.kind", value=kind)
    if api_version != KUBELET_API_VERSION:
        raise ScenarioError(f"must be {KUBELET_API_VERSION}", key="config.apiVersion", value=api_version)
    try:
        settings = with_stall_settings(eviction_settings(document), document)
        return settings, EngineConfig.from_settings(settings)
    except ConfigError as exc:
        if exc.key is None:
            raise ScenarioError(f"config: {exc.reason}") from None
        raise ScenarioError(exc.reason, key=f"config.{exc.key}", value=exc.value) from None


def _layout(value: object) -> FsLayout:
    layout = mapping(value, "layout")
    flags: dict[str, bool] = {}
    for name in ("dedicatedImageFs", "splitContainerFs"):
        flag = layout.get(name, False)
        if not isinstance(flag, bool):
            raise ScenarioError("must be true or false", key=f"layout.{name}", value=flag)
        flags[name] = flag
    unknown = sorted(set(layout) - set(flags))
    if unknown:
        raise ScenarioError("unknown field", key=f"layout.{unknown[0]}", value=layout[unknown[0]])
    return FsLayout(dedicated_imagefs=flags["dedicatedImageFs"], split_containerfs=flags["splitContainerFs"])


def _at(value: object, key: str, previous: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError("must be a number of seconds", key=key, value=value)
    if value < previous:
        raise ScenarioError(f"must not be earlier than the previous step ({previous:g})", key=key, value=value)
    return float(value)


def parse_scenario(document: object) -> Scenario:
    """Return the scenario in `document` (decoded YAML); raise ScenarioError naming the bad path."""
    try:
        return _scenario(document)
    except DecodeError as exc:  # a bad pod or Summary, or a part of the scenario that is not the right type
        raise ScenarioError(exc.reason, key=exc.key, value=exc.value) from None


def parse_head(document: Mapping[str, object]) -> Scenario:
    """The scenario of `document` without its steps (config, layout, engine state); raises ScenarioError or
    DecodeError. Its first pods are `scenario_pods`."""
    settings, config = _config(document.get("config", {}))
    layout = _layout(document.get("layout", {}))
    engine_state = document.get("engineState")
    if engine_state is not None:
        engine_state = mapping(engine_state, "engineState")
    config_document = document.get("config", {})
    # A scenario's config is a KubeletConfiguration with evictd's stall maps beside it (`with_stall_settings`).
    warnings = tuple(str(problem.at(f"config.{problem.key}", problem.value))
                     for problem in unknown_kubelet_fields({key: value for key, value in config_document.items()
                                                            if key not in STALL_FIELDS}, "config")) \
        if isinstance(config_document, Mapping) else ()
    return Scenario(config=config, layout=layout, steps=(), settings=settings, engine_state=engine_state,
                    warnings=warnings)


def scenario_pods(document: Mapping[str, object]) -> tuple[Pod, ...]:
    """The pods a scenario starts with; raises DecodeError."""
    return _pods(document.get("pods", []), "pods")


def parse_step(raw: object, key: str, previous: float, pods: tuple[Pod, ...],
               summaries: Callable[[Mapping[str, object]], Summary] = summary_from_dict) -> Step:
    """One step of a scenario (`key` names it in errors), after a step at `previous` with `pods`, its Summary
    decoded by `summaries` (a `SummaryDecoder`, for steps that share blocks); raises ScenarioError or
    DecodeError."""
    step = mapping(raw, key)
    unknown = sorted(set(step) - {"at", "summary", "afterReclaim", "afterDiskWait", "pods", "memoryReclaimed"})
    if unknown:
        raise ScenarioError("unknown field", key=f"{key}.{unknown[0]}", value=step[unknown[0]])
    at = _at(step.get("at"), f"{key}.at", previous)
    if "pods" in step:
        pods = _pods(step["pods"], f"{key}.pods")
    summary = _summary(step.get("summary", {}), f"{key}.summary", summaries)
    after = step.get("afterReclaim")
    after_reclaim = _summary(after, f"{key}.afterReclaim") if after is not None else None
    waited = step.get("afterDiskWait")
    after_disk_wait = _summary(waited, f"{key}.afterDiskWait") if waited is not None else None
    reclaimed = step.get("memoryReclaimed")
    if reclaimed is not None and (isinstance(reclaimed, bool) or not isinstance(reclaimed, int) or reclaimed < 0):
        raise ScenarioError("must be a number of bytes", key=f"{key}.memoryReclaimed", value=reclaimed)
    return Step(at=at, summary=summary, after_reclaim=after_reclaim, pods=pods, after_disk_wait=after_disk_wait,
                memory_reclaimed=reclaimed)


def _scenario(document: object) -> Scenario:
    root = mapping(document, "scenario")
    known = {"config", "layout", "pods", "steps", "engineState"}
    # Top-level `x-...` keys are free for YAML anchors (shared pod stats and the like), as in Compose files.
    unknown = sorted(key for key in set(root) - known if not str(key).startswith("x-"))
    if unknown:
        raise ScenarioError("unknown field", key=unknown[0], value=root[unknown[0]])
    head = parse_head(root)
    pods = scenario_pods(root)
    steps: list[Step] = []
    previous = float("-inf")
    for index, raw in enumerate(sequence(root.get("steps", []), "steps")):
        step = parse_step(raw, f"steps[{index}]", previous, pods)
        previous, pods = step.at, step.pods
        steps.append(step)
    if head.engine_state is not None:
        start_state(head.engine_state, head.config, steps[0].at if steps else 0.0)  # checked now, restored when run
    return replace(head, steps=tuple(steps))


class FakeClock:
    """A clock that shows whatever time the scenario has reached (seconds since the epoch, on the wall)."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)

    def sleep(self, seconds: float) -> None:
        """Nothing waits in a scenario: its time moves on at once."""
        self.now += seconds


class FixedLayout:
    def __init__(self, layout: FsLayout) -> None:
        self._layout = layout

    def layout(self) -> FsLayout:
        return self._layout


class ScriptedStats:
    """Returns the step's summary, its afterReclaim after a reclaim, and its afterDiskWait (or its summary) after a
    wait for disk figures."""

    def __init__(self) -> None:
        self.step: Step | None = None
        self.reclaimed = False
        self.waited = False

    def summary(self, pods: Sequence[Pod], *, reread: bool = False, runtime_wait_s: float | None = None) -> Summary:
        assert self.step is not None, "a step must be loaded before stats are read"
        if self.waited:
            return self.step.after_disk_wait if self.step.after_disk_wait is not None else self.step.summary
        if self.reclaimed and self.step.after_reclaim is not None:
            return self.step.after_reclaim
        return self.step.summary

    def memory_reading(self) -> None:
        """None: a scenario's step is one Summary; a crossing is confirmed on it as a whole."""
        return None


class ScriptedDiskFigures:
    """Waits for nothing: the stats read after the wait are the step's afterDiskWait (`ScriptedStats`). A replay so
    ranks on the figures the daemon's wait brought, and a scenario without them as the kubelet ranks."""

    def __init__(self, stats: ScriptedStats) -> None:
        self._stats = stats

    def wait_for_disk_figures(self, pods: Sequence[Pod], timeout_s: float) -> None:
        self._stats.waited = True


class ScriptedPods:
    """The step's pod list, without terminal pods."""

    def __init__(self) -> None:
        self.pods: tuple[Pod, ...] = ()

    def active_pods(self) -> Sequence[Pod]:
        return [pod for pod in self.pods if pod.status_phase not in TERMINAL_PHASES]


class RecordingReclaimer:
    """Frees nothing by itself (afterReclaim scripts the effect): the step's stats read after it are afterReclaim."""

    def __init__(self, stats: ScriptedStats) -> None:
        self._stats = stats

    def reclaim(self, action: ReclaimAction) -> int:
        self._stats.reclaimed = True
        return 0


class ScriptedMemoryReclaimer:
    """Reclaim before evict as the step scripts it (`memoryReclaimed`): that much freed, afterReclaim read after;
    elsewhere unavailable (as off)."""

    def __init__(self, stats: ScriptedStats) -> None:
        self._stats = stats

    def unavailable(self) -> str | None:
        step = self._stats.step
        return "not scripted in this step" if step is None or step.memory_reclaimed is None else None

    def holders(self) -> Sequence[CacheHolder]:
        # One reclaim a step: after it, no cache is left to ask for (no further round).
        return (CacheHolder("kubepods", PODS, 0 if self._stats.reclaimed else SCRIPTED_CACHE_BYTES),)

    def refault_file_bytes(self) -> int | None:
        return None

    def reclaim(self, plan: ReclaimPlan) -> ScriptedReclaim:
        self._stats.reclaimed = True
        step = self._stats.step
        return ScriptedReclaim(0 if step is None or step.memory_reclaimed is None else step.memory_reclaimed)


@dataclass(frozen=True, slots=True)
class ScriptedReclaim:
    total_freed_bytes: int
    elapsed_s: float = 0.0
    stopped: str = "done"


# What the pods' cache is said to be in a step that scripts a reclaim: more than any node's memory.
SCRIPTED_CACHE_BYTES = 1 << 62


class RecordingEvictor:
    def __init__(self) -> None:
        self.evictions: list[Eviction] = []

    def evict(self, eviction: Eviction) -> None:
        self.evictions.append(eviction)

    def follow_up(self, eviction: Eviction) -> FollowUp:  # no pod is terminating in a scenario: never asked
        return FollowUp(eviction, FollowUpKind.LEFT_TO_KUBELET, "simulated")


class ScenarioRunner:
    """The eviction manager driven step by step by a scenario's readings (`run_scenario`, and a replay that reads
    its steps as it goes)."""

    def __init__(self, config: EngineConfig, layout: FsLayout, state: EngineState | None = None) -> None:
        self._clock = FakeClock()
        self._stats = ScriptedStats()
        self._pods = ScriptedPods()
        self.manager = EvictionManager(
            config,
            stats=self._stats,
            layout=FixedLayout(layout),
            pods=self._pods,
            reclaimer=RecordingReclaimer(self._stats),
            evictor=RecordingEvictor(),
            clock=self._clock,
            disk_figures=ScriptedDiskFigures(self._stats),
            memory_reclaim=MemoryReclaimStep(ReclaimSettings(enabled=True), ScriptedMemoryReclaimer(self._stats)),
        )
        if state is not None:
            self.manager.state = state

    def step(self, step: Step) -> CycleReport:
        """Run one cycle on `step`'s readings."""
        self._clock.now = step.at
        self._stats.step = step
        self._stats.reclaimed = False
        self._stats.waited = False
        self._pods.pods = step.pods
        return self.manager.synchronize()


# Told after each step's cycle: its report, and the manager's state after it.
AfterStep = Callable[[CycleReport, EngineState], None]


def run_scenario(scenario: Scenario, after_step: AfterStep | None = None) -> list[CycleReport]:
    """Run the scenario's steps through the eviction manager, one cycle each; return the cycles' reports."""
    state = None
    if scenario.engine_state is not None and scenario.steps:
        state = start_state(scenario.engine_state, scenario.config, scenario.steps[0].at)
    runner = ScenarioRunner(scenario.config, scenario.layout, state)
    reports: list[CycleReport] = []
    for step in scenario.steps:
        reports.append(runner.step(step))
        if after_step is not None:
            after_step(reports[-1], runner.manager.state)
    return reports

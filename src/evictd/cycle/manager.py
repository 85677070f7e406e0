"""The eviction manager: sequences one kubelet `synchronize` cycle over the pure engine and the adapters.

It owns the engine state between cycles and talks to the outside only through the protocols below, so the
daemon, `evictd simulate` and the tests all drive the very same code with different adapters. It does no I/O
of its own and never logs: every cycle returns a `CycleReport` that the caller turns into logs, metrics and
events. Adapter failures are contained per KUBELET_SPEC §15: unreadable stats freeze the state, a failed
reclaim action is recorded and the others still run, and a failed eviction still counts as the cycle's one
eviction (as the kubelet counts it).

A pod list that cannot be used (the Kubernetes API has given none) evicts nobody, unless `node_pods` is
given: the pods the node shows are then ranked instead, for hard thresholds only (`_list_pods`).

With an `EvictionApiRoute` (`softEvictionsThroughEvictionAPI`), a soft threshold's eviction asks the Eviction API
instead (`_through_eviction_api` says when): a refusal moves to the next candidate in ranking order, at most
`max_candidates` per cycle; every refusal is in the report. Hard thresholds, and a soft one once a hard threshold
is met or once it has stayed met `deadline_s` past its grace period, evict as the kubelet does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from evictd.clock import Clock
from evictd.core.engine import (
    Assessment,
    EngineConfig,
    EngineState,
    EvictForLocalStorage,
    Eviction,
    NoneStarved,
    ReclaimThenEvict,
    Skipped,
    assess,
    choose_eviction,
    layout_of,
    note_evictions,
    reclaim_succeeded,
)
from evictd.core.errors import EvictdError, EvictionRefused
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.oom import OomReport
from evictd.core.pods import Pod
from evictd.core.ranking import SortKey
from evictd.core.signals import Signal
from evictd.core.summary import Summary

# The state of an engine that remembers nothing: what a manager without a restored state starts from.
FRESH_STATE = EngineState()


class StatsSource(Protocol):
    """Produces a fresh kubelet-style Summary of the node (raises EvictdError when it cannot)."""

    def summary(self) -> Summary: ...


class LayoutSource(Protocol):
    """Tells how the node's filesystems are laid out (raises EvictdError when it cannot)."""

    def layout(self) -> FsLayout: ...


class PodSource(Protocol):
    """Lists the node's active pods (the kubelet's podFunc)."""

    def active_pods(self) -> Sequence[Pod]: ...


class ListedPods:
    """The pods the manager listed in its current cycle, as a PodSource: what the stats source should measure,
    wherever the pods came from (the API's list, or the node's pods when that list is unusable)."""

    def __init__(self) -> None:
        self.pods: tuple[Pod, ...] = ()

    def active_pods(self) -> Sequence[Pod]:
        return self.pods


class NodeReclaimer(Protocol):
    """Frees resources at node level; returns the bytes freed (raises EvictdError on failure)."""

    def reclaim(self, action: ReclaimAction) -> int: ...


class PodEvictor(Protocol):
    """Evicts one pod as decided (raises EvictdError on failure)."""

    def evict(self, eviction: Eviction) -> None: ...


class ApiEvictor(Protocol):
    """Asks the Eviction API to evict one pod (raises EvictionRefused when it will not now, EvictdError when it
    could not be asked)."""

    def request_eviction(self, eviction: Eviction) -> None: ...


@dataclass(frozen=True, slots=True)
class EvictionApiRoute:
    """Soft evictions through the Eviction API: who asks, how many candidates a cycle may ask at most, and how
    long past its grace period a soft threshold may stay met before evictd evicts as the kubelet does."""

    evictor: ApiEvictor
    max_candidates: int
    deadline_s: float


@dataclass(frozen=True, slots=True)
class EvictionRefusal:
    """The Eviction API's refusal to evict `pod`: the HTTP status, the Status reason (or the cause's, such as
    DisruptionBudget), the budget it names ("" when none) and the API's message."""

    pod: str
    status: int | None
    reason: str
    budget: str
    message: str

    @classmethod
    def of(cls, error: EvictionRefused) -> EvictionRefusal:
        causes = [reason for reason, _ in error.causes if reason]
        reason = causes[0] if causes else error.reason or str(error.status)
        return cls(pod=error.pod, status=error.status, reason=reason, budget=error.budget, message=error.detail)


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """One node-level reclaim action that ran, and what it freed (or why it failed)."""

    action: ReclaimAction
    freed_bytes: int = 0
    error: str | None = None


class CycleStep(StrEnum):
    """The step of a cycle that failed; its value is the `source` label of `evictd_errors_total`."""

    LAYOUT = "layout"  # detecting the node's filesystem layout
    PODS = "pods"  # listing the node's pods
    STATS = "stats"  # reading the node's stats (before or after reclaim)
    RECLAIM = "reclaim"  # a node-level reclaim action
    EVICTION = "eviction"  # evicting a pod


@dataclass(frozen=True, slots=True)
class CycleError:
    """One failure of a cycle: the step that failed and what went wrong (the kubelet's log text)."""

    step: CycleStep
    description: str


# What a cycle without a usable pod list is called in /healthz and in the evictd_degraded metric's label.
POD_LIST_UNAVAILABLE = "pod-list-unavailable"


@dataclass(frozen=True, slots=True)
class CycleReport:
    """Everything one cycle saw, decided and did."""

    now: float
    assessment: Assessment
    summary: Summary | None = None
    pods: tuple[Pod, ...] = ()
    reclaim: tuple[ReclaimResult, ...] = ()
    reclaim_succeeded: bool | None = None
    # The Summary read after node-level reclaim, which decided whether it succeeded (None: none read).
    after_reclaim: Summary | None = None
    ranking: tuple[Pod, ...] = ()
    # The signal the pods were ranked for and each one's sort key, in ranking order (`core.ranking.named_key_parts`).
    ranking_signal: Signal | None = None
    ranking_keys: tuple[SortKey, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    eviction_errors: tuple[str, ...] = ()
    skipped_critical: tuple[Pod, ...] = ()
    errors: tuple[CycleError, ...] = ()
    # The kernel's OOM kills since the last cycle (added by the daemon's OOM feedback; None without it).
    oom: OomReport | None = None
    # Why the pod list could not be used this cycle (None: it could); with `pods_from_node` the pods ranked
    # were the node's instead, for hard thresholds only.
    pod_list_problem: str | None = None
    pods_from_node: bool = False
    # Why nobody was ranked although a threshold asked for an eviction (a soft one, with the node's pods).
    withheld: str | None = None
    # With soft evictions through the Eviction API: whether this cycle's eviction went through it, the refusals it
    # met (in ranking order), and why a soft eviction went the kubelet's way instead (None: it did not).
    through_eviction_api: bool = False
    refusals: tuple[EvictionRefusal, ...] = ()
    eviction_api_bypassed: str | None = None

    @property
    def degraded(self) -> str | None:
        """Why the cycle worked in a degraded mode, as `/healthz` says it (None: it did not)."""
        if self.pod_list_problem is None:
            return None
        acting = ("hard thresholds act on the pods the node shows, through the container runtime"
                  if self.pods_from_node else "no pod can be evicted")
        return f"{POD_LIST_UNAVAILABLE}: no pod list from the Kubernetes API, {acting} ({self.pod_list_problem})"


class EvictionManager:
    def __init__(self, config: EngineConfig, *, stats: StatsSource, layout: LayoutSource, pods: PodSource,
                 reclaimer: NodeReclaimer, evictor: PodEvictor, clock: Clock, node_pods: PodSource | None = None,
                 listed: ListedPods | None = None, state: EngineState = FRESH_STATE,
                 layout_changes: Callable[[], int] = lambda: 0, eviction_api: EvictionApiRoute | None = None) -> None:
        self.config = config
        # The state restored from the last run (grace periods, pressure history), or a fresh one.
        self.state = state
        # How many times `layout` and `reclaimer` changed (a container runtime answering after the manager
        # was built): after a change the next cycle detects the layout again and derives the thresholds again,
        # grace periods and conditions kept (`evictd.run.runtime_link.NodeLevel`).
        self._layout_changes = layout_changes
        self._layout_changes_seen = layout_changes()
        self._stats = stats
        self._layout = layout
        self._pods = pods
        self._node_pods = node_pods
        self.listed = listed if listed is not None else ListedPods()
        self._reclaimer = reclaimer
        self._evictor = evictor
        self._eviction_api = eviction_api
        self._clock = clock

    def synchronize(self) -> CycleReport:
        """Run one cycle: observe, decide, reclaim at node level, and evict at most one pod for thresholds."""
        now = self._clock.monotonic()
        errors: list[CycleError] = []
        changes = self._layout_changes()
        if changes != self._layout_changes_seen:
            self._layout_changes_seen = changes
            self.state = replace(self.state, layout=None)
        layout = self.state.layout
        if layout is None:
            try:
                layout = self._layout.layout()
            except EvictdError as exc:
                reason = f"eviction manager: failed to get HasDedicatedImageFs: {exc}"
                return CycleReport(now=now, assessment=Assessment(Skipped(reason)),
                                   errors=(CycleError(CycleStep.LAYOUT, reason),))
        pods, problem, from_node = self._list_pods()
        if problem is not None and not from_node:
            errors.append(CycleError(CycleStep.PODS,
                                     f"eviction manager: pods unavailable, no pod will be evicted: {problem}"))
        self.listed.pods = pods
        summary: Summary | None = None
        try:
            summary = self._stats.summary()
        except EvictdError as exc:
            errors.append(CycleError(CycleStep.STATS, f"eviction manager: failed to get summary stats: {exc}"))
        self.state, assessment = assess(self.state, self.config, layout, summary, pods, now)
        seen = CycleReport(now=now, assessment=assessment, summary=summary, pods=pods, errors=tuple(errors),
                           pod_list_problem=problem, pods_from_node=from_node)
        if summary is None:  # assess skipped the cycle (stats unavailable)
            return seen
        match assessment.next_step:
            case Skipped() | NoneStarved():
                return seen
            case EvictForLocalStorage(evictions=evictions):
                evicted, failures = self._evict(evictions)
                return replace(seen, evictions=evicted, eviction_errors=failures)
            case ReclaimThenEvict() as step:
                return self._reclaim_then_evict(seen, step, summary)

    def _reclaim_then_evict(self, seen: CycleReport, step: ReclaimThenEvict, summary: Summary) -> CycleReport:
        """Run the step's node-level reclaim; unless it resolved the pressure, evict the first ranked pod."""
        errors = list(seen.errors)
        reclaim = tuple(self._reclaim(action) for action in step.actions)
        succeeded: bool | None = None
        after: Summary | None = None
        if step.actions:
            try:
                after = self._stats.summary()
            except EvictdError as exc:
                errors.append(CycleError(
                    CycleStep.STATS, f"eviction manager: failed to get summary stats after resource reclaim: {exc}"))
            succeeded = reclaim_succeeded(self.state, after)
            if succeeded:
                return replace(seen, reclaim=reclaim, reclaim_succeeded=True, after_reclaim=after,
                               errors=tuple(errors))
        route = self._eviction_api
        choice = choose_eviction(self.config, layout_of(self.state), step, seen.assessment.observations, seen.pods,
                                 summary, pods_from_node=seen.pods_from_node,
                                 candidates=route.max_candidates if route is not None else 1)
        bypassed = None
        refusals: tuple[EvictionRefusal, ...] = ()
        through_api = False
        if route is not None and choice.eviction is not None and is_soft(choice.eviction):
            bypassed = _eviction_api_bypassed(route, seen.assessment, choice.eviction)
            through_api = bypassed is None
        if through_api and route is not None and choice.eviction is not None:
            evicted, failures, refusals = _evict_through_api(route.evictor, (choice.eviction, *choice.alternates))
        else:
            evicted, failures = self._evict((choice.eviction,) if choice.eviction else ())
        self.state = note_evictions(self.state, evicted, seen.now)
        return replace(seen, reclaim=reclaim, reclaim_succeeded=succeeded, after_reclaim=after, ranking=choice.ranking,
                       ranking_signal=choice.ranking_signal, ranking_keys=choice.ranking_keys, evictions=evicted,
                       eviction_errors=failures, skipped_critical=choice.skipped_critical, withheld=choice.withheld,
                       errors=tuple(errors), through_eviction_api=through_api, refusals=refusals,
                       eviction_api_bypassed=bypassed)

    def _list_pods(self) -> tuple[tuple[Pod, ...], str | None, bool]:
        """Return (pods, why the pod list is unusable or None, whether the pods are the node's instead).

        A pod list known to be wrong is never acted on: without `node_pods` (or when they cannot be listed
        either) the cycle still observes, but evicts nobody.
        """
        try:
            return tuple(self._pods.active_pods()), None, False
        except EvictdError as exc:
            problem = str(exc)
        if self._node_pods is None:
            return (), problem, False
        try:
            return tuple(self._node_pods.active_pods()), problem, True
        except EvictdError as exc:
            return (), f"{problem}; the node's pods cannot be used either: {exc}", False

    def _reclaim(self, action: ReclaimAction) -> ReclaimResult:
        try:
            return ReclaimResult(action=action, freed_bytes=self._reclaimer.reclaim(action))
        except EvictdError as exc:
            return ReclaimResult(action=action, error=str(exc))

    def _evict(self, evictions: Sequence[Eviction]) -> tuple[tuple[Eviction, ...], tuple[str, ...]]:
        """Evict each pod; a failure is recorded but the eviction still counts, as in the kubelet."""
        failures: list[str] = []
        for eviction in evictions:
            try:
                self._evictor.evict(eviction)
            except EvictdError as exc:
                failures.append(f"{eviction.pod.key}: {exc}")
        return tuple(evictions), tuple(failures)


def is_soft(eviction: Eviction) -> bool:
    """Whether `eviction` was decided by a soft threshold."""
    return eviction.threshold is not None and not eviction.threshold.is_hard


def _eviction_api_bypassed(route: EvictionApiRoute, assessment: Assessment, eviction: Eviction) -> str | None:
    """Why a soft eviction goes the kubelet's way although soft evictions go through the Eviction API (None: it
    goes through the API): a hard threshold is met, or the soft one has stayed met past its grace period for
    longer than the route's deadline."""
    hard = [status.threshold for status in assessment.thresholds if status.threshold.is_hard]
    if hard:
        return f"hard threshold {hard[0].signal} met"
    for status in assessment.thresholds:
        if status.threshold == eviction.threshold:
            past_grace_s = status.observed_for_s - status.threshold.grace_period_s
            if past_grace_s > route.deadline_s:
                return (f"soft threshold {status.threshold.signal} met {past_grace_s:.0f} s past its grace period, "
                        f"beyond the Eviction API deadline of {route.deadline_s:g} s")
    return None


def _evict_through_api(evictor: ApiEvictor, candidates: Sequence[Eviction]
                       ) -> tuple[tuple[Eviction, ...], tuple[str, ...], tuple[EvictionRefusal, ...]]:
    """Ask the Eviction API for each candidate in turn until one is not refused; return (the eviction, its failure,
    the refusals). A failure other than a refusal ends the cycle and counts as its eviction, as in `_evict`."""
    refusals: list[EvictionRefusal] = []
    for eviction in candidates:
        try:
            evictor.request_eviction(eviction)
        except EvictionRefused as exc:
            refusals.append(EvictionRefusal.of(exc))
            continue
        except EvictdError as exc:
            return (eviction,), (f"{eviction.pod.key}: {exc}",), tuple(refusals)
        return (eviction,), (), tuple(refusals)
    return (), (), tuple(refusals)

"""The eviction manager: sequences one kubelet `synchronize` cycle over the pure engine and the adapters.

It owns the engine state between cycles and talks to the outside only through the protocols below, so the
daemon, `evictd simulate` and the tests all drive the very same code with different adapters. It does no I/O
of its own and never logs: every cycle returns a `CycleReport` that the caller turns into logs, metrics and
events. Adapter failures are contained per KUBELET_SPEC §15: unreadable stats freeze the state, a failed
reclaim action is recorded and the others still run, and a failed eviction still counts as the cycle's one
eviction (as the kubelet counts it).

A pod list that cannot be used (the Kubernetes API has given none) evicts nobody, unless `node_pods` is
given: the pods the node shows are then ranked instead, for hard thresholds only (`_list_pods`).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    reclaim_succeeded,
)
from evictd.core.errors import EvictdError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.oom import OomReport
from evictd.core.pods import Pod
from evictd.core.ranking import SortKey
from evictd.core.signals import Signal
from evictd.core.summary import Summary


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
                 listed: ListedPods | None = None) -> None:
        self.config = config
        self.state = EngineState()
        self._stats = stats
        self._layout = layout
        self._pods = pods
        self._node_pods = node_pods
        self.listed = listed if listed is not None else ListedPods()
        self._reclaimer = reclaimer
        self._evictor = evictor
        self._clock = clock

    def attach_runtime(self, layout: LayoutSource, reclaimer: NodeReclaimer) -> None:
        """Use a container runtime that answered after the manager was built: its layout (detected again by
        the next cycle, thresholds derived again; grace periods and conditions kept) and its reclaimer."""
        self._layout = layout
        self._reclaimer = reclaimer
        self.state = replace(self.state, layout=None)

    def synchronize(self) -> CycleReport:
        """Run one cycle: observe, decide, reclaim at node level, and evict at most one pod for thresholds."""
        now = self._clock.monotonic()
        errors: list[CycleError] = []
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
        choice = choose_eviction(self.config, layout_of(self.state), step, seen.assessment.observations, seen.pods,
                                 summary, pods_from_node=seen.pods_from_node)
        evicted, failures = self._evict((choice.eviction,) if choice.eviction else ())
        return replace(seen, reclaim=reclaim, reclaim_succeeded=succeeded, after_reclaim=after, ranking=choice.ranking,
                       ranking_signal=choice.ranking_signal, ranking_keys=choice.ranking_keys, evictions=evicted,
                       eviction_errors=failures, skipped_critical=choice.skipped_critical, withheld=choice.withheld,
                       errors=tuple(errors))

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

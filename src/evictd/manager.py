"""The eviction manager: sequences one kubelet `synchronize` cycle over the pure engine and the adapters.

It owns the engine state between cycles and talks to the outside only through the protocols below, so the
daemon, `evictd simulate` and the tests all drive the very same code with different adapters. It does no I/O
of its own and never logs: every cycle returns a `CycleReport` that the caller turns into logs, metrics and
events. Adapter failures are contained per KUBELET_SPEC §15: unreadable stats freeze the state, a failed
reclaim action is recorded and the others still run, and a failed eviction still counts as the cycle's one
eviction (as the kubelet counts it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from evictd.core.engine import (
    Assessment,
    EngineConfig,
    EngineState,
    Eviction,
    ReclaimAction,
    assess,
    choose_eviction,
    reclaim_succeeded,
)
from evictd.core.errors import EvictdError
from evictd.core.oom import OomReport
from evictd.core.pods import Pod
from evictd.core.signals import FsLayout
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


class NodeReclaimer(Protocol):
    """Frees resources at node level; returns the bytes freed (raises EvictdError on failure)."""

    def reclaim(self, action: ReclaimAction) -> int: ...


class PodEvictor(Protocol):
    """Evicts one pod as decided (raises EvictdError on failure)."""

    def evict(self, eviction: Eviction) -> None: ...


class Clock(Protocol):
    """Monotonic seconds; the only time the engine reasons with."""

    def monotonic(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """One node-level reclaim action that ran, and what it freed (or why it failed)."""

    action: ReclaimAction
    freed_bytes: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CycleReport:
    """Everything one cycle saw, decided and did."""

    now: float
    assessment: Assessment
    summary: Summary | None = None
    pods: tuple[Pod, ...] = ()
    reclaim: tuple[ReclaimResult, ...] = ()
    reclaim_succeeded: bool | None = None
    ranking: tuple[Pod, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    eviction_errors: tuple[str, ...] = ()
    skipped_critical: tuple[Pod, ...] = ()
    errors: tuple[str, ...] = ()
    # The kernel's OOM kills since the last cycle (added by the daemon's OOM feedback; None without it).
    oom: OomReport | None = None


class EvictionManager:
    """Runs kubelet eviction cycles against the given adapters."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        stats: StatsSource,
        layout: LayoutSource,
        pods: PodSource,
        reclaimer: NodeReclaimer,
        evictor: PodEvictor,
        clock: Clock,
    ) -> None:
        self.config = config
        self.state = EngineState()
        self._stats = stats
        self._layout = layout
        self._pods = pods
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
        errors: list[str] = []
        layout = self.state.layout
        if layout is None:
            try:
                layout = self._layout.layout()
            except EvictdError as exc:
                reason = f"eviction manager: failed to get HasDedicatedImageFs: {exc}"
                return CycleReport(now=now, assessment=Assessment(skipped=reason), errors=(reason,))
        try:
            pods = tuple(self._pods.active_pods())
        except EvictdError as exc:
            # A pod list known to be wrong is never acted on: the cycle still observes, but evicts nobody.
            pods = ()
            errors.append(f"eviction manager: pods unavailable, no pod will be evicted: {exc}")
        summary: Summary | None
        try:
            summary = self._stats.summary()
        except EvictdError as exc:
            summary = None
            errors.append(f"eviction manager: failed to get summary stats: {exc}")
        self.state, assessment = assess(self.state, self.config, layout, summary, pods, now)
        seen = CycleReport(now=now, assessment=assessment, summary=summary, pods=pods, errors=tuple(errors))
        if summary is None:
            return seen
        if assessment.local_storage_evictions:
            evicted, failures = self._evict(assessment.local_storage_evictions)
            return replace(seen, evictions=evicted, eviction_errors=failures)
        if assessment.threshold_to_reclaim is None:
            return seen
        reclaim = tuple(self._reclaim(action) for action in assessment.reclaim_actions)
        succeeded: bool | None = None
        if assessment.reclaim_actions:
            try:
                after = self._stats.summary()
            except EvictdError as exc:
                after = None
                errors.append(f"eviction manager: failed to get summary stats after resource reclaim: {exc}")
            succeeded = reclaim_succeeded(self.state, after)
            if succeeded:
                return replace(seen, reclaim=reclaim, reclaim_succeeded=True, errors=tuple(errors))
        choice = choose_eviction(self.config, self.state, assessment, pods, summary)
        evicted, failures = self._evict((choice.eviction,) if choice.eviction else ())
        return replace(
            seen,
            reclaim=reclaim,
            reclaim_succeeded=succeeded,
            ranking=choice.ranking,
            evictions=evicted,
            eviction_errors=failures,
            skipped_critical=choice.skipped_critical,
            errors=tuple(errors),
        )

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

"""Reclaim before evict in a cycle (evictd's own, issue 41): sequences the rule (`evictd.core.memory_reclaim`) over
its adapter for the eviction manager, and remembers the attempts between cycles for the rule's back-off.

The manager calls `attempt` when a memory threshold is about to evict (after the kubelet's node-level reclaim, which
has no action for memory); if it returns a result, the manager reads the stats again and evicts only if a threshold
it was for is still met with its minimum reclaim (`evictd.core.memory_reclaim.cleared`), then tells `settle` whether
the eviction was avoided. Nothing here logs: what happened is in the returned `MemoryReclaimUse`
(`evictd.cycle.report`), which the cycle report carries.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from evictd.core.errors import EvictdError
from evictd.core.fs_layout import ReclaimAction
from evictd.core.memory_reclaim import (
    CacheHolder,
    ReclaimAttempt,
    ReclaimHistory,
    ReclaimPlan,
    ReclaimSettings,
    ReclaimSkip,
    after_attempt,
    judged,
    reclaim_plan,
)
from evictd.core.signals import Signal
from evictd.core.summary import Observation, Summary
from evictd.core.thresholds import Threshold
from evictd.cycle.report import Acted, MemoryReclaimUse, ReclaimResult


class Outcome(Protocol):
    """What the adapter's attempt did (`evictd.adapters.memory_reclaim.ReclaimOutcome`)."""

    @property
    def total_freed_bytes(self) -> int: ...

    @property
    def elapsed_s(self) -> float: ...

    @property
    def stopped(self) -> str: ...


class MemoryReclaimer(Protocol):
    """Reads where pods' page cache is and reclaims it (raises EvictdError)."""

    def unavailable(self) -> str | None:
        """Why this node cannot reclaim now (None: it can); asked before every attempt."""
        ...

    def holders(self) -> Sequence[CacheHolder]: ...

    def refault_file_bytes(self) -> int | None: ...

    def reclaim(self, plan: ReclaimPlan) -> Outcome: ...


class MemoryReclaimStep:
    """The rule's memory between cycles, and its one call per cycle (see the module)."""

    def __init__(self, settings: ReclaimSettings, reclaimer: MemoryReclaimer) -> None:
        self.settings = settings
        self._reclaimer = reclaimer
        self.history = ReclaimHistory()
        self._pending: tuple[float, int] | None = None  # (started at, freed bytes) of the attempt awaiting `settle`

    def attempt(self, thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation], summary: Summary,
                now: float) -> MemoryReclaimUse | None:
        """Reclaim before evicting for `thresholds` (the cycle's `observations`, read in `summary`), if the rule says
        so; None when the rule is off or the node cannot (nothing to report)."""
        if not self.settings.enabled or self.settings.unavailable is not None or self._reclaimer.unavailable():
            return None
        memory = summary.node.memory
        stall_full_avg10 = None if memory is None or memory.psi is None else memory.psi.full.avg10
        signal = str(thresholds[0].signal)
        refaults = None
        if self.history.last is not None:
            # The cycle's own reading of /proc/vmstat when its stats carry it (stall-family thresholds), else one read.
            counted = None if memory is None or memory.reclaim is None else memory.reclaim.refault_file_bytes
            refaults = counted if counted is not None else self._reclaimer.refault_file_bytes()
        self.history = judged(self.history, refaults, stall_full_avg10, now)
        try:
            holders: Sequence[CacheHolder] = self._reclaimer.holders()
        except EvictdError as exc:
            return MemoryReclaimUse(signal, skipped=f"page cache not readable: {exc}")
        plan = reclaim_plan(self.settings, thresholds, observations, holders, self.history, now)
        if isinstance(plan, ReclaimSkip):
            return MemoryReclaimUse(signal, skipped=plan.reason, backing_off=plan.backing_off)
        try:
            outcome = self._reclaimer.reclaim(plan)
        except EvictdError as exc:
            self._pending = (now, 0)
            return MemoryReclaimUse(signal, result=ReclaimResult(ReclaimAction.MEMORY_RECLAIM, error=str(exc)),
                                    needed_bytes=plan.needed_bytes)
        self._pending = (now, outcome.total_freed_bytes)
        return MemoryReclaimUse(signal, result=ReclaimResult(ReclaimAction.MEMORY_RECLAIM,
                                                             freed_bytes=outcome.total_freed_bytes),
                                needed_bytes=plan.needed_bytes, elapsed_s=outcome.elapsed_s, stopped=outcome.stopped)

    def settle(self, avoided: bool) -> None:
        """Record whether the attempt of this cycle avoided the eviction (no attempt: nothing)."""
        if self._pending is None:
            return
        at, freed = self._pending
        self._pending = None
        refaults = self._reclaimer.refault_file_bytes()
        self.history = after_attempt(self.history, ReclaimAttempt(at, freed, avoided, refaults))


# The reason of the Normal event on the node that tells what reclaim before evict did.
MEMORY_RECLAIMED_REASON = "MemoryReclaimed"


def memory_reclaim_event(acted: Acted) -> tuple[str, str] | None:
    """The node event (reason, message) of a cycle's reclaim before evict that ran (None: it did not run)."""
    use = acted.memory_reclaim
    if use is None or use.result is None or use.result.error is not None:
        return None
    verdict = "no eviction needed" if acted.reclaim_succeeded else "eviction still needed"
    return (MEMORY_RECLAIMED_REASON, f"reclaimed {use.result.freed_bytes >> 20} MiB of page cache for {use.signal} "
                                     f"before evicting, {verdict}")

"""Reclaim before evict in a cycle (evictd's own): sequences `evictd.core.memory_reclaim` over its adapter for the
eviction manager, and remembers the attempts between cycles for the rule's back-off.

`MemoryReclaimStep.run` is called when a memory threshold is about to evict: it reclaims in rounds, reading the stats
after each (`another_round`), and says whether the last reading clears the thresholds with their minimum reclaim
(`cleared`); the manager evicts only if not. No logs: the returned `MemoryReclaimUse` says what happened.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple, Protocol

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
    another_round,
    cleared,
    judged,
    lacking_bytes,
    reclaim_plan,
)
from evictd.core.signals import Signal
from evictd.core.summary import Observation, Summary, signal_observations
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


class ReclaimFirst(NamedTuple):
    """What `MemoryReclaimStep.run` did: `use` (None: the rule is off or the node cannot), the stats read after its
    last round (None: no round ran, or they could not be read) and whether they clear the thresholds (None: no round
    ran)."""

    use: MemoryReclaimUse | None
    after: Summary | None = None
    cleared: bool | None = None


class MemoryReclaimStep:
    """The rule's memory between cycles, and its one call per cycle (see the module)."""

    def __init__(self, settings: ReclaimSettings, reclaimer: MemoryReclaimer,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._reclaimer = reclaimer
        self._monotonic = monotonic
        self.history = ReclaimHistory()

    def run(self, thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation], summary: Summary,
            now: float, reread: Callable[[], Summary | None]) -> ReclaimFirst:
        """Reclaim before evicting for `thresholds`, if the rule says so, in rounds each followed by `reread` (None:
        unreadable), and settle whether the last reading clears them."""
        if not self.settings.enabled or self.settings.unavailable is not None or self._reclaimer.unavailable():
            return ReclaimFirst(None)
        signal = str(thresholds[0].signal)
        self.history = judged(self.history, self._refaults(summary), self._stall_full_avg10(summary), now)
        started = self._monotonic()
        plan = self._plan(thresholds, observations, self.settings, now)
        if not isinstance(plan, ReclaimPlan):
            return ReclaimFirst(plan if isinstance(plan, MemoryReclaimUse) else
                                MemoryReclaimUse(signal, skipped=plan.reason, backing_off=plan.backing_off))
        needed, freed, rounds = plan.needed_bytes, 0, 0
        while True:
            rounds += 1
            error = ""
            try:
                outcome: Outcome | None = self._reclaimer.reclaim(plan)
            except EvictdError as exc:
                outcome, error = None, str(exc)
            round_freed = 0 if outcome is None else outcome.total_freed_bytes
            freed += round_freed
            after = reread()
            seen = None if after is None else signal_observations(after)
            cleared_now = seen is not None and cleared(thresholds, seen)
            elapsed = self._monotonic() - started
            if outcome is None:
                self._settle(now, freed, elapsed, cleared_now)
                return ReclaimFirst(MemoryReclaimUse(signal, result=ReclaimResult(
                    ReclaimAction.MEMORY_RECLAIM, error=error), needed_bytes=needed, rounds=rounds), after, cleared_now)
            lacking = 0 if seen is None else lacking_bytes(thresholds, seen)
            again = None
            if not cleared_now and seen is not None and another_round(
                    plan.needed_bytes, round_freed, lacking, elapsed, self.settings.budget_s, rounds):
                again = self._plan(thresholds, seen,
                                   replace(self.settings, budget_s=self.settings.budget_s - elapsed), now)
            if not isinstance(again, ReclaimPlan):
                self._settle(now, freed, elapsed, cleared_now)
                return ReclaimFirst(MemoryReclaimUse(
                    signal, result=ReclaimResult(ReclaimAction.MEMORY_RECLAIM, freed_bytes=freed),
                    needed_bytes=needed, elapsed_s=elapsed, stopped=outcome.stopped, rounds=rounds,
                    still_needed_bytes=0 if cleared_now else lacking), after, cleared_now)
            plan = again

    def _plan(self, thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation],
              settings: ReclaimSettings, now: float) -> ReclaimPlan | ReclaimSkip | MemoryReclaimUse:
        try:
            holders: Sequence[CacheHolder] = self._reclaimer.holders()
        except EvictdError as exc:
            return MemoryReclaimUse(str(thresholds[0].signal), skipped=f"page cache not readable: {exc}")
        return reclaim_plan(settings, thresholds, observations, holders, self.history, now)

    def _refaults(self, summary: Summary) -> int | None:
        if self.history.last is None:
            return None
        # The cycle's own reading of /proc/vmstat when its stats carry it (stall-family thresholds), else one read.
        memory = summary.node.memory
        counted = None if memory is None or memory.reclaim is None else memory.reclaim.refault_file_bytes
        return counted if counted is not None else self._reclaimer.refault_file_bytes()

    @staticmethod
    def _stall_full_avg10(summary: Summary) -> float | None:
        memory = summary.node.memory
        return None if memory is None or memory.psi is None else memory.psi.full.avg10

    def _settle(self, at: float, freed: int, spent_s: float, avoided: bool) -> None:
        """Remember the attempt that started at `at`: what it freed in `spent_s`, whether it avoided the eviction."""
        refaults = self._reclaimer.refault_file_bytes()
        self.history = after_attempt(self.history, ReclaimAttempt(at, freed, avoided, refaults, spent_s))


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

"""Reclaim for the daemons in a cycle (evictd's own): sequences `evictd.core.daemons_reclaim` over the memory.reclaim
adapter for the eviction manager, and remembers the attempts between cycles for the rule's verdicts and back-off.

`DaemonsReclaimStep.run` is called once a cycle that read its stats, after the engine made the daemons' figure and
before any eviction step: it judges the last attempt, then reclaims if the rule says so, in one attempt within its
budget. It never evicts and never reads the stats again (the verdict waits for a later cycle's figure). The pods'
page cache is read only when the figure alone does not skip. No logs: the returned `DaemonsReclaimUse` says what
happened.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from evictd.core.daemons_reclaim import (
    DaemonsAttempt,
    DaemonsReclaimHistory,
    DaemonsReclaimSettings,
    DaemonsVerdict,
    after_attempt,
    daemons_reclaim_plan,
    daemons_reclaim_skip,
    judged,
)
from evictd.core.errors import EvictdError
from evictd.core.memory_reclaim import CacheHolder, ReclaimPlan
from evictd.core.refault import RefaultFigure
from evictd.cycle.reclaim_first import MemoryReclaimer, Outcome
from evictd.cycle.report import DaemonsReclaimUse


class DaemonsReclaimStep:
    """The rule's memory between cycles, and its one call per cycle (see the module)."""

    def __init__(self, settings: DaemonsReclaimSettings, reclaimer: MemoryReclaimer,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._reclaimer = reclaimer
        self._monotonic = monotonic
        self.history = DaemonsReclaimHistory()

    @property
    def awaiting_verdict(self) -> bool:
        """Whether an attempt awaits its verdict: a daemons refault eviction waits for it."""
        return self.history.pending is not None

    def run(self, figure: RefaultFigure | None, now: float, *, memory_reclaim_acts: bool = False
            ) -> DaemonsReclaimUse | None:
        """Judge the last attempt on `figure` (the daemons', read this cycle; None: unknown) and reclaim if the rule
        says so at `now` (not when reclaim before evict acts this cycle: `memory_reclaim_acts`); None when the rule is
        off or the node cannot now (cgroup v1, no memory.reclaim, dry-run)."""
        if not self.settings.enabled or self.settings.unavailable is not None or self._reclaimer.unavailable():
            return None
        self.history, verdict = judged(self.history, figure, now)
        before = None if figure is None else figure.refaulted_basis_points
        skip = daemons_reclaim_skip(self.settings, figure, self.history, now, memory_reclaim_acts=memory_reclaim_acts)
        if skip is None:
            try:
                holders: Sequence[CacheHolder] = self._reclaimer.holders()
            except EvictdError as exc:
                return DaemonsReclaimUse(before, skipped=f"the pods' page cache not readable: {exc}", verdict=verdict)
            plan = daemons_reclaim_plan(self.settings, figure, holders, self.history, now)
            if isinstance(plan, ReclaimPlan):
                return self._attempt(plan, before or 0, now, verdict)
            skip = plan
        return DaemonsReclaimUse(before, skipped=skip.reason, backing_off=skip.backing_off, verdict=verdict)

    def _attempt(self, plan: ReclaimPlan, before_bp: int, now: float,
                 verdict: DaemonsVerdict | None) -> DaemonsReclaimUse:
        """Carry out `plan` and remember it, pending its verdict (a failed write too: it is judged as any)."""
        started = self._monotonic()
        error = None
        try:
            outcome: Outcome | None = self._reclaimer.reclaim(plan)
        except EvictdError as exc:
            outcome, error = None, str(exc)
        spent = self._monotonic() - started
        freed = 0 if outcome is None else outcome.total_freed_bytes
        self.history = after_attempt(self.history, DaemonsAttempt(now, plan.needed_bytes, freed, spent, before_bp))
        return DaemonsReclaimUse(before_bp, asked_bytes=plan.needed_bytes, freed_bytes=freed, elapsed_s=spent,
                                 stopped="" if outcome is None else outcome.stopped, error=error,
                                 targets=tuple(target.cgroup for target in plan.targets),
                                 verdict=verdict)

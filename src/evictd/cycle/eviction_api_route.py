"""Soft evictions through the Eviction API (`softEvictionsThroughEvictionAPI`): the manager's route to it.

Who asks (`ApiEvictor`, a round off the loop), the route's settings (`EvictionApiRoute`), when a soft eviction goes
the kubelet's way after all (`eviction_api_bypassed`), and the start of a round (`request_round`). No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from evictd.core.engine import Assessment, Eviction
from evictd.core.eviction_api import EvictionApiRound
from evictd.cycle.report import EvictionApiUse


class ApiEvictor(Protocol):
    """Asks the Eviction API off the loop, one round of candidates at a time (`evictd.core.eviction_api`)."""

    def request(self, candidates: Sequence[Eviction]) -> bool:
        """Start a round asking for `candidates` in turn and return at once; False (nothing started) while the
        previous round is under way."""
        ...

    def asking(self) -> str | None:
        """The pod (namespace/name) the round under way is asking for; None when no round is under way."""
        ...

    def finished(self) -> EvictionApiRound | None:
        """The round that ended since the last call (each round once); None when none did."""
        ...


@dataclass(frozen=True, slots=True)
class EvictionApiRoute:
    """Soft evictions through the Eviction API: who asks, how many candidates a cycle may ask at most, and how
    long past its grace period a soft threshold may stay met before evictd evicts as the kubelet does."""

    evictor: ApiEvictor
    max_candidates: int
    deadline_s: float
    # The pod (namespace/name) an accepted eviction is still releasing in the background, if any (None: none).
    pending_release: Callable[[], str | None] = lambda: None
    # Whether the route is taken this cycle: not in dry-run (evictions go the kubelet's way, reported only).
    active: Callable[[], bool] = lambda: True


def is_soft(eviction: Eviction) -> bool:
    """Whether `eviction` was decided by a soft threshold."""
    return eviction.threshold is not None and not eviction.threshold.is_hard


def eviction_api_bypassed(route: EvictionApiRoute, assessment: Assessment, eviction: Eviction) -> str | None:
    """Why a soft eviction goes the kubelet's way after all (None: through the API): a hard threshold is met, or the
    soft one stayed met past its grace period longer than the route's deadline."""
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


def request_round(evictor: ApiEvictor, candidates: Sequence[Eviction], api_evicted: bool) -> EvictionApiUse:
    """Start a round of Eviction API requests for `candidates` unless one is under way or one just evicted a pod
    (`api_evicted`: the loop first waits for that pod to go); return what the cycle did with them."""
    if api_evicted:
        return EvictionApiUse()
    waiting = evictor.asking()
    if waiting is None and evictor.request(candidates):
        return EvictionApiUse(asked=tuple(eviction.pod.key for eviction in candidates))
    return EvictionApiUse(waiting=waiting or evictor.asking())

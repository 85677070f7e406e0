"""What a round of Eviction API requests came to (`softEvictionsThroughEvictionAPI`).

A round asks the Eviction API to evict a soft eviction's candidates, in ranking order, until one is accepted, one
gets no usable answer, or the round's deadline passes. It runs off the housekeeping loop (the Kubernetes adapter
`evictd.kube.eviction_requests`); the manager learns its outcome at a later cycle. Only an accepted request is an
eviction: a refusal leaves its pod a candidate, and so does a request that timed out or failed (the pod may still
be evicted if the API server went on after evictd stopped waiting; the watch then shows it terminating).
"""

from __future__ import annotations

from dataclasses import dataclass

from evictd.core.engine import Eviction
from evictd.core.errors import EvictionRefused


@dataclass(frozen=True, slots=True)
class EvictionApiRound:
    """The outcome of one round: the eviction the API accepted (None: none), the refusals met before it in ranking
    order, and what ended the round without an eviction other than refusals (None: nothing did)."""

    evicted: Eviction | None = None
    refusals: tuple[EvictionRefused, ...] = ()
    failure: str | None = None

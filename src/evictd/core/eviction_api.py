"""What a round of Eviction API requests came to (`softEvictionsThroughEvictionAPI`).

A round asks the Eviction API to evict a soft eviction's candidates in ranking order until one is accepted, one gets
no usable answer, or its deadline passes; it runs off the loop (`evictd.kube.eviction_requests`). Only an accepted
request is an eviction: a refused, failed or timed-out one leaves its pod a candidate.
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

"""The refault watch's rule: between cycles, whether the node's refaults may now meet a refault threshold.

Job: the refault signal (`evictd.core.refault`) is read once a cycle, and nothing in the kernel wakes evictd when
the page cache starts to thrash on a kernel without PSI (the case the signal is for) or on cgroup v1 with the memcg
levels far from met: the crossing waited for the next tick, up to a housekeeping interval (10 s) after the share
reached the threshold (in the arena's thrash, 10.5 s between the soft and the hard refault threshold's cycles).
The watch (`evictd.adapters.refault_watch`) reads /proc/vmstat every `REFAULT_LOOK_S` while a refault threshold is
not met, and wakes the loop when this rule says a cycle may find one met:

* the figure is the one a cycle makes (`refault_figure` over the readings of the last window, kept by
  `next_samples`), from the watch's own readings;
* a threshold is watched only while the last cycle did not find it met (`watched_shares`: each one's share, in basis
  points, at which it is met); none is while a hard refault threshold is met (the loop acts on every cycle then);
* with the stall gate on, only while the node's global scan count grew within `STALL_RECLAIM_WINDOW_S` as the
  watch read it (the cycle would hold the threshold back otherwise: a pod re-reading its files in its own limit).

Invariants: pure (no I/O; `now` is monotonic seconds given by the caller), inputs never mutated.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.refault import RefaultSample, next_samples, refault_figure
from evictd.core.signals import Signal
from evictd.core.stall_gate import STALL_RECLAIM_WINDOW_S, CounterTrend, next_trend
from evictd.core.summary import STALL_BASIS_POINTS, Observation
from evictd.core.thresholds import Threshold, threshold_quantity

# How often the watch reads /proc/vmstat while a refault threshold is watched: one small file a second (a cycle's
# reading of it is one of hundreds of files), so that a share reached is a cycle within about a second.
REFAULT_LOOK_S = 1.0

_CAPACITY = Quantity.from_int(STALL_BASIS_POINTS, QuantityFormat.DECIMAL_SI)


@dataclass(frozen=True, slots=True)
class WatchedRefault:
    """What the watch keeps between looks: its refault readings of the last window and the global scan count's
    trend, as the stall gate keeps the cycle's."""

    samples: tuple[RefaultSample, ...] = ()
    global_scan: CounterTrend | None = None


def watched_shares(thresholds: Sequence[Threshold], observed: Observation | None) -> tuple[int, ...]:
    """The shares (basis points of the node's memory refaulted within the window) at which each refault threshold
    of `thresholds` not met in the last cycle's observation `observed` (None: no figure then) is met; () while a hard
    one is met."""
    shares = []
    for threshold in thresholds:
        if threshold.signal is not Signal.MEMORY_REFAULT:
            continue
        quantity = threshold_quantity(threshold.value, _CAPACITY).ceil_int()
        if observed is not None and observed.available.ceil_int() < quantity:
            if threshold.is_hard:
                return ()
            continue  # met: decided by that cycle, its grace period running
        shares.append(STALL_BASIS_POINTS - quantity + 1)  # headroom below the quantity: the share at or over it
    return tuple(sorted(shares))


def look(last: WatchedRefault, refault_bytes: int | None, global_scan_pages: int | None, now: float,
         memory_bytes: int | None, shares: Sequence[int], *, gated: bool) -> tuple[WatchedRefault, bool]:
    """Return the watch after a look at `now` that read the cumulative refault count `refault_bytes` and the global
    scan count `global_scan_pages` (None: not read), and whether to wake the loop: the window's figure (of
    `memory_bytes`, the capacity the last cycle saw) at or over the lowest of `shares` and, when `gated`, global
    reclaim within the stall gate's window."""
    sample = None if refault_bytes is None else RefaultSample(now, refault_bytes)
    watched = WatchedRefault(next_samples(last.samples, sample, now),
                             next_trend(last.global_scan, global_scan_pages, now))
    if not shares or sample is None:
        return watched, False
    figure = refault_figure(watched.samples, memory_bytes)
    if figure is None or figure.refaulted_basis_points < shares[0]:
        return watched, False
    if not gated:
        return watched, True
    trend = watched.global_scan
    reclaiming = (trend is not None and trend.increased_at is not None
                  and now - trend.increased_at <= STALL_RECLAIM_WINDOW_S)
    return watched, reclaiming

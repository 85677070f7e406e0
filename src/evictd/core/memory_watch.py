"""The memory watch's arithmetic: what to watch between ticks on cgroup v2, and how often to look.

cgroup v2 has no memory usage threshold notifier (v1's ``cgroup.event_control`` is gone), and a kernel built
without PSI has nothing else that wakes a loop when memory fills: a crossing waits for the next housekeeping
tick (up to 10 s). The watch looks at the memory figure itself, closely only while a crossing could happen
before that tick, as earlyoom adapts its polling to the distance left:

* after each cycle, every memory threshold not met in that cycle's readings becomes a `WatchTarget`: the
  cgroup whose working set the signal comes from (the root for ``memory.available``, the pods cgroup for
  ``allocatableMemory.available``), the capacity the cycle saw, and the available amount below which the
  threshold is met (the kubelet's threshold quantity, rounded up to a byte; for an integer amount of bytes,
  ``available < quantity`` is ``available < ceil(quantity)``);
* `watch_period_s`: assuming memory fills at most `ASSUMED_FILL_BYTES_PER_S`, the margin left cannot be used
  up sooner than ``margin / rate``; the next look is then, but never sooner than `MIN_PERIOD_S`, and none at
  all when that is not before the next tick (the cycle looks then anyway) or when the threshold is met.

A look that finds a threshold met only wakes the loop: the decision is the cycle's, on its own fresh stats.
Invariants: no I/O, no clock (times are arguments); thresholds already met are not watched (their crossing is
decided), and nothing is watched while a hard memory threshold is met (issue 37: the watch looked 24-25 times a
second at the allocatable copy of a hard threshold whose node figure was met), so a node that stays under hard
pressure costs the watch nothing; under a soft threshold whose grace period runs, the hard ones are still watched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evictd.core.signals import Operator, Reading, Signal, spec_of
from evictd.core.summary import Summary, signal_observations
from evictd.core.thresholds import Threshold, threshold_quantity

# The fastest the watch assumes memory fills: 1 GiB/s (a process writing fresh pages on one core of these
# machines fills 1-2 GiB/s; anything faster is caught by the next look after MIN_PERIOD_S).
ASSUMED_FILL_BYTES_PER_S = 1 << 30
# Never look more often than this: 50 looks a second at most, each a few small cgroupfs reads.
MIN_PERIOD_S = 0.02


@dataclass(frozen=True, slots=True)
class WatchTarget:
    """One memory threshold to watch: met once ``capacity_bytes - working set of cgroup < met_below_bytes``.

    `cgroup` is relative to the memory hierarchy's root (``""``: the root, for ``memory.available``).
    """

    signal: Signal
    cgroup: str
    capacity_bytes: int
    met_below_bytes: int
    description: str

    def margin_bytes(self, working_set_bytes: int) -> int:
        """How many bytes more the working set can grow before the threshold is met (<= 0: met)."""
        return self.capacity_bytes - working_set_bytes - self.met_below_bytes + 1


def watch_targets(thresholds: Sequence[Threshold], summary: Summary, pods_cgroup: str) -> tuple[WatchTarget, ...]:
    """Return the memory thresholds to watch after a cycle that read `summary`: those with an observation
    and not met in it, and none at all while a hard memory threshold is met (the loop acts on every cycle then, at
    the pace its Cadence sets; another crossing would wake it for nothing). `pods_cgroup` is where
    ``allocatableMemory.available`` is read from."""
    observations = signal_observations(summary)
    targets = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        spec = spec_of(threshold.signal)
        if not spec.memcg_watched or observed is None or threshold.operator is not Operator.LESS_THAN:
            continue
        met_below = threshold_quantity(threshold.value, observed.capacity).ceil_int()
        available = observed.available.ceil_int()
        if available < met_below:
            if threshold.is_hard:
                return ()
            continue  # met already: decided by this cycle, not a crossing to catch
        cgroup = pods_cgroup if spec.reading is Reading.PODS_MEMORY else ""
        kind = "hard" if threshold.is_hard else "soft"
        targets.append(WatchTarget(threshold.signal, cgroup, observed.capacity.ceil_int(), met_below,
                                   f"{kind} {threshold.signal} threshold"))
    return tuple(targets)


def watch_period_s(margin_bytes: int, until_tick_s: float) -> float | None:
    """Return how long to wait before the next look, with `margin_bytes` left and the next tick `until_tick_s`
    away; None for no look before the tick (far from the threshold, or met already)."""
    if margin_bytes <= 0:
        return None
    period = max(margin_bytes / ASSUMED_FILL_BYTES_PER_S, MIN_PERIOD_S)
    return period if period < until_tick_s else None

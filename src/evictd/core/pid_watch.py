"""The pid watch's arithmetic: which ``pid.available`` thresholds to watch between ticks, and how often to look.

Job: ``pid.available`` is read once a cycle, as the kubelet reads it on its housekeeping tick, and nothing in the
kernel announces that tasks are running out. A fork bomb on a node with pid_max 2048 used up the last quarter of
its pids about 5 s after crossing a ``pid.available<25%`` threshold, so a cycle up to 10 s away decided after
exhaustion in 5 runs of 6. The watch (`evictd.adapters.pid_watch`) reads the node's task count (the fourth field
of /proc/loadavg, the figure the cycle reads) between ticks, closely only while a crossing could come before the
next one:

* after each cycle, every ``pid.available`` threshold not met in that cycle's observation becomes a `PidTarget`:
  the capacity the cycle saw (the kubelet's MaxPID: the lower of pid_max and threads-max) and the available count
  below which it is met (the kubelet's threshold quantity rounded up: for an integer count, ``available <
  quantity`` is ``available < ceil(quantity)``); none without an observation, and none at all while a hard one is
  met (the loop acts on every cycle then; another crossing would wake it for nothing);
* `watch_period_s`: assuming tasks grow at most `ASSUMED_FORKS_PER_S`, the margin left cannot be used up sooner
  than ``margin / rate``; the next look is then, never sooner than `MIN_PERIOD_S`, and none at all when that is
  not before the next tick (the cycle reads the count then anyway);
* a look (`look`) judges the count it read against every target: the target found met (the loop is woken: the
  decision is the cycle's, on its own fresh stats), or how long until the next look (the soonest over targets).

Invariants: no I/O, no clock (times are arguments), inputs never mutated; thresholds already met are not watched
(their crossing is decided); under a soft threshold whose grace period runs, the hard ones are still watched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evictd.core.signals import Operator, Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, threshold_quantity

# The fastest the watch assumes tasks grow: 10,000 a second. A shell fork loop starts 1,000-2,000 tasks a second on
# one core, a C fork loop tens of thousands; 10,000 keeps a node 3,000 pids from a threshold looked at every 0.3 s
# and one 30,000 away every 3 s, and one 100,000 away (a large machine's threads-max) not at all before a 10 s tick.
# A faster fork bomb is still read by the next look, at most `margin / rate` after the last.
ASSUMED_FORKS_PER_S = 10_000
# Never look more often than this: 10 reads of /proc/loadavg a second at most. A node's pid margin is steady for long
# stretches (a node with a small pid_max held near its threshold), and each timed wake-up costs a user-mode guest
# 3-4 ms of its CPU accounting (the memory watch's measure, docs/cgroup-v2.md): at 20 ms that would be 15-20 % of
# the guest's CPU for as long as the margin stays small. A fork loop at the assumed 10,000 a second starts at most
# 1,000 tasks between two looks, well within a threshold's margin on a node of pid_max 32768 or more (10 %: 3,277).
MIN_PERIOD_S = 0.1


@dataclass(frozen=True, slots=True)
class PidTarget:
    """One ``pid.available`` threshold to watch: met once ``capacity - running tasks < met_below``."""

    capacity: int
    met_below: int
    description: str

    def margin(self, tasks: int) -> int:
        """How many tasks more can start before the threshold is met (<= 0: met)."""
        return self.capacity - tasks - self.met_below + 1


def watch_targets(thresholds: Sequence[Threshold], observed: Observation | None) -> tuple[PidTarget, ...]:
    """Return the ``pid.available`` thresholds of `thresholds` to watch after a cycle whose observation of the signal
    was `observed` (None: none, nothing watched): those not met in it, and none while a hard one is met."""
    if observed is None:
        return ()
    capacity = observed.capacity.ceil_int()
    available = observed.available.ceil_int()
    targets = []
    for threshold in thresholds:
        if threshold.signal is not Signal.PID_AVAILABLE or threshold.operator is not Operator.LESS_THAN:
            continue
        met_below = threshold_quantity(threshold.value, observed.capacity).ceil_int()
        if available < met_below:
            if threshold.is_hard:
                return ()
            continue  # met already: decided by this cycle, not a crossing to catch
        kind = "hard" if threshold.is_hard else "soft"
        targets.append(PidTarget(capacity, met_below, f"{kind} {threshold.signal} threshold"))
    return tuple(targets)


def tasks_seen(observed: Observation) -> int:
    """The running task count a cycle's ``pid.available`` observation `observed` was made from."""
    return observed.capacity.ceil_int() - observed.available.ceil_int()


def watch_period_s(margin: int, until_tick_s: float) -> float | None:
    """Return how long to wait before the next look with `margin` tasks left before a threshold is met and the next
    tick `until_tick_s` away; None for no look before the tick (far from the threshold, or met already)."""
    if margin <= 0:
        return None
    period = max(margin / ASSUMED_FORKS_PER_S, MIN_PERIOD_S)
    return period if period < until_tick_s else None


@dataclass(frozen=True, slots=True)
class PidLook:
    """What one look found: the target found met (None: none), and how long until the next look (None: none before
    the tick, or one met: the loop is woken and the watch idles)."""

    met: PidTarget | None
    period_s: float | None


def look(targets: Sequence[PidTarget], tasks: int, until_tick_s: float) -> PidLook:
    """Judge a look that read `tasks` running, the next tick `until_tick_s` away."""
    period: float | None = None
    for target in targets:
        margin = target.margin(tasks)
        if margin <= 0:
            return PidLook(target, None)
        next_look = watch_period_s(margin, until_tick_s)
        if next_look is not None:
            period = next_look if period is None else min(period, next_look)
    return PidLook(None, period)

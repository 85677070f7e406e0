"""Reclaim before evict (evictd's own, off by default): whether a memory threshold about to evict first asks the
kernel to reclaim pods' page cache (cgroup v2 ``memory.reclaim``), where, and how much.

The kubelet's memory signals count active page cache as used, so cache the kernel could drop can cross a threshold.
The rule (`reclaim_plan`) for the thresholds a cycle is about to evict for:

* only `memory.available` and `allocatableMemory.available`; a cycle evicting for another signal too skips;
* amount: the largest `threshold + minReclaim - available`, page-rounded, plus `GROWTH_MARGIN_BYTES`;
* where: BestEffort, then Burstable, then the pods cgroup for the rest, each at most its active file; never a
  Guaranteed pod's cgroup, never outside the pods cgroup; not enough active file to cover it: skip;
* `STEP_BYTES` per write within `budget_s`, up to `MAX_ROUNDS` rounds (`another_round`), within `CPU_SHARE` of a
  CPU (`cpu_spent_s`); a failed or refaulted attempt backs off, doubling (`after_attempt`, `judged`).

Figures and reasons: docs/configuration.md ("Reclaim before evict"). Pure (`now` given); inputs never mutated.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from evictd.core.signals import Signal, spec_of
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, threshold_quantity, thresholds_met

MiB = 1 << 20
PAGE_BYTES = 4096
# One write to memory.reclaim (~9 ms in a 6.1 guest): a budget overruns by at most one.
STEP_BYTES = 16 * MiB
# The default budget of one attempt, and the most a configuration may give (an eviction may be needed).
DEFAULT_BUDGET_S = 0.05
MAX_BUDGET_S = 0.2
# Asked beyond the shortfall: what a reader still filling its cache adds while a round and its reading run.
GROWTH_MARGIN_BYTES = STEP_BYTES
# At most this many reclaim rounds in one attempt (`another_round`), all within its budget.
MAX_ROUNDS = 3
# The attempts' time in the last CPU_WINDOW_S stays within this share of one CPU (`cpu_spent_s`).
CPU_SHARE = 0.1
CPU_WINDOW_S = 10.0
# Back-off after a failed attempt: 60 s, doubled with each failure in a row, at most 10 min.
BACKOFF_S = 60.0
MAX_BACKOFF_S = 600.0
# A reclaim whose pages came back this soon, in this share of what it dropped, dropped cache in use: a failure.
REFAULT_WINDOW_S = 60.0
REFAULT_SHARE = 0.5
# The node's memory PSI "full" avg10 (percent) at which the node already thrashes: reclaim would add to it.
STALL_FULL_AVG10 = 10.0
# The QoS tiers asked first, in order; the pods cgroup ("pods") takes the rest.
BESTEFFORT = "besteffort"
BURSTABLE = "burstable"
PODS = "pods"
TIER_ORDER = (BESTEFFORT, BURSTABLE)
# The signals whose observation counts active page cache as used.
RECLAIMABLE_SIGNALS = ("memory.available", "allocatableMemory.available")


@dataclass(frozen=True, slots=True)
class ReclaimSettings:
    """The configuration of the rule: on or off (`memoryReclaimBeforeEviction`), the budget of one attempt
    (`memoryReclaimBudget`), and whether this node can (cgroup v2 with ``memory.reclaim``: `unavailable` says why
    not)."""

    enabled: bool = False
    budget_s: float = DEFAULT_BUDGET_S
    unavailable: str | None = None


@dataclass(frozen=True, slots=True)
class CacheHolder:
    """A cgroup that may hold pods' page cache: its path, its tier (`BESTEFFORT`, `BURSTABLE` or `PODS` for the pods
    cgroup, whose figures include the tiers') and its ``active_file`` and ``inactive_file`` bytes (hierarchical)."""

    cgroup: str
    tier: str
    active_file_bytes: int
    inactive_file_bytes: int = 0

    @property
    def file_bytes(self) -> int:
        """All its page cache, active and inactive (what reclaim for the daemons may drop)."""
        return self.active_file_bytes + self.inactive_file_bytes


@dataclass(frozen=True, slots=True)
class ReclaimTarget:
    """Ask `cgroup` to reclaim `bytes` (its working set to fall by that much)."""

    cgroup: str
    bytes: int


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What to reclaim: `targets` in order, `step_bytes` per write, all within `budget_s` of the first write.
    `needed_bytes` is the shortfall plus the minimum reclaim; the targets ask up to `GROWTH_MARGIN_BYTES` more.
    `by_usage`: a target's fall is counted in its usage, not its working set (inactive file dropped counts too:
    reclaim for the daemons, `evictd.core.daemons_reclaim`)."""

    targets: tuple[ReclaimTarget, ...]
    needed_bytes: int
    step_bytes: int = STEP_BYTES
    budget_s: float = DEFAULT_BUDGET_S
    by_usage: bool = False


@dataclass(frozen=True, slots=True)
class ReclaimSkip:
    """No reclaim this cycle, and why (the eviction goes ahead as the kubelet's would). `backing_off` is True when
    the skip is the back-off (the reason says until when)."""

    reason: str
    backing_off: bool = False


@dataclass(frozen=True, slots=True)
class ReclaimAttempt:
    """One attempt as it ended: when it started, what it reclaimed, whether the eviction was avoided, the node's
    page cache refault count (bytes) when it ended (None: not read), and the seconds it took (its rounds and the
    stats read between them)."""

    at_s: float
    reclaimed_bytes: int
    avoided: bool
    refault_file_bytes: int | None = None
    spent_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ReclaimHistory:
    """What the rule remembers between cycles (not saved across restarts): the last attempt, the failures in a
    row, the end of the back-off (None: none runs), and the attempts of the last `CPU_WINDOW_S` as (started at,
    seconds spent)."""

    last: ReclaimAttempt | None = None
    failures: int = 0
    backoff_until_s: float | None = None
    recent: tuple[tuple[float, float], ...] = ()
    # The last attempt, the first failure in a row, let its eviction through: the next cycle may try once more.
    once_more: bool = False


def needed_bytes(threshold: Threshold, observation: Observation) -> int:
    """Return the bytes `observation` lacks to clear `threshold` with its minimum reclaim (0 when it does not)."""
    quantity = threshold_quantity(threshold.value, observation.capacity).ceil_int()
    minimum = 0 if threshold.min_reclaim is None else threshold_quantity(threshold.min_reclaim,
                                                                         observation.capacity).ceil_int()
    lacking = quantity + minimum - observation.available.ceil_int()
    return max(0, -(-lacking // PAGE_BYTES) * PAGE_BYTES)


def lacking_bytes(thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]) -> int:
    """Return the largest `needed_bytes` of `thresholds` on a signal that counts page cache, observed in
    `observations` (0: none lacks)."""
    return max((needed_bytes(threshold, observations[threshold.signal]) for threshold in reclaimable(thresholds)
                if threshold.signal in observations), default=0)


def backoff_s(failures: int) -> float:
    """Return the back-off after `failures` failed attempts in a row (at least one)."""
    return min(MAX_BACKOFF_S, BACKOFF_S * float(2 ** max(0, failures - 1)))


def _failed(history: ReclaimHistory, at: float, now: float) -> ReclaimHistory:
    failures = history.failures + 1
    return replace(history, failures=failures, backoff_until_s=max(at, now) + backoff_s(failures))


def judged(history: ReclaimHistory, refault_file_bytes: int | None, stall_full_avg10: float | None,
           now: float) -> ReclaimHistory:
    """Return `history` with the last attempt judged on what followed it: page cache refaulted within
    `REFAULT_WINDOW_S` by at least `REFAULT_SHARE` of what it reclaimed, or the node's memory PSI full avg10 at
    `STALL_FULL_AVG10` or more, make it a failure (back-off starts now). An attempt is judged once."""
    last = history.last
    if last is None or last.reclaimed_bytes <= 0 or now - last.at_s > REFAULT_WINDOW_S:
        return history
    refaulted = (refault_file_bytes is not None and last.refault_file_bytes is not None
                 and refault_file_bytes - last.refault_file_bytes >= REFAULT_SHARE * last.reclaimed_bytes)
    stalled = stall_full_avg10 is not None and stall_full_avg10 >= STALL_FULL_AVG10
    if not (refaulted or stalled):
        return history
    # Judged: the attempt counts no more (reclaimed 0), so later cycles do not count it twice.
    return _failed(replace(history, last=replace(last, reclaimed_bytes=0)), now, now)


def after_attempt(history: ReclaimHistory, attempt: ReclaimAttempt) -> ReclaimHistory:
    """Return `history` after `attempt`: one that did not avoid the eviction starts (or lengthens) the back-off;
    one that did resets the failures (`judged` may still count it as failed later). The first failure in a row
    leaves one more attempt to the next cycle (`once_more`): the evicted pod may be what kept the cache in use."""
    recent = (*(entry for entry in history.recent if entry[0] > attempt.at_s - CPU_WINDOW_S),
              (attempt.at_s, attempt.spent_s))
    if not attempt.avoided:
        failed = _failed(replace(history, last=attempt, once_more=False, recent=recent), attempt.at_s, attempt.at_s)
        return replace(failed, once_more=history.failures == 0)
    return ReclaimHistory(last=attempt, failures=0, backoff_until_s=None, recent=recent)


def cpu_spent_s(history: ReclaimHistory, now: float) -> float:
    """The seconds the attempts that started in the last `CPU_WINDOW_S` before `now` took."""
    return sum(spent for at, spent in history.recent if at > now - CPU_WINDOW_S)


def cpu_share_skip(spent_s: float, budget_s: float) -> ReclaimSkip | None:
    """The skip when another attempt of `budget_s` after `spent_s` within `CPU_WINDOW_S` would pass `CPU_SHARE` of
    a CPU (None: it would not)."""
    if spent_s > 0 and spent_s + budget_s > CPU_SHARE * CPU_WINDOW_S:
        return ReclaimSkip(f"reclaim took {spent_s * 1000:.0f} ms of the last {CPU_WINDOW_S:g} s (at most "
                           f"{CPU_SHARE:.0%} of one CPU)")
    return None


def another_round(needed_bytes: int, freed_bytes: int, still_needed_bytes: int, elapsed_s: float, budget_s: float,
                  rounds: int) -> bool:
    """Whether an attempt runs another round after one for `needed_bytes` freed `freed_bytes`, the stats still lack
    `still_needed_bytes`, and `elapsed_s` of `budget_s` are spent in `rounds` rounds: only when the round freed the
    need (what lacks is growth), the shortfall shrank, budget is left and fewer than `MAX_ROUNDS` ran."""
    return (0 < still_needed_bytes < needed_bytes <= freed_bytes and elapsed_s < budget_s
            and rounds < MAX_ROUNDS)


def answered(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """The thresholds of a step a reclaim before evict answers: the kubelet's among them where there are any (a
    stall-family one acts only where none of them does, `evictd.core.engine`: it waits for the next cycle, on the
    figures the reclaim left), else all of them."""
    kubelets = [threshold for threshold in thresholds if not spec_of(threshold.signal).stall_family]
    return kubelets or list(thresholds)


def reclaimable(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """The thresholds among `thresholds` on a signal that counts page cache (`RECLAIMABLE_SIGNALS`)."""
    return [threshold for threshold in thresholds if str(threshold.signal) in RECLAIMABLE_SIGNALS]


def cleared(thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]) -> bool:
    """Whether none of `thresholds` (those the cycle was to evict for) is met with its minimum reclaim on
    `observations`, read after the reclaim (unobserved: not cleared). Unlike the kubelet's disk check, a soft
    threshold still in grace does not count: it asked for no eviction yet."""
    if any(threshold.signal not in observations for threshold in thresholds):
        return False
    return not thresholds_met(thresholds, observations, enforce_min_reclaim=True)


def reclaim_plan(settings: ReclaimSettings, thresholds: Sequence[Threshold],
                 observations: Mapping[Signal, Observation], holders: Sequence[CacheHolder], history: ReclaimHistory,
                 now: float) -> ReclaimPlan | ReclaimSkip:
    """Return what to reclaim before evicting for `thresholds` (observed in `observations`) from `holders`, or why
    not. `history` should be `judged` first; the checks run cheapest first."""
    if not settings.enabled:
        return ReclaimSkip("memory reclaim before eviction is off")
    if settings.unavailable is not None:
        return ReclaimSkip(f"memory reclaim is unavailable: {settings.unavailable}")
    counted = [t for t in reclaimable(thresholds) if t.signal in observations]
    if not counted or len(counted) < len(thresholds):
        others = sorted({str(t.signal) for t in thresholds if t not in counted}) or [str(t.signal) for t in thresholds]
        return ReclaimSkip(f"{', '.join(others)} does not count page cache")
    if history.backoff_until_s is not None and now < history.backoff_until_s and not history.once_more:
        return ReclaimSkip(f"backing off after {history.failures} failed reclaim(s) for another "
                           f"{history.backoff_until_s - now:.0f} s", backing_off=True)
    if (busy := cpu_share_skip(cpu_spent_s(history, now), settings.budget_s)) is not None:
        return busy
    needed = lacking_bytes(counted, observations)
    if needed <= 0:
        return ReclaimSkip("nothing lacks")
    remaining = needed + GROWTH_MARGIN_BYTES
    targets: list[ReclaimTarget] = []
    tiers = {holder.tier: holder for holder in holders}
    in_tiers = sum(tiers[tier].active_file_bytes for tier in TIER_ORDER if tier in tiers)
    pods = tiers.get(PODS)
    order = [(tiers[tier].cgroup, tiers[tier].active_file_bytes) for tier in TIER_ORDER if tier in tiers]
    if pods is not None:
        order.append((pods.cgroup, max(0, pods.active_file_bytes - in_tiers)))
    cache = sum(active for _, active in order)
    if cache < needed:
        return ReclaimSkip(f"{cache // MiB} MiB of pods' active page cache cannot cover the {needed // MiB} MiB "
                           f"needed (anonymous memory)")
    for cgroup, active in order:
        if remaining <= 0:
            break
        ask = min(remaining, active)
        if ask > 0:
            targets.append(ReclaimTarget(cgroup, ask))
            remaining -= ask
    return ReclaimPlan(targets=tuple(targets), needed_bytes=needed, budget_s=settings.budget_s)

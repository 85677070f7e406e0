"""Reclaim for the daemons (evictd's own, off by default): whether the node's daemons refaulting while pods hold page
cache asks the kernel to drop pods' page cache (cgroup v2 ``memory.reclaim``), where, how much, and when to back off.

A module of its own beside `evictd.core.memory_reclaim` (whose plan, skip and cache-holder types it shares, so the
same adapter carries it out): that rule answers a threshold about to evict, this one no threshold at all. The rule
(`daemons_reclaim_plan`), each cycle, on the daemons' figure (`evictd.core.daemon_refault`, with or without PSI):

* triggers at `TRIGGER_BASIS_POINTS` of the daemons' memory re-read within the window, while the pods hold at least
  `MIN_POD_CACHE_BYTES` of page cache (active and inactive file); an unknown figure never triggers;
* asks the daemons' memory, at most `ATTEMPT_MAX_BYTES`, what is left of `MINUTE_MAX_BYTES` in the last minute and
  the pods' page cache; BestEffort, then Burstable, then the pods cgroup for the rest (each at most its file cache):
  never a Guaranteed pod's cgroup, never outside the pods cgroup, never the daemons';
* judges an attempt on the first figure a window after it (`judged`): not fallen by `FALL_SHARE` nor under the
  trigger is a failure, and the back-off doubles (`backoff_s`); within `CPU_SHARE` of a CPU as reclaim before evict.

It never evicts: its only action is the plan. Pure (`now` given); inputs never mutated.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from evictd.core.daemon_refault import DAEMON_REFAULT_WINDOW_S
from evictd.core.memory_reclaim import (
    CPU_WINDOW_S,
    DEFAULT_BUDGET_S,
    PAGE_BYTES,
    PODS,
    STEP_BYTES,
    TIER_ORDER,
    CacheHolder,
    MiB,
    ReclaimPlan,
    ReclaimSkip,
    ReclaimTarget,
    backoff_s,
    cpu_share_skip,
)
from evictd.core.refault import RefaultFigure

# The EvictdConfiguration key that turns the rule on (docs/configuration.md, "Reclaim for the daemons").
DAEMONS_RECLAIM_FIELD = "daemonsReclaim"
# The daemons re-reading a tenth of their memory within 2 s: a working set pushed out, not a daemon's odd read; half
# the 25 % the arena's daemons refault evictions were tried at, since dropping cache costs pods only re-reads.
TRIGGER_BASIS_POINTS = 1000
# Less pods' page cache than one write to memory.reclaim is not what pushes the daemons out.
MIN_POD_CACHE_BYTES = STEP_BYTES
# The most one attempt asks: a streaming pod refills its cache at disk speed, so more moves the cost onto it.
ATTEMPT_MAX_BYTES = 256 * MiB
# The most asked within `MINUTE_S`: the pods re-read at most ~17 MiB/s because of it, under one disk's stream.
MINUTE_MAX_BYTES = 1024 * MiB
MINUTE_S = 60.0
# An attempt helped when the daemons' figure after it fell by this share of the one before (or under the trigger):
# a smaller fall is within one window's noise.
FALL_SHARE = 0.25
# The figure that judges an attempt is read a window after it (its re-reads are those after the reclaim), and an
# attempt not judged within this (the figure unknown meanwhile) is dropped unjudged.
JUDGE_AFTER_S = DAEMON_REFAULT_WINDOW_S
JUDGE_WITHIN_S = 60.0


@dataclass(frozen=True, slots=True)
class DaemonsReclaimSettings:
    """The rule's configuration: on or off (`daemonsReclaim`), the budget of one attempt (`memoryReclaimBudget`), and
    why this node cannot (None: it can: cgroup v2 with ``memory.reclaim``, evictd acting)."""

    enabled: bool = False
    budget_s: float = DEFAULT_BUDGET_S
    unavailable: str | None = None


@dataclass(frozen=True, slots=True)
class DaemonsAttempt:
    """One attempt: when, what it asked and freed (bytes), the seconds it took, and the daemons' figure before it
    (basis points of their memory)."""

    at_s: float
    asked_bytes: int
    freed_bytes: int
    spent_s: float
    figure_before_bp: int


@dataclass(frozen=True, slots=True)
class DaemonsVerdict:
    """How an attempt was judged: `helped`, on the daemons' figure read after it (basis points)."""

    attempt: DaemonsAttempt
    helped: bool
    figure_after_bp: int


@dataclass(frozen=True, slots=True)
class DaemonsReclaimHistory:
    """What the rule remembers between cycles (not saved across restarts): the attempt awaiting its verdict, the
    failures in a row, the end of the back-off (None: none runs) and the attempts of the last `MINUTE_S`."""

    pending: DaemonsAttempt | None = None
    failures: int = 0
    backoff_until_s: float | None = None
    recent: tuple[DaemonsAttempt, ...] = ()


def pods_file_bytes(holders: Sequence[CacheHolder]) -> int:
    """The pods' page cache (active and inactive file) among `holders`: the pods cgroup's, or the tiers' where that
    is unread or smaller."""
    tiers = sum(holder.file_bytes for holder in holders if holder.tier in TIER_ORDER)
    pods = max((holder.file_bytes for holder in holders if holder.tier == PODS), default=0)
    return max(tiers, pods)


def reclaim_order(holders: Sequence[CacheHolder]) -> list[tuple[str, int]]:
    """The cgroups to ask, in order, each with the file cache it holds: the tiers in `TIER_ORDER`, then the pods
    cgroup for what it holds beyond them (Guaranteed pods' cache and that of pods gone)."""
    by_tier = {holder.tier: holder for holder in holders}
    order = [(by_tier[tier].cgroup, by_tier[tier].file_bytes) for tier in TIER_ORDER if tier in by_tier]
    pods = by_tier.get(PODS)
    if pods is not None:
        order.append((pods.cgroup, max(0, pods.file_bytes - sum(cached for _, cached in order))))
    return order


def asked_this_minute(history: DaemonsReclaimHistory, now: float) -> int:
    """The bytes the attempts of the last `MINUTE_S` before `now` asked."""
    return sum(attempt.asked_bytes for attempt in history.recent if attempt.at_s > now - MINUTE_S)


def cpu_spent_s(history: DaemonsReclaimHistory, now: float) -> float:
    """The seconds the attempts of the last `CPU_WINDOW_S` before `now` took."""
    return sum(attempt.spent_s for attempt in history.recent if attempt.at_s > now - CPU_WINDOW_S)


def helped(before_bp: int, after_bp: int) -> bool:
    """Whether the daemons' figure fell enough after an attempt: under the trigger, or by `FALL_SHARE` of before."""
    return after_bp < TRIGGER_BASIS_POINTS or after_bp <= before_bp * (1 - FALL_SHARE)


def judged(history: DaemonsReclaimHistory, figure: RefaultFigure | None,
           now: float) -> tuple[DaemonsReclaimHistory, DaemonsVerdict | None]:
    """Return `history` with its pending attempt judged on `figure` (read at `now`), and the verdict (None: nothing
    judged: no attempt pending, too soon, or the figure unknown). A failure starts the back-off, doubling with each in
    a row; a help resets the count. An attempt still unjudged `JUDGE_WITHIN_S` after it is dropped."""
    pending = history.pending
    if pending is None or now - pending.at_s < JUDGE_AFTER_S:
        return history, None
    if figure is None:
        return (replace(history, pending=None), None) if now - pending.at_s > JUDGE_WITHIN_S else (history, None)
    after = figure.refaulted_basis_points
    if helped(pending.figure_before_bp, after):
        return replace(history, pending=None, failures=0, backoff_until_s=None), DaemonsVerdict(pending, True, after)
    failures = history.failures + 1
    return (replace(history, pending=None, failures=failures, backoff_until_s=now + backoff_s(failures)),
            DaemonsVerdict(pending, False, after))


def after_attempt(history: DaemonsReclaimHistory, attempt: DaemonsAttempt) -> DaemonsReclaimHistory:
    """Return `history` after `attempt`: pending its verdict, counted in the last minute's."""
    recent = (*(kept for kept in history.recent if kept.at_s > attempt.at_s - MINUTE_S), attempt)
    return replace(history, pending=attempt, recent=recent)


def daemons_reclaim_skip(settings: DaemonsReclaimSettings, figure: RefaultFigure | None,
                         history: DaemonsReclaimHistory, now: float, *,
                         memory_reclaim_acts: bool = False) -> ReclaimSkip | None:
    """Why the rule does not reclaim at `now` before the pods' page cache is read (None: read it and plan), cheapest
    check first: off, unavailable, the figure unknown or under the trigger, reclaim before evict acting this cycle
    (`memory_reclaim_acts`), an attempt awaiting its verdict, the back-off, the CPU share, the minute's cap."""
    if not settings.enabled:
        return ReclaimSkip("reclaim for the daemons is off")
    if settings.unavailable is not None:
        return ReclaimSkip(f"reclaim for the daemons is unavailable: {settings.unavailable}")
    if figure is None:
        return ReclaimSkip("the daemons' refault figure is unknown")
    share = figure.refaulted_basis_points
    if share < TRIGGER_BASIS_POINTS:
        return ReclaimSkip(f"the daemons re-read {share / 100:.2f}% of their memory, under "
                           f"{TRIGGER_BASIS_POINTS / 100:g}%")
    if memory_reclaim_acts:  # one reclaim a cycle: the refaults it brings are charged to reclaim before evict
        return ReclaimSkip("reclaim before evict acts on a memory threshold this cycle")
    if history.pending is not None:
        return ReclaimSkip("the last reclaim for the daemons awaits its verdict")
    if history.backoff_until_s is not None and now < history.backoff_until_s:
        return ReclaimSkip(f"backing off after {history.failures} reclaim(s) that did not help the daemons for "
                           f"another {history.backoff_until_s - now:.0f} s", backing_off=True)
    if (busy := cpu_share_skip(cpu_spent_s(history, now), settings.budget_s)) is not None:
        return busy
    left = MINUTE_MAX_BYTES - asked_this_minute(history, now)
    if left < STEP_BYTES:
        return ReclaimSkip(f"{MINUTE_MAX_BYTES // MiB} MiB asked within {MINUTE_S:g} s already")
    return None


def daemons_reclaim_plan(settings: DaemonsReclaimSettings, figure: RefaultFigure | None,
                         holders: Sequence[CacheHolder], history: DaemonsReclaimHistory,
                         now: float) -> ReclaimPlan | ReclaimSkip:
    """Return what to reclaim for the daemons at `now` from `holders`, or why not (`daemons_reclaim_skip`, then the
    pods' page cache); `history` should be `judged` first. The plan's `needed_bytes` is what it asks; its fall is
    counted in usage (`by_usage`): all page cache dropped counts, inactive too."""
    skip = daemons_reclaim_skip(settings, figure, history, now)
    if skip is not None or figure is None:  # an unknown figure is skipped there; this narrows its type
        return skip or ReclaimSkip("the daemons' refault figure is unknown")
    left = MINUTE_MAX_BYTES - asked_this_minute(history, now)
    cache = pods_file_bytes(holders)
    if cache < MIN_POD_CACHE_BYTES:
        return ReclaimSkip(f"the pods hold {cache // MiB} MiB of page cache, under {MIN_POD_CACHE_BYTES // MiB} MiB")
    wanted = -(-figure.memory_bytes // PAGE_BYTES) * PAGE_BYTES
    remaining = min(wanted, ATTEMPT_MAX_BYTES, left, cache)
    asked = remaining
    targets: list[ReclaimTarget] = []
    for cgroup, cached in reclaim_order(holders):
        ask = min(remaining, cached)
        if ask > 0:
            targets.append(ReclaimTarget(cgroup, ask))
            remaining -= ask
    return ReclaimPlan(targets=tuple(targets), needed_bytes=asked - remaining, budget_s=settings.budget_s,
                       by_usage=True)

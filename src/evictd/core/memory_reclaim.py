"""Reclaim before evict (evictd's own, issue 41; off by default): the rule that decides whether a memory threshold
about to evict first asks the kernel to reclaim page cache (cgroup v2 ``memory.reclaim``), where, and how much.

Why: the kubelet's memory signals count active page cache as used (working set = usage - inactive_file,
kubernetes/kubernetes#43916), so a pod that read a file twice can make `memory.available` cross a threshold while
the kernel, with that much cache to drop, is in no danger. Asking the kernel to drop that cache first, and evicting
only if the threshold is still met on the stats read after it, avoids such evictions. When off, the kubelet's
decisions are kept exactly.

The rule (`reclaim_plan`), for the thresholds a cycle is about to evict for:

* Only `memory.available` and `allocatableMemory.available` (the signals that count active page cache); a cycle that
  evicts for any other signal too (a stall signal) skips.
* Amount: the shortfall plus the minimum reclaim, `threshold + minReclaim - available`, the largest over those
  thresholds, rounded up to a page: what the check after the reclaim (`cleared`) asks for before it lets the
  eviction go; the plan asks `GROWTH_MARGIN_BYTES` (16 MiB) more, where the cache holds it, for what the pods add
  while the reclaim and the reading after it run. That check is of the thresholds the cycle was to evict for; a
  soft threshold still in its grace period does not count (it has asked for no eviction yet).
* Where: only the page cache pods hold. The cgroups are the BestEffort QoS cgroup, then the Burstable one, then the
  pods cgroup itself for the rest (its own active file minus the two tiers': Guaranteed pods' cache, and the cache
  of pods already gone, which the kernel keeps charged below the pods cgroup). Each is asked for at most the active
  file it holds. A Guaranteed pod's cgroup is never written to: its cache is reached only through the pods cgroup,
  once the BestEffort and Burstable cache did not cover the shortfall, and the kernel then takes it only in
  proportion to the cache it holds (a Guaranteed pod is the last the kubelet would evict, so its cache is the last to
  go). Nothing outside the pods cgroup (system.slice, the node's daemons) is ever touched: their cache is their
  working set, and the node's own protection is not evictd's to spend.
* Skip for anonymous growth: when the active file of those cgroups cannot cover the amount, reclaim cannot clear
  the threshold; nothing is written and the eviction goes ahead at once, with today's latency (the only cost is
  the reading of three memory.stat files).
* Steps and budget: the adapter writes `STEP_BYTES` at a time and checks a monotonic deadline `budget_s` after the
  first write between writes (a write can block: the overrun is at most one step, ~6 ms at the 56 ms per 100 MiB
  measured in a 6.1 guest); past the deadline, the eviction goes ahead as today.
* Rounds (`another_round`): when the stats read after a round still lack memory although the round freed all it
  was asked, the pods grew meanwhile (a reader still filling its cache): another round asks for the new shortfall,
  if it shrank (the reclaim outpaces the growth), within what is left of the same budget (the stats read between
  rounds count against it), at most `MAX_ROUNDS` in all. In the arena's active-file cell the first run of each
  batch of five was met mid-read: a round freed its 115-129 MiB in 6-16 ms and the stats still lacked 26 MiB; the
  reader was evicted, and the next cycle's reclaim of 60 MiB then cleared the threshold.
* Back-off: a reclaim that did not avoid the eviction, or after which page cache refaulted by at least
  `REFAULT_SHARE` of what it reclaimed within `REFAULT_WINDOW_S` (/proc/vmstat ``workingset_refault_file``: the
  cache was in use), or after which the node's memory PSI ``full avg10`` reached `STALL_FULL_AVG10` (where PSI is
  read), counts as a failure: no reclaim for `BACKOFF_S` doubling with each consecutive failure up to
  `MAX_BACKOFF_S`. A reclaim that avoided the eviction and was not refaulted resets the count.
* CPU bound: the attempts' time (their rounds and the stats read between them, done in evictd's own thread) stays
  within `CPU_SHARE` of one CPU over the last `CPU_WINDOW_S`: an attempt starts only when the time spent in that
  window plus its budget fits (`cpu_spent_s`), or nothing was spent in it. At the 50 ms default that is up to 20
  attempts in 10 s while reclaims succeed (10 % of one CPU at most), and after a failure at most one attempt per
  `BACKOFF_S` (0.1 %). A fixed interval of 2 s between attempts (the first rule) let a reader still filling its
  cache through the threshold 1.2 s after a reclaim that cleared it get evicted, and the Guaranteed pod 0.3 s later,
  for cache the kernel could drop.

Invariants: pure (no I/O, `now` is monotonic seconds given); inputs are never mutated.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from evictd.core.signals import Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, threshold_quantity, thresholds_met

MiB = 1 << 20
PAGE_BYTES = 4096
# One write to memory.reclaim: 16 MiB took ~9 ms in a 6.1 guest (100 MiB: 56 ms), so a 50 ms budget is checked
# about five times and overrun by at most one such write.
STEP_BYTES = 16 * MiB
# The default budget of one attempt, and the most a configuration may give (the "tens of milliseconds":
# beyond it the reclaim would delay an eviction the node may need).
DEFAULT_BUDGET_S = 0.05
MAX_BUDGET_S = 0.2
# Asked beyond the shortfall: what a reader still filling its cache adds while a round and the reading after it run.
# In the arena's active-file cell met mid-read (the first run of a boot, its file read from a cold disk), a round
# that freed 153 MiB for a need of 135 MiB left the threshold met on the reading after it, by at most the 4 MiB the
# next cycle needed (load 5, one round in the 50 ms budget).
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
    cgroup, whose figure includes the tiers') and its ``active_file`` bytes (hierarchical)."""

    cgroup: str
    tier: str
    active_file_bytes: int


@dataclass(frozen=True, slots=True)
class ReclaimTarget:
    """Ask `cgroup` to reclaim `bytes` (its working set to fall by that much)."""

    cgroup: str
    bytes: int


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What to reclaim: `targets` in order, `step_bytes` per write, all within `budget_s` of the first write.
    `needed_bytes` is the shortfall plus the minimum reclaim; the targets ask up to `GROWTH_MARGIN_BYTES` more."""

    targets: tuple[ReclaimTarget, ...]
    needed_bytes: int
    step_bytes: int = STEP_BYTES
    budget_s: float = DEFAULT_BUDGET_S


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
    # The last attempt, the first failure in a row, did not avoid its eviction: the next cycle, which comes after that
    # eviction, may try once more despite the back-off and the interval (`after_attempt`).
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
    one that did resets the failures (the refault judgement, `judged`, may still count it as failed later).

    The first failure in a row leaves one more attempt to the cycle after the eviction it let through (`once_more`):
    the evicted pod may be what kept the cache in use. In the arena's active-file cell the reader was still reading
    its file when the first reclaim dropped 131 MiB of it: not enough, the reader was evicted, and the back-off then
    let the next cycle, 70 ms later, evict the Guaranteed pod for the reader's cache, now idle (1 run of 5)."""
    recent = (*(entry for entry in history.recent if entry[0] > attempt.at_s - CPU_WINDOW_S),
              (attempt.at_s, attempt.spent_s))
    if not attempt.avoided:
        failed = _failed(replace(history, last=attempt, once_more=False, recent=recent), attempt.at_s, attempt.at_s)
        return replace(failed, once_more=history.failures == 0)
    return ReclaimHistory(last=attempt, failures=0, backoff_until_s=None, recent=recent)


def cpu_spent_s(history: ReclaimHistory, now: float) -> float:
    """The seconds the attempts that started in the last `CPU_WINDOW_S` before `now` took."""
    return sum(spent for at, spent in history.recent if at > now - CPU_WINDOW_S)


def another_round(needed_bytes: int, freed_bytes: int, still_needed_bytes: int, elapsed_s: float, budget_s: float,
                  rounds: int) -> bool:
    """Whether an attempt runs another round: its last round was for a need of `needed_bytes` and freed
    `freed_bytes`; the stats read after it still lack `still_needed_bytes`; `elapsed_s` of its `budget_s` are spent
    (the reads between rounds included) in `rounds` rounds.

    Yes only when the round freed at least the need (the kernel can drop the cache: what lacks is the pods' growth
    meanwhile, not a failed reclaim), the shortfall shrank (the reclaim outpaces that growth), budget is left and
    fewer than `MAX_ROUNDS` ran."""
    return (0 < still_needed_bytes < needed_bytes <= freed_bytes and elapsed_s < budget_s
            and rounds < MAX_ROUNDS)


def reclaimable(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """The thresholds among `thresholds` on a signal that counts page cache (`RECLAIMABLE_SIGNALS`)."""
    return [threshold for threshold in thresholds if str(threshold.signal) in RECLAIMABLE_SIGNALS]


def cleared(thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]) -> bool:
    """Whether the reclaim cleared the thresholds it was for: none of `thresholds` (those the cycle was to evict for)
    met with its minimum reclaim on `observations`, the stats read after it (an unobserved signal is not cleared).

    Unlike the kubelet's check after disk reclaim, which counts every configured threshold, a soft threshold still in
    its grace period does not make the cycle evict for a hard threshold the reclaim cleared: that eviction was not
    asked for yet, and its grace period goes on (at its end, the rule is asked again)."""
    if any(threshold.signal not in observations for threshold in thresholds):
        return False
    return not thresholds_met(thresholds, observations, enforce_min_reclaim=True)


def reclaim_plan(settings: ReclaimSettings, thresholds: Sequence[Threshold],
                 observations: Mapping[Signal, Observation], holders: Sequence[CacheHolder], history: ReclaimHistory,
                 now: float) -> ReclaimPlan | ReclaimSkip:
    """Return what to reclaim before evicting for `thresholds` (those the cycle is to evict for, observed in
    `observations`), or why not: the amount is the largest need of those on a signal that counts page cache.

    `holders` are the cgroups that may hold pods' cache with their active file (`CacheHolder`); `history` should be
    `judged` first. The checks run cheapest first: off, signal, back-off, CPU share, then the cache against the need.
    """
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
    spent = cpu_spent_s(history, now)
    if spent > 0 and spent + settings.budget_s > CPU_SHARE * CPU_WINDOW_S:
        return ReclaimSkip(f"reclaim took {spent * 1000:.0f} ms of the last {CPU_WINDOW_S:g} s (at most "
                           f"{CPU_SHARE:.0%} of one CPU)")
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

"""Reclaim before evict (`evictd.core.memory_reclaim`): the amount, the cgroups in order, the skip for anonymous growth,
the interval, the back-off and its refault judgement. Pure, table-driven; each rule has a case that fails without
it."""

from __future__ import annotations

import pytest

from evictd.core.memory_reclaim import (
    BACKOFF_S,
    BESTEFFORT,
    BURSTABLE,
    MAX_BACKOFF_S,
    PODS,
    REFAULT_WINDOW_S,
    CacheHolder,
    ReclaimAttempt,
    ReclaimHistory,
    ReclaimPlan,
    ReclaimSettings,
    ReclaimSkip,
    ReclaimTarget,
    after_attempt,
    answered,
    backoff_s,
    cleared,
    cpu_spent_s,
    judged,
    needed_bytes,
    reclaim_plan,
)
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, ThresholdValue

MiB = 1 << 20
ON = ReclaimSettings(enabled=True, budget_s=0.05)
NOW = 1000.0


def threshold(signal: Signal = Signal.MEMORY_AVAILABLE, value: str = "200Mi", min_reclaim: str | None = "100Mi",
              hard: bool = True) -> Threshold:
    return Threshold(signal, ThresholdValue(Quantity.parse(value)), 0.0 if hard else 30.0,
                     None if min_reclaim is None else ThresholdValue(Quantity.parse(min_reclaim)), hard=hard)


def observed(available_mib: int, capacity_mib: int = 4096) -> Observation:
    return Observation(Quantity.parse(f"{available_mib}Mi"), Quantity.parse(f"{capacity_mib}Mi"), None)


def plan_for(settings: ReclaimSettings, limit: Threshold, observation: Observation, cache: tuple[CacheHolder, ...],
             history: ReclaimHistory, now: float) -> ReclaimPlan | ReclaimSkip:
    """The rule for one threshold to evict for."""
    return reclaim_plan(settings, [limit], {limit.signal: observation}, cache, history, now)


def holders(besteffort: int = 0, burstable: int = 0, pods: int | None = None) -> tuple[CacheHolder, ...]:
    """The tiers' and the pods cgroup's active file in MiB (pods: at least the tiers' sum)."""
    total = besteffort + burstable if pods is None else pods
    return (CacheHolder("kubepods/besteffort", BESTEFFORT, besteffort * MiB),
            CacheHolder("kubepods/burstable", BURSTABLE, burstable * MiB),
            CacheHolder("kubepods", PODS, total * MiB))


@pytest.mark.parametrize(("available_mib", "min_reclaim", "expected_mib"), [
    pytest.param(150, "100Mi", 150, id="shortfall-50-plus-min-reclaim-100"),
    pytest.param(150, None, 50, id="no-min-reclaim-shortfall-only"),
    pytest.param(400, "100Mi", 0, id="clear-of-threshold-and-min-reclaim"),
    pytest.param(250, "100Mi", 50, id="met-with-min-reclaim-only"),
])
def test_needed_bytes_is_the_shortfall_plus_the_minimum_reclaim(available_mib: int, min_reclaim: str | None,
                                                                expected_mib: int) -> None:
    assert needed_bytes(threshold(min_reclaim=min_reclaim), observed(available_mib)) == expected_mib * MiB


def test_needed_bytes_with_percentages_uses_the_capacity() -> None:
    percent = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(percentage=0.1), 0.0, ThresholdValue(percentage=0.05))
    # 10% of 4096 Mi = 409.6 Mi, 5% = 204.8 Mi: 614.4 Mi - 300 Mi, rounded up to a page.
    assert needed_bytes(percent, observed(300)) == -(-(int(4096 * MiB * 0.1) + int(4096 * MiB * 0.05)
                                                       - 300 * MiB) // 4096) * 4096


# The need is 150 MiB; the plan asks 16 MiB more (GROWTH_MARGIN_BYTES) where the cache holds it.
@pytest.mark.parametrize(("cache", "expected"), [
    pytest.param(holders(besteffort=500), (ReclaimTarget("kubepods/besteffort", 166 * MiB),),
                 id="besteffort-cache-covers-it-alone"),
    pytest.param(holders(besteffort=100, burstable=300),
                 (ReclaimTarget("kubepods/besteffort", 100 * MiB), ReclaimTarget("kubepods/burstable", 66 * MiB)),
                 id="besteffort-first-then-burstable"),
    pytest.param(holders(besteffort=40, burstable=10, pods=400),
                 (ReclaimTarget("kubepods/besteffort", 40 * MiB), ReclaimTarget("kubepods/burstable", 10 * MiB),
                  ReclaimTarget("kubepods", 116 * MiB)),
                 id="guaranteed-or-orphaned-cache-only-through-the-pods-cgroup-last"),
    pytest.param(holders(besteffort=0, burstable=0, pods=300), (ReclaimTarget("kubepods", 166 * MiB),),
                 id="cache-of-a-pod-gone-charged-to-the-pods-cgroup"),
    pytest.param(holders(besteffort=155), (ReclaimTarget("kubepods/besteffort", 155 * MiB),),
                 id="cache-that-covers-the-need-but-not-the-margin-is-asked-whole"),
])
def test_plan_asks_the_tiers_in_order_each_for_at_most_its_cache(cache: tuple[CacheHolder, ...],
                                                                 expected: tuple[ReclaimTarget, ...]) -> None:
    plan = plan_for(ON, threshold(), observed(150), cache, ReclaimHistory(), NOW)
    assert plan == ReclaimPlan(targets=expected, needed_bytes=150 * MiB, budget_s=0.05)


def test_plan_never_names_a_cgroup_outside_the_holders() -> None:
    plan = plan_for(ON, threshold(), observed(150), holders(besteffort=100, burstable=100, pods=900),
                        ReclaimHistory(), NOW)
    assert isinstance(plan, ReclaimPlan)
    assert {t.cgroup for t in plan.targets} <= {"kubepods/besteffort", "kubepods/burstable", "kubepods"}


def test_the_budget_given_is_the_plans() -> None:
    plan = plan_for(ReclaimSettings(enabled=True, budget_s=0.02), threshold(), observed(150),
                        holders(besteffort=500), ReclaimHistory(), NOW)
    assert isinstance(plan, ReclaimPlan) and plan.budget_s == 0.02


@pytest.mark.parametrize(("settings", "limit", "observation", "cache", "history", "reason"), [
    pytest.param(ReclaimSettings(), threshold(), observed(150), holders(besteffort=500), ReclaimHistory(),
                 "is off", id="off-keeps-the-kubelets-decision"),
    pytest.param(ReclaimSettings(enabled=True, unavailable="cgroup v1"), threshold(), observed(150),
                 holders(besteffort=500), ReclaimHistory(), "unavailable: cgroup v1", id="unavailable-acts-as-off"),
    pytest.param(ON, threshold(Signal.NODEFS_AVAILABLE), observed(150), holders(besteffort=500), ReclaimHistory(),
                 "does not count page cache", id="disk-signal"),
    pytest.param(ON, threshold(Signal.MEMORY_STALL_SOME), observed(150), holders(besteffort=500),
                 ReclaimHistory(), "does not count page cache", id="stall-signal"),
    pytest.param(ON, threshold(), observed(150), holders(besteffort=20, burstable=30, pods=60), ReclaimHistory(),
                 "cannot cover the 150 MiB needed (anonymous memory)", id="anonymous-growth-skips"),
    pytest.param(ON, threshold(), observed(150), holders(besteffort=149), ReclaimHistory(),
                 "cannot cover", id="cache-just-short-of-the-need-skips"),
    pytest.param(ON, threshold(), observed(150), (), ReclaimHistory(), "cannot cover", id="no-pods-cgroup"),
    pytest.param(ON, threshold(), observed(150), holders(besteffort=500),
                 ReclaimHistory(ReclaimAttempt(NOW - 10, 100 * MiB, False), 1, NOW + 50), "backing off",
                 id="backing-off"),
    pytest.param(ON, threshold(), observed(150), holders(besteffort=500),
                 ReclaimHistory(ReclaimAttempt(NOW - 1, 300 * MiB, True),
                                recent=tuple((NOW - 9 + 0.5 * i, 0.05) for i in range(19))),
                 "(at most 10% of one CPU)", id="cpu-share-bounds-the-attempts"),
])
def test_skips(settings: ReclaimSettings, limit: Threshold, observation: Observation,
               cache: tuple[CacheHolder, ...], history: ReclaimHistory, reason: str) -> None:
    plan = plan_for(settings, limit, observation, cache, history, NOW)
    assert isinstance(plan, ReclaimSkip), plan
    assert reason in plan.reason


def test_allocatable_memory_is_reclaimed_too() -> None:
    plan = plan_for(ON, threshold(Signal.ALLOCATABLE_MEMORY_AVAILABLE), observed(150), holders(besteffort=500),
                        ReclaimHistory(), NOW)
    assert isinstance(plan, ReclaimPlan)


def test_a_reclaim_that_cleared_the_threshold_does_not_hold_back_the_next() -> None:
    """As in the arena: a reader still filling its cache crossed again 1.2 s after a reclaim of 59 ms that cleared the
    threshold; a fixed 2 s interval let it be evicted then (and the Guaranteed pod 0.3 s later). Within the CPU share,
    the next attempt goes ahead."""
    history = after_attempt(ReclaimHistory(), ReclaimAttempt(NOW, 131 * MiB, avoided=True, spent_s=0.059))
    assert isinstance(plan_for(ON, threshold(), observed(150), holders(besteffort=500), history, NOW + 1.2),
                      ReclaimPlan)


def test_the_cpu_share_counts_the_attempts_of_the_last_window_only() -> None:
    history = ReclaimHistory()
    for i in range(19):  # 19 attempts of 50 ms, one every 0.5 s: 950 ms in the window
        history = after_attempt(history, ReclaimAttempt(NOW + 0.5 * i, 100 * MiB, avoided=True, spent_s=0.05))
    assert cpu_spent_s(history, NOW + 9.1) == pytest.approx(0.95)
    assert isinstance(plan_for(ON, threshold(), observed(150), holders(besteffort=500), history, NOW + 9.1),
                      ReclaimSkip)
    # 10 s after the first, it has left the window: 900 ms spent, room for one more attempt of 50 ms.
    assert cpu_spent_s(history, NOW + 10.0) == pytest.approx(0.9)
    assert isinstance(plan_for(ON, threshold(), observed(150), holders(besteffort=500), history, NOW + 10.0),
                      ReclaimPlan)
    # The history keeps only the attempts of the last window.
    history = after_attempt(history, ReclaimAttempt(NOW + 30, 100 * MiB, avoided=True, spent_s=0.05))
    assert history.recent == ((NOW + 30, 0.05),)


def test_the_first_attempt_of_a_window_may_take_any_budget() -> None:
    """Nothing spent in the window: the attempt runs whatever its budget (a test's guest gives 2 s)."""
    settings = ReclaimSettings(enabled=True, budget_s=2.0)
    assert isinstance(plan_for(settings, threshold(), observed(150), holders(besteffort=500), ReclaimHistory(), NOW),
                      ReclaimPlan)


def test_after_the_back_off_it_plans_again() -> None:
    history = ReclaimHistory(ReclaimAttempt(NOW - BACKOFF_S - 1, 100 * MiB, False), 1, NOW - 1)
    assert isinstance(plan_for(ON, threshold(), observed(150), holders(besteffort=500), history, NOW),
                      ReclaimPlan)


@pytest.mark.parametrize(("failures", "expected_s"), [
    pytest.param(1, BACKOFF_S, id="first"), pytest.param(2, 2 * BACKOFF_S, id="doubles"),
    pytest.param(30, MAX_BACKOFF_S, id="capped"),
])
def test_backoff_doubles_up_to_its_cap(failures: int, expected_s: float) -> None:
    assert backoff_s(failures) == expected_s


def test_a_reclaim_that_did_not_avoid_the_eviction_backs_off() -> None:
    history = after_attempt(ReclaimHistory(), ReclaimAttempt(NOW, 60 * MiB, avoided=False))
    assert history.backoff_until_s == NOW + BACKOFF_S and history.failures == 1
    history = after_attempt(history, ReclaimAttempt(NOW + BACKOFF_S, 60 * MiB, avoided=False))
    assert history.backoff_until_s == NOW + 3 * BACKOFF_S and history.failures == 2


def test_the_cycle_after_the_eviction_a_first_failure_let_through_may_try_once_more() -> None:
    """The evicted pod may be what kept the cache in use (a reader still reading): its cache is idle now."""
    history = after_attempt(ReclaimHistory(), ReclaimAttempt(NOW, 131 * MiB, avoided=False))
    assert history.once_more and history.failures == 1
    soon = NOW + 0.07  # the next cycle, once the evicted pod is gone: within the interval and the back-off
    assert isinstance(plan_for(ON, threshold(), observed(150), holders(besteffort=500), history, soon), ReclaimPlan)
    # That attempt failing too: the back-off holds, with no more exceptions.
    history = after_attempt(history, ReclaimAttempt(soon, 10 * MiB, avoided=False))
    assert not history.once_more and history.failures == 2
    skip = plan_for(ON, threshold(), observed(150), holders(besteffort=500), history, soon + 0.07)
    assert isinstance(skip, ReclaimSkip) and skip.backing_off
    # A failure judged later (refaults after an attempt that avoided its eviction) leaves no exception either.
    judged_later = judged(after_attempt(ReclaimHistory(), ReclaimAttempt(NOW, 100 * MiB, avoided=True,
                                                                         refault_file_bytes=0)),
                          100 * MiB, None, NOW + 5)
    assert judged_later.failures == 1 and not judged_later.once_more


def test_a_reclaim_that_avoided_the_eviction_resets_the_failures() -> None:
    failing = ReclaimHistory(ReclaimAttempt(NOW - 200, 0, False), 3, NOW - 1)
    history = after_attempt(failing, ReclaimAttempt(NOW, 200 * MiB, avoided=True))
    assert history.failures == 0 and history.backoff_until_s is None


@pytest.mark.parametrize(("refaults_mib", "full_avg10", "later_s", "fails"), [
    pytest.param(50, None, 20.0, True, id="half-of-it-refaulted-soon-after"),
    pytest.param(49, None, 20.0, False, id="under-half-refaulted"),
    pytest.param(90, None, REFAULT_WINDOW_S + 1, False, id="refaulted-after-the-window-not-judged"),
    pytest.param(0, 12.0, 20.0, True, id="node-stalls-on-memory-psi-full"),
    pytest.param(0, 3.0, 20.0, False, id="psi-low"),
    pytest.param(None, None, 20.0, False, id="no-refault-count"),
])
def test_refaults_or_a_stall_after_a_reclaim_make_it_a_failure(refaults_mib: int | None, full_avg10: float | None,
                                                               later_s: float, fails: bool) -> None:
    start = 5000 * MiB
    history = after_attempt(ReclaimHistory(), ReclaimAttempt(NOW, 100 * MiB, avoided=True, refault_file_bytes=start))
    now = NOW + later_s
    after = judged(history, None if refaults_mib is None else start + refaults_mib * MiB, full_avg10, now)
    assert (after.backoff_until_s is not None) is fails
    plan = plan_for(ON, threshold(), observed(150), holders(besteffort=500), after, now)
    assert isinstance(plan, ReclaimSkip) is fails
    # Judged once: the same evidence later does not lengthen the back-off.
    assert judged(after, None if refaults_mib is None else start + refaults_mib * MiB, full_avg10, now + 1) == after


def test_the_amount_is_the_largest_need_of_the_thresholds_to_evict_for() -> None:
    soft = threshold(value="500Mi", min_reclaim="100Mi", hard=False)
    plan = reclaim_plan(ON, [threshold(), soft], {Signal.MEMORY_AVAILABLE: observed(150)}, holders(besteffort=900),
                        ReclaimHistory(), NOW)
    assert isinstance(plan, ReclaimPlan) and plan.needed_bytes == 450 * MiB


def test_a_step_with_the_kubelets_threshold_beside_a_stall_one_reclaims_for_the_kubelets() -> None:
    """The engine evicts for the kubelet's threshold where one is met; the stall one waits for the next cycle. So a
    reclaim answers the kubelet's alone (the arena's backup stream: `memory.available<200Mi` met beside a daemons
    refault threshold that had no candidate evicted the streaming pod without the reclaim that would have cleared
    it, 3 runs of 3)."""
    daemons = threshold(Signal.DAEMONS_REFAULT, value="1000")
    stall = threshold(Signal.MEMORY_STALL_SOME, value="20")
    assert answered([daemons, threshold(), stall]) == [threshold()]
    assert answered([stall, daemons]) == [stall, daemons], "a stall step alone: all of it, so the plan skips"
    plan = reclaim_plan(ON, answered([threshold(), daemons]), {Signal.MEMORY_AVAILABLE: observed(150)},
                        holders(besteffort=900), ReclaimHistory(), NOW)
    assert isinstance(plan, ReclaimPlan) and plan.needed_bytes == 150 * MiB


def test_a_stall_threshold_to_evict_for_too_skips() -> None:
    stall = threshold(Signal.MEMORY_STALL_SOME, value="20")
    plan = reclaim_plan(ON, [threshold(), stall], {Signal.MEMORY_AVAILABLE: observed(150),
                                                   Signal.MEMORY_STALL_SOME: observed(10)},
                        holders(besteffort=900), ReclaimHistory(), NOW)
    assert isinstance(plan, ReclaimSkip) and "does not count page cache" in plan.reason


@pytest.mark.parametrize(("available_mib", "expected"), [
    pytest.param(300, True, id="threshold-plus-min-reclaim-reached"),
    pytest.param(299, False, id="within-min-reclaim-not-cleared"),
    pytest.param(150, False, id="still-under-the-threshold"),
])
def test_cleared_asks_for_the_minimum_reclaim(available_mib: int, expected: bool) -> None:
    assert cleared([threshold()], {Signal.MEMORY_AVAILABLE: observed(available_mib)}) is expected


def test_cleared_ignores_a_soft_threshold_not_evicting_yet() -> None:
    """The hard threshold the reclaim was for is clear; a soft one still in its grace period (not among the
    thresholds to evict for) does not make the cycle evict: the kubelet's disk check would (every threshold)."""
    assert cleared([threshold()], {Signal.MEMORY_AVAILABLE: observed(330)}) is True


def test_cleared_needs_the_signal_observed() -> None:
    assert cleared([threshold()], {}) is False

"""Reclaim for the daemons (`evictd.core.daemons_reclaim`): the trigger on the daemons' figure and the pods' page
cache, the bounds (attempt, minute, cache, CPU), the cgroups in QoS order (never a Guaranteed pod's, never outside
the pods cgroup), the verdict and its doubling back-off. Pure, table-driven; each rule has a case that fails without
it."""

from __future__ import annotations

import pytest

from evictd.core.daemons_reclaim import (
    ATTEMPT_MAX_BYTES,
    JUDGE_AFTER_S,
    JUDGE_WITHIN_S,
    MINUTE_MAX_BYTES,
    MINUTE_S,
    DaemonsAttempt,
    DaemonsReclaimHistory,
    DaemonsReclaimSettings,
    after_attempt,
    daemons_reclaim_plan,
    daemons_reclaim_skip,
    judged,
    pods_file_bytes,
)
from evictd.core.memory_reclaim import (
    BACKOFF_S,
    BESTEFFORT,
    BURSTABLE,
    MAX_BACKOFF_S,
    PODS,
    CacheHolder,
    ReclaimPlan,
    ReclaimSkip,
)
from evictd.core.refault import RefaultFigure

MiB = 1 << 20
ON = DaemonsReclaimSettings(enabled=True, budget_s=0.05)
NOW = 1000.0
# The daemons hold 200 MiB: 1% of it is 2 MiB.
DAEMONS_MIB = 200


def figure(percent: float, memory_mib: int = DAEMONS_MIB) -> RefaultFigure:
    """The daemons' figure: `percent` of their `memory_mib` re-read within the window."""
    return RefaultFigure(round(memory_mib * MiB * percent / 100), None, 2.0, memory_mib * MiB)


def holders(besteffort: tuple[int, int] = (0, 0), burstable: tuple[int, int] = (0, 0),
            pods: tuple[int, int] | None = None) -> tuple[CacheHolder, ...]:
    """The tiers' and the pods cgroup's (active, inactive) file in MiB; the pods cgroup holds at least the tiers'."""
    total = pods if pods is not None else (besteffort[0] + burstable[0], besteffort[1] + burstable[1])
    return (CacheHolder("kubepods/burstable", BURSTABLE, burstable[0] * MiB, burstable[1] * MiB),
            CacheHolder("kubepods/besteffort", BESTEFFORT, besteffort[0] * MiB, besteffort[1] * MiB),
            CacheHolder("kubepods", PODS, total[0] * MiB, total[1] * MiB))


def plan(found: ReclaimPlan | ReclaimSkip) -> list[tuple[str, int]]:
    assert isinstance(found, ReclaimPlan), found
    assert found.by_usage and found.needed_bytes == sum(target.bytes for target in found.targets)
    return [(target.cgroup, target.bytes // MiB) for target in found.targets]


def skipped(found: ReclaimPlan | ReclaimSkip) -> str:
    assert isinstance(found, ReclaimSkip), found
    return found.reason


# --- when it triggers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("percent", "cache", "expected"), [
    pytest.param(10, holders(besteffort=(0, 600)), [("kubepods/besteffort", 200)], id="at-the-trigger-reclaims"),
    pytest.param(9.99, holders(besteffort=(0, 600)), "under 10%", id="just-under-the-trigger-skips"),
    pytest.param(None, holders(besteffort=(0, 600)), "unknown", id="unknown-figure-never-triggers"),
    pytest.param(80, holders(), "the pods hold 0 MiB", id="no-pods-cache-no-trigger"),
    pytest.param(80, holders(besteffort=(10, 5)), "under 16 MiB", id="less-than-one-write-of-cache-no-trigger"),
    pytest.param(80, holders(besteffort=(8, 8)), [("kubepods/besteffort", 16)], id="one-write-of-cache-is-enough"),
])
def test_the_trigger(percent: float | None, cache: tuple[CacheHolder, ...], expected: list[tuple[str, int]] | str,
                     ) -> None:
    found = daemons_reclaim_plan(ON, None if percent is None else figure(percent), cache, DaemonsReclaimHistory(),
                                 NOW)
    if isinstance(expected, str):
        assert expected in skipped(found)
    else:
        assert plan(found) == expected


def test_independent_of_thresholds_and_psi_the_figure_alone_with_the_cache() -> None:
    """The rule takes no threshold and no PSI figure: the daemons' figure and the pods' cache are all it reads."""
    assert plan(daemons_reclaim_plan(ON, figure(50), holders(besteffort=(300, 300)), DaemonsReclaimHistory(), NOW))


@pytest.mark.parametrize(("settings", "reason"), [
    pytest.param(DaemonsReclaimSettings(), "off", id="off-by-default"),
    pytest.param(DaemonsReclaimSettings(enabled=True, unavailable="cgroup v1 has no memory.reclaim"),
                 "unavailable: cgroup v1", id="unavailable"),
])
def test_off_or_unavailable_never_plans(settings: DaemonsReclaimSettings, reason: str) -> None:
    assert reason in skipped(daemons_reclaim_plan(settings, figure(100), holders(besteffort=(500, 500)),
                                                  DaemonsReclaimHistory(), NOW))


# --- how much, and where -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("daemons_mib", "cache", "expected"), [
    pytest.param(200, holders(besteffort=(100, 400)), [("kubepods/besteffort", 200)],
                 id="the-daemons-memory-from-besteffort-active-and-inactive"),
    pytest.param(200, holders(besteffort=(0, 50), burstable=(100, 100)),
                 [("kubepods/besteffort", 50), ("kubepods/burstable", 150)], id="besteffort-then-burstable"),
    pytest.param(200, holders(besteffort=(0, 50), burstable=(0, 50), pods=(100, 200)),
                 [("kubepods/besteffort", 50), ("kubepods/burstable", 50), ("kubepods", 100)],
                 id="then-the-pods-cgroup-for-what-it-holds-beyond-the-tiers"),
    pytest.param(200, holders(besteffort=(0, 40), pods=(0, 100)), [("kubepods/besteffort", 40), ("kubepods", 60)],
                 id="never-more-than-the-pods-cache"),
    pytest.param(1024, holders(besteffort=(0, 2048)), [("kubepods/besteffort", ATTEMPT_MAX_BYTES // MiB)],
                 id="at-most-the-attempts-cap"),
    pytest.param(10, holders(besteffort=(0, 500)), [("kubepods/besteffort", 10)], id="a-small-slice-its-memory"),
])
def test_the_amount_and_the_order(daemons_mib: int, cache: tuple[CacheHolder, ...],
                                  expected: list[tuple[str, int]]) -> None:
    found = daemons_reclaim_plan(ON, figure(50, daemons_mib), cache, DaemonsReclaimHistory(), NOW)
    assert plan(found) == expected
    assert isinstance(found, ReclaimPlan) and found.budget_s == ON.budget_s


def test_never_a_guaranteed_pods_cgroup_nor_outside_the_pods_cgroup() -> None:
    """Whatever the holders (a Guaranteed pod's cgroup or the daemons' slice passed in by mistake), only the QoS tiers
    and the pods cgroup are asked."""
    cache = (*holders(besteffort=(0, 20), pods=(0, 400)),
             CacheHolder("kubepods/pod-guaranteed", "guaranteed", 300 * MiB, 0),
             CacheHolder("system.slice", "daemons", 300 * MiB, 0))
    targets = plan(daemons_reclaim_plan(ON, figure(80), cache, DaemonsReclaimHistory(), NOW))
    assert {cgroup for cgroup, _ in targets} <= {"kubepods/besteffort", "kubepods/burstable", "kubepods"}
    assert targets == [("kubepods/besteffort", 20), ("kubepods", 180)]


def test_pods_file_bytes_counts_the_pods_cgroup_or_the_tiers() -> None:
    assert pods_file_bytes(holders(besteffort=(10, 20), pods=(50, 50))) == 100 * MiB
    assert pods_file_bytes(holders(besteffort=(10, 20))[:2]) == 30 * MiB  # no pods cgroup read


def test_the_minutes_cap_bounds_later_attempts_and_lapses_after_a_minute() -> None:
    history = DaemonsReclaimHistory(recent=(DaemonsAttempt(NOW - 30, MINUTE_MAX_BYTES - 100 * MiB, 0, 0.01, 5000),))
    cache = holders(besteffort=(0, 2048))
    assert plan(daemons_reclaim_plan(ON, figure(50), cache, history, NOW)) == [("kubepods/besteffort", 100)]
    full = DaemonsReclaimHistory(recent=(DaemonsAttempt(NOW - 30, MINUTE_MAX_BYTES, 0, 0.01, 5000),))
    assert "already" in skipped(daemons_reclaim_plan(ON, figure(50), cache, full, NOW))
    assert plan(daemons_reclaim_plan(ON, figure(50), cache, full, NOW + MINUTE_S - 29))


def test_the_cpu_share_bounds_attempts() -> None:
    """Reclaim before evict's share: the attempts of the last 10 s and this one's budget within 10 % of a CPU."""
    busy = DaemonsReclaimHistory(recent=(DaemonsAttempt(NOW - 5, 16 * MiB, 0, 0.98, 5000),))
    assert "of one CPU" in skipped(daemons_reclaim_plan(ON, figure(50), holders(besteffort=(0, 500)), busy, NOW))


# --- the verdict and the back-off ----------------------------------------------------------------------------------


def attempt(at: float = NOW, before_percent: float = 60) -> DaemonsAttempt:
    return DaemonsAttempt(at, 200 * MiB, 180 * MiB, 0.03, round(before_percent * 100))


@pytest.mark.parametrize(("after_percent", "helped"), [
    pytest.param(30, True, id="fell-by-half-helped"),
    pytest.param(45, True, id="fell-by-a-quarter-helped"),
    pytest.param(46, False, id="fell-by-less-than-a-quarter-did-not-help"),
    pytest.param(60, False, id="did-not-fall"),
    pytest.param(90, False, id="rose"),
])
def test_the_verdict(after_percent: float, helped: bool) -> None:
    history = after_attempt(DaemonsReclaimHistory(), attempt())
    judged_history, verdict = judged(history, figure(after_percent), NOW + JUDGE_AFTER_S)
    assert verdict is not None and verdict.helped is helped and judged_history.pending is None
    assert judged_history.failures == (0 if helped else 1)
    assert judged_history.backoff_until_s == (None if helped else NOW + JUDGE_AFTER_S + BACKOFF_S)


def test_under_the_trigger_after_is_help_whatever_the_share() -> None:
    history = after_attempt(DaemonsReclaimHistory(), attempt(before_percent=11))
    _, verdict = judged(history, figure(9), NOW + JUDGE_AFTER_S)
    assert verdict is not None and verdict.helped


def test_not_in_a_cycle_where_reclaim_before_evict_acts_and_at_once_in_the_next() -> None:
    history = DaemonsReclaimHistory()
    assert skipped(daemons_reclaim_skip(ON, figure(90), history, NOW, memory_reclaim_acts=True)) == \
        "reclaim before evict acts on a memory threshold this cycle"
    assert daemons_reclaim_skip(ON, figure(90), history, NOW + 1) is None
    assert "under 10%" in skipped(daemons_reclaim_skip(ON, figure(5), history, NOW, memory_reclaim_acts=True)), \
        "the figure is told first: under the trigger the rule had nothing to do anyway"


def test_no_second_attempt_while_one_awaits_its_verdict() -> None:
    history = after_attempt(DaemonsReclaimHistory(), attempt())
    cache = holders(besteffort=(0, 500))
    assert "awaits its verdict" in skipped(daemons_reclaim_plan(ON, figure(90), cache, history, NOW + 1))
    too_soon, verdict = judged(history, figure(90), NOW + JUDGE_AFTER_S - 0.1)
    assert verdict is None and too_soon == history
    unknown, verdict = judged(history, None, NOW + JUDGE_AFTER_S)
    assert verdict is None and unknown.pending is not None  # waits for a figure
    dropped, verdict = judged(history, None, NOW + JUDGE_WITHIN_S + 1)
    assert verdict is None and dropped.pending is None and dropped.failures == 0


def test_failures_in_a_row_double_the_back_off_and_help_resets_it() -> None:
    history, now, cache = DaemonsReclaimHistory(), NOW, holders(besteffort=(0, 2048))
    backoffs = []
    for _ in range(6):
        assert plan(daemons_reclaim_plan(ON, figure(60), cache, history, now))
        history = after_attempt(history, attempt(now, 60))
        history, verdict = judged(history, figure(60), now + JUDGE_AFTER_S)
        assert verdict is not None and not verdict.helped and history.backoff_until_s is not None
        backoffs.append(history.backoff_until_s - (now + JUDGE_AFTER_S))
        backing = daemons_reclaim_plan(ON, figure(60), cache, history, history.backoff_until_s - 1)
        assert isinstance(backing, ReclaimSkip) and backing.backing_off
        now = history.backoff_until_s
    assert backoffs == [BACKOFF_S, 2 * BACKOFF_S, 4 * BACKOFF_S, 8 * BACKOFF_S, MAX_BACKOFF_S, MAX_BACKOFF_S]
    history = after_attempt(history, attempt(now, 60))
    history, verdict = judged(history, figure(20), now + JUDGE_AFTER_S)
    assert verdict is not None and verdict.helped and history.failures == 0 and history.backoff_until_s is None


def test_after_attempt_keeps_the_last_minutes_attempts_and_leaves_its_inputs() -> None:
    old = DaemonsAttempt(NOW - MINUTE_S - 1, 16 * MiB, 0, 0.01, 5000)
    history = DaemonsReclaimHistory(recent=(old,))
    later = after_attempt(history, attempt())
    assert later.recent == (attempt(),) and later.pending == attempt() and history.recent == (old,)


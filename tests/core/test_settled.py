"""The settled-figures rules of `evictd.core.settled` (issue #37, item 2), pure: table-driven, no I/O."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from builders import Gi, Mi, pod, pod_stats, summary
from clocks import ManualClock
from evictd.core.engine import EngineConfig
from evictd.core.errors import EvictdError
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.memcg import STATS_CATCH_UP_S
from evictd.core.quantity import Quantity
from evictd.core.settled import (
    CROSSING_HOLD_S,
    DEEP_CROSSING_BYTES,
    EARLY_CONFIRM_S,
    SETTLING_READ_EVERY_S,
    accounted,
    confirming_reads,
    crossing_confirmed,
    crossing_deep,
    crossing_hold_s,
    crossing_unsettled,
    crossings_to_confirm,
    near_crossing,
    near_unmet_crossing,
    runtime_wait_s,
    settled_usage,
    settling_reads,
    with_node_memory,
)
from evictd.core.signals import Signal
from evictd.core.summary import SYSTEM_CONTAINER_PODS, Summary, signal_observations
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import Threshold, ThresholdValue
from evictd.core.unanswered import OVERDUE_S
from evictd.cycle.manager import EvictionManager
from test_manager import Evictor, Layout, Pods, Reclaimer, Stats

HARD = EngineConfig.from_settings(EvictionSettings(hard={"memory.available": "1Gi"})).thresholds


@pytest.mark.parametrize(
    ("before", "after", "settled"),
    [
        # Usage, memory.stat, usage again: a 64 MiB file deleted between the first usage and memory.stat (the stat
        # already without it) must not leave the old usage beside the new inactive file.
        pytest.param(700 * Mi, 636 * Mi, 636 * Mi, id="page-cache-dropped-between-the-reads"),
        pytest.param(636 * Mi, 700 * Mi, 636 * Mi, id="page-cache-or-anon-added-between-the-reads"),
        pytest.param(636 * Mi, 636 * Mi, 636 * Mi, id="still"),
    ],
)
def test_a_settled_reading_takes_the_lower_usage(before: int, after: int, settled: int) -> None:
    assert settled_usage(before, after) == settled


MET = summary_from_dict(summary(memory=512 * Mi))
CLEAR = summary_from_dict(summary(memory=2 * Gi))
NEAR = summary_from_dict(summary(memory=Gi + 4 * Mi))
JUST_CLEAR = summary_from_dict(summary(memory=Gi + 8 * Mi))


@pytest.mark.parametrize(
    ("held", "reading", "to_confirm"),
    [
        pytest.param((), MET, HARD[:1], id="newly-met-is-confirmed"),  # no allocatable figure: its copy is not met
        pytest.param(HARD, MET, (), id="held-met-is-not-confirmed-again"),
        pytest.param((), CLEAR, (), id="not-met-nothing-to-confirm"),
    ],
)
def test_crossings_to_confirm(held: tuple, reading: object, to_confirm: tuple) -> None:  # type: ignore[type-arg]
    assert crossings_to_confirm(HARD, held, reading) == to_confirm  # type: ignore[arg-type]


def test_a_crossing_is_confirmed_only_by_a_reading_that_still_has_it_met() -> None:
    assert crossing_confirmed(HARD, MET)
    assert not crossing_confirmed(HARD, CLEAR), "page cache or a short dip: gone on the second reading"
    assert not crossing_confirmed(HARD, None), "an unread confirmation confirms nothing"
    assert not crossing_confirmed((), MET)


@pytest.mark.parametrize(
    ("reading", "near", "unmet_near"),
    [
        pytest.param(MET, True, False, id="met"),  # met: near, but no crossing still to come (already decided)
        pytest.param(NEAR, True, True, id="4Mi-from-met"),
        pytest.param(JUST_CLEAR, False, False, id="8Mi-from-met"),
        pytest.param(CLEAR, False, False, id="far"),
    ],
)
def test_follow_ups_only_near_a_crossing(reading: object, near: bool, unmet_near: bool) -> None:
    assert near_crossing(HARD, signal_observations(reading)) is near  # type: ignore[arg-type]
    assert near_unmet_crossing(HARD, signal_observations(reading)) is unmet_near  # type: ignore[arg-type]


VICTIM = pod("victim")


def manager(*script: dict, hold_s: float = CROSSING_HOLD_S) -> tuple[EvictionManager, Evictor, ManualClock]:  # type: ignore[type-arg]
    evictor, clock = Evictor(), ManualClock(0.0)
    config = EngineConfig.from_settings(EvictionSettings(hard={"memory.available": "1Gi"}))
    return (EvictionManager(config, stats=Stats(*script), layout=Layout(FsLayout()), pods=Pods(VICTIM),
                            reclaimer=Reclaimer(), evictor=evictor, clock=clock, crossing_hold_s=hold_s),
            evictor, clock)


CROSSED = summary(memory=512 * Mi, pods=[pod_stats(VICTIM, memory=Gi)])  # 512 MiB past the threshold: deep
SHALLOW = summary(memory=Gi - 4 * Mi, pods=[pod_stats(VICTIM, memory=Gi)])  # 4 MiB past it: what a dip does
GONE = summary(memory=2 * Gi, pods=[pod_stats(VICTIM, memory=Gi)])


@pytest.mark.parametrize(
    ("script", "hold_s", "evicted", "slept_s", "confirmed"),
    [
        # The confirming readings at 5, 10, 20, 40 and 80 ms, then at the hold's end (100 ms).
        pytest.param((SHALLOW, *[SHALLOW] * 5, GONE), CROSSING_HOLD_S, False, CROSSING_HOLD_S, False,
                     id="shallow-gone-on-confirmation"),
        pytest.param((SHALLOW, *[SHALLOW] * 6), CROSSING_HOLD_S, True, CROSSING_HOLD_S, True,
                     id="shallow-held-is-evicted"),
        pytest.param((SHALLOW, GONE), CROSSING_HOLD_S, False, EARLY_CONFIRM_S, False, id="gone-at-the-early-reading"),
        pytest.param((SHALLOW, CROSSED), CROSSING_HOLD_S, True, EARLY_CONFIRM_S, True, id="deep-at-the-early-reading"),
        pytest.param((SHALLOW, SHALLOW, GONE), CROSSING_HOLD_S, False, 2 * EARLY_CONFIRM_S, False,
                     id="gone-at-the-second-reading"),
        pytest.param((SHALLOW, SHALLOW, SHALLOW, CROSSED), CROSSING_HOLD_S, True, 4 * EARLY_CONFIRM_S, True,
                     id="deep-at-the-third-reading-a-slowed-fill"),
        pytest.param((CROSSED, CROSSED), CROSSING_HOLD_S, True, EARLY_CONFIRM_S, True, id="deep-from-the-first"),
        pytest.param((CROSSED,), 0.0, True, 0.0, False, id="no-hold-the-kubelets-one-reading"),
    ],
)
def test_a_crossing_is_decided_on_its_confirming_reading(script: tuple, hold_s: float, evicted: bool,  # type: ignore[type-arg]
                                                          slept_s: float, confirmed: bool) -> None:
    m, evictor, clock = manager(*script, hold_s=hold_s)
    report = m.synchronize()
    assert bool(evictor.calls) is evicted
    assert clock.now_s == pytest.approx(slept_s), "the manager sleeps through its clock"
    assert report.observed.crossing_confirmed is confirmed
    assert report.observed.confirmed_after_s == (pytest.approx(slept_s) if hold_s > 0 else None), \
        "the wait for the confirming reading is reported"
    assert report.observed.crossing_unconfirmed is (hold_s > 0 and not evicted)
    assert bool(report.decided.assessment.node_conditions) is evicted, "an unconfirmed crossing makes no condition"


@pytest.mark.parametrize(("available", "deep"), [
    (Gi - 4 * Mi, False),  # a dip's depth
    (Gi - DEEP_CROSSING_BYTES, False),  # exactly a step past: not more
    (Gi - DEEP_CROSSING_BYTES - 1, True),
    (2 * Gi, False),  # not met at all
])
def test_a_crossing_is_deep_more_than_a_step_past_its_threshold(available: int, deep: bool) -> None:
    reading = summary_from_dict(summary(memory=available, pods=[]))
    assert crossing_deep(HARD, reading) is deep
    assert crossing_deep(HARD, None) is False


def test_the_confirming_readings_and_the_wait_after_an_eviction_are_rereads() -> None:
    """The cycle's first reading asks every source; its confirmations and `hard_threshold_met` are re-reads, which a
    source may answer without waiting on a slow runtime again."""
    m, evictor, _ = manager(*[SHALLOW] * 8)
    m.synchronize()
    assert evictor.calls
    assert m.hard_threshold_met()
    stats = m._stats
    assert isinstance(stats, Stats) and stats.rereads == [False, True, True, True, True, True, True, True]


def test_a_threshold_held_met_is_not_confirmed_again() -> None:
    m, evictor, clock = manager(*[SHALLOW] * 8)
    m.synchronize()
    m.synchronize()
    assert clock.now_s == pytest.approx(CROSSING_HOLD_S), "one hold, at the crossing"
    assert len(evictor.calls) == 2


@pytest.mark.parametrize(("hold_s", "flapping", "reads"), [
    pytest.param(0.1, False, (0.005, 0.01, 0.02, 0.04, 0.08, 0.1), id="doubling-within-the-hold"),
    pytest.param(0.1, True, (0.005, 0.1), id="flapping-the-early-reading-and-the-end"),
    pytest.param(0.15, True, (0.005, 0.15), id="flapping-a-varied-hold"),
    pytest.param(0.04, False, (0.005, 0.01, 0.02, 0.04), id="a-short-hold-no-reading-twice"),
    pytest.param(0.005, False, (0.005,), id="a-hold-of-the-early-reading"),
    pytest.param(0.003, False, (0.003,), id="a-hold-shorter-than-it"),
])
def test_the_confirming_readings_double_from_the_early_one_within_the_hold(hold_s: float, flapping: bool,
                                                                          reads: tuple[float, ...]) -> None:
    assert confirming_reads(hold_s, flapping=flapping) == pytest.approx(reads)


class MemoryStats(Stats):
    """`Stats` (the full readings) and a script of readings of the node's memory alone (`memory_summary`)."""

    def __init__(self, memory: list[dict | Exception], *script: dict) -> None:  # type: ignore[type-arg]
        super().__init__(*script)
        self.memory = memory
        self.memory_reads = 0

    def memory_reading(self) -> object:  # type: ignore[override]
        return self.memory_summary

    def memory_summary(self) -> object:
        self.memory_reads += 1
        item = self.memory.pop(0)
        if isinstance(item, Exception):
            raise item
        return item if isinstance(item, Summary) else summary_from_dict(item)


def memory_manager(memory: list, *script: dict) -> tuple[EvictionManager, Evictor, ManualClock, MemoryStats]:  # type: ignore[type-arg]
    evictor, clock = Evictor(), ManualClock(0.0)
    stats = MemoryStats(memory, *script)
    config = EngineConfig.from_settings(EvictionSettings(hard={"memory.available": "1Gi"}))
    return (EvictionManager(config, stats=stats, layout=Layout(FsLayout()), pods=Pods(VICTIM), reclaimer=Reclaimer(),
                            evictor=evictor, clock=clock, crossing_hold_s=CROSSING_HOLD_S), evictor, clock, stats)


NODE_SHALLOW = summary(memory=Gi - 4 * Mi, pods=[])
NODE_DEEP = summary(memory=Gi - 2 * DEEP_CROSSING_BYTES, pods=[])
NODE_GONE = summary(memory=2 * Gi, pods=[])


@pytest.mark.parametrize(
    ("memory", "full", "evicted", "slept_s", "memory_reads"),
    [
        # A fill slowed down: 8 MiB deep at the fourth reading, 40 ms in.
        pytest.param([*[NODE_SHALLOW] * 3, NODE_DEEP], SHALLOW, True, 8 * EARLY_CONFIRM_S, 4, id="deep-at-40-ms"),
        pytest.param([*[NODE_SHALLOW] * 6], SHALLOW, True, CROSSING_HOLD_S, 6, id="shallow-held-to-the-hold"),
        pytest.param([NODE_SHALLOW, NODE_GONE], SHALLOW, False, 2 * EARLY_CONFIRM_S, 2, id="gone-at-10-ms"),
        # The full reading after the confirmation reads the crossing again (a flicker): the cycle decides on the
        # memory figures the confirmation judged, so nobody is evicted.
        pytest.param([NODE_GONE], CROSSED, False, EARLY_CONFIRM_S, 1, id="full-reading-flickers-back-no-eviction"),
        # A reading of the memory that fails ends the confirmation: the full reading decides, as it did before.
        pytest.param([EvictdError("unreadable")], CROSSED, True, EARLY_CONFIRM_S, 1,
                     id="memory-unreadable-the-full-reading-decides"),
    ],
)
def test_a_crossing_is_confirmed_on_readings_of_the_memory_alone_then_one_full_reading(
        memory: list, full: dict, evicted: bool, slept_s: float, memory_reads: int) -> None:  # type: ignore[type-arg]
    # The first reading of the memory alone is the one before the cycle's full reading (`runtime_wait_s`), then the
    # confirmation's.
    m, evictor, clock, stats = memory_manager([NODE_SHALLOW, *memory], SHALLOW, full)
    report = m.synchronize()
    assert bool(evictor.calls) is evicted
    assert clock.now_s == pytest.approx(slept_s)
    assert stats.memory_reads == 1 + memory_reads
    assert stats.rereads == [False, True], "the cycle's reading, then one full reading after the confirmation"
    assert report.observed.crossing_confirmed is evicted


@pytest.mark.parametrize(("gate", "wait_s"), [
    pytest.param(NODE_SHALLOW, OVERDUE_S, id="a-hard-memory-threshold-met"),
    pytest.param(NODE_GONE, None, id="none-met-the-deadline"),
    pytest.param(EvictdError("unreadable"), None, id="the-memory-unreadable-the-deadline"),
])
def test_the_cycles_full_reading_waits_little_for_the_runtime_when_the_memory_read_before_it_shows_a_threshold_met(
        gate: dict | Exception, wait_s: float | None) -> None:  # type: ignore[type-arg]
    """The full reading then waits OVERDUE_S at most for the runtime (`StatsSource.summary`'s `runtime_wait_s`); the
    re-reads within the cycle take what it got, and wait as usual."""
    m, _, _, stats = memory_manager([gate, NODE_GONE], SHALLOW, SHALLOW)
    m.synchronize()
    assert stats.runtime_waits[0] == wait_s
    assert stats.runtime_waits[1:] == [None] * (len(stats.runtime_waits) - 1)


def test_runtime_wait_s() -> None:
    hard = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Quantity.parse("1Gi")))
    soft = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Quantity.parse("2Gi")), grace_period_s=30,
                     hard=False)
    assert runtime_wait_s([]) is None
    assert runtime_wait_s([soft]) == runtime_wait_s([soft, hard]) == runtime_wait_s([hard]) == OVERDUE_S


@pytest.mark.parametrize(("gate", "wait_s"), [
    pytest.param(NODE_SHALLOW, OVERDUE_S, id="met"),
    pytest.param(NODE_GONE, None, id="not-met"),
])
def test_a_soft_memory_threshold_met_makes_the_reading_urgent_too(
        gate: dict, wait_s: float | None) -> None:  # type: ignore[type-arg]
    """Where memory falls fast the soft threshold is met first and the hard one during the full reading (the
    arena's burst on the real node: the cycle woken at the soft crossing waited 2 s on the runtime while the hard
    one was crossed)."""
    stats = MemoryStats([gate, NODE_GONE], GONE)
    config = EngineConfig.from_settings(EvictionSettings(hard={}, soft={"memory.available": "1Gi"},
                                                         soft_grace_period={"memory.available": "1m"}))
    m = EvictionManager(config, stats=stats, layout=Layout(FsLayout()), pods=Pods(VICTIM), reclaimer=Reclaimer(),
                        evictor=Evictor(), clock=ManualClock(0.0), crossing_hold_s=CROSSING_HOLD_S)
    m.synchronize()
    assert stats.runtime_waits == [wait_s]


def test_while_the_memory_flaps_a_crossing_is_confirmed_on_full_readings_as_before() -> None:
    m, _, clock, stats = memory_manager([NODE_SHALLOW], SHALLOW, SHALLOW, GONE)
    m.synchronize(flapping=True)
    assert stats.memory_reads == 1, "the reading before the cycle's (`runtime_wait_s`), none to confirm"
    assert stats.rereads == [False, True, True], "the early reading and the hold's end"
    assert clock.now_s == pytest.approx(CROSSING_HOLD_S)


def test_a_stall_crossing_is_confirmed_on_full_readings_as_before() -> None:
    """A stall signal is not read from a memory cgroup: its confirming readings are full ones (PSI), doubling."""
    m, _, _, _ = memory_manager([])
    (threshold,) = HARD[:1]
    assert m._memory_reading((threshold,)) is not None
    assert m._memory_reading((replace(threshold, signal=Signal.MEMORY_STALL_FULL),)) is None


def test_the_decision_takes_the_node_memory_the_confirmation_judged_and_the_rest_of_the_full_reading() -> None:
    full = summary_from_dict(summary(memory=512 * Mi, allocatable=100 * Mi, pods=[pod_stats(VICTIM, memory=Gi)]))
    reading = summary_from_dict(summary(memory=3 * Gi, memory_ws=5 * Gi, allocatable=700 * Mi, pods=[]))
    decided = with_node_memory(full, reading)
    assert decided.node.memory is not None and decided.node.memory.available_bytes == 3 * Gi
    assert decided.node.memory.working_set_bytes == 5 * Gi
    pods = decided.node.system_containers["pods"].memory
    assert pods is not None and pods.available_bytes == 700 * Mi
    assert decided.pods == full.pods and decided.node.fs == full.node.fs, "the pods and the disks as read in full"
    alone = summary_from_dict(summary(memory=3 * Gi, pods=[]))  # no pods cgroup figure: the full reading's stays
    kept = with_node_memory(full, alone).node.system_containers["pods"].memory
    assert kept is not None and kept.available_bytes == 100 * Mi


def test_the_hold_is_fixed_unless_the_memory_flaps_and_then_spread_between_once_and_twice_it() -> None:
    assert [crossing_hold_s(0.1, flapping=False, count=n) for n in range(3)] == [0.1, 0.1, 0.1]
    holds = [crossing_hold_s(0.1, flapping=True, count=n) for n in range(10)]
    assert all(0.1 <= hold < 0.2 for hold in holds), "never shorter than the hold a short dip must not pass"
    assert holds[0] == 0.1
    spaced = sorted(holds)
    assert max(b - a for a, b in itertools.pairwise(spaced)) < 0.02, f"spread over the range: {holds}"
    # A tenant whose period is twice the hold, read at a random point of its half above the level: a fixed hold
    # always reads the half below; the varied holds read above it again in about half of the confirmations.
    period, above = 0.2, 0.1
    starts = [i / 20 * above for i in range(20)]
    fixed = sum((t + 0.1) % period < above for t in starts)
    varied = sum((t + hold) % period < above for t in starts for hold in holds)
    assert fixed == 0
    assert 0.35 < varied / (len(starts) * len(holds)) < 0.65


def test_a_flapping_cycle_waits_the_varied_hold_and_each_confirmation_the_next_one() -> None:
    # While flapping: the 5 ms reading and the hold's end; then, not flapping, 5, 10, 20, 40, 80 ms and the end.
    m, _, clock = manager(*(SHALLOW, SHALLOW, GONE) * 2, SHALLOW, *[SHALLOW] * 5, GONE)
    slept = []
    for flapping in (True, True, False):
        before = clock.now_s
        m.synchronize(flapping=flapping)
        slept.append(round(clock.now_s - before, 9))
    assert slept == [round(crossing_hold_s(CROSSING_HOLD_S, flapping=True, count=n), 9) for n in (0, 1)] + \
        [CROSSING_HOLD_S]
    assert slept[1] > CROSSING_HOLD_S, "the second confirmation while flapping waits longer than the first"


# --- Usage the statistics do not account for yet (issue 76 item 1) ----------------------------------------------


def unfolded(doc: dict, node_bytes: int, pods_bytes: int | None = None) -> Summary:  # type: ignore[type-arg]
    """`doc` parsed, with `node_bytes` (and `pods_bytes`) of usage its memory.stat does not account for yet."""
    parsed = summary_from_dict(doc)
    node = parsed.node
    assert node.memory is not None
    containers = dict(node.system_containers)
    if pods_bytes is not None:
        pods = containers[SYSTEM_CONTAINER_PODS]
        containers[SYSTEM_CONTAINER_PODS] = replace(pods, memory=replace(pods.memory, unfolded_bytes=pods_bytes))
    return replace(parsed, node=replace(node, memory=replace(node.memory, unfolded_bytes=node_bytes),
                                        system_containers=containers))


# 20 MiB past the threshold on figures whose statistics miss 64 MiB of usage: a 64 MiB file written since they were
# last folded in reads as working set (the churner: 38 MiB under the level, then a 64 MiB file).
STALE = unfolded(summary(memory=Gi - 20 * Mi, pods=[pod_stats(VICTIM, memory=Gi)]), 64 * Mi)
# 20 MiB past, 16 MiB of it not accounted for: still 4 MiB past on what memory.stat accounts for (a real crossing).
STALE_BUT_MET = unfolded(summary(memory=Gi - 20 * Mi, pods=[pod_stats(VICTIM, memory=Gi)]), 16 * Mi)
# 20 MiB past, 4 MiB of it not accounted for: 16 MiB past on what it accounts for, deep.
STALE_BUT_DEEP = unfolded(summary(memory=Gi - 20 * Mi, pods=[pod_stats(VICTIM, memory=Gi)]), 4 * Mi)
SETTLING = len(settling_reads(CROSSING_HOLD_S))


def test_the_accounted_figures_take_the_unfolded_usage_out_of_the_working_set() -> None:
    reading = unfolded(summary(memory=Gi - 20 * Mi, memory_ws=5 * Gi, allocatable=100 * Mi, allocatable_ws=900 * Mi),
                       64 * Mi, 32 * Mi)
    figures = accounted(reading)
    assert figures.node.memory is not None and figures.node.memory.available_bytes == Gi + 44 * Mi
    assert figures.node.memory.working_set_bytes == 5 * Gi - 64 * Mi and figures.node.memory.unfolded_bytes == 0
    pods = figures.node.system_containers[SYSTEM_CONTAINER_PODS].memory
    assert pods is not None and (pods.available_bytes, pods.working_set_bytes) == (132 * Mi, 868 * Mi)
    settled = summary_from_dict(summary(memory=Gi - 20 * Mi))
    assert accounted(settled) is settled, "nothing unfolded (0 or not known): the reading as it is"
    assert accounted(unfolded(summary(memory=Gi), 0)).node.memory == unfolded(summary(memory=Gi), 0).node.memory


@pytest.mark.parametrize(("reading", "unsettled", "deep"), [
    pytest.param(STALE, True, False, id="met-only-on-usage-not-accounted-for"),
    pytest.param(STALE_BUT_MET, False, False, id="met-on-what-is-accounted-for"),
    pytest.param(STALE_BUT_DEEP, False, True, id="deep-on-what-is-accounted-for"),
    pytest.param(summary_from_dict(summary(memory=Gi - 20 * Mi)), False, True, id="settled-deep"),
    pytest.param(unfolded(summary(memory=2 * Gi), 64 * Mi), False, False, id="not-met"),
    pytest.param(None, False, False, id="unread"),
])
def test_a_crossing_met_only_on_usage_its_statistics_do_not_account_for_is_unsettled_and_never_deep(
        reading: Summary | None, unsettled: bool, deep: bool) -> None:
    assert crossing_unsettled(HARD, reading) is unsettled
    assert crossing_deep(HARD, reading) is deep


def test_an_unsettled_crossing_is_read_every_hold_until_the_kernel_has_flushed_its_statistics() -> None:
    assert settling_reads(0.1) == pytest.approx(tuple(0.1 * n for n in range(2, 26)))
    assert settling_reads(0.1)[-1] == pytest.approx(STATS_CATCH_UP_S), "past the kernel's periodic flush (2 s)"
    assert settling_reads(1.0) == (2.0,)
    assert settling_reads(0.0) == ()
    dense = settling_reads(0.1, SETTLING_READ_EVERY_S)
    assert dense == pytest.approx(tuple(0.1 + SETTLING_READ_EVERY_S * n for n in range(1, len(dense) + 1)))
    assert dense[-1] == pytest.approx(STATS_CATCH_UP_S) and len(dense) == 120


def test_on_the_node_memory_alone_an_unsettled_crossing_is_read_every_20_ms_after_the_hold() -> None:
    """A churner's page cache lives about 100 ms: readings a hold apart kept step with it (bench
    crossing_beside_churn: p90 645 ms); the node's memory alone is cheap to read, so the settling reads are dense and
    the first that accounts for the usage confirms."""
    node_stale = unfolded(NODE_SHALLOW | {"node": NODE_SHALLOW["node"] | {"memory": {
        "availableBytes": Gi - 20 * Mi, "workingSetBytes": 8 * Gi}}}, 64 * Mi)
    node_settled = NODE_SHALLOW | {"node": NODE_SHALLOW["node"] | {"memory": {
        "availableBytes": Gi - 20 * Mi, "workingSetBytes": 8 * Gi}}}
    m, evictor, clock, stats = memory_manager([NODE_SHALLOW, *[node_stale] * 8, node_settled], SHALLOW, CROSSED)
    report = m.synchronize()
    assert evictor.calls, "a real crossing, met on what the statistics account for at the third settling read"
    assert clock.now_s == pytest.approx(CROSSING_HOLD_S + 3 * SETTLING_READ_EVERY_S)
    assert report.observed.confirmed_after_s == pytest.approx(CROSSING_HOLD_S + 3 * SETTLING_READ_EVERY_S)
    assert stats.memory_reads == 1 + 9, "the gate, 5 to 100 ms, then three settling readings 20 ms apart"


@pytest.mark.parametrize(
    ("script", "evicted", "slept_s"),
    [
        # Before: decided at the 5 ms reading, 20 MiB past (deep) on page cache its statistics had not counted yet.
        pytest.param((STALE, *[STALE] * 6, GONE), False, 2 * CROSSING_HOLD_S, id="page-cache-gone-after-the-hold"),
        pytest.param((STALE, STALE, GONE), False, 2 * EARLY_CONFIRM_S, id="page-cache-gone-within-the-hold"),
        pytest.param((STALE, *[STALE] * 6, SHALLOW), True, 2 * CROSSING_HOLD_S, id="settled-still-met-after-the-hold"),
        pytest.param((STALE, STALE, CROSSED), True, 2 * EARLY_CONFIRM_S, id="settled-deep-within-the-hold"),
        pytest.param((STALE, *[STALE] * (6 + SETTLING)), True, STATS_CATCH_UP_S, id="unsettled-to-the-end-as-read"),
        pytest.param((STALE_BUT_MET, *[STALE_BUT_MET] * 6), True, CROSSING_HOLD_S, id="met-on-what-is-accounted-for"),
        pytest.param((STALE_BUT_DEEP, STALE_BUT_DEEP), True, EARLY_CONFIRM_S, id="deep-on-what-is-accounted-for"),
    ],
)
def test_a_crossing_met_only_on_usage_not_accounted_for_is_confirmed_on_a_reading_that_accounts_for_it(
        script: tuple, evicted: bool, slept_s: float) -> None:  # type: ignore[type-arg]
    m, evictor, clock = manager(*script)
    report = m.synchronize()
    assert bool(evictor.calls) is evicted
    assert clock.now_s == pytest.approx(slept_s)
    assert report.observed.confirmed_after_s == pytest.approx(slept_s)
    assert report.observed.crossing_unconfirmed is not evicted
    stats = m._stats
    assert isinstance(stats, Stats) and not stats.script, "every reading of the script taken, none more"


def test_the_node_memory_alone_confirms_an_unsettled_crossing_too_and_the_decision_takes_its_figures() -> None:
    """On readings of the node's memory alone, as the daemon confirms: the full reading after them may be stale
    again; the cycle decides on the settled figures the confirmation judged."""
    node_stale = unfolded(NODE_SHALLOW | {"node": NODE_SHALLOW["node"] | {"memory": {
        "availableBytes": Gi - 20 * Mi, "workingSetBytes": 8 * Gi}}}, 64 * Mi)
    m, evictor, clock, stats = memory_manager([NODE_SHALLOW, node_stale, *[node_stale] * 5, NODE_GONE],
                                              SHALLOW, CROSSED)
    report = m.synchronize()
    assert not evictor.calls, "the full reading's crossing (deep, stale) is not what the cycle decides on"
    assert clock.now_s == pytest.approx(CROSSING_HOLD_S + SETTLING_READ_EVERY_S)
    assert report.observed.crossing_unconfirmed
    assert stats.memory_reads == 1 + 7, "the gate, 5 to 100 ms, then the first settling reading (120 ms)"

"""The model of cgroup v1's memory wake-ups (`evictd.core.memcg`), rule by rule, without a cgroup: what it
asks to register, which firing earns a cycle, and what it reads in the kernel's place. The set that carries it out
on real cgroups is tests/adapters/test_notifiers.py's.

The readings: a node of 2 GiB capacity and a hard `memory.available<512Mi`, so the working set meets the threshold
at 1536 MiB (its working-set level), and the usage level is that plus the inactive file.
"""

from __future__ import annotations

import pytest

from evictd.core.errors import SampleError
from evictd.core.memcg import (
    LEVEL_CLOSE_READING_EVERY_S,
    UNWATCHED_RECHECK_S,
    CloseReading,
    Firing,
    Followed,
    MemcgState,
    MemoryFigures,
    Registration,
    Watch,
    memcg_after_cycle,
    memcg_fired,
    memcg_installed,
    memcg_may_change_decision,
    memcg_rechecked,
    memcg_registered,
)
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal
from evictd.core.summary import MemoryStats
from evictd.core.thresholds import Threshold, ThresholdValue

MI = 1 << 20
ROOT, PODS = "/memory", "/memory/kubepods"
HARD_512 = Threshold(signal=Signal.MEMORY_AVAILABLE, value=ThresholdValue(quantity=Quantity.parse("512Mi")))
ALLOCATABLE_512 = Threshold(signal=Signal.ALLOCATABLE_MEMORY_AVAILABLE,
                            value=ThresholdValue(quantity=Quantity.parse("512Mi")))
WORKING_SET_LEVEL = 1536 * MI


def stats(working_set_mib: int, inactive_mib: int) -> MemoryStats:
    return MemoryStats(available_bytes=2048 * MI - working_set_mib * MI, working_set_bytes=working_set_mib * MI,
                       usage_bytes=(working_set_mib + inactive_mib) * MI)


def cycle_figures(node: MemoryStats) -> dict[Threshold, MemoryFigures | SampleError]:
    """What a cycle that read the node at `node` hands the memcg rules (`Arming.memcg`): no pods figures."""
    return {HARD_512: (node.available_bytes or 0, node.working_set_bytes or 0, node.usage_bytes or 0),
            ALLOCATABLE_512: SampleError("summary", "incomplete")}


def followed(state: MemcgState, working_set_mib: int, inactive_mib: int, at: float,
             fresh_root: int | None = None) -> tuple[MemcgState, Followed]:
    """The state after a cycle at `at` that read the node at these figures."""
    return memcg_after_cycle(state, cycle_figures(stats(working_set_mib, inactive_mib)), fresh_root, cycle_at=at, now=at)


def armed_model(working_set_mib: int = 1000, inactive_mib: int = 100) -> MemcgState:
    """One hard threshold on the root, armed as its first cycle asked, the kernel holding all three."""
    state, asked = followed(MemcgState.of([HARD_512], [ROOT], ROOT), working_set_mib, inactive_mib, 0.0)
    for registration in asked.registrations:
        state = memcg_installed(state, 0, registration.watch, registration.level if registration.level > 0 else None)
    return state


def figures(working_set_mib: int, inactive_mib: int = 0) -> dict[str, tuple[int, int] | None]:
    return {ROOT: ((working_set_mib + inactive_mib) * MI, inactive_mib * MI)}


def test_the_first_cycle_registers_each_level_and_its_two_watches_at_once() -> None:
    state, first = followed(MemcgState.of([HARD_512, ALLOCATABLE_512], [ROOT, PODS], ROOT), 1000, 100, 0.0)
    assert first.at_once
    assert first.registrations == (
        Registration(0, Watch.LEVEL, 1636 * MI, 1100 * MI),
        Registration(0, Watch.DROP, 1092 * MI, 1100 * MI),  # a step (8 MiB) below usage
        Registration(0, Watch.APPROACH, 1368 * MI, 1100 * MI),  # halfway from usage to the level
    )
    # No pods figures: reported at a refresh only.
    [(index, error)] = first.unreadable
    assert index == 1 and error.reason == "incomplete"
    _, later = followed(state, 1000, 100, 1.0)
    assert not later.at_once and later.unreadable == ()


@pytest.mark.parametrize(("cycle_at", "inactive_mib", "asked"), [
    (1.0, 104, []),  # the level moved 4 MiB: less than a step
    (1.0, 110, [Watch.LEVEL, Watch.DROP]),  # 10 MiB: re-armed, and usage rose 10 MiB: the drop watch follows
    (10.0, 100, []),  # the kubelet's refresh: strictly more than 10 s
    (10.5, 100, [Watch.LEVEL, Watch.DROP, Watch.APPROACH]),
    (15.0, 100, []),  # counted from the last refresh (10.5 below)
    (20.6, 100, [Watch.LEVEL, Watch.DROP, Watch.APPROACH]),
])
def test_between_refreshes_a_level_is_asked_again_only_when_it_moved_a_step(
        cycle_at: float, inactive_mib: int, asked: list[Watch]) -> None:
    state = armed_model()
    if cycle_at > 11:
        state, _ = followed(state, 1000, 100, 10.5)
    _, then = followed(state, 1000, inactive_mib, cycle_at)
    assert [registration.watch for registration in then.registrations] == asked


def test_a_threshold_without_a_level_waits_for_the_refresh_and_a_met_one_has_no_drop_watch() -> None:
    state = memcg_installed(armed_model(), 0, Watch.LEVEL, None)  # its registration failed
    state, between = followed(state, 1000, 140, 1.0)
    assert between.registrations == ()
    _, refresh = followed(state, 1600, 100, 11.0)
    assert {r.watch: r.level for r in refresh.registrations}[Watch.DROP] == 0  # met: none


@pytest.mark.parametrize(("working_set_mib", "armed_mib", "met", "unwatched"), [
    (1000, 1636, False, True),  # a lower level, usage below it: the armed one would announce it too late
    (1000, 1500, False, False),  # the armed level is lower: it announces the crossing first
    (1000, 1000, False, True),  # usage is past the armed level: it fired once and announces nothing more
    (1600, 1636, True, False),  # met: the level below usage announces usage falling past it
])
def test_a_lower_level_being_registered_is_read_in_the_kernels_place(
        working_set_mib: int, armed_mib: int, met: bool, unwatched: bool) -> None:
    state = memcg_installed(armed_model(), 0, Watch.LEVEL, armed_mib * MI)
    state, then = followed(state, working_set_mib, 40, 1.0)
    assert Watch.LEVEL in [r.watch for r in then.registrations]
    assert (state.unwatched == {0: 1576 * MI}) is unwatched
    assert (state.recheck_s == UNWATCHED_RECHECK_S) is unwatched
    state = memcg_registered(state, 0)
    assert state.unwatched == {} and state.recheck_s is None


def test_usage_read_past_a_level_being_registered_is_a_crossing() -> None:
    state = armed_model()
    assert memcg_rechecked(state, [(0, 1576 * MI, 1575 * MI)], [], now=1.0)[1] == []
    assert memcg_rechecked(state, [(0, 1576 * MI, None)], [], now=1.0)[1] == []  # unreadable: the registration says
    assert memcg_rechecked(state, [(0, 1576 * MI, 1576 * MI)], [], now=1.0)[1] == [
        "hard memory eviction threshold (crossed while re-armed)"]


@pytest.mark.parametrize(("met_mib", "watch", "working_set_mib", "needs"), [
    (1000, Watch.LEVEL, 1530, True),  # not met, within a step of the working-set level: a crossing
    (1000, Watch.LEVEL, 1436, False),  # 100 MiB short: page cache fired the level
    (1000, Watch.DROP, 1480, True),  # a watch within 64 MiB: the level beside it may be too high
    (1000, Watch.DROP, 1466, False),
    (1000, Watch.APPROACH, 1480, True),
    (1600, Watch.LEVEL, 1500, True),  # met in the last cycle, no longer met
    (1600, Watch.LEVEL, 1550, False),  # still met: decided already
])
def test_a_firing_earns_a_cycle_only_when_it_may_change_the_decision(
        met_mib: int, watch: Watch, working_set_mib: int, needs: bool) -> None:
    _, needing, _ = memcg_fired(armed_model(working_set_mib=met_mib), [Firing(0, watch)],
                                figures(working_set_mib, 50), now=1.0)
    assert needing == (needs,)


def test_a_firing_that_cannot_be_judged_earns_a_cycle() -> None:
    assert memcg_fired(armed_model(), [Firing(0, Watch.DROP)], {ROOT: None}, now=1.0)[1] == (True,)
    unknown = MemcgState.of([HARD_512], [ROOT], ROOT)  # no cycle yet: no working-set level
    assert memcg_fired(unknown, [Firing(0, Watch.DROP)], figures(1000), now=1.0)[1] == (True,)


def test_page_cache_firing_the_level_re_arms_it_from_the_fresh_figures() -> None:
    state = armed_model()
    _, needing, registrations = memcg_fired(state, [Firing(0, Watch.LEVEL, is_armed_level=True)],
                                            figures(1200, 440), now=1.0)
    assert needing == (False,)
    assert Registration(0, Watch.LEVEL, (1536 + 440) * MI, 1640 * MI) in registrations
    # A firing of a level since replaced re-arms nothing of the level (the one armed stands).
    _, _, registrations = memcg_fired(state, [Firing(0, Watch.LEVEL, is_armed_level=False)], figures(1200, 440),
                                      now=1.0)
    assert Watch.LEVEL not in [r.watch for r in registrations]


@pytest.mark.parametrize(("inactive_mib", "level_asked"), [
    (40, True),  # page cache dropped: the level moves 60 MiB down
    (160, False),  # memory.stat counts more inactive file: a watch never raises the level
])
def test_a_watch_that_fired_lowers_the_level_never_raises_it(inactive_mib: int, level_asked: bool) -> None:
    _, _, registrations = memcg_fired(armed_model(), [Firing(0, Watch.DROP)], figures(1000, inactive_mib), now=1.0)
    assert (Watch.LEVEL in [r.watch for r in registrations]) is level_asked


def test_a_firing_that_needs_a_cycle_re_arms_nothing_itself() -> None:
    _, needing, registrations = memcg_fired(
        armed_model(), [Firing(0, Watch.DROP), Firing(0, Watch.LEVEL, is_armed_level=True)], figures(1530, 40),
        now=1.0)
    assert needing == (True, True) and registrations == ()


@pytest.mark.parametrize(("watch", "working_set_mib", "expected"), [
    (Watch.DROP, 1436, CloseReading(2.0, "met while read closely", UNWATCHED_RECHECK_S)),  # 100 MiB short: 1 s
    (Watch.DROP, 1336, None),  # 200 MiB short: beyond the close reading's 128 MiB
    (Watch.LEVEL, 1436, CloseReading(3.5, "met while read closely", LEVEL_CLOSE_READING_EVERY_S)),  # page cache?
])
def test_a_firing_near_the_threshold_starts_a_close_reading(
        watch: Watch, working_set_mib: int, expected: CloseReading | None) -> None:
    state, _, _ = memcg_fired(armed_model(), [Firing(0, watch)], figures(working_set_mib, 40), now=1.0)
    assert state.read_closely.get(0) == expected


def test_a_close_reading_ends_when_met_or_when_its_time_is_up() -> None:
    state, _, _ = memcg_fired(armed_model(), [Firing(0, Watch.DROP)], figures(1436, 40), now=1.0)
    state = memcg_registered(state, 0)  # the level it lowered (page cache dropped) is registered
    reading = state.read_closely[0]
    assert state.recheck_s == UNWATCHED_RECHECK_S
    not_met = (1480 * MI, 0)
    state, crossed = memcg_rechecked(state, [], [(0, reading, not_met)], now=1.5)
    assert crossed == [] and 0 in state.read_closely
    state, crossed = memcg_rechecked(state, [], [(0, reading, None)], now=1.5)
    assert crossed == []  # unreadable: not met
    state, crossed = memcg_rechecked(state, [], [(0, reading, (1600 * MI, 50 * MI))], now=1.6)
    assert crossed == ["hard memory eviction threshold (met while read closely)"]
    assert state.read_closely == {} and state.recheck_s is None
    state, _, _ = memcg_fired(state, [Firing(0, Watch.DROP)], figures(1436, 40), now=3.0)
    state, crossed = memcg_rechecked(state, [], [(0, state.read_closely[0], not_met)], now=4.0)
    assert crossed == [] and state.read_closely == {}


def test_a_faster_close_reading_under_way_keeps_its_pace() -> None:
    state, _, _ = memcg_fired(armed_model(), [Firing(0, Watch.DROP)], figures(1436, 40), now=1.0)
    state, _, _ = memcg_fired(state, [Firing(0, Watch.LEVEL)], figures(1436, 40), now=1.5)
    assert state.read_closely[0] == CloseReading(4.0, "met while read closely", UNWATCHED_RECHECK_S)


@pytest.mark.parametrize(("fresh_root_mib", "folder", "read_closely"), [
    (None, ROOT, False),  # no fresh figure
    (20, ROOT, True),  # memory.stat still counts 200 MiB of page cache that is gone: met on the fresh figure
    (195, ROOT, False),  # within a step of memory.stat's figure
    (20, PODS, False),  # the fresh figure is the whole machine's: the root's only
])
def test_a_threshold_met_on_the_fresh_inactive_file_is_read_until_the_statistics_catch_up(
        fresh_root_mib: int | None, folder: str, read_closely: bool) -> None:
    state, _ = memcg_after_cycle(MemcgState.of([HARD_512], [folder], ROOT), cycle_figures(stats(1500, 200)),
                                 None if fresh_root_mib is None else fresh_root_mib * MI, cycle_at=0.0, now=5.0)
    expected = CloseReading(7.5, "met once the kernel's statistics caught up", UNWATCHED_RECHECK_S)
    assert (state.read_closely.get(0) == expected) is read_closely


def test_a_level_armed_on_the_fresh_figure_sits_where_the_threshold_can_first_be_met() -> None:
    _, first = followed(MemcgState.of([HARD_512], [ROOT], ROOT), 1000, 200, 0.0, fresh_root=150 * MI)
    assert first.registrations[0] == Registration(0, Watch.LEVEL, (1536 + 150) * MI, 1200 * MI)


@pytest.mark.parametrize(("then", "expected_until"), [
    (6.0, 7.5),  # the cycle after the firing does not show the crossing yet: read until the statistics can
    (8.0, None),  # too long after the firing to be that crossing
])
def test_a_crossing_the_next_cycle_does_not_see_is_read_until_the_statistics_show_it(
        then: float, expected_until: float | None) -> None:
    state, _, _ = memcg_fired(armed_model(), [Firing(0, Watch.LEVEL)], figures(1530, 40), now=5.0)  # a cycle is due
    state, _ = followed(state, 1000, 100, then)
    reading = state.read_closely.get(0)
    assert (reading.until if reading is not None else None) == expected_until


def test_a_crossing_a_cycle_saw_met_is_not_read_for_again() -> None:
    state, _, _ = memcg_fired(armed_model(), [Firing(0, Watch.LEVEL)], figures(1530, 40), now=5.0)
    state, _ = followed(state, 1600, 100, 5.5)  # the cycle saw it met
    state, _ = followed(state, 1000, 100, 6.0)  # relieved since
    assert state.read_closely == {}


def test_a_cycle_that_reads_the_threshold_met_ends_its_close_reading() -> None:
    state, _, _ = memcg_fired(armed_model(), [Firing(0, Watch.DROP)], figures(1436, 40), now=1.0)
    state, _ = followed(state, 1600, 100, 1.1)
    assert state.read_closely == {}


@pytest.mark.parametrize(("cycle_mib", "working_set_mib", "may"), [
    (1000, 1500, True),  # within 64 MiB of being met
    (1000, 1300, False),
    (1000, 1700, True),  # met since
    (1600, 1700, False),  # met, as the last cycle saw it
    (1600, 1500, True),  # no longer met
])
def test_a_wake_up_naming_no_threshold_is_judged_as_a_drop_watch(cycle_mib: int, working_set_mib: int,
                                                                  may: bool) -> None:
    state = armed_model(working_set_mib=cycle_mib)
    assert state.known_folders == (ROOT,)
    assert memcg_may_change_decision(state, figures(working_set_mib)) is may
    assert memcg_may_change_decision(MemcgState.of([], [], ROOT), {}), "no threshold to judge by: a cycle"


def test_nothing_is_held_once_forgotten() -> None:
    state = memcg_installed(armed_model(), 0, Watch.LEVEL, 1700 * MI)
    state, _ = followed(state, 1000, 40, 1.0)
    state, _, _ = memcg_fired(state, [Firing(0, Watch.DROP)], figures(1436, 40), now=1.0)
    state = state.forgotten()
    assert state.unwatched == {} and state.read_closely == {}
    # Nothing armed: between refreshes, nothing is asked of a threshold without a level.
    assert followed(state, 1000, 140, 2.0)[1].registrations == ()


def test_transitions_leave_the_state_they_were_given_as_it_was() -> None:
    state = armed_model()
    before = (dict(state.read_closely), dict(state.unwatched), dict(state.crossed_at), state.working_set_levels)
    memcg_fired(state, [Firing(0, Watch.LEVEL)], figures(1436, 40), now=1.0)
    followed(state, 1600, 100, 11.0)
    memcg_installed(state, 0, Watch.LEVEL, 1 * MI)
    assert (dict(state.read_closely), dict(state.unwatched), dict(state.crossed_at),
            state.working_set_levels) == before and state.armed[Watch.LEVEL] == (1636 * MI,)

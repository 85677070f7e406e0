"""The housekeeping loop's schedule (src/evictd/core/wake.py), situation by situation, with the exact waits.

Cycles here take no time unless a test says so (started and ended at the same instant), so that every wait is
the schedule's own figure, with no float rounding from a clock. `Cadence` drives the pure transitions with the
facts each test names; `test_what_a_cycle_report_means_to_the_schedule` checks how those facts come from a cycle.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import replace

import pytest

from evictd.core.psi_window import WINDOW_FOLLOW_UP_S
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal
from evictd.core.thresholds import Threshold, ThresholdValue
from evictd.core.wake import (
    FLAP_CHANGES,
    FLAP_CYCLE_MAX_S,
    FLAP_CYCLE_S,
    FLAP_WINDOW_S,
    GRACE_END_MARGIN_S,
    MIN_STALE_AFTER_S,
    NOTIFICATION_FOLLOW_UPS_S,
    Arming,
    CycleSeen,
    Wake,
    WakeState,
    after_cycle,
    flap_cycle_s,
    sensed,
    stale_after_s,
)

MET = Threshold(signal=Signal.MEMORY_AVAILABLE, value=ThresholdValue(quantity=Quantity.parse("1Gi")))
GONE = Threshold(signal=Signal.ALLOCATABLE_MEMORY_AVAILABLE, value=ThresholdValue(quantity=Quantity.parse("1Gi")))


class Cadence:
    """`WakeState` through `after_cycle` and `sensed`, told each cycle's facts directly."""

    def __init__(self, interval_s: float, state: WakeState | None = None) -> None:
        self.state = state or WakeState(interval_s)
        self.plan = self.state.plan

    def after_cycle(self, started: float, now: float, *, memory_threshold_met: bool, held: bool = False,
                    grace_ends_in_s: float | None = None, crossing_unconfirmed: bool = False,
                    near_crossing: bool = True, unmet_near: bool = True, memory_receded: bool = False,
                    stall_follow_up: bool = False, crossing_unaccounted: bool = False) -> Cadence:
        # The previous cycle's memory: one threshold gone since without evictd acting (receded), or none.
        before = replace(self.state, memory_met=frozenset({GONE}) if memory_receded else frozenset(), acted=False,
                         woken=self.state.woken | {Wake.PSI} if stall_follow_up else self.state.woken)
        seen = CycleSeen(started, frozenset({MET}) if memory_threshold_met else frozenset(), held=held,
                         crossing_unconfirmed=crossing_unconfirmed, crossing_unaccounted=crossing_unaccounted,
                         near_crossing=near_crossing, unmet_near=unmet_near, grace_ends_in_s=grace_ends_in_s,
                         stall_unmet=stall_follow_up, arm=Arming(started))
        state, plan = after_cycle(before, seen, now)
        cadence = Cadence(0.0, state)
        cadence.plan = plan
        return cadence

    def after_failure(self, started: float, now: float) -> Cadence:
        return Cadence(0.0, after_cycle(self.state, CycleSeen(started, cycle_failed=True), now)[0])

    def after_cleanup(self) -> Cadence:
        return self.woken([Wake.EVICTION])

    def woken(self, causes: list[str]) -> Cadence:
        return Cadence(0.0, sensed(self.state, causes)[0])

    def wait_s(self, now: float) -> float | None:
        return self.plan.wait_s(now)

    @property
    def listening(self) -> bool:
        return self.plan.listening

    @property
    def flapping(self) -> bool:
        return self.state.flapping

    @property
    def follow_ups(self) -> tuple[float, ...]:
        return self.state.follow_ups

    @property
    def due_at(self) -> float | None:
        return self.state.due_at


INTERVAL_S = 10.0


def test_after_a_cycle_the_next_starts_one_interval_after_this_one_started() -> None:
    cadence = Cadence(INTERVAL_S).after_cycle(100.0, 100.25, memory_threshold_met=False)
    assert cadence.wait_s(100.25) == 9.75
    assert cadence.wait_s(105.0) == 5.0, "a wait cut short waits only what is left of the interval"


def test_after_a_cycle_longer_than_the_interval_the_loop_only_looks_for_wake_ups() -> None:
    cadence = Cadence(INTERVAL_S).after_cycle(100.0, 112.0, memory_threshold_met=False)
    assert cadence.wait_s(112.0) == 0.0  # 0: poll the notifiers once; None would be "no wait at all"


def test_after_a_failed_cycle_the_next_tick_retries_without_back_off() -> None:
    cadence = Cadence(INTERVAL_S).after_failure(100.0, 100.5)
    assert cadence.wait_s(100.5) == 9.5
    assert cadence.after_failure(110.0, 110.0).after_failure(120.0, 120.0).wait_s(120.0) == 10.0


def test_a_memory_notification_makes_the_next_cycle_due_and_cycles_follow_it_at_short_delays() -> None:
    cadence = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=False).woken(["memcg"])
    assert cadence.wait_s(0.0) is None, "woken: the next cycle runs at once"
    waits = []
    for _ in range(len(NOTIFICATION_FOLLOW_UPS_S) + 1):
        cadence = cadence.after_cycle(0.0, 0.0, memory_threshold_met=False)
        waits.append(cadence.wait_s(0.0))
        cadence = cadence.woken([])  # the timer
    assert waits == [0.001, 0.001, 0.002, *[0.005] * 9, *[0.01] * 5, 0.02, 0.05, 0.1, 0.25, 1.0, INTERVAL_S]
    assert tuple(waits[:-1]) == NOTIFICATION_FOLLOW_UPS_S


@pytest.mark.parametrize("cause", ["memcg", "psi", "memory_watch"])
def test_every_memory_notification_starts_the_follow_ups_afresh(cause: str) -> None:
    cadence = Cadence(INTERVAL_S).woken(["memcg"])
    for _ in range(4):
        cadence = cadence.after_cycle(0.0, 0.0, memory_threshold_met=False).woken([])
    assert cadence.after_cycle(0.0, 0.0, memory_threshold_met=False).wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[4]
    restarted = cadence.woken(["signal", cause]).after_cycle(0.0, 0.0, memory_threshold_met=False)
    assert restarted.wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[0]


def test_once_a_cycle_sees_a_memory_threshold_met_only_the_confirming_cycle_a_second_later_is_left() -> None:
    cadence = Cadence(INTERVAL_S).woken(["psi"])
    cadence = cadence.after_cycle(0.0, 0.0, memory_threshold_met=False).woken([])  # 1 ms: not crossed yet
    cadence = cadence.after_cycle(0.0, 0.0, memory_threshold_met=True)
    assert cadence.wait_s(0.0) == 1.0
    cadence = cadence.woken([]).after_cycle(1.0, 1.0, memory_threshold_met=True)
    assert cadence.wait_s(1.0) == INTERVAL_S, "confirmed: back to the interval"


def test_a_follow_up_never_comes_later_than_the_tick() -> None:
    cadence = Cadence(INTERVAL_S).woken(["memcg"]).after_cycle(0.0, 9.5, memory_threshold_met=True)
    assert cadence.wait_s(9.5) == 0.5  # the 1 s confirmation would be after the tick at 10 s


def test_a_failed_cycle_keeps_the_follow_ups_under_way() -> None:
    cadence = Cadence(INTERVAL_S).woken(["memcg"]).after_failure(0.0, 0.0)
    assert cadence.wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[0]
    assert cadence.woken([]).after_failure(0.0, 0.0).wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[1]


def test_after_an_eviction_and_the_wait_for_its_pods_the_next_cycle_runs_at_once_without_waiting() -> None:
    cadence = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=False).after_cleanup()
    assert cadence.wait_s(0.0) is None and cadence.wait_s(1e6) is None
    pending = Cadence(INTERVAL_S).woken(["memcg"]).after_cleanup()
    after = pending.after_cycle(0.0, 0.0, memory_threshold_met=False)
    assert after.wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[-1], \
        "an eviction saw its crossing: of the notification's follow-ups only the confirming one is left"
    assert after.woken([]).after_cycle(0.0, 0.0, memory_threshold_met=False).wait_s(0.0) == INTERVAL_S, \
        "then the tick (22 cycles followed each eviction before, issue #37)"


def test_the_timer_and_a_stop_make_the_next_cycle_due_but_only_a_memory_notification_starts_follow_ups() -> None:
    waiting = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=False)
    for causes in ([], ["signal"], ["signal", "memcg_rearm"]):
        woken = waiting.woken(causes)
        assert woken.wait_s(3.0) is None
        assert woken.after_cycle(3.0, 3.0, memory_threshold_met=False).wait_s(3.0) == INTERVAL_S


def test_a_memcg_re_arm_or_a_far_stall_never_earns_a_cycle_the_loop_waits_for_what_is_left_of_the_interval() -> None:
    waiting = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=False)
    assert waiting.woken(["memcg_rearm"]).wait_s(3.0) == 7.0
    assert waiting.woken(["psi_far", "memcg_rearm"]).wait_s(3.0) == 7.0, "nor a stall far from every threshold"
    following = Cadence(INTERVAL_S).woken(["memcg"]).after_cycle(0.0, 0.0, memory_threshold_met=False)
    assert following.woken(["memcg_rearm"]).wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[0], \
        "the follow-ups under way are kept, not restarted"
    assert waiting.woken(["memcg_rearm"]).woken([]).wait_s(10.0) is None, "the tick still comes"


def test_while_pressure_is_held_psi_earns_no_cycle_but_a_crossing_the_memory_watch_and_a_stop_do() -> None:
    held = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=True, held=True)
    assert held.woken(["psi"]).wait_s(2.0) == 8.0
    assert held.woken(["psi", "memcg_rearm"]).wait_s(4.0) == 6.0
    for causes in (["memcg"], ["memory_watch"], ["signal"], ["psi", "memcg"], []):
        assert held.woken(causes).wait_s(2.0) is None, causes
    not_held = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=True)
    assert not_held.woken(["psi"]).wait_s(2.0) is None, "without held pressure a stall may announce a crossing"


@pytest.mark.parametrize("cause", ["pid_watch", "refault_watch"])
def test_a_watch_of_another_signal_makes_the_next_cycle_due_at_once_without_follow_ups(cause: str) -> None:
    waiting = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=False)
    woken = waiting.woken([cause])
    assert woken.wait_s(3.0) is None
    assert woken.follow_ups == (), "not a memory notification: no pages still being charged to chase"
    held = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=True, held=True)
    assert held.woken([cause]).wait_s(2.0) is None, "held memory pressure: another threshold's crossing still earns it"
    flapping = Cadence(INTERVAL_S)
    for at in (0.0, 0.05, 0.1, 0.15):
        flapping = changed(flapping.woken(["memcg"]), at)
    assert flapping.flapping and flapping.woken([cause]).wait_s(0.2) is None, "memory flapping does not delay it"


def test_a_held_minute_of_psi_and_re_arm_wake_ups_costs_one_cycle_per_interval() -> None:
    cadence, now, cycles = Cadence(INTERVAL_S), 0.0, 0
    while now < 60.0:
        cycles += 1
        cadence = cadence.after_cycle(now, now, memory_threshold_met=True, held=True)
        while (wait := cadence.wait_s(now)) is not None:
            step = min(wait, 0.25)  # a PSI trigger or a re-arm every 250 ms of the wait
            now += step
            cadence = cadence.woken([] if step == wait else ["psi", "memcg_rearm"])
    assert cycles == 6


def test_while_held_a_notification_about_nothing_new_earns_its_cycle_and_no_chase() -> None:
    """On the real cluster's held minute a memcg level and the memory watch fired for the same crossing; the second,
    consumed after the first's cycle, started every follow-up afresh (22 cycles in 1.5 s), none able to see a
    threshold newly met. A cycle that holds pressure with nothing new met and nothing unmet near ends the chase but
    the confirming cycle a second later (which an earlier crossing's cycle may have left due); one with a crossing
    still near (a threshold a few pages short) goes on with it."""
    held = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=True, held=True)
    woken = held.woken(["memory_watch"])
    assert woken.wait_s(0.0) is None, "the notification earns its cycle"
    after = woken.after_cycle(0.0, 0.0, memory_threshold_met=False, held=True, unmet_near=False)
    assert after.follow_ups == () and after.wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[-1], "nothing new: confirm"
    chasing = woken.after_cycle(0.0, 0.0, memory_threshold_met=False, held=True, unmet_near=True)
    assert chasing.wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[0]
    assert chasing.follow_ups == NOTIFICATION_FOLLOW_UPS_S[1:]
    newly = woken.after_cycle(0.0, 0.0, memory_threshold_met=True, held=True, unmet_near=False)
    assert newly.follow_ups == () and newly.wait_s(0.0) == NOTIFICATION_FOLLOW_UPS_S[-1], "a new crossing is confirmed"


def test_held_ends_with_a_cycle_that_holds_nothing_or_fails() -> None:
    held = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=True, held=True)
    assert held.after_cycle(10.0, 10.0, memory_threshold_met=False).woken(["psi"]).wait_s(12.0) is None
    assert held.after_failure(10.0, 10.0).woken(["psi"]).wait_s(12.0) is None


def test_stale_after_three_intervals_and_never_before_thirty_seconds() -> None:
    assert stale_after_s(10.0) == MIN_STALE_AFTER_S == 30.0
    assert stale_after_s(0.2) == 30.0
    assert stale_after_s(60.0) == 180.0


def test_a_running_grace_period_makes_the_next_cycle_due_just_after_it_ends_never_after_the_tick() -> None:
    cadence = Cadence(INTERVAL_S).after_cycle(100.0, 100.0, memory_threshold_met=False, grace_ends_in_s=3.0)
    assert cadence.wait_s(100.0) == pytest.approx(3.0 + GRACE_END_MARGIN_S)
    later = Cadence(INTERVAL_S).after_cycle(100.0, 100.0, memory_threshold_met=False, grace_ends_in_s=3600.0)
    assert later.wait_s(100.0) == INTERVAL_S, "a grace period ending after the tick leaves the tick"
    ended = Cadence(INTERVAL_S).after_cycle(100.0, 100.0, memory_threshold_met=False, grace_ends_in_s=0.0)
    assert ended.wait_s(100.0) == pytest.approx(GRACE_END_MARGIN_S)


def test_a_grace_periods_end_is_kept_through_wake_ups_that_earn_no_cycle() -> None:
    cadence = Cadence(INTERVAL_S).after_cycle(100.0, 100.0, memory_threshold_met=False, held=True,
                                              grace_ends_in_s=2.0)
    for cause in ("memcg_rearm", "psi_far", "psi"):
        cadence = cadence.woken([cause])
    assert cadence.wait_s(101.0) == pytest.approx(1.0 + GRACE_END_MARGIN_S)


def test_a_crossing_its_confirmation_did_not_show_ends_the_follow_ups() -> None:
    woken = Cadence(10.0).woken(["memcg"])
    after = woken.after_cycle(0.0, 0.1, memory_threshold_met=False, crossing_unconfirmed=True)
    assert after.follow_ups == () and after.due_at == 10.0, "page cache or a dip: the tick, nothing sooner"


def test_a_psi_firings_cycle_with_a_stall_threshold_unmet_is_followed_by_one_more_a_window_later() -> None:
    woken = Cadence(10.0).woken(["psi"])
    after = woken.after_cycle(5.0, 5.1, memory_threshold_met=False, near_crossing=False, stall_follow_up=True)
    assert after.due_at == 5.0 + WINDOW_FOLLOW_UP_S and after.follow_ups == ()
    # That cycle, the timer's, brings no other: the next firing does.
    timer = after.woken([]).after_cycle(6.05, 6.1, memory_threshold_met=False, near_crossing=False)
    assert timer.due_at == 16.05
    without = woken.after_cycle(5.0, 5.1, memory_threshold_met=False, near_crossing=False)
    assert without.due_at == 15.0, "no stall threshold left unmet: the tick"
    short = Cadence(0.5).woken(["psi"]).after_cycle(5.0, 5.1, memory_threshold_met=False, near_crossing=False,
                                                   stall_follow_up=True)
    assert short.due_at == 5.5, "never later than the tick"


def test_a_cycle_far_from_every_memory_threshold_ends_the_follow_ups() -> None:
    woken = Cadence(10.0).woken(["memcg"])
    assert woken.after_cycle(0.0, 0.0, memory_threshold_met=False, near_crossing=False).follow_ups == ()
    near = woken.after_cycle(0.0, 0.0, memory_threshold_met=False, near_crossing=True)
    assert near.follow_ups and near.due_at == 0.001, "a crossing a few pages short: the follow-ups go on"


def changed(cadence: Cadence, at: float, *, unconfirmed: bool = False, unaccounted: bool = False) -> Cadence:
    """`cadence` after a cycle started and ended at `at` that no longer saw a memory threshold met with no eviction
    since (or, `unconfirmed`, whose crossing its confirming reading did not show; `unaccounted`, met at first only on
    usage the statistics did not count yet)."""
    return cadence.after_cycle(at, at, memory_threshold_met=False, memory_receded=not unconfirmed,
                               crossing_unconfirmed=unconfirmed, crossing_unaccounted=unaccounted)


@pytest.mark.parametrize(("change_times", "flapping"), [
    ((0.0, 0.05, 0.1, 0.15), True),  # a tenant crossing there and back at 20 Hz
    ((0.0, 2.0, 4.0), False),  # three short dips 2 s apart (the settled-figures test)
    ((0.0, 2.0, 4.0, 9.9), True),  # a fourth within the window
    ((0.0, 2.0, 4.0, 10.0), False),  # the first has left the window when the fourth comes
])
def test_memory_flaps_with_four_changes_within_ten_seconds(change_times: tuple[float, ...], flapping: bool) -> None:
    assert (FLAP_CHANGES, FLAP_WINDOW_S) == (4, 10.0)
    cadence = Cadence(INTERVAL_S)
    for at in change_times:
        cadence = changed(cadence, at, unconfirmed=at >= 2.0)
    assert cadence.flapping is flapping


def test_while_flapping_a_notification_brings_the_next_cycle_a_second_after_the_last_and_no_follow_ups() -> None:
    cadence = Cadence(INTERVAL_S)
    for at in (0.0, 0.05, 0.1, 0.15):
        cadence = changed(cadence.woken(["memcg"]), at)
    assert cadence.flapping
    assert cadence.follow_ups == (), "no follow-up burst while flapping"
    woken = cadence.woken(["memcg"])
    assert woken.wait_s(0.2) == pytest.approx(0.15 + flap_cycle_s(0) - 0.2), "not at once: after the last"
    assert woken.follow_ups == ()
    assert not woken.listening, "more notifications are not even judged until it"
    # The timer and a stop still make the cycle due at once; a cycle with no change keeps the count.
    assert cadence.woken([]).wait_s(0.2) is None and cadence.woken(["signal"]).wait_s(0.2) is None
    quiet = woken.after_cycle(1.15, 1.15, memory_threshold_met=False)
    assert quiet.flapping and quiet.woken(["memcg"]).wait_s(1.2) == pytest.approx(1.15 + flap_cycle_s(1) - 1.2)


def test_memory_flapping_only_with_the_statistics_lag_still_hears_the_memory_watch_on_accounted_figures() -> None:
    # Two real changes (a tenant freeing what it crossed with) and two crossings met only on usage memory.stat did
    # not count yet (a churner's page cache): flapping, but only with the lag.
    cadence = Cadence(INTERVAL_S)
    for at, lag in ((0.0, False), (0.3, True), (0.6, True), (4.0, False)):
        cadence = changed(cadence.woken(["memcg"]), at, unconfirmed=lag, unaccounted=lag)
    assert cadence.flapping and cadence.state.lagging
    assert cadence.listening and cadence.plan.arm is not None and cadence.plan.arm.accounted
    assert cadence.woken(["memory_watch"]).wait_s(4.1) is None, "its crossing is real: decided at once"
    throttled = cadence.woken(["memcg"])
    assert throttled.wait_s(4.1) == pytest.approx(4.0 + flap_cycle_s(cadence.state.flap_cycles) - 4.1), \
        "the levels' firings wait as flapping"
    # Two more real changes: memory flaps without the lag, and the watch waits too.
    real = changed(changed(cadence.woken(["memcg"]), 5.0).woken(["memcg"]), 5.0)
    assert real.flapping and not real.state.lagging and not (real.plan.arm and real.plan.arm.accounted)
    assert real.woken(["memory_watch"]).wait_s(5.1) == pytest.approx(5.0 + flap_cycle_s(real.state.flap_cycles) - 5.1)


def test_without_a_lag_change_flapping_is_never_lagging() -> None:
    cadence = Cadence(INTERVAL_S)
    for at in (0.0, 0.05, 0.1, 0.15):
        cadence = changed(cadence.woken(["memcg"]), at, unconfirmed=True)  # accounted: shown, then gone
    assert cadence.flapping and not cadence.state.lagging
    woken = cadence.woken(["memory_watch"])
    assert woken.wait_s(0.2) is not None and not woken.listening, "every notification waits for the flap cycle"


def test_while_flapping_the_cycles_are_a_second_apart_on_average_never_in_step_with_a_periodic_tenant() -> None:
    gaps = [flap_cycle_s(count) for count in range(200)]
    assert FLAP_CYCLE_S == 1.0 and FLAP_CYCLE_MAX_S == 1.5
    assert all(0.5 * FLAP_CYCLE_S <= gap < FLAP_CYCLE_MAX_S for gap in gaps)
    assert statistics.mean(gaps) == pytest.approx(FLAP_CYCLE_S, abs=0.01)
    # A tenant above the level for the first half of each 50 ms: read at the cycles' starts, it is seen above in
    # about half of them and goes back (above, then below) in about 1 in 4 (at exactly 1 s apart the readings drift
    # 2 ms a cycle through its phase: above 11 times in a row, then below as long, on the flapping benchmark).
    above = [(start % 0.05) < 0.025 for start in itertools.accumulate(gaps)]
    assert 0.4 < sum(above) / len(above) < 0.6
    went_back = sum(1 for before, now in itertools.pairwise(above) if before and not now)
    assert went_back > 40, went_back
    in_step = [(start % 0.05) < 0.025 for start in itertools.accumulate([FLAP_CYCLE_S + 0.002] * 200)]
    assert sum(1 for before, now in itertools.pairwise(in_step) if before and not now) < 10, "the old fixed 1 s"


def test_flapping_ends_once_a_whole_window_holds_no_change() -> None:
    cadence = Cadence(INTERVAL_S)
    for at in (0.0, 0.05, 0.1, 0.15):
        cadence = changed(cadence, at)
    assert cadence.after_cycle(10.1, 10.1, memory_threshold_met=False).flapping, "the change at 0.15 s is in the window"
    later = cadence.after_cycle(10.2, 10.2, memory_threshold_met=False)
    assert not later.flapping
    woken = later.woken(["memcg"])
    assert woken.wait_s(10.2) is None and woken.follow_ups == NOTIFICATION_FOLLOW_UPS_S, "chased again"


def test_once_flapping_fewer_changes_than_four_a_window_keep_it_flapping() -> None:
    """Read once a second, a tenant flapping at 20 Hz shows a change in only some cycles (the reading's phase): the
    memory flaps as before, and is not chased again until it has counted four more."""
    cadence = Cadence(INTERVAL_S)
    for at in (0.0, 0.05, 0.1, 0.15):
        cadence = changed(cadence, at)
    for at in (4.0, 8.0, 12.0, 16.0, 20.0):  # one change every 4 s: at most 3 in a window
        cadence = changed(cadence.after_cycle(at - 1.0, at - 1.0, memory_threshold_met=True), at)
        assert cadence.flapping, at
    assert cadence.woken(["memcg"]).follow_ups == (), "no chase"
    never = Cadence(INTERVAL_S)
    for at in (4.0, 8.0, 12.0, 16.0, 20.0):
        never = changed(never, at)
    assert not never.flapping, "three changes a window do not start it"


def test_while_flapping_the_loop_stops_listening_to_notifications_once_the_next_cycle_is_due_within_a_second() -> None:
    cadence = Cadence(INTERVAL_S)
    assert cadence.listening, "no cycle yet"
    for at in (0.0, 0.05, 0.1, 0.15):
        cadence = changed(cadence, at)
    assert cadence.flapping and cadence.listening, "the next cycle is the tick: a notification can bring it sooner"
    woken = cadence.woken(["memcg"])
    assert not woken.listening, "due a second after the last: nothing a notification says can bring it sooner"
    assert woken.woken([]).listening, "the cycle is due now"
    calm = Cadence(INTERVAL_S).after_cycle(0.0, 0.0, memory_threshold_met=False)
    assert calm.woken(["memcg"]).listening, "not flapping: always listening"


@pytest.mark.parametrize(("before", "acted", "woken", "seen", "wait_s", "flapping_changes"), [
    # Follow-ups end but the confirming one with a memory threshold newly met...
    (frozenset(), False, {"memcg"}, CycleSeen(0.0, frozenset({MET})), 1.0, 0),
    # ...not with one met before: that is not this crossing.
    (frozenset({MET}), False, {"memcg"}, CycleSeen(0.0, frozenset({MET})), 0.001, 0),
    # A threshold met before and gone with no eviction since is memory gone back by itself (a change)...
    (frozenset({GONE}), False, set(), CycleSeen(0.0, frozenset()), 0.001, 1),
    # ...not when evictd acted on it.
    (frozenset({GONE}), True, set(), CycleSeen(0.0, frozenset()), 0.001, 0),
    # A PSI firing's cycle with a stall threshold unmet: one more a window later; not after another wake-up.
    (frozenset(), False, {"psi"}, CycleSeen(0.0, near_crossing=False, stall_unmet=True), WINDOW_FOLLOW_UP_S, 0),
    (frozenset(), False, {"timer"}, CycleSeen(0.0, near_crossing=False, stall_unmet=True), 10.0, 0),
    # A stall met with no pod grown yet (`NO_STALL_CANDIDATE`): the next cycle a second on, growth measured from this.
    (frozenset(), False, {"psi"}, CycleSeen(0.0, near_crossing=False, awaiting_growth=True), 1.0, 0),
    (frozenset(), False, {"timer"}, CycleSeen(0.0, near_crossing=False, held=True, awaiting_growth=True), 1.0, 0),
    # A failed cycle keeps what the last one saw and the follow-ups under way.
    (frozenset({MET}), False, {"memcg"}, CycleSeen(0.0, cycle_failed=True), 0.001, 0),
])
def test_what_a_cycle_means_to_the_schedule_against_the_cycle_before(
        before: frozenset[Threshold], acted: bool, woken: set[str], seen: CycleSeen, wait_s: float,
        flapping_changes: int) -> None:
    state = replace(WakeState(INTERVAL_S, follow_ups=NOTIFICATION_FOLLOW_UPS_S), memory_met=before, acted=acted,
                    woken=frozenset(woken))
    after, plan = after_cycle(state, seen, 0.0)
    assert plan.wait_s(0.0) == pytest.approx(wait_s)
    assert len(after.changes) == flapping_changes
    assert after.memory_met == (before if seen.cycle_failed else seen.memory_met)
    assert after.woken == frozenset(), "what woke the loop is the next wait's to say"

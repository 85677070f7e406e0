"""`Daemon.run` stepped on a fake clock and a scripted waiter: the loop's schedule, hooks, failures and stop.

The manager is the real one over scripted stats (no I/O). The waiter records the timeout of every wait,
advances the fake clock by it (or by less, when the script says something woke it) and answers with the
wake-up causes the test scripts, so the loop runs without real sleeps or threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, summary
from clocks import ManualClock
from evictd.adapters.notifiers import NotifierFailure
from evictd.commands.simulate import FixedLayout
from evictd.config import eviction_settings
from evictd.core.engine import EngineConfig, Eviction
from evictd.core.errors import SampleError
from evictd.core.fs_layout import FsLayout
from evictd.core.memcg import Watch
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.core.psi_window import WINDOW_FOLLOW_UP_S
from evictd.core.summary import Summary
from evictd.core.summary_parser import summary_from_dict
from evictd.core.wake import NOTIFICATION_FOLLOW_UPS_S, Arming, flap_cycle_s
from evictd.cycle.finished import Cycle
from evictd.cycle.manager import EvictionManager
from evictd.cycle.report import CycleReport
from evictd.observe.http_endpoint import Health
from evictd.observe.metrics import Metrics
from evictd.run.daemon import Daemon, Hooks, LoopSettings, Reporting, Wakeups
from evictd.run.stop_signal import StopSignal
from log_capture import LogCapture

INTERVAL_S = 10.0
CYCLE_S = 0.25  # what one cycle costs on the fake clock
HOG = pod("hog")


class ScriptedWaiter:
    """Records each wait's timeout and lets that much fake time pass; answers with the next scripted causes
    (nothing: the timer). A cause given as a callable is called first (e.g. a stop request during the wait)."""

    def __init__(self, clock: ManualClock, causes: Sequence[list[str] | Callable[[], list[str]]] = ()) -> None:
        self.clock = clock
        self.timeouts: list[float] = []
        self._causes: Iterator[list[str] | Callable[[], list[str]]] = iter(causes)
        self.wakes = 0
        self.closed = False
        self.listened: list[bool] = []  # each wait: whether it polled the notifiers
        self.armings: list[tuple[float, float]] = []  # each arming: its cycle's start, and when it was armed
        self.failures: list[list[NotifierFailure]] = []  # what each arming answers, in turn (then: none failed)
        self.armed = frozenset[str]()

    def arm(self, arming: Arming) -> list[NotifierFailure]:
        self.armings.append((arming.at, self.clock.now_s))
        return self.failures.pop(0) if self.failures else []

    def wait(self, timeout_s: float, *, notifiers: bool = True) -> list[str]:
        self.timeouts.append(round(timeout_s, 3))
        self.listened.append(notifiers)
        if not notifiers:  # as the real Waiter: only a wake (a stop) ends it early; the scripted causes wait
            self.clock.advance(timeout_s)
            return []
        answer = next(self._causes, [])
        if callable(answer):
            return answer()
        if not answer:
            self.clock.advance(timeout_s)
        return answer

    def wake(self) -> None:
        self.wakes += 1

    def close(self) -> None:
        self.closed = True


class MemoryStats:
    """Node memory: above the 1Gi threshold until `crossed_at_cycle`, below it from then on; each read costs
    `CYCLE_S` of fake time. A cycle listed in `failing` raises instead (a bug in an adapter)."""

    def __init__(self, clock: ManualClock, crossed_at_cycle: int = 1000, failing: Sequence[int] = (),
                 near: bool = False) -> None:
        self.clock = clock
        self._clear = Gi + 4 * Mi if near else 2 * Gi  # near: within a step of the threshold before the crossing
        self.cycle = 0
        self._crossed_at = crossed_at_cycle
        self._failing = set(failing)

    def memory_reading(self) -> None:  # no reading of the memory alone: confirmed on whole Summaries
        return None

    def summary(self, pods: Sequence[Pod], *, reread: bool = False, runtime_wait_s: float | None = None) -> Summary:
        self.cycle += 1
        self.clock.advance(CYCLE_S)
        if self.cycle in self._failing:
            raise RuntimeError("adapter bug")
        available = 512 * Mi if self.met() else self._clear
        return summary_from_dict(summary(memory=available, pods=[pod_stats(HOG, memory=Gi)]))

    def met(self) -> bool:
        return self.cycle >= self._crossed_at


class FlappingMemoryStats(MemoryStats):
    """Node memory below the threshold in odd cycles, above it in even ones (near it: within a step)."""

    def met(self) -> bool:
        return self.cycle % 2 == 1


class OnePod:
    def active_pods(self) -> list[Pod]:
        return [pod_from_dict(HOG)]


class NoReclaim:
    def reclaim(self, action: object) -> int:
        return 0


class RecordingEvictor:
    def __init__(self) -> None:
        self.evicted: list[Eviction] = []

    def evict(self, eviction: Eviction) -> None:
        self.evicted.append(eviction)


class Systemd:
    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed = False

    def notify(self, state: str) -> None:
        self.sent.append(state)

    def close(self) -> None:
        self.closed = True


class Part:
    def __init__(self, name: str, journal: list[str], fail: bool = False) -> None:
        self.name, self.journal, self.fail = name, journal, fail

    def start(self) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} cannot start")
        self.journal.append(f"start {self.name}")

    def stop(self) -> None:
        self.journal.append(f"stop {self.name}")


class Loop:
    """A daemon over the real manager, with everything it talks to recorded."""

    def __init__(self, *, causes: Sequence[list[str] | Callable[[], list[str]]] = (), crossed_at_cycle: int = 1000,
                 failing: Sequence[int] = (), near: bool = False, dry_run: bool = True, max_cycles: int = 0, parts: Sequence[Any] = (),
                 flapping: bool = False, stall_hard: dict[str, str] | None = None, **hooks: Any) -> None:
        self.clock = ManualClock()
        self.stats = (FlappingMemoryStats if flapping else MemoryStats)(self.clock, crossed_at_cycle, failing, near)
        self.evictor = RecordingEvictor()
        settings = eviction_settings({"evictionHard": {"memory.available": "1Gi"}})
        self.manager = EvictionManager(
            EngineConfig.from_settings(replace(settings, stall_hard=stall_hard or {})),
            stats=self.stats, layout=FixedLayout(FsLayout()), pods=OnePod(),
            reclaimer=NoReclaim(), evictor=self.evictor, clock=self.clock)
        self.waiter = ScriptedWaiter(self.clock, causes)
        self.log = LogCapture()
        self.metrics = Metrics()
        self.stop = StopSignal(self.waiter.wake, 15.0, self.log)
        self.health = Health(INTERVAL_S, stopping=self.stop.is_set)
        self.systemd = Systemd()
        self.daemon = Daemon(self.manager, LoopSettings(INTERVAL_S, "n", dry_run, max_cycles),
                             Wakeups(self.waiter, self.stop, self.clock),
                             Reporting(self.metrics, self.health, self.log, self.systemd),  # type: ignore[arg-type]
                             Hooks(**hooks), parts)

    def run(self) -> int:
        return self.daemon.run()

    def counted(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


# --- the schedule --------------------------------------------------------------------------------------------


def test_the_loop_sleeps_what_is_left_of_the_interval_and_counts_timer_wake_ups() -> None:
    loop = Loop(max_cycles=3)
    assert loop.run() == 0
    assert loop.waiter.timeouts == [INTERVAL_S - CYCLE_S] * 2  # the third cycle is the last: no wait after it
    assert loop.stats.cycle == 3
    assert loop.counted("evictd_wakeups_total", cause="timer") == 2
    assert loop.systemd.sent == ["READY=1", "WATCHDOG=1", "WATCHDOG=1", "WATCHDOG=1", "STOPPING=1"]
    assert loop.systemd.closed and loop.waiter.closed
    assert loop.log.events() == ["evictd started", "evictd stopped"]
    assert loop.log.named("evictd stopped") == [{"cycles": 3}]


def test_cycles_follow_a_notification_closely_until_one_sees_the_crossing() -> None:
    # Cycle 1: quiet, the timer. Wait 2 is cut short by a memcg notification; cycles 3 and 4 still see the
    # signal above the threshold (pages being charged); cycle 5 sees it met; one settled-state check follows.
    loop = Loop(causes=[[], ["memcg"]], crossed_at_cycle=5, max_cycles=7, near=True)
    loop.run()
    first, notified, *after = loop.waiter.timeouts
    assert first == notified == INTERVAL_S - CYCLE_S
    assert after[:2] == list(NOTIFICATION_FOLLOW_UPS_S[:2])  # 1 ms, 1 ms: not yet crossed
    assert after[2] == NOTIFICATION_FOLLOW_UPS_S[-1]  # crossed in cycle 5: only the 1 s confirmation is left
    assert after[3] == INTERVAL_S - CYCLE_S  # then the housekeeping cadence
    assert loop.counted("evictd_wakeups_total", cause="memcg") == 1


@pytest.mark.parametrize("dry_run", [True, False])
def test_memory_met_then_gone_by_itself_four_times_is_flapping_but_not_when_evictions_relieved_it(
        dry_run: bool) -> None:
    # Every cycle is woken by a memcg notification; the threshold is met in odd cycles only. In a dry run nothing
    # relieved it: after the fourth time it went by itself (cycle 8) a notification no longer brings a cycle at once
    # but 0.5-1.5 s after the last one (`flap_cycle_s`), and the loop stops listening meanwhile. Evicting for real, each
    # time it went is the eviction's relief: chased every time.
    loop = Loop(causes=[["memcg"]] * 12, max_cycles=12, near=True, dry_run=dry_run, flapping=True)
    loop.run()
    flap_waits = [round(flap_cycle_s(count) - CYCLE_S, 3) for count in range(4)]
    if dry_run:
        assert loop.waiter.listened[:8] == [True] * 8, "the tick is next after cycle 8: listening"
        assert (loop.waiter.listened[8], loop.waiter.timeouts[8]) == (False, flap_waits[0]), \
            "the notification came: due after the last cycle, not listening meanwhile"
        assert loop.waiter.listened[9:] == [True, False] * 3
        assert [round(t, 3) for t in loop.waiter.timeouts[10::2]] == flap_waits[1:], "each wait the next of the spread"
    else:
        assert all(loop.waiter.listened)
        assert not set(flap_waits) & {round(t, 3) for t in loop.waiter.timeouts}, "every notification chased"
    assert len(loop.evictor.evicted) == 6


def test_a_notification_that_finds_nothing_runs_the_whole_schedule_then_the_cadence() -> None:
    loop = Loop(causes=[["psi"]], max_cycles=len(NOTIFICATION_FOLLOW_UPS_S) + 3, near=True)
    loop.run()
    assert loop.waiter.timeouts[1:1 + len(NOTIFICATION_FOLLOW_UPS_S)] == list(NOTIFICATION_FOLLOW_UPS_S)
    assert loop.waiter.timeouts[-1] == INTERVAL_S - CYCLE_S


def test_a_notification_whose_cycle_is_far_from_every_memory_threshold_earns_that_cycle_only() -> None:
    # 1 GiB clear of the threshold: the re-armed memcg level announces a crossing; no follow-ups (issue #37 item 3).
    loop = Loop(causes=[["psi"]], max_cycles=3)
    loop.run()
    assert loop.waiter.timeouts == [INTERVAL_S - CYCLE_S] * 2, "the tick, the notified cycle, then the tick"


def test_a_psi_firing_with_a_stall_threshold_unmet_earns_one_more_cycle_once_a_window_can_show_the_stall() -> None:
    # No PSI in these stats: the stall threshold stays unmet (unobserved), as at a stall's onset.
    loop = Loop(causes=[["psi"]], max_cycles=4, stall_hard={"evictd.io/memory.stall.full": "20%"})
    loop.run()
    assert loop.waiter.timeouts == [INTERVAL_S - CYCLE_S, WINDOW_FOLLOW_UP_S - CYCLE_S, INTERVAL_S - CYCLE_S], (
        "the tick, the firing's cycle, one more a window after it, then the tick")


# --- hooks and failures --------------------------------------------------------------------------------------


def test_after_cycle_hooks_run_in_order_with_the_cycle_and_a_failing_one_costs_only_itself() -> None:
    seen: list[tuple[str, int, float]] = []

    def first(cycle: Cycle) -> None:
        seen.append(("first", cycle.number, cycle.duration_s))

    def broken(cycle: Cycle) -> None:
        raise ValueError("hook bug")

    def last(cycle: Cycle) -> None:
        assert isinstance(cycle.report, CycleReport) and cycle.state is not None
        seen.append(("last", cycle.number, cycle.started_at))

    loop = Loop(max_cycles=2, after_cycle=[first, broken, last])
    loop.run()
    assert seen == [("first", 1, CYCLE_S), ("last", 1, 1000.0),
                    ("first", 2, CYCLE_S), ("last", 2, 1000.0 + INTERVAL_S)]
    failures = loop.log.named("after-cycle step failed")
    assert [f["cycle"] for f in failures] == [1, 2]
    assert all(f["step"].endswith("<locals>.broken") for f in failures)
    assert loop.counted("evictd_errors_total", source="cycle") == 2
    assert loop.health.last_cycle_at is not None  # the loop is alive whatever its hooks do


def test_a_failed_cycle_is_logged_and_counted_its_hooks_skipped_and_the_loop_goes_on() -> None:
    cycles: list[int] = []
    loop = Loop(max_cycles=3, failing=[2], after_cycle=[lambda cycle: cycles.append(cycle.number)])
    assert loop.run() == 0
    assert cycles == [1, 3]
    assert loop.log.named("housekeeping cycle failed") == [{"cycle": 2}]
    assert loop.counted("evictd_errors_total", source="cycle") == 1
    # The failed cycle still slept the rest of its interval.
    assert loop.waiter.timeouts == [INTERVAL_S - CYCLE_S] * 2


def test_the_sensors_are_armed_after_every_cycle_as_its_plan_says_before_the_hooks() -> None:
    # What each sensor makes of an arming is tests/test_after_cycle.py's and the adapters'; the loop carries out
    # every cycle's plan, armed from its start time, before the hooks (some may wait on the API server).
    failure = NotifierFailure(eviction_settings({}).thresholds()[0], Watch.LEVEL,
                              SampleError("memory.usage_in_bytes", "no such file"))
    seen_by_hooks: list[int] = []
    # 4 s between cycles: cycles start at 1000, 1004, 1008, 1012, 1016.
    loop = Loop(max_cycles=5, causes=[lambda: (loop.clock.advance(4.0 - CYCLE_S), ["psi"])[1]] * 4,
                after_cycle=[lambda cycle: seen_by_hooks.append(len(loop.waiter.armings))])
    loop.waiter.failures = [[failure], [failure]]
    loop.run()
    assert loop.waiter.armings == [(start, start + CYCLE_S) for start in (1000.0, 1004.0, 1008.0, 1012.0, 1016.0)]
    assert seen_by_hooks == [1, 2, 3, 4, 5]
    assert loop.log.named("memory notifier unavailable") == [
        {"cycle": 1, "detail": "hard memory eviction threshold: memory.usage_in_bytes: no such file"}]
    assert loop.counted("evictd_errors_total", source="notifier") == 2


def test_a_failed_arming_is_logged_and_counted_and_the_loop_goes_on() -> None:
    def broken(arming: Arming) -> list[NotifierFailure]:
        raise RuntimeError("bug")

    loop = Loop(max_cycles=2)
    loop.waiter.arm = broken  # type: ignore[method-assign]
    assert loop.run() == 0
    assert loop.stats.cycle == 2
    assert loop.log.named("after-cycle step failed") == [{"cycle": 1, "step": "arm sensors"},
                                                         {"cycle": 2, "step": "arm sensors"}]
    assert loop.counted("evictd_errors_total", source="cycle") == 2


# --- evictions -----------------------------------------------------------------------------------------------


def test_after_an_eviction_the_loop_waits_for_the_pod_to_go_then_runs_again_at_once() -> None:
    waited: list[list[str]] = []

    def wait_for_cleanup(evictions: Sequence[Eviction], pause: Callable[[float], bool]) -> bool:
        waited.append([e.pod.name for e in evictions])
        return True

    loop = Loop(crossed_at_cycle=1, max_cycles=2, dry_run=False, wait_for_cleanup=wait_for_cleanup)
    loop.run()
    assert loop.evictor.evicted[0].pod.name == "hog"
    assert waited == [["hog"]]  # after cycle 1; cycle 2 is the last
    assert loop.waiter.timeouts == [], "no sleep between the wait and the next cycle"
    assert loop.log.named("evicted pods cleaned up") == [{"pods": ["default/hog"]}]
    assert loop.counted("evictd_wakeups_total", cause="eviction") == 1


def test_the_wait_after_an_eviction_is_logged_at_its_start_and_a_hard_eviction_is_never_cut_short() -> None:
    """Issue #43: the wait says it started (it may last 30 s, during which no cycle runs); after a hard eviction its
    pause only sleeps on the waiter (cut short, the next pod would go before this one could)."""
    paused: list[bool] = []

    def wait_for_cleanup(evictions: Sequence[Eviction], pause: Callable[[float], bool]) -> bool:
        paused.append(pause(0.2))
        return True

    loop = Loop(crossed_at_cycle=1, max_cycles=2, dry_run=False, wait_for_cleanup=wait_for_cleanup)
    loop.run()
    assert loop.evictor.evicted[0].effective_grace_period_s == 1
    assert loop.log.named("waiting for evicted pods to go") == [{"pods": ["default/hog"]}]
    assert paused == [False] and loop.waiter.timeouts == [0.2]


@pytest.mark.parametrize("dry_run", [True, False])
def test_without_a_cleanup_wait_or_in_dry_run_an_eviction_does_not_hold_the_loop(dry_run: bool) -> None:
    waited: list[object] = []
    loop = Loop(crossed_at_cycle=1, max_cycles=2, dry_run=dry_run,
                wait_for_cleanup=(lambda evictions, pause: waited.append(evictions) or True) if dry_run else None)
    loop.run()
    assert waited == [] and loop.waiter.timeouts == [INTERVAL_S - CYCLE_S]


# --- start and stop ------------------------------------------------------------------------------------------


def test_a_stop_request_during_the_sleep_ends_the_loop_then_runs_the_stop_hooks_and_stops_the_parts() -> None:
    journal: list[str] = []

    def sigterm() -> list[str]:
        loop.stop.request("SIGTERM")
        assert loop.health.status() == (False, "shutting down")
        return ["signal"]

    loop = Loop(causes=[[], sigterm], parts=[Part("watch", journal), Part("walker", journal)],
                on_stop=[lambda: journal.append("withdraw"), lambda: 1 / 0, lambda: journal.append("after")])
    assert loop.run() == 0
    assert loop.stats.cycle == 2, "the cycle running when the stop came finished; no other started"
    assert journal == ["start watch", "start walker", "withdraw", "after", "stop walker", "stop watch"]
    assert loop.waiter.wakes == 1 and loop.waiter.closed
    assert loop.log.named("shutting down") == [{"reason": "SIGTERM", "deadline_s": 15.0}]
    assert len(loop.log.named("clean-up at stop failed")) == 1
    assert loop.counted("evictd_wakeups_total", cause="signal") == 1


def test_a_stop_requested_before_the_loop_runs_no_cycle() -> None:
    loop = Loop()
    loop.stop.request("stop requested")
    assert loop.run() == 0
    assert loop.stats.cycle == 0 and loop.systemd.sent == ["STOPPING=1"]


def test_building_starts_nothing_and_a_part_that_cannot_start_stops_those_started_before_it() -> None:
    journal: list[str] = []
    loop = Loop(parts=[Part("lock", journal), Part("watch", journal), Part("http", journal, fail=True),
                       Part("walker", journal)])
    assert journal == []
    with pytest.raises(RuntimeError, match="http cannot start"):
        loop.daemon.start()
    assert journal == ["start lock", "start watch", "stop watch", "stop lock"]

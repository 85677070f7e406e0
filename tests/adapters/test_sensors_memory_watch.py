"""The memory watch's thread against a cgroup v2 tree of plain files: it looks only while a crossing is near,
wakes a real Waiter once when one is met, then idles until the next cycle arms it again.

(On a real v2 kernel, with the loop: tests/uml/test_evictd_v2.py.)
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_cgroups import ROLE_TO_READING, TREES, copy_tree, write_v1_figures

from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.notifiers import Waiter
from evictd.adapters.sensors import memory_watch
from evictd.core.signals import Reading
from evictd.core.wake import MIN_PERIOD_S, STEADY_MAX_PERIOD_S, Target, Wake, steady_max_period_s

MI = 1 << 20


def pods_cgroup(root: Path, current: int, inactive_file: int = 0) -> None:
    (root / "kubepods").mkdir(exist_ok=True)
    write(root / "kubepods" / "memory.current", f"{current}\n")
    write(root / "kubepods" / "memory.stat", f"anon {current}\nfile 0\ninactive_file {inactive_file}\n")
    write(root / "kubepods" / "memory.max", f"{512 * MI}\n")


def write(path: Path, text: str) -> None:
    """Replace `path` at once: a look reading a file half written would find it unreadable and idle until the next
    arming (as for a cgroup that cannot be read), which real cgroupfs files never are."""
    path.with_suffix(".new").write_text(text)
    path.with_suffix(".new").replace(path)


def target(met_below: int) -> Target:
    return Target(Reading.PODS_MEMORY, 512 * MI, met_below,
                       "hard allocatableMemory.available threshold")


def test_a_crossing_between_ticks_wakes_the_waiter_once(tmp_path: Path) -> None:
    pods_cgroup(tmp_path, current=400 * MI)  # 112 MiB available, threshold at 100 MiB: a look every 20 ms
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic)
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([target(100 * MI)], time.monotonic())
        assert waiter.wait(0.3) == []
        looks = watch.looks
        assert looks >= 2, "near the threshold the watch keeps looking"
        pods_cgroup(tmp_path, current=420 * MI, inactive_file=4 * MI)  # working set 416 MiB: 96 MiB available
        started = time.monotonic()
        assert waiter.wait(5.0) == [Wake.MEMORY_WATCH]
        assert time.monotonic() - started < 2.0
        assert watch.description == "hard allocatableMemory.available threshold"
        # Met: nothing more until the next cycle arms it (which watches only thresholds not met).
        looks = watch.looks
        assert waiter.wait(0.3) == []
        assert watch.looks == looks
    finally:
        waiter.close()


def test_far_from_every_threshold_the_watch_reads_nothing(tmp_path: Path) -> None:
    pods_cgroup(tmp_path, current=100 * MI)  # 412 MiB available, 100 MiB threshold, tick in 0.2 s
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=0.2, monotonic=time.monotonic)
    try:
        watch.look_for([target(100 * MI)], time.monotonic())
        time.sleep(0.3)
        assert watch.looks == 1, "one look, then idle: 312 MiB cannot fill before the tick at 1 GiB/s"
        pods_cgroup(tmp_path, current=500 * MI)
        time.sleep(0.3)
        assert watch.fired == 0 and watch.looks == 1
        watch.look_for([], time.monotonic())
        time.sleep(0.1)
        assert watch.looks == 1
    finally:
        watch.close()
        watch.close()  # idempotent


def test_an_unreadable_cgroup_is_skipped_and_the_watch_goes_on(tmp_path: Path) -> None:
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic)
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([target(100 * MI)], time.monotonic())  # no kubepods folder yet
        assert waiter.wait(0.2) == []
        assert watch.looks == 1, "one look read nothing: idle until the next arming"
        pods_cgroup(tmp_path, current=500 * MI)
        watch.look_for([target(100 * MI)], time.monotonic())
        assert waiter.wait(5.0) == [Wake.MEMORY_WATCH]
    finally:
        waiter.close()


def test_a_steady_margin_is_looked_at_four_times_a_second_and_a_shrinking_one_fast_again(tmp_path: Path) -> None:
    """Issue 37 item 3: 12 MiB from the threshold the fast pace is a look every 20 ms (50 a second) for as long as the
    node stays there; once the looks see the margin steady, one every STEADY_MAX_PERIOD_S (250 ms)."""
    pods_cgroup(tmp_path, current=400 * MI)  # 112 MiB available, threshold at 100 MiB
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic)
    try:
        watch.look_for([target(100 * MI)], time.monotonic())
        time.sleep(0.5)  # the first looks, at the fast pace, find it steady for 250 ms
        looks = watch.looks
        time.sleep(1.0)
        steady_looks = watch.looks - looks
        assert 2 <= steady_looks <= 6, f"{steady_looks} looks in a second of a steady margin (fast pace: 50)"
        # The margin shrinks by 4 MiB (still 8 MiB from met): the next look sees it, and the ones after are fast.
        looks = watch.looks
        pods_cgroup(tmp_path, current=404 * MI)
        deadline = time.monotonic() + 2.0
        while watch.looks == looks and time.monotonic() < deadline:
            time.sleep(0.005)
        looks = watch.looks
        time.sleep(0.2)
        assert watch.looks - looks >= 4, "back at a look every 20 ms (10 in 0.2 s on an idle machine)"
    finally:
        watch.close()


def test_a_steady_margin_stays_steady_when_the_next_cycle_hands_the_same_target(tmp_path: Path) -> None:
    """Every cycle arms the watch again; a margin steady before it is steady after it (no fast window per cycle)."""
    pods_cgroup(tmp_path, current=400 * MI)  # 112 MiB available, threshold at 100 MiB
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic)
    try:
        watch.look_for([target(100 * MI)], time.monotonic())
        time.sleep(0.6)  # steady after 250 ms of looks
        looks = watch.looks
        watch.look_for([target(100 * MI)], time.monotonic())
        time.sleep(0.2)
        assert watch.looks - looks <= 2, "the look at the arming, then the steady pace (fast: 10 in 0.2 s)"
        looks = watch.looks
        watch.look_for([target(101 * MI)], time.monotonic())  # another level: no history, fast again
        time.sleep(0.2)
        assert watch.looks - looks >= 4
    finally:
        watch.close()


def test_after_the_watch_idled_a_margin_is_not_steady_until_looked_at_again(tmp_path: Path) -> None:
    """What the looks saw before the watch idled (a threshold met, the loop deciding) says nothing of the time since."""
    pods_cgroup(tmp_path, current=400 * MI)
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic)
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([target(100 * MI)], time.monotonic())
        time.sleep(0.6)  # steady
        pods_cgroup(tmp_path, current=420 * MI)  # met: the watch wakes the loop and idles
        assert waiter.wait(5.0) == [Wake.MEMORY_WATCH]
        pods_cgroup(tmp_path, current=400 * MI)  # the loop evicted: the same margin as before
        looks = watch.looks
        watch.look_for([target(100 * MI)], time.monotonic())
        time.sleep(0.2)
        assert watch.looks - looks >= 4, "a fresh history: the fast pace for a window"
    finally:
        waiter.close()


def test_armed_again_between_its_wake_up_and_its_idling_the_watch_starts_with_no_history(tmp_path: Path) -> None:
    """The loop may arm the watch before the thread that woke it has idled; the new arming still gets the fast pace."""
    pods_cgroup(tmp_path, current=400 * MI)
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic)
    signal_loop = watch._signal_loop

    def loop_arms_at_once() -> None:  # the loop's arming lands between the look's wake-up and the thread idling
        signal_loop()
        pods_cgroup(tmp_path, current=400 * MI)
        watch.look_for([target(100 * MI)], time.monotonic())

    try:
        watch.look_for([target(100 * MI)], time.monotonic())
        time.sleep(0.6)  # steady
        watch._signal_loop = loop_arms_at_once  # type: ignore[method-assign]
        pods_cgroup(tmp_path, current=420 * MI)  # met
        deadline = time.monotonic() + 5.0
        while watch.fired == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watch.fired == 1
        looks = watch.looks
        time.sleep(0.2)
        assert watch.looks - looks >= 4, "a fresh history: the fast pace for a window"
    finally:
        watch.close()


def test_a_hard_threshold_held_met_is_looked_at_twice_a_second_and_once_released_the_next_crossing_wakes(
        tmp_path: Path) -> None:
    # A cycle found the threshold met (dry-run, nothing evicted); the memory is then given back with no cycle after
    # it. Before, the watch idled until the tick and the next crossing waited for it.
    pods_cgroup(tmp_path, current=420 * MI)  # 92 MiB available: met
    watch = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=60.0, monotonic=time.monotonic)
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        held = target(100 * MI)
        watch.look_for([held], time.monotonic(), held=[held])
        assert waiter.wait(1.2) == [], "held met: no wake-up, the loop already knows"
        assert 2 <= watch.looks <= 4, f"{watch.looks} looks in 1.2 s: one every HELD_PERIOD_S"
        pods_cgroup(tmp_path, current=300 * MI)  # given back: 212 MiB available, released at the next look
        time.sleep(0.7)
        assert waiter.wait(0.0) == [], "a release wakes no one"
        pods_cgroup(tmp_path, current=430 * MI)  # crossed again: 82 MiB available
        started = time.monotonic()
        assert waiter.wait(5.0) == [Wake.MEMORY_WATCH]
        assert time.monotonic() - started < 1.0
    finally:
        waiter.close()


def test_on_v2_the_steady_pace_follows_the_threads_cpu_per_look(tmp_path: Path) -> None:
    """With `look_budget` (cgroup v2) a look's cost is the thread's CPU over a window of looks (a clock handed in
    here: 0.65 ms a look, the 6.1 guest's on a quiet host; windows of 4 looks, not 32, to be quick), smoothed; a
    steady margin is then looked at every `steady_max_period_s` of it (~52 ms), not every 250 ms. Without it (v1)
    the fixed cap holds, whatever a look costs."""
    pods_cgroup(tmp_path, current=400 * MI)  # 112 MiB available, threshold at 100 MiB
    spent = [0.0]

    def thread_cpu() -> float:
        spent[0] += 0.00065
        return spent[0]

    budgeted = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic, look_budget=True,
                           thread_cpu=thread_cpu, look_cost_window=4)
    fixed = memory_watch(CgroupReader(CgroupLayout(2, tmp_path)), interval_s=10.0, monotonic=time.monotonic, thread_cpu=thread_cpu)
    try:
        budgeted.look_for([target(100 * MI)], time.monotonic())
        fixed.look_for([target(100 * MI)], time.monotonic())
        time.sleep(0.5)  # steady after a window
        looks = (budgeted.looks, fixed.looks)
        time.sleep(1.0)
        budgeted_looks, fixed_looks = budgeted.looks - looks[0], fixed.looks - looks[1]
        assert budgeted.look_cpu_s == pytest.approx(0.00065)
        assert fixed.look_cpu_s is None
        cap = steady_max_period_s(0.00065)
        assert MIN_PERIOD_S < cap < STEADY_MAX_PERIOD_S
        assert 0.5 / cap <= budgeted_looks <= 1.5 / cap, f"{budgeted_looks} looks in a second at a {cap} s cap"
        assert 2 <= fixed_looks <= 6, f"{fixed_looks} looks in a second at the fixed {STEADY_MAX_PERIOD_S} s cap"
    finally:
        budgeted.close()
        fixed.close()


def test_armed_accounted_on_v1_the_watch_wakes_only_for_a_working_set_the_statistics_count(tmp_path: Path) -> None:
    # cgroup v1's pods cgroup: usage has 64 MiB of a file memory.stat has not folded in yet (a churner's page cache).
    tree = TREES[0]
    root = copy_tree(tree, tmp_path)
    pods = root / "memory" / tree.pods
    write_v1_figures(pods, usage_mib=1600, rss_mib=1256, cache_mib=240, kmem_mib=40)
    working_set = ROLE_TO_READING["pods"].working_set_bytes
    # Met on the working set as read (100 MiB left, under 130), not on what the statistics count (about 160 MiB).
    met = Target(Reading.PODS_MEMORY, working_set + 100 * MI, 130 * MI, "hard allocatableMemory.available threshold")
    watch = memory_watch(CgroupReader(tree.layout(root), cpus=2), interval_s=10.0, monotonic=time.monotonic,
                         v1=True)
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([met], time.monotonic(), accounted=True)
        assert waiter.wait(0.3) == [], "usage the statistics do not count yet is no crossing"
        assert watch.looks >= 2, "near it on the figures it reads, the watch keeps looking"
        write_v1_figures(pods, usage_mib=1600, rss_mib=1320, cache_mib=240, kmem_mib=40)  # 64 MiB of it anonymous
        assert waiter.wait(5.0) == [Wake.MEMORY_WATCH]
        write_v1_figures(pods, usage_mib=1600, rss_mib=1256, cache_mib=240, kmem_mib=40)
        watch.look_for([met], time.monotonic())  # not accounted: the working set as read crosses
        assert waiter.wait(5.0) == [Wake.MEMORY_WATCH]
    finally:
        waiter.close()

"""The pid watch (a `TargetWatch` on the pids row of `WATCHES`) against a /proc of plain files: it reads loadavg's task
count only while a crossing is near, wakes a real Waiter once when a ``pid.available`` threshold is met, then idles until the next cycle arms it
again."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from builders import summary
from evictd.adapters.notifiers import Waiter
from evictd.adapters.sensors import count_watch
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Reading, Signal
from evictd.core.summary import Observation
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import Threshold, ThresholdValue, parse_percentage
from evictd.core.wake import Target, Wake, arming

PID_MAX = 2048
NEAR = Target(Reading.PIDS, PID_MAX, 512, "hard pid.available threshold")  # met from 1537 tasks


def loadavg(proc: Path, tasks: int) -> None:
    """Replace `proc`/loadavg at once (a look reading it half written would find it unreadable)."""
    new = proc / "loadavg.new"
    new.write_text(f"0.00 0.00 0.00 1/{tasks} 12345\n")
    new.replace(proc / "loadavg")


def test_a_crossing_between_ticks_wakes_the_waiter_once(tmp_path: Path) -> None:
    loadavg(tmp_path, 1500)  # 37 tasks from the threshold: a look every 100 ms (the floor)
    watch = count_watch(Reading.PIDS, interval_s=10.0, monotonic=time.monotonic, proc_root=str(tmp_path))
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([NEAR], time.monotonic(), seen={Reading.PIDS: 1500})
        assert waiter.wait(0.3) == []
        assert watch.looks >= 2, "near the threshold the watch keeps looking"
        loadavg(tmp_path, 1600)  # 448 available, below 512
        started = time.monotonic()
        assert waiter.wait(5.0) == [Wake.PID_WATCH]
        assert time.monotonic() - started < 2.0
        assert watch.description == "hard pid.available threshold"
        looks = watch.looks
        assert waiter.wait(0.3) == [], "woken once: nothing more until the next cycle arms it"
        assert watch.looks == looks
    finally:
        waiter.close()


def test_far_from_every_threshold_the_watch_reads_nothing(tmp_path: Path) -> None:
    loadavg(tmp_path, 300)  # 1,236 tasks from the threshold: 0.12 s at the assumed rate, after a 0.1 s tick
    watch = count_watch(Reading.PIDS, interval_s=0.1, monotonic=time.monotonic, proc_root=str(tmp_path))
    try:
        watch.look_for([NEAR], time.monotonic(), seen={Reading.PIDS: 300})
        loadavg(tmp_path, 2000)
        time.sleep(0.3)
        assert (watch.looks, watch.fired) == (0, 0)
    finally:
        watch.close()
        watch.close()  # idempotent


def test_an_unreadable_loadavg_skips_the_look_and_keeps_the_pace(tmp_path: Path) -> None:
    watch = count_watch(Reading.PIDS, interval_s=10.0, monotonic=time.monotonic, proc_root=str(tmp_path))  # no loadavg yet
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([NEAR], time.monotonic(), seen={Reading.PIDS: 1500})
        assert waiter.wait(0.35) == []
        assert watch.looks >= 2, "looked at the cycle's count's pace (100 ms), not idle"
        loadavg(tmp_path, 1600)
        assert waiter.wait(5.0) == [Wake.PID_WATCH]
    finally:
        waiter.close()


def test_the_cycles_arming_arms_it_and_close_stops_the_thread(tmp_path: Path) -> None:
    loadavg(tmp_path, 1500)
    hard = Threshold(signal=Signal.PID_AVAILABLE, value=ThresholdValue(percentage=parse_percentage("25%")))
    watch = count_watch(Reading.PIDS, interval_s=10.0, monotonic=time.monotonic, proc_root=str(tmp_path))
    observed = Observation(Quantity.from_int(PID_MAX - 1500, QuantityFormat.DECIMAL_SI),
                           Quantity.from_int(PID_MAX, QuantityFormat.DECIMAL_SI), None)
    stats = summary_from_dict(summary())
    watch.arm(arming(time.monotonic(), [hard], stats, {Signal.PID_AVAILABLE: observed}))
    time.sleep(0.35)
    assert watch.looks >= 2
    threads = [t for t in threading.enumerate() if t.name == "evictd-pid-watch"]
    assert len(threads) == 1
    assert arming(0.0, [hard], None, {Signal.PID_AVAILABLE: observed}).counts == {}, "a cycle without stats: none"
    watch.arm(arming(time.monotonic(), [hard], None, {Signal.PID_AVAILABLE: observed}))
    time.sleep(0.15)
    looks = watch.looks
    time.sleep(0.25)
    assert watch.looks == looks
    watch.close()
    assert not threads[0].is_alive()

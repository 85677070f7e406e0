"""`evictd run` under held pressure and on a busy node without pressure (issue #29): wake-ups earn their cycle.

Real memory on this machine: a threshold held met (`memory.available: 99%`, nothing to evict without the API), a
page-cache churner (a 64 MiB file written and deleted on a disk, again and again) that moves the root memory
cgroup's usage by 64 MiB several times a second, and a real allocation that crosses another threshold.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from evictd_process import CROSSING_DEPTH, HOG_BYTES, EvictdProcess, allocate, mem_available_bytes

from evictd.observe.metrics import WAKEUP_CAUSES

MiB = 1 << 20
INTERVAL_S = 3
# The churner's pace: several 64 MiB moves of the root cgroup's usage a second (the churn issue #29 measured).
CHURN_PER_S = 4
# The windows counted: the churn's wake-ups cost the old code 12-21 follow-up cycles per crossing, hundreds in
# either window, against the 10 and 7 the interval allows (these were a minute and 30 s at 5 s).
WINDOW_S = 30
FAR_WINDOW_S = 20
# Besides one cycle per interval: the first cycle's follow-ups may still run in the window, and one tick may
# fall on either side of each end of it.
SLACK_CYCLES = 3


@contextmanager
def page_cache_churner(folder: Path) -> Iterator[list[int]]:
    """Write a 64 MiB file (through the page cache), keep it for half of the period, and delete it, CHURN_PER_S
    times a second, until the block ends; yields a list that holds the rounds done once it has ended.

    Paced, not as fast as it can: a round takes a fraction of a core for a few tens of milliseconds, so these
    tests run beside the parallel tier's workers without taking a core from them. Kept for half of the period, so
    that cycles find usage with the file about half of the time and re-arm the drop watch above it (deleted at
    once, the file was there only while written: alone on a quiet machine, a far threshold's drop watch then
    fired 0-4 times in 20 s, and more only when other tests moved the machine's memory). The file is deleted long
    before write-back would start, so the disk sees next to nothing."""
    stop = threading.Event()
    rounds = [0]

    def churn() -> None:
        chunk = os.urandom(MiB)
        path = folder / f"churn-{os.getpid()}-{threading.get_ident()}.bin"
        while not stop.wait(1 / (2 * CHURN_PER_S)):
            with open(path, "wb") as handle:
                for _ in range(64):
                    handle.write(chunk)
            stop.wait(1 / (2 * CHURN_PER_S))
            path.unlink()
            rounds[0] += 1

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        yield rounds
    finally:
        stop.set()
        thread.join()


def wakeups(process: EvictdProcess) -> dict[str, float]:
    return {cause: process.metric("evictd_wakeups_total", cause=cause) for cause in WAKEUP_CAUSES}


def cycles_in(process: EvictdProcess, seconds: float) -> float:
    before = process.metric("evictd_cycles_total")
    time.sleep(seconds)
    return process.metric("evictd_cycles_total") - before


def calm_daemon(tmp_path: Path, processes: list[EvictdProcess], kubelet: str, interval: str) -> EvictdProcess:
    process = EvictdProcess(tmp_path, kubelet=kubelet, evictd=f"housekeepingInterval: {interval}\n")
    processes.append(process)
    process.wait_event("evictd started")
    process.wait_for_cycles(1)
    return process


def test_a_threshold_held_met_beside_a_page_cache_churner_costs_one_cycle_per_interval(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    process = calm_daemon(tmp_path, evictd_processes, "evictionHard: {memory.available: '99%'}\n", f"{INTERVAL_S}s")
    process.wait_event("threshold met")
    with page_cache_churner(Path("/var/tmp")) as rounds:
        time.sleep(2)  # the crossing's follow-ups end
        cycles = cycles_in(process, WINDOW_S)
    assert rounds[0] >= WINDOW_S / 2, f"the churner moved usage only {rounds[0]} times"
    assert WINDOW_S / INTERVAL_S - SLACK_CYCLES <= cycles <= WINDOW_S / INTERVAL_S + SLACK_CYCLES, \
        f"{cycles:.0f} cycles in {WINDOW_S} s at one per {INTERVAL_S} s; wake-ups since the start: {wakeups(process)}"
    assert process.stop() == 0


def test_beside_a_page_cache_churner_a_far_threshold_costs_about_one_cycle_per_interval(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    process = calm_daemon(tmp_path, evictd_processes, "evictionHard: {memory.available: 100Mi}\n", f"{INTERVAL_S}s")
    with page_cache_churner(Path("/var/tmp")) as rounds:
        time.sleep(2)
        rearms_before = process.metric("evictd_wakeups_total", cause="memcg_rearm")
        cycles = cycles_in(process, FAR_WINDOW_S)
        rearms = process.metric("evictd_wakeups_total", cause="memcg_rearm") - rearms_before
    assert rounds[0] >= FAR_WINDOW_S / 2, f"the churner moved usage only {rounds[0]} times"
    assert rearms >= 5, "the churn fired the drop watch (the wake-ups are there, they only earn no cycle)"
    assert cycles <= FAR_WINDOW_S / INTERVAL_S + SLACK_CYCLES, \
        f"{cycles:.0f} cycles in {FAR_WINDOW_S} s at one per {INTERVAL_S} s; wake-ups since the start: {wakeups(process)}"
    assert process.stop() == 0


@pytest.mark.serial  # a GiB hog against MemAvailable: the `serial` tier, one at a time
def test_a_crossing_of_another_threshold_during_held_pressure_is_decided_at_once(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    # A soft threshold held met (its grace period an hour: nothing to act on), an hour between ticks: only the
    # memcg wake-up of the hard threshold's crossing can bring its decision this soon.
    hard = mem_available_bytes() - CROSSING_DEPTH
    process = calm_daemon(tmp_path, evictd_processes,
                          f"evictionHard: {{memory.available: '{hard}'}}\n"
                          "evictionSoft: {memory.available: '99%'}\nevictionSoftGracePeriod: {memory.available: 1h}\n",
                          "1h")
    process.wait_for(lambda e: e.get("event") == "threshold met" and "99%" in e.get("threshold", ""))
    # No churner here: its write-back makes the cycle's own disk writes wait seconds (issue #29 item 4, not this).
    time.sleep(3)  # held: a cycle once an hour
    hog = allocate(HOG_BYTES)
    try:
        assert hog.stdout is not None
        filled_at = float(hog.stdout.readline())
        try:
            met = process.wait_for(
                lambda e: e.get("event") == "threshold met" and "99%" not in e.get("threshold", ""), timeout=10)
        except AssertionError as exc:
            raise AssertionError(f"available now {mem_available_bytes()}, the threshold {hard}; "
                                 f"wake-ups: {wakeups(process)}") from exc
        decisions = [(e.get("cycle"), e.get("threshold"), e["_received"] - filled_at) for e in process.events
                     if e.get("event") == "threshold met"]
        assert met["_received"] - filled_at < 1.0, f"wake-ups: {wakeups(process)}; decisions: {decisions}"
    finally:
        hog.kill()
        hog.wait()
    assert process.stop() == 0

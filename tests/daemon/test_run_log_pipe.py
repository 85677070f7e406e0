"""`evictd run` whose stdout nobody reads (issue #29): a stalled journald or container log shim must not hold the
loop. The test stops reading evictd's log pipe and fills it to the brim (through /proc/<pid>/fd/1, a second
descriptor of the same pipe), then crosses a memory threshold with a real allocation.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest
from evictd_process import CROSSING_DEPTH, HOG_BYTES, EvictdProcess, allocate, mem_available_bytes, start_evictd

from full_pipe import fill_pipe
from polling import wait_until

# Whole-machine memory (GiB hogs against MemAvailable): the `serial` tier runs these one at a time.
pytestmark = pytest.mark.serial



def test_a_memory_crossing_is_decided_and_the_loop_goes_on_while_nobody_reads_the_log(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    threshold = mem_available_bytes() - CROSSING_DEPTH
    process = start_evictd(tmp_path, evictd_processes, kubelet=f"evictionHard: {{memory.available: '{threshold}'}}\n"
                           "evictionPressureTransitionPeriod: 1s\n", evictd="housekeepingInterval: 1s\n", cycles=2)
    process.pause_reading()
    assert fill_pipe(f"/proc/{process.process.pid}/fd/1", rounds=3) > 0
    hog = allocate(HOG_BYTES)
    try:
        assert hog.stdout is not None
        hog.stdout.readline()
        cycles = process.metric("evictd_cycles_total")
        met = wait_until(lambda: process.metric("evictd_threshold_met", signal="memory.available", kind="hard"), 10)
        assert met == 1, (f"the crossing was not decided within 10 s: cycles {cycles:.0f} then "
                          f"{process.metric('evictd_cycles_total'):.0f}, available {mem_available_bytes()} "
                          f"(evictd: {process.metric('evictd_signal_available_bytes', signal='memory.available'):.0f})"
                          f", threshold {threshold}")
        decided = process.metric("evictd_cycles_total")
        # The decision's lines wait in evictd's queue; the loop does not: a cycle a second goes on.
        wait_until(lambda: process.metric("evictd_cycles_total") >= decided + 3, 15,
                   "3 more cycles (the loop stopped behind its full log pipe?)")
        assert process.metric("evictd_log_lines_dropped_total") == 0, "a few lines are far from 4 MiB"
    finally:
        hog.kill()
        hog.wait()
    resumed_at = time.time()
    process.resume_reading()
    met = process.wait_event("threshold met", timeout=20)
    assert met["threshold"].startswith("memory.available<")
    assert datetime.fromisoformat(met["timestamp"]).timestamp() < resumed_at, "logged when decided, read later"
    assert process.stop() == 0
    assert process.events[-1]["event"] == "evictd stopped", "the last line is written before evictd exits"

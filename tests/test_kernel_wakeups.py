"""bench/kernel_wakeups.py on this machine's kernel: perf records when a thread was woken and by whom, on the clock
of `time.monotonic()` (what bench/earlyoom_side_by_side.py --kernel-trace compares with the crossings)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from kernel_wakeups import KernelWakeups, parse_perf_script

# A child that names itself (the comm perf filters on), says so, then blocks reading a pipe until each write.
SLEEPER = r"""
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, b"kw-sleeper", 0, 0, 0)  # PR_SET_NAME
print("named", flush=True)
while sys.stdin.readline():
    print("woken", flush=True)
"""
WRITES = 3


def test_a_pipe_write_shows_as_the_writers_wakeup_of_the_sleeper_at_the_time_of_the_write(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", SLEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             bufsize=1)
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline() == "named\n"
    wakeups = KernelWakeups("kw-sleeper", tmp_path)
    wakeups.start()
    # Each write between two readings of time.monotonic(): the one before it and the one after the child's answer.
    writes: list[tuple[float, float]] = []
    try:
        for _ in range(WRITES):
            time.sleep(0.2)  # the child is asleep in read(2) again
            before = time.monotonic()
            child.stdin.write("wake\n")
            child.stdin.flush()
            assert child.stdout.readline() == "woken\n"
            writes.append((before, time.monotonic()))
    finally:
        wakeups.stop()
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()
    writer = threading.get_native_id()
    mine = [wakeup for wakeup in wakeups.wakeups if wakeup.tid == child.pid and wakeup.waker_tid == writer]
    assert len(mine) >= WRITES, f"one wake-up by this process per write: {wakeups.wakeups}"
    # On time.monotonic()'s clock each write's wake-up lies between the readings around the write (an order, not a
    # distance: a busy machine may hold this thread between them, never put the wake-up outside them).
    for before, after in writes:
        assert [w for w in mine if before <= w.at <= after], f"no wake-up from {before} to {after}: {mine}"
    assert {wakeup.tid for wakeup in wakeups.wakeups} == {child.pid}, "only the threads named kw-sleeper"
    assert wakeups.between(*writes[0], {child.pid}), "found by time and thread"
    assert not wakeups.between(*writes[0], {child.pid + 1_000_000})


def test_the_perf_script_lines_are_read_field_by_field() -> None:
    text = ("         python3  6356 38823.969161: comm=evictd pid=6400 prio=120 target_cpu=001\n"
            "  kworker/u8:2-ev   912 38823.970001: comm=evictd pid=6401 prio=120 target_cpu=000\n"
            "not a wake-up line\n")
    assert [(wakeup.waker, wakeup.waker_tid, wakeup.at, wakeup.tid) for wakeup in parse_perf_script(text)] == [
        ("python3", 6356, 38823.969161, 6400), ("kworker/u8:2-ev", 912, 38823.970001, 6401)]

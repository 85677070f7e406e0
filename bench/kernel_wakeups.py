"""The kernel's own record of when a process was woken, and by whom: `perf record` of `sched:sched_waking`.

A benchmark that times a detector black-box (the crossing as a sampler read it, the decision as the detector
logged it) cannot tell a notification the kernel sent late from a detector that was woken in time and decided
late. The kernel can: `sched:sched_waking` fires in the waker's context at the moment a sleeping thread is woken
(an eventfd signalled by a memory charge, a timer, another thread's pipe write), with the waker as the event's
task. `KernelWakeups` records that tracepoint for every thread whose command name is `comm`, on all CPUs, on
CLOCK_MONOTONIC (the clock of `time.monotonic()`), from `start()` to `stop()`, then answers which wake-ups fell in
a span of time and which task caused each.

Needs perf (Debian's linux-perf) and a kernel that lets this process trace (root; perf_event_paranoid <= 2 with
CAP_PERFMON or root). `start()` raises RuntimeError naming the command when perf is missing or refuses.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

# `perf script -F comm,tid,time,trace` of sched:sched_waking: "<waker comm> <waker tid> <seconds>: comm=<wakee>
# pid=<wakee tid> prio=<n> target_cpu=<n>" (the waker's comm may hold spaces).
_LINE = re.compile(r"^\s*(?P<waker>.*?)\s+(?P<waker_tid>\d+)\s+(?P<at>\d+\.\d+):\s+comm=(?P<comm>\S+)\s+"
                   r"pid=(?P<tid>\d+)\b")
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Wakeup:
    """One wake-up of a traced thread: when (CLOCK_MONOTONIC seconds), which thread, by which task."""

    at: float
    tid: int
    waker: str
    waker_tid: int


class KernelWakeups:
    """`perf record -e sched:sched_waking` of the threads named `comm`, into `folder`."""

    def __init__(self, comm: str, folder: Path) -> None:
        self.comm = comm
        self.data = folder / "sched_waking.perf"
        self._perf: subprocess.Popen[bytes] | None = None
        self.wakeups: list[Wakeup] = []

    def start(self) -> None:
        """Start recording; returns once perf says its events are enabled (perf starts them disabled, `-D -1`, and
        acknowledges the "enable" written to its control FIFO: a wake-up right after `start()` is recorded)."""
        perf = shutil.which("perf")
        if perf is None:
            raise RuntimeError("--kernel-trace needs perf (apt-get install linux-perf)")
        control, acknowledged = self.data.with_suffix(".ctl"), self.data.with_suffix(".ack")
        for fifo in (control, acknowledged):
            os.mkfifo(fifo)
        self._perf = subprocess.Popen(
            [perf, "record", "-q", "-a", "-k", "CLOCK_MONOTONIC", "-e", "sched:sched_waking",
             "--filter", f'comm == "{self.comm}"', "-D", "-1", "--control", f"fifo:{control},{acknowledged}",
             "-o", str(self.data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # The handshake blocks on the FIFOs (as perf does): in a thread, so that a perf that never opens them fails
        # on the deadline instead of hanging the benchmark.
        answer: list[str] = []

        def handshake() -> None:
            with open(control, "w", encoding="ascii") as ctl, open(acknowledged, encoding="ascii") as ack:
                ctl.write("enable\n")
                ctl.flush()
                answer.append(ack.readline())

        thread = threading.Thread(target=handshake, name="perf-enable", daemon=True)
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while thread.is_alive():
                self._check_running(deadline)
                thread.join(0.05)
            if answer != ["ack\n"]:
                raise RuntimeError(f"perf record answered {answer!r} to enable")
        except BaseException:
            self._perf.kill()  # a perf that did not start recording is not left behind
            self._perf.wait()
            self._perf = None
            raise

    def _check_running(self, deadline: float) -> None:
        assert self._perf is not None
        if self._perf.poll() is not None:
            assert self._perf.stderr is not None
            raise RuntimeError(f"perf record ended at once: {self._perf.stderr.read().decode(errors='replace')}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"perf record did not enable its events within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        """Stop recording and read what was recorded into `wakeups` (sorted by time)."""
        if self._perf is None:
            return
        self._perf.send_signal(signal.SIGINT)
        self._perf.wait(timeout=60)
        self._perf = None
        script = subprocess.run(["perf", "script", "-i", str(self.data), "-F", "comm,tid,time,trace"],
                                capture_output=True, text=True, check=True)
        self.wakeups = sorted(parse_perf_script(script.stdout), key=lambda wakeup: wakeup.at)

    def between(self, start: float, end: float, tids: Collection[int] | None = None) -> list[Wakeup]:
        """The wake-ups from `start` to `end` (CLOCK_MONOTONIC seconds), of the threads `tids` when given."""
        return [wakeup for wakeup in self.wakeups
                if start <= wakeup.at <= end and (tids is None or wakeup.tid in tids)]


def parse_perf_script(text: str) -> list[Wakeup]:
    """The wake-ups in `perf script -F comm,tid,time,trace` output of sched:sched_waking; other lines are skipped."""
    wakeups = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            wakeups.append(Wakeup(float(match["at"]), int(match["tid"]), match["waker"], int(match["waker_tid"])))
    return wakeups

"""How `evictd run` is asked to stop: one object owning the stop flag, the loop's wake-up and the hard deadline
(`StopSignal`, and `ShutdownDeadline` for the deadline)."""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable
from types import FrameType

from evictd.log import Log

# Exit status when the shutdown deadline passes with the cycle still running.
EXIT_SHUTDOWN_DEADLINE = 1


class ShutdownDeadline:
    """Ends a hung shutdown; armed from a signal handler without taking any Python lock: a watchdog thread blocks
    reading a pipe, `arm` writes one byte (async-signal-safe), and without `disarm`'s byte within `timeout_s` it
    calls `on_expiry` (a `threading.Timer` started in the handler could deadlock on threading's locks)."""

    ARM = b"a"
    DISARM = b"d"

    def __init__(self, timeout_s: float, on_expiry: Callable[[], None]) -> None:
        self._timeout_s = timeout_s
        self._on_expiry = on_expiry
        self._read_fd, self._write_fd = os.pipe()
        self._thread = threading.Thread(target=self._watch, name="evictd-shutdown-deadline", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        """Start the countdown. Safe in a signal handler."""
        os.write(self._write_fd, self.ARM)

    def disarm(self) -> None:
        """The loop finished: the countdown (running or not) ends without effect, and the thread with it."""
        os.write(self._write_fd, self.DISARM)
        self._thread.join(timeout=1.0)
        for fd in (self._read_fd, self._write_fd):
            os.close(fd)

    def _watch(self) -> None:
        if os.read(self._read_fd, 1) != self.ARM:
            return
        readable, _, _ = select.select([self._read_fd], [], [], self._timeout_s)
        if not readable:
            self._on_expiry()


class StopSignal:
    """The stop flag of the daemon, with what a stop request must also do: wake the loop (`wake`), arm the deadline
    (past it `log` says so and `exit`, `os._exit`, ends the process with status 1). The watchdog exists only between
    `install` and `close`."""

    def __init__(self, wake: Callable[[], None], deadline_s: float, log: Log,
                 exit: Callable[[int], object] = os._exit, wakeup_fd: int | None = None) -> None:
        self.deadline_s = deadline_s
        # The kernel may deliver SIGTERM to any thread; Python runs the handler in the main thread only once it runs
        # bytecode again. Written to by the C-level handler, this descriptor ends the main thread's poll at once.
        self._wakeup_fd = wakeup_fd
        self._wakeup_set = False
        self.reason = ""
        self._requested = False
        self._wake = wake
        self._log = log
        self._exit = exit
        self._deadline: ShutdownDeadline | None = None

    def is_set(self) -> bool:
        return self._requested

    def request(self, reason: str = "stop requested") -> None:
        """Stop after the current cycle. Safe in a signal handler (no logging, lock or thread); the deadline is armed
        before the loop is woken."""
        if self._requested:
            return
        self.reason = reason
        if self._deadline is not None:
            self._deadline.arm()
        self._requested = True
        self._wake()

    def install(self) -> None:
        """Start the deadline's watchdog, then stop on SIGTERM/SIGINT (a handler cannot start the watchdog)."""
        self._deadline = ShutdownDeadline(self.deadline_s, self._deadline_passed)

        def handler(signum: int, frame: FrameType | None) -> None:
            self.request(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        if self._wakeup_fd is not None:
            signal.set_wakeup_fd(self._wakeup_fd, warn_on_full_buffer=False)
            self._wakeup_set = True

    def _deadline_passed(self) -> None:
        self._log.error("shutdown deadline passed with the cycle still running; exiting", deadline_s=self.deadline_s)
        self._exit(EXIT_SHUTDOWN_DEADLINE)

    def close(self) -> None:
        """The loop has finished: disarm the deadline and end its watchdog; signals write to no descriptor again."""
        if self._wakeup_set:
            signal.set_wakeup_fd(-1)
            self._wakeup_set = False
        if self._deadline is not None:
            self._deadline.disarm()
            self._deadline = None

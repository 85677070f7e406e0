"""A watch thread as a notifier: between cycles a thread looks at a figure at its own pace and wakes the loop once.

Job: `WatchThread`, the part the memory watch (`evictd.adapters.memory_watch`), the refault watch
(`evictd.adapters.refault_watch`) and the pid watch (`evictd.adapters.pid_watch`) share: an eventfd for the
Waiter, a thread started at the first arming, armed again after every cycle with what to watch (`_arm`), which
calls the subclass's `_look` at the pace it returns, signals the eventfd once when a look says so (`_signal`) and
idles until the next arming.

Between looks the thread sleeps in `poll` on a second eventfd of its own, which an arming (or `close`) signals: one
system call a wait. A timed `threading.Condition.wait` costs about twice the CPU (0.275 against 0.125 ms of the
thread's time a wait in the 6.1 user-mode guest, 400 waits of 10 ms each; `time.sleep` 0.15 ms), and on cgroup v2
the waits are a large part of what the watch costs at a margin (docs/cgroup-v2.md: there, on a loaded host, no
difference showed above the noise).

Invariants: the Notifier shape of `evictd.adapters.notifiers` (one descriptor, O_CLOEXEC, `close` idempotent and
stopping the thread); the thread never holds the lock while looking or waiting; a look armed with what an earlier
arming handed is dropped when an arming came meanwhile.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
from typing import Any

from evictd.adapters.notifiers import FdOwner, os_sample_error


class WatchThread(FdOwner):
    """The eventfd, the thread and the arming of a watch; subclasses say what a look does (`_look`)."""

    poll_events = select.POLLIN

    def __init__(self, description: str, thread_name: str) -> None:
        self.description = description
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._armed: Any = None  # what the last arming handed (falsy: nothing to watch)
        self._generation = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.looks = 0
        self.fired = 0
        try:
            self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        except OSError as exc:
            raise os_sample_error("eventfd", exc) from exc
        try:
            self._wake_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)  # the thread's own: armed, or closed
        except OSError as exc:
            os.close(self._fd)
            raise os_sample_error("eventfd", exc) from exc
        self._wake_poll = select.poll()
        self._wake_poll.register(self._wake_fd, select.POLLIN)

    def _arm(self, armed: Any, watching: bool) -> None:
        """Hand the thread `armed` (`watching`: anything to watch in it), replacing what it watched."""
        with self._lock:
            if self._closed:
                return
            self._armed = armed if watching else None
            self._generation += 1
            os.eventfd_write(self._wake_fd, 1)
            if self._thread is None and watching:
                self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
                self._thread.start()

    def _look(self, armed: Any, generation: int) -> float | None:
        """Look once at what `armed` (handed by arming `generation`) watches; return how long until the next look,
        or None to idle until the next arming (after `_signal`, or when there is nothing to look at before it)."""
        raise NotImplementedError

    def _idle(self) -> None:
        """Called on the thread when it goes idle (what the looks kept is no history of the time it does not look)."""

    def _signal(self) -> None:
        """Wake the loop (once until it consumes)."""
        self.fired += 1
        with contextlib.suppress(OSError, ValueError):  # closed meanwhile: nobody left to wake
            os.eventfd_write(self.fileno(), 1)

    def consume(self) -> None:
        try:
            os.eventfd_read(self.fileno())
        except BlockingIOError:
            pass  # already consumed
        except OSError as exc:
            raise os_sample_error(f"eventfd of the {self.description}", exc) from exc

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                armed, generation = self._armed, self._generation
            if armed is None:
                self._wait(None)  # until the next arming
                continue
            period = self._look(armed, generation)
            with self._lock:
                if self._generation != generation:
                    continue  # armed again during the look: start over with what it handed
                if period is None:
                    self._armed = None
                    self._idle()
                    continue
            self._wait(period)

    def _wait(self, timeout_s: float | None) -> None:
        """Sleep until an arming or `close` signals the thread's eventfd, or `timeout_s` passed (None: no limit)."""
        if self._wake_poll.poll(None if timeout_s is None else max(0, math.ceil(timeout_s * 1000))):
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self._wake_fd)

    def close(self) -> None:
        """Stop the thread and close the eventfds. Idempotent."""
        with self._lock:
            closed, self._closed = self._closed, True
            if not closed:
                os.eventfd_write(self._wake_fd, 1)
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        if not closed:
            os.close(self._wake_fd)
        super().close()

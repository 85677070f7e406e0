"""A watch thread as a notifier: between cycles a thread looks at a figure at its own pace and wakes the loop once.

Job: `WatchThread`, the part the memory watch (`evictd.adapters.memory_watch`), the refault watch
(`evictd.adapters.refault_watch`) and the pid watch (`evictd.adapters.pid_watch`) share: an eventfd for the
Waiter, a thread started at the first arming, armed again after every cycle with what to watch (`_arm`), which
calls the subclass's `_look` at the pace it returns, signals the eventfd once when a look says so (`_signal`) and
idles until the next arming.

Invariants: the Notifier shape of `evictd.adapters.notifiers` (one descriptor, O_CLOEXEC, `close` idempotent and
stopping the thread); the thread never holds the lock while looking; a look armed with what an earlier arming
handed is dropped when an arming came meanwhile.
"""

from __future__ import annotations

import contextlib
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
        self._cond = threading.Condition()
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

    def _arm(self, armed: Any, watching: bool) -> None:
        """Hand the thread `armed` (`watching`: anything to watch in it), replacing what it watched."""
        with self._cond:
            if self._closed:
                return
            self._armed = armed if watching else None
            self._generation += 1
            self._cond.notify()
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
            with self._cond:
                while not self._closed and self._armed is None:
                    self._cond.wait()
                if self._closed:
                    return
                armed, generation = self._armed, self._generation
            period = self._look(armed, generation)
            with self._cond:
                if self._generation != generation:
                    continue  # armed again during the look: start over with what it handed
                if period is None:
                    self._armed = None
                    self._idle()
                else:
                    self._cond.wait(period)

    def close(self) -> None:
        """Stop the thread and close the eventfd. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        super().close()

"""Write-behind: disk work the next decision does not need, run on a thread of its own instead of the loop's.

A housekeeping cycle decides, then persists what it may lose in a crash without harm (the engine state file, the
flight recorder's fdatasync and its segments' closes). On a node writing hard, one fsync waits for the filesystem's
journal commit and so for other processes' dirty data: hundreds of milliseconds (issue #29). Done in the loop, that
wait delays the next wake-up's decision; handed to a `WriteBehind`, it does not.

Bounded by construction: at most one job waits per key, and a newer job for a key replaces the one waiting (the
latest engine state replaces an older one; one fdatasync covers every write before it; a segment is closed once).
Jobs run one at a time, in the order handed over (a replacing job takes the end of the line). A job's failure is
the job's to report (each catches its own `OSError`). `flush` waits until nothing waits or runs (at stop); the
thread is a daemon thread, flushed (at most 5 s) at interpreter exit. What must be durable before an action (the
eviction journal, before an eviction is sent) never goes here.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

from evictd.log import Log

# At interpreter exit, how long the last jobs may still take.
EXIT_FLUSH_S = 5.0


class WriteBehind:
    """One thread running the latest job handed over per key, oldest hand-over first."""

    def __init__(self, log: Log, name: str = "evictd-write-behind") -> None:
        self._log = log
        self._name = name
        self._jobs: dict[str, Callable[[], None]] = {}  # waiting, by key (insertion order = run order)
        self._running = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, key: str, job: Callable[[], None]) -> None:
        """Run `job` off the caller's thread, replacing a job for `key` that has not started yet. Never waits for
        a job to run."""
        with self._changed:
            self._jobs.pop(key, None)
            self._jobs[key] = job
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
                atexit.register(self.flush, EXIT_FLUSH_S)
            self._changed.notify_all()

    def pending(self) -> int:
        """How many jobs wait or run."""
        with self._changed:
            return len(self._jobs) + self._running

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until no job waits or runs (at most `timeout_s`); return whether that happened."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._jobs and not self._running, timeout_s)

    def _work(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._jobs))
                key = next(iter(self._jobs))
                job = self._jobs.pop(key)
                self._running = True
            try:
                job()
            except Exception:  # a job reports its own OSErrors; a bug in one must not end the thread
                self._log.exception("write-behind job failed", job=key)
            finally:
                with self._changed:
                    self._running = False
                    self._changed.notify_all()

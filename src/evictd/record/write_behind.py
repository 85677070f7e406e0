"""Write-behind: disk work the next decision does not need, run on a thread of its own instead of the loop's.

The engine state file, the recorder's fdatasync and segment closes may lose nothing harmful in a crash, and on a
node writing hard one fsync waits hundreds of milliseconds: a `WriteBehind` keeps that off the loop. Bounded: one job
waits per key, a newer one replacing it; jobs run one at a time in order; each reports its own `OSError`; `flush`
waits until idle; the daemon thread is flushed (at most 5 s) at exit. What must be durable before an action (the
eviction journal) never goes here.
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

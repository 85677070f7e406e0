"""The one clock shape the shell is given: monotonic seconds for durations and deadlines, wall time for what
is written down (journal entries, events, node conditions, log screens), and sleeping for a polling wait.

Production passes `SYSTEM_CLOCK`; tests pass a clock that moves only when told (its `sleep` moves it on at
once), so a loop, a poll or a deadline is stepped without sleeping. How long to wait is decided elsewhere (the
housekeeping loop's `evictd.core.wake`); the clock only waits. The decision core has no clock: the manager
hands it `now` as an argument.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds and the wall-clock time, from the same source."""

    def monotonic(self) -> float: ...

    def wall(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()

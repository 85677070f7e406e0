"""The one clock shape the shell is given: monotonic seconds for durations and deadlines, wall time for what
is written down (journal entries, events, node conditions, log screens).

Production passes `SYSTEM_CLOCK`; tests pass a clock that moves only when told, so a loop or a deadline is
stepped without sleeping. The decision core has no clock: the manager hands it `now` as an argument.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds and the wall-clock time, from the same source."""

    def monotonic(self) -> float: ...

    def wall(self) -> datetime: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()

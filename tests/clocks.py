"""The one fake clock of the tests: an `evictd.clock.Clock` (`monotonic()` and `wall()`) that moves only when told.

Every clock the shell takes is that shape: the daemon, the manager, the adapters, the journal. `evictd.commands.simulate`
ships a clock of its own for scenarios; tests of anything else use this one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

# What `wall()` shows at `now_s == 0` unless told otherwise: a fixed, readable date.
WALL_AT_ZERO = datetime(2026, 1, 1, tzinfo=UTC)


class ManualClock:
    """Monotonic seconds that only move when the test sets or advances `now_s`; the wall clock moves with them."""

    def __init__(self, now_s: float = 1000.0, wall_at_zero: datetime = WALL_AT_ZERO) -> None:
        self.now_s = now_s
        self.wall_at_zero = wall_at_zero
        # Called with the new time after each `sleep` (what the world does meanwhile).
        self.on_sleep: list[Callable[[float], object]] = []

    def monotonic(self) -> float:
        return self.now_s

    def wall(self) -> datetime:
        return self.wall_at_zero + timedelta(seconds=self.now_s)

    def advance(self, seconds: float) -> datetime:
        """Move the clock on; return the new wall time."""
        self.now_s += seconds
        return self.wall()

    def sleep(self, seconds: float) -> None:
        """A `time.sleep` stand-in: the time moves on at once."""
        self.now_s += seconds
        for action in list(self.on_sleep):
            action(self.now_s)

"""A clock for tests of code that takes a `clock` callable (monotonic seconds): it moves only when told."""

from __future__ import annotations


class ManualClock:
    """Monotonic seconds that only move when the test sets or advances `now_s`."""

    def __init__(self, now_s: float = 1000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

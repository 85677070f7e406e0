"""A stand-in for a metric's `inc`, or any callback whose calls a test counts."""

from __future__ import annotations


class Counter:
    """A callable that counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1

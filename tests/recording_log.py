"""Stand-ins for what a stateDir file's owner reports to: a log that remembers every line, and a counter."""

from __future__ import annotations

from typing import Any


class RecordingLog:
    """Remembers every line logged, with its level."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(("info", event, fields))

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append(("warning", event, fields))

    def error(self, event: str, **fields: Any) -> None:
        self.lines.append(("error", event, fields))

    def exception(self, event: str, **fields: Any) -> None:
        self.lines.append(("exception", event, fields))

    def at(self, level: str) -> list[tuple[str, dict[str, Any]]]:
        return [(event, fields) for lvl, event, fields in self.lines if lvl == level]


class Counter:
    """A callable that counts its calls (a metric's `inc`)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1

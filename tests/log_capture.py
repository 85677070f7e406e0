"""The one stand-in for evictd's structured logger in tests: `LogCapture` implements `evictd.log.Log` and keeps
every line it is told, with its level, for the test to read back."""

from __future__ import annotations

import threading
from typing import Any

Line = tuple[str, str, dict[str, Any]]


class LogCapture:
    """Keeps (level, event, fields) of every call in `lines`, in call order; safe to log to from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lines: list[Line] = []

    def _keep(self, level: str, event: str, fields: dict[str, Any]) -> None:
        with self._lock:
            self.lines.append((level, event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self._keep("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._keep("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._keep("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._keep("exception", event, fields)

    # --- reading back ---

    def at(self, level: str) -> list[tuple[str, dict[str, Any]]]:
        """(event, fields) of the lines logged at `level`."""
        return [(event, fields) for lvl, event, fields in self.lines if lvl == level]

    def events(self) -> list[str]:
        """The events logged, at any level, in order."""
        return [event for _, event, _ in self.lines]

    def named(self, event: str) -> list[dict[str, Any]]:
        """The fields of every line whose event is `event`."""
        return [fields for _, name, fields in self.lines if name == event]

    def take(self) -> list[Line]:
        """The lines logged since the last `take` (all of them the first time); forgets them."""
        with self._lock:
            lines, self.lines = self.lines, []
        return lines

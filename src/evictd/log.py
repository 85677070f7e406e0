"""The structured logger every part of evictd is handed: the part of structlog's bound logger evictd uses.

An event is a short sentence; fields say which signal, threshold, pod or file it is about. A part is given a
`Log`, never a module-level logger, so that a test can hand it `tests/log_capture.LogCapture` and read back what
it said. structlog's loggers satisfy this protocol as they are.
"""

from __future__ import annotations

from typing import Protocol


class Log(Protocol):
    """info / warning / error / exception, each an event and its fields (structlog's call shape)."""

    def info(self, event: str, **fields: object) -> object: ...

    def warning(self, event: str, **fields: object) -> object: ...

    def error(self, event: str, **fields: object) -> object: ...

    def exception(self, event: str, **fields: object) -> object: ...

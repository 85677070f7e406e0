"""structlog configuration: JSON lines for machines, a readable console for people.

- `json`: one JSON object per line on stdout (journald and `kubectl logs` keep them intact).
- `console`: structlog's console renderer on stderr.
- `live`: nothing is printed; events go to a ring buffer that the terminal live view shows under its table.
`auto` picks `live` when stdout is a terminal and `json` otherwise.
"""

from __future__ import annotations

import collections
import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from evictd.config import LogFormat

# How many recent events the live view keeps to show.
RECENT_EVENTS = 8


class RecentEvents:
    """A structlog processor that keeps the last events as short text lines and drops them from output."""

    def __init__(self, size: int = RECENT_EVENTS) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=size)

    def __call__(self, logger: object, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        details = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "timestamp", "level"))
        stamp = str(event.get("timestamp", ""))[11:19]
        self.lines.append(f"{stamp} {event.get('level', method):7} {event.get('event', '')} {details}".rstrip())
        raise structlog.DropEvent


def resolve_format(setting: LogFormat, stdout: TextIO) -> str:
    if setting != LogFormat.AUTO:
        return str(setting)
    return "live" if stdout.isatty() else "json"


def configure_logging(fmt: str, stream: TextIO | None = None) -> RecentEvents | None:
    """Configure structlog for `fmt` (json, console or live); return the ring buffer in live mode."""
    recent: RecentEvents | None = None
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "live":
        recent = RecentEvents()
        processors.append(recent)
        output = stream or sys.stderr
    elif fmt == "console":
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
        output = stream or sys.stderr
    else:
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        output = stream or sys.stdout
    structlog.configure(processors=processors, wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
                        logger_factory=structlog.PrintLoggerFactory(output), cache_logger_on_first_use=False)
    return recent

"""structlog configuration: JSON lines for machines, a readable console for people.

`json`: one object per line on stdout; `console`: structlog's renderer on stderr; `live`: events to a ring buffer the
terminal live view shows; `auto`: `live` on a terminal, else `json`. Python warnings become `library warning`
events. `evictd run` asks for `queued` output (`evictd.observe.log_writer`), so the loop never waits for stdout.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Callable, MutableMapping
from typing import Any, TextIO

import structlog

from evictd.config import LogFormat
from evictd.observe.live_events import LiveLog
from evictd.observe.log_writer import LogWriter

# How many recent events the live view keeps: more than a tall terminal shows below the signals.
RECENT_EVENTS = 40
# The queued output of the current configuration (None: lines are printed by the thread that logs them).
_writer: LogWriter | None = None


class RecentEvents(LiveLog):
    """A structlog processor that keeps the last events as lines in words, pins warnings until they are resolved
    (`evictd.observe.live_events`), and drops the events from output."""

    def __init__(self, size: int = RECENT_EVENTS) -> None:
        super().__init__(size)

    def __call__(self, logger: object, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        self.add({"level": method, **event})
        raise structlog.DropEvent


def resolve_format(setting: LogFormat, stdout: TextIO) -> str:
    if setting != LogFormat.AUTO:
        return str(setting)
    return "live" if stdout.isatty() else "json"


def configure_logging(fmt: str, stream: TextIO | None = None, *, queued: bool = False,
                      on_drop: Callable[[int], object] | None = None) -> RecentEvents | None:
    """Configure structlog for `fmt` (json, console or live); return the ring buffer in live mode. `queued`: lines
    go through a `LogWriter` thread; `on_drop` counts the lines it drops."""
    global _writer
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
    wrapper = structlog.make_filtering_bound_logger(logging.INFO)
    if _writer is not None:
        _writer.close()
        _writer = None
    factory: Callable[..., Any] = structlog.PrintLoggerFactory(output)
    if queued and recent is None:  # the live view prints nothing
        render = structlog.wrap_logger(structlog.ReturnLogger(), processors=processors, wrapper_class=wrapper)
        _writer = LogWriter(output, lambda count: str(render.warning("log lines dropped", dropped=count)),
                            on_drop=on_drop)
        factory = _logger_factory(_writer)
    structlog.configure(processors=processors, wrapper_class=wrapper, logger_factory=factory,
                        cache_logger_on_first_use=False)
    warnings.showwarning = _warning_to_log
    return recent


def _warning_to_log(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    file: TextIO | None = None, line: str | None = None) -> None:
    """Python's warnings as log events, not raw text in the JSON stream (the filters still decide how often)."""
    structlog.get_logger().warning("library warning", category=category.__name__, message=str(message),
                                   source=f"{filename}:{lineno}")


def _logger_factory(writer: LogWriter) -> Callable[..., LogWriter]:
    def factory(*args: object) -> LogWriter:
        return writer

    return factory


def flush_logs(timeout_s: float) -> bool:
    """Wait (at most `timeout_s`) until the queued log lines are written; return whether they were."""
    return _writer is None or _writer.flush(timeout_s)

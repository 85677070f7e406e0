"""Fault switches and the request log of the test API server.

`Faults` holds one-shot rules checked before a request is served: answer the next N matching requests
(method, path regex, watch or not) with a Status (429 with Retry-After, 500, 503, 504), serve them late
(`delay_next`), hold them without an
answer until the client gives up (`time_out_next`), or close the connection without a response
(`reset_next`). It also steers open watch streams: `drop_watches()` cuts them mid-stream (no terminating
chunk), `drop_next_watch(after_events=n)` cuts the next one after n events, `expire_watches()` sends them an
in-stream ERROR 410 Expired and ends them, as kube-apiserver does when etcd compacted past a watcher.

`RequestLog` keeps every request (method, path, query, parsed body, headers, user, response code) so tests
can assert on what a client sent.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FaultRule:
    """One armed fault; `remaining` counts down per matching request."""

    action: str  # "status", "hold", "reset" or "delay"
    remaining: int
    code: int = 500
    retry_after_s: int = 1
    delay_s: float = 0.0  # "delay": how long the request waits before it is served as usual
    method: str | None = None
    path: re.Pattern[str] | None = None
    watch: bool | None = None

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        return ((self.method is None or self.method == method)
                and (self.path is None or self.path.search(path) is not None)
                and (self.watch is None or self.watch == is_watch))


@dataclass(eq=False)  # identity semantics: each open stream is its own set member
class WatchControl:
    """The switches of one open watch stream, polled by its handler between events."""

    drop: threading.Event = field(default_factory=threading.Event)
    expire: threading.Event = field(default_factory=threading.Event)
    drop_after_events: int | None = None


class Faults:
    """Armed faults and the open watch streams (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._watches: set[WatchControl] = set()
        self._drop_next: list[int] = []

    def _arm(self, rule: FaultRule, method: str | None, path: str | None, watch: bool | None) -> None:
        rule.method = method.upper() if method else None
        rule.path = re.compile(path) if path else None
        rule.watch = watch
        with self._lock:
            self._rules.append(rule)

    def fail_next(self, count: int = 1, *, code: int = 500, method: str | None = None, path: str | None = None,
                  watch: bool | None = None, retry_after_s: int = 0) -> None:
        """Answer the next `count` matching requests with the Status of `code` (500, 503, 504, ...)."""
        self._arm(FaultRule("status", count, code=code, retry_after_s=retry_after_s), method, path, watch)

    def throttle_next(self, count: int = 1, *, retry_after_s: int = 1, method: str | None = None,
                      path: str | None = None, watch: bool | None = None) -> None:
        """Answer the next `count` matching requests with 429 TooManyRequests and `Retry-After`."""
        self._arm(FaultRule("status", count, code=429, retry_after_s=retry_after_s), method, path, watch)

    def time_out_next(self, count: int = 1, *, method: str | None = None, path: str | None = None,
                      watch: bool | None = None) -> None:
        """Hold the next `count` matching requests unanswered until the client disconnects."""
        self._arm(FaultRule("hold", count), method, path, watch)

    def delay_next(self, count: int = 1, *, delay_s: float, method: str | None = None, path: str | None = None,
                   watch: bool | None = None) -> None:
        """Serve the next `count` matching requests as usual, but only after `delay_s` (a slow admission webhook)."""
        self._arm(FaultRule("delay", count, delay_s=delay_s), method, path, watch)

    def reset_next(self, count: int = 1, *, method: str | None = None, path: str | None = None,
                   watch: bool | None = None) -> None:
        """Close the connection of the next `count` matching requests without any response."""
        self._arm(FaultRule("reset", count), method, path, watch)

    def take(self, method: str, path: str, is_watch: bool) -> FaultRule | None:
        """The first armed rule matching this request, counted down; None when the request is served."""
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path, is_watch):
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
                    return rule
        return None

    def clear(self) -> None:
        """Disarm every pending fault."""
        with self._lock:
            self._rules.clear()
            self._drop_next.clear()
            self.expire_every_watch = False

    @property
    def pending(self) -> int:
        """How many faulted answers are still armed."""
        with self._lock:
            return sum(rule.remaining for rule in self._rules)

    # -- watch streams -----------------------------------------------------------------------------------------

    def open_watch(self) -> WatchControl:
        control = WatchControl()
        with self._lock:
            if self._drop_next:
                control.drop_after_events = self._drop_next.pop(0)
            if self.expire_every_watch:
                control.expire.set()
            self._watches.add(control)
        return control

    def close_watch(self, control: WatchControl) -> None:
        with self._lock:
            self._watches.discard(control)

    @property
    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    def drop_watches(self) -> int:
        """Cut every open watch stream now, mid-stream; returns how many were open."""
        with self._lock:
            for control in self._watches:
                control.drop.set()
            return len(self._watches)

    def drop_next_watch(self, after_events: int = 0) -> None:
        """Cut the next watch stream that opens once it has sent `after_events` events."""
        with self._lock:
            self._drop_next.append(after_events)

    # A watch storm: every watch that opens from now on gets ERROR 410 Expired in-stream at once (lists succeed).
    expire_every_watch = False

    def expire_watches(self) -> int:
        """Send every open watch an ERROR 410 Expired event and end it; returns how many were open."""
        with self._lock:
            for control in self._watches:
                control.expire.set()
            return len(self._watches)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it, and the status it answered (0: held or reset, no answer).

    Header names are canonical (`Content-Type`), as a Go server shows them, whatever case the client sent.
    """

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]
    user: str | None
    status: int

    def param(self, name: str) -> str | None:
        """The first value of a query parameter, or None."""
        values = self.query.get(name)
        return values[0] if values else None


class RequestLog:
    """Thread-safe append-only list of `RecordedRequest`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[RecordedRequest] = []

    def add(self, entry: RecordedRequest) -> None:
        with self._lock:
            self._entries.append(entry)

    def all(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def matching(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        """Requests with this method and whose path matches the regex `path` (full match)."""
        pattern = re.compile(path) if path else None
        return [r for r in self.all()
                if (method is None or r.method == method.upper())
                and (pattern is None or pattern.fullmatch(r.path) is not None)]

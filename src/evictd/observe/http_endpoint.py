"""`/metrics` and `/healthz` over HTTP, on one small thread beside the synchronous housekeeping loop.

Over 500 lines because it is the whole of what a client can make evictd do: the health answers, the render and
request budgets and the authorization hand-off are one server's rules (the reviews themselves are elsewhere).
Health answers are cheap: `/healthz` compares the loop's last cycle end with the clock (no I/O, no lock).
The endpoint listens on the pod IP, so no client that can reach it may hurt the node guard (docs/logs-and-metrics.md's
`/metrics` and `/healthz` paragraph lists the limits, the constants below). A response is built whole before it is
sent, so `/metrics` holds the metrics' locks only while the page is generated; renderings have a budget
(RENDERS_PER_S): faster clients get the last page rendered. Requests beyond REQUESTS_PER_S wait in the kernel's
accept queue, so a flood costs a bounded share of a core. A client that resets costs nothing but its socket; an
unexpected error while answering is one log line, and the server keeps serving.
"""

from __future__ import annotations

import contextlib
import errno
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from evictd.core.errors import ConfigError
from evictd.core.metrics_access import Verdict
from evictd.core.wake import stale_after_s
from evictd.observe.metrics_authorization import MetricsAuthorizer

# Two probes (liveness, readiness) and a scrape or two need a handful; the rest is headroom. Each open
# connection costs at most MAX_REQUEST_HEAD_BYTES plus one response (a /metrics page, tens of KiB).
MAX_CONNECTIONS = 16
# The kubelet's probes and Prometheus send their request as soon as they connect; 5 s is ample on any network.
READ_TIMEOUT_S = 5.0
# The same bound for a client to take the response (a /metrics page fits the socket buffers at once).
WRITE_TIMEOUT_S = 5.0
# After an error answer with unread input (an oversized head, a body), input is read and dropped for this long
# before closing, so the client sees the answer rather than a reset.
LINGER_S = 1.0
# Prometheus and the kubelet send a few hundred bytes; 8 KiB is what Go's and nginx's defaults allow per line.
MAX_REQUEST_HEAD_BYTES = 8192
RECV_BYTES = 4096
# Input dropped per loop turn while lingering, so that a fast sender cannot keep the loop to itself.
LINGER_RECVS_PER_TURN = 16
# Connections the kernel queues until the loop accepts them (and closes them at once if they are too many).
LISTEN_BACKLOG = 512
# Accepts per loop turn, so that a flood of connects cannot keep the loop from its open connections.
ACCEPTS_PER_TURN = 64
# Out of file descriptors (EMFILE): stop accepting this long instead of spinning on a readable listener.
ACCEPT_PAUSE_S = 0.5
# The longest select() wait while connections are open (their deadlines are checked after each wait).
MAX_WAIT_S = 1.0
# Renderings of the /metrics page a second (and at once): Prometheus and a reader polling every 50 ms always get a
# fresh page; a flood gets the last one rendered.
RENDERS_PER_S = 20.0
RENDER_BURST = 20.0
# Requests answered a second, and the burst above it: probes and scrapes need about one a second; the rest of a
# flood waits in the accept queue (LISTEN_BACKLOG deep: at this rate a full queue drains within the probes' 5 s).
REQUESTS_PER_S = 400.0
REQUEST_BURST = 100.0

# How long a scrape waits for its token's review (each of its two API requests has 4 s) before a 503.
REVIEW_WAIT_S = 9.0
UNREVIEWED = "authorization unavailable: the token could not be reviewed; retry later"
# `Authorization: Bearer <token>` (the scheme's case is free, RFC 9110).
BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([^ \t]+)")

# Liveness: the loop cycles. Readiness adds: it can see every signal it has a threshold for (`Health.ready`).
LIVENESS_PATHS = ("/healthz", "/livez")
READINESS_PATH = "/readyz"
METRICS_PATH = "/metrics"
ALLOWED_METHODS = ("GET", "HEAD")
TEXT = "text/plain; charset=utf-8"
# The end of a request head; bare LF line ends are accepted too, as http.server did.
HEAD_END = re.compile(rb"\r?\n\r?\n")
HTTP_VERSION = re.compile(r"HTTP/(\d)\.(\d)")
# A header name is an RFC 9110 token.
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class Health:
    """What `/healthz` reports: the loop is alive if a cycle ended recently.

    A loop working in a degraded mode (`degraded`, set by the loop: e.g. no pod list from the API) is still
    alive, 200, and says why: restarting it would not bring the API back, and would cost its protection.
    `stopping` says whether the daemon was asked to stop (its `StopSignal`): from then on it is not healthy.
    `blind`: the signals with a threshold that the last cycles could not read (core/blind.py). A blind daemon is
    alive (a restart would not make a kubelet or cgroupfs readable, and a restart loop would cost the signals it
    can read) but not ready: `/readyz` answers 503, so the pod shows not Ready and an operator sees it.
    """

    def __init__(self, interval_s: float, stopping: Callable[[], bool] = lambda: False) -> None:
        self.allowed_gap_s = stale_after_s(interval_s)
        self.started_at = time.monotonic()
        self.last_cycle_at: float | None = None
        self.stopping = stopping
        self.degraded: str | None = None
        self.blind: tuple[str, ...] = ()

    def cycle_done(self) -> None:
        self.last_cycle_at = time.monotonic()

    def status(self) -> tuple[bool, str]:
        if self.stopping():
            return False, "shutting down"
        since = self.last_cycle_at if self.last_cycle_at is not None else self.started_at
        gap = time.monotonic() - since
        if gap > self.allowed_gap_s:
            return False, f"no housekeeping cycle finished for {gap:.0f}s"
        degraded = self.degraded
        if self.blind:
            blind = f"blind: no figure for {', '.join(self.blind)}"
            degraded = blind if degraded is None else f"{degraded}; {blind}"
        return True, "ok" if degraded is None else f"degraded: {degraded}"

    def ready(self) -> tuple[bool, str]:
        """`/readyz`: alive (`status`) and not blind to any signal it has a threshold for."""
        alive, reason = self.status()
        if alive and self.blind:
            return False, reason
        return alive, reason


def parse_bind_address(address: str) -> tuple[str, int]:
    """Return (host, port) of `host:port` or `[v6]:port`; raise ConfigError naming metricsBindAddress."""
    host, sep, port = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    # As Go's net.SplitHostPort: an IPv6 host needs its brackets (else "::1:80" is ambiguous), ports are ASCII.
    bad_host = ("[" in host or "]" in host) or (":" in host and not bracketed)
    if not sep or bad_host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ConfigError("must be host:port", key="metricsBindAddress", value=address)
    return host or "0.0.0.0", int(port)


def response_bytes(status: HTTPStatus, content_type: str, body: bytes, *, head_only: bool = False) -> bytes:
    """Return a whole HTTP/1.1 response that closes the connection (HEAD: the same headers, no body)."""
    lines = [f"HTTP/1.1 {status.value} {status.phrase}", f"Date: {formatdate(usegmt=True)}",
             f"Content-Type: {content_type}", f"Content-Length: {len(body)}", "Connection: close"]
    if status is HTTPStatus.METHOD_NOT_ALLOWED:
        lines.append(f"Allow: {', '.join(ALLOWED_METHODS)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (b"" if head_only else body)


def refusal(status: HTTPStatus, reason: str, *, head_only: bool = False) -> bytes:
    return response_bytes(status, TEXT, reason.encode(), head_only=head_only)


class MetricsPage:
    """The `/metrics` page: rendered afresh while the render budget lasts, else the last rendering."""

    def __init__(self, registry: CollectorRegistry, budget: RequestBudget | None = None) -> None:
        self._registry = registry
        self._budget = budget or RequestBudget(RENDERS_PER_S, RENDER_BURST)
        self._page: bytes | None = None

    def bytes(self, now: float) -> bytes:
        if self._budget.take(now) or self._page is None:
            self._page = generate_latest(self._registry)
        return self._page


class RequestBudget:
    """A token bucket of requests: `rate_per_s` a second, up to `burst` at once."""

    def __init__(self, rate_per_s: float = REQUESTS_PER_S, burst: float = REQUEST_BURST) -> None:
        self._rate_per_s = rate_per_s
        self._burst = burst
        self._tokens = burst
        self._at: float | None = None

    def take(self, now: float) -> bool:
        """Take one request's token; False (nothing taken) when there is none now."""
        if self._at is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate_per_s)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def refund(self) -> None:
        """Give back a token taken for a request that was not there."""
        self._tokens = min(self._burst, self._tokens + 1.0)

    def wait_s(self) -> float:
        """How long until the next token (after a refused `take`)."""
        return max(0.0, (1.0 - self._tokens) / self._rate_per_s)


class AwaitingReview:
    """A `/metrics` request whose bearer token is under review: answered once the verdict is in."""

    __slots__ = ("head_only", "token")

    def __init__(self, token: str, head_only: bool) -> None:
        self.token = token
        self.head_only = head_only


def verdict_response(verdict: Verdict, page: Callable[[], bytes], head_only: bool) -> bytes:
    """The answer to a scrape with this verdict: the page when allowed, else the verdict's status and reason."""
    if verdict.status == HTTPStatus.OK:
        return response_bytes(HTTPStatus.OK, CONTENT_TYPE_LATEST, page(), head_only=head_only)
    if verdict.status == HTTPStatus.SERVICE_UNAVAILABLE:  # the cause is logged; a client learns nothing of evictd's
        return refusal(HTTPStatus.SERVICE_UNAVAILABLE, UNREVIEWED, head_only=head_only)
    return refusal(HTTPStatus(verdict.status), verdict.reason, head_only=head_only)


def answer(head: bytes, registry: CollectorRegistry | MetricsPage, health: Health,
           authorizer: MetricsAuthorizer | None = None) -> tuple[bytes | AwaitingReview, bool]:
    """Return (response, clean) for one request head (without its blank line).

    `clean` is False when the request was refused for its form, so the client may have sent more than was read.
    With an `authorizer`, a `/metrics` request needs a bearer token: one not reviewed yet is AwaitingReview.
    """
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return refusal(HTTPStatus.BAD_REQUEST, "request head is not ASCII"), False
    request_line, *header_lines = text.split("\n")
    parts = request_line.removesuffix("\r").split(" ")
    matched = HTTP_VERSION.fullmatch(parts[2]) if len(parts) == 3 else None
    if matched is None:
        return refusal(HTTPStatus.BAD_REQUEST, "bad request line"), False
    method, target, _ = parts
    if matched.group(1) != "1":
        return refusal(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "HTTP/1.x only"), False
    head_only = method == "HEAD"
    credentials = ""
    for raw in header_lines:
        name, sep, value = raw.removesuffix("\r").partition(":")
        if not sep or TOKEN.fullmatch(name) is None:
            return refusal(HTTPStatus.BAD_REQUEST, "bad header line", head_only=head_only), False
        lower, value = name.lower(), value.strip()
        if lower == "transfer-encoding" or (lower == "content-length" and value != "0"):
            refused = refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request bodies are not accepted",
                              head_only=head_only)
            return refused, False
        if lower == "authorization":
            credentials = value
    if method not in ALLOWED_METHODS:
        return refusal(HTTPStatus.METHOD_NOT_ALLOWED, "GET or HEAD only"), True
    path = target.split("?", 1)[0]
    if path == METRICS_PATH:
        def page() -> bytes:
            return registry.bytes(time.monotonic()) if isinstance(registry, MetricsPage) else generate_latest(registry)
        if authorizer is None:
            return verdict_response(Verdict(200, "ok", 0.0), page, head_only), True
        bearer = BEARER.fullmatch(credentials)
        if bearer is None:
            refused = refusal(HTTPStatus.UNAUTHORIZED, "Unauthorized: a bearer token is required", head_only=head_only)
            return refused, True
        token = bearer.group(1)
        verdict = authorizer.verdict(token)
        if verdict is not None:
            return verdict_response(verdict, page, head_only), True
        if not authorizer.ask(token):
            return refusal(HTTPStatus.TOO_MANY_REQUESTS, "too many tokens under review; retry later",
                           head_only=head_only), True
        return AwaitingReview(token, head_only), True
    if path in LIVENESS_PATHS or path == READINESS_PATH:
        healthy, reason = health.ready() if path == READINESS_PATH else health.status()
        status = HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE
        return response_bytes(status, TEXT, reason.encode(), head_only=head_only), True
    return refusal(HTTPStatus.NOT_FOUND, "not found", head_only=head_only), True


class _Connection:
    """One client: reading its request head, writing the answer, or dropping input before closing."""

    __slots__ = ("deadline", "inbox", "linger", "outbox", "sock", "state", "waiting")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock = sock
        # then "writing" (or "reviewing" first: its token under review), then closed (or "lingering" after a refusal)
        self.state = "reading"
        self.waiting: AwaitingReview | None = None
        self.inbox = b""
        self.outbox = memoryview(b"")
        self.linger = False
        self.deadline = now + READ_TIMEOUT_S


class HttpEndpoint:
    """The HTTP server on its own thread, as a daemon part: listening from `start` (a bad address raises
    ConfigError) until `stop`."""

    def __init__(self, address: str, registry: CollectorRegistry, health: Health, *,
                 renders_per_s: float = RENDERS_PER_S, requests_per_s: float = REQUESTS_PER_S,
                 request_burst: float = REQUEST_BURST, authorizer: MetricsAuthorizer | None = None) -> None:
        self._address = address
        self._authorizer = authorizer
        self._page = MetricsPage(registry, RequestBudget(renders_per_s, RENDER_BURST))
        self._budget = RequestBudget(requests_per_s, request_burst)
        self._health = health
        self._log = structlog.get_logger("evictd")

    def start(self) -> None:
        address = self._address
        host, port = parse_bind_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, port))
            listener.listen(LISTEN_BACKLOG)
        except OSError as exc:
            listener.close()
            reason = exc.strerror or str(exc)
            raise ConfigError(f"cannot listen: {reason}", key="metricsBindAddress", value=address) from None
        listener.setblocking(False)
        self._listener = listener
        self.port = int(listener.getsockname()[1])
        # stop() wakes the loop through this pair (select() has no other way to be interrupted).
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        # Insertion order is accept order: the first entry is the connection that has waited longest.
        self._connections: dict[int, _Connection] = {}
        self._accepting_again_at: float | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="evictd-http", daemon=True)
        self._thread.start()
        if self._authorizer is not None:
            self._authorizer.start(self._reviewed)

    def stop(self) -> None:
        """Stop serving: the listener and every connection are closed when this returns."""
        if self._stop:
            return
        self._stop = True
        with contextlib.suppress(OSError):  # the loop has ended already
            self._wake_write.send(b"\0")
        self._thread.join()
        if self._authorizer is not None:
            self._authorizer.stop()
        self._wake_write.close()

    def _serve(self) -> None:
        try:
            while not self._stop:
                for key, events in self._selector.select(self._wait_s(time.monotonic())):
                    if key.data == "listener":
                        self._accept()
                    elif key.data == "wake":  # a verdict is in (or stop(): the loop ends after this turn)
                        with contextlib.suppress(OSError):
                            self._wake_read.recv(RECV_BYTES)
                        self._answer_reviewed()
                    else:
                        conn = key.data
                        if conn.sock.fileno() >= 0:  # not closed earlier in this turn (evicted)
                            self._on_ready(conn, events)
                self._expire(time.monotonic())
        except Exception as exc:  # one line, not a thread's traceback; /healthz then fails and the pod restarts
            self._log.error("http endpoint stopped", error=f"{type(exc).__name__}: {exc}")
        finally:
            for conn in list(self._connections.values()):
                self._drop(conn)
            self._selector.close()
            self._listener.close()
            self._wake_read.close()

    def _wait_s(self, now: float) -> float | None:
        """How long select() may wait: until the nearest deadline, or forever with nothing to watch."""
        deadlines = [conn.deadline for conn in self._connections.values()]
        if self._accepting_again_at is not None:
            deadlines.append(self._accepting_again_at)
        if not deadlines:
            return None
        return min(max(0.0, min(deadlines) - now), MAX_WAIT_S)

    def _reviewed(self) -> None:
        """On the reviewer thread: a verdict is in; wake the loop (a full wake pipe is awake already)."""
        with contextlib.suppress(OSError):
            self._wake_write.send(b"\1")

    def _answer_reviewed(self) -> None:
        """Answer each scrape whose token now has a verdict."""
        if self._authorizer is None:
            return
        for conn in [c for c in self._connections.values() if c.state == "reviewing"]:
            assert conn.waiting is not None
            verdict = self._authorizer.verdict(conn.waiting.token)
            if verdict is not None:
                self._answer_verdict(conn, verdict)

    def _answer_verdict(self, conn: _Connection, verdict: Verdict) -> None:
        assert conn.waiting is not None
        try:
            self._respond(conn, verdict_response(verdict, lambda: self._page.bytes(time.monotonic()),
                                                 conn.waiting.head_only), clean=True)
        except (BlockingIOError, InterruptedError):
            pass  # the rest is sent when the socket is writable again (_on_ready)
        except OSError:
            self._drop(conn)
        except Exception as exc:  # as in _on_ready: one client's failure never ends the server
            self._log.error("http request failed", error=f"{type(exc).__name__}: {exc}")
            self._drop(conn)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._connections.values() if c.deadline <= now]:
            if conn.state == "reviewing":  # the review did not finish in time: say so
                self._answer_verdict(conn, Verdict(503, "the token review took too long", 0.0))
            else:
                self._drop(conn)
        if self._accepting_again_at is not None and self._accepting_again_at <= now:
            self._accepting_again_at = None
            self._selector.register(self._listener, selectors.EVENT_READ, "listener")

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            now = time.monotonic()
            if not self._budget.take(now):
                # Over budget: the queued clients wait in the kernel until a token is due.
                self._selector.unregister(self._listener)
                self._accepting_again_at = now + self._budget.wait_s()
                return
            try:
                sock, _peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                self._budget.refund()
                return
            except ConnectionAbortedError:
                continue  # reset while queued
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # The listener stays readable: pause accepting rather than spin; queued clients wait.
                    self._selector.unregister(self._listener)
                    self._accepting_again_at = time.monotonic() + ACCEPT_PAUSE_S
                return
            sock.setblocking(False)
            if len(self._connections) >= MAX_CONNECTIONS:
                self._drop(next(iter(self._connections.values())))
            conn = _Connection(sock, time.monotonic())
            try:
                self._selector.register(sock, selectors.EVENT_READ, conn)
            except OSError:  # epoll refused it (out of memory): this client is turned away
                sock.close()
                continue
            self._connections[sock.fileno()] = conn
            # A probe's request has usually arrived with the connection: answer it now, before more accepts.
            self._on_ready(conn, selectors.EVENT_READ)

    def _on_ready(self, conn: _Connection, events: int) -> None:
        try:
            if conn.state == "writing":
                if events & selectors.EVENT_WRITE:
                    self._send(conn)
            elif conn.state == "reviewing":
                if not conn.sock.recv(RECV_BYTES):
                    self._drop(conn)  # gone while its token was under review
            elif conn.state == "lingering":
                for _ in range(LINGER_RECVS_PER_TURN):
                    if not conn.sock.recv(RECV_BYTES):
                        self._drop(conn)  # end of input: the client has read the answer
                        return
            else:
                self._read(conn)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # reset, broken pipe...: the client went away; its connection is closed, nothing logged
            self._drop(conn)
        except Exception as exc:  # a bug answering one client must not end the server (and print no traceback)
            self._log.error("http request failed", error=f"{type(exc).__name__}: {exc}")
            self._drop(conn)

    def _read(self, conn: _Connection) -> None:
        while True:
            data = conn.sock.recv(RECV_BYTES)
            if not data:
                self._drop(conn)  # gone before its request was complete
                return
            conn.inbox += data
            start = len(conn.inbox) - len(conn.inbox.lstrip(b"\r\n"))  # empty lines before a request are ignored
            end = HEAD_END.search(conn.inbox, start)
            if end is not None and end.end() <= MAX_REQUEST_HEAD_BYTES:
                response, clean = answer(conn.inbox[start:end.start()], self._page, self._health, self._authorizer)
                if isinstance(response, AwaitingReview):
                    conn.state, conn.waiting, conn.inbox = "reviewing", response, b""
                    conn.deadline = time.monotonic() + REVIEW_WAIT_S
                    return
                self._respond(conn, response, clean=clean and end.end() == len(conn.inbox))
                return
            if len(conn.inbox) >= MAX_REQUEST_HEAD_BYTES:
                self._respond(conn, refusal(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large"),
                              clean=False)
                return

    def _respond(self, conn: _Connection, response: bytes, *, clean: bool) -> None:
        conn.inbox = b""
        conn.outbox = memoryview(response)
        conn.state = "writing"
        conn.linger = not clean
        conn.deadline = time.monotonic() + WRITE_TIMEOUT_S
        self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._send(conn)

    def _send(self, conn: _Connection) -> None:
        while conn.outbox:
            conn.outbox = conn.outbox[conn.sock.send(conn.outbox):]
        if not conn.linger:
            self._drop(conn)
            return
        # Refused with input unread: closing now would reset the connection and could lose the answer.
        conn.sock.shutdown(socket.SHUT_WR)
        conn.state = "lingering"
        conn.deadline = time.monotonic() + LINGER_S
        self._selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _drop(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        if fd < 0:
            return
        self._connections.pop(fd, None)
        self._selector.unregister(conn.sock)
        conn.sock.close()

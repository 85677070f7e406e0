"""`/metrics` and `/healthz` over HTTP, on a small thread beside the synchronous housekeeping loop.

Health answers are cheap: the loop records when its last cycle ended, and `/healthz` only compares that time
with the clock (no I/O, no lock held by the loop). The server binds loopback by default.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from evictd.core.errors import ConfigError

# A loop that has not finished a cycle for this many housekeeping intervals is reported unhealthy
# (a slow filesystem walk or a hung runtime call is worth a restart by the supervisor).
STALL_INTERVALS = 3
# ...but never less than this, so a 1 s interval does not flap on one slow cycle.
MIN_STALL_S = 30.0


class Health:
    """What `/healthz` reports: the loop is alive if a cycle ended recently."""

    def __init__(self, interval_s: float) -> None:
        self.allowed_gap_s = max(STALL_INTERVALS * interval_s, MIN_STALL_S)
        self.started_at = time.monotonic()
        self.last_cycle_at: float | None = None
        self.stopping = False

    def cycle_done(self) -> None:
        self.last_cycle_at = time.monotonic()

    def status(self) -> tuple[bool, str]:
        """Return (healthy, reason)."""
        if self.stopping:
            return False, "shutting down"
        since = self.last_cycle_at if self.last_cycle_at is not None else self.started_at
        gap = time.monotonic() - since
        if gap > self.allowed_gap_s:
            return False, f"no housekeeping cycle finished for {gap:.0f}s"
        return True, "ok"


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


class _Handler(BaseHTTPRequestHandler):
    registry: ClassVar[CollectorRegistry]
    health: ClassVar[Health]

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, CONTENT_TYPE_LATEST, generate_latest(self.registry))
        elif path in ("/healthz", "/livez", "/readyz"):
            healthy, reason = self.health.status()
            self._answer(200 if healthy else 503, "text/plain; charset=utf-8", reason.encode())
        else:
            self._answer(404, "text/plain; charset=utf-8", b"not found")

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Scrapes are not worth a log line each."""


class _IPv6Server(ThreadingHTTPServer):
    """The server for an IPv6 bind address (http.server's servers are IPv4 only)."""

    address_family = socket.AF_INET6


class HttpEndpoint:
    """The running HTTP server; `close()` stops it."""

    def __init__(self, address: str, registry: CollectorRegistry, health: Health) -> None:
        host, port = parse_bind_address(address)
        handler = type("Handler", (_Handler,), {"registry": registry, "health": health})
        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        try:
            self._server = server_class((host, port), handler)
        except OSError as exc:
            raise ConfigError(f"cannot listen: {exc.strerror}", key="metricsBindAddress", value=address) from None
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="evictd-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

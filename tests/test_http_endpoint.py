"""The HTTP endpoint against hostile and careless clients: real sockets on 127.0.0.1, a real HttpEndpoint.

What the endpoint promises (the module docstring of evictd.observe.http_endpoint): no thread per connection, at most 16
connections open (a new one past that closes the one waiting longest), 5 s to send a request head of at most
8 KiB, 5 s to take the answer, GET/HEAD only and no bodies, and a client that goes away costs no output.
Then what it serves: `/healthz` (the Health rule: a cycle within three intervals, not shutting down) and
`/metrics`, and its bind address. `evictd run` under a flood: tests/daemon/test_http_endpoint_flood.py.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge

from clocks import ManualClock
from evictd.core.errors import ConfigError
from evictd.observe import http_endpoint
from evictd.observe.http_endpoint import Health, HttpEndpoint, parse_bind_address
from evictd.observe.metrics import Metrics

# The limits the endpoint must keep (written out here: the test states the requirement, not the code's value).
CAP = 16
READ_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 5.0
HEAD_LIMIT = 8192
# Slack on a loaded 2-core machine for anything timed.
SLACK_S = 3.0
TEXT = "text/plain; charset=utf-8"
HOUR_S = 3600.0


@pytest.fixture
def served() -> Iterator[tuple[HttpEndpoint, Metrics, Health]]:
    metrics = Metrics()
    health = Health(HOUR_S)  # healthy however long a test takes (no loop runs cycles here)
    endpoint = HttpEndpoint("127.0.0.1:0", metrics.registry, health)
    endpoint.start()
    try:
        yield endpoint, metrics, health
    finally:
        endpoint.stop()


@pytest.fixture
def big_page() -> Iterator[HttpEndpoint]:
    """An endpoint whose /metrics page (~8 MB) is larger than loopback's socket buffers can hold at once."""
    registry = CollectorRegistry()
    padding = Gauge("evictd_test_padding", "A page too big for the socket buffers.", ["pad"], registry=registry)
    for i in range(8):
        padding.labels(str(i) * 1_000_000).set(i)
    endpoint = HttpEndpoint("127.0.0.1:0", registry, Health(HOUR_S))
    endpoint.start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


def connect(port: int, *, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    return sock


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client killed mid-request or a hostile one does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def read_all(sock: socket.socket, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def parse(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("ascii").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` raw, read the answer to the end; return (status, lower-cased headers, body)."""
    with connect(port) as sock:
        sock.sendall(request)
        return parse(read_all(sock))


def healthz_seconds(port: int) -> float:
    """GET /healthz as the kubelet does; return how long the answer took (it must be 200 ok)."""
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
        assert (response.status, response.read()) == (200, b"ok")
    return time.monotonic() - started


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """Wait up to `timeout` for the server to close `sock` (end of stream or reset); unread data is dropped."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        sock.settimeout(remaining)
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


def still_open_after(socks: list[socket.socket], wait_s: float) -> list[socket.socket]:
    """Return the sockets the server has not closed within `wait_s` (all watched together)."""
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        open_ = set(socks)
        deadline = time.monotonic() + wait_s
        while open_ and (remaining := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(remaining):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    ended = sock.recv(65536) == b""
                except ConnectionResetError:
                    ended = True
                if ended:
                    open_.discard(sock)
                    selector.unregister(sock)
    return [sock for sock in socks if sock in open_]


# ------------------------------------------------------------------------------------------ floods


def test_idle_connections_start_no_threads_and_healthz_still_answers(
        served: tuple[HttpEndpoint, Metrics, Health]) -> None:
    endpoint, _, _ = served
    threads = threading.active_count()
    idle = [connect(endpoint.port) for _ in range(300)]
    try:
        assert healthz_seconds(endpoint.port) < 2.0
        # No new thread (a thread per connection would add 300); a thread of an earlier test may end meanwhile.
        assert threading.active_count() <= threads, "a thread per connection"
    finally:
        for sock in idle:
            sock.close()


def test_connections_past_the_cap_are_closed_at_once(served: tuple[HttpEndpoint, Metrics, Health]) -> None:
    endpoint, _, _ = served
    idle = [connect(endpoint.port) for _ in range(100)]
    try:
        survivors = still_open_after(idle, wait_s=2.0)
        assert len(survivors) <= CAP
        # The newest stay: each new connection closes the one that has waited longest.
        assert set(survivors) <= set(idle[-CAP:])
        # The cap held by idle connections does not lock out a probe.
        assert healthz_seconds(endpoint.port) < 2.0
    finally:
        for sock in idle:
            sock.close()


def test_a_probe_is_answered_while_the_cap_is_held_by_idle_connections(
        served: tuple[HttpEndpoint, Metrics, Health]) -> None:
    endpoint, _, _ = served
    idle = [connect(endpoint.port) for _ in range(CAP)]
    try:
        for _ in range(3):
            assert healthz_seconds(endpoint.port) < 2.0
    finally:
        for sock in idle:
            sock.close()


# -------------------------------------------------------------------------------------- slow clients


def test_a_slowloris_is_cut_after_the_read_timeout(served: tuple[HttpEndpoint, Metrics, Health]) -> None:
    """One byte a second keeps a per-read timeout happy forever; the 5 s bound is on the whole request head."""
    endpoint, _, _ = served
    with connect(endpoint.port) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        closed_at = None
        while time.monotonic() - started < READ_TIMEOUT_S + SLACK_S:
            try:
                sock.sendall(b"a")
            except OSError:  # reset: the server closed it and the byte was refused
                closed_at = time.monotonic()
                break
            if closed_by_server(sock, timeout=1.0):
                closed_at = time.monotonic()
                break
        assert closed_at is not None, f"a slowloris still open after {READ_TIMEOUT_S + SLACK_S:.0f}s"
        assert closed_at - started >= READ_TIMEOUT_S - 0.5, "cut before the read timeout"


def test_a_request_sent_in_pieces_within_the_timeout_is_answered(
        served: tuple[HttpEndpoint, Metrics, Health]) -> None:
    endpoint, _, _ = served
    with connect(endpoint.port) as sock:
        for piece in (b"GET /hea", b"lthz HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
            sock.sendall(piece)
            time.sleep(0.5)
        status, headers, body = parse(read_all(sock))
    assert (status, headers["content-type"], body) == (200, TEXT, b"ok")


def test_a_client_that_never_reads_is_closed_after_the_write_timeout_and_blocks_nothing(
        big_page: HttpEndpoint) -> None:
    """A /metrics answer bigger than the socket buffers, never read: others are answered meanwhile."""
    with connect(big_page.port, rcvbuf=4096) as stalled:
        stalled.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        started = time.monotonic()
        time.sleep(0.5)
        assert healthz_seconds(big_page.port) < 2.0
        # The server must give up on the stalled answer by itself: wait past its write deadline without reading
        # (reading would let it finish), then the stream must end short of the whole page.
        time.sleep(WRITE_TIMEOUT_S + SLACK_S - (time.monotonic() - started))
        received = read_all(stalled, timeout=5.0)
    _, headers, body = parse(received)
    assert len(body) < int(headers["content-length"]), "the stalled answer was cut, not completed"


# ------------------------------------------------------------------------------------ request limits


def test_an_oversized_request_head_is_refused(served: tuple[HttpEndpoint, Metrics, Health]) -> None:
    """Ten 60 KB headers (http.server took up to 100 of 64 KiB each): refused once past 8 KiB."""
    endpoint, _, _ = served
    request = b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 60_000) for i in range(10))
    with connect(endpoint.port) as sock:

        def send() -> None:
            with contextlib.suppress(OSError):  # the server may close before taking it all: the answer counts
                sock.sendall(request + b"\r\n")

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        status, headers, body = parse(read_all(sock))
        sender.join(timeout=10)
    assert (status, headers["content-type"], body) == (431, TEXT, b"request head too large")


def test_a_request_head_just_under_the_limit_is_answered(served: tuple[HttpEndpoint, Metrics, Health]) -> None:
    endpoint, _, _ = served
    start = b"GET /healthz HTTP/1.1\r\nX-Pad: "
    request = start + b"a" * (HEAD_LIMIT - len(start) - 4) + b"\r\n\r\n"
    assert len(request) == HEAD_LIMIT
    assert exchange(endpoint.port, request)[::2] == (200, b"ok")


@pytest.mark.parametrize(
    ("request_", "status", "body"),
    [
        (b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, b""),
        (b"HEAD /nothing HTTP/1.1\r\n\r\n", 404, b""),
        (b"GET /healthz HTTP/1.0\r\n\r\n", 200, b"ok"),
        (b"GET /healthz HTTP/1.1\n\n", 200, b"ok"),
        (b"\r\nGET /healthz?verbose=1 HTTP/1.1\r\n\r\n", 200, b"ok"),
        (b"GET /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 200, b"ok"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405, b"GET or HEAD only"),
        (b"PUT /healthz HTTP/1.1\r\n\r\n", 405, b"GET or HEAD only"),
        (b"DELETE /healthz HTTP/1.1\r\n\r\n", 405, b"GET or HEAD only"),
        (b"OPTIONS * HTTP/1.1\r\n\r\n", 405, b"GET or HEAD only"),
        (b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 413, b"request bodies are not accepted"),
        (b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 413,
         b"request bodies are not accepted"),
        (b"GET /healthz HTTP/2.0\r\n\r\n", 505, b"HTTP/1.x only"),
        (b"GET /healthz\r\n\r\n", 400, b"bad request line"),
        (b"GET  /healthz HTTP/1.1\r\n\r\n", 400, b"bad request line"),
        (b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n", 400, b"bad header line"),
        (b"GET /healthz HTTP/1.1\r\n folded: header\r\n\r\n", 400, b"bad header line"),
        (b"GET /h\xc3\xa9althz HTTP/1.1\r\n\r\n", 400, b"request head is not ASCII"),
    ],
    ids=["head", "head-404", "http-1.0", "bare-lf", "leading-empty-line", "empty-body", "post", "put", "delete",
         "options", "body", "chunked", "http-2", "no-version", "double-space", "no-colon", "folded-header",
         "non-ascii"],
)
def test_only_get_and_head_without_bodies(served: tuple[HttpEndpoint, Metrics, Health], request_: bytes,
                                          status: int, body: bytes) -> None:
    endpoint, _, _ = served
    got_status, headers, got_body = exchange(endpoint.port, request_)
    assert (got_status, got_body) == (status, body)
    if status == 405:
        assert headers["allow"] == "GET, HEAD"
    if request_.startswith(b"HEAD /healthz"):
        assert (headers["content-type"], headers["content-length"]) == (TEXT, "2"), "HEAD: GET's headers"


def test_head_of_metrics_has_get_headers_and_no_body(served: tuple[HttpEndpoint, Metrics, Health]) -> None:
    endpoint, metrics, _ = served
    metrics.cycles.inc(2)
    _, get_headers, page = exchange(endpoint.port, b"GET /metrics HTTP/1.1\r\n\r\n")
    status, head_headers, body = exchange(endpoint.port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert (status, body) == (200, b"")
    assert head_headers["connection"] == get_headers["connection"] == "close", "one answer per connection"
    assert head_headers["content-type"] == get_headers["content-type"] == CONTENT_TYPE_LATEST
    assert head_headers["content-length"] == get_headers["content-length"] == str(len(page))
    assert b"\nevictd_cycles_total 2.0\n" in page


# --------------------------------------------------------------------------------- clients that vanish


def test_clients_that_vanish_print_nothing(big_page: HttpEndpoint, capfd: pytest.CaptureFixture[str]) -> None:
    """Resets before, during and after the request and in the middle of a large answer: no traceback, no line."""
    for _ in range(5):
        reset(connect(big_page.port))  # before sending anything
        half = connect(big_page.port)
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost:")  # in the middle of the request head
        reset(half)
        whole = connect(big_page.port)
        whole.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")  # before reading the answer
        reset(whole)
        reader = connect(big_page.port, rcvbuf=4096)
        reader.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        assert reader.recv(4096).split(b"\r\n", 1)[0].endswith(b" 200 OK"), "the answer has started"
        time.sleep(0.2)  # the server is now waiting to send the rest of the page
        reset(reader)
        quiet = connect(big_page.port)
        quiet.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        quiet.close()  # a plain close before the answer
    time.sleep(0.5)
    assert healthz_seconds(big_page.port) < 2.0
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_close_ends_open_connections_and_stops_listening() -> None:
    endpoint = HttpEndpoint("127.0.0.1:0", CollectorRegistry(), Health(10.0))
    endpoint.start()
    idle = [connect(endpoint.port) for _ in range(4)]
    started = time.monotonic()
    endpoint.stop()
    endpoint.stop()  # twice is harmless (serve() and a test fixture may both stop it)
    assert time.monotonic() - started < 2.0
    assert still_open_after(idle, wait_s=1.0) == []
    with pytest.raises(ConnectionRefusedError):
        connect(endpoint.port)


# --------------------------------------------------------------------------------------------------
# Health


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """Stands in for the `time` module inside evictd.observe.http_endpoint: a monotonic clock the test moves."""
    fake = ManualClock()
    monkeypatch.setattr(http_endpoint, "time", fake)
    return fake


@pytest.mark.parametrize(("interval_s", "gap_s"), [(1.0, 30.0), (10.0, 30.0), (20.0, 60.0), (3600.0, 10800.0)])
def test_allowed_gap_is_three_intervals_but_at_least_30s(interval_s: float, gap_s: float) -> None:
    assert Health(interval_s).allowed_gap_s == gap_s


def test_health_is_ok_until_no_cycle_ended_for_the_allowed_gap(clock: ManualClock) -> None:
    health = Health(10.0)
    assert health.status() == (True, "ok"), "healthy while the first cycle runs"
    clock.now_s += 30.0
    assert health.status() == (True, "ok"), "exactly the allowed gap is still healthy"
    clock.now_s += 1.5
    assert health.status() == (False, "no housekeeping cycle finished for 32s")
    health.cycle_done()
    assert health.status() == (True, "ok")
    clock.now_s += 29.0
    assert health.status() == (True, "ok")
    clock.now_s += 45.0
    assert health.status() == (False, "no housekeeping cycle finished for 74s")


def test_health_is_not_ok_while_stopping(clock: ManualClock) -> None:
    health = Health(10.0)
    health.cycle_done()
    health.stopping = lambda: True
    assert health.status() == (False, "shutting down")


def test_a_degraded_loop_is_healthy_and_says_why_until_it_stalls(clock: ManualClock) -> None:
    health = Health(10.0)
    health.cycle_done()
    health.degraded = "pod-list-unavailable: no pod list from the Kubernetes API"
    assert health.status() == (True, "degraded: pod-list-unavailable: no pod list from the Kubernetes API")
    clock.now_s += 31.0
    assert health.status() == (False, "no housekeeping cycle finished for 31s")
    health.cycle_done()
    health.degraded = None
    assert health.status() == (True, "ok")


# --------------------------------------------------------------------------------------------------
# Bind addresses and the HTTP endpoint


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:10262", ("127.0.0.1", 10262)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("localhost:65535", ("localhost", 65535)),
        (":9100", ("0.0.0.0", 9100)),
        ("[::1]:8080", ("::1", 8080)),
        ("[::]:10262", ("::", 10262)),
        ("[fe80::1%eth0]:80", ("fe80::1%eth0", 80)),
    ],
    ids=["ipv4", "port-0", "name", "all-interfaces", "ipv6-loopback", "ipv6-any", "ipv6-zone"],
)
def test_parse_bind_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_bind_address(address) == expected


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1: 80", "[::1]",
     "::1:8080", "[::1:8080", "::1]:8080", "127.0.0.1:８０８０", ""],
    ids=["no-port", "empty-port", "named-port", "port-too-big", "negative-port", "space", "ipv6-without-port",
         "ipv6-without-brackets", "open-bracket", "close-bracket", "non-ascii-digits", "empty"],
)
def test_bad_bind_addresses_are_config_errors_naming_the_setting(address: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_bind_address(address)
    assert (info.value.key, info.value.value) == ("metricsBindAddress", address)
    assert str(info.value).startswith("metricsBindAddress: invalid value")


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


@pytest.fixture
def endpoint() -> Iterator[tuple[HttpEndpoint, Metrics, Health]]:
    metrics = Metrics()
    health = Health(10.0)
    served = HttpEndpoint("127.0.0.1:0", metrics.registry, health)
    served.start()
    try:
        yield served, metrics, health
    finally:
        served.stop()


def test_endpoint_serves_metrics_health_and_404(endpoint: tuple[HttpEndpoint, Metrics, Health]) -> None:
    served, metrics, health = endpoint
    assert served.port > 0
    base = f"http://127.0.0.1:{served.port}"
    metrics.cycles.inc(3)
    status, content_type, page = get(base + "/metrics")
    assert (status, content_type) == (200, CONTENT_TYPE_LATEST)
    assert "\nevictd_cycles_total 3.0\n" in page
    assert 'evictd_node_condition{condition="MemoryPressure"} 0.0' in page
    for path in ("/healthz", "/livez", "/readyz", "/healthz?verbose=1"):
        assert get(base + path) == (200, "text/plain; charset=utf-8", "ok"), path
    assert get(base + "/nothing")[:1] == (404,)
    assert get(base + "/metricsx")[0] == 404
    health.blind = ("memory.available",)
    blind = "degraded: blind: no figure for memory.available"
    assert get(base + "/healthz") == (200, "text/plain; charset=utf-8", blind), "blind is alive..."
    assert get(base + "/readyz") == (503, "text/plain; charset=utf-8", blind), "... but not ready"
    health.blind = ()
    assert get(base + "/readyz")[0] == 200
    health.stopping = lambda: True
    assert get(base + "/healthz") == (503, "text/plain; charset=utf-8", "shutting down")


def test_endpoint_close_stops_listening(endpoint: tuple[HttpEndpoint, Metrics, Health]) -> None:
    served, _, _ = endpoint
    served.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{served.port}/healthz", timeout=2)


def test_endpoint_on_ipv6_loopback() -> None:
    served = HttpEndpoint("[::1]:0", CollectorRegistry(), Health(10.0))
    served.start()
    try:
        assert get(f"http://[::1]:{served.port}/healthz") == (200, "text/plain; charset=utf-8", "ok")
    finally:
        served.stop()


def test_endpoint_on_a_busy_port_is_a_config_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        with pytest.raises(ConfigError) as info:
            HttpEndpoint(address, CollectorRegistry(), Health(10.0)).start()
    assert (info.value.key, info.value.value) == ("metricsBindAddress", address)
    assert "Address already in use" in info.value.reason


def test_the_metrics_page_is_fresh_until_renderings_outrun_their_budget() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("evictd_test_value", "A value that changes.", registry=registry)
    page = http_endpoint.MetricsPage(registry, http_endpoint.RequestBudget(rate_per_s=4.0, burst=2.0))
    gauge.set(1)
    assert b"evictd_test_value 1.0" in page.bytes(100.0)
    gauge.set(2)
    assert b"evictd_test_value 2.0" in page.bytes(100.0), "a reader right after a change gets the change"
    gauge.set(3)
    assert b"evictd_test_value 2.0" in page.bytes(100.1), "budget spent: the last rendering"
    assert b"evictd_test_value 3.0" in page.bytes(100.35), "a rendering due again"


@pytest.mark.parametrize(("takes_at", "granted"), [
    ([0.0, 0.0, 0.0, 0.0], [True, True, True, False]),  # the burst (3), then nothing until a token is due
    ([0.0, 0.0, 0.0, 0.1, 0.2], [True, True, True, False, True]),  # 0.1 s: half a token; 0.2 s: one
    ([0.0, 0.0, 0.0, 10.0, 10.0, 10.0, 10.0], [True, True, True, True, True, True, False]),  # refilled to the burst
])
def test_the_request_budget_is_a_token_bucket(takes_at: list[float], granted: list[bool]) -> None:
    budget = http_endpoint.RequestBudget(rate_per_s=5.0, burst=3.0)
    assert [budget.take(at) for at in takes_at] == granted


def test_requests_over_the_budget_wait_in_the_queue_and_are_answered_later() -> None:
    endpoint = HttpEndpoint("127.0.0.1:0", CollectorRegistry(), Health(HOUR_S), requests_per_s=4.0,
                            request_burst=2.0)
    endpoint.start()
    answered: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=30) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200")
        with lock:
            answered.append(time.monotonic())

    try:
        began = time.monotonic()
        clients = [threading.Thread(target=client) for _ in range(10)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(timeout=30)
    finally:
        endpoint.stop()
    assert len(answered) == 10, "every request is answered in the end"
    # 2 at once, then 4 a second: the tenth not before 2 s (8 tokens at 4/s), however fast the machine.
    assert max(answered) - began >= 1.9
    within_first_half_second = sum(1 for at in answered if at - began < 0.5)
    assert within_first_half_second <= 2 + 2 + 1, "the burst and half a second's tokens, no more"

"""Stand-ins for a kubelet that misbehaves on the wire, for the Summary source's tests and the daemon's.

Each `HostileKubelet` is a real TCP server on 127.0.0.1, with TLS from a certificate made by ``openssl req
-x509`` (`self_signed`) unless it is told to speak plain text, served by one thread per connection. What a
connection gets is a `Behaviour`: never a word (`silent`), a valid answer one byte at a time (`trickle`), a
huge body as fast as the client takes it (`big_body`), any bytes at once (`answer`), or another
server's answer relayed one byte at a time, TLS handshake included (`slow_relay`).

Every connection is cut after `give_up_s`, and every one still open when the server closes, so that a client
with no deadline of its own still comes back: its test then fails on time instead of hanging.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# How long a connection is served before the stand-in gives up on it.
GIVE_UP_S = 6.0
# The most request head (request line and headers) a stand-in reads.
MAX_REQUEST_HEAD = 64 << 10
SEND_CHUNK = 64 << 10


def self_signed(folder: Path, name: str, san: str = "IP:127.0.0.1") -> tuple[Path, Path]:
    """Make a self-signed certificate (it is its own CA) and key with openssl; return (cert, key)."""
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}", "-addext",
         f"subjectAltName={san}"],
        check=True, capture_output=True,
    )
    return cert, key


def http_response(body: bytes, status: str = "200 OK", *, chunked: bool = False) -> bytes:
    """Return a whole HTTP/1.1 answer carrying `body` (Content-Length, or one chunk)."""
    if chunked:
        framing, payload = b"Transfer-Encoding: chunked", b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        framing, payload = b"Content-Length: %d" % len(body), body
    return (b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\n" + framing +
            b"\r\nConnection: close\r\n\r\n" + payload)


class Connection:
    """One accepted connection, as a behaviour sees it."""

    def __init__(self, server: HostileKubelet, sock: socket.socket) -> None:
        self.server = server
        self.sock: socket.socket = sock
        self.ended = threading.Event()

    def handshake(self) -> None:
        """Complete the TLS handshake (nothing to do on a plain-text server)."""
        if self.server.tls is not None:
            self.sock = self.server.tls.wrap_socket(self.sock, server_side=True)

    def read_request(self) -> bytes:
        """Read the request head (up to the blank line) and record it."""
        head = b""
        while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST_HEAD:
            data = self.sock.recv(4096)
            if not data:
                break
            head += data
        self.server.requests.append(head)
        return head

    def send(self, data: bytes) -> None:
        """Send `data`, counting what the client accepted."""
        self.sock.sendall(data)
        with self.server.lock:
            self.server.bytes_sent += len(data)

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds`; True if the connection was ended meanwhile (given up on, or the server closed)."""
        return self.ended.wait(seconds)

    def end(self) -> None:
        self.ended.set()
        with contextlib.suppress(OSError):
            # The plain socket's shutdown even for a TLS one: it wakes a send blocked in another thread.
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)


Behaviour = Callable[[Connection], None]


def silent(connection: Connection) -> None:
    """Accept, then never say anything: not even the TLS handshake."""
    connection.wait(GIVE_UP_S * 10)


def trickle(response: bytes, interval_s: float) -> Behaviour:
    """Complete the handshake and read the request, then send `response` one byte every `interval_s`."""

    def behave(connection: Connection) -> None:
        connection.handshake()
        connection.read_request()
        for index in range(len(response)):
            connection.send(response[index:index + 1])
            if connection.wait(interval_s):
                return

    return behave


def answer(response: bytes) -> Behaviour:
    """Complete the handshake, read the request, send `response` whole and close."""

    def behave(connection: Connection) -> None:
        connection.handshake()
        connection.read_request()
        connection.send(response)

    return behave


def big_body(total_bytes: int, *, declared: bool) -> Behaviour:
    """Answer 200 with a body of `total_bytes` spaces, its length declared (Content-Length) or not (chunked),
    sent as fast as the client reads."""

    def behave(connection: Connection) -> None:
        connection.handshake()
        connection.read_request()
        framing = b"Content-Length: %d" % total_bytes if declared else b"Transfer-Encoding: chunked"
        connection.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + framing + b"\r\n\r\n")
        piece = b" " * SEND_CHUNK
        framed = piece if declared else b"%x\r\n%s\r\n" % (len(piece), piece)
        for _ in range(total_bytes // SEND_CHUNK):
            if connection.ended.is_set():
                return
            connection.send(framed)
        if not declared:
            connection.send(b"0\r\n\r\n")

    return behave


def slow_relay(backend_port: int, interval_s: float) -> Behaviour:
    """Relay to a server on `backend_port`: the client's bytes at once, the server's one every `interval_s`
    (the TLS handshake included: run this stand-in as plain text in front of a TLS server)."""

    def behave(connection: Connection) -> None:
        backend = socket.create_connection(("127.0.0.1", backend_port))

        def upstream() -> None:
            with contextlib.suppress(OSError):
                while data := connection.sock.recv(4096):
                    backend.sendall(data)

        threading.Thread(target=upstream, daemon=True).start()
        try:
            while data := backend.recv(4096):
                for index in range(len(data)):
                    connection.send(data[index:index + 1])
                    if connection.wait(interval_s):
                        return
        finally:
            backend.close()

    return behave


class HostileKubelet:
    """A server on 127.0.0.1 serving every connection with `behaviour`; TLS when given a cert and key."""

    def __init__(self, behaviour: Behaviour, *, cert: Path | None = None, key: Path | None = None,
                 give_up_s: float = GIVE_UP_S) -> None:
        self.behaviour = behaviour
        self.give_up_s = give_up_s
        self.tls: ssl.SSLContext | None = None
        if cert is not None and key is not None:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(cert, key)
        self.requests: list[bytes] = []
        self.accepted = 0
        self.bytes_sent = 0
        self.lock = threading.Lock()
        self._connections: list[Connection] = []
        self._timers: list[threading.Timer] = []
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def url(self, path: str = "/stats/summary") -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            connection = Connection(self, sock)
            timer = threading.Timer(self.give_up_s, connection.end)
            timer.daemon = True
            with self.lock:
                self.accepted += 1
                self._connections.append(connection)
                self._timers.append(timer)
            timer.start()
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: Connection) -> None:
        try:
            self.behaviour(connection)
        except (OSError, ValueError):  # the client hung up (or the socket was shut down under us)
            pass
        finally:
            connection.end()
            connection.sock.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        self._listener.close()
        with self.lock:
            for timer in self._timers:
                timer.cancel()
            for connection in self._connections:
                connection.end()
        self._acceptor.join(timeout=5)

    def __enter__(self) -> HostileKubelet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ScriptedKubelet:
    """A Summary endpoint over plain HTTP answering the node's memory as the test last set it (`available`) and
    each pod's working set as given, with a fresh time on every answer."""

    def __init__(self, pods: Sequence[tuple[dict[str, Any], int]], available: int = 8 << 30) -> None:
        from builders import pod_stats, summary  # tests/builders.py: the Summary documents of the unit tests

        self._summary, self._pod_stats = summary, pod_stats
        self.pods = list(pods)
        self.available = available
        self.server = HostileKubelet(self._answer)

    def _answer(self, connection: Connection) -> None:
        connection.read_request()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        document = self._summary(memory=self.available, time=now,
                                 pods=[self._pod_stats(pod, memory=memory) for pod, memory in self.pods])
        connection.send(http_response(json.dumps(document).encode()))

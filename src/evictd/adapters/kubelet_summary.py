"""The kubelet's own Summary API as a stats source, for nodes where the kubelet's numbers are wanted exactly.

Directly (`KubeletSummarySource`: bearer token, CA-verified, no redirects) or through the API server's node proxy
(`ApiProxySummarySource`); docs/daemon.md "Stats source". A direct fetch has one deadline from name resolution to
the last byte (`_remaining`), so a trickling server cannot stretch it; the proxy's body is held to the same limits.
An undecodable figure is unknown and named in `refused` (`summary_read`); any other failure is a SampleError whose
reason is stable across cycles: no stats, and the engine freezes as the kubelet does.
"""

from __future__ import annotations

import http
import http.client
import io
import ipaddress
import json
import os
import socket
import ssl
import stat
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any, Protocol

from evictd import user_agent
from evictd.core.errors import ConfigError, DecodeError, KubeError, SampleError, bounded_repr, os_error_reason
from evictd.core.pods import Pod
from evictd.core.summary import Summary
from evictd.core.summary_parser import SummaryReading, summary_read

# A 1000-pod Summary is ~4.3 MiB (and 15 MiB parsed): room for ~1800 pods within the DaemonSet's memory limit.
MAX_SUMMARY_BYTES = 8 << 20
_TOO_LARGE = f"the Summary is larger than {MAX_SUMMARY_BYTES >> 20} MiB; not read further"
# json.loads makes a 50-200 byte object per value: this is what 8 MiB of real pods hold, not 8 MiB of `{},`.
MAX_SUMMARY_VALUES = 600_000
# summary_read builds ~150 bytes and 10 us per pod, container and volume: 1000 pods of 10 containers, 40 volumes.
MAX_SUMMARY_RECORDS = 50_000
# The body is read in pieces of this size; the size limit is checked between them.
READ_CHUNK_BYTES = 64 << 10
# A fetch's share of the interval (the next cycle starts on time) and of the shutdown timeout (up to two fetches).
INTERVAL_SHARE = 0.5
SHUTDOWN_SHARE = 1 / 3
# Error reasons quote foreign text (a status line, a JSON error) up to this length.
MAX_REASON_CHARS = 200
# A token or a CA bundle is a few KiB; anything larger is not one (and `/dev/zero` would never end).
MAX_CREDENTIAL_FILE_BYTES = 1 << 20
_JSON_VALUE_MARKS = (b",", b":", b"[", b"{")


def summary_deadline_s(timeout_s: float, interval_s: float, shutdown_timeout_s: float) -> float:
    """Return the whole-request deadline of one Summary fetch: `timeout_s` (kubeletSummaryTimeout), but at
    most half the housekeeping interval and a third of the shutdown timeout."""
    return min(timeout_s, interval_s * INTERVAL_SHARE, shutdown_timeout_s * SHUTDOWN_SHARE)


class _RecordedSource:
    """A Summary source whose `problems` holds why the last read failed, if it did."""

    problems: tuple[SampleError, ...] = ()
    # The figures of the last Summary that could not be decoded (each unknown, the rest used).
    refused: tuple[DecodeError, ...] = ()

    def _read(self) -> SummaryReading:
        raise NotImplementedError

    def summary(self, pods: Sequence[Pod] = (), *, reread: bool = False,
                runtime_wait_s: float | None = None) -> Summary:
        """Fetch and parse the Summary (every pod the kubelet runs, whatever `pods`; `reread` fetches anew,
        `runtime_wait_s` changes nothing). Raises SampleError, recorded in `problems` until the next success."""
        try:
            reading = self._read()
        except SampleError as exc:
            self.problems = (exc,)
            self.refused = ()
            raise
        self.problems = ()
        self.refused = reading.refused
        return reading.summary

    def memory_reading(self) -> None:
        """None: the kubelet's Summary is one piece; a crossing is confirmed on whole ones."""
        return None


class KubeletSummarySource(_RecordedSource):
    """Reads `/stats/summary` from the kubelet's own port."""

    def __init__(self, url: str, *, token_file: str = "", ca_file: str = "", insecure_tls: bool = False,
                 timeout_s: float = 5.0) -> None:
        """Raises ConfigError for a URL that is not http(s), or for https without a usable CA bundle (unless
        `insecure_tls`)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ConfigError("must be an http(s) URL", key="kubeletSummaryURL", value=url)
        try:
            port = parts.port
            parts.hostname.encode("idna")  # what name resolution will do with it
        except ValueError as exc:  # also UnicodeError
            raise ConfigError(_one_line(str(exc)), key="kubeletSummaryURL", value=url) from None
        if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
            raise ConfigError("must not contain spaces or control characters", key="kubeletSummaryURL", value=url)
        self._url = url
        self._host = parts.hostname
        self._port = port or (443 if parts.scheme == "https" else 80)
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._token_file = token_file
        self._timeout_s = timeout_s
        self._context = _tls_context(ca_file, insecure_tls) if parts.scheme == "https" else None
        if self._context is None:
            self.insecure_reason = "plain HTTP: the bearer token is sent unencrypted" if token_file else ""
        elif insecure_tls:
            self.insecure_reason = ("kubeletInsecureTLS is true: the kubelet's certificate is not verified and "
                                    "the bearer token is sent to an unverified endpoint")
        else:
            self.insecure_reason = ""

    def _token(self) -> str | None:
        if not self._token_file:
            return None
        try:
            with open(self._token_file, encoding="utf-8") as handle:
                token = handle.read(MAX_CREDENTIAL_FILE_BYTES).strip()
        except OSError as exc:
            raise SampleError(self._token_file, os_error_reason(exc)) from None
        except UnicodeDecodeError:
            raise SampleError(self._token_file, "the token is not UTF-8 text") from None
        if not (token.isascii() and token.isprintable()):
            raise SampleError(self._token_file, "the token is not one line of printable ASCII")
        return token

    def _read(self) -> SummaryReading:
        headers = {"Accept": "application/json", "User-Agent": user_agent(), "Connection": "close"}
        token = self._token()  # re-read each time: projected tokens rotate
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return _summary_of(self._fetch(headers), self._url)

    def _fetch(self, headers: dict[str, str]) -> bytes | bytearray:
        """Return the body of a 200 answer read within the deadline; SampleError (the one place for connection,
        TLS and HTTP errors)."""
        connection = _DeadlineConnection(self._host, self._port, time.monotonic() + self._timeout_s, self._context)
        response: http.client.HTTPResponse | None = None
        try:
            connection.request("GET", self._target, headers=headers)
            response = connection.getresponse()
            if response.status != http.HTTPStatus.OK:
                raise SampleError(self._url, f"HTTP {response.status} {_reason_phrase(response.status)}".rstrip())
            return _body(response, self._url)
        except TimeoutError:
            raise SampleError(self._url, f"timed out: no complete answer within {self._timeout_s:g} s") from None
        except http.client.HTTPException as exc:  # not HTTP, or cut short (BadStatusLine, IncompleteRead)
            raise SampleError(self._url, f"bad HTTP response from the kubelet: {bounded_repr(exc)}") from None
        except OSError as exc:  # refused, reset, TLS verification
            raise SampleError(self._url, f"cannot reach the kubelet: {_one_line(str(exc))}") from None
        finally:
            if response is not None:
                response.close()  # the connection may have handed the socket over to it
            connection.close()


class NodeProxy(Protocol):
    """The API server's node proxy (`evictd.kube.api.KubeApi` has it): raises KubeError."""

    def get_node_proxy(self, name: str, path: str, *, timeout_s: float) -> bytes: ...


class ApiProxySummarySource(_RecordedSource):
    """Reads the node's Summary through the API server's node proxy with evictd's API client (passed in: the
    adapters do not build Kubernetes clients)."""

    def __init__(self, node_name: str, *, api: NodeProxy, timeout_s: float = 10.0) -> None:
        self._api = api
        self._node = node_name
        self._timeout_s = timeout_s
        self._source = f"/api/v1/nodes/{node_name}/proxy/stats/summary"

    def _read(self) -> SummaryReading:
        try:
            body = self._api.get_node_proxy(self._node, "stats/summary", timeout_s=self._timeout_s)
        except KubeError as exc:
            if exc.status is None:
                raise SampleError(self._source, f"cannot reach the API server: {exc.detail}") from None
            raise SampleError(self._source, f"HTTP {exc.status} {_reason_phrase(exc.status)}: {exc.detail}") from None
        if len(body) > MAX_SUMMARY_BYTES:
            raise SampleError(self._source, _TOO_LARGE)
        return _summary_of(body, self._source)


# --- Reading the answer ---------------------------------------------------------------------------


def _summary_of(body: bytes | bytearray, source: str) -> SummaryReading:
    """Return the Summary in `body`, each figure that cannot be decoded unknown (`summary_read`). Raises SampleError
    when `body` is not a JSON object within the limits."""
    if _value_count(body) > MAX_SUMMARY_VALUES:
        raise SampleError(source, f"the Summary holds more than {MAX_SUMMARY_VALUES} JSON values")
    try:
        document = json.loads(body, parse_constant=_not_json)
    except RecursionError:
        raise SampleError(source, "the Summary is not JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more digits than Python reads
        raise SampleError(source, f"the Summary is not JSON: {_one_line(str(exc))}") from None
    if not isinstance(document, dict):
        raise SampleError(source, "the Summary is not a JSON object")
    if _record_count(document) > MAX_SUMMARY_RECORDS:
        raise SampleError(source, f"the Summary lists more than {MAX_SUMMARY_RECORDS} pods, containers and volumes")
    try:
        return summary_read(document)
    except DecodeError as exc:
        raise SampleError(source, f"bad Summary document: {exc}") from None


def _value_count(body: bytes | bytearray) -> int:
    """Return an upper bound of the JSON values in `body`, counted in C before anything is built."""
    return sum(body.count(mark) for mark in _JSON_VALUE_MARKS)


def _record_count(document: dict[str, Any]) -> int:
    """Return how many records summary_read would build from `document`'s lists, looking no deeper."""
    node = document.get("node")
    system = node.get("systemContainers") if isinstance(node, dict) else None
    count = len(system) if isinstance(system, list) else 0
    pods = document.get("pods")
    if isinstance(pods, list):
        count += len(pods)
        for pod in pods:
            if isinstance(pod, dict):
                count += sum(len(items) for items in (pod.get("containers"), pod.get("volume"))
                             if isinstance(items, list))
    return count


def _not_json(constant: str) -> Any:
    """json.loads accepts NaN and Infinity; Go's decoder, and so the kubelet, never writes them."""
    raise ValueError(f"{constant} is not a JSON value")


def _body(response: http.client.HTTPResponse, source: str) -> bytearray:
    """Return the whole body of `response`, at most MAX_SUMMARY_BYTES. Raises SampleError when it is larger,
    IncompleteRead when the connection ends before the declared length."""
    if response.length is not None and response.length > MAX_SUMMARY_BYTES:  # the declared Content-Length
        raise SampleError(source, _TOO_LARGE)
    body = bytearray()
    while piece := response.read(READ_CHUNK_BYTES):
        if len(body) + len(piece) > MAX_SUMMARY_BYTES:
            raise SampleError(source, _TOO_LARGE)
        body += piece
    if response.length:  # http.client counts down the declared length; what is left never came
        raise http.client.IncompleteRead(bytes(body), response.length)
    return body


def _reason_phrase(status: int) -> str:
    """The standard phrase of `status` (never the server's own text, which can be anything)."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _one_line(text: str) -> str:
    return " ".join(text.split())[:MAX_REASON_CHARS]


# --- TLS and the deadline -------------------------------------------------------------------------


def _tls_context(ca_file: str, insecure: bool) -> ssl.SSLContext:
    """Return the client context: verification against `ca_file`, or none when `insecure`; ConfigError at
    kubeletCAFile when the bundle cannot be loaded."""
    if insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    remedy = ("it must hold the CA that signs the kubelet's serving certificate (or set kubeletInsecureTLS: "
              "true to send the bearer token to an unverified endpoint)")
    if not ca_file:
        raise ConfigError(f"empty: {remedy}", key="kubeletCAFile", value=ca_file)
    try:
        info = os.stat(ca_file)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CREDENTIAL_FILE_BYTES:
            raise ConfigError(f"not a regular file of at most 1 MiB: {remedy}", key="kubeletCAFile", value=ca_file)
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ValueError) as exc:  # also ssl.SSLError; ValueError: a NUL in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot load CA bundle: {reason}; {remedy}", key="kubeletCAFile", value=ca_file) from None


def _remaining(deadline: float) -> float:
    """Return the seconds left before the monotonic `deadline`; TimeoutError once none are."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _addresses(host: str, port: int, deadline: float) -> list[Any]:
    """Return getaddrinfo's answer for `host`, resolved in a helper thread waited for only until the deadline.
    Raises TimeoutError or OSError."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    answer: list[Any] = []

    def resolve() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            answer.append(exc)

    resolver = threading.Thread(target=resolve, name="evictd-kubelet-resolve", daemon=True)
    resolver.start()
    resolver.join(_remaining(deadline))
    if not answer:
        raise TimeoutError(f"resolving {host}")
    if isinstance(answer[0], OSError):
        raise answer[0]
    addresses: list[Any] = answer[0]
    return addresses


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """Return a TCP socket connected to `host` (each address in turn) before the deadline. Raises OSError."""
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in _addresses(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_remaining(deadline))
            sock.connect(address)
            return sock
        except TimeoutError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            error = exc
    raise error


class _DeadlineSocket:
    """A connected socket as http.client uses it, every send and receive under the deadline. `close` leaves it open
    while a `makefile` file is (http.client reads the body after a `Connection: close`)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._files = 0
        self._closed = False

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(_remaining(self._deadline))
        self._sock.sendall(data)

    def recv_into(self, buffer: Any) -> int:
        self._sock.settimeout(_remaining(self._deadline))
        return self._sock.recv_into(buffer)

    def makefile(self, mode: str) -> io.BufferedReader:
        self._files += 1
        return io.BufferedReader(_DeadlineReader(self))

    def file_closed(self) -> None:
        self._files -= 1
        if self._closed and not self._files:
            self._sock.close()

    def close(self) -> None:
        self._closed = True
        if not self._files:
            self._sock.close()


class _DeadlineReader(io.RawIOBase):
    """The receiving side of a `_DeadlineSocket`, for a buffered reader."""

    def __init__(self, sock: _DeadlineSocket) -> None:
        super().__init__()
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._sock.file_closed()
        super().close()


class _DeadlineConnection(http.client.HTTPConnection):
    """An HTTP(S) connection whose every step ends by `deadline` (ssl applies the handshake timeout as a whole)."""

    def __init__(self, host: str, port: int, deadline: float, context: ssl.SSLContext | None) -> None:
        super().__init__(host, port)
        self._deadline = deadline
        self._context = context

    def connect(self) -> None:
        sock = _connect(self.host, self.port, self._deadline)
        if self._context is not None:
            try:
                sock.settimeout(_remaining(self._deadline))
                sock = self._context.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        self.sock = _DeadlineSocket(sock, self._deadline)

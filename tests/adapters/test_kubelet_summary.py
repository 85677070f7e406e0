"""The kubelet Summary API as a stats source, against stand-ins for the kubelet and the API server.

The real kubelet cannot run on these machines, so a stand-in plays its part on the wire: an HTTPS server on
127.0.0.1 with a certificate made by ``openssl req -x509`` in the test, answering ``GET /stats/summary`` with a
real Summary document only for the right bearer token (401 otherwise), as the kubelet's authenticated port
does. For the API server's node proxy, a plain-HTTP stand-in answers ``GET /api/v1/nodes/<node>/proxy/
stats/summary`` as kube-apiserver does (the kubelet's body passed through; 404 with a ``Status`` for an unknown
node, 503 when the kubelet cannot be reached, 401 for a wrong token), driven by the real ``kubernetes`` client
from a kubeconfig. Every failure must come back as a SampleError naming the URL (or API path).
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from evictd.adapters.kubelet_summary import ApiProxySummarySource, KubeletSummarySource
from evictd.core.errors import ConfigError, SampleError
from evictd.core.signals import Signal
from evictd.core.summary import signal_observations, summary_from_dict

TOKEN = "kubelet-reader-token-1"
NODE = "node-1"
PROXY_PATH = f"/api/v1/nodes/{NODE}/proxy/stats/summary"
SUMMARY_DOCUMENT = summary(
    memory=3 * Gi,
    memory_ws=5 * Gi,
    allocatable=2 * Gi,
    allocatable_ws=1 * Gi,
    pids=(32768, 410),
    pods=[pod_stats(pod("web", uid="uid-web"), memory=700 * Mi, logs=3 * Mi, processes=12)],
    time=stamp(5),
)
SUMMARY_BODY = json.dumps(SUMMARY_DOCUMENT).encode()
# How often the stand-in servers look for a shutdown request (http.server's default 0.5 s slows every test).
SHUTDOWN_POLL_S = 0.02


# --------------------------------------------------------------------------------------------------
# Certificates


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


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pki")
    kubelet_cert, kubelet_key = self_signed(folder, "node-1-kubelet")
    other_ca, _ = self_signed(folder, "some-other-ca")
    return {"cert": kubelet_cert, "key": kubelet_key, "other_ca": other_ca}


# --------------------------------------------------------------------------------------------------
# The stand-in servers


@dataclass
class Behaviour:
    """What the stand-in answers next; `requests` records (path, Authorization header) of each request."""

    token: str = TOKEN
    mode: str = "ok"
    delay_s: float = 0.0
    requests: list[tuple[str, str | None]] = field(default_factory=list)


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    """Return a metav1.Status body as kube-apiserver writes it."""
    status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": message, "reason": reason, "code": code}
    if details is not None:
        status["details"] = details
    return json.dumps(status).encode()


class _StandIn(BaseHTTPRequestHandler):
    behaviour: Behaviour
    summary_path: str
    protocol_version = "HTTP/1.1"

    def handle(self) -> None:
        # A client that gave up before the answer (the timeout test) leaves a gone socket: nothing to do.
        with contextlib.suppress(ConnectionError, ssl.SSLEOFError):
            super().handle()

    def do_GET(self) -> None:
        behaviour = self.behaviour
        # Go's net/http routes on the decoded path; the kubernetes client sends "stats%2Fsummary".
        path = urllib.parse.unquote(self.path.split("?", 1)[0])
        behaviour.requests.append((path, self.headers.get("Authorization")))
        if behaviour.delay_s:
            time.sleep(behaviour.delay_s)
        if self.headers.get("Authorization") != f"Bearer {behaviour.token}":
            self._answer(401, "application/json", _status(401, "Unauthorized", "Unauthorized"))
        elif path != self.summary_path:
            node = path.split("/")[4] if path.startswith("/api/v1/nodes/") else ""
            self._answer(404, "application/json", _status(404, "NotFound", f'nodes "{node}" not found',
                                                          {"name": node, "kind": "nodes"}))
        elif behaviour.mode == "ok":
            self._answer(200, "application/json", SUMMARY_BODY)
        elif behaviour.mode == "kubelet-down":
            self._answer(503, "application/json", _status(
                503, "ServiceUnavailable",
                "error trying to reach service: dial tcp 10.0.0.7:10250: connect: connection refused"))
        elif behaviour.mode == "error":
            self._answer(500, "text/plain; charset=utf-8", b"Internal Server Error: \"/stats/summary\": boom")
        elif behaviour.mode == "not-json":
            self._answer(200, "application/json", b"<html>not json</html>")
        elif behaviour.mode == "not-utf8":
            self._answer(200, "application/json", b"\xff\xfe{}")
        elif behaviour.mode == "not-object":
            self._answer(200, "application/json", b"[1, 2, 3]")
        elif behaviour.mode == "bad-document":
            bad = json.loads(SUMMARY_BODY)
            bad["node"]["memory"]["availableBytes"] = -5
            self._answer(200, "application/json", json.dumps(bad).encode())
        elif behaviour.mode == "garbage-status-line":
            self.wfile.write(b"SURPRISE\r\n\r\n")
            self.close_connection = True
        elif behaviour.mode == "truncated-body":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(SUMMARY_BODY)))
            self.end_headers()
            self.wfile.write(SUMMARY_BODY[: len(SUMMARY_BODY) // 2])
            self.close_connection = True
        else:
            raise AssertionError(f"unknown mode {behaviour.mode}")

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@dataclass
class Server:
    behaviour: Behaviour
    port: int

    def url(self, scheme: str, host: str = "127.0.0.1", path: str = "/stats/summary") -> str:
        return f"{scheme}://{host}:{self.port}{path}"


def _serve(summary_path: str, tls: ssl.SSLContext | None) -> Iterator[Server]:
    behaviour = Behaviour()
    handler = type("Handler", (_StandIn,), {"behaviour": behaviour, "summary_path": summary_path})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True)
    thread.start()
    try:
        yield Server(behaviour, int(httpd.server_address[1]))
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def kubelet(certificates: dict[str, Path]) -> Iterator[Server]:
    """The stand-in kubelet: HTTPS, its serving certificate self-signed."""
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificates["cert"], certificates["key"])
    yield from _serve("/stats/summary", tls)


@pytest.fixture
def plain_kubelet() -> Iterator[Server]:
    """The stand-in kubelet on plain HTTP (a read-only port or a local proxy)."""
    yield from _serve("/stats/summary", None)


@pytest.fixture
def apiserver() -> Iterator[Server]:
    """The stand-in API server's node proxy, on plain HTTP."""
    yield from _serve(PROXY_PATH, None)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")  # projected tokens end without a newline, hand-written ones with one
    return path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------------
# KubeletSummarySource: the kubelet's own port


def test_the_summary_arrives_with_the_bearer_token(kubelet: Server, token_file: Path) -> None:
    source = KubeletSummarySource(kubelet.url("https"), token_file=str(token_file))
    got = source.summary()
    assert got == summary_from_dict(SUMMARY_DOCUMENT)
    assert got.pods[0].pod_ref.name == "web" and got.pods[0].process_count == 12
    observations = signal_observations(got)
    assert observations[Signal.MEMORY_AVAILABLE].available.ceil_int() == 3 * Gi
    assert observations[Signal.ALLOCATABLE_MEMORY_AVAILABLE].capacity.ceil_int() == 3 * Gi
    assert observations[Signal.PID_AVAILABLE].available.ceil_int() == 32768 - 410
    assert kubelet.behaviour.requests == [("/stats/summary", f"Bearer {TOKEN}")]


def test_the_token_file_is_read_again_each_time(kubelet: Server, token_file: Path) -> None:
    source = KubeletSummarySource(kubelet.url("https"), token_file=str(token_file))
    assert source.summary().node.node_name == NODE
    # The kubelet now only accepts the rotated token, which is in the file before the next cycle.
    kubelet.behaviour.token = "rotated-token-2"
    token_file.write_text("rotated-token-2")
    assert source.summary().node.node_name == NODE
    assert [auth for _, auth in kubelet.behaviour.requests] == [f"Bearer {TOKEN}", "Bearer rotated-token-2"]


def test_a_wrong_or_missing_token_is_401(kubelet: Server, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token")
    url = kubelet.url("https")
    for source in (KubeletSummarySource(url, token_file=str(wrong)), KubeletSummarySource(url, token_file="")):
        with pytest.raises(SampleError) as info:
            source.summary()
        assert (info.value.source, info.value.reason) == (url, "HTTP 401 Unauthorized")
    assert [auth for _, auth in kubelet.behaviour.requests] == ["Bearer not-the-token", None]


def test_an_unreadable_token_file_is_a_sample_error_naming_it(kubelet: Server, tmp_path: Path) -> None:
    missing = tmp_path / "no-token-here"
    with pytest.raises(SampleError) as info:
        KubeletSummarySource(kubelet.url("https"), token_file=str(missing)).summary()
    assert info.value.source == str(missing)
    assert "No such file" in info.value.reason
    assert kubelet.behaviour.requests == [], "nothing is sent without the token"


def test_ca_verification_on_accepts_the_kubelets_certificate(
    kubelet: Server, token_file: Path, certificates: dict[str, Path]
) -> None:
    source = KubeletSummarySource(kubelet.url("https"), token_file=str(token_file), ca_file=str(certificates["cert"]))
    assert source.summary() == summary_from_dict(SUMMARY_DOCUMENT)


@pytest.mark.parametrize(
    ("host", "ca", "reason"),
    [
        pytest.param("127.0.0.1", "other_ca", "CERTIFICATE_VERIFY_FAILED", id="signed-by-another-ca"),
        pytest.param("localhost", "cert", "Hostname mismatch", id="name-not-in-certificate"),
    ],
)
def test_ca_verification_on_refuses_a_certificate_it_cannot_verify(
    kubelet: Server, token_file: Path, certificates: dict[str, Path], host: str, ca: str, reason: str
) -> None:
    url = kubelet.url("https", host=host)
    source = KubeletSummarySource(url, token_file=str(token_file), ca_file=str(certificates[ca]))
    with pytest.raises(SampleError) as info:
        source.summary()
    assert info.value.source == url
    assert info.value.reason.startswith("cannot reach the kubelet: ") and reason in info.value.reason
    assert kubelet.behaviour.requests == [], "no request (and no token) goes to an unverified server"


def test_ca_verification_off_accepts_a_self_signed_certificate_under_any_name(
    kubelet: Server, token_file: Path
) -> None:
    source = KubeletSummarySource(kubelet.url("https", host="localhost"), token_file=str(token_file))
    assert source.summary() == summary_from_dict(SUMMARY_DOCUMENT)


def test_plain_http_works_without_tls(plain_kubelet: Server, token_file: Path) -> None:
    source = KubeletSummarySource(plain_kubelet.url("http"), token_file=str(token_file))
    assert source.summary() == summary_from_dict(SUMMARY_DOCUMENT)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        pytest.param("error", "HTTP 500 Internal Server Error", id="http-500"),
        pytest.param("not-json", "the Summary is not JSON: Expecting value", id="not-json"),
        pytest.param("not-utf8", "the Summary is not JSON: ", id="not-utf8"),
        pytest.param("not-object", "the Summary is not a JSON object", id="json-array"),
        pytest.param("bad-document", "bad Summary document: node.memory.availableBytes", id="negative-counter"),
        pytest.param("garbage-status-line", "bad HTTP response from the kubelet: BadStatusLine", id="not-http"),
        pytest.param("truncated-body", "bad HTTP response from the kubelet: IncompleteRead",
                     id="connection-closed-mid-body"),
    ],
)
def test_failures_are_sample_errors_with_the_url(kubelet: Server, token_file: Path, mode: str, reason: str) -> None:
    kubelet.behaviour.mode = mode
    url = kubelet.url("https")
    with pytest.raises(SampleError) as info:
        KubeletSummarySource(url, token_file=str(token_file)).summary()
    assert info.value.source == url
    assert info.value.reason.startswith(reason), info.value.reason


def test_a_wrong_path_is_404(kubelet: Server, token_file: Path) -> None:
    url = kubelet.url("https", path="/stats/summary/")
    with pytest.raises(SampleError) as info:
        KubeletSummarySource(url, token_file=str(token_file)).summary()
    assert (info.value.source, info.value.reason) == (url, "HTTP 404 Not Found")


def test_nobody_listening_is_a_sample_error(token_file: Path) -> None:
    url = f"https://127.0.0.1:{closed_port()}/stats/summary"
    with pytest.raises(SampleError) as info:
        KubeletSummarySource(url, token_file=str(token_file)).summary()
    assert info.value.source == url
    assert "Connection refused" in info.value.reason


def test_a_kubelet_slower_than_the_timeout_is_a_sample_error(kubelet: Server, token_file: Path) -> None:
    kubelet.behaviour.delay_s = 2.0
    source = KubeletSummarySource(kubelet.url("https"), token_file=str(token_file), timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(SampleError) as info:
        source.summary()
    assert time.monotonic() - started < 1.5
    assert "timed out" in info.value.reason


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        pytest.param({"url": "127.0.0.1:10250/stats/summary"}, "kubeletSummaryURL", id="no-scheme"),
        pytest.param({"url": "ftp://127.0.0.1/stats/summary"}, "kubeletSummaryURL", id="not-http"),
        pytest.param({"ca_file": "/nonexistent/ca.crt"}, "kubeletCAFile", id="ca-file-missing"),
        pytest.param({"ca_file": "token"}, "kubeletCAFile", id="ca-file-not-pem"),
    ],
)
def test_bad_settings_are_config_errors(tmp_path: Path, token_file: Path, kwargs: dict[str, str], key: str) -> None:
    settings = {"url": "https://127.0.0.1:10250/stats/summary", **kwargs}
    if settings.get("ca_file") == "token":
        settings["ca_file"] = str(token_file)
    url = settings.pop("url")
    with pytest.raises(ConfigError) as info:
        KubeletSummarySource(url, **settings)
    assert info.value.key == key


# --------------------------------------------------------------------------------------------------
# ApiProxySummarySource: through the API server with evictd's API client


def kubeconfig(folder: Path, server: str, token: str = TOKEN) -> Path:
    path = folder / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "evictd", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "evictd"}}],
        "current-context": "test",
    }))
    return path


@pytest.fixture
def proxy_source(apiserver: Server, tmp_path: Path) -> Callable[..., ApiProxySummarySource]:
    def make(node: str = NODE, token: str = TOKEN, timeout_s: float = 10.0) -> ApiProxySummarySource:
        config = kubeconfig(tmp_path, f"http://127.0.0.1:{apiserver.port}", token)
        return ApiProxySummarySource(node, kubeconfig=str(config), timeout_s=timeout_s)

    return make


def test_the_summary_arrives_through_the_node_proxy(
    apiserver: Server, proxy_source: Callable[..., ApiProxySummarySource]
) -> None:
    got = proxy_source().summary()
    assert got == summary_from_dict(SUMMARY_DOCUMENT)
    assert apiserver.behaviour.requests == [(PROXY_PATH, f"Bearer {TOKEN}")]


@pytest.mark.parametrize(
    ("node", "token", "mode", "reason"),
    [
        pytest.param("node-9", TOKEN, "ok", "HTTP 404 Not Found", id="unknown-node"),
        pytest.param(NODE, TOKEN, "kubelet-down", "HTTP 503 Service Unavailable", id="kubelet-unreachable"),
        pytest.param(NODE, "wrong", "ok", "HTTP 401 Unauthorized", id="wrong-token"),
        pytest.param(NODE, TOKEN, "not-json", "the Summary is not JSON", id="not-json"),
        pytest.param(NODE, TOKEN, "bad-document", "bad Summary document: node.memory.availableBytes",
                     id="bad-document"),
    ],
)
def test_proxy_failures_are_sample_errors(
    proxy_source: Callable[..., ApiProxySummarySource], node: str, token: str, mode: str, reason: str,
    apiserver: Server,
) -> None:
    apiserver.behaviour.mode = mode
    with pytest.raises(SampleError) as info:
        proxy_source(node=node, token=token).summary()
    assert info.value.source == f"/api/v1/nodes/{node}/proxy/stats/summary"
    assert info.value.reason.startswith(reason), info.value.reason


def test_proxy_unreachable_api_server_is_a_sample_error(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(SampleError) as info:
        ApiProxySummarySource(NODE, kubeconfig=str(config), timeout_s=2.0).summary()
    assert info.value.source == PROXY_PATH
    assert info.value.reason.startswith("cannot reach the API server: ")


def test_proxy_unreadable_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-kubeconfig"
    with pytest.raises(ConfigError) as info:
        ApiProxySummarySource(NODE, kubeconfig=str(missing))
    assert (info.value.key, info.value.value) == ("kubeconfig", str(missing))

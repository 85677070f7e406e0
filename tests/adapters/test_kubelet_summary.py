"""The kubelet Summary API as a stats source, against stand-ins for the kubelet and the API server.

The real kubelet cannot run on these machines, so a stand-in plays its part on the wire: an HTTPS server on
127.0.0.1 with a certificate made by ``openssl req -x509`` in the test, answering ``GET /stats/summary`` with a
real Summary document only for the right bearer token (401 otherwise), as the kubelet's authenticated port
does. For the API server's node proxy, a plain-HTTP stand-in answers ``GET /api/v1/nodes/<node>/proxy/
stats/summary`` as kube-apiserver does (the kubelet's body passed through; 404 with a ``Status`` for an unknown
node, 503 when the kubelet cannot be reached, 401 for a wrong token), driven by the real ``kubernetes`` client
from a kubeconfig. Every failure must come back as a SampleError naming the URL (or API path), with a reason
that stays the same from one read to the next (hostile documents included: nested 5000 deep, numbers no
kubelet writes, hundreds of thousands of values), and be listed in the source's `problems`. The kubelet's certificate is
verified unless `insecure_tls` says otherwise, against the service account's CA by default; the token never
follows a redirect. Stalling and flooding endpoints: test_kubelet_summary_hostile.py.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from evictd.adapters.kubelet_summary import (
    ApiProxySummarySource,
    KubeletSummarySource,
    _summary_of,
    summary_deadline_s,
)
from evictd.config import SERVICE_ACCOUNT_CA_FILE, EvictdSettings, load_configuration
from evictd.core.errors import ConfigError, SampleError
from evictd.core.signals import Signal
from evictd.core.summary import signal_observations
from evictd.core.summary_parser import summary_from_dict
from evictd.kube.client import build_api_client
from evictd.run.compose_node import build_stats_source
from evictd.run.plausible_stats import PlausibleStats
from hostile_kubelet import self_signed

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
    body: bytes = b""  # the answer of mode "body"
    location: str = ""  # the target of mode "redirect"
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
        elif behaviour.mode == "body":
            self._answer(200, "application/json", behaviour.body)
        elif behaviour.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", behaviour.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
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


@pytest.fixture
def direct(certificates: dict[str, Path]) -> Callable[..., KubeletSummarySource]:
    """Return a KubeletSummarySource factory verifying against the stand-in's own certificate by default."""

    def make(url: str, **settings: Any) -> KubeletSummarySource:
        return KubeletSummarySource(url, **{"ca_file": str(certificates["cert"]), **settings})

    return make


def test_the_summary_arrives_with_the_bearer_token(
    kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource]
) -> None:
    source = direct(kubelet.url("https"), token_file=str(token_file))
    got = source.summary()
    assert got == summary_from_dict(SUMMARY_DOCUMENT)
    assert got.pods[0].pod_ref.name == "web" and got.pods[0].process_count == 12
    observations = signal_observations(got)
    assert observations[Signal.MEMORY_AVAILABLE].available.ceil_int() == 3 * Gi
    assert observations[Signal.ALLOCATABLE_MEMORY_AVAILABLE].capacity.ceil_int() == 3 * Gi
    assert observations[Signal.PID_AVAILABLE].available.ceil_int() == 32768 - 410
    assert kubelet.behaviour.requests == [("/stats/summary", f"Bearer {TOKEN}")]
    assert source.problems == () and source.insecure_reason == ""


def test_the_token_file_is_read_again_each_time(
    kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource]
) -> None:
    source = direct(kubelet.url("https"), token_file=str(token_file))
    assert source.summary().node.node_name == NODE
    # The kubelet now only accepts the rotated token, which is in the file before the next cycle.
    kubelet.behaviour.token = "rotated-token-2"
    token_file.write_text("rotated-token-2")
    assert source.summary().node.node_name == NODE
    assert [auth for _, auth in kubelet.behaviour.requests] == [f"Bearer {TOKEN}", "Bearer rotated-token-2"]


def test_a_wrong_or_missing_token_is_401(
    kubelet: Server, tmp_path: Path, direct: Callable[..., KubeletSummarySource]
) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token")
    url = kubelet.url("https")
    for source in (direct(url, token_file=str(wrong)), direct(url, token_file="")):
        with pytest.raises(SampleError) as info:
            source.summary()
        assert (info.value.source, info.value.reason) == (url, "HTTP 401 Unauthorized")
    assert [auth for _, auth in kubelet.behaviour.requests] == ["Bearer not-the-token", None]


def test_an_unreadable_token_file_is_a_sample_error_naming_it(
    kubelet: Server, tmp_path: Path, direct: Callable[..., KubeletSummarySource]
) -> None:
    missing = tmp_path / "no-token-here"
    with pytest.raises(SampleError) as info:
        direct(kubelet.url("https"), token_file=str(missing)).summary()
    assert info.value.source == str(missing)
    assert "No such file" in info.value.reason
    assert kubelet.behaviour.requests == [], "nothing is sent without the token"


def test_a_token_that_is_not_one_header_line_is_never_sent(
    kubelet: Server, tmp_path: Path, direct: Callable[..., KubeletSummarySource]
) -> None:
    smuggler = tmp_path / "token"
    smuggler.write_text(f"{TOKEN}\r\nX-Injected: yes\n")
    with pytest.raises(SampleError) as info:
        direct(kubelet.url("https"), token_file=str(smuggler)).summary()
    assert (info.value.source, info.value.reason) == (str(smuggler), "the token is not one line of printable ASCII")
    assert kubelet.behaviour.requests == []


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


def test_without_a_ca_bundle_verification_stays_on_and_the_source_refuses_to_start(token_file: Path) -> None:
    with pytest.raises(ConfigError) as info:
        KubeletSummarySource("https://127.0.0.1:10250/stats/summary", token_file=str(token_file))
    assert (info.value.key, info.value.value) == ("kubeletCAFile", "")
    assert "kubeletInsecureTLS: true" in info.value.reason


def test_insecure_tls_is_explicit_and_accepts_a_self_signed_certificate_under_any_name(
    kubelet: Server, token_file: Path
) -> None:
    source = KubeletSummarySource(kubelet.url("https", host="localhost"), token_file=str(token_file),
                                  insecure_tls=True)
    assert source.summary() == summary_from_dict(SUMMARY_DOCUMENT)
    assert "the bearer token is sent to an unverified endpoint" in source.insecure_reason


def test_plain_http_works_without_tls(plain_kubelet: Server, token_file: Path) -> None:
    source = KubeletSummarySource(plain_kubelet.url("http"), token_file=str(token_file))
    assert source.summary() == summary_from_dict(SUMMARY_DOCUMENT)
    assert source.insecure_reason == "plain HTTP: the bearer token is sent unencrypted"
    assert KubeletSummarySource(plain_kubelet.url("http")).insecure_reason == "", "no token, nothing to leak"


def test_a_redirect_is_not_followed_and_the_token_stays_with_the_kubelet(
    kubelet: Server, plain_kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource]
) -> None:
    kubelet.behaviour.mode = "redirect"
    kubelet.behaviour.location = plain_kubelet.url("http")
    with pytest.raises(SampleError) as info:
        direct(kubelet.url("https"), token_file=str(token_file)).summary()
    assert info.value.reason == "HTTP 302 Found"
    assert plain_kubelet.behaviour.requests == [], "the token went to the redirect's target"


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        pytest.param("error", "HTTP 500 Internal Server Error", id="http-500"),
        pytest.param("not-json", "the Summary is not JSON: Expecting value", id="not-json"),
        pytest.param("not-utf8", "the Summary is not JSON: ", id="not-utf8"),
        pytest.param("not-object", "the Summary is not a JSON object", id="json-array"),
        pytest.param("garbage-status-line", "bad HTTP response from the kubelet: BadStatusLine", id="not-http"),
        pytest.param("truncated-body", "bad HTTP response from the kubelet: IncompleteRead",
                     id="connection-closed-mid-body"),
    ],
)
def test_failures_are_sample_errors_with_the_url(
    kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource], mode: str, reason: str
) -> None:
    kubelet.behaviour.mode = mode
    url = kubelet.url("https")
    source = direct(url, token_file=str(token_file))
    with pytest.raises(SampleError) as info:
        source.summary()
    assert info.value.source == url
    assert info.value.reason.startswith(reason), info.value.reason
    assert source.problems == (info.value,), "the daemon reports the source unreadable from `problems`"
    kubelet.behaviour.mode = "ok"
    source.summary()
    assert source.problems == (), "readable again"


def test_a_negative_counter_is_unknown_and_named_the_rest_of_the_summary_is_read(
    kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource]
) -> None:
    # Issue #43: one bad figure rejected the whole document (SampleError), and with it every signal and pod.
    kubelet.behaviour.mode = "bad-document"
    source = direct(kubelet.url("https"), token_file=str(token_file))
    got = source.summary()
    assert got.node.memory is not None
    assert got.node.memory.available_bytes is None, "the bad figure is unknown"
    assert got.node.memory.working_set_bytes is not None, "the figure beside it is read"
    assert got.pods, "the pods are read"
    assert source.problems == ()
    assert [(e.key, e.value) for e in source.refused] == [("node.memory.availableBytes", -5)]


# Documents no kubelet writes, each as an attacker would shape it; the reason must be the same every time it
# is read, so that the daemon logs the unreadable source once, not once per cycle.
HOSTILE_DOCUMENTS = [
    pytest.param(b"", "the Summary is not JSON: Expecting value", id="empty"),
    pytest.param(b"[" * 5000 + b"]" * 5000, "the Summary is not JSON: nested too deeply", id="arrays-5000-deep"),
    pytest.param(b'{"node": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, "the Summary is not JSON: nested too deeply",
                 id="objects-5000-deep"),
    pytest.param(b'{"node": {"memory": {"availableBytes": ' + b"9" * 5000 + b"}}}",
                 "the Summary is not JSON: Exceeds the limit (4300 digits)", id="integer-of-5000-digits"),
    pytest.param(b'{"node": {"memory": {"availableBytes": NaN}}}', "the Summary is not JSON: NaN is not a JSON value",
                 id="nan"),
    pytest.param(b'{"pods": [' + b"{}," * 400_000 + b"{}]}", "the Summary holds more than 600000 JSON values",
                 id="400000-empty-pods"),
    pytest.param(b'{"pods": [' + b"null," * 700_000 + b"null]}", "the Summary holds more than 600000 JSON values",
                 id="700000-null-pods"),
    pytest.param(b'{"pods": [' + b"null," * 60_000 + b"null]}",
                 "the Summary lists more than 50000 pods, containers and volumes", id="60000-null-pods"),
    pytest.param(b'{"pods": [{"volume": [' + b"{}," * 60_000 + b"{}]}]}",
                 "the Summary lists more than 50000 pods, containers and volumes", id="60000-volumes-in-one-pod"),
]


@pytest.mark.parametrize(("body", "reason"), HOSTILE_DOCUMENTS)
def test_a_hostile_document_is_an_unreadable_source_with_a_stable_reason(
    kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource], body: bytes, reason: str
) -> None:
    kubelet.behaviour.mode = "body"
    kubelet.behaviour.body = body
    source = direct(kubelet.url("https"), token_file=str(token_file))
    errors = []
    for _ in range(2):
        with pytest.raises(SampleError) as info:
            source.summary()
        errors.append(info.value)
    assert errors[0].reason.startswith(reason), errors[0].reason
    assert len(errors[0].reason) <= 250, "one readable line"
    assert errors[0].reason == errors[1].reason
    assert source.problems == (errors[1],)


# Documents whose figures (or blocks) cannot be decoded: those are unknown and named, the rest is read (issue #43).
HOSTILE_FIGURES = [
    pytest.param(b'{"node": {"memory": {"availableBytes": ' + b"9" * 4000 + b"}}}",
                 ["node.memory.availableBytes"], id="integer-of-4000-digits"),
    pytest.param(b'{"node": {"memory": {"availableBytes": 1e999}}}', ["node.memory.availableBytes"],
                 id="float-overflow"),
    pytest.param(b'{"node": [], "pods": {}}', ["node", "pods"], id="wrong-types"),
    pytest.param(b'{"pods": "many"}', ["pods"], id="string-for-list"),
]


@pytest.mark.parametrize(("body", "refused"), HOSTILE_FIGURES)
def test_a_hostile_figure_is_unknown_and_named_the_source_readable(
    kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource], body: bytes, refused: list[str]
) -> None:
    kubelet.behaviour.mode = "body"
    kubelet.behaviour.body = body
    source = direct(kubelet.url("https"), token_file=str(token_file))
    source.summary()
    assert source.problems == ()
    assert [e.key for e in source.refused] == refused
    assert all(len(str(e)) <= 250 for e in source.refused), "each names its value in one readable line"


# Keys of the Summary's own fields (so that generated documents reach deep into the parser) and any others.
SUMMARY_KEYS = st.sampled_from([
    "node", "pods", "nodeName", "memory", "fs", "runtime", "imageFs", "containerFs", "rlimit", "systemContainers",
    "name", "podRef", "uid", "namespace", "containers", "volume", "ephemeral-storage", "process_stats",
    "process_count", "rootfs", "logs", "time", "availableBytes", "workingSetBytes", "usageBytes", "capacityBytes",
    "usedBytes", "inodesFree", "inodes", "inodesUsed", "maxpid", "curproc",
]) | st.text(max_size=4)
JSON_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats()
                | st.text(max_size=20) | st.sampled_from(["2026-11-21T10:00:05Z", "0001-01-01T00:00:00Z",
                                                         "2026-02-30T10:00:00+25:00"]))
JSON_DOCUMENTS = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                              | st.dictionaries(SUMMARY_KEYS, inner, max_size=6), max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(JSON_DOCUMENTS)
def test_any_json_document_is_a_summary_or_an_unreadable_source(document: object) -> None:
    body = json.dumps(document).encode()  # NaN and Infinity included, as json.dumps writes them
    try:
        _summary_of(body, "https://127.0.0.1:10250/stats/summary")
    except SampleError as exc:
        assert exc.source == "https://127.0.0.1:10250/stats/summary"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_summary_or_an_unreadable_source(body: bytes) -> None:
    with contextlib.suppress(SampleError):
        _summary_of(body, "https://127.0.0.1:10250/stats/summary")


def test_a_wrong_path_is_404(kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource]) -> None:
    url = kubelet.url("https", path="/stats/summary/")
    with pytest.raises(SampleError) as info:
        direct(url, token_file=str(token_file)).summary()
    assert (info.value.source, info.value.reason) == (url, "HTTP 404 Not Found")


def test_nobody_listening_is_a_sample_error(token_file: Path, direct: Callable[..., KubeletSummarySource]) -> None:
    url = f"https://127.0.0.1:{closed_port()}/stats/summary"
    with pytest.raises(SampleError) as info:
        direct(url, token_file=str(token_file)).summary()
    assert info.value.source == url
    assert "Connection refused" in info.value.reason


def test_a_kubelet_slower_than_the_timeout_is_a_sample_error(
    kubelet: Server, token_file: Path, direct: Callable[..., KubeletSummarySource]
) -> None:
    kubelet.behaviour.delay_s = 2.0
    source = direct(kubelet.url("https"), token_file=str(token_file), timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(SampleError) as info:
        source.summary()
    assert time.monotonic() - started < 1.5
    assert info.value.reason == "timed out: no complete answer within 0.3 s"


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        pytest.param({"url": "127.0.0.1:10250/stats/summary"}, "kubeletSummaryURL", id="no-scheme"),
        pytest.param({"url": "ftp://127.0.0.1/stats/summary"}, "kubeletSummaryURL", id="not-http"),
        pytest.param({"url": "https://127.0.0.1:99999/stats/summary"}, "kubeletSummaryURL", id="port-out-of-range"),
        pytest.param({"url": "https://127.0.0.1:10250/stats summary"}, "kubeletSummaryURL", id="space-in-path"),
        pytest.param({"url": "https://" + "a" * 64 + ":10250/stats/summary"}, "kubeletSummaryURL",
                     id="host-label-too-long"),
        pytest.param({"ca_file": "/etc/\0ca.crt"}, "kubeletCAFile", id="ca-file-with-nul"),
        pytest.param({"ca_file": "/nonexistent/ca.crt"}, "kubeletCAFile", id="ca-file-missing"),
        pytest.param({"ca_file": "token"}, "kubeletCAFile", id="ca-file-not-pem"),
        pytest.param({"ca_file": "/dev/zero"}, "kubeletCAFile", id="ca-file-not-a-regular-file"),
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
# Settings: the service account's CA by default, insecure only when asked, a deadline within the interval


def test_the_default_ca_is_the_service_accounts_and_insecure_is_off() -> None:
    settings = EvictdSettings()
    assert settings.kubelet_ca_file == SERVICE_ACCOUNT_CA_FILE == "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    assert settings.kubelet_insecure_tls is False
    assert settings.kubelet_summary_timeout_s == 5.0


def test_the_configured_source_without_its_ca_file_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "serviceaccount" / "ca.crt"
    config = tmp_path / "evictd.yaml"
    config.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nstatsSource: kubelet\n"
                      f"kubeletSummaryURL: https://127.0.0.1:10250/stats/summary\nkubeletCAFile: {missing}\n")
    with pytest.raises(ConfigError) as info:
        build_stats_source(load_configuration([str(config)]), None, NODE)  # type: ignore[arg-type]
    assert (info.value.key, info.value.value) == ("kubeletCAFile", str(missing))
    assert "No such file or directory" in info.value.reason and "kubeletInsecureTLS: true" in info.value.reason
    config.write_text(config.read_text() + "kubeletInsecureTLS: true\nkubeletSummaryTimeout: 2s\n")
    insecure = build_stats_source(load_configuration([str(config)]), None, NODE)  # type: ignore[arg-type]
    assert isinstance(insecure.source, PlausibleStats) and isinstance(insecure.source.source, KubeletSummarySource)
    assert insecure.insecure_reason


@pytest.mark.parametrize(
    ("timeout_s", "interval_s", "shutdown_s", "deadline_s"),
    [
        pytest.param(5.0, 10.0, 15.0, 5.0, id="defaults"),
        pytest.param(5.0, 1.0, 15.0, 0.5, id="1s-interval"),
        pytest.param(5.0, 60.0, 15.0, 5.0, id="long-interval-keeps-the-timeout"),
        pytest.param(30.0, 60.0, 15.0, 5.0, id="a-cycle-fetching-twice-still-ends-before-the-shutdown-deadline"),
        pytest.param(0.2, 10.0, 15.0, 0.2, id="short-timeout"),
        pytest.param(5.0, 10.0, 3.0, 1.0, id="short-shutdown-timeout"),
    ],
)
def test_the_fetch_deadline(timeout_s: float, interval_s: float, shutdown_s: float, deadline_s: float) -> None:
    assert summary_deadline_s(timeout_s, interval_s, shutdown_s) == pytest.approx(deadline_s)


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
        return ApiProxySummarySource(node, api=build_api_client(str(config)), timeout_s=timeout_s)

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
    ],
)
def test_proxy_failures_are_sample_errors(
    proxy_source: Callable[..., ApiProxySummarySource], node: str, token: str, mode: str, reason: str,
    apiserver: Server,
) -> None:
    apiserver.behaviour.mode = mode
    source = proxy_source(node=node, token=token)
    with pytest.raises(SampleError) as info:
        source.summary()
    assert info.value.source == f"/api/v1/nodes/{node}/proxy/stats/summary"
    assert info.value.reason.startswith(reason), info.value.reason
    assert source.problems == (info.value,)


def test_proxy_unreachable_api_server_is_a_sample_error(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path, f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(SampleError) as info:
        ApiProxySummarySource(NODE, api=build_api_client(str(config)), timeout_s=2.0).summary()
    assert info.value.source == PROXY_PATH
    assert info.value.reason.startswith("cannot reach the API server: ")

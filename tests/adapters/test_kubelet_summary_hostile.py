"""The kubelet Summary source against endpoints that stall or flood: one deadline per fetch, a bounded body.

Every server here is a real TLS server on 127.0.0.1 (`hostile_kubelet`), verified with the CA the test made;
each gives up on a connection after a few seconds, so that a client without a deadline of its own fails these
tests on time instead of hanging them. Times are measured around one `summary()` call.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from builders import Gi, Mi, pod, pod_stats, summary
from evictd.adapters.kubelet_summary import KubeletSummarySource
from evictd.config import Configuration, load_configuration
from evictd.core.errors import SampleError
from evictd.cycle.manager import StatsSource
from evictd.run.compose_node import build_stats_source
from hostile_kubelet import (
    Behaviour,
    HostileKubelet,
    answer,
    big_body,
    http_response,
    self_signed,
    silent,
    slow_relay,
    trickle,
)

TOKEN = "kubelet-reader-token-1"
SUMMARY_BODY = json.dumps(summary(allocatable=2 * Gi, pods=[pod_stats(pod("web"), memory=700 * Mi)])).encode()
DEADLINE_S = 0.5
# What a loaded test machine may add to a deadline: thread switches, TLS set-up, the last read in flight.
SLACK_S = 0.5
# Far more than any real Summary, and more than evictd may hold: 300 MiB, as in the attack review.
HUGE_BYTES = 300 << 20


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pki")
    cert, key = self_signed(folder, "node-1-kubelet")
    return {"cert": cert, "key": key}


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    return path


Serve = Callable[..., HostileKubelet]


@pytest.fixture
def serve(pki: dict[str, Path]) -> Iterator[Serve]:
    """Return a function starting a stand-in (TLS unless `tls=False`); all of them are closed after the test."""
    started: list[HostileKubelet] = []

    def start(behaviour: Behaviour, *, tls: bool = True) -> HostileKubelet:
        server = HostileKubelet(behaviour, cert=pki["cert"] if tls else None, key=pki["key"] if tls else None)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def timed_failure(stats: StatsSource) -> tuple[float, SampleError]:
    """Return how long `stats.summary()` took to fail, and its SampleError."""
    started = time.monotonic()
    with pytest.raises(SampleError) as info:
        stats.summary()
    return time.monotonic() - started, info.value


def source(url: str, token_file: Path, pki: dict[str, Path], timeout_s: float = DEADLINE_S) -> KubeletSummarySource:
    return KubeletSummarySource(url, token_file=str(token_file), ca_file=str(pki["cert"]), timeout_s=timeout_s)


# --------------------------------------------------------------------------------------------------
# One deadline for the whole request


def test_a_server_trickling_bytes_faster_than_any_per_read_timeout_fails_at_the_deadline(
    serve: Serve, token_file: Path, pki: dict[str, Path]
) -> None:
    # One byte every 50 ms: each read alone is quick, so only a deadline over the whole request can end it.
    server = serve(trickle(http_response(SUMMARY_BODY), 0.05))
    elapsed, error = timed_failure(source(server.url(), token_file, pki))
    assert error.source == server.url()
    assert error.reason == f"timed out: no complete answer within {DEADLINE_S:g} s"
    assert DEADLINE_S - 0.05 < elapsed < DEADLINE_S + SLACK_S
    assert server.requests and f"Bearer {TOKEN}".encode() in server.requests[0], "the request itself went out"


def test_the_same_server_at_full_speed_is_read(serve: Serve, token_file: Path, pki: dict[str, Path]) -> None:
    """The control of the test above: the stand-in and the answer are fine, only the pace differs."""
    server = serve(trickle(http_response(SUMMARY_BODY), 0.0))
    assert source(server.url(), token_file, pki).summary().node.node_name == "node-1"


def test_a_tls_handshake_relayed_one_byte_at_a_time_fails_at_the_deadline(
    serve: Serve, token_file: Path, pki: dict[str, Path]
) -> None:
    kubelet = serve(answer(http_response(SUMMARY_BODY)))
    relay = serve(slow_relay(kubelet.port, 0.02), tls=False)
    url = f"https://127.0.0.1:{relay.port}/stats/summary"
    elapsed, error = timed_failure(source(url, token_file, pki))
    assert error.reason.startswith("timed out: ")
    assert elapsed < DEADLINE_S + SLACK_S
    assert kubelet.requests == [], "the handshake never completed, so no request (and no token) was sent"
    fast = serve(slow_relay(kubelet.port, 0.0), tls=False)
    got = source(f"https://127.0.0.1:{fast.port}/stats/summary", token_file, pki, timeout_s=5.0).summary()
    assert got.node.node_name == "node-1", "through a relay at full speed the same fetch works"


def configuration(tmp_path: Path, url: str, token_file: Path, pki: dict[str, Path], interval: str) -> Configuration:
    path = tmp_path / "evictd.yaml"
    path.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nstatsSource: kubelet\n"
                    f"kubeletSummaryURL: {url}\nkubeletTokenFile: {token_file}\nkubeletCAFile: {pki['cert']}\n"
                    f"housekeepingInterval: {interval}\n")
    return load_configuration([str(path)])


@pytest.mark.parametrize(
    "behaviour",
    [
        pytest.param(trickle(http_response(SUMMARY_BODY), 5.0), id="one-byte-every-5s"),
        pytest.param(silent, id="accepts-and-never-answers"),
    ],
)
def test_the_deadline_of_the_configured_source_is_half_the_housekeeping_interval(
    serve: Serve, tmp_path: Path, token_file: Path, pki: dict[str, Path], behaviour: Behaviour
) -> None:
    server = serve(behaviour)
    config = configuration(tmp_path, server.url(), token_file, pki, "1s")
    stats = build_stats_source(config, None, "node-1").source  # type: ignore[arg-type]  # unused by this source
    elapsed, error = timed_failure(stats)
    assert error.reason == "timed out: no complete answer within 0.5 s"
    assert elapsed < 0.5 + SLACK_S, "the next 1 s cycle must not be delayed"


# --------------------------------------------------------------------------------------------------
# A bounded body


@pytest.mark.parametrize("declared", [pytest.param(False, id="chunked"), pytest.param(True, id="content-length")])
def test_a_300_mib_body_is_not_read_past_the_limit_and_memory_stays_bounded(
    serve: Serve, token_file: Path, pki: dict[str, Path], declared: bool
) -> None:
    server = serve(big_body(HUGE_BYTES, declared=declared))
    tracemalloc.start()
    try:
        elapsed, error = timed_failure(source(server.url(), token_file, pki, timeout_s=10.0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.reason == "the Summary is larger than 8 MiB; not read further"
    assert peak < 16 << 20, f"{peak >> 20} MiB held while reading"
    # What the kernel's socket buffers took in beyond what was read: some MiB, never the whole body.
    assert server.bytes_sent < 48 << 20
    assert elapsed < 5.0


def test_a_body_just_under_the_limit_is_read(serve: Serve, token_file: Path, pki: dict[str, Path]) -> None:
    padded = SUMMARY_BODY[:-1] + b" " * ((8 << 20) - len(SUMMARY_BODY)) + b"}"
    assert len(padded) == 8 << 20
    server = serve(answer(http_response(padded, chunked=True)))
    assert source(server.url(), token_file, pki, timeout_s=10.0).summary().node.node_name == "node-1"

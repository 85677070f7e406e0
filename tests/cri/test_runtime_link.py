"""RuntimeLink: a container runtime that answers only after evictd started is attached once it does.

Against real endpoints: a socket path where nothing listens yet (and then a real containerd started on it),
and a Unix socket that accepts connections but never answers (a hung runtime), which must not hold the
housekeeping loop up for longer than the probe's deadline.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from containerd_harness import Containerd

from clocks import ManualClock
from evictd.adapters.runtime_node import CYCLE_READ_TIMEOUT_S, RuntimeFilesystems
from evictd.core.errors import CRIError
from evictd.core.unanswered import UNANSWERED_QUIET_S
from evictd.cri import RuntimeVersion
from evictd.cri.client import CriClient
from evictd.run.runtime_link import CriRuntime, RuntimeLink
from log_capture import LogCapture

RETRY_S = 5.0


class Attach:
    """Records the versions the link attached with; returns a token standing for the runtime's parts."""

    def __init__(self) -> None:
        self.versions: list[RuntimeVersion] = []

    def __call__(self, version: RuntimeVersion) -> str:
        self.versions.append(version)
        return f"parts of {version.runtime_name}"


def test_a_runtime_that_starts_later_is_attached_once_it_answers(unstarted_containerd: Containerd) -> None:
    clock, log, attach = ManualClock(), LogCapture(), Attach()
    client = CriClient(unstarted_containerd.endpoint, 10.0)
    link = RuntimeLink(client, attach, log, retry_s=RETRY_S, clock=clock)
    try:
        assert link.connect() is None
        assert link.slot.current is None and not link.slot.attached and attach.versions == []
        ((level, event, fields),) = log.lines
        assert level == "info"
        assert event.startswith("no container runtime answers")
        assert fields["endpoint"] == unstarted_containerd.endpoint and "UNAVAILABLE" in fields["error"]

        unstarted_containerd.start()
        clock.now_s += RETRY_S - 0.1
        assert link.poll() is None, "asked again only once the retry period has passed"
        assert attach.versions == []
        clock.now_s += 0.1
        assert link.poll() == "parts of containerd"
        assert link.slot.current == "parts of containerd", "the slot answers as the attached runtime"
        (version,) = attach.versions
        assert (version.runtime_name, version.runtime_api_version) == ("containerd", "v1")
        assert log.lines[-1] == ("info", "container runtime", {
            "endpoint": unstarted_containerd.endpoint, "runtime": "containerd", "version": version.runtime_version,
            "api": "v1", "unanswered_attempts": 1})

        clock.now_s += 3600
        assert link.poll() == "parts of containerd" and link.connect() == "parts of containerd"
        assert len(attach.versions) == 1, "attached once"
    finally:
        client.close()


def test_failed_attempts_are_logged_once(tmp_path: Path) -> None:
    clock, log, attach = ManualClock(), LogCapture(), Attach()
    client = CriClient(f"unix://{tmp_path}/nothing.sock", 10.0)
    link = RuntimeLink(client, attach, log, retry_s=RETRY_S, clock=clock)
    try:
        for _ in range(4):
            assert link.poll() is None
            clock.now_s += RETRY_S
        assert len(log.lines) == 1 and attach.versions == []
    finally:
        client.close()


def test_a_runtime_that_never_answers_costs_the_loop_one_probe_deadline(tmp_path: Path) -> None:
    path = tmp_path / "hung.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(8)  # accepts (the kernel completes the connection) but never speaks HTTP/2
        client = CriClient(f"unix://{path}", 10.0)
        link = RuntimeLink(client, Attach(), LogCapture(), probe_timeout_s=0.5, clock=ManualClock())
        try:
            started = time.monotonic()
            assert link.connect() is None
            elapsed = time.monotonic() - started
        finally:
            client.close()
    assert 0.4 <= elapsed < 2.0, f"the probe took {elapsed:.2f} s (client deadline 10 s, probe deadline 0.5 s)"


def test_a_runtime_that_stops_answering_costs_a_cycle_one_short_read_deadline(tmp_path: Path) -> None:
    """Issue 36's arena: containerd in a thrashing node answered nothing for a minute; each cycle waited the client's
    10 s per stats call (ListContainerStats, ListContainers, ListPodSandbox, ImageFsInfo: 40 s) while the node
    needed an eviction. A cycle's reads now wait CYCLE_READ_TIMEOUT_S once; the rest fail at once for
    UNANSWERED_QUIET_S, then the runtime is asked again."""
    path = tmp_path / "hung.sock"
    clock = ManualClock()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(8)  # accepts but never speaks HTTP/2: every call waits for its deadline
        client = CriClient(f"unix://{path}", 10.0)
        runtime = CriRuntime(client, RuntimeFilesystems(client, str(tmp_path), str(tmp_path), clock=clock), gc=None,
                             clock=clock)
        try:
            started = time.monotonic()
            errors = []
            for read in (runtime.container_stats, runtime.sandbox_stats, runtime.list_sandboxes):
                with pytest.raises(CRIError) as caught:
                    read()
                errors.append(caught.value)
            assert runtime.pod_running("uid-1") is None
            assert runtime.filesystem_paths() == (str(tmp_path), str(tmp_path))  # the configured ones, not asked
            elapsed = time.monotonic() - started
            clock.advance(UNANSWERED_QUIET_S)
            again = time.monotonic()
            with pytest.raises(CRIError, match="DEADLINE_EXCEEDED"):
                runtime.container_stats()  # asked again after the quiet period: one more deadline
            asked_again = time.monotonic() - again
        finally:
            client.close()
    assert [e.code for e in errors] == ["DEADLINE_EXCEEDED"] * 3
    assert "not asked" in str(errors[1]) and "not asked" in str(errors[2])
    assert elapsed < CYCLE_READ_TIMEOUT_S + 1.0, elapsed  # one read deadline, not 10 s a call
    assert CYCLE_READ_TIMEOUT_S - 0.2 <= asked_again < CYCLE_READ_TIMEOUT_S + 1.0, asked_again

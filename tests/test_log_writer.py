"""Queued log output (src/evictd/observe/log_writer.py, wired by logging_setup): on real pipes whose reader stops.

A pipe's writer blocks once its 64 KiB are full; these tests fill a real pipe (through a second, non-blocking
descriptor of its write end), then log through the real structlog configuration `evictd run` uses and read
back what arrives once the test reads again.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TextIO

import pytest
import structlog

from evictd.observe.log_writer import MAX_QUEUED_CHARS, LogWriter
from evictd.observe.logging_setup import configure_logging, flush_logs
from evictd.observe.metrics import Metrics
from evictd.run.composition import DEADLINE_LOG_FLUSH_S
from full_pipe import fill_pipe

# Generous under load: a call that waited for the pipe would take the whole 2 s the reader is stopped.
PROMPT_S = 0.5


@dataclass
class Pipe:
    """A real pipe: `stream` is its write end as a text file; what arrives is read only when asked."""

    read_fd: int
    stream: TextIO
    received: bytearray = field(default_factory=bytearray)

    def fill(self) -> int:
        return fill_pipe(f"/proc/self/fd/{self.stream.fileno()}")

    def read_until(self, text: str, timeout_s: float = 20.0) -> list[dict[str, Any]]:
        """Read until a line holding `text` has arrived; return every event read so far but the filler."""
        deadline = time.monotonic() + timeout_s
        os.set_blocking(self.read_fd, False)
        while text.encode() not in self.received:
            assert time.monotonic() < deadline, f"{text!r} did not arrive; got {bytes(self.received[-300:])!r}"
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            assert chunk, "the pipe closed"
            self.received += chunk
        return events(self.received)


def events(data: bytes) -> list[dict[str, Any]]:
    parsed = [json.loads(line) for line in data.decode().splitlines()]
    return [event for event in parsed if event["event"] != "filler"]


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    read_fd, write_fd = os.pipe()
    stream = os.fdopen(write_fd, "w", encoding="utf-8")
    yield Pipe(read_fd, stream)
    # Back to structlog's defaults; the queued writer of the test is flushed and ended first.
    configure_logging("json", stream=sys.stdout)
    structlog.reset_defaults()
    for close in (stream.close, lambda: os.close(read_fd)):
        with contextlib.suppress(OSError):  # closed by the test
            close()


def timed_calls(log: Any, count: int, **fields: object) -> float:
    """Log `count` events numbered `n`; return the longest call."""
    longest = 0.0
    for n in range(count):
        started = time.monotonic()
        log.info("numbered", n=n, **fields)
        longest = max(longest, time.monotonic() - started)
    return longest


def test_a_log_call_returns_at_once_while_the_pipe_is_full_and_the_lines_follow_in_order(pipe: Pipe) -> None:
    pipe.fill()
    configure_logging("json", stream=pipe.stream, queued=True)
    log = structlog.get_logger("evictd")
    logged_at = time.time()
    first = timed_calls(log, 50)
    time.sleep(2)  # the reader still stopped: the writer thread has waited 2 s on the full pipe
    started = time.monotonic()
    log.info("threshold met", threshold="memory.available<1Gi")
    later = time.monotonic() - started
    assert first < PROMPT_S and later < PROMPT_S, f"a log call took {max(first, later):.3f} s on a full pipe"
    got = pipe.read_until("threshold met")
    assert [e.get("n") for e in got] == [*range(50), None]
    assert got[-1]["event"] == "threshold met" and got[-1]["level"] == "info"
    # Each line was rendered when it was logged, not when the reader took it 2 s later.
    assert datetime.fromisoformat(got[0]["timestamp"]).timestamp() - logged_at < 1.0


def test_past_4_mib_lines_are_dropped_counted_and_a_line_says_how_many(pipe: Pipe) -> None:
    pipe.fill()
    metrics = Metrics()
    configure_logging("json", stream=pipe.stream, queued=True, on_drop=metrics.log_lines_dropped.inc)
    log = structlog.get_logger("evictd")
    padding = "x" * 1000
    total = MAX_QUEUED_CHARS // 1000 + 500
    longest = timed_calls(log, total, padding=padding)
    assert longest < PROMPT_S
    dropped = metrics.registry.get_sample_value("evictd_log_lines_dropped_total")
    assert dropped is not None and dropped >= 400
    pipe.read_until("log lines dropped")
    log.info("after the gap")  # the writer has caught up: written again
    got = pipe.read_until("after the gap")
    kept = [e["n"] for e in got if e["event"] == "numbered"]
    assert kept == list(range(total - int(dropped))), "the lines that fit, in order, then none"
    kept_chars = sum(len(line) + 1 for line in pipe.received.decode().splitlines() if '"numbered"' in line)
    assert MAX_QUEUED_CHARS - 1200 < kept_chars <= MAX_QUEUED_CHARS, "what was kept is what the bound holds"
    notice, after = got[len(kept):]
    assert notice["event"] == "log lines dropped" and notice["level"] == "warning"
    assert notice["dropped"] == dropped == total - len(kept)
    assert after["event"] == "after the gap"


def test_once_dropping_every_line_is_dropped_until_the_writer_catches_up(pipe: Pipe) -> None:
    # A short line would fit after a long one is dropped; it is dropped too, so the notice marks one gap.
    pipe.fill()
    writer = LogWriter(pipe.stream, lambda count: json.dumps({"event": "log lines dropped", "dropped": count}),
                       max_chars=200)
    writer.msg(json.dumps({"event": "first", "pad": "x" * 100}))
    writer.msg(json.dumps({"event": "too long", "pad": "x" * 100}))
    writer.msg(json.dumps({"event": "short"}))
    writer.flush(0.5)  # the reader is stopped: nothing can be written yet
    got = pipe.read_until("dropped")
    writer.msg(json.dumps({"event": "after"}))
    got = pipe.read_until('"after"')
    assert [e["event"] for e in got] == ["first", "log lines dropped", "after"]
    assert got[1]["dropped"] == 2
    assert writer.close(5)


def test_flush_waits_for_the_queued_lines_and_no_longer_than_asked(pipe: Pipe) -> None:
    pipe.fill()
    configure_logging("json", stream=pipe.stream, queued=True)
    log = structlog.get_logger("evictd")
    for n in range(200):
        log.info("numbered", n=n, padding="y" * 500)  # 100 KiB: more than the pipe holds
    log.info("evictd stopped", cycles=3)
    started = time.monotonic()
    assert not flush_logs(0.5), "nothing can be written while the reader is stopped"
    assert time.monotonic() - started < 0.5 + PROMPT_S
    reader = threading.Thread(target=pipe.read_until, args=("evictd stopped",), daemon=True)
    threading.Timer(1.0, reader.start).start()
    assert flush_logs(10.0)
    reader.join(20)
    got = events(pipe.received)
    assert [e["n"] for e in got[:-1]] == list(range(200))
    assert got[-1] == {**got[-1], "event": "evictd stopped", "cycles": 3}


@pytest.mark.parametrize("failure", ["reader gone (EPIPE)", "descriptor closed (EBADF)"])
def test_a_failed_write_stops_the_writer_quietly(pipe: Pipe, failure: str) -> None:
    counted: list[int] = []
    writer = LogWriter(pipe.stream, str, on_drop=counted.append, name=f"log-writer {failure}")
    writer.msg('{"event": "written"}')
    assert writer.flush(5)
    assert pipe.read_until("written")[0]["event"] == "written"
    if "EPIPE" in failure:
        os.close(pipe.read_fd)
    else:
        os.close(pipe.stream.fileno())
    for n in range(100):
        writer.msg(f'{{"event": "lost", "n": {n}}}')  # never raises into the caller
    assert writer.flush(5)
    assert isinstance(writer.failed, BrokenPipeError if "EPIPE" in failure else OSError)
    assert sum(counted) == 100, "the lines of the failed write and every one after it are counted"
    # The thread has ended: nothing retries, nothing spins.
    assert not [t for t in threading.enumerate() if t.name == f"log-writer {failure}"]
    started = time.monotonic()
    writer.msg('{"event": "after the failure"}')
    assert time.monotonic() - started < PROMPT_S
    assert sum(counted) == 101


EXITING = """
import structlog, sys, time
from evictd.observe.logging_setup import configure_logging
from evictd.run.composition import exit_after_logs
configure_logging("json", queued=True)
log = structlog.get_logger("evictd")
for n in range(1000):
    log.info("numbered", n=n, padding="z" * 200)
log.info("evictd stopped")
if sys.argv[1] == "deadline":
    if sys.argv[2:]:
        print(time.monotonic(), file=sys.stderr, flush=True)
    exit_after_logs(1)
"""


@pytest.mark.parametrize(("how", "status"), [("interpreter exit", 0), ("deadline", 1)])
def test_at_exit_the_queued_lines_are_written(how: str, status: int) -> None:
    # 230 KiB queued when the process exits (normally, or at once as the shutdown deadline ends it); the reader
    # starts a second later.
    child = subprocess.Popen([sys.executable, "-c", EXITING, how], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.0)
    out, err = child.communicate(timeout=30)
    assert child.returncode == status, err.decode()
    got = events(out)
    assert [e.get("n") for e in got] == [*range(1000), None]
    assert got[-1]["event"] == "evictd stopped"
    assert err == b""


def test_at_the_deadline_exit_a_reader_that_never_reads_holds_evictd_2_s_at_most() -> None:
    child = subprocess.Popen([sys.executable, "-c", EXITING, "deadline", "say when"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None and child.stdout is not None
    exiting_at = float(child.stderr.readline())  # the same system-wide monotonic clock
    while child.poll() is None:
        assert time.monotonic() - exiting_at < DEADLINE_LOG_FLUSH_S + 2.0, "the exit waited beyond its bound"
        time.sleep(0.05)
    assert child.returncode == 1
    assert time.monotonic() - exiting_at >= DEADLINE_LOG_FLUSH_S - 0.1, "it gave the lines their time"
    child.stdout.close()
    child.stderr.close()

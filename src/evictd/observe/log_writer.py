"""Log lines written off the caller's thread: a bounded queue and one writer thread (issue #29).

`evictd run`'s log goes to stdout (or stderr), usually a pipe to journald or to the container runtime's shim, which
write it to disk. When that reader is slow (a node writing hard), the pipe's 64 KiB fill and a plain `print`
waits: the housekeeping loop, and with it the next decision, would wait for someone else's disk. A `LogWriter`
is the structlog logger instead: the caller's thread only appends the rendered line to a queue; one daemon thread
writes the queue to the stream, in order, as fast as the reader takes it.

- Bounded in characters (`MAX_QUEUED_CHARS`, 4 Mi: JSON lines are ASCII, so 4 MiB; lines waiting and being
  written both count), whatever the lines' sizes. A line that does not fit is dropped, never waited for, and so
  is every line after it until the writer has caught up (written every line queued before the drop, at most
  `BATCH_CHARS` at a time); then it writes one line saying how many were dropped (`notice`, rendered like any
  other line), so the gap is where it shows. `on_drop` counts the dropped lines (`evictd_log_lines_dropped_total`).
- `flush` waits (bounded) until everything queued is written; `atexit` flushes for at most `EXIT_FLUSH_S`.
- A stream with a file descriptor is written with `os.write` on that descriptor, not through Python's buffered
  file: a writer blocked in a buffered write would hold the buffer's lock, and the interpreter's last flush of
  stdout at exit would then end the process with a fatal error.
- When a write fails (EPIPE: the reader went away; EBADF: the descriptor was closed) the writer stops writing
  for good: that batch and every line after it are dropped and counted, nothing is retried, the thread ends.
  The caller never sees the error. A non-blocking descriptor that is full is waited on with `select`.
"""

from __future__ import annotations

import atexit
import collections
import io
import os
import select
import threading
from collections.abc import Callable
from typing import TextIO

# What may wait to be written: about 10,000 JSON lines, minutes of the daemon's output with the reader stalled.
MAX_QUEUED_CHARS = 4 * 1024 * 1024
# At interpreter exit, how long the last lines may still take.
EXIT_FLUSH_S = 5.0
# What the writer takes at a time: joining and encoding a batch holds the interpreter's lock, which the caller's
# thread then waits for; a small batch keeps that wait short (tens of microseconds).
BATCH_CHARS = 64 * 1024


def _file_descriptor(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (io.UnsupportedOperation, AttributeError, ValueError):  # StringIO, pytest's capture, a closed file
        return None


class LogWriter:
    """A structlog logger (`msg` and its level aliases) writing each line to `stream` on a thread of its own."""

    def __init__(self, stream: TextIO, notice: Callable[[int], str], *, max_chars: int = MAX_QUEUED_CHARS,
                 on_drop: Callable[[int], object] | None = None, name: str = "evictd-log-writer") -> None:
        self._stream = stream
        self._fd = _file_descriptor(stream)
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        self._notice = notice
        self._max_chars = max_chars
        self._on_drop = on_drop
        self._lines: collections.deque[str] = collections.deque()  # waiting, oldest first
        self._chars = 0  # of the lines waiting and being written
        self._unsaid = 0  # lines dropped since the writer last took the queue
        self._busy = False
        self._failed: Exception | None = None
        self._closing = False
        self._stopped = False  # the thread has ended (closed, or its stream failed): lines are dropped
        self._changed = threading.Condition()
        stream.flush()  # what was printed before goes first
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()
        atexit.register(self.flush, EXIT_FLUSH_S)

    def msg(self, message: str) -> None:
        """Queue one line; never waits for the stream."""
        line = message + "\n"
        with self._changed:
            queued = not self._stopped and not self._unsaid and self._chars + len(line) <= self._max_chars
            if queued:
                self._lines.append(line)
                self._chars += len(line)
                self._changed.notify_all()
            elif not self._stopped:
                self._unsaid += 1
        if not queued:
            self._dropped(1)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg

    @property
    def failed(self) -> Exception | None:
        """The error that stopped the writer, if one did."""
        return self._failed

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued line is written or the writer has stopped (at most `timeout_s`); return
        whether it has."""
        with self._changed:
            return self._changed.wait_for(self._idle, timeout_s)

    def close(self, timeout_s: float | None = EXIT_FLUSH_S) -> bool:
        """Flush (at most `timeout_s`), then end the thread once it is idle; lines queued later are dropped."""
        atexit.unregister(self.flush)
        with self._changed:
            done = self._changed.wait_for(self._idle, timeout_s)
            self._closing = True
            self._changed.notify_all()
        return done

    def _idle(self) -> bool:
        return self._stopped or (not self._lines and not self._unsaid and not self._busy)

    def _dropped(self, count: int) -> None:
        if count and self._on_drop is not None:
            self._on_drop(count)

    def _work(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._lines or self._unsaid or self._closing))
                if self._closing and not self._lines and not self._unsaid:
                    self._stopped = True
                    self._changed.notify_all()
                    return
                lines: list[str] = []
                size = 0
                while self._lines and (not lines or size + len(self._lines[0]) <= BATCH_CHARS):
                    lines.append(self._lines.popleft())
                    size += len(lines[-1])
                unsaid = 0
                if not self._lines:  # every line waiting came before the ones dropped: the notice follows them
                    unsaid, self._unsaid = self._unsaid, 0
                self._busy = True
            text = "".join(lines)
            if unsaid:
                text += self._notice(unsaid) + "\n"
            error = self._write(text)
            with self._changed:
                self._chars -= size
                self._busy = False
                lost = 0
                if error is not None:
                    lost = len(lines) + len(self._lines)
                    self._failed, self._stopped, self._chars, self._unsaid = error, True, 0, 0
                    self._lines.clear()
                self._changed.notify_all()
            if error is not None:
                self._dropped(lost)
                return

    def _write(self, text: str) -> Exception | None:
        """Write `text` whole; return the error that stopped it, if one did."""
        try:
            if self._fd is None:
                self._stream.write(text)
                self._stream.flush()
                return None
            data = memoryview(text.encode(self._encoding, "backslashreplace"))
            while data:
                try:
                    data = data[os.write(self._fd, data):]
                except BlockingIOError:  # a descriptor someone made non-blocking: wait until it takes more
                    select.select([], [self._fd], [])
        except (OSError, ValueError) as exc:  # EPIPE, EBADF, a closed file
            return exc
        return None

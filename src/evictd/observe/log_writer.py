"""Log lines written off the caller's thread: a bounded queue and one writer thread.

`evictd run` logs to a pipe (journald, the runtime's shim); when its reader is slow the pipe fills and a plain write
would hold the loop, and the next decision, on someone else's disk. A `LogWriter` is the structlog logger: the caller
only queues the rendered line; one daemon thread writes the queue in order. Bounded at `MAX_QUEUED_CHARS`: a line
that does not fit is dropped, and every line after it until the writer caught up, then one `notice` line says how
many (`on_drop` counts them). `flush` waits, bounded (`atexit`: `EXIT_FLUSH_S`). A stream with a descriptor is
written with `os.write` (a writer blocked in a buffered write would hold the buffer's lock and make the interpreter's
exit flush fatal). A failed write (EPIPE, EBADF) stops the writer for good, dropping and counting the rest; the
caller never sees it. A full non-blocking descriptor is waited on with `select`.
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
# What the writer takes at a time: a batch is joined holding the interpreter's lock, so a small one keeps waits short.
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

    def _queue(self, message: str) -> None:
        """Queue one line; never waits for the stream (structlog calls it by its level's name: `msg`, `info`...)."""
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

    msg = log = debug = info = warn = warning = _queue
    fatal = failure = err = error = critical = exception = _queue

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

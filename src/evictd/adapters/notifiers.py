"""What the housekeeping loop sleeps on: notifiers, kernel wake-ups that cut its sleep short, and the Waiter.

Job: wait on the notifiers' pollable file descriptors together with a deadline and an external wake-up (a
signal handler or another thread). The notifiers are cgroup v1 memory usage thresholds
(`evictd.adapters.memcg_notifier`, armed and re-armed by `evictd.adapters.memcg_notifier_set`) and PSI triggers
(`evictd.adapters.psi_notifier`); here are the protocol they meet (`Notifier`, `Rechecking`) and the descriptor
bookkeeping they share (`FdOwner`, `os_sample_error`, `close_quietly`).

Invariants:

* Every notifier owns exactly one file descriptor, opened O_CLOEXEC; a failed constructor closes
  whatever it opened and raises SampleError naming the file (a bad PSI trigger raises ConfigError
  before anything is opened). ``close()`` is idempotent.
* PSI files report POLLIN (and POLLOUT) on every poll, whether a trigger fired or not, so a notifier
  declares the poll bits that mean "fired" (`Notifier.poll_events`) and the Waiter looks at those only.
* `Waiter.wake` only writes one byte to a non-blocking self-pipe, so it is safe from a signal handler
  or another thread; wake-ups are never lost (a wake before `wait` makes the next `wait` return at once)
  and many wake-ups coalesce. Everything else in a Waiter, `close` included, is for the thread that
  calls `wait` (a thread must not call `wake` while another closes the Waiter).
* A notifier whose descriptor reports an error or hang-up is dropped from the poll set, so a broken
  descriptor cannot make `wait` spin; it stays dropped until the next `set_notifiers`.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from evictd.core.errors import SampleError
from evictd.core.wake import Wake

# The self-pipe is drained in reads of this size; a pipe holds 64 KiB by default.
PIPE_DRAIN_BYTES = 65536
# poll(2) takes a C int of milliseconds; longer waits are cut to this (about 24 days).
MAX_POLL_TIMEOUT_MS = 2**31 - 1
_BROKEN_EVENTS = select.POLLERR | select.POLLHUP | select.POLLNVAL
_MS_PER_S = 1000


class Notifier(Protocol):
    """Something the housekeeping loop can poll: one descriptor that becomes ready when memory changes."""

    @property
    def description(self) -> str: ...  # what crossed, in the kubelet's words ("hard memory eviction threshold")

    @property
    def cause(self) -> str: ...  # metric label of the wake-up: "memcg" or "psi"

    @property
    def poll_events(self) -> int: ...  # the poll bits that mean "fired" (POLLIN: eventfd, POLLPRI: PSI trigger)

    def fileno(self) -> int: ...  # the descriptor to poll

    def consume(self) -> None: ...  # acknowledge a firing: the descriptor is not ready again until the next one

    def close(self) -> None: ...  # release the descriptor (and with it the kernel registration); idempotent


@runtime_checkable
class Rechecking(Protocol):
    """A notifier that is sometimes blind (`MemcgNotifierSet` while the kernel registers a lower level): the Waiter
    then polls at most `recheck_s` apart and asks `recheck` whether what it would have announced happened."""

    @property
    def recheck_s(self) -> float | None: ...  # None: not blind, the descriptor alone says it

    def recheck(self) -> bool: ...  # True: it fired (its `cause` and `description` say what)


def os_sample_error(path: str, exc: OSError) -> SampleError:
    """Return the SampleError for an OSError raised while working on `path` (the one mapping place)."""
    name = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    reason = exc.strerror or str(exc)
    return SampleError(path, f"{name}: {reason}" if name else reason)


def close_quietly(fd: int) -> None:
    # Nothing useful can be done about a failed close of a descriptor that is being given up (or of -1: none).
    with contextlib.suppress(OSError):
        os.close(fd)


class FdOwner:
    """Shared descriptor bookkeeping of the notifiers: fileno and an idempotent close."""

    _fd: int
    description: str

    def fileno(self) -> int:
        """Return the descriptor; raises ValueError once closed (as a closed file object does)."""
        if self._fd < 0:
            raise ValueError(f"notifier {self.description!r} is closed")
        return self._fd

    def close(self) -> None:
        """Close the descriptor, which also removes the kernel registration. Idempotent."""
        fd, self._fd = self._fd, -1
        close_quietly(fd)


class Waiter:
    """Waits for the earliest of a deadline, a notifier firing, or `wake` (from a signal handler or thread)."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._notifiers: tuple[Notifier, ...] = ()
        self._by_fd: dict[int, Notifier] = {}
        self._poll = self._new_poll()
        self._pipe_only = select.poll()  # `wait(..., notifiers=False)`: the self-pipe alone
        self._pipe_only.register(self._read_fd, select.POLLIN)

    @property
    def notifiers(self) -> tuple[Notifier, ...]:
        """The notifiers currently in use (including broken ones, until replaced)."""
        return self._notifiers

    def _new_poll(self) -> select.poll:
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        for notifier in self._notifiers:
            fd = notifier.fileno()
            self._by_fd[fd] = notifier
            poller.register(fd, notifier.poll_events)
        return poller

    def set_notifiers(self, notifiers: Sequence[Notifier]) -> None:
        """Use `notifiers` from now on; previous notifiers that are not among them are closed."""
        self._check_open()
        # Duplicates are dropped by identity (notifiers need not be hashable); order is kept.
        new = {id(notifier): notifier for notifier in notifiers}
        for old in self._notifiers:
            if id(old) not in new:
                old.close()
        self._notifiers = tuple(new.values())
        self._by_fd = {}
        self._poll = self._new_poll()

    def wake(self) -> None:
        """Make the current or next `wait` return ``["signal"]``. Async-signal-safe; no-op once closed."""
        # A full pipe already holds a pending wake-up; a pipe closed by close() (-1) has nobody left to wake.
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"\0")

    def pending(self) -> bool:
        """Whether the next `wait` would return at once: `wake` was called, or a notifier's event is ready (a blind
        notifier's recheck is not run). Nothing is consumed. For a wait elsewhere on the loop (the node report's)
        that a wake-up should end."""
        self._check_open()
        for fd, revents in self._poll.poll(0):
            if fd == self._read_fd:
                return True
            notifier = self._by_fd.get(fd)
            if notifier is not None and revents & (notifier.poll_events | _BROKEN_EVENTS):
                return True
        return False

    def wait(self, timeout_s: float, *, notifiers: bool = True) -> list[str]:
        """Block until something fires or `timeout_s` passes; return the causes that fired, in order.

        Returns ``[]`` on timeout, ``"signal"`` for `wake`, and each firing notifier's cause once
        (``"memcg"``, ``"psi"``). Fired events are consumed, so they are not reported twice. A signal
        whose handler does not call `wake` does not end the wait early (the poll is resumed).
        With `notifiers` False only `wake` ends the wait early: the notifiers are neither polled nor rechecked,
        and what fires meanwhile stays pending for the next wait that polls them.
        Raises SampleError if consuming an event fails.
        """
        self._check_open()
        deadline = time.monotonic() + timeout_s
        if not notifiers:
            while True:
                left_ms = max(0, math.ceil(min((deadline - time.monotonic()) * _MS_PER_S, MAX_POLL_TIMEOUT_MS)))
                if self._pipe_only.poll(left_ms):
                    self._drain_pipe()
                    return [Wake.SIGNAL]
                if time.monotonic() >= deadline:
                    return []
        while True:
            blind = [n for n in self._notifiers if isinstance(n, Rechecking) and n.recheck_s is not None]
            left_s = max(0.0, deadline - time.monotonic())
            step_s = min([left_s, *(n.recheck_s for n in blind if n.recheck_s is not None)])
            timeout_ms = max(0, math.ceil(min(step_s * _MS_PER_S, MAX_POLL_TIMEOUT_MS)))
            ready = self._poll.poll(timeout_ms)
            if ready:
                return self._fired(ready)
            rechecked = [n.cause for n in blind if n.recheck()]
            if rechecked or step_s >= left_s:
                return list(dict.fromkeys(rechecked))

    def _fired(self, ready: list[tuple[int, int]]) -> list[str]:
        causes: list[str] = []
        for fd, revents in ready:
            if fd == self._read_fd:
                self._drain_pipe()
                cause: str = Wake.SIGNAL
            else:
                notifier = self._by_fd.get(fd)
                if notifier is None:
                    continue
                if revents & _BROKEN_EVENTS:
                    self._poll.unregister(fd)
                    del self._by_fd[fd]
                elif revents & notifier.poll_events:
                    notifier.consume()
                else:
                    continue  # e.g. POLLIN of a PSI file, which is always set and means nothing
                cause = notifier.cause
            if cause not in causes:
                causes.append(cause)
        return causes

    def _drain_pipe(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read_fd, PIPE_DRAIN_BYTES):
                pass

    def _check_open(self) -> None:
        if self._read_fd < 0:
            raise ValueError("Waiter is closed")

    def close(self) -> None:
        """Close every notifier and the self-pipe. Idempotent."""
        for notifier in self._notifiers:
            notifier.close()
        self._notifiers = ()
        self._by_fd = {}
        read_fd, write_fd = self._read_fd, self._write_fd
        self._read_fd = self._write_fd = -1
        close_quietly(write_fd)
        close_quietly(read_fd)

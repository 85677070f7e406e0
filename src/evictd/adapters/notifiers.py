"""What the housekeeping loop sleeps on: the `Notifier` shape, the kernel's notifiers, and the `Waiter`.

The kernel's notifiers: a cgroup v1 usage level (`MemcgThresholdNotifier`, the kubelet's memcg notifier, an eventfd
registered through ``cgroup.event_control``) and a PSI trigger (`PsiNotifier`); the watches are in `sensors`.
Invariants: one descriptor each, O_CLOEXEC; a failed constructor closes what it opened and raises SampleError naming
the file (a PSI trigger the kernel would refuse: ConfigError first); ``close()`` is idempotent; `poll_events` are
the bits that mean "fired" (PSI files always report POLLIN). `Waiter.wake` writes a byte to a non-blocking
self-pipe (signal-safe, coalesced); a descriptor in error or hung up leaves the poll set until `set_notifiers`.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from evictd.adapters import procfs
from evictd.core.errors import SampleError
from evictd.core.memcg import Watch, memcg_notifier_description
from evictd.core.psi import format_us, psi_trigger
from evictd.core.thresholds import Threshold
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


def os_sample_error(path: str, exc: OSError) -> SampleError:
    """The SampleError for an OSError raised on `path` (the one mapping place)."""
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
        """The descriptor; ValueError once closed (as a closed file object)."""
        if self._fd < 0:
            raise ValueError(f"notifier {self.description!r} is closed")
        return self._fd

    def close(self) -> None:
        """Close the descriptor (and with it the kernel registration). Idempotent."""
        fd, self._fd = self._fd, -1
        close_quietly(fd)

    def _read_eventfd(self, name: str) -> None:
        """Reset the eventfd's counter (already read: nothing since); SampleError naming `name`."""
        try:
            os.eventfd_read(self.fileno())
        except BlockingIOError:
            pass
        except OSError as exc:
            raise os_sample_error(name, exc) from exc


class Waiter:
    """Waits for the earliest of a deadline, a notifier firing, or `wake` (from a signal handler or thread)."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        """`monotonic`: the loop's clock (the sensors' deadlines count by it)."""
        self.monotonic = monotonic
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._notifiers: tuple[Notifier, ...] = ()
        self._poll = self._pipe_only = self._new_poll()  # the self-pipe alone (notifiers=False keeps it)

    @property
    def notifiers(self) -> tuple[Notifier, ...]:
        """The notifiers currently in use (including broken ones, until replaced)."""
        return self._notifiers

    def _new_poll(self) -> select.poll:
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        self._by_fd: dict[int, Notifier] = {}
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
        self._poll = self._new_poll()

    @property
    def wakeup_fd(self) -> int:
        """The self-pipe's write end (non-blocking): for `signal.set_wakeup_fd`, so that a signal delivered to another
        thread still ends the main thread's `wait`."""
        return self._write_fd

    def wake(self) -> None:
        """Make the current or next `wait` return ``["signal"]``. Async-signal-safe; no-op once closed."""
        # A full pipe already holds a pending wake-up; a pipe closed by close() (-1) has nobody left to wake.
        with contextlib.suppress(OSError):
            os.write(self._write_fd, b"\0")

    def pending(self) -> bool:
        """Whether the next `wait` would return at once: `wake` was called, or a notifier's event is ready. Nothing is
        consumed. For a wait elsewhere on the loop (the node report's) that a wake-up should end."""
        self._check_open()
        for fd, revents in self._poll.poll(0):
            if fd == self._read_fd:
                return True
            notifier = self._by_fd.get(fd)
            if notifier is not None and revents & (notifier.poll_events | _BROKEN_EVENTS):
                return True
        return False

    def wait(self, timeout_s: float, *, notifiers: bool = True) -> list[str]:
        """Block until something fires or `timeout_s` passes; the causes that fired, in order, each once (``[]`` on
        timeout, ``"signal"`` for `wake`), consumed. With `notifiers` False only `wake` ends it (what fires meanwhile
        stays pending). A signal whose handler does not call `wake` does not end it. SampleError if a consume fails."""
        self._check_open()
        ready = (self._poll if notifiers else self._pipe_only).poll(
            max(0, math.ceil(min(timeout_s * _MS_PER_S, MAX_POLL_TIMEOUT_MS))))
        return self._fired(ready) if ready else []

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


MEMORY_USAGE_FILE = "memory.usage_in_bytes"
EVENT_CONTROL_FILE = "cgroup.event_control"


class MemcgThresholdNotifier(FdOwner):
    """A cgroup v1 memory usage threshold: an eventfd signalled when usage crosses `threshold_bytes`."""

    poll_events = select.POLLIN
    cause = Wake.MEMCG

    def __init__(self, cgroup_dir: str, threshold_bytes: int, description: str, *, usage_seen: int | None = None
                 ) -> None:
        """Register the threshold on ``<cgroup_dir>/memory.usage_in_bytes``; when usage read after it is on the other
        side of the level from `usage_seen`, it crossed before the kernel watched and the eventfd is signalled here.
        SampleError (naming the file) for a negative level, missing v1 files, or a refused registration."""
        self._fd = -1
        self.cgroup_dir = cgroup_dir
        self.threshold_bytes = threshold_bytes
        self.description = description
        usage_path = os.path.join(cgroup_dir, MEMORY_USAGE_FILE)
        control_path = os.path.join(cgroup_dir, EVENT_CONTROL_FILE)
        if threshold_bytes < 0:
            raise SampleError(control_path, f"cannot register a negative threshold of {threshold_bytes} bytes")
        watch_fd = control_fd = event_fd = -1
        current = usage_path
        try:
            watch_fd = os.open(usage_path, os.O_RDONLY | os.O_CLOEXEC)
            current = control_path
            control_fd = os.open(control_path, os.O_WRONLY | os.O_CLOEXEC)
            event_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            # The registration outlives both files: only the eventfd has to stay open (as in the kubelet).
            os.write(control_fd, f"{event_fd} {watch_fd} {threshold_bytes}".encode())
            current = usage_path
            if usage_seen is not None and _crossed(usage_seen, int(os.pread(watch_fd, 32, 0)), threshold_bytes):
                os.eventfd_write(event_fd, 1)
        except (OSError, ValueError) as exc:
            close_quietly(event_fd)
            if isinstance(exc, ValueError):
                raise SampleError(current, f"not a number: {exc}") from exc
            raise os_sample_error(current, exc) from exc
        finally:
            close_quietly(control_fd)
            close_quietly(watch_fd)
        self._fd = event_fd

    def consume(self) -> None:
        self._read_eventfd(f"eventfd of {os.path.join(self.cgroup_dir, MEMORY_USAGE_FILE)}")


def _crossed(before: int, after: int, level: int) -> bool:
    """True when usage went from one side of `level` to the other (below vs at or above)."""
    return (before < level) != (after < level)


@dataclass(frozen=True, slots=True)
class NotifierFailure:
    """A memcg notifier that could not be armed: the threshold it watches, which notifier of it, why."""

    threshold: Threshold
    watch: Watch
    error: SampleError

    @property
    def description(self) -> str:
        """What the notifier is called in logs."""
        return memcg_notifier_description(self.threshold, self.watch)


SYSTEM_MEMORY_PRESSURE = "/proc/pressure/memory"

class PsiNotifier(FdOwner):
    """A PSI trigger on /proc/pressure/memory or a v2 cgroup's memory.pressure; fires with POLLPRI."""

    poll_events = select.POLLPRI

    def __init__(self, path: str, stall_us: int, window_us: int, kind: str = "some", description: str = "", *,
                 privileged: bool | None = None, judge: Callable[[], bool] | None = None,
                 on_fire: Callable[[], None] | None = None) -> None:
        """Open `path` and write the trigger (`privileged`: CAP_SYS_RESOURCE, None: read it). At each firing
        `on_fire` is told first, then `judge` asked whether it may change the decision (no: cause ``psi_far``).
        ConfigError (before opening) for a trigger the kernel would refuse; SampleError naming `path` else."""
        self._fd = -1
        self.path = path
        self.cause = Wake.PSI
        self._judge = judge
        self._on_fire = on_fire
        resource = os.path.basename(path.rstrip("/")).removesuffix(".pressure")  # memory.pressure: memory
        self.description = description or f"psi {resource} {kind} {format_us(stall_us)}/{format_us(window_us)}"
        if privileged is None:
            privileged = procfs.has_cap_sys_resource()
        trigger = psi_trigger(kind, stall_us, window_us, privileged=privileged)
        fd = -1
        try:
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            # NUL-terminated: psi_write() in the kernel replaces the last byte written with a NUL.
            os.write(fd, trigger.encode() + b"\0")
        except OSError as exc:
            close_quietly(fd)
            raise os_sample_error(path, exc) from exc
        self._fd = fd

    def consume(self) -> None:
        """Tell `on_fire`, then judge the firing (the kernel clears a trigger's event when poll reports it)."""
        if self._on_fire is not None:
            self._on_fire()
        self.cause = Wake.PSI if self._judge is None or self._judge() else Wake.PSI_FAR

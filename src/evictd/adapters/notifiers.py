"""The memory-notification adapter: kernel wake-ups that cut the housekeeping loop's sleep short.

Job: turn two kernel facilities into pollable file descriptors, and wait on them together with a
deadline and an external wake-up (a signal handler or another thread):

* cgroup v1 memory usage thresholds (the kubelet's memcg notifier, KUBELET_SPEC §13): an eventfd
  registered by writing ``"<eventfd> <fd of memory.usage_in_bytes> <bytes>"`` to the cgroup's
  ``cgroup.event_control``. The kernel signals the eventfd when usage crosses the level in either
  direction (it checks about every 128 pages charged or uncharged); closing the eventfd unregisters it,
  and removing the cgroup signals it once. Works on the root memory cgroup. cgroup v2 has no such
  interface: there the kubelet's notifier does nothing, and so does evictd's (use PSI instead).
* PSI triggers (``/proc/pressure/memory`` or a v2 cgroup's ``memory.pressure``): the file is opened
  O_RDWR|O_NONBLOCK and a trigger ``"<some|full> <stall us> <window us>"`` is written, NUL-terminated
  (``/proc/pressure/*`` overwrites the last byte written with a NUL). The kernel then reports POLLPRI
  at most once per window when the stall within the window reaches the given time. Without
  CAP_SYS_RESOURCE (root here lacks it) only windows that are whole multiples of 2 s are accepted.

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
import queue
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from evictd.adapters.cgroups import v1_usage, v1_usage_and_inactive_file
from evictd.core.errors import SampleError
from evictd.core.memcg import (
    CLOSE_READING_S,
    approach_watch_level,
    approach_watch_stale,
    armed_inactive_file,
    close_reading_until,
    close_reading_wanted,
    drop_watch_stale,
    drop_watch_wanted,
    firing_is_a_crossing,
    firing_needs_cycle,
    level_from,
    level_moved,
    level_unwatched_until_registered,
    memcg_notifier_description,
    memcg_threshold_bytes,
    memory_stats_for,
    notifier_refresh_due,
    stats_behind,
    working_set_from,
    working_set_level,
)
from evictd.core.psi import format_us, psi_trigger
from evictd.core.signals import Reading, spec_of
from evictd.core.summary import Summary
from evictd.core.thresholds import Threshold

MEMORY_USAGE_FILE = "memory.usage_in_bytes"
EVENT_CONTROL_FILE = "cgroup.event_control"

SYSTEM_MEMORY_PRESSURE = "/proc/pressure/memory"
# Bit number of CAP_SYS_RESOURCE in the CapEff mask of /proc/<pid>/status (linux/capability.h).
CAP_SYS_RESOURCE = 24

MEMCG_CAUSE = "memcg"
# A memcg notifier fired for page cache coming and going only: the set re-armed itself from two fresh figures,
# no cycle is needed (`evictd.core.memcg.firing_needs_cycle`). Also the cause of a drop watch's eventfd.
MEMCG_REARM_CAUSE = "memcg_rearm"
PSI_CAUSE = "psi"
# A PSI trigger fired while every memory threshold was far from met (`MemcgNotifierSet.may_change_decision`).
PSI_FAR_CAUSE = "psi_far"
SIGNAL_CAUSE = "signal"
# While a memcg level is being registered, or the kernel's statistics are behind, usage is read this often.
UNWATCHED_RECHECK_S = 0.002

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


def _close_quietly(fd: int) -> None:
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
        _close_quietly(fd)


class MemcgThresholdNotifier(FdOwner):
    """A cgroup v1 memory usage threshold: an eventfd signalled when usage crosses `threshold_bytes`."""

    poll_events = select.POLLIN

    def __init__(self, cgroup_dir: str, threshold_bytes: int, description: str, *, cause: str = MEMCG_CAUSE,
                 usage_seen: int | None = None) -> None:
        """Register the threshold on ``<cgroup_dir>/memory.usage_in_bytes``.

        `usage_seen` is the usage the level was computed from: when usage read after the registration is on
        the other side of the level, it crossed while the kernel was not yet watching (a registration waits
        for an RCU grace period), and the eventfd is signalled here as the kernel would have.
        Raises SampleError (naming the file) when the level is negative, when the cgroup or its v1
        files are missing (e.g. on cgroup v2), or when the kernel refuses the registration.
        """
        self._fd = -1
        self.cgroup_dir = cgroup_dir
        self.threshold_bytes = threshold_bytes
        self.description = description
        self.cause = cause
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
            _close_quietly(event_fd)
            if isinstance(exc, ValueError):
                raise SampleError(current, f"not a number: {exc}") from exc
            raise os_sample_error(current, exc) from exc
        finally:
            _close_quietly(control_fd)
            _close_quietly(watch_fd)
        self._fd = event_fd

    def consume(self) -> None:
        """Reset the eventfd counter (it counts crossings since the last read)."""
        try:
            os.eventfd_read(self.fileno())
        except BlockingIOError:
            pass  # already consumed: nothing crossed since
        except OSError as exc:
            raise os_sample_error(f"eventfd of {os.path.join(self.cgroup_dir, MEMORY_USAGE_FILE)}", exc) from exc


def _crossed(before: int, after: int, level: int) -> bool:
    """True when usage went from one side of `level` to the other (the kernel's notion: below vs at or above)."""
    return (before < level) != (after < level)


def has_cap_sys_resource(proc_root: str = "/proc") -> bool:
    """Return True when this process has CAP_SYS_RESOURCE in its effective set; SampleError if unreadable."""
    path = os.path.join(proc_root, "self", "status")
    try:
        with open(path, encoding="ascii", errors="replace") as status:
            text = status.read()
    except OSError as exc:
        raise os_sample_error(path, exc) from exc
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            try:
                mask = int(line.split(":", 1)[1].strip(), 16)
            except ValueError as exc:
                raise SampleError(path, f"bad CapEff line {line!r}") from exc
            return bool(mask >> CAP_SYS_RESOURCE & 1)
    raise SampleError(path, "no CapEff line")


class PsiNotifier(FdOwner):
    """A PSI trigger on /proc/pressure/memory or a v2 cgroup's memory.pressure; fires with POLLPRI."""

    poll_events = select.POLLPRI

    def __init__(self, path: str, stall_us: int, window_us: int, kind: str = "some", description: str = "", *,
                 privileged: bool | None = None, judge: Callable[[], bool] | None = None) -> None:
        """Open `path` and write the trigger.

        `privileged` says whether the kernel will see CAP_SYS_RESOURCE; None reads it from ``/proc/self/status``.
        `judge`, when given, is asked at each firing whether it may change the decision: when it says no, the
        firing's cause is ``psi_far`` (a cycle is not due) instead of ``psi``.
        Raises ConfigError (before opening anything) for a trigger the kernel would refuse, and SampleError naming
        `path` when it cannot be opened or the kernel refuses the trigger anyway.
        """
        self._fd = -1
        self.path = path
        self.cause = PSI_CAUSE
        self._judge = judge
        resource = os.path.basename(path.rstrip("/")).removesuffix(".pressure")  # memory.pressure: memory
        self.description = description or f"psi {resource} {kind} {format_us(stall_us)}/{format_us(window_us)}"
        if privileged is None:
            privileged = has_cap_sys_resource()
        trigger = psi_trigger(kind, stall_us, window_us, privileged=privileged)
        fd = -1
        try:
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            # NUL-terminated: psi_write() in the kernel replaces the last byte written with a NUL.
            os.write(fd, trigger.encode() + b"\0")
        except OSError as exc:
            _close_quietly(fd)
            raise os_sample_error(path, exc) from exc
        self._fd = fd

    def consume(self) -> None:
        """Judge the firing (`judge`); nothing else to do: the kernel clears a trigger's event when poll reports
        it."""
        self.cause = PSI_CAUSE if self._judge is None or self._judge() else PSI_FAR_CAUSE


class Waiter:
    """Waits for the earliest of a deadline, a notifier firing, or `wake` (from a signal handler or thread)."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._notifiers: tuple[Notifier, ...] = ()
        self._by_fd: dict[int, Notifier] = {}
        self._poll = self._new_poll()

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

    def wait(self, timeout_s: float) -> list[str]:
        """Block until something fires or `timeout_s` passes; return the causes that fired, in order.

        Returns ``[]`` on timeout, ``"signal"`` for `wake`, and each firing notifier's cause once
        (``"memcg"``, ``"psi"``). Fired events are consumed, so they are not reported twice. A signal
        whose handler does not call `wake` does not end the wait early (the poll is resumed).
        Raises SampleError if consuming an event fails.
        """
        self._check_open()
        deadline = time.monotonic() + timeout_s
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
                cause = SIGNAL_CAUSE
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
        _close_quietly(write_fd)
        _close_quietly(read_fd)


class Watch(StrEnum):
    """What a memcg notifier of a threshold is: its level, or one of the two watches beside it, whose firing is page
    cache coming and going unless judged otherwise (`evictd.core.memcg`)."""

    LEVEL = "level"  # the threshold's level: a crossing
    DROP = "drop"  # a step below usage: usage fell (page cache dropped leaves the level too high)
    APPROACH = "approach"  # halfway from usage to the level: usage rose (the level is judged again on fresh figures)


# How each watch is named in logs after its threshold's description.
_WATCH_SUFFIXES = {Watch.LEVEL: "", Watch.DROP: ": usage fell", Watch.APPROACH: ": usage rose halfway"}

# What the re-arming thread is asked to register: (threshold index, which notifier, level, usage seen).
_Job = tuple[int, Watch, int, int]


def notifier_description(threshold: Threshold, watch: Watch) -> str:
    """Return what the notifier `watch` of `threshold` is called in logs."""
    return memcg_notifier_description(threshold) + _WATCH_SUFFIXES[watch]


@dataclass(frozen=True, slots=True)
class NotifierFailure:
    """A memcg notifier that could not be armed: the threshold it watches, which notifier of it, why."""

    threshold: Threshold
    watch: Watch
    error: SampleError

    @property
    def description(self) -> str:
        """What the notifier is called in logs (`notifier_description`)."""
        return notifier_description(self.threshold, self.watch)


class MemcgNotifierSet:
    """One memcg notifier per memory threshold, re-armed from the latest readings (the kubelet's UpdateThreshold),
    and beside each two watches: one wakes the loop when usage fell since, one when it rose halfway to the level
    (see `evictd.core.memcg`).

    ``memory.available`` thresholds watch the memory hierarchy's root (`memory_root`), and
    ``allocatableMemory.available`` thresholds watch the pods cgroup under it (`pods_cgroup`, the
    kubelet's PodCgroupRoot, e.g. ``/kubepods``). Other thresholds are ignored. On cgroup v2 there is
    nothing to register; the composition root should not build this set there.

    The set is one Notifier for the Waiter: an epoll descriptor holding every registered eventfd, ready
    when any of them is. A firing is judged first (`consume`): `cause` is ``memcg`` when it may change the
    decision (a cycle is due) and ``memcg_rearm`` when it was page cache coming and going (the set re-armed
    itself, no cycle), and `description` names what fired. A registration waits
    for an RCU grace period (tens of milliseconds, more under load): once armed, the set re-arms in a thread
    of its own, which swaps the new eventfd into the epoll set, so the loop never waits for a registration
    while a crossing is being decided, and the old notifier stays registered until the new one is. Where the
    kernel cannot say in time (a level being registered, statistics behind, a watch that fired near the level),
    the set reads the figures itself every 2 ms for a bounded time (`recheck`).
    """

    poll_events = select.POLLIN

    def __init__(self, thresholds: Sequence[Threshold], *, memory_root: str, pods_cgroup: str,
                 fresh_inactive_file: Callable[[], int] | None = None) -> None:
        """`fresh_inactive_file` reads `memory_root`'s inactive file as it is now (``Inactive(file)`` of
        /proc/meminfo), for a memory root that is the hierarchy's root; None: no such figure (see
        `evictd.core.memcg.armed_inactive_file`)."""
        self.thresholds = tuple(t for t in thresholds if spec_of(t.signal).memcg_watched)
        pods_dir = os.path.join(memory_root, pods_cgroup.strip("/"))
        # The memory cgroup folder the notifiers of each threshold watch.
        self._cgroup_dirs = [pods_dir if spec_of(t.signal).reading is Reading.PODS_MEMORY else memory_root
                             for t in self.thresholds]
        self._memory_root = memory_root
        self.fresh_inactive_file = fresh_inactive_file  # None: memory.stat's figure alone
        self._slots: dict[Watch, list[MemcgThresholdNotifier | None]] = {
            watch: [None] * len(self.thresholds) for watch in Watch}
        self._last_refresh_at: float | None = None
        self._epoll: select.epoll | None = select.epoll(flags=select.EPOLL_CLOEXEC)
        # Each registered eventfd's threshold index, which notifier of it, and the notifier.
        self._by_fd: dict[int, tuple[int, Watch, MemcgThresholdNotifier]] = {}
        # Each threshold's working-set level (`evictd.core.memcg.working_set_level`) and whether it was met, in the
        # latest readings (None: none yet).
        self._working_set_levels: list[int | None] = [None] * len(self.thresholds)
        self._met = [False] * len(self.thresholds)
        self._lock = threading.Lock()  # the slots, `_by_fd` and the epoll set: the loop's and the thread's
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # The places with a registration in the thread's hands, each with the newer one asked for meanwhile.
        self._pending: dict[tuple[int, Watch], _Job | None] = {}
        self._failures: list[NotifierFailure] = []
        # Each threshold whose new level the one armed cannot stand in for (`_submit`, until `_rearm` installed it):
        # the usage level the kernel is not watching yet, as (cgroup folder, level). A registration waits for an RCU
        # grace period, which under load takes 100 ms and more; meanwhile a crossing would go unannounced.
        self._unwatched: dict[int, tuple[str, int]] = {}
        # Each threshold read closely (usage and memory.stat, every 2 ms) until it is met or until when (monotonic),
        # and why: the statistics behind (`stats_behind`), or a watch that fired near the level.
        self._read_closely: dict[int, tuple[float, str]] = {}
        # When each threshold's level last fired while it was not met (monotonic): a crossing the next cycles'
        # statistics may not show yet.
        self._crossed_at: dict[int, float] = {}
        self.cause = MEMCG_CAUSE
        self.description = "memory eviction thresholds"
        # Started here, not at the first re-arm: a thread that comes up at some later cycle would start on the loop's
        # path, and the daemon's thread count would change at a moment nobody chose.
        self._worker: threading.Thread | None = threading.Thread(target=self._rearm, name="evictd-memcg-rearm",
                                                                 daemon=True)
        self._worker.start()

    @property
    def notifiers(self) -> tuple[Notifier, ...]:
        """What the Waiter polls: the set itself (an empty epoll set never fires), until closed. Kept in the
        Waiter while nothing is registered, so that the Waiter never closes it."""
        return () if self._epoll is None else (self,)

    def _armed(self, watch: Watch) -> tuple[MemcgThresholdNotifier, ...]:
        with self._lock:
            return tuple(n for n in self._slots[watch] if n is not None)

    @property
    def levels(self) -> tuple[MemcgThresholdNotifier, ...]:
        """The registered threshold levels (where the last arming succeeded)."""
        return self._armed(Watch.LEVEL)

    @property
    def drop_watches(self) -> tuple[MemcgThresholdNotifier, ...]:
        return self._armed(Watch.DROP)

    @property
    def approach_watches(self) -> tuple[MemcgThresholdNotifier, ...]:
        return self._armed(Watch.APPROACH)

    @property
    def rearming(self) -> bool:
        """True while registrations asked of the thread are not done yet."""
        with self._lock:
            return bool(self._pending)

    def fileno(self) -> int:
        """The epoll descriptor; raises ValueError once closed."""
        if self._epoll is None:
            raise ValueError("memcg notifier set is closed")
        return self._epoll.fileno()

    def consume(self) -> None:
        """Acknowledge every eventfd that fired and judge each firing (`firing_needs_cycle`; all but a crossing on
        two fresh figures of its cgroup, usage and inactive file). When one may change the decision, `cause` is
        ``memcg``; otherwise it is ``memcg_rearm`` and what fired is re-armed from those figures (in the thread).
        A watch that fired within `CLOSE_READING_BYTES` of its threshold starts a close reading.
        `description` names the firings that need the cycle, or else all that fired."""
        fired: list[tuple[int, Watch, MemcgThresholdNotifier]] = []
        with self._lock:
            if self._epoll is None:
                return
            for fd, _ in self._epoll.poll(0):
                slot = self._by_fd.get(fd)
                if slot is not None:
                    slot[2].consume()
                    fired.append(slot)
        figures: dict[str, tuple[int, int] | None] = {}  # each cgroup's (usage, inactive file), read once
        needing = [notifier for index, watch, notifier in fired if self._judged(index, watch, figures)]
        self.cause = MEMCG_CAUSE if needing or not fired else MEMCG_REARM_CAUSE
        self.description = ", ".join(n.description for n in (needing or [n for _, _, n in fired]))
        for index, watch, _ in fired:
            if watch is not Watch.LEVEL:
                self._read_closely_if_near(index, figures)
            else:
                with self._lock:
                    if not self._met[index]:
                        self._crossed_at[index] = time.monotonic()
        if fired and not needing:
            for index, _, notifier in fired:
                self._rearm_from(index, notifier, figures.get(notifier.cgroup_dir))

    @property
    def recheck_s(self) -> float | None:
        """`UNWATCHED_RECHECK_S` while a level is being registered that the one armed cannot stand in for, or while
        a threshold is read closely (the Waiter then polls `recheck`), else None."""
        with self._lock:
            return UNWATCHED_RECHECK_S if self._unwatched or self._read_closely else None

    def recheck(self) -> bool:
        """Whether usage crossed a level the kernel is not watching yet (one read of ``memory.usage_in_bytes`` per
        cgroup), or a threshold read closely is met on usage and memory.stat: then `cause` is ``memcg`` and
        `description` names the threshold, as a firing of its level would."""
        with self._lock:
            unwatched = dict(self._unwatched)
            closely = dict(self._read_closely)
        crossed = []
        for index, (folder, level) in unwatched.items():
            try:
                usage = v1_usage(folder)
            except SampleError:
                continue  # the registration under way reports what is wrong with the folder
            if usage >= level:
                crossed.append(f"{memcg_notifier_description(self.thresholds[index])} (crossed while re-armed)")
        now = time.monotonic()
        for index, (until, why) in closely.items():
            if self._met_on_close_reading(index, until, now):
                crossed.append(f"{memcg_notifier_description(self.thresholds[index])} ({why})")
        if crossed:
            self.cause = MEMCG_CAUSE
            self.description = ", ".join(crossed)
        return bool(crossed)

    def _met_on_close_reading(self, index: int, until: float, now: float) -> bool:
        """Whether usage and memory.stat now say threshold `index` is met; its close reading ends then, or at
        `until`."""
        try:
            usage, inactive_file = v1_usage_and_inactive_file(self._cgroup_dirs[index])
        except SampleError:
            usage, inactive_file = 0, 0  # judged below as not met: the next cycle reports the unreadable file
        with self._lock:
            working_set_level_bytes = self._working_set_levels[index]
            met = working_set_level_bytes is not None and \
                working_set_from(usage, inactive_file) >= working_set_level_bytes
            if met or now >= until:
                self._read_closely.pop(index, None)
        return met

    def _read_closely_if_near(self, index: int, figures: dict[str, tuple[int, int] | None]) -> None:
        """Start a close reading of threshold `index` (`CLOSE_READING_S`) when `figures` put it within
        `CLOSE_READING_BYTES` of its working-set level and not met."""
        read = figures.get(self._cgroup_dirs[index])
        with self._lock:
            working_set_level_bytes, met = self._working_set_levels[index], self._met[index]
            if read is None or working_set_level_bytes is None:
                return
            if close_reading_wanted(met, working_set_level_bytes, working_set_from(*read)):
                self._read_closely[index] = (time.monotonic() + CLOSE_READING_S, "met while read closely")

    def may_change_decision(self) -> bool:
        """Whether a wake-up that names no threshold (a PSI trigger) may change the decision: a threshold met in
        the last cycle's readings and no longer met, or one not met within 64 MiB of it, on two fresh figures of
        each watched cgroup (judged as a drop watch's firing is; True when a read fails). A threshold that never
        had readings (e.g. ``allocatableMemory.available`` without a pods cgroup) cannot be met by a cycle either."""
        figures: dict[str, tuple[int, int] | None] = {}
        with self._lock:
            known = [index for index, level in enumerate(self._working_set_levels) if level is not None]
        return not self.thresholds or any(self._judged(index, Watch.DROP, figures) for index in known)

    def _judged(self, index: int, watch: Watch, figures: dict[str, tuple[int, int] | None]) -> bool:
        """Whether a firing of `watch` needs a cycle; True whenever it cannot be judged (no level known, a failed
        read). The figures read are kept in `figures`."""
        with self._lock:
            working_set_level_bytes, met = self._working_set_levels[index], self._met[index]
        drop_watch = watch is not Watch.LEVEL
        if working_set_level_bytes is None or firing_is_a_crossing(met, drop_watch=drop_watch):
            return True
        read = self._figures(index, figures)
        if read is None:
            return True
        usage, inactive_file = read
        return firing_needs_cycle(met, drop_watch=drop_watch, working_set_level_bytes=working_set_level_bytes,
                                  working_set_bytes=working_set_from(usage, inactive_file))

    def _figures(self, index: int, figures: dict[str, tuple[int, int] | None]) -> tuple[int, int] | None:
        """Usage and the inactive file to arm with (`armed_inactive_file`) of threshold `index`'s cgroup, read once
        per cgroup into `figures`; None when a read failed."""
        folder = self._cgroup_dirs[index]
        if folder not in figures:
            try:
                usage, inactive_file = v1_usage_and_inactive_file(folder)
                figures[folder] = usage, armed_inactive_file(inactive_file, self._fresh_inactive(index))
            except SampleError:
                figures[folder] = None
        return figures[folder]

    def _fresh_inactive(self, index: int) -> int | None:
        """The fresh inactive file of threshold `index`'s cgroup when there is one (the memory root's), else None."""
        return self._fresh_root_inactive() if self._cgroup_dirs[index] == self._memory_root else None

    def _fresh_root_inactive(self) -> int | None:
        """The memory root's inactive file as it is now (one read of /proc/meminfo), or None without one."""
        if self.fresh_inactive_file is None:
            return None
        try:
            return self.fresh_inactive_file()
        except SampleError:
            return None  # memory.stat's figure alone, as without one

    def _fresh_root_inactive_for_cycle(self) -> int | None:
        """`_fresh_root_inactive`, read once for all of a cycle's thresholds, when one of them watches the root."""
        return self._fresh_root_inactive() if self._memory_root in self._cgroup_dirs else None

    def _rearm_from(self, index: int, fired: MemcgThresholdNotifier, read: tuple[int, int] | None) -> None:
        """Re-arm threshold `index`'s level (when it fired or moved) and watches (when stale) from `read`."""
        with self._lock:
            working_set_level_bytes = self._working_set_levels[index]
            armed = self._slots[Watch.LEVEL][index]
        if read is None or working_set_level_bytes is None:
            return
        usage, inactive_file = read
        level = level_from(working_set_level_bytes, usage, inactive_file)
        # A watch that fired lowers a level, never raises it: memory.stat's inactive file may still count page cache
        # already gone (up to 2 s), which would put the level that much too high (seen: 312 raised to 441 MiB and
        # the crossing below it unannounced). A level too low only fires early; the cycle then judges it.
        if armed is not None and (armed is fired or (level < armed.threshold_bytes
                                                     and level_moved(armed.threshold_bytes, level))):
            self._submit((index, Watch.LEVEL, level, usage))
        self._submit_stale_watches(index, level, usage, due=False)

    def _submit_stale_watches(self, index: int, level: int, usage: int, *, due: bool) -> None:
        """Ask for the drop and approach watches of threshold `index` beside `level` where they are stale (all of
        them when `due`)."""
        with self._lock:
            drop, approach = self._slots[Watch.DROP][index], self._slots[Watch.APPROACH][index]
        if due or drop_watch_stale(drop.threshold_bytes if drop is not None else None, level, usage):
            self._submit((index, Watch.DROP, drop_watch_wanted(level, usage), usage))
        if due or approach_watch_stale(approach.threshold_bytes if approach is not None else None, level, usage):
            self._submit((index, Watch.APPROACH, approach_watch_level(level, usage), usage))

    def update(self, summary: Summary, now: float) -> list[NotifierFailure]:
        """Follow the readings of a cycle; `now` is monotonic seconds. Return the notifiers that failed.

        The first time, `refresh` here and now. Then, when strictly more than 10 s passed since the last
        refresh, re-arm every threshold in the thread; otherwise re-arm a threshold's level when it moved by
        a step, and its watches when stale (`drop_watch_stale`, `approach_watch_stale`; a threshold met in the
        readings has neither). The thread's failures are returned by the
        next call. Readings that cannot give a level are reported at a refresh only; a threshold left without
        a level by a failed registration waits for the next refresh.
        """
        with self._lock:
            errors, self._failures = self._failures, []
        if self._last_refresh_at is None:
            self._last_refresh_at = now
            return errors + self.refresh(summary)
        due = notifier_refresh_due(self._last_refresh_at, now)
        if due:
            self._last_refresh_at = now
        fresh_root = self._fresh_root_inactive_for_cycle()
        for index, threshold in enumerate(self.thresholds):
            try:
                level, usage = self._readings(index, summary, fresh_root)
            except SampleError as exc:
                if due:
                    errors.append(NotifierFailure(threshold, Watch.LEVEL, exc))
                continue
            with self._lock:
                armed = self._slots[Watch.LEVEL][index]
            if not due and armed is None:
                continue
            if due or (armed is not None and level_moved(armed.threshold_bytes, level)):
                self._submit((index, Watch.LEVEL, level, usage))
            self._submit_stale_watches(index, level, usage, due=due)
        return errors

    def _readings(self, index: int, summary: Summary, fresh_root: int | None) -> tuple[int, int]:
        """Return threshold `index`'s level and the usage it was computed from; keep its working-set level and
        whether it is met, and read it closely when `close_reading_until` says so. `fresh_root` is the memory root's
        fresh inactive file (`_fresh_root_inactive_for_cycle`). Raises SampleError with the kubelet's text when the
        readings are incomplete."""
        available, working_set, usage = memory_stats_for(self.thresholds[index], summary)
        level = memcg_threshold_bytes(self.thresholds[index], available, working_set, usage)
        working_set_level_bytes = working_set_level(level, usage, working_set)
        fresh = fresh_root if self._cgroup_dirs[index] == self._memory_root else None
        behind = stats_behind(working_set_level_bytes, usage, usage - working_set, fresh)
        now = time.monotonic()
        met = usage >= level  # what the decision saw: memory.stat's figure
        with self._lock:
            self._working_set_levels[index] = working_set_level_bytes
            self._met[index] = met
            crossed_at = self._crossed_at.get(index)
            until = close_reading_until(now, met=met, behind=behind, crossed_at=crossed_at)
            crossing_matters = close_reading_until(now, met=met, behind=False, crossed_at=crossed_at) is not None
            if crossed_at is not None and not crossing_matters:
                del self._crossed_at[index]  # met since, or too long ago to matter
            if until is not None:
                self._read_closely.setdefault(index, (until, "met once the kernel's statistics caught up"))
            elif met:
                self._read_closely.pop(index, None)
        return level_from(working_set_level_bytes, usage, armed_inactive_file(usage - working_set, fresh)), usage

    def refresh(self, summary: Summary) -> list[NotifierFailure]:
        """Re-arm every notifier at the level computed from `summary`, here and now; return the failures.

        As in the kubelet, incomplete readings leave that threshold's old notifier in place, while a
        failed registration leaves it with none. The watches follow the level: re-armed with it (none for a
        threshold met in `summary`), closed when it fails.
        """
        errors: list[NotifierFailure] = []
        fresh_root = self._fresh_root_inactive_for_cycle()
        for index, threshold in enumerate(self.thresholds):
            try:
                level, usage = self._readings(index, summary, fresh_root)
            except SampleError as exc:
                errors.append(NotifierFailure(threshold, Watch.LEVEL, exc))
                continue
            failure = self._arm((index, Watch.LEVEL, level, usage))
            if failure is not None:
                errors.append(failure)
                self._install(index, Watch.DROP, None)
                self._install(index, Watch.APPROACH, None)
                continue
            for watch, wanted in ((Watch.DROP, drop_watch_wanted(level, usage)),
                                  (Watch.APPROACH, approach_watch_level(level, usage))):
                failure = self._arm((index, watch, wanted, usage))
                if failure is not None:
                    errors.append(failure)
        return errors

    def _arm(self, job: _Job) -> NotifierFailure | None:
        """Register what `job` asks for and put it in its place (a watch at a level <= 0: none); return
        the failure, after which the place is empty. Any thread."""
        index, watch, level, usage = job
        new = None
        with self._lock:
            no_level = self._slots[Watch.LEVEL][index] is None
        if watch is Watch.LEVEL or not (level <= 0 or no_level):  # a watch only beside a level
            try:
                threshold = self.thresholds[index]
                new = MemcgThresholdNotifier(
                    self._cgroup_dirs[index], level, notifier_description(threshold, watch),
                    cause=MEMCG_CAUSE if watch is Watch.LEVEL else MEMCG_REARM_CAUSE, usage_seen=usage)
            except SampleError as exc:
                self._install(index, watch, None)
                return NotifierFailure(self.thresholds[index], watch, exc)
        if not self._install(index, watch, new) and new is not None:
            new.close()  # the set was closed meanwhile
        return None

    def _install(self, index: int, watch: Watch, new: MemcgThresholdNotifier | None) -> bool:
        """Swap `new` into its place and into the epoll set; close the one it replaces. False once closed."""
        with self._lock:
            if self._epoll is None:
                return False
            slots = self._slots[watch]
            old, slots[index] = slots[index], new
            if new is not None:
                self._by_fd[new.fileno()] = (index, watch, new)
                self._epoll.register(new.fileno(), select.EPOLLIN)
            if old is not None:
                del self._by_fd[old.fileno()]
                old.close()  # closing the eventfd also takes it out of the epoll set
            return True

    def _submit(self, job: _Job) -> None:
        key = (job[0], job[1])
        with self._lock:
            index, watch, level, usage = job
            armed = self._slots[Watch.LEVEL][index]
            # Only a crossing from below can go unannounced (a met threshold's level, below usage, announces usage
            # falling past it).
            if watch is Watch.LEVEL and level_unwatched_until_registered(
                    level, usage, armed.threshold_bytes if armed is not None else None, self._met[index]):
                self._unwatched[index] = (self._cgroup_dirs[index], level)
            elif watch is Watch.LEVEL:
                self._unwatched.pop(index, None)
            if key in self._pending:
                # One registration at a time per place: the newest asked for follows the one in hand (dropping it
                # would leave the place armed from older figures until the next cycle, an hour away maybe).
                self._pending[key] = job
                return
            self._pending[key] = None
        self._jobs.put(job)

    def _rearm(self) -> None:
        while (job := self._jobs.get()) is not None:
            failure = self._arm(job)
            key = (job[0], job[1])
            with self._lock:
                newer = self._pending.pop(key, None)
                if newer is not None:
                    self._pending[key] = None
                    self._jobs.put(newer)
                elif job[1] is Watch.LEVEL:
                    self._unwatched.pop(job[0], None)  # the kernel watches the newest level now (or it failed)
                if failure is not None:
                    self._failures.append(failure)

    def close(self) -> None:
        """Stop the re-arming thread and close every notifier and the epoll descriptor. Idempotent."""
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join()
            self._worker = None
        with self._lock:
            for slots in self._slots.values():
                for notifier in slots:
                    if notifier is not None:
                        notifier.close()
            self._slots = {watch: [None] * len(self.thresholds) for watch in Watch}
            self._by_fd = {}
            self._pending.clear()
            self._unwatched.clear()
            self._read_closely.clear()
            self._crossed_at.clear()
            epoll, self._epoll = self._epoll, None
        if epoll is not None:
            epoll.close()

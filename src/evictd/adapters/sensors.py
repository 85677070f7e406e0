"""The sensors between cycles (`Sensors`): they carry out the wake model's `Plan` and report what they sensed.

Each is one Notifier for the Waiter: a watch thread that looks at its readings at the pace of their
`evictd.core.wake.WATCHES` rows and signals its eventfd once a look finds a threshold met (a `TargetWatch` for
memory and each counted reading, a `RefaultWatch` per refault reading), or cgroup v1's memcg notifier set
(`evictd.adapters.memcg_set`). They register, read and sleep; what a reading means is the core's.
Invariants: one descriptor each, O_CLOEXEC, `close` idempotent and stopping the threads; each state stepped by one
thread only (a watch's by its thread); no lock held while reading, looking or waiting; a look of an arming replaced
since is dropped; an unreadable source is skipped (the cycle reports it).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from evictd.adapters import procfs
from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.daemon_cgroups import daemon_counts
from evictd.adapters.memcg_set import MemcgNotifierSet, quietly
from evictd.adapters.notifiers import FdOwner, Notifier, NotifierFailure, Waiter, os_sample_error
from evictd.core import wake
from evictd.core.daemon_refault import daemon_share_base, uncovered_bytes
from evictd.core.errors import SampleError
from evictd.core.signals import Reading

# On v2, a look's cost is measured over this many looks at a time: about two 10 ms ticks of a tick-accounting kernel.
LOOK_COST_WINDOW = 32


class WatchThread(FdOwner):
    """The eventfd, the thread and the arming of the watch of `reading` (named for its `WATCHES` row's cause);
    subclasses say what a look does (`_look`)."""

    poll_events = select.POLLIN

    def __init__(self, reading: Reading, monotonic: Callable[[], float]) -> None:
        self.reading = reading
        self._monotonic = monotonic  # the loop's clock
        self.cause = wake.WATCHES[reading].cause
        self.description = self.cause.replace("_", " ")
        self._thread_name = f"evictd-{self.cause.replace('_', '-')}"
        self._lock = threading.Lock()
        self._armed: Any = None  # what the last arming handed (falsy: nothing to watch)
        self._generation = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.looks = 0
        self.fired = 0
        self._woken = threading.Event()  # the thread's own: armed again, or closed
        try:
            self._fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        except OSError as exc:
            raise os_sample_error("eventfd", exc) from exc

    def _arm(self, armed: Any, watching: bool) -> None:
        """Hand the thread `armed` (`watching`: anything to watch in it), replacing what it watched."""
        with self._lock:
            if self._closed:
                return
            self._armed = armed if watching else None
            self._generation += 1
            self._woken.set()
            if self._thread is None and watching:
                self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
                self._thread.start()

    def _look(self, armed: Any, generation: int) -> float | None:
        """Look once at what arming `generation` handed; the delay to the next look, or None to idle until the next
        arming."""
        raise NotImplementedError

    def _idle(self) -> None:
        """The thread goes idle (what the looks kept is no history of the time it does not look)."""

    def _signal_loop(self) -> None:
        """Wake the loop (once until it consumes)."""
        self.fired += 1
        with contextlib.suppress(OSError, ValueError):  # closed meanwhile: nobody left to wake
            os.eventfd_write(self.fileno(), 1)

    def consume(self) -> None:
        self._read_eventfd(f"eventfd of the {self.description}")

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                armed, generation = self._armed, self._generation
            if armed is None:
                self._wait(None)  # until the next arming
                continue
            period = self._look(armed, generation)
            with self._lock:
                if period is None:
                    self._idle()  # even when armed again meanwhile: the new arming starts with no history
                    if self._generation == generation:
                        self._armed = None
                    continue
                if self._generation != generation:
                    continue  # armed again during the look: start over with what it handed
            self._wait(period)

    def _wait(self, timeout_s: float | None) -> None:
        """Sleep until an arming or `close`, or `timeout_s` (None: no limit)."""
        if self._woken.wait(timeout_s):
            self._woken.clear()

    def close(self) -> None:
        """Stop the thread and close the eventfd. Idempotent."""
        with self._lock:
            self._closed = True
            self._woken.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        super().close()


class TargetWatch(WatchThread):
    """Signals its eventfd when a look finds a `Target` met: each target's reading read by `readers` between ticks,
    paced by its `WATCHES` row at the rate of the node's cgroup version (`evictd.core.wake.look`). A read that fails
    keeps the figure last read for this arming (the cycle's `seen` at first), else its targets are skipped. An
    arming `accounted` reads with `accounted_readers` where they have the reading."""

    def __init__(self, readers: Mapping[Reading, Callable[[], int]], interval_s: float, *,
                 monotonic: Callable[[], float], v1: bool = False, look_budget: bool = False,
                 thread_cpu: Callable[[], float] = time.thread_time, look_cost_window: int = LOOK_COST_WINDOW,
                 accounted_readers: Mapping[Reading, Callable[[], int]] | None = None) -> None:
        self._readers = dict(readers)
        self._accounted_readers = {**self._readers, **(accounted_readers or {})}
        super().__init__(next(iter(self._readers)), monotonic)
        self._interval_s = interval_s
        self.v1 = v1  # the looks paced at the rows' cgroup v1 rates (a backstop of the memcg levels)
        # The thread's own: what the looks saw of each target; the arming whose held targets a look released; the
        # figures last read for an arming.
        self._histories: dict[wake.Target, wake.LookHistory] = {}
        self._released: int | None = None
        self._last_read: tuple[int, dict[Reading, int]] = (-1, {})
        # v2's `look_budget`: the steady cap follows the CPU per look over a window (start CPU, looks; None: idle).
        self.look_budget = look_budget
        self._thread_cpu = thread_cpu
        self._cost_window: tuple[float, int] | None = None
        self._look_cost_window = look_cost_window
        self.look_cpu_s: float | None = None

    def arm(self, arming: wake.Arming) -> None:
        """Watch what `arming` leaves to this watch's readings."""
        if wake.WATCHES[self.reading].counted:
            targets, seen = arming.counts.get(self.reading, ((), 0))
            self.look_for(targets, arming.at, seen={self.reading: seen})
        else:
            self.look_for(arming.memory, arming.at, held=arming.held, accounted=arming.accounted)

    def look_for(self, targets: Sequence[wake.Target], now: float, *, held: Sequence[wake.Target] = (),
                 seen: Mapping[Reading, int] | None = None, accounted: bool = False) -> None:
        """Watch `targets` from `now` (the cycle's start), once none of `held` is met any more; with the cycle's
        figures `seen`, no look at all when none could come before the tick at them."""
        targets, seen = tuple(targets), dict(seen or {})
        near = bool(targets) and (not seen or wake.look(targets, seen, now, self._interval_s - (
            self._monotonic() - now), v1=self.v1).period_s is not None)
        self._arm((targets, tuple(held), now, seen, accounted), near)

    def _idle(self) -> None:
        self._histories = {}  # what the looks saw is no history of the time it did not look
        self._cost_window = None  # a window spans looks only: the next one starts at the next look

    def _steady_max_s(self) -> float | None:
        """This look's steady cap: on v2 from the thread's CPU per look over `LOOK_COST_WINDOW` looks, smoothed by an
        eighth (a tick-accounting kernel charges whole ticks); None on v1 (the rows' own)."""
        if not self.look_budget:
            return None
        cpu = self._thread_cpu()
        if self._cost_window is None:
            self._cost_window = (cpu, 0)
        else:
            start, looks = self._cost_window
            looks += 1
            if looks < self._look_cost_window:
                self._cost_window = (start, looks)
            else:
                spent = (cpu - start) / looks
                self.look_cpu_s = spent if self.look_cpu_s is None else self.look_cpu_s + (spent - self.look_cpu_s) / 8
                self._cost_window = (cpu, 0)
        return wake.steady_max_period_s(self.look_cpu_s)

    def _look(self, armed: tuple[tuple[wake.Target, ...], tuple[wake.Target, ...], float, dict[Reading, int], bool],
              generation: int) -> float | None:
        """Read each target's reading once; signal the loop and idle when one is met, else the next period."""
        targets, held, armed_at, seen, accounted = armed
        readers = self._accounted_readers if accounted else self._readers
        steady_max_s = self._steady_max_s()
        if self._released == generation:
            held = ()
        last = self._last_read[1] if self._last_read[0] == generation else seen
        figures: dict[Reading, int] = {}
        for reading in dict.fromkeys(target.reading for target in (*held, *targets)):
            self.looks += 1
            try:
                figures[reading] = readers[reading]()
            except SampleError:  # the cycle reports the unreadable source
                if reading in last:
                    figures[reading] = last[reading]
        self._last_read = (generation, figures)
        now = self._monotonic()
        found = wake.look(targets, figures, now, self._interval_s - (now - armed_at), histories=self._histories,
                          held=held, v1=self.v1, steady_max_s=steady_max_s)
        if found.released:
            self._released = generation
        self._histories = dict(found.histories)
        if found.met is not None:
            self.description = found.met.description
            self._signal_loop()
        return found.period_s


def memory_watch(cgroups: CgroupReader, interval_s: float, *, monotonic: Callable[[], float],
                 v1: bool = False, look_budget: bool = False,
                 thread_cpu: Callable[[], float] = time.thread_time,
                 look_cost_window: int = LOOK_COST_WINDOW) -> TargetWatch:
    """The memory watch: the node's and the pods' working sets against the memory thresholds not met (`v1`: beside
    the memcg levels, at their rows' cgroup v1 rate); armed `accounted`, the pods' less the usage their statistics
    do not count yet (cgroup v1's `unfolded_bytes`, as a crossing is confirmed)."""
    def working_set(reading: Reading) -> Callable[[], int]:
        return lambda: cgroups.memory(cgroups.pods_cgroup() if reading is Reading.PODS_MEMORY else "",
                                      working_set_only=True).working_set_bytes

    def pods_accounted() -> int:
        read = cgroups.memory(cgroups.pods_cgroup())
        return max(0, read.working_set_bytes - (read.unfolded_bytes or 0))
    return TargetWatch({r: working_set(r) for r in (Reading.NODE_MEMORY, Reading.PODS_MEMORY)}, interval_s,
                       monotonic=monotonic, v1=v1, look_budget=look_budget, thread_cpu=thread_cpu,
                       look_cost_window=look_cost_window, accounted_readers={Reading.PODS_MEMORY: pods_accounted})


# What each counted row of `evictd.core.wake.WATCHES` reads (from a /proc root): a new counted reading is a row here.
COUNT_READERS: Mapping[Reading, Callable[[str], int]] = MappingProxyType({Reading.PIDS: procfs.running_tasks})


def count_watch(reading: Reading, interval_s: float, *, monotonic: Callable[[], float],
                proc_root: str = "/proc") -> TargetWatch:
    """The watch of a counted `reading` (the pid watch: /proc/loadavg's task count against ``pid.available``)."""
    return TargetWatch({reading: lambda: COUNT_READERS[reading](proc_root)}, interval_s, monotonic=monotonic)


class RefaultRead(NamedTuple):
    """A refault watch's read, None each where unreadable: the bytes refaulted since boot, the memory they are a share
    of (None: the arming's), the global reclaim scans; the daemons' reclaims below memory.low, bytes reclaimed and
    protected page cache the node's available memory no longer covers."""

    refaulted: int | None
    memory: int | None
    scans: int | None
    low_events: int | None = None
    reclaimed_bytes: int | None = None
    uncovered_bytes: int | None = None


class RefaultWatch(WatchThread):
    """Signals its eventfd when the refaults of its reading may meet a watched threshold (`wake.refault_look`)."""

    def __init__(self, reading: Reading, read: Callable[[], RefaultRead], *, gated: bool,
                 monotonic: Callable[[], float], look_s: float | None = None) -> None:
        super().__init__(reading, monotonic)
        self._read = read
        self._gated = gated
        self._look_s = wake.WATCHES[reading].min_period_s if look_s is None else look_s
        self._watched = wake.WatchedRefault()  # the thread's own readings, kept across armings

    def arm(self, arming: wake.Arming) -> None:
        """Watch what `arming` leaves to this watch's reading."""
        self.look_for(arming.shares.get(self.reading, ()), arming.memory_bytes)

    def look_for(self, shares: Sequence[int], memory_bytes: int | None = None) -> None:
        """Watch for the lowest of `shares` (basis points re-read within the window) of `memory_bytes` (None: the
        memory the reading reads)."""
        self._arm((tuple(sorted(shares)), memory_bytes), bool(shares))

    def _look(self, armed: tuple[tuple[int, ...], int | None], generation: int) -> float | None:
        """Read the counts; signal the loop and idle when a cycle may find a threshold met."""
        shares, memory_bytes = armed
        read = self._read()
        self.looks += 1
        self._watched, woke = wake.refault_look(self.reading, self._watched, read.refaulted,
                                                memory_bytes if read.memory is None else read.memory, read.scans,
                                                self._monotonic(), shares, gated=self._gated,
                                                low_events=read.low_events, reclaimed_bytes=read.reclaimed_bytes,
                                                uncovered_bytes=read.uncovered_bytes)
        if woke:
            self._signal_loop()
            return None
        return self._look_s


def _scans(proc_root: str) -> int | None:
    counts = quietly(procfs.vmstat_counts, proc_root)
    return None if counts is None else counts.global_scan_pages


def node_refault_watch(*, gated: bool, monotonic: Callable[[], float], proc_root: str = "/proc",
                       look_s: float | None = None) -> RefaultWatch:
    """The node's refault watch: /proc/vmstat's page cache refaulted, of the node's memory."""
    def read() -> RefaultRead:
        counts = quietly(procfs.vmstat_counts, proc_root)
        return RefaultRead(None, None, None) if counts is None \
            else RefaultRead(counts.refault_file_bytes, None, counts.global_scan_pages)
    return RefaultWatch(Reading.NODE_MEMORY_REFAULT, read, gated=gated, monotonic=monotonic, look_s=look_s)


def daemons_refault_watch(layout: CgroupLayout, *, gated: bool, monotonic: Callable[[], float],
                          proc_root: str = "/proc") -> RefaultWatch:
    """The daemons' refault watch: system.slice's re-reads (or its memory reclaimed below its memory.low, or its
    protected page cache the node's MemAvailable no longer covers), of its memory that is neither anonymous nor
    protected."""
    def read() -> RefaultRead:
        daemons = quietly(daemon_counts, layout)
        if daemons is None:
            return RefaultRead(None, None, _scans(proc_root))
        available = quietly(procfs.meminfo_bytes, "MemAvailable", proc_root) if daemons.cache_protected else None
        return RefaultRead(daemons.refault_bytes,
                           daemon_share_base(daemons.usage_bytes, daemons.anon_bytes, daemons.protected_bytes),
                           _scans(proc_root), daemons.low_events, daemons.reclaimed_bytes,
                           uncovered_bytes(daemons.file_bytes, daemons.usage_bytes, daemons.protected_bytes,
                                           available))
    return RefaultWatch(Reading.DAEMONS_MEMORY_REFAULT, read, gated=gated, monotonic=monotonic)


class Sensors:
    """Every sensor between cycles: arms them as a `Plan` says (`arm`) and waits on them (`wait`, the loop's
    Waiter), reading in the kernel's place when the memcg model says (`recheck_s`)."""

    def __init__(self, waiter: Waiter, memcg: MemcgNotifierSet | None, psi: Sequence[Notifier],
                 watches: Sequence[TargetWatch | RefaultWatch] = ()) -> None:
        self.waiter = waiter
        self.memcg = memcg
        self.psi = tuple(psi)
        self.watches = tuple(watches)

    def arm(self, arming: wake.Arming) -> list[NotifierFailure]:
        """Arm every sensor as `arming` says and keep them all in the Waiter; return the memcg notifiers that failed
        (`MemcgNotifierSet.update`)."""
        failures = [] if self.memcg is None or arming.memcg is None else self.memcg.update(arming.memcg, arming.at)
        for watch in self.watches:
            watch.arm(arming)
        wanted = (*(self.memcg.notifiers if self.memcg else ()), *self.psi, *self.watches)
        if wanted != self.waiter.notifiers:
            self.waiter.set_notifiers(wanted)
        return failures

    def wait(self, timeout_s: float, *, notifiers: bool = True) -> list[str]:
        """`Waiter.wait`, in steps of the memcg model's `recheck_s` while it wants figures read in the kernel's place
        (`MemcgNotifierSet.recheck` between steps: a crossing read there ends the wait as its firing would)."""
        deadline = self.waiter.monotonic() + timeout_s
        while True:
            recheck_s = self.memcg.recheck_s if self.memcg is not None and notifiers else None
            left_s = max(0.0, deadline - self.waiter.monotonic())
            causes = self.waiter.wait(left_s if recheck_s is None else min(left_s, recheck_s), notifiers=notifiers)
            if causes or recheck_s is None or self.memcg is None:
                return causes
            if self.memcg.recheck():
                return [self.memcg.cause]
            if recheck_s >= left_s:
                return []

    def wake(self) -> None:
        self.waiter.wake()

    def close(self) -> None:
        self.waiter.close()

    @property
    def armed(self) -> frozenset[str]:
        """The descriptions of the memcg notifiers registered now."""
        return frozenset(n.description for n in (self.memcg.armed() if self.memcg else ()))

"""The sensors between cycles (`Sensors`): they carry out the wake model's `Plan` and report what they sensed.
Over 500 lines because every sensor of the model is here: a new reading is a row, its sensor a reader in this file.

Each is one Notifier for the Waiter: a watch thread that looks at its readings at the pace of their
`evictd.core.wake.WATCHES` rows and signals its eventfd once a look finds a threshold met (a `TargetWatch` for
memory and each counted reading, a `RefaultWatch` per refault reading), or the cgroup v1 memcg notifier set (an
epoll descriptor over its levels, registered in a thread of its own). They register, read and sleep; what a
reading means is the core's.
Invariants: one descriptor each, O_CLOEXEC, `close` idempotent and stopping the threads; no lock held while
reading, looking, registering or waiting; a look of an arming replaced since is dropped; an unreadable source is
skipped (the cycle reports it).
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from evictd.adapters import procfs
from evictd.adapters.cgroups import CgroupLayout, CgroupReader, v1_settled_usage_and_inactive_file, v1_usage
from evictd.adapters.daemon_cgroups import daemon_counts
from evictd.adapters.notifiers import (
    FdOwner,
    MemcgThresholdNotifier,
    Notifier,
    NotifierFailure,
    Waiter,
    os_sample_error,
)
from evictd.core import wake
from evictd.core.errors import SampleError
from evictd.core.memcg import armed_inactive_file
from evictd.core.memcg_levels import (
    Figures,
    Firing,
    MemcgState,
    MemoryFigures,
    Registration,
    Watch,
    memcg_after_cycle,
    memcg_fired,
    memcg_installed,
    memcg_may_change_decision,
    memcg_rechecked,
    memcg_registered,
    notifier_description,
)
from evictd.core.signals import Reading, spec_of
from evictd.core.thresholds import Threshold
from evictd.core.wake import Wake

T = TypeVar("T")
# On v2, a look's cost is measured over this many looks at a time: about two 10 ms ticks of a tick-accounting kernel.
LOOK_COST_WINDOW = 32


class WatchThread(FdOwner):
    """The eventfd, the thread and the arming of a watch; subclasses say what a look does (`_look`)."""

    poll_events = select.POLLIN

    def __init__(self, description: str, thread_name: str) -> None:
        self.description = description
        self._thread_name = thread_name
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
                if self._generation != generation:
                    continue  # armed again during the look: start over with what it handed
                if period is None:
                    self._armed = None
                    self._idle()
                    continue
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
    paced by its `WATCHES` row at the rate of the node's cgroup version (`evictd.core.wake.look`; the memory watch, a
    counted reading's watch). A read that
    fails keeps the figure last read for this arming (the cycle's `seen` at first), else its targets are skipped."""

    def __init__(self, readers: Mapping[Reading, Callable[[], int]], interval_s: float, *,
                 monotonic: Callable[[], float], v1: bool = False, look_budget: bool = False,
                 thread_cpu: Callable[[], float] = time.thread_time, look_cost_window: int = LOOK_COST_WINDOW) -> None:
        self._readers = dict(readers)
        self.cause = wake.WATCHES[next(iter(self._readers))].cause
        name = self.cause.replace("_", " ")
        super().__init__(name, f"evictd-{name.replace(' ', '-')}")
        self._interval_s = interval_s
        self._monotonic = monotonic
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
        reading = next(iter(self._readers))
        if wake.WATCHES[reading].counted:
            targets, seen = arming.counts.get(reading, ((), 0))
            self.look_for(targets, arming.at, seen={reading: seen})
        else:
            self.look_for(arming.memory, arming.at, held=arming.held)

    def look_for(self, targets: Sequence[wake.Target], now: float, *, held: Sequence[wake.Target] = (),
                 seen: Mapping[Reading, int] | None = None) -> None:
        """Watch `targets` from `now` (the cycle's start), once none of `held` is met any more; with the cycle's
        figures `seen`, no look at all when none could come before the tick at them."""
        targets, seen = tuple(targets), dict(seen or {})
        near = bool(targets) and (not seen or wake.look(targets, seen, now, self._interval_s - (
            self._monotonic() - now), v1=self.v1).period_s is not None)
        self._arm((targets, tuple(held), now, seen), near)

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

    def _look(self, armed: tuple[tuple[wake.Target, ...], tuple[wake.Target, ...], float, dict[Reading, int]],
              generation: int) -> float | None:
        """Read each target's reading once; signal the loop and idle when one is met, else the next period."""
        targets, held, armed_at, seen = armed
        steady_max_s = self._steady_max_s()
        if self._released == generation:
            held = ()
        last = self._last_read[1] if self._last_read[0] == generation else seen
        figures: dict[Reading, int] = {}
        for reading in dict.fromkeys(target.reading for target in (*held, *targets)):
            self.looks += 1
            try:
                figures[reading] = self._readers[reading]()
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
    the memcg levels, at their rows' cgroup v1 rate)."""
    def working_set(reading: Reading) -> Callable[[], int]:
        return lambda: cgroups.memory(cgroups.pods_cgroup() if reading is Reading.PODS_MEMORY else "",
                                      working_set_only=True).working_set_bytes
    return TargetWatch({r: working_set(r) for r in (Reading.NODE_MEMORY, Reading.PODS_MEMORY)}, interval_s,
                       monotonic=monotonic, v1=v1, look_budget=look_budget,
                       thread_cpu=thread_cpu, look_cost_window=look_cost_window)


# What each counted row of `evictd.core.wake.WATCHES` reads (from a /proc root): a new counted reading is a row here.
COUNT_READERS: Mapping[Reading, Callable[[str], int]] = MappingProxyType({Reading.PIDS: procfs.running_tasks})


def count_watch(reading: Reading, interval_s: float, *, monotonic: Callable[[], float],
                proc_root: str = "/proc") -> TargetWatch:
    """The watch of a counted `reading` (the pid watch: /proc/loadavg's task count against ``pid.available``)."""
    return TargetWatch({reading: lambda: COUNT_READERS[reading](proc_root)}, interval_s, monotonic=monotonic)


# A refault watch's read: the bytes refaulted since boot, the memory they are a share of (None: the arming's), the
# global reclaim scans; None each where unreadable.
RefaultRead = tuple[int | None, int | None, int | None]


class RefaultWatch(WatchThread):
    """Signals its eventfd when the refaults of its reading may meet a watched threshold (`wake.refault_look`)."""

    def __init__(self, reading: Reading, read: Callable[[], RefaultRead], *, gated: bool,
                 monotonic: Callable[[], float], look_s: float | None = None) -> None:
        self.reading = reading
        self.cause = wake.WATCHES[reading].cause
        name = self.cause.replace("_", " ")
        super().__init__(name, f"evictd-{name.replace(' ', '-')}")
        self._read = read
        self._gated = gated
        self._monotonic = monotonic
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
        refaulted, memory, scans = self._read()
        self.looks += 1
        self._watched, woke = wake.refault_look(self.reading, self._watched, refaulted,
                                                memory_bytes if memory is None else memory, scans,
                                                self._monotonic(), shares, gated=self._gated)
        if woke:
            self._signal_loop()
            return None
        return self._look_s


def _scans(proc_root: str) -> int | None:
    counts = _quietly(procfs.vmstat_counts, proc_root)
    return None if counts is None else counts.global_scan_pages


def node_refault_watch(*, gated: bool, monotonic: Callable[[], float], proc_root: str = "/proc",
                       look_s: float | None = None) -> RefaultWatch:
    """The node's refault watch: /proc/vmstat's page cache refaulted, of the node's memory."""
    def read() -> RefaultRead:
        counts = _quietly(procfs.vmstat_counts, proc_root)
        return (None, None, None) if counts is None else (counts.refault_file_bytes, None, counts.global_scan_pages)
    return RefaultWatch(Reading.NODE_MEMORY_REFAULT, read, gated=gated, monotonic=monotonic, look_s=look_s)


def daemons_refault_watch(layout: CgroupLayout, *, gated: bool, monotonic: Callable[[], float],
                          proc_root: str = "/proc") -> RefaultWatch:
    """The daemons' refault watch: system.slice's re-reads, of its memory."""
    def read() -> RefaultRead:
        daemons = _quietly(lambda _: daemon_counts(layout), "")
        return (None if daemons is None else daemons.refault_bytes, None if daemons is None else daemons.usage_bytes,
                _scans(proc_root))
    return RefaultWatch(Reading.DAEMONS_MEMORY_REFAULT, read, gated=gated, monotonic=monotonic)


class MemcgNotifierSet:
    """A memcg level per memory threshold (``memory.available`` on `memory_root`, ``allocatableMemory.available`` on
    its `pods_cgroup`) and two watches beside it, registered where the memcg model says; one Notifier (an epoll
    descriptor). A firing is judged first (`consume`): ``memcg`` when it may change the decision, ``memcg_rearm``
    for page cache. Re-arming runs in a thread (a registration waits for an RCU grace period); the old eventfd stays
    until the new one is. Where the kernel cannot say in time, `recheck` reads in its place every `recheck_s`."""

    poll_events = select.POLLIN

    def __init__(self, thresholds: Sequence[Threshold], *, memory_root: str, pods_cgroup: str,
                 monotonic: Callable[[], float], fresh_inactive_file: Callable[[], int] | None = None) -> None:
        """`fresh_inactive_file`: the hierarchy root's inactive file now (/proc/meminfo); None: none."""
        self.thresholds = tuple(t for t in thresholds if spec_of(t.signal).memcg_watched)
        pods_dir = os.path.join(memory_root, pods_cgroup.strip("/"))
        self._model = MemcgState.of(
            self.thresholds, [pods_dir if spec_of(t.signal).reading is Reading.PODS_MEMORY else memory_root
                              for t in self.thresholds], memory_root)
        self.fresh_inactive_file = fresh_inactive_file  # None: memory.stat's figure alone
        self._monotonic = monotonic  # the loop's clock
        self._slots: dict[Watch, list[MemcgThresholdNotifier | None]] = {
            watch: [None] * len(self.thresholds) for watch in Watch}
        self._epoll: select.epoll | None = select.epoll(flags=select.EPOLL_CLOEXEC)
        # Each registered eventfd's threshold index, which notifier of it, and the notifier.
        self._by_fd: dict[int, tuple[int, Watch, MemcgThresholdNotifier]] = {}
        self._lock = threading.Lock()  # the model, the slots, `_by_fd` and the epoll set: the loop's and the thread's
        self._jobs: queue.SimpleQueue[Registration | None] = queue.SimpleQueue()
        # The places with a registration in the thread's hands, each with the newer one asked for meanwhile.
        self._pending: dict[tuple[int, Watch], Registration | None] = {}
        self._failures: list[NotifierFailure] = []
        self.cause = Wake.MEMCG
        self.description = "memory eviction thresholds"
        # Started here: a thread started at a later re-arm would start on the loop's path, at a moment nobody chose.
        self._worker: threading.Thread | None = threading.Thread(target=self._rearm, name="evictd-memcg-rearm",
                                                                 daemon=True)
        self._worker.start()

    @property
    def notifiers(self) -> tuple[Notifier, ...]:
        """What the Waiter polls: the set itself until closed (kept while nothing is registered)."""
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
        """Acknowledge the eventfds that fired and have the model judge them on fresh figures: `cause` ``memcg`` when
        one may change the decision, else ``memcg_rearm`` (re-armed in the thread); `description` names them."""
        fired: list[tuple[int, Watch, MemcgThresholdNotifier]] = []
        with self._lock:
            if self._epoll is None:
                return
            for fd, _ in self._epoll.poll(0):
                slot = self._by_fd.get(fd)
                if slot is not None:
                    slot[2].consume()
                    fired.append(slot)
        figures = self._read_figures(self._model.cgroup_dirs[index] for index, _, _ in fired)
        now = self._monotonic()
        with self._lock:
            firings = [Firing(index, watch, watch is Watch.LEVEL and notifier is self._slots[Watch.LEVEL][index])
                       for index, watch, notifier in fired]
            self._model, needing, registrations = memcg_fired(self._model, firings, figures, now)
        self.cause = Wake.MEMCG if any(needing) or not fired else Wake.MEMCG_REARM
        named = [notifier for (_, _, notifier), needs in zip(fired, needing, strict=True) if needs] or \
            [notifier for _, _, notifier in fired]
        self.description = ", ".join(notifier.description for notifier in named)
        self._submit(registrations)

    def _read_figures(self, folders: Iterable[str]) -> dict[str, Figures | None]:
        """Usage and the inactive file to arm with of each folder, read once each; None where a read failed."""
        figures: dict[str, Figures | None] = {}
        for folder in dict.fromkeys(folders):
            read = _quietly(v1_settled_usage_and_inactive_file, folder)
            fresh = self._fresh_root_inactive() if read is not None and folder == self._model.memory_root else None
            figures[folder] = None if read is None else (read[0], armed_inactive_file(read[1], fresh))
        return figures

    def _fresh_root_inactive(self) -> int | None:
        """The memory root's inactive file now, or None (memory.stat's figure alone)."""
        fresh = self.fresh_inactive_file
        return None if fresh is None else _quietly(lambda _: fresh(), "")

    @property
    def recheck_s(self) -> float | None:
        """How often the Waiter polls `recheck` (`MemcgState.recheck_s`), or None."""
        with self._lock:
            return self._model.recheck_s

    def recheck(self) -> bool:
        """Read in the kernel's place what the model asks and have it judged: True when a threshold crossed (`cause`
        ``memcg``, `description` naming it, as a firing of its level would)."""
        with self._lock:
            unwatched = dict(self._model.unwatched)
            closely = dict(self._model.read_closely)
        # Unreadable: the registration under way, or the next cycle, reports it.
        unwatched_read = [(index, level, _quietly(v1_usage, self._model.cgroup_dirs[index]))
                          for index, level in unwatched.items()]
        closely_read = [(index, reading, _quietly(v1_settled_usage_and_inactive_file, self._model.cgroup_dirs[index]))
                        for index, reading in closely.items()]
        now = self._monotonic()
        with self._lock:
            self._model, crossed = memcg_rechecked(self._model, unwatched_read, closely_read, now)
        if crossed:
            self.cause = Wake.MEMCG
            self.description = ", ".join(crossed)
        return bool(crossed)

    def may_change_decision(self) -> bool:
        """Whether a wake-up naming no threshold (PSI) may change the decision (`memcg_may_change_decision`)."""
        with self._lock:
            folders = self._model.known_folders
        figures = self._read_figures(folders)
        with self._lock:
            return memcg_may_change_decision(self._model, figures)

    def update(self, figures: Mapping[Threshold, MemoryFigures | SampleError], now: float
               ) -> list[NotifierFailure]:
        """Follow the `figures` of a cycle that began at `now` (`memcg_after_cycle`); the notifiers that failed since
        the last call (the first arming's are registered here and now)."""
        with self._lock:
            errors, self._failures = self._failures, []
        fresh_root = self._fresh_root_inactive() if self._model.watches_root else None
        with self._lock:
            self._model, followed = memcg_after_cycle(self._model, figures, fresh_root, cycle_at=now,
                                                      now=self._monotonic())
        errors += [NotifierFailure(self.thresholds[index], Watch.LEVEL, exc) for index, exc in followed.unreadable]
        if followed.at_once:
            errors += [failure for registration in followed.registrations
                       if (failure := self._arm(registration)) is not None]
        else:
            self._submit(followed.registrations)
        return errors

    def _arm(self, registration: Registration) -> NotifierFailure | None:
        """Register `registration` in its place (a watch at <= 0 or beside no level: none); the failure, which leaves
        the place empty. Any thread."""
        index, watch, level = registration.index, registration.watch, registration.level
        new = None
        with self._lock:
            no_level = self._slots[Watch.LEVEL][index] is None
        if watch is Watch.LEVEL or not (level <= 0 or no_level):
            try:
                new = MemcgThresholdNotifier(
                    self._model.cgroup_dirs[index], level, notifier_description(self.thresholds[index], watch),
                    cause=Wake.MEMCG if watch is Watch.LEVEL else Wake.MEMCG_REARM,
                    usage_seen=registration.usage_bytes)
            except SampleError as exc:
                self._install(index, watch, None)
                if watch is Watch.LEVEL:  # the watches follow the level: none beside no level
                    self._install(index, Watch.DROP, None)
                    self._install(index, Watch.APPROACH, None)
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
            self._model = memcg_installed(self._model, index, watch, None if new is None else new.threshold_bytes)
            if new is not None:
                self._by_fd[new.fileno()] = (index, watch, new)
                self._epoll.register(new.fileno(), select.EPOLLIN)
            if old is not None:
                del self._by_fd[old.fileno()]
                old.close()  # closing the eventfd also takes it out of the epoll set
            return True

    def _submit(self, registrations: Iterable[Registration]) -> None:
        """Hand `registrations` to the thread, one at a time per place; the newest asked meanwhile follows it."""
        for registration in registrations:
            key = (registration.index, registration.watch)
            with self._lock:
                if key in self._pending:
                    self._pending[key] = registration
                    continue
                self._pending[key] = None
            self._jobs.put(registration)

    def _rearm(self) -> None:
        while (registration := self._jobs.get()) is not None:
            failure = self._arm(registration)
            key = (registration.index, registration.watch)
            with self._lock:
                newer = self._pending.pop(key, None)
                if newer is not None:
                    self._pending[key] = None
                    self._jobs.put(newer)
                elif registration.watch is Watch.LEVEL:
                    # The kernel watches the newest level now.
                    self._model = memcg_registered(self._model, registration.index)
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
            self._model = self._model.forgotten()
            epoll, self._epoll = self._epoll, None
        if epoll is not None:
            epoll.close()

def _quietly(read: Callable[[str], T], folder: str) -> T | None:
    """`read(folder)`, or None when it cannot be read."""
    try:
        return read(folder)
    except SampleError:
        return None


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
        if self.memcg is None:
            return frozenset()
        return frozenset(n.description for n in (*self.memcg.levels, *self.memcg.drop_watches,
                                                 *self.memcg.approach_watches))

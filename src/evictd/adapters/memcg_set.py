"""cgroup v1's memcg notifier set (`MemcgNotifierSet`): the kernel's usage levels and the watches beside them, as
the model of `evictd.core.memcg` asks, one Notifier for the loop's Waiter.

Invariants: the loop's thread alone steps the model and holds the slots and the epoll set; the re-arming thread only
registers (a registration waits for an RCU grace period) and hands each notifier back through `_done`, waking the
epoll; an old eventfd stays until its replacement is in place; every descriptor O_CLOEXEC; `close` idempotent and
stopping the thread.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ParamSpec, TypeVar

from evictd.adapters.cgroups import v1_settled_usage_and_inactive_file, v1_usage
from evictd.adapters.notifiers import MemcgThresholdNotifier, Notifier, NotifierFailure
from evictd.core.errors import SampleError
from evictd.core.memcg import (
    Figures,
    Firing,
    MemcgState,
    MemoryFigures,
    Registration,
    Watch,
    armed_inactive_file,
    memcg_after_cycle,
    memcg_fired,
    memcg_installed,
    memcg_may_change_decision,
    memcg_notifier_description,
    memcg_rechecked,
    memcg_registered,
)
from evictd.core.signals import Reading, spec_of
from evictd.core.thresholds import Threshold
from evictd.core.wake import Wake

T = TypeVar("T")
P = ParamSpec("P")


# What the re-arming thread hands back: the registration, the notifier it registered (None: none) and its failure.
Registered = tuple[Registration, MemcgThresholdNotifier | None, NotifierFailure | None]


class MemcgNotifierSet:
    """A memcg level per memory threshold (``memory.available`` on `memory_root`, ``allocatableMemory.available`` on
    its `pods_cgroup`) and two watches beside it, one Notifier (an epoll descriptor). A firing is judged first
    (`consume`): ``memcg`` when it may change the decision, ``memcg_rearm`` for page cache. Where the kernel cannot
    say in time, `recheck` reads in its place every `recheck_s`."""

    poll_events = select.POLLIN

    def __init__(self, thresholds: Sequence[Threshold], *, memory_root: str, pods_cgroup: str,
                 monotonic: Callable[[], float], fresh_inactive_file: Callable[[], int] | None = None) -> None:
        """`fresh_inactive_file`: the hierarchy root's inactive file now (/proc/meminfo); None: none."""
        self.thresholds = tuple(t for t in thresholds if spec_of(t.signal).memcg_watched)
        pods_dir = os.path.join(memory_root, pods_cgroup.strip("/"))
        self._model = MemcgState.of(
            self.thresholds, [pods_dir if spec_of(t.signal).reading is Reading.PODS_MEMORY else memory_root
                              for t in self.thresholds], memory_root)
        self._dirs = self._model.cgroup_dirs  # fixed: the one figure the registering thread reads
        self.fresh_inactive_file = fresh_inactive_file  # None: memory.stat's figure alone
        self._monotonic = monotonic  # the loop's clock
        self._slots: dict[Watch, list[MemcgThresholdNotifier | None]] = {
            watch: [None] * len(self.thresholds) for watch in Watch}
        self._epoll: select.epoll | None = select.epoll(flags=select.EPOLL_CLOEXEC)
        # Each registered eventfd's threshold index, which notifier of it, and the notifier.
        self._by_fd: dict[int, tuple[int, Watch, MemcgThresholdNotifier]] = {}
        self._jobs: queue.SimpleQueue[Registration | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Registered] = queue.SimpleQueue()
        self._done_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)  # the thread's "take what I registered"
        self._epoll.register(self._done_fd, select.EPOLLIN)
        # The places with a registration in the thread's hands, each with the newer one asked for meanwhile.
        self._pending: dict[tuple[int, Watch], Registration | None] = {}
        self._failures: list[NotifierFailure] = []
        self._polling = False  # the loop polls `recheck` (set by the loop, read by the thread)
        # Held while the thread wakes the set and while the loop takes what it registered: a wake-up for registrations
        # the loop already took would reach the Waiter as a spurious `memcg_rearm`.
        self._handoff = threading.Lock()
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

    def armed(self, *watches: Watch) -> tuple[MemcgThresholdNotifier, ...]:
        """The notifiers registered now of `watches` (none: all), in threshold order for each watch."""
        self._take_registered()
        return tuple(n for watch in watches or tuple(Watch) for n in self._slots[watch] if n is not None)

    @property
    def rearming(self) -> bool:
        """True while registrations asked of the thread are not in place yet."""
        self._take_registered()
        return bool(self._pending)

    def fileno(self) -> int:
        """The epoll descriptor; raises ValueError once closed."""
        if self._epoll is None:
            raise ValueError("memcg notifier set is closed")
        return self._epoll.fileno()

    def consume(self) -> None:
        """Put in place what the thread registered, acknowledge the eventfds that fired and have the model judge them
        on fresh figures: `cause` ``memcg`` when one may change the decision, else ``memcg_rearm`` (re-armed in the
        thread, or only registrations taken); `description` names them."""
        if self._epoll is None:
            return
        registered = self._take_registered(acknowledge=True)
        fired: list[tuple[int, Watch, MemcgThresholdNotifier]] = []
        for fd, _ in self._epoll.poll(0):
            slot = self._by_fd.get(fd)
            if slot is not None:
                slot[2].consume()
                fired.append(slot)
        figures = self._read_figures(self._dirs[index] for index, _, _ in fired)
        firings = [Firing(index, watch, watch is Watch.LEVEL and notifier is self._slots[Watch.LEVEL][index])
                   for index, watch, notifier in fired]
        self._model, needing, registrations = memcg_fired(self._model, firings, figures, self._monotonic())
        self.cause = Wake.MEMCG if any(needing) or not (fired or registered) else Wake.MEMCG_REARM
        named = [notifier for (_, _, notifier), needs in zip(fired, needing, strict=True) if needs] or \
            [notifier for _, _, notifier in fired]
        self.description = ", ".join(notifier.description for notifier in named) or "memcg notifiers registered"
        self._submit(registrations)

    def _read_figures(self, folders: Iterable[str]) -> dict[str, Figures | None]:
        """Usage and the inactive file to arm with of each folder, read once each; None where a read failed."""
        figures: dict[str, Figures | None] = {}
        for folder in dict.fromkeys(folders):
            read = quietly(v1_settled_usage_and_inactive_file, folder)
            fresh = self._fresh_root_inactive() if read is not None and folder == self._model.memory_root else None
            figures[folder] = None if read is None else (read[0], armed_inactive_file(read[1], fresh))
        return figures

    def _fresh_root_inactive(self) -> int | None:
        """The memory root's inactive file now, or None (memory.stat's figure alone)."""
        return None if self.fresh_inactive_file is None else quietly(self.fresh_inactive_file)

    @property
    def recheck_s(self) -> float | None:
        """How often the Waiter polls `recheck` (`MemcgState.recheck_s`), or None. While it polls, the thread does not
        wake the set: each step takes what it registered."""
        self._take_registered()
        self._polling = self._model.recheck_s is not None
        if not self._polling:
            self._take_registered()  # handed back before the flag fell: the thread saw it up and woke nobody
        return self._model.recheck_s

    def recheck(self) -> bool:
        """Read in the kernel's place what the model asks and have it judged: True when a threshold crossed (`cause`
        ``memcg``, `description` naming it, as a firing of its level would)."""
        self._take_registered()
        # Unreadable: the registration under way, or the next cycle, reports it.
        unwatched_read = [(index, level, quietly(v1_usage, self._dirs[index]))
                          for index, level in self._model.unwatched.items()]
        closely_read = [(index, reading, quietly(v1_settled_usage_and_inactive_file, self._dirs[index]))
                        for index, reading in self._model.read_closely.items()]
        self._model, crossed = memcg_rechecked(self._model, unwatched_read, closely_read, self._monotonic())
        if crossed:
            self.cause = Wake.MEMCG
            self.description = ", ".join(crossed)
        return bool(crossed)

    def may_change_decision(self) -> bool:
        """Whether a wake-up naming no threshold (PSI) may change the decision (`memcg_may_change_decision`)."""
        return memcg_may_change_decision(self._model, self._read_figures(self._model.known_folders))

    def update(self, figures: Mapping[Threshold, MemoryFigures | SampleError], now: float
               ) -> list[NotifierFailure]:
        """Follow the `figures` of a cycle that began at `now` (`memcg_after_cycle`); the notifiers that failed since
        the last call (the first arming's are registered here and now)."""
        self._take_registered()
        errors, self._failures = self._failures, []
        fresh_root = self._fresh_root_inactive() if self._model.watches_root else None
        self._model, followed = memcg_after_cycle(self._model, figures, fresh_root, cycle_at=now,
                                                  now=self._monotonic())
        errors += [NotifierFailure(self.thresholds[index], Watch.LEVEL, exc) for index, exc in followed.unreadable]
        if followed.at_once:
            errors += [failure for registration in followed.registrations
                       if (failure := self._place(self._arm(registration))) is not None]
        else:
            self._submit(followed.registrations)
        return errors

    def _arm(self, registration: Registration) -> Registered:
        """Register `registration` (a watch at <= 0: none). Any thread: it reads nothing the loop steps."""
        index, watch, level = registration.index, registration.watch, registration.level
        if watch is not Watch.LEVEL and level <= 0:
            return registration, None, None
        try:
            return registration, MemcgThresholdNotifier(
                self._dirs[index], level, memcg_notifier_description(self.thresholds[index], watch),
                usage_seen=registration.usage_bytes), None
        except SampleError as exc:
            return registration, None, NotifierFailure(self.thresholds[index], watch, exc)

    def _place(self, registered: Registered) -> NotifierFailure | None:
        """Put a registration's notifier in its place (a failure leaves it empty); the failure. The loop's thread."""
        registration, new, failure = registered
        index, watch = registration.index, registration.watch
        if watch is not Watch.LEVEL and self._slots[Watch.LEVEL][index] is None:
            if new is not None:  # the watches follow the level: none beside no level, nor their failures
                new.close()
            new, failure = None, None
        self._install(index, watch, new)
        if failure is not None and watch is Watch.LEVEL:
            self._install(index, Watch.DROP, None)
            self._install(index, Watch.APPROACH, None)
        return failure

    def _install(self, index: int, watch: Watch, new: MemcgThresholdNotifier | None) -> None:
        """Swap `new` into its place and into the epoll set; close the one it replaces (`new` too, once closed)."""
        if self._epoll is None:
            if new is not None:
                new.close()
            return
        slots = self._slots[watch]
        old, slots[index] = slots[index], new
        self._model = memcg_installed(self._model, index, watch, None if new is None else new.threshold_bytes)
        if new is not None:
            self._by_fd[new.fileno()] = (index, watch, new)
            self._epoll.register(new.fileno(), select.EPOLLIN)
        if old is not None:
            del self._by_fd[old.fileno()]
            old.close()  # closing the eventfd also takes it out of the epoll set

    def _submit(self, registrations: Iterable[Registration]) -> None:
        """Hand `registrations` to the thread, one at a time per place; the newest asked meanwhile follows it."""
        for registration in registrations:
            key = (registration.index, registration.watch)
            if key in self._pending:
                self._pending[key] = registration
                continue
            self._pending[key] = None
            self._jobs.put(registration)

    def _take_registered(self, *, acknowledge: bool = False) -> bool:
        """Put in place what the thread registered since (the loop's side); whether there was any, or, when
        `acknowledge` (a wake-up of the set), whether the thread had woken it (a wake-up with nothing else is not a
        firing). The eventfd is read only then or with something to take: not a syscall a `recheck_s` step."""
        taken = False
        handed: list[Registered] = []
        with self._handoff:
            if self._epoll is not None and (acknowledge or not self._done.empty()):
                with contextlib.suppress(OSError):
                    taken = os.eventfd_read(self._done_fd) > 0
            with contextlib.suppress(queue.Empty):
                while True:
                    handed.append(self._done.get_nowait())
        for registered in handed:
            taken = True
            registration = registered[0]
            failure = self._place(registered)
            key = (registration.index, registration.watch)
            newer = self._pending.pop(key, None)
            if newer is not None:
                self._pending[key] = None
                self._jobs.put(newer)
            elif registration.watch is Watch.LEVEL:
                self._model = memcg_registered(self._model, registration.index)  # the kernel watches the newest
            if failure is not None:
                self._failures.append(failure)
        return taken

    def _rearm(self) -> None:
        """Register each job and hand it back; wake the set once the jobs asked together are done (a firing asks for
        a level and its watches), and not while the loop polls `recheck` (it takes them within `recheck_s`)."""
        job = self._jobs.get()
        while job is not None:
            self._done.put(self._arm(job))
            with contextlib.suppress(queue.Empty):
                job = self._jobs.get_nowait()
                continue
            with self._handoff:  # not for what the loop took meanwhile
                if not self._polling and not self._done.empty():
                    with contextlib.suppress(OSError):  # closed meanwhile: `close` closes what it registered
                        os.eventfd_write(self._done_fd, 1)
            job = self._jobs.get()

    def close(self) -> None:
        """Stop the re-arming thread and close every notifier and the epoll descriptor. Idempotent."""
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join()
            self._worker = None
        epoll, self._epoll = self._epoll, None
        for notifier in self.armed():  # taking what the thread registered last closes it
            notifier.close()
        self._slots = {watch: [None] * len(self.thresholds) for watch in Watch}
        self._by_fd = {}
        self._pending.clear()
        self._model = self._model.forgotten()
        if epoll is not None:
            epoll.close()
            os.close(self._done_fd)


def quietly(read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | None:
    """`read(*args, **kwargs)`, or None when it cannot be read (SampleError)."""
    try:
        return read(*args, **kwargs)
    except SampleError:
        return None

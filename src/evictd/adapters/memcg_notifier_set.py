"""The memcg notifier set: every memory threshold's level and two watches, registered where the model says.

Job: `MemcgNotifierSet`, one Notifier for the Waiter (an epoll descriptor over every registered eventfd of
`evictd.adapters.memcg_notifier`). It registers, reads and sleeps; what to register, which firing earns a cycle and
what to read in the kernel's place is `evictd.core.memcg_wakeups.MemcgWakeups`'s (the kubelet's UpdateThreshold,
and evictd's watches beside it). Registrations asked between the first and the set's close run in a thread of its
own.

Invariants: the loop never waits for a registration (the thread swaps each new eventfd in, and the old one
stays registered until the new one is); the model, every slot and the epoll set are shared by the loop and that
thread under one lock, never held while reading a file or registering.
"""

from __future__ import annotations

import os
import queue
import select
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from evictd.adapters.cgroups import v1_settled_usage_and_inactive_file, v1_usage
from evictd.adapters.memcg_notifier import (
    MemcgThresholdNotifier,
    NotifierFailure,
)
from evictd.adapters.notifiers import Notifier
from evictd.core.errors import SampleError
from evictd.core.memcg import armed_inactive_file
from evictd.core.memcg_wakeups import Figures, Firing, MemcgWakeups, Registration, Watch, notifier_description
from evictd.core.signals import Reading, spec_of
from evictd.core.summary import Summary
from evictd.core.thresholds import Threshold
from evictd.core.wake import Wake


class MemcgNotifierSet:
    """One memcg notifier per memory threshold and two watches beside it, registered where `MemcgWakeups` says.

    ``memory.available`` thresholds watch the memory hierarchy's root (`memory_root`), and
    ``allocatableMemory.available`` thresholds watch the pods cgroup under it (`pods_cgroup`, the
    kubelet's PodCgroupRoot, e.g. ``/kubepods``). Other thresholds are ignored. On cgroup v2 there is
    nothing to register; the composition root should not build this set there.

    The set is one Notifier for the Waiter: an epoll descriptor holding every registered eventfd, ready
    when any of them is. A firing is judged first (`consume`): `cause` is ``memcg`` when it may change the
    decision (a cycle is due) and ``memcg_rearm`` when it was page cache coming and going (the set re-armed
    itself, no cycle), and `description` names what fired. A registration waits for an RCU grace period (tens of
    milliseconds, more under load): once armed, the set re-arms in a thread of its own, which swaps the new eventfd
    into the epoll set, so the loop never waits for a registration while a crossing is being decided, and the old
    notifier stays registered until the new one is. Where the kernel cannot say in time (a level being registered,
    statistics behind, a watch that fired near the level), the set reads the figures itself (`recheck`) as often
    as the model says (`recheck_s`).
    """

    poll_events = select.POLLIN

    def __init__(self, thresholds: Sequence[Threshold], *, memory_root: str, pods_cgroup: str,
                 fresh_inactive_file: Callable[[], int] | None = None) -> None:
        """`fresh_inactive_file` reads `memory_root`'s inactive file as it is now (``Inactive(file)`` of
        /proc/meminfo), for a memory root that is the hierarchy's root; None: no such figure (see
        `evictd.core.memcg.armed_inactive_file`)."""
        self.thresholds = tuple(t for t in thresholds if spec_of(t.signal).memcg_watched)
        pods_dir = os.path.join(memory_root, pods_cgroup.strip("/"))
        self._model = MemcgWakeups(
            self.thresholds, [pods_dir if spec_of(t.signal).reading is Reading.PODS_MEMORY else memory_root
                              for t in self.thresholds], memory_root)
        self.fresh_inactive_file = fresh_inactive_file  # None: memory.stat's figure alone
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
        """Acknowledge every eventfd that fired and have the model judge each firing on settled figures of its
        cgroup (usage, inactive file, usage). When one may change the decision, `cause` is ``memcg``; otherwise it
        is ``memcg_rearm`` and the set re-arms what the model asks (in the thread). `description` names the firings
        that need the cycle, or else all that fired."""
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
        now = time.monotonic()
        with self._lock:
            firings = [Firing(index, watch, watch is Watch.LEVEL and notifier is self._slots[Watch.LEVEL][index])
                       for index, watch, notifier in fired]
            needing, registrations = self._model.judge_firings(firings, figures, now)
        self.cause = Wake.MEMCG if any(needing) or not fired else Wake.MEMCG_REARM
        named = [notifier for (_, _, notifier), needs in zip(fired, needing, strict=True) if needs] or \
            [notifier for _, _, notifier in fired]
        self.description = ", ".join(notifier.description for notifier in named)
        self._submit(registrations)

    def _read_figures(self, folders: Iterable[str]) -> dict[str, Figures | None]:
        """Usage and the inactive file to arm with (`armed_inactive_file`: the root's fresh figure when lower) of
        each folder, read once each; None where a read failed."""
        figures: dict[str, Figures | None] = {}
        for folder in folders:
            if folder in figures:
                continue
            try:
                usage, inactive_file = v1_settled_usage_and_inactive_file(folder)
                fresh = self._fresh_root_inactive() if folder == self._model.memory_root else None
                figures[folder] = usage, armed_inactive_file(inactive_file, fresh)
            except SampleError:
                figures[folder] = None
        return figures

    def _fresh_root_inactive(self) -> int | None:
        """The memory root's inactive file as it is now (one read of /proc/meminfo), or None without one."""
        if self.fresh_inactive_file is None:
            return None
        try:
            return self.fresh_inactive_file()
        except SampleError:
            return None  # memory.stat's figure alone, as without one

    @property
    def recheck_s(self) -> float | None:
        """How often the Waiter polls `recheck` (`MemcgWakeups.recheck_s`), or None."""
        with self._lock:
            return self._model.recheck_s()

    def recheck(self) -> bool:
        """Read in the kernel's place what the model asks (usage where a level is being registered, usage and
        memory.stat of each threshold read closely) and have it judged: True when a threshold crossed; then `cause`
        is ``memcg`` and `description` names it, as a firing of its level would."""
        with self._lock:
            unwatched = self._model.unwatched()
            closely = self._model.close_readings()
        unwatched_read = [(index, level, self._usage(folder)) for index, (folder, level) in unwatched.items()]
        closely_read = [(index, reading, self._settled(self._model.cgroup_dirs[index]))
                        for index, reading in closely.items()]
        now = time.monotonic()
        with self._lock:
            crossed = self._model.judge_rechecks(unwatched_read, closely_read, now)
        if crossed:
            self.cause = Wake.MEMCG
            self.description = ", ".join(crossed)
        return bool(crossed)

    @staticmethod
    def _usage(folder: str) -> int | None:
        try:
            return v1_usage(folder)
        except SampleError:
            return None  # the registration under way reports what is wrong with the folder

    @staticmethod
    def _settled(folder: str) -> Figures | None:
        try:
            return v1_settled_usage_and_inactive_file(folder)
        except SampleError:
            return None  # not met: the next cycle reports the unreadable file

    def may_change_decision(self) -> bool:
        """Whether a wake-up that names no threshold (a PSI trigger) may change the decision, on two fresh figures
        of each watched cgroup (`MemcgWakeups.may_change_decision`)."""
        with self._lock:
            folders = self._model.known_folders()
        figures = self._read_figures(folders)
        with self._lock:
            return self._model.may_change_decision(figures)

    def update(self, summary: Summary, now: float) -> list[NotifierFailure]:
        """Follow the readings of a cycle that began at `now` (monotonic seconds; `MemcgWakeups.follow`) and return
        the notifiers that failed: those whose readings give no level (at a refresh), the first arming's
        registrations (made here and now), and the thread's since the last call."""
        with self._lock:
            errors, self._failures = self._failures, []
        fresh_root = self._fresh_root_inactive() if self._model.watches_root else None
        with self._lock:
            followed = self._model.follow(summary, fresh_root, cycle_at=now, now=time.monotonic())
        errors += [NotifierFailure(self.thresholds[index], Watch.LEVEL, exc) for index, exc in followed.unreadable]
        if followed.at_once:
            errors += [failure for registration in followed.registrations
                       if (failure := self._arm(registration)) is not None]
        else:
            self._submit(followed.registrations)
        return errors

    def _arm(self, registration: Registration) -> NotifierFailure | None:
        """Register what `registration` asks for and put it in its place (a watch at a level <= 0, or beside no
        level: none); return the failure, after which the place is empty. Any thread."""
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
            self._model.installed(index, watch, None if new is None else new.threshold_bytes)
            if new is not None:
                self._by_fd[new.fileno()] = (index, watch, new)
                self._epoll.register(new.fileno(), select.EPOLLIN)
            if old is not None:
                del self._by_fd[old.fileno()]
                old.close()  # closing the eventfd also takes it out of the epoll set
            return True

    def _submit(self, registrations: Iterable[Registration]) -> None:
        """Hand `registrations` to the thread, one at a time per place: the newest asked for while one is in hand
        follows it (dropping it would leave the place armed from older figures until the next cycle, an hour away
        maybe)."""
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
                    self._model.level_registered(registration.index)  # the kernel watches the newest level now
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
            self._model.forget()
            epoll, self._epoll = self._epoll, None
        if epoll is not None:
            epoll.close()

"""The memcg notifier set: every memory threshold's level and two watches, armed from each cycle's readings.

Over 500 lines because it is one class, whose slots, readings and close readings the loop and its re-arm thread
share under one lock.

Job: `MemcgNotifierSet`, one Notifier for the Waiter (an epoll descriptor over every registered eventfd of
`evictd.adapters.memcg_notifier`), re-armed from the latest readings as the kubelet's UpdateThreshold does, in
a thread of its own, and judging each firing on fresh figures (`evictd.core.memcg`) before it wakes a cycle.
Its class docstring says how; the arithmetic is `evictd.core.memcg`'s.

Invariants: the loop never waits for a registration (the thread swaps each new eventfd in, and the old one
stays registered until the new one is); every slot, the epoll set and the readings kept are shared by the loop
and that thread under one lock; where the kernel cannot say in time, the set reads the figures itself every
`UNWATCHED_RECHECK_S` for a bounded time.
"""

from __future__ import annotations

import os
import queue
import select
import threading
import time
from collections.abc import Callable, Sequence

from evictd.adapters.cgroups import v1_settled_usage_and_inactive_file, v1_usage
from evictd.adapters.memcg_notifier import (
    MEMCG_CAUSE,
    MEMCG_REARM_CAUSE,
    MemcgThresholdNotifier,
    NotifierFailure,
    Watch,
    notifier_description,
)
from evictd.adapters.notifiers import Notifier
from evictd.core.errors import SampleError
from evictd.core.memcg import (
    CLOSE_READING_S,
    STATS_CATCH_UP_S,
    approach_watch_level,
    approach_watch_stale,
    armed_inactive_file,
    close_reading_until,
    close_reading_wanted,
    drop_watch_stale,
    drop_watch_wanted,
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
from evictd.core.signals import Reading, spec_of
from evictd.core.summary import Summary
from evictd.core.thresholds import Threshold

# While a memcg level is being registered, or the kernel's statistics are behind, usage is read this often.
UNWATCHED_RECHECK_S = 0.002
# After a level fired for what its figures called page cache, near the level: how often, and for how long, usage and
# memory.stat are read again (memory.stat folds page cache dropped since in at least every 2 s; until then it still
# counts it, so the crossing looked like page cache and no other firing comes: in the test of a crossing after page
# cache was dropped, 1 run in 8 was decided only at the next tick).
LEVEL_CLOSE_READING_EVERY_S = 0.02

# What the re-arming thread is asked to register: (threshold index, which notifier, level, usage seen).
_Job = tuple[int, Watch, int, int]


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
        # Each threshold read closely (usage and memory.stat) until it is met or until when (monotonic), why (the
        # statistics behind, `stats_behind`, or a firing near the level) and how often (seconds).
        self._read_closely: dict[int, tuple[float, str, float]] = {}
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
        """Acknowledge every eventfd that fired and judge each firing (`firing_needs_cycle`, on
        settled figures of its cgroup: usage, inactive file, usage). When one may change the decision, `cause` is
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
        for index, watch, notifier in fired:
            if watch is not Watch.LEVEL:
                self._read_closely_if_near(index, figures, CLOSE_READING_S, UNWATCHED_RECHECK_S)
            else:
                if notifier not in needing:
                    # Judged page cache on memory.stat's inactive file, which may still count page cache already
                    # dropped: read again until the statistics can have caught up (no cycle will).
                    self._read_closely_if_near(index, figures, STATS_CATCH_UP_S, LEVEL_CLOSE_READING_EVERY_S)
                with self._lock:
                    if not self._met[index]:
                        self._crossed_at[index] = time.monotonic()
        if fired and not needing:
            for index, _, notifier in fired:
                self._rearm_from(index, notifier, figures.get(notifier.cgroup_dir))

    @property
    def recheck_s(self) -> float | None:
        """`UNWATCHED_RECHECK_S` while a level is being registered that the one armed cannot stand in for, the
        shortest period of the thresholds read closely (the Waiter then polls `recheck`), else None."""
        with self._lock:
            if self._unwatched:
                return UNWATCHED_RECHECK_S
            return min((every_s for _, _, every_s in self._read_closely.values()), default=None)

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
        for index, (until, why, _) in closely.items():
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
            usage, inactive_file = v1_settled_usage_and_inactive_file(self._cgroup_dirs[index])
        except SampleError:
            usage, inactive_file = 0, 0  # judged below as not met: the next cycle reports the unreadable file
        with self._lock:
            working_set_level_bytes = self._working_set_levels[index]
            met = working_set_level_bytes is not None and \
                working_set_from(usage, inactive_file) >= working_set_level_bytes
            if met or now >= until:
                self._read_closely.pop(index, None)
        return met

    def _read_closely_if_near(self, index: int, figures: dict[str, tuple[int, int] | None], for_s: float,
                              every_s: float) -> None:
        """Start a close reading of threshold `index` (for `for_s`, every `every_s`; one under way at a shorter period
        stays) when `figures` put it within `CLOSE_READING_BYTES` of its working-set level and not met."""
        read = figures.get(self._cgroup_dirs[index])
        with self._lock:
            working_set_level_bytes, met = self._working_set_levels[index], self._met[index]
            if read is None or working_set_level_bytes is None:
                return
            if close_reading_wanted(met, working_set_level_bytes, working_set_from(*read)):
                under_way = self._read_closely.get(index)
                until = time.monotonic() + for_s
                if under_way is not None and under_way[2] < every_s:
                    until = max(until, under_way[0])
                    every_s = under_way[2]
                self._read_closely[index] = (until, "met while read closely", every_s)

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
        if working_set_level_bytes is None:
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
                usage, inactive_file = v1_settled_usage_and_inactive_file(folder)
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
            under_way = self._read_closely.get(index)
            if until is not None and (under_way is None or under_way[2] > UNWATCHED_RECHECK_S):
                self._read_closely[index] = (until, "met once the kernel's statistics caught up", UNWATCHED_RECHECK_S)
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

"""The model of cgroup v1's memory wake-ups: what the memcg notifier set keeps of each memory threshold, what it
asks the kernel to watch, which firing earns a cycle, and what it reads itself meanwhile (`MemcgWakeups`).

After each cycle `follow` says what to (re-)register (`Registration`: each threshold's level, drop and approach
watch); `judge_firings` whether a firing may change the decision or was page cache (re-arm, no cycle);
`recheck_s`, `unwatched`, `close_readings` and `judge_rechecks` what to read in the kernel's place (a level being
registered, statistics behind, a firing near the level); `may_change_decision` whether a PSI firing may matter.
The arithmetic is `evictd.core.memcg`'s; the adapter is `evictd.adapters.sensors.MemcgNotifierSet`.

Invariants: no I/O, no clock (times are arguments, monotonic seconds); not thread-safe (the adapter holds its lock
around every call); what the kernel holds is what the adapter says it installed (`installed`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

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
from evictd.core.summary import Summary
from evictd.core.thresholds import Threshold

# While a level is being registered, or the kernel's statistics are behind, usage is read this often.
UNWATCHED_RECHECK_S = 0.002
# After a level fired near it for what its figures called page cache: how often memory.stat is read again (it may
# still count page cache already dropped, for up to 2 s).
LEVEL_CLOSE_READING_EVERY_S = 0.02

# Two figures of a cgroup read one after the other: usage and inactive file (bytes).
Figures = tuple[int, int]


class Watch(StrEnum):
    """What a memcg notifier of a threshold is: its level, or one of the two watches beside it, whose firing is page
    cache coming and going unless judged otherwise (`evictd.core.memcg`)."""

    LEVEL = "level"  # the threshold's level: a crossing
    DROP = "drop"  # a step below usage: usage fell (page cache dropped leaves the level too high)
    APPROACH = "approach"  # halfway from usage to the level: usage rose (the level is judged again on fresh figures)


# How each watch is named in logs after its threshold's description.
_WATCH_SUFFIXES = {Watch.LEVEL: "", Watch.DROP: ": usage fell", Watch.APPROACH: ": usage rose halfway"}


def notifier_description(threshold: Threshold, watch: Watch) -> str:
    """Return what the notifier `watch` of `threshold` is called in logs."""
    return memcg_notifier_description(threshold) + _WATCH_SUFFIXES[watch]


@dataclass(frozen=True, slots=True)
class Registration:
    """A notifier to register: threshold `index`'s `watch` at usage `level` (a watch at a level <= 0, or beside no
    level: none, the place emptied), computed from `usage_bytes`."""

    index: int
    watch: Watch
    level: int
    usage_bytes: int


@dataclass(frozen=True, slots=True)
class CloseReading:
    """A threshold read closely (usage and memory.stat) until it is met or `until`, every `every_s`, and why."""

    until: float
    why: str
    every_s: float


@dataclass(frozen=True, slots=True)
class Followed:
    """What a cycle's readings ask for: the registrations (`at_once`: the first arming, registered there and then in
    this order, each level before its watches), and the thresholds whose readings could give no level."""

    registrations: tuple[Registration, ...]
    unreadable: tuple[tuple[int, SampleError], ...]
    at_once: bool


@dataclass(frozen=True, slots=True)
class Firing:
    """A notifier that fired: threshold `index`'s `watch`, and whether it is the level the kernel holds now (not one
    replaced since)."""

    index: int
    watch: Watch
    is_armed_level: bool = False


class MemcgWakeups:
    """What the memcg notifier set knows of each memory threshold, and the rules that turn it into registrations,
    cycles and reads (see the module's description). `cgroup_dirs[i]` is the folder threshold `i` watches;
    `memory_root` the hierarchy's root, whose inactive file has a fresh figure."""

    def __init__(self, thresholds: Sequence[Threshold], cgroup_dirs: Sequence[str], memory_root: str) -> None:
        self.thresholds = tuple(thresholds)
        self.cgroup_dirs = tuple(cgroup_dirs)
        self.memory_root = memory_root
        count = len(self.thresholds)
        # Each threshold's working-set level (`evictd.core.memcg.working_set_level`) and whether it was met, in the
        # latest readings (None: none yet).
        self._working_set_levels: list[int | None] = [None] * count
        self._met = [False] * count
        # The levels the kernel holds, as the adapter installed them (None: nothing in that place).
        self._armed: dict[Watch, list[int | None]] = {watch: [None] * count for watch in Watch}
        # Each threshold whose new level the one armed cannot stand in for, until it is registered: the usage level
        # the kernel is not watching yet. A registration waits for an RCU grace period, which under load takes 100 ms
        # and more; meanwhile a crossing would go unannounced.
        self._unwatched: dict[int, int] = {}
        self._read_closely: dict[int, CloseReading] = {}
        # When each threshold's level last fired while it was not met: a crossing the next cycles' statistics may not
        # show yet.
        self._crossed_at: dict[int, float] = {}
        self._last_refresh_at: float | None = None

    @property
    def watches_root(self) -> bool:
        """Whether a threshold watches the memory root (whose fresh inactive file a cycle's arming uses)."""
        return self.memory_root in self.cgroup_dirs

    def fresh_for(self, index: int, fresh_root: int | None) -> int | None:
        """The fresh inactive file of threshold `index`'s cgroup: the root's, or None for another cgroup."""
        return fresh_root if self.cgroup_dirs[index] == self.memory_root else None

    def installed(self, index: int, watch: Watch, level: int | None) -> None:
        """The kernel now holds threshold `index`'s `watch` at `level` (None: nothing)."""
        self._armed[watch][index] = level

    def follow(self, summary: Summary, fresh_root: int | None, *, cycle_at: float, now: float) -> Followed:
        """Follow a cycle's readings; `cycle_at` is the cycle's time, which the 10 s refresh counts (as the kubelet),
        `now` the time close readings count from, `fresh_root` the memory root's fresh inactive file (None: none).

        The first time, every notifier is registered at once. Then, when strictly more than 10 s passed since the
        last refresh, every one is asked again; otherwise a threshold's level when it moved by a step, and its
        watches when stale (a threshold met in the readings has neither). Readings that cannot give a level are
        reported at a refresh only; a threshold left without a level by a failed registration waits for the next
        refresh."""
        first = self._last_refresh_at is None
        due = notifier_refresh_due(self._last_refresh_at, cycle_at)
        if due:
            self._last_refresh_at = cycle_at
        registrations: list[Registration] = []
        unreadable: list[tuple[int, SampleError]] = []
        for index in range(len(self.thresholds)):
            try:
                level, usage = self._readings(index, summary, fresh_root, now)
            except SampleError as exc:
                if due:
                    unreadable.append((index, exc))
                continue
            if first:
                registrations += [Registration(index, Watch.LEVEL, level, usage),
                                  Registration(index, Watch.DROP, drop_watch_wanted(level, usage), usage),
                                  Registration(index, Watch.APPROACH, approach_watch_level(level, usage), usage)]
                continue
            armed = self._armed[Watch.LEVEL][index]
            if not due and armed is None:
                continue
            if due or (armed is not None and level_moved(armed, level)):
                registrations.append(self._asked(Registration(index, Watch.LEVEL, level, usage)))
            registrations += self._stale_watches(index, level, usage, due=due)
        return Followed(tuple(registrations), tuple(unreadable), at_once=first)

    def _readings(self, index: int, summary: Summary, fresh_root: int | None, now: float) -> tuple[int, int]:
        """Return threshold `index`'s level and the usage it was computed from; keep its working-set level and
        whether it is met, and read it closely when `close_reading_until` says so. Raises SampleError with the
        kubelet's text when the readings are incomplete."""
        available, working_set, usage = memory_stats_for(self.thresholds[index], summary)
        level = memcg_threshold_bytes(self.thresholds[index], available, working_set, usage)
        working_set_level_bytes = working_set_level(level, usage, working_set)
        fresh = self.fresh_for(index, fresh_root)
        behind = stats_behind(working_set_level_bytes, usage, usage - working_set, fresh)
        met = usage >= level  # what the decision saw: memory.stat's figure
        self._working_set_levels[index] = working_set_level_bytes
        self._met[index] = met
        crossed_at = self._crossed_at.get(index)
        until = close_reading_until(now, met=met, behind=behind, crossed_at=crossed_at)
        if crossed_at is not None and close_reading_until(now, met=met, behind=False, crossed_at=crossed_at) is None:
            del self._crossed_at[index]  # met since, or too long ago to matter
        under_way = self._read_closely.get(index)
        if until is not None and (under_way is None or under_way.every_s > UNWATCHED_RECHECK_S):
            self._read_closely[index] = CloseReading(until, "met once the kernel's statistics caught up",
                                                     UNWATCHED_RECHECK_S)
        elif met:
            self._read_closely.pop(index, None)
        return level_from(working_set_level_bytes, usage, armed_inactive_file(usage - working_set, fresh)), usage

    def _asked(self, registration: Registration) -> Registration:
        """Note a level asked for that the kernel will not watch until it is registered (a crossing from below can go
        unannounced meanwhile; a met threshold's level, below usage, announces usage falling past it)."""
        index, level = registration.index, registration.level
        if level_unwatched_until_registered(level, registration.usage_bytes, self._armed[Watch.LEVEL][index],
                                            self._met[index]):
            self._unwatched[index] = level
        else:
            self._unwatched.pop(index, None)
        return registration

    def level_registered(self, index: int) -> None:
        """The newest level asked for threshold `index` is registered (or failed): the kernel watches it, if any."""
        self._unwatched.pop(index, None)

    def _stale_watches(self, index: int, level: int, usage: int, *, due: bool) -> Iterator[Registration]:
        """The drop and approach watches of threshold `index` beside `level` where they are stale (all when `due`)."""
        if due or drop_watch_stale(self._armed[Watch.DROP][index], level, usage):
            yield Registration(index, Watch.DROP, drop_watch_wanted(level, usage), usage)
        if due or approach_watch_stale(self._armed[Watch.APPROACH][index], level, usage):
            yield Registration(index, Watch.APPROACH, approach_watch_level(level, usage), usage)

    def judge_firings(self, fired: Sequence[Firing], figures: Mapping[str, Figures | None], now: float
                      ) -> tuple[tuple[bool, ...], tuple[Registration, ...]]:
        """Judge notifiers that fired, on `figures` of each cgroup read after they fired (usage and the inactive file
        to arm with; None: a read failed), at `now`: whether each may change the decision, and what to re-arm
        when none may (page cache coming and going: no cycle).

        A watch that fired within `CLOSE_READING_BYTES` of its threshold starts a close reading; so does a level
        judged page cache there (memory.stat may still count page cache already dropped, and no cycle follows). A
        level that fired while its threshold was not met is a crossing the next cycles' statistics may not show yet.
        """
        needing = tuple(self._needs_cycle(firing.index, firing.watch, figures) for firing in fired)
        for firing, needs in zip(fired, needing, strict=True):
            if firing.watch is not Watch.LEVEL:
                self._read_closely_if_near(firing.index, figures, now, CLOSE_READING_S, UNWATCHED_RECHECK_S)
                continue
            if not needs:
                self._read_closely_if_near(firing.index, figures, now, STATS_CATCH_UP_S, LEVEL_CLOSE_READING_EVERY_S)
            if not self._met[firing.index]:
                self._crossed_at[firing.index] = now
        registrations: list[Registration] = []
        if fired and not any(needing):
            for firing in fired:
                registrations += self._rearmed(firing, figures.get(self.cgroup_dirs[firing.index]))
        return needing, tuple(registrations)

    def _needs_cycle(self, index: int, watch: Watch, figures: Mapping[str, Figures | None]) -> bool:
        """Whether a firing of `watch` needs a cycle (`firing_needs_cycle`); True whenever it cannot be judged (no
        level known, a failed read)."""
        working_set_level_bytes = self._working_set_levels[index]
        read = figures.get(self.cgroup_dirs[index])
        if working_set_level_bytes is None or read is None:
            return True
        return firing_needs_cycle(self._met[index], drop_watch=watch is not Watch.LEVEL,
                                  working_set_level_bytes=working_set_level_bytes,
                                  working_set_bytes=working_set_from(*read))

    def _read_closely_if_near(self, index: int, figures: Mapping[str, Figures | None], now: float, for_s: float,
                              every_s: float) -> None:
        """Read threshold `index` closely (for `for_s`, every `every_s`; one under way at a shorter period stays)
        when `figures` put it within `CLOSE_READING_BYTES` of its working-set level and not met."""
        read = figures.get(self.cgroup_dirs[index])
        working_set_level_bytes = self._working_set_levels[index]
        if read is None or working_set_level_bytes is None:
            return
        if close_reading_wanted(self._met[index], working_set_level_bytes, working_set_from(*read)):
            until = now + for_s
            under_way = self._read_closely.get(index)
            if under_way is not None and under_way.every_s < every_s:
                until, every_s = max(until, under_way.until), under_way.every_s
            self._read_closely[index] = CloseReading(until, "met while read closely", every_s)

    def _rearmed(self, firing: Firing, read: Figures | None) -> list[Registration]:
        """Re-arm threshold `index`'s level (when it fired or moved) and watches (when stale) from `read`. A watch
        that fired lowers a level, never raises it: memory.stat may still count page cache already gone (up to 2 s);
        a level too low only fires early, and the cycle judges it."""
        working_set_level_bytes = self._working_set_levels[firing.index]
        armed = self._armed[Watch.LEVEL][firing.index]
        if read is None or working_set_level_bytes is None:
            return []
        usage, inactive_file = read
        level = level_from(working_set_level_bytes, usage, inactive_file)
        registrations = []
        if armed is not None and (firing.is_armed_level or (level < armed and level_moved(armed, level))):
            registrations.append(self._asked(Registration(firing.index, Watch.LEVEL, level, usage)))
        return registrations + list(self._stale_watches(firing.index, level, usage, due=False))

    def recheck_s(self) -> float | None:
        """How often to read in the kernel's place: `UNWATCHED_RECHECK_S` while a level is being registered that the
        one armed cannot stand in for, the shortest period of the thresholds read closely, else None."""
        if self._unwatched:
            return UNWATCHED_RECHECK_S
        return min((reading.every_s for reading in self._read_closely.values()), default=None)

    def unwatched(self) -> dict[int, tuple[str, int]]:
        """Each threshold with a level the kernel is not watching yet: its cgroup folder and that usage level."""
        return {index: (self.cgroup_dirs[index], level) for index, level in self._unwatched.items()}

    def close_readings(self) -> dict[int, CloseReading]:
        return dict(self._read_closely)

    def judge_rechecks(self, unwatched: Sequence[tuple[int, int, int | None]],
                       closely: Sequence[tuple[int, CloseReading, Figures | None]], now: float) -> list[str]:
        """What the reads in the kernel's place found, at `now`: each `(index, level, usage read)` of a level being
        registered (None: unreadable) and each `(index, close reading, usage and inactive file read)` of a threshold
        read closely (None: unreadable, not met). Return the descriptions of the thresholds crossed (a cycle is
        due); a close reading ends when its threshold is met or its time is up."""
        crossed = []
        for index, level, usage in unwatched:
            if usage is not None and usage >= level:
                crossed.append(f"{memcg_notifier_description(self.thresholds[index])} (crossed while re-armed)")
        for index, reading, read in closely:
            working_set_level_bytes = self._working_set_levels[index]
            met = read is not None and working_set_level_bytes is not None and \
                working_set_from(*read) >= working_set_level_bytes
            if met or now >= reading.until:
                self._read_closely.pop(index, None)
            if met:
                crossed.append(f"{memcg_notifier_description(self.thresholds[index])} ({reading.why})")
        return crossed

    def known_folders(self) -> tuple[str, ...]:
        """The cgroup folders of the thresholds whose working-set level is known."""
        return tuple(dict.fromkeys(self.cgroup_dirs[index] for index, level in enumerate(self._working_set_levels)
                                   if level is not None))

    def may_change_decision(self, figures: Mapping[str, Figures | None]) -> bool:
        """Whether a wake-up that names no threshold (a PSI trigger) may change the decision, on `figures` of
        `known_folders` read now: a threshold met in the last cycle's readings and no longer met, or one not met
        within 64 MiB of it (judged as a drop watch's firing is; True when a read failed). A threshold that never had
        readings (e.g. ``allocatableMemory.available`` without a pods cgroup) cannot be met by a cycle either."""
        known = [index for index, level in enumerate(self._working_set_levels) if level is not None]
        return not self.thresholds or any(self._needs_cycle(index, Watch.DROP, figures) for index in known)

    def forget(self) -> None:
        """The set closed: nothing armed, asked or read closely any more."""
        self._armed = {watch: [None] * len(self.thresholds) for watch in Watch}
        self._unwatched.clear()
        self._read_closely.clear()
        self._crossed_at.clear()

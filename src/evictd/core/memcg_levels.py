"""cgroup v1's memcg notifiers as a pure model: `MemcgState` and its `memcg_*` transitions say which levels to register
(each threshold's level, with a drop and an approach `Watch` beside it), which firing earns a cycle, and what to read
in the kernel's place while a level is unwatched or the kernel's statistics are behind. The arithmetic is the
kubelet's, in `evictd.core.memcg`. Pure: every time is an argument (monotonic seconds), states are immutable; the
sensor that registers the levels (adapters/memcg_set.py) alone steps its state, on the loop's thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from evictd.core import memcg
from evictd.core.errors import SampleError
from evictd.core.thresholds import Threshold

# A memcg threshold's readings in a cycle's Summary: available, working set and usage (bytes).
MemoryFigures = tuple[int, int, int]
# While a level is being registered, or the kernel's statistics are behind, usage is read this often.
UNWATCHED_RECHECK_S = 0.002
# After a level fired near it for page cache, memory.stat is read this often (it may still count dropped pages).
LEVEL_CLOSE_READING_EVERY_S = 0.02
# Two figures of a cgroup read one after the other: usage and inactive file (bytes).
Figures = tuple[int, int]


class Watch(StrEnum):
    """What a memcg notifier of a threshold is: its level, or a watch beside it (page cache unless judged else)."""

    LEVEL = "level"  # the threshold's level: a crossing
    DROP = "drop"  # a step below usage: usage fell (page cache dropped leaves the level too high)
    APPROACH = "approach"  # halfway from usage to the level: usage rose (the level is judged again on fresh figures)


_WATCH_SUFFIXES = {Watch.LEVEL: "", Watch.DROP: ": usage fell", Watch.APPROACH: ": usage rose halfway"}


def notifier_description(threshold: Threshold, watch: Watch) -> str:
    """What the notifier `watch` of `threshold` is called in logs."""
    return memcg.memcg_notifier_description(threshold) + _WATCH_SUFFIXES[watch]


@dataclass(frozen=True, slots=True)
class Registration:
    """A notifier to register: threshold `index`'s `watch` at usage `level` (<= 0: none), from `usage_bytes`."""

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
    """What a cycle's figures ask for: the registrations (`at_once`: the first, made there and then, in order) and
    the thresholds whose figures gave no level."""

    registrations: tuple[Registration, ...]
    unreadable: tuple[tuple[int, SampleError], ...]
    at_once: bool


@dataclass(frozen=True, slots=True)
class Firing:
    """A notifier that fired: threshold `index`'s `watch`, and whether it is the level the kernel holds now."""

    index: int
    watch: Watch
    is_armed_level: bool = False


@dataclass(frozen=True, slots=True)
class MemcgState:
    """What the memcg set knows of each threshold (in `cgroup_dirs[i]`): its working-set level and whether it was
    met, the levels the kernel holds (`armed[watch][i]`), those asked and not watched yet (`unwatched`), the close
    readings, when a level fired while not met (`crossed_at`), and the last refresh."""

    thresholds: tuple[Threshold, ...]
    cgroup_dirs: tuple[str, ...]
    memory_root: str
    working_set_levels: tuple[int | None, ...] = ()
    met: tuple[bool, ...] = ()
    armed: Mapping[Watch, tuple[int | None, ...]] = field(default_factory=dict)
    unwatched: Mapping[int, int] = field(default_factory=dict)
    read_closely: Mapping[int, CloseReading] = field(default_factory=dict)
    crossed_at: Mapping[int, float] = field(default_factory=dict)
    last_refresh_at: float | None = None

    @classmethod
    def of(cls, thresholds: Sequence[Threshold], cgroup_dirs: Sequence[str], memory_root: str) -> MemcgState:
        """The state before any cycle: nothing known, nothing armed."""
        count = len(thresholds)
        return cls(tuple(thresholds), tuple(cgroup_dirs), memory_root, (None,) * count, (False,) * count,
                   {watch: (None,) * count for watch in Watch})

    @property
    def watches_root(self) -> bool:
        return self.memory_root in self.cgroup_dirs

    @property
    def recheck_s(self) -> float | None:
        """How often to read in the kernel's place: while a level is unwatched, or the fastest close reading."""
        if self.unwatched:
            return UNWATCHED_RECHECK_S
        return min((reading.every_s for reading in self.read_closely.values()), default=None)

    @property
    def known_folders(self) -> tuple[str, ...]:
        """The folders of the thresholds whose working-set level is known."""
        return tuple(dict.fromkeys(folder for folder, level in zip(self.cgroup_dirs, self.working_set_levels,
                                                                   strict=True) if level is not None))

    def forgotten(self) -> MemcgState:
        """The set closed: nothing armed, asked or read closely any more."""
        return replace(self, armed={watch: (None,) * len(self.thresholds) for watch in Watch}, unwatched={},
                       read_closely={}, crossed_at={})


def memcg_installed(state: MemcgState, index: int, watch: Watch, level: int | None) -> MemcgState:
    """The kernel now holds threshold `index`'s `watch` at `level` (None: nothing)."""
    armed = list(state.armed[watch])
    armed[index] = level
    return replace(state, armed={**state.armed, watch: tuple(armed)})


def memcg_registered(state: MemcgState, index: int) -> MemcgState:
    """The newest level asked for threshold `index` is registered (or failed): the kernel watches it, if any."""
    return replace(state, unwatched={i: level for i, level in state.unwatched.items() if i != index})


def memcg_after_cycle(state: MemcgState, figures: Mapping[Threshold, MemoryFigures | SampleError],
                      fresh_root: int | None, *, cycle_at: float, now: float) -> tuple[MemcgState, Followed]:
    """Follow a cycle's `figures` (`cycle_at`: its time, for the kubelet's 10 s refresh; `now`: close readings'
    time; `fresh_root`: the root's fresh inactive file). The first time every notifier is registered at once; at a
    refresh every one again; else a level that moved a step and stale watches (a met threshold has neither)."""
    first = state.last_refresh_at is None
    due = memcg.notifier_refresh_due(state.last_refresh_at, cycle_at)
    levels, met = list(state.working_set_levels), list(state.met)
    closely, crossed_at = dict(state.read_closely), dict(state.crossed_at)
    unwatched = dict(state.unwatched)
    registrations: list[Registration] = []
    unreadable: list[tuple[int, SampleError]] = []
    for index, threshold in enumerate(state.thresholds):
        read = figures.get(threshold)
        if isinstance(read, SampleError) and due:
            unreadable.append((index, read))
        if not isinstance(read, tuple):
            continue
        available, working_set, usage = read
        level_bytes = memcg.memcg_threshold_bytes(threshold, available, working_set, usage)
        levels[index] = ws_level = memcg.working_set_level(level_bytes, usage, working_set)
        fresh = fresh_root if state.cgroup_dirs[index] == state.memory_root else None
        met[index] = usage >= level_bytes  # what the decision saw: memory.stat's figure
        since = crossed_at.get(index)
        behind = memcg.stats_behind(ws_level, usage, usage - working_set, fresh)
        until = memcg.close_reading_until(now, met=met[index], behind=behind, crossed_at=since)
        if since is not None and memcg.close_reading_until(now, met=met[index], behind=False, crossed_at=since) is None:
            del crossed_at[index]  # met since, or too long ago to matter
        under_way = closely.get(index)
        if until is not None and (under_way is None or under_way.every_s > UNWATCHED_RECHECK_S):
            closely[index] = CloseReading(until, "met once the kernel's statistics caught up", UNWATCHED_RECHECK_S)
        elif met[index]:
            closely.pop(index, None)
        level = memcg.level_from(ws_level, usage, memcg.armed_inactive_file(usage - working_set, fresh))
        if first:
            registrations += [Registration(index, Watch.LEVEL, level, usage), *_stale_watches(state, index, level,
                                                                                             usage, due=True)]
            continue
        armed = state.armed[Watch.LEVEL][index]
        if not due and armed is None:
            continue
        if due or (armed is not None and memcg.level_moved(armed, level)):
            registrations.append(_asked(unwatched, Registration(index, Watch.LEVEL, level, usage), armed,
                                        met[index]))
        registrations += _stale_watches(state, index, level, usage, due=due)
    new = replace(state, working_set_levels=tuple(levels), met=tuple(met), unwatched=unwatched,
                  read_closely=closely, crossed_at=crossed_at,
                  last_refresh_at=cycle_at if due else state.last_refresh_at)
    return new, Followed(tuple(registrations), tuple(unreadable), at_once=first)


def _asked(unwatched: dict[int, int], registration: Registration, armed: int | None, met: bool) -> Registration:
    """Note in `unwatched` a level asked for that the kernel will not watch until it is registered."""
    if memcg.level_unwatched_until_registered(registration.level, registration.usage_bytes, armed, met):
        unwatched[registration.index] = registration.level
    else:
        unwatched.pop(registration.index, None)
    return registration


def _stale_watches(state: MemcgState, index: int, level: int, usage: int, *, due: bool) -> list[Registration]:
    """The drop and approach watches of threshold `index` beside `level` where they are stale (all when `due`)."""
    stale = []
    if due or memcg.drop_watch_stale(state.armed[Watch.DROP][index], level, usage):
        stale.append(Registration(index, Watch.DROP, memcg.drop_watch_wanted(level, usage), usage))
    if due or memcg.approach_watch_stale(state.armed[Watch.APPROACH][index], level, usage):
        stale.append(Registration(index, Watch.APPROACH, memcg.approach_watch_level(level, usage), usage))
    return stale


def _needs_cycle(state: MemcgState, index: int, watch: Watch, figures: Mapping[str, Figures | None]) -> bool:
    """Whether a firing of `watch` needs a cycle (`firing_needs_cycle`); True when it cannot be judged."""
    working_set_level_bytes = state.working_set_levels[index]
    read = figures.get(state.cgroup_dirs[index])
    if working_set_level_bytes is None or read is None:
        return True
    return memcg.firing_needs_cycle(state.met[index], drop_watch=watch is not Watch.LEVEL,
                                    working_set_level_bytes=working_set_level_bytes,
                                    working_set_bytes=memcg.working_set_from(*read))


def memcg_fired(state: MemcgState, fired: Sequence[Firing], figures: Mapping[str, Figures | None], now: float
                ) -> tuple[MemcgState, tuple[bool, ...], tuple[Registration, ...]]:
    """Judge firings on `figures` read since (None: unreadable): whether each may change the decision, and what to
    re-arm when none may (page cache). A watch near its threshold, or a level judged page cache there, starts a
    close reading; a level that fired while not met is a crossing the statistics may not show yet."""
    needing = tuple(_needs_cycle(state, firing.index, firing.watch, figures) for firing in fired)
    closely, crossed_at = dict(state.read_closely), dict(state.crossed_at)
    for firing, needs in zip(fired, needing, strict=True):
        index = firing.index
        read, ws_level = figures.get(state.cgroup_dirs[index]), state.working_set_levels[index]
        near = (read is not None and ws_level is not None
                and memcg.close_reading_wanted(state.met[index], ws_level, memcg.working_set_from(*read)))
        if firing.watch is not Watch.LEVEL or not needs:
            for_s, every_s = ((memcg.CLOSE_READING_S, UNWATCHED_RECHECK_S) if firing.watch is not Watch.LEVEL
                              else (memcg.STATS_CATCH_UP_S, LEVEL_CLOSE_READING_EVERY_S))
            if near:
                until, under_way = now + for_s, closely.get(index)
                if under_way is not None and under_way.every_s < every_s:
                    until, every_s = max(until, under_way.until), under_way.every_s
                closely[index] = CloseReading(until, "met while read closely", every_s)
        if firing.watch is Watch.LEVEL and not state.met[index]:
            crossed_at[index] = now
    state = replace(state, read_closely=closely, crossed_at=crossed_at)
    if not fired or any(needing):
        return state, needing, ()
    unwatched = dict(state.unwatched)
    registrations: list[Registration] = []
    for firing in fired:
        registrations += _rearmed(state, unwatched, firing, figures.get(state.cgroup_dirs[firing.index]))
    return replace(state, unwatched=unwatched), needing, tuple(registrations)


def _rearmed(state: MemcgState, unwatched: dict[int, int], firing: Firing, read: Figures | None
             ) -> list[Registration]:
    """Re-arm a level (fired or moved) and its stale watches from `read`; a watch's firing only lowers a level (the
    statistics may still count page cache gone; too low only fires early)."""
    ws_level, armed = state.working_set_levels[firing.index], state.armed[Watch.LEVEL][firing.index]
    if read is None or ws_level is None:
        return []
    usage, inactive_file = read
    level = memcg.level_from(ws_level, usage, inactive_file)
    registrations = []
    if armed is not None and (firing.is_armed_level or (level < armed and memcg.level_moved(armed, level))):
        registrations.append(_asked(unwatched, Registration(firing.index, Watch.LEVEL, level, usage), armed,
                                    state.met[firing.index]))
    return registrations + _stale_watches(state, firing.index, level, usage, due=False)


def memcg_rechecked(state: MemcgState, unwatched: Sequence[tuple[int, int, int | None]],
                    closely: Sequence[tuple[int, CloseReading, Figures | None]], now: float
                    ) -> tuple[MemcgState, list[str]]:
    """Judge the reads in the kernel's place: `(index, level, usage)` of levels being registered, `(index, close
    reading, figures)`; the descriptions of the thresholds crossed. A close reading ends when met or its time is up."""
    crossed = [f"{memcg.memcg_notifier_description(state.thresholds[index])} (crossed while re-armed)"
               for index, level, usage in unwatched if usage is not None and usage >= level]
    kept = dict(state.read_closely)
    for index, reading, read in closely:
        ws_level = state.working_set_levels[index]
        met = read is not None and ws_level is not None and memcg.working_set_from(*read) >= ws_level
        if met or now >= reading.until:
            kept.pop(index, None)
        if met:
            crossed.append(f"{memcg.memcg_notifier_description(state.thresholds[index])} ({reading.why})")
    return replace(state, read_closely=kept), crossed


def memcg_may_change_decision(state: MemcgState, figures: Mapping[str, Figures | None]) -> bool:
    """Whether a wake-up naming no threshold (PSI) may change the decision, judged as a drop watch's firing on
    `figures` of `known_folders` (True when a read failed, or with no threshold)."""
    known = [index for index, level in enumerate(state.working_set_levels) if level is not None]
    return not state.thresholds or any(_needs_cycle(state, index, Watch.DROP, figures) for index in known)

"""cgroup v1's memcg notifiers as a pure model: the kubelet's threshold arithmetic, and `MemcgState` whose `memcg_*`
transitions say which levels to register, which firing earns a cycle, and what to read in the kernel's place.

The kubelet (``UpdateThreshold``, KUBELET_SPEC §13) registers the usage level at which a threshold would be met,
``capacity - thresholdQuantity(capacity) + inactiveFile``, refreshed when strictly more than 10 s passed. evictd adds a
drop `Watch` a step below usage and an approach `Watch` halfway to the level (docs/memory-watch.md, "Usage thresholds
on cgroup v1"); a firing is judged on two fresh figures before it earns a cycle; while a level is being registered,
near it, or while ``memory.stat`` lags, usage is read in the kernel's place for a while. Pure: every time is an
argument (monotonic seconds), states are immutable, errors use the kubelet's texts, a level may be <= 0; the sensor
that registers the levels (adapters/memcg_set.py) alone steps its state, on the loop's thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from evictd.core.errors import SampleError
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Signal
from evictd.core.summary import SYSTEM_CONTAINER_PODS, MemoryStats, Summary
from evictd.core.thresholds import Threshold, threshold_quantity

# Above this a memory limit is "no limit" (the kernel page-rounds 2**63-1; the kubelet's isMemoryUnlimited).
UNLIMITED_ABOVE_BYTES = 2**62

# notifierRefreshInterval in the kubelet's eviction manager: thresholds follow the readings this often.
NOTIFIER_REFRESH_INTERVAL_S = 10.0

# Between refreshes a level is re-armed once it moved this much; the drop watch sits this far below usage.
MEMCG_REARM_STEP_BYTES = 8 << 20
# Within this distance of the level the drop watch is not moved (a registration takes tens of milliseconds).
MEMCG_NEAR_LEVEL_BYTES = 64 << 20
# A watch that fires this near the working-set level starts a close reading, for `CLOSE_READING_S` (stale level).
CLOSE_READING_BYTES = 2 * MEMCG_NEAR_LEVEL_BYTES
CLOSE_READING_S = 1.0

# The kernel's memory.stat flush period (FLUSH_TIME, 2 s) plus a margin: how long memory.stat may lag.
STATS_CATCH_UP_S = 2.5

# Error texts of UpdateThreshold / getSysContainer (two spaces after the period are the kubelet's).
INCOMPLETE_SUMMARY = "summary was incomplete.  Expected MemoryStats and all subfields to be non-nil, but got {stats}"
MISSING_SYSTEM_CONTAINER = 'system container "{name}" not found in metrics'

# Where the readings of each memory signal come from, for error messages (Summary API JSON paths).
NODE_MEMORY_SOURCE = "summary node.memory"
PODS_MEMORY_SOURCE = f"summary node.systemContainers[{SYSTEM_CONTAINER_PODS}].memory"

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


def memcg_threshold_bytes(threshold: Threshold, available_bytes: int, working_set_bytes: int, usage_bytes: int) -> int:
    """The ``memory.usage_in_bytes`` level at which `threshold` would be met (may be <= 0), rounded up once at the
    end as the kubelet's ``memcgThreshold.Value()`` is."""
    capacity = Quantity.from_int(available_bytes + working_set_bytes, QuantityFormat.BINARY_SI)
    inactive_file = Quantity.from_int(usage_bytes - working_set_bytes, QuantityFormat.BINARY_SI)
    level = capacity - threshold_quantity(threshold.value, capacity) + inactive_file
    return level.ceil_int()


def memcg_notifier_description(threshold: Threshold, watch: Watch = Watch.LEVEL) -> str:
    """What the notifier `watch` of `threshold` is called in logs: the kubelet's description of the level, e.g. ``hard
    memory eviction threshold`` (isHardEvictionThreshold), and what a watch beside it sees."""
    hard = "hard " if threshold.is_hard else "soft "
    allocatable = "allocatable " if threshold.signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE else ""
    return f"{hard}{allocatable}memory eviction threshold{_WATCH_SUFFIXES[watch]}"


def memory_stats_for(threshold: Threshold, summary: Summary) -> MemoryFigures:
    """``(available, working set, usage)`` bytes the notifier of `threshold` uses; SampleError (the kubelet's text)
    when one is absent."""
    if threshold.signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE:
        source = PODS_MEMORY_SOURCE
        container = summary.node.system_containers.get(SYSTEM_CONTAINER_PODS)
        if container is None:
            raise SampleError(source, MISSING_SYSTEM_CONTAINER.format(name=SYSTEM_CONTAINER_PODS))
        stats: MemoryStats | None = container.memory
    else:
        source = NODE_MEMORY_SOURCE
        stats = summary.node.memory
    if stats is None or stats.available_bytes is None or stats.working_set_bytes is None or stats.usage_bytes is None:
        raise SampleError(source, INCOMPLETE_SUMMARY.format(stats=stats))
    return stats.available_bytes, stats.working_set_bytes, stats.usage_bytes


def working_set_level(level: int, usage_bytes: int, working_set_bytes: int) -> int:
    """The working set at which the threshold armed at `level` from these readings is met: the level less the
    inactive file it holds."""
    return level - (usage_bytes - working_set_bytes)


def working_set_from(usage_bytes: int, inactive_file_bytes: int) -> int:
    """Usage less inactive file, never below 0 (cAdvisor's rule)."""
    return max(0, usage_bytes - inactive_file_bytes)


def level_from(working_set_level_bytes: int, usage_bytes: int, inactive_file_bytes: int) -> int:
    """The usage level of a threshold at a known working-set level, from two fresh figures."""
    return working_set_level_bytes + usage_bytes - working_set_from(usage_bytes, inactive_file_bytes)


def armed_inactive_file(stat_inactive_file_bytes: int, fresh_inactive_file_bytes: int | None) -> int:
    """The inactive file a level is armed with: ``memory.stat``'s, or the fresh figure when lower (the statistics may
    still count page cache already gone)."""
    fresh = fresh_inactive_file_bytes
    return stat_inactive_file_bytes if fresh is None else min(stat_inactive_file_bytes, fresh)


def stats_behind(working_set_level_bytes: int, usage_bytes: int, stat_inactive_file_bytes: int,
                 fresh_inactive_file_bytes: int | None) -> bool:
    """True when the threshold is met on the fresh inactive file but not yet on ``memory.stat``'s, more than a step
    apart: no usage level announces the moment the statistics catch up."""
    stat, fresh = stat_inactive_file_bytes, fresh_inactive_file_bytes
    if fresh is None or stat - fresh <= MEMCG_REARM_STEP_BYTES:
        return False
    return working_set_from(usage_bytes, stat) < working_set_level_bytes <= working_set_from(usage_bytes, fresh)


def close_reading_until(now: float, *, met: bool, behind: bool, crossed_at: float | None) -> float | None:
    """Until when a threshold is read closely after a cycle (None: not): `STATS_CATCH_UP_S` from `now` while the
    statistics are behind, or from `crossed_at`, a firing of its level the statistics may not show yet."""
    if behind:
        return now + STATS_CATCH_UP_S
    if not met and crossed_at is not None and now - crossed_at < STATS_CATCH_UP_S:
        return crossed_at + STATS_CATCH_UP_S
    return None


def firing_needs_cycle(met: bool, *, drop_watch: bool, working_set_level_bytes: int, working_set_bytes: int) -> bool:
    """True when a firing may have changed the decision, judged on the working set read after it; False for page
    cache (re-arm, no cycle): met, once below the level; not met, within a step of it (a drop watch: near it)."""
    if met:
        return working_set_bytes < working_set_level_bytes
    near_bytes = MEMCG_NEAR_LEVEL_BYTES if drop_watch else MEMCG_REARM_STEP_BYTES
    return working_set_level_bytes - working_set_bytes < near_bytes


def level_unwatched_until_registered(level: int, usage_bytes: int, armed_level: int | None, met: bool) -> bool:
    """True when a crossing of `level` could go unannounced until it is registered: not met, usage below it, and
    the level still armed cannot stand in (none, higher, or passed)."""
    if met or usage_bytes >= level:
        return False
    return armed_level is None or level < armed_level or usage_bytes >= armed_level


def drop_watch_wanted(level: int, usage_bytes: int) -> int:
    """The drop watch's level beside a threshold level: a step below usage (<= 0: none; none when met)."""
    return 0 if usage_bytes >= level else usage_bytes - MEMCG_REARM_STEP_BYTES


def approach_watch_level(level: int, usage_bytes: int) -> int:
    """The approach watch's level: halfway from usage to the level while that is over `CLOSE_READING_BYTES`, else 0."""
    gap = level - usage_bytes
    return usage_bytes + gap // 2 if gap > CLOSE_READING_BYTES else 0


def approach_watch_stale(armed_watch: int | None, level: int, usage_bytes: int) -> bool:
    """True when the approach watch should move: fired, wanted and absent, armed and unwanted, or more than
    `MEMCG_NEAR_LEVEL_BYTES` from where it is wanted."""
    wanted = approach_watch_level(level, usage_bytes)
    if armed_watch is None:
        return wanted > 0
    if wanted <= 0 or usage_bytes >= armed_watch:
        return True
    return abs(wanted - armed_watch) > MEMCG_NEAR_LEVEL_BYTES


def close_reading_wanted(met: bool, working_set_level_bytes: int, working_set_bytes: int) -> bool:
    """True when a threshold not met is within `CLOSE_READING_BYTES` of its working-set level."""
    return not met and working_set_level_bytes - working_set_bytes < CLOSE_READING_BYTES


def level_moved(armed_level: int, level: int) -> bool:
    """True when the level computed now is a step or more away from the armed one: re-arm it."""
    return abs(level - armed_level) >= MEMCG_REARM_STEP_BYTES


def drop_watch_stale(armed_watch: int | None, level: int, usage_bytes: int) -> bool:
    """True when the drop watch should move: none, or more than a step from where it is wanted; never within
    `MEMCG_NEAR_LEVEL_BYTES` of the level. Met, or usage too low: an armed one is to be closed."""
    if 0 < level - usage_bytes < MEMCG_NEAR_LEVEL_BYTES:
        return False
    wanted = drop_watch_wanted(level, usage_bytes)
    if wanted <= 0:
        return armed_watch is not None  # met, or usage too low for one: a watch still armed is to be closed
    return armed_watch is None or abs(wanted - armed_watch) > MEMCG_REARM_STEP_BYTES


def notifier_refresh_due(last_refresh_at: float | None, now: float) -> bool:
    """True when the notifiers must be rebuilt: never built, or strictly more than 10 s ago."""
    return last_refresh_at is None or now - last_refresh_at > NOTIFIER_REFRESH_INTERVAL_S


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
    due = notifier_refresh_due(state.last_refresh_at, cycle_at)
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
        level_bytes = memcg_threshold_bytes(threshold, available, working_set, usage)
        levels[index] = ws_level = working_set_level(level_bytes, usage, working_set)
        fresh = fresh_root if state.cgroup_dirs[index] == state.memory_root else None
        met[index] = usage >= level_bytes  # what the decision saw: memory.stat's figure
        since = crossed_at.get(index)
        behind = stats_behind(ws_level, usage, usage - working_set, fresh)
        until = close_reading_until(now, met=met[index], behind=behind, crossed_at=since)
        if since is not None and close_reading_until(now, met=met[index], behind=False, crossed_at=since) is None:
            del crossed_at[index]  # met since, or too long ago to matter
        under_way = closely.get(index)
        if until is not None and (under_way is None or under_way.every_s > UNWATCHED_RECHECK_S):
            closely[index] = CloseReading(until, "met once the kernel's statistics caught up", UNWATCHED_RECHECK_S)
        elif met[index]:
            closely.pop(index, None)
        level = level_from(ws_level, usage, armed_inactive_file(usage - working_set, fresh))
        armed = state.armed[Watch.LEVEL][index]
        if not due and armed is None:
            continue
        if due or (armed is not None and level_moved(armed, level)):
            asked = Registration(index, Watch.LEVEL, level, usage)  # the first ones, made at once, are never unwatched
            registrations.append(asked if first else _asked(unwatched, asked, armed, met[index]))
        registrations += _stale_watches(state, index, level, usage, due=due)
    new = replace(state, working_set_levels=tuple(levels), met=tuple(met), unwatched=unwatched,
                  read_closely=closely, crossed_at=crossed_at,
                  last_refresh_at=cycle_at if due else state.last_refresh_at)
    return new, Followed(tuple(registrations), tuple(unreadable), at_once=first)


def _asked(unwatched: dict[int, int], registration: Registration, armed: int | None, met: bool) -> Registration:
    """Note in `unwatched` a level asked for that the kernel will not watch until it is registered."""
    if level_unwatched_until_registered(registration.level, registration.usage_bytes, armed, met):
        unwatched[registration.index] = registration.level
    else:
        unwatched.pop(registration.index, None)
    return registration


def _stale_watches(state: MemcgState, index: int, level: int, usage: int, *, due: bool) -> list[Registration]:
    """The drop and approach watches of threshold `index` beside `level` where they are stale (all when `due`)."""
    stale = []
    if due or drop_watch_stale(state.armed[Watch.DROP][index], level, usage):
        stale.append(Registration(index, Watch.DROP, drop_watch_wanted(level, usage), usage))
    if due or approach_watch_stale(state.armed[Watch.APPROACH][index], level, usage):
        stale.append(Registration(index, Watch.APPROACH, approach_watch_level(level, usage), usage))
    return stale


def _needs_cycle(state: MemcgState, index: int, watch: Watch, figures: Mapping[str, Figures | None]) -> bool:
    """Whether a firing of `watch` needs a cycle (`firing_needs_cycle`); True when it cannot be judged."""
    ws_level, read = state.working_set_levels[index], figures.get(state.cgroup_dirs[index])
    if ws_level is None or read is None:
        return True
    return firing_needs_cycle(state.met[index], drop_watch=watch is not Watch.LEVEL, working_set_level_bytes=ws_level,
                              working_set_bytes=working_set_from(*read))


def memcg_fired(state: MemcgState, fired: Sequence[Firing], figures: Mapping[str, Figures | None], now: float
                ) -> tuple[MemcgState, tuple[bool, ...], tuple[Registration, ...]]:
    """Judge firings on `figures` read since (None: unreadable): whether each may change the decision, and what to
    re-arm when none may (page cache). A watch near its threshold, or a level judged page cache there, starts a
    close reading; a level that fired while not met is a crossing the statistics may not show yet."""
    needing = tuple(_needs_cycle(state, firing.index, firing.watch, figures) for firing in fired)
    closely, crossed_at = dict(state.read_closely), dict(state.crossed_at)
    for firing, needs in zip(fired, needing, strict=True):
        index, level_fired = firing.index, firing.watch is Watch.LEVEL
        read, ws_level = figures.get(state.cgroup_dirs[index]), state.working_set_levels[index]
        if (not level_fired or not needs) and read is not None and ws_level is not None \
                and close_reading_wanted(state.met[index], ws_level, working_set_from(*read)):
            for_s, every_s = ((STATS_CATCH_UP_S, LEVEL_CLOSE_READING_EVERY_S) if level_fired
                              else (CLOSE_READING_S, UNWATCHED_RECHECK_S))
            until, under_way = now + for_s, closely.get(index)
            if under_way is not None and under_way.every_s < every_s:
                until, every_s = max(until, under_way.until), under_way.every_s
            closely[index] = CloseReading(until, "met while read closely", every_s)
        if level_fired and not state.met[index]:
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
    level = level_from(ws_level, usage, inactive_file)
    registrations = []
    if armed is not None and (firing.is_armed_level or (level < armed and level_moved(armed, level))):
        registrations.append(_asked(unwatched, Registration(firing.index, Watch.LEVEL, level, usage), armed,
                                    state.met[firing.index]))
    return registrations + _stale_watches(state, firing.index, level, usage, due=False)


def memcg_rechecked(state: MemcgState, unwatched: Sequence[tuple[int, int, int | None]],
                    closely: Sequence[tuple[int, CloseReading, Figures | None]], now: float
                    ) -> tuple[MemcgState, list[str]]:
    """Judge the reads in the kernel's place: `(index, level, usage)` of levels being registered, `(index, close
    reading, figures)`; the descriptions of the thresholds crossed. A close reading ends when met or its time is up."""
    crossed = [f"{memcg_notifier_description(state.thresholds[index])} (crossed while re-armed)"
               for index, level, usage in unwatched if usage is not None and usage >= level]
    kept = dict(state.read_closely)
    for index, reading, read in closely:
        ws_level = state.working_set_levels[index]
        met = read is not None and ws_level is not None and working_set_from(*read) >= ws_level
        if met or now >= reading.until:
            kept.pop(index, None)
        if met:
            crossed.append(f"{memcg_notifier_description(state.thresholds[index])} ({reading.why})")
    return replace(state, read_closely=kept), crossed


def memcg_may_change_decision(state: MemcgState, figures: Mapping[str, Figures | None]) -> bool:
    """Whether a wake-up naming no threshold (PSI) may change the decision, judged as a drop watch's firing on
    `figures` of `known_folders` (True when a read failed, or with no threshold)."""
    known = [index for index, level in enumerate(state.working_set_levels) if level is not None]
    return not state.thresholds or any(_needs_cycle(state, index, Watch.DROP, figures) for index in known)

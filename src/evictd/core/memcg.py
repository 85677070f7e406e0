"""The kubelet's memcg threshold arithmetic and evictd's watches beside it, as pure functions.

The kubelet (``UpdateThreshold``, KUBELET_SPEC §13) registers the usage level at which a threshold would be met,
``capacity - thresholdQuantity(capacity) + inactiveFile``, refreshed when strictly more than 10 s passed. evictd adds a
*drop watch* a step below usage and an *approach watch* halfway to the level (docs/memory-watch.md, "Usage thresholds on
cgroup v1"); a firing is judged on two fresh figures before it earns a cycle; near the level, or while ``memory.stat``
lags, the figures are read closely for a while. No I/O, no clock; errors use the kubelet's texts; a level may be <= 0.
"""

from __future__ import annotations

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


def memcg_threshold_bytes(threshold: Threshold, available_bytes: int, working_set_bytes: int, usage_bytes: int) -> int:
    """The ``memory.usage_in_bytes`` level at which `threshold` would be met (may be <= 0), rounded up once at the
    end as the kubelet's ``memcgThreshold.Value()`` is."""
    capacity = Quantity.from_int(available_bytes + working_set_bytes, QuantityFormat.BINARY_SI)
    inactive_file = Quantity.from_int(usage_bytes - working_set_bytes, QuantityFormat.BINARY_SI)
    level = capacity - threshold_quantity(threshold.value, capacity) + inactive_file
    return level.ceil_int()


def memcg_notifier_description(threshold: Threshold) -> str:
    """Return the kubelet's notifier description, e.g. ``hard memory eviction threshold`` (isHardEvictionThreshold)."""
    hard = "hard " if threshold.is_hard else "soft "
    allocatable = "allocatable " if threshold.signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE else ""
    return f"{hard}{allocatable}memory eviction threshold"


def memory_stats_for(threshold: Threshold, summary: Summary) -> tuple[int, int, int]:
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
    if fresh_inactive_file_bytes is None:
        return stat_inactive_file_bytes
    return min(stat_inactive_file_bytes, fresh_inactive_file_bytes)


def stats_behind(working_set_level_bytes: int, usage_bytes: int, stat_inactive_file_bytes: int,
                 fresh_inactive_file_bytes: int | None) -> bool:
    """True when the threshold is met on the fresh inactive file but not yet on ``memory.stat``'s, more than a step
    apart: no usage level announces the moment the statistics catch up."""
    if fresh_inactive_file_bytes is None:
        return False
    if stat_inactive_file_bytes - fresh_inactive_file_bytes <= MEMCG_REARM_STEP_BYTES:
        return False
    return (working_set_from(usage_bytes, stat_inactive_file_bytes) < working_set_level_bytes
            <= working_set_from(usage_bytes, fresh_inactive_file_bytes))


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
    if not drop_watch:
        return working_set_level_bytes - working_set_bytes < MEMCG_REARM_STEP_BYTES
    return working_set_level_bytes - working_set_bytes < MEMCG_NEAR_LEVEL_BYTES


def level_unwatched_until_registered(level: int, usage_bytes: int, armed_level: int | None, met: bool) -> bool:
    """True when a crossing of `level` could go unannounced until it is registered: not met, usage below it, and
    the level still armed cannot stand in (none, higher, or passed)."""
    if met or usage_bytes >= level:
        return False
    return armed_level is None or level < armed_level or usage_bytes >= armed_level


def drop_watch_wanted(level: int, usage_bytes: int) -> int:
    """The drop watch's level beside a threshold level (<= 0: none; none when met)."""
    return 0 if usage_bytes >= level else drop_watch_level(usage_bytes)


def drop_watch_level(usage_bytes: int) -> int:
    """The usage level of the drop watch armed at `usage_bytes` (<= 0: none)."""
    return usage_bytes - MEMCG_REARM_STEP_BYTES


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
    if usage_bytes >= level:
        return armed_watch is not None  # met: a watch still armed is to be closed (`drop_watch_wanted`)
    wanted = drop_watch_level(usage_bytes)
    if level - usage_bytes < MEMCG_NEAR_LEVEL_BYTES:
        return False
    if wanted <= 0:
        return armed_watch is not None  # to be closed: usage is too low for one
    return armed_watch is None or abs(wanted - armed_watch) > MEMCG_REARM_STEP_BYTES


def notifier_refresh_due(last_refresh_at: float | None, now: float) -> bool:
    """True when the notifiers must be rebuilt: never built, or strictly more than 10 s ago."""
    return last_refresh_at is None or now - last_refresh_at > NOTIFIER_REFRESH_INTERVAL_S

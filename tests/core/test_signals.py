"""Tests of evictd.core.signals: each signal's declared facts are the kubelet's (KUBELET_SPEC §1; helpers.go's
signalToNodeCondition and signalToResource, api/types.go's byte-valued signals, buildSignalToRankFunc)."""

from __future__ import annotations

import pytest

from evictd.core.errors import ConfigError
from evictd.core.signals import (
    EVICTD_SIGNALS,
    Filesystem,
    NodeCondition,
    Ranking,
    Reading,
    Resource,
    Signal,
    StallKind,
    Unit,
    parse_signal,
    parse_stall_signal,
    spec_of,
)

MEMORY, DISK, PID = NodeCondition.MEMORY_PRESSURE, NodeCondition.DISK_PRESSURE, NodeCondition.PID_PRESSURE
STORAGE, INODES = Resource.EPHEMERAL_STORAGE, Resource.INODES

# signal: condition, resource, unit, reading, ranking, filesystem: upstream's tables, written out once more here.
UPSTREAM = {
    Signal.MEMORY_AVAILABLE: (MEMORY, Resource.MEMORY, Unit.BYTES, Reading.NODE_MEMORY, Ranking.MEMORY, None),
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: (MEMORY, Resource.MEMORY, Unit.BYTES, Reading.PODS_MEMORY, Ranking.MEMORY,
                                          None),
    Signal.NODEFS_AVAILABLE: (DISK, STORAGE, Unit.BYTES, Reading.FS_BYTES, Ranking.DISK, Filesystem.NODEFS),
    Signal.NODEFS_INODES_FREE: (DISK, INODES, Unit.INODES, Reading.FS_INODES, Ranking.DISK, Filesystem.NODEFS),
    Signal.IMAGEFS_AVAILABLE: (DISK, STORAGE, Unit.BYTES, Reading.FS_BYTES, Ranking.DISK, Filesystem.IMAGEFS),
    Signal.IMAGEFS_INODES_FREE: (DISK, INODES, Unit.INODES, Reading.FS_INODES, Ranking.DISK, Filesystem.IMAGEFS),
    Signal.CONTAINERFS_AVAILABLE: (DISK, STORAGE, Unit.BYTES, Reading.FS_BYTES, Ranking.DISK, Filesystem.CONTAINERFS),
    Signal.CONTAINERFS_INODES_FREE: (DISK, INODES, Unit.INODES, Reading.FS_INODES, Ranking.DISK,
                                     Filesystem.CONTAINERFS),
    Signal.PID_AVAILABLE: (PID, Resource.PIDS, Unit.PIDS, Reading.PIDS, Ranking.PIDS, None),
}


# evictd's memory stall-family signals: MemoryPressure, memory, ranked as memory.available (reading, PSI line: none
# for the refault signal, a rate of /proc/vmstat's refault count).
STALL = {
    Signal.MEMORY_STALL_SOME: (Reading.NODE_MEMORY_STALL, StallKind.SOME),
    Signal.MEMORY_STALL_FULL: (Reading.NODE_MEMORY_STALL, StallKind.FULL),
    Signal.ALLOCATABLE_MEMORY_STALL_SOME: (Reading.PODS_MEMORY_STALL, StallKind.SOME),
    Signal.ALLOCATABLE_MEMORY_STALL_FULL: (Reading.PODS_MEMORY_STALL, StallKind.FULL),
    Signal.MEMORY_REFAULT: (Reading.NODE_MEMORY_REFAULT, None),
    Signal.DAEMONS_REFAULT: (Reading.DAEMONS_MEMORY_REFAULT, None),
}


@pytest.mark.parametrize("signal", list(UPSTREAM), ids=str)
def test_each_signal_is_declared_with_the_kubelets_facts(signal: Signal) -> None:
    spec = spec_of(signal)
    assert (spec.condition, spec.resource, spec.unit, spec.reading, spec.ranking, spec.filesystem) == UPSTREAM[signal]
    assert spec.stall is None and not spec.stall_family


def test_the_signals_are_the_kubelets_usable_nine_and_evictds_six_stall_family_signals() -> None:
    assert set(Signal) == set(UPSTREAM) | set(STALL)
    assert not set(UPSTREAM) & set(STALL)
    assert set(STALL) == EVICTD_SIGNALS


@pytest.mark.parametrize("signal", list(STALL), ids=str)
def test_a_stall_signal_sets_memory_pressure_and_ranks_as_memory(signal: Signal) -> None:
    spec = spec_of(signal)
    assert (spec.condition, spec.resource, spec.unit, spec.ranking, spec.filesystem) == (
        MEMORY, Resource.MEMORY, Unit.BASIS_POINTS, Ranking.MEMORY, None)
    assert (spec.reading, spec.stall) == STALL[signal]
    assert spec.is_memory and spec.stall_family and not spec.memcg_watched
    assert "/" in signal and parse_stall_signal(signal) is signal


@pytest.mark.parametrize("signal", list(STALL), ids=str)
def test_a_kubelet_configuration_cannot_name_a_stall_signal(signal: Signal) -> None:
    with pytest.raises(ConfigError, match=f"^unsupported eviction signal {signal}$"):
        parse_signal(signal)


@pytest.mark.parametrize("name", ["memory.available", "evictd.io/memory.stall", "memory.stall.some"])
def test_the_stall_maps_name_only_stall_signals(name: str) -> None:
    with pytest.raises(ConfigError, match=f"^unsupported stall signal {name} \\(one of evictd.io/"):
        parse_stall_signal(name)


@pytest.mark.parametrize(
    ("signal", "is_memory", "memcg_watched"),
    [
        (Signal.MEMORY_AVAILABLE, True, True),
        (Signal.ALLOCATABLE_MEMORY_AVAILABLE, True, True),
        (Signal.NODEFS_AVAILABLE, False, False),
        (Signal.PID_AVAILABLE, False, False),
    ],
    ids=str,
)
def test_memory_signals_and_the_ones_memory_cgroups_watch(signal: Signal, is_memory: bool, memcg_watched: bool) -> None:
    assert spec_of(signal).is_memory is is_memory
    assert spec_of(signal).memcg_watched is memcg_watched


@pytest.mark.parametrize("name", ["swap.available", "mem.available", "invalid.foo"])
def test_an_unsupported_signal_is_refused_with_the_kubelets_text(name: str) -> None:
    with pytest.raises(ConfigError, match=f"^unsupported eviction signal {name}$"):
        parse_signal(name)

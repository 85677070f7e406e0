"""Tests of evictd.core.signals: each signal's declared facts are the kubelet's (KUBELET_SPEC §1; helpers.go's
signalToNodeCondition and signalToResource, api/types.go's byte-valued signals, buildSignalToRankFunc)."""

from __future__ import annotations

import pytest

from evictd.core.errors import ConfigError
from evictd.core.signals import (
    Filesystem,
    NodeCondition,
    Ranking,
    Reading,
    Resource,
    Signal,
    Unit,
    parse_signal,
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


@pytest.mark.parametrize("signal", list(Signal), ids=str)
def test_each_signal_is_declared_with_the_kubelets_facts(signal: Signal) -> None:
    spec = spec_of(signal)
    assert (spec.condition, spec.resource, spec.unit, spec.reading, spec.ranking, spec.filesystem) == UPSTREAM[signal]


def test_the_nine_signals_are_the_kubelets_usable_ones() -> None:
    assert set(Signal) == set(UPSTREAM)


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

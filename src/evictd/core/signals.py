"""Vocabulary of eviction: signals, node conditions, starved resources, and every signal's facts in one table.

Strings are the kubelet's own (`pkg/kubelet/eviction/api/types.go`, `helpers.go` init tables), so they can
be compared with kubelet configuration, metrics and messages unchanged.

Invariants: each signal is declared once, in `_declared` (its condition, resource, unit, Summary reading and
rank function: a `SignalSpec`); everything else asks `spec_of` and dispatches on the spec's enums with
`match` ending in `assert_never`, so a signal or a rule without its case is a mypy error, not a KeyError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import assert_never

from evictd.core.errors import ConfigError


class Signal(StrEnum):
    """An eviction signal (KUBELET_SPEC §1): the kubelet's nine, which alone a KubeletConfiguration may name, and
    evictd's memory stall-family signals (EVICTD_SIGNALS), named only by EvictdConfiguration's stall maps."""

    MEMORY_AVAILABLE = "memory.available"
    ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
    NODEFS_AVAILABLE = "nodefs.available"
    NODEFS_INODES_FREE = "nodefs.inodesFree"
    IMAGEFS_AVAILABLE = "imagefs.available"
    IMAGEFS_INODES_FREE = "imagefs.inodesFree"
    CONTAINERFS_AVAILABLE = "containerfs.available"
    CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
    PID_AVAILABLE = "pid.available"
    # evictd's own: node and pods cgroup memory PSI, `some` or `full`; the domain prefix keeps them apart.
    MEMORY_STALL_SOME = "evictd.io/memory.stall.some"
    MEMORY_STALL_FULL = "evictd.io/memory.stall.full"
    ALLOCATABLE_MEMORY_STALL_SOME = "evictd.io/allocatableMemory.stall.some"
    ALLOCATABLE_MEMORY_STALL_FULL = "evictd.io/allocatableMemory.stall.full"
    # evictd's own: the share of the node's memory refaulted within ~10 s (`evictd.core.refault`); needs no PSI.
    MEMORY_REFAULT = "evictd.io/memory.refault"
    # evictd's own: the node's daemons (system.slice) re-reading their memory within ~2 s (`core.daemon_refault`).
    DAEMONS_REFAULT = "evictd.io/daemons.refault"


# api/types.go's `swap.available` has no resource, so the kubelet rejects it; the enum holds usable signals only.


class NodeCondition(StrEnum):
    """A node pressure condition type."""

    MEMORY_PRESSURE = "MemoryPressure"
    DISK_PRESSURE = "DiskPressure"
    PID_PRESSURE = "PIDPressure"


class Resource(StrEnum):
    """The resource a signal starves; used in ranking and in eviction messages."""

    MEMORY = "memory"
    EPHEMERAL_STORAGE = "ephemeral-storage"
    INODES = "inodes"
    PIDS = "pids"


class Operator(StrEnum):
    """Threshold operator. The kubelet knows only LessThan."""

    LESS_THAN = "LessThan"


class Unit(StrEnum):
    """What a signal's values count: bytes are formatted BinarySI, inodes and pids DecimalSI (KUBELET_SPEC §1
    rule 3); the value is the suffix of the signal's metrics."""

    BYTES = "bytes"
    INODES = "inodes"
    PIDS = "pids"
    # Stall headroom in basis points: 10000 - the stall share x 100 (`stall_share`); refault: 10000 - its share.
    BASIS_POINTS = "basis_points"


class Filesystem(StrEnum):
    """The filesystem a disk signal observes (its Summary block, and its row in `evictd.core.fs_layout`)."""

    NODEFS = "nodefs"
    IMAGEFS = "imagefs"
    CONTAINERFS = "containerfs"


class Reading(StrEnum):
    """Which figures of the Summary a signal is observed from (`evictd.core.summary.signal_observations`)."""

    NODE_MEMORY = "node memory"  # node.memory: available of available + working set
    PODS_MEMORY = "pods memory"  # the same of the `pods` system container (node allocatable)
    FS_BYTES = "filesystem bytes"  # the signal's filesystem: availableBytes of capacityBytes
    FS_INODES = "filesystem inodes"  # the signal's filesystem: inodesFree of inodes
    PIDS = "pids"  # rlimit: maxpid - curproc of maxpid
    NODE_MEMORY_STALL = "node memory stall"  # node.memory.psi: 100% - the stall share, of 100%
    PODS_MEMORY_STALL = "pods memory stall"  # the same of the `pods` system container (its memory.pressure)
    # 100% less the share of the node's memory refaulted in ~10 s: two readings a window apart (`evictd.core.refault`).
    NODE_MEMORY_REFAULT = "node memory refault"
    # 100% less the share of the daemons' memory they re-read in ~2 s (`evictd.core.daemon_refault`).
    DAEMONS_MEMORY_REFAULT = "daemons memory refault"


class StallKind(StrEnum):
    """Which PSI line a stall signal reads: some task stalled on memory, or all non-idle tasks at once."""

    SOME = "some"
    FULL = "full"


class Ranking(StrEnum):
    """Which rank function orders pods under pressure on a signal (`evictd.core.ranking`, KUBELET_SPEC §9)."""

    MEMORY = "memory"  # exceedMemoryRequests, priority, memory
    PIDS = "pids"  # priority, process
    DISK = "disk"  # exceedDiskRequests, priority, disk over the layout's fs stats types of the signal


# The readings of memory cgroups: the signals the memcg notifiers and the memory watch follow.
MEMCG_READINGS = frozenset({Reading.NODE_MEMORY, Reading.PODS_MEMORY})
# evictd's memory stall family: thresholds in the stall maps, read as a share, gated and settled.
STALL_FAMILY_READINGS = frozenset({Reading.NODE_MEMORY_STALL, Reading.PODS_MEMORY_STALL, Reading.NODE_MEMORY_REFAULT,
                                   Reading.DAEMONS_MEMORY_REFAULT})


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """Everything evictd knows of one signal; the rest of evictd derives from it (docs/development.md): its node
    `condition`, the `resource` it starves, its `unit`, the Summary `reading` that observes it (on `filesystem`, of
    the `stall` line) and its `ranking`."""

    condition: NodeCondition
    resource: Resource
    unit: Unit
    reading: Reading
    ranking: Ranking
    filesystem: Filesystem | None = None
    stall: StallKind | None = None

    @property
    def is_memory(self) -> bool:
        """A memory signal: acted on before the others, judged by the OOM feedback (MemoryPressure)."""
        return self.condition is NodeCondition.MEMORY_PRESSURE

    @property
    def stall_family(self) -> bool:
        """One of evictd's memory stall-family signals (EVICTD_SIGNALS): named only by EvictdConfiguration's stall
        maps, a share met at or above it, gated by node-wide reclaim and settled after an eviction."""
        return self.reading in STALL_FAMILY_READINGS

    @property
    def memcg_watched(self) -> bool:
        """Observed from a memory cgroup, so the memcg notifiers and the memory watch can follow it."""
        return self.reading in MEMCG_READINGS


def _disk(resource: Resource, filesystem: Filesystem) -> SignalSpec:
    """A disk signal: bytes (ephemeral-storage) or inodes of `filesystem`."""
    if resource is Resource.INODES:
        return SignalSpec(NodeCondition.DISK_PRESSURE, resource, Unit.INODES, Reading.FS_INODES, Ranking.DISK,
                          filesystem)
    return SignalSpec(NodeCondition.DISK_PRESSURE, resource, Unit.BYTES, Reading.FS_BYTES, Ranking.DISK, filesystem)


def _stall(reading: Reading, kind: StallKind) -> SignalSpec:
    """A memory stall signal: MemoryPressure, reclaimed and ranked as memory.available is."""
    return SignalSpec(NodeCondition.MEMORY_PRESSURE, Resource.MEMORY, Unit.BASIS_POINTS, reading, Ranking.MEMORY,
                      stall=kind)


def _declared(signal: Signal) -> SignalSpec:
    """The table: one case per signal, so that mypy reports a signal without one (`assert_never`)."""
    match signal:
        case Signal.MEMORY_AVAILABLE:
            return SignalSpec(NodeCondition.MEMORY_PRESSURE, Resource.MEMORY, Unit.BYTES, Reading.NODE_MEMORY,
                              Ranking.MEMORY)
        case Signal.ALLOCATABLE_MEMORY_AVAILABLE:
            return SignalSpec(NodeCondition.MEMORY_PRESSURE, Resource.MEMORY, Unit.BYTES, Reading.PODS_MEMORY,
                              Ranking.MEMORY)
        case Signal.NODEFS_AVAILABLE:
            return _disk(Resource.EPHEMERAL_STORAGE, Filesystem.NODEFS)
        case Signal.NODEFS_INODES_FREE:
            return _disk(Resource.INODES, Filesystem.NODEFS)
        case Signal.IMAGEFS_AVAILABLE:
            return _disk(Resource.EPHEMERAL_STORAGE, Filesystem.IMAGEFS)
        case Signal.IMAGEFS_INODES_FREE:
            return _disk(Resource.INODES, Filesystem.IMAGEFS)
        case Signal.CONTAINERFS_AVAILABLE:
            return _disk(Resource.EPHEMERAL_STORAGE, Filesystem.CONTAINERFS)
        case Signal.CONTAINERFS_INODES_FREE:
            return _disk(Resource.INODES, Filesystem.CONTAINERFS)
        case Signal.PID_AVAILABLE:
            return SignalSpec(NodeCondition.PID_PRESSURE, Resource.PIDS, Unit.PIDS, Reading.PIDS, Ranking.PIDS)
        case Signal.MEMORY_STALL_SOME:
            return _stall(Reading.NODE_MEMORY_STALL, StallKind.SOME)
        case Signal.MEMORY_STALL_FULL:
            return _stall(Reading.NODE_MEMORY_STALL, StallKind.FULL)
        case Signal.ALLOCATABLE_MEMORY_STALL_SOME:
            return _stall(Reading.PODS_MEMORY_STALL, StallKind.SOME)
        case Signal.ALLOCATABLE_MEMORY_STALL_FULL:
            return _stall(Reading.PODS_MEMORY_STALL, StallKind.FULL)
        case Signal.MEMORY_REFAULT:
            return SignalSpec(NodeCondition.MEMORY_PRESSURE, Resource.MEMORY, Unit.BASIS_POINTS,
                              Reading.NODE_MEMORY_REFAULT, Ranking.MEMORY)
        case Signal.DAEMONS_REFAULT:
            return SignalSpec(NodeCondition.MEMORY_PRESSURE, Resource.MEMORY, Unit.BASIS_POINTS,
                              Reading.DAEMONS_MEMORY_REFAULT, Ranking.MEMORY)
        case _:
            assert_never(signal)


# Every signal's spec in `Signal` order, matched once rather than on every call (derived from `_declared`).
SIGNAL_SPECS: Mapping[Signal, SignalSpec] = MappingProxyType({signal: _declared(signal) for signal in Signal})


def spec_of(signal: Signal) -> SignalSpec:
    """Return the facts of `signal` (every signal has them: a type error otherwise, never a KeyError)."""
    return SIGNAL_SPECS[signal]


# Metric label values of local-storage limit evictions (KUBELET_SPEC §12).
EMPTYDIR_LIMIT_SIGNAL = "emptydirfs.limit"
POD_EPHEMERAL_LIMIT_SIGNAL = "ephemeralpodfs.limit"
CONTAINER_EPHEMERAL_LIMIT_SIGNAL = "ephemeralcontainerfs.limit"


# The signals only EvictdConfiguration names (docs/configuration.md "Memory stall thresholds").
EVICTD_SIGNALS = frozenset(signal for signal, spec in SIGNAL_SPECS.items() if spec.stall_family)


def parse_signal(name: str) -> Signal:
    """Return the kubelet's Signal named `name`; raise ConfigError with the kubelet's text if the kubelet does not
    support it (evictd's own signals included: a KubeletConfiguration is read as the kubelet reads it)."""
    try:
        signal = Signal(name)
    except ValueError:
        signal = None
    if signal is None or signal in EVICTD_SIGNALS:
        raise ConfigError(f"unsupported eviction signal {name}")
    return signal


def parse_stall_signal(name: str) -> Signal:
    """Return the memory stall signal named `name`; raise ConfigError listing them otherwise."""
    try:
        signal = Signal(name)
    except ValueError:
        signal = None
    if signal is None or signal not in EVICTD_SIGNALS:
        raise ConfigError(f"unsupported stall signal {name} (one of {', '.join(sorted(EVICTD_SIGNALS))})")
    return signal

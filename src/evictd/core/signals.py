"""Vocabulary of eviction: signals, node conditions, starved resources and the tables between them.

Strings are the kubelet's own (`pkg/kubelet/eviction/api/types.go`, `helpers.go` init tables), so they can
be compared with kubelet configuration, metrics and messages unchanged. Tables are literals, never built by
code at import time.
"""

from __future__ import annotations

from enum import StrEnum

from evictd.core.errors import ConfigError


class Signal(StrEnum):
    """An eviction signal (KUBELET_SPEC §1). Only these nine are accepted by the parser."""

    MEMORY_AVAILABLE = "memory.available"
    ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
    NODEFS_AVAILABLE = "nodefs.available"
    NODEFS_INODES_FREE = "nodefs.inodesFree"
    IMAGEFS_AVAILABLE = "imagefs.available"
    IMAGEFS_INODES_FREE = "imagefs.inodesFree"
    CONTAINERFS_AVAILABLE = "containerfs.available"
    CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
    PID_AVAILABLE = "pid.available"


# api/types.go also declares `swap.available`, but it is not in the signal->resource table, so the
# kubelet rejects it as unsupported; the enum holds only the nine usable signals.


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


SIGNAL_TO_CONDITION: dict[Signal, NodeCondition] = {
    Signal.MEMORY_AVAILABLE: NodeCondition.MEMORY_PRESSURE,
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: NodeCondition.MEMORY_PRESSURE,
    Signal.NODEFS_AVAILABLE: NodeCondition.DISK_PRESSURE,
    Signal.NODEFS_INODES_FREE: NodeCondition.DISK_PRESSURE,
    Signal.IMAGEFS_AVAILABLE: NodeCondition.DISK_PRESSURE,
    Signal.IMAGEFS_INODES_FREE: NodeCondition.DISK_PRESSURE,
    Signal.CONTAINERFS_AVAILABLE: NodeCondition.DISK_PRESSURE,
    Signal.CONTAINERFS_INODES_FREE: NodeCondition.DISK_PRESSURE,
    Signal.PID_AVAILABLE: NodeCondition.PID_PRESSURE,
}

SIGNAL_TO_RESOURCE: dict[Signal, Resource] = {
    Signal.MEMORY_AVAILABLE: Resource.MEMORY,
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: Resource.MEMORY,
    Signal.NODEFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.NODEFS_INODES_FREE: Resource.INODES,
    Signal.IMAGEFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.IMAGEFS_INODES_FREE: Resource.INODES,
    Signal.CONTAINERFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.CONTAINERFS_INODES_FREE: Resource.INODES,
    Signal.PID_AVAILABLE: Resource.PIDS,
}

# Signals whose observed values are bytes (BinarySI when formatted); the others count inodes or pids and
# are formatted DecimalSI (KUBELET_SPEC §1 rule 3).
BYTE_SIGNALS: frozenset[Signal] = frozenset(
    {
        Signal.MEMORY_AVAILABLE,
        Signal.ALLOCATABLE_MEMORY_AVAILABLE,
        Signal.NODEFS_AVAILABLE,
        Signal.IMAGEFS_AVAILABLE,
        Signal.CONTAINERFS_AVAILABLE,
    }
)

MEMORY_SIGNALS: frozenset[Signal] = frozenset(
    {Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE}
)

# Metric label values of local-storage limit evictions (KUBELET_SPEC §12).
EMPTYDIR_LIMIT_SIGNAL = "emptydirfs.limit"
POD_EPHEMERAL_LIMIT_SIGNAL = "ephemeralpodfs.limit"
CONTAINER_EPHEMERAL_LIMIT_SIGNAL = "ephemeralcontainerfs.limit"


def parse_signal(name: str) -> Signal:
    """Return the Signal named `name`; raise ConfigError with the kubelet's text if it is not supported."""
    try:
        return Signal(name)
    except ValueError:
        raise ConfigError(f"unsupported eviction signal {name}") from None

"""The node's daemons' cgroup, ``system.slice``, as the daemons refault signal reads it: re-reads, usage and anon.

system.slice sits at the memory hierarchy's root whatever cgroupRoot is (as `evictd.adapters.node_protection`
places it); its memory.stat is hierarchical, so kubelet.service and the runtime count in it. The re-reads are the
first of `V2_REFAULT_KEYS` (v2) or `V1_REFAULT_KEYS` (v1: the hierarchy's ``total_`` lines) the kernel prints,
pages turned to bytes; the usage is memory.current (v2) or memory.usage_in_bytes (v1), the anonymous memory
``anon`` (v2) or ``total_rss`` (v1) where printed, and on v2 what ``memory.min``/``memory.low`` protect, its
``memory.events`` ``low`` (reclaims below that protection), memory.stat ``pgsteal`` (its pages reclaimed) and
``file`` (its page cache). Nothing is written.
Invariants: no system.slice is None (`daemons_missing` says so at start), never a zero; an unreadable file or a
malformed line raises SampleError (the cycle records it and the signal has no figure).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from evictd.adapters.cgroups import (
    V1_ANON_KEY,
    V2_ANON_KEY,
    CgroupLayout,
    cgroup_folder,
    flat_keyed_value,
    has_key,
    optional_keyed_value,
    read_file_if_present,
    uint_value,
)
from evictd.adapters.procfs import PAGE_BYTES
from evictd.core.errors import SampleError
from evictd.core.node_protection import SYSTEM_SLICE

# Page cache dropped and read again (5.9+ ``_file``; the one count before), then major faults where the kernel
# counts no refaults per cgroup: rougher (mmap re-reads only, one page a fault, first reads of mapped files too).
V2_REFAULT_KEYS = (b"workingset_refault_file", b"workingset_refault", b"pgmajfault")
V1_REFAULT_KEYS = (b"total_workingset_refault_file", b"total_workingset_refault", b"total_pgmajfault")
# v2: the cgroup's pages reclaimed (hierarchical, 4.x+), and memory.events' count of reclaims below memory.low.
V2_RECLAIMED_KEY = b"pgsteal"
V2_LOW_EVENTS_KEY = b"low"
# v2: the cgroup's page cache (hierarchical), what its protection keeps of it is weighed against MemAvailable.
V2_FILE_KEY = b"file"


@dataclass(frozen=True, slots=True)
class DaemonCounts:
    """One reading of system.slice: bytes re-read since it was made (`counted`: the memory.stat line read), its
    memory usage and its anonymous memory (bytes; None: not printed)."""

    refault_bytes: int
    usage_bytes: int
    counted: str
    anon_bytes: int | None = None
    protected_bytes: int | None = None  # v2: the larger of memory.min and memory.low ("max": the usage); v1: None
    low_events: int | None = None  # v2: memory.events "low"; v1, or no such line: None
    reclaimed_bytes: int | None = None  # v2: memory.stat "pgsteal" in bytes; v1, or no such line: None
    file_bytes: int | None = None  # v2: memory.stat "file"; v1, or no such line: None

    @property
    def cache_protected(self) -> bool:
        """Whether a protection holds page cache read here (v2, memory.low/min set): only then is the node's
        MemAvailable read beside it (`evictd.core.daemon_refault.uncovered_bytes`)."""
        return self.file_bytes is not None and bool(self.protected_bytes)


def daemons_folder(layout: CgroupLayout) -> str:
    """system.slice's folder in the memory hierarchy of `layout`."""
    return cgroup_folder(str(layout.memory_hierarchy), SYSTEM_SLICE)


def _first_key(data: bytes, keys: tuple[bytes, ...]) -> bytes | None:
    return next((key for key in keys if has_key(data, key)), None)


def daemon_counts(layout: CgroupLayout) -> DaemonCounts | None:
    """Read system.slice now (None: no system.slice, or its memory.stat counts none of the keys). Raises
    SampleError."""
    folder = daemons_folder(layout)
    stat_path = folder + "/memory.stat"
    data = read_file_if_present(stat_path)
    if data is None:
        return None
    key = _first_key(data, V1_REFAULT_KEYS if layout.version == 1 else V2_REFAULT_KEYS)
    if key is None:
        return None
    usage_path = folder + ("/memory.usage_in_bytes" if layout.version == 1 else "/memory.current")
    usage = read_file_if_present(usage_path)
    if usage is None:
        return None
    anon = optional_keyed_value(stat_path, data, V1_ANON_KEY if layout.version == 1 else V2_ANON_KEY)
    used = uint_value(usage_path, usage)
    refaulted = flat_keyed_value(stat_path, data, key) * PAGE_BYTES
    if layout.version == 1:
        return DaemonCounts(refaulted, used, key.decode(), anon)
    protected = max(_protection(folder + "/memory.min", used), _protection(folder + "/memory.low", used))
    stolen = optional_keyed_value(stat_path, data, V2_RECLAIMED_KEY)
    events_path = folder + "/memory.events"
    events = read_file_if_present(events_path)
    low = None if events is None else optional_keyed_value(events_path, events, V2_LOW_EVENTS_KEY)
    return DaemonCounts(refaulted, used, key.decode(), anon, protected, low,
                        None if stolen is None else stolen * PAGE_BYTES,
                        optional_keyed_value(stat_path, data, V2_FILE_KEY))


def _protection(path: str, usage_bytes: int) -> int:
    """A v2 protection file's bytes (absent: 0; "max": all of `usage_bytes`). Raises SampleError."""
    data = read_file_if_present(path)
    if data is None:
        return 0
    if data.strip() == b"max":
        return usage_bytes
    return uint_value(path, data)


def daemons_missing(layout: CgroupLayout) -> str | None:
    """Why the daemons refault signal has nothing to read on this node (None: system.slice counts re-reads, or cannot
    be read now: a problem of every cycle, logged as such)."""
    folder = daemons_folder(layout)
    if not os.path.isdir(folder):
        return f"{folder}: no such cgroup (no systemd system.slice in the memory hierarchy)"
    keys = V1_REFAULT_KEYS if layout.version == 1 else V2_REFAULT_KEYS
    try:
        data = read_file_if_present(folder + "/memory.stat")
    except SampleError:
        return None
    if data is None:
        return f"{folder}/memory.stat: absent (no memory controller on system.slice)"
    if _first_key(data, keys) is None:
        return f"{folder}/memory.stat has no {' or '.join(key.decode() for key in keys)}"
    return None

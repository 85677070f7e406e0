"""evictd's daemons refault figure: the share of the node's daemons' memory they re-read from disk within ~2 s.

The observation of ``evictd.io/daemons.refault``. The daemons are ``system.slice`` (kubelet.service, the runtime
and journald are in it on systemd nodes); its memory.stat counts the page cache they had dropped and read again
(``workingset_refault_file``; ``workingset_refault`` before 5.9; ``pgmajfault`` pages where the kernel counts
neither, `evictd.adapters.daemon_cgroups`), on cgroup v1 and v2, with or without PSI. The figure is the
bytes re-read over `DAEMON_REFAULT_WINDOW_S` as a share of the daemons' memory the kernel may reclaim from a file:
their usage less ``anon`` (their page cache and kernel memory), and less what ``memory.low``/``memory.min`` keep
from reclaim beyond it (at least `DAEMON_MIN_MEMORY_BYTES`), in basis points, so a threshold reads as the stall
signals' do ("50%"). Anonymous memory is never re-read from a file: a daemon with a large heap would hide its own
thrash in it; protected memory is not re-read either, and a slice protected up to most of its usage would hide the
thrash of the rest in it. Where the kernel reclaims below their ``memory.low`` within the span (system.slice's
``memory.events`` ``low`` grew, v2: nothing else was left to reclaim), the bytes it reclaimed of them (``pgsteal``)
count as re-read if more: their protected working set is going, and the re-reads come a second later. Before that
breach, their protected page cache the node's available memory (/proc/meminfo ``MemAvailable``) no longer covers
counts too (`uncovered_bytes`, a level): the kernel has then little but that cache left to reclaim, and breaks into
it seconds later (2.3-8.3 s before the first ``low`` event in the arena's traces, docs/node-survival.md). Readings
are kept and compared as the node's refault figure's are (`evictd.core.refault`), over this shorter window.

Invariants: pure (`now` given), inputs never mutated. The first reading gives no figure (never a false 0); a lower
count is a new baseline; a reading without the count gives no figure and keeps the earlier readings.
"""
from __future__ import annotations

from collections.abc import Sequence

from evictd.core.refault import RefaultFigure, RefaultSample, next_samples, refault_figure
from evictd.core.summary import SYSTEM_CONTAINER_DAEMONS, MemoryStats, NodeStats

# The span the daemons' re-reads are judged over: a daemon that re-reads its working set within it is stalled on
# disk, not merely busy (a heartbeat every second re-reads it twice).
DAEMON_REFAULT_WINDOW_S = 2.0
# The shortest span a figure is made over (scaled up): a figure is then at most twice its span's rate.
DAEMON_REFAULT_MIN_SPAN_S = 1.0
# A base reading older than this (a window) gives way to the newest at least `DAEMON_REFAULT_MIN_SPAN_S` old: an
# older base averages a quieter past into the window's re-reads, a second late at a thrash's onset.
DAEMON_REFAULT_STALE_S = DAEMON_REFAULT_WINDOW_S
# The watch wakes the loop once at this part of a share, so that the cycle it wakes at the share has a fresh base.
DAEMONS_BASELINE_SHARE = 0.5
# The daemons' memory a share is taken of, at the least: one readahead (128 KiB) into a near-empty slice is no thrash.
DAEMON_MIN_MEMORY_BYTES = 32 << 20


def daemons_memory(node: NodeStats) -> MemoryStats | None:
    """The daemons' memory block of the node (None: not read, or no ``system.slice`` on this node)."""
    daemons = node.system_containers.get(SYSTEM_CONTAINER_DAEMONS)
    return None if daemons is None else daemons.memory


def daemon_refault_sample(memory: MemoryStats | None, now: float) -> RefaultSample | None:
    """The daemons' refault reading of their memory block at `now` (None: no count in it)."""
    reclaim = None if memory is None else memory.reclaim
    if reclaim is None or reclaim.refault_file_bytes is None:
        return None
    uncovered = None if memory is None or memory.usage_bytes is None else uncovered_bytes(
        reclaim.file_bytes, memory.usage_bytes, reclaim.protected_bytes, reclaim.node_available_bytes)
    return RefaultSample(now, reclaim.refault_file_bytes, low_events=reclaim.low_events,
                         reclaimed_bytes=reclaim.reclaimed_bytes, uncovered_bytes=uncovered)


def protected_file_bytes(file_bytes: int, usage_bytes: int, protected_bytes: int) -> int:
    """The daemons' page cache that their protection (`protected_bytes`: the larger of memory.min and memory.low) keeps
    from reclaim: the kernel takes from a cgroup only its usage over the protection, and of the daemons only page cache
    (no swap), so what their usage that is not page cache leaves of the protection, at most all of the cache."""
    return min(file_bytes, max(0, protected_bytes - max(0, usage_bytes - file_bytes)))


def uncovered_bytes(file_bytes: int | None, usage_bytes: int, protected_bytes: int | None,
                    node_available_bytes: int | None) -> int | None:
    """The daemons' protected page cache (`protected_file_bytes`) that the node's available memory (``MemAvailable``,
    which counts that cache as reclaimable) no longer covers: what the kernel must take from it to give that much
    memory; 0 with no protection, None where a figure is not read."""
    if file_bytes is None or protected_bytes is None or node_available_bytes is None:
        return None
    return max(0, protected_file_bytes(file_bytes, usage_bytes, protected_bytes) - node_available_bytes)


def daemon_share_base(usage_bytes: int, anon_bytes: int | None, protected_bytes: int | None = None) -> int:
    """The daemons' memory a share is taken of: usage less anonymous memory (all of it where that is not read), and
    no more than their usage beyond what is protected from reclaim (`protected_bytes`; None: nothing), at least
    `DAEMON_MIN_MEMORY_BYTES`."""
    exposed = usage_bytes - min(protected_bytes or 0, usage_bytes)
    return max(min(usage_bytes - min(anon_bytes or 0, usage_bytes), exposed), DAEMON_MIN_MEMORY_BYTES)


def daemon_memory_bytes(memory: MemoryStats | None) -> int | None:
    """`daemon_share_base` of the daemons' memory block (its ``rss_bytes`` is their anonymous memory; None: not
    read)."""
    if memory is None or memory.usage_bytes is None:
        return None
    return daemon_share_base(memory.usage_bytes, memory.rss_bytes,
                             None if memory.reclaim is None else memory.reclaim.protected_bytes)


def next_daemon_samples(samples: Sequence[RefaultSample], sample: RefaultSample | None,
                        now: float) -> tuple[RefaultSample, ...]:
    """The daemons' readings to keep after `sample` at `now` (`evictd.core.refault.next_samples` over the window)."""
    return next_samples(samples, sample, now, window_s=DAEMON_REFAULT_WINDOW_S)


def daemon_refault_figure(samples: Sequence[RefaultSample], memory_bytes: int | None) -> RefaultFigure | None:
    """The daemons' figure of `samples` (as `next_daemon_samples` keeps them) against `memory_bytes`
    (`daemon_memory_bytes`), scaled to the window; None with a single reading or a span under the minimum."""
    return refault_figure(samples, memory_bytes, window_s=DAEMON_REFAULT_WINDOW_S,
                          min_span_s=DAEMON_REFAULT_MIN_SPAN_S, stale_s=DAEMON_REFAULT_STALE_S)

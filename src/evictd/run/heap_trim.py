"""Giving the C heap's free pages back to the kernel after each cycle (glibc's `malloc_trim(0)`).

A cycle's peaks (a Summary of thousands of pods, the flight recorder's whole line on a new segment: megabytes of
strings, which CPython takes from `malloc` beyond 512 bytes) are freed when the cycle ends, but glibc returns to
the kernel only the free memory at the top of its heap, and each thread's arena keeps its own: the pages of
everything freed below a chunk still in use stay in the process's RSS, up to the highest peak seen. `malloc_trim(0)`
releases every whole free page of every arena (`madvise(MADV_DONTNEED)`); the allocator reuses them as before.
At 5,000 pods it took 0.4 ms a cycle (3 ms at most) and 5-6 MiB off the daemon's RSS (docs/measured-figures.md).
It cannot touch CPython's own small-object arenas (objects of at most 512 bytes), which are freed whole or not
at all. At most one trim every `TRIM_EVERY_S` (5 s): at the 10 s tick every cycle trims; cycles close together (a
tenant flapping across a threshold runs 1-3 a second) trim once, since a trim after each would hand back pages the
next cycle faults in again.

Only where the C library has `malloc_trim` (glibc); elsewhere (musl) `heap_trimmer()` returns None and nothing
runs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from evictd.cycle.finished import AfterCycle, Cycle

# The least time between two trims (module docstring).
TRIM_EVERY_S = 5.0


def malloc_trim() -> Callable[[], object] | None:
    """The C library's `malloc_trim(0)` as a call, or None when the library has none."""
    try:
        function = ctypes.CDLL(None).malloc_trim  # the process's own symbols: its C library's
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return lambda: function(0)


def heap_trimmer(*, trim: Callable[[], object] | None = None) -> AfterCycle | None:
    """An after-cycle hook returning the C heap's free pages to the kernel, at most once every `TRIM_EVERY_S` of the
    cycles' monotonic start times (None without `malloc_trim`). `trim`: the call (default: `malloc_trim()`'s)."""
    call = trim if trim is not None else malloc_trim()
    if call is None:
        return None
    last: list[float] = []  # the start of the last cycle after which the heap was trimmed

    def trim_heap(cycle: Cycle) -> None:
        if last and cycle.started_at - last[0] < TRIM_EVERY_S:
            return
        call()
        last[:] = [cycle.started_at]

    return trim_heap

"""Giving the C heap's free pages back to the kernel after each cycle (glibc's `malloc_trim(0)`).

A cycle's peaks (thousands of pods' Summary, the recorder's lines) are freed at its end, but glibc returns only the
top of each arena, so RSS stays at the highest peak. `malloc_trim(0)` releases every whole free page of every arena
(docs/measured-figures.md); CPython's small-object arenas are out of its reach. At most once every `TRIM_EVERY_S`:
cycles close together (a flapping tenant) trim once, not handing back pages the next faults in again. Only with
glibc; elsewhere `heap_trimmer()` returns None.
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

"""Giving the C heap's free pages back to the kernel after each cycle (glibc's `malloc_trim(0)`).

A cycle's peaks (thousands of pods' Summary, the recorder's lines) are freed at its end, but glibc returns only the
top of each arena, so RSS stays at the highest peak. `malloc_trim(0)` releases every whole free page of every arena
(docs/measured-figures.md); CPython's small-object arenas are out of its reach. At most once every `TRIM_EVERY_S`:
cycles close together (a flapping tenant) trim once, not handing back pages the next faults in again. Never while the
node's memory.available is under `KEEP_PAGES_FACTOR` times its highest memory.available threshold (or unknown): each
page handed back there is faulted in again under reclaim, with Python's lock held. Only with glibc; elsewhere
`heap_trimmer()` returns None.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Signal
from evictd.core.thresholds import Threshold, threshold_quantity
from evictd.cycle.finished import AfterCycle, Cycle

# The least time between two trims (module docstring).
TRIM_EVERY_S = 5.0
# Under this many times the highest memory.available threshold the heap keeps its free pages (docs/node-survival.md,
# "evictd's own faults": the one-CPU guest's onset stalls came with evictd's threads faulting under direct reclaim).
KEEP_PAGES_FACTOR = 2


def keeps_pages(cycle: Cycle, thresholds: Sequence[Threshold]) -> bool:
    """Whether the node is near enough its memory thresholds (or its memory unknown) that the heap keeps its pages."""
    memory_thresholds = [threshold for threshold in thresholds if threshold.signal is Signal.MEMORY_AVAILABLE]
    if not memory_thresholds:
        return False
    summary = cycle.report.observed.summary
    memory = None if summary is None else summary.node.memory
    if memory is None or memory.available_bytes is None or memory.working_set_bytes is None:
        return True
    capacity = Quantity.from_int(memory.available_bytes + memory.working_set_bytes, QuantityFormat.BINARY_SI)
    floor = max(threshold_quantity(threshold.value, capacity).ceil_int() for threshold in memory_thresholds)
    return memory.available_bytes < KEEP_PAGES_FACTOR * floor


def malloc_trim() -> Callable[[], object] | None:
    """The C library's `malloc_trim(0)` as a call, or None when the library has none."""
    try:
        function = ctypes.CDLL(None).malloc_trim  # the process's own symbols: its C library's
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return lambda: function(0)


def heap_trimmer(thresholds: Sequence[Threshold] = (), *, trim: Callable[[], object] | None = None
                 ) -> AfterCycle | None:
    """An after-cycle hook returning the C heap's free pages to the kernel, at most once every `TRIM_EVERY_S` of the
    cycles' monotonic start times and never near the memory `thresholds` (None without `malloc_trim`). `trim`: the
    call (default: `malloc_trim()`'s)."""
    call = trim if trim is not None else malloc_trim()
    if call is None:
        return None
    last: list[float] = []  # the start of the last cycle after which the heap was trimmed

    def trim_heap(cycle: Cycle) -> None:
        if (last and cycle.started_at - last[0] < TRIM_EVERY_S) or keeps_pages(cycle, thresholds):
            return
        call()
        last[:] = [cycle.started_at]

    return trim_heap

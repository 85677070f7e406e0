"""The after-cycle heap trim (evictd.run.heap_trim), in a real process on this machine's glibc."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

from evictd.run.heap_trim import heap_trimmer

# In a fresh process: 200 MiB of 100 KiB strings (under glibc's 128 KiB mmap threshold, so from the heap), all
# freed but the last (which keeps the top of the heap in use, as a long-lived object does in the daemon); RSS
# before, after the frees and after the hook.
HEAP_PEAK = """
import json, sys
from types import SimpleNamespace
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal
from evictd.core.summary import MemoryStats, NodeStats, Summary
from evictd.core.thresholds import Threshold, ThresholdValue
from evictd.run.heap_trim import heap_trimmer

available_mib = int(sys.argv[1]) if len(sys.argv) > 1 else None
memory = MemoryStats(available_bytes=available_mib << 20, working_set_bytes=2 << 30) if available_mib else None
cycle = SimpleNamespace(started_at=0.0, report=SimpleNamespace(observed=SimpleNamespace(
    summary=Summary(node=NodeStats(memory=memory)) if memory else None)))
thresholds = [Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Quantity.parse("200Mi")))]

def rss_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

hook = heap_trimmer(thresholds if available_mib else ())
start = rss_mib()
blocks = [b"x" * (100 << 10) for _ in range(2048)]
last = blocks[-1]
del blocks
freed = rss_mib()
hook(cycle)
json.dump({"start": start, "freed": freed, "trimmed": rss_mib(), "last": len(last)}, sys.stdout)
"""


def test_the_hook_gives_freed_heap_pages_back_to_the_kernel() -> None:
    result = heap_peak()
    # Freeing alone left the pages in the process (the allocator keeps them below the chunk still in use)...
    assert result["freed"] - result["start"] > 150, result
    # ...and the hook gave them back, the one block still held intact.
    assert result["freed"] - result["trimmed"] > 150, result
    assert result["last"] == 100 << 10


def heap_peak(*available_mib: str) -> dict[str, float]:
    result: dict[str, float] = json.loads(subprocess.run(
        [sys.executable, "-c", HEAP_PEAK, *available_mib], check=True, capture_output=True, text=True,
        timeout=60).stdout)
    return result


def test_near_the_memory_thresholds_the_heap_keeps_its_pages() -> None:
    """memory.available<200Mi: at 390 MiB available (under twice 200 MiB) the freed pages stay, to be used again
    without a fault under reclaim; at 1 GiB they go back, as with no threshold."""
    near = heap_peak("390")
    assert near["freed"] - near["start"] > 150, near
    assert near["freed"] - near["trimmed"] < 10, near
    far = heap_peak("1024")
    assert far["freed"] - far["trimmed"] > 150, far


def test_cycles_close_together_trim_once_every_5_seconds() -> None:
    trims: list[int] = []
    hook = heap_trimmer(trim=lambda: trims.append(1))
    assert hook is not None
    done = []
    for started_at in (100.0, 100.4, 103.0, 104.99, 105.0, 105.5, 115.0, 125.0):
        before = len(trims)
        hook(SimpleNamespace(started_at=started_at))  # type: ignore[arg-type]
        if len(trims) > before:
            done.append(started_at)
    # The first cycle trims; then one at least 5 s after the last trim (the 10 s tick: every cycle).
    assert done == [100.0, 105.0, 115.0, 125.0]


def test_the_hook_exists_on_glibc() -> None:
    # This machine's C library is glibc: a daemon built here trims (musl, without malloc_trim, would get None).
    assert heap_trimmer() is not None

"""bench/arena_trace_record.py's ``cover`` block: MemAvailable less the daemons' protected page cache in an arena
trace, at its least before the kernel's first reclaim below their memory.low, and when each came. The figures behind
docs/node-survival.md's "The protected cache counted before the breach" are made by it from the raw traces."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import arena_trace_record  # noqa: E402  (bench/ is not a package)

MiB = 1 << 20


def trace(rows: list[tuple[float, int, int, int, int]]) -> dict[str, Any]:
    """A trace started at 100 s whose samples are (s, MemAvailable MiB, system.slice file MiB, anon MiB, low)."""
    return {"started": 100.0, "beats": [], "evictions": [], "samples": [
        [100.0 + at, {"MemAvailable": available * MiB, "sys.file": file * MiB, "sys.anon": anon * MiB,
                      "sys.events.low": low}] for at, available, file, anon, low in rows]}


def test_the_cover_falls_under_0_before_the_first_low_event() -> None:
    # 600 MiB protected, 50 MiB of it anonymous: 261 MiB of cache all kept, MemAvailable falling 20 MiB a second.
    rows = [(float(s), 400 - 20 * s, 261, 50, 0) for s in range(12)] + [(12.0, 150, 250, 50, 3), (13.0, 900, 250, 50, 9)]
    cover = arena_trace_record.cover(trace(rows), 600 * MiB)
    assert cover == {"memoryLowMib": 600, "leastCoverMib": 400 - 20 * 11 - 261, "firstUncoveredS": 7.0,
                     "firstLowEventS": 12.0, "leadS": 5.0}


def test_only_the_protected_part_of_a_large_cache_counts_and_no_breach_gives_no_lead() -> None:
    # 2 GiB of the daemons' cache under a 616 MiB memory.low with 100 MiB of heap: 516 MiB kept.
    rows = [(float(s), 1000 - 10 * s, 2048, 100, 0) for s in range(5)]
    cover = arena_trace_record.cover(trace(rows), 616 * MiB)
    assert cover == {"memoryLowMib": 616, "leastCoverMib": 960 - 516, "firstUncoveredS": None,
                     "firstLowEventS": None, "leadS": None}


def test_samples_without_memory_events_are_not_judged() -> None:
    old = {"started": 0.0, "beats": [], "evictions": [], "samples": [[1.0, {"MemAvailable": 0, "sys.file": 0}]]}
    assert arena_trace_record.cover(old, 600 * MiB)["leastCoverMib"] is None

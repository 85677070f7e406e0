"""A finished housekeeping cycle, as every after-cycle hook receives it (metrics, logs, the live view, the
recorder, the engine state file, ...), and the hooks' type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from evictd.core.engine import EngineState
from evictd.cycle.report import CycleReport


@dataclass(frozen=True, slots=True)
class Cycle:
    """One finished cycle, as every after-cycle hook receives it."""

    number: int
    report: CycleReport
    state: EngineState  # the manager's state after the cycle
    started_at: float  # monotonic seconds
    duration_s: float
    wall: datetime  # when the cycle ended
    # What woke the loop (`evictd_wakeups_total` causes; empty: no wait) and when the wait returned (None: no wait).
    woken_by: tuple[str, ...] = ()
    woken_at: float | None = None


AfterCycle = Callable[[Cycle], None]

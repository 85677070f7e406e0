"""The names of a run of evictd and of each cycle's decision: what log lines, the live view, the recording and
`evictd explain --decision` call them by."""

from __future__ import annotations

import os
from datetime import UTC, datetime


def run_id(wall: float, process: str | None = None) -> str:
    """The name of one run of evictd (start to stop): its start time in UTC and its PID (or `process`, the name
    a run that is not a daemon's goes by: `simulate`)."""
    return f"{datetime.fromtimestamp(wall, UTC):%Y%m%dT%H%M%SZ}-{process or os.getpid()}"


def decision_id(run: str, cycle: int) -> str:
    """The id of one cycle's decision, `<run>/<cycle>`: what the eviction's log line and the live view print,
    and `evictd explain --decision` takes."""
    return f"{run}/{cycle}"

"""Turn an arena run's trace (bench/node_survival.py with EVICTD_ARENA_TRACE=1: trace-<run>.json) into one record
for bench/results/thrash_onset.jsonl: second by second from the pressure's start, the node's MemAvailable, the share
of the daemons' (system.slice's) memory they re-read within 2 s, of their usage and of their memory that is not
anonymous (the daemons refault signal's base), their heartbeats in that second, their page cache, their pages
reclaimed and the reclaims below their memory.low since the row before (where traced), and the CPU ticks of the
evictd thread that took the most since the row before. What a thrash looks like to a kernel without PSI, to choose and
check the signal against. With ``--memory-low-mib`` (the daemons' memory.low the run's evictd kept, its log's
"memory.low kept at"), a ``cover`` block from every sample: MemAvailable less the daemons' page cache under that
protection, at its least before the kernel's first reclaim below it, when it first fell under 0 and when that
reclaim began (the daemons refault figure's uncovered cache, src/evictd/core/daemon_refault.py); ``--summary`` leaves
the seconds out (a false trigger's 300 s of rows say nothing the block does not).

    .venv/bin/python bench/arena_trace_record.py /work/arena-out/x/stand-in-evictd/trace-thrash-evictd-0.json \
        --id thrash-onset-shipped-0 --machine "2-CPU AMD EPYC, ..." --load "0.7-1.5" --command "..." \
        >> bench/results/thrash_onset.jsonl
Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = 4096
WINDOW_S = 2.0  # the daemons refault signal's window (src/evictd/core/daemon_refault.py)


def seconds(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """One row a second (the first sample at or after each whole second) of `trace`'s samples."""
    started, samples, beats = trace["started"], trace["samples"], trace["beats"]
    rows: list[dict[str, Any]] = []
    base = 0
    last_second = -1
    last_row: tuple[float, dict[str, Any]] | None = None
    for at, figures in samples:
        second = int(at - started)
        if second == last_second:
            continue
        last_second = second
        while samples[base][0] < at - WINDOW_S:
            base += 1
        before_at, before = samples[base]
        span = at - before_at
        row: dict[str, Any] = {"s": round(at - started, 1), "availableMib": figures["MemAvailable"] >> 20,
                               "beats": sum(1 for beat in beats if at - 1.0 <= beat < at)}
        if span >= 1.0 and "sys.workingset_refault_file" in figures:
            reread = (figures["sys.workingset_refault_file"] - before["sys.workingset_refault_file"]) * PAGE
            reread *= WINDOW_S / span
            usage = figures["sys.anon"] + figures["sys.file"]
            row["ofUsagePct"] = round(100 * reread / usage, 1)
            row["ofNotAnonPct"] = round(100 * reread / max(figures["sys.file"], 32 << 20), 1)
        if "sys.events.low" in figures:  # traces that keep memory.events: the daemons' page cache beside MemAvailable
            row["daemonsFileMib"] = figures["sys.file"] >> 20
        if last_row is not None:
            # Since the last row: a sample's time is when it began, and a reading blocked in the kernel ends later.
            prev_at, prev = last_row
            ticks = {key[4:]: value - prev.get(key, value) for key, value in figures.items() if key.startswith("cpu.")}
            busiest = max(ticks.items(), key=lambda item: item[1], default=None)
            # Direct reclaim since the last row: tasks that allocated under the min watermark reclaimed themselves.
            stalls = sum(figures.get(key, 0) - prev.get(key, 0) for key in ("allocstall_normal", "allocstall_movable"))
            if stalls > 0:
                row["allocStalls"] = stalls
                row["directScanPages"] = figures.get("pgscan_direct", 0) - prev.get("pgscan_direct", 0)
            # The daemons' pages reclaimed, and reclaims of them below their memory.low (traces since both are kept).
            if "sys.pgsteal" in figures:
                stolen = (figures["sys.pgsteal"] - prev.get("sys.pgsteal", figures["sys.pgsteal"])) * PAGE
                if stolen > 0:
                    row["daemonsReclaimedMib"] = round(stolen / (1 << 20), 1)
            if "sys.events.low" in figures:
                low = figures["sys.events.low"] - prev.get("sys.events.low", figures["sys.events.low"])
                if low > 0:
                    row["daemonsLowEvents"] = low
            if busiest is not None and busiest[1] > 0:
                row["evictdBusiestThreadTicks"] = busiest[1]
                if figures.get(f"comm.{busiest[0]}"):  # traces since the threads carry their names
                    row["evictdBusiestThread"] = figures[f"comm.{busiest[0]}"]
                row["sinceLastRowS"] = round(at - prev_at, 1)
        last_row = (at, figures)
        rows.append(row)
    return rows


def cover(trace: dict[str, Any], low_bytes: int) -> dict[str, Any]:
    """MemAvailable less the daemons' protected page cache (the smaller of their cache and what their anonymous memory
    leaves of `low_bytes`): its least before the first ``low`` event (MiB), when it first fell under 0 and when that
    event came (s from the start; None: never), in traces that keep memory.events."""
    started = trace["started"]
    least = first_under = first_low = base_low = None
    for at, figures in trace["samples"]:
        if "sys.events.low" not in figures or "MemAvailable" not in figures:
            continue
        base_low = figures["sys.events.low"] if base_low is None else base_low
        if figures["sys.events.low"] > base_low:
            first_low = round(at - started, 1)
            break
        protected = min(figures["sys.file"], max(0, low_bytes - figures["sys.anon"]))
        margin = (figures["MemAvailable"] - protected) / (1 << 20)
        least = margin if least is None else min(least, margin)
        if margin < 0 and first_under is None:
            first_under = round(at - started, 1)
    return {"memoryLowMib": low_bytes >> 20, "leastCoverMib": None if least is None else round(least),
            "firstUncoveredS": first_under, "firstLowEventS": first_low,
            "leadS": None if first_under is None or first_low is None else round(first_low - first_under, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--id", required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--load", required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--commit", help="the commit the run ran (default: HEAD)")
    parser.add_argument("--note")
    parser.add_argument("--memory-low-mib", type=int, help="the daemons' memory.low the run kept: adds `cover`")
    parser.add_argument("--summary", action="store_true", help="without the seconds")
    args = parser.parse_args()
    trace = json.loads(args.trace.read_text())
    head = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
    commit = args.commit or subprocess.run(head, capture_output=True, text=True, check=True).stdout.strip()
    started = trace["started"]
    gaps = [(round(a - started, 1), round(b - a, 1)) for a, b in itertools.pairwise(trace["beats"])
            if b > started and b - a > 1.0]
    record: dict[str, Any] = {
        "bench": "thrash_onset", "id": args.id, "machine": args.machine, "load": args.load,
        "date": datetime.date.today().isoformat(), "commit": commit, "command": args.command,
        "daemonGapsOver1s": gaps, "evictionsAtS": [round(e["at"] - started, 1) for e in trace["evictions"]],
    }
    if args.memory_low_mib is not None:
        record["cover"] = cover(trace, args.memory_low_mib << 20)
    if not args.summary:
        record["seconds"] = seconds(trace)
    record["note"] = args.note
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())

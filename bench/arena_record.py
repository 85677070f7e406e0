"""Turn an arena run folder's runs.jsonl (bench/node_survival.py) into one record per cell for
bench/results/node_survival.jsonl: the figures the report tables read, median / worst over the runs, each run's
heartbeat gaps kept. The machine, load and command are given (the run folder does not know them).

    .venv/bin/python bench/arena_record.py /work/arena-out/x/runs.jsonl --id qemu-thrash-shipped --tables stall \
        --machine "2-CPU AMD EPYC, ..." --load "1.1-2.0" --command "bench/node_survival.py ..." [--note ...] \
        >> bench/results/node_survival.jsonl
Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def figure(value: float) -> float | int:
    """One decimal, as the tables show figures; whole numbers as integers."""
    rounded = round(float(value), 1)
    return int(rounded) if rounded.is_integer() else rounded


def median_worst(values: Sequence[float | None], worse: str = "max") -> list[float | int] | None:
    measured = [float(v) for v in values if v is not None]
    if not measured:
        return None
    worst = max(measured) if worse == "max" else min(measured)
    return [figure(statistics.median(measured)), figure(worst)]


def each(values: Sequence[float | None]) -> list[float | None]:
    return [None if v is None else round(float(v), 2) for v in values]


def stopped_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """How pods stopped over all runs, e.g. "evicted 5 (the grower)" or "evicted 4, OOM-killed 1"."""
    counts: dict[str, int] = {}
    pods: set[str] = set()
    for run in runs:
        for pod, how in run["stopped"].items():
            counts[how] = counts.get(how, 0) + 1
            pods.add(pod)
    text = ", ".join(f"{how} {n}" for how, n in sorted(counts.items())) or "none"
    return f"{text} (the {next(iter(pods))})" if len(pods) == 1 and counts else text


def cell_record(runs: Sequence[Mapping[str, Any]], *, record_id: str, tables: list[str], machine: str, load: str,
                command: str, note: str | None, commit: str, date: str, mem_mib: int) -> dict[str, Any]:
    first = runs[0]
    kernel = first["kernel"]
    vm = "qemu" if "qemu" in kernel["label"] else "user-mode Linux"
    psi_full = [(r.get("memoryStallS") or {}).get("full") for r in runs]
    return {
        "bench": "node_survival", "id": record_id, "tables": tables, "machine": machine,
        "guest_kernel": kernel["release"] + ("" if kernel["psi"] else ", psi=0" if vm == "qemu" else ""),
        "load": load, "date": date, "commit": commit,
        "settings": {"vm": vm, "mem_mib": mem_mib, "cpus": 2 if vm == "qemu" else 1,
                     "backend": first["backend"], "workload": first["workload"], "protector": first["protector"],
                     "psi": kernel["psi"], "command": command,
                     # the node's own protection of its daemons, where the arena gave it (system.slice memory.low)
                     **({"system_slice_memory_low_mib": first["systemSliceMemoryLowMib"]}
                        if first.get("systemSliceMemoryLowMib") else {})},
        "runs": len(runs),
        "outcomes": {
            "oom_kill_runs": sum(1 for r in runs if sum(r["oomKillsByClass"].values())),
            "oom_killed": sum(sum(r["oomKillsByClass"].values()) for r in runs),
            "evicted": median_worst([len(r["evictions"]) for r in runs]),
            "stopped": stopped_text(runs),
            "below_1pct_s": median_worst([r["lowMemoryS"] for r in runs]),
            "relief_s": median_worst([r["reliefS"] for r in runs]),
            "daemon_gap_s": median_worst([r["heartbeatMaxGapS"] for r in runs]),
            "kubelet_gap_s": median_worst([r.get("kubeletHeartbeatMaxGapS") for r in runs]),
            "psi_full_s": median_worst(psi_full),
            "alive": sum(1 for r in runs if r["guaranteedAlive"] is not False and r["daemonAlive"]),
        },
        "per_run": {"daemon_gap_s": each([r["heartbeatMaxGapS"] for r in runs]),
                    "kubelet_gap_s": each([r.get("kubeletHeartbeatMaxGapS") for r in runs])},
        "note": note,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path)
    parser.add_argument("--id", required=True)
    parser.add_argument("--tables", default="")
    parser.add_argument("--machine", required=True)
    parser.add_argument("--load", required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--note")
    parser.add_argument("--commit", help="the commit the runs ran (default: HEAD)")
    parser.add_argument("--mem-mib", type=int, default=2560, help="the guest's memory as the arena was given it")
    args = parser.parse_args()
    runs = [json.loads(line) for line in args.runs.read_text().splitlines() if line.strip()]
    failed = [r for r in runs if "error" in r]
    if failed:
        print(f"{len(failed)} runs failed in the guest: {failed[0]['error']}", file=sys.stderr)
        return 1
    head = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
    commit = args.commit or subprocess.run(head, capture_output=True, text=True, check=True).stdout.strip()
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        cells.setdefault((run["workload"], run["protector"]), []).append(run)
    for (workload, _), members in cells.items():
        record_id = args.id if len(cells) == 1 else f"{args.id}-{workload}"
        print(json.dumps(cell_record(members, record_id=record_id, tables=[t for t in args.tables.split(",") if t],
                                     machine=args.machine, load=args.load, command=args.command, note=args.note,
                                     commit=commit, date=datetime.date.today().isoformat(),
                                     mem_mib=args.mem_mib)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

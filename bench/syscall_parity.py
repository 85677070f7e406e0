"""Checks that the floor of `cycle_cost.py` makes the same file system calls as a real cycle (needs strace).

Runs, under `strace -f`, one steady-state `synchronize()` and one floor pass over the same synthetic node,
then one disk walker pass and the floor of its operations, each between two marker calls (a `stat` of a
path that does not exist), and prints the count of each file-related system call in each pair. Without
strace installed it says so and exits 0.

    .venv/bin/python bench/syscall_parity.py [--pods 250] [--discovered]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

FILE_CALLS = ("openat", "read", "close", "getdents64", "newfstatat", "statx", "fstatfs", "statfs", "fstat")
MARK = "/evictd-bench-marker"
_CALL = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\(")


def child(pods: int, discovered: bool) -> None:
    from cycle_cost import WARMUP_CYCLES, build_manager, disk_pass_for, floor_pass
    from synthetic_node import build_node

    with build_node(pods) as node:
        manager = build_manager(node, discovered=discovered)
        disk_pass = disk_pass_for(node, manager)
        operations = node.floor_operations()
        walk_operations = node.walk_operations()
        for _ in range(WARMUP_CYCLES):
            manager.synchronize()
            disk_pass()
            floor_pass(operations)
        steps = (("cycle", manager.synchronize), ("floor", lambda: floor_pass(operations)),
                 ("walk", disk_pass), ("walkfloor", lambda: floor_pass(walk_operations)))
        for label, step in steps:
            os.path.exists(f"{MARK}-{label}-begin")
            step()
            os.path.exists(f"{MARK}-{label}-end")


def counts(trace: str) -> dict[str, collections.Counter[str]]:
    result: dict[str, collections.Counter[str]] = {}
    current: collections.Counter[str] | None = None
    for line in trace.splitlines():
        if MARK in line:
            label = line.split(MARK + "-", 1)[1].split("-", 1)[0]
            current = result.setdefault(label, collections.Counter()) if "-begin" in line else None
            continue
        match = _CALL.match(line)
        if current is not None and match and match.group(1) in FILE_CALLS:
            current[match.group(1)] += 1
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--discovered", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.pods, args.discovered)
        return 0
    strace = shutil.which("strace")
    if strace is None:
        print("syscall parity: strace not installed, not checked")
        return 0
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        command = [strace, "-f", "-qq", "-o", out.name, sys.executable, __file__, "--child", "--pods", str(args.pods)]
        if args.discovered:
            command.append("--discovered")
        subprocess.run(command, check=True)
        found = counts(out.read())
    for what, step, floor in (("one cycle", "cycle", "floor"), ("one disk walker pass", "walk", "walkfloor")):
        calls = [name for name in FILE_CALLS if found[step][name] or found[floor][name]]
        print(f"file system calls in {what} at {args.pods} pods"
              f"{' (discovered pods)' if args.discovered else ''}: " + ", ".join(
                  f"{name} {found[step][name]}/{found[floor][name]}" for name in calls) + f"  ({step}/floor)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Guest side of reclaim for the daemons on a real cgroup v2 kernel (tests/uml/test_daemons_reclaim_v2.py boots it):
the daemons' figure, the rule and the `memory.reclaim` adapter against real page cache and real refaults.

Run as ``python guest_daemons_reclaim.py``; writes ``$UML_OUT/daemons-reclaim.json``. A process in
``system.slice/daemon`` (at the hierarchy's root, where evictd reads the daemons) reads its file once; a BestEffort
pod's process (``daemons-test/kubepods/besteffort/pod-backup``, the cgroupfs driver's names) streams a file larger
than the guest's memory, pushing the daemon's pages out; the daemon reads its file again. Then, through evictd's own
code (`daemon_counts`, `daemon_refault_figure`, `CgroupMemoryReclaimer`, `daemons_reclaim_plan`):

* the daemons' figure of two quiet readings (the rule skips) and of two around the daemon's re-read;
* the cache holders, the plan for that figure, and the plan carried out: the BestEffort tier's usage and
  system.slice's page cache before and after.

Then evictd's protection of the daemons (`DaemonsProtection` over the real memory.low adapter): whether cgroup2 is
mounted `memory_recursiveprot` before and after a remount, the memory.low each step leaves (applied, written again
after a reset to 0 as systemd's reload does, an operator's value left, dry-run and stop taking evictd's back), and
the daemon's page cache across the same stream with evictd's memory.low and without it; and the breach: the root
asked to reclaim more than lies outside the protection, the kernel's ``low`` events and ``pgsteal`` as the daemons'
figure reads them; and before it, the approach: a BestEffort pod allocating until MemAvailable no longer covers the
daemon's protected page cache, as `daemon_counts` and /proc/meminfo read it each 50 ms, and the ``low`` events then.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from guest_memory_reclaim import (  # beside this script: the guest runs it by path
    data_file,
    make_cgroup,
    stat,
    write_outcome,
)

from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.daemon_cgroups import daemon_counts
from evictd.adapters.daemons_protection import protection_unavailable, read_node_low, write_node_low
from evictd.adapters.memory_reclaim import CgroupMemoryReclaimer
from evictd.adapters.procfs import meminfo_bytes
from evictd.config import load_configuration
from evictd.core.daemon_refault import (
    DAEMON_MIN_MEMORY_BYTES,
    DAEMON_REFAULT_MIN_SPAN_S,
    daemon_refault_figure,
    daemon_share_base,
    uncovered_bytes,
)
from evictd.core.daemons_protection import daemons_low_target, parse_daemons_low
from evictd.core.daemons_reclaim import DaemonsReclaimHistory, DaemonsReclaimSettings, daemons_reclaim_plan
from evictd.core.memory_reclaim import ReclaimPlan
from evictd.core.refault import RefaultFigure, RefaultSample
from evictd.run.daemons_protection import DaemonsProtection, daemons_protection

CGROUP = Path("/sys/fs/cgroup")
BASE = "daemons-test"
# The daemon's file, and the backup's: larger than the guest's memory (256 MiB), so its stream pushes the daemon out.
DAEMON_FILE_MIB, BACKUP_FILE_MIB = 48, 384
READ = "import sys\nwith open(sys.argv[1], 'rb') as f:\n    while f.read(1 << 20):\n        pass\n"


def usage(folder: Path) -> int:
    return int((folder / "memory.current").read_text())


def read_in(folder: Path, path: Path) -> None:
    """Read `path` once from a process started in the cgroup `folder` (its page cache charged there)."""
    def enter() -> None:
        (folder / "cgroup.procs").write_text(str(os.getpid()))
    subprocess.run([sys.executable, "-c", READ, str(path)], check=True, preexec_fn=enter)


def figure_over(layout: CgroupLayout, between: Any) -> tuple[RefaultFigure | None, int]:
    """The daemons' figure of two readings of system.slice around `between()`, at least the minimum span apart, and
    the bytes re-read between them."""
    first = daemon_counts(layout)
    started = time.monotonic()
    between()
    time.sleep(max(0.0, DAEMON_REFAULT_MIN_SPAN_S + 0.05 - (time.monotonic() - started)))
    second = daemon_counts(layout)
    ended = time.monotonic()
    assert first is not None and second is not None, "system.slice counts no re-reads"
    samples = (RefaultSample(started, first.refault_bytes), RefaultSample(ended, second.refault_bytes))
    figure = daemon_refault_figure(samples, max(second.usage_bytes, DAEMON_MIN_MEMORY_BYTES))
    return figure, second.refault_bytes - first.refault_bytes


def plan_of(plan: Any) -> dict[str, Any]:
    if isinstance(plan, ReclaimPlan):
        return {"targets": [[t.cgroup, t.bytes] for t in plan.targets], "asked": plan.needed_bytes,
                "byUsage": plan.by_usage}
    return {"skipped": plan.reason}


def clean_up(*files: Path) -> None:
    """Leave the guest as it was: the files and their cache gone, the trees removed."""
    for path in files:
        path.unlink()
    Path("/proc/sys/vm/drop_caches").write_text("3")
    for top in (CGROUP / BASE, CGROUP / "system.slice"):
        for folder in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if folder.is_dir():
                folder.rmdir()
        top.rmdir()


def scenario() -> dict[str, Any]:
    backup = make_cgroup(f"{BASE}/kubepods/besteffort/pod-backup")
    make_cgroup(f"{BASE}/kubepods/burstable")
    daemon = make_cgroup("system.slice/daemon")
    tier, slice_ = CGROUP / BASE / "kubepods" / "besteffort", CGROUP / "system.slice"
    daemon_file, backup_file = data_file("daemon", DAEMON_FILE_MIB), data_file("backup", BACKUP_FILE_MIB)
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")
    layout = CgroupLayout(version=2, root=CGROUP)
    reclaimer = CgroupMemoryReclaimer(CgroupReader(CgroupLayout(version=2, root=CGROUP, base=BASE)))
    settings = DaemonsReclaimSettings(enabled=True, budget_s=2.0)
    read_in(daemon, daemon_file)
    quiet, _ = figure_over(layout, lambda: None)
    quiet_plan = daemons_reclaim_plan(settings, quiet, reclaimer.holders(), DaemonsReclaimHistory(), 0.0)
    read_in(backup, backup_file)  # the stream: its cache pushes the daemon's pages out
    refaulting, reread = figure_over(layout, lambda: read_in(daemon, daemon_file))
    holders = reclaimer.holders()
    plan = daemons_reclaim_plan(settings, refaulting, holders, DaemonsReclaimHistory(), 0.0)
    before = {"tierUsage": usage(tier), "tierFile": stat(tier, "file"), "daemonsFile": stat(slice_, "file")}
    outcome = reclaimer.reclaim(plan) if isinstance(plan, ReclaimPlan) else None
    after = {"tierUsage": usage(tier), "tierFile": stat(tier, "file"), "daemonsFile": stat(slice_, "file")}
    unavailable = reclaimer.unavailable()
    clean_up(daemon_file, backup_file)
    return {
        "unavailable": unavailable,
        "quietFigureBp": None if quiet is None else quiet.refaulted_basis_points,
        "quietPlan": plan_of(quiet_plan),
        "rereadBytes": reread,
        "figureBp": None if refaulting is None else refaulting.refaulted_basis_points,
        "daemonsMemory": None if refaulting is None else refaulting.memory_bytes,
        "holders": [{"cgroup": h.cgroup, "tier": h.tier, "active": h.active_file_bytes,
                     "inactive": h.inactive_file_bytes} for h in holders],
        "plan": plan_of(plan),
        "before": before, "after": after,
        "outcome": None if outcome is None else {"freed": outcome.total_freed_bytes, "writes": outcome.writes,
                                                 "elapsedS": outcome.elapsed_s, "stopped": outcome.stopped},
    }


# evictd's memory.low in the protection scenario: above the daemon's file, well under the guest's memory.
PROTECTION = "96Mi"
OPERATOR_LOW = 128 << 20


class Lines:
    """A log that keeps its lines (event and fields) for the host-side test."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def info(self, event: str, **fields: object) -> None:
        self.lines.append({"level": "info", "event": event, **fields})

    def warning(self, event: str, **fields: object) -> None:
        self.lines.append({"level": "warning", "event": event, **fields})


def low_now() -> int:
    return int((CGROUP / "system.slice" / "memory.low").read_text())


def stream_over_daemon(daemon: Path, daemon_file: Path, backup: Path, backup_file: Path) -> dict[str, int]:
    """The daemon reads its file in, the BestEffort pod streams its own; system.slice's page cache before and after."""
    slice_ = CGROUP / "system.slice"
    read_in(daemon, daemon_file)
    before = stat(slice_, "file")
    read_in(backup, backup_file)
    return {"before": before, "after": stat(slice_, "file")}


# What the breach asks of the root: more than the guest holds outside the protection, so the kernel takes protected
# pages too (the 256 MiB guest has no swap: its anonymous memory stays).
BREACH_ASK = 256 << 20


def breach(layout: CgroupLayout, daemon: Path, daemon_file: Path) -> dict[str, Any]:
    """The daemon's file read in under the protection, then the root asked to reclaim more than lies outside it (as
    a node with nothing else left): system.slice's ``low`` events and ``pgsteal`` before and after, the daemon's
    cache, and the daemons' figure of the two readings (a span of the figure's minimum)."""
    Path("/proc/sys/vm/drop_caches").write_text("3")
    read_in(daemon, daemon_file)
    slice_ = CGROUP / "system.slice"
    first, file_before = daemon_counts(layout), stat(slice_, "file")
    started = time.monotonic()
    refused = None
    try:
        (CGROUP / "memory.reclaim").write_text(str(BREACH_ASK))
    except OSError as exc:  # EAGAIN: it reclaimed less than asked, which is the point
        refused = exc.errno
    time.sleep(max(0.0, DAEMON_REFAULT_MIN_SPAN_S + 0.05 - (time.monotonic() - started)))
    second = daemon_counts(layout)
    ended = time.monotonic()
    assert first is not None and second is not None, "system.slice counts no re-reads"
    samples = tuple(RefaultSample(at, counts.refault_bytes, low_events=counts.low_events,
                                  reclaimed_bytes=counts.reclaimed_bytes)
                    for at, counts in ((started, first), (ended, second)))
    figure = daemon_refault_figure(samples, daemon_share_base(second.usage_bytes, second.anon_bytes,
                                                              second.protected_bytes))
    return {"low": [first.low_events, second.low_events], "reclaimed": [first.reclaimed_bytes, second.reclaimed_bytes],
            "file": [file_before, stat(slice_, "file")], "refused": refused, "spanS": ended - started,
            "lostBytes": None if figure is None else figure.lost_bytes,
            "figureBp": None if figure is None else figure.refaulted_basis_points}


# The approach's pod: 4 MiB of anonymous memory touched every 1/8 s (32 MiB/s, a leak the arena's grower outpaces)
# up to more than the guest holds; it waits to be killed.
ALLOCATE = ("import time\nheld = []\nfor _ in range(128):\n    held.append(bytearray(4 << 20))\n"
            "    time.sleep(0.125)\ntime.sleep(60)\n")
APPROACH_LOOK_S, APPROACH_TIMEOUT_S = 0.05, 30.0


def approach(layout: CgroupLayout, daemon: Path, daemon_file: Path, pod: Path) -> dict[str, Any]:
    """The daemon's file read in under the protection, then the pod allocating: each look reads system.slice and
    MemAvailable as evictd does, until the protected cache is no longer covered (or the pod is gone, or time is up);
    the figures at the first look not covered and at the first look after a ``low`` event (the breach), the
    ``low`` events at the start, and those 0.5 s after the last look."""
    Path("/proc/sys/vm/drop_caches").write_text("3")
    read_in(daemon, daemon_file)
    start = daemon_counts(layout)
    assert start is not None
    def enter() -> None:
        (pod / "cgroup.procs").write_text(str(os.getpid()))
    grower = subprocess.Popen([sys.executable, "-c", ALLOCATE], preexec_fn=enter)
    seen: dict[str, Any] | None = None
    breached: dict[str, Any] | None = None
    started, lowest = time.monotonic(), None
    try:
        while seen is None and grower.poll() is None and time.monotonic() - started < APPROACH_TIMEOUT_S:
            counts, available = daemon_counts(layout), meminfo_bytes("MemAvailable")
            assert counts is not None
            uncovered = uncovered_bytes(counts.file_bytes, counts.usage_bytes, counts.protected_bytes, available)
            lowest = available if lowest is None else min(lowest, available)
            look = {"atS": round(time.monotonic() - started, 2), "uncovered": uncovered, "available": available,
                    "file": counts.file_bytes, "usage": counts.usage_bytes, "protected": counts.protected_bytes,
                    "lowEvents": counts.low_events}
            if breached is None and counts.low_events != start.low_events:
                breached = look
            if uncovered:
                seen = look
            time.sleep(APPROACH_LOOK_S)
        time.sleep(0.5)
        later = daemon_counts(layout)
    finally:
        grower.kill()
        exit_code = grower.wait()
    return {"start": {"lowEvents": start.low_events, "file": start.file_bytes}, "seen": seen, "breached": breached,
            "lowestAvailable": lowest,
            "lowEventsLater": None if later is None else later.low_events, "growerExit": exit_code}


def protection() -> dict[str, Any]:
    backup = make_cgroup(f"{BASE}/kubepods/besteffort/pod-backup")
    daemon = make_cgroup("system.slice/daemon")
    daemon_file, backup_file = data_file("daemon", DAEMON_FILE_MIB), data_file("backup", BACKUP_FILE_MIB)
    os.sync()
    layout = CgroupLayout(version=2, root=CGROUP)
    unavailable_before = protection_unavailable(layout)
    subprocess.run(["mount", "-o", "remount,memory_recursiveprot", str(CGROUP)], check=True)
    unavailable = protection_unavailable(layout)
    # As `run` builds it from a configuration of `daemonsMemoryLow: auto` (no reservation: GKE's for 256 MiB).
    defaults = load_configuration([])
    built = daemons_protection(replace(defaults, evictd=replace(defaults.evictd, daemons_memory_low="auto")), layout,
                               acting=lambda: True, log=Lines(), gauge=lambda value: None)  # type: ignore[arg-type]
    acting = [True]
    gauge: list[float] = []
    log = Lines()
    total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    keeper = DaemonsProtection(daemons_low_target(parse_daemons_low(PROTECTION), total, 0),
                               read=lambda: read_node_low(layout), write=lambda value: write_node_low(layout, value),
                               acting=lambda: acting[0], log=log, gauge=gauge.append)  # type: ignore[arg-type]
    steps: dict[str, Any] = {}
    steps["applied"] = [str(keeper.step()), low_now()]
    counted = daemon_counts(layout)
    steps["countedProtection"] = None if counted is None else counted.protected_bytes
    approached = approach(layout, daemon, daemon_file, backup)
    breached = breach(layout, daemon, daemon_file)
    Path("/proc/sys/vm/drop_caches").write_text("3")
    protected = stream_over_daemon(daemon, daemon_file, backup, backup_file)
    (CGROUP / "system.slice" / "memory.low").write_text("0")  # systemd's reload resets what it owns
    steps["afterReset"] = [str(keeper.step()), low_now()]
    acting[0] = False
    steps["dryRun"] = [str(keeper.step()), low_now()]
    Path("/proc/sys/vm/drop_caches").write_text("3")
    unprotected = stream_over_daemon(daemon, daemon_file, backup, backup_file)
    acting[0] = True
    (CGROUP / "system.slice" / "memory.low").write_text(str(OPERATOR_LOW))  # an operator's MemoryLow=128M
    steps["operators"] = [str(keeper.step()), low_now()]
    keeper.stop()
    steps["operatorsAfterStop"] = low_now()
    (CGROUP / "system.slice" / "memory.low").write_text("0")
    steps["again"] = [str(keeper.step()), low_now()]
    keeper.stop()
    steps["stopped"] = low_now()
    counted = daemon_counts(layout)
    steps["countedAfterStop"] = None if counted is None else counted.protected_bytes
    subprocess.run(["mount", "-o", "remount", str(CGROUP)], check=True)
    clean_up(daemon_file, backup_file)
    return {"unavailableBefore": unavailable_before, "unavailable": unavailable, "steps": steps,
            "builtTarget": None if built is None else built.target.bytes, "memTotal": total,
            "protected": protected, "unprotected": unprotected, "gauge": gauge, "log": log.lines,
            "breach": breached, "approach": approached}


if __name__ == "__main__":
    status = write_outcome("daemons-reclaim.json", scenario)
    sys.exit(status or write_outcome("daemons-protection.json", protection))

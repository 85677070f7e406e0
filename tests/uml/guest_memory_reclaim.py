"""Guest side of reclaim before evict on a real cgroup v2 kernel (tests/uml/test_evictd_v2.py boots it in its one
guest, beside the node scenarios): the `memory.reclaim` adapter against real page cache.

Run as ``python guest_memory_reclaim.py``; writes ``$UML_OUT/reclaim-cgroupfs.json``. In a cgroup tree of its own
(``reclaim-test/kubepods/...``, the cgroupfs driver's names) a BestEffort pod's process reads a file of the guest's
own disk twice (every page active: working set, for the kubelet), and a process in ``reclaim-test/system.slice``
does the same with a smaller file. Then, through `evictd.adapters.memory_reclaim.CgroupMemoryReclaimer`:

* the cache holders as the adapter reads them;
* a plan from the rule (`reclaim_plan`, a `memory.available` threshold short of `ASK_MIB`) carried out within a
  generous budget: the BestEffort tier's working set before and after, and system.slice's active file before and
  after (never touched);
* the same plan with a 1 ms budget on a fresh cache (stopped by the budget after its first write);
* a write to an empty pod cgroup's ``memory.reclaim``: the kernel's EAGAIN (nothing to reclaim).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.memory_reclaim import CgroupMemoryReclaimer, write_cgroup_value
from evictd.core.memory_reclaim import ReclaimHistory, ReclaimPlan, ReclaimSettings, ReclaimTarget, reclaim_plan
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, ThresholdValue

CGROUP = Path("/sys/fs/cgroup")
BASE = "reclaim-test"
MiB = 1 << 20
POD_FILE_MIB, DAEMON_FILE_MIB = 96, 32
ASK_MIB = 48  # the shortfall plus minimum reclaim the plan asks for (half the pod's cache)
READ_TWICE = "import sys\nfor _ in range(2):\n    with open(sys.argv[1], 'rb') as f:\n        while f.read(1 << 20):\n" \
             "            pass\n"


def make_cgroup(path: str) -> Path:
    """Create `path` and its parents, each parent delegating memory to its children."""
    current = CGROUP
    for part in path.split("/"):
        controls = current / "cgroup.subtree_control"
        if "memory" not in controls.read_text():
            controls.write_text("+memory")
        current = current / part
        current.mkdir(exist_ok=True)
    return current


def stat(folder: Path, key: str) -> int:
    for line in (folder / "memory.stat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise KeyError(key)


def working_set(folder: Path) -> int:
    return int((folder / "memory.current").read_text()) - stat(folder, "inactive_file")


def data_file(name: str, mib: int) -> Path:
    path = Path(os.environ.get("UML_DISK_MOUNT", "/run/disk")) / f"{name}.dat"
    with open(path, "wb") as out:
        for _ in range(mib):
            out.write(os.urandom(MiB))
    return path


def read_twice_in(folder: Path, path: Path) -> None:
    """Read `path` twice from a process started in the cgroup `folder` (its page cache charged there)."""
    def enter() -> None:
        (folder / "cgroup.procs").write_text(str(os.getpid()))
    subprocess.run([sys.executable, "-c", READ_TWICE, str(path)], check=True, preexec_fn=enter)


def fill(pod: Path, daemons: Path, pod_file: Path, daemon_file: Path) -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")
    read_twice_in(pod, pod_file)
    read_twice_in(daemons, daemon_file)


def clean_up(*files: Path) -> None:
    """Leave the guest as it was for the scenarios after this one: the files and their cache gone, the tree removed."""
    for path in files:
        path.unlink()
    Path("/proc/sys/vm/drop_caches").write_text("3")
    for folder in sorted((CGROUP / BASE).rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir():
            folder.rmdir()
    (CGROUP / BASE).rmdir()


def scenario() -> dict[str, Any]:
    pod = make_cgroup(f"{BASE}/kubepods/besteffort/pod-reader")
    empty = make_cgroup(f"{BASE}/kubepods/besteffort/pod-empty")
    make_cgroup(f"{BASE}/kubepods/burstable")
    daemons = make_cgroup(f"{BASE}/system.slice/daemon")
    tier = CGROUP / BASE / "kubepods" / "besteffort"
    pod_file, daemon_file = data_file("pod", POD_FILE_MIB), data_file("daemon", DAEMON_FILE_MIB)
    reclaimer = CgroupMemoryReclaimer(CgroupReader(CgroupLayout(version=2, root=CGROUP, base=BASE)))
    fill(pod, daemons, pod_file, daemon_file)
    holders = reclaimer.holders()
    # A memory.available threshold of 200 Mi with 100 Mi minimum reclaim, ASK_MIB short of it.
    threshold = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(Quantity.parse("200Mi")), 0.0,
                          ThresholdValue(Quantity.parse("100Mi")))
    observed = Observation(Quantity.parse(f"{300 - ASK_MIB}Mi"), Quantity.parse("768Mi"), None)
    plan = reclaim_plan(ReclaimSettings(enabled=True, budget_s=2.0), [threshold], {threshold.signal: observed},
                        holders, ReclaimHistory(), 0.0)
    assert isinstance(plan, ReclaimPlan), plan
    before = {"tierWorkingSet": working_set(tier), "tierActiveFile": stat(tier, "active_file"),
              "daemonActiveFile": stat(daemons, "active_file")}
    outcome = reclaimer.reclaim(plan)
    after = {"tierWorkingSet": working_set(tier), "tierActiveFile": stat(tier, "active_file"),
             "daemonActiveFile": stat(daemons, "active_file")}
    fill(pod, daemons, pod_file, daemon_file)
    whole = ReclaimTarget(str(tier.relative_to(CGROUP)), POD_FILE_MIB * MiB)
    budget = reclaimer.reclaim(ReclaimPlan((whole,), whole.bytes, budget_s=0.001))
    eagain = write_cgroup_value(str(empty / "memory.reclaim"), 64 * MiB)
    unavailable = reclaimer.unavailable()
    clean_up(pod_file, daemon_file)
    return {
        "unavailable": unavailable,
        "holders": [{"cgroup": h.cgroup, "tier": h.tier, "activeFile": h.active_file_bytes} for h in holders],
        "plan": {"targets": [[t.cgroup, t.bytes] for t in plan.targets], "needed": plan.needed_bytes},
        "before": before, "after": after,
        "outcome": {"freed": outcome.total_freed_bytes, "writes": outcome.writes, "elapsedS": outcome.elapsed_s,
                    "stopped": outcome.stopped},
        "budget": {"freed": budget.total_freed_bytes, "writes": budget.writes, "elapsedS": budget.elapsed_s,
                   "stopped": budget.stopped},
        "emptyWriteComplete": eagain,
    }


def write_outcome(name: str, scenario: Callable[[], dict[str, Any]]) -> int:
    """Run `scenario` and write its result, or its error and traceback, to $UML_OUT/`name` for the host-side test."""
    out = Path(os.environ["UML_OUT"]) / name
    try:
        result = scenario()
    except BaseException as exc:  # the host-side test shows the traceback
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}))
        return 1
    out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(write_outcome("reclaim-cgroupfs.json", scenario))

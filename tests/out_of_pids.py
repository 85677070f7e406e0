"""A node out of pids, for one process or a set of them: a pids cgroup (cgroup v1, the host's hierarchy) whose
`pids.max` is set to the tasks it holds, so that none of them can start a thread or a process.

`without_new_tasks(pids)` holds `pids` in such a cgroup for the `with` block and puts each back where it was;
`run_without_new_tasks(setup, act)` runs a Python script's act there, after its set-up, and returns its outcome.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from polling import wait_until
from real_cgroups import CGROUP_MOUNT, new_test_cgroup_name

PIDS_ROOT = CGROUP_MOUNT / "pids"


def pids_cgroup_of(pid: int) -> str:
    """The pids cgroup `pid` is in, relative to the pids hierarchy (/proc/<pid>/cgroup)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return path
    raise AssertionError(f"process {pid} is in no pids cgroup")


def _removed(cgroup: Path) -> bool:
    """Remove an empty cgroup; False while the kernel still counts a task leaving it (EBUSY)."""
    try:
        cgroup.rmdir()
    except OSError:
        return False
    return True


@contextmanager
def without_new_tasks(pids: Iterable[int]) -> Iterator[None]:
    """Hold `pids` in a pids cgroup that allows no new task, then put each back where it was."""
    homes = {pid: pids_cgroup_of(pid) for pid in pids}
    full = PIDS_ROOT / new_test_cgroup_name(8)
    full.mkdir()
    try:
        for pid in homes:
            (full / "cgroup.procs").write_text(str(pid))
        (full / "pids.max").write_text((full / "pids.current").read_text())
        yield
    finally:
        (full / "pids.max").write_text("max")
        for pid, home in homes.items():
            with contextlib.suppress(ProcessLookupError):  # it has exited: nothing to put back
                (PIDS_ROOT / home.lstrip("/") / "cgroup.procs").write_text(str(pid))
        wait_until(lambda: _removed(full), 10.0, f"{full} removed")


# What runs between a script's set-up and its act: "ready" once the imports are done, a line read while the test moves
# the process into a pids cgroup that allows no new task, then whether a thread can still start (it must not).
_HELD = """
print("ready", flush=True)
sys.stdin.readline()
try:
    threading.Thread(target=lambda: None).start()
    can_start_thread = True
except RuntimeError:
    can_start_thread = False
"""
_REPORT = """
print(json.dumps({**outcome, "can_start_thread": can_start_thread}), flush=True)
"""


def run_without_new_tasks(setup: str, act: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """Run `setup` then `act` (Python, `json`, `sys` and `threading` imported) in a process that is moved, between
    the two, into a pids cgroup that allows no new task; `act` sets `outcome`, a dict, which is returned. The process
    must exit 0, and must not have been able to start a thread (else the test would show nothing)."""
    script = "import json, sys, threading\n" + setup + _HELD + act + _REPORT
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline() == "ready\n"
        with without_new_tasks([process.pid]):
            process.stdin.write("go\n")
            process.stdin.flush()
            outcome: dict[str, Any] = json.loads(process.stdout.readline())
            assert process.wait(timeout=timeout_s) == 0
    finally:
        process.kill()
        process.wait()
    assert not outcome.pop("can_start_thread"), "the cgroup allowed a new task: this test shows nothing"
    return outcome

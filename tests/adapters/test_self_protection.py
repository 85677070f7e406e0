"""The kernel's per-process protections, for real: mlockall in a child process (locking the test runner would lock
every page it ever touches), /proc/self/oom_score_adj read and written, and the figures read from fixture trees."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from evictd.adapters.self_protection import memory_figures, read_oom_score_adj
from evictd.core.errors import SampleError

# The outcome of the adapter's calls in a fresh interpreter, as JSON.
CHILD = """
import dataclasses, json, sys
from evictd.adapters import self_protection as p
call = sys.argv[1]
if call == "nofile":
    import resource
    outcome = {"raised": p.raise_open_files_limit(), "limit": resource.getrlimit(resource.RLIMIT_NOFILE)}
elif call == "lock":
    outcome = dataclasses.asdict(p.lock_memory())
    outcome["figures"] = dataclasses.asdict(p.memory_figures())
else:
    before = p.read_oom_score_adj()
    outcome = {"before": before, **dataclasses.asdict(p.set_oom_score_adj(before + int(sys.argv[2])))}
print(json.dumps(outcome))
"""
NO_IPC_LOCK = ("setpriv", "--bounding-set", "-ipc_lock", "--")
NO_SYS_RESOURCE = ("setpriv", "--bounding-set", "-sys_resource", "--")


def child(*args: str, wrapper: tuple[str, ...] = ()) -> dict[str, object]:
    done = subprocess.run([*wrapper, sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=60,
                          check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_mlockall_locks_with_cap_ipc_lock_even_under_a_tiny_rlimit() -> None:
    locked = child("lock", wrapper=("prlimit", "--memlock=4096:4096"))  # CAP_IPC_LOCK ignores the limit
    assert locked["locked"] is True and locked["reason"] == "", locked
    figures = locked["figures"]
    assert isinstance(figures, dict) and figures["vm_locked_bytes"] > 0 and figures["locked_resident_bytes"] > 0


def test_mlockall_is_not_tried_without_cap_ipc_lock_under_a_finite_rlimit() -> None:
    refused = child("lock", wrapper=("prlimit", "--memlock=4096:4096", *NO_IPC_LOCK))
    assert refused["locked"] is False and refused["error"] == ""
    assert str(refused["reason"]).startswith("no CAP_IPC_LOCK and RLIMIT_MEMLOCK is 4 KiB")
    figures = refused["figures"]
    assert isinstance(figures, dict) and figures["vm_locked_bytes"] == figures["locked_resident_bytes"] == 0


def test_lowering_oom_score_adj_without_cap_sys_resource_fails_and_leaves_it() -> None:
    lowered = child("adj", "-1", wrapper=NO_SYS_RESOURCE)
    assert (lowered["value"], lowered["error"]) == (lowered["before"], "EACCES"), lowered
    assert "CAP_SYS_RESOURCE" in str(lowered["reason"])


def test_raising_oom_score_adj_needs_no_privilege() -> None:
    raised = child("adj", "5", wrapper=NO_SYS_RESOURCE)
    before = raised["before"]
    assert isinstance(before, int) and before <= 995
    assert (raised["value"], raised["reason"], raised["error"]) == (before + 5, "", ""), raised


def test_the_oom_score_adj_read_is_the_kernels() -> None:
    assert read_oom_score_adj() == int(Path("/proc/self/oom_score_adj").read_text())


def test_figures_and_scores_from_fixture_trees(tmp_path: Path) -> None:
    own = tmp_path / "self"
    own.mkdir()
    (own / "status").write_text("Name:\tevictd\nVmLck:\t 1024820 kB\nVmRSS:\t   52572 kB\n")
    (own / "smaps_rollup").write_text("5555-7777 ---p 00000000 00:00 0 [rollup]\nRss:   52572 kB\nLocked:   45755 kB\n")
    (own / "oom_score_adj").write_text("-999\n")
    assert memory_figures(str(tmp_path)).locked_resident_bytes == 45755 * 1024
    assert memory_figures(str(tmp_path)).vm_locked_bytes == 1024820 * 1024
    assert read_oom_score_adj(str(tmp_path)) == -999
    for text, says in (("-1001\n", "out of range"), ("x\n", "not an integer")):
        (own / "oom_score_adj").write_text(text)
        with pytest.raises(SampleError, match=says):
            read_oom_score_adj(str(tmp_path))
    (own / "status").write_text("VmRSS:\t 12 MB\nVmLck:\t 0 kB\n")
    with pytest.raises(SampleError, match="VmRSS is not"):
        memory_figures(str(tmp_path))
    (own / "status").unlink()
    with pytest.raises(SampleError, match="status"):
        memory_figures(str(tmp_path))


def test_the_soft_open_files_limit_is_raised_to_the_hard_one_and_a_raised_one_left() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a hard limit can only be lowered here (no raising it)
    assert hard > 1024
    raised = child("nofile", wrapper=("prlimit", f"--nofile=1024:{hard}"))
    assert raised == {"raised": [1024, hard], "limit": [hard, hard]}, "from a systemd unit's default soft limit"
    same = child("nofile", wrapper=("prlimit", "--nofile=4096:4096"))
    assert same == {"raised": [4096, 4096], "limit": [4096, 4096]}

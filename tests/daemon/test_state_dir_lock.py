"""Two real `evictd run` processes on one stateDir (src/evictd/run/lock.py): one acts, the other waits.

Both talk to the test API server (with the API, the stateDir holds the eviction journal), have no eviction
threshold and no container runtime (a socket that does not exist), so nothing on the machine is touched. The
first holds `<stateDir>/evictd.lock` with its PID in it; a second one waits, logging that PID, and either takes
over when the first stops (a DaemonSet rolling update) or gives up after `stateLockTimeout` with exit status 2
and one line naming the PID and the lock file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import structlog
from apiserver import ApiServer
from evictd_process import EvictdProcess
from kube_objects import node_manifest

from evictd.run.lock import acquire_state_lock

NODE = "lock-node"
LOCK_WAIT_S = 2.0


def start(tmp_path: Path, name: str, apiserver: ApiServer | None, state: Path,
          evictd_processes: list[EvictdProcess], extra: str = "", node_lock: Path | None = None) -> EvictdProcess:
    """`evictd run` with `state` as stateDir, with the test API server unless None (then it only reports), and
    `node_lock` as its node lock (None: one of its own)."""
    work = tmp_path / name
    work.mkdir()
    daemon = EvictdProcess(
        work,
        kubelet="evictionHard: {}\nenforceNodeAllocatable: []\n",
        evictd=(f"nodeName: {NODE}\n"
                + (f"kubeconfig: {apiserver.kubeconfig_path}\n" if apiserver is not None else "")
                + f"stateDir: {state}\n"
                f"containerRuntimeEndpoint: unix://{tmp_path}/no-runtime.sock\n"
                "housekeepingInterval: 1s\n"
                "psiWakeups: false\n"
                "memcgWakeups: false\n"
                "shutdownTimeout: 5s\n" + extra),
        env={"EVICTD_NODE_LOCK": str(node_lock)} if node_lock is not None else None,
    )
    evictd_processes.append(daemon)
    return daemon


def test_a_second_evictd_on_a_locked_state_dir_waits_then_exits_2_naming_the_holder(
    tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]
) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    state = tmp_path / "state"
    first = start(tmp_path, "first", apiserver, state, evictd_processes)
    first.wait_event("evictd started")
    lock_file = state / "evictd.lock"
    assert lock_file.read_text() == f"{first.process.pid}\n"

    began = time.monotonic()
    second = start(tmp_path, "second", apiserver, state, evictd_processes, f"stateLockTimeout: {LOCK_WAIT_S:g}s\n")
    waiting = second.wait_event("stateDir is locked by another evictd: waiting for it to stop")
    assert (waiting["holder_pid"], waiting["lock_file"], waiting["wait_s"]) == (
        str(first.process.pid), str(lock_file), LOCK_WAIT_S)
    assert second.process.wait(timeout=30) == 2
    waited_s = time.monotonic() - began
    assert LOCK_WAIT_S <= waited_s < LOCK_WAIT_S + 10, waited_s
    assert second.stderr().splitlines() == [
        f"evictd: stateDir {state} is still locked by another evictd (PID {first.process.pid}) after 2 s; "
        f"lock file {lock_file}"]
    assert not any(e.get("event") == "evictd started" for e in second.events)

    # The first one never noticed: still running, still the holder.
    assert first.process.poll() is None and first.http("/healthz")[0] == 200
    assert lock_file.read_text() == f"{first.process.pid}\n"
    assert first.stop() == 0


def test_a_second_evictd_takes_over_when_the_first_stops(
    tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]
) -> None:
    """A rolling update: the new pod starts while the old one is still shutting down."""
    apiserver.store.create_node(node_manifest(NODE))
    state = tmp_path / "state"
    first = start(tmp_path, "first", apiserver, state, evictd_processes)
    first.wait_event("evictd started")
    second = start(tmp_path, "second", apiserver, state, evictd_processes)  # the default wait: 30 s
    waiting = second.wait_event("stateDir is locked by another evictd: waiting for it to stop")
    assert waiting["holder_pid"] == str(first.process.pid) and waiting["wait_s"] == 30

    assert first.stop() == 0
    taken = second.wait_event("stateDir lock taken over", timeout=15)
    assert taken["previous_holder_pid"] == str(first.process.pid)
    stopped = first.wait_event("evictd stopped")
    handover_s = taken["_received"] - stopped["_received"]
    print(f"first evictd stopped to the second holding the lock: {handover_s:.3f} s")
    assert handover_s < 2, handover_s  # retried every 0.2 s
    second.wait_event("evictd started")
    assert (state / "evictd.lock").read_text() == f"{second.process.pid}\n"
    assert second.http("/healthz")[0] == 200
    assert second.stop() == 0


def test_a_killed_holder_leaves_no_lock_behind(
    tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]
) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    state = tmp_path / "state"
    first = start(tmp_path, "first", apiserver, state, evictd_processes)
    first.wait_event("evictd started")
    first.kill()  # SIGKILL: no clean-up ran, the lock file still names it

    second = start(tmp_path, "second", apiserver, state, evictd_processes, "stateLockTimeout: 0s\n")
    second.wait_event("evictd started")
    # No wait on a lock ("<node|stateDir> is locked by another evictd: ..."); "memory locked" is another matter.
    assert not any("is locked by another evictd" in str(e.get("event")) for e in second.events)
    assert (state / "evictd.lock").read_text() == f"{second.process.pid}\n"
    assert second.stop() == 0


def test_a_state_dir_that_cannot_be_created_is_logged_and_evictd_runs_without_the_lock(
    tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]
) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    (tmp_path / "a-file").write_text("not a folder\n")
    state = tmp_path / "a-file" / "state"  # ENOTDIR for every attempt to create it
    daemon = start(tmp_path, "daemon", apiserver, state, evictd_processes)

    problem = daemon.wait_event("stateDir lock file cannot be created: running without the lock")
    assert problem["level"] == "error" and problem["lock_file"] == str(state / "evictd.lock")
    assert problem["error"] == "Not a directory"
    daemon.wait_event("evictd started")
    assert daemon.http("/healthz")[0] == 200
    assert daemon.stop() == 0


# --- one evictd per node, with or without an API, whatever its stateDir ----------------------------------------


def start_alone(tmp_path: Path, name: str, state: Path, node_lock: Path, evictd_processes: list[EvictdProcess],
                extra: str = "") -> EvictdProcess:
    """`evictd run` without an API, with `state` as stateDir and `node_lock` as its node lock."""
    return start(tmp_path, name, None, state, evictd_processes, extra, node_lock)


def test_two_evictd_with_different_state_dirs_on_one_node_the_second_waits_on_the_node_lock(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    node_lock = tmp_path / "run" / "node.lock"
    first = start_alone(tmp_path, "first", tmp_path / "state-1", node_lock, evictd_processes)
    first.wait_event("evictd started")
    assert node_lock.read_text() == f"{first.process.pid}\n"

    second = start_alone(tmp_path, "second", tmp_path / "state-2", node_lock, evictd_processes,
                         f"stateLockTimeout: {LOCK_WAIT_S:g}s\n")
    waiting = second.wait_event("node is locked by another evictd: waiting for it to stop")
    assert (waiting["holder_pid"], waiting["lock_file"]) == (str(first.process.pid), str(node_lock))
    assert second.process.wait(timeout=30) == 2
    assert second.stderr().splitlines() == [
        f"evictd: the node is still locked by another evictd (PID {first.process.pid}) after 2 s; "
        f"lock file {node_lock}"]
    assert not any(e.get("event") == "evictd started" for e in second.events)
    assert not (tmp_path / "state-2" / "recording").exists()  # it wrote nothing
    assert first.process.poll() is None and first.stop() == 0


def test_two_evictd_on_one_state_dir_without_an_api_the_second_waits_on_the_state_dir_lock(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    """Without an API the stateDir still holds the engine state and the recording: locked all the same (here the
    two are given two node locks, as two nodes sharing a stateDir over NFS would be)."""
    state = tmp_path / "state"
    first = start_alone(tmp_path, "first", state, tmp_path / "node-1.lock", evictd_processes)
    first.wait_event("evictd started")
    lock_file = state / "evictd.lock"
    assert lock_file.read_text() == f"{first.process.pid}\n"

    second = start_alone(tmp_path, "second", state, tmp_path / "node-2.lock", evictd_processes,
                         f"stateLockTimeout: {LOCK_WAIT_S:g}s\n")
    second.wait_event("stateDir is locked by another evictd: waiting for it to stop")
    assert second.process.wait(timeout=30) == 2
    assert second.stderr().splitlines() == [
        f"evictd: stateDir {state} is still locked by another evictd (PID {first.process.pid}) after 2 s; "
        f"lock file {lock_file}"]
    assert not any(e.get("event") == "engine state restored" for e in second.events)
    assert all(path.name.endswith(f"-{first.process.pid}.jsonl") for path in (state / "recording").iterdir())
    assert first.stop() == 0


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_left_alone(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    target = tmp_path / "precious"
    target.write_text("do not overwrite\n")
    (state / "evictd.lock").symlink_to(target)
    daemon = start_alone(tmp_path, "daemon", state, tmp_path / "node.lock", evictd_processes)
    assert daemon.process.wait(timeout=30) == 2
    assert daemon.stderr().splitlines() == [
        f"evictd: the lock file of stateDir {state}, {state / 'evictd.lock'}, is a symlink, not a regular file: "
        "evictd does not start (remove it)"]
    assert target.read_text() == "do not overwrite\n"


def test_a_lock_file_that_is_a_folder_is_refused(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    node_lock = tmp_path / "node.lock"
    node_lock.mkdir()
    daemon = start_alone(tmp_path, "daemon", tmp_path / "state", node_lock, evictd_processes)
    assert daemon.process.wait(timeout=30) == 2
    assert daemon.stderr().splitlines() == [
        f"evictd: the lock file of the node, {node_lock}, is a folder, not a regular file: evictd does not start "
        "(remove it)"]


def test_a_second_daemon_built_in_the_same_process_shares_its_locks_and_another_process_still_waits(
        tmp_path: Path) -> None:
    """The locks are per process: a benchmark or a test building two daemons in one process does not wait on its
    own lock, while any other process does and gives up after its timeout."""
    log = structlog.get_logger("test")
    state = tmp_path / "state"
    acquire_state_lock(str(state), 5.0, log)
    started = time.monotonic()
    acquire_state_lock(str(state), 5.0, log)
    assert time.monotonic() - started < 0.5
    other = subprocess.run(
        [sys.executable, "-c",
         "import structlog, sys\n"
         "from evictd.core.errors import StateLockError\n"
         "from evictd.run.lock import acquire_state_lock\n"
         "try:\n"
         f"    acquire_state_lock({str(state)!r}, 0.5, structlog.get_logger('other'))\n"
         "except StateLockError as exc:\n"
         "    print(exc)\n    sys.exit(3)\n"],
        capture_output=True, text=True, timeout=30)
    assert other.returncode == 3, other
    assert f"PID {os.getpid()}" in other.stdout

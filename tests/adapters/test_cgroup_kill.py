"""The hard eviction's last resort: a pod's processes killed through its cgroup, on this machine's real cgroups.

On this cgroup v1 host `kill_cgroup_tree` lists `cgroup.procs` below the pod cgroup and SIGKILLs, in rounds; the
v2 path (`cgroup.kill`) runs in the user-mode Linux guests (tests/uml). `CriRuntime.stop_pod` falls back to it when
the runtime does not answer: against a real Unix socket that accepts and never answers, as a hung containerd does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from builders import pod
from evictd.adapters.cgroup_kill import kill_cgroup_tree, terminate_cgroup_tree
from evictd.adapters.runtime_node import CYCLE_READ_TIMEOUT_S, RuntimeFilesystems
from evictd.core.engine import Eviction
from evictd.core.errors import CRIError, EvictdError
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.core.quantity import Quantity
from evictd.core.signals import Signal
from evictd.core.thresholds import Threshold, ThresholdValue
from evictd.core.unanswered import OVERDUE_S
from evictd.run.runtime_link import GUARD_POLL_S, CriRuntime, MemoryGuard
from hung_socket import hung_cri_client
from polling import wait_until
from real_cgroups import CGROUP_MOUNT, temporary_cgroup

# A process that forks a child holding the same cgroup, both sleeping: what a container's main process and its
# worker look like.
FORKER = "import os, time\nif os.fork() == 0:\n    time.sleep(600)\nelse:\n    time.sleep(600)\n"


def start_in(cgroup: Path) -> subprocess.Popen[bytes]:
    """A forking process started inside `cgroup` (it joins before it execs)."""
    return subprocess.Popen(["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$0" -c "$1"', sys.executable,
                             FORKER])


def eviction_of(victim: Pod) -> Eviction:
    return Eviction(pod=victim, signal="memory.available", grace_period_override_s=1, effective_grace_period_s=1,
                    message="The node was low on resource: memory.", annotations={}, conditions=())


def procs(cgroup: Path) -> set[int]:
    return {int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()}


def test_every_process_below_a_pod_cgroup_is_killed_and_counted() -> None:
    with temporary_cgroup(CGROUP_MOUNT / "memory") as pod_cgroup:
        container = pod_cgroup / "container-1"
        container.mkdir()
        started = [start_in(pod_cgroup), start_in(container)]
        assert wait_until(lambda: len(procs(pod_cgroup)) == 2 and len(procs(container)) == 2, 10.0)
        assert kill_cgroup_tree(str(pod_cgroup)) == 4
        assert wait_until(lambda: not procs(pod_cgroup) and not procs(container), 10.0)
        assert [p.wait(timeout=10) for p in started] == [-9, -9]
        os.rmdir(container)
    assert kill_cgroup_tree(str(pod_cgroup)) == 0  # gone: nothing to kill, no error


@contextmanager
def hung_runtime(tmp_path: Path, client_timeout_s: float, guard: Callable[[Path], MemoryGuard] | None = None) \
        -> Iterator[tuple[CriRuntime, list[str], subprocess.Popen[bytes], Path]]:
    """A runtime behind a Unix socket that accepts and never answers (a hung containerd), whose last resort kills a
    real pod cgroup holding a forking process (started): the runtime, the pod UIDs killed, the process, the cgroup.
    `guard`: the hard memory evictions' guard on that cgroup, if any."""
    with temporary_cgroup(CGROUP_MOUNT / "memory") as pod_cgroup, hung_cri_client(tmp_path, client_timeout_s) as client:
        kills: list[str] = []

        def kill(uid: str) -> int:
            kills.append(uid)
            return kill_cgroup_tree(str(pod_cgroup))

        runtime = CriRuntime(client, RuntimeFilesystems(client, str(tmp_path), str(tmp_path)), gc=None,
                             kill_processes=kill, memory_guard=None if guard is None else guard(pod_cgroup))
        started = start_in(pod_cgroup)
        try:
            assert wait_until(lambda: len(procs(pod_cgroup)) == 2, 10.0)
            yield runtime, kills, started, pod_cgroup
            assert wait_until(lambda: not procs(pod_cgroup), 10.0)
        finally:
            started.kill()


def test_a_stop_the_runtime_does_not_answer_kills_the_pods_processes_through_its_cgroup(tmp_path: Path) -> None:
    """Issue 36's arena: containerd hung in the node's thrash, the local stop failed (CRI DEADLINE_EXCEEDED) and
    the kernel OOM-killed the pod evictd had chosen 3-20 s later."""
    victim = pod_from_dict(pod("hog"))
    with hung_runtime(tmp_path, 0.5) as (runtime, kills, started, pod_cgroup):
        how = runtime.stop_pod(eviction_of(victim))
        assert started.wait(timeout=10) == -9
        # The forked child, signalled too, leaves the cgroup when it has died: on a loaded host, moments after.
        assert wait_until(lambda: not procs(pod_cgroup), 10.0)
        assert kills == [victim.uid]
        assert how.startswith("by killing its 2 processes through its cgroup (the runtime does not answer: CRI "
                              "ListPodSandbox failed: DEADLINE_EXCEEDED"), how
        # Moments later (a read unanswered): straight to the cgroup, without waiting on the runtime again.
        began = time.monotonic()
        with pytest.raises(CRIError, match="holds no process"):
            runtime.stop_pod(eviction_of(victim))
        assert time.monotonic() - began < 0.4


def test_a_stop_begun_while_a_read_is_overdue_goes_to_the_cgroup_without_asking_the_runtime(tmp_path: Path) -> None:
    """The arena's fast leak on the real node (200 MiB/s): an urgent cycle stopped waiting for ListContainerStats
    after 0.5 s, and the hard eviction's stop then waited 2 s on the same hung runtime while the kernel OOM-killed
    the pod. A read under way for OVERDUE_S (the stats worker's, on a thread of its own) sends the stop straight to
    the pod's cgroup."""
    with hung_runtime(tmp_path, 10.0) as (runtime, kills, started, _cgroup):
        reading = threading.Thread(target=_read_stats, args=(runtime,), daemon=True)
        reading.start()
        time.sleep(OVERDUE_S + 0.1)
        began = time.monotonic()
        how = runtime.stop_pod(eviction_of(pod_from_dict(pod("hog"))))
        assert time.monotonic() - began < 0.4
        assert how.startswith("by killing its 2 processes through its cgroup (the runtime does not answer: a read "
                              "under way for 0."), how
        assert started.wait(timeout=10) == -9 and len(kills) == 1
        reading.join(timeout=CYCLE_READ_TIMEOUT_S + 2.0)


def _read_stats(runtime: CriRuntime) -> None:
    """A ListContainerStats that the hung runtime leaves unanswered for its 2 s deadline."""
    with contextlib.suppress(CRIError):
        runtime.container_stats()


HARD_MEMORY = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Quantity.parse("200Mi")))
# A process that ignores SIGTERM, as a container's PID 1 without a handler does (the arena's grower).
DEAF = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"


def hard_memory_eviction(victim: Pod) -> Eviction:
    return replace(eviction_of(victim), threshold=HARD_MEMORY)


def guard_on(pod_cgroup: Path, ran_short: Callable[[Eviction], bool]) -> MemoryGuard:
    return MemoryGuard(terminate=lambda uid: terminate_cgroup_tree(str(pod_cgroup)),
                       running=lambda uid: len(procs(pod_cgroup)), ran_short=ran_short)


def test_a_hard_memory_evictions_pod_gets_sigterm_through_its_cgroup_before_the_runtime_is_asked(
        tmp_path: Path) -> None:
    """What the runtime's stop sends first, sent at once: a hung runtime (or a starved one) delays nothing. The two
    forked processes end on it; the runtime, which never answers, finds nothing left to kill after its deadline."""
    victim = pod_from_dict(pod("hog"))
    with hung_runtime(tmp_path, 10.0, guard=lambda cgroup: guard_on(cgroup, lambda e: False)) as (
            runtime, kills, started, _cgroup):
        how = runtime.stop_pod(hard_memory_eviction(victim))
        assert started.wait(timeout=1) == -signal.SIGTERM, "ended by the SIGTERM, not by a SIGKILL after the deadline"
        assert how.startswith("by SIGTERM to its 2 processes through its cgroup (the runtime does not answer: CRI "
                              "ListPodSandbox failed: DEADLINE_EXCEEDED"), how
        assert kills == [victim.uid], "the cgroup was looked at for what was left: nothing"


def test_a_hard_memory_evictions_grace_period_ends_once_memory_ran_short(tmp_path: Path) -> None:
    """A pod deaf to SIGTERM keeps running through the grace period the runtime gives it; once the node's memory ran
    short (the guard's reading) it is killed through its cgroup, without waiting for the runtime's stop to end."""
    victim = pod_from_dict(pod("hog"))
    readings: list[float] = []

    def ran_short(eviction: Eviction) -> bool:
        readings.append(time.monotonic())
        return len(readings) >= 3

    with temporary_cgroup(CGROUP_MOUNT / "memory") as pod_cgroup, hung_cri_client(tmp_path, 10.0) as client:
        runtime = CriRuntime(client, RuntimeFilesystems(client, str(tmp_path), str(tmp_path)), gc=None,
                             kill_processes=lambda uid: kill_cgroup_tree(str(pod_cgroup)),
                             memory_guard=guard_on(pod_cgroup, ran_short))
        deaf = subprocess.Popen(["sh", "-c", f'echo $$ > {pod_cgroup}/cgroup.procs && exec "$0" -c "$1"',
                                 sys.executable, DEAF])
        try:
            assert wait_until(lambda: len(procs(pod_cgroup)) == 1, 10.0)
            time.sleep(0.3)  # its handler set
            began = time.monotonic()
            how = runtime.stop_pod(hard_memory_eviction(victim))
            took_s = time.monotonic() - began
            assert deaf.wait(timeout=5) == -signal.SIGKILL
        finally:
            deaf.kill()
    assert how == ("by killing its 1 processes through its cgroup (memory ran short during its grace period) "
                   "(after SIGTERM to its 1 processes through its cgroup)"), how
    assert len(readings) == 3 and took_s < 3 * GUARD_POLL_S + 1.0, (took_s, readings)
    assert took_s < CYCLE_READ_TIMEOUT_S, "the runtime's stop was not waited for"


class _FailingKiller:
    """A runtime stop that fails with something other than the runtime's own error."""

    def kill(self, eviction: Eviction) -> None:
        raise EvictdError("the pod's sandboxes could not be listed: a broken answer")


def test_a_guarded_stop_raises_what_the_runtimes_stop_raised_on_its_thread(tmp_path: Path) -> None:
    """The runtime's stop runs on a thread of its own beside the guard; what it raises (other than the runtime's
    failure, which the stop handles) is raised to the caller, as an unguarded stop raises it, not taken for a stop
    that succeeded."""
    with temporary_cgroup(CGROUP_MOUNT / "memory") as pod_cgroup, hung_cri_client(tmp_path, 10.0) as client:
        runtime = CriRuntime(client, RuntimeFilesystems(client, str(tmp_path), str(tmp_path)), gc=None,
                             kill_processes=lambda uid: kill_cgroup_tree(str(pod_cgroup)),
                             memory_guard=guard_on(pod_cgroup, lambda e: False))
        runtime._killer = _FailingKiller()  # type: ignore[assignment]
        with pytest.raises(EvictdError, match="a broken answer"):
            runtime.stop_pod(hard_memory_eviction(pod_from_dict(pod("hog"))))


def test_a_hung_runtime_holds_the_stop_for_the_loops_read_deadline_not_the_clients(tmp_path: Path) -> None:
    """With the client's deadline as shipped (`runtimeRequestTimeout` 10 s), a stop the runtime does not answer goes
    to the pod's cgroup after CYCLE_READ_TIMEOUT_S (2 s): on the arena's real node the stop's calls each waited the
    client's 10 s (22-28 s in all) and the kernel OOM-killed the pod first."""
    with hung_runtime(tmp_path, 10.0) as (runtime, _, started, _cgroup):
        began = time.monotonic()
        how = runtime.stop_pod(eviction_of(pod_from_dict(pod("hog"))))
        took_s = time.monotonic() - began
        assert how.startswith("by killing its 2 processes through its cgroup"), how
        assert CYCLE_READ_TIMEOUT_S <= took_s < CYCLE_READ_TIMEOUT_S + 2.0, took_s
        assert started.wait(timeout=10) == -9


def test_without_a_cgroup_killer_a_stop_the_runtime_does_not_answer_fails_as_before(tmp_path: Path) -> None:
    with hung_cri_client(tmp_path, 0.3) as client:
        runtime = CriRuntime(client, RuntimeFilesystems(client, str(tmp_path), str(tmp_path)), gc=None)
        with pytest.raises(CRIError, match="DEADLINE_EXCEEDED"):
            runtime.stop_pod(eviction_of(pod_from_dict(pod("hog"))))


@pytest.mark.parametrize(("stop", "signum"), [(kill_cgroup_tree, -9), (terminate_cgroup_tree, -15)])
def test_a_listed_pid_reused_by_another_process_is_not_signalled(monkeypatch: pytest.MonkeyPatch,
                                                                 stop: Callable[[str], int], signum: int) -> None:
    """A PID read from cgroup.procs whose process exits and whose number another process takes before the signal:
    the first listing names an outside process (as the reused PID would), which must survive."""
    from evictd.adapters import cgroup_kill

    outsider = subprocess.Popen(["sleep", "600"])
    real_listing = cgroup_kill._pids_by_file
    try:
        with temporary_cgroup(CGROUP_MOUNT / "memory") as pod_cgroup:
            member = start_in(pod_cgroup)
            assert wait_until(lambda: len(procs(pod_cgroup)) == 2, 10.0)

            def stale_listing(folder: str) -> dict[str, set[int]]:
                listed = real_listing(folder)  # as read just before the outsider took a freed PID
                listed[str(pod_cgroup / "cgroup.procs")].add(outsider.pid)
                return listed

            monkeypatch.setattr(cgroup_kill, "_pids_by_file", stale_listing)
            stop(str(pod_cgroup))
            assert member.wait(timeout=10) == signum
            time.sleep(0.2)
            assert outsider.poll() is None, "the process outside the pod's cgroup was signalled"
            if signum == -15:  # SIGTERM leaves the forked child to the runtime's stop: end it here
                monkeypatch.setattr(cgroup_kill, "_pids_by_file", real_listing)
                kill_cgroup_tree(str(pod_cgroup))
                assert wait_until(lambda: not procs(pod_cgroup), 10.0)
    finally:
        outsider.kill()
        outsider.wait()

"""``LocalKiller``: killing an evicted pod through the CRI when the Kubernetes API cannot be reached.

First with a scripted runtime (what is stopped, in which order, with which grace period, and how errors
are reported), then against the real containerd: a pod that handles SIGTERM stops by itself within the
grace period, a pod that ignores it is SIGKILLed when the grace period runs out, and afterwards the
sandbox is NOT_READY while other pods keep running. Last, the runtime that answers it cannot stop a pod (its shim
out of pids, as on the arena's node in a fork bomb): `CriRuntime.stop_pod` then kills the pod through its cgroup.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from containerd_harness import (
    GRACEFUL_SCRIPT,
    QUICK_EXIT_SCRIPT,
    SLEEP_FOREVER_SCRIPT,
    STUBBORN_SCRIPT,
    Containerd,
    RunningPod,
    busybox_container,
    shim_pids,
)
from cri_fixtures import PodFactory

from evictd.adapters.cgroup_kill import kill_cgroup_tree, terminate_cgroup_tree
from evictd.adapters.local_kill import LocalKiller
from evictd.adapters.runtime_node import RuntimeFilesystems
from evictd.core.engine import Eviction
from evictd.core.engine_rules import MINIMUM_GRACE_PERIOD_S, stop_grace_period_s
from evictd.core.errors import CRIError
from evictd.core.pods import Pod
from evictd.core.quantity import Quantity
from evictd.core.runtime import POD_UID_LABEL, Container, ContainerState, Sandbox, SandboxState
from evictd.core.signals import Signal
from evictd.core.thresholds import Threshold, ThresholdValue
from evictd.run.runtime_link import GUARD_POLL_S, CriRuntime, MemoryGuard
from out_of_pids import run_without_new_tasks, without_new_tasks
from polling import wait_until
from real_cgroups import CGROUP_MOUNT

# The graceful container's trap runs once its current `sleep 1` ends, then sleeps 2 s: it exits 2-3 s
# after SIGTERM. The margin covers the runtime's own stop latency (tens of milliseconds measured).
TRAP_SECONDS = 2.0
TRAP_LATEST_S = 3.0
MARGIN_S = 1.0
SIGKILL_EXIT_CODE = 128 + 9
HARD_MEMORY = Threshold(Signal.MEMORY_AVAILABLE, ThresholdValue(quantity=Quantity.parse("200Mi")))


def eviction_of(pod: Pod, grace_s: int) -> Eviction:
    return Eviction(pod=pod, signal="memory.available", grace_period_override_s=grace_s,
                    effective_grace_period_s=grace_s, message="The node was low on resource: memory.",
                    annotations={}, conditions=())


def pod_of(running: RunningPod) -> Pod:
    return Pod(name=running.name, namespace=running.namespace, uid=running.uid)


# --- with a scripted runtime ---------------------------------------------------------------------------

@dataclass
class RecordingRuntime:
    """A ``PodRuntime`` that serves scripted sandboxes/containers and records the stop calls."""

    sandboxes: list[Sandbox]
    containers: list[Container]
    stop_container_errors: dict[str, CRIError] = field(default_factory=dict)
    stop_sandbox_errors: dict[str, CRIError] = field(default_factory=dict)
    stop_delay_s: float = 0.0
    calls: list[tuple[str, str, int | None]] = field(default_factory=list)
    # Each call's method and the deadline it was given (`timeout_s` or `answer_within_s`; None: the client's own).
    deadlines: list[tuple[str, float | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def list_sandboxes(self, *, pod_uid: str | None = None, timeout_s: float | None = None) -> list[Sandbox]:
        self.deadlines.append(("ListPodSandbox", timeout_s))
        return [s for s in self.sandboxes if pod_uid is None or s.uid == pod_uid]

    def list_containers(self, *, pod_uid: str | None = None, timeout_s: float | None = None) -> list[Container]:
        self.deadlines.append(("ListContainers", timeout_s))
        return [c for c in self.containers if pod_uid is None or c.pod_uid == pod_uid]

    def stop_container(self, container_id: str, timeout_s: int, *, answer_within_s: float | None = None) -> None:
        time.sleep(self.stop_delay_s)
        with self.lock:
            self.calls.append(("StopContainer", container_id, timeout_s))
            self.deadlines.append(("StopContainer", answer_within_s))
        if container_id in self.stop_container_errors:
            raise self.stop_container_errors[container_id]

    def stop_sandbox(self, sandbox_id: str, *, timeout_s: float | None = None) -> None:
        with self.lock:
            self.calls.append(("StopPodSandbox", sandbox_id, None))
            self.deadlines.append(("StopPodSandbox", timeout_s))
        if sandbox_id in self.stop_sandbox_errors:
            raise self.stop_sandbox_errors[sandbox_id]


def sandbox(sandbox_id: str, uid: str, state: SandboxState = SandboxState.READY) -> Sandbox:
    return Sandbox(id=sandbox_id, name="web", namespace="default", uid=uid, state=state, created_at_ns=1)


def container(container_id: str, sandbox_id: str, uid: str,
              state: ContainerState = ContainerState.RUNNING) -> Container:
    return Container(id=container_id, name=container_id, pod_sandbox_id=sandbox_id, state=state,
                     created_at_ns=1, labels={POD_UID_LABEL: uid})


WEB = Pod(name="web", namespace="default", uid="uid-web")


def scripted(containers: Sequence[Container], sandboxes: Sequence[Sandbox] | None = None,
             **options: Any) -> RecordingRuntime:
    return RecordingRuntime(sandboxes=list(sandboxes or [sandbox("sb-web", "uid-web")]),
                            containers=list(containers), **options)


@pytest.mark.parametrize(("effective_s", "sent_s"), [(1, 2), (2, 2), (30, 30)],
                         ids=["hard-eviction-floored", "at-the-floor", "soft-eviction-as-is"])
def test_grace_period_is_the_effective_one_floored_at_two_seconds(effective_s: int, sent_s: int) -> None:
    assert MINIMUM_GRACE_PERIOD_S == 2
    assert stop_grace_period_s(effective_s) == sent_s
    runtime = scripted([container("c1", "sb-web", "uid-web")])
    result = LocalKiller(runtime).kill(eviction_of(WEB, effective_s))
    assert runtime.calls[0] == ("StopContainer", "c1", sent_s)
    assert result.grace_period_s == sent_s


def test_running_containers_are_stopped_then_the_sandbox() -> None:
    runtime = scripted([
        container("running", "sb-web", "uid-web"),
        container("unknown", "sb-web", "uid-web", ContainerState.UNKNOWN),
        container("exited", "sb-web", "uid-web", ContainerState.EXITED),
        container("created", "sb-web", "uid-web", ContainerState.CREATED),
        container("elsewhere", "sb-other", "uid-other"),
    ], [sandbox("sb-web", "uid-web"), sandbox("sb-old", "uid-web", SandboxState.NOTREADY),
        sandbox("sb-other", "uid-other")])

    result = LocalKiller(runtime).kill(eviction_of(WEB, 5))

    assert sorted(runtime.calls[:2]) == [("StopContainer", "running", 5), ("StopContainer", "unknown", 5)]
    assert runtime.calls[2:] == [("StopPodSandbox", "sb-web", None)]  # the not-ready sandbox is already stopped
    assert result.found and result.pod == "default/web" and result.pod_uid == "uid-web"
    assert sorted(result.container_ids) == ["running", "unknown"]
    assert result.sandbox_ids == ("sb-web",)


def test_containers_are_stopped_in_parallel() -> None:
    runtime = scripted([container(f"c{i}", "sb-web", "uid-web") for i in range(4)], stop_delay_s=0.3)
    started = time.monotonic()
    LocalKiller(runtime).kill(eviction_of(WEB, 2))
    assert time.monotonic() - started < 0.9  # one by one would take 1.2 s


def test_a_pod_the_runtime_does_not_hold_is_not_found() -> None:
    runtime = scripted([], [sandbox("sb-other", "uid-other")])
    result = LocalKiller(runtime).kill(eviction_of(WEB, 2))
    assert not result.found and result.container_ids == () and result.sandbox_ids == ()
    assert runtime.calls == []


def test_a_container_already_gone_counts_as_stopped() -> None:
    runtime = scripted([container("gone", "sb-web", "uid-web")],
                       stop_container_errors={"gone": CRIError("StopContainer", "NOT_FOUND", "not found")})
    result = LocalKiller(runtime).kill(eviction_of(WEB, 2))
    assert result.sandbox_ids == ("sb-web",)


def test_failures_are_raised_after_every_stop_was_tried() -> None:
    runtime = scripted(
        [container("stuck", "sb-web", "uid-web"), container("fine", "sb-web", "uid-web")],
        stop_container_errors={"stuck": CRIError("StopContainer", "UNKNOWN", "task in an unknown state")},
        stop_sandbox_errors={"sb-web": CRIError("StopPodSandbox", "UNKNOWN", "shim gone")},
    )
    with pytest.raises(CRIError) as caught:
        LocalKiller(runtime).kill(eviction_of(WEB, 2))
    assert (caught.value.method, caught.value.code) == ("StopContainer", "UNKNOWN")
    notes = "\n".join(caught.value.__notes__)
    assert "StopPodSandbox failed: UNKNOWN" in notes and "default/web" in notes
    assert {call[1] for call in runtime.calls} == {"stuck", "fine", "sb-web"}


def test_a_container_stop_the_runtime_does_not_answer_ends_the_kill_without_stopping_the_sandbox() -> None:
    """Nothing more is asked of a runtime that hangs: the caller stops the pod another way (its cgroup)."""
    runtime = scripted(
        [container("stuck", "sb-web", "uid-web"), container("fine", "sb-web", "uid-web")],
        stop_container_errors={"stuck": CRIError("StopContainer", "DEADLINE_EXCEEDED", "deadline")},
    )
    with pytest.raises(CRIError) as caught:
        LocalKiller(runtime).kill(eviction_of(WEB, 2))
    assert (caught.value.method, caught.value.code) == ("StopContainer", "DEADLINE_EXCEEDED")
    assert {call[0] for call in runtime.calls} == {"StopContainer"}, "no StopPodSandbox after an unanswered stop"


@pytest.mark.parametrize("answer_within_s", [None, 2.0])
def test_each_call_waits_as_long_as_the_killer_was_told(answer_within_s: float | None) -> None:
    runtime = scripted([container("c1", "sb-web", "uid-web")])
    LocalKiller(runtime, answer_within_s=answer_within_s).kill(eviction_of(WEB, 2))
    assert runtime.deadlines == [("ListPodSandbox", answer_within_s), ("ListContainers", answer_within_s),
                                 ("StopContainer", answer_within_s), ("StopPodSandbox", answer_within_s)]


def test_listing_failures_are_cri_errors() -> None:
    class Down(RecordingRuntime):
        def list_sandboxes(self, *, pod_uid: str | None = None, timeout_s: float | None = None) -> list[Sandbox]:
            raise CRIError("ListPodSandbox", "UNAVAILABLE", "connection refused")

    with pytest.raises(CRIError) as caught:
        LocalKiller(Down(sandboxes=[], containers=[])).kill(eviction_of(WEB, 2))
    assert caught.value.code == "UNAVAILABLE"


# --- against the real containerd ------------------------------------------------------------------------

def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_a_pod_that_handles_sigterm_stops_within_its_grace_period(containerd: Containerd, pods: PodFactory) -> None:
    grace_s = 5
    victim = pods.run(unique("graceful"), [busybox_container("app", GRACEFUL_SCRIPT),
                                           busybox_container("sidecar", GRACEFUL_SCRIPT)])
    bystander = pods.run(unique("bystander"), [busybox_container("app", SLEEP_FOREVER_SCRIPT)])
    for name in victim.container_ids:
        containerd.wait_for_output(victim, name)  # the traps are set

    result = LocalKiller(containerd.cri).kill(eviction_of(pod_of(victim), grace_s))

    # Both containers exited on their own (exit 0 from the trap), in parallel: 2-3 s, not 4-6 s.
    assert TRAP_SECONDS <= result.elapsed_s < TRAP_LATEST_S + MARGIN_S < grace_s
    assert sorted(result.container_ids) == sorted(victim.container_ids.values())
    assert result.sandbox_ids == (victim.sandbox_id,)
    for container_id in victim.container_ids.values():
        status = containerd.cri.container_status(container_id)
        assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 0, "Completed")
    assert containerd.sandbox_state(victim.sandbox_id) is SandboxState.NOTREADY

    (other,) = containerd.cri.list_containers(pod_uid=bystander.uid)
    assert other.state is ContainerState.RUNNING
    assert containerd.sandbox_state(bystander.sandbox_id) is SandboxState.READY


def test_a_pod_that_ignores_sigterm_is_killed_when_the_grace_period_ends(
    containerd: Containerd, pods: PodFactory
) -> None:
    grace_s = 2
    victim = pods.run(unique("stubborn"), [busybox_container("app", STUBBORN_SCRIPT)])
    containerd.wait_for_output(victim, "app")  # the trap is set

    result = LocalKiller(containerd.cri).kill(eviction_of(pod_of(victim), grace_s))

    assert grace_s <= result.elapsed_s < grace_s + MARGIN_S
    status = containerd.cri.container_status(victim.container_ids["app"])
    assert (status.state, status.exit_code) == (ContainerState.EXITED, SIGKILL_EXIT_CODE)
    assert (status.finished_at_ns - status.started_at_ns) / 1e9 >= grace_s
    assert containerd.sandbox_state(victim.sandbox_id) is SandboxState.NOTREADY


def test_a_pod_not_on_this_node_is_reported_not_found(containerd: Containerd) -> None:
    absent = Pod(name="absent", namespace="default", uid=str(uuid.uuid4()))
    result = LocalKiller(containerd.cri).kill(eviction_of(absent, 2))
    assert not result.found and result.container_ids == () and result.sandbox_ids == ()


def test_killing_an_already_stopped_pod_is_harmless(containerd: Containerd, pods: PodFactory) -> None:
    victim = pods.run(unique("twice"), [busybox_container("app", QUICK_EXIT_SCRIPT)])
    killer = LocalKiller(containerd.cri)
    containerd.wait_for_output(victim, "app")
    first = killer.kill(eviction_of(pod_of(victim), 2))
    assert first.container_ids == (victim.container_ids["app"],)

    again = killer.kill(eviction_of(pod_of(victim), 2))

    assert again.found and again.container_ids == () and again.sandbox_ids == ()


# --- a runtime that answers it cannot stop the pod --------------------------------------------------------------

@contextmanager
def shims_out_of_pids(containerd: Containerd) -> Iterator[None]:
    """Put every shim of `containerd` in a pids cgroup allowing no new process (a node out of pids, as far as the
    shims are concerned), then back where each was."""
    shims = shim_pids(str(containerd.socket))
    assert shims, "the pod has a shim"
    with without_new_tasks(shims):
        yield


def test_a_stop_the_runtime_cannot_carry_out_kills_the_pod_through_its_cgroup(
        containerd: Containerd, pods: PodFactory, tmp_path: Path) -> None:
    """The arena's fork bomb on the real node (2026-11-26): out of pids, containerd's shim could not start runc to
    signal the forker, so the stop after its eviction failed with this very error, the forker went on, and the
    next cycle evicted the Guaranteed pod (the forker, its termination asked, no longer ranked)."""
    victim = pods.run(unique("unstoppable"), [busybox_container("app", SLEEP_FOREVER_SCRIPT)])
    pod_cgroup = CGROUP_MOUNT / "memory" / victim.cgroup_parent.lstrip("/")
    killed: list[str] = []

    def kill(uid: str) -> int:
        killed.append(uid)
        return kill_cgroup_tree(str(pod_cgroup))

    runtime = CriRuntime(containerd.cri, RuntimeFilesystems(containerd.cri, str(tmp_path), str(tmp_path)), gc=None,
                         kill_processes=kill)
    with shims_out_of_pids(containerd):
        how = runtime.stop_pod(eviction_of(pod_of(victim), 2))
        assert killed == [victim.uid]
        # Out of pids, the shim itself may die mid-stop (its next thread refused): containerd's clean-up after a
        # dead shim then kills the container before evictd looks (seen in 1 of 14 fresh-clone CI runs).
        assert re.match(r"(by killing its \d+ processes through its cgroup|by the runtime after all: its cgroup "
                        r"holds no process and no container of it runs) \(the runtime could not stop it: CRI "
                        r"StopContainer failed: UNKNOWN", how), how
        assert "fork/exec /usr/sbin/runc: resource temporarily unavailable" in how, how
        assert wait_until(lambda: not (pod_cgroup / "cgroup.procs").exists()
                          or not _procs_below(pod_cgroup), 10.0)
    # The runtime finds its container exited on SIGKILL, as after an OOM kill (its shim reports it).
    assert wait_until(lambda: containerd.cri.container_status(victim.container_ids["app"]).state
                      is ContainerState.EXITED, 10.0)
    assert containerd.cri.container_status(victim.container_ids["app"]).exit_code == SIGKILL_EXIT_CODE


def test_a_pod_whose_processes_are_gone_when_the_runtimes_stop_failed_is_stopped_not_a_failed_eviction(
        containerd: Containerd, pods: PodFactory, tmp_path: Path) -> None:
    """The shim out of pids fails the stop and then dies (here killed by the test when evictd turns to the cgroup,
    as a shim refused its next thread does), and the container's processes with it (containerd's clean-up after a
    dead shim did so in the CI run that found this; here the test kills them), so nothing is left in the cgroup. The pod is stopped: not a failure that would have the next pod evicted; the stop
    says how."""
    victim = pods.run(unique("gone"), [busybox_container("app", SLEEP_FOREVER_SCRIPT)])
    pod_cgroup = CGROUP_MOUNT / "memory" / victim.cgroup_parent.lstrip("/")
    app = victim.container_ids["app"]
    member = _procs_below(pod_cgroup)[0]  # the pause or the app: each a child of the pod's shim

    def gone_before(uid: str) -> int:
        shim = next(int(line.split()[1]) for line in Path(f"/proc/{member}/status").read_text().splitlines()
                    if line.startswith("PPid:"))
        os.kill(shim, signal.SIGKILL)
        kill_cgroup_tree(str(pod_cgroup))  # what containerd's clean-up after the dead shim does, when it does
        assert wait_until(lambda: containerd.cri.container_status(app).state is ContainerState.EXITED
                          and not _procs_below(pod_cgroup), 10.0)
        return kill_cgroup_tree(str(pod_cgroup))  # what evictd finds: no process

    runtime = CriRuntime(containerd.cri, RuntimeFilesystems(containerd.cri, str(tmp_path), str(tmp_path)), gc=None,
                         kill_processes=gone_before)
    with shims_out_of_pids(containerd):
        how = runtime.stop_pod(eviction_of(pod_of(victim), 2))
    assert how.startswith("by the runtime after all: its cgroup holds no process and no container of it runs (the "
                          "runtime could not stop it: CRI StopContainer failed: UNKNOWN"), how


def test_a_pod_deaf_to_sigterm_is_killed_once_memory_ran_short_during_its_grace_period(
        containerd: Containerd, pods: PodFactory, tmp_path: Path) -> None:
    """A hard memory eviction of a pod that ignores SIGTERM (the arena's grower: PID 1 of its container, no
    handler): the runtime's stop runs its 2 s grace period; the node's memory runs short 0.3 s in (the guard's
    reading), and the pod is killed through its cgroup then, not at the grace period's end. The runtime finds the
    container exited on SIGKILL."""
    victim = pods.run(unique("deaf"), [busybox_container("app", STUBBORN_SCRIPT)])
    containerd.wait_for_output(victim, "app")  # the trap is set
    pod_cgroup = CGROUP_MOUNT / "memory" / victim.cgroup_parent.lstrip("/")
    began, began_wall = time.monotonic(), time.time()
    guard = MemoryGuard(terminate=lambda uid: terminate_cgroup_tree(str(pod_cgroup)),
                        running=lambda uid: len(_procs_below(pod_cgroup)),
                        ran_short=lambda eviction: time.monotonic() - began >= 0.3)
    runtime = CriRuntime(containerd.cri, RuntimeFilesystems(containerd.cri, str(tmp_path), str(tmp_path)), gc=None,
                         kill_processes=lambda uid: kill_cgroup_tree(str(pod_cgroup)), memory_guard=guard)
    grace_s = 2
    how = runtime.stop_pod(replace(eviction_of(pod_of(victim), grace_s), threshold=HARD_MEMORY))
    took_s = time.monotonic() - began
    assert re.fullmatch(r"by killing its \d+ processes through its cgroup \(memory ran short during its grace "
                        r"period\) \(after SIGTERM to its \d+ processes through its cgroup\)", how), how
    assert 0.3 <= took_s < grace_s, took_s
    assert wait_until(lambda: containerd.cri.container_status(victim.container_ids["app"]).state
                      is ContainerState.EXITED, 10.0)
    status = containerd.cri.container_status(victim.container_ids["app"])
    assert status.exit_code == SIGKILL_EXIT_CODE
    assert status.finished_at_ns / 1e9 - began_wall < grace_s, "it ended before its grace period would have"


def test_with_memory_not_short_a_pod_deaf_to_sigterm_keeps_its_grace_period(
        containerd: Containerd, pods: PodFactory, tmp_path: Path) -> None:
    """The same stop with the node's memory above half the threshold: the runtime's stop, grace period and all."""
    victim = pods.run(unique("deaf"), [busybox_container("app", STUBBORN_SCRIPT)])
    containerd.wait_for_output(victim, "app")
    pod_cgroup = CGROUP_MOUNT / "memory" / victim.cgroup_parent.lstrip("/")
    readings: list[Eviction] = []

    def never(eviction: Eviction) -> bool:
        readings.append(eviction)
        return False

    guard = MemoryGuard(terminate=lambda uid: terminate_cgroup_tree(str(pod_cgroup)),
                        running=lambda uid: len(_procs_below(pod_cgroup)), ran_short=never)
    runtime = CriRuntime(containerd.cri, RuntimeFilesystems(containerd.cri, str(tmp_path), str(tmp_path)), gc=None,
                         kill_processes=lambda uid: kill_cgroup_tree(str(pod_cgroup)), memory_guard=guard)
    grace_s = 2
    began = time.monotonic()
    how = runtime.stop_pod(replace(eviction_of(pod_of(victim), grace_s), threshold=HARD_MEMORY))
    took_s = time.monotonic() - began
    assert re.fullmatch(r"through the container runtime \(after SIGTERM to its \d+ processes through its cgroup\)",
                        how), how
    assert grace_s <= took_s < grace_s + MARGIN_S, took_s
    assert len(readings) >= grace_s / GUARD_POLL_S / 2, "looked at throughout the grace period"
    status = containerd.cri.container_status(victim.container_ids["app"])
    assert (status.state, status.exit_code) == (ContainerState.EXITED, SIGKILL_EXIT_CODE)


def _procs_below(folder: Path) -> list[str]:
    """The PIDs in `folder` and the cgroups below it; a container's cgroup the runtime removes meanwhile has none
    (os.walk skips a folder gone while it is read, where Path.rglob raised)."""
    pids = []
    for parent, _, _ in os.walk(folder):
        with contextlib.suppress(FileNotFoundError):
            pids += (Path(parent) / "cgroup.procs").read_text().split()
    return pids


def test_a_pod_whose_cgroup_holds_nothing_left_raises_the_runtimes_own_failure() -> None:
    """A stop the runtime failed (an answer, not a time-out) with nothing left in the pod's cgroup: its failure, as
    before (its containers may be gone and its sandbox not)."""
    failure = CRIError("StopPodSandbox", "UNKNOWN", "failed to destroy network for sandbox")
    runtime = CriRuntime(scripted([container("c1", "sb-web", "uid-web")],  # type: ignore[arg-type]
                                  stop_sandbox_errors={"sb-web": failure}),
                         RuntimeFilesystems(None, "/", "/"), gc=None,  # type: ignore[arg-type]
                         kill_processes=lambda uid: 0)
    with pytest.raises(CRIError) as caught:
        runtime.stop_pod(eviction_of(WEB, 2))
    assert caught.value is failure


# --- a node out of pids ------------------------------------------------------------------------------------------

# LocalKiller in a process that can start no thread (tests/out_of_pids.py): it kills a scripted pod of two
# containers and records what happened.
OUT_OF_PIDS_SETUP = """
from evictd.adapters.local_kill import LocalKiller
from evictd.core.engine import Eviction
from evictd.core.pods import Pod
from evictd.core.runtime import POD_UID_LABEL, Container, ContainerState, Sandbox, SandboxState

class Runtime:
    def __init__(self):
        self.stopped, self.threads = [], set()
    def list_sandboxes(self, *, pod_uid=None, timeout_s=None):
        return [Sandbox(id="sb", name="web", namespace="default", uid="uid-web", state=SandboxState.READY,
                        created_at_ns=1)]
    def list_containers(self, *, pod_uid=None, timeout_s=None):
        return [Container(id=f"c{i}", name=f"c{i}", pod_sandbox_id="sb", state=ContainerState.RUNNING,
                          created_at_ns=1, labels={POD_UID_LABEL: "uid-web"}) for i in (1, 2)]
    def stop_container(self, container_id, timeout_s, *, answer_within_s=None):
        self.stopped.append(container_id)
        self.threads.add(threading.current_thread().name)
    def stop_sandbox(self, sandbox_id, *, timeout_s=None):
        self.stopped.append(sandbox_id)
"""
OUT_OF_PIDS_KILL = """
runtime = Runtime()
result = LocalKiller(runtime).kill(Eviction(
    pod=Pod(name="web", namespace="default", uid="uid-web"), signal="pid.available", grace_period_override_s=0,
    effective_grace_period_s=0, message="", annotations={}, conditions=()))
outcome = {"stopped": runtime.stopped, "threads": sorted(runtime.threads), "containers": list(result.container_ids)}
"""


def test_a_kill_in_a_process_that_can_start_no_thread_stops_the_containers_one_after_the_other() -> None:
    """The arena's fork bomb on the real node: evictd's local stop started a thread per container, the node was out
    of pids, `can't start new thread` took the daemon down in the middle of the stop (exit 1)."""
    outcome = run_without_new_tasks(OUT_OF_PIDS_SETUP, OUT_OF_PIDS_KILL)
    assert outcome["stopped"] == ["c1", "c2", "sb"]
    assert outcome["threads"] == ["MainThread"]
    assert outcome["containers"] == ["c1", "c2"]

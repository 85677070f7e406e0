"""Kill an evicted pod through the container runtime itself, without the Kubernetes API.

When a hard threshold is met and the API server is unreachable, stop the pod's containers and sandbox over the CRI
as kuberuntime ``killPodWithSyncResult`` does: find them by ``io.kubernetes.pod.uid``; ``StopContainer`` every
running one in parallel (one after the other where no thread can start) with the grace period as the CRI timeout;
then ``StopPodSandbox`` each sandbox.

Invariants: the grace period is ``effective_grace_period_s`` floored at 2 s (``minimumGracePeriodInSeconds``); a
container already gone (``NOT_FOUND``) counts as stopped; other failures are collected, sandboxes stopped anyway,
then the first ``CRIError`` raised with the others as notes; nothing is removed. With ``answer_within_s`` each call
waits at most that long (StopContainer: plus the grace) and an unanswered one ends the kill at once (the caller
decides what else stops the pod; docs/node-survival.md). Uses only core and cri values: no gRPC import.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Eviction
from evictd.core.engine_rules import stop_grace_period_s
from evictd.core.errors import CRIError
from evictd.core.runtime import Container, ContainerState, Sandbox, SandboxState

# The kubelet stops running containers; an UNKNOWN one may be running (stopping an exited one is a no-op).
STOPPABLE_STATES = frozenset({ContainerState.RUNNING, ContainerState.UNKNOWN})

NOT_FOUND = "NOT_FOUND"
# The gRPC status of a call the runtime did not answer in time.
UNANSWERED = "DEADLINE_EXCEEDED"


class PodRuntime(Protocol):
    """The CRI calls a local kill needs (``evictd.cri.client.CriClient`` provides them). `timeout_s` (lists,
    StopPodSandbox) and `answer_within_s` (StopContainer, beside its grace period): the call's deadline; None: the
    client's own."""

    def list_sandboxes(self, *, pod_uid: str | None = None, timeout_s: float | None = None) -> list[Sandbox]: ...

    def list_containers(self, *, pod_uid: str | None = None, timeout_s: float | None = None) -> list[Container]: ...

    def stop_container(self, container_id: str, timeout_s: int, *, answer_within_s: float | None = None) -> None: ...

    def stop_sandbox(self, sandbox_id: str, *, timeout_s: float | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class KillResult:
    """What a local kill did: the pod, the grace period sent, what was stopped (`container_ids`, `sandbox_ids`) and
    how long it took; ``found`` False when the runtime holds no sandbox of the pod."""

    pod: str
    pod_uid: str
    found: bool
    grace_period_s: int
    container_ids: tuple[str, ...]
    sandbox_ids: tuple[str, ...]
    elapsed_s: float


def containers_to_stop(sandboxes: Sequence[Sandbox], containers: Sequence[Container], pod_uid: str) -> list[Container]:
    """Return the pod's containers to stop: in one of its sandboxes or labelled with its UID, and running."""
    sandbox_ids = {sandbox.id for sandbox in sandboxes}
    return [
        container
        for container in containers
        if (container.pod_sandbox_id in sandbox_ids or (pod_uid and container.pod_uid == pod_uid))
        and container.state in STOPPABLE_STATES
    ]


def sandboxes_to_stop(sandboxes: Sequence[Sandbox], stopped: Sequence[Container]) -> list[Sandbox]:
    """Return the sandboxes to stop: the ready ones, and any other that held a container being stopped."""
    holding = {container.pod_sandbox_id for container in stopped}
    return [sandbox for sandbox in sandboxes if sandbox.state is SandboxState.READY or sandbox.id in holding]


class LocalKiller:
    """Kills evicted pods over the CRI (the module's procedure). ``answer_within_s``: each call's wait (None: the
    client's deadlines); ``clock`` only times the kill."""

    def __init__(self, runtime: PodRuntime, *, answer_within_s: float | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._runtime = runtime
        self._answer_within_s = answer_within_s
        self._clock = clock

    def _pod_sandboxes(self, eviction: Eviction) -> list[Sandbox]:
        pod = eviction.pod
        if pod.uid:
            return self._runtime.list_sandboxes(pod_uid=pod.uid, timeout_s=self._answer_within_s)
        # A pod without a UID (never from the API server) can only be matched by name and namespace.
        return [s for s in self._runtime.list_sandboxes(timeout_s=self._answer_within_s)
                if (s.namespace, s.name) == (pod.namespace, pod.name)]

    def _stop_container(self, container: Container, grace_s: int) -> CRIError | None:
        try:
            self._runtime.stop_container(container.id, grace_s, answer_within_s=self._answer_within_s)
        except CRIError as exc:
            return None if exc.code == NOT_FOUND else exc
        return None

    def _stop_containers(self, containers: Sequence[Container], grace_s: int) -> list[CRIError | None]:
        """Stop `containers` in parallel, one thread each (one container: on this thread), one after the other when
        no thread can be started (a node out of pids)."""
        if len(containers) <= 1:
            return [self._stop_container(container, grace_s) for container in containers]
        try:
            with ThreadPoolExecutor(max_workers=len(containers), thread_name_prefix="local-kill") as pool:
                return list(pool.map(lambda c: self._stop_container(c, grace_s), containers))
        except RuntimeError:  # a thread could not be started; those that did have finished (the pool waited)
            return [self._stop_container(container, grace_s) for container in containers]

    def kill(self, eviction: Eviction) -> KillResult:
        """Stop the evicted pod's containers (with the grace period) and sandboxes; return what was done. Blocks at
        most the grace period plus the runtime's latency. Raises ``CRIError`` if listing fails, at once if a stop
        went unanswered, or after trying everything if any stop failed."""
        started = self._clock.monotonic()
        pod = eviction.pod
        grace_s = stop_grace_period_s(eviction.effective_grace_period_s)
        sandboxes = self._pod_sandboxes(eviction)
        if not sandboxes:
            return KillResult(pod.key, pod.uid, False, grace_s, (), (), self._clock.monotonic() - started)
        containers = containers_to_stop(
            sandboxes, self._runtime.list_containers(pod_uid=pod.uid or None, timeout_s=self._answer_within_s),
            pod.uid)
        errors = [error for error in self._stop_containers(containers, grace_s) if error is not None]
        unanswered = [error for error in errors if error.code == UNANSWERED]
        to_stop = [] if unanswered else sandboxes_to_stop(sandboxes, containers)
        for sandbox in to_stop:
            try:
                self._runtime.stop_sandbox(sandbox.id, timeout_s=self._answer_within_s)
            except CRIError as exc:
                errors.append(exc)
        if errors:
            first = (unanswered or errors)[0]
            for other in errors:
                if other is not first:
                    first.add_note(f"also: {other}")
            first.add_note(f"while killing pod {pod.key} (uid {pod.uid}) locally with a {grace_s} s grace period")
            raise first
        return KillResult(pod=pod.key, pod_uid=pod.uid, found=True, grace_period_s=grace_s,
                          container_ids=tuple(container.id for container in containers),
                          sandbox_ids=tuple(sandbox.id for sandbox in to_stop),
                          elapsed_s=self._clock.monotonic() - started)

"""Kill an evicted pod through the container runtime itself, without the Kubernetes API.

Job: when a hard threshold is met and the API server is unreachable (so the pod cannot be deleted and
its kubelet told), stop the pod's containers and sandbox on this node directly over the CRI, the way the
kubelet's runtime manager kills a pod (pkg/kubelet/kuberuntime ``killPodWithSyncResult``):

1. find the pod's sandboxes and containers by the kubelet's ``io.kubernetes.pod.uid`` label;
2. ``StopContainer`` every running container **in parallel** (``killContainersWithSyncResult`` starts a
   goroutine per container; one after the other where no thread can be started, on a node out of pids), each
   with the grace period as the CRI timeout: the runtime sends the stop signal, waits that many seconds, then
   SIGKILLs;
3. ``StopPodSandbox`` each sandbox, which also force-kills anything still running in it.

Invariants:

* The grace period sent is the eviction's ``effective_grace_period_s``, floored at 2 s: the kubelet's
  ``killContainer`` applies the override and then "always give[s] containers a minimal shutdown window
  to avoid unnecessary SIGKILLs" (``minimumGracePeriodInSeconds = 2``).
* A container that is already gone (``NOT_FOUND`` from StopContainer) counts as stopped, as in the
  kubelet (``crierror.IsNotFound``). Every other failure is collected; the sandboxes are stopped anyway,
  and ``kill`` then raises the first ``CRIError`` with the others attached as notes. Nothing is removed:
  dead containers and sandboxes are left to garbage collection (and to the kubelet when it returns).
* With ``answer_within_s``, every call waits at most that long for the runtime (StopContainer: that plus the
  grace period), and a call the runtime did not answer in time (``DEADLINE_EXCEEDED``) ends the kill at once:
  nothing more is asked of a runtime that hangs, and the caller decides what else stops the pod. On a real node
  in thrash, the client's own 10 s deadlines made one stop take 22-28 s (list, StopContainer, StopPodSandbox,
  each waited out) while the kernel's OOM killer got there first (docs/node-survival.md).
* Only ``evictd.core`` and ``evictd.cri`` values are used: this module does not import gRPC; it works
  with any ``PodRuntime`` (``CriClient`` in production, a fake in unit tests).
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

# What the kubelet stops: running containers (its "running pod" lists only those); an UNKNOWN one may still
# be running, and stopping an exited container is a harmless no-op, so UNKNOWN is stopped too.
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
    """What a local kill did: the pod, the grace period sent, what was stopped and how long it took.

    ``found`` is False when the runtime holds no sandbox of the pod (already gone, or never on this node);
    ``container_ids``/``sandbox_ids`` are what was stopped (empty if the pod was found already stopped).
    """

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
    """Kills evicted pods over the CRI (see the module docstring for the procedure).

    ``answer_within_s``: how long each call waits for the runtime (see the module docstring); None: the client's own
    deadlines. ``clock`` (monotonic seconds) only times the kill for the result.
    """

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
        """Stop `containers` in parallel, one thread each (one container: on this thread); one after the other when
        no thread can be started. On a node out of pids a thread is a task like any other: in the arena's fork bomb
        on the real node the pool's first thread failed (``can't start new thread``) and took the daemon down in
        the middle of the stop."""
        if len(containers) <= 1:
            return [self._stop_container(container, grace_s) for container in containers]
        try:
            with ThreadPoolExecutor(max_workers=len(containers), thread_name_prefix="local-kill") as pool:
                return list(pool.map(lambda c: self._stop_container(c, grace_s), containers))
        except RuntimeError:  # a thread could not be started; those that did have finished (the pool waited)
            return [self._stop_container(container, grace_s) for container in containers]

    def kill(self, eviction: Eviction) -> KillResult:
        """Stop the evicted pod's containers (with the grace period) and sandboxes; return what was done.

        Blocks until every container has stopped, i.e. at most the grace period plus the runtime's own
        latency. Raises ``CRIError`` if listing fails, at once if a container's stop went unanswered (no sandbox is
        then asked to stop), or (after trying everything) if any stop failed.
        """
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

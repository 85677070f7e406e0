"""The kubelet's part of a pod's life, for the end-to-end tests on the test API server and a real containerd.

What it does is what the real kubelet v1.36.2 did beside evictd on a real single-node cluster (see
../shared/k8s/README.md; tests/cluster runs the same contract tests against that real kubelet, and where the two
differ this stand-in is wrong):

* the pod's status is the kubelet's: while its containers run, phase ``Running`` with no ``reason`` and no
  ``message``, whatever anyone else wrote (its status manager writes its own view back over a foreign phase,
  reason or message). The kubelet-owned conditions are its own; every other condition, ``DisruptionTarget``
  included, is kept as found;
* a pod that gets a ``deletionTimestamp`` is killed: each container stopped with the pod's
  ``deletionGracePeriodSeconds``, never less than 2 s (the kubelet's ``minimumGracePeriodInSeconds``), then the
  sandbox. A later DELETE that shortens the grace period of the pod already terminating is honoured: its
  containers are stopped again with the shorter period (never less than 2 s), so a container that ignores SIGTERM
  is killed that much sooner. The real kubelet does so in pkg/kubelet/pod_workers.go: `UpdatePod` of a pod whose
  termination was requested takes the smaller of the pending and the new grace period
  (`calculateEffectiveGracePeriod`) and, when it shortened it, cancels the running `SyncTerminatingPod`, which
  starts again with the shorter period: a new CRI ``StopContainer`` with that timeout, after which the runtime
  sends SIGKILL;
* once its containers are gone: one terminal status (``Succeeded`` when every container exited 0, else
  ``Failed``; still no reason or message; containers terminated; ``Ready`` False), then the DELETE with grace 0
  and the UID precondition, which removes the object unless a finalizer holds it.

It polls the API server's store every 50 ms and acts in its own threads, so a test sees the same order of
writes a real kubelet produces, only faster.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from apiserver import ApiServer
from containerd_harness import RunningPod
from cri_fixtures import PodFactory
from kube_status import ApiError

from evictd.core.errors import CRIError

POLL_S = 0.05
# pkg/kubelet/kuberuntime: a container is never given less than this to stop (a requested 1 s becomes 2 s).
MINIMUM_GRACE_PERIOD_S = 2
# The conditions the kubelet owns (kubetypes.PodConditionsByKubelet); it keeps every other one as it finds it.
KUBELET_CONDITIONS = frozenset({"PodScheduled", "Ready", "Initialized", "ContainersReady",
                                "PodReadyToStartContainers"})
READY_CONDITIONS = ("Ready", "ContainersReady")


def rfc3339(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class KubeletPod:
    """A pod this kubelet runs: its containers in containerd and what it knows of their ends."""

    running: RunningPod
    image: str
    started_at: str = field(default_factory=rfc3339)
    exit_codes: dict[str, int] = field(default_factory=dict)
    terminating: bool = False
    finished: bool = False
    grace_s: int = 0  # the grace period its containers are being stopped with (while terminating)

    @property
    def key(self) -> tuple[str, str]:
        return self.running.namespace, self.running.name


def running_status(pod: KubeletPod) -> dict[str, Any]:
    """The status the kubelet reports while the pod's containers run."""
    return {
        "phase": "Running",
        "containerStatuses": [
            {"name": name, "ready": True, "restartCount": 0, "image": pod.image, "imageID": "",
             "containerID": f"containerd://{cid}", "started": True,
             "state": {"running": {"startedAt": pod.started_at}}}
            for name, cid in pod.running.container_ids.items()
        ],
    }


def terminal_status(pod: KubeletPod) -> dict[str, Any]:
    """The status the kubelet reports once the pod's containers are gone (a deleted pod is terminal)."""
    now = rfc3339()
    succeeded = all(code == 0 for code in pod.exit_codes.values())
    return {
        "phase": "Succeeded" if succeeded else "Failed",
        "containerStatuses": [
            {"name": name, "ready": False, "restartCount": 0, "image": pod.image, "imageID": "",
             "containerID": f"containerd://{cid}", "started": False,
             "state": {"terminated": {"exitCode": pod.exit_codes.get(name, 137),
                                      "reason": "Completed" if pod.exit_codes.get(name) == 0 else "Error",
                                      "startedAt": pod.started_at, "finishedAt": now,
                                      "containerID": f"containerd://{cid}"}}}
            for name, cid in pod.running.container_ids.items()
        ],
    }


def kubelet_view(stored: Mapping[str, Any], own: Mapping[str, Any], ready: bool) -> dict[str, Any]:
    """The whole status the kubelet's status manager writes: its own fields and conditions, others' conditions kept.

    The kubelet sends the status it generated in full: `reason` and `message` are absent from its view, so
    they end up null; a foreign phase is replaced by its own.
    """
    now = rfc3339()
    previous = {c.get("type"): c for c in (stored.get("status") or {}).get("conditions") or []}
    conditions = [c for c in previous.values() if c.get("type") not in KUBELET_CONDITIONS]
    for kind in ("PodScheduled", "Initialized", *READY_CONDITIONS):
        status = "True" if kind not in READY_CONDITIONS or ready else "False"
        before = previous.get(kind) or {}
        transition = before.get("lastTransitionTime") if before.get("status") == status else now
        conditions.append({"type": kind, "status": status, "lastTransitionTime": transition or now})
    return {**own, "reason": None, "message": None, "conditions": conditions}


class KubeletStandIn:
    """The kubelet of one node: start it, hand it the pods it runs (`adopt`), stop it at the end."""

    def __init__(self, apiserver: ApiServer, factory: PodFactory, node_name: str) -> None:
        self._apiserver = apiserver
        self._factory = factory
        self.node_name = node_name
        self._pods: dict[str, KubeletPod] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"kubelet-{node_name}", daemon=True)
        self.errors: list[str] = []
        self.stopped_sooner: list[tuple[tuple[str, str], int]] = []  # (pod, grace period) of each shortened stop

    def start(self) -> KubeletStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def adopt(self, running: RunningPod, image: str) -> None:
        """Run `running` (already started in containerd, its Pod object stored): report it Running from now on."""
        pod = KubeletPod(running, image)
        with self._lock:
            self._pods[running.uid] = pod
        self._write_status(pod, running_status(pod), ready=True)

    # -- the sync loop -----------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            with self._lock:
                pods = [p for p in self._pods.values() if not p.finished]
            for pod in pods:
                try:
                    self._sync(pod)
                except Exception as exc:  # a stand-in that stops syncing would hide every later failure
                    self.errors.append(f"{pod.key}: {type(exc).__name__}: {exc}")

    def _sync(self, pod: KubeletPod) -> None:
        stored = self._apiserver.store.get_pod(*pod.key)
        if stored is None or stored["metadata"]["uid"] != pod.running.uid:
            pod.finished = True  # removed (or replaced) by someone else: nothing left to report
            return
        if stored["metadata"].get("deletionTimestamp"):
            grace = max(int(stored["metadata"].get("deletionGracePeriodSeconds") or 0), MINIMUM_GRACE_PERIOD_S)
            if not pod.terminating:
                pod.terminating, pod.grace_s = True, grace
                threading.Thread(target=self._kill, args=(pod, grace), daemon=True).start()
            elif grace < pod.grace_s:  # a DELETE shortened the grace period: stop again with the shorter one
                pod.grace_s = grace
                threading.Thread(target=self._stop_sooner, args=(pod, grace), daemon=True).start()
            return
        if pod.terminating:
            return
        status = stored.get("status") or {}
        if status.get("phase") != "Running" or status.get("reason") or status.get("message"):
            self._write_status(pod, running_status(pod), ready=True)  # the status manager's own view, back

    def _kill(self, pod: KubeletPod, grace_s: int) -> None:
        """Stop every container with the grace period, then the sandbox; report it terminal; delete the object."""
        cri = self._factory.runtime.cri
        stoppers = [threading.Thread(target=self._stop_container, args=(cri, pod, name, cid, grace_s))
                    for name, cid in pod.running.container_ids.items()]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        with contextlib.suppress(ValueError):  # removed by the test already
            self._factory.remove(pod.running)
        self._write_status(pod, terminal_status(pod), ready=False)
        stored = self._apiserver.store.get_pod(*pod.key)
        if stored is not None and stored["metadata"]["uid"] == pod.running.uid:
            with contextlib.suppress(KeyError, ApiError):
                self._apiserver.store.finish_deletion(*pod.key)
        pod.finished = True

    def _stop_sooner(self, pod: KubeletPod, grace_s: int) -> None:
        """Stop every container again with the shortened grace period, side by side as the kubelet kills them; the
        stop already under way (`_kill`) returns when they exit and carries on from there. The runtime may have
        removed them meanwhile."""
        self.stopped_sooner.append((pod.key, grace_s))
        cri = self._factory.runtime.cri

        def stop(container_id: str) -> None:
            with contextlib.suppress(CRIError):
                cri.stop_container(container_id, grace_s)

        stoppers = [threading.Thread(target=stop, args=(cid,), daemon=True) for cid in pod.running.container_ids.values()]
        for stopper in stoppers:
            stopper.start()

    @staticmethod
    def _stop_container(cri: Any, pod: KubeletPod, name: str, container_id: str, grace_s: int) -> None:
        try:
            cri.stop_container(container_id, grace_s)
            pod.exit_codes[name] = cri.container_status(container_id).exit_code
        except CRIError:
            pod.exit_codes[name] = 137

    def _write_status(self, pod: KubeletPod, own: dict[str, Any], *, ready: bool) -> None:
        stored = self._apiserver.store.get_pod(*pod.key)
        if stored is None or stored["metadata"]["uid"] != pod.running.uid:
            return
        with contextlib.suppress(ApiError):  # gone meanwhile
            self._apiserver.store.set_pod_status(*pod.key, kubelet_view(stored, own, ready))

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Wait until every pod it is terminating has been reported and deleted."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not any(p.terminating and not p.finished for p in self._pods.values()):
                    return
            time.sleep(POLL_S)
        raise AssertionError(f"the kubelet stand-in still terminating pods after {timeout_s:g} s")

    def pods(self) -> Sequence[KubeletPod]:
        with self._lock:
            return list(self._pods.values())

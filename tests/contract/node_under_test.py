"""The node the contract tests run on: the stand-ins (make test) or a real cluster (make test-cluster).

The contract tests (test_*_contract.py beside this file) hold what evictd must do to pods, events and the Node
in a cluster, whoever runs the pods. They see the node only through `NodeUnderTest`, so the same test code
runs against:

* `StandInNode`: the project's test API server (tests/kube) with a real containerd (tests/cri) and the
  kubelet stand-in (tests/e2e/kubelet_standin.py), which does what the real kubelet v1.36.2 did in these
  tests. This is what `make test` and CI run.
* `RealNode`: a real kube-apiserver, kubelet, etcd and containerd started by tests/cluster/real_cluster.py
  (``EVICTD_CLUSTER=real``, `make test-cluster`); evictd runs with the least-privilege identity of
  deploy/kubernetes and a token bound to a pod on the node, as a DaemonSet pod gets.

Where the two differ, the stand-in is wrong: fix it, not the test.

Everything the tests read comes through the Kubernetes API with the real `kubernetes` client as a cluster
admin: the pod objects (every version of them, from a watch started before the first pod), events, the Node.
"""

from __future__ import annotations

import abc
import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evictd_process import EvictdProcess

from polling import wait_until

NAMESPACE = "contract"
MiB = 1 << 20
# A container whose shell exits 0 on SIGTERM (it is PID 1, which ignores signals it has no handler for).
EXITS_ON_SIGTERM = 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done'
# A container that ignores SIGTERM: only the SIGKILL at the end of its grace period stops it.
IGNORES_SIGTERM = 'trap "" TERM; echo ready; while true; do sleep 1; done'


def memory_hog(mib: int, *, on_sigterm: str = "exit 0", steps: int = 1, step_s: float = 0.0) -> str:
    """A container holding `mib` MiB of anonymous memory (dd buffers from /dev/zero, blocked on pipes), taken in
    `steps` equal parts `step_s` apart (a gradual rise, which the kubelet's per-pod stats can follow)."""
    trap = f'trap "{on_sigterm}" TERM' if on_sigterm else 'trap "" TERM'
    part = max(mib // steps, 1)
    grab = f"(dd if=/dev/zero bs={part}M count=1 2>/dev/null | sleep 2147483647) &"
    take = grab if steps == 1 else f"for i in $(seq {steps}); do {grab} sleep {step_s:g}; done;"
    return f"{trap}; echo ready; {take} while true; do sleep 1; done"


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Version:
    """One version of a pod as a watch delivered it, with the (monotonic) time it arrived."""

    at: float
    type: str  # ADDED, MODIFIED, DELETED
    object: dict[str, Any]

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.object.get("status") or {})

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.object.get("metadata") or {})

    def condition(self, kind: str) -> dict[str, Any] | None:
        return next((c for c in self.status.get("conditions") or [] if c.get("type") == kind), None)


class PodRecorder:
    """Every version of every pod of the contract namespace, from a watch of the real client (admin)."""

    def __init__(self, core: Any) -> None:
        from kubernetes import watch

        self._core = core
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        self.versions: list[Version] = []
        self._stop = threading.Event()
        listed = core.list_namespaced_pod(NAMESPACE)
        self._rv = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, daemon=True, name="pod-recorder")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self._watch.stream(self._core.list_namespaced_pod, NAMESPACE,
                                                resource_version=self._rv, timeout_seconds=30,
                                                allow_watch_bookmarks=False):
                    raw = event["raw_object"]
                    self._rv = raw["metadata"]["resourceVersion"]
                    with self._lock:
                        self.versions.append(Version(time.monotonic(), event["type"], raw))
                    if self._stop.is_set():
                        return
            except Exception:  # a dropped watch resumes from the last version seen
                time.sleep(0.2)

    def of(self, pod: PodRef) -> list[Version]:
        with self._lock:
            return [v for v in self.versions if v.metadata.get("uid") == pod.uid]

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()


class NodeUnderTest(abc.ABC):
    """A node with pods, an API to look at it through, and `evictd run` beside its kubelet."""

    name: str

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.recorder = PodRecorder(self.core)
        self.daemons: list[EvictdProcess] = []

    # -- what each backend provides --------------------------------------------------------------------------

    @abc.abstractmethod
    def run_pod(self, name: str, script: str, *, requests: Mapping[str, str] | None = None,
                finalizers: Sequence[str] = ()) -> PodRef:
        """Run a one-container busybox pod on this node (burstable when it has requests); return once it runs."""

    @abc.abstractmethod
    def start_evictd(self, kubelet: str, evictd: str = "") -> EvictdProcess:
        """Start `evictd run` on this node with 1 s housekeeping and the given configuration lines."""

    @abc.abstractmethod
    def pods_cgroup(self) -> Path:
        """The v1 memory cgroup of the node's pods (kubepods), whose limit is the node's allocatable memory."""

    def close(self) -> None:
        self.recorder.stop()
        for daemon in self.daemons:
            daemon.kill()
            daemon.stop()

    # -- reading the cluster through the API -----------------------------------------------------------------

    def pod(self, ref: PodRef) -> dict[str, Any] | None:
        """The pod object now (None once it is gone or replaced by a same-named one)."""
        from kubernetes.client.exceptions import ApiException

        try:
            raw = self.core.read_namespaced_pod(ref.name, ref.namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        found: dict[str, Any] = json.loads(raw.data)
        return found if found["metadata"]["uid"] == ref.uid else None

    def versions(self, ref: PodRef) -> list[Version]:
        return self.recorder.of(ref)

    def wait_gone(self, ref: PodRef, timeout_s: float = 60.0) -> None:
        """Until the pod is removed and the recorder's watch has seen its DELETED (which can come after a GET
        already answers 404), so `versions` ends with the removal."""
        wait_until(lambda: self.pod(ref) is None, timeout_s, f"pod {ref.name} to be removed")
        wait_until(lambda: any(v.type == "DELETED" for v in self.versions(ref)), 10,
                   f"the watch to see pod {ref.name} deleted")

    def remove_finalizers(self, ref: PodRef) -> None:
        """What the finalizer's controller (e.g. the Job controller) does once it has seen the pod end."""
        self.core.patch_namespaced_pod(ref.name, ref.namespace, [{"op": "remove", "path": "/metadata/finalizers"}])

    def events(self, ref: PodRef, reason: str) -> list[dict[str, Any]]:
        listed = self.core.list_namespaced_event(ref.namespace, _preload_content=False)
        items = json.loads(listed.data)["items"]
        return [e for e in items if e.get("involvedObject", {}).get("uid") == ref.uid and e.get("reason") == reason]

    def node(self) -> dict[str, Any]:
        raw = self.core.read_node(self.name, _preload_content=False)
        found: dict[str, Any] = json.loads(raw.data)
        return found

    def condition(self, kind: str) -> dict[str, Any] | None:
        return next((c for c in self.node().get("status", {}).get("conditions") or [] if c["type"] == kind), None)

    def taint_keys(self) -> list[str]:
        return [f"{t['key']}:{t['effect']}" for t in self.node().get("spec", {}).get("taints") or []]

    def allocatable_available_bytes(self) -> int:
        """What evictd computes for allocatableMemory.available now: the pods cgroup's limit minus its working set."""
        cgroup = self.pods_cgroup()
        limit = int((cgroup / "memory.limit_in_bytes").read_text())
        usage = int((cgroup / "memory.usage_in_bytes").read_text())
        stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
        return limit - max(usage - int(stat["total_inactive_file"]), 0)

    def settled_allocatable_available_bytes(self) -> int:
        """`allocatable_available_bytes` once the node's pods are no longer going (no pod of the namespace being
        deleted) and the figure held within 16 MiB for 2 s: a threshold placed a margin under it is crossed by the
        test's hog, not missed because an earlier test's pod freed its memory afterwards. (A threshold 120 MiB under
        the figure was not crossed by the Job's 200 MiB hog in 2 of 2 whole `make test-cluster` runs beside an arena
        guest, and was when the module ran alone; memory freed after the reading is the likely cause, not shown.)"""
        def none_going() -> bool:
            listed = json.loads(self.core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)["items"]
            return not [p for p in listed if p["metadata"].get("deletionTimestamp")]

        wait_until(none_going, 120, "the earlier tests' pods to go")
        readings = [self.allocatable_available_bytes()]

        def held() -> bool:
            readings.append(self.allocatable_available_bytes())
            return len(readings) >= 5 and max(readings[-5:]) - min(readings[-5:]) <= 16 * MiB

        wait_until(held, 60, "the pods cgroup's working set to settle", interval_s=0.5)
        return readings[-1]


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"

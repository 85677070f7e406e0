"""One node for the end-to-end tests: real containerd pods that are also Pod objects in the test API server.

Glue only, over the existing harnesses (tests/cri/containerd_harness.py through the ``pods`` and
``containerd_on_ext4`` fixtures, tests/kube/apiserver.py through ``apiserver``, tests/daemon/evictd_process.py
for `evictd run`): what a scheduler and a kubelet would have done so that evictd sees a consistent node.

* `ClusterNode.run_pod` stores a Pod object bound to the node (``spec.nodeName``, containers with their
  requests, Pending), starts the pod in containerd with the same uid, name and namespace, then hands it to
  the node's kubelet stand-in (kubelet_standin.py), which reports it Running and from then on does what the
  real kubelet does with it: its own status over anyone else's phase, reason and message, and on deletion
  the kill with the pod's grace period (a DELETE shortening it while the pod terminates is honoured), the
  terminal status and the final ``DELETE`` (grace 0, UID precondition); `run_pod`'s `grace_period_s` is the
  pod's ``terminationGracePeriodSeconds`` (30 unless given);
  The sandbox carries what the kubelet puts on it: the pod's annotations and ``kubernetes.io/config.source: api``;
* `ClusterNode.run_static_pod` runs a static pod as the kubelet runs one from a manifest file: its sandbox says
  ``kubernetes.io/config.source: file``, and the API holds only its mirror pod (another UID, the
  ``kubernetes.io/config.mirror`` annotation);
* `ClusterNode.terminate` is a deletion by someone else (grace 0): the stand-in kubelet then stops the pod;
* `ClusterNode.start_evictd` runs `evictd run` against both, with JSON logs, its journal in a state folder;
  `journal`, `stopped_on_the_node` and `executed_deletes_by_uid` read what it did;
* `pods_memory_limit` limits the harness's pods cgroup (``<cgroup root>/kubepods``) as a kubelet limits
  it to the node's allocatable memory, and lifts the limit again afterwards (the session containerd's cgroup
  root outlives the test).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apiserver import ApiServer
from containerd_harness import Containerd, RunningPod, busybox_container
from cri_fixtures import PodFactory
from evictd_process import EvictdProcess
from harness_cri import ContainerSpec
from kube_objects import node_manifest
from kube_status import ApiError
from kubelet_standin import KubeletStandIn

from evictd.core.errors import CRIError
from evictd.core.pods import API_SERVER_SOURCE, CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION
from evictd.core.runtime import ContainerState, SandboxState
from polling import wait_until

CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")
UNLIMITED = "-1"
MiB = 1 << 20

# A container whose shell handles SIGTERM (it is PID 1, which ignores signals it has no handler for).
SLEEPER_SCRIPT = 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done'
# A container that ignores SIGTERM: only the SIGKILL at the end of its grace period stops it.
IGNORES_SIGTERM = 'trap "" TERM; echo ready; while true; do sleep 1; done'
TRIGGER_MOUNT = "/trigger"
IMAGE = "evictd.test/busybox:1"
CONFIG_HASH_ANNOTATION = "kubernetes.io/config.hash"
FILE_SOURCE = "file"


def hog_script(mib: int, *, triggered: bool = False) -> str:
    """A container holding `mib` MiB of anonymous memory: dd's buffer, filled from /dev/zero, blocked on a pipe.

    busybox dd allocates one buffer of ``bs`` bytes and reads /dev/zero into it (every page is written, so
    charged to the container's memory cgroup), then blocks writing it to a pipe nobody reads. With
    `triggered`, it starts only once ``/trigger/go`` exists (see `Trigger`).
    """
    wait = f"while [ ! -e {TRIGGER_MOUNT}/go ]; do sleep 0.1; done; " if triggered else ""
    return (f'trap "exit 0" TERM; echo ready; {wait}'
            f"(dd if=/dev/zero bs={mib}M count=1 2>/dev/null | sleep 2147483647) & wait")


@dataclass(frozen=True)
class Trigger:
    """A host folder mounted at /trigger in a container: `pull()` makes a `triggered` hog start allocating."""

    folder: Path

    def mount(self) -> dict[str, Any]:
        """Container options mounting the folder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return {"mounts": [(TRIGGER_MOUNT, str(self.folder), False)]}

    def pull(self) -> None:
        (self.folder / "go").write_text("go\n")


@dataclass(frozen=True)
class Container:
    """A container of a pod: its script, and the requests its Pod object declares."""

    name: str
    script: str = SLEEPER_SCRIPT
    requests: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def spec(self) -> ContainerSpec:
        return busybox_container(self.name, self.script, **self.options)


def pod_object(name: str, namespace: str, uid: str, node_name: str, containers: Sequence[Container], *,
               priority: int = 0, priority_class: str = "", finalizers: Sequence[str] = (),
               annotations: Mapping[str, str] | None = None, grace_period_s: int = 30) -> dict[str, Any]:
    """The Pod object of a pod the scheduler bound to `node_name` and its kubelet is starting (Pending);
    `grace_period_s` is its ``terminationGracePeriodSeconds`` (the API server's default, 30, unless given)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "labels": {"app": name}}
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node_name,
            "priority": priority,
            **({"priorityClassName": priority_class} if priority_class else {}),
            "terminationGracePeriodSeconds": grace_period_s,
            "containers": [
                {"name": c.name, "image": IMAGE,
                 "resources": {"requests": dict(c.requests)} if c.requests else {}}
                for c in containers
            ],
        },
        "status": {"phase": "Pending"},
    }


def counter(daemon: EvictdProcess, name: str, **labels: str) -> float:
    """A labelled counter of the daemon's /metrics, 0 while no sample of those labels exists yet."""
    try:
        return daemon.metric(name, **labels)
    except AssertionError:  # prometheus_client shows a labelled child only once it has been used
        return 0.0


@dataclass
class ClusterNode:
    """A node as containerd and the API server both see it; `start_evictd` runs the daemon on it."""

    runtime: Containerd
    factory: PodFactory
    apiserver: ApiServer
    folder: Path
    name: str = field(default_factory=lambda: f"e2e-node-{uuid.uuid4().hex[:6]}")
    daemons: list[EvictdProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.apiserver.store.create_node(node_manifest(self.name))
        self.kubelet_root.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.kubelet = KubeletStandIn(self.apiserver, self.factory, self.name).start()

    @property
    def kubelet_root(self) -> Path:
        return self.folder / "kubelet"

    @property
    def state_dir(self) -> Path:
        return self.folder / "evictd-state"

    @property
    def journal_path(self) -> Path:
        return self.state_dir / "evictions.json"

    @property
    def pods_cgroup(self) -> Path:
        return CGROUP_MEMORY / self.runtime.cgroup_root.strip("/") / "kubepods"

    def run_pod(self, name: str, containers: Sequence[Container], *, namespace: str = "e2e", priority: int = 0,
                priority_class: str = "", uid: str | None = None, finalizers: Sequence[str] = (),
                grace_period_s: int = 30) -> RunningPod:
        """Bind a Pod object to this node, start it in containerd (burstable cgroup), then report it Running.

        The order of a real cluster: the object exists before its containers run, so evictd never sees the
        pod's usage without the pod. The sandbox is annotated as the kubelet annotates a pod from the API.
        """
        uid = uid or str(uuid.uuid4())
        self.apiserver.store.create_pod(pod_object(name, namespace, uid, self.name, containers, priority=priority,
                                                   priority_class=priority_class, finalizers=finalizers,
                                                   grace_period_s=grace_period_s))
        pod = self.factory.run(name, [c.spec() for c in containers], namespace=namespace, qos="burstable", uid=uid,
                               annotations={CONFIG_SOURCE_ANNOTATION: API_SERVER_SOURCE})
        self.kubelet.adopt(pod, IMAGE)
        return pod

    def run_static_pod(self, name: str, containers: Sequence[Container], *, namespace: str = "e2e") -> RunningPod:
        """Run a pod as the kubelet runs one from a manifest file, and store its mirror pod in the API.

        On the node the sandbox says ``config.source: file`` (the kubelet's annotation, which no pod from the
        API can carry: the kubelet overwrites it with ``api``); the API holds a mirror pod of another UID. The
        kubelet stand-in does not manage it (it only syncs pods from the API).
        """
        uid = str(uuid.uuid4())  # the kubelet's UID of a static pod: a hash of its manifest
        pod = self.factory.run(name, [c.spec() for c in containers], namespace=namespace, qos="burstable", uid=uid,
                               annotations={CONFIG_SOURCE_ANNOTATION: FILE_SOURCE, CONFIG_HASH_ANNOTATION: uid})
        mirror = pod_object(name, namespace, str(uuid.uuid4()), self.name, containers,
                            annotations={CONFIG_SOURCE_ANNOTATION: FILE_SOURCE, CONFIG_HASH_ANNOTATION: uid,
                                         CONFIG_MIRROR_ANNOTATION: uid})
        self.apiserver.store.create_pod(mirror)
        return pod

    def terminate(self, pod: RunningPod) -> None:
        """Someone deletes the pod at once (grace 0, e.g. its controller): the kubelet stand-in stops it."""
        with contextlib.suppress(ApiError):  # already gone from the API
            self.apiserver.store.delete_pod(pod.namespace, pod.name, grace_period_s=0)
        self.wait_gone(pod)

    def wait_gone(self, pod: RunningPod, timeout_s: float = 30.0) -> None:
        """Wait until the kubelet stand-in has stopped the pod and its object is gone from the API."""
        wait_until(lambda: self.pod_object(pod) is None, timeout_s, f"pod {pod.namespace}/{pod.name} to be removed")

    def pod_object(self, pod: RunningPod) -> dict[str, Any] | None:
        """The Pod object of `pod` (None once it is gone or replaced by a same-named one)."""
        stored = self.apiserver.store.get_pod(pod.namespace, pod.name)
        return stored if stored is not None and stored["metadata"]["uid"] == pod.uid else None

    def start_evictd(self, kubelet: str, evictd: str = "", *, folder: str = "evictd", kubeconfig: Path | None = None,
                     env: Mapping[str, str] | None = None) -> EvictdProcess:
        """Run `evictd run` on this node: API via kubeconfig (the test server's unless given), CRI, the
        harness's cgroup root, 1 s housekeeping; `env` adds environment variables (e.g. its own pod UID)."""
        work = self.folder / folder
        work.mkdir(parents=True, exist_ok=True)
        daemon = EvictdProcess(
            work,
            env=dict(env or {}),
            kubelet="enforceNodeAllocatable: []\n" + kubelet,
            evictd=(
                f"nodeName: {self.name}\n"
                f"kubeconfig: {kubeconfig or self.apiserver.kubeconfig_path}\n"
                f"containerRuntimeEndpoint: {self.runtime.endpoint}\n"
                f"cgroupRoot: {self.runtime.cgroup_root}\n"
                f"kubeletRootDir: {self.kubelet_root}\n"
                f"podLogsDir: {self.runtime.logs_dir}\n"
                f"stateDir: {self.state_dir}\n"
                "housekeepingInterval: 1s\n"
                "psiWakeups: false\n"
                "shutdownTimeout: 5s\n" + evictd
            ),
        )
        self.daemons.append(daemon)
        return daemon

    def stop_all(self) -> None:
        """Kill every daemon still running and stop the kubelet stand-in; print their log events and the
        stand-in's errors (shown by pytest when the test failed)."""
        self.kubelet.stop()
        for error in self.kubelet.errors:
            print(f"kubelet stand-in: {error}")
        for number, daemon in enumerate(self.daemons):
            daemon.kill()
            daemon.stop()
            print(f"--- evictd #{number} log events ---")
            for event in daemon.events:
                print(json.dumps({k: v for k, v in event.items() if k != "_received"}))

    # -- reading the cluster ---------------------------------------------------------------------------------

    def node_object(self) -> dict[str, Any]:
        node = self.apiserver.store.get_node(self.name)
        assert node is not None
        return node

    def condition(self, condition_type: str) -> dict[str, Any] | None:
        conditions = self.node_object().get("status", {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == condition_type), None)

    def taint_keys(self) -> list[str]:
        return [f"{t['key']}:{t['effect']}" for t in self.node_object().get("spec", {}).get("taints") or []]

    def kubectl_json(self, *args: str) -> Any:
        done = self.apiserver.kubectl(*args, "-o", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def requests_to(self, method: str, pod: RunningPod, subresource: str = "") -> list[Any]:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}" + (f"/{subresource}" if subresource else "")
        return self.apiserver.request_log.matching(method, path)

    def deletes(self) -> list[Any]:
        """Every DELETE of a pod received so far."""
        return self.apiserver.request_log.matching("DELETE", r"/api/v1/namespaces/[^/]+/pods/[^/]+")

    def pod_events(self, pod: RunningPod, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.apiserver.store.events(pod.namespace)
                if e.get("involvedObject", {}).get("uid") == pod.uid and e.get("reason") == reason]

    def node_events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.apiserver.store.events()
                if e.get("involvedObject", {}).get("kind") == "Node"
                and e.get("involvedObject", {}).get("name") == self.name and e.get("reason") == reason]


def journal(node: ClusterNode) -> dict[str, dict[str, Any]]:
    """The eviction journal in evictd's stateDir, by pod UID."""
    if not node.journal_path.exists():
        return {}
    return {entry["uid"]: entry for entry in json.loads(node.journal_path.read_text())["evictions"]}


def stopped_on_the_node(node: ClusterNode, pod: RunningPod) -> bool:
    """The pod's containers exited and its sandbox is not ready (or all are gone), as the runtime reports them."""
    try:
        containers = [node.runtime.cri.container_status(cid).state for cid in pod.container_ids.values()]
        return (all(state is ContainerState.EXITED for state in containers)
                and node.runtime.sandbox_state(pod.sandbox_id) is SandboxState.NOTREADY)
    except CRIError as exc:  # removed by the kubelet stand-in once the pod was deleted
        if exc.code != "NOT_FOUND":
            raise
        return True


def executed_deletes_by_uid(node: ClusterNode) -> dict[str, int]:
    """DELETEs the server carried out (2xx), counted per precondition UID."""
    counts: dict[str, int] = {}
    for request in node.deletes():
        if 200 <= request.status < 300:
            uid = request.body["preconditions"]["uid"]
            counts[uid] = counts.get(uid, 0) + 1
    return counts


@contextlib.contextmanager
def pods_memory_limit(node: ClusterNode, limit_bytes: int) -> Iterator[Path]:
    """Limit the pods cgroup to `limit_bytes` (created if no pod made it yet); lift the limit on exit."""
    cgroup = node.pods_cgroup
    cgroup.mkdir(parents=True, exist_ok=True)
    (cgroup / "memory.limit_in_bytes").write_text(f"{limit_bytes}\n")
    try:
        yield cgroup
    finally:
        with contextlib.suppress(OSError):
            (cgroup / "memory.limit_in_bytes").write_text(f"{UNLIMITED}\n")


def working_set_bytes(cgroup: Path) -> int:
    """usage - total_inactive_file of a v1 memory cgroup (what evictd and the kubelet call working set)."""
    usage = int((cgroup / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    return max(usage - int(stat["total_inactive_file"]), 0)

"""evictd as shipped: the image built from a fresh clone, run as deploy/kubernetes's DaemonSet on the real cluster.

Runs only in `make test-cluster` (the real kube-apiserver, kubelet, kube-controller-manager with its DaemonSet
controller, kube-scheduler v1.36.2; tests/cluster/real_cluster.py). The tests run in order on one DaemonSet:

* `make image` in a fresh clone of HEAD (tests/image_build.py), the archive imported into the node's containerd
  with `ctr images import`; `kubectl apply -k` of an overlay of deploy/kubernetes that changes the image
  reference (`images:`) and what is particular to this test node (below);
* the pod is scheduled on the node by the default scheduler and becomes Ready by its /healthz probe;
* it authenticates with its pod-bound token (the API server names its node and pod), and the admission policy
  refuses that token a write to another node;
* a real memory trial: the DaemonSet evicts the hog, and a standalone `evictd run` beside it in dry-run
  (the configuration of tests/cluster/test_handover_real.py) decides the same pod with the same message;
* `kubectl logs` shows its JSON lines; /metrics answers on the pod's port named `metrics` (the PodMonitor's);
* a rolling update to a new image tag: the new pod takes the stateDir lock after the old one, and a hog
  filling memory during the update is evicted exactly once;
* deleting the DaemonSet while evictd holds its pressure condition and taint leaves the condition Unknown and
  the taint gone.

What the overlay changes besides the image, because this node is not laid out as a standard one: the
DaemonSet's hostPath folders (the kubelet root, pod logs, containerd's socket folder and the stateDir are the
cluster's own temporary folders; the paths inside the container stay the shipped ones) and the ConfigMap's
node-specific lines (`cgroupDriver: cgroupfs` and `cgroupRoot` as this kubelet runs; the trial's threshold;
`dryRun: false`, 1 s housekeeping and no PSI wake-ups as the standalone run). Everything else is the shipped
manifests as they are.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from backends import RealNode
from node_under_test import PodRef, memory_hog, new_name, wait_until
from real_cluster import DEPLOY_DIR, EVICTD_NAMESPACE, RealCluster, write_kubeconfig
from side_by_side import HOG_MIB, kubelet_not_evicting, thresholds

from evictd.state_dir import LOCK_FILE
from image_build import ImageBuild, shared_image_build

pytestmark = pytest.mark.real_cluster

NAME = "evictd"
SELECTOR = "app.kubernetes.io/name=evictd"
ROLLED_TAG = "rolled"
OTHER_NODE = "evictd-daemonset-other-node"
POD_READY_TIMEOUT_S = 180.0
QUIET = 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done'
MESSAGE_SPLIT = "available: "  # the figures after it differ from one moment to the next


@dataclass
class Deployed:
    cluster: RealCluster
    node: RealNode
    image: ImageBuild
    overlay: Path
    state_dir: Path


def shipped_config_with(base: Path, cluster: RealCluster) -> str:
    """The ConfigMap's config.yaml (of ``base``) with this node's lines and the trial's threshold."""
    configmap = yaml.safe_load((base / "configmap.yaml").read_text())
    kubelet, evictd = list(yaml.safe_load_all(configmap["data"]["config.yaml"]))
    for key in [k for k in kubelet if k.startswith("eviction")]:
        del kubelet[key]
    kubelet.update(yaml.safe_load(thresholds()))
    kubelet["cgroupDriver"] = "cgroupfs"
    evictd.update({"dryRun": False, "cgroupRoot": cluster.cgroup_root, "housekeepingInterval": "1s",
                   "psiWakeups": False, "shutdownTimeout": "5s"})
    return yaml.safe_dump_all([kubelet, evictd], sort_keys=False)


def write_overlay(folder: Path, base: Path, cluster: RealCluster, state_dir: Path, tag: str) -> Path:
    """An overlay of ``base`` (deploy/kubernetes of the clone the image was built from): the image tag, this
    node's folders and configuration."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(shipped_config_with(base, cluster))
    host_paths = {"kubelet": cluster.kubelet_root, "pod-logs": cluster.pod_logs_dir,
                  "containerd": cluster.containerd.base, "state": state_dir}
    patch = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": NAME, "namespace": EVICTD_NAMESPACE},
             "spec": {"template": {"spec": {"volumes": [{"name": name, "hostPath": {"path": str(path)}}
                                                        for name, path in host_paths.items()]}}}}
    (folder / "node-layout.yaml").write_text(yaml.safe_dump(patch, sort_keys=False))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(base, folder)],  # kustomize takes relative paths only
        "images": [{"name": "ghcr.io/evictd/evictd", "newTag": tag}],
        "configMapGenerator": [{"name": "evictd-config", "namespace": EVICTD_NAMESPACE, "behavior": "replace",
                                "files": ["config.yaml"]}],
        "generatorOptions": {"disableNameSuffixHash": True},
        "patches": [{"path": "node-layout.yaml"}],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return folder


def evictd_pods(cluster: RealCluster) -> list[dict[str, Any]]:
    listed = cluster.api.request("GET", f"/api/v1/namespaces/{EVICTD_NAMESPACE}/pods?labelSelector={SELECTOR}")
    return [p for p in listed.get("items", []) if not p["metadata"].get("deletionTimestamp")
            and (p.get("metadata", {}).get("ownerReferences") or [{}])[0].get("kind") == "DaemonSet"]


def ready_pod(cluster: RealCluster, image: str) -> dict[str, Any] | None:
    for pod in evictd_pods(cluster):
        conditions = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
        if conditions.get("Ready") == "True" and pod["spec"]["containers"][0]["image"] == image:
            return pod
    return None


def wait_ready(cluster: RealCluster, image: str) -> dict[str, Any]:
    pod = wait_until(lambda: ready_pod(cluster, image), POD_READY_TIMEOUT_S, f"an evictd pod of {image} to be Ready")
    assert pod is not None
    return pod


def pod_logs(cluster: RealCluster, pod: dict[str, Any]) -> list[dict[str, Any]]:
    done = cluster.kubectl("-n", EVICTD_NAMESPACE, "logs", pod["metadata"]["name"])
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def daemonset_event(cluster: RealCluster, evictd_pod: dict[str, Any], name: str, timeout_s: float = 60.0,
                    **fields: Any) -> dict[str, Any]:
    """The first log line ``name`` (with ``fields``) of the evictd pod, read through `kubectl logs`."""

    def found() -> dict[str, Any] | None:
        return next((e for e in pod_logs(cluster, evictd_pod) if e.get("event") == name
                     and all(e.get(k) == v for k, v in fields.items())), None)

    event = wait_until(found, timeout_s, f"{name!r} in the evictd pod's log")
    assert event is not None
    return event


def lock_holder_pod_uid(state_dir: Path) -> str:
    """The UID of the pod whose process holds the stateDir lock (the lock file holds its host PID)."""
    pid = int((state_dir / LOCK_FILE).read_text().strip())
    cgroups = Path(f"/proc/{pid}/cgroup").read_text()
    assert "evictd" in Path(f"/proc/{pid}/cmdline").read_text()
    return cgroups.split("/pod", 1)[1].split("/", 1)[0].split("\n", 1)[0]


def evictd_deletes(cluster: RealCluster, ref: PodRef) -> list[dict[str, Any]]:
    """The audited DELETEs of the pod by evictd's ServiceAccount."""
    found = []
    for line in cluster.audit_log.read_text().splitlines():
        entry = json.loads(line)
        target = entry.get("objectRef") or {}
        if (entry.get("verb") == "delete" and target.get("resource") == "pods" and target.get("subresource") is None
                and target.get("name") == ref.name and target.get("namespace") == ref.namespace
                and entry["user"]["username"] == f"system:serviceaccount:{EVICTD_NAMESPACE}:evictd"
                and entry.get("stage") == "ResponseComplete"):
            found.append(entry)
    return found


@pytest.fixture(scope="module")
def deployed(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    image = shared_image_build(tmp_path_factory)
    runtime = real_cluster.containerd
    runtime.import_archive(image.archive)
    repository = image.reference.rsplit(":", 1)[0]
    runtime.ctr("images", "tag", image.reference, f"{repository}:{ROLLED_TAG}")
    state_dir = real_cluster.base / "evictd-state"
    state_dir.mkdir()
    # The pods cgroup made small as for the standalone trials (side_by_side.py); the kubelet evicts nothing.
    real_cluster.restart_kubelet(kubelet_not_evicting())
    node = RealNode(real_cluster, tmp_path_factory.mktemp("node"))
    overlay = write_overlay(tmp_path_factory.mktemp("overlay"), image.clone / "deploy" / "kubernetes", real_cluster,
                            state_dir, image.reference.rsplit(":", 1)[1])
    try:
        real_cluster.kubectl("apply", "-k", str(overlay))
        yield Deployed(real_cluster, node, image, overlay, state_dir)
    finally:
        # Only what the harness did not apply itself: the namespace, identity and policy stay for other tests.
        real_cluster.kubectl("-n", EVICTD_NAMESPACE, "delete", "daemonset/evictd", "configmap/evictd-config",
                             "networkpolicy/evictd-metrics", "--ignore-not-found", "--wait=true", check=False)
        node.close()
        real_cluster.restart_kubelet()


def test_pod_is_scheduled_on_the_node_and_ready_by_its_probe(deployed: Deployed) -> None:
    cluster = deployed.cluster
    pod = wait_ready(cluster, deployed.image.reference)
    assert pod["spec"]["nodeName"] == cluster.node_name
    # Placed by the default scheduler (the DaemonSet controller gives its pods node affinity, no nodeName).
    scheduled = cluster.api.request("GET", f"/api/v1/namespaces/{EVICTD_NAMESPACE}/events?fieldSelector="
                                    f"involvedObject.uid={pod['metadata']['uid']},reason=Scheduled")
    assert [e["source"].get("component") or e.get("reportingComponent") for e in scheduled["items"]] \
        == ["default-scheduler"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [cluster.node_name]
    # Ready through the readiness probe on /healthz: the container is running and evictd is cycling.
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"] is True and "running" in status["state"]
    # At the priorities its command gives it (hostPID: the process is this host's): nice -5, best-effort 0.
    pid = int((deployed.state_dir / LOCK_FILE).read_text().strip())
    assert int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]) == -5
    assert subprocess.run(["ionice", "-p", str(pid)], capture_output=True, text=True, check=True).stdout.strip() \
        == "best-effort: prio 0"
    assert cluster.pod_network is not None
    assert pod["status"]["podIP"].startswith(cluster.pod_network.subnet.rsplit(".", 1)[0])


def test_it_authenticates_with_its_pod_bound_token_and_the_policy_holds(deployed: Deployed, tmp_path: Path) -> None:
    cluster = deployed.cluster
    pod = wait_ready(cluster, deployed.image.reference)
    uid = pod["metadata"]["uid"]
    # The token the kubelet projected into the pod (TokenRequest bound to the pod), as the container reads it.
    [token_file] = (cluster.kubelet_root / "pods" / uid / "volumes" / "kubernetes.io~projected").glob(
        "kube-api-access-*/token")
    kubeconfig = write_kubeconfig(tmp_path / "pod.kubeconfig", cluster.api_url, cluster.ca_path,
                                  {"token": token_file.read_text()})
    whoami = json.loads(cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)
    user = whoami["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{EVICTD_NAMESPACE}:evictd"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [cluster.node_name]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == [pod["metadata"]["name"]]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [uid]
    # The admission policy: its own node may be tainted (server-side dry run), another node may not.
    cluster.create_second_node(OTHER_NODE)
    own = cluster.kubectl("taint", "nodes", cluster.node_name, "evictd.io/memory-pressure:NoSchedule",
                          "--dry-run=server", kubeconfig=kubeconfig, check=False)
    assert own.returncode == 0, own.stderr
    other = cluster.kubectl("taint", "nodes", OTHER_NODE, "evictd.io/memory-pressure:NoSchedule",
                            "--dry-run=server", kubeconfig=kubeconfig, check=False)
    assert other.returncode != 0
    assert f"evictd on node {cluster.node_name} may only patch its own Node, not {OTHER_NODE}" in other.stderr
    cluster.api.request("DELETE", f"/api/v1/nodes/{OTHER_NODE}")


def test_memory_trial_evicts_the_hog_as_the_standalone_run_decides(deployed: Deployed) -> None:
    cluster, node = deployed.cluster, deployed.node
    pod = wait_ready(cluster, deployed.image.reference)
    # Beside the DaemonSet's acting evictd, an observer is `evictd run --dry-run`: a `dryRun: true` evictd with an
    # API holds the node Lease (the evictd.io/mode label may make it act), so this one would stand by.
    standalone = node.start_evictd(thresholds(), "dryRun: true\n", args=("--dry-run",))
    standalone.wait_event("evictd started", timeout=30)
    quiet = node.run_pod(new_name("quiet"), QUIET, requests={"memory": "64Mi"})
    hog = node.run_pod(new_name("hog"), memory_hog(HOG_MIB, steps=9, step_s=2.5), requests={"memory": "32Mi"})
    evicting = daemonset_event(cluster, pod, "evicting pod", timeout_s=90, pod=f"{hog.namespace}/{hog.name}")
    would = standalone.wait_event("would evict pod", timeout=60, pod=f"{hog.namespace}/{hog.name}")
    assert evicting["signal"] == would["signal"] == "allocatableMemory.available"
    assert evicting["message"].split(MESSAGE_SPLIT)[0] == would["message"].split(MESSAGE_SPLIT)[0]
    node.wait_gone(hog)
    [event] = node.events(hog, "Evicted")
    assert (event["source"]["component"], event["message"]) == ("evictd", evicting["message"])
    assert len(evictd_deletes(cluster, hog)) == 1
    assert node.pod(quiet) is not None and not node.events(quiet, "Evicted")
    assert standalone.stop() == 0
    node.core.delete_namespaced_pod(quiet.name, quiet.namespace, grace_period_seconds=0)
    node.wait_gone(quiet)


def test_kubectl_logs_shows_json_lines(deployed: Deployed) -> None:
    cluster = deployed.cluster
    wait_ready(cluster, deployed.image.reference)
    done = cluster.kubectl("-n", EVICTD_NAMESPACE, "logs", "daemonset/evictd")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines
    events = [json.loads(line) for line in lines]  # every line one JSON object
    assert all(isinstance(e, dict) and "event" in e and "timestamp" in e for e in events)
    assert any(e["event"] == "evictd started" for e in events)


def test_metrics_answer_where_the_podmonitor_looks(deployed: Deployed) -> None:
    cluster = deployed.cluster
    pod = wait_ready(cluster, deployed.image.reference)
    monitor = yaml.safe_load((DEPLOY_DIR.parent / "monitoring" / "podmonitor.yaml").read_text())
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [port] = [p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == endpoint["port"]]
    url = f"{endpoint['scheme']}://{pod['status']['podIP']}:{port}{endpoint['path']}"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        page = response.read().decode()
    samples = dict(line.rsplit(" ", 1) for line in page.splitlines() if line and not line.startswith("#"))
    assert float(samples["evictd_cycles_total"]) > 0
    assert 'evictd_signal_available_bytes{signal="allocatableMemory.available"}' in samples


def test_rolling_update_hands_over_through_the_state_lock(deployed: Deployed) -> None:
    cluster, node = deployed.cluster, deployed.node
    old = wait_ready(cluster, deployed.image.reference)
    assert lock_holder_pod_uid(deployed.state_dir) == old["metadata"]["uid"]
    repository = deployed.image.reference.rsplit(":", 1)[0]
    rolled = f"{repository}:{ROLLED_TAG}"
    write_overlay(deployed.overlay, deployed.image.clone / "deploy" / "kubernetes", cluster, deployed.state_dir,
                  ROLLED_TAG)
    cluster.kubectl("apply", "-k", str(deployed.overlay))
    # A hog filling memory while the pods change hands: one of them evicts it, once.
    hog = node.run_pod(new_name("hog"), memory_hog(HOG_MIB, steps=9, step_s=2.5), requests={"memory": "32Mi"})
    new = wait_ready(cluster, rolled)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert wait_until(lambda: not cluster.pod(old["metadata"]["name"], EVICTD_NAMESPACE), 60, "the old pod to go")
    node.wait_gone(hog, timeout_s=120)
    assert len(node.events(hog, "Evicted")) == 1
    assert len(evictd_deletes(cluster, hog)) == 1
    # The new pod runs on the same stateDir: it took the lock the old one held.
    assert lock_holder_pod_uid(deployed.state_dir) == new["metadata"]["uid"]


def test_deleting_the_daemonset_leaves_the_node_clean(deployed: Deployed) -> None:
    cluster, node = deployed.cluster, deployed.node
    pod = next(iter(evictd_pods(cluster)))
    # Pressure evictd cannot relieve: the only pod using memory is critical, so it holds its condition and taint.
    name = new_name("critical-hog")
    cluster.api.create("/api/v1/namespaces/evictd-system/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": cluster.node_name, "hostNetwork": True, "priorityClassName": "system-node-critical",
                 "terminationGracePeriodSeconds": 1, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "app", "image": cluster.busybox_image, "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", memory_hog(HOG_MIB)]}]},
    })
    try:
        wait_until(lambda: (node.condition("EvictdMemoryPressure") or {}).get("status") == "True", 60,
                   "evictd's pressure condition")
        wait_until(lambda: "evictd.io/memory-pressure:NoSchedule" in node.taint_keys(), 30, "evictd's taint")
        cluster.kubectl("-n", EVICTD_NAMESPACE, "delete", "daemonset", NAME, "--wait=true")
        wait_until(lambda: cluster.pod(pod["metadata"]["name"], EVICTD_NAMESPACE) is None, 60, "the evictd pod to go")
        condition = node.condition("EvictdMemoryPressure")
        assert condition is not None and condition["status"] == "Unknown" and condition["reason"] == "EvictdStopped"
        assert not [t for t in node.taint_keys() if t.startswith("evictd.io/")]
    finally:
        cluster.api.request("DELETE", f"/api/v1/namespaces/evictd-system/pods/{name}", {"gracePeriodSeconds": 0})

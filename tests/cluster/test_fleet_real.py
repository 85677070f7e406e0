"""The hand-over across a fleet, end to end: the chart on four real nodes, a real Prometheus, one canary acting.

Runs only in `make test-cluster`. The session's cluster (real_cluster.py) gets the three pool nodes of FLEET
(multi_node.py), each with a pod network of its own and the kubelet's eviction on (``memory.available: 100Mi``,
so ``allocatableMemory.available`` at 100Mi on each node's pods cgroup of POD_MEMORY_MIB); the canary's kubelet
takes that threshold from a drop-in folder (``--config-dir``) instead, at KUBELET_CANARY_MIB. The image is built
from a fresh clone of HEAD and imported into the four containerds. One scenario, in the order an operator runs it:

1. ``helm install`` in dry-run (the shipped configuration); every node runs exactly one evictd pod, Ready by its
   probe on its pod IP. Each node lays its folders out differently here (one machine hosts all four), so each
   added node is a pool of one selected by hostname, with its own ``hostPaths``, ``cgroupRoot`` and kubelet files;
   the control-plane node is the default DaemonSet's.
2. A real Prometheus (built with Kubernetes service discovery: Debian's has none) scrapes every evictd pod with
   deploy/monitoring/scrape-config.yaml, the API server's address and credentials added: four instances, each a
   node, all in dry-run. The canary's pod logs the hand-over verdict that check-config gives against the canary
   kubelet's ``/configz``.
3. A slowly growing hog on a dry-run node: the kubelet evicts it, evictd decided the same pod first, and
   Prometheus shows that node's ``agree`` comparison.
4. The canary's Node labelled ``evictd.io/mode=acting``: Prometheus shows it acting and the others in dry-run.
   A hog leaving about 150 MiB on the canary (under evictd's 200Mi, over the kubelet's threshold) is evicted by
   evictd, the quiet pod beside it stays, the kubelet evicts nothing and no other node evicts.
5. ``helm upgrade`` refused for a values typo (no revision, no pod replaced); ``helm upgrade`` with a canary
   override (its threshold) replaces the canary's pod only; ``helm rollback`` puts the threshold back.

What it cannot show: nodes on separate machines (one kernel, so ``memory.available`` is the same figure on every
node and only ``allocatableMemory.available`` is per node); a NetworkPolicy enforced (no policy controller here).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from backends import RealNode
from multi_node import FLEET, POD_MEMORY_MIB, MultiNodeCluster
from node_under_test import MiB, memory_hog, new_name
from real_cluster import BASE_PREFIX, EVICTD_NAMESPACE, ClusterError, RealCluster, free_ports, k8s_bin_dir

from evictd import __version__
from evictd.adapters.cgroups import detect_cgroup_layout
from helm_tool import RELEASE, helm
from image_build import shared_image_build
from polling import wait_until

pytestmark = pytest.mark.real_cluster

ROOT = Path(__file__).resolve().parents[2]
SCRAPE_CONFIG = ROOT / "deploy" / "monitoring" / "scrape-config.yaml"
SHIPPED_CONFIGMAP = ROOT / "deploy" / "kubernetes" / "configmap.yaml"
CANARY = "evictd-canary-1"
SHADOW_NODE = "evictd-general-1"
SIGNAL = "allocatableMemory.available"
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
# The pool nodes' kubelet threshold, under the shipped 200Mi of evictd (so evictd acts first once acting).
KUBELET_MIB = 100
KUBELET_CANARY_MIB = 90
SHIPPED_MIB = 200
OVERRIDE_MIB = 250
# What the canary's hog leaves: between the kubelet's threshold and evictd's, 50 MiB from each.
CANARY_LEFT_MIB = 150
# What the shadow node's hog leaves at most: under the kubelet's threshold, above the cgroup's limit.
SHADOW_LEFT_MIB = 40
SHADOW_STEPS = 12
SHADOW_STEP_S = 1.5
QUIET = 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done'
IMAGE = f"ghcr.io/evictd/evictd:{__version__}"
POD_READY_TIMEOUT_S = 240.0
PROMETHEUS_TIMEOUT_S = 120.0
DECISION_TIMEOUT_S = 120.0
METRICS_PORT = 10262


def prometheus_binary() -> Path:
    """A Prometheus with Kubernetes service discovery, beside the built Kubernetes binaries (never Debian's)."""
    path = k8s_bin_dir() / "prometheus"
    if not os.access(path, os.X_OK):
        pytest.fail(f"no prometheus in {path.parent}: the tier needs one built with Kubernetes service discovery "
                    "(Debian's has none); docs/development.md says how to build it", pytrace=False)
    return path


class Prometheus:
    """The Prometheus binary with one scrape job, deploy/monitoring/scrape-config.yaml's, given the API server."""

    def __init__(self, base: Path, cluster: RealCluster, port: int) -> None:
        (job,) = yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]
        pki = cluster.pki
        for discovery in job["kubernetes_sd_configs"]:
            discovery["api_server"] = cluster.api_url
            discovery["tls_config"] = {"ca_file": str(pki.ca_cert), "cert_file": str(pki.cert("admin")),
                                       "key_file": str(pki.key("admin"))}
        job["scrape_interval"], job["scrape_timeout"] = "2s", "2s"
        base.mkdir(parents=True, exist_ok=True)
        config = base / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"evaluation_interval": "2s"}, "scrape_configs": [job]}))
        self.url = f"http://127.0.0.1:{port}"
        self.log = base / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(prometheus_binary()), f"--config.file={config}", f"--storage.tsdb.path={base / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._ready, 60, "prometheus to be ready")

    def _ready(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, expr: str) -> dict[str, float]:
        """``expr`` now, by instance (the node's name)."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return {sample["metric"].get("instance", ""): float(sample["value"][1]) for sample in body["data"]["result"]}

    def wait(self, expr: str, wanted: dict[str, float], what: str) -> None:
        """Wait until ``expr`` by instance is exactly ``wanted``."""
        seen: list[dict[str, float]] = []

        def matches() -> bool:
            seen[:] = [self.query(expr)]
            return seen[0] == wanted

        try:
            wait_until(matches, PROMETHEUS_TIMEOUT_S, what)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {expr} is {seen}, not {wanted}") from exc

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()


@dataclass
class Fleet:
    control_plane: RealCluster
    pools: MultiNodeCluster
    chart: Path
    work: Path

    def nodes(self) -> dict[str, RealCluster]:
        return {self.control_plane.node_name: self.control_plane, **self.pools.nodes}


def node_paths(node: RealCluster, state: Path) -> dict[str, str]:
    return {"kubelet": str(node.kubelet_root), "podLogs": str(node.pod_logs_dir),
            "containerd": str(node.containerd.base), "state": str(state), "nodeLock": str(state.parent / "lock")}


def node_settings(node: RealCluster) -> dict[str, Any]:
    return {"cgroupDriver": "cgroupfs", "cgroupRoot": node.cgroup_root, "housekeepingInterval": "1s",
            "psiWakeups": False, "shutdownTimeout": "5s"}


def fleet_values(fleet: Fleet, pool_extra: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Values for the four nodes: the control plane's paths for the default DaemonSet, a pool of one per added
    node (selected by hostname) with its paths, cgroupRoot and kubelet files; ``pool_extra`` by node name."""
    control = fleet.control_plane
    pools = []
    for name, node in fleet.pools.nodes.items():
        pool: dict[str, Any] = {
            "name": name.removeprefix("evictd-"), "nodeSelector": {"kubernetes.io/hostname": name},
            "hostPaths": node_paths(node, node.base / "evictd-state"), "settings": node_settings(node),
            "kubelet": {"configFile": str(node.kubelet_config_path)}}
        if name == CANARY:
            pool["kubelet"]["configDir"] = str(node.kubelet_dropin_dir)
        pool.update((pool_extra or {}).get(name, {}))
        pools.append(pool)
    return {"namespace": {"create": False}, "hostPaths": node_paths(control, control.base / "evictd-fleet-state"),
            "settings": node_settings(control), "pools": pools}


def values_file(fleet: Fleet, name: str, values: dict[str, Any]) -> Path:
    path = fleet.work / f"{name}-values.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def evictd_pods(cluster: RealCluster) -> dict[str, dict[str, Any]]:
    """The Ready DaemonSet pods of evictd, not being deleted, by node name."""
    listed = cluster.api.request("GET", f"/api/v1/namespaces/{EVICTD_NAMESPACE}/pods?labelSelector="
                                        "app.kubernetes.io/name=evictd")["items"]
    found = {}
    for pod in listed:
        conditions = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
        if pod["metadata"].get("deletionTimestamp") or conditions.get("Ready") != "True":
            continue
        if (pod["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "DaemonSet":
            found[pod["spec"]["nodeName"]] = pod
    return found


def pod_log(node: RealCluster, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The evictd container's JSON lines, read from the node's pod log folder (the CRI log format)."""
    meta = pod["metadata"]
    folder = node.pod_logs_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / "evictd"
    lines = []
    for path in sorted(folder.glob("*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            text = raw.split(" ", 3)[-1]
            with contextlib.suppress(ValueError):
                lines.append(json.loads(text))
    return lines


def log_event(node: RealCluster, pod: dict[str, Any], name: str, timeout_s: float = 60.0) -> dict[str, Any]:
    found = wait_until(lambda: next((e for e in pod_log(node, pod) if e.get("event") == name), None), timeout_s,
                       f"{name!r} in {pod['metadata']['name']}'s log")
    assert found is not None
    return found


def scrape(pod: dict[str, Any], name: str, **labels: str) -> float:
    """One sample of the pod's /metrics, read on its pod IP as Prometheus does."""
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{METRICS_PORT}/metrics", timeout=5) as response:
        page = response.read().decode()
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    for line in page.splitlines():
        if line.startswith(f"{name}{{{wanted}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{wanted}}} not on {pod['metadata']['name']}'s /metrics")


def pods_headroom_mib(node: RealCluster) -> float:
    """The kubelet's allocatableMemory.available of ``node`` now: its pods cgroup's limit minus its working set
    (usage less inactive file pages), from the v1 memory cgroup."""
    kubepods = detect_cgroup_layout().memory_hierarchy / node.cgroup_root.strip("/") / "kubepods"
    limit = int((kubepods / "memory.limit_in_bytes").read_text())
    usage = int((kubepods / "memory.usage_in_bytes").read_text())
    stat = dict(line.split() for line in (kubepods / "memory.stat").read_text().splitlines())
    return (limit - max(0, usage - int(stat["total_inactive_file"]))) / MiB


def evicted_by_kubelet(pod: dict[str, Any]) -> bool:
    """The kubelet's own eviction of ``pod``: reason Evicted, or its DisruptionTarget condition saying so."""
    status = pod.get("status") or {}
    return status.get("reason") == "Evicted" or any(
        c.get("type") == "DisruptionTarget" and c.get("reason") == "TerminationByKubelet"
        for c in status.get("conditions") or [])


def revisions(common: list[str]) -> list[int]:
    return [int(entry["revision"]) for entry in json.loads(helm("history", RELEASE, *common, "-o", "json").stdout)]


@pytest.fixture(scope="module")
def fleet(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    prometheus_binary()  # before minutes of set-up
    base = Path(tempfile.mkdtemp(prefix=BASE_PREFIX))
    kubelet_extra = f"evictionHard: {{memory.available: {KUBELET_MIB}Mi}}\nevictionPressureTransitionPeriod: 5s\n"
    pools = MultiNodeCluster(real_cluster, base, FLEET, pod_network=True, kubelet_extra=kubelet_extra)
    failure = ""
    try:
        pools.start()
        pools.node(CANARY).restart_kubelet(dropins={
            "10-eviction.conf": KUBELET + f"evictionHard: {{memory.available: {KUBELET_CANARY_MIB}Mi}}\n"})
    except ClusterError as exc:
        failure = str(exc)
    if failure:
        pools.stop()
        pytest.fail(failure, pytrace=False)
    image = shared_image_build(tmp_path_factory)
    for node in (real_cluster, *pools.nodes.values()):
        node.containerd.import_archive(image.archive)
    work = tmp_path_factory.mktemp("fleet")
    try:
        yield Fleet(real_cluster, pools, image.clone / "deploy" / "helm" / "evictd", work)
    finally:
        real_cluster.kubectl("-n", EVICTD_NAMESPACE, "delete", "daemonset,configmap", "-l",
                             "app.kubernetes.io/instance=evictd", "--ignore-not-found", "--wait=true", check=False)
        real_cluster.kubectl("-n", EVICTD_NAMESPACE, "delete", "networkpolicy/evictd-metrics", "--ignore-not-found",
                             check=False)
        real_cluster.kubectl("-n", EVICTD_NAMESPACE, "delete", "secret", "-l", f"owner=helm,name={RELEASE}",
                             check=False)
        real_cluster.apply_evictd_manifests()
        problems = pools.stop()
        shutil.rmtree(base, ignore_errors=True)
        if problems:
            pytest.fail("pool nodes teardown incomplete: " + "; ".join(problems), pytrace=False)


def test_dry_run_fleet_then_a_canary_acting_then_upgrade_and_rollback(fleet: Fleet, tmp_path: Path) -> None:
    cluster, names = fleet.control_plane, sorted(fleet.nodes())
    nodes = fleet.nodes()
    common = ["--namespace", EVICTD_NAMESPACE, "--kubeconfig", str(cluster.admin_kubeconfig)]
    values = values_file(fleet, "fleet", fleet_values(fleet))

    # 1. Installed in dry-run: one Ready evictd per node, each its own DaemonSet's.
    helm("install", RELEASE, str(fleet.chart), "--take-ownership", "--force-conflicts", *common, "--values",
         str(values), timeout_s=240)
    pods = wait_until(lambda: (lambda p: p if sorted(p) == names else None)(evictd_pods(cluster)),
                      POD_READY_TIMEOUT_S, "a Ready evictd pod on each of the four nodes")
    assert pods is not None
    for name, pod in pods.items():
        assert pod["spec"]["containers"][0]["image"] == IMAGE
        started = log_event(nodes[name], pod, "evictd started")
        assert (started["node"], started["dry_run"]) == (name, True), started

    # 2. Prometheus finds the four pods through the API server and scrapes them on their pod IPs.
    prometheus = Prometheus(tmp_path / "prometheus", cluster, free_ports(1)[0])
    try:
        prometheus.wait('up{job="evictd"}', dict.fromkeys(names, 1.0), "every node scraped")
        prometheus.wait('evictd_mode{mode="dry-run"}', dict.fromkeys(names, 1.0), "every node in dry-run")
        # The canary's pod read its kubelet's file and drop-in folder: the verdict /configz gives.
        canary_node = fleet.pools.node(CANARY)
        handover = log_event(canary_node, pods[CANARY], "hand-over")
        assert handover_from_configz(canary_node, tmp_path) == handover["signals"], handover
        assert "memory.available" in handover["signals"]

        # 3. The kubelet evicts on a dry-run node; evictd had decided the same pod: agreement, in Prometheus.
        shadow = RealNode(fleet.pools.node(SHADOW_NODE), tmp_path / "shadow")
        try:
            capacity = scrape(pods[SHADOW_NODE], "evictd_signal_capacity_bytes", signal=SIGNAL) / MiB
            assert abs(capacity - POD_MEMORY_MIB) < 1, ("evictd's capacity is the pods cgroup's limit", capacity)
            available = pods_headroom_mib(fleet.pools.node(SHADOW_NODE))
            hog = shadow.run_pod(new_name("hog"), memory_hog(int(available) - SHADOW_LEFT_MIB, steps=SHADOW_STEPS,
                                                             step_s=SHADOW_STEP_S), requests={"memory": "32Mi"})
            # The kubelet's eviction: the pod terminal with its DisruptionTarget condition (reason
            # TerminationByKubelet; the phase from the container's exit: Succeeded here, the hog exits 0 on SIGTERM),
            # left in the API as the kubelet leaves it.
            try:
                wait_until(lambda: any(evicted_by_kubelet(v.object) for v in shadow.versions(hog)),
                           DECISION_TIMEOUT_S, "the kubelet to evict the hog")
            except AssertionError as exc:
                log = fleet.pools.node(SHADOW_NODE).log_path("kubelet").read_text(errors="replace").splitlines()
                said = [line[:400] for line in log if hog.name in line or ("evict" in line.lower()
                        and "observations" not in line and "housekeeping" not in line)][-25:]
                status = (shadow.pod(hog) or {}).get("status", {})
                said.append(json.dumps({k: v for k, v in status.items() if k != "containerStatuses"}))
                said.append(json.dumps([(e["reason"], e["source"], e["message"]) for e in
                                        json.loads(shadow.core.list_namespaced_event(hog.namespace,
                                        _preload_content=False).data)["items"]
                                        if e["involvedObject"].get("uid") == hog.uid]))
                said += [json.dumps(e) for e in pod_log(fleet.pools.node(SHADOW_NODE), pods[SHADOW_NODE])
                         if "evict" in str(e.get("event"))][-5:]
                raise AssertionError(f"{exc}; pods headroom now {pods_headroom_mib(fleet.pools.node(SHADOW_NODE))} "
                                     f"MiB; the kubelet's eviction lines:\n" + "\n".join(said)) from None
            kubelet_events = shadow.events(hog, "Evicted")
            assert kubelet_events and all(e["source"]["component"] == "kubelet" for e in kubelet_events)
            prometheus.wait('sum by (instance) (evictd_shadow_comparisons_total{outcome="agree"})',
                            {**dict.fromkeys(names, 0.0), SHADOW_NODE: 1.0}, "the shadow node's agreement")
            assert prometheus.query('sum by (instance) (evictd_shadow_comparisons_total{outcome!="agree"})') \
                == dict.fromkeys(names, 0.0)
            shadow.core.delete_namespaced_pod(hog.name, hog.namespace, grace_period_seconds=0)
            shadow.wait_gone(hog)
        finally:
            shadow.close()

        # 4. One node switched to acting by its label; memory pressure there is evictd's to act on.
        cluster.kubectl("label", "node", CANARY, "evictd.io/mode=acting")
        prometheus.wait('evictd_mode{mode="acting"} == 1', {CANARY: 1.0}, "the canary acting, alone")
        prometheus.wait('evictd_mode{mode="dry-run"} == 1', {n: 1.0 for n in names if n != CANARY},
                        "the other nodes in dry-run")
        conflicts = prometheus.query("sum by (instance) (evictd_handover_conflict)")
        assert set(conflicts.values()) <= {0.0}, ("the kubelet's thresholds are under evictd's", conflicts)
        canary = RealNode(canary_node, tmp_path / "canary")
        try:
            before = canary.condition("MemoryPressure")
            assert before is not None and before["status"] == "False"
            quiet = canary.run_pod(new_name("quiet"), QUIET, requests={"memory": "64Mi"})
            available = pods_headroom_mib(canary_node)
            hog = canary.run_pod(new_name("hog"), memory_hog(int(available) - CANARY_LEFT_MIB),
                                 requests={"memory": "32Mi"})
            canary.wait_gone(hog, timeout_s=DECISION_TIMEOUT_S)
            events = canary.events(hog, "Evicted")
            assert len(events) == 1 and events[0]["source"]["component"] == "evictd", events  # one pod, one eviction
            # evictd's eviction writes the kubelet's DisruptionTarget too: the kubelet's own would have logged it.
            kubelet_log = canary_node.log_path("kubelet").read_text(errors="replace")
            assert "Eviction manager: attempting to reclaim" not in kubelet_log, "the kubelet evicted nothing"
            after = canary.condition("MemoryPressure")
            assert after is not None and (after["status"], after["lastTransitionTime"]) == (
                "False", before["lastTransitionTime"])
            still = canary.pod(quiet)
            assert still is not None and "deletionTimestamp" not in still["metadata"]
            prometheus.wait("sum by (instance) (evictd_evictions_total) > bool 0",
                            {**dict.fromkeys(names, 0.0), CANARY: 1.0}, "evictions on the canary only")
            canary.core.delete_namespaced_pod(quiet.name, quiet.namespace, grace_period_seconds=0)
            canary.wait_gone(quiet)
        finally:
            canary.close()

        # 5. A typo refused before any pod starts; a canary override replaces the canary's pod only; rollback.
        uids = {name: pod["metadata"]["uid"] for name, pod in evictd_pods(cluster).items()}
        typo = fleet_values(fleet, {CANARY: {"dryrun": False}})
        refused = helm("upgrade", RELEASE, str(fleet.chart), *common, "--values", str(values_file(fleet, "typo", typo)),
                       check=False)
        assert refused.returncode != 0 and "dryrun" in refused.stderr, refused.stderr
        assert revisions(common) == [1]
        override = fleet_values(fleet, {CANARY: {"eviction": {"evictionHard": {"memory.available": f"{OVERRIDE_MIB}Mi"}}}})
        helm("upgrade", RELEASE, str(fleet.chart), *common, "--values", str(values_file(fleet, "override", override)),
             timeout_s=240)
        replaced = wait_until(lambda: (lambda p: p if sorted(p) == names and p[CANARY]["metadata"]["uid"]
                                       != uids[CANARY] else None)(evictd_pods(cluster)), POD_READY_TIMEOUT_S,
                              "the canary's new pod")
        assert replaced is not None
        assert {n: p["metadata"]["uid"] for n, p in replaced.items() if n != CANARY} == {
            n: uid for n, uid in uids.items() if n != CANARY}, "only the canary's pod replaced"
        threshold = f'evictd_threshold_bytes{{signal="{SIGNAL}",kind="hard"}}'
        prometheus.wait(f"{threshold} / 1048576", {**{n: float(SHIPPED_MIB) for n in names}, CANARY: float(OVERRIDE_MIB)},
                        "the canary's override in force")
        helm("rollback", RELEASE, "1", *common, "--wait", "--timeout", "4m", timeout_s=300)
        assert revisions(common) == [1, 2, 3]
        prometheus.wait(f"{threshold} / 1048576", {n: float(SHIPPED_MIB) for n in names}, "the shipped threshold back")
    finally:
        prometheus.stop()
        cluster.kubectl("label", "node", CANARY, "evictd.io/mode-", check=False)


def handover_from_configz(node: RealCluster, folder: Path) -> dict[str, str]:
    """check-config's hand-over signals with the shipped configuration against what the kubelet's /configz says."""
    configz = node.kubelet_configz()
    shipped = folder / "shipped.yaml"
    shipped.write_text(yaml.safe_load(SHIPPED_CONFIGMAP.read_text())["data"]["config.yaml"])
    effective = folder / "configz.yaml"
    effective.write_text(KUBELET + yaml.safe_dump({k: v for k, v in configz.items() if k.startswith("eviction")}))
    done = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config-only", "--config",
                           str(shipped), "--kubelet-config", str(effective),
                           "-o", "json"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return {s["signal"]: s["now"] for s in json.loads(done.stdout)["handover"]["signals"]}


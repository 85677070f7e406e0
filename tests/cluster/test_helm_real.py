"""The Helm chart on the real cluster: `helm install`, then `helm upgrade` to the next version, stateDir kept.

Runs only in `make test-cluster` (tests/cluster/real_cluster.py), with the real helm of `make helm`. The image is
built from a fresh clone of HEAD (tests/image_build.py) and imported into the node's containerd under the
version's tag and under the next version's; the chart is the clone's deploy/helm/evictd, and the next version's
chart is a copy of it with version and appVersion bumped (so its image tag is the next version's), as a release
would bump them. Values only say what is particular to this test node (hostPaths, the configuration's
cgroupDriver and cgroupRoot, a 1 s interval), as tests/cluster/test_daemonset_real.py's overlay does; the
configuration stays the shipped dry-run one. The harness applied evictd's identity objects from the kustomize
base already: the install takes them over (`--take-ownership --force-conflicts`: helm applies server-side, the
harness applied client-side), as an operator moving from `kubectl apply -k` to the chart would.

After the upgrade the new pod (the next version's image) holds the stateDir lock, and the stateDir holds what the
old pod wrote: every recording segment of its run, with every cycle it had recorded, beside the new run's.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from real_cluster import EVICTD_NAMESPACE, RealCluster
from test_daemonset_real import daemonset_event, evictd_pods, lock_holder_pod_uid, pod_logs, wait_ready

from evictd import __version__
from evictd.state_dir import RECORDING_FOLDER
from helm_tool import RELEASE, helm
from image_build import shared_image_build
from polling import wait_until

pytestmark = pytest.mark.real_cluster

NEXT_VERSION = f"{__version__}-next.1"
SEGMENT_TIMEOUT_S = 60.0
# The canary pool of the layered-values steps: the node labelled POOL_LABEL=POOL gets the pool's DaemonSet.
POOL = "canary"
POOL_LABEL = "evictd.io/pool"


def node_settings(cluster: RealCluster) -> dict[str, object]:
    """This node's lines as layered `settings` (no `config`): what node_config writes into the shipped file."""
    return {"cgroupDriver": "cgroupfs", "cgroupRoot": cluster.cgroup_root, "housekeepingInterval": "1s",
            "psiWakeups": False, "shutdownTimeout": "5s"}


def daemonset_pods(cluster: RealCluster, daemonset: str) -> list[dict[str, Any]]:
    """The evictd pods the DaemonSet `daemonset` owns, not being deleted."""
    return [p for p in evictd_pods(cluster) if p["metadata"]["ownerReferences"][0]["name"] == daemonset]


def ready_pod_of(cluster: RealCluster, daemonset: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        for pod in daemonset_pods(cluster, daemonset):
            conditions = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
            if conditions.get("Ready") == "True":
                return pod
        return None

    pod = wait_until(ready, 180, f"a Ready pod of DaemonSet {daemonset}")
    assert pod is not None
    return pod


def revisions(common: list[str]) -> list[int]:
    history = json.loads(helm("history", RELEASE, *common[:4], "--output", "json").stdout)
    return [int(entry["revision"]) for entry in history]


def node_config(base: Path, cluster: RealCluster) -> str:
    """The shipped ConfigMap's config.yaml with this node's lines (dry-run, thresholds as shipped)."""
    configmap = yaml.safe_load((base / "configmap.yaml").read_text())
    kubelet, evictd = list(yaml.safe_load_all(configmap["data"]["config.yaml"]))
    kubelet["cgroupDriver"] = "cgroupfs"
    evictd.update({"cgroupRoot": cluster.cgroup_root, "housekeepingInterval": "1s", "psiWakeups": False,
                   "shutdownTimeout": "5s"})
    assert evictd["dryRun"] is True
    return yaml.safe_dump_all([kubelet, evictd], sort_keys=False)


def recorded_cycles(state_dir: Path) -> dict[str, set[tuple[str, int]]]:
    """By segment (its name without .gz), the (run, cycle) of every line that decodes."""
    found: dict[str, set[tuple[str, int]]] = {}
    for segment in sorted((state_dir / RECORDING_FOLDER).glob("*.jsonl*")):
        raw = segment.read_bytes()
        text = gzip.decompress(raw).decode() if segment.name.endswith(".gz") else raw.decode(errors="replace")
        lines = set()
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # the line being written
                continue
            lines.add((record["run"], record["cycle"]))
        found[segment.name.removesuffix(".gz")] = lines
    return found


@pytest.fixture
def chart_release(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    cluster = real_cluster
    image = shared_image_build(tmp_path_factory)
    cluster.containerd.import_archive(image.archive)
    repository = image.reference.rsplit(":", 1)[0]
    cluster.containerd.ctr("images", "tag", image.reference, f"{repository}:{NEXT_VERSION}")
    work = tmp_path_factory.mktemp("helm")
    state_dir = cluster.base / "evictd-helm-state"
    state_dir.mkdir()
    values = {
        "namespace": {"create": False},  # the harness made the namespace (the default: the chart renders none)
        "config": node_config(image.clone / "deploy" / "kubernetes", cluster),
        "hostPaths": {"kubelet": str(cluster.kubelet_root), "podLogs": str(cluster.pod_logs_dir),
                      "containerd": str(cluster.containerd.base), "state": str(state_dir)},
    }
    (work / "values.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    # The next version's chart: the clone's, its links resolved, version and appVersion bumped.
    next_chart = work / "next" / "evictd"
    shutil.copytree(image.clone / "deploy" / "helm" / "evictd", next_chart, symlinks=False)
    chart_yaml = (next_chart / "Chart.yaml").read_text()
    chart_yaml = chart_yaml.replace(f"version: {__version__}\n", f"version: {NEXT_VERSION}\n")
    chart_yaml = chart_yaml.replace(f'appVersion: "{__version__}"', f'appVersion: "{NEXT_VERSION}"')
    (next_chart / "Chart.yaml").write_text(chart_yaml)
    try:
        yield {"chart": image.clone / "deploy" / "helm" / "evictd", "next": next_chart,
               "values": work / "values.yaml", "state": state_dir}
    finally:
        # Not `helm uninstall`: it would delete the identity objects the harness applied for the other tests.
        cluster.kubectl("-n", EVICTD_NAMESPACE, "delete", "daemonset/evictd", "configmap/evictd-config",
                        f"daemonset/evictd-{POOL}", f"configmap/evictd-{POOL}-config",
                        "networkpolicy/evictd-metrics", "--ignore-not-found", "--wait=true", check=False)
        cluster.kubectl("label", "node", cluster.node_name, f"{POOL_LABEL}-", check=False)
        cluster.kubectl("-n", EVICTD_NAMESPACE, "delete", "secret", "-l", f"owner=helm,name={RELEASE}", check=False)
        cluster.apply_evictd_manifests()


def test_helm_install_then_upgrade_keeps_the_state_directory(real_cluster: RealCluster,
                                                            chart_release: dict[str, Path]) -> None:
    cluster = real_cluster
    kubeconfig = str(cluster.admin_kubeconfig)
    common = ["--namespace", EVICTD_NAMESPACE, "--kubeconfig", kubeconfig, "--values", str(chart_release["values"])]
    helm("install", RELEASE, str(chart_release["chart"]), "--take-ownership", "--force-conflicts", *common)
    old = wait_ready(cluster, f"ghcr.io/evictd/evictd:{__version__}")
    state_dir = chart_release["state"]
    assert lock_holder_pod_uid(state_dir) == old["metadata"]["uid"]
    # Some cycles recorded by the installed version.
    before = wait_until(lambda: (lambda r: r if sum(map(len, r.values())) >= 5 else None)(recorded_cycles(state_dir)),
                        SEGMENT_TIMEOUT_S, "the installed evictd's recording")
    assert before is not None
    old_runs = {run for lines in before.values() for run, _ in lines}

    helm("upgrade", RELEASE, str(chart_release["next"]), *common)
    new = wait_ready(cluster, f"ghcr.io/evictd/evictd:{NEXT_VERSION}")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert wait_until(lambda: not cluster.pod(old["metadata"]["name"], EVICTD_NAMESPACE), 60, "the old pod to go")
    assert lock_holder_pod_uid(state_dir) == new["metadata"]["uid"]
    listed = json.loads(helm("list", *common[:4], "--output", "json").stdout)
    assert [(r["name"], r["chart"], r["app_version"], str(r["revision"])) for r in listed] \
        == [(RELEASE, f"evictd-{NEXT_VERSION}", NEXT_VERSION, "2")]

    # The stateDir kept: every segment and cycle the old pod recorded, and the new run recording beside them.
    after = wait_until(lambda: (lambda r: r if {run for lines in r.values() for run, _ in lines} - old_runs else None)(
        recorded_cycles(state_dir)), SEGMENT_TIMEOUT_S, "the upgraded evictd's recording")
    assert after is not None
    for segment, lines in before.items():
        assert lines <= after[segment], segment
    assert any(e.get("event") == "evictd started" for e in pod_logs(cluster, new))

    # Values that layer onto the shipped configuration: a typo is refused before anything changes.
    layered = {key: value for key, value in yaml.safe_load(chart_release["values"].read_text()).items()
               if key != "config"}
    layered["settings"] = node_settings(cluster)
    layered_common = [*common[:4], "--values", str(values_file_at(chart_release["state"].parent, "layered", layered))]
    typo = values_file_at(chart_release["state"].parent, "typo", {**layered, "dryrun": False})
    refused = helm("upgrade", RELEASE, str(chart_release["next"]), *common[:4], "--values", str(typo), check=False)
    assert refused.returncode != 0 and "dryrun" in refused.stderr, refused.stderr
    assert revisions(common) == [1, 2], "a refused upgrade makes no revision"
    assert [p["metadata"]["uid"] for p in daemonset_pods(cluster, RELEASE)] == [new["metadata"]["uid"]]

    # A canary pool on this node, acting, beside the default DaemonSet in dry-run elsewhere.
    cluster.kubectl("label", "node", cluster.node_name, f"{POOL_LABEL}={POOL}")
    pools = [{"name": POOL, "nodeSelector": {POOL_LABEL: POOL}, "dryRun": False}]
    pooled = values_file_at(chart_release["state"].parent, "pooled", {**layered, "pools": pools})
    helm("upgrade", RELEASE, str(chart_release["next"]), *layered_common, "--values", str(pooled))
    canary = ready_pod_of(cluster, f"{RELEASE}-{POOL}")
    started = daemonset_event(cluster, canary, "evictd started")
    assert started["dry_run"] is False and started["node"] == cluster.node_name
    assert wait_until(lambda: not daemonset_pods(cluster, RELEASE), 60, "the default DaemonSet to leave the node")
    config = cluster.kubectl("-n", EVICTD_NAMESPACE, "get", "configmap", f"{RELEASE}-{POOL}-config", "-o",
                             "jsonpath={.data.config\\.yaml}").stdout
    kubelet_doc, evictd_doc = list(yaml.safe_load_all(config))
    assert evictd_doc["dryRun"] is False and evictd_doc["cgroupRoot"] == cluster.cgroup_root
    assert kubelet_doc["evictionHard"]["memory.available"] == "200Mi", "the shipped thresholds, not restated"

    # Rolled back to the release before the pool: the pool's DaemonSet goes, the default one's pod comes back.
    helm("rollback", RELEASE, "2", *common[:4], "--wait", "--timeout", "3m", timeout_s=240)
    assert revisions(common) == [1, 2, 3, 4]
    assert wait_until(lambda: not daemonset_pods(cluster, f"{RELEASE}-{POOL}"), 120, "the pool's pod to go")
    back = ready_pod_of(cluster, RELEASE)
    assert back["spec"]["containers"][0]["image"] == f"ghcr.io/evictd/evictd:{NEXT_VERSION}"
    assert cluster.kubectl("-n", EVICTD_NAMESPACE, "get", "daemonset", f"{RELEASE}-{POOL}",
                           check=False).returncode != 0


def values_file_at(folder: Path, name: str, values: dict[str, Any]) -> Path:
    path = folder / f"{name}-values.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path

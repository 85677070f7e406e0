"""A release installed from a registry on the real cluster: the chart pulled by helm, the image by the node.

Issue #72, "something to pull": `make release SNAPSHOT=1` in a fresh clone of HEAD (tests/image_build.py), `make
push REGISTRY=127.0.0.1:PORT PLAIN_HTTP=1 SNAPSHOT=1` (deploy/push-release.sh) to Debian's docker-registry on
loopback (tests/deploy/registry_server.py), then, on a cluster without evictd's objects (as a new user has it),
the install docs/upgrading.md gives ("Build and push to your own registry"): the namespace made and labelled,
`helm install evictd oci://REGISTRY/evictd/charts/evictd --version TAG` with the registry's image, plus this
node's values (its host paths, cgroupfs and cgroupRoot, as tests/cluster/test_helm_real.py gives them). The same
path a published release takes, only the registry's address changed.

What must hold: the DaemonSet's pod Ready with the registry's image, which the node's own containerd pulled from
the registry (every blob of it served to containerd, no archive imported), and evictd started on the node in
dry-run, as shipped. Afterwards the release is uninstalled and the harness's objects put back.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from real_cluster import EVICTD_NAMESPACE, RealCluster
from registry_server import RegistryServer, helm_home_env, running_registry
from test_daemonset_real import daemonset_event, wait_ready
from test_documented_install_real import delete_evictd_objects
from test_helm_real import node_config

from helm_tool import RELEASE, helm
from image_build import SnapshotRelease, shared_snapshot_release

pytestmark = pytest.mark.real_cluster

PUSH_TIMEOUT_S = 300.0
INSTALL_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> SnapshotRelease:
    return shared_snapshot_release(tmp_path_factory)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    yield from running_registry(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return helm_home_env(tmp_path_factory.mktemp("helm-home"))


@pytest.fixture
def fresh_cluster(real_cluster: RealCluster) -> Iterator[RealCluster]:
    delete_evictd_objects(real_cluster)
    try:
        yield real_cluster
    finally:
        helm("uninstall", RELEASE, "--namespace", EVICTD_NAMESPACE, "--kubeconfig", str(real_cluster.admin_kubeconfig),
             "--ignore-not-found", "--wait", "--timeout", "2m", check=False, timeout_s=180)
        delete_evictd_objects(real_cluster)
        real_cluster.apply_evictd_manifests()
        real_cluster.wait_namespace_objects(EVICTD_NAMESPACE)


def test_a_release_pushed_to_a_registry_installs_and_the_node_pulls_its_image(
    fresh_cluster: RealCluster, release: SnapshotRelease, registry: RegistryServer, helm_home: dict[str, str],
    tmp_path: Path,
) -> None:
    cluster = fresh_cluster
    pushed = subprocess.run(["make", "--no-print-directory", "push", f"REGISTRY={registry.address}", "PLAIN_HTTP=1",
                             "SNAPSHOT=1"], cwd=release.image.clone, capture_output=True, text=True,
                            timeout=PUSH_TIMEOUT_S, check=False, env=helm_home)
    assert pushed.returncode == 0, f"make push exited {pushed.returncode}:\n{pushed.stdout}{pushed.stderr}"
    repository = f"{registry.address}/evictd/evictd"
    image = f"{repository}:{release.name}"
    assert not [line for line in cluster.containerd.ctr("images", "ls", "-q").splitlines() if line == image]

    cluster.kubectl("create", "namespace", EVICTD_NAMESPACE)
    cluster.kubectl("label", "namespace", EVICTD_NAMESPACE, "pod-security.kubernetes.io/enforce=privileged")
    state_dir = cluster.base / "evictd-registry-state"
    state_dir.mkdir(exist_ok=True)
    values = tmp_path / "node.yaml"
    values.write_text(yaml.safe_dump({
        "config": node_config(release.image.clone / "deploy" / "kubernetes", cluster),
        "hostPaths": {"kubelet": str(cluster.kubelet_root), "podLogs": str(cluster.pod_logs_dir),
                      "containerd": str(cluster.containerd.base), "state": str(state_dir)},
    }, sort_keys=False))
    helm("install", RELEASE, f"oci://{registry.address}/evictd/charts/evictd", "--version", release.name,
         "--namespace", EVICTD_NAMESPACE, "--plain-http", "--set", f"image.repository={repository}",
         "--set", f"image.tag={release.name}", "--values", str(values), "--kubeconfig", str(cluster.admin_kubeconfig),
         env=helm_home, timeout_s=INSTALL_TIMEOUT_S)

    pod = wait_ready(cluster, image)
    started = daemonset_event(cluster, pod, "evictd started")
    assert started["dry_run"] is True and started["node"] == cluster.node_name
    # The node's containerd pulled it: every blob the registry holds for the image went to containerd.
    assert image in cluster.containerd.ctr("images", "ls", "-q").splitlines()
    served = registry.blobs_served("evictd/evictd", "containerd/")
    assert len(served) >= 2, f"containerd fetched {served} from the registry"

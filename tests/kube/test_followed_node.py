"""The kubelet `evictd run` follows when `kubeletVersion` is not set: its Node's status.nodeInfo.kubeletVersion, read
through the real `kubernetes` client from the test API server by the Node's watch as `evictd run` composes it
(`build_cluster`, `FollowedKubelet`, `build_stats_source`), and what that does to the node's memory.available.

The node's figures come from the cgroup v1 fixture tree (the same reading every time) and a fake
/sys/kernel/mm/hugepages of 1 GiB, so the hugepage-aware memory.available is exactly 1 GiB less than the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from apiserver import ApiServer
from kube_objects import node_manifest
from kubernetes import client as k8s

from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.node_pods import DiscoveredPods
from evictd.config import Configuration, load_configuration
from evictd.observe.metrics import Metrics
from evictd.run.compose_cluster import ClusterParts, build_cluster
from evictd.run.compose_node import build_stats_source
from evictd.run.followed_kubelet import FollowedKubelet
from log_capture import LogCapture
from polling import wait_until

NODE = "node-a"
GI = 1 << 30
FIXTURE_V1 = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup" / "v1-cgroupfs"
PERIOD = "0.2s"  # nodeStatusUpdateFrequency: how often the watch reads the Node again


def hugepages_tree(root: Path) -> str:
    """A /sys/kernel/mm/hugepages with 512 pages of 2 MiB (1 GiB)."""
    pool = root / "hugepages-2048kB"
    pool.mkdir(parents=True)
    (pool / "nr_hugepages").write_text("512\n")
    return str(root)


@dataclass
class Composed:
    followed: FollowedKubelet
    cluster: ClusterParts
    log: LogCapture
    aware_source: object
    plain_source: object

    def read(self) -> tuple[int, int]:
        """(memory.available as composed, as a v1.36 kubelet without the gate computes it)."""
        figures = []
        for source in (self.aware_source, self.plain_source):
            memory = source.summary([]).node.memory  # type: ignore[attr-defined]
            assert memory is not None and memory.available_bytes is not None
            figures.append(memory.available_bytes)
        return figures[0], figures[1]


Compose = Callable[..., Composed]


def configuration(tmp_path: Path, apiserver: ApiServer, extra: str = "", kubelet: str = "") -> Configuration:
    path = tmp_path / "evictd.yaml"
    path.write_text(("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + kubelet + "---\n"
                     if kubelet else "")
                    + "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                    f"nodeName: {NODE}\nkubeconfig: {apiserver.kubeconfig_path}\nstateDir: {tmp_path / 'state'}\n"
                    f"nodeStatusUpdateFrequency: {PERIOD}\nkubeletRootDir: {tmp_path}\n" + extra)
    return load_configuration([str(path)])


@pytest.fixture
def compose(tmp_path: Path, apiserver: ApiServer) -> Iterator[Compose]:
    """Compose as `build_daemon` does: the Node's watch hands its reads to the follower, whose gate the node's stats
    source asks at each reading. Yields a function of the configuration's extra settings."""
    built: list[Composed] = []
    cgroups = CgroupReader(CgroupLayout(version=1, root=FIXTURE_V1))
    hugepages = hugepages_tree(tmp_path / "hugepages")

    def make(extra: str = "", kubelet: str = "") -> Composed:
        config = configuration(tmp_path, apiserver, extra, kubelet)
        log = LogCapture()
        followed = FollowedKubelet(config.evictd.kubelet_version, config.eviction.feature_gates, log=log,
                                   from_node=True)
        followed.report_start()
        cluster = build_cluster(config, NODE, Metrics(), log, False, DiscoveredPods(cgroups, str(tmp_path / "logs")),
                                on_kubelet=followed.node_read)
        aware = build_stats_source(config, cgroups, NODE, log=log, hugepage_aware=followed.hugepage_aware,
                                   hugepages_root=hugepages)
        plain = build_stats_source(config, cgroups, NODE, log=log, hugepage_aware=lambda: False,
                                   hugepages_root=hugepages)
        composed = Composed(followed, cluster, log, aware.source, plain.source)
        built.append(composed)
        assert cluster.node_watch is not None and cluster.node_watch is cluster.mode_watch
        cluster.node_watch.start()  # as Daemon.start does before the first cycle: one read, then the thread
        return composed

    yield make
    for composed in built:
        assert composed.cluster.node_watch is not None
        composed.cluster.node_watch.stop()
        assert composed.cluster.api is not None
        composed.cluster.api.close()


def patch_kubelet_version(apiserver: ApiServer, version: str) -> None:
    """A kubelet upgraded in place: its status update writes the new version into status.nodeInfo."""
    api_client = apiserver.api_client()
    try:
        k8s.CoreV1Api(api_client).patch_node_status(NODE, {"status": {"nodeInfo": {"kubeletVersion": version}}})
    finally:
        api_client.close()


def test_a_node_whose_kubelet_is_v1_37_subtracts_the_hugepages(apiserver: ApiServer, compose: Compose) -> None:
    apiserver.store.create_node(node_manifest(NODE, kubelet_version="v1.37.1"))
    composed = compose()
    semantics = composed.followed.semantics()
    assert (semantics.version_text, semantics.hugepage_aware) == ("v1.37", True)
    assert semantics.version_source == f"Node {NODE} nodeInfo.kubeletVersion v1.37.1"
    aware, plain = composed.read()
    assert plain - aware == 1 * GI
    [said] = composed.log.named("kubelet semantics")
    assert (said["version"], said["version_source"], said["hugepage_aware_eviction"]) == (
        "v1.37", f"Node {NODE} nodeInfo.kubeletVersion v1.37.1", True)


def test_a_node_whose_kubelet_is_v1_36_changes_nothing(apiserver: ApiServer, compose: Compose) -> None:
    apiserver.store.create_node(node_manifest(NODE, kubelet_version="v1.36.2"))
    composed = compose()
    semantics = composed.followed.semantics()
    assert (semantics.version_text, semantics.hugepage_aware) == ("v1.36", False)
    assert semantics.version_source == f"Node {NODE} nodeInfo.kubeletVersion v1.36.2"
    aware, plain = composed.read()
    assert aware == plain
    assert [s["version_source"] for s in composed.log.named("kubelet semantics")] == [semantics.version_source]


def test_a_kubelet_upgraded_in_place_is_followed_and_said_once(apiserver: ApiServer, compose: Compose) -> None:
    apiserver.store.create_node(node_manifest(NODE, kubelet_version="v1.36.2"))
    composed = compose()
    aware, plain = composed.read()
    assert aware == plain
    patch_kubelet_version(apiserver, "v1.37.0")
    wait_until(lambda: composed.followed.hugepage_aware(), timeout_s=5, what="the upgrade followed")
    aware, plain = composed.read()
    assert plain - aware == 1 * GI
    # Several more reads of the same Node: the change was said once.
    reads = len([r for r in apiserver.requests if r.path == f"/api/v1/nodes/{NODE}"])
    wait_until(lambda: len([r for r in apiserver.requests if r.path == f"/api/v1/nodes/{NODE}"]) >= reads + 3,
               timeout_s=5, what="more reads")
    [changed] = composed.log.named("kubelet semantics changed")
    assert (changed["previous_version"], changed["previous_hugepage_aware_eviction"]) == ("v1.36", False)
    assert (changed["version"], changed["hugepage_aware_eviction"]) == ("v1.37", True)
    assert changed["version_source"] == f"Node {NODE} nodeInfo.kubeletVersion v1.37.0"
    # An outage afterwards keeps what was read: the node's figure does not flip back.
    apiserver.faults.fail_next(10, code=503, method="GET", path=f"/api/v1/nodes/{NODE}$")
    wait_until(lambda: len([r for r in apiserver.requests if r.path == f"/api/v1/nodes/{NODE}"]) >= reads + 8,
               timeout_s=10, what="reads under the outage")
    assert composed.followed.hugepage_aware() and len(composed.log.named("kubelet semantics changed")) == 1


def test_the_setting_and_the_gate_win_over_the_node(apiserver: ApiServer, compose: Compose) -> None:
    apiserver.store.create_node(node_manifest(NODE, kubelet_version="v1.37.1"))
    set_older = compose("kubeletVersion: v1.36.2\n")
    assert set_older.followed.semantics().version_source == "kubeletVersion v1.36.2"
    aware, plain = set_older.read()
    assert aware == plain
    [said] = set_older.log.named("kubelet semantics")
    assert said["version_source"] == "kubeletVersion v1.36.2", "said at start, before any read of the Node"
    gate_off = compose(kubelet="featureGates: {HugepageAwareEviction: false}\n")
    semantics = gate_off.followed.semantics()
    assert (semantics.version_text, semantics.hugepage_aware) == ("v1.37", False)
    assert semantics.gate_source == "featureGates.HugepageAwareEviction: false"
    aware, plain = gate_off.read()
    assert aware == plain


def test_an_unreadable_node_keeps_v1_36_and_says_why(apiserver: ApiServer, compose: Compose) -> None:
    apiserver.store.create_node(node_manifest(NODE, kubelet_version="v1.37.1"))
    apiserver.faults.fail_next(1, code=500, method="GET", path=f"/api/v1/nodes/{NODE}$")
    composed = compose()
    [said] = composed.log.named("kubelet semantics")
    assert said["version"] == "v1.36" and said["hugepage_aware_eviction"] is False
    assert said["version_source"].startswith(f"evictd's default: kubeletVersion not set; Node {NODE} not read: ")
    wait_until(lambda: composed.followed.hugepage_aware(), timeout_s=5, what="the next read")
    assert composed.log.named("kubelet semantics changed")[0]["version"] == "v1.37"


def test_a_node_version_evictd_cannot_read_keeps_v1_36_with_a_warning_naming_it(
        apiserver: ApiServer, compose: Compose) -> None:
    apiserver.store.create_node(node_manifest(NODE, kubelet_version="v1.37.1"))
    patch_kubelet_version(apiserver, "v1.x-custom")
    composed = compose()
    semantics = composed.followed.semantics()
    assert (semantics.version_text, semantics.hugepage_aware) == ("v1.36", False)
    assert semantics.version_source == (f"evictd's default: kubeletVersion not set; Node {NODE} "
                                        "nodeInfo.kubeletVersion 'v1.x-custom' not understood")
    reads = len([r for r in apiserver.requests if r.path == f"/api/v1/nodes/{NODE}"])
    wait_until(lambda: len([r for r in apiserver.requests if r.path == f"/api/v1/nodes/{NODE}"]) >= reads + 3,
               timeout_s=5, what="more reads")
    [warned] = [fields for event, fields in composed.log.at("warning") if "not understood" in event]
    assert (warned["node"], warned["value"], warned["field"]) == (NODE, "v1.x-custom", "nodeInfo.kubeletVersion")

"""The kubelet release evictd follows and the HugepageAwareEviction gate (`evictd.core.followed`), with upstream's
vectors for the 1.37 figure (kubernetes PR #138127, pkg/kubelet/server/stats/summary_hugepages_test.go
TestAdjustForHugePages, v1.37: the node's AvailableBytes less the sum of its hugepages-* capacity, clamped at 0; all
seven of its cases but TestAdjustForHugePagesDoesNotMutateOriginal, which is about Go pointers)."""

from __future__ import annotations

import pytest

from evictd.core.errors import ConfigError
from evictd.core.followed import (
    FOLLOWED,
    HUGEPAGE_AWARE_EVICTION,
    NodeKubelet,
    hugepage_aware_available,
    kubelet_semantics,
    node_kubelet_kept,
    parse_kubelet_version,
)

GI = 1 << 30


@pytest.mark.parametrize(("version", "gates", "followed", "aware"), [
    ("", {}, FOLLOWED, False),                                   # nothing said: 1.36's semantics, gate off
    ("v1.36.2", {}, (1, 36), False),
    ("v1.37.0", {}, (1, 37), True),                              # beta, on by default from 1.37
    ("1.38", {}, (1, 38), True),
    ("v1.37.1-eks-4e8f2a1", {HUGEPAGE_AWARE_EVICTION: False}, (1, 37), False),  # the operator's opt-out wins
    ("", {HUGEPAGE_AWARE_EVICTION: True}, FOLLOWED, True),       # a 1.36 kubelet with the gate turned on
    ("v1.37.0", {"NodeSwap": False}, (1, 37), True),             # other gates change nothing
])
def test_the_gate_follows_the_kubelets_version_unless_its_feature_gates_say(
        version: str, gates: dict[str, bool], followed: tuple[int, int], aware: bool) -> None:
    semantics = kubelet_semantics(version, gates)
    assert (semantics.version, semantics.hugepage_aware) == (followed, aware)
    described = semantics.describe()
    assert f"v{followed[0]}.{followed[1]}" in described
    assert f"{HUGEPAGE_AWARE_EVICTION}: {'on' if aware else 'off'}" in described
    assert (f"featureGates.{HUGEPAGE_AWARE_EVICTION}" in described) == (HUGEPAGE_AWARE_EVICTION in gates)


NODE_137 = NodeKubelet("node-a", "v1.37.1")
NODE_136 = NodeKubelet("node-a", "v1.36.2-eks-1234")
UNREAD = NodeKubelet("node-a", unread="get nodes: 503 Service Unavailable")


@pytest.mark.parametrize(("setting", "gates", "node", "followed", "aware", "source"), [
    pytest.param("", {}, NODE_137, (1, 37), True, "Node node-a nodeInfo.kubeletVersion v1.37.1",
                 id="node-1.37-gate-on-by-default"),
    pytest.param("", {}, NODE_136, (1, 36), False, "Node node-a nodeInfo.kubeletVersion v1.36.2-eks-1234",
                 id="node-1.36-vendor-suffix"),
    pytest.param("v1.36.2", {}, NODE_137, (1, 36), False, "kubeletVersion v1.36.2",
                 id="setting-wins-over-node"),
    pytest.param("v1.37.0", {}, NODE_136, (1, 37), True, "kubeletVersion v1.37.0",
                 id="setting-wins-over-older-node"),
    pytest.param("", {HUGEPAGE_AWARE_EVICTION: False}, NODE_137, (1, 37), False,
                 "Node node-a nodeInfo.kubeletVersion v1.37.1", id="gate-wins-over-node-version"),
    pytest.param("", {HUGEPAGE_AWARE_EVICTION: True}, NODE_136, (1, 36), True,
                 "Node node-a nodeInfo.kubeletVersion v1.36.2-eks-1234", id="gate-on-for-a-1.36-node"),
    pytest.param("", {}, UNREAD, FOLLOWED, False,
                 "evictd's default: kubeletVersion not set; Node node-a not read: get nodes: 503 Service Unavailable",
                 id="node-unreadable"),
    pytest.param("", {}, NodeKubelet("node-a"), FOLLOWED, False,
                 "evictd's default: kubeletVersion not set; Node node-a has no nodeInfo.kubeletVersion",
                 id="node-without-version"),
    pytest.param("", {}, NodeKubelet("node-a", "   "), FOLLOWED, False,
                 "evictd's default: kubeletVersion not set; Node node-a has no nodeInfo.kubeletVersion",
                 id="node-blank-version"),
    pytest.param("", {}, NodeKubelet("node-a", "v1.x.0"), FOLLOWED, False,
                 "evictd's default: kubeletVersion not set; Node node-a nodeInfo.kubeletVersion 'v1.x.0' not "
                 "understood", id="node-version-not-understood"),
    pytest.param("", {}, None, FOLLOWED, False, "evictd's default: kubeletVersion not set", id="no-node-looked-at"),
])
def test_the_version_followed_is_the_settings_else_the_nodes_else_the_default(
        setting: str, gates: dict[str, bool], node: NodeKubelet | None, followed: tuple[int, int], aware: bool,
        source: str) -> None:
    semantics = kubelet_semantics(setting, gates, node)
    assert (semantics.version, semantics.hugepage_aware, semantics.version_source) == (followed, aware, source)
    assert semantics.ignored_node_version == ("v1.x.0" if "not understood" in source else "")
    assert f"({source})" in semantics.describe()


def test_without_a_node_the_source_says_why_none_was_looked_at() -> None:
    why = "check-config reads no Node"
    semantics = kubelet_semantics("", {}, None, no_node=why)
    assert (semantics.version, semantics.version_source) == (FOLLOWED, f"evictd's default: kubeletVersion not set; {why}")
    assert kubelet_semantics("v1.37.0", {}, None, no_node=why).version_source == "kubeletVersion v1.37.0"


def test_a_bad_setting_is_an_error_even_beside_a_node_that_says_its_version() -> None:
    with pytest.raises(ConfigError) as caught:
        kubelet_semantics("v1.x", {}, NODE_137)
    assert "kubeletVersion" in str(caught.value) and "v1.x" in str(caught.value)


@pytest.mark.parametrize(("last", "read", "kept"), [
    pytest.param(None, NODE_137, NODE_137, id="first-read"),
    pytest.param(None, UNREAD, UNREAD, id="first-read-fails"),
    pytest.param(NODE_137, UNREAD, NODE_137, id="outage-keeps-the-last-version"),
    pytest.param(NODE_136, NODE_137, NODE_137, id="kubelet-upgraded-in-place"),
    pytest.param(UNREAD, NODE_136, NODE_136, id="readable-again"),
    pytest.param(UNREAD, NodeKubelet("node-a", unread="timed out"), NodeKubelet("node-a", unread="timed out"),
                 id="still-unreadable-says-the-latest-reason"),
    pytest.param(NODE_137, NodeKubelet("node-a"), NodeKubelet("node-a"), id="version-gone-is-followed"),
])
def test_a_failed_read_keeps_the_last_word_of_the_node(last: NodeKubelet | None, read: NodeKubelet,
                                                       kept: NodeKubelet) -> None:
    assert node_kubelet_kept(last, read) == kept


@pytest.mark.parametrize("text", ["1", "one.37", "v1.37.x", "1.37.0.0"])
def test_an_unreadable_version_is_an_error_naming_key_value_and_what_is_accepted(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_kubelet_version(text)
    message = str(caught.value)
    assert "kubeletVersion" in message and text in message and "v1.37.0" in message


@pytest.mark.parametrize(("available", "hugepages", "expected"), [
    (None, 0, None),                     # upstream "nil AvailableBytes"
    (None, 4 * GI, None),                # v1.37 "nil memory stats": no figure stays no figure, whatever the pages
    (10000, 0, 10000),                   # v1.37 "nil node": no hugepage figure (evictd reads sysfs, not the
                                         # Node; an unreadable pool is a recorded problem and counts 0): unchanged
    (10000, 0, 10000),                   # "no hugepages in capacity"
    (10 * GI, 4 * GI, 6 * GI),           # "hugepages subtracted from available"
    (10 * GI, 2 * GI + 1 * GI, 7 * GI),  # "multiple hugepage sizes": 1Gi pages 2Gi, 2Mi pages 1Gi
    (2 * GI, 4 * GI, 0),                 # "hugepages exceed available clamps to zero"
])
def test_upstream_vectors_of_the_hugepage_aware_figure(available: int | None, hugepages: int,
                                                       expected: int | None) -> None:
    assert hugepage_aware_available(available, hugepages) == expected

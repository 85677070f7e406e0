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
    hugepage_aware_available,
    kubelet_semantics,
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

"""The configuration lints (`evictd.core.config_lints`) on the cases the fleet corpus does not hold."""

from __future__ import annotations

from typing import Any

from evictd.core.config_lints import (
    NO_HARD_THRESHOLD,
    PADDED_BY_HUGEPAGES,
    SOFT_MARGIN_NOT_RESERVED,
    SOFT_NEVER_FIRES,
    allocatable_memory,
    config_lints,
    hugepage_padding_lints,
)
from evictd.core.kubelet_config import eviction_settings, with_stall_settings
from evictd.core.reserved_memory import node_reservation

GI = 1 << 30
MI = 1 << 20


def settings(**document: Any) -> Any:
    return eviction_settings(document)


def codes(lints: list[Any]) -> list[tuple[str, str]]:
    return [(lint.code, lint.key) for lint in lints]


def test_a_soft_share_sinks_under_a_fixed_hard_threshold_on_small_nodes() -> None:
    config = settings(evictionHard={"memory.available": "1Gi", "nodefs.available": "10%"},
                      evictionSoft={"memory.available": "10%"}, evictionSoftGracePeriod={"memory.available": "1m"})
    lints = config_lints(config)
    assert codes(lints) == [(SOFT_NEVER_FIRES, "evictionSoft.memory.available"),
                            (SOFT_MARGIN_NOT_RESERVED, "evictionSoft.memory.available")]
    assert "on nodes of 10 GiB and less" in lints[0].detail and "on nodes of 10 GiB and more" in lints[1].detail
    assert codes(config_lints(config, 16 * GI)) == [(SOFT_MARGIN_NOT_RESERVED, "evictionSoft.memory.available")]
    assert codes(config_lints(config, 8 * GI)) == [(SOFT_NEVER_FIRES, "evictionSoft.memory.available")]


def test_inode_thresholds_are_counts_and_equal_ones_never_let_the_soft_fire() -> None:
    config = settings(evictionHard={"memory.available": "100Mi", "nodefs.available": "10%",
                                    "nodefs.inodesFree": "100k"},
                      evictionSoft={"nodefs.inodesFree": "5%"}, evictionSoftGracePeriod={"nodefs.inodesFree": "1m"})
    [lint] = config_lints(config)
    assert (lint.code, lint.value) == (SOFT_NEVER_FIRES, "soft 5%, hard 100k")
    # floor(C x float32(5%)) stays at or under 100000 up to C = 2000019: an inode count, not GiB.
    assert "on nodes of 2000019 and less" in lint.detail
    same = settings(evictionHard={"memory.available": "500Mi", "nodefs.available": "10%"},
                    evictionSoft={"memory.available": "500Mi"}, evictionSoftGracePeriod={"memory.available": "1m"})
    assert codes(config_lints(same)) == [(SOFT_NEVER_FIRES, "evictionSoft.memory.available")]


def test_evictds_stall_thresholds_are_not_linted_and_disabled_hard_thresholds_are_missing() -> None:
    config = with_stall_settings(
        settings(evictionHard={"memory.available": "0%", "nodefs.available": "10%"}),
        {"stallEvictionHard": {"evictd.io/memory.stall.some": "40%"},
         "stallEvictionSoft": {"evictd.io/memory.stall.some": "20%"},
         "stallEvictionSoftGracePeriod": {"evictd.io/memory.stall.some": "30s"}})
    [lint] = config_lints(config)
    assert (lint.code, lint.key, lint.value) == (NO_HARD_THRESHOLD, "evictionHard.memory.available",
                                                 "'0%' (disabled)")
    assert "memory.available: 100Mi" in lint.fix


def test_the_padding_warning_needs_the_gate_hugepages_and_a_threshold_at_or_above_them() -> None:
    config = settings(evictionHard={"memory.available": "1124Mi", "nodefs.available": "10%"})
    assert hugepage_padding_lints(config, GI, hugepage_aware=False) == []  # 1.36: the padding is needed
    assert hugepage_padding_lints(config, 0, hugepage_aware=True) == []
    assert hugepage_padding_lints(config, 2 * GI, hugepage_aware=True) == []  # under the total: not padding
    [lint] = hugepage_padding_lints(config, GI, hugepage_aware=True)
    assert (lint.code, lint.key, lint.value) == (PADDED_BY_HUGEPAGES, "evictionHard.memory.available", "1124Mi")
    assert "evictionHard.memory.available: 100Mi" in lint.fix
    share = settings(evictionHard={"memory.available": "10%"})
    assert hugepage_padding_lints(share, GI, hugepage_aware=True) == []  # a share needs the capacity
    assert codes(hugepage_padding_lints(share, GI, hugepage_aware=True, memory_capacity=16 * GI)) == [
        (PADDED_BY_HUGEPAGES, "evictionHard.memory.available")]


def test_allocatable_memory_subtracts_reservations_the_hard_threshold_and_hugepages_clamped_at_zero() -> None:
    document = {"evictionHard": {"memory.available": "5%"}, "systemReserved": {"memory": "1Gi"},
                "kubeReserved": {"memory": "512Mi"}}
    figure = allocatable_memory(eviction_settings(document), node_reservation(document), 16 * GI, 2 * GI)
    assert figure.hard_eviction_bytes == int(16 * GI * float.fromhex("0x1.99999a0000000p-5"))  # float32(0.05)
    assert figure.bytes == 16 * GI - GI - 512 * MI - figure.hard_eviction_bytes - 2 * GI
    assert allocatable_memory(eviction_settings(document), node_reservation(document), GI).bytes == 0

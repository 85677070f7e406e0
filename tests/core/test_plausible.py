"""`plausible_summary`: figures no node can have are unknown, each named with its bound (issue #43, item 3)."""

from __future__ import annotations

import pytest

from builders import Gi, Mi, pod, pod_stats, summary
from evictd.core.plausible import IMPOSSIBLE, MEMORY_SLACK, memory_bound, plausible_summary
from evictd.core.signals import Signal
from evictd.core.summary import signal_observations
from evictd.core.summary_parser import summary_from_dict

CAPACITY = 16 * Gi


def test_a_node_working_set_three_times_the_machine_is_unknown_and_named() -> None:
    # The 2026 cAdvisor cgroup v2 bug: the kubelet trusts it and reports MemoryPressure.
    got, refused = plausible_summary(summary_from_dict(summary(memory=0, memory_ws=3 * CAPACITY)), CAPACITY)
    assert Signal.MEMORY_AVAILABLE not in signal_observations(got)
    [refusal] = refused
    assert (refusal.field, refusal.value, refusal.bound, refusal.kind) == (
        "node.memory.workingSetBytes", 3 * CAPACITY, memory_bound(CAPACITY), IMPOSSIBLE)


def test_the_slack_is_allowed() -> None:
    within = int(CAPACITY * (1 + MEMORY_SLACK))
    original = summary_from_dict(summary(memory=0, memory_ws=within))
    assert plausible_summary(original, CAPACITY) == (original, ())


def test_a_pod_working_set_above_the_machine_is_unknown_the_pod_kept() -> None:
    doc = summary(pods=[pod_stats(pod("liar"), memory=5 * CAPACITY), pod_stats(pod("web"), memory=Gi)])
    got, refused = plausible_summary(summary_from_dict(doc), CAPACITY)
    liar, web = got.pods
    assert liar.memory is not None and liar.memory.working_set_bytes is None
    assert liar.containers[0].memory is not None and liar.containers[0].memory.working_set_bytes is None
    assert web.memory is not None and web.memory.working_set_bytes == Gi
    assert [r.field for r in refused] == ["pods[default/liar].memory.workingSetBytes",
                                          "pods[default/liar].containers[app].memory.workingSetBytes"]
    assert {r.family for r in refused} == {"pods.memory.workingSetBytes", "pods.containers.memory.workingSetBytes"}


@pytest.mark.parametrize(("doc", "field"), [
    pytest.param(summary(memory=CAPACITY * 2, memory_ws=Gi), "node.memory.availableBytes", id="memory-available"),
    pytest.param(summary(nodefs={"availableBytes": 200 * Gi, "capacityBytes": 100 * Gi}), "node.fs.availableBytes", id="fs-available"),
    pytest.param(summary(nodefs={"inodesFree": 30, "inodes": 20}), "node.fs.inodesFree", id="inodes"),
])
def test_an_available_figure_above_its_capacity_is_unknown(doc: dict[str, object], field: str) -> None:
    _, refused = plausible_summary(summary_from_dict(doc), CAPACITY)
    assert field in [r.field for r in refused]


def test_without_a_known_capacity_memory_is_not_bounded() -> None:
    original = summary_from_dict(summary(memory=0, memory_ws=3 * CAPACITY))
    assert plausible_summary(original, None) == (original, ())


def test_a_pod_available_figure_is_never_read_so_never_bounded() -> None:
    doc = summary(pods=[pod_stats(pod("web"), memory=Mi)])
    doc["pods"][0]["memory"]["availableBytes"] = 3 * CAPACITY
    original = summary_from_dict(doc)
    assert plausible_summary(original, CAPACITY) == (original, ())


DISK = 100 * Gi
WRAPPED = 2**63 - 1  # the largest a Summary decodes (the decoder refuses a uint64 wrap, 2^64 - 1, as invalid)


def test_a_pods_disk_figure_above_the_largest_filesystem_is_unknown_the_others_kept() -> None:
    """The kubelet trusts these: a writable layer of 8 EiB evicts its pod for its ephemeral-storage limit
    (or ranks it first for disk pressure). Bounded by the largest filesystem the Summary reports."""
    doc = summary(nodefs={"availableBytes": 50 * Gi, "capacityBytes": DISK, "inodes": 1000, "inodesFree": 500},
                  pods=[pod_stats(pod("liar"), rootfs=WRAPPED, logs=Mi, rootfs_inodes=5000, ephemeral=WRAPPED,
                                  volumes={"cache": 2 * DISK}),
                        pod_stats(pod("web"), rootfs=DISK, logs=Mi, volumes={"cache": Gi}, ephemeral=DISK + Gi)])
    got, refused = plausible_summary(summary_from_dict(doc), CAPACITY)
    liar, web = got.pods
    [app] = liar.containers
    assert app.rootfs is not None and (app.rootfs.used_bytes, app.rootfs.inodes_used) == (None, None)
    assert app.logs is not None and app.logs.used_bytes == Mi
    assert [v.used_bytes for v in liar.volume_stats] == [None]
    assert liar.ephemeral_storage is not None and liar.ephemeral_storage.used_bytes is None
    assert [(r.field, r.bound) for r in refused] == [
        ("pods[default/liar].containers[app].rootfs.usedBytes", DISK),
        ("pods[default/liar].containers[app].rootfs.inodesUsed", 1000),
        ("pods[default/liar].volume[cache].usedBytes", DISK),
        ("pods[default/liar].ephemeral-storage.usedBytes", DISK),
        ("pods[default/web].ephemeral-storage.usedBytes", DISK),
    ]
    assert web.containers[0].rootfs is not None and web.containers[0].rootfs.used_bytes == DISK  # at the bound: kept
    assert {r.family for r in refused} >= {"pods.containers.rootfs.usedBytes", "pods.ephemeral-storage.usedBytes"}


def test_a_memory_backed_volume_may_be_as_large_as_the_memory_bound() -> None:
    doc = summary(nodefs={"capacityBytes": Gi}, pods=[pod_stats(pod("tmp"), volumes={"shm": 8 * Gi})])
    original = summary_from_dict(doc)
    assert plausible_summary(original, CAPACITY) == (original, ())


def test_without_a_filesystem_capacity_disk_figures_are_not_bounded() -> None:
    doc = summary(pods=[pod_stats(pod("liar"), rootfs=WRAPPED)])
    doc["node"].pop("fs")
    doc["node"].pop("runtime")
    original = summary_from_dict(doc)
    assert plausible_summary(original, CAPACITY) == (original, ())

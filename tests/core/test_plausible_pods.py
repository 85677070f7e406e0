"""`plausible_summary` on pods: the comparison made first (`_pod_fits`) passes on untouched exactly the pods the full
check (`_pod`, which names each refused figure) would pass on, for every figure at, above and without its bound."""

from __future__ import annotations

import itertools

import pytest

from evictd.core import plausible
from evictd.core.plausible import memory_bound, plausible_summary
from evictd.core.summary import (
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodReference,
    PodStats,
    Summary,
    VolumeStats,
)

CAPACITY = 1 << 30
BOUND = memory_bound(CAPACITY)
DISK_BYTES, DISK_INODES = 1 << 40, 1 << 20


def node(inodes: int | None) -> NodeStats:
    return NodeStats(node_name="n", fs=FsStats(available_bytes=0, capacity_bytes=DISK_BYTES, inodes_free=0,
                                               inodes=inodes))


def pods() -> list[PodStats]:
    """One pod per (place, figure, value): each figure at its bound, one above it, or absent; the others sound."""
    found = []
    values = {"at": 0, "above": 1, "absent": None}
    for n, (place, which, (label, over)) in enumerate(itertools.product(
            ["memory", "container.memory", "container.rootfs", "container.logs", "volume", "ephemeral"],
            [0, 1], values.items())):
        def figure(bound: int, wanted: bool, over: int | None = over) -> int | None:
            return (None if over is None else bound + over) if wanted else 1

        memory = MemoryStats(working_set_bytes=figure(BOUND, which == 0), usage_bytes=figure(BOUND, which == 1))
        disk = FsStats(used_bytes=figure(DISK_BYTES, which == 0), inodes_used=figure(DISK_INODES, which == 1))
        sound_fs = FsStats(used_bytes=1, inodes_used=1)
        found.append(PodStats(
            pod_ref=PodReference(name=f"p{n}-{place}-{which}-{label}", namespace="ns", uid=str(n)),
            memory=memory if place == "memory" else MemoryStats(working_set_bytes=1, usage_bytes=1),
            containers=(ContainerStats(
                name="c",
                memory=memory if place == "container.memory" else None,
                rootfs=disk if place == "container.rootfs" else sound_fs,
                logs=disk if place == "container.logs" else None),),
            volume_stats=(VolumeStats(name="v", used_bytes=disk.used_bytes, inodes_used=disk.inodes_used)
                          if place == "volume" else VolumeStats(name="v", used_bytes=1),),
            ephemeral_storage=disk if place == "ephemeral" else sound_fs,
        ))
    return found


@pytest.mark.parametrize("capacity", [CAPACITY, None])
@pytest.mark.parametrize("inodes", [DISK_INODES, None])
@pytest.mark.parametrize("with_disk", [True, False])
def test_the_pods_passed_on_and_refused_are_the_full_checks(capacity: int | None, inodes: int | None,
                                                            with_disk: bool) -> None:
    original = Summary(node=node(inodes) if with_disk else NodeStats(node_name="n"), pods=tuple(pods()))
    got, refused = plausible_summary(original, capacity)
    # The full check of every pod, as made before the comparison came first.
    bound = memory_bound(capacity) if capacity else None
    disk = plausible._disk_bounds((original.node.fs, None, None), bound)
    expected_refused: list[plausible.Refusal] = []
    expected = tuple(plausible._pod(pod, bound, disk, expected_refused) for pod in original.pods)
    assert refused == tuple(expected_refused)
    assert got.pods == expected
    assert [new is old for new, old in zip(got.pods, original.pods, strict=True)] == [
        new is old for new, old in zip(expected, original.pods, strict=True)]
    if capacity is not None or with_disk:
        assert expected_refused  # the cases do refuse something
    if not expected_refused:
        assert got is original

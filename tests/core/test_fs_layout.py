"""Tests of evictd.core.fs_layout: the one table of what a filesystem layout means (KUBELET_SPEC §4.2, §8, §9.4,
§12). Expectations are upstream's buildSignalToNodeReclaimFuncs and UpdateContainerFsThresholds, per layout."""

from __future__ import annotations

import pytest

from evictd.core.fs_layout import MEANINGS, FsLayout, ReclaimAction, meaning_of
from evictd.core.signals import Ranking, Signal, spec_of

SINGLE = FsLayout()
IMAGEFS = FsLayout(dedicated_imagefs=True)
SPLIT = FsLayout(dedicated_imagefs=True, split_containerfs=True)
SPLIT_WITHOUT_IMAGEFS = FsLayout(split_containerfs=True)  # cannot happen in practice; the kubelet copes
DISK_SIGNALS = {s for s in Signal if spec_of(s).ranking is Ranking.DISK}
CONTAINERS, IMAGES = ReclaimAction.CONTAINER_GC, ReclaimAction.IMAGE_GC


def test_every_layout_has_a_row_covering_every_disk_signal() -> None:
    assert set(MEANINGS) == {SINGLE, IMAGEFS, SPLIT, SPLIT_WITHOUT_IMAGEFS}
    for meaning in MEANINGS.values():
        assert set(meaning.rank_fs_stats) == DISK_SIGNALS
        assert set(meaning.reclaim_actions) == DISK_SIGNALS
        assert set(meaning.containerfs_sources) <= {Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE}


@pytest.mark.parametrize(
    ("layout", "signal", "expected"),
    [
        # One filesystem: every disk signal removes dead containers, then unused images.
        (SINGLE, Signal.NODEFS_INODES_FREE, (CONTAINERS, IMAGES)),
        (SINGLE, Signal.CONTAINERFS_AVAILABLE, (CONTAINERS, IMAGES)),
        (SPLIT_WITHOUT_IMAGEFS, Signal.IMAGEFS_AVAILABLE, (CONTAINERS, IMAGES)),
        # A dedicated imagefs: nodefs pressure has nothing to collect; imagefs and containerfs collect both.
        (IMAGEFS, Signal.NODEFS_AVAILABLE, ()),
        (IMAGEFS, Signal.IMAGEFS_INODES_FREE, (CONTAINERS, IMAGES)),
        (IMAGEFS, Signal.CONTAINERFS_AVAILABLE, (CONTAINERS, IMAGES)),
        # Split: containers free nodefs and containerfs, images free imagefs.
        (SPLIT, Signal.NODEFS_AVAILABLE, (CONTAINERS,)),
        (SPLIT, Signal.CONTAINERFS_INODES_FREE, (CONTAINERS,)),
        (SPLIT, Signal.IMAGEFS_AVAILABLE, (IMAGES,)),
    ],
    ids=lambda v: v.value if isinstance(v, Signal) else None,
)
def test_reclaim_actions_per_layout(layout: FsLayout, signal: Signal, expected: tuple[ReclaimAction, ...]) -> None:
    assert meaning_of(layout).reclaim_actions[signal] == expected


def test_memory_and_pid_signals_have_no_node_level_reclaim() -> None:
    for meaning in MEANINGS.values():
        assert not any(signal in meaning.reclaim_actions for signal in Signal if signal not in DISK_SIGNALS)


@pytest.mark.parametrize(
    ("layout", "source", "rootfs_counts"),
    [(SINGLE, "nodefs", True), (IMAGEFS, "imagefs", False), (SPLIT, "nodefs", False),
     (SPLIT_WITHOUT_IMAGEFS, None, True)],
    ids=["single", "imagefs", "split", "split-without-imagefs"],
)
def test_containerfs_sources_and_container_rootfs_per_layout(
    layout: FsLayout, source: str | None, rootfs_counts: bool
) -> None:
    meaning = meaning_of(layout)
    expected = {} if source is None else {
        Signal.CONTAINERFS_AVAILABLE: Signal(f"{source}.available"),
        Signal.CONTAINERFS_INODES_FREE: Signal(f"{source}.inodesFree"),
    }
    assert dict(meaning.containerfs_sources) == expected
    # The writable layer counts against a container's ephemeral-storage limit only without a dedicated imagefs.
    assert meaning.container_rootfs_counts is rootfs_counts

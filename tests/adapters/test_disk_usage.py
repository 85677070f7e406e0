"""Pod volume and log disk usage against real filesystems, checked with coreutils ``du``.

The counting rule is upstream's ``fs.DiskUsage``: allocated blocks (``st_blocks * 512``) and entries,
directories included, hard links once, mount points neither counted nor entered; ``du -s -x -B1`` and
``du -s -x --inodes`` count the same way, so they are the independent reference here. Directory mtimes
are set into the past where a test needs the cache to trust them (fresh mtimes are "racy" and re-listed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clocks import ManualClock
from deep_tree import PAST_PATH_MAX_LEVELS, nest, reachable_levels
from evictd.adapters.disk_usage import AGE_JITTER_FRACTION, DirUsage, DiskUsageCache, Walk, WalkBudget
from evictd.adapters.pod_dirs import EMPTY_DIR_PLUGIN_DIR, container_log_dirs, volume_dirs
from evictd.core.errors import SampleError

POD_UID = "5d3c1e2a-7b9f-4c61-a0d2-6e8f9b1c2d3e"
NAMESPACE = "shop"
POD_NAME = "cart-7d9f"
HOUR_NS = 3600 * 1_000_000_000
MAX_AGE_S = 30.0


def du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-s", "-x", "-B1", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def du_apparent_bytes(path: Path) -> int:
    out = subprocess.run(
        ["du", "-s", "-x", "-B1", "--apparent-size", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[0])


def du_inodes(path: Path) -> int:
    out = subprocess.run(["du", "-s", "-x", "--inodes", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def volume_usage(cache: DiskUsageCache, kubelet_root: str, pod_uid: str) -> dict[str, DirUsage]:
    """Each disk-backed emptyDir volume of a pod measured through `cache`, keyed by name (as the pod walker)."""
    measured = {name: cache.usage(path) for name, path in volume_dirs(kubelet_root, pod_uid)}
    return {name: usage for name, usage in measured.items() if usage is not None}


def log_usage(cache: DiskUsageCache, pod_logs_dir: str, namespace: str, name: str, uid: str) -> DirUsage | None:
    """A pod's whole log folder ``<pod_logs_dir>/<namespace>_<name>_<uid>/`` measured through `cache`."""
    return cache.usage(os.path.join(pod_logs_dir, f"{namespace}_{name}_{uid}"))


def assert_matches_du(measured: DirUsage | None, path: Path) -> None:
    assert measured is not None
    assert (measured.used_bytes, measured.inodes_used) == (du_bytes(path), du_inodes(path))


def write(path: Path, size_bytes: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x17" * size_bytes)
    return path


def set_old_mtime(path: Path, hours_ago: int) -> None:
    """Put a directory's mtime `hours_ago` hours in the past (distinct values give distinct mtimes)."""
    stamp = time.time_ns() - hours_ago * HOUR_NS
    os.utime(path, ns=(stamp, stamp), follow_symlinks=False)


def age_all_dirs(root: Path, hours_ago: int = 10) -> None:
    for folder, _, _ in os.walk(root):
        set_old_mtime(Path(folder), hours_ago)


class RecordingScandir:
    """os.scandir that remembers which directories were listed."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, path: str) -> contextlib.AbstractContextManager[Iterator[os.DirEntry[str]]]:
        self.paths.append(path)
        return os.scandir(path)

    def take(self) -> list[str]:
        """Return the listed paths, sorted, and start recording afresh."""
        taken = sorted(self.paths)
        self.paths.clear()
        return taken


# --------------------------------------------------------------------------------------------------
# A kubelet root on ext4


def build_pod(ext4_mount: Path, mount_tmpfs_at: Callable[[Path], Path]) -> tuple[Path, Path]:
    """Create a kubelet root and a pod logs folder for POD_UID on the ext4 mount; return both roots."""
    kubelet = ext4_mount / "kubelet"
    plugin = kubelet / "pods" / POD_UID / "volumes" / EMPTY_DIR_PLUGIN_DIR

    cache = plugin / "cache"
    write(cache / "data.bin", 300_000)
    write(cache / "sub" / "deeper" / "small", 5_000)
    write(cache / "sub" / "empty", 0)
    # A 10 MiB sparse file with one 4 KiB block written: blocks, not apparent size, are counted.
    with open(cache / "sparse", "wb") as sparse:
        sparse.seek(5 * 1024 * 1024)
        sparse.write(b"\x01" * 4096)
        sparse.truncate(10 * 1024 * 1024)
    # One inode under three names: counted once.
    write(cache / "linked", 50_000)
    os.link(cache / "linked", cache / "sub" / "linked-again")
    os.link(cache / "linked", cache / "linked-third")
    os.symlink("data.bin", cache / "alias")
    # Something mounted inside a volume is another filesystem: neither counted nor entered.
    nested = cache / "nested-mount"
    nested.mkdir()
    mount_tmpfs_at(nested)
    write(nested / "not-counted", 1_000_000)

    (plugin / "scratch").mkdir()

    # A memory-backed emptyDir is a tmpfs on the volume folder: not node disk, skipped.
    memory = plugin / "memory"
    memory.mkdir()
    mount_tmpfs_at(memory)
    write(memory / "in-ram", 200_000)

    write(plugin / "stray-file", 10)  # not a volume folder

    logs = ext4_mount / "pod-logs"
    pod_logs = logs / f"{NAMESPACE}_{POD_NAME}_{POD_UID}"
    write(pod_logs / "app" / "0.log", 70_000)
    write(pod_logs / "app" / "1.log.20240101-000000", 1_000)
    write(pod_logs / "sidecar" / "0.log", 3_000)
    return kubelet, logs


def test_volume_usage_counts_disk_backed_empty_dirs_like_du(
    ext4_mount: Path, mount_tmpfs_at: Callable[[Path], Path]
) -> None:
    kubelet, _ = build_pod(ext4_mount, mount_tmpfs_at)
    plugin = kubelet / "pods" / POD_UID / "volumes" / EMPTY_DIR_PLUGIN_DIR

    usage = volume_usage(DiskUsageCache(), str(kubelet), POD_UID)

    assert sorted(usage) == ["cache", "scratch"]
    assert_matches_du(usage["cache"], plugin / "cache")
    assert_matches_du(usage["scratch"], plugin / "scratch")
    # By hand, as a check on du itself: an empty directory is one inode of its own blocks.
    assert usage["scratch"].inodes_used == 1
    assert usage["scratch"].used_bytes == os.stat(plugin / "scratch").st_blocks * 512
    # cache/: 4 dirs (cache, sub, deeper, nested-mount excluded) -> 3 dirs + data.bin, small, empty,
    # sparse, alias, and the linked inode once.
    assert usage["cache"].inodes_used == 3 + 6
    # The sparse file's 10 MiB of apparent size are not counted.
    assert usage["cache"].used_bytes < 1024 * 1024 < du_apparent_bytes(plugin / "cache")


def test_log_usage_counts_the_pod_log_folder_like_du(ext4_mount: Path, mount_tmpfs_at: Callable[[Path], Path]) -> None:
    _, logs = build_pod(ext4_mount, mount_tmpfs_at)
    measured = log_usage(DiskUsageCache(), str(logs), NAMESPACE, POD_NAME, POD_UID)
    assert_matches_du(measured, logs / f"{NAMESPACE}_{POD_NAME}_{POD_UID}")
    assert measured is not None and measured.inodes_used == 6  # folder, 2 container folders, 3 logs


def test_missing_folders_give_no_entries(ext4_mount: Path) -> None:
    cache = DiskUsageCache()
    assert volume_usage(cache, str(ext4_mount / "kubelet"), POD_UID) == {}
    assert log_usage(cache, str(ext4_mount / "logs"), NAMESPACE, POD_NAME, POD_UID) is None
    assert cache.usage(str(ext4_mount / "nothing")) is None
    assert cache.cached_paths() == frozenset()


def test_unreadable_folders_are_sample_errors(ext4_mount: Path) -> None:
    # Root reads everything, so "unreadable" is made with symlink loops (ELOOP).
    pod_volumes = ext4_mount / "kubelet" / "pods" / POD_UID / "volumes"
    pod_volumes.parent.mkdir(parents=True)
    os.symlink("volumes", pod_volumes)
    os.symlink("loop", ext4_mount / "loop")
    cache = DiskUsageCache()

    with pytest.raises(SampleError) as volume_error:
        volume_usage(cache, str(ext4_mount / "kubelet"), POD_UID)
    assert volume_error.value.source == str(pod_volumes / EMPTY_DIR_PLUGIN_DIR)
    assert volume_error.value.reason == "Too many levels of symbolic links"

    with pytest.raises(SampleError) as log_error:
        container_log_dirs(str(ext4_mount / "loop"), NAMESPACE, POD_NAME, POD_UID)
    assert log_error.value.source == str(ext4_mount / "loop" / f"{NAMESPACE}_{POD_NAME}_{POD_UID}")


def test_a_subdirectory_that_cannot_be_listed_is_left_out_and_the_tree_measured_afresh(ext4_mount: Path) -> None:
    """As du does: the error is reported, the rest counted (upstream's walk would give up on the whole tree)."""
    root = ext4_mount / "vol"
    write(root / "ok" / "f", 100)
    write(root / "locked" / "g", 100)
    fail_on = {str(root / "locked")}

    def scandir(path: str) -> contextlib.AbstractContextManager[Iterator[os.DirEntry[str]]]:
        if path in fail_on:
            raise PermissionError(13, "Permission denied", path)
        return os.scandir(path)

    cache = DiskUsageCache(scandir=scandir)
    measured = cache.usage(str(root))
    assert measured is not None and measured.unreadable == f"{root / 'locked'}: Permission denied"
    locked_file = root / "locked" / "g"
    assert (measured.used_bytes, measured.inodes_used) == (
        du_bytes(root) - locked_file.stat().st_blocks * 512, du_inodes(root) - 1), "all but the locked folder's files"
    assert cache.cached_paths() == frozenset(), "not cached: the next walk reads it all again"

    fail_on.clear()
    whole = cache.usage(str(root))
    assert_matches_du(whole, root)
    assert whole is not None and whole.unreadable is None


def test_a_tree_nested_past_path_max_counts_what_a_path_can_reach(ext4_mount: Path) -> None:
    """Issue #25: 2,100 nested folders made every walk of the volume fail with "File name too long"."""
    root = ext4_mount / "vol"
    data = write(root / "data.bin", 5 * 1024 * 1024)
    nest(root, leaf_bytes=4096)
    reachable = reachable_levels(root)
    assert 1000 < reachable < PAST_PATH_MAX_LEVELS
    cache = DiskUsageCache()
    for _ in range(2):  # and again: the error is not hidden by the cache
        measured = cache.usage(str(root))
        assert measured is not None and measured.unreadable is not None
        assert measured.unreadable.endswith(": File name too long")
        # The root, data.bin and every folder a path can name (each of one block); nothing below them.
        level_bytes = (root / "d").stat().st_blocks * 512
        assert measured.inodes_used == 2 + reachable
        assert measured.used_bytes == (root.stat().st_blocks + data.stat().st_blocks) * 512 + reachable * level_bytes
        assert measured.used_bytes < du_bytes(root), "du reaches the whole chain (it walks by open folders)"
    assert cache.cached_paths() == frozenset()


@pytest.mark.parametrize("bad_uid", ["", ".", "..", "../other-pod", "a/b"])
def test_a_pod_uid_must_be_one_path_component(bad_uid: str, ext4_mount: Path) -> None:
    with pytest.raises(SampleError):
        volume_usage(DiskUsageCache(), str(ext4_mount), bad_uid)
    with pytest.raises(SampleError):
        container_log_dirs(str(ext4_mount), NAMESPACE, POD_NAME, bad_uid)


# --------------------------------------------------------------------------------------------------
# The cache


def test_only_changed_directories_are_listed_again(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    write(root / "top-file", 2_000)
    write(root / "a" / "b" / "file-b", 10_000)
    write(root / "a" / "file-a", 3_000)
    write(root / "c" / "file-c", 40_000)
    age_all_dirs(root)
    clock = ManualClock()
    listed = RecordingScandir()
    cache = DiskUsageCache(max_age_s=MAX_AGE_S, clock=clock, scandir=listed)

    first = cache.usage(str(root))
    assert listed.take() == sorted(str(p) for p in (root, root / "a", root / "a" / "b", root / "c"))
    assert_matches_du(first, root)
    assert first is not None and first.measured_at_monotonic == clock.now_s

    clock.now_s += 1
    assert cache.usage(str(root)) == first  # nothing changed: nothing listed, same figures and time
    assert listed.take() == []

    clock.now_s += 1
    write(root / "a" / "b" / "new", 20_000)
    set_old_mtime(root / "a" / "b", 9)
    changed = cache.usage(str(root))
    assert listed.take() == [str(root / "a" / "b")]
    assert_matches_du(changed, root)
    # Built from readings of two times: the oldest is reported.
    assert changed is not None and changed.measured_at_monotonic == first.measured_at_monotonic

    write(root / "a" / "new-dir" / "f", 7_000)
    set_old_mtime(root / "a", 8)
    set_old_mtime(root / "a" / "new-dir", 8)
    assert_matches_du(cache.usage(str(root)), root)
    assert listed.take() == [str(root / "a"), str(root / "a" / "new-dir")]

    shutil.rmtree(root / "c")
    set_old_mtime(root, 7)
    assert_matches_du(cache.usage(str(root)), root)
    assert listed.take() == [str(root)]

    assert cache.usage(str(root)) is not None
    assert listed.take() == []


def test_file_growing_in_place_is_seen_after_max_age(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    log = write(root / "app" / "0.log", 10_000)
    age_all_dirs(root)
    clock = ManualClock()
    listed = RecordingScandir()
    cache = DiskUsageCache(max_age_s=MAX_AGE_S, clock=clock, scandir=listed)
    first = cache.usage(str(root))
    assert_matches_du(first, root)
    listed.take()

    with open(log, "ab") as grow:
        grow.write(b"x" * 500_000)
    assert du_bytes(root) > first.used_bytes  # type: ignore[union-attr]

    # Within the shortest age limit the growth is not seen (no directory changed): the documented bound.
    clock.now_s += MAX_AGE_S * (1 - AGE_JITTER_FRACTION) - 0.001
    assert cache.usage(str(root)) == first
    assert listed.take() == []

    clock.now_s = first.measured_at_monotonic + MAX_AGE_S  # type: ignore[union-attr]
    refreshed = cache.usage(str(root))
    assert_matches_du(refreshed, root)
    assert refreshed is not None and refreshed.measured_at_monotonic == clock.now_s
    assert listed.take() == [str(root), str(root / "app")]


def test_a_recent_mtime_is_not_trusted(ext4_mount: Path) -> None:
    """A change in the same timestamp tick as the last listing leaves the mtime equal; it is still seen."""
    root = ext4_mount / "vol"
    write(root / "f", 1_000)
    cache = DiskUsageCache(max_age_s=MAX_AGE_S, clock=ManualClock())
    assert_matches_du(cache.usage(str(root)), root)

    mtime = os.stat(root)
    write(root / "g", 30_000)
    os.utime(root, ns=(mtime.st_atime_ns, mtime.st_mtime_ns))  # as if within the same tick
    assert_matches_du(cache.usage(str(root)), root)


def test_an_old_mtime_is_trusted_until_max_age(ext4_mount: Path) -> None:
    """The other side of the bound: an entry slipped in under an unchanged old mtime waits for max age."""
    root = ext4_mount / "vol"
    write(root / "f", 1_000)
    age_all_dirs(root)
    clock = ManualClock()
    cache = DiskUsageCache(max_age_s=MAX_AGE_S, clock=clock)
    first = cache.usage(str(root))

    mtime = os.stat(root)
    write(root / "g", 30_000)
    os.utime(root, ns=(mtime.st_atime_ns, mtime.st_mtime_ns))
    assert cache.usage(str(root)) == first
    clock.now_s += MAX_AGE_S
    assert_matches_du(cache.usage(str(root)), root)


def test_files_deleted_during_a_walk_are_ignored(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    write(root / "stays", 8_000)
    victim = write(root / "goes", 8_000)

    def scandir_then_delete(path: str) -> contextlib.AbstractContextManager[Iterator[os.DirEntry[str]]]:
        with os.scandir(path) as entries:
            listed = list(entries)
        if victim.exists():
            victim.unlink()  # removed after the directory was read, before its entry is stat'ed
        return contextlib.nullcontext(iter(listed))

    measured = DiskUsageCache(scandir=scandir_then_delete).usage(str(root))
    assert not victim.exists()
    assert_matches_du(measured, root)


def test_a_folder_mounted_over_after_caching_is_left_out(
    ext4_mount: Path, mount_tmpfs_at: Callable[[Path], Path]
) -> None:
    root = ext4_mount / "vol"
    write(root / "sub" / "f", 100_000)
    age_all_dirs(root)
    cache = DiskUsageCache(clock=ManualClock())
    assert_matches_du(cache.usage(str(root)), root)
    mount_tmpfs_at(root / "sub")  # the parent's listing and mtime do not change
    write(root / "sub" / "in-ram", 50_000)
    measured = cache.usage(str(root))
    assert_matches_du(measured, root)
    assert measured is not None and measured.inodes_used == 1


def test_a_vanished_root_is_none_and_forgotten(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    write(root / "f", 100)
    cache = DiskUsageCache()
    assert cache.usage(str(root)) is not None
    assert cache.cached_paths() == {str(root)}
    shutil.rmtree(root)
    assert cache.usage(str(root)) is None
    assert cache.cached_paths() == frozenset()


def test_a_file_root_is_one_entry(ext4_mount: Path) -> None:
    path = write(ext4_mount / "lone.log", 12_345)
    assert_matches_du(DiskUsageCache().usage(str(path)), path)


def test_a_tree_deeper_than_the_recursion_limit(ext4_mount: Path) -> None:
    root = ext4_mount / "deep"
    depth = 1200  # "d/" per level keeps the deepest path (about 2.5 KB) under PATH_MAX
    leaf_dir = str(root)
    os.mkdir(leaf_dir)
    for _ in range(depth):  # a loop: pathlib's and os's makedirs recurse once per level themselves
        leaf_dir = os.path.join(leaf_dir, "d")
        os.mkdir(leaf_dir)
    write(Path(leaf_dir) / "leaf", 5000)
    measured = DiskUsageCache().usage(str(root))
    assert_matches_du(measured, root)
    assert measured is not None and measured.inodes_used == depth + 2


def test_start_cycle_forgets_paths_not_asked_for_in_keep_cycles(ext4_mount: Path) -> None:
    kept, dropped = ext4_mount / "kept", ext4_mount / "dropped"
    write(kept / "f", 100)
    write(dropped / "f", 100)
    age_all_dirs(ext4_mount)
    listed = RecordingScandir()
    cache = DiskUsageCache(keep_cycles=2, clock=ManualClock(), scandir=listed)

    assert cache.start_cycle() == 0
    cache.usage(str(kept))
    cache.usage(str(dropped))
    for _ in range(2):  # two cycles without asking for `dropped`: still kept
        assert cache.start_cycle() == 0
        cache.usage(str(kept))
    assert cache.cached_paths() == {str(kept), str(dropped)}
    assert cache.start_cycle() == 1
    assert cache.cached_paths() == {str(kept)}

    listed.take()
    cache.usage(str(dropped))
    assert listed.take() == [str(dropped)]  # measured from scratch



# --------------------------------------------------------------------------------------------------
# Scale: a housekeeping cycle over a thousand pods


def test_a_cycle_over_a_thousand_unchanged_pods_lists_nothing(tmp_path: Path) -> None:
    pods = 1000
    kubelet, logs = tmp_path / "kubelet", tmp_path / "logs"
    uids = [f"00000000-0000-0000-0000-{i:012d}" for i in range(pods)]
    for uid in uids:
        write(kubelet / "pods" / uid / "volumes" / EMPTY_DIR_PLUGIN_DIR / "scratch" / "data", 4096)
        write(logs / f"{NAMESPACE}_pod-{uid[-4:]}_{uid}" / "app" / "0.log", 1000)
    age_all_dirs(tmp_path)
    clock = ManualClock()
    listed = RecordingScandir()
    cache = DiskUsageCache(max_age_s=MAX_AGE_S, clock=clock, scandir=listed)

    def cycle() -> tuple[dict[str, int], float]:
        cache.start_cycle()
        started = time.perf_counter()
        totals: dict[str, int] = {}
        for uid in uids:
            volumes = volume_usage(cache, str(kubelet), uid)
            logged = log_usage(cache, str(logs), NAMESPACE, f"pod-{uid[-4:]}", uid)
            assert logged is not None
            totals[uid] = sum(v.used_bytes for v in volumes.values()) + logged.used_bytes
        return totals, time.perf_counter() - started

    first, first_s = cycle()
    assert len(listed.take()) == pods * 3  # scratch, the log folder and its container folder
    clock.now_s += 10
    second, second_s = cycle()
    assert listed.take() == []
    assert second == first
    print(f"1000 pods: first cycle {first_s:.3f} s, unchanged cycle {second_s:.3f} s")

    changed = kubelet / "pods" / uids[7] / "volumes" / EMPTY_DIR_PLUGIN_DIR / "scratch"
    write(changed / "more", 100_000)
    set_old_mtime(changed, 5)
    clock.now_s += 10
    third, _ = cycle()
    assert listed.take() == [str(changed)]
    assert third[uids[7]] > first[uids[7]]
    assert {uid: total for uid, total in third.items() if uid != uids[7]} == {
        uid: total for uid, total in first.items() if uid != uids[7]
    }


# --------------------------------------------------------------------------------------------------
# Walks under a budget


def drive(walk: Walk, budget: WalkBudget, entries_per_step: int) -> tuple[DirUsage | None, int]:
    """Run `walk` to its end, refilling `budget` to `entries_per_step` before each step; return its result and
    how many times it paused."""
    pauses = 0
    while True:
        budget.entries_left = entries_per_step
        try:
            next(walk)
        except StopIteration as done:
            return done.value, pauses
        pauses += 1


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_walk_pauses_when_its_budget_is_spent_and_resumes_to_the_whole_figure(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    for folder in ("a", "b", "b/deeper"):
        for index in range(40):
            write(root / folder / f"f{index}", 1000 * (index + 1))
    os.link(root / "a" / "f0", root / "b" / "linked")  # hard links are counted once across pauses too
    entries = du_inodes(root)
    cache = DiskUsageCache()
    budget = WalkBudget(0)

    measured, pauses = drive(cache.walk(str(root), budget), budget, entries_per_step=7)

    assert_matches_du(measured, root)
    # Every entry looked at once (plus the root): at least entries/7 pauses, some in the middle of a directory.
    assert pauses >= entries // 7 - 1
    assert cache.cached_paths() == {str(root)}


def test_a_paused_walk_publishes_nothing_until_it_ends(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    for index in range(30):
        write(root / f"f{index}", 100)
    age_all_dirs(root)
    cache = DiskUsageCache()
    before = cache.usage(str(root))
    write(root / "added", 50_000)
    set_old_mtime(root, 2)
    budget = WalkBudget(10)
    walk = cache.walk(str(root), budget)
    next(walk)  # paused in the middle of the root's listing

    assert budget.entries_left <= 0
    assert cache.usage(str(root)) != before, "another measurement is not held back by a paused one"
    assert_matches_du(cache.usage(str(root)), root)
    measured, _ = drive(walk, budget, entries_per_step=10)
    assert_matches_du(measured, root)


def test_closing_a_paused_walk_closes_its_listing(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    for index in range(30):
        write(root / f"f{index}", 100)
    cache = DiskUsageCache()
    fds = open_fds()
    budget = WalkBudget(5)
    walk = cache.walk(str(root), budget)
    next(walk)
    assert open_fds() == fds + 1, "the paused listing holds its directory open"
    walk.close()
    assert open_fds() == fds
    assert cache.cached_paths() == frozenset()


def test_a_directory_changed_while_its_walk_paused_is_listed_again_next_time(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    for index in range(20):
        write(root / "sub" / f"f{index}", 100)
    age_all_dirs(root)
    clock = ManualClock()
    listed = RecordingScandir()
    cache = DiskUsageCache(clock=clock, scandir=listed)
    budget = WalkBudget(3)
    walk = cache.walk(str(root), budget)
    next(walk)
    write(root / "sub" / "late", 70_000)  # after the listing began: it may or may not be seen by this walk
    drive(walk, budget, entries_per_step=3)
    listed.take()
    clock.now_s += 1
    assert_matches_du(cache.usage(str(root)), root)
    assert str(root / "sub") in listed.take(), "its mtime changed after it was read: read again"


def test_an_unchanged_tree_costs_one_entry_per_directory(ext4_mount: Path) -> None:
    root = ext4_mount / "vol"
    for folder in ("a", "b", "c"):
        write(root / folder / "f", 100)
    age_all_dirs(root)
    cache = DiskUsageCache(clock=ManualClock())
    cache.usage(str(root))
    budget = WalkBudget(100)
    measured, pauses = drive(cache.walk(str(root), budget), budget, entries_per_step=100)
    assert (measured, pauses) == (cache.usage(str(root)), 0)
    assert budget.entries_left == 100 - 4  # the root and its three subdirectories, each one lstat

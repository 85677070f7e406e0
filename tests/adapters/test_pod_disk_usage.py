"""Pods' disk usage in rounds (PodDiskWalker) and what the cycle may use of it (PodDiskStore).

Real pod folders in the test's tmp dir, checked with coreutils ``du`` (see test_disk_usage.py for the counting
rule); the walker runs in this process, one pass at a time, on manual clocks, so rounds, budgets and ages are
stepped exactly. The walker process that runs the same passes in the daemon is tested in
test_disk_walker_process.py.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from clocks import WALL_AT_ZERO, ManualClock
from evictd.adapters.disk_usage import EMPTY_DIR_PLUGIN_DIR
from evictd.adapters.pod_disk_usage import (
    NOT_MEASURED_YET,
    PodDiskFigures,
    PodDiskReading,
    PodDiskStore,
    PodDiskWalker,
    PodKey,
    SpaceUsed,
)
from evictd.core.errors import ConfigError, SampleError
from real_pod_node import du_bytes, du_inodes

STALE_AFTER_S = 120.0
BIG = PodKey("11111111-1111-4111-8111-111111111111", "shop", "big")
SMALL = PodKey("22222222-2222-4222-8222-222222222222", "shop", "small")
WALL_AT = WALL_AT_ZERO.timestamp()  # the wall time of ManualClock at 0


def reading(store: PodDiskStore, pod: PodKey, now: float) -> PodDiskReading:
    """What the cycle may use of one pod's figures at `now`."""
    return store.readings([pod], now)[0]


def volume(kubelet: Path, pod: PodKey, name: str) -> Path:
    folder = kubelet / "pods" / pod.uid / "volumes" / EMPTY_DIR_PLUGIN_DIR / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def log_folder(logs: Path, pod: PodKey, container: str) -> Path:
    folder = logs / f"{pod.namespace}_{pod.name}_{pod.uid}" / container
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def fill(folder: Path, count: int, size: int = 100) -> Path:
    for index in range(count):
        (folder / f"f{index:04d}").write_bytes(b"\x01" * size)
    return folder


def age_all_dirs(root: Path) -> None:
    stamp = time.time_ns() - 3600 * 1_000_000_000
    for folder, _, _ in os.walk(root):
        os.utime(folder, ns=(stamp, stamp))


def space(folder: Path) -> SpaceUsed:
    return SpaceUsed(du_bytes(folder), du_inodes(folder))


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "kubelet", tmp_path / "logs"


def walker_for(roots: tuple[Path, Path], clock: ManualClock, entry_budget: int) -> PodDiskWalker:
    kubelet, logs = roots
    return PodDiskWalker(kubelet_root=str(kubelet), pod_logs_dir=str(logs), entry_budget=entry_budget,
                         clock=clock)


# --------------------------------------------------------------------------------------------------
# PodDiskWalker


def test_a_round_measures_every_volume_and_log_folder_like_du(roots: tuple[Path, Path]) -> None:
    kubelet, logs = roots
    cache = fill(volume(kubelet, SMALL, "cache"), 5, 3000)
    scratch = fill(volume(kubelet, SMALL, "scratch"), 2)
    app = fill(log_folder(logs, SMALL, "app"), 1, 70_000)
    sidecar = fill(log_folder(logs, SMALL, "sidecar"), 1, 10)
    clock = ManualClock()
    (figures,) = walker_for(roots, clock, entry_budget=1000).run_pass([SMALL])
    assert figures == PodDiskFigures(
        SMALL, clock.now_s, WALL_AT + clock.now_s,
        volumes=(("cache", space(cache)), ("scratch", space(scratch))),
        logs=(("app", space(app)), ("sidecar", space(sidecar))))


def test_a_pod_without_folders_has_empty_figures(roots: tuple[Path, Path]) -> None:
    no_uid = PodKey("", "shop", "no-uid")  # nothing names its folders
    figures = list(walker_for(roots, ManualClock(), entry_budget=10).run_pass([SMALL, no_uid]))
    assert [(f.pod, f.volumes, f.logs, f.problem) for f in figures] == [
        (SMALL, (), (), None), (no_uid, (), (), None)]


def test_a_big_round_spans_passes_stamped_with_its_start_and_never_delays_a_small_pod(
        roots: tuple[Path, Path]) -> None:
    kubelet, logs = roots
    big = fill(volume(kubelet, BIG, "data"), 120)
    big_logs = fill(log_folder(logs, BIG, "app"), 3)
    small = fill(volume(kubelet, SMALL, "data"), 3)
    age_all_dirs(kubelet.parent)  # old mtimes are trusted: once read, an unchanged tree is not listed again
    clock = ManualClock()
    walker = walker_for(roots, clock, entry_budget=50)

    started = clock.now_s
    first = list(walker.run_pass([BIG, SMALL]))
    assert [f.pod for f in first] == [SMALL], "the small pod's round ends in the first pass"
    assert walker.rounds_in_progress() == {BIG}
    clock.now_s += 10
    assert [f.pod for f in walker.run_pass([BIG, SMALL])] == [SMALL]  # the big one is still going
    clock.now_s += 10
    (done,) = [f for f in walker.run_pass([BIG, SMALL]) if f.pod == BIG]
    assert done.volumes == (("data", space(big)),) and done.logs == (("app", space(big_logs)),)
    assert done.measured_at_monotonic == started, "stamped with the time its round began"
    assert done.measured_at_wall == WALL_AT + started
    assert walker.rounds_in_progress() == frozenset()
    clock.now_s += 10
    again = {f.pod: f for f in walker.run_pass([BIG, SMALL])}
    assert set(again) == {BIG, SMALL}, "the trees are known now: each round fits in one pass"
    assert again[SMALL].volumes == (("data", space(small)),)


def test_a_pod_no_longer_listed_loses_its_round(roots: tuple[Path, Path]) -> None:
    kubelet, _ = roots
    fill(volume(kubelet, BIG, "data"), 60)
    walker = walker_for(roots, ManualClock(), entry_budget=10)
    assert list(walker.run_pass([BIG])) == []
    assert walker.rounds_in_progress() == {BIG}
    assert list(walker.run_pass([SMALL])) != []
    assert walker.rounds_in_progress() == frozenset()


def test_a_folder_that_cannot_be_read_makes_the_round_a_problem(roots: tuple[Path, Path]) -> None:
    kubelet, _ = roots
    pod_volumes = kubelet / "pods" / SMALL.uid / "volumes"
    pod_volumes.parent.mkdir(parents=True)
    os.symlink("volumes", pod_volumes)  # root reads everything: a symlink loop is what cannot be read
    (figures,) = walker_for(roots, ManualClock(), entry_budget=10).run_pass([SMALL])
    assert figures.problem is not None
    assert figures.problem.source == str(pod_volumes / EMPTY_DIR_PLUGIN_DIR)
    assert (figures.volumes, figures.logs) == ((), ())


def test_a_bad_budget_is_a_config_error(roots: tuple[Path, Path]) -> None:
    with pytest.raises(ConfigError):
        walker_for(roots, ManualClock(), entry_budget=0)


# --------------------------------------------------------------------------------------------------
# PodDiskStore


def figures_at(pod: PodKey, at: float, used_bytes: int = 4096) -> PodDiskFigures:
    return PodDiskFigures(pod, at, WALL_AT + at, volumes=(("data", SpaceUsed(used_bytes, 2)),))


def test_fresh_figures_are_used_until_they_are_older_than_the_bound() -> None:
    clock = ManualClock()
    store = PodDiskStore(stale_after_s=STALE_AFTER_S, clock=clock)
    store.want([SMALL])
    figures = figures_at(SMALL, clock.now_s)
    store.record(figures)
    assert reading(store, SMALL, clock.now_s + STALE_AFTER_S) == PodDiskReading(figures=figures)
    stale = reading(store, SMALL, clock.now_s + STALE_AFTER_S + 1)
    assert stale.figures is None and stale.problem is not None
    assert stale.problem.source == "disk usage of pod shop/small"
    assert stale.problem.reason.startswith("last measured 121 s ago, older than 120 s")


def test_a_pod_not_measured_yet_has_no_figures_and_no_problem_until_it_is_overdue() -> None:
    clock = ManualClock()
    store = PodDiskStore(stale_after_s=STALE_AFTER_S, clock=clock)
    store.want([SMALL])
    assert reading(store, SMALL, clock.now_s + STALE_AFTER_S) is NOT_MEASURED_YET
    overdue = reading(store, SMALL, clock.now_s + STALE_AFTER_S + 5)
    assert overdue.figures is None and overdue.problem is not None
    assert "not measured in the 125 s since the pod was first seen" in overdue.problem.reason
    clock.now_s += 60
    store.want([SMALL, BIG])  # a pod wanted since earlier keeps its first time
    assert reading(store, SMALL, clock.now_s + STALE_AFTER_S).problem is not None
    assert reading(store, BIG, clock.now_s + STALE_AFTER_S) is NOT_MEASURED_YET


def test_a_failed_round_is_a_problem_not_old_figures() -> None:
    clock = ManualClock()
    store = PodDiskStore(stale_after_s=STALE_AFTER_S, clock=clock)
    store.want([SMALL])
    store.record(figures_at(SMALL, clock.now_s))
    failure = SampleError("/var/lib/kubelet/pods/x/volumes", "Too many levels of symbolic links")
    store.record(PodDiskFigures(SMALL, clock.now_s + 1, WALL_AT, problem=failure))
    assert reading(store, SMALL, clock.now_s + 2) == PodDiskReading(problem=failure)


def test_only_wanted_pods_and_newer_figures_are_kept() -> None:
    clock = ManualClock()
    store = PodDiskStore(stale_after_s=STALE_AFTER_S, clock=clock)
    store.want([SMALL])
    store.record(figures_at(BIG, clock.now_s))
    assert store.latest(BIG) is None, "figures of a pod nobody wants are dropped"
    newer, older = figures_at(SMALL, clock.now_s + 5, 8192), figures_at(SMALL, clock.now_s, 4096)
    store.record(newer)
    store.record(older)
    assert store.latest(SMALL) == newer
    store.want([BIG])
    assert store.latest(SMALL) is None, "a pod no longer wanted is forgotten"


def test_the_feeder_wakes_when_the_wanted_pods_change() -> None:
    store = PodDiskStore(clock=ManualClock())
    version, pods = store.wanted()
    assert pods == ()
    store.want([SMALL])
    store.want([SMALL])  # the same pods again: no new version
    changed, pods = store.wait_for_wanted(version, timeout_s=0)
    assert (changed, pods) == (version + 1, (SMALL,))
    assert store.wait_for_wanted(changed, timeout_s=0) == (changed, (SMALL,))
    got: list[tuple[int, tuple[PodKey, ...]]] = []
    waiter = threading.Thread(target=lambda: got.append(store.wait_for_wanted(changed, timeout_s=10)))
    waiter.start()
    store.want([SMALL, BIG])
    waiter.join(timeout=10)
    assert got == [(changed + 1, (SMALL, BIG))]


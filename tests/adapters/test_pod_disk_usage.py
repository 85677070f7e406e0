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
from deep_tree import nest, reachable_levels
from evictd.adapters.pod_dirs import EMPTY_DIR_PLUGIN_DIR
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
from evictd.run.after_cycle import ProblemLog
from log_capture import LogCapture
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


def test_a_folder_that_cannot_be_read_costs_only_itself(roots: tuple[Path, Path]) -> None:
    kubelet, logs = roots
    pod_volumes = kubelet / "pods" / SMALL.uid / "volumes"
    pod_volumes.parent.mkdir(parents=True)
    os.symlink("volumes", pod_volumes)  # root reads everything: a symlink loop is what cannot be read
    app = fill(log_folder(logs, SMALL, "app"), 2, 5000)
    (figures,) = walker_for(roots, ManualClock(), entry_budget=10).run_pass([SMALL])
    assert figures.problem is not None
    assert figures.problem.source == str(pod_volumes / EMPTY_DIR_PLUGIN_DIR)
    assert (figures.volumes, figures.logs) == ((), (("app", space(app)),)), "the pod's logs are kept"


def test_a_volume_nested_past_path_max_keeps_the_pods_figures(ext4_mount: Path) -> None:
    """Issue #25: 2,100 nested folders in one emptyDir made every round of the pod fail, all its figures dropped."""
    roots = (ext4_mount / "kubelet", ext4_mount / "logs")
    kubelet, logs = roots
    deep = fill(volume(kubelet, SMALL, "deep"), 3, 100_000)
    nest(deep)
    other = fill(volume(kubelet, SMALL, "other"), 2, 3000)
    app = fill(log_folder(logs, SMALL, "app"), 1, 7000)
    (figures,) = walker_for(roots, ManualClock(), entry_budget=100_000).run_pass([SMALL])
    assert dict(figures.volumes)["other"] == space(other) and figures.logs == (("app", space(app)),)
    counted = dict(figures.volumes)["deep"]
    assert counted.inodes_used == 1 + 3 + reachable_levels(deep), "the volume, its files, the folders a path reaches"
    assert counted.used_bytes > 300_000
    assert figures.problem is not None and figures.problem.source == str(deep)
    assert figures.problem.reason.startswith(f"counted without {str(deep)[:60]}")
    assert figures.problem.reason.endswith("/d/d/d: File name too long")
    assert len(figures.problem.reason) < 400, "the path is cut in the middle for the log line"


def test_a_bad_budget_is_a_config_error(roots: tuple[Path, Path]) -> None:
    with pytest.raises(ConfigError):
        walker_for(roots, ManualClock(), entry_budget=0)


# --------------------------------------------------------------------------------------------------
# PodDiskStore


def figures_at(pod: PodKey, at: float, used_bytes: int = 4096) -> PodDiskFigures:
    return PodDiskFigures(pod, at, WALL_AT + at, volumes=(("data", SpaceUsed(used_bytes, 2)),))


def test_figures_are_used_however_old_and_their_age_reported_in_the_same_words() -> None:
    """As the kubelet uses its last measurement of a volume: a pod whose walk takes longer never counts as 0."""
    clock = ManualClock()
    store = PodDiskStore(stale_after_s=STALE_AFTER_S, clock=clock)
    store.want([SMALL])
    figures = figures_at(SMALL, clock.now_s)
    store.record(figures)
    assert reading(store, SMALL, clock.now_s + STALE_AFTER_S) == PodDiskReading(figures=figures)
    stale = reading(store, SMALL, clock.now_s + STALE_AFTER_S + 1)
    later = reading(store, SMALL, clock.now_s + 10 * STALE_AFTER_S)
    assert stale.figures is figures and later.figures is figures
    assert [(p.source, p.reason) for p in stale.problems] == [(p.source, p.reason) for p in later.problems], \
        "worded the same every cycle: logged once"
    [problem] = stale.problems
    assert problem.source == "disk usage of pod shop/small"
    assert problem.reason.startswith("last complete measurement older than 120 s: used as it is")


def test_a_pod_not_measured_yet_has_no_figures_and_no_problem_until_it_is_overdue() -> None:
    clock = ManualClock()
    store = PodDiskStore(stale_after_s=STALE_AFTER_S, clock=clock)
    store.want([SMALL])
    assert reading(store, SMALL, clock.now_s + STALE_AFTER_S) is NOT_MEASURED_YET
    overdue = reading(store, SMALL, clock.now_s + STALE_AFTER_S + 5)
    assert overdue.figures is None, "never measured: absent, as before"
    again = reading(store, SMALL, clock.now_s + STALE_AFTER_S + 50)
    assert [str(p) for p in overdue.problems] == [str(p) for p in again.problems], "worded the same: logged once"
    [problem] = overdue.problems
    assert problem.reason.startswith("not measured within 120 s of the pod being first seen: counted as absent")
    clock.now_s += 60
    store.want([SMALL, BIG])  # a pod wanted since earlier keeps its first time
    assert reading(store, SMALL, clock.now_s + STALE_AFTER_S).problems != ()
    assert reading(store, BIG, clock.now_s + STALE_AFTER_S) is NOT_MEASURED_YET


def test_a_round_that_read_part_of_the_pod_gives_what_it_read_and_the_problem() -> None:
    clock = ManualClock()
    store = PodDiskStore(stale_after_s=STALE_AFTER_S, clock=clock)
    store.want([SMALL])
    store.record(figures_at(SMALL, clock.now_s))
    failure = SampleError("/var/lib/kubelet/pods/x/volumes", "Too many levels of symbolic links")
    partial = PodDiskFigures(SMALL, clock.now_s + 1, WALL_AT, logs=(("app", SpaceUsed(8192, 2)),), problem=failure)
    store.record(partial)
    now = reading(store, SMALL, clock.now_s + 2)
    assert now.figures is partial
    assert [(p.source, p.reason) for p in now.problems] == [
        ("disk usage of pod shop/small", f"{failure.source}: {failure.reason}")]


def test_a_round_longer_than_the_limit_keeps_the_last_figures_and_is_logged_once_each_way(
        roots: tuple[Path, Path]) -> None:
    """Issue #25: a tree measured over more passes than fit in the limit (3 million entries at the default budget)
    counted as 0 under disk pressure, and logged two lines every cycle."""
    kubelet, _ = roots
    data = fill(volume(kubelet, SMALL, "data"), 30)
    age_all_dirs(kubelet)  # old mtimes are trusted: once read, an unchanged tree is not listed again
    clock = ManualClock()
    walker = walker_for(roots, clock, entry_budget=40)
    store = PodDiskStore(stale_after_s=30.0, clock=clock)
    store.want([SMALL])
    problem_log = ProblemLog(LogCapture(), "gone", "back")

    def cycle_then_pass(number: int) -> PodDiskReading:
        for figures in walker.run_pass([SMALL]):
            store.record(figures)
        [now] = store.readings([SMALL], clock.now_s)
        problem_log.update(number, now.problems)
        clock.now_s += 10  # a pass every 10 s
        return now

    first = cycle_then_pass(1)
    assert first.figures is not None and first.figures.volumes == (("data", space(data)),)
    fill(data, 300, size=10)  # now a round takes 8 passes of 40 entries: 80 s, past the 30 s limit
    age_all_dirs(kubelet)
    readings = [cycle_then_pass(number) for number in range(2, 12)]
    kept = [r for r in readings if r.figures is first.figures]
    assert len(kept) >= 6, "the last complete figure all along the long round"
    assert len([r for r in kept if r.problems]) >= 3, "used past the 30 s limit, however old"
    assert all(r.figures is not None for r in readings), "never without figures"
    done = readings[-1].figures
    assert done is not None and done is not first.figures and done.volumes == (("data", space(data)),)
    for index in range(30, 300):  # the tenant removes its files: a round fits in one pass again
        (data / f"f{index:04d}").unlink()
    age_all_dirs(kubelet)
    after = [cycle_then_pass(number) for number in range(12, 24)]  # the round under way ends, then quick ones
    fresh = next(r for r in after if not r.problems)
    assert fresh.figures is not None and fresh.figures.volumes == (("data", space(data)),)
    log = problem_log._log
    assert [event for _, event, _ in log.lines] == ["gone", "back"], "once when stale, once when fresh again"
    assert "last complete measurement older than 30 s" in log.lines[0][2]["detail"]


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


def test_figures_are_kept_under_the_wanted_key_itself() -> None:
    """Issue #25 (5,000 pods): each figures line brings the pod's key anew (its strings decoded again); the store
    keeps the figures under the key the cycle wants, which its pod already holds, not a copy per pod and round.
    What the figures say is unchanged, and a problem still names the pod."""
    clock = ManualClock()
    store = PodDiskStore(stale_after_s=STALE_AFTER_S, clock=clock)
    wanted = PodKey(*("".join(part) for part in SMALL))  # built apart: equal to SMALL, not the same object
    store.want([wanted])
    brought = PodKey(*("".join(part) for part in SMALL))
    arrived = PodDiskFigures(brought, clock.now_s, WALL_AT, volumes=(("data", SpaceUsed(4096, 2)),),
                             problem=SampleError("/var/lib/kubelet/x", "Permission denied"))
    store.record(arrived)
    kept = store.latest(SMALL)
    assert kept is not None and kept.pod is wanted and kept.pod.uid is wanted.uid and kept.pod.name is wanted.name
    assert kept == arrived, "the same figures, under an equal key"
    [found] = store.readings([wanted], clock.now_s)
    assert found.figures is kept and found.figures.pod is wanted
    assert [problem.source for problem in found.problems] == ["disk usage of pod shop/small"]


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


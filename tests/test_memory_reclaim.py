"""Reclaim before evict in a cycle: the adapter's steps and budget on a cgroup tree of files (the kernel's part played
by a fake `write`), and the eviction manager with the step (no eviction when the reclaim clears the threshold, the
eviction as before when it does not or when the memory is anonymous, the back-off after a failure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from builders import Gi, Mi, pod, pod_stats, summary
from clocks import ManualClock
from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.memory_reclaim import NO_RECLAIM_FILE, V1_UNAVAILABLE, CgroupMemoryReclaimer
from evictd.commands.simulate import parse_scenario, run_scenario
from evictd.core.engine import EngineConfig, EngineState
from evictd.core.errors import SampleError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.memory_reclaim import (
    BESTEFFORT,
    MAX_ROUNDS,
    PODS,
    CacheHolder,
    ReclaimPlan,
    ReclaimSettings,
    ReclaimTarget,
    another_round,
)
from evictd.cycle.manager import EvictionManager
from evictd.cycle.reclaim_first import MemoryReclaimStep, memory_reclaim_event
from evictd.cycle.render import simulation_text
from evictd.observe.metrics import Metrics
from evictd.record.decision import decision_of
from test_manager import Evictor, Layout, Pods, Reclaimer, Stats

MiB = 1 << 20


def write_cgroup(folder: Path, current: int, active_file: int, inactive_file: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memory.current").write_text(f"{current}\n")
    (folder / "memory.stat").write_text(f"anon {current - active_file - inactive_file}\nfile "
                                        f"{active_file + inactive_file}\nactive_file {active_file}\n"
                                        f"inactive_file {inactive_file}\n")
    (folder / "memory.reclaim").write_text("")


def stat_of(folder: Path, key: str) -> int:
    for line in (folder / "memory.stat").read_text().splitlines():
        name, value = line.split()
        if name == key:
            return int(value)
    raise KeyError(key)


class Kernel:
    """Plays memory.reclaim: each write drops `amount` of the cgroup's active file (and its parents'), taking
    `write_s` of the clock; with `reclaimable` False it reclaims nothing (EAGAIN)."""

    def __init__(self, root: Path, clock: ManualClock, write_s: float = 0.01, reclaimable: bool = True) -> None:
        self.root, self.clock, self.write_s, self.reclaimable = root, clock, write_s, reclaimable
        self.writes: list[tuple[str, int]] = []

    def write(self, path: str, amount: int) -> bool:
        self.writes.append((path, amount))
        self.clock.now_s += self.write_s
        if not self.reclaimable:
            return False
        folder = Path(path).parent
        while True:
            current = int((folder / "memory.current").read_text())
            active = stat_of(folder, "active_file")
            drop = min(amount, active)
            write_cgroup(folder, current - drop, active - drop, stat_of(folder, "inactive_file"))
            if folder == self.root / "kubepods":
                return True
            folder = folder.parent


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    write_cgroup(tmp_path / "kubepods", 900 * MiB, 600 * MiB, 50 * MiB)
    write_cgroup(tmp_path / "kubepods" / "besteffort", 600 * MiB, 500 * MiB, 50 * MiB)
    write_cgroup(tmp_path / "kubepods" / "burstable", 100 * MiB, 0)
    return tmp_path


def reclaimer(root: Path, kernel: Kernel) -> CgroupMemoryReclaimer:
    return CgroupMemoryReclaimer(CgroupReader(CgroupLayout(version=2, root=root)), proc_root=str(root / "no-proc"),
                                 monotonic=kernel.clock.monotonic, write=kernel.write)


def test_holders_are_the_tiers_and_the_pods_cgroup(tree: Path) -> None:
    found = reclaimer(tree, Kernel(tree, ManualClock())).holders()
    assert found == (CacheHolder("kubepods/burstable", "burstable", 0, 0),
                     CacheHolder("kubepods/besteffort", BESTEFFORT, 500 * MiB, 50 * MiB),
                     CacheHolder("kubepods", PODS, 600 * MiB, 50 * MiB))


def test_reclaims_in_steps_until_the_working_set_fell_by_the_bytes_asked(tree: Path) -> None:
    kernel = Kernel(tree, ManualClock(), write_s=0.001)
    plan = ReclaimPlan((ReclaimTarget("kubepods/besteffort", 40 * MiB),), 40 * MiB, step_bytes=16 * MiB, budget_s=1.0)
    outcome = reclaimer(tree, kernel).reclaim(plan)
    assert [amount for _, amount in kernel.writes] == [16 * MiB, 16 * MiB, 8 * MiB]
    assert outcome.total_freed_bytes == 40 * MiB and outcome.stopped == "done"


def test_the_budget_stops_the_writes(tree: Path) -> None:
    """Each write takes 10 ms; a 50 ms budget allows five (the deadline is checked before each), not the 32 that
    the 500 MiB asked would need."""
    kernel = Kernel(tree, ManualClock(), write_s=0.01)
    plan = ReclaimPlan((ReclaimTarget("kubepods/besteffort", 500 * MiB),), 500 * MiB, step_bytes=16 * MiB,
                       budget_s=0.05)
    outcome = reclaimer(tree, kernel).reclaim(plan)
    assert len(kernel.writes) == 5
    assert outcome.stopped == "budget" and outcome.elapsed_s == pytest.approx(0.05)


def test_eagain_stops_a_target(tree: Path) -> None:
    kernel = Kernel(tree, ManualClock(), reclaimable=False)
    plan = ReclaimPlan((ReclaimTarget("kubepods/besteffort", 100 * MiB),), 100 * MiB, budget_s=1.0)
    outcome = reclaimer(tree, kernel).reclaim(plan)
    assert len(kernel.writes) == 1 and outcome.stopped == "kernel could reclaim no more"
    assert outcome.total_freed_bytes == 0


def test_writes_are_bounded_when_the_working_set_does_not_fall(tree: Path) -> None:
    kernel = Kernel(tree, ManualClock(), write_s=0.0)
    kernel.write = lambda path, amount: (kernel.writes.append((path, amount)), True)[1]  # type: ignore[method-assign]
    plan = ReclaimPlan((ReclaimTarget("kubepods/besteffort", 32 * MiB),), 32 * MiB, step_bytes=16 * MiB,
                       budget_s=1.0)
    outcome = reclaimer(tree, kernel).reclaim(plan)
    assert len(kernel.writes) == 8 and outcome.stopped.startswith("written 4x")


@pytest.mark.parametrize("cgroup", ["system.slice", "", "kubepods-other", "kubepods/../system.slice"])
def test_never_writes_outside_the_pods_cgroup(tree: Path, cgroup: str) -> None:
    kernel = Kernel(tree, ManualClock())
    with pytest.raises(SampleError, match=r"never reclaimed|no '\.\.'"):
        reclaimer(tree, kernel).reclaim(ReclaimPlan((ReclaimTarget(cgroup, MiB),), MiB))
    assert kernel.writes == []


def test_unavailable_on_v1_and_without_memory_reclaim(tree: Path) -> None:
    v1 = CgroupMemoryReclaimer(CgroupReader(CgroupLayout(version=1, root=tree)))
    assert v1.unavailable() == V1_UNAVAILABLE
    assert reclaimer(tree, Kernel(tree, ManualClock())).unavailable() is None
    (tree / "kubepods" / "memory.reclaim").unlink()
    assert reclaimer(tree, Kernel(tree, ManualClock())).unavailable() == NO_RECLAIM_FILE


# --- the manager with the step -----------------------------------------------------------------------------------

READER = pod("reader")


class FakeReclaimer:
    """Holds `cache` MiB of BestEffort active file; each reclaim frees what is asked of it (up to the cache)."""

    def __init__(self, cache_mib: int, refaults: int = 0) -> None:
        self.cache = cache_mib * MiB
        self.refaults = refaults
        self.plans: list[ReclaimPlan] = []

    def unavailable(self) -> str | None:
        return None

    def holders(self) -> Sequence[CacheHolder]:
        return (CacheHolder("kubepods/besteffort", BESTEFFORT, self.cache), CacheHolder("kubepods", PODS, self.cache))

    def refault_file_bytes(self) -> int | None:
        return self.refaults

    def reclaim(self, plan: ReclaimPlan) -> object:
        self.plans.append(plan)
        freed = min(self.cache, sum(t.bytes for t in plan.targets))
        self.cache -= freed

        class Outcome:
            total_freed_bytes = freed
            elapsed_s = 0.01
            stopped = "done"
        return Outcome()


def memory_manager(stats: Stats, reclaim: FakeReclaimer | None, clock: ManualClock,
                   evictor: Evictor, monotonic: Callable[[], float] | None = None) -> EvictionManager:
    config = EngineConfig.from_settings(EvictionSettings(hard={"memory.available": "200Mi"},
                                                         minimum_reclaim={"memory.available": "100Mi"}))
    step = None if reclaim is None else MemoryReclaimStep(ReclaimSettings(enabled=True), reclaim,  # type: ignore[arg-type]
                                                          monotonic or clock.monotonic)
    return EvictionManager(config, stats=stats, layout=Layout(FsLayout()), pods=Pods(READER), reclaimer=Reclaimer(),
                           evictor=evictor, clock=clock, memory_reclaim=step)


def low(available_mib: int) -> dict[str, object]:
    return summary(memory=available_mib * Mi, memory_ws=4 * Gi - available_mib * Mi,
                   pods=[pod_stats(READER, memory=600 * Mi)])


def test_without_the_step_the_kubelets_eviction() -> None:
    evictor = Evictor()
    report = memory_manager(Stats(low(150)), None, ManualClock(), evictor).synchronize()
    assert [e.pod.name for e in evictor.calls] == ["reader"] and report.acted.memory_reclaim is None


def test_a_reclaim_that_clears_the_threshold_evicts_nobody() -> None:
    evictor, fake = Evictor(), FakeReclaimer(cache_mib=500)
    report = memory_manager(Stats(low(150), low(310)), fake, ManualClock(), evictor).synchronize()
    assert evictor.calls == []
    assert report.acted.reclaim_succeeded is True
    assert report.acted.memory_reclaim is not None and report.acted.memory_reclaim.needed_bytes == 150 * MiB
    assert [r.action for r in report.acted.reclaim] == [ReclaimAction.MEMORY_RECLAIM]
    assert report.acted.reclaim[0].freed_bytes == 166 * MiB  # the need and the 16 MiB margin


def test_anonymous_growth_skips_and_evicts_without_reading_the_stats_again() -> None:
    evictor, fake = Evictor(), FakeReclaimer(cache_mib=20)
    stats = Stats(low(150))  # a second read would fail: the script has one summary
    report = memory_manager(stats, fake, ManualClock(), evictor).synchronize()
    assert [e.pod.name for e in evictor.calls] == ["reader"] and fake.plans == []
    assert report.acted.memory_reclaim is not None and "anonymous" in (report.acted.memory_reclaim.skipped or "")
    assert len(stats.measured) == 1


def test_a_reclaim_that_did_not_clear_it_evicts_tries_once_more_after_that_eviction_then_backs_off() -> None:
    evictor, fake, clock = Evictor(), FakeReclaimer(cache_mib=500), ManualClock()
    # Each reclaim frees what it is asked and the stats read after it lack as much as before: no second round.
    manager = memory_manager(Stats(low(150), low(150), low(150), low(150), low(150)), fake, clock, evictor)
    first = manager.synchronize()
    assert [e.pod.name for e in evictor.calls] == ["reader"] and first.acted.reclaim_succeeded is False
    clock.now_s += 0.1  # the next cycle, right after the eviction: the evicted pod may have kept the cache in use
    second = manager.synchronize()
    assert len(fake.plans) == 2 and len(evictor.calls) == 2
    assert second.acted.memory_reclaim is not None and not second.acted.memory_reclaim.backing_off
    clock.now_s += 10
    third = manager.synchronize()
    assert len(fake.plans) == 2 and len(evictor.calls) == 3
    assert third.acted.memory_reclaim is not None and third.acted.memory_reclaim.backing_off


def test_a_reclaim_outpaced_by_the_pods_growth_runs_another_round_within_the_budget() -> None:
    """As in the arena's active-file cell met mid-read: the round freed all it was asked, and the stats read after it
    still lack 20 MiB (the reader went on filling its cache): a second round asks for those, and nobody is
    evicted."""
    evictor, fake = Evictor(), FakeReclaimer(cache_mib=500)
    report = memory_manager(Stats(low(150), low(280), low(310)), fake, ManualClock(), evictor).synchronize()
    assert evictor.calls == [] and report.acted.reclaim_succeeded is True
    assert [plan.needed_bytes for plan in fake.plans] == [150 * MiB, 20 * MiB]
    use = report.acted.memory_reclaim
    # Each round frees its need and the 16 MiB margin.
    assert use is not None and use.rounds == 2 and use.result is not None and use.result.freed_bytes == 202 * MiB
    assert use.needed_bytes == 150 * MiB


def test_no_further_round_once_the_budget_is_spent() -> None:
    """The same readings, but the first round and the reading after it took the whole 50 ms budget: the eviction goes
    ahead as today."""
    evictor, fake, ticks = Evictor(), FakeReclaimer(cache_mib=500), iter([0.0, 0.05])
    report = memory_manager(Stats(low(150), low(280), low(310)), fake, ManualClock(), evictor,
                            monotonic=lambda: next(ticks)).synchronize()
    assert [e.pod.name for e in evictor.calls] == ["reader"] and len(fake.plans) == 1
    assert report.acted.memory_reclaim is not None and report.acted.memory_reclaim.rounds == 1
    assert report.acted.memory_reclaim.still_needed_bytes == 20 * MiB  # what the reading after the round lacked


def test_at_most_three_rounds() -> None:
    """Growth that the reclaim outpaces, but only just, each time: three rounds, then the eviction."""
    evictor, fake = Evictor(), FakeReclaimer(cache_mib=500)
    stats = Stats(low(150), low(170), low(190), low(210), low(400))
    report = memory_manager(stats, fake, ManualClock(), evictor).synchronize()
    assert [e.pod.name for e in evictor.calls] == ["reader"] and len(fake.plans) == MAX_ROUNDS == 3
    assert report.acted.memory_reclaim is not None and report.acted.memory_reclaim.rounds == 3


@pytest.mark.parametrize(("asked", "freed", "lacking", "elapsed", "rounds", "again"), [
    (150, 150, 20, 0.01, 1, True),    # freed all it was asked, the shortfall shrank: the pods grew meanwhile
    (150, 120, 20, 0.01, 1, False),   # freed less than asked: the kernel could not, another round would not either
    (150, 150, 150, 0.01, 1, False),  # the shortfall did not shrink: the growth keeps pace with the reclaim
    (150, 150, 0, 0.01, 1, False),    # nothing lacks
    (150, 150, 20, 0.05, 1, False),   # the budget is spent
    (150, 150, 20, 0.01, 3, False),   # the third round was the last
])
def test_another_round(asked: int, freed: int, lacking: int, elapsed: float, rounds: int, again: bool) -> None:
    assert another_round(asked * MiB, freed * MiB, lacking * MiB, elapsed, 0.05, rounds) is again


# --- simulate and replay: a step that scripts the reclaim --------------------------------------------------------


def scenario_document(memory_reclaimed: int | None) -> dict[str, object]:
    step: dict[str, object] = {"at": 0, "summary": low(150), "afterReclaim": low(320)}
    if memory_reclaimed is not None:
        step["memoryReclaimed"] = memory_reclaimed
    return {"config": {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                       "evictionHard": {"memory.available": "200Mi"},
                       "evictionMinimumReclaim": {"memory.available": "100Mi"}},
            "pods": [READER], "steps": [step]}


def test_a_scripted_reclaim_replays_as_recorded_and_reads_so() -> None:
    reports = run_scenario(parse_scenario(scenario_document(340 * MiB)))
    assert reports[0].acted.evictions == () and reports[0].acted.reclaim_succeeded is True
    assert "reclaimed 340 MiB, no eviction needed" in simulation_text([(0.0, reports[0])])
    assert decision_of(reports[0]).reclaim == ("memoryReclaim",)


def test_without_a_scripted_reclaim_the_kubelets_eviction() -> None:
    reports = run_scenario(parse_scenario(scenario_document(None)))
    assert [e.pod.name for e in reports[0].acted.evictions] == ["reader"] and reports[0].acted.reclaim == ()
    assert reports[0].acted.memory_reclaim is None


# --- visible: the node event, the metrics -----------------------------------------------------------------------


def test_the_node_event_and_the_metrics_of_a_reclaim_that_avoided_the_eviction() -> None:
    fake = FakeReclaimer(cache_mib=500)
    report = memory_manager(Stats(low(150), low(310)), fake, ManualClock(), Evictor()).synchronize()
    assert memory_reclaim_event(report.acted) == (
        "MemoryReclaimed", "reclaimed 166 MiB of page cache for memory.available before evicting, no eviction needed")
    metrics = Metrics()
    metrics.record_cycle(report, EngineState(), 0.001, datetime(2026, 1, 1, tzinfo=UTC), False)
    assert metrics.registry.get_sample_value("evictd_memory_reclaim_evictions_avoided_total") == 1
    assert metrics.registry.get_sample_value("evictd_reclaimed_bytes_total", {"action": "memoryReclaim"}) == 166 * MiB


def test_no_node_event_for_a_skip() -> None:
    report = memory_manager(Stats(low(150)), FakeReclaimer(cache_mib=20), ManualClock(), Evictor()).synchronize()
    assert memory_reclaim_event(report.acted) is None


def test_a_soft_threshold_in_grace_does_not_undo_a_reclaim_that_cleared_the_hard_one() -> None:
    """As in the arena's first trial: the reclaim took memory.available from 139 to 330 MiB, clear of the hard
    200 Mi + 100 Mi, while a soft 500 Mi threshold (grace 90 s) was still met: nobody is evicted."""
    evictor = Evictor()
    config = EngineConfig.from_settings(EvictionSettings(
        hard={"memory.available": "200Mi"}, soft={"memory.available": "500Mi"},
        soft_grace_period={"memory.available": "90s"}, minimum_reclaim={"memory.available": "100Mi"}))
    step = MemoryReclaimStep(ReclaimSettings(enabled=True), FakeReclaimer(cache_mib=500))  # type: ignore[arg-type]
    manager = EvictionManager(config, stats=Stats(low(139), low(330)), layout=Layout(FsLayout()), pods=Pods(READER),
                              reclaimer=Reclaimer(), evictor=evictor, clock=ManualClock(), memory_reclaim=step)
    report = manager.synchronize()
    assert evictor.calls == [] and report.acted.reclaim_succeeded is True

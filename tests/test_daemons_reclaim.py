"""Reclaim for the daemons in the cycle (`evictd.cycle.daemons_reclaim`, `daemonsReclaim`): the eviction manager,
stepped on scripted Summaries whose daemons re-read their memory, drops the pods' page cache through the
memory.reclaim adapter's protocol with no threshold met and evicts nobody; judges the attempt on a later cycle's
figure and backs off; holds a daemons refault eviction while an attempt awaits its verdict; acts as off where the
node cannot. Then the log lines and metrics an attempt makes, and the setting as configuration and check-config read
it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from clocks import ManualClock
from evictd.config import load_configuration
from evictd.core.daemons_reclaim import DaemonsReclaimSettings
from evictd.core.engine import EngineConfig, EngineState, ReclaimThenEvict
from evictd.core.errors import SampleError
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.memory_reclaim import BESTEFFORT, PODS, CacheHolder, ReclaimPlan, ReclaimSettings
from evictd.core.protections import Protection, State, protections
from evictd.core.summary import SYSTEM_CONTAINER_DAEMONS
from evictd.core.thresholds import parse_stall_thresholds
from evictd.cycle.daemons_reclaim import DaemonsReclaimStep
from evictd.cycle.manager import DAEMONS_VERDICT_AWAITED, EvictionManager
from evictd.cycle.reclaim_first import MemoryReclaimStep
from evictd.cycle.report import CycleReport
from evictd.observe.cycle_logging import CycleLogger
from evictd.observe.metrics import Metrics
from log_capture import LogCapture
from test_manager import Evictor, Layout, Pods, Reclaimer, Stats
from test_memory_reclaim import FakeReclaimer as ActiveCache

MiB = 1 << 20
BACKUP = pod("backup", priority=0)  # BestEffort, streaming a file: its page cache pushes the daemons out
HOG = pod("hog", requests={"memory": "100Mi"}, priority=0)
# The daemons use 200 MiB: 1% of it is 2 MiB re-read.
USAGE = 200 * Mi
ONE_PERCENT = 2 * Mi


def node(second: float, *, refaulted: int, available: int = 5 * Gi) -> dict[str, Any]:
    """A Summary at `second`: `available` (by default plenty: no kubelet threshold near), the daemons having re-read
    `refaulted` bytes since their cgroup was made; the hog grows 16 MiB a second (a stall eviction's candidate)."""
    stats = [pod_stats(BACKUP, memory=100 * Mi), pod_stats(HOG, memory=1 * Gi + int(second) * 16 * Mi)]
    document = summary(memory=available, memory_ws=20 * Gi, time=stamp(int(second)), pods=stats)
    document["node"]["systemContainers"] = [{"name": SYSTEM_CONTAINER_DAEMONS, "memory": {
        "time": stamp(int(second)), "usageBytes": USAGE, "reclaim": {"refaultFileBytes": refaulted}}}]
    return document


class FakeReclaimer:
    """The memory.reclaim adapter's protocol: `cache` MiB of BestEffort page cache (inactive: a stream's), each plan
    carried out in full up to it; `unavailable` as given; `fail` raises as a failed write would."""

    def __init__(self, cache_mib: int, unavailable: str | None = None, fail: bool = False) -> None:
        self.cache = cache_mib * MiB
        self.why_not = unavailable
        self.fail = fail
        self.plans: list[ReclaimPlan] = []

    def unavailable(self) -> str | None:
        return self.why_not

    def holders(self) -> Sequence[CacheHolder]:
        return (CacheHolder("kubepods/besteffort", BESTEFFORT, 0, self.cache), CacheHolder("kubepods", PODS, 0,
                                                                                          self.cache))

    def refault_file_bytes(self) -> int | None:
        return None

    def reclaim(self, plan: ReclaimPlan) -> object:
        self.plans.append(plan)
        if self.fail:
            raise SampleError("/sys/fs/cgroup/kubepods/besteffort/memory.reclaim", "Permission denied")
        freed = min(self.cache, sum(target.bytes for target in plan.targets))
        self.cache -= freed

        class Outcome:
            total_freed_bytes = freed
            elapsed_s = 0.02
            stopped = "done"
        return Outcome()


def daemons_manager(stats: Stats, fake: FakeReclaimer, clock: ManualClock, evictor: Evictor, *,
                    daemons_threshold: str | None = None) -> EvictionManager:
    """A manager with reclaim for the daemons on; a memory.available threshold far from met, and, with
    `daemons_threshold`, a daemons refault one (the stall gate off: the share alone decides)."""
    settings = EvictionSettings(hard={"memory.available": "100Mi"})
    config = EngineConfig.from_settings(settings)
    if daemons_threshold is not None:
        config = EngineConfig(thresholds=(*config.thresholds, *parse_stall_thresholds(
            {"evictd.io/daemons.refault": daemons_threshold}, {}, {}, {})), stall_requires_node_reclaim=False)
    step = DaemonsReclaimStep(DaemonsReclaimSettings(enabled=True), fake, clock.monotonic)  # type: ignore[arg-type]
    return EvictionManager(config, stats=stats, layout=Layout(FsLayout()), pods=Pods(BACKUP, HOG),
                           reclaimer=Reclaimer(), evictor=evictor, clock=clock, daemons_reclaim=step)


def run(manager: EvictionManager, clock: ManualClock, at: Sequence[float]) -> list[CycleReport]:
    reports = []
    for second in at:
        clock.now_s = second
        reports.append(manager.synchronize())
    return reports


def test_the_daemons_refaulting_drops_the_pods_page_cache_and_evicts_nobody() -> None:
    """No threshold is met: the first reading gives no figure (nothing done), the second has the daemons re-reading
    60 % of their memory in 2 s: the BestEffort cache is asked for the daemons' memory; the next window they re-read
    5 %: it helped, and nothing more is asked."""
    evictor, fake, clock = Evictor(), FakeReclaimer(cache_mib=900), ManualClock()
    stats = Stats(node(0, refaulted=Gi), node(2, refaulted=Gi + 60 * ONE_PERCENT),
                  node(4, refaulted=Gi + 65 * ONE_PERCENT))
    first, second, third = run(daemons_manager(stats, fake, clock, evictor), clock, [0.0, 2.0, 4.0])
    assert evictor.calls == []
    assert all(not report.decided.assessment.thresholds for report in (first, second, third))
    assert first.daemons_reclaim is not None and first.daemons_reclaim.skipped is not None
    assert "unknown" in first.daemons_reclaim.skipped
    use = second.daemons_reclaim
    assert use is not None and use.attempted and use.figure_bp == 6000
    assert use.asked_bytes == USAGE and use.freed_bytes == USAGE and use.targets == ("kubepods/besteffort",)
    assert len(fake.plans) == 1 and fake.plans[0].by_usage
    judged = third.daemons_reclaim
    assert judged is not None and judged.verdict is not None and judged.verdict.helped
    assert judged.figure_bp == 500 and not judged.attempted and len(fake.plans) == 1


def test_a_reclaim_that_did_not_help_backs_off() -> None:
    evictor, fake, clock = Evictor(), FakeReclaimer(cache_mib=900), ManualClock()
    stats = Stats(*(node(second, refaulted=Gi + second * 30 * ONE_PERCENT) for second in (0, 2, 4, 6, 8)))
    reports = run(daemons_manager(stats, fake, clock, evictor), clock, [0.0, 2.0, 4.0, 6.0, 8.0])
    uses = [report.daemons_reclaim for report in reports]
    assert all(use is not None for use in uses)
    assert [use.attempted for use in uses if use is not None] == [False, True, False, False, False]
    verdict = uses[2].verdict if uses[2] is not None else None
    assert verdict is not None and not verdict.helped and verdict.figure_after_bp == 6000
    assert all(use is not None and use.backing_off for use in uses[2:])
    assert len(fake.plans) == 1 and evictor.calls == []


def test_no_pods_cache_no_reclaim_and_a_node_that_cannot_acts_as_off() -> None:
    clock = ManualClock()
    empty = FakeReclaimer(cache_mib=0)
    reports = run(daemons_manager(Stats(node(0, refaulted=0), node(2, refaulted=80 * ONE_PERCENT)), empty, clock,
                                  Evictor()), clock, [0.0, 2.0])
    assert reports[1].daemons_reclaim is not None and "the pods hold 0 MiB" in (reports[1].daemons_reclaim.skipped
                                                                                or "")
    assert empty.plans == []
    dry = FakeReclaimer(cache_mib=900, unavailable="the node's mode is dry-run")
    reports = run(daemons_manager(Stats(node(0, refaulted=0), node(2, refaulted=80 * ONE_PERCENT)), dry, clock,
                                  Evictor()), clock, [10.0, 12.0])
    assert [report.daemons_reclaim for report in reports] == [None, None] and dry.plans == []


def test_a_daemons_refault_eviction_waits_for_the_verdict_then_goes_ahead() -> None:
    """With a daemons refault threshold of 50 %, the cycle that reclaims for the daemons does not evict: the hog
    (which grew) is evicted only once the reclaim was judged not to help."""
    evictor, fake, clock = Evictor(), FakeReclaimer(cache_mib=900), ManualClock()
    stats = Stats(*(node(second, refaulted=Gi + second * 30 * ONE_PERCENT) for second in (0, 2, 4)))
    _, held, after = run(daemons_manager(stats, fake, clock, evictor, daemons_threshold="50%"), clock,
                         [0.0, 2.0, 4.0])
    assert isinstance(held.decided.assessment.next_step, ReclaimThenEvict)
    assert held.daemons_reclaim is not None and held.daemons_reclaim.attempted
    assert held.decided.withheld == DAEMONS_VERDICT_AWAITED and held.acted.evictions == ()
    assert after.daemons_reclaim is not None and after.daemons_reclaim.verdict is not None
    assert not after.daemons_reclaim.verdict.helped
    assert [eviction.pod.name for eviction in evictor.calls] == ["hog"]


def test_in_a_cycle_where_reclaim_before_evict_acts_the_daemons_reclaim_waits() -> None:
    """One reclaim a cycle: with memory.available met, reclaim before evict alone drops page cache, so the re-reads
    the daemons' reclaim would bring are not charged to it. In an arena run both reclaimed in one cycle, reclaim
    before evict was judged a failure on the stream's re-reads and backed off, and the next crossing evicted the
    streaming pod and then, minimum reclaim unmet, the Guaranteed pod (docs/configuration.md)."""
    evictor, fake, clock = Evictor(), FakeReclaimer(cache_mib=900), ManualClock()
    stats = Stats(node(0, refaulted=Gi), node(2, refaulted=Gi + 60 * ONE_PERCENT, available=50 * Mi),
                  node(2, refaulted=Gi + 60 * ONE_PERCENT, available=50 * Mi + 200 * Mi))  # after the reclaim
    manager = daemons_manager(stats, fake, clock, evictor)
    before_evict = ActiveCache(cache_mib=900)  # reclaim before evict drops active page cache
    manager._memory_reclaim = MemoryReclaimStep(ReclaimSettings(enabled=True), before_evict,  # type: ignore[arg-type]
                                                clock.monotonic)
    _, met = run(manager, clock, [0.0, 2.0])
    assert [str(status.threshold.signal) for status in met.decided.assessment.thresholds] == ["memory.available"]
    assert met.daemons_reclaim is not None and not met.daemons_reclaim.attempted
    assert met.daemons_reclaim.skipped == "reclaim before evict acts on a memory threshold this cycle"
    assert fake.plans == [] and len(before_evict.plans) == 1
    assert met.acted.reclaim_succeeded and evictor.calls == []


def test_a_failed_write_is_reported_and_judged_as_any_attempt() -> None:
    evictor, fake, clock = Evictor(), FakeReclaimer(cache_mib=900, fail=True), ManualClock()
    stats = Stats(node(0, refaulted=0), node(2, refaulted=80 * ONE_PERCENT), node(4, refaulted=160 * ONE_PERCENT))
    _, failed, judged = run(daemons_manager(stats, fake, clock, evictor), clock, [0.0, 2.0, 4.0])
    use = failed.daemons_reclaim
    assert use is not None and use.attempted and use.freed_bytes == 0 and "Permission denied" in (use.error or "")
    assert judged.daemons_reclaim is not None and judged.daemons_reclaim.backing_off and evictor.calls == []


def test_each_attempt_is_logged_once_and_counted() -> None:
    evictor, fake, clock = Evictor(), FakeReclaimer(cache_mib=900), ManualClock()
    stats = Stats(*(node(second, refaulted=Gi + second * 30 * ONE_PERCENT) for second in (0, 2, 4, 6)))
    reports = run(daemons_manager(stats, fake, clock, evictor), clock, [0.0, 2.0, 4.0, 6.0])
    metrics, log = Metrics(), LogCapture()
    logger = CycleLogger(log, dry_run=False)
    for number, report in enumerate(reports, 1):
        logger.log_cycle(number, report)
        metrics.record_cycle(report, EngineState(), 0.01, clock.wall(), False)
    lines = [(event, fields) for _, event, fields in log.lines]
    attempts = [fields for event, fields in lines if event == "reclaim for the daemons"]
    assert len(attempts) == 1
    assert attempts[0]["asked_bytes"] == USAGE and attempts[0]["usage_fell_bytes"] == USAGE
    assert attempts[0]["daemons_refault"] == "60.00%"
    (verdict,) = [fields for event, fields in lines if event == "reclaim for the daemons judged"]
    assert verdict["helped"] is False and verdict["daemons_refault_after"] == "60.00%"
    skips = [fields for event, fields in lines if event == "reclaim for the daemons skipped"]
    assert len(skips) == 1 and "backing off" in skips[0]["reason"]  # the back-off's second cycle is not logged again
    value = metrics.registry.get_sample_value
    assert value("evictd_daemons_reclaim_attempts_total") == 1
    assert value("evictd_daemons_reclaimed_bytes_total") == USAGE
    assert value("evictd_daemons_reclaim_verdicts_total", {"verdict": "not_helped"}) == 1
    assert value("evictd_daemons_reclaim_verdicts_total", {"verdict": "helped"}) == 0


def test_the_setting_is_off_by_default_and_check_config_says_so(tmp_path: Any) -> None:
    default = tmp_path / "default.yaml"
    default.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n")
    on = tmp_path / "on.yaml"
    on.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\ndaemonsReclaim: true\n")
    off_config, on_config = load_configuration([str(default)]), load_configuration([str(on)])
    assert not off_config.evictd.daemons_reclaim and on_config.evictd.daemons_reclaim
    states = {verdict.protection: verdict.state for verdict in protections(off_config.protections_wanted(), None)}
    assert states[Protection.DAEMONS_RECLAIM] is State.OFF
    states = {verdict.protection: verdict.state for verdict in protections(on_config.protections_wanted(), None)}
    assert states[Protection.DAEMONS_RECLAIM] is State.UNREAD

"""The node side of the composition root (src/evictd/run/compose_node.py): PSI wake-ups, layout detection and the stats-source choice.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import structlog

from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.kubelet_summary import ApiProxySummarySource, KubeletSummarySource
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_stats import NodeStatsSource
from evictd.adapters.procfs import global_reclaim_scan_pages, inactive_file_bytes
from evictd.adapters.protection_facts import read_protection_facts
from evictd.adapters.sensors import Sensors, TargetWatch
from evictd.config import load_configuration
from evictd.core.engine import EngineConfig
from evictd.core.errors import ConfigError, SampleError
from evictd.core.fs_layout import FsLayout
from evictd.core.protections import Protection, Verdict, protections
from evictd.core.protections import State as ProtectionState
from evictd.core.quantity import Quantity
from evictd.core.signals import Reading, Signal
from evictd.core.stall_gate import CounterTrend, StallGate
from evictd.core.thresholds import Threshold, ThresholdValue, parse_stall_thresholds
from evictd.core.wake import ASSUMED_FILL_BYTES_PER_S, V1_BACKSTOP_FILL_BYTES_PER_S, WATCHES, Arming
from evictd.observe.metrics import Metrics
from evictd.run.compose_node import (
    PathLayout,
    build_memcg_notifiers,
    build_psi_notifiers,
    build_sensors,
    build_stats_source,
    psi_judge,
)
from evictd.run.composition import build_basics, check_settings
from evictd.run.plausible_stats import PlausibleStats

FIXTURE_V1 = Path(__file__).resolve().parent / "fixtures" / "cgroup" / "v1-cgroupfs"
FIXTURE_V2 = FIXTURE_V1.parent / "v2-cgroupfs"


def test_psi_wakeups_watch_the_machine_and_on_cgroup_v2_the_pods_cgroup(tmp_path: Path) -> None:
    settings = configuration(tmp_path, "psiStallThreshold: 200ms\npsiWindow: 4s\n").evictd
    log = structlog.get_logger("test")
    v2_root = tmp_path / "cgroup"
    shutil.copytree(FIXTURE_V2, v2_root)  # pods cgroup memory.pressure is a plain file here: we read what is written
    v2 = CgroupLayout(version=2, root=v2_root)
    notifiers = build_psi_notifiers(settings, v2, CgroupReader(v2), log)
    try:
        assert [(n.path, n.description) for n in notifiers] == [  # type: ignore[attr-defined]
            ("/proc/pressure/memory", "node memory pressure stall"),
            (str(v2_root / "kubepods" / "memory.pressure"), "pods cgroup memory pressure stall"),
        ]
        written = (v2_root / "kubepods" / "memory.pressure").read_bytes()
        assert written.startswith(b"some 200000 4000000\0"), "the trigger, NUL-terminated, over the file's text"
        assert (v2_root / "memory.pressure").read_bytes() == FIXTURE_V2.joinpath("memory.pressure").read_bytes(), (
            "the root cgroup's file is not the machine's: /proc/pressure/memory is")
    finally:
        for notifier in notifiers:
            notifier.close()
    v1 = CgroupLayout(version=1, root=FIXTURE_V1)
    machine_only = build_psi_notifiers(settings, v1, CgroupReader(v1), log)
    try:
        assert [n.description for n in machine_only] == ["node memory pressure stall"]  # type: ignore[attr-defined]
    finally:
        for notifier in machine_only:
            notifier.close()
    off = configuration(tmp_path, "psiWakeups: false\n").evictd
    assert build_psi_notifiers(off, v2, CgroupReader(v2), log) == ()


def test_each_stall_threshold_gets_a_trigger_at_its_share_whose_firings_are_noted(tmp_path: Path) -> None:
    settings = configuration(tmp_path, "psiStallThreshold: 100ms\npsiWindow: 2s\n").evictd
    log = structlog.get_logger("test")
    v2_root = tmp_path / "cgroup"
    shutil.copytree(FIXTURE_V2, v2_root)
    v2 = CgroupLayout(version=2, root=v2_root)
    thresholds = parse_stall_thresholds(
        {"evictd.io/memory.stall.full": "20%", "evictd.io/allocatableMemory.stall.some": "12.5%",
         "evictd.io/memory.refault": "2%"},
        {"evictd.io/memory.stall.some": "40%", "evictd.io/memory.stall.full": "0%"},
        {"evictd.io/memory.stall.some": "30s", "evictd.io/memory.stall.full": "30s"}, {})
    noted: list[tuple[Signal, float, float]] = []
    notifiers = build_psi_notifiers(settings, v2, CgroupReader(v2), log, thresholds=thresholds,
                                    note_firing=lambda *firing: noted.append(firing))
    pods_file = str(v2_root / "kubepods" / "memory.pressure")
    try:
        assert [(n.path, n.description) for n in notifiers] == [  # type: ignore[attr-defined]
            ("/proc/pressure/memory", "node memory pressure stall"),
            (pods_file, "pods cgroup memory pressure stall"),
            ("/proc/pressure/memory", "evictd.io/memory.stall.full>=20% within 2s"),
            (pods_file, "evictd.io/allocatableMemory.stall.some>=12.5% within 2s"),
            ("/proc/pressure/memory", "evictd.io/memory.stall.some>=40% within 2s"),
        ], "the refault signal reads no PSI; a 0% threshold is always met"
        # The fixture's file is plain: each trigger written on it lands at its start, the last over the others.
        assert Path(pods_file).read_bytes().startswith(b"some 250000 2000000\0")
        for notifier in notifiers:
            notifier.consume()
        assert noted == [(Signal.MEMORY_STALL_FULL, 20.0, 2.0), (Signal.ALLOCATABLE_MEMORY_STALL_SOME, 12.5, 2.0),
                         (Signal.MEMORY_STALL_SOME, 40.0, 2.0)], "the wake-up triggers note nothing"
    finally:
        for notifier in notifiers:
            notifier.close()
    v1 = CgroupLayout(version=1, root=FIXTURE_V1)
    machine_only = build_psi_notifiers(settings, v1, CgroupReader(v1), log, thresholds=thresholds,
                                       note_firing=lambda *firing: noted.append(firing))
    try:
        assert [n.description for n in machine_only] == [  # type: ignore[attr-defined]
            "node memory pressure stall", "evictd.io/memory.stall.full>=20% within 2s",
            "evictd.io/memory.stall.some>=40% within 2s"], "cgroup v1: no pods cgroup memory.pressure"
    finally:
        for notifier in machine_only:
            notifier.close()


def test_a_psi_firing_is_judged_by_the_stall_gate_on_the_counters_read_at_the_firing(tmp_path: Path) -> None:
    """With stall thresholds, a PSI firing earns a cycle only if the gate the last cycle left may open: the real
    /proc/vmstat's global scans and the pods cgroup's memory.events.local `max` read at the firing, against the
    gate's last readings (`wake_may_open`); without stall thresholds the memcg judge (v1) or none (v2) as before."""
    v2_root = tmp_path / "cgroup"
    shutil.copytree(FIXTURE_V2, v2_root)
    events = v2_root / "kubepods" / "memory.events.local"
    events.write_text("low 0\nhigh 0\nmax 7\noom 0\noom_kill 0\n")
    cgroups = CgroupReader(CgroupLayout(version=2, root=v2_root))
    assert psi_judge(None, cgroups, None) is None  # no stall thresholds, no memcg: every firing a cycle
    gate = StallGate(closed=frozenset({Signal.MEMORY_STALL_SOME}), pods_limit=CounterTrend(7))
    judge = psi_judge(None, cgroups, lambda: gate)
    assert judge is not None
    for _ in range(5):  # this machine's own reclaim may move the real counter between the two reads: read again
        gate = replace(gate, global_scan=CounterTrend(global_reclaim_scan_pages()))
        if not judge() and gate.global_scan == CounterTrend(global_reclaim_scan_pages()):
            break
    else:
        pytest.fail("a firing with the gate closed and no counter moved earned a cycle")
    events.write_text("low 0\nhigh 0\nmax 8\noom 0\noom_kill 0\n")  # the pods cgroup hit its limit since
    assert judge()
    events.write_text("low 0\nhigh 0\nmax 7\noom 0\noom_kill 0\n")
    gate = replace(gate, global_scan=CounterTrend(global_reclaim_scan_pages() - 1))  # global reclaim since
    assert judge()
    gate = replace(gate, closed=frozenset())  # nothing held back: every firing a cycle
    assert judge()


def test_every_psi_firing_judged_with_stall_thresholds_reads_the_pressure_files_first(tmp_path: Path) -> None:
    """Held back or not, a firing reads the pressure files (the stats source's `note_pressure`): the window of
    evictd's own stall share for the firing that opens the gate starts at the last firing, not at the last cycle."""
    v2_root = tmp_path / "cgroup"
    shutil.copytree(FIXTURE_V2, v2_root)
    cgroups = CgroupReader(CgroupLayout(version=2, root=v2_root))
    noted: list[int] = []
    closed = StallGate(closed=frozenset({Signal.MEMORY_STALL_SOME}))
    judge = psi_judge(None, cgroups, lambda: closed, lambda: noted.append(1))
    assert judge is not None
    judge()
    judge()
    assert noted == [1, 1]
    assert psi_judge(None, cgroups, None, lambda: noted.append(1)) is None, "no stall thresholds: no reading"


def test_memcg_levels_of_the_machines_own_hierarchy_are_armed_with_meminfos_inactive_file() -> None:
    thresholds = [Threshold(signal=Signal.MEMORY_AVAILABLE, value=ThresholdValue(quantity=Quantity.parse("1Gi")))]
    real = CgroupLayout(version=1, root=Path("/sys/fs/cgroup"))
    machine = build_memcg_notifiers(thresholds, real, CgroupReader(real), monotonic=time.monotonic)
    fixture = CgroupLayout(version=1, root=FIXTURE_V1)
    elsewhere = build_memcg_notifiers(thresholds, fixture, CgroupReader(fixture), monotonic=time.monotonic)
    try:
        assert machine.fresh_inactive_file is inactive_file_bytes
        assert elsewhere.fresh_inactive_file is None, "not the machine's hierarchy: /proc/meminfo is not its figure"
    finally:
        machine.close()
        elsewhere.close()


def test_path_layout_compares_the_filesystems_of_the_configured_folders(
    tmp_path: Path, tmpfs_mount: Path, ext4_mount: Path
) -> None:
    kubelet = str(tmp_path / "var" / "lib" / "kubelet")  # none of these folders exist yet
    images = str(tmpfs_mount / "containerd")
    layers = str(ext4_mount / "containerd" / "snapshots")
    assert PathLayout(kubelet, kubelet, kubelet).layout() == FsLayout(dedicated_imagefs=False, split_containerfs=False)
    assert PathLayout(kubelet, images, images).layout() == FsLayout(dedicated_imagefs=True, split_containerfs=False)
    assert PathLayout(kubelet, images, layers).layout() == FsLayout(dedicated_imagefs=True, split_containerfs=True)


def configuration(tmp_path: Path, evictd: str) -> Any:
    path = tmp_path / "evictd.yaml"
    path.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n" + evictd)
    return load_configuration([str(path)])


def test_build_stats_source_picks_the_configured_source(tmp_path: Path) -> None:
    cgroups = CgroupReader(CgroupLayout(version=1, root=FIXTURE_V1))
    pods = DiscoveredPods(cgroups, str(tmp_path / "logs"))
    node = build_stats_source(configuration(tmp_path, f"kubeletRootDir: {tmp_path}\n"), cgroups, "node-1",
                              discovered=pods)
    # Every source is behind the plausibility check (issue #43).
    assert isinstance(node.source, PlausibleStats) and isinstance(node.source.source, NodeStatsSource)
    assert node.disk_walker is not None
    assert node.source.summary(pods.active_pods()).node.node_name == "node-1"
    assert node.problems() == node.source.source.problems
    direct = build_stats_source(
        configuration(tmp_path, "statsSource: kubelet\nkubeletSummaryURL: https://127.0.0.1:10250/stats/summary\nkubeletInsecureTLS: true\n"),
        cgroups, "node-1")
    assert isinstance(direct.source, PlausibleStats) and isinstance(direct.source.source, KubeletSummarySource)
    assert direct.disk_walker is None
    assert direct.insecure_reason.startswith("kubeletInsecureTLS is true")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text('{"apiVersion": "v1", "kind": "Config", "current-context": "c",'
                          '"clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],'
                          '"users": [{"name": "u", "user": {"token": "t"}}],'
                          '"contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}')
    proxy = build_stats_source(configuration(tmp_path, f"statsSource: kubelet\nkubeconfig: {kubeconfig}\n"),
                               cgroups, "node-1")
    assert isinstance(proxy.source, PlausibleStats) and isinstance(proxy.source.source, ApiProxySummarySource)
    assert proxy.disk_walker is None
    with pytest.raises(SampleError) as info:
        proxy.source.summary()
    assert proxy.problems() == (info.value,)
    assert info.value.source == "/api/v1/nodes/node-1/proxy/stats/summary"


def test_stats_through_the_api_with_an_unreadable_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    cgroups = CgroupReader(CgroupLayout(version=1, root=FIXTURE_V1))
    missing = tmp_path / "no-kubeconfig"
    with pytest.raises(ConfigError) as info:
        build_stats_source(configuration(tmp_path, f"statsSource: kubelet\nkubeconfig: {missing}\n"), cgroups,
                           "node-1")
    assert (info.value.key, info.value.value) == ("kubeconfig", str(missing))


def test_stall_thresholds_gated_on_reclaim_need_the_nodes_own_figures(tmp_path: Path) -> None:
    # The kubelet's Summary has no reclaim counters: with the gate on, its stall thresholds could never be met.
    stall = "stallEvictionHard: {evictd.io/memory.stall.full: \"20%\"}\n"
    source = f"statsSource: kubelet\nkubeletSummaryURL: https://127.0.0.1:10250/stats/summary\ncgroupfsPath: {tmp_path}\n"
    with pytest.raises(ConfigError) as info:
        check_settings(configuration(tmp_path, source + stall))
    assert (info.value.key, info.value.value) == ("statsSource", "kubelet")
    assert "stallRequiresNodeReclaim: false" in str(info.value)
    check_settings(configuration(tmp_path, source + stall + "stallRequiresNodeReclaim: false\n"))
    check_settings(configuration(tmp_path, source))
    check_settings(configuration(tmp_path, f"cgroupfsPath: {tmp_path}\n" + stall))


@pytest.mark.parametrize(("kubelet", "evictd", "built"), [
    pytest.param("evictionHard: {pid.available: 25%}\n", "", True, id="pid-threshold-node-stats"),
    pytest.param("evictionSoft: {pid.available: 1k}\nevictionSoftGracePeriod: {pid.available: 30s}\n", "", True,
                 id="soft-pid-threshold"),
    pytest.param("evictionHard: {memory.available: 100Mi}\n", "", False, id="no-pid-threshold"),
    pytest.param("evictionHard: {pid.available: 25%}\n",
                 "statsSource: kubelet\nkubeletSummaryURL: https://127.0.0.1:10250/stats/summary\n", False,
                 id="the-kubelets-stats"),
])
def test_the_pid_watch_is_built_for_a_pid_threshold_on_the_nodes_own_stats(
        tmp_path: Path, kubelet: str, evictd: str, built: bool) -> None:
    with sensors_of(tmp_path, kubelet, f"cgroupfsPath: {FIXTURE_V2}\nmemcgWakeups: false\npsiWakeups: false\n"
                      + evictd) as sensors:
        counts = [(type(watch), watch.cause) for watch in sensors.watches if watch.cause == "pid_watch"]
        assert counts == ([(TargetWatch, "pid_watch")] if built else [])


def watch_of(sensors: Sensors, cause: str) -> object | None:
    """The watch of `sensors` that wakes the loop with `cause`, or None."""
    return next((watch for watch in sensors.watches if watch.cause == cause), None)


@contextmanager
def sensors_of(tmp_path: Path, kubelet: str, evictd: str) -> Iterator[Sensors]:
    """The wake-ups `build_sensors` builds for a node configured with `kubelet` and `evictd` (YAML bodies), closed
    after the block."""
    path = tmp_path / "node.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + kubelet
                    + "---\napiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n" + evictd)
    config = load_configuration([str(path)])
    basics = build_basics(config, structlog.get_logger("test"), Metrics())
    try:
        sensors = build_sensors(basics.settings, basics.cgroup_layout, basics.cgroups, basics.waiter, basics.log,
                                EngineConfig.from_settings(config.eviction), monotonic=basics.clock.monotonic)
        try:
            yield sensors
        finally:
            for watch in (*sensors.watches, sensors.memcg):
                if watch is not None:
                    watch.close()
    finally:
        basics.waiter.close()
        basics.stop.close()
        basics.cgroups.close()


@pytest.mark.parametrize(("fixture", "wakeups", "watch", "memcg"), [
    pytest.param(FIXTURE_V1, "true", True, True, id="v1-beside-the-memcg-levels"),
    pytest.param(FIXTURE_V2, "true", True, False, id="v2-alone"),
    pytest.param(FIXTURE_V1, "false", False, False, id="v1-wakeups-off"),
    pytest.param(FIXTURE_V2, "false", False, False, id="v2-wakeups-off"),
])
def test_the_memory_watch_looks_on_v1_beside_the_memcg_levels_and_on_v2_alone(
        tmp_path: Path, fixture: Path, wakeups: str, watch: bool, memcg: bool) -> None:
    # On v1 a usage level cannot announce a crossing that charges nothing (page cache turned active): the watch
    # looks there too (tests/daemon/test_run_pods.py has the real crossing).
    with sensors_of(tmp_path, "evictionHard: {memory.available: 100Mi}\n",
                      f"cgroupfsPath: {fixture}\nmemcgWakeups: {wakeups}\npsiWakeups: false\n") as sensors:
        memory_watch = watch_of(sensors, "memory_watch")
        assert isinstance(memory_watch, TargetWatch) is watch
        if isinstance(memory_watch, TargetWatch):  # the levels' backstop on v1 is paced for a faster fill
            assert WATCHES[Reading.NODE_MEMORY].rate(memory_watch.v1) == (
                V1_BACKSTOP_FILL_BYTES_PER_S if fixture == FIXTURE_V1 else ASSUMED_FILL_BYTES_PER_S)
            # on v2, where it is the only wake-up, its steady pace follows what a look costs; on v1 it is fixed
            assert memory_watch.look_budget is (fixture != FIXTURE_V1)
        assert (sensors.memcg is not None) is memcg


DAEMONS_HARD = "stallEvictionHard: {evictd.io/daemons.refault: '50%'}\n"


@pytest.mark.parametrize(("evictd", "built"), [
    pytest.param(DAEMONS_HARD, True, id="a-daemons-threshold"),
    pytest.param("stallEvictionHard: {evictd.io/memory.refault: '5%'}\n", False, id="the-nodes-refault-only"),
    pytest.param(DAEMONS_HARD + "statsSource: kubelet\nkubeletSummaryURL: https://127.0.0.1:10250/stats/summary\n"
                 "stallRequiresNodeReclaim: false\n", False, id="the-kubelets-stats"),
])
def test_the_daemons_refault_watch_is_built_for_its_threshold_on_the_nodes_own_stats(
        tmp_path: Path, evictd: str, built: bool) -> None:
    with sensors_of(tmp_path, "", f"cgroupfsPath: {FIXTURE_V2}\nmemcgWakeups: false\npsiWakeups: false\n"
                      + evictd) as sensors:
        watch = watch_of(sensors, "daemons_refault_watch")
        assert (watch is not None) == built
        sensors.arm(Arming(0.0, shares={Reading.DAEMONS_MEMORY_REFAULT: (5000,)}))  # as a cycle leaves it unmet
        assert (watch is not None and watch in sensors.waiter.notifiers) == built


def test_without_system_slice_the_daemons_signal_is_named_absent_at_start(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    shutil.copytree(FIXTURE_V2, root)
    shutil.rmtree(root / "system.slice")
    cgroups = CgroupReader(CgroupLayout(version=2, root=root))
    config = configuration(tmp_path, f"kubeletRootDir: {tmp_path}\n" + DAEMONS_HARD)
    try:
        def daemons() -> Verdict:
            found = {v.protection: v for v in protections(config.protections_wanted(None),
                                                           read_protection_facts(cgroups))}
            return found[Protection.DAEMONS_REFAULT]
        verdicts = [daemons()]
        shutil.copytree(FIXTURE_V2 / "system.slice", root / "system.slice")
        verdicts.append(daemons())
    finally:
        cgroups.close()
    assert verdicts[0].state is ProtectionState.UNAVAILABLE
    assert f"{root}/system.slice: no such cgroup (no systemd system.slice in the memory hierarchy)" in verdicts[0].detail
    assert verdicts[1].state is ProtectionState.ACTIVE

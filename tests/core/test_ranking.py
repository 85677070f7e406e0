"""Tests of evictd.core.ranking: the kubelet's rank functions (KUBELET_SPEC §9).

The ordering cases are upstream helpers_test.go (TestOrderedBy*) and eviction_manager_test.go
(TestMemoryPressure's victim), run through the full per-signal rank function; where upstream tests a single
comparator, the extra comparators of the full function do not change the expected order (noted per case).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import Json, container, core_pod
from evictd.core.fs_layout import (
    IMAGEFS_SIGNAL_TO_FS_STATS,
    SINGLE_FS_SIGNAL_TO_FS_STATS,
    SPLIT_FS_SIGNAL_TO_FS_STATS,
    FsLayout,
    FsStatsType,
    meaning_of,
)
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod
from evictd.core.quantity import Quantity
from evictd.core.ranking import (
    named_key_parts,
    pod_disk_usage,
    rank_pods,
    rank_pods_with_keys,
    sort_key,
)
from evictd.core.signals import Ranking, Resource, Signal, spec_of
from evictd.core.summary import ContainerStats, FsStats, MemoryStats, PodReference, PodStats, VolumeStats

LOW, DEFAULT, HIGH = -1, 0, 1  # eviction_manager_test.go lowPriority / defaultPriority / highPriority
SINGLE = FsLayout()
IMAGEFS = FsLayout(dedicated_imagefs=True)
SPLIT = FsLayout(dedicated_imagefs=True, split_containerfs=True)
LOCAL_VOLUME: Json = {"name": "local-volume", "emptyDir": {}}


def q(text: str) -> int:
    return Quantity.parse(text).ceil_int()


def ref(pod: Pod) -> PodReference:
    return PodReference(name=pod.name, namespace=pod.namespace, uid=pod.uid)


def disk_stats(pod: Pod, rootfs: str, logs: str, per_volume: str) -> PodStats:
    """newPodDiskStats: every container uses `rootfs` and `logs`; every local volume uses `per_volume`."""
    return PodStats(
        pod_ref=ref(pod),
        containers=tuple(
            ContainerStats(name=c.name, rootfs=FsStats(used_bytes=q(rootfs)), logs=FsStats(used_bytes=q(logs)))
            for c in pod.containers
        ),
        volume_stats=tuple(VolumeStats(name=v.name, used_bytes=q(per_volume)) for v in pod.volumes),
    )


def inode_stats(pod: Pod, rootfs: str, logs: str, per_volume: str) -> PodStats:
    """newPodInodeStats: as disk_stats, for inodes."""
    return PodStats(
        pod_ref=ref(pod),
        containers=tuple(
            ContainerStats(name=c.name, rootfs=FsStats(inodes_used=q(rootfs)), logs=FsStats(inodes_used=q(logs)))
            for c in pod.containers
        ),
        volume_stats=tuple(VolumeStats(name=v.name, inodes_used=q(per_volume)) for v in pod.volumes),
    )


def memory_stats(pod: Pod, working_set: str) -> PodStats:
    return PodStats(pod_ref=ref(pod), memory=MemoryStats(working_set_bytes=q(working_set)))


def process_stats(pod: Pod, count: int) -> PodStats:
    return PodStats(pod_ref=ref(pod), process_count=count)


def lookup(stats: Mapping[str, PodStats]) -> Callable[[Pod], PodStats | None]:
    return lambda pod: stats.get(pod.name)


def names(pods: Sequence[Pod]) -> list[str]:
    return [pod.name for pod in pods]


# ---------------------------------------------------------------------------------------------------------
# upstream orderings


def test_ordered_by_exceeds_request_memory() -> None:
    below = core_pod("below-requests", priority=LOW, requests={"memory": "200Mi"})
    exceeds = core_pod("exceeds-requests", priority=HIGH, requests={"memory": "100Mi"})
    stats = {below.name: memory_stats(below, "199Mi"), exceeds.name: memory_stats(exceeds, "101Mi")}
    ranked = rank_pods(Signal.MEMORY_AVAILABLE, SINGLE, [below, exceeds], lookup(stats))
    assert names(ranked) == ["exceeds-requests", "below-requests"]


def test_ordered_by_exceeds_request_disk() -> None:
    below = core_pod("below-requests", priority=LOW, requests={"ephemeral-storage": "200Mi"})
    exceeds = core_pod("exceeds-requests", priority=HIGH, requests={"ephemeral-storage": "100Mi"})
    stats = {
        below.name: disk_stats(below, "100Mi", "99Mi", "0Mi"),
        exceeds.name: disk_stats(exceeds, "90Mi", "11Mi", "0Mi"),
    }
    ranked = rank_pods(Signal.NODEFS_AVAILABLE, SINGLE, [below, exceeds], lookup(stats))
    assert names(ranked) == ["exceeds-requests", "below-requests"]


def test_ordered_by_priority() -> None:
    low = core_pod("low-priority", priority=-134)
    medium = core_pod("medium-priority", priority=1, requests={"cpu": "100m", "memory": "100Mi"})
    high = core_pod("high-priority", priority=12534, requests={"cpu": "200m", "memory": "200Mi"})
    # pid ranking is priority, then process count: with no stats at all, priority alone decides.
    ranked = rank_pods(Signal.PID_AVAILABLE, SINGLE, [high, medium, low], lookup({}))
    assert names(ranked) == ["low-priority", "medium-priority", "high-priority"]


def test_ordered_by_disk() -> None:
    # Upstream runs only the disk comparator; every pod here has default priority, and the exceed split
    # (pod5 and pod6 are below their requests) keeps the same order.
    pods = [
        core_pod("best-effort-high", volumes=[LOCAL_VOLUME]),
        core_pod("best-effort-low", volumes=[LOCAL_VOLUME]),
        core_pod("burstable-high", requests={"ephemeral-storage": "100Mi"}, volumes=[LOCAL_VOLUME]),
        core_pod("burstable-low", requests={"ephemeral-storage": "100Mi"}, volumes=[LOCAL_VOLUME]),
        core_pod("guaranteed-high", requests={"ephemeral-storage": "400Mi"}, volumes=[LOCAL_VOLUME]),
        core_pod("guaranteed-low", requests={"ephemeral-storage": "400Mi"}, volumes=[LOCAL_VOLUME]),
    ]
    usage = [  # rootfs, logs, local volume: usage - request
        ("50Mi", "100Mi", "150Mi"),  # 300Mi - 0
        ("25Mi", "25Mi", "50Mi"),  # 100Mi - 0
        ("150Mi", "150Mi", "50Mi"),  # 350Mi - 100Mi = 250Mi
        ("25Mi", "35Mi", "50Mi"),  # 110Mi - 100Mi = 10Mi
        ("225Mi", "100Mi", "50Mi"),  # 375Mi - 400Mi = -25Mi
        ("25Mi", "45Mi", "50Mi"),  # 120Mi - 400Mi = -280Mi
    ]
    stats = {pod.name: disk_stats(pod, *u) for pod, u in zip(pods, usage, strict=True)}
    ranked = rank_pods(Signal.NODEFS_AVAILABLE, SINGLE, pods, lookup(stats))
    assert names(ranked) == [
        "best-effort-high",
        "burstable-high",
        "best-effort-low",
        "burstable-low",
        "guaranteed-high",
        "guaranteed-low",
    ]


def test_ordered_by_inodes() -> None:
    low = core_pod("low", volumes=[LOCAL_VOLUME])
    medium = core_pod("medium", volumes=[LOCAL_VOLUME])
    high = core_pod("high", volumes=[LOCAL_VOLUME])
    stats = {
        low.name: inode_stats(low, "50000", "100000", "50000"),  # 200000
        medium.name: inode_stats(medium, "100000", "150000", "50000"),  # 300000
        high.name: inode_stats(high, "200000", "150000", "50000"),  # 400000
    }
    ranked = rank_pods(Signal.NODEFS_INODES_FREE, SINGLE, [low, medium, high], lookup(stats))
    assert names(ranked) == ["high", "medium", "low"]


def test_ordered_by_priority_disk() -> None:
    spec = [  # name, priority, ephemeral-storage request, (rootfs, logs, local volume)
        ("above-requests-low-priority-high-usage", LOW, None, ("200Mi", "100Mi", "200Mi")),
        ("above-requests-low-priority-low-usage", LOW, None, ("10Mi", "10Mi", "30Mi")),
        ("above-requests-high-priority-high-usage", HIGH, "100Mi", ("200Mi", "150Mi", "250Mi")),
        ("above-requests-high-priority-low-usage", HIGH, "100Mi", ("90Mi", "50Mi", "10Mi")),
        ("below-requests-low-priority-high-usage", LOW, "1Gi", ("500Mi", "200Mi", "100Mi")),
        ("below-requests-low-priority-low-usage", LOW, "1Gi", ("50Mi", "100Mi", "50Mi")),
        ("below-requests-high-priority-high-usage", HIGH, "1Gi", ("250Mi", "500Mi", "50Mi")),
        ("below-requests-high-priority-low-usage", HIGH, "1Gi", ("100Mi", "60Mi", "40Mi")),
    ]
    pods, stats = [], {}
    for name, priority, request, usage in spec:
        requests = {"ephemeral-storage": request} if request else None
        pod = core_pod(name, priority=priority, requests=requests, volumes=[LOCAL_VOLUME])
        pods.append(pod)
        stats[name] = disk_stats(pod, *usage)
    ranked = rank_pods(Signal.NODEFS_AVAILABLE, SINGLE, list(reversed(pods)), lookup(stats))
    assert names(ranked) == [name for name, *_ in spec]


def test_ordered_by_priority_inodes() -> None:
    # Upstream: priority then inode usage. No pod requests inodes, so all "exceed" and the split is moot.
    spec = [
        ("low-priority-high-usage", LOW, ("50000", "100000", "250000")),  # 400000
        ("low-priority-low-usage", LOW, ("60000", "30000", "10000")),  # 100000
        ("high-priority-high-usage", HIGH, ("150000", "150000", "50000")),  # 350000
        ("high-priority-low-usage", HIGH, ("10000", "40000", "100000")),  # 150000
    ]
    pods = [core_pod(name, priority=priority, volumes=[LOCAL_VOLUME]) for name, priority, _ in spec]
    stats = {pod.name: inode_stats(pod, *usage) for pod, (_, _, usage) in zip(pods, spec, strict=True)}
    ranked = rank_pods(Signal.IMAGEFS_INODES_FREE, SINGLE, list(reversed(pods)), lookup(stats))
    assert names(ranked) == [name for name, *_ in spec]


def test_ordered_by_memory() -> None:
    # Upstream runs only the memory comparator; the exceed split and equal priorities keep the order.
    spec = [
        ("best-effort-high", None, "500Mi"),  # 500 relative to request
        ("best-effort-low", None, "300Mi"),  # 300
        ("burstable-high", "100Mi", "800Mi"),  # 700
        ("burstable-low", "100Mi", "300Mi"),  # 200
        ("guaranteed-high", "1Gi", "800Mi"),  # -224
        ("guaranteed-low", "1Gi", "200Mi"),  # -824
    ]
    pods = [core_pod(name, requests={"memory": req} if req else None) for name, req, _ in spec]
    stats = {pod.name: memory_stats(pod, ws) for pod, (_, _, ws) in zip(pods, spec, strict=True)}
    ranked = rank_pods(Signal.MEMORY_AVAILABLE, SINGLE, pods, lookup(stats))
    assert names(ranked) == [
        "burstable-high",
        "best-effort-high",
        "best-effort-low",
        "burstable-low",
        "guaranteed-high",
        "guaranteed-low",
    ]


def test_ordered_by_priority_memory() -> None:
    spec = [
        ("above-requests-low-priority-high-usage", LOW, None, "500Mi"),
        ("above-requests-low-priority-low-usage", LOW, None, "50Mi"),
        ("above-requests-high-priority-high-usage", HIGH, "100Mi", "600Mi"),
        ("above-requests-high-priority-low-usage", HIGH, "100Mi", "150Mi"),
        ("below-requests-low-priority-high-usage", LOW, "1Gi", "800Mi"),
        ("below-requests-low-priority-low-usage", LOW, "1Gi", "200Mi"),
        ("below-requests-high-priority-high-usage", HIGH, "1Gi", "800Mi"),
        ("below-requests-high-priority-low-usage", HIGH, "1Gi", "200Mi"),
    ]
    pods = [core_pod(name, priority=prio, requests={"memory": req} if req else None) for name, prio, req, _ in spec]
    stats = {pod.name: memory_stats(pod, ws) for pod, (*_, ws) in zip(pods, spec, strict=True)}
    ranked = rank_pods(Signal.ALLOCATABLE_MEMORY_AVAILABLE, SINGLE, list(reversed(pods)), lookup(stats))
    assert names(ranked) == [name for name, *_ in spec]


def test_ordered_by_priority_process() -> None:
    spec = [
        ("low-priority-high-usage", LOW, 20),
        ("low-priority-low-usage", LOW, 6),
        ("high-priority-high-usage", HIGH, 20),
        ("high-priority-low-usage", HIGH, 5),
    ]
    pods = [core_pod(name, priority=prio) for name, prio, _ in spec]
    stats = {pod.name: process_stats(pod, n) for pod, (*_, n) in zip(pods, spec, strict=True)}
    ranked = rank_pods(Signal.PID_AVAILABLE, SINGLE, list(reversed(pods)), lookup(stats))
    assert names(ranked) == [name for name, *_ in spec]


def test_memory_pressure_victim_of_eviction_manager_test() -> None:
    # eviction_manager_test.go TestMemoryPressure: podToEvict is best-effort-low-priority-low-usage.
    spec = [
        ("guaranteed-low-priority-high-usage", LOW, "1Gi", "900Mi"),
        ("burstable-below-requests", DEFAULT, "100Mi", "50Mi"),
        ("burstable-above-requests", DEFAULT, "100Mi", "400Mi"),
        ("best-effort-high-priority-high-usage", HIGH, None, "400Mi"),
        ("best-effort-low-priority-low-usage", LOW, None, "100Mi"),
    ]
    pods = [core_pod(name, priority=prio, requests={"memory": req} if req else None) for name, prio, req, _ in spec]
    stats = {pod.name: memory_stats(pod, ws) for pod, (*_, ws) in zip(pods, spec, strict=True)}
    ranked = rank_pods(Signal.MEMORY_AVAILABLE, SINGLE, pods, lookup(stats))
    assert names(ranked) == [
        "best-effort-low-priority-low-usage",
        "burstable-above-requests",
        "best-effort-high-priority-high-usage",
        "guaranteed-low-priority-high-usage",
        "burstable-below-requests",
    ]


# ---------------------------------------------------------------------------------------------------------
# rules and quirks


@pytest.mark.parametrize(
    "signal",
    [Signal.MEMORY_AVAILABLE, Signal.PID_AVAILABLE, Signal.NODEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE],
)
def test_pods_without_stats_come_first_and_tie_among_themselves(signal: Signal) -> None:
    with_stats = core_pod("with-stats", priority=LOW)
    no_stats_a = core_pod("no-stats-a", priority=HIGH)
    no_stats_b = core_pod("no-stats-b", priority=HIGH)
    stats = {
        with_stats.name: PodStats(
            pod_ref=ref(with_stats),
            memory=MemoryStats(working_set_bytes=q("1Gi")),
            process_count=100,
            containers=(ContainerStats(name="with-stats", rootfs=FsStats(used_bytes=1, inodes_used=1)),),
        )
    }
    ranked = rank_pods(signal, SINGLE, [with_stats, no_stats_a, no_stats_b], lookup(stats))
    if signal is Signal.PID_AVAILABLE:
        # pid ranking puts priority before the stats rule: the low-priority pod with stats goes first.
        assert names(ranked) == ["with-stats", "no-stats-a", "no-stats-b"]
    else:
        assert names(ranked) == ["no-stats-a", "no-stats-b", "with-stats"]


def test_nil_priority_counts_as_zero() -> None:
    unset = core_pod("unset", priority=None)
    negative = core_pod("negative", priority=-1)
    positive = core_pod("positive", priority=1)
    ranked = rank_pods(Signal.PID_AVAILABLE, SINGLE, [positive, unset, negative], lookup({}))
    assert names(ranked) == ["negative", "unset", "positive"]


def test_qos_is_not_a_ranking_key() -> None:
    # A Guaranteed pod above its request is evicted before a BestEffort pod using nothing.
    guaranteed = pod_from_dict(
        {
            "metadata": {"name": "guaranteed"},
            "spec": {
                "containers": [
                    {
                        "name": "g",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "100Mi"},
                            "limits": {"cpu": "1", "memory": "100Mi"},
                        },
                    }
                ]
            },
        }
    )
    best_effort = core_pod("best-effort")
    stats = {"guaranteed": memory_stats(guaranteed, "101Mi"), "best-effort": memory_stats(best_effort, "0")}
    ranked = rank_pods(Signal.MEMORY_AVAILABLE, SINGLE, [best_effort, guaranteed], lookup(stats))
    assert names(ranked) == ["guaranteed", "best-effort"]


def test_inode_ranking_subtracts_the_ephemeral_storage_byte_request() -> None:
    # 1000 inodes with no request beat 5000 inodes minus a 1Mi (1048576) ephemeral-storage request.
    few = core_pod("few-inodes")
    many = core_pod("many-inodes", requests={"ephemeral-storage": "1Mi"})
    stats = {few.name: inode_stats(few, "1000", "0", "0"), many.name: inode_stats(many, "5000", "0", "0")}
    ranked = rank_pods(Signal.NODEFS_INODES_FREE, SINGLE, [many, few], lookup(stats))
    assert names(ranked) == ["few-inodes", "many-inodes"]


def test_split_layout_imagefs_ranking_ignores_usage() -> None:
    # With images and containers on separate filesystems imagefs ranking measures "images": nothing. All
    # pods fall below their requests, then priority, then the smallest ephemeral-storage request first.
    heavy = core_pod("heavy-user-no-request")
    small = core_pod("small-request", requests={"ephemeral-storage": "10Mi"})
    big = core_pod("big-request", requests={"ephemeral-storage": "1Gi"})
    stats = {
        heavy.name: disk_stats(heavy, "10Gi", "10Gi", "0"),
        small.name: disk_stats(small, "1Gi", "1Gi", "0"),
        big.name: disk_stats(big, "0", "0", "0"),
    }
    ranked = rank_pods(Signal.IMAGEFS_AVAILABLE, SPLIT, [big, small, heavy], lookup(stats))
    assert names(ranked) == ["heavy-user-no-request", "small-request", "big-request"]


@pytest.mark.parametrize(
    ("signal", "layout", "expected"),
    [
        pytest.param(Signal.NODEFS_AVAILABLE, SINGLE, ["rootfs-heavy", "logs-heavy"], id="single-counts-rootfs"),
        pytest.param(
            Signal.NODEFS_AVAILABLE, IMAGEFS, ["logs-heavy", "rootfs-heavy"], id="imagefs-nodefs-without-rootfs"
        ),
        pytest.param(Signal.IMAGEFS_AVAILABLE, IMAGEFS, ["rootfs-heavy", "logs-heavy"], id="imagefs-imagefs-is-rootfs"),
        pytest.param(
            Signal.CONTAINERFS_AVAILABLE, IMAGEFS, ["rootfs-heavy", "logs-heavy"], id="imagefs-containerfs-as-imagefs"
        ),
        pytest.param(Signal.NODEFS_AVAILABLE, SPLIT, ["rootfs-heavy", "logs-heavy"], id="split-nodefs-with-rootfs"),
        pytest.param(
            Signal.CONTAINERFS_AVAILABLE, SPLIT, ["rootfs-heavy", "logs-heavy"], id="split-containerfs-as-nodefs"
        ),
    ],
)
def test_layout_selects_what_disk_ranking_measures(signal: Signal, layout: FsLayout, expected: list[str]) -> None:
    rootfs_heavy = core_pod("rootfs-heavy")
    logs_heavy = core_pod("logs-heavy")
    stats = {
        rootfs_heavy.name: disk_stats(rootfs_heavy, "900Mi", "10Mi", "0"),
        logs_heavy.name: disk_stats(logs_heavy, "10Mi", "100Mi", "0"),
    }
    ranked = rank_pods(signal, layout, [logs_heavy, rootfs_heavy], lookup(stats))
    assert names(ranked) == expected


ALL = (FsStatsType.IMAGES, FsStatsType.ROOT, FsStatsType.LOGS, FsStatsType.LOCAL_VOLUME_SOURCE)
LOGS_LOCAL = (FsStatsType.LOGS, FsStatsType.LOCAL_VOLUME_SOURCE)
ROOT_IMAGES = (FsStatsType.ROOT, FsStatsType.IMAGES)
LOGS_LOCAL_ROOT = (FsStatsType.LOGS, FsStatsType.LOCAL_VOLUME_SOURCE, FsStatsType.ROOT)


@pytest.mark.parametrize(
    ("signal", "layout", "expected"),
    [
        (Signal.NODEFS_AVAILABLE, SINGLE, ALL),
        (Signal.IMAGEFS_INODES_FREE, SINGLE, ALL),
        (Signal.CONTAINERFS_AVAILABLE, SINGLE, ALL),
        (Signal.NODEFS_INODES_FREE, IMAGEFS, LOGS_LOCAL),
        (Signal.IMAGEFS_AVAILABLE, IMAGEFS, ROOT_IMAGES),
        (Signal.CONTAINERFS_INODES_FREE, IMAGEFS, ROOT_IMAGES),
        (Signal.NODEFS_AVAILABLE, SPLIT, LOGS_LOCAL_ROOT),
        (Signal.CONTAINERFS_AVAILABLE, SPLIT, LOGS_LOCAL_ROOT),
        (Signal.IMAGEFS_INODES_FREE, SPLIT, (FsStatsType.IMAGES,)),
        # Split without a dedicated imagefs cannot happen in practice; upstream falls back to single fs.
        (Signal.NODEFS_AVAILABLE, FsLayout(split_containerfs=True), ALL),
        (Signal.MEMORY_AVAILABLE, SINGLE, None),
        (Signal.PID_AVAILABLE, SPLIT, None),
    ],
    ids=lambda v: v.value if isinstance(v, Signal) else None,
)
def test_disk_fs_stats_table(signal: Signal, layout: FsLayout, expected: tuple[FsStatsType, ...] | None) -> None:
    assert meaning_of(layout).rank_fs_stats.get(signal) == expected


def test_tables_cover_every_disk_signal() -> None:
    disk_signals = {s for s in Signal if spec_of(s).ranking is Ranking.DISK}
    for table in (SINGLE_FS_SIGNAL_TO_FS_STATS, IMAGEFS_SIGNAL_TO_FS_STATS, SPLIT_FS_SIGNAL_TO_FS_STATS):
        assert set(table) == disk_signals


VOLUMES: list[Json] = [
    {"name": "empty", "emptyDir": {}},
    {"name": "memory", "emptyDir": {"medium": "Memory"}},
    {"name": "host", "hostPath": {"path": "/data"}},
    {"name": "config", "configMap": {"name": "cm"}},
    {"name": "git", "gitRepo": {"repository": "r"}},
    {"name": "secret", "secret": {"secretName": "s"}},
    {"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}},
]


@pytest.mark.parametrize(
    ("fs_stats", "expected_bytes", "expected_inodes"),
    [
        pytest.param((FsStatsType.ROOT,), 1 + 10, 2 + 20, id="root"),
        pytest.param((FsStatsType.LOGS,), 100 + 1000, 200 + 2000, id="logs"),
        # empty + host + config + git; the duplicate "empty" stats entry is ignored (first wins).
        pytest.param((FsStatsType.LOCAL_VOLUME_SOURCE,), 1 + 4 + 8 + 16, 3 + 5 + 7 + 9, id="local-volumes"),
        pytest.param((FsStatsType.IMAGES,), 0, 0, id="images-measure-nothing"),
        pytest.param(ALL, 11 + 1100 + 29, 22 + 2200 + 24, id="all"),
    ],
)
def test_pod_disk_usage(fs_stats: tuple[FsStatsType, ...], expected_bytes: int, expected_inodes: int) -> None:
    pod = pod_from_dict(
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}], "volumes": VOLUMES}}
    )
    stats = PodStats(
        pod_ref=ref(pod),
        containers=(
            ContainerStats(
                name="a",
                rootfs=FsStats(used_bytes=1, inodes_used=2),
                logs=FsStats(used_bytes=100, inodes_used=200),
            ),
            ContainerStats(
                name="b",
                rootfs=FsStats(used_bytes=10, inodes_used=20),
                logs=FsStats(used_bytes=1000, inodes_used=2000),
            ),
            ContainerStats(name="no-fs-stats"),
        ),
        volume_stats=(
            VolumeStats(name="empty", used_bytes=1, inodes_used=3),
            VolumeStats(name="empty", used_bytes=999, inodes_used=999),
            VolumeStats(name="memory", used_bytes=2, inodes_used=4),
            VolumeStats(name="host", used_bytes=4, inodes_used=5),
            VolumeStats(name="config", used_bytes=8, inodes_used=7),
            VolumeStats(name="git", used_bytes=16, inodes_used=9),
            VolumeStats(name="secret", used_bytes=32, inodes_used=11),
            VolumeStats(name="pvc", used_bytes=64, inodes_used=13),
            VolumeStats(name="not-in-spec", used_bytes=128, inodes_used=15),
        ),
    )
    usage = pod_disk_usage(stats, pod, fs_stats)
    assert usage == {Resource.EPHEMERAL_STORAGE: expected_bytes, Resource.INODES: expected_inodes}


def test_rank_returns_new_list_and_leaves_input_alone() -> None:
    pods = [core_pod("a", priority=HIGH), core_pod("b", priority=LOW)]
    before = list(pods)
    ranked = rank_pods(Signal.PID_AVAILABLE, SINGLE, pods, lookup({}))
    assert names(ranked) == ["b", "a"]
    assert pods == before
    assert ranked is not pods


def test_ties_keep_input_order() -> None:
    pods = [core_pod(f"p{i}") for i in range(20)]
    stats = {pod.name: memory_stats(pod, "10Mi") for pod in pods}
    for signal in (Signal.MEMORY_AVAILABLE, Signal.NODEFS_AVAILABLE, Signal.PID_AVAILABLE):
        assert names(rank_pods(signal, SINGLE, pods, lookup(stats))) == names(pods)


# ---------------------------------------------------------------------------------------------------------
# property: ranking is a permutation


USAGE = st.none() | st.integers(min_value=0, max_value=2**40)
FS_STATS = st.none() | st.builds(FsStats, used_bytes=USAGE, inodes_used=USAGE)


@st.composite
def pods_and_stats(draw: st.DrawFn) -> tuple[list[Pod], dict[str, PodStats]]:
    count = draw(st.integers(min_value=0, max_value=15))
    pods: list[Pod] = []
    stats: dict[str, PodStats] = {}
    for i in range(count):
        requests = draw(
            st.dictionaries(
                st.sampled_from(["memory", "ephemeral-storage", "cpu"]),
                st.sampled_from(["0", "1", "100Mi", "1Gi", "1500m", "2G"]),
                max_size=3,
            )
        )
        volumes = draw(st.lists(st.sampled_from(VOLUMES), max_size=3, unique_by=lambda v: v["name"]))
        name = f"pod-{i}"
        containers = [container(name if n == 0 else f"{name}-{n}", requests) for n in range(draw(st.integers(1, 3)))]
        pod = core_pod(name, priority=draw(st.none() | st.integers(-5, 5)), containers=containers, volumes=volumes)
        pods.append(pod)
        if draw(st.booleans()):
            stats[pod.name] = PodStats(
                pod_ref=ref(pod),
                memory=draw(st.none() | st.builds(MemoryStats, working_set_bytes=USAGE)),
                containers=tuple(
                    ContainerStats(name=c.name, rootfs=draw(FS_STATS), logs=draw(FS_STATS)) for c in pod.containers
                ),
                volume_stats=tuple(
                    VolumeStats(name=v.name, used_bytes=draw(USAGE), inodes_used=draw(USAGE)) for v in pod.volumes
                ),
                process_count=draw(USAGE),
            )
    if draw(st.booleans()):
        pods.reverse()
    return pods, stats


@settings(max_examples=200, deadline=None)
@given(
    pods_and_stats(),
    st.sampled_from(list(Signal)),
    st.sampled_from([SINGLE, IMAGEFS, SPLIT, FsLayout(split_containerfs=True)]),
)
def test_ranking_is_a_permutation_of_its_input(
    data: tuple[list[Pod], dict[str, PodStats]], signal: Signal, layout: FsLayout
) -> None:
    pods, stats = data
    before = list(pods)
    ranked = rank_pods(signal, layout, pods, lookup(stats))
    assert pods == before
    assert sorted(names(ranked)) == sorted(names(pods))
    assert len(ranked) == len(pods)
    # Ranking is idempotent: ranking the ranked list changes nothing (keys are a total preorder).
    assert names(rank_pods(signal, layout, ranked, lookup(stats))) == names(ranked)


@pytest.mark.parametrize("signal", [Signal.MEMORY_AVAILABLE, Signal.PID_AVAILABLE, Signal.NODEFS_AVAILABLE,
                                    Signal.NODEFS_INODES_FREE])
def test_the_keys_ranked_by_are_given_with_the_order_and_named_by_their_parts(signal: Signal) -> None:
    pods = [core_pod(f"p{i}", requests={"memory": f"{i}Mi" if i != 5 else "1500m",  # 1.5 bytes: a Fraction
                                       "ephemeral-storage": f"{i}Mi"}, priority=i % 2)
            for i in range(6)]
    stats = {pod.name: PodStats(pod_ref=PodReference(name=pod.name, namespace=pod.namespace, uid=pod.uid),
                                memory=MemoryStats(working_set_bytes=(5 - i) * 3 << 20),
                                containers=(ContainerStats(name="c", rootfs=FsStats(used_bytes=i << 21,
                                                                                     inodes_used=7 * i)),),
                                process_count=i)
             for i, pod in enumerate(pods) if i != 3}  # p3 has no stats

    def stats_of(pod: Pod) -> PodStats | None:
        return stats.get(pod.name)

    layout = FsLayout()
    ranked, keys = rank_pods_with_keys(signal, layout, pods, stats_of)
    assert list(ranked) == rank_pods(signal, layout, pods, stats_of)
    for pod, key in zip(ranked, keys, strict=True):
        assert key == sort_key(signal, layout, pod, stats_of(pod))
    parts = {pod.name: named_key_parts(signal, key) for pod, key in zip(ranked, keys, strict=True)}
    usage = "processes" if signal is Signal.PID_AVAILABLE else "usageAboveRequest"
    assert parts["p3"][usage] is None and parts["p3"].get("exceedsRequests") is None  # no stats
    assert {name: p["priority"] for name, p in parts.items()} == {f"p{i}": i % 2 for i in range(6)}
    if signal is Signal.MEMORY_AVAILABLE:  # working set (5 - i) * 3 MiB above a request of i MiB
        assert parts["p1"] == {"exceedsRequests": True, "priority": 1, "usageAboveRequest": (12 - 1) << 20}
        assert parts["p5"]["usageAboveRequest"] == Fraction(-3, 2)  # 1.5 bytes requested, none used
    if signal is Signal.PID_AVAILABLE:
        assert parts["p4"] == {"priority": 0, "processes": 4}

"""Tests of evictd.core.local_storage: emptyDir, pod and container ephemeral-storage limit evictions (§12).

The first case is upstream eviction_manager_test.go TestManagerWithLocalStorageCapacityIsolationOpen (three
pods, each breaking a different rule, all evicted in one cycle) with the messages upstream would write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest

from builders import Json, container, core_pod
from evictd.core.fs_layout import FsLayout
from evictd.core.local_storage import LocalStorageEviction, local_storage_evictions
from evictd.core.pods import Pod
from evictd.core.quantity import Quantity
from evictd.core.summary import ContainerStats, FsStats, MemoryStats, PodReference, PodStats, VolumeStats

MI = 1024**2


def q(text: str) -> int:
    return Quantity.parse(text).ceil_int()


def uniform_stats(pod: Pod, used: int) -> PodStats:
    """newPodMemoryStats: `used` for memory, the local-volume, container logs and rootfs, and the pod."""
    return PodStats(
        pod_ref=PodReference(pod.name, pod.namespace, pod.uid),
        memory=MemoryStats(working_set_bytes=used),
        volume_stats=(VolumeStats(name="local-volume", used_bytes=used),),
        containers=(ContainerStats(name=pod.name, logs=FsStats(used_bytes=used), rootfs=FsStats(used_bytes=used)),),
        ephemeral_storage=FsStats(used_bytes=used),
    )


def lookup(stats: Mapping[str, PodStats]) -> Callable[[Pod], PodStats | None]:
    return lambda pod: stats.get(pod.name)


def summary_of(evictions: Sequence[LocalStorageEviction]) -> list[tuple[str, str, str]]:
    return [(e.pod.name, e.signal, e.message) for e in evictions]


def test_manager_with_local_storage_capacity_isolation_open() -> None:
    def local_volume(size_limit: str) -> Json:
        return {"name": "local-volume", "emptyDir": {"sizeLimit": size_limit}}

    # The emptyDir sizeLimit is the memory request (0 when there is none, which disables the rule).
    empty_dir = core_pod(
        "empty-dir",
        containers=[container("empty-dir", {"memory": "900Mi"}, {"memory": "1Gi"})],
        volumes=[local_volume("900Mi")],
    )
    container_limit = core_pod(
        "container-ephemeral-storage-limit",
        containers=[
            container(
                "container-ephemeral-storage-limit",
                {"ephemeral-storage": "900Mi"},
                {"ephemeral-storage": "800Mi"},
            )
        ],
        volumes=[local_volume("0")],
    )
    pod_limit = core_pod(
        "pod-ephemeral-storage-limit",
        containers=[container(
            "pod-ephemeral-storage-limit",
            {"ephemeral-storage": "1Gi"},
            {"ephemeral-storage": "800Mi"},
        )],
        volumes=[local_volume("0")],
    )
    stats = {
        empty_dir.name: uniform_stats(empty_dir, 900 * MI * 2),
        container_limit.name: uniform_stats(container_limit, 800 * MI),
        pod_limit.name: uniform_stats(pod_limit, 800 * MI * 2),
    }
    evictions = local_storage_evictions([empty_dir, container_limit, pod_limit], lookup(stats), FsLayout())
    assert summary_of(evictions) == [
        ("empty-dir", "emptydirfs.limit", 'Usage of EmptyDir volume "local-volume" exceeds the limit "900Mi". '),
        (
            "container-ephemeral-storage-limit",
            "ephemeralcontainerfs.limit",
            'Container container-ephemeral-storage-limit exceeded its local ephemeral storage limit "800Mi". ',
        ),
        (
            "pod-ephemeral-storage-limit",
            "ephemeralpodfs.limit",
            "Pod ephemeral local storage usage exceeds the total limit of containers 800Mi. ",
        ),
    ]
    assert [e.pod for e in evictions] == [empty_dir, container_limit, pod_limit]


# ---------------------------------------------------------------------------------------------------------
# which pods are checked


BREAKS_EMPTYDIR: Json = {"name": "cache", "emptyDir": {"sizeLimit": "1Mi"}}


def emptydir_stats(pod: Pod, used: int | None) -> PodStats:
    return PodStats(
        pod_ref=PodReference(pod.name, pod.namespace, pod.uid), volume_stats=(VolumeStats("cache", used_bytes=used),)
    )


@pytest.mark.parametrize(
    ("annotations", "priority", "evicted"),
    [
        pytest.param({}, None, True, id="ordinary-pod"),
        pytest.param({"kubernetes.io/config.source": "file"}, None, False, id="static-pod"),
        pytest.param({"kubernetes.io/config.source": "api"}, None, True, id="api-pod"),
        pytest.param({"kubernetes.io/config.mirror": "x"}, None, False, id="mirror-pod"),
        pytest.param({}, 2_000_000_000, False, id="system-cluster-critical"),
        pytest.param({}, 1_999_999_999, True, id="just-below-critical"),
    ],
)
def test_critical_pods_are_never_listed(annotations: dict[str, str], priority: int | None, evicted: bool) -> None:
    pod = core_pod("p", volumes=[BREAKS_EMPTYDIR], annotations=annotations, priority=priority)
    evictions = local_storage_evictions([pod], lookup({"p": emptydir_stats(pod, 2 * MI)}), FsLayout())
    assert [e.pod.name for e in evictions] == (["p"] if evicted else [])


def test_pods_without_stats_are_skipped_and_order_is_kept() -> None:
    pods = [core_pod(name, volumes=[BREAKS_EMPTYDIR]) for name in ("c", "a", "no-stats", "b")]
    stats = {pod.name: emptydir_stats(pod, 2 * MI) for pod in pods if pod.name != "no-stats"}
    assert [e.pod.name for e in local_storage_evictions(pods, lookup(stats), FsLayout())] == ["c", "a", "b"]


def test_first_rule_wins() -> None:
    pod = core_pod(
        "p",
        containers=[container("app", limits={"ephemeral-storage": "1Mi"})],
        volumes=[BREAKS_EMPTYDIR],
    )
    stats = PodStats(
        pod_ref=PodReference("p", "default", "p"),
        volume_stats=(VolumeStats("cache", used_bytes=2 * MI),),
        containers=(ContainerStats(name="app", logs=FsStats(used_bytes=2 * MI)),),
        ephemeral_storage=FsStats(used_bytes=4 * MI),
    )
    evictions = local_storage_evictions([pod], lookup({"p": stats}), FsLayout())
    assert [e.signal for e in evictions] == ["emptydirfs.limit"]
    without_emptydir = PodStats(
        pod_ref=stats.pod_ref, containers=stats.containers, ephemeral_storage=stats.ephemeral_storage
    )
    evictions = local_storage_evictions([pod], lookup({"p": without_emptydir}), FsLayout())
    assert [e.signal for e in evictions] == ["ephemeralpodfs.limit"]


# ---------------------------------------------------------------------------------------------------------
# emptyDir rule


@pytest.mark.parametrize(
    ("volume", "volume_stats", "evicted"),
    [
        pytest.param(BREAKS_EMPTYDIR, [VolumeStats("cache", used_bytes=MI + 1)], True, id="one-byte-over"),
        pytest.param(BREAKS_EMPTYDIR, [VolumeStats("cache", used_bytes=MI)], False, id="equal-is-not-over"),
        pytest.param(
            {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            [VolumeStats("cache", used_bytes=2 * MI)],
            True,
            id="memory-medium-counts-too",
        ),
        pytest.param(
            {"name": "cache", "emptyDir": {"sizeLimit": "0"}},
            [VolumeStats("cache", used_bytes=2 * MI)],
            False,
            id="zero-size-limit-ignored",
        ),
        pytest.param(
            {"name": "cache", "emptyDir": {}}, [VolumeStats("cache", used_bytes=2 * MI)], False, id="no-size-limit"
        ),
        pytest.param(BREAKS_EMPTYDIR, [VolumeStats("other", used_bytes=2 * MI)], False, id="no-stats-for-volume"),
        pytest.param(BREAKS_EMPTYDIR, [VolumeStats("cache")], False, id="stats-without-used-bytes"),
        pytest.param(
            BREAKS_EMPTYDIR,
            [VolumeStats("cache", used_bytes=2 * MI), VolumeStats("cache", used_bytes=1)],
            False,
            id="last-stats-entry-of-a-name-wins",
        ),
        pytest.param(
            {"name": "cache", "hostPath": {"path": "/x"}},
            [VolumeStats("cache", used_bytes=2 * MI)],
            False,
            id="only-emptydir-volumes",
        ),
    ],
)
def test_emptydir_rule(volume: Json, volume_stats: list[VolumeStats], evicted: bool) -> None:
    pod = core_pod("p", volumes=[volume])
    stats = PodStats(pod_ref=PodReference("p", "default", "p"), volume_stats=tuple(volume_stats))
    evictions = local_storage_evictions([pod], lookup({"p": stats}), FsLayout())
    if evicted:
        assert summary_of(evictions) == [
            ("p", "emptydirfs.limit", 'Usage of EmptyDir volume "cache" exceeds the limit "1Mi". ')
        ]
    else:
        assert evictions == []


# ---------------------------------------------------------------------------------------------------------
# pod limit rule


@pytest.mark.parametrize(
    ("containers", "init_containers", "overhead", "used", "limit_text"),
    [
        pytest.param(
            [container("a", limits={"ephemeral-storage": "1Mi"})],
            [],
            None,
            MI + 1,
            "1Mi",
            id="one-byte-over",
        ),
        pytest.param([container("a", limits={"ephemeral-storage": "1Mi"})], [], None, MI, None, id="equal-is-not-over"),
        pytest.param(
            [container("a", limits={"ephemeral-storage": "1Mi"})],
            [],
            None,
            None,
            None,
            id="no-usage-is-zero",
        ),
        pytest.param([container("a"), container("b")], [], None, 10 * MI, None, id="no-limit-no-rule"),
        pytest.param(
            [container("a", limits={"ephemeral-storage": "1Mi"}), container("b", limits={"ephemeral-storage": "2Mi"})],
            [],
            None,
            3 * MI + 1,
            "3Mi",
            id="sum-of-containers",
        ),
        pytest.param(
            [container("a", limits={"ephemeral-storage": "1Mi"})],
            [container("init", limits={"ephemeral-storage": "5Mi"})],
            None,
            5 * MI + 1,
            "5Mi",
            id="init-container-peak",
        ),
        pytest.param(
            [container("a", limits={"ephemeral-storage": "1Mi"})],
            [],
            {"ephemeral-storage": "1Mi"},
            2 * MI + 1,
            "2Mi",
            id="overhead-added",
        ),
        pytest.param(
            [container("a", limits={"ephemeral-storage": "0"})],
            [],
            None,
            1,
            "0",
            id="zero-limit-counts-as-set",
        ),
    ],
)
def test_pod_limit_rule(
    containers: list[Json],
    init_containers: list[Json],
    overhead: dict[str, str] | None,
    used: int | None,
    limit_text: str | None,
) -> None:
    pod = core_pod("p", containers=containers, init_containers=init_containers, overhead=overhead)
    stats = PodStats(pod_ref=PodReference("p", "default", "p"), ephemeral_storage=FsStats(used_bytes=used))
    evictions = local_storage_evictions([pod], lookup({"p": stats}), FsLayout())
    if limit_text is None:
        assert evictions == []
    else:
        assert summary_of(evictions) == [
            (
                "p",
                "ephemeralpodfs.limit",
                f"Pod ephemeral local storage usage exceeds the total limit of containers {limit_text}. ",
            )
        ]


# ---------------------------------------------------------------------------------------------------------
# container limit rule


def container_stats(name: str, logs: int | None, rootfs: int | None) -> ContainerStats:
    return ContainerStats(
        name=name,
        logs=None if logs is None else FsStats(used_bytes=logs),
        rootfs=None if rootfs is None else FsStats(used_bytes=rootfs),
    )


@pytest.mark.parametrize(
    ("dedicated_imagefs", "logs", "rootfs", "evicted"),
    [
        pytest.param(False, MI // 2, MI // 2 + 1, True, id="logs-plus-rootfs-over"),
        pytest.param(False, MI // 2, MI // 2, False, id="logs-plus-rootfs-equal"),
        pytest.param(True, MI // 2, 10 * MI, False, id="dedicated-imagefs-counts-only-logs"),
        pytest.param(True, MI + 1, 0, True, id="dedicated-imagefs-logs-over"),
        pytest.param(False, None, MI + 1, True, id="missing-logs-count-zero"),
        pytest.param(False, MI + 1, None, True, id="missing-rootfs-counts-zero"),
    ],
)
def test_container_limit_rule(dedicated_imagefs: bool, logs: int | None, rootfs: int | None, evicted: bool) -> None:
    pod = core_pod("p", containers=[container("app", limits={"ephemeral-storage": "1Mi"})])
    # No ephemeral-storage pod stats: the pod rule sees usage 0 and stays quiet.
    stats = PodStats(pod_ref=PodReference("p", "default", "p"), containers=(container_stats("app", logs, rootfs),))
    evictions = local_storage_evictions([pod], lookup({"p": stats}), FsLayout(dedicated_imagefs=dedicated_imagefs))
    if evicted:
        assert summary_of(evictions) == [
            (
                "p",
                "ephemeralcontainerfs.limit",
                'Container app exceeded its local ephemeral storage limit "1Mi". ',
            )
        ]
    else:
        assert evictions == []


def test_container_rule_walks_stats_order_and_ignores_init_and_unknown_containers() -> None:
    pod = core_pod(
        "p",
        containers=[
            container("first-in-spec", limits={"ephemeral-storage": "1Mi"}),
            container("second-in-spec", limits={"ephemeral-storage": "1Mi"}),
            container("unlimited"),
        ],
        init_containers=[container("init", limits={"ephemeral-storage": "1"})],
    )
    stats = PodStats(
        pod_ref=PodReference("p", "default", "p"),
        containers=(
            container_stats("init", 10 * MI, 0),
            container_stats("unknown", 10 * MI, 0),
            container_stats("unlimited", 10 * MI, 0),
            container_stats("second-in-spec", 2 * MI, 0),
            container_stats("first-in-spec", 2 * MI, 0),
        ),
    )
    evictions = local_storage_evictions([pod], lookup({"p": stats}), FsLayout())
    assert summary_of(evictions) == [
        (
            "p",
            "ephemeralcontainerfs.limit",
            'Container second-in-spec exceeded its local ephemeral storage limit "1Mi". ',
        )
    ]


@pytest.mark.parametrize(
    ("limit", "evicted", "printed"),
    [
        pytest.param("0", False, None, id="zero-limit-ignored"),
        pytest.param("0.5", True, '"500m"', id="fractional-limit-rounds-up-to-nonzero"),
        pytest.param("1.5Ki", True, '"1536"', id="limit-printed-canonically"),
    ],
)
def test_container_limit_value(limit: str, evicted: bool, printed: str | None) -> None:
    # Only containers whose limit rounds up to a non-zero integer take part (Quantity.Value() != 0).
    pod = core_pod("p", containers=[container("app", limits={"ephemeral-storage": limit})])
    stats = PodStats(
        pod_ref=PodReference("p", "default", "p"),
        containers=(container_stats("app", 2048, 0),),
        # Keep the pod rule quiet: with a "0" limit it would otherwise fire on any usage.
        ephemeral_storage=FsStats(used_bytes=0),
    )
    evictions = local_storage_evictions([pod], lookup({"p": stats}), FsLayout())
    if evicted:
        assert summary_of(evictions) == [
            ("p", "ephemeralcontainerfs.limit", f"Container app exceeded its local ephemeral storage limit {printed}. ")
        ]
    else:
        assert evictions == []

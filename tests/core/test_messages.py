"""Tests of evictd.core.messages: byte-exact eviction messages and Event annotations (KUBELET_SPEC §11).

Expected texts come from upstream eviction_manager_test.go (TestMemoryPressure_VerifyPodStatus,
TestPIDPressure_VerifyPodStatus, TestDiskPressureNodeFs_VerifyPodStatus) and from kubelet messages seen in
the wild, where the numbers pin down the quantity formatting.
"""

from __future__ import annotations

import pytest

from builders import Json, container, core_pod
from evictd.core.messages import (
    container_ephemeral_limit_message,
    emptydir_limit_message,
    eviction_message,
    go_quote,
    pod_ephemeral_limit_message,
)
from evictd.core.pods import Pod
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Resource
from evictd.core.summary import ContainerStats, FsStats, MemoryStats, PodReference, PodStats

MI = 1024**2
GI = 1024**3


def binary(value: int) -> Quantity:
    return Quantity.from_int(value, QuantityFormat.BINARY_SI)


def decimal(value: int) -> Quantity:
    return Quantity.from_int(value, QuantityFormat.DECIMAL_SI)


def disk(name: str, rootfs: int | None, logs: int | None) -> ContainerStats:
    return ContainerStats(
        name=name,
        rootfs=FsStats(used_bytes=rootfs),
        logs=None if logs is None else FsStats(used_bytes=logs),
    )


def mem(name: str, working_set: int | None) -> ContainerStats:
    return ContainerStats(name=name, memory=MemoryStats(working_set_bytes=working_set))


def stats_for(pod: Pod, *containers: ContainerStats, pod_working_set: int | None = None) -> PodStats:
    memory = None if pod_working_set is None else MemoryStats(working_set_bytes=pod_working_set)
    return PodStats(pod_ref=PodReference(pod.name, pod.namespace, pod.uid), memory=memory, containers=containers)


NO_OFFENDERS = {"offending_containers": "", "offending_containers_usage": ""}


def test_memory_pressure_verify_pod_status() -> None:
    # newPodMemoryStats gives containers rootfs/logs but no memory stats: no container sentence.
    pod = core_pod("above-requests", containers=[container("above-requests", {"memory": "100Mi"})])
    stats = PodStats(
        pod_ref=PodReference("above-requests", "default", "above-requests"),
        memory=MemoryStats(working_set_bytes=700 * MI),
        containers=(disk("above-requests", 700 * MI, 700 * MI),),
    )
    message, annotations = eviction_message(Resource.MEMORY, pod, stats, Quantity.parse("2Gi"), binary(1500 * MI))
    assert message == "The node was low on resource: memory. Threshold quantity: 2Gi, available: 1500Mi. "
    assert annotations == {**NO_OFFENDERS, "starved_resource": "memory"}


def test_pid_pressure_verify_pod_status() -> None:
    pod = core_pod("pod1", containers=[container("pod1")])
    message, annotations = eviction_message(
        Resource.PIDS, pod, stats_for(pod), Quantity.parse("1200"), decimal(1500 - 1000)
    )
    assert message == "The node was low on resource: pids. Threshold quantity: 1200, available: 500. "
    assert annotations == {**NO_OFFENDERS, "starved_resource": "pids"}


@pytest.mark.parametrize(
    ("threshold", "available", "es_request", "rootfs", "expected"),
    [
        pytest.param(
            "2Gi",
            int(1.5 * GI),
            "100Mi",
            700 * MI,
            "The node was low on resource: ephemeral-storage. Threshold quantity: 2Gi, available: 1536Mi. "
            "Container above-requests was using 700Mi, request is 100Mi, has larger consumption of "
            "ephemeral-storage. ",
            id="disk-pressure-no-image-fs",
        ),
        pytest.param(
            "50Gi",
            10 * GI,
            "50Gi",
            80 * GI,
            "The node was low on resource: ephemeral-storage. Threshold quantity: 50Gi, available: 10Gi. "
            "Container above-requests was using 80Gi, request is 50Gi, has larger consumption of "
            "ephemeral-storage. ",
            id="image-disk-pressure-image-fs",
        ),
    ],
)
def test_disk_pressure_verify_pod_status(
    threshold: str, available: int, es_request: str, rootfs: int, expected: str
) -> None:
    pod = core_pod("above-requests", containers=[container("above-requests", {"ephemeral-storage": es_request})])
    stats = stats_for(pod, disk("above-requests", rootfs, 0))
    message, annotations = eviction_message(
        Resource.EPHEMERAL_STORAGE, pod, stats, Quantity.parse(threshold), binary(available)
    )
    assert message == expected
    assert annotations == {
        "offending_containers": "above-requests",
        "offending_containers_usage": str(binary(rootfs)),
        "starved_resource": "ephemeral-storage",
    }


def test_percentage_threshold_and_zero_request_as_seen_in_the_wild() -> None:
    # "Threshold quantity: 4902142351, available: 4528764Ki. Container sti-build was using 3888Ki, request
    # is 0": a percentage threshold is a BinarySI value that is not a multiple of 1024; no request prints 0.
    pod = core_pod("build", containers=[container("sti-build")])
    message, annotations = eviction_message(
        Resource.EPHEMERAL_STORAGE,
        pod,
        stats_for(pod, disk("sti-build", 3888 * 1024 - 100, 100)),
        binary(4902142351),
        binary(4528764 * 1024),
    )
    assert message == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 4902142351, available: 4528764Ki. "
        "Container sti-build was using 3888Ki, request is 0, has larger consumption of ephemeral-storage. "
    )
    assert annotations["offending_containers_usage"] == "3888Ki"


def test_several_offending_containers_in_stats_order() -> None:
    # Stats order decides (here it differs from spec order); each line and annotation entry follows it.
    pod = core_pod("traefik-pod", containers=[container("logrotate"), container("fluentbit"), container("traefik")])
    stats = stats_for(
        pod,
        disk("traefik", 52 * 1024, 0),
        disk("fluentbit", 29044 * 1024, 0),
        disk("logrotate", 7556 * 1024, 0),
    )
    message, annotations = eviction_message(
        Resource.EPHEMERAL_STORAGE, pod, stats, binary(69899394982), binary(67930492 * 1024)
    )
    assert message == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 69899394982, available: "
        "67930492Ki. Container traefik was using 52Ki, request is 0, has larger consumption of "
        "ephemeral-storage. Container fluentbit was using 29044Ki, request is 0, has larger consumption of "
        "ephemeral-storage. Container logrotate was using 7556Ki, request is 0, has larger consumption of "
        "ephemeral-storage. "
    )
    assert annotations == {
        "offending_containers": "traefik,fluentbit,logrotate",
        "offending_containers_usage": "52Ki,29044Ki,7556Ki",
        "starved_resource": "ephemeral-storage",
    }


HEADER = "The node was low on resource: memory. "


@pytest.mark.parametrize(
    ("containers", "init_containers", "container_stats", "expected_tail", "offenders", "usages"),
    [
        pytest.param(
            [container("app", {"memory": "100Mi"})],
            [],
            [mem("app", 100 * MI)],
            "",
            "",
            "",
            id="usage-equal-to-request-is-not-above",
        ),
        pytest.param(
            [container("app", {"memory": "100Mi"})],
            [],
            [mem("app", 100 * MI + 1)],
            "Container app was using 104857601, request is 100Mi, has larger consumption of memory. ",
            "app",
            "104857601",
            id="one-byte-above",
        ),
        pytest.param(
            [container("app")],
            [],
            [mem("app", 1000)],
            "Container app was using 1k, request is 0, has larger consumption of memory. ",
            "app",
            "1k",
            id="1000-bytes-print-as-1k",
        ),
        pytest.param(
            [container("app", {"memory": "1.5Gi"})],
            [],
            [mem("app", 2 * GI)],
            "Container app was using 2Gi, request is 1536Mi, has larger consumption of memory. ",
            "app",
            "2Gi",
            id="request-printed-canonically",
        ),
        pytest.param(
            [container("app", {"memory": "100M"})],
            [],
            [mem("app", 200 * MI)],
            "Container app was using 200Mi, request is 100M, has larger consumption of memory. ",
            "app",
            "200Mi",
            id="decimal-request-keeps-its-format",
        ),
        pytest.param(
            [container("app")],
            [container("init", {"memory": "10Mi"})],
            [mem("init", 20 * MI)],
            "Container init was using 20Mi, request is 10Mi, has larger consumption of memory. ",
            "init",
            "20Mi",
            id="init-containers-are-considered",
        ),
        pytest.param(
            [container("app")],
            [],
            [mem("debugger", 20 * MI), mem("app", None), ContainerStats(name="app")],
            "",
            "",
            "",
            id="ephemeral-or-unknown-containers-and-missing-usage-ignored",
        ),
    ],
)
def test_memory_container_lines(
    containers: list[Json],
    init_containers: list[Json],
    container_stats: list[ContainerStats],
    expected_tail: str,
    offenders: str,
    usages: str,
) -> None:
    pod = core_pod("p", containers=containers, init_containers=init_containers)
    message, annotations = eviction_message(Resource.MEMORY, pod, stats_for(pod, *container_stats), None, None)
    assert message == HEADER + expected_tail
    assert annotations == {
        "offending_containers": offenders,
        "offending_containers_usage": usages,
        "starved_resource": "memory",
    }


@pytest.mark.parametrize(
    ("rootfs", "logs"),
    [pytest.param(None, 5 * MI, id="no-rootfs-usage"), pytest.param(5 * MI, None, id="no-logs-stats")],
)
def test_ephemeral_storage_needs_rootfs_and_logs(rootfs: int | None, logs: int | None) -> None:
    pod = core_pod("p", containers=[container("app")])
    message, _ = eviction_message(
        Resource.EPHEMERAL_STORAGE, pod, stats_for(pod, disk("app", rootfs, logs)), None, None
    )
    assert message == "The node was low on resource: ephemeral-storage. "


@pytest.mark.parametrize("resource", [Resource.INODES, Resource.PIDS])
def test_no_container_lines_for_inodes_and_pids(resource: Resource) -> None:
    pod = core_pod("p", containers=[container("app")])
    stats = stats_for(pod, ContainerStats(name="app", rootfs=FsStats(used_bytes=GI, inodes_used=10**6)))
    message, annotations = eviction_message(resource, pod, stats, decimal(1000), decimal(5))
    assert message == f"The node was low on resource: {resource.value}. Threshold quantity: 1k, available: 5. "
    assert annotations == {**NO_OFFENDERS, "starved_resource": resource.value}


@pytest.mark.parametrize(
    ("threshold", "available", "expected"),
    [
        pytest.param(None, None, HEADER, id="no-threshold-for-resource"),
        pytest.param(Quantity.parse("1Gi"), None, HEADER, id="threshold-without-observation"),
        pytest.param(
            Quantity.parse("100Mi"), binary(99 * MI), HEADER + "Threshold quantity: 100Mi, available: 99Mi. ", id="both"
        ),
    ],
)
def test_threshold_sentence_and_no_stats(threshold: Quantity | None, available: Quantity | None, expected: str) -> None:
    pod = core_pod("p", containers=[container("app")])
    message, annotations = eviction_message(Resource.MEMORY, pod, None, threshold, available)
    assert message == expected
    assert annotations == {}


POD_LEVEL = {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}


@pytest.mark.parametrize(
    ("pod_resources", "resource", "pod_working_set", "expected_tail", "pod_annotations"),
    [
        pytest.param(
            POD_LEVEL,
            Resource.MEMORY,
            2 * GI,
            "Pod p was using 2Gi, request is 1Gi, has larger consumption of memory. ",
            {"offending_pod": "p", "offending_pod_usage": "2Gi"},
            id="pod-level-request",
        ),
        pytest.param(
            POD_LEVEL,
            Resource.MEMORY,
            100 * MI,
            "Pod p was using 100Mi, request is 1Gi, has larger consumption of memory. ",
            {"offending_pod": "p", "offending_pod_usage": "100Mi"},
            id="pod-line-printed-even-below-request",
        ),
        pytest.param(POD_LEVEL, Resource.MEMORY, None, "", {}, id="no-pod-memory-stats"),
        pytest.param({"limits": {"memory": "2Gi"}}, Resource.MEMORY, GI, "", {}, id="pod-level-limit-only"),
        pytest.param({"requests": {"cpu": "1"}}, Resource.MEMORY, GI, "", {}, id="pod-level-cpu-only"),
        pytest.param(POD_LEVEL, Resource.EPHEMERAL_STORAGE, GI, "", {}, id="only-for-memory"),
    ],
)
def test_pod_level_memory_line(
    pod_resources: Json,
    resource: Resource,
    pod_working_set: int | None,
    expected_tail: str,
    pod_annotations: dict[str, str],
) -> None:
    pod = core_pod("p", containers=[container("app", {"memory": "100Mi"})], pod_resources=pod_resources)
    stats = stats_for(pod, mem("app", 200 * MI), pod_working_set=pod_working_set)
    message, annotations = eviction_message(resource, pod, stats, None, None)
    header = f"The node was low on resource: {resource.value}. "
    if resource is Resource.MEMORY:
        container_line = "Container app was using 200Mi, request is 100Mi, has larger consumption of memory. "
        assert message == header + expected_tail + container_line
        assert annotations == {
            **pod_annotations,
            "offending_containers": "app",
            "offending_containers_usage": "200Mi",
            "starved_resource": "memory",
        }
    else:
        assert message == header
        assert annotations == {**NO_OFFENDERS, "starved_resource": resource.value}


def test_pod_level_memory_line_usage_defaults_to_zero() -> None:
    pod = core_pod("p", containers=[container("app")], pod_resources=POD_LEVEL)
    stats = PodStats(pod_ref=PodReference("p", "default", "p"), memory=MemoryStats())
    message, annotations = eviction_message(Resource.MEMORY, pod, stats, None, None)
    assert message == HEADER + "Pod p was using 0, request is 1Gi, has larger consumption of memory. "
    assert annotations["offending_pod_usage"] == "0"


# ---------------------------------------------------------------------------------------------------------
# local-storage messages (eviction_manager_test.go TestManagerWithLocalStorageCapacityIsolationOpen values)


def test_emptydir_limit_message() -> None:
    assert (
        emptydir_limit_message("local-volume", Quantity.from_int(900 * MI, QuantityFormat.BINARY_SI))
        == 'Usage of EmptyDir volume "local-volume" exceeds the limit "900Mi". '
    )


def test_pod_ephemeral_limit_message_is_unquoted() -> None:
    assert (
        pod_ephemeral_limit_message(Quantity.parse("800Mi"))
        == "Pod ephemeral local storage usage exceeds the total limit of containers 800Mi. "
    )


def test_container_ephemeral_limit_message_quotes_only_the_limit() -> None:
    assert (
        container_ephemeral_limit_message("container-ephemeral-storage-limit", Quantity.parse("0.5Gi"))
        == 'Container container-ephemeral-storage-limit exceeded its local ephemeral storage limit "512Mi". '
    )


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        pytest.param("local-volume", '"local-volume"', id="plain"),
        pytest.param('a"b\\c', '"a\\"b\\\\c"', id="quote-and-backslash"),
        pytest.param("tab\tnl\n", '"tab\\tnl\\n"', id="short-escapes"),
        pytest.param("\a\b\f\r\v", '"\\a\\b\\f\\r\\v"', id="more-short-escapes"),
        pytest.param("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"', id="control-bytes"),
        pytest.param("café ☃ 日本", '"café ☃ 日本"', id="printable-unicode-kept"),
        pytest.param("\u200b\u00a0", '"\\u200b\\u00a0"', id="format-and-non-ascii-space-escaped"),
        pytest.param("\U0001f600", '"\U0001f600"', id="emoji-kept"),
        pytest.param("\U000e0001", '"\\U000e0001"', id="astral-format-char-escaped"),
        pytest.param("", '""', id="empty"),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted

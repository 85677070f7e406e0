"""Tests of evictd.core.summary and summary_parser: parsing the Summary API, signal observations, pod stats lookup.

Observation values reuse upstream helpers_test.go TestMakeSignalObservations; the JSON field names are
those of stats/v1alpha1 types.go.
"""

from __future__ import annotations

import copy
import json
from dataclasses import FrozenInstanceError, fields, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import core_pod
from evictd.core.errors import DecodeError
from evictd.core.quantity import QuantityFormat
from evictd.core.signals import Signal
from evictd.core.summary import (
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodReference,
    PodStats,
    RlimitStats,
    Summary,
    VolumeStats,
    pod_memory_stats,
    pod_stats,
    pod_stats_lookup,
    signal_observations,
)
from evictd.core.summary_parser import summary_from_dict
from evictd.record.summary_json import SummaryChangesEncoder, apply_summary_changes, summary_to_dict

Json = dict[str, Any]

GI = 1024**3
MI = 1024**2

# helpers_test.go TestMakeSignalObservations
UPSTREAM_NODE: Json = {
    "nodeName": "node-a",
    "memory": {"time": "2024-05-01T10:00:00Z", "availableBytes": GI, "workingSetBytes": GI},
    "fs": {"availableBytes": 1024, "capacityBytes": 2048, "inodesFree": 1024, "inodes": 1024 * 1024},
    "runtime": {
        "imageFs": {
            "availableBytes": MI,
            "capacityBytes": 2 * MI,
            "inodesFree": 1024,
            "inodes": 1024 * 1024,
        },
        "containerFs": {
            "availableBytes": 2 * MI,
            "capacityBytes": 8 * MI,
            "inodesFree": 2048,
            "inodes": 2048,
        },
    },
    "rlimit": {"time": "2024-05-01T10:00:01Z", "maxpid": 255816, "curproc": 1000},
    "systemContainers": [
        {"name": "kubelet", "memory": {"availableBytes": 1, "workingSetBytes": 1}},
        {"name": "pods", "memory": {"availableBytes": GI, "workingSetBytes": GI}},
        {"name": "pods", "memory": {"availableBytes": 7, "workingSetBytes": 7}},
    ],
}


def stats_json(name: str, namespace: str = "ns1", uid: str | None = None, working_set: int = GI) -> Json:
    ref: Json = {"name": name, "namespace": namespace}
    if uid is not None:
        ref["uid"] = uid
    return {"podRef": ref, "memory": {"workingSetBytes": working_set}}


# ---------------------------------------------------------------------------------------------------------
# parsing


def test_full_document_parses_every_field() -> None:
    doc: Json = {
        "node": UPSTREAM_NODE,
        "pods": [
            {
                "podRef": {"name": "web", "namespace": "prod", "uid": "u-1"},
                "startTime": "2024-05-01T09:00:00Z",
                "cpu": {"usageNanoCores": 5},
                "memory": {
                    "time": "2024-05-01T10:00:00Z",
                    "availableBytes": 10,
                    "usageBytes": 20,
                    "workingSetBytes": 30,
                    "rssBytes": 40,
                    "pageFaults": 50,
                    "majorPageFaults": 60,
                },
                "containers": [
                    {
                        "name": "app",
                        "memory": {"workingSetBytes": 700 * MI},
                        "rootfs": {"usedBytes": 1, "inodesUsed": 2},
                        "logs": {"usedBytes": 3, "inodesUsed": 4},
                    }
                ],
                "volume": [
                    {
                        "name": "cache",
                        "time": "2024-05-01T10:00:00Z",
                        "availableBytes": 5,
                        "capacityBytes": 6,
                        "usedBytes": 7,
                        "inodesFree": 8,
                        "inodes": 9,
                        "inodesUsed": 10,
                        "pvcRef": {"name": "claim", "namespace": "prod"},
                    }
                ],
                "ephemeral-storage": {"usedBytes": 11, "inodesUsed": 12},
                "process_stats": {"process_count": 13},
            }
        ],
    }
    summary = summary_from_dict(doc)
    assert summary_from_dict(summary_to_dict(summary)) == summary, "written back as it was read"
    when = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert summary.node.node_name == "node-a"
    assert summary.node.memory == MemoryStats(time=when, available_bytes=GI, working_set_bytes=GI)
    assert summary.node.fs == FsStats(available_bytes=1024, capacity_bytes=2048, inodes_free=1024, inodes=GI // 1024)
    assert summary.node.image_fs == FsStats(
        available_bytes=MI, capacity_bytes=2 * MI, inodes_free=1024, inodes=1024 * 1024
    )
    assert summary.node.container_fs == FsStats(
        available_bytes=2 * MI, capacity_bytes=8 * MI, inodes_free=2048, inodes=2048
    )
    assert summary.node.rlimit == RlimitStats(
        time=datetime(2024, 5, 1, 10, 0, 1, tzinfo=UTC), max_pid=255816, num_of_running_processes=1000
    )
    # The first system container of a name wins, as getSysContainer returns the first match.
    assert list(summary.node.system_containers) == ["kubelet", "pods"]
    assert summary.node.system_containers["pods"].memory == MemoryStats(available_bytes=GI, working_set_bytes=GI)
    assert summary.pods == (
        PodStats(
            pod_ref=PodReference(name="web", namespace="prod", uid="u-1"),
            memory=MemoryStats(
                time=when,
                available_bytes=10,
                usage_bytes=20,
                working_set_bytes=30,
                rss_bytes=40,
                page_faults=50,
                major_page_faults=60,
            ),
            containers=(
                ContainerStats(
                    name="app",
                    memory=MemoryStats(working_set_bytes=700 * MI),
                    rootfs=FsStats(used_bytes=1, inodes_used=2),
                    logs=FsStats(used_bytes=3, inodes_used=4),
                ),
            ),
            volume_stats=(
                VolumeStats(
                    name="cache",
                    time=when,
                    available_bytes=5,
                    capacity_bytes=6,
                    used_bytes=7,
                    inodes_free=8,
                    inodes=9,
                    inodes_used=10,
                ),
            ),
            ephemeral_storage=FsStats(used_bytes=11, inodes_used=12),
            process_count=13,
        ),
    )


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param({}, Summary(), id="empty-document"),
        pytest.param({"node": None, "pods": None}, Summary(), id="nulls-are-absent"),
        pytest.param(
            {"node": {"memory": None, "fs": {}, "runtime": None, "rlimit": {}}},
            Summary(node=NodeStats(fs=FsStats(), rlimit=RlimitStats())),
            id="empty-blocks-stay-present-with-no-fields",
        ),
        pytest.param(
            {"pods": [{}]},
            Summary(pods=(PodStats(),)),
            id="pod-without-podref-has-empty-reference",
        ),
        pytest.param(
            {"pods": [{"podRef": {"name": "a"}, "containers": None, "volume": None, "process_stats": {}}]},
            Summary(pods=(PodStats(pod_ref=PodReference(name="a")),)),
            id="null-lists-and-empty-process-stats",
        ),
        pytest.param(
            {"node": {"unknownField": [1, 2], "memory": {"swapBytes": "x"}}},
            Summary(node=NodeStats(memory=MemoryStats())),
            id="unknown-keys-ignored-like-go",
        ),
        pytest.param(
            {"node": {"memory": {"availableBytes": 0, "workingSetBytes": 2**63 - 1}}},
            Summary(node=NodeStats(memory=MemoryStats(available_bytes=0, working_set_bytes=2**63 - 1))),
            id="counter-bounds",
        ),
        pytest.param(
            {"node": {"rlimit": {"maxpid": -5, "curproc": 0}}},
            Summary(node=NodeStats(rlimit=RlimitStats(max_pid=-5, num_of_running_processes=0))),
            id="rlimit-is-signed-int64",
        ),
    ],
)
def test_summary_from_dict_shapes(doc: Json, expected: Summary) -> None:
    assert summary_from_dict(doc) == expected
    assert summary_from_dict(summary_to_dict(expected)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2024-01-02T03:04:05Z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), id="utc"),
        pytest.param(
            "2024-01-02T03:04:05+05:30",
            datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=5, minutes=30))),
            id="positive-offset",
        ),
        pytest.param(
            "2024-01-02T03:04:05-08:00",
            datetime(2024, 1, 2, 11, 4, 5, tzinfo=UTC),
            id="negative-offset-same-instant",
        ),
        pytest.param(
            "2024-01-02T03:04:05.123456789Z",
            datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
            id="nanoseconds-truncated-to-microseconds",
        ),
        pytest.param("2024-01-02T03:04:05.5Z", datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC), id="fraction"),
        pytest.param("0001-01-01T00:00:00Z", None, id="go-zero-time-is-none"),
        pytest.param(
            "0001-01-01T00:00:00.000000001Z",
            datetime(1, 1, 1, tzinfo=UTC),
            id="one-nanosecond-after-zero-is-a-time",
        ),
    ],
)
def test_time_parsing(text: str, expected: datetime | None) -> None:
    parsed = summary_from_dict({"node": {"fs": {"time": text}}}).node.fs
    assert parsed is not None
    assert parsed.time == expected
    if parsed.time is not None:
        assert parsed.time.tzinfo is not None


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        pytest.param([], "$", id="root-not-a-mapping"),
        pytest.param({"node": []}, "node", id="node-not-a-mapping"),
        pytest.param({"node": {"memory": {"availableBytes": -1}}}, "node.memory.availableBytes", id="negative"),
        pytest.param({"node": {"memory": {"availableBytes": 1.5}}}, "node.memory.availableBytes", id="float"),
        pytest.param({"node": {"memory": {"availableBytes": 1.0}}}, "node.memory.availableBytes", id="float-1.0"),
        pytest.param({"node": {"memory": {"availableBytes": True}}}, "node.memory.availableBytes", id="bool"),
        pytest.param({"node": {"memory": {"availableBytes": "100Mi"}}}, "node.memory.availableBytes", id="string"),
        pytest.param(
            {"node": {"memory": {"workingSetBytes": 2**63}}}, "node.memory.workingSetBytes", id="beyond-int64"
        ),
        pytest.param({"node": {"fs": {"time": "yesterday"}}}, "node.fs.time", id="time-not-rfc3339"),
        pytest.param({"node": {"fs": {"time": "2024-01-02 03:04:05Z"}}}, "node.fs.time", id="time-space"),
        pytest.param({"node": {"fs": {"time": "2024-01-02T03:04:05"}}}, "node.fs.time", id="time-no-zone"),
        pytest.param({"node": {"fs": {"time": "2024-02-30T03:04:05Z"}}}, "node.fs.time", id="time-bad-date"),
        pytest.param({"node": {"fs": {"time": "2024-01-02T24:00:00Z"}}}, "node.fs.time", id="time-hour-24"),
        pytest.param({"node": {"fs": {"time": 1700000000}}}, "node.fs.time", id="time-number"),
        pytest.param({"node": {"fs": {"time": "2024-01-02T03:04:05+24:00"}}}, "node.fs.time", id="time-offset-24h"),
        pytest.param({"node": {"runtime": "x"}}, "node.runtime", id="runtime-not-mapping"),
        pytest.param({"node": {"runtime": {"imageFs": {"inodes": -3}}}}, "node.runtime.imageFs.inodes", id="imagefs"),
        pytest.param(
            {"node": {"runtime": {"containerFs": {"capacityBytes": "1"}}}},
            "node.runtime.containerFs.capacityBytes",
            id="containerfs",
        ),
        pytest.param({"node": {"rlimit": {"maxpid": "1"}}}, "node.rlimit.maxpid", id="rlimit-string"),
        pytest.param({"node": {"rlimit": {"curproc": -(2**63) - 1}}}, "node.rlimit.curproc", id="rlimit-range"),
        pytest.param({"node": {"systemContainers": {}}}, "node.systemContainers", id="system-not-list"),
        pytest.param({"node": {"systemContainers": [{"name": 3}]}}, "node.systemContainers[0].name", id="system-name"),
        pytest.param({"node": {"nodeName": 1}}, "node.nodeName", id="node-name"),
        pytest.param({"pods": "abc"}, "pods", id="pods-a-string"),
        pytest.param({"pods": {"a": 1}}, "pods", id="pods-a-mapping"),
        pytest.param({"pods": [{}, 7]}, "pods[1]", id="pod-not-mapping"),
        pytest.param({"pods": [{"podRef": {"uid": 12}}]}, "pods[0].podRef.uid", id="uid-number"),
        pytest.param({"pods": [{"podRef": []}]}, "pods[0].podRef", id="podref-list"),
        pytest.param(
            {"pods": [{"containers": [{"name": "a", "rootfs": {"usedBytes": -1}}]}]},
            "pods[0].containers[0].rootfs.usedBytes",
            id="container-rootfs",
        ),
        pytest.param({"pods": [{"containers": [{"logs": []}]}]}, "pods[0].containers[0].logs", id="container-logs"),
        pytest.param(
            {"pods": [{}, {"volume": [{"name": "v", "usedBytes": 0.5}]}]},
            "pods[1].volume[0].usedBytes",
            id="volume-used",
        ),
        pytest.param(
            {"pods": [{"ephemeral-storage": {"usedBytes": "1Gi"}}]},
            "pods[0].ephemeral-storage.usedBytes",
            id="ephemeral-storage",
        ),
        pytest.param(
            {"pods": [{"process_stats": {"process_count": -2}}]},
            "pods[0].process_stats.process_count",
            id="process-count",
        ),
        pytest.param({"pods": [{"memory": 5}]}, "pods[0].memory", id="pod-memory"),
    ],
)
def test_malformed_documents_name_the_key(doc: Any, key: str) -> None:
    with pytest.raises(DecodeError) as caught:
        summary_from_dict(doc)
    assert caught.value.key == key


def test_unprintable_counter_still_gives_scenario_error() -> None:
    # repr() of an int this long raises ValueError; the error must still describe itself.
    with pytest.raises(DecodeError) as caught:
        summary_from_dict({"node": {"memory": {"availableBytes": 10**5000}}})
    assert caught.value.key == "node.memory.availableBytes"
    assert str(caught.value)


def test_parse_does_not_mutate_input() -> None:
    doc: Json = {"node": copy.deepcopy(UPSTREAM_NODE), "pods": [stats_json("a", uid="u")]}
    before = copy.deepcopy(doc)
    summary_from_dict(doc)
    assert doc == before


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
JSON = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
FIELD_VALUES = (
    st.integers(min_value=-2, max_value=2**64)
    | st.just("2024-01-02T03:04:05Z")
    | st.just("0001-01-01T00:00:00Z")
    | JSON
)
FS = st.fixed_dictionaries(
    {},
    optional={
        k: FIELD_VALUES
        for k in ("time", "availableBytes", "capacityBytes", "usedBytes", "inodesFree", "inodes", "inodesUsed")
    },
)
MEMORY = st.fixed_dictionaries(
    {}, optional={k: FIELD_VALUES for k in ("time", "availableBytes", "workingSetBytes", "usageBytes")}
)
CONTAINER = st.fixed_dictionaries(
    {}, optional={"name": st.text(max_size=4) | JSON, "memory": MEMORY | JSON, "rootfs": FS | JSON, "logs": FS}
)
SHAPED_SUMMARY = st.fixed_dictionaries(
    {},
    optional={
        "node": st.fixed_dictionaries(
            {},
            optional={
                "memory": MEMORY | JSON,
                "fs": FS | JSON,
                "runtime": st.fixed_dictionaries({}, optional={"imageFs": FS, "containerFs": FS}) | JSON,
                "rlimit": st.fixed_dictionaries({}, optional={"maxpid": FIELD_VALUES, "curproc": FIELD_VALUES}),
                "systemContainers": st.lists(CONTAINER | JSON, max_size=3) | JSON,
            },
        )
        | JSON,
        "pods": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "podRef": st.fixed_dictionaries(
                        {}, optional={"name": JSON, "namespace": st.text(max_size=3), "uid": JSON}
                    ),
                    "memory": MEMORY,
                    "containers": st.lists(CONTAINER, max_size=2) | JSON,
                    "volume": st.lists(FS | JSON, max_size=2),
                    "ephemeral-storage": FS | JSON,
                    "process_stats": st.fixed_dictionaries({}, optional={"process_count": FIELD_VALUES}),
                },
            )
            | JSON,
            max_size=3,
        )
        | JSON,
    },
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(JSON, SHAPED_SUMMARY))
def test_summary_from_dict_raises_only_scenario_error_and_keeps_input(doc: Any) -> None:
    before = copy.deepcopy(doc)
    try:
        summary = summary_from_dict(doc)
    except DecodeError as exc:
        assert exc.key is not None
    else:
        assert isinstance(summary, Summary)
        # Whatever parses also yields observations without error, and is written back (a flight recording)
        # as a document that parses to the same Summary.
        signal_observations(summary)
        assert summary_from_dict(summary_to_dict(summary)) == summary
        # The recorder's text encoder writes the same document, the first time and from its memory of blocks,
        # and as changes (none) from itself.
        encoder = SummaryChangesEncoder(json.dumps)
        field, text = encoder.encode(summary)
        assert field == "summary" and json.loads(text) == summary_to_dict(summary)
        encoder.commit()
        field, text = encoder.encode(summary)
        if field == "summaryChanges":
            assert apply_summary_changes(summary_to_dict(summary), json.loads(text)) == summary_to_dict(summary)
        else:  # two pods with one id: always whole
            assert json.loads(text) == summary_to_dict(summary)
        assert json.loads(encoder.whole(summary)) == summary_to_dict(summary)
    assert doc == before


# ---------------------------------------------------------------------------------------------------------
# observations


def test_signal_observations_match_upstream_make_signal_observations() -> None:
    observations = signal_observations(summary_from_dict({"node": UPSTREAM_NODE}))
    expected = {
        Signal.MEMORY_AVAILABLE: (GI, 2 * GI),
        Signal.ALLOCATABLE_MEMORY_AVAILABLE: (GI, 2 * GI),
        Signal.NODEFS_AVAILABLE: (1024, 2048),
        Signal.NODEFS_INODES_FREE: (1024, 1024 * 1024),
        Signal.IMAGEFS_AVAILABLE: (MI, 2 * MI),
        Signal.IMAGEFS_INODES_FREE: (1024, 1024 * 1024),
        Signal.CONTAINERFS_AVAILABLE: (2 * MI, 8 * MI),
        Signal.CONTAINERFS_INODES_FREE: (2048, 2048),
        Signal.PID_AVAILABLE: (255816 - 1000, 255816),
    }
    assert {signal: (o.available.ceil_int(), o.capacity.ceil_int()) for signal, o in observations.items()} == expected
    assert observations[Signal.MEMORY_AVAILABLE].time == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert observations[Signal.PID_AVAILABLE].time == datetime(2024, 5, 1, 10, 0, 1, tzinfo=UTC)
    assert observations[Signal.NODEFS_AVAILABLE].time is None


@pytest.mark.parametrize(
    ("signal", "fmt", "text"),
    [
        pytest.param(Signal.MEMORY_AVAILABLE, QuantityFormat.BINARY_SI, "1Gi", id="memory-binary"),
        pytest.param(Signal.NODEFS_AVAILABLE, QuantityFormat.BINARY_SI, "1Ki", id="nodefs-binary"),
        pytest.param(Signal.NODEFS_INODES_FREE, QuantityFormat.DECIMAL_SI, "1024", id="inodes-decimal"),
        pytest.param(Signal.PID_AVAILABLE, QuantityFormat.DECIMAL_SI, "254816", id="pids-decimal"),
    ],
)
def test_observation_formats(signal: Signal, fmt: QuantityFormat, text: str) -> None:
    observation = signal_observations(summary_from_dict({"node": UPSTREAM_NODE}))[signal]
    assert observation.available.format is fmt
    assert observation.capacity.format is fmt
    assert str(observation.available) == text


def test_thousand_bytes_print_as_1k() -> None:
    # BinarySI values below 1024 print as DecimalSI (KUBELET_SPEC §11.4).
    obs = signal_observations(summary_from_dict({"node": {"fs": {"availableBytes": 1000, "capacityBytes": 1000}}}))
    assert str(obs[Signal.NODEFS_AVAILABLE].available) == "1k"


@pytest.mark.parametrize(
    ("node", "absent", "present"),
    [
        pytest.param(
            {"memory": {"availableBytes": 1}},
            {Signal.MEMORY_AVAILABLE},
            set(),
            id="memory-without-working-set",
        ),
        pytest.param(
            {"memory": {"workingSetBytes": 1}},
            {Signal.MEMORY_AVAILABLE},
            set(),
            id="memory-without-available",
        ),
        pytest.param(
            {"memory": {"availableBytes": 1, "workingSetBytes": 1}},
            {Signal.ALLOCATABLE_MEMORY_AVAILABLE},
            {Signal.MEMORY_AVAILABLE},
            id="no-pods-system-container",
        ),
        pytest.param(
            {"systemContainers": [{"name": "pods"}]},
            {Signal.ALLOCATABLE_MEMORY_AVAILABLE},
            set(),
            id="pods-system-container-without-memory",
        ),
        pytest.param(
            {"fs": {"availableBytes": 1, "inodesFree": 1, "inodes": 2}},
            {Signal.NODEFS_AVAILABLE},
            {Signal.NODEFS_INODES_FREE},
            id="nodefs-without-capacity",
        ),
        pytest.param(
            {"fs": {"availableBytes": 1, "capacityBytes": 2, "inodesFree": 1}},
            {Signal.NODEFS_INODES_FREE},
            {Signal.NODEFS_AVAILABLE},
            id="nodefs-without-inodes",
        ),
        pytest.param(
            {"runtime": {"imageFs": {"inodesFree": 1, "inodes": 1}}},
            {Signal.IMAGEFS_AVAILABLE, Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE},
            {Signal.IMAGEFS_INODES_FREE},
            id="containerfs-is-not-derived-from-imagefs",
        ),
        pytest.param(
            {"rlimit": {"maxpid": 10}},
            {Signal.PID_AVAILABLE},
            set(),
            id="rlimit-without-curproc",
        ),
    ],
)
def test_observation_needs_both_fields(node: Json, absent: set[Signal], present: set[Signal]) -> None:
    observations = signal_observations(summary_from_dict({"node": node}))
    assert absent.isdisjoint(observations)
    assert present <= set(observations)


def test_pid_available_can_go_negative() -> None:
    obs = signal_observations(summary_from_dict({"node": {"rlimit": {"maxpid": 100, "curproc": 150}}}))
    assert obs[Signal.PID_AVAILABLE].available.value == -50
    assert str(obs[Signal.PID_AVAILABLE].available) == "-50"


def test_allocatable_uses_pods_system_container_not_node_memory() -> None:
    node: Json = {
        "memory": {"availableBytes": 3 * GI, "workingSetBytes": GI},
        "systemContainers": [{"name": "pods", "memory": {"availableBytes": 4 * GI, "workingSetBytes": GI}}],
    }
    obs = signal_observations(summary_from_dict({"node": node}))
    assert obs[Signal.MEMORY_AVAILABLE].capacity.value == 4 * GI
    assert obs[Signal.ALLOCATABLE_MEMORY_AVAILABLE].available.value == 4 * GI
    assert obs[Signal.ALLOCATABLE_MEMORY_AVAILABLE].capacity.value == 5 * GI


# ---------------------------------------------------------------------------------------------------------
# pod stats lookup


def test_lookup_matches_upstream_make_signal_observations_pods() -> None:
    # Two pods share the name "pod1" in different namespaces; stats are keyed by uid.
    pods = [core_pod("pod1", namespace="ns1", uid="uuid1"), core_pod("pod1", namespace="ns2", uid="uuid2"),
            core_pod("pod3", namespace="ns3", uid="uuid3")]
    summary = summary_from_dict(
        {
            "pods": [
                stats_json("pod1", "ns1", "uuid1", working_set=1),
                stats_json("pod1", "ns2", "uuid2", working_set=2),
                stats_json("pod3", "ns3", "uuid3", working_set=3),
            ]
        }
    )
    stats_of = pod_stats_lookup(summary, pods)
    found = [stats_of(pod) for pod in pods]
    assert [s.memory.working_set_bytes if s and s.memory else None for s in found] == [1, 2, 3]


@pytest.mark.parametrize(
    ("pod", "stats", "expected_working_set"),
    [
        pytest.param(("a", "ns", "u1"), [("a", "ns", "u1", 5)], 5, id="uid-match"),
        pytest.param(("a", "ns", "u1"), [("other", "x", "u1", 5)], 5, id="uid-wins-over-name"),
        pytest.param(("a", "ns", "u1"), [("a", "ns", "u2", 5)], None, id="same-name-other-uid-is-another-pod"),
        pytest.param(("a", "ns", "u1"), [("a", "ns", None, 6)], 6, id="stats-without-uid-match-by-name"),
        pytest.param(("a", "ns", None), [("a", "ns", None, 7)], 7, id="both-without-uid"),
        pytest.param(("a", "ns", None), [("a", "other", None, 7)], None, id="namespace-differs"),
        pytest.param(("a", "ns", "u1"), [("a", "ns", "u1", 1), ("a", "ns", "u1", 2)], 2, id="last-entry-wins"),
        pytest.param(("a", "ns", "u1"), [], None, id="no-stats"),
    ],
)
def test_lookup_rules(
    pod: tuple[str, str, str | None],
    stats: list[tuple[str, str, str | None, int]],
    expected_working_set: int | None,
) -> None:
    name, namespace, uid = pod
    the_pod = core_pod(name, namespace=namespace, uid=uid or "")  # "": the pod has no uid
    summary = summary_from_dict({"pods": [stats_json(n, ns, uid, ws) for n, ns, uid, ws in stats]})
    found = pod_stats_lookup(summary, [the_pod])(the_pod)
    if expected_working_set is None:
        assert found is None
    else:
        assert found is not None and found.memory is not None
        assert found.memory.working_set_bytes == expected_working_set


def test_lookup_ignores_pods_not_in_the_list() -> None:
    listed, unlisted = core_pod("a", namespace="ns1", uid="u1"), core_pod("b", namespace="ns1", uid="u2")
    summary = summary_from_dict({"pods": [stats_json("a", uid="u1"), stats_json("b", uid="u2")]})
    stats_of = pod_stats_lookup(summary, [listed])
    assert stats_of(listed) is not None
    assert stats_of(unlisted) is None


# Summaries one after another, as a stats source gives them: pods that come, go and change order, pods whose
# memory alone moves (their disk blocks the very objects of the Summary before), times in UTC or another zone.
COUNTS = st.none() | st.integers(min_value=0, max_value=2**62)
TIMES = st.none() | st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                                 timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]))
MEMORY_STATS = st.none() | st.builds(MemoryStats, time=TIMES, available_bytes=COUNTS, usage_bytes=COUNTS,
                                     working_set_bytes=COUNTS, rss_bytes=COUNTS, page_faults=COUNTS)
FS_STATS = st.none() | st.builds(FsStats, time=TIMES, used_bytes=COUNTS, inodes_used=COUNTS)
POD_STATS = st.builds(
    PodStats,
    pod_ref=st.sampled_from([PodReference("a", "ns", "u1"), PodReference("b", "ns", "u2"),
                             PodReference("c", "ns", ""), PodReference("d", "other", "u4")]),
    memory=MEMORY_STATS, process_count=COUNTS, ephemeral_storage=FS_STATS,
    containers=st.lists(st.builds(ContainerStats, name=st.sampled_from(["x", "y"]), memory=MEMORY_STATS,
                                  rootfs=FS_STATS), max_size=2).map(tuple),
    volume_stats=st.lists(st.builds(VolumeStats, name=st.just("v"), used_bytes=COUNTS), max_size=1).map(tuple))
SUMMARIES = st.builds(Summary, node=st.builds(NodeStats, node_name=st.sampled_from(["", "n"]), memory=MEMORY_STATS,
                                              fs=FS_STATS),
                      pods=st.lists(POD_STATS, max_size=4).map(tuple))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_summaries_written_as_changes_read_back_as_written_whole(data: st.DataObject) -> None:
    encoder = SummaryChangesEncoder(json.dumps)
    document: dict[str, Any] | None = None
    previous: Summary | None = None
    for _ in range(data.draw(st.integers(min_value=1, max_value=5))):
        if previous is not None and data.draw(st.booleans()):  # only the memory readings moved
            summary = Summary(node=previous.node, pods=tuple(
                replace(stats, memory=data.draw(MEMORY_STATS)) for stats in previous.pods))
        else:
            summary = data.draw(SUMMARIES)
        field, text = encoder.encode(summary)
        if data.draw(st.booleans()):  # not written (a failed write): changes stay against the last one written
            encoder.reset()
            continue
        encoder.commit()
        if field == "summary":
            document = json.loads(text)
        else:
            assert document is not None
            document = apply_summary_changes(document, json.loads(text))
        assert document == summary_to_dict(summary)
        previous = summary


@pytest.mark.parametrize("kind", [MemoryStats, PodStats], ids=lambda kind: kind.__name__)
def test_the_fast_builders_set_slots_in_field_order(kind: type) -> None:
    assert [field.name for field in fields(kind)] == list(kind.__dict__["__slots__"])


@given(usage=st.integers(min_value=0, max_value=2**64 - 1), working_set=st.integers(min_value=0, max_value=2**64 - 1),
       count=st.none() | st.integers(min_value=0, max_value=2**22))
def test_a_pods_blocks_built_fast_are_those_the_constructors_build(usage: int, working_set: int,
                                                                   count: int | None) -> None:
    at = datetime(2026, 11, 25, 20, 0, tzinfo=UTC)
    memory = pod_memory_stats(at, usage, working_set)
    expected_memory = MemoryStats(time=at, usage_bytes=usage, working_set_bytes=working_set)
    assert type(memory) is MemoryStats
    assert [getattr(memory, f.name) for f in fields(MemoryStats)] == \
        [getattr(expected_memory, f.name) for f in fields(MemoryStats)]
    assert memory == expected_memory and hash(memory) == hash(expected_memory)
    ref = PodReference(name="web", namespace="default", uid="u-1")
    logs = (ContainerStats(name="app", logs=FsStats(time=at, used_bytes=4096, inodes_used=2)),)
    volumes = (VolumeStats(name="data", time=at, used_bytes=8192, inodes_used=3),)
    ephemeral = FsStats(time=at, used_bytes=12288, inodes_used=5)
    for built, expected in [
        (pod_stats(ref, memory, logs, volumes, ephemeral, count),
         PodStats(pod_ref=ref, memory=expected_memory, containers=logs, volume_stats=volumes,
                  ephemeral_storage=ephemeral, process_count=count)),
        (pod_stats(ref, None, (), (), None, None), PodStats(pod_ref=ref)),
    ]:
        assert type(built) is PodStats
        assert [getattr(built, f.name) for f in fields(PodStats)] == [getattr(expected, f.name) for f in fields(PodStats)]
        assert built == expected and hash(built) == hash(expected) and repr(built) == repr(expected)
    with pytest.raises(FrozenInstanceError):
        memory.usage_bytes = 0  # type: ignore[misc]

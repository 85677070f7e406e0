"""Tests of evictd.core.admission: tolerations and pod admission under node conditions.

Cases are taken from upstream k8s.io/api/core/v1 toleration_test.go and eviction_manager_test.go
(TestAdmitUnderNodeConditions and friends), with the upstream case names as ids.
"""

from __future__ import annotations

import pytest
from pod_json_builders import ctr, make, rl

from evictd.core.admission import MEMORY_PRESSURE_TAINT, Taint, admit, toleration_tolerates_taint
from evictd.core.pods import Pod, Toleration

# --- tolerations (toleration_test.go TestTolerationToleratesTaint) ----------------------------------------

FOO_NOSCHEDULE = Taint(key="foo", effect="NoSchedule")
FOO_BAR = Taint(key="foo", value="bar", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        pytest.param(
            Toleration(key="foo", operator="Exists", effect="NoSchedule"),
            FOO_NOSCHEDULE,
            True,
            id="exists-same-key-effect-no-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Exists", effect="NoSchedule"),
            FOO_BAR,
            True,
            id="exists-same-key-effect-some-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="bar", effect="NoSchedule"),
            FOO_BAR,
            True,
            id="equal-same-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="value1", effect="NoSchedule"),
            Taint(key="foo", value="value2", effect="NoSchedule"),
            False,
            id="equal-different-value",
        ),
        pytest.param(
            Toleration(key="foo", value="bar", effect="NoSchedule"),
            FOO_BAR,
            True,
            id="empty-operator-means-equal",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="bar", effect="NoExecute"),
            FOO_BAR,
            False,
            id="different-effect",
        ),
        pytest.param(Toleration(key="foo", operator="Equal", value="bar"), FOO_BAR, True, id="empty-effect-matches"),
        pytest.param(
            Toleration(key="foo", operator="Exists", effect="NoSchedule"),
            Taint(key="bar", effect="NoSchedule"),
            False,
            id="different-key",
        ),
        pytest.param(Toleration(operator="Exists"), FOO_BAR, True, id="empty-key-exists-matches-all"),
        pytest.param(
            Toleration(operator="Exists", effect="NoExecute"),
            FOO_BAR,
            False,
            id="empty-key-exists-wrong-effect",
        ),
        pytest.param(
            Toleration(key="foo", operator="Gt", value="100"),
            Taint(key="foo", value="150"),
            True,
            id="gt-taint-greater",
        ),
        pytest.param(
            Toleration(key="foo", operator="Gt", value="100"),
            Taint(key="foo", value="100"),
            False,
            id="gt-equal",
        ),
        pytest.param(
            Toleration(key="foo", operator="Lt", value="100"),
            Taint(key="foo", value="-5"),
            True,
            id="lt-negative",
        ),
        pytest.param(
            Toleration(key="foo", operator="Lt", value="100"),
            Taint(key="foo", value="95.5"),
            False,
            id="lt-non-integer-taint",
        ),
        pytest.param(
            Toleration(key="foo", operator="Lt", value="1e3"),
            Taint(key="foo", value="5"),
            False,
            id="lt-non-integer-toleration",
        ),
        pytest.param(
            Toleration(key="foo", operator="Gt", value="1"),
            Taint(key="foo", value="9223372036854775808"),
            False,
            id="gt-int64-overflow",
        ),
        pytest.param(Toleration(key="foo", operator="Bogus", value="bar"), FOO_BAR, False, id="unknown-operator"),
    ],
)
def test_toleration_tolerates_taint(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration_tolerates_taint(toleration, taint) is tolerated


# --- admission (eviction_manager_test.go TestAdmitUnderNodeConditions and friends) ------------------------

G_POD = make([ctr("g", rl("100m", "1Gi"), rl("100m", "1Gi"))], name="guaranteed-pod")
B_POD = make([ctr("b", rl("100m", "1Gi"))], name="burstable-pod")
BE_POD = make([ctr("be")], name="best-effort-pod")
MEMORY_TOLERATION = {
    "key": "node.kubernetes.io/memory-pressure",
    "operator": "Exists",
    "effect": "NoSchedule",
}
REJECT_MEMORY = (False, "Evicted", "The node had condition: [MemoryPressure]. ")
REJECT_BOTH = (False, "Evicted", "The node had condition: [MemoryPressure DiskPressure]. ")
ADMITTED = (True, "", "")


@pytest.mark.parametrize(
    ("pod", "conditions", "expected"),
    [
        pytest.param(G_POD, set(), ADMITTED, id="no-conditions-guaranteed"),
        pytest.param(BE_POD, frozenset(), ADMITTED, id="no-conditions-best-effort"),
        pytest.param(G_POD, {"MemoryPressure"}, ADMITTED, id="memory-pressure-guaranteed"),
        pytest.param(B_POD, {"MemoryPressure"}, ADMITTED, id="memory-pressure-burstable"),
        pytest.param(BE_POD, {"MemoryPressure"}, REJECT_MEMORY, id="memory-pressure-best-effort"),
        pytest.param(G_POD, {"MemoryPressure", "DiskPressure"}, REJECT_BOTH, id="memory-and-disk-guaranteed"),
        pytest.param(B_POD, {"DiskPressure", "MemoryPressure"}, REJECT_BOTH, id="memory-and-disk-burstable"),
        pytest.param(BE_POD, {"MemoryPressure", "DiskPressure"}, REJECT_BOTH, id="memory-and-disk-best-effort"),
        pytest.param(
            G_POD,
            {"DiskPressure"},
            (False, "Evicted", "The node had condition: [DiskPressure]. "),
            id="disk-pressure-guaranteed",
        ),
        pytest.param(
            G_POD,
            {"PIDPressure"},
            (False, "Evicted", "The node had condition: [PIDPressure]. "),
            id="pid-pressure-guaranteed",
        ),
        pytest.param(
            G_POD,
            {"PIDPressure", "DiskPressure", "MemoryPressure"},
            (False, "Evicted", "The node had condition: [MemoryPressure DiskPressure PIDPressure]. "),
            id="all-three-in-fixed-order",
        ),
        pytest.param(
            make([ctr("be")], spec={"tolerations": [MEMORY_TOLERATION]}),
            {"MemoryPressure"},
            ADMITTED,
            id="best-effort-tolerating-memory-pressure",
        ),
        pytest.param(
            make([ctr("be")], spec={"tolerations": [MEMORY_TOLERATION]}),
            {"MemoryPressure", "DiskPressure"},
            REJECT_BOTH,
            id="toleration-does-not-help-with-disk-pressure",
        ),
        pytest.param(
            make([ctr("be")], spec={"tolerations": [{"operator": "Exists"}]}),
            {"MemoryPressure"},
            ADMITTED,
            id="best-effort-tolerating-everything",
        ),
        pytest.param(
            make(
                [ctr("be")],
                spec={
                    "tolerations": [
                        {
                            "key": "node.kubernetes.io/disk-pressure",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        }
                    ]
                },
            ),
            {"MemoryPressure"},
            REJECT_MEMORY,
            id="best-effort-tolerating-disk-pressure-only",
        ),
        pytest.param(
            make([ctr("be")], spec={"tolerations": [{**MEMORY_TOLERATION, "effect": "NoExecute"}]}),
            {"MemoryPressure"},
            REJECT_MEMORY,
            id="best-effort-toleration-wrong-effect",
        ),
        pytest.param(
            make([ctr("be")], metadata={"annotations": {"kubernetes.io/config.source": "file"}}),
            {"MemoryPressure", "DiskPressure"},
            ADMITTED,
            id="static-pod-always-admitted",
        ),
        pytest.param(
            make([ctr("be")], metadata={"annotations": {"kubernetes.io/config.mirror": "x"}}),
            {"DiskPressure"},
            ADMITTED,
            id="mirror-pod-always-admitted",
        ),
        pytest.param(
            make([ctr("be")], spec={"priority": 2000000000}),
            {"PIDPressure"},
            ADMITTED,
            id="critical-priority-always-admitted",
        ),
        pytest.param(
            make([ctr("g", rl("100m", "1Gi"), rl("100m", "1Gi"))], status={"qosClass": "BestEffort"}),
            {"MemoryPressure"},
            REJECT_MEMORY,
            id="status-qos-class-best-effort-decides",
        ),
        pytest.param(
            G_POD,
            {"NetworkUnavailable", "MemoryPressure"},
            (False, "Evicted", "The node had condition: [MemoryPressure NetworkUnavailable]. "),
            id="unknown-condition-listed-last",
        ),
    ],
)
def test_admit(pod: Pod, conditions: set[str], expected: tuple[bool, str, str]) -> None:
    assert admit(pod, conditions) == expected


def test_memory_pressure_taint_is_the_node_lifecycle_taint() -> None:
    assert (MEMORY_PRESSURE_TAINT.key, MEMORY_PRESSURE_TAINT.value, MEMORY_PRESSURE_TAINT.effect) == (
        "node.kubernetes.io/memory-pressure",
        "",
        "NoSchedule",
    )

"""Node conditions and taints evictd writes (KUBELET_SPEC §7.1 reasons and messages)."""

from __future__ import annotations

from evictd.core.node_status import (
    ConditionMode,
    condition_transitions,
    conditions_changed,
    desired_conditions,
    desired_taints,
)
from evictd.core.signals import NodeCondition

T0, T1 = "2026-11-21T10:00:00Z", "2026-11-21T10:00:10Z"


def test_evictd_conditions_with_kubelet_reasons() -> None:
    conditions = desired_conditions([], [NodeCondition.MEMORY_PRESSURE], ConditionMode.EVICTD, T0)
    assert conditions == [
        {"type": "EvictdMemoryPressure", "status": "True", "reason": "KubeletHasInsufficientMemory",
         "message": "kubelet has insufficient memory available", "lastHeartbeatTime": T0, "lastTransitionTime": T0},
        {"type": "EvictdDiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
         "message": "kubelet has no disk pressure", "lastHeartbeatTime": T0, "lastTransitionTime": T0},
        {"type": "EvictdPIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
         "message": "kubelet has sufficient PID available", "lastHeartbeatTime": T0, "lastTransitionTime": T0},
    ]


def test_transition_time_kept_until_status_flips() -> None:
    first = desired_conditions([], [NodeCondition.DISK_PRESSURE], ConditionMode.STANDARD, T0)
    assert [c["type"] for c in first] == ["MemoryPressure", "DiskPressure", "PIDPressure"]
    same = desired_conditions(first, [NodeCondition.DISK_PRESSURE], ConditionMode.STANDARD, T1)
    assert all(c["lastTransitionTime"] == T0 and c["lastHeartbeatTime"] == T1 for c in same)
    assert not conditions_changed(first, same)
    cleared = desired_conditions(same, [], ConditionMode.STANDARD, T1)
    disk = next(c for c in cleared if c["type"] == "DiskPressure")
    assert (disk["status"], disk["lastTransitionTime"], disk["reason"]) == ("False", T1, "KubeletHasNoDiskPressure")
    assert conditions_changed(same, cleared)


def test_taints_added_and_removed_keeping_others() -> None:
    foreign = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    tainted = desired_taints([foreign], [NodeCondition.PID_PRESSURE], ConditionMode.EVICTD)
    assert tainted == [foreign, {"key": "evictd.io/pid-pressure", "effect": "NoSchedule"}]
    assert desired_taints(tainted, [NodeCondition.PID_PRESSURE], ConditionMode.EVICTD) == tainted
    assert desired_taints(tainted, [], ConditionMode.EVICTD) == [foreign]
    assert desired_taints(tainted, [NodeCondition.PID_PRESSURE], ConditionMode.STANDARD) == [foreign]


def test_condition_transition_events() -> None:
    assert condition_transitions([], [NodeCondition.MEMORY_PRESSURE]) == [
        ("NodeHasInsufficientMemory", "MemoryPressure")]
    assert condition_transitions([NodeCondition.MEMORY_PRESSURE], [NodeCondition.DISK_PRESSURE]) == [
        ("NodeHasSufficientMemory", "MemoryPressure"), ("NodeHasDiskPressure", "DiskPressure")]
    assert condition_transitions([NodeCondition.PID_PRESSURE], [NodeCondition.PID_PRESSURE]) == []

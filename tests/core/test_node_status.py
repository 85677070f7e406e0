"""Node conditions and taints evictd writes (KUBELET_SPEC §7.1 reasons and messages)."""

from __future__ import annotations

from evictd.core.node_status import (
    ConditionMode,
    condition_transitions,
    desired_conditions,
    desired_taints,
    shows_pressure,
    stopped_conditions,
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
    cleared = desired_conditions(same, [], ConditionMode.STANDARD, T1)
    disk = next(c for c in cleared if c["type"] == "DiskPressure")
    assert (disk["status"], disk["lastTransitionTime"], disk["reason"]) == ("False", T1, "KubeletHasNoDiskPressure")


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


def test_a_clean_stop_leaves_every_condition_unknown_keeping_an_earlier_unknown_transition() -> None:
    running = desired_conditions([], [NodeCondition.MEMORY_PRESSURE], ConditionMode.EVICTD, T0)
    stopped = stopped_conditions(running, ConditionMode.EVICTD, T1)
    assert [(c["type"], c["status"], c["reason"], c["lastTransitionTime"]) for c in stopped] == [
        ("EvictdMemoryPressure", "Unknown", "EvictdStopped", T1),
        ("EvictdDiskPressure", "Unknown", "EvictdStopped", T1),
        ("EvictdPIDPressure", "Unknown", "EvictdStopped", T1),
    ]
    assert {c["message"] for c in stopped} == {"evictd stopped; this condition is not being updated"}
    # Stopped twice: the transition stays at the first stop, the heartbeat moves.
    again = stopped_conditions(stopped, ConditionMode.EVICTD, "2026-11-21T10:00:20Z")
    assert [(c["lastTransitionTime"], c["lastHeartbeatTime"]) for c in again] == [(T1, "2026-11-21T10:00:20Z")] * 3
    # Started again: a real status is a transition.
    restarted = desired_conditions(again, [], ConditionMode.EVICTD, "2026-11-21T10:00:30Z")
    assert {c["lastTransitionTime"] for c in restarted} == {"2026-11-21T10:00:30Z"}


def test_a_clean_stop_in_standard_mode_writes_the_standard_types() -> None:
    stopped = stopped_conditions([], ConditionMode.STANDARD, T0)
    assert [(c["type"], c["status"]) for c in stopped] == [
        ("MemoryPressure", "Unknown"), ("DiskPressure", "Unknown"), ("PIDPressure", "Unknown")]


def test_shows_pressure_tells_whether_the_node_still_shows_what_evictd_wrote() -> None:
    memory = [NodeCondition.MEMORY_PRESSURE]
    conditions = desired_conditions([], memory, ConditionMode.EVICTD, T0)
    foreign = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    taints = desired_taints([foreign], memory, ConditionMode.EVICTD)
    assert shows_pressure([*conditions, {"type": "Ready", "status": "True"}], taints, memory, ConditionMode.EVICTD)
    assert not shows_pressure(conditions, [foreign], memory, ConditionMode.EVICTD)  # its taint removed
    flipped = [dict(c, status="False") if c["type"] == "EvictdMemoryPressure" else c for c in conditions]
    assert not shows_pressure(flipped, taints, memory, ConditionMode.EVICTD)
    assert not shows_pressure(conditions[1:], taints, memory, ConditionMode.EVICTD)  # a condition gone
    assert not shows_pressure(conditions, taints, [], ConditionMode.EVICTD)  # the pressure cleared since

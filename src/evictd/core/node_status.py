"""Node pressure conditions and taints as evictd writes them to the Node object.

The kubelet rewrites the standard `MemoryPressure`, `DiskPressure` and `PIDPressure` conditions on every status
update, so by default evictd writes its own types (`EvictdMemoryPressure`, ...) with the kubelet's reasons and
messages (nodestatus/setters.go, KUBELET_SPEC §7.1) and its own `NoSchedule` taint while one holds. A mode writes the
standard types instead (the kubelet's setters off), with no taint. Pure: times are RFC 3339 arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from evictd.core.signals import NodeCondition


class ConditionMode(StrEnum):
    """Which condition types evictd writes."""

    EVICTD = "evictd"
    STANDARD = "standard"


@dataclass(frozen=True, slots=True)
class ConditionText:
    """Reasons and messages of one condition, as the kubelet's node status setters word them."""

    true_reason: str
    true_message: str
    false_reason: str
    false_message: str


CONDITION_TO_TEXT: Mapping[NodeCondition, ConditionText] = {
    NodeCondition.MEMORY_PRESSURE: ConditionText(
        "KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
        "KubeletHasSufficientMemory", "kubelet has sufficient memory available",
    ),
    NodeCondition.DISK_PRESSURE: ConditionText(
        "KubeletHasDiskPressure", "kubelet has disk pressure",
        "KubeletHasNoDiskPressure", "kubelet has no disk pressure",
    ),
    NodeCondition.PID_PRESSURE: ConditionText(
        "KubeletHasInsufficientPID", "kubelet has insufficient PID available",
        "KubeletHasSufficientPID", "kubelet has sufficient PID available",
    ),
}

CONDITION_TO_EVICTD_TYPE: Mapping[NodeCondition, str] = {
    NodeCondition.MEMORY_PRESSURE: "EvictdMemoryPressure",
    NodeCondition.DISK_PRESSURE: "EvictdDiskPressure",
    NodeCondition.PID_PRESSURE: "EvictdPIDPressure",
}

CONDITION_TO_TAINT_KEY: Mapping[NodeCondition, str] = {
    NodeCondition.MEMORY_PRESSURE: "evictd.io/memory-pressure",
    NodeCondition.DISK_PRESSURE: "evictd.io/disk-pressure",
    NodeCondition.PID_PRESSURE: "evictd.io/pid-pressure",
}

# The node events the kubelet records when a pressure condition changes (nodestatus setters).
CONDITION_TO_EVENT_REASONS: Mapping[NodeCondition, tuple[str, str]] = {
    NodeCondition.MEMORY_PRESSURE: ("NodeHasInsufficientMemory", "NodeHasSufficientMemory"),
    NodeCondition.DISK_PRESSURE: ("NodeHasDiskPressure", "NodeHasNoDiskPressure"),
    NodeCondition.PID_PRESSURE: ("NodeHasInsufficientPID", "NodeHasSufficientPID"),
}

TAINT_EFFECT = "NoSchedule"
# What evictd's conditions say once it stopped cleanly: nobody is watching this node's pressure for evictd.
STOPPED_STATUS = "Unknown"
STOPPED_REASON = "EvictdStopped"
STOPPED_MESSAGE = "evictd stopped; this condition is not being updated"


def condition_type(condition: NodeCondition, mode: ConditionMode) -> str:
    return CONDITION_TO_EVICTD_TYPE[condition] if mode is ConditionMode.EVICTD else str(condition)


def _condition(
    kind: str, status: str, reason: str, message: str, by_type: Mapping[str, Mapping[str, Any]], now: str
) -> dict[str, Any]:
    """Return a node condition heartbeating `now`, its `lastTransitionTime` carried over unless the status flipped."""
    previous = by_type.get(kind)
    transition = now
    if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime"):
        transition = str(previous["lastTransitionTime"])
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": now,
            "lastTransitionTime": transition}


def desired_conditions(
    current: Sequence[Mapping[str, Any]],
    pressure: Sequence[NodeCondition],
    mode: ConditionMode,
    now: str,
) -> list[dict[str, Any]]:
    """Return evictd's three node conditions for `pressure` at `now`, keeping transition times that did not change
    (`current`: the node's `status.conditions`)."""
    by_type = {str(c.get("type")): c for c in current}
    conditions = []
    for condition, text in CONDITION_TO_TEXT.items():
        if condition in pressure:
            status, reason, message = "True", text.true_reason, text.true_message
        else:
            status, reason, message = "False", text.false_reason, text.false_message
        conditions.append(_condition(condition_type(condition, mode), status, reason, message, by_type, now))
    return conditions


def stopped_conditions(current: Sequence[Mapping[str, Any]], mode: ConditionMode, now: str) -> list[dict[str, Any]]:
    """Return evictd's three node conditions as a clean stop leaves them: Unknown, reason EvictdStopped (as the node
    lifecycle controller marks a silent kubelet's); transition times kept when already Unknown."""
    by_type = {str(c.get("type")): c for c in current}
    return [_condition(condition_type(condition, mode), STOPPED_STATUS, STOPPED_REASON, STOPPED_MESSAGE, by_type, now)
            for condition in CONDITION_TO_TEXT]


def desired_taints(
    current: Sequence[Mapping[str, Any]], pressure: Sequence[NodeCondition], mode: ConditionMode
) -> list[dict[str, Any]]:
    """Return the node's taints with evictd's pressure taints added or removed, others kept in order (standard
    mode: evictd's removed, none added)."""
    ours = set(CONDITION_TO_TAINT_KEY.values())
    wanted = [] if mode is ConditionMode.STANDARD else [
        CONDITION_TO_TAINT_KEY[c] for c in CONDITION_TO_TAINT_KEY if c in pressure
    ]
    kept = [dict(t) for t in current if not (t.get("key") in ours and t.get("key") not in wanted)]
    present = {t.get("key") for t in kept if t.get("effect") == TAINT_EFFECT}
    for key in wanted:
        if key not in present:
            kept.append({"key": key, "effect": TAINT_EFFECT})
    return kept


def shows_pressure(conditions: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, Any]],
                   pressure: Sequence[NodeCondition], mode: ConditionMode) -> bool:
    """True when `conditions` and `taints` show `pressure` as evictd writes it; False when someone changed them
    since (a kubelet restart, an edit)."""
    by_type = {str(c.get("type")): c for c in conditions}
    for condition in CONDITION_TO_TEXT:
        wanted = "True" if condition in pressure else "False"
        if (by_type.get(condition_type(condition, mode)) or {}).get("status") != wanted:
            return False
    return desired_taints(taints, pressure, mode) == [dict(t) for t in taints]


def condition_transitions(before: Sequence[NodeCondition], after: Sequence[NodeCondition]) -> list[tuple[str, str]]:
    """Return (event reason, condition) for each pressure condition that appeared or cleared."""
    transitions = []
    for condition, (raised, cleared) in CONDITION_TO_EVENT_REASONS.items():
        if condition in after and condition not in before:
            transitions.append((raised, str(condition)))
        elif condition in before and condition not in after:
            transitions.append((cleared, str(condition)))
    return transitions

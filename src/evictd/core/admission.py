"""Tolerations and pod admission under node pressure: may this pod start on this node right now?

Job: answer Toleration.ToleratesTaint and the eviction manager's Admit (`admit`): with no pressure every pod
is admitted; critical pods always are; under MemoryPressure alone only BestEffort pods are refused, unless
they tolerate the node.kubernetes.io/memory-pressure:NoSchedule taint; any other pressure refuses the rest.

Invariants:
- Pure functions: the result depends only on the pod and the set of node conditions passed in.
- The rejection message lists conditions in CONDITION_MESSAGE_ORDER, unknown ones last and sorted, so it is
  stable (upstream takes them from a Go map, in random order).
- Lt/Gt tolerations compare values as Go's strconv.ParseInt(v, 10, 64) reads them; a value Go cannot
  parse never matches.

Sources (kubernetes/kubernetes master; KUBELET_SPEC §7.2):
  pkg/kubelet/eviction/eviction_manager.go                      Admit
  staging/src/k8s.io/api/core/v1/toleration.go                  Toleration.ToleratesTaint
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from evictd.core.decode import INT64_MAX, INT64_MIN
from evictd.core.pods import Pod, QOSClass, Toleration, is_critical_pod
from evictd.core.qos import qos_class
from evictd.core.signals import NodeCondition

# Admission rejection (eviction_manager.go Reason / nodeConditionMessageFmt).
ADMIT_REJECT_REASON = "Evicted"
NODE_CONDITION_MESSAGE_FMT = "The node had condition: [{}]. "

# Order in which node conditions are listed in the admission message. Upstream takes them from a Go map
# (random order); evictd lists them in this fixed order, unknown ones last and sorted.
CONDITION_MESSAGE_ORDER = (
    NodeCondition.MEMORY_PRESSURE.value,
    NodeCondition.DISK_PRESSURE.value,
    NodeCondition.PID_PRESSURE.value,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    """A node taint to test tolerations against."""

    key: str
    value: str = ""
    effect: str = ""


# The taint the node lifecycle controller puts on a node with MemoryPressure; Admit checks BestEffort pods
# against it.
MEMORY_PRESSURE_TAINT = Taint(key="node.kubernetes.io/memory-pressure", effect="NoSchedule")

# What strconv.ParseInt(text, 10, 64) accepts before its range check.
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")


# --- tolerations (toleration.go) ---------------------------------------------------------------------------


def _parse_go_int64(text: str) -> int | None:
    """Return strconv.ParseInt(text, 10, 64), or None where Go reports an error."""
    if not _GO_INT.match(text):
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None


def toleration_tolerates_taint(toleration: Toleration, taint: Taint) -> bool:
    """Return Toleration.ToleratesTaint: empty effect or key match any; "" means Equal; Lt/Gt compare ints."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("Lt", "Gt"):
        bound, actual = _parse_go_int64(toleration.value), _parse_go_int64(taint.value)
        if bound is None or actual is None:
            return False
        return actual < bound if toleration.operator == "Lt" else actual > bound
    return False


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Return True when any toleration tolerates the taint."""
    return any(toleration_tolerates_taint(toleration, taint) for toleration in tolerations)


# --- admission (eviction_manager.go) -----------------------------------------------------------------------


def _ordered_conditions(conditions: AbstractSet[str]) -> list[str]:
    known = [c for c in CONDITION_MESSAGE_ORDER if c in conditions]
    return known + sorted(c for c in conditions if c not in CONDITION_MESSAGE_ORDER)


def admit(pod: Pod, node_conditions: AbstractSet[str]) -> tuple[bool, str, str]:
    """Return (admitted, reason, message) as the eviction manager's Admit decides (KUBELET_SPEC §7.2).

    No condition, or a critical pod: admitted. MemoryPressure alone: admitted unless BestEffort, and a
    BestEffort pod still when it tolerates node.kubernetes.io/memory-pressure:NoSchedule. Anything else:
    rejected with reason "Evicted" and "The node had condition: [A B]. " (conditions in
    CONDITION_MESSAGE_ORDER). Admitted pods get empty reason and message.
    """
    if not node_conditions or is_critical_pod(pod):
        return True, "", ""
    if set(node_conditions) == {NodeCondition.MEMORY_PRESSURE.value}:
        if qos_class(pod) is not QOSClass.BEST_EFFORT:
            return True, "", ""
        if tolerations_tolerate_taint(pod.tolerations, MEMORY_PRESSURE_TAINT):
            return True, "", ""
    message = NODE_CONDITION_MESSAGE_FMT.format(" ".join(_ordered_conditions(node_conditions)))
    return False, ADMIT_REJECT_REASON, message

"""PodDisruptionBudgets as the Eviction subresource enforces them (kube-apiserver's pod eviction REST storage).

The test server keeps no poddisruptionbudgets resource: a test states a budget as the disruption controller
left it (`DisruptionBudget`: its selector, desired and current healthy pods, disruptions allowed) and the
eviction handler asks `DisruptionBudgets.admit` before it deletes the pod. The answers are the real server's:
- a pod in phase Pending, Succeeded or Failed is evicted whatever its budgets (`canIgnorePDB`);
- more than one budget selecting the pod: 500 InternalError, "This pod has more than one PodDisruptionBudget,
  which the eviction subresource does not support.";
- a budget allowing no disruption: 429 TooManyRequests, "Cannot evict pod as it would violate the pod's
  disruption budget.", with the cause {reason: DisruptionBudget, message: "The disruption budget <name> needs
  <desired> healthy pods and has <current> currently"};
- otherwise the pod is evicted and the budget's disruptions allowed go down by one (the server's status update).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kube_status import ApiError, internal_error, status_body

# Pods in these phases are evicted without asking their budgets.
IGNORES_BUDGETS = ("Pending", "Succeeded", "Failed")
TOO_MANY_REQUESTS = 429
VIOLATES_BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."
MORE_THAN_ONE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


@dataclass(frozen=True)
class DisruptionBudget:
    """A PodDisruptionBudget as the disruption controller left its status."""

    namespace: str
    name: str
    match_labels: Mapping[str, str]
    desired_healthy: int
    current_healthy: int
    disruptions_allowed: int

    def selects(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return meta.get("namespace", "default") == self.namespace and bool(self.match_labels) and all(
            labels.get(key) == value for key, value in self.match_labels.items())


def budget_refusal(budget: DisruptionBudget) -> ApiError:
    """The real server's 429 for a budget that allows no disruption (`errors.NewTooManyRequests` plus its cause)."""
    cause = {"reason": "DisruptionBudget", "message": f"The disruption budget {budget.name} needs "
             f"{budget.desired_healthy} healthy pods and has {budget.current_healthy} currently"}
    return ApiError(TOO_MANY_REQUESTS, status_body(TOO_MANY_REQUESTS, "TooManyRequests", VIOLATES_BUDGET,
                                                   {"causes": [cause]}))


class DisruptionBudgets:
    """The budgets the eviction handler checks; safe to use from the server's threads."""

    def __init__(self) -> None:
        self._budgets: dict[tuple[str, str], DisruptionBudget] = {}
        self._lock = threading.Lock()

    def add(self, budget: DisruptionBudget) -> None:
        with self._lock:
            self._budgets[(budget.namespace, budget.name)] = budget

    def get(self, namespace: str, name: str) -> DisruptionBudget | None:
        with self._lock:
            return self._budgets.get((namespace, name))

    def admit(self, pod: Mapping[str, Any]) -> None:
        """Let the eviction of `pod` go ahead (using up one disruption) or raise the server's ApiError."""
        if (pod.get("status") or {}).get("phase") in IGNORES_BUDGETS:
            return
        with self._lock:
            selecting = [budget for budget in self._budgets.values() if budget.selects(pod)]
            if not selecting:
                return
            if len(selecting) > 1:
                raise internal_error(MORE_THAN_ONE)
            budget = selecting[0]
            if budget.disruptions_allowed <= 0:
                raise budget_refusal(budget)
            self._budgets[(budget.namespace, budget.name)] = replace(
                budget, disruptions_allowed=budget.disruptions_allowed - 1)

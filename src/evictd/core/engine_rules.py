"""The rules the synchronize step (`evictd.core.engine`) applies, each a small pure function of its inputs.

Job: the kubelet's helpers.go functions the step calls, one for one and under their names in snake_case
(thresholds_first_observed_at, node_conditions, node_conditions_last_observed_at,
node_conditions_observed_since, thresholds_met_grace_period, thresholds_updated_stats), so that they can be
compared with upstream line by line; the grace period an eviction asks for and the one the pod worker makes of it
(KUBELET_SPEC §10.2); and evictd's own settle rule for its memory stall signals after any eviction (`STALL_SETTLE_S`).

Invariants: inputs are never mutated; `now` is monotonic seconds supplied by the caller; where the kubelet's
order depends on Go map iteration, the order of the thresholds given is kept.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from evictd.core.pods import Pod
from evictd.core.signals import NodeCondition, Operator, Signal, spec_of
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, threshold_quantity

# The kubelet's immediateEvictionGracePeriodSeconds (0 would mean "the pod's own" downstream, kubernetes#115819).
IMMEDIATE_EVICTION_GRACE_PERIOD_S = 1
# The kubelet's minimumGracePeriodInSeconds (kuberuntime): the grace an eviction's stop sends at least.
MINIMUM_GRACE_PERIOD_S = 2

# After any eviction no stall threshold starts another for this long: avg10 lags the relief (two 2 s updates).
STALL_SETTLE_S = 4.0
# A hard memory eviction's pod still running once the signal is down to this share is killed (`memory_ran_short`).
GRACE_CUT_SHARE = 0.5


# --- the kubelet's helpers.go, one for one ------------------------------------------------------------


def thresholds_first_observed_at(
    thresholds: Sequence[Threshold], last_observed_at: Mapping[Threshold, float], now: float
) -> dict[Threshold, float]:
    """thresholdsFirstObservedAt: when each of `thresholds` was first met (now, unless it was already met)."""
    return {threshold: last_observed_at.get(threshold, now) for threshold in thresholds}


def node_conditions(thresholds: Sequence[Threshold]) -> list[NodeCondition]:
    """nodeConditions: the node conditions `thresholds` trigger, each once, in threshold order."""
    return list(dict.fromkeys(spec_of(threshold.signal).condition for threshold in thresholds))


def node_conditions_last_observed_at(
    conditions: Sequence[NodeCondition], last_observed_at: Mapping[NodeCondition, float], now: float
) -> dict[NodeCondition, float]:
    """nodeConditionsLastObservedAt: `conditions` observed now, the others when they were last observed."""
    return {**last_observed_at, **dict.fromkeys(conditions, now)}


def node_conditions_observed_since(
    observed_at: Mapping[NodeCondition, float], period_s: float, now: float
) -> list[NodeCondition]:
    """nodeConditionsObservedSince: the conditions observed within the last `period_s` seconds."""
    return [condition for condition, at in observed_at.items() if now - at < period_s]


def thresholds_met_grace_period(observed_at: Mapping[Threshold, float], now: float) -> list[Threshold]:
    """thresholdsMetGracePeriod: the thresholds met for at least their grace period."""
    return [threshold for threshold, at in observed_at.items() if now - at >= threshold.grace_period_s]


def thresholds_updated_stats(
    thresholds: Sequence[Threshold],
    observations: Mapping[Signal, Observation],
    last_observations: Mapping[Signal, Observation],
) -> list[Threshold]:
    """thresholdsUpdatedStats: the thresholds whose stats are newer than last cycle's, or carry no time (a
    threshold without an observation is dropped)."""
    updated = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        last = last_observations.get(threshold.signal)
        if last is None or observed.time is None or last.time is None or observed.time > last.time:
            updated.append(threshold)
    return updated


# --- evictd's stall settle rule ---------------------------------------------------------------------------


def is_stall(threshold: Threshold) -> bool:
    """Whether `threshold` is on one of evictd's memory stall signals."""
    return spec_of(threshold.signal).stall_family


def stall_settling(thresholds: Sequence[Threshold], stall_evicted_at: float | None, now: float) -> list[Threshold]:
    """The stall thresholds among `thresholds` that start no eviction yet: the last eviction, of any signal
    (`stall_evicted_at`), was decided less than STALL_SETTLE_S before `now`."""
    if stall_evicted_at is None or now - stall_evicted_at >= STALL_SETTLE_S:
        return []
    return [threshold for threshold in thresholds if is_stall(threshold)]


# --- grace periods (eviction_manager.go, the pod worker's calculateEffectiveGracePeriod) ------------------


def memory_ran_short(threshold: Threshold, observations: Mapping[Signal, Observation]) -> bool:
    """Whether `threshold`, a hard memory-cgroup one, has its signal below `GRACE_CUT_SHARE` of its quantity in
    `observations` (False otherwise or unobserved)."""
    observed = observations.get(threshold.signal)
    if (observed is None or not threshold.is_hard or not spec_of(threshold.signal).memcg_watched
            or threshold.operator is not Operator.LESS_THAN):
        return False
    quantity = threshold_quantity(threshold.value, observed.capacity).ceil_int()
    return observed.available.ceil_int() < quantity * GRACE_CUT_SHARE


def stop_grace_period_s(effective_grace_period_s: int) -> int:
    """The grace period a pod evicted with `effective_grace_period_s` is stopped with (CRI StopContainer's timeout):
    at least `MINIMUM_GRACE_PERIOD_S`, as the kubelet's killContainer gives it."""
    return max(effective_grace_period_s, MINIMUM_GRACE_PERIOD_S)


def grace_period_override_s(threshold: Threshold, pod: Pod, max_pod_grace_period_s: int) -> int:
    """Return the kubelet's grace period override: 1 s for hard, min(max pod grace, pod's) for soft."""
    if threshold.is_hard:
        return IMMEDIATE_EVICTION_GRACE_PERIOD_S
    if pod.termination_grace_period_s is not None:
        return min(max_pod_grace_period_s, pod.termination_grace_period_s)
    return max_pod_grace_period_s


def effective_grace_period_s(override_s: int, pod: Pod) -> int:
    """Return the grace period the pod worker really applies for an eviction override (KUBELET_SPEC §10.2;
    v1.36.2 `calculateEffectiveGracePeriod`): the override only shortens, an explicit one (0 too) is never replaced
    by the pod's own, and below 1 s becomes 1 s (a soft eviction with `evictionMaxPodGracePeriod: 0` gives 1 s)."""
    grace = pod.deletion_grace_period_s or 0
    if grace == 0 or override_s < grace:
        grace = override_s  # overridden: the pod's own grace period no longer applies
    return max(grace, 1)

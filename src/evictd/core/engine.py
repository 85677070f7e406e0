"""The kubelet's eviction `synchronize` step as pure functions (KUBELET_SPEC §5-§12).

The kubelet does I/O in the middle of a cycle (node-level reclaim, then a fresh summary), so the step is cut
at that point into three pure calls that the shell (`evictd.manager`) sequences:

    assess(state, config, layout, summary, pods, now) -> (new_state, Assessment)
        steps 1-19: observations, thresholds met (with the min-reclaim extension of last cycle's thresholds),
        first-observed times, node conditions with the transition period, grace periods, the only-updated-
        stats rule, local-storage limit evictions, and the threshold to act on with its reclaim actions;
    reclaim_succeeded(state, summary_after) -> bool
        step 20: every configured threshold re-checked with minimum reclaim on the post-reclaim stats;
    choose_eviction(config, assessment, pods, summary) -> EvictionChoice
        steps 21-25: rank, skip critical pods, and build the one eviction of the cycle.

Invariants: inputs are never mutated; `now` is monotonic seconds supplied by the caller; the state returned
by `assess` is complete (the shell commits it whatever happens next). Where the kubelet's order depends on Go
map iteration, evictd uses configuration order, and acts on a hard threshold before a soft one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from evictd.core.kubelet_config import EvictionSettings
from evictd.core.local_storage import local_storage_evictions
from evictd.core.messages import eviction_message
from evictd.core.pods import Pod, is_critical_pod
from evictd.core.quantity import Quantity
from evictd.core.ranking import rank_pods
from evictd.core.signals import (
    MEMORY_SIGNALS,
    SIGNAL_TO_CONDITION,
    SIGNAL_TO_RESOURCE,
    FsLayout,
    NodeCondition,
    Resource,
    Signal,
)
from evictd.core.summary import Observation, PodStats, Summary, pod_stats_lookup, signal_observations
from evictd.core.thresholds import (
    Threshold,
    derive_containerfs_thresholds,
    merge_thresholds,
    threshold_quantity,
    thresholds_met,
    unique_as_go_map_keys,
)

# Grace period given to pods evicted for a hard threshold or a local-storage limit (the kubelet's
# immediateEvictionGracePeriodSeconds; 0 would mean "use the pod's own" downstream, kubernetes#115819).
IMMEDIATE_EVICTION_GRACE_PERIOD_S = 1

EVICTED_REASON = "Evicted"
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"


class ReclaimAction(StrEnum):
    """A node-level reclaim function (KUBELET_SPEC §8)."""

    CONTAINER_GC = "containerGC"
    IMAGE_GC = "imageGC"


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the engine needs of the configuration."""

    thresholds: tuple[Threshold, ...]
    pressure_transition_period_s: float = 300.0
    max_pod_grace_period_s: int = 0
    local_storage_capacity_isolation: bool = True

    @classmethod
    def from_settings(cls, settings: EvictionSettings) -> EngineConfig:
        """Return the engine configuration of defaulted kubelet settings (raises ConfigError)."""
        return cls(
            thresholds=tuple(settings.thresholds()),
            pressure_transition_period_s=settings.pressure_transition_period_s,
            max_pod_grace_period_s=settings.max_pod_grace_period_s,
            local_storage_capacity_isolation=settings.local_storage_capacity_isolation,
        )


@dataclass(frozen=True, slots=True)
class EngineState:
    """What the kubelet's eviction manager remembers between cycles (KUBELET_SPEC §5.2).

    `layout` and `thresholds` are fixed by the first cycle (layout detection and containerfs derivation); a
    state whose `layout` is cleared has them detected and derived again by the next cycle, the rest kept.
    Times are monotonic seconds.
    """

    layout: FsLayout | None = None
    thresholds: tuple[Threshold, ...] = ()
    first_observed_at: Mapping[Threshold, float] = field(default_factory=dict)
    condition_last_observed_at: Mapping[NodeCondition, float] = field(default_factory=dict)
    node_conditions: tuple[NodeCondition, ...] = ()
    thresholds_met: tuple[Threshold, ...] = ()
    last_observations: Mapping[Signal, Observation] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ThresholdStatus:
    """A threshold met this cycle, and whether its grace period has elapsed."""

    threshold: Threshold
    grace_met: bool
    observed_for_s: float


@dataclass(frozen=True, slots=True)
class PodCondition:
    """A pod status condition to write with an eviction."""

    type: str
    status: str
    reason: str
    message: str
    observed_generation: int = 0


@dataclass(frozen=True, slots=True)
class Eviction:
    """One pod to evict and everything the kubelet writes about it.

    The kubelet ends the pod with phase Failed, `reason` and `message`, plus `conditions`; from outside the
    kubelet only the conditions can be written (the kubelet owns the rest, see evictd.kube.evictor). The event
    carries `reason`, `message` and `annotations`.
    `signal` is the label of the kubelet's evictions metric. `grace_period_override_s` is what the kubelet's
    eviction manager computes; `effective_grace_period_s` is what the pod gets after the pod worker resolves
    an override of 0 or less (KUBELET_SPEC §10.2).
    """

    pod: Pod
    signal: str
    grace_period_override_s: int
    effective_grace_period_s: int
    message: str
    annotations: Mapping[str, str]
    conditions: tuple[PodCondition, ...]
    reason: str = EVICTED_REASON
    threshold: Threshold | None = None


@dataclass(frozen=True, slots=True)
class Assessment:
    """The outcome of `assess`: what the cycle saw and what it should do next.

    `skipped` is set (with a reason) when the cycle did nothing at all. `local_storage_evictions` non-empty
    means evict those and stop. Otherwise, when `threshold_to_reclaim` is set, run `reclaim_actions`, then
    (if they did not resolve the pressure) `choose_eviction`.
    """

    observations: Mapping[Signal, Observation] = field(default_factory=dict)
    thresholds: tuple[ThresholdStatus, ...] = ()
    node_conditions: tuple[NodeCondition, ...] = ()
    thresholds_to_act: tuple[Threshold, ...] = ()
    threshold_to_reclaim: Threshold | None = None
    resource_to_reclaim: Resource | None = None
    reclaim_actions: tuple[ReclaimAction, ...] = ()
    local_storage_evictions: tuple[Eviction, ...] = ()
    stale_signals: tuple[Signal, ...] = ()
    warnings: tuple[str, ...] = ()
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class EvictionChoice:
    """The ranked candidates and the one eviction of the cycle (None when every candidate is critical).

    `withheld` says why nobody was even ranked although a threshold asked for an eviction.
    """

    ranking: tuple[Pod, ...]
    eviction: Eviction | None
    skipped_critical: tuple[Pod, ...] = ()
    withheld: str | None = None


# Pods known only from the node carry no requests, priorities or grace periods: a soft threshold (which waits
# for its grace period and honours the pod's own termination grace period) waits for the API's pod list.
SOFT_WITHOUT_POD_LIST = "a soft threshold evicts only from the Kubernetes API's pod list"


# --- reclaim plan (KUBELET_SPEC §8) ---------------------------------------------------------------------

_GC_BOTH = (ReclaimAction.CONTAINER_GC, ReclaimAction.IMAGE_GC)
_NODEFS_SIGNALS = frozenset({Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE})
_IMAGEFS_SIGNALS = frozenset({Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE})
_CONTAINERFS_SIGNALS = frozenset({Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE})


def reclaim_actions(signal: Signal, layout: FsLayout) -> tuple[ReclaimAction, ...]:
    """Return the node-level reclaim functions the kubelet runs for `signal`, in call order."""
    split = layout.dedicated_imagefs and layout.split_containerfs
    imagefs_only = layout.dedicated_imagefs and not layout.split_containerfs
    if signal in _CONTAINERFS_SIGNALS:
        signal = Signal.IMAGEFS_AVAILABLE if imagefs_only else Signal.NODEFS_AVAILABLE
    if signal in _NODEFS_SIGNALS:
        if imagefs_only:
            return ()
        return (ReclaimAction.CONTAINER_GC,) if split else _GC_BOTH
    if signal in _IMAGEFS_SIGNALS:
        return (ReclaimAction.IMAGE_GC,) if split else _GC_BOTH
    return ()


# --- the cycle -----------------------------------------------------------------------------------------


def _eviction_priority(threshold: Threshold) -> tuple[int, int]:
    """Sort key: memory signals first (as the kubelet), then hard before soft (evictd's choice)."""
    return (0 if threshold.signal in MEMORY_SIGNALS else 1, 0 if threshold.is_hard else 1)


def _updated(observation: Observation, previous: Observation | None) -> bool:
    """True unless the stats behind `observation` are no newer than last cycle's (the only-updated rule)."""
    if previous is None or observation.time is None or previous.time is None:
        return True
    return observation.time > previous.time


def effective_thresholds(config: EngineConfig, layout: FsLayout) -> tuple[list[Threshold], list[str]]:
    """Return the configured thresholds with containerfs derived for `layout`, and the kubelet's warnings."""
    return derive_containerfs_thresholds(config.thresholds, layout.dedicated_imagefs, layout.split_containerfs)


def assess(
    state: EngineState,
    config: EngineConfig,
    layout: FsLayout,
    summary: Summary | None,
    pods: Sequence[Pod],
    now: float,
) -> tuple[EngineState, Assessment]:
    """Run the synchronize step up to node-level reclaim; return the new state and what to do next.

    `summary` None means the stats could not be read: nothing changes (node conditions stay frozen).
    """
    if not config.thresholds and not config.local_storage_capacity_isolation:
        return state, Assessment(skipped="no thresholds configured and local storage isolation is off")
    warnings: tuple[str, ...] = ()
    if state.layout is None:
        # The first cycle, or the first after the runtime was attached late (the layout is the runtime's):
        # whatever the state already remembers (grace periods, conditions) is kept.
        derived, derive_warnings = effective_thresholds(config, layout)
        state = replace(state, layout=layout, thresholds=tuple(derived))
        warnings = tuple(derive_warnings)
    if summary is None:
        return state, Assessment(
            node_conditions=state.node_conditions, warnings=warnings, skipped="stats unavailable"
        )
    observations = signal_observations(summary)
    met = thresholds_met(state.thresholds, observations, enforce_min_reclaim=False)
    if state.thresholds_met:
        unresolved = thresholds_met(state.thresholds_met, observations, enforce_min_reclaim=True)
        met = merge_thresholds(met, unresolved)
    met = unique_as_go_map_keys(met)
    first_observed_at = {t: state.first_observed_at.get(t, now) for t in met}
    observed_conditions = list(dict.fromkeys(SIGNAL_TO_CONDITION[t.signal] for t in met))
    last_observed_at = {**state.condition_last_observed_at, **{c: now for c in observed_conditions}}
    node_conditions = tuple(
        condition
        for condition, seen_at in last_observed_at.items()
        if now - seen_at < config.pressure_transition_period_s
    )
    statuses = tuple(
        ThresholdStatus(t, grace_met=now - at >= t.grace_period_s, observed_for_s=now - at)
        for t, at in first_observed_at.items()
    )
    grace_met = tuple(status.threshold for status in statuses if status.grace_met)
    to_act: list[Threshold] = []
    stale: list[Signal] = []
    for threshold in grace_met:
        observation = observations.get(threshold.signal)
        if observation is None:
            continue
        if _updated(observation, state.last_observations.get(threshold.signal)):
            to_act.append(threshold)
        elif threshold.signal not in stale:
            stale.append(threshold.signal)
    new_state = EngineState(
        layout=state.layout,
        thresholds=state.thresholds,
        first_observed_at=first_observed_at,
        condition_last_observed_at=last_observed_at,
        node_conditions=node_conditions,
        thresholds_met=grace_met,
        last_observations=observations,
    )
    assessment = Assessment(
        observations=observations,
        thresholds=statuses,
        node_conditions=node_conditions,
        stale_signals=tuple(stale),
        warnings=warnings,
    )
    stats_of = pod_stats_lookup(summary, pods)
    if config.local_storage_capacity_isolation:
        evictions = tuple(
            _local_storage_eviction(item.pod, item.signal, item.message)
            for item in local_storage_evictions(pods, stats_of, layout_of(new_state).dedicated_imagefs)
        )
        if evictions:
            return new_state, replace(assessment, local_storage_evictions=evictions)
    if not to_act:
        return new_state, assessment
    to_act.sort(key=_eviction_priority)
    target = to_act[0]
    return new_state, replace(
        assessment,
        thresholds_to_act=tuple(to_act),
        threshold_to_reclaim=target,
        resource_to_reclaim=SIGNAL_TO_RESOURCE[target.signal],
        reclaim_actions=reclaim_actions(target.signal, layout_of(new_state)),
    )


def layout_of(state: EngineState) -> FsLayout:
    """Return the layout fixed by the first cycle (single filesystem before any cycle ran)."""
    return state.layout if state.layout is not None else FsLayout()


def reclaim_succeeded(state: EngineState, summary_after: Summary | None) -> bool:
    """Return True when, on the post-reclaim stats, no configured threshold is met with minimum reclaim.

    Grace periods are ignored and soft thresholds count too; unreadable stats mean reclaim failed.
    """
    if summary_after is None:
        return False
    observations = signal_observations(summary_after)
    return not thresholds_met(state.thresholds, observations, enforce_min_reclaim=True)


def effective_grace_period_s(override_s: int, pod: Pod) -> int:
    """Return the grace period the pod worker really applies for an eviction override (KUBELET_SPEC §10.2).

    v1.36.2's `calculateEffectiveGracePeriod`: the override only shortens (a deletion already under way with a
    shorter grace period keeps it); an explicit override, 0 included, is never replaced by the pod's own
    `terminationGracePeriodSeconds` (its `overridden` flag); anything below 1 s becomes 1 s. So a soft
    eviction with the default `evictionMaxPodGracePeriod: 0` gives the pod 1 s, not its own grace period.
    """
    grace = 0
    if pod.deletion_grace_period_s is not None:
        grace = pod.deletion_grace_period_s
    if grace == 0 or override_s < grace:
        grace = override_s  # overridden: the pod's own grace period no longer applies
    return max(grace, 1)


def _local_storage_eviction(pod: Pod, signal: str, message: str) -> Eviction:
    return Eviction(
        pod=pod,
        signal=signal,
        grace_period_override_s=IMMEDIATE_EVICTION_GRACE_PERIOD_S,
        effective_grace_period_s=effective_grace_period_s(IMMEDIATE_EVICTION_GRACE_PERIOD_S, pod),
        message=message,
        annotations={},
        conditions=(),
    )


def grace_period_override_s(threshold: Threshold, pod: Pod, max_pod_grace_period_s: int) -> int:
    """Return the kubelet's grace period override: 1 s for hard, min(max pod grace, pod's) for soft."""
    if threshold.is_hard:
        return IMMEDIATE_EVICTION_GRACE_PERIOD_S
    if pod.termination_grace_period_s is not None:
        return min(max_pod_grace_period_s, pod.termination_grace_period_s)
    return max_pod_grace_period_s


def _threshold_figures(
    resource: Resource, thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]
) -> tuple[Quantity | None, Quantity | None]:
    """Return the threshold quantity and available amount the eviction message quotes for `resource`."""
    for threshold in thresholds:
        if SIGNAL_TO_RESOURCE[threshold.signal] is not resource:
            continue
        observation = observations.get(threshold.signal)
        if observation is not None:
            return threshold_quantity(threshold.value, observation.capacity), observation.available
    return None, None


def choose_eviction(
    config: EngineConfig, state: EngineState, assessment: Assessment, pods: Sequence[Pod], summary: Summary,
    *, pods_from_node: bool = False,
) -> EvictionChoice:
    """Rank the pods for the acted-on threshold and return the first non-critical one as the eviction.

    `summary` is the cycle's (pre-reclaim) summary, as the kubelet ranks on it. `pods_from_node` means the pods
    are what the node shows (the API gave no pod list): only a hard threshold evicts from them.
    """
    threshold = assessment.threshold_to_reclaim
    resource = assessment.resource_to_reclaim
    if threshold is None or resource is None or not pods:
        return EvictionChoice(ranking=(), eviction=None)
    if pods_from_node and not threshold.is_hard:
        # The first hard threshold to act on (they are sorted) evicts instead, if there is one.
        hard = next((t for t in assessment.thresholds_to_act if t.is_hard), None)
        if hard is None:
            return EvictionChoice(ranking=(), eviction=None, withheld=SOFT_WITHOUT_POD_LIST)
        threshold, resource = hard, SIGNAL_TO_RESOURCE[hard.signal]
    stats_of = pod_stats_lookup(summary, pods)
    ranking = tuple(rank_pods(threshold.signal, layout_of(state), pods, stats_of))
    quantity, available = _threshold_figures(resource, assessment.thresholds_to_act, assessment.observations)
    skipped: list[Pod] = []
    for pod in ranking:
        if is_critical_pod(pod):
            skipped.append(pod)
            continue
        return EvictionChoice(
            ranking=ranking,
            eviction=_threshold_eviction(config, threshold, resource, pod, stats_of(pod), quantity, available),
            skipped_critical=tuple(skipped),
        )
    return EvictionChoice(ranking=ranking, eviction=None, skipped_critical=tuple(skipped))


def _threshold_eviction(
    config: EngineConfig,
    threshold: Threshold,
    resource: Resource,
    pod: Pod,
    stats: PodStats | None,
    quantity: Quantity | None,
    available: Quantity | None,
) -> Eviction:
    message, annotations = eviction_message(resource, pod, stats, quantity, available)
    override = grace_period_override_s(threshold, pod, config.max_pod_grace_period_s)
    condition = PodCondition(
        type=DISRUPTION_TARGET,
        status="True",
        reason=TERMINATION_BY_KUBELET,
        message=message,
        observed_generation=pod.generation,
    )
    return Eviction(
        pod=pod,
        signal=str(threshold.signal),
        grace_period_override_s=override,
        effective_grace_period_s=effective_grace_period_s(override, pod),
        message=message,
        annotations=annotations,
        conditions=(condition,),
        threshold=threshold,
    )

"""The kubelet's eviction `synchronize` step as pure functions (KUBELET_SPEC §5-§12).

Over 500 lines because it is the kubelet's synchronize in one place, readable against eviction_manager.go top to
bottom; its rules are already apart (`engine_rules`, `fs_layout`, `ranking`, `disk_figures`, `settled`,
`stall_gate`). The kubelet does I/O mid-cycle (node-level reclaim, then fresh stats), so the step is cut there into
pure calls the shell (`evictd.cycle.manager`) sequences: `assess` (steps 1-19, up to the threshold to act on),
`reclaim_succeeded` (step 20), `choose_eviction` (steps 21-25: rank, skip critical pods, the cycle's one eviction)
and `note_evictions` (evictd's stall settle rule). Helpers keep helpers.go's names in snake_case.

Invariants: inputs are never mutated; `now` is monotonic seconds; the state `assess` returns is complete. Where the
kubelet's order depends on Go map iteration, evictd uses configuration order, and hard before soft.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from evictd.core.disk_figures import pods_to_wait_for, unmeasured_pods
from evictd.core.engine_rules import (
    IMMEDIATE_EVICTION_GRACE_PERIOD_S,
    STALL_SETTLE_S,
    effective_grace_period_s,
    grace_period_override_s,
    is_stall,
    node_conditions,
    node_conditions_last_observed_at,
    node_conditions_observed_since,
    stall_settling,
    thresholds_first_observed_at,
    thresholds_met_grace_period,
    thresholds_updated_stats,
)
from evictd.core.fs_layout import FsLayout, ReclaimAction, meaning_of
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.local_storage import local_storage_evictions
from evictd.core.messages import eviction_message
from evictd.core.pod_growth import PodMemorySnapshot, next_snapshots, stall_candidates
from evictd.core.pods import Pod, is_critical_pod
from evictd.core.quantity import Quantity
from evictd.core.ranking import SortKey, rank_pods_with_keys
from evictd.core.refault import RefaultFigure
from evictd.core.signals import NodeCondition, Resource, Signal, spec_of
from evictd.core.stall_gate import (
    HeldBack,
    StallGate,
    evidence_after,
    gated_observations,
    held_back_reports,
    split_held_back,
)
from evictd.core.stall_gate import observe as observe_stall_gate
from evictd.core.summary import Observation, PodStats, Summary, pod_stats_lookup, signal_observations
from evictd.core.thresholds import (
    Threshold,
    derive_containerfs_thresholds,
    merge_thresholds,
    threshold_quantity,
    thresholds_met,
    unique_as_go_map_keys,
)

EVICTED_REASON = "Evicted"
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the engine needs of the configuration."""

    thresholds: tuple[Threshold, ...]
    pressure_transition_period_s: float = 300.0
    max_pod_grace_period_s: int = 0
    local_storage_capacity_isolation: bool = True
    # evictd's stall gate (`evictd.core.stall_gate`): a stall threshold counts only during node-wide reclaim.
    stall_requires_node_reclaim: bool = True

    @classmethod
    def from_settings(cls, settings: EvictionSettings) -> EngineConfig:
        """Return the engine configuration of defaulted kubelet settings (raises ConfigError)."""
        return cls(
            thresholds=tuple(settings.thresholds()),
            pressure_transition_period_s=settings.pressure_transition_period_s,
            max_pod_grace_period_s=settings.max_pod_grace_period_s,
            local_storage_capacity_isolation=settings.local_storage_capacity_isolation,
            stall_requires_node_reclaim=settings.stall_requires_node_reclaim,
        )


@dataclass(frozen=True, slots=True)
class EngineState:
    """What the kubelet's eviction manager remembers between cycles (KUBELET_SPEC §5.2). `layout` and `thresholds`
    are fixed by the first cycle; a cleared `layout` has them detected again. Times are monotonic seconds."""

    layout: FsLayout | None = None
    thresholds: tuple[Threshold, ...] = ()
    first_observed_at: Mapping[Threshold, float] = field(default_factory=dict)
    condition_last_observed_at: Mapping[NodeCondition, float] = field(default_factory=dict)
    node_conditions: tuple[NodeCondition, ...] = ()
    thresholds_met: tuple[Threshold, ...] = ()
    last_observations: Mapping[Signal, Observation] = field(default_factory=dict)
    # evictd's own: when the last eviction, of any signal, was decided (`note_evictions`): the stall family's settle
    # and evidence rules run from it (saved as `stallEvictedAt`).
    stall_evicted_at: float | None = None
    # evictd's own: the stall gate's counters and its last verdict (`evictd.core.stall_gate`; not saved to disk).
    stall_gate: StallGate = field(default_factory=StallGate)
    # evictd's own: the pods' memory over the last window, kept with stall-family thresholds (`pod_growth`).
    pod_memory: tuple[PodMemorySnapshot, ...] = ()


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

    def to_json(self) -> dict[str, object]:
        """Return the condition as the API takes it (and as the journal and `simulate --output json` show it)."""
        item: dict[str, object] = {"type": self.type, "status": self.status, "reason": self.reason,
                                   "message": self.message}
        if self.observed_generation:
            item["observedGeneration"] = self.observed_generation
        return item


@dataclass(frozen=True, slots=True)
class Eviction:
    """One pod to evict and everything the kubelet writes about it: phase Failed, `reason`, `message` and
    `conditions` (from outside the kubelet only the conditions can be written: evictd.kube.evictor), and the event.
    `grace_period_override_s` is the eviction manager's; `effective_grace_period_s` what the pod worker resolves
    (KUBELET_SPEC §10.2)."""

    pod: Pod
    signal: str
    grace_period_override_s: int
    effective_grace_period_s: int
    message: str
    annotations: Mapping[str, str]
    conditions: tuple[PodCondition, ...]
    reason: str = EVICTED_REASON
    threshold: Threshold | None = None


class FollowUpKind(StrEnum):
    """What evictd does when a hard threshold ranks first a pod it evicted that still runs: never a second eviction
    (no second DELETE of the same grace, no second Evicted event, counted once), as the kubelet evicts a pod once and
    waits for its cleanup. The value is the `kind` label of `evictd_eviction_follow_ups_total`."""

    ESCALATED = "escalated"  # evicted with a longer grace (soft): deleted again, once, with the hard grace
    STOPPED_AGAIN = "stopped_again"  # deleted with the hard grace, running again on the node: stopped there again
    LEFT_TO_KUBELET = "left_to_kubelet"  # nothing more to do here (no runtime): the kubelet carries out the deletion


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A follow-up of an earlier eviction of `eviction.pod` (the cycle's ranking chose it again): `kind`, and how it
    was carried out (`how`)."""

    eviction: Eviction
    kind: FollowUpKind
    how: str


# --- the outcome of `assess`: what the cycle saw, and its next step ------------------------------------


@dataclass(frozen=True, slots=True)
class Skipped:
    """The cycle assessed nothing: no thresholds and no local-storage isolation, the stats unreadable, or the
    filesystem layout unknown (`reason` says which)."""

    reason: str


@dataclass(frozen=True, slots=True)
class NoneStarved:
    """No threshold to act on: none met its grace period on updated stats (the kubelet's "no resources are
    starved"), and no pod broke a local-storage limit."""


@dataclass(frozen=True, slots=True)
class EvictForLocalStorage:
    """Evict these pods for their local-storage limits, and do nothing else this cycle."""

    evictions: tuple[Eviction, ...]


@dataclass(frozen=True, slots=True)
class ReclaimThenEvict:
    """Reclaim `resource` at node level with `actions`, then, unless the post-reclaim stats show the pressure
    resolved, evict one pod (`choose_eviction`). `thresholds` are in eviction priority; the first is reclaimed.
    `stall_candidates`: the UIDs of the pods a stall-family threshold may evict (`evictd.core.pod_growth`; None
    without stall-family thresholds)."""

    thresholds: tuple[Threshold, ...]
    resource: Resource
    actions: tuple[ReclaimAction, ...]
    stall_candidates: frozenset[str] | None = None

    @property
    def threshold(self) -> Threshold:
        return self.thresholds[0]


NextStep = Skipped | NoneStarved | EvictForLocalStorage | ReclaimThenEvict


@dataclass(frozen=True, slots=True)
class Assessment:
    """The outcome of `assess`: the thresholds met (grace elapsed or not) and the next step (`next_step`).
    `stale_signals`: would act but stats not updated; `stall_settling`: stall signals waiting for the last stall
    eviction to settle (`settle_ends_in_s` from now); `stall_held_back`: held back by the stall gate;
    `daemons_refault`: the cycle's daemons refault figure, with what it counted beside the re-reads (None: none)."""

    next_step: NextStep
    observations: Mapping[Signal, Observation] = field(default_factory=dict)
    thresholds: tuple[ThresholdStatus, ...] = ()
    node_conditions: tuple[NodeCondition, ...] = ()
    stale_signals: tuple[Signal, ...] = ()
    warnings: tuple[str, ...] = ()
    stall_settling: tuple[Signal, ...] = ()
    settle_ends_in_s: float | None = None
    stall_held_back: tuple[HeldBack, ...] = ()
    daemons_refault: RefaultFigure | None = None

    def grace_ends_in_s(self) -> float | None:
        """How long until the first met threshold's running grace period ends (0: one has; None: none runs)."""
        running = [s.threshold.grace_period_s - s.observed_for_s for s in self.thresholds if not s.grace_met]
        return max(0.0, min(running)) if running else None

    def next_decision_in_s(self) -> float | None:
        """How long until a met threshold may decide: the first grace period or stall settle end (None: neither)."""
        ends = [end for end in (self.grace_ends_in_s(), self.settle_ends_in_s) if end is not None]
        return min(ends) if ends else None


@dataclass(frozen=True, slots=True)
class EvictionChoice:
    """The ranked candidates and the cycle's one eviction (None when every candidate is critical). `withheld`: why
    nobody was ranked; `awaiting`: pods whose disk figures the shell should wait for before a disk ranking;
    `unmeasured`: pods a disk ranking ranked without disk figures (as using none, as the kubelet counts them)."""

    ranking: tuple[Pod, ...]
    eviction: Eviction | None
    skipped_critical: tuple[Pod, ...] = ()
    withheld: str | None = None
    # The signal the pods were ranked for and, in ranking order, the key each was sorted by.
    ranking_signal: Signal | None = None
    ranking_keys: tuple[SortKey, ...] = ()
    # The next non-critical candidates after `eviction`: where the Eviction API refuses one, the next is tried.
    alternates: tuple[Eviction, ...] = ()
    awaiting: tuple[Pod, ...] = ()
    unmeasured: tuple[Pod, ...] = ()


# Why nobody was ranked while the shell waits for the disk walker's figures of pods not measured yet.
AWAITING_DISK_FIGURES = "pods not measured yet by the disk walker: waiting for their disk figures before ranking"

# Pods known only from the node carry no requests, priorities or grace periods: a soft threshold waits for the API.
SOFT_WITHOUT_POD_LIST = "a soft threshold evicts only from the Kubernetes API's pod list"

# A stall-family threshold evicts only a pod that grew and shows the pressure itself (`evictd.core.pod_growth`).
NO_STALL_CANDIDATE = "no pod grew within the last 10 s: a stall evicts no bystander"


# --- the cycle -----------------------------------------------------------------------------------------


def _eviction_priority(threshold: Threshold) -> tuple[int, int]:
    """Sort key: memory signals first (as the kubelet), then hard before soft (evictd's choice)."""
    return (0 if spec_of(threshold.signal).is_memory else 1, 0 if threshold.is_hard else 1)


def assess(
    state: EngineState,
    config: EngineConfig,
    layout: FsLayout,
    summary: Summary | None,
    pods: Sequence[Pod],
    now: float,
) -> tuple[EngineState, Assessment]:
    """Run the synchronize step up to node-level reclaim; return the new state and what to do next. `summary` None
    (stats unreadable) changes nothing (node conditions stay frozen)."""
    if not config.thresholds and not config.local_storage_capacity_isolation:
        return state, Assessment(Skipped("no thresholds configured and local storage isolation is off"))
    warnings: tuple[str, ...] = ()
    if state.layout is None:
        # The first cycle, or the first after a late runtime (its layout): remembered grace periods and conditions kept.
        derived, derive_warnings = derive_containerfs_thresholds(config.thresholds, layout)
        state = replace(state, layout=layout, thresholds=tuple(derived))
        warnings = tuple(derive_warnings)
    if summary is None:
        return state, Assessment(Skipped("stats unavailable"), node_conditions=state.node_conditions,
                                 warnings=warnings)
    after = evidence_after(state.stall_evicted_at, STALL_SETTLE_S, now)
    gate = observe_stall_gate(state.stall_gate, summary, now, enabled=config.stall_requires_node_reclaim, after=after)
    pod_memory: tuple[PodMemorySnapshot, ...] = ()
    if any(is_stall(threshold) for threshold in state.thresholds):
        pod_memory = next_snapshots(state.pod_memory, summary, now)
    observations = gated_observations(signal_observations(summary), gate)
    met = thresholds_met(state.thresholds, observations, enforce_min_reclaim=False)
    if state.thresholds_met:
        not_yet_resolved = thresholds_met(state.thresholds_met, observations, enforce_min_reclaim=True)
        met = merge_thresholds(met, not_yet_resolved)
    met, held = split_held_back(unique_as_go_map_keys(met), gate)
    first_observed_at = thresholds_first_observed_at(met, state.first_observed_at, now)
    last_observed_at = node_conditions_last_observed_at(node_conditions(met), state.condition_last_observed_at, now)
    conditions = tuple(node_conditions_observed_since(last_observed_at, config.pressure_transition_period_s, now))
    grace_met = thresholds_met_grace_period(first_observed_at, now)
    updated = thresholds_updated_stats(grace_met, observations, state.last_observations)
    # A stall threshold waiting for the last stall eviction to settle is not stale: its stats are fresh.
    settling = stall_settling(updated, state.stall_evicted_at, now)
    to_act = [threshold for threshold in updated if threshold not in settling]
    # Growth counts from the eviction itself: who grew before it is what that eviction answered.
    candidates = (stall_candidates(pod_memory, summary, state.stall_evicted_at)
                  if any(is_stall(threshold) for threshold in to_act) else None)
    new_state = replace(
        state,
        first_observed_at=first_observed_at,
        condition_last_observed_at=last_observed_at,
        node_conditions=conditions,
        thresholds_met=tuple(grace_met),
        last_observations=observations,
        stall_gate=gate,
        pod_memory=pod_memory,
    )
    statuses = tuple(
        ThresholdStatus(t, grace_met=t in grace_met, observed_for_s=now - at) for t, at in first_observed_at.items()
    )
    stale = tuple(dict.fromkeys(t.signal for t in grace_met if t not in updated and t.signal in observations))
    return new_state, Assessment(
        _next_step(config, layout_of(new_state), to_act, summary, pods, candidates),
        observations=observations,
        thresholds=statuses,
        node_conditions=conditions,
        stale_signals=stale,
        warnings=warnings,
        stall_settling=tuple(dict.fromkeys(t.signal for t in settling)),
        settle_ends_in_s=(max(0.0, STALL_SETTLE_S - (now - state.stall_evicted_at))
                          if settling and state.stall_evicted_at is not None else None),
        stall_held_back=held_back_reports(held, observations, gate, now),
        daemons_refault=gate.daemons_refault,
    )


def note_evictions(state: EngineState, evictions: Sequence[Eviction], now: float) -> EngineState:
    """Return `state` remembering that `evictions` were decided at `now`: any eviction, of any signal, starts the stall
    family's settle wait and makes the evidence read before it void (`evidence_after`)."""
    if evictions:
        return replace(state, stall_evicted_at=now)
    return state


def _next_step(
    config: EngineConfig, layout: FsLayout, to_act: Sequence[Threshold], summary: Summary, pods: Sequence[Pod],
    candidates: frozenset[str] | None = None,
) -> NextStep:
    """The end of synchronize before node-level reclaim: local-storage evictions, else the threshold to reclaim."""
    if config.local_storage_capacity_isolation:
        stats_of = pod_stats_lookup(summary, pods)
        evictions = tuple(
            _local_storage_eviction(item.pod, item.signal, item.message)
            for item in local_storage_evictions(pods, stats_of, layout)
        )
        if evictions:
            return EvictForLocalStorage(evictions)
    if not to_act:
        return NoneStarved()
    thresholds = tuple(sorted(to_act, key=_eviction_priority))
    signal = thresholds[0].signal
    return ReclaimThenEvict(
        thresholds, spec_of(signal).resource, meaning_of(layout).reclaim_actions.get(signal, ()), candidates
    )


def layout_of(state: EngineState) -> FsLayout:
    """Return the layout fixed by the first cycle (single filesystem before any cycle ran)."""
    return state.layout if state.layout is not None else FsLayout()


def reclaim_succeeded(state: EngineState, summary_after: Summary | None) -> bool:
    """Return True when, on the post-reclaim stats, no configured threshold is met with minimum reclaim (grace
    ignored, soft counted, unreadable stats fail; a stall threshold the stall gate held back is not met)."""
    if summary_after is None:
        return False
    observations = gated_observations(signal_observations(summary_after), state.stall_gate)
    return not split_held_back(thresholds_met(state.thresholds, observations, enforce_min_reclaim=True),
                               state.stall_gate)[0]


def still_met(step: ReclaimThenEvict, summary: Summary) -> bool:
    """Return whether `summary` still shows a threshold of `step` met (no minimum reclaim, no grace period): what a
    cycle that waited for pods' disk figures checks on the stats read after the wait before it ranks on them."""
    return bool(thresholds_met(step.thresholds, signal_observations(summary), enforce_min_reclaim=False))


def hard_thresholds_met(state: EngineState, config: EngineConfig, summary: Summary) -> list[Threshold]:
    """The hard thresholds `summary` shows met (no minimum reclaim, no grace period): what ends the wait after an
    eviction early (evictd's own; the kubelet waits out its 30 s)."""
    hard = [threshold for threshold in (state.thresholds or config.thresholds) if threshold.is_hard]
    met = thresholds_met(hard, gated_observations(signal_observations(summary), state.stall_gate),
                         enforce_min_reclaim=False)
    return split_held_back(met, state.stall_gate)[0]


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


def _threshold_figures(
    resource: Resource, thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation]
) -> tuple[Quantity | None, Quantity | None]:
    """Return the threshold quantity and available amount the eviction message quotes for `resource`."""
    for threshold in thresholds:
        if spec_of(threshold.signal).resource is not resource:
            continue
        observation = observations.get(threshold.signal)
        if observation is not None:
            return threshold_quantity(threshold.value, observation.capacity), observation.available
    return None, None


def choose_eviction(
    config: EngineConfig,
    layout: FsLayout,
    step: ReclaimThenEvict,
    observations: Mapping[Signal, Observation],
    pods: Sequence[Pod],
    summary: Summary,
    *,
    pods_from_node: bool = False,
    candidates: int = 1,
    terminating: Sequence[Pod] = (),
    disk_figures_waited_for: Collection[str] | None = None,
) -> EvictionChoice:
    """Rank the pods for the step's threshold and return the first non-critical one as the eviction, with up to
    `candidates - 1` next non-critical ones as `alternates`, on the pre-reclaim `observations` and `summary` as the
    kubelet ranks. `pods_from_node`: no API pod list, so only a hard threshold evicts. `terminating` (pods evictd
    evicted, still listed) are ranked for a hard threshold while `still_running`, so the pod holding what the node
    lacks goes again before any bystander. `disk_figures_waited_for` (None: nothing to wait for): a disk ranking
    lacking a pod's figures ranks nobody and names the pods to wait for (`awaiting`). A stall-family threshold acts
    only where no kubelet threshold of the step does, and ranks only the step's `stall_candidates` (none:
    `NO_STALL_CANDIDATE`)."""
    threshold, resource = step.threshold, step.resource
    if threshold.is_hard and terminating:
        running = pod_stats_lookup(summary, terminating)
        pods = (*pods, *(pod for pod in terminating if still_running(running(pod))))
    if not pods:
        return EvictionChoice(ranking=(), eviction=None)
    if pods_from_node and not threshold.is_hard:
        # The first hard threshold to act on (they are sorted) evicts instead, if there is one.
        hard = next((t for t in step.thresholds if t.is_hard), None)
        if hard is None:
            return EvictionChoice(ranking=(), eviction=None, withheld=SOFT_WITHOUT_POD_LIST)
        threshold, resource = hard, spec_of(hard.signal).resource
    if is_stall(threshold):
        # The kubelet's own thresholds decide as the kubelet's do: a stall-family one acts only where none of them does.
        kubelets = next((t for t in step.thresholds if not is_stall(t) and (t.is_hard or not pods_from_node)), None)
        if kubelets is not None:
            threshold, resource = kubelets, spec_of(kubelets.signal).resource
        elif step.stall_candidates is not None:
            allowed = step.stall_candidates
            pods = [pod for pod in pods if pod.uid in allowed]
            if not pods:
                return EvictionChoice(ranking=(), eviction=None, withheld=NO_STALL_CANDIDATE)
    stats_of = pod_stats_lookup(summary, pods)
    unmeasured = unmeasured_pods(threshold.signal, layout, pods, stats_of)
    awaiting = pods_to_wait_for(unmeasured, disk_figures_waited_for)
    if awaiting:
        return EvictionChoice(ranking=(), eviction=None, withheld=AWAITING_DISK_FIGURES, awaiting=awaiting,
                              unmeasured=unmeasured)
    ranking, keys = rank_pods_with_keys(threshold.signal, layout, pods, stats_of)
    quantity, available = _threshold_figures(resource, (threshold, *step.thresholds), observations)
    skipped: list[Pod] = []
    chosen: list[Eviction] = []
    for pod in ranking:
        if len(chosen) >= candidates:
            break
        if not is_critical_pod(pod):
            chosen.append(_threshold_eviction(config, threshold, resource, pod, stats_of(pod), quantity, available))
        elif not chosen:
            skipped.append(pod)
    return EvictionChoice(ranking=ranking, eviction=chosen[0] if chosen else None, skipped_critical=tuple(skipped),
                          ranking_signal=threshold.signal, ranking_keys=keys, alternates=tuple(chosen[1:]),
                          unmeasured=unmeasured)


def still_running(stats: PodStats | None) -> bool:
    """Whether an evicted pod's stats show it running: measured, and with processes (where they were counted)."""
    return stats is not None and (stats.process_count is None or stats.process_count > 0)


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

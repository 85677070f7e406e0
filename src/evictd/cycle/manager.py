"""The eviction manager: sequences one kubelet `synchronize` cycle over the pure engine and the adapters.

It owns the engine state between cycles and reaches the outside only through the protocols below, so the daemon,
`simulate` and the tests drive the same code. No I/O of its own, no logs: each cycle returns a `CycleReport`.
Failures are contained per KUBELET_SPEC §15 (unreadable stats freeze the state; a failed reclaim action leaves the
others; a failed eviction still counts). An unusable API pod list evicts nobody, unless `node_pods` ranks the node's
pods for hard thresholds. evictd's own additions (docs/how-a-cycle-decides.md): soft evictions through the Eviction
API in rounds off the loop (`EvictionApiRoute`; a hung API delays soft evictions only, and a pending release holds
them); escalation (pods evictd evicted, still `terminating`, ranked again for a hard threshold); confirming memory
crossings (`evictd.core.settled`); a bounded wait, once per pod, for pods' first disk figures before a disk
ranking (`DiskFigures`, `disk_figures_wait_s`); and reclaim for the daemons before any eviction step
(`DaemonsReclaimStep`; a daemons refault eviction waits for its verdict).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from evictd.clock import Clock
from evictd.core.engine import (
    Assessment,
    EngineConfig,
    EngineState,
    EvictForLocalStorage,
    Eviction,
    EvictionChoice,
    FollowUp,
    NoneStarved,
    ReclaimThenEvict,
    Skipped,
    assess,
    choose_eviction,
    hard_thresholds_met,
    layout_of,
    note_evictions,
    reclaim_succeeded,
    still_met,
)
from evictd.core.errors import EvictdError
from evictd.core.eviction_api import EvictionApiRound
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.memory_reclaim import answered, reclaimable
from evictd.core.pods import Pod
from evictd.core.settled import (
    SETTLING_READ_EVERY_S,
    confirming_reads,
    crossing_confirmed,
    crossing_deep,
    crossing_hold_s,
    crossing_unsettled,
    crossings_to_confirm,
    memory_thresholds_met,
    runtime_wait_s,
    settling_reads,
    with_node_memory,
)
from evictd.core.signals import Signal, spec_of
from evictd.core.summary import Observation, Summary, signal_observations
from evictd.core.thresholds import Threshold
from evictd.cycle.daemons_reclaim import DaemonsReclaimStep
from evictd.cycle.eviction_api_route import EvictionApiRoute, eviction_api_bypassed, is_soft, request_round
from evictd.cycle.reclaim_first import MemoryReclaimStep
from evictd.cycle.report import (
    Acted,
    CycleError,
    CycleReport,
    CycleStep,
    Decided,
    EvictionApiRefusal,
    EvictionApiUse,
    Observed,
    PodListProblem,
    PodRanking,
    ReclaimResult,
)

# The state of an engine that remembers nothing: what a manager without a restored state starts from.
FRESH_STATE = EngineState()
# A disk ranking's wait for new pods' first figures (a walker round takes ms to ~0.7 s; short next to the tick).
DISK_FIGURES_WAIT_S = 2.0
# Why a daemons refault eviction waits: the reclaim for the daemons it would follow has not been judged yet.
DAEMONS_VERDICT_AWAITED = "a reclaim for the daemons awaits its verdict: their refault eviction waits for it"
# Why nobody was evicted after the wait for disk figures: the threshold no longer met on the stats read after it.
PRESSURE_GONE_WHILE_WAITING = "the threshold was no longer met after the wait for pods' disk figures"


class StatsSource(Protocol):
    """Produces a fresh kubelet-style Summary of the node with the stats of `pods`; raises EvictdError when it
    cannot. `reread`: a re-read within the cycle, which may reuse what a slow party (the runtime) answered at the
    first read, never a node figure. `runtime_wait_s`: wait at most this long for figures a memory ranking does not
    need (None: the source's own deadline). `memory_reading`: how to read the node's memory alone (None: nothing
    cheaper than `summary`), used for a crossing's confirming readings."""

    def summary(self, pods: Sequence[Pod], *, reread: bool = False, runtime_wait_s: float | None = None) -> Summary:
        ...

    def memory_reading(self) -> Callable[[], Summary] | None: ...


class LayoutSource(Protocol):
    """Tells how the node's filesystems are laid out (raises EvictdError when it cannot)."""

    def layout(self) -> FsLayout: ...


class PodSource(Protocol):
    """Lists the node's active pods (the kubelet's podFunc)."""

    def active_pods(self) -> Sequence[Pod]: ...


class NodeReclaimer(Protocol):
    """Frees resources at node level; returns the bytes freed (raises EvictdError on failure)."""

    def reclaim(self, action: ReclaimAction) -> int: ...


class DiskFigures(Protocol):
    """Waits for the first disk figures of pods (the disk walker's, `evictd.adapters.pod_disk_usage`)."""

    def wait_for_disk_figures(self, pods: Sequence[Pod], timeout_s: float) -> None:
        """Return once every pod of `pods` has disk figures, or after `timeout_s` seconds."""
        ...


class PodEvictor(Protocol):
    """Evicts one pod as decided, or follows up the earlier eviction of a pod ranked first again while it still runs
    (never a second eviction: `FollowUp`); each raises EvictdError on failure."""

    def evict(self, eviction: Eviction) -> None: ...

    def follow_up(self, eviction: Eviction) -> FollowUp: ...


class EvictionManager:
    def __init__(self, config: EngineConfig, *, stats: StatsSource, layout: LayoutSource, pods: PodSource,
                 reclaimer: NodeReclaimer, evictor: PodEvictor, clock: Clock, node_pods: PodSource | None = None,
                 state: EngineState = FRESH_STATE, layout_changes: Callable[[], int] = lambda: 0,
                 eviction_api: EvictionApiRoute | None = None, crossing_hold_s: float = 0.0,
                 terminating: PodSource | None = None, disk_figures: DiskFigures | None = None,
                 disk_figures_wait_s: float = DISK_FIGURES_WAIT_S,
                 memory_reclaim: MemoryReclaimStep | None = None,
                 daemons_reclaim: DaemonsReclaimStep | None = None) -> None:
        self.config = config
        self._memory_reclaim = memory_reclaim  # reclaim before evict (evictd's own, off: None)
        self._daemons_reclaim = daemons_reclaim  # reclaim for the daemons (evictd's own, off: None)
        # Where to wait for pods' first disk figures (None: nothing to wait for), how long, the uids waited for.
        self._disk_figures = disk_figures
        self._disk_figures_wait_s = disk_figures_wait_s
        self._disk_figures_waited_for: frozenset[str] = frozenset()
        # The pods the last cycle measured: `hard_threshold_met` measures them too, so their disk figures are kept.
        self._last_measured: tuple[Pod, ...] = ()
        # Pods evictd evicted with a longer grace than a hard threshold's, still terminating (None: no API).
        self._terminating = terminating
        # How long a newly met memory threshold waits for a confirming reading (0: none, as the kubelet).
        self._crossing_hold_s = crossing_hold_s
        self._holds_while_flapping = 0  # how many confirmations waited a varied hold
        # The state restored from the last run (grace periods, pressure history), or a fresh one.
        self.state = state
        # Changes of `layout` and `reclaimer` (a late runtime): the next cycle detects the layout again (`NodeLevel`).
        self._layout_changes = layout_changes
        self._layout_changes_seen = layout_changes()
        self._stats = stats
        self._layout = layout
        self._pods = pods
        self._node_pods = node_pods
        self._reclaimer = reclaimer
        self._evictor = evictor
        self._eviction_api = eviction_api
        self._clock = clock

    def synchronize(self, *, flapping: bool = False) -> CycleReport:
        """Run one cycle: observe, decide, reclaim at node level, and evict at most one pod (or start an Eviction API
        round); report a round that ended since the last cycle. `flapping`: confirmations wait a varied hold."""
        ended = self._eviction_api.evictor.finished() if self._eviction_api is not None else None
        report = self._synchronize(api_evicted=ended is not None and ended.evicted is not None, flapping=flapping)
        return report if ended is None else self._with_round(report, ended)

    def _with_round(self, report: CycleReport, ended: EvictionApiRound) -> CycleReport:
        """`report` with the round that ended: its eviction counted (engine state too), refusals and failure told."""
        acted = report.acted
        use = acted.eviction_api if acted.eviction_api is not None else EvictionApiUse()
        use = replace(use, refusals=tuple(EvictionApiRefusal.of(refusal) for refusal in ended.refusals),
                      evicted=None if ended.evicted is None else ended.evicted.pod.key, failure=ended.failure)
        evictions = acted.evictions
        if ended.evicted is not None:
            self.state = note_evictions(self.state, (ended.evicted,), report.now)
            evictions = (ended.evicted, *evictions)
        return replace(report, acted=replace(acted, evictions=evictions, eviction_api=use))

    def _synchronize(self, api_evicted: bool, flapping: bool) -> CycleReport:
        now = self._clock.monotonic()
        errors: list[CycleError] = []
        changes = self._layout_changes()
        if changes != self._layout_changes_seen:
            self._layout_changes_seen = changes
            self.state = replace(self.state, layout=None)
        layout = self.state.layout
        if layout is None:
            try:
                layout = self._layout.layout()
            except EvictdError as exc:
                reason = f"eviction manager: failed to get HasDedicatedImageFs: {exc}"
                return CycleReport(now=now, observed=Observed(), decided=Decided(Assessment(Skipped(reason))),
                                   errors=(CycleError(CycleStep.LAYOUT, reason),))
        pods, problem = self._list_pods()
        if problem is not None and not problem.pods_from_node:
            errors.append(CycleError(
                CycleStep.PODS, f"eviction manager: pods unavailable, no pod will be evicted: {problem.reason}"))
        terminating = self._terminating_pods() if problem is None else ()
        summary: Summary | None = None
        self._last_measured = (*pods, *terminating)
        try:
            # The stats of the pods just listed, wherever they came from (and of those evictd may escalate).
            summary = self._stats.summary(self._last_measured, runtime_wait_s=self._runtime_wait_s())
        except EvictdError as exc:
            errors.append(CycleError(CycleStep.STATS, f"eviction manager: failed to get summary stats: {exc}"))
        crossed: tuple[Threshold, ...] = ()
        confirmed_after_s: float | None = None
        unaccounted = False
        if summary is not None and self._crossing_hold_s > 0:
            crossed = crossings_to_confirm(self.state.thresholds or self.config.thresholds,
                                           (*self.state.first_observed_at, *self.state.thresholds_met), summary)
            if crossed:
                unaccounted = crossing_unsettled(crossed, summary)
                summary, now, confirmed_after_s = self._confirming_summary((*pods, *terminating), crossed, errors,
                                                                           flapping)
        self.state, assessment = assess(self.state, self.config, layout, summary, pods, now)
        observed = Observed(summary=summary, pods=pods, pod_list_problem=problem,
                            crossed=tuple(dict.fromkeys(t.signal for t in crossed)),
                            crossing_confirmed=crossing_confirmed(crossed, summary), crossing_unaccounted=unaccounted,
                            confirmed_after_s=confirmed_after_s)
        seen = CycleReport(now=now, observed=observed, decided=Decided(assessment), errors=tuple(errors))
        if summary is None:  # assess skipped the cycle (stats unavailable)
            return seen
        if self._daemons_reclaim is not None:  # before any eviction, whatever the thresholds
            seen = replace(seen, daemons_reclaim=self._daemons_reclaim.run(
                self.state.stall_gate.daemons_refault, now,
                memory_reclaim_acts=self._memory_reclaim_acts(assessment.next_step)))
        match assessment.next_step:
            case Skipped() | NoneStarved():
                return seen
            case EvictForLocalStorage(evictions=evictions):
                failures = self._evict(evictions)
                return replace(seen, acted=Acted(evictions=tuple(evictions)), errors=(*seen.errors, *failures))
            case ReclaimThenEvict() as step if self._awaits_daemons_verdict(step):
                return replace(seen, decided=replace(seen.decided, withheld=DAEMONS_VERDICT_AWAITED))
            case ReclaimThenEvict() as step:
                return self._reclaim_then_evict(seen, step, summary, api_evicted, terminating)

    def _memory_reclaim_acts(self, step: object) -> bool:
        """Whether reclaim before evict will reclaim this cycle: on, and `step` evicts for a signal that counts page
        cache."""
        return (self._memory_reclaim is not None and isinstance(step, ReclaimThenEvict)
                and bool(reclaimable(answered(step.thresholds))))

    def _awaits_daemons_verdict(self, step: ReclaimThenEvict) -> bool:
        """Whether a daemons refault eviction waits: a reclaim for the daemons awaits its verdict (one cycle or two:
        a failed one backs off, and the eviction then goes ahead)."""
        return (self._daemons_reclaim is not None and self._daemons_reclaim.awaiting_verdict
                and step.threshold.signal is Signal.DAEMONS_REFAULT)

    def _terminating_pods(self) -> tuple[Pod, ...]:
        """The pods evictd may escalate (none when they cannot be listed: escalation is a bonus, not a duty)."""
        if self._terminating is None:
            return ()
        try:
            return tuple(self._terminating.active_pods())
        except EvictdError:
            return ()

    def hard_threshold_met(self) -> bool:
        """Whether a fresh reading shows a hard threshold met (False when unreadable): what ends the wait after an
        eviction early. It measures the last cycle's pods, so their disk figures are kept."""
        try:
            summary = self._stats.summary(self._last_measured, reread=True)
        except EvictdError:
            return False
        return bool(hard_thresholds_met(self.state, self.config, summary))

    def _runtime_wait_s(self) -> float | None:
        """How long the full reading waits for the runtime (`runtime_wait_s`), from the memory thresholds the node's
        memory alone shows met now, soft ones too (the hard one may follow within milliseconds). None where the source
        has no memory-only reading or it cannot be read."""
        read = self._stats.memory_reading()
        if read is None:
            return None
        memory = self._read_memory_again(read)
        if memory is None:
            return None
        return runtime_wait_s(memory_thresholds_met(self.state.thresholds or self.config.thresholds, memory))

    def _confirming_summary(self, pods: Sequence[Pod], crossed: Sequence[Threshold], errors: list[CycleError],
                            flapping: bool) -> tuple[Summary | None, float, float]:
        """Read the stats again to confirm `crossed`: the reading the cycle decides on, its time and its delay after
        the first (a failed read is a cycle error). Readings at `confirming_reads`' times; the first with the
        crossing gone deep or gone is it, else the hold's end, or while the crossing is met only on usage the
        statistics do not account for yet, the first of `settling_reads` that is not (the last: as it reads)."""
        hold_s = crossing_hold_s(self._crossing_hold_s, flapping=flapping, count=self._holds_while_flapping)
        if flapping:
            self._holds_while_flapping += 1
        start = self._clock.monotonic()
        # While the memory flaps the confirmation keeps its two full readings, as before (evictd.core.settled).
        read_memory = None if flapping else self._memory_reading(crossed)
        summary: Summary | None = None
        reading: Summary | None = None
        settling = settling_reads(hold_s, None if read_memory is None else SETTLING_READ_EVERY_S)
        for at in (*confirming_reads(hold_s, flapping=flapping), *settling):
            self._clock.sleep(max(0.0, at - (self._clock.monotonic() - start)))
            if read_memory is not None:
                reading = self._read_memory_again(read_memory)
                confirming = reading
            else:
                confirming = summary = self._read_again(pods, errors, "to confirm a crossing", reread=True)
            if confirming is None or not crossing_confirmed(crossed, confirming) or crossing_deep(crossed, confirming):
                break
            if at >= hold_s and not crossing_unsettled(crossed, confirming):
                break
        if read_memory is not None:  # the decision's reading, the node's memory as the confirmation judged it
            summary = self._read_again(pods, errors, "to confirm a crossing", reread=True)
            if summary is not None and reading is not None:
                summary = with_node_memory(summary, reading)
        now = self._clock.monotonic()
        return summary, now, now - start

    def _memory_reading(self, crossed: Sequence[Threshold]) -> Callable[[], Summary] | None:
        """How to read the node's memory alone to confirm `crossed`; None without one or for a non-memcg threshold."""
        if not all(spec_of(t.signal).memcg_watched for t in crossed):
            return None
        return self._stats.memory_reading()

    @staticmethod
    def _read_memory_again(read: Callable[[], Summary]) -> Summary | None:
        """A reading of the node's memory alone; None when unreadable (the cycle's full reading then confirms)."""
        try:
            return read()
        except EvictdError:
            return None

    def _read_again(self, pods: Sequence[Pod], errors: list[CycleError], why: str, *,
                    reread: bool = False) -> Summary | None:
        """The stats read again (`why`; `reread` as StatsSource takes it); None when unreadable (error added)."""
        try:
            return self._stats.summary(pods, reread=reread)
        except EvictdError as exc:
            errors.append(CycleError(CycleStep.STATS, f"eviction manager: failed to get summary stats {why}: {exc}"))
            return None

    def _reclaim_then_evict(self, seen: CycleReport, step: ReclaimThenEvict, summary: Summary,
                            api_evicted: bool, terminating: Sequence[Pod] = ()) -> CycleReport:
        """Run the step's node-level reclaim; unless it resolved the pressure, evict the first ranked pod (a soft one
        through an Eviction API round, unless one is under way or just evicted a pod this cycle waits for)."""
        errors = list(seen.errors)
        observed = seen.observed
        reclaim = tuple(self._reclaim(action) for action in step.actions)
        memory, after, succeeded = None, None, None
        if self._memory_reclaim is not None and spec_of(step.threshold.signal).is_memory:  # reclaim before evict
            memory, after, succeeded = self._memory_reclaim.run(
                answered(step.thresholds), seen.decided.assessment.observations, summary, seen.now,
                lambda: self._read_again(observed.pods, errors, "after resource reclaim"))
        reclaim = (*reclaim, memory.result) if memory is not None and memory.result is not None else reclaim
        if step.actions:
            after = self._read_again(observed.pods, errors, "after resource reclaim")
            succeeded = reclaim_succeeded(self.state, after)
        if succeeded:
            return replace(seen, acted=Acted(reclaim=reclaim, reclaim_succeeded=True, after_reclaim=after,
                                             memory_reclaim=memory), errors=tuple(errors))
        route = self._eviction_api if self._eviction_api is not None and self._eviction_api.active() else None
        assessment = seen.decided.assessment

        def choose(observations: Mapping[Signal, Observation], stats: Summary) -> EvictionChoice:
            return choose_eviction(self.config, layout_of(self.state), step, observations, observed.pods, stats,
                                   pods_from_node=observed.pods_from_node,
                                   candidates=route.max_candidates if route is not None else 1,
                                   terminating=terminating, disk_figures_waited_for=self._waited_for(observed.pods,
                                                                                                     terminating))

        choice = choose(assessment.observations, summary)
        awaited: tuple[Pod, ...] = ()
        waited: Summary | None = None
        if choice.awaiting and self._disk_figures is not None:
            awaited = choice.awaiting
            waited = self._wait_for_disk_figures(awaited, (*observed.pods, *terminating), errors)
            if waited is None or not still_met(step, waited):
                decided = replace(seen.decided, awaited_disk_figures=awaited, unmeasured=choice.unmeasured,
                                  withheld=None if waited is None else PRESSURE_GONE_WHILE_WAITING)
                return replace(seen, decided=decided, acted=Acted(reclaim=reclaim, reclaim_succeeded=succeeded,
                                                                  after_reclaim=after, after_disk_wait=waited),
                               errors=tuple(errors))
            choice = choose(signal_observations(waited), waited)  # ranked on the figures the wait brought
        bypassed = None
        through_api = False
        pending = None
        if route is not None and choice.eviction is not None and is_soft(choice.eviction):
            bypassed = eviction_api_bypassed(route, assessment, choice.eviction)
            through_api = bypassed is None
            if not any(status.threshold.is_hard for status in assessment.thresholds):
                pending = route.pending_release()
        eviction_api: EvictionApiUse | None
        evicted: tuple[Eviction, ...] = ()
        follow_ups: tuple[FollowUp, ...] = ()
        failures: tuple[CycleError, ...] = ()
        if pending is not None:
            eviction_api = EvictionApiUse(pending_release=pending)
        elif through_api and route is not None and choice.eviction is not None:
            eviction_api = request_round(route.evictor, (choice.eviction, *choice.alternates), api_evicted)
        elif choice.eviction is not None and choice.eviction.pod.uid in {pod.uid for pod in terminating}:
            follow_ups, failures = self._follow_up(choice.eviction)
            eviction_api = None
        else:
            evicted = (choice.eviction,) if choice.eviction else ()
            failures = self._evict(evicted)
            eviction_api = None if bypassed is None else EvictionApiUse(bypassed=bypassed)
        self.state = note_evictions(self.state, evicted, seen.now)
        ranking = (None if choice.ranking_signal is None
                   else PodRanking(signal=choice.ranking_signal, pods=choice.ranking, keys=choice.ranking_keys))
        decided = replace(seen.decided, ranking=ranking, skipped_critical=choice.skipped_critical,
                          withheld=choice.withheld, awaited_disk_figures=awaited, unmeasured=choice.unmeasured)
        acted = Acted(reclaim=reclaim, reclaim_succeeded=succeeded, after_reclaim=after, evictions=evicted,
                      eviction_api=eviction_api, after_disk_wait=waited, memory_reclaim=memory, follow_ups=follow_ups)
        return replace(seen, decided=decided, acted=acted, errors=(*errors, *failures))

    def _waited_for(self, pods: Sequence[Pod], terminating: Sequence[Pod]) -> frozenset[str] | None:
        """The uids of the pods listed now whose disk figures were already waited for (None: nothing to wait with)."""
        if self._disk_figures is None:
            return None
        listed = {pod.uid for pod in (*pods, *terminating)}
        self._disk_figures_waited_for = self._disk_figures_waited_for & listed
        return self._disk_figures_waited_for

    def _wait_for_disk_figures(self, awaited: Sequence[Pod], pods: Sequence[Pod],
                               errors: list[CycleError]) -> Summary | None:
        """Wait up to `disk_figures_wait_s` for the disk figures of `awaited` (each pod once), then read `pods` again:
        the Summary to rank on (None when unreadable: a cycle error, nobody evicted)."""
        assert self._disk_figures is not None
        self._disk_figures_waited_for = self._disk_figures_waited_for | {pod.uid for pod in awaited}
        self._disk_figures.wait_for_disk_figures(awaited, self._disk_figures_wait_s)
        try:
            return self._stats.summary(pods)
        except EvictdError as exc:
            errors.append(CycleError(CycleStep.STATS,
                                     f"eviction manager: failed to get summary stats after waiting for disk figures: "
                                     f"{exc}"))
            return None

    def _list_pods(self) -> tuple[tuple[Pod, ...], PodListProblem | None]:
        """Return the pods, and why the API's list is unusable (None: it is not) with whether they are the node's.
        A list known to be wrong is never acted on: without `node_pods` the cycle observes but evicts nobody."""
        try:
            return tuple(self._pods.active_pods()), None
        except EvictdError as exc:
            problem = str(exc)
        if self._node_pods is None:
            return (), PodListProblem(problem)
        try:
            return tuple(self._node_pods.active_pods()), PodListProblem(problem, pods_from_node=True)
        except EvictdError as exc:
            return (), PodListProblem(f"{problem}; the node's pods cannot be used either: {exc}")

    def _reclaim(self, action: ReclaimAction) -> ReclaimResult:
        try:
            return ReclaimResult(action=action, freed_bytes=self._reclaimer.reclaim(action))
        except EvictdError as exc:
            return ReclaimResult(action=action, error=str(exc))

    def _evict(self, evictions: Sequence[Eviction]) -> tuple[CycleError, ...]:
        """Evict each pod; return the failures (each eviction still counts, as in the kubelet)."""
        failures: list[CycleError] = []
        for eviction in evictions:
            try:
                self._evictor.evict(eviction)
            except EvictdError as exc:
                failures.append(_eviction_failure(eviction, exc))
        return tuple(failures)


    def _follow_up(self, eviction: Eviction) -> tuple[tuple[FollowUp, ...], tuple[CycleError, ...]]:
        """Follow up the earlier eviction of `eviction`'s pod (not a second eviction); the follow-up or its failure."""
        try:
            return (self._evictor.follow_up(eviction),), ()
        except EvictdError as exc:
            return (), (_eviction_failure(eviction, exc),)


def _eviction_failure(eviction: Eviction, error: EvictdError) -> CycleError:
    """The failure of `eviction`, as a cycle reports it (the kubelet's text: the pod, then what went wrong)."""
    return CycleError(CycleStep.EVICTION, f"{eviction.pod.key}: {error}", pod=eviction.pod.key)

"""Turning cycle reports into log events that say which signal, which threshold, which pod and why.

Quiet when nothing changes: node conditions are logged when they change, thresholds when they start or stop
being met, and every reclaim, eviction, OOM kill and error as it happens. Values are formatted as the kubelet formats
them (Kubernetes quantities), so log lines can be compared with kubelet events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evictd.core.daemons_reclaim import TRIGGER_BASIS_POINTS as DAEMONS_TRIGGER_BASIS_POINTS
from evictd.core.engine import Eviction, FollowUp, Skipped, ThresholdStatus
from evictd.core.engine_rules import STALL_SETTLE_S
from evictd.core.oom import TOO_LATE_ACTIVITIES, Activity, OomReport, outside_pods, situation, wall_time_text
from evictd.core.signals import Signal, spec_of
from evictd.core.stall_gate import STALL_RECLAIM_WINDOW_S, HeldBack
from evictd.core.thresholds import Threshold, threshold_quantity
from evictd.cycle.ids import decision_id
from evictd.cycle.render import describe_threshold
from evictd.cycle.report import Acted, CycleReport, CycleStep, DaemonsReclaimUse
from evictd.log import Log

# The log line of an evicted pod ranked first again while it runs (`FollowUp`): never a second "evicting pod".
FOLLOW_UP_EVENT = "evicted pod ranked first again while it runs: followed up, not evicted again"


@dataclass(frozen=True, slots=True)
class WakeUp:
    """What woke the loop for a cycle (`evictd_wakeups_total` causes, e.g. ``memcg``, ``timer``) and how long from
    that wake-up to the end of the cycle, its decision: logged with "threshold met", so that a line says how fast
    it was decided, and a slow one whether the wait was evictd's or the kernel's."""

    causes: tuple[str, ...]
    decided_after_s: float


class CycleLogger:
    """Remembers the previous cycle so that only changes are logged."""

    def __init__(self, log: Log, dry_run: bool | Callable[[], bool], run: str | None = None) -> None:
        self._log = log
        self._dry_run = dry_run
        self._run = run  # the flight recorder's name of this run: evictions log their decision id
        self._conditions: tuple[str, ...] = ()
        self._met: frozenset[Threshold] = frozenset()
        self._warned: set[str] = set()
        self._pods_from_node = False
        self._withheld: str | None = None
        self._held_back: frozenset[Threshold] = frozenset()  # stall thresholds the stall gate holds back
        # Whether the last cycle's reclaim for the daemons skipped while triggered, backing off or not (None: it
        # did not skip while triggered): a skip is logged when that changes.
        self._daemons_skip: bool | None = None

    def _dry_run_now(self) -> bool:
        """Whether this cycle's evictions are reported only (a function is asked: the node's mode may change)."""
        return self._dry_run() if callable(self._dry_run) else self._dry_run

    def log_cycle(self, number: int, report: CycleReport, wake: WakeUp | None = None) -> None:
        assessment, decided, acted = report.decided.assessment, report.decided, report.acted
        for warning in assessment.warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                self._log.warning("configuration warning", detail=warning)
        for error in report.errors:
            if error.step is not CycleStep.EVICTION:  # logged with the evictions, below
                self._log.error("cycle error", cycle=number, error=error.description)
        self._pod_list(number, report)
        if report.oom is not None and report.oom.has_kills:
            self._oom_kills(number, report.oom)
        self._daemons_reclaim(number, report.daemons_reclaim)
        if isinstance(assessment.next_step, Skipped):
            return
        conditions = tuple(str(c) for c in assessment.node_conditions)
        if conditions != self._conditions:
            self._log.info("node conditions changed", cycle=number, conditions=list(conditions),
                           previous=list(self._conditions))
            self._conditions = conditions
        met = frozenset(status.threshold for status in assessment.thresholds)
        for status in assessment.thresholds:
            if status.threshold not in self._met:
                self._threshold_met(number, status, report, wake)
        for threshold in self._met - met:
            self._log.info("threshold no longer met", cycle=number, threshold=describe_threshold(threshold))
        self._met = met
        if assessment.stale_signals:
            self._log.info("stats not updated since last cycle; not acting on them", cycle=number,
                           signals=[str(s) for s in assessment.stale_signals])
        self._stall_held_back(number, assessment.stall_held_back)
        if assessment.stall_settling:
            self._log.info("a stall eviction waits for the last one to settle", cycle=number,
                           signals=[str(s) for s in assessment.stall_settling], settle_s=STALL_SETTLE_S)
        for result in acted.reclaim:
            if result.error:
                self._log.error("node-level reclaim failed", cycle=number, action=str(result.action),
                                error=result.error)
            else:
                self._log.info("node-level reclaim", cycle=number, action=str(result.action),
                               freed_bytes=result.freed_bytes)
        if acted.reclaim_succeeded:
            self._log.info("node-level reclaim resolved the pressure; no pod evicted", cycle=number)
        self._memory_reclaim(number, acted)
        if decided.awaited_disk_figures:
            self._log.info("waited for pods' disk figures before ranking for disk", cycle=number,
                           pods=[p.key for p in decided.awaited_disk_figures])
        if decided.unmeasured:
            self._log.warning("ranked for disk with pods the disk walker has not measured yet (counted as using none)",
                              cycle=number, pods=[p.key for p in decided.unmeasured])
        for pod in decided.skipped_critical:
            self._log.info("cannot evict a critical pod", cycle=number, pod=pod.key)
        self._eviction_api(number, report)
        for eviction in acted.evictions:
            self._eviction(number, eviction, report)
        for follow_up in acted.follow_ups:
            self._follow_up(number, follow_up, report)
        for failure in report.errors_of(CycleStep.EVICTION):
            self._log.error("eviction failed (still counted, as the kubelet counts it)", cycle=number,
                            error=failure.description)
        api = acted.eviction_api
        if (decided.ranked_pods and not acted.evictions and not acted.follow_ups and not acted.refusals
                and (api is None or not (api.asked or api.waiting or api.failure or api.pending_release))):
            self._log.warning("unable to evict any pods from the node", cycle=number,
                              ranking=[p.key for p in decided.ranked_pods])

    def _daemons_reclaim(self, number: int, use: DaemonsReclaimUse | None) -> None:
        """Reclaim for the daemons (evictd's own): each attempt once, with what it asked, how much usage fell and the
        daemons' figure before; each verdict; a skip while the daemons re-read over the trigger, when it starts or its
        kind (backing off or not) changes."""
        if use is None:
            return
        if use.verdict is not None:
            attempt = use.verdict.attempt
            self._log.info("reclaim for the daemons judged", cycle=number, helped=use.verdict.helped,
                           daemons_refault_before=f"{attempt.figure_before_bp / 100:.2f}%",
                           daemons_refault_after=f"{use.verdict.figure_after_bp / 100:.2f}%",
                           outcome="helped" if use.verdict.helped else "did not help: backing off")
        triggered_skip = (use.skipped is not None and use.figure_bp is not None
                          and use.figure_bp >= DAEMONS_TRIGGER_BASIS_POINTS)
        if use.attempted:
            say = self._log.error if use.error is not None else self._log.info
            say("reclaim for the daemons", cycle=number, daemons_refault=f"{(use.figure_bp or 0) / 100:.2f}%",
                asked_bytes=use.asked_bytes, usage_fell_bytes=use.freed_bytes,
                elapsed_ms=round(use.elapsed_s * 1000, 1), stopped=use.stopped, targets=list(use.targets),
                **({"error": use.error} if use.error is not None else {}))
        elif triggered_skip and self._daemons_skip != use.backing_off:
            self._log.info("reclaim for the daemons skipped", cycle=number,
                           daemons_refault=f"{(use.figure_bp or 0) / 100:.2f}%", reason=use.skipped)
        self._daemons_skip = use.backing_off if triggered_skip else None

    def _memory_reclaim(self, number: int, acted: Acted) -> None:
        """Reclaim before evict (evictd's own): what it asked and freed, and whether the eviction was still needed."""
        use = acted.memory_reclaim
        if use is None:
            return
        if use.skipped is not None:
            self._log.info("memory reclaim before eviction skipped", cycle=number, signal=use.signal,
                           reason=use.skipped)
            return
        result = use.result
        if result is None or result.error is not None:
            return  # logged with the node-level reclaim above ("node-level reclaim failed")
        freed_mib = result.freed_bytes / (1 << 20)
        verdict = "no eviction needed" if acted.reclaim_succeeded else "eviction still needed"
        self._log.info("memory reclaim before eviction", cycle=number, signal=use.signal,
                       outcome=f"reclaimed {freed_mib:.0f} MiB, {verdict}",
                       needed_bytes=use.needed_bytes, freed_bytes=result.freed_bytes,
                       elapsed_ms=round(use.elapsed_s * 1000, 1), stopped=use.stopped, rounds=use.rounds,
                       still_needed_bytes=use.still_needed_bytes,
                       eviction_avoided=bool(acted.reclaim_succeeded))

    def _stall_held_back(self, number: int, held: tuple[HeldBack, ...]) -> None:
        """Log a stall threshold the stall gate holds back once per episode: when it starts being held back."""
        for item in held:
            if item.threshold not in self._held_back:
                ago = item.global_reclaim_s_ago
                share: dict[str, Any] = ({"stalled_percent": item.share_percent}
                                         if spec_of(item.threshold.signal).stall is not None else
                                         {"refaulted_percent": item.share_percent,
                                          "activated_percent": item.activated_percent})
                self._log.info("stall threshold held back: no node-wide reclaim", cycle=number,
                               threshold=describe_threshold(item.threshold), **share,
                               global_scan_pages=item.global_scan_pages,
                               global_reclaim_s_ago=None if ago is None else round(ago, 1),
                               window_s=STALL_RECLAIM_WINDOW_S, **_shortage_fields(item))
        self._held_back = frozenset(item.threshold for item in held)

    def _pod_list(self, number: int, report: CycleReport) -> None:
        """Log when the pods ranked become the node's (no pod list from the API) and when they stop being."""
        problem, from_node, withheld = (report.observed.pod_list_problem, report.observed.pods_from_node,
                                        report.decided.withheld)
        if problem is not None and from_node and not self._pods_from_node:
            self._log.warning("no pod list from the Kubernetes API: hard thresholds act on the pods the node shows",
                              cycle=number, detail=problem.reason)
        elif self._pods_from_node and problem is None:
            self._log.info("pod list from the Kubernetes API in use again", cycle=number)
        self._pods_from_node = from_node or (self._pods_from_node and problem is not None)
        if withheld != self._withheld and withheld is not None:
            self._log.warning("threshold not acted on", cycle=number, reason=withheld)
        self._withheld = withheld

    def _oom_kills(self, number: int, oom: OomReport) -> None:
        """One line per pod and container named, one for kills in no pod still present, one outside pods; before
        them, for the kills while evictd was not running, one line with their number and since when."""
        common: dict[str, Any] = {"cycle": number, "activity": str(oom.activity), "situation": situation(oom),
                                  "too_late": oom.activity in TOO_LATE_ACTIVITIES}
        if oom.activity is Activity.NOT_RUNNING:
            since = {} if oom.since_wall is None else {"since": wall_time_text(oom.since_wall)}
            self._log.warning("OOM kills while evictd was not running", kills=oom.kills, node_kills=oom.node_kills,
                              pods_kills=oom.pods_kills, pod_kills=oom.attributed_kills, **since, cycle=number)
        for kill in oom.pod_kills:
            fields: dict[str, Any] = {"pod": kill.pod_key, "pod_uid": kill.pod_uid, "container": kill.container_name,
                                      "container_id": kill.container_id, "cgroup": kill.cgroup, "kills": kill.kills}
            if kill.group_kills:
                fields["group_kills"] = kill.group_kills
            self._log.warning("OOM kill", **fields, **common)
        if oom.unattributed_pods_kills:
            self._log.warning("OOM kill in the pods cgroup, in no pod cgroup still present",
                              kills=oom.unattributed_pods_kills, **common)
        if oom.outside_pods_kills:
            self._log.warning(f"OOM kill {outside_pods(oom)}", kills=oom.outside_pods_kills, **common)

    def _threshold_met(self, number: int, status: ThresholdStatus, report: CycleReport, wake: WakeUp | None) -> None:
        observation = report.decided.assessment.observations.get(status.threshold.signal)
        fields: dict[str, Any] = {"cycle": number, "threshold": describe_threshold(status.threshold)}
        if observation is not None:
            fields["available"] = str(observation.available)
            fields["threshold_quantity"] = str(threshold_quantity(status.threshold.value, observation.capacity))
        figure = report.decided.assessment.daemons_refault
        if status.threshold.signal is Signal.DAEMONS_REFAULT and figure is not None:
            # the daemons' memory the kernel took below their memory.low in the window (core.daemon_refault), and
            # their protected page cache MemAvailable no longer covers (core.daemon_refault.uncovered_bytes)
            for name, counted in (("daemons_reclaimed_below_low_mib", figure.lost_bytes),
                                  ("daemons_protection_uncovered_mib", figure.uncovered_bytes)):
                if counted:
                    fields[name] = round(counted / (1 << 20), 1)
        if wake is not None:
            fields["woken_by"] = list(wake.causes)
            fields["decided_after_ms"] = round(wake.decided_after_s * 1000, 1)
        confirmed_after_s = report.observed.confirmed_after_s
        if confirmed_after_s is not None and status.threshold.signal in report.observed.crossed:
            # of that, the wait for the reading that confirmed the crossing (evictd.core.settled)
            fields["confirmed_after_ms"] = round(confirmed_after_s * 1000, 1)
        self._log.warning("threshold met", **fields)

    def _eviction_api(self, number: int, report: CycleReport) -> None:
        """Log an Eviction API round started, and when one ended: each refusal, all refused, no usable answer; and a
        soft eviction that went the kubelet's way after all."""
        use = report.acted.eviction_api
        if use is None:
            return
        if use.asked:
            self._log.info("asking the Eviction API to evict a pod, off the loop", cycle=number,
                           candidates=list(use.asked))
        for refusal in use.refusals:
            self._log.warning("Eviction API refused to evict pod; trying the next candidate", cycle=number,
                              pod=refusal.pod, budget=refusal.budget or None, reason=refusal.reason,
                              status=refusal.status, message=refusal.message)
        if use.failure is not None:
            self._log.warning("Eviction API request without an answer: no pod evicted, the pod stays a candidate",
                              cycle=number, error=use.failure)
        elif use.refusals and use.evicted is None:
            self._log.warning("Eviction API refused every candidate; no pod evicted", cycle=number,
                              refused=[refusal.pod for refusal in use.refusals])
        if use.pending_release is not None:
            self._log.info("soft eviction held: a pod the Eviction API accepted is still releasing in the background",
                           cycle=number, pod=use.pending_release)
        if use.bypassed is not None:
            self._log.warning("soft eviction not through the Eviction API: evicting as the kubelet does",
                              cycle=number, reason=use.bypassed)

    def _eviction(self, number: int, eviction: Eviction, report: CycleReport) -> None:
        fields: dict[str, Any] = {
            "cycle": number,
            "pod": eviction.pod.key,
            "signal": eviction.signal,
            "grace_period_seconds": eviction.effective_grace_period_s,
            "message": eviction.message,
            "dry_run": self._dry_run_now(),
        }
        if self._run is not None:
            fields["decision"] = decision_id(self._run, number)
        if eviction.threshold is not None:
            fields["threshold"] = describe_threshold(eviction.threshold)
            fields["ranking"] = [p.key for p in report.decided.ranked_pods[:5]]
        api = report.acted.eviction_api
        if api is not None and api.evicted == eviction.pod.key:
            fields["through_eviction_api"] = True
        self._log.warning("would evict pod" if fields["dry_run"] else "evicting pod", **fields)


    def _follow_up(self, number: int, follow_up: FollowUp, report: CycleReport) -> None:
        """An evicted pod ranked first again while it runs: followed up (`FollowUpKind`), never evicted twice."""
        eviction = follow_up.eviction
        fields: dict[str, Any] = {"cycle": number, "pod": eviction.pod.key, "kind": str(follow_up.kind),
                                  "how": follow_up.how, "signal": eviction.signal,
                                  "grace_period_seconds": eviction.effective_grace_period_s}
        if self._run is not None:
            fields["decision"] = decision_id(self._run, number)
        if eviction.threshold is not None:
            fields["threshold"] = describe_threshold(eviction.threshold)
            fields["ranking"] = [p.key for p in report.decided.ranked_pods[:5]]
        self._log.warning(FOLLOW_UP_EVENT, **fields)


def _shortage_fields(item: HeldBack) -> dict[str, Any]:
    """The shortage figures a held-back stall threshold is logged with (none where the gate had none)."""
    shortage = item.shortage
    if shortage is None:
        return {}
    share = shortage.available_share
    return {"scanned_pages_in_window": shortage.scanned_pages, "scan_floor_pages": shortage.floor_pages,
            "available_percent": None if share is None else round(share * 100, 1)}

"""Prometheus metrics of the daemon, fed from cycle reports: docs/logs-and-metrics.md's metrics table says what each one
means and which kubelet metric it matches (KUBELET_SPEC §14).

Every metric lives in a registry of its own (not the process-global one), so a test can build as many daemons as
it likes. Label values known in advance (signals, causes, sources, scopes) are exported at zero from the start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from evictd.adapters.node_stats import RUNTIME_SOURCES
from evictd.core.engine import EngineState, FollowUpKind, ReclaimThenEvict
from evictd.core.errors import SampleError
from evictd.core.fs_layout import ReclaimAction
from evictd.core.oom import TOO_LATE_ACTIVITIES, OomReport, OomScope
from evictd.core.pods import CAPPED_FIELDS
from evictd.core.run_mode import ModeSource, RunMode
from evictd.core.shadow import Comparison, Outcome
from evictd.core.signals import (
    CONTAINER_EPHEMERAL_LIMIT_SIGNAL,
    EMPTYDIR_LIMIT_SIGNAL,
    POD_EPHEMERAL_LIMIT_SIGNAL,
    NodeCondition,
    Resource,
    Signal,
    Unit,
    spec_of,
)
from evictd.core.summary import Observation
from evictd.core.thresholds import Threshold, threshold_quantity
from evictd.core.wake import Wake
from evictd.cycle.render import condition_text
from evictd.cycle.report import POD_LIST_UNAVAILABLE, CycleReport, CycleStep

# Cycle durations span a cached cgroup read (~1 ms) to a slow filesystem walk (seconds).
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

WAKEUP_CAUSES = tuple(Wake)
# A cycle's own failures are counted by the step that failed; the daemon's by the part of it that failed.
ERROR_SOURCES = (*(str(step) for step in CycleStep), "notifier", "cycle", "runtime", "state")
# The local-storage limit evictions' labels, besides the signals (the kubelet's eviction_signal values).
LOCAL_STORAGE_SIGNALS = (EMPTYDIR_LIMIT_SIGNAL, POD_EPHEMERAL_LIMIT_SIGNAL, CONTAINER_EPHEMERAL_LIMIT_SIGNAL)
# The shadow comparisons' resource label: the resources the kubelet's eviction messages name. A name outside them
# (a future kubelet's) counts as "other", so the label's values stay bounded whatever a pod's status says.
SHADOW_RESOURCES = tuple(str(resource) for resource in Resource)
OTHER_RESOURCE = "other"
# The verdicts on a reclaim for the daemons (`evictd.core.daemons_reclaim.judged`), exported at zero from the start.
DAEMONS_VERDICTS = ("helped", "not_helped")



class GaugePerUnit:
    """One gauge per unit (`<name>_bytes`, `<name>_inodes`, `<name>_pids`), chosen by the signal's unit."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], registry: CollectorRegistry) -> None:
        self._gauges = {unit: Gauge(f"{name}_{unit}", f"{documentation} ({unit}).", labels, registry=registry)
                        for unit in Unit}

    def of(self, signal: Signal) -> Gauge:
        return self._gauges[spec_of(signal).unit]


# The labels of the per-threshold series: signal, kind (hard/soft), the threshold as it reads
# (`allocatableMemory.available<1Gi`) and its origin (`threshold_origin`).
THRESHOLD_LABELS = ("signal", "kind", "threshold", "origin")


def threshold_origin(threshold: Threshold) -> str:
    """Where `threshold` came from: the signal it was copied from (`memory.available`, for the allocatable copy
    the kubelet tells apart), else the configuration list (`evictionHard`, `evictionSoft`, `stallEvictionHard`...)."""
    if threshold.copied_from is not None:
        return str(threshold.copied_from)
    prefix = "stallEviction" if spec_of(threshold.signal).stall_family else "eviction"
    return prefix + ("Hard" if threshold.hard else "Soft")


def threshold_labels(threshold: Threshold) -> tuple[str, str, str, str]:
    """The label values of `threshold`'s series (THRESHOLD_LABELS): no two thresholds share them."""
    return (str(threshold.signal), "hard" if threshold.is_hard else "soft",
            condition_text(threshold.signal, threshold.value), threshold_origin(threshold))


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.available = GaugePerUnit("evictd_signal_available", "Available amount per eviction signal",
                                      ["signal"], r)
        self.capacity = GaugePerUnit("evictd_signal_capacity", "Capacity per eviction signal", ["signal"], r)
        # Keyed by the threshold itself (what it checks, where it came from), not only its signal and kind: a
        # configured allocatableMemory.available threshold and the copy of memory.available's are two series.
        self.threshold = GaugePerUnit("evictd_threshold", "Threshold quantity against the current capacity",
                                      THRESHOLD_LABELS, r)
        self.threshold_met = Gauge("evictd_threshold_met", "1 when the threshold is met this cycle.",
                                   THRESHOLD_LABELS, registry=r)
        self.condition = Gauge("evictd_node_condition", "1 while the node pressure condition is reported.",
                               ["condition"], registry=r)
        self.stats_age = Gauge("evictd_stats_age_seconds", "Age of the stats behind each signal when decided on.",
                               ["signal"], registry=r)
        self.pod_disk_age = Gauge("evictd_pod_disk_usage_age_seconds", "Age of the oldest pod disk usage figures "
                                  "(emptyDir volumes and logs, measured by the disk walker) a cycle used.", registry=r)
        self.pods_without_disk = Gauge("evictd_pods_without_disk_usage", "Pods a cycle had no disk usage figures "
                                       "for (not measured yet; figures once measured are used however old).",
                                       registry=r)
        self.cycle_duration = Histogram("evictd_cycle_duration_seconds", "Duration of one housekeeping cycle.",
                                        buckets=CYCLE_BUCKETS, registry=r)
        self.figures_refused = Counter("evictd_figures_refused_total", "Stats figures refused and left unknown, by "
                                       "field (without pod names) and kind (invalid: not decodable; impossible: "
                                       "beyond the node's capacity), once per cycle each.", ["field", "kind"],
                                       registry=r)
        self.cycles = Counter("evictd_cycles_total", "Housekeeping cycles run.", registry=r)
        self.wakeups = Counter("evictd_wakeups_total", "Loop wake-ups by cause.", ["cause"], registry=r)
        self.errors = Counter("evictd_errors_total", "Errors by source.", ["source"], registry=r)
        self.evictions = Counter("evictd_evictions_total", "Pods evicted, by the signal acted on "
                                 "(the kubelet's kubelet_evictions).", ["eviction_signal"], registry=r)
        self.follow_ups = Counter("evictd_eviction_follow_ups_total", "Earlier evictions followed up, never evicted "
                                  "twice: a pod a hard threshold ranked first again while it ran, by kind (escalated: "
                                  "deleted again with the hard grace period; stopped_again: stopped on the node again; "
                                  "left_to_kubelet).", ["kind"], registry=r)
        self.would_evict = Counter("evictd_dry_run_evictions_total", "Evictions decided but not carried out "
                                   "(dry-run), by signal.", ["eviction_signal"], registry=r)
        self.eviction_stats_age = Histogram("evictd_eviction_stats_age_seconds", "Age of the stats an eviction "
                                            "was decided on (the kubelet's kubelet_eviction_stats_age_seconds).",
                                            ["eviction_signal"], registry=r)
        self.runtime_info = Gauge("evictd_runtime_info", "The container runtime evictd talks to (always 1).",
                                  ["runtime_name", "runtime_version", "runtime_api_version"], registry=r)
        self.eviction_api_refusals = Counter("evictd_eviction_api_refusals_total", "Soft evictions the Eviction "
                                             "API refused (softEvictionsThroughEvictionAPI), by reason "
                                             "(DisruptionBudget, TooManyRequests, Forbidden).", ["reason"], registry=r)
        self.api_errors = Counter("evictd_api_errors_total", "Kubernetes API errors by verb.", ["verb"], registry=r)
        self.image_gc = Counter("evictd_image_garbage_collected_total", "Images deleted by garbage collection, by "
                                "reason (space, age).", ["reason"], registry=r)
        self.shadow = Counter("evictd_shadow_comparisons_total", "Dry-run decisions compared with the kubelet's own "
                              "evictions, by outcome (agree, different-pod, evictd-only, kubelet-only) and the "
                              "starved resource (memory, ephemeral-storage, inodes, pids; other).",
                              ["outcome", "resource"], registry=r)
        self.journal_corrupt = Counter("evictd_journal_corrupt_total", "Eviction journal files found unusable at "
                                       "start and moved aside (evictions.json.corrupt-<time>).", registry=r)
        self.journal_write_failures = Counter("evictd_journal_write_failures_total", "Eviction journal writes "
                                              "that failed (ENOSPC, read-only stateDir); retried every cycle.",
                                              registry=r)
        self.degraded = Gauge("evictd_degraded", "1 while evictd works in a degraded mode, by reason "
                              "(pod-list-unavailable: no pod list from the Kubernetes API).", ["reason"], registry=r)
        self.signal_blind = Gauge("evictd_signal_blind", "1 while a signal with a threshold has had no figure for "
                                  "3 cycles in a row or more (no eviction can act on it; /readyz answers 503).",
                                  ["signal"], registry=r)
        self.healthy = Gauge("evictd_healthy", "1 while /healthz answers 200: a cycle finished within the last "
                             "3 housekeeping intervals (at least 30 s) and evictd is not shutting down.", registry=r)
        self.evictions_avoided = Counter("evictd_memory_reclaim_evictions_avoided_total", "Memory evictions avoided by "
                                         "reclaim before evict (memoryReclaimBeforeEviction): the page cache it "
                                         "reclaimed cleared the threshold (bytes: evictd_reclaimed_bytes_total's "
                                         "memoryReclaim).", registry=r)
        self.reclaimed = Counter("evictd_reclaimed_bytes_total", "Bytes freed by node-level reclaim, by action "
                                 "(containerGC, imageGC; memoryReclaim: page cache, reclaim before evict).",
                                 ["action"], registry=r)
        self.daemons_reclaims = Counter("evictd_daemons_reclaim_attempts_total", "Reclaims for the daemons "
                                        "(daemonsReclaim): pods' page cache asked of memory.reclaim while the node's "
                                        "daemons re-read their memory.", registry=r)
        self.daemons_reclaimed = Counter("evictd_daemons_reclaimed_bytes_total", "Bytes the pods' cgroups' usage fell "
                                         "by in reclaims for the daemons.", registry=r)
        self.daemons_verdicts = Counter("evictd_daemons_reclaim_verdicts_total", "Reclaims for the daemons judged on "
                                        "the daemons' refault figure a window after: helped, or not_helped (the "
                                        "back-off doubles).", ["verdict"], registry=r)
        self.journal_pending = Gauge("evictd_journal_pending_evictions", "Evictions in the journal whose API writes "
                                     "(condition, deletion, event) are not all done yet.", registry=r)
        self.oom_kills = Counter("evictd_oom_kills_total", "Processes killed by the kernel's OOM killer, by where "
                                 "counted: node (the machine), pods (the pods cgroup), pod (attributed to a pod).",
                                 ["scope"], registry=r)
        self.oom_kills_too_late = Counter("evictd_oom_kills_too_late_total", "OOM kills while a memory threshold was "
                                          "met and not yet relieved by an eviction, or soon after one, by what evictd "
                                          "was doing.", ["activity"], registry=r)
        self.pod_fields_dropped = Counter("evictd_pod_fields_dropped_total", "Entries of pods' lists evictd does not "
                                          "hold (past its caps: containers and initContainers folded into one or two, "
                                          "volumes, tolerations), by field, counted when a pod is first seen dropping "
                                          "them and when that changes.", ["field"], registry=r)
        self.metrics_token_reviews = Counter("evictd_metrics_token_reviews_total", "Bearer tokens of /metrics "
                                             "scrapes reviewed through the API (metricsAuthorization: Webhook; a "
                                             "verdict is then cached), by verdict: allowed, unauthenticated, "
                                             "forbidden, unavailable (the API could not be asked).", ["verdict"],
                                             registry=r)
        self.log_lines_dropped = Counter("evictd_log_lines_dropped_total", "Log lines dropped because the reader "
                                         "of evictd's output fell 4 MiB behind (the loop never waits for it).",
                                         registry=r)
        self.memory_locked = Gauge("evictd_memory_locked", "1 when evictd's memory is locked in RAM (lockMemory: "
                                   "mlockall at start), 0 when not (the start-up log line says why).", registry=r)
        self.daemons_memory_low = Gauge("evictd_daemons_memory_low_bytes", "system.slice's memory.low as evictd keeps "
                                        "it (daemonsMemoryLow), 0 while it keeps none (off, dry-run, the node's "
                                        "own protection, unavailable: the log line says which).", registry=r)
        self.oom_score_adj = Gauge("evictd_oom_score_adj", "evictd's own oom_score_adj, read at start (after "
                                   "oomScoreAdj was applied, if set).", registry=r)
        self.protection = Gauge("evictd_protection", "1 for the state of each protection against thrash (active, off, "
                                "unavailable), set at start; the start-up line `protection` says why and how.",
                                ["protection", "state"], registry=r)
        self.thresholds_configured = Gauge("evictd_thresholds_configured", "Eviction thresholds evictd acts on, by "
                                           "kind (hard: no grace period), set at start; 0 of both: evictd evicts "
                                           "nothing.", ["kind"], registry=r)
        self.mode = Gauge("evictd_mode", "1 for the mode evictd is in now (dry-run, acting, standby), 0 for the "
                          "others.", ["mode"], registry=r)
        self.mode_source = Gauge("evictd_mode_source", "1 for what set dry-run or acting (config, node-label, "
                                 "node-file, command-line), 0 for the others.", ["source"], registry=r)
        self.mode_label_invalid = Gauge("evictd_mode_label_invalid", "1 while the Node's evictd.io/mode label has a "
                                        "value evictd does not accept (the configured dryRun holds).", registry=r)
        self.mode_file_invalid = Gauge("evictd_mode_file_invalid", "1 while the node-local mode file (<stateDir>/mode) "
                                       "holds something other than dry-run or cannot be read (evictd holds the node "
                                       "in dry-run).", registry=r)
        self.handover_conflict = Gauge("evictd_handover_conflict", "1 per signal where the kubelet's threshold is at "
                                       "or above evictd's hard one while evictd acts (they race), else 0.",
                                       ["signal"], registry=r)
        self._exported_signals: set[Signal] = set()
        signals = (*Signal, *LOCAL_STORAGE_SIGNALS)
        for metric, values in ((self.degraded, (POD_LIST_UNAVAILABLE,)), (self.evictions, signals),
                               (self.would_evict, signals), (self.reclaimed, ReclaimAction), (self.oom_kills, OomScope),
                               (self.oom_kills_too_late, sorted(TOO_LATE_ACTIVITIES)), (self.wakeups, WAKEUP_CAUSES),
                               (self.errors, ERROR_SOURCES), (self.condition, NodeCondition),
                               (self.mode, RunMode), (self.mode_source, ModeSource), (self.follow_ups, FollowUpKind),
                               (self.pod_fields_dropped, CAPPED_FIELDS), (self.daemons_verdicts, DAEMONS_VERDICTS)):
            for value in values:
                metric.labels(str(value))  # a new child starts at zero
        for outcome in Outcome:  # every pair at zero: a node's first comparison shows in increase() and rate()
            for resource in SHADOW_RESOURCES:
                self.shadow.labels(str(outcome), resource)

    def record_cycle(
        self,
        report: CycleReport,
        state: EngineState,
        duration_s: float,
        now_wall: datetime,
        dry_run: bool,
    ) -> None:
        assessment, acted = report.decided.assessment, report.acted
        self.cycles.inc()
        self.cycle_duration.observe(duration_s)
        self.degraded.labels(POD_LIST_UNAVAILABLE).set(0 if report.observed.pod_list_problem is None else 1)
        # A signal observed before but not now (its source unreadable) must not go on showing its old value.
        observed = set(assessment.observations)
        for gone in self._exported_signals - observed:
            for gauge in (self.available.of(gone), self.capacity.of(gone), self.stats_age):
                with contextlib.suppress(KeyError):  # stats_age exists only for timed observations
                    gauge.remove(str(gone))
        self._exported_signals = observed
        for signal, observation in assessment.observations.items():
            self.available.of(signal).labels(str(signal)).set(float(observation.available.value))
            self.capacity.of(signal).labels(str(signal)).set(float(observation.capacity.value))
            if observation.time is not None:
                self.stats_age.labels(str(signal)).set(max(0.0, (now_wall - observation.time).total_seconds()))
        self._pod_disk(report, now_wall)
        self._thresholds(state.thresholds, assessment.observations, {s.threshold for s in assessment.thresholds})
        for condition in NodeCondition:
            self.condition.labels(str(condition)).set(1 if condition in assessment.node_conditions else 0)
        for error in report.errors:  # a failed eviction among them (source="eviction")
            self.errors.labels(str(error.step)).inc()
        self.errors.labels(str(CycleStep.RECLAIM)).inc(sum(1 for r in acted.reclaim if r.error))
        for result in acted.reclaim:
            if result.error is None:
                self.reclaimed.labels(str(result.action)).inc(result.freed_bytes)
        if acted.memory_reclaim is not None and acted.memory_reclaim.result is not None and acted.reclaim_succeeded:
            self.evictions_avoided.inc()
        self._daemons_reclaim(report)
        for refusal in acted.refusals:
            self.eviction_api_refusals.labels(refusal.reason).inc()
        for eviction in acted.evictions:
            (self.would_evict if dry_run else self.evictions).labels(eviction.signal).inc()
        for follow_up in acted.follow_ups:
            self.follow_ups.labels(str(follow_up.kind)).inc()
        if report.oom is not None:
            self._oom(report.oom)
        step = assessment.next_step
        for threshold in step.thresholds if isinstance(step, ReclaimThenEvict) and report.decided.ranked_pods else ():
            acted_on = assessment.observations.get(threshold.signal)
            if acted_on is not None and acted_on.time is not None:
                age = max(0.0, (now_wall - acted_on.time).total_seconds())
                self.eviction_stats_age.labels(str(threshold.signal)).observe(age)

    def _daemons_reclaim(self, report: CycleReport) -> None:
        """Count a cycle's reclaim for the daemons: its attempt, the usage it freed, an earlier one's verdict."""
        use = report.daemons_reclaim
        if use is None:
            return
        if use.attempted:
            self.daemons_reclaims.inc()
            self.daemons_reclaimed.inc(use.freed_bytes)
        if use.verdict is not None:
            self.daemons_verdicts.labels(DAEMONS_VERDICTS[0] if use.verdict.helped else DAEMONS_VERDICTS[1]).inc()

    def _pod_disk(self, report: CycleReport, now_wall: datetime) -> None:
        """Export how old the pods' disk figures were and how many pods had none (absent: no Summary)."""
        summary = report.observed.summary
        if summary is None:
            return
        oldest = None
        missing = 0
        for pod in summary.pods:
            storage = pod.ephemeral_storage
            if storage is None or storage.time is None:
                missing += 1
            elif oldest is None or storage.time < oldest:
                oldest = storage.time
        self.pods_without_disk.set(missing)
        self.pod_disk_age.set(0.0 if oldest is None else max(0.0, (now_wall - oldest).total_seconds()))
    def record_stats_problems(self, problems: Sequence[SampleError]) -> None:
        """Count a cycle whose stats calls to the container runtime failed (errors{source="runtime"})."""
        if any(problem.source in RUNTIME_SOURCES for problem in problems):
            self.errors.labels("runtime").inc()

    def record_mode(self, mode: RunMode, source: ModeSource, label_invalid: bool, file_invalid: bool = False) -> None:
        """Export the mode of this cycle: 1 for `mode` and `source`, 0 for the others; whether the label or the mode
        file holds a value evictd does not accept."""
        for value in RunMode:
            self.mode.labels(str(value)).set(1 if value is mode else 0)
        for origin in ModeSource:
            self.mode_source.labels(str(origin)).set(1 if origin is source else 0)
        self.mode_label_invalid.set(1 if label_invalid else 0)
        self.mode_file_invalid.set(1 if file_invalid else 0)

    def record_handover_conflicts(self, signals: Sequence[Signal], racing: frozenset[Signal]) -> None:
        """Export `evictd_handover_conflict`: 1 for each of `signals` in `racing`, 0 for the others."""
        for signal in signals:
            self.handover_conflict.labels(str(signal)).set(1 if signal in racing else 0)

    def watch_health(self, healthy: Callable[[], bool]) -> None:
        """Export `healthy()` (the /healthz rule) as `evictd_healthy`, evaluated at each scrape."""
        self.healthy.set_function(lambda: 1.0 if healthy() else 0.0)

    def count_shadow_comparison(self, comparison: Comparison) -> None:
        """Count one settled shadow comparison under its outcome and starved resource (never a pod's name)."""
        side = comparison.evictd or comparison.kubelet
        resource = side.resource if side is not None and side.resource in SHADOW_RESOURCES else OTHER_RESOURCE
        self.shadow.labels(str(comparison.outcome), resource).inc()

    def _oom(self, oom: OomReport) -> None:
        self.oom_kills.labels(str(OomScope.NODE)).inc(oom.node_kills)
        self.oom_kills.labels(str(OomScope.PODS)).inc(oom.pods_kills)
        self.oom_kills.labels(str(OomScope.POD)).inc(oom.attributed_kills)
        if oom.too_late_kills:
            self.oom_kills_too_late.labels(str(oom.activity)).inc(oom.too_late_kills)

    def _thresholds(
        self, thresholds: Sequence[Threshold], observations: Mapping[Signal, Observation], met: set[Threshold]
    ) -> None:
        for threshold in thresholds:
            if threshold.operator is None:
                continue
            labels = threshold_labels(threshold)
            self.threshold_met.labels(*labels).set(1 if threshold in met else 0)
            observation = observations.get(threshold.signal)
            if observation is not None:
                quantity = threshold_quantity(threshold.value, observation.capacity)
                self.threshold.of(threshold.signal).labels(*labels).set(float(quantity.value))

"""OOM-kill feedback: kernel OOM kills counted per cycle, attributed to pods, and judged against what evictd did.

The counters (`evictd.adapters.oom_counters`) arrive as an `OomReading`. `oom_feedback` turns two readings into the
kills between them (a counter that went down belongs to a cgroup made anew), names pods and containers where a
cgroup says, and classifies them by what evictd was doing (`Activity`); `cgroups_walk_needed` reads per-cgroup
counters only when a kill happened since the last walk. "Too late": a kill while a memory threshold was met and not
yet relieved, within `TOO_LATE_WINDOW_S` after a memory eviction, or under pressure no cycle saw yet. A state
restored from a previous run of this boot (`evictd.core.oom_saved`) judges its first interval NOT_RUNNING.

Invariants: inputs are never mutated; `now` is monotonic seconds; a kill is counted once, in the interval where its
counter moved; no count is negative.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum

from evictd.core.engine import Assessment, Eviction
from evictd.core.signals import spec_of

# Twice the kubelet's podCleanupTimeout (30 s): a kill this soon after a memory eviction came too late.
TOO_LATE_WINDOW_S = 60.0


class OomScope(StrEnum):
    """Where an OOM kill was counted (the `scope` label of `evictd_oom_kills_total`)."""

    NODE = "node"  # anywhere on the machine (/proc/vmstat)
    PODS = "pods"  # below the pods cgroup
    POD = "pod"  # attributed to one pod by its cgroup


class Activity(StrEnum):
    """What evictd was doing about memory while an OOM kill happened."""

    IDLE = "idle"  # no memory threshold met
    PRESSURE_UNSEEN = "pressure-unseen"  # met at the cycle after the kill, not at the one before
    GRACE_PERIOD = "grace-period"  # a memory threshold met, its grace period running
    NOT_EVICTED = "not-evicted"  # grace period over, no pod evicted (every candidate critical, dry-run, ...)
    EVICTION_FAILED = "eviction-failed"  # the eviction's API writes failed (API down, throttled, refusing)
    WAITING_FOR_CLEANUP = "waiting-for-cleanup"  # a pod evicted for memory, not yet gone
    AFTER_EVICTION = "after-eviction"  # within TOO_LATE_WINDOW_S after an eviction for memory
    NOT_RUNNING = "not-running"  # before this run's first cycle, since a previous run of this boot last read


# Nothing judges the kills while no memory threshold was met, nor those while evictd was not running.
TOO_LATE_ACTIVITIES: frozenset[Activity] = frozenset(set(Activity) - {Activity.IDLE, Activity.NOT_RUNNING})

# Each reads after "while": "OOM killer killed 1 process in pod a/b while <description>".
ACTIVITY_TO_DESCRIPTION: Mapping[Activity, str] = {
    Activity.IDLE: "no memory threshold was met",
    Activity.PRESSURE_UNSEEN: "a memory threshold was met that no cycle had seen yet",
    Activity.GRACE_PERIOD: "a memory threshold was met, its grace period running",
    Activity.NOT_EVICTED: "a memory threshold was met past its grace period and no pod was evicted",
    Activity.EVICTION_FAILED: "the API writes of an eviction for memory were failing",
    Activity.WAITING_FOR_CLEANUP: "evictd was waiting for a pod evicted for memory to go",
    Activity.AFTER_EVICTION: f"a pod had been evicted for memory less than {TOO_LATE_WINDOW_S:g} s before",
    Activity.NOT_RUNNING: "evictd was not running",
}


@dataclass(frozen=True, slots=True)
class CgroupOomCount:
    """The OOM-kill counters of one cgroup below the pods cgroup. `hierarchical`: includes the cgroups below (v2);
    `pod_uid` and `container_id` are empty where the cgroup is not (inside) a pod or container cgroup."""

    path: str
    oom_kills: int
    pod_uid: str = ""
    container_id: str = ""
    group_kills: int = 0
    hierarchical: bool = False


@dataclass(frozen=True, slots=True)
class OomReading:
    """One reading of the kernel's counters; None where unreadable or (`cgroups`) not read this cycle. `pods` is
    the hierarchical pods-cgroup counter (v2); on v1 None, and the pods total is summed from `cgroups`."""

    node: int | None
    pods: int | None = None
    cgroups: tuple[CgroupOomCount, ...] | None = None


@dataclass(frozen=True, slots=True)
class OomState:
    """The counters as last read, and what evictd was doing since its last cycle. `node_at_walk` and `pods_at_walk`
    are the counters at the last per-cgroup walk; a failed walk leaves them, so the next cycle walks."""

    node: int | None = None
    pods: int | None = None
    cgroups: Mapping[str, int] = field(default_factory=dict)
    group_kills: Mapping[str, int] = field(default_factory=dict)
    baseline: bool = False  # a first reading was taken
    walked: bool = False  # the per-cgroup counters were read at least once
    node_at_walk: int | None = None
    pods_at_walk: int | None = None
    activity: Activity = Activity.IDLE
    last_memory_eviction_at: float | None = None
    # Restored from this boot's previous run: its counters, read at this wall time; the next interval was downtime.
    not_running_since_wall: float | None = None


@dataclass(frozen=True, slots=True)
class PodOomKill:
    """OOM kills attributed to one pod (and to one of its containers, when `container_id` is set)."""

    pod_uid: str
    container_id: str
    cgroup: str
    kills: int
    group_kills: int = 0
    pod_key: str = ""  # namespace/name, filled in by the shell where the pod is known
    container_name: str = ""  # filled in by the shell where the runtime names the container


@dataclass(frozen=True, slots=True)
class OomReport:
    """The OOM kills of one interval between cycles and what evictd was doing meanwhile."""

    node_kills: int = 0
    pods_kills: int = 0
    pod_kills: tuple[PodOomKill, ...] = ()
    activity: Activity = Activity.IDLE
    too_late_kills: int = 0
    # Only the pods cgroup's own hierarchical counter (v2) tells kills the pods count lacks are outside the pods cgroup.
    pods_counted_exactly: bool = False
    # With NOT_RUNNING: when a previous run last read the counters (wall-clock seconds since the epoch).
    since_wall: float | None = None

    @property
    def kills(self) -> int:
        """Return the kills counted in the interval: the machine's, or the pods cgroup's where that is unreadable."""
        return max(self.node_kills, self.pods_kills, self.attributed_kills)

    @property
    def attributed_kills(self) -> int:
        return sum(kill.kills for kill in self.pod_kills)

    @property
    def outside_pods_kills(self) -> int:
        """Return the kills on the machine the pods count lacks: outside the pods cgroup (system daemons, a node
        without pods) or, unless `pods_counted_exactly`, in a cgroup below it removed before it was read."""
        return max(0, self.node_kills - self.pods_kills)

    @property
    def unattributed_pods_kills(self) -> int:
        """Return the kills in the pods cgroup no pod cgroup accounts for (on v1: a container cgroup gone since)."""
        return max(0, self.pods_kills - self.attributed_kills)

    @property
    def has_kills(self) -> bool:
        return bool(self.node_kills or self.pods_kills or self.pod_kills)


def counter_delta(before: int | None, now: int | None) -> int:
    """Return how much a kernel counter moved; 0 when either reading is missing. A counter that went down was made
    anew: everything it holds happened since."""
    if before is None or now is None:
        return 0
    return now - before if now >= before else now


def machine_delta(before: int | None, now: int | None) -> int:
    """Return how much the machine's counter moved; 0 when either reading is missing or it went down (a reboot)."""
    if before is None or now is None or now < before:
        return 0
    return now - before


def cgroups_walk_needed(state: OomState, node_now: int | None, pods_now: int | None) -> bool:
    """Return True when the per-cgroup counters must be read this cycle: the pods counter moved (v2) or the
    machine's did (v1); always before the first walk and while neither can be read."""
    if not state.walked:
        return True
    if pods_now is not None:
        return state.pods_at_walk is None or pods_now != state.pods_at_walk
    return node_now is None or state.node_at_walk is None or node_now != state.node_at_walk


def activity_after_cycle(
    assessment: Assessment, evictions: Sequence[Eviction], eviction_failed: bool, dry_run: bool
) -> Activity:
    """Return what evictd is doing about memory after a cycle, until the next one (`eviction_failed`: its API writes
    raised; `dry_run`: evictions decided, not carried out)."""
    if any(e.threshold is not None and spec_of(e.threshold.signal).is_memory for e in evictions):
        if dry_run:
            return Activity.NOT_EVICTED
        return Activity.EVICTION_FAILED if eviction_failed else Activity.WAITING_FOR_CLEANUP
    memory = [status for status in assessment.thresholds if spec_of(status.threshold.signal).is_memory]
    if not memory:
        return Activity.IDLE
    if any(status.grace_met for status in memory):
        return Activity.NOT_EVICTED
    return Activity.GRACE_PERIOD


def classify(state: OomState, activity_now: Activity, now: float) -> Activity:
    """Return what evictd was doing between its last cycle and `now`: what that cycle left it doing; else within the
    window after a memory eviction, AFTER_EVICTION; else with pressure new this cycle, PRESSURE_UNSEEN."""
    if state.not_running_since_wall is not None:
        return Activity.NOT_RUNNING
    if state.activity is not Activity.IDLE:
        return state.activity
    if state.last_memory_eviction_at is not None and now - state.last_memory_eviction_at <= TOO_LATE_WINDOW_S:
        return Activity.AFTER_EVICTION
    if activity_now is not Activity.IDLE:
        return Activity.PRESSURE_UNSEEN
    return Activity.IDLE


def pod_oom_kills(
    before: Mapping[str, int], before_groups: Mapping[str, int], counts: Sequence[CgroupOomCount]
) -> tuple[tuple[PodOomKill, ...], int]:
    """Return the kills per pod and container since `before` (path -> counter), and the sum of the local counters.
    A cgroup new since `before` counts whole; a pod's kills its containers do not account for have no container;
    with local counters (v1) a pod's kills sum over its cgroups."""
    local_total = 0
    # uid -> container id ("" for none) -> [kills, group kills]
    by_pod: dict[str, dict[str, list[int]]] = {}
    pod_totals: dict[str, tuple[int, int]] = {}  # uid -> the pod cgroup's hierarchical (kills, group kills)
    pod_cgroup: dict[str, str] = {}
    for count in counts:
        kills = counter_delta(before.get(count.path, 0), count.oom_kills)
        groups = counter_delta(before_groups.get(count.path, 0), count.group_kills)
        if not count.hierarchical:
            local_total += kills
        if not count.pod_uid:
            continue
        containers = by_pod.setdefault(count.pod_uid, {})
        if not count.container_id:
            pod_cgroup.setdefault(count.pod_uid, count.path)
            if count.hierarchical:
                pod_totals[count.pod_uid] = (kills, groups)
                continue
        entry = containers.setdefault(count.container_id, [0, 0])
        entry[0] += kills
        entry[1] += groups
    found: list[PodOomKill] = []
    for uid, containers in by_pod.items():
        if uid in pod_totals:
            pod_kills, pod_groups = pod_totals[uid]
            in_containers = [entry for cid, entry in containers.items() if cid]
            containers[""] = [max(0, pod_kills - sum(e[0] for e in in_containers)),
                              max(0, pod_groups - sum(e[1] for e in in_containers))]
        for cid, (kills, groups) in sorted(containers.items()):
            if kills:
                found.append(PodOomKill(pod_uid=uid, container_id=cid, cgroup=pod_cgroup.get(uid, ""), kills=kills,
                                        group_kills=groups))
    return tuple(found), local_total


def oom_feedback(
    state: OomState, reading: OomReading, activity_now: Activity, now: float
) -> tuple[OomState, OomReport]:
    """Return the new state and the OOM kills since the last reading, attributed and classified. `activity_now`
    (`activity_after_cycle`) judges the next interval; `reading.cgroups` None names no pod this cycle (the next walk
    finds both intervals' kills)."""
    node_kills = machine_delta(state.node, reading.node) if state.baseline else 0
    evicted_now = activity_now in (Activity.WAITING_FOR_CLEANUP, Activity.EVICTION_FAILED)
    new_state = replace(state, node=reading.node, pods=reading.pods, baseline=True, activity=activity_now,
                        last_memory_eviction_at=now if evicted_now else state.last_memory_eviction_at,
                        not_running_since_wall=None)
    pod_kills: tuple[PodOomKill, ...] = ()
    summed_pods = 0
    if reading.cgroups is not None:
        if state.walked:
            pod_kills, summed_pods = pod_oom_kills(state.cgroups, state.group_kills, reading.cgroups)
        new_state = replace(
            new_state,
            cgroups={count.path: count.oom_kills for count in reading.cgroups},
            group_kills={count.path: count.group_kills for count in reading.cgroups if count.group_kills},
            walked=True,
            node_at_walk=reading.node,
            pods_at_walk=reading.pods,
        )
    if reading.pods is not None:
        pods_kills = counter_delta(state.pods, reading.pods) if state.baseline else 0
    else:
        pods_kills = summed_pods
    activity = classify(state, activity_now, now)
    node_known = reading.node is not None and state.node is not None
    counted = node_kills if node_known else pods_kills
    report = OomReport(
        node_kills=node_kills,
        pods_kills=pods_kills,
        pod_kills=pod_kills,
        activity=activity,
        too_late_kills=counted if activity in TOO_LATE_ACTIVITIES else 0,
        pods_counted_exactly=reading.pods is not None,
        since_wall=state.not_running_since_wall,
    )
    return new_state, report


# Warning event reasons: kills while evictd was (or should have been) relieving memory pressure, and the others.
TOO_LATE_REASON = "EvictionTooLate"
OOM_KILL_REASON = "OOMKill"


def _processes(count: int) -> str:
    return "1 process" if count == 1 else f"{count} processes"


def outside_pods(report: OomReport) -> str:
    """Return where the kills the pods count lacks happened, as far as the counters tell."""
    if report.pods_counted_exactly:
        return "outside the pods cgroup"
    return "outside the pods cgroup or in a container cgroup removed since"


def wall_time_text(seconds: float) -> str:
    """Return a wall-clock time (seconds since the epoch) as the UTC time a reader is shown, to the second."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def situation(report: OomReport) -> str:
    """Return what evictd was doing while the report's kills happened, read after "while" (since when, for the
    kills while it was not running)."""
    described = ACTIVITY_TO_DESCRIPTION[report.activity]
    if report.activity is Activity.NOT_RUNNING and report.since_wall is not None:
        return f"{described} (since {wall_time_text(report.since_wall)})"
    return described


def oom_kill_events(report: OomReport) -> tuple[tuple[str, str], ...]:
    """Return the (reason, message) of each node event the report calls for: one per pod and container named,
    one for the kills in pods not named, one for the kills outside the pods cgroup."""
    reason = TOO_LATE_REASON if report.activity in TOO_LATE_ACTIVITIES else OOM_KILL_REASON
    doing = f"while {situation(report)}"
    events = []
    for kill in report.pod_kills:
        pod = kill.pod_key or f"with UID {kill.pod_uid}"
        container = kill.container_name or kill.container_id[:12]
        where = f"pod {pod} (container {container})" if container else f"pod {pod}"
        events.append((reason, f"OOM killer killed {_processes(kill.kills)} in {where} {doing}"))
    if report.unattributed_pods_kills:
        events.append((reason, f"OOM killer killed {_processes(report.unattributed_pods_kills)} in the pods cgroup, "
                               f"in no pod cgroup still present, {doing}"))
    if report.outside_pods_kills:
        events.append((reason, f"OOM killer killed {_processes(report.outside_pods_kills)} {outside_pods(report)} "
                               f"{doing}"))
    return tuple(events)

"""What one cycle of the eviction manager reports: what it observed, what it decided, what it did, and what failed.

A `CycleReport` is made of parts, each frozen: `Observed` (the Summary read and the pods listed, and where they came
from), `Decided` (the engine's assessment and, when a threshold asked for an eviction, the ranking), `Acted` (the
node-level reclaim, the evictions, and how a soft eviction used the Eviction API), reclaim for the daemons
(`DaemonsReclaimUse`, beside any threshold), and the cycle's failures as
`CycleError`s, one type whatever the step that failed (a failed eviction too: it names its pod). Logs, metrics, the
live view, the flight recording and `simulate`'s output are all made from these parts and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from evictd.core.daemons_reclaim import DaemonsVerdict
from evictd.core.engine import Assessment, Eviction, FollowUp
from evictd.core.errors import EvictionRefused
from evictd.core.fs_layout import ReclaimAction
from evictd.core.oom import OomReport
from evictd.core.pods import Pod
from evictd.core.ranking import SortKey
from evictd.core.signals import Signal
from evictd.core.summary import Summary

# What a cycle without a usable pod list is called in /healthz and in the evictd_degraded metric's label.
POD_LIST_UNAVAILABLE = "pod-list-unavailable"


class CycleStep(StrEnum):
    """The step of a cycle that failed; its value is the `source` label of `evictd_errors_total`."""

    LAYOUT = "layout"  # detecting the node's filesystem layout
    PODS = "pods"  # listing the node's pods
    STATS = "stats"  # reading the node's stats (before or after reclaim)
    RECLAIM = "reclaim"  # a node-level reclaim action
    EVICTION = "eviction"  # evicting a pod


@dataclass(frozen=True, slots=True)
class CycleError:
    """One failure of a cycle: the step that failed, what went wrong (the kubelet's log text) and, for a failed
    eviction, the pod's namespace/name (None for the other steps)."""

    step: CycleStep
    description: str
    pod: str | None = None


# --- what the cycle observed ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodListProblem:
    """Why the Kubernetes API's pod list could not be used this cycle, and whether the pods the node shows were
    listed instead (they are ranked for hard thresholds only)."""

    reason: str
    pods_from_node: bool = False


@dataclass(frozen=True, slots=True)
class Observed:
    """What a cycle read: the node's Summary (None: the stats could not be read) and the pods it listed, which are
    the pods the Summary measures; `pod_list_problem` says why they are not the API's list (None: they are)."""

    summary: Summary | None = None
    pods: tuple[Pod, ...] = ()
    pod_list_problem: PodListProblem | None = None
    # Memory thresholds newly met in the first reading that `summary` was read to confirm, and whether it did.
    crossed: tuple[Signal, ...] = ()
    crossing_confirmed: bool = False
    # Whether the first reading had them met only on usage memory.stat did not account for yet (cgroup v1's lag).
    crossing_unaccounted: bool = False
    # How long after the first reading the confirming one was taken (None: nothing to confirm).
    confirmed_after_s: float | None = None

    @property
    def crossing_unconfirmed(self) -> bool:
        """Whether a crossing read at first was gone in the confirming reading (page cache, a short dip)."""
        return bool(self.crossed) and not self.crossing_confirmed

    @property
    def pods_from_node(self) -> bool:
        """Whether the pods are the ones the node shows (the API's pod list could not be used)."""
        return self.pod_list_problem is not None and self.pod_list_problem.pods_from_node


# --- what the cycle decided ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodRanking:
    """The order a threshold's signal ranked the pods in, for eviction: the signal, the pods first to last, and
    each one's sort key in the same order (`core.ranking.named_key_parts` names a key's parts)."""

    signal: Signal
    pods: tuple[Pod, ...]
    keys: tuple[SortKey, ...]


@dataclass(frozen=True, slots=True)
class Decided:
    """What a cycle decided: the engine's assessment and, when a threshold asked for an eviction, the ranking (None:
    nobody ranked), the critical pods passed over at its head, or why nobody was ranked (`withheld`).
    `awaited_disk_figures`: pods whose disk figures the cycle waited for before a disk ranking; `unmeasured`: pods
    ranked without them (as using none)."""

    assessment: Assessment
    ranking: PodRanking | None = None
    skipped_critical: tuple[Pod, ...] = ()
    withheld: str | None = None
    awaited_disk_figures: tuple[Pod, ...] = ()
    unmeasured: tuple[Pod, ...] = ()

    @property
    def ranked_pods(self) -> tuple[Pod, ...]:
        """The pods ranked, first to last (none when nobody was ranked)."""
        return () if self.ranking is None else self.ranking.pods


# --- what the cycle did --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """One node-level reclaim action that ran, and what it freed (or why it failed)."""

    action: ReclaimAction
    freed_bytes: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class EvictionApiRefusal:
    """The Eviction API's refusal to evict `pod` (namespace/name): the HTTP status (None: no answer), the Status
    reason (or its cause's, such as DisruptionBudget), the budget it names ("" when none) and the API's message."""

    pod: str
    status: int | None
    reason: str
    budget: str
    message: str

    @classmethod
    def of(cls, error: EvictionRefused) -> EvictionApiRefusal:
        causes = [reason for reason, _ in error.causes if reason]
        reason = causes[0] if causes else error.reason or str(error.status)
        return cls(pod=error.pod, status=error.status, reason=reason, budget=error.budget, message=error.detail)


@dataclass(frozen=True, slots=True)
class EvictionApiUse:
    """How soft evictions used the Eviction API in a cycle: `asked` (candidates a round started with), `waiting`
    (the pod an earlier round still asks), a round that ended since (`evicted`, `refusals` in ranking order,
    `failure`: no usable answer or the deadline), `bypassed` (why this soft eviction went the kubelet's way) and
    `pending_release` (an accepted eviction still releasing: no soft eviction for the same shortfall)."""

    refusals: tuple[EvictionApiRefusal, ...] = ()
    bypassed: str | None = None
    asked: tuple[str, ...] = ()
    waiting: str | None = None
    evicted: str | None = None
    failure: str | None = None
    pending_release: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryReclaimUse:
    """What reclaim before evict did for `signal`: skipped (`skipped`, `backing_off`), or asked `needed_bytes` and
    freed `result.freed_bytes` (or failed) in `elapsed_s` over `rounds`, stopping for `stopped`, with
    `still_needed_bytes` lacking after (0: cleared, or not read)."""

    signal: str
    skipped: str | None = None
    result: ReclaimResult | None = None
    needed_bytes: int = 0
    elapsed_s: float = 0.0
    stopped: str = ""
    backing_off: bool = False
    rounds: int = 0
    still_needed_bytes: int = 0


@dataclass(frozen=True, slots=True)
class DaemonsReclaimUse:
    """What reclaim for the daemons did in a cycle (`evictd.core.daemons_reclaim`): the daemons' figure before it
    (basis points of their memory; None: unknown); skipped (`skipped`, `backing_off`), or asked `asked_bytes` of
    `targets` and saw their usage fall by `freed_bytes` in `elapsed_s`, stopping for `stopped` (or failed: `error`);
    and `verdict`, an earlier attempt judged this cycle (None: none)."""

    figure_bp: int | None
    skipped: str | None = None
    backing_off: bool = False
    asked_bytes: int = 0
    freed_bytes: int = 0
    elapsed_s: float = 0.0
    stopped: str = ""
    error: str | None = None
    targets: tuple[str, ...] = ()
    verdict: DaemonsVerdict | None = None

    @property
    def attempted(self) -> bool:
        """Whether the cycle asked the kernel (an attempt that failed too)."""
        return self.skipped is None


@dataclass(frozen=True, slots=True)
class Acted:
    """What a cycle did: node-level reclaim actions, whether they resolved the pressure and the Summary read after
    (None: none); the evictions (a failed one counts, as the kubelet counts it; an accepted API eviction counts when
    learnt of); `follow_ups` of earlier evictions (none a second eviction); Eviction API use; `after_disk_wait` (the
    Summary ranked on after a disk-figures wait); `memory_reclaim` (None: off or not needed)."""

    reclaim: tuple[ReclaimResult, ...] = ()
    reclaim_succeeded: bool | None = None
    after_reclaim: Summary | None = None
    after_disk_wait: Summary | None = None
    evictions: tuple[Eviction, ...] = ()
    eviction_api: EvictionApiUse | None = None
    memory_reclaim: MemoryReclaimUse | None = None
    follow_ups: tuple[FollowUp, ...] = ()  # earlier evictions followed up (not evictions: counted once, as evicted)

    @property
    def refusals(self) -> tuple[EvictionApiRefusal, ...]:
        """The Eviction API's refusals this cycle, in ranking order."""
        return () if self.eviction_api is None else self.eviction_api.refusals


# --- the report ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CycleReport:
    """Everything one cycle observed, decided and did, and what failed, at `now` (monotonic seconds). `oom`, the
    kernel's OOM kills since the last cycle, is added by the daemon's OOM feedback (None without it)."""

    now: float
    observed: Observed
    decided: Decided
    acted: Acted = Acted()
    errors: tuple[CycleError, ...] = ()
    oom: OomReport | None = None
    daemons_reclaim: DaemonsReclaimUse | None = None  # reclaim for the daemons (None: off, or the node cannot)

    @property
    def ranked_on(self) -> Summary | None:
        """The Summary the cycle's ranking ranked pods on: the one read after its wait for pods' disk figures when it
        waited, else the one it observed."""
        waited = self.acted.after_disk_wait
        return waited if waited is not None else self.observed.summary

    def errors_of(self, step: CycleStep) -> tuple[CycleError, ...]:
        """The cycle's failures of `step`, in the order they happened."""
        return tuple(error for error in self.errors if error.step is step)

    @property
    def degraded(self) -> str | None:
        """Why the cycle worked in a degraded mode, as `/healthz` says it (None: it did not)."""
        problem = self.observed.pod_list_problem
        if problem is None:
            return None
        acting = ("hard thresholds act on the pods the node shows, through the container runtime"
                  if problem.pods_from_node else "no pod can be evicted")
        return f"{POD_LIST_UNAVAILABLE}: no pod list from the Kubernetes API, {acting} ({problem.reason})"

"""Shadow mode: evictd's dry-run decisions set against the evictions the kubelet itself carried out.

Each eviction either side made ends as one `Outcome`: ``agree`` (same pod within the match window),
``different-pod`` (same starved resource, another pod), ``evictd-only`` or ``kubelet-only`` (the other side did
nothing for that resource within the window). The kubelet acts on its 10 s tick and reports the pod only once its
containers are dead, so an eviction is held one window before it is unmatched; a same-pod match is made at once. A
pod evictd already decided on within the window is not a new decision (dry-run decides it again every cycle).

Pure functions: times are monotonic seconds passed in; nothing is mutated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from evictd.core.signals import (
    CONTAINER_EPHEMERAL_LIMIT_SIGNAL,
    EMPTYDIR_LIMIT_SIGNAL,
    POD_EPHEMERAL_LIMIT_SIGNAL,
    Resource,
    Signal,
    spec_of,
)

# Long enough for the kubelet's 10 s tick plus a termination grace period of 30 s and the status write.
DEFAULT_MATCH_WINDOW_S = 60.0
LOCAL_STORAGE_SIGNALS = frozenset({EMPTYDIR_LIMIT_SIGNAL, POD_EPHEMERAL_LIMIT_SIGNAL, CONTAINER_EPHEMERAL_LIMIT_SIGNAL})
# The kubelet's eviction messages (KUBELET_SPEC §11): threshold evictions name the resource, local-storage the limit.
_THRESHOLD_MESSAGE = re.compile(r"^The node was low on resource: ([a-z-]+)\.")
_LOCAL_STORAGE_MESSAGES = ("Usage of EmptyDir volume", "Pod ephemeral local storage usage exceeds",
                           "Container ")
EVICTED_REASON = "Evicted"
FAILED_PHASE = "Failed"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class Outcome(StrEnum):
    AGREE = "agree"
    DIFFERENT_POD = "different-pod"
    EVICTD_ONLY = "evictd-only"
    KUBELET_ONLY = "kubelet-only"


@dataclass(frozen=True, slots=True)
class ShadowEviction:
    """One eviction by one side: when it was seen, which pod, for which starved resource."""

    at: float
    pod_uid: str
    pod_key: str
    resource: str


@dataclass(frozen=True, slots=True)
class Comparison:
    """How an eviction of one side compared with the other side's (a side is None when it had none)."""

    outcome: Outcome
    evictd: ShadowEviction | None
    kubelet: ShadowEviction | None


@dataclass(frozen=True, slots=True)
class ShadowState:
    """Evictions waiting for their match, and evictd's recent decisions (for de-duplication)."""

    evictd: tuple[ShadowEviction, ...] = ()
    kubelet: tuple[ShadowEviction, ...] = ()
    decided: tuple[ShadowEviction, ...] = ()


def resource_of_signal(signal: str) -> str:
    """Return the starved resource of an evictd eviction's signal label (local-storage limits: storage)."""
    if signal in LOCAL_STORAGE_SIGNALS:
        return Resource.EPHEMERAL_STORAGE.value
    return spec_of(Signal(signal)).resource.value


def kubelet_eviction_resource(phase: str | None, reason: str | None, message: str | None,
                              termination_by_kubelet: str | None = None) -> str | None:
    """Return the starved resource when a pod status is the kubelet's record of an eviction, else None: phase
    Failed, reason Evicted, or (a pod whose containers exit 0 ends Succeeded, kubernetes#120182) the
    DisruptionTarget condition TerminationByKubelet. Admission rejections ("The node had condition") give None."""
    if phase == FAILED_PHASE and reason == EVICTED_REASON and message:
        return _eviction_resource(message)
    if phase in TERMINAL_PHASES and termination_by_kubelet:
        return _eviction_resource(termination_by_kubelet)
    return None


def _eviction_resource(message: str) -> str | None:
    matched = _THRESHOLD_MESSAGE.match(message)
    if matched:
        return matched.group(1)
    if message.startswith(_LOCAL_STORAGE_MESSAGES):
        return Resource.EPHEMERAL_STORAGE.value
    return None


def compare(state: ShadowState, evictd: Iterable[ShadowEviction], kubelet: Iterable[ShadowEviction], now: float,
            window_s: float = DEFAULT_MATCH_WINDOW_S) -> tuple[ShadowState, list[Comparison]]:
    """Add this cycle's evictions of both sides; return the new state and the comparisons that are settled."""
    decided = tuple(d for d in state.decided if now - d.at <= window_s)
    recent = {d.pod_uid for d in decided}
    fresh = []
    for eviction in evictd:
        if eviction.pod_uid not in recent:
            fresh.append(eviction)
            recent.add(eviction.pod_uid)
    waiting_evictd = [*state.evictd, *fresh]
    waiting_kubelet = [*state.kubelet, *kubelet]
    settled: list[Comparison] = []

    # The same pod on both sides: agreed, whenever each was seen.
    for ours in list(waiting_evictd):
        theirs = next((k for k in waiting_kubelet if k.pod_uid == ours.pod_uid), None)
        if theirs is not None:
            settled.append(Comparison(Outcome.AGREE, ours, theirs))
            waiting_evictd.remove(ours)
            waiting_kubelet.remove(theirs)

    # Held for a whole window without its own pod on the other side: another pod, or nothing at all.
    for held in [e for e in waiting_evictd if now - e.at > window_s]:
        waiting_evictd.remove(held)
        other = _take_same_resource(held, waiting_kubelet, window_s)
        settled.append(Comparison(Outcome.EVICTD_ONLY if other is None else Outcome.DIFFERENT_POD, held, other))
    for late in [k for k in waiting_kubelet if now - k.at > window_s]:
        waiting_kubelet.remove(late)
        other = _take_same_resource(late, waiting_evictd, window_s)
        settled.append(Comparison(Outcome.KUBELET_ONLY if other is None else Outcome.DIFFERENT_POD, other, late))

    new_state = replace(state, evictd=tuple(waiting_evictd), kubelet=tuple(waiting_kubelet),
                        decided=decided + tuple(fresh))
    return new_state, settled


def _take_same_resource(
    eviction: ShadowEviction, others: list[ShadowEviction], window_s: float
) -> ShadowEviction | None:
    """Remove from `others` and return the earliest eviction for the same resource within the window, if any."""
    candidates = [o for o in others if o.resource == eviction.resource and abs(o.at - eviction.at) <= window_s]
    found = min(candidates, key=lambda o: o.at, default=None)
    if found is not None:
        others.remove(found)
    return found

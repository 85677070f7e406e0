"""Evicting a pod through the Kubernetes API, with a local fallback when the API cannot be reached.

The kubelet's steps, done from outside it:
1. record the decision in the journal (before anything is sent);
2. `DELETE pods/{name}` with the engine's grace period and a UID precondition, so the kubelet terminates that
   very pod (never a same-named successor). This comes before the status: the API server deletes a pod whose
   phase is already Failed at once, with no grace period (`podStrategy.CheckGracefulDelete`), so writing the
   status first would remove the object while its containers still run and ignore the chosen grace period;
3. `PATCH pods/{name}/status`: phase Failed, reason Evicted, the engine's message, and for threshold
   evictions the `DisruptionTarget` condition (reason TerminationByKubelet), so controllers and Job pod
   failure policies see an eviction. The patch carries the pod's UID, as the kubelet's status patches do, so
   it can never land on a same-named successor;
4. a Warning `Evicted` Event on the pod with the offending-container annotations.
A step that fails because the API is unreachable, throttled or erroring stays pending in the journal and is
retried every cycle (`replay`). If that happens for a hard-threshold or local-storage eviction,
the pod is stopped at once through the container runtime (`local_kill`) so the node is protected anyway; its
status, deletion and event are written when the API answers again. A pod that is gone (404) or was replaced
(409 on the UID precondition) before its deletion ends the entry: nothing is ever evicted twice. Once deleted,
a pod that is already gone or replaced only loses its status write; the event is still recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from evictd.core.engine import Eviction
from evictd.core.errors import EvictdError, KubeError
from evictd.kube.api import KubeApi
from evictd.kube.client import is_retryable
from evictd.kube.events import EventRecorder, ObjectRef, rfc3339
from evictd.kube.journal import EvictionJournal, JournalEntry

NOT_FOUND = 404
CONFLICT = 409
# A patch whose metadata.uid differs from the stored pod's is refused as an immutable-field change.
INVALID = 422
# For an immediate eviction the DELETE may hang no longer than this before the pod is stopped locally: a hung
# API must not leave the node unprotected for the whole request timeout.
IMMEDIATE_DELETE_TIMEOUT_S = 2.0


def status_patch(entry: JournalEntry, now: str) -> dict[str, Any]:
    """Return the strategic-merge patch of the evicted pod's status."""
    conditions = [{**condition, "lastTransitionTime": now} for condition in entry.conditions]
    status: dict[str, Any] = {"phase": entry.phase, "reason": entry.reason, "message": entry.message}
    if conditions:
        status["conditions"] = conditions
    # The UID acts as a precondition (as in the kubelet's status patches): a same-named successor refuses it.
    return {"metadata": {"uid": entry.uid}, "status": status}


def journal_entry(eviction: Eviction, decided_at: float) -> JournalEntry:
    """Return the journal entry of a decided eviction."""
    conditions = []
    for condition in eviction.conditions:
        item: dict[str, Any] = {"type": condition.type, "status": condition.status, "reason": condition.reason,
                                "message": condition.message}
        if condition.observed_generation:
            item["observedGeneration"] = condition.observed_generation
        conditions.append(item)
    return JournalEntry(
        uid=eviction.pod.uid,
        namespace=eviction.pod.namespace,
        name=eviction.pod.name,
        signal=eviction.signal,
        # The DELETE carries what the pod really gets: an override of 0 would mean a forced deletion there.
        grace_period_s=eviction.effective_grace_period_s,
        message=eviction.message,
        reason=eviction.reason,
        phase=eviction.phase,
        conditions=conditions,
        annotations=dict(eviction.annotations),
        decided_at=decided_at,
    )


class KubePodEvictor:
    """A PodEvictor writing to the API, journaled, with a local fallback for immediate evictions."""

    def __init__(
        self,
        api: KubeApi,
        journal: EvictionJournal,
        events: EventRecorder,
        *,
        local_kill: Callable[[Eviction], object] | None = None,
        timeout_s: float = 10.0,
        on_api_error: Callable[[KubeError], None] | None = None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = api
        self._journal = journal
        self._events = events
        self._local_kill = local_kill
        self._timeout_s = timeout_s
        self._on_api_error = on_api_error
        self._wall_clock = wall_clock

    def use_local_kill(self, local_kill: Callable[[Eviction], object]) -> None:
        """Stop pods through the container runtime when the API is down (a runtime that answered late)."""
        self._local_kill = local_kill

    def evict(self, eviction: Eviction) -> None:
        """Carry out one eviction. Raises EvictdError when it could not be completed now (it stays pending)."""
        entry = journal_entry(eviction, time.time())
        self._journal.record(entry)
        # Hard thresholds and local-storage limits act at once (1 s); soft ones can wait for the API.
        immediate = eviction.threshold is None or eviction.threshold.is_hard
        failure = self._advance(entry, delete_timeout_s=IMMEDIATE_DELETE_TIMEOUT_S if immediate else None)
        if failure is None:
            return
        # Once the DELETE went through, the kubelet terminates the pod: only the status or event write is late.
        progress = self._journal.get(entry.uid)
        deleted = progress is not None and progress.deleted
        if immediate and not deleted and is_retryable(failure) and self._local_kill is not None:
            try:
                self._local_kill(eviction)
            except EvictdError as exc:
                raise EvictdError(f"API unreachable ({failure}) and local stop failed: {exc}") from None
            self._journal.update(entry.uid, stopped_locally=True)
            raise KubeError(failure.verb, failure.status,
                            f"{failure.detail}; pod stopped through the container runtime, API writes pending")
        raise failure

    def replay(self) -> list[KubeError]:
        """Retry the missing API steps of every pending eviction; return the errors of this round."""
        errors = []
        for entry in self._journal.pending():
            failure = self._advance(entry)
            if failure is not None:
                errors.append(failure)
                if is_retryable(failure):
                    break  # the API is still unwell: the rest waits for the next cycle
        self._journal.forget_finished(time.time())
        return errors

    def _advance(self, entry: JournalEntry, delete_timeout_s: float | None = None) -> KubeError | None:
        """Run the missing API steps of `entry`; return the error that stopped it, if any."""
        timeout_s = min(self._timeout_s, delete_timeout_s) if delete_timeout_s else self._timeout_s
        steps: tuple[tuple[str, Callable[[JournalEntry], None]], ...] = (
            ("deleted", lambda e: self._delete(e, timeout_s)),
            ("status_written", self._write_status),
            ("event_written", self._record_event),
        )
        for flag, step in steps:
            if getattr(entry, flag):
                continue
            try:
                step(entry)
            except KubeError as exc:
                if self._on_api_error is not None:
                    self._on_api_error(exc)
                if flag == "deleted" and exc.status in (NOT_FOUND, CONFLICT):
                    # Gone, or replaced by a pod of the same name: nothing left to evict. Say why in the journal.
                    self._journal.update(entry.uid, status_written=True, deleted=True, event_written=True,
                                         done_at=time.time(), extra={"ended": f"{exc.status}: {exc.detail}"})
                    return None
                if flag == "status_written" and exc.status in (NOT_FOUND, CONFLICT, INVALID):
                    # Deleted already, and since gone (terminated) or replaced (the UID refused): the status has
                    # no pod left to go on, but the eviction happened and its event is still recorded.
                    entry = self._journal.update(entry.uid, status_written=True,
                                                 extra={**entry.extra, "status": f"{exc.status}: {exc.detail}"})
                    continue
                return exc
            entry = self._journal.update(entry.uid, **{flag: True})
        self._journal.update(entry.uid, done_at=time.time())
        return None

    def _write_status(self, entry: JournalEntry) -> None:
        self._api.patch_pod_status(entry.namespace, entry.name, status_patch(entry, rfc3339(self._wall_clock())),
                                   timeout_s=self._timeout_s)

    def _delete(self, entry: JournalEntry, timeout_s: float) -> None:
        body = {"gracePeriodSeconds": entry.grace_period_s, "preconditions": {"uid": entry.uid}}
        self._api.delete_pod(entry.namespace, entry.name, body, timeout_s=timeout_s)

    def _record_event(self, entry: JournalEntry) -> None:
        ref = ObjectRef(kind="Pod", name=entry.name, namespace=entry.namespace, uid=entry.uid)
        self._events.record(ref, "Warning", entry.reason, entry.message, entry.annotations)

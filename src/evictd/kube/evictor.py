"""Evicting a pod through the Kubernetes API, with a local fallback when the API cannot be reached.

In this order (docs/kubernetes-api.md, "Evicting a pod through the API"): the decision to the journal first; for
threshold evictions a status PATCH with the `DisruptionTarget` condition alone (UID-checked); `DELETE` with the engine's
grace period and a UID precondition; a Warning `Evicted` Event with the offending-container annotations and the decision
id. A failed step stays pending in the journal and is retried every cycle (`replay`). An immediate eviction (hard
threshold, local storage) also stops the pod on the node at once, on a thread beside the writes, through the runtime
(`local_kill`) or its cgroup (`RuntimeSlot`), as the kubelet kills what it evicts itself. After an unanswered request
the API is not asked again for a while (`evictd.core.unanswered`). A pod gone or replaced before our DELETE ends the
entry (never evicted twice); after it, a 404 or refused UID means the eviction happened. With
`softEvictionsThroughEvictionAPI` a soft eviction POSTs `pods/{name}/eviction` instead (`post_eviction`, off the loop;
429/403 raise EvictionRefused); only an accepted one is journaled (`note_api_eviction`), never stopped locally.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Eviction, FollowUp, FollowUpKind
from evictd.core.errors import EvictdError, EvictionRefused, KubeError
from evictd.core.pods import FrozenMap
from evictd.core.unanswered import Unanswered
from evictd.cri import NO_RUNTIME, Runtime
from evictd.kube.api import KubeApi
from evictd.kube.client import is_retryable
from evictd.kube.events import NOT_FOUND, EventRecorder, ObjectRef, rfc3339
from evictd.kube.journal import ApiStep, EvictionJournal, JournalEntry, Outcome

CONFLICT = 409
# A patch whose metadata.uid differs from the stored pod's is refused as an immutable-field change.
INVALID = 422
# An immediate eviction's condition write and DELETE may each hang this long before the pod is stopped locally.
IMMEDIATE_REQUEST_TIMEOUT_S = 2.0
# The Eviction API's "not now": a disruption budget or throttling (429), an admission webhook (403).
EVICTION_REFUSALS = (429, 403)
# The cause the API server adds to a 429 for a disruption budget (policyv1.DisruptionBudgetCause).
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
_BUDGET_NAME = re.compile(r"The disruption budget (\S+) ")
# The Evicted Event's annotation naming the decision (`<run>/<cycle>` of the flight recording).
DECISION_ANNOTATION = "evictd.io/decision"


def condition_patch(entry: JournalEntry, now: str) -> dict[str, Any]:
    """Return the strategic-merge patch adding the eviction's pod conditions (merged by type) to the status."""
    conditions = [{**condition.to_json(), "lastTransitionTime": now} for condition in entry.conditions]
    # The UID acts as a precondition (as in the kubelet's status patches): a same-named successor refuses it.
    return {"metadata": {"uid": entry.uid}, "status": {"conditions": conditions}}


def journal_entry(eviction: Eviction, decided_at: float, decision: str | None = None) -> JournalEntry:
    """Return the journal entry of a decided eviction (the Event's annotations name `decision`, if any)."""
    annotations = dict(eviction.annotations)
    if decision is not None:
        annotations[DECISION_ANNOTATION] = decision
    return JournalEntry(
        uid=eviction.pod.uid,
        namespace=eviction.pod.namespace,
        name=eviction.pod.name,
        signal=eviction.signal,
        # The DELETE carries what the pod really gets: an override of 0 would mean a forced deletion there.
        grace_period_s=eviction.effective_grace_period_s,
        message=eviction.message,
        reason=eviction.reason,
        conditions=eviction.conditions,
        annotations=FrozenMap(annotations),
        decided_at=decided_at,
    )


def eviction_body(entry: JournalEntry) -> dict[str, Any]:
    """Return the policy/v1 Eviction of `entry`: the grace period and UID precondition its DELETE would carry."""
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": entry.name, "namespace": entry.namespace},
            "deleteOptions": {"gracePeriodSeconds": entry.grace_period_s, "preconditions": {"uid": entry.uid}}}


def refused_budget(error: KubeError) -> str:
    """The PodDisruptionBudget an Eviction API refusal names ("" when it names none)."""
    for reason, message in error.causes:
        match = _BUDGET_NAME.match(message)
        if reason == DISRUPTION_BUDGET_CAUSE and match:
            return match.group(1)
    return ""


class LocalStop:
    """`stop` run on a thread of its own beside the caller's API writes (on the caller's where none can start);
    `result` waits for it and returns how the pod was stopped, or raises what the stop raised."""

    def __init__(self, stop: Callable[[], str | None]) -> None:
        self._stop = stop
        self._how: str | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = threading.Thread(target=self._run, name="evictd-local-stop",
                                                                 daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # "can't start new thread": the node has no task left for one
            self._thread = None
            self._run()

    def _run(self) -> None:
        try:
            self._how = self._stop() or "through the container runtime"
        except BaseException as exc:  # raised to the caller by `result`
            self._error = exc

    def result(self) -> str:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._how is not None
        return self._how


class KubePodEvictor:
    """A PodEvictor writing to the API, journaled, stopping the pod of an immediate eviction on the node at once."""

    def __init__(self, api: KubeApi, journal: EvictionJournal, events: EventRecorder, *, runtime: Runtime = NO_RUNTIME,
                 timeout_s: float = 10.0, on_api_error: Callable[[KubeError], None] = lambda error: None,
                 on_local_stop: Callable[[Eviction, str | None, EvictdError | None], None] =
                 lambda eviction, how, error: None,
                 clock: Clock = SYSTEM_CLOCK, decision: Callable[[], str | None] = lambda: None) -> None:
        self._api = api
        # An immediate eviction the API took: how its pod was stopped locally, or why not (one of the two is None).
        self._on_local_stop = on_local_stop
        self._decision = decision  # the id of the decision under way (`recording.CurrentDecision`)
        self._journal = journal
        self._events = events
        self._runtime = runtime
        self._timeout_s = timeout_s
        self._on_api_error = on_api_error
        self._clock = clock
        self._unanswered = Unanswered()  # the last request the API left unanswered

    def _now(self) -> float:
        return self._clock.wall().timestamp()

    def _not_asked(self, verb: str) -> KubeError | None:
        """The error standing for a request not sent after one went unanswered (`Unanswered`); None: ask away."""
        not_asked = self._unanswered.not_asked("request", self._clock.monotonic())
        return None if not_asked is None else KubeError(verb, None, not_asked)

    def evict(self, eviction: Eviction) -> None:
        """Carry out one eviction. Raises EvictdError when it could not be completed now (it stays pending)."""
        entry = journal_entry(eviction, self._now(), self._decision())
        self._journal.record(entry)
        # Hard thresholds and local-storage limits act at once: stopped on the node beside the writes.
        immediate = eviction.threshold is None or eviction.threshold.is_hard
        stop = LocalStop(lambda: self._runtime.stop_pod(eviction)) if immediate and self._runtime.can_stop else None
        failure = self._not_asked("delete pods") if stop is not None else None
        if failure is None:
            failure = self._advance(entry, immediate_timeout_s=IMMEDIATE_REQUEST_TIMEOUT_S if immediate else None)
        if stop is None:
            if failure is not None:
                raise failure
            return
        try:
            how = stop.result()
        except EvictdError as exc:
            if failure is None:  # the API took the eviction: the kubelet stops the pod
                self._on_local_stop(eviction, None, exc)
                return
            raise EvictdError(f"API unreachable ({failure}) and local stop failed: {exc}") from None
        self._journal.note_stopped_locally(entry.uid)
        if failure is None:
            self._on_local_stop(eviction, how, None)
            return
        raise KubeError(failure.verb, failure.status, f"{failure.detail}; pod stopped {how}, API writes pending")

    def follow_up(self, eviction: Eviction) -> FollowUp:
        """Follow up the earlier eviction of `eviction`'s pod, which a hard threshold ranked first again while it still
        runs: never a second eviction. Evicted with a longer grace, it is deleted again with `eviction`'s (once: the
        journal then holds the shorter one) and stopped on the node; evicted with it already, it is stopped on the node
        again (the kubelet may have restarted it before it saw the deletion). Raises EvictdError (nothing journaled)."""
        entry = self._journal.get(eviction.pod.uid)
        grace_s = eviction.effective_grace_period_s
        stop = LocalStop(lambda: self._runtime.stop_pod(eviction)) if self._runtime.can_stop else None
        if entry.grace_period_s > grace_s:
            failure = self._not_asked("delete pods") or self._delete_again(entry, grace_s)
            how = f"deleted with a {grace_s} s grace period (its eviction gave {entry.grace_period_s} s)"
            if failure is None:
                self._journal.record(replace(entry, grace_period_s=grace_s))
            if stop is None:
                if failure is not None:
                    raise failure
                return FollowUp(eviction, FollowUpKind.ESCALATED, how)
            stopped = stop.result()
            self._journal.note_stopped_locally(entry.uid)
            if failure is not None:
                raise KubeError(failure.verb, failure.status, f"{failure.detail}; pod stopped {stopped}")
            return FollowUp(eviction, FollowUpKind.ESCALATED, f"{how}, and stopped {stopped}")
        if stop is None:
            return FollowUp(eviction, FollowUpKind.LEFT_TO_KUBELET, "no container runtime to stop it here")
        stopped = stop.result()
        self._journal.note_stopped_locally(entry.uid)
        return FollowUp(eviction, FollowUpKind.STOPPED_AGAIN, f"stopped again {stopped}")

    def _delete_again(self, entry: JournalEntry, grace_s: int) -> KubeError | None:
        """DELETE `entry`'s pod again with `grace_s` (the API shortens a deletion's grace period, never lengthens
        it); the error, if any. A 404 or refused UID: the pod is gone, nothing left to shorten."""
        try:
            self._delete(replace(entry, grace_period_s=grace_s), min(self._timeout_s, IMMEDIATE_REQUEST_TIMEOUT_S))
        except KubeError as exc:
            self._on_api_error(exc)
            self._unanswered.at = self._clock.monotonic() if exc.status is None else None
            return None if exc.status in (NOT_FOUND, CONFLICT) else exc
        self._unanswered.at = None
        return None

    def stop_overdue(self, eviction: Eviction) -> str | None:
        """Stop locally the pod of `eviction`, taken by the API but still running past its grace period, and journal
        it so. Returns how it was stopped; None when nothing is to be done here (no way to stop it, or done already).
        Raises EvictdError."""
        uid = eviction.pod.uid
        if not self._runtime.can_stop or uid not in self._journal.evicted_uids() \
                or self._journal.get(uid).stopped_locally:
            return None
        how = self._runtime.stop_pod(eviction) or "through the container runtime"
        self._journal.note_stopped_locally(uid)
        return how

    def post_eviction(self, eviction: Eviction, timeout_s: float) -> None:
        """Ask the Eviction API to evict `eviction`'s pod within `timeout_s`, and do nothing else (no journal, no
        event: safe off the loop). Raises EvictionRefused when the API will not now, KubeError when no usable
        answer came (not an eviction)."""
        entry = journal_entry(eviction, self._now())
        try:
            self._api.evict_pod(entry.namespace, entry.name, eviction_body(entry), timeout_s=timeout_s)
        except KubeError as exc:
            if exc.status in EVICTION_REFUSALS:
                raise EvictionRefused(entry.key, exc, refused_budget(exc)) from None
            self._on_api_error(exc)
            raise

    def note_api_eviction(self, eviction: Eviction, decided_at: float, decision: str | None) -> bool:
        """Journal an accepted Eviction API eviction and record its event (pending when that fails). False, journaling
        nothing, when the pod was evicted the kubelet's way meanwhile: not evicted twice."""
        if eviction.pod.uid in self._journal.evicted_uids():
            return False
        entry = replace(journal_entry(eviction, decided_at, decision), eviction_api=True, delete_sent=True,
                        done=frozenset({ApiStep.CONDITION, ApiStep.DELETION}))
        self._journal.record(entry)
        self._advance(entry)  # the event; a failure stays pending for `replay`
        return True

    def decision(self) -> str | None:
        """The id of the decision under way (the Evicted event's annotation), read on the loop."""
        return self._decision()

    def now(self) -> float:
        """Wall-clock seconds, as the journal's times are."""
        return self._now()

    def replay(self, timeout_s: float | None = None) -> list[KubeError]:
        """Retry the missing API steps of every pending eviction (each request waiting at most `timeout_s`, if given,
        else the evictor's timeout); return the errors of this round."""
        errors = []
        for entry in self._journal.pending():
            if entry.eviction_api and ApiStep.DELETION not in entry.done:
                # A request an older evictd journaled before sending: no eviction; the pod stays a candidate.
                self._journal.forget(entry.uid)
                continue
            failure = self._not_asked("replay pending eviction writes") or self._advance(entry, timeout_s)
            if failure is not None:
                errors.append(failure)
                if is_retryable(failure):
                    break  # the API is still unwell: the rest waits for the next cycle
        self._journal.forget_finished(self._now())
        self._journal.flush()  # a journal that could not be written is written as soon as it can be
        return errors

    def _advance(self, entry: JournalEntry, immediate_timeout_s: float | None = None) -> KubeError | None:
        """Run the missing API steps of `entry`; return the error that stopped it, if any."""
        # Until the DELETE went through, an immediate eviction's local stop waits on these requests.
        timeout_s = min(self._timeout_s, immediate_timeout_s) if immediate_timeout_s else self._timeout_s
        requests: tuple[tuple[ApiStep, Callable[[JournalEntry], None]], ...] = (
            (ApiStep.CONDITION, lambda e: self._write_condition(e, timeout_s)),
            (ApiStep.DELETION, lambda e: self._delete(e, timeout_s)),
            (ApiStep.EVENT, lambda e: self._record_event(e, timeout_s)),
        )
        for step, request in requests:
            if step in entry.done:
                continue
            try:
                request(entry)
            except KubeError as exc:
                self._on_api_error(exc)
                self._unanswered.at = self._clock.monotonic() if exc.status is None else None
                if exc.status not in (NOT_FOUND, CONFLICT, INVALID) or step is ApiStep.EVENT:
                    return exc
                answer = f"{exc.status}: {exc.detail}"
                # `entry` is as it was before this step: delete_sent says a DELETE went out in an earlier attempt.
                if step is ApiStep.DELETION and entry.delete_sent:
                    # An earlier DELETE of ours may have gone through unanswered: the kubelet removed the pod. Evicted.
                    entry = self._journal.note_settled(entry.uid, Outcome.DELETED, answer, self._now())
                    continue
                # Gone, or replaced by a pod of the same name, before evictd deleted it: nothing left to evict.
                self._journal.note_settled(entry.uid, Outcome.ENDED, answer, self._now())
                return None
            self._unanswered.at = None
            entry = self._journal.note_step_done(entry.uid, step)
        self._journal.note_finished(entry.uid, self._now())
        return None

    def _write_condition(self, entry: JournalEntry, timeout_s: float) -> None:
        # Local-storage evictions get no condition; the Eviction API's server writes its own.
        if not entry.conditions or entry.eviction_api:
            return
        self._api.patch_pod_status(entry.namespace, entry.name, condition_patch(entry, rfc3339(self._clock.wall())),
                                   timeout_s=timeout_s)

    def _delete(self, entry: JournalEntry, timeout_s: float) -> None:
        if not entry.delete_sent:
            self._journal.note_delete_sent(entry.uid)
        body = {"gracePeriodSeconds": entry.grace_period_s, "preconditions": {"uid": entry.uid}}
        self._api.delete_pod(entry.namespace, entry.name, body, timeout_s=timeout_s)

    def _record_event(self, entry: JournalEntry, timeout_s: float) -> None:
        ref = ObjectRef(kind="Pod", name=entry.name, namespace=entry.namespace, uid=entry.uid)
        self._events.record(ref, "Warning", entry.reason, entry.message, entry.annotations, timeout_s=timeout_s)

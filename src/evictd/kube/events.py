"""Kubernetes Events, as the kubelet records them: on pods (Evicted) and on the node (pressure, reclaim).

core/v1 Events with `source.component: evictd` and `reportingComponent: evictd`, the node as
`source.host`/`reportingInstance`. What is written is what client-go's event correlator would write
(`evictd.kube.event_correlator`): a repeat of an event PATCHes its `count`, `lastTimestamp` and `message`;
similar events (another message) past ten are combined; each object's token bucket bounds the writes about
it (25, then one per 5 minutes). Annotations (the kubelet's offending-container annotations on Evicted
events) go on the Event's metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import KubeError
from evictd.kube.api import KubeApi
from evictd.kube.event_correlator import Drop, EventCorrelator, Occurrence, Patch

COMPONENT = "evictd"
NOT_FOUND = 404


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """What an event is about."""

    kind: str
    name: str
    namespace: str
    uid: str


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Creates, counts on, combines or drops core/v1 Events. In dry-run (`dry_run`: a flag, or asked before each
    event when it is a function: the node's mode) it only returns what would be written."""

    def __init__(self, api: KubeApi | None, node_name: str, *, dry_run: bool | Callable[[], bool] = False,
                 timeout_s: float = 10.0, clock: Clock = SYSTEM_CLOCK) -> None:
        self._given_api = api
        self._dry_run = dry_run
        self._node = node_name
        self._timeout_s = timeout_s
        self._clock = clock
        self._correlator = EventCorrelator()

    @property
    def _api(self) -> KubeApi | None:
        """The API to write to now: None in dry-run."""
        dry = self._dry_run() if callable(self._dry_run) else self._dry_run
        return None if dry else self._given_api

    def node_ref(self) -> ObjectRef:
        """The node as the kubelet refers to it in events (its name doubles as UID; namespace "")."""
        return ObjectRef(kind="Node", name=self._node, namespace="", uid=self._node)

    def record(self, ref: ObjectRef, event_type: str, reason: str, message: str,
               annotations: Mapping[str, str] | None = None, *,
               timeout_s: float | None = None) -> dict[str, Any] | None:
        """Write one event (create it, or PATCH its count), each request waiting at most `timeout_s` (None: the
        recorder's); return the body sent, or None when the object's token bucket is empty and nothing was. Raises
        KubeError."""
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        occurrence = Occurrence((ref.kind, ref.namespace, ref.name, ref.uid), event_type, reason, message)
        verdict = self._correlator.decide(occurrence, self._clock.monotonic())
        now = self._clock.wall()
        namespace = ref.namespace or "default"
        if isinstance(verdict, Drop):
            return None
        if isinstance(verdict, Patch):
            # client-go's patch of a repeat: count, lastTimestamp and message (a combined event's changes).
            patch: dict[str, Any] = {"count": verdict.count, "lastTimestamp": rfc3339(now), "message": verdict.message}
            try:
                api = self._api
                if api is not None:
                    api.patch_event(namespace, verdict.name, patch, timeout_s=timeout_s)
                return patch
            except KubeError as exc:
                if exc.status != NOT_FOUND:
                    raise  # still counted: the next PATCH carries the count
                # The event was removed meanwhile: create it anew, as client-go's recorder does.
                self._correlator.forget(verdict.key)
        # A combined event carries no annotations (client-go builds it from the object, type, reason and source).
        combined = verdict.key.message is None
        name = f"{ref.name}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {} if combined else dict(annotations or {})},
            "involvedObject": {"kind": ref.kind, "name": ref.name, "namespace": ref.namespace, "uid": ref.uid,
                               "apiVersion": "v1"},
            "reason": reason,
            "message": verdict.message,
            "type": event_type,
            "source": {"component": COMPONENT, "host": self._node},
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": self._node,
        }
        api = self._api
        if api is not None:
            try:
                api.create_event(namespace, body, timeout_s=timeout_s)
            except KubeError:
                self._correlator.forget(verdict.key)
                raise
        self._correlator.created(verdict.key, name)
        return body

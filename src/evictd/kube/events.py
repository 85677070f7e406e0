"""Kubernetes Events, as the kubelet records them: on pods (Evicted) and on the node (pressure, reclaim).

core/v1 Events with `source.component: evictd` and `reportingComponent: evictd`, the node as
`source.host`/`reportingInstance`. Like client-go's event correlator, a repeat of the same event (object,
type, reason, message) within ten minutes is aggregated into the existing Event (`count` + 1, new
`lastTimestamp`) instead of creating another one. Annotations (the kubelet's offending-container
annotations on Evicted events) go on the Event's metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import KubeError
from evictd.kube.api import KubeApi

COMPONENT = "evictd"
# client-go's event correlator aggregates identical events within this window (maxLruCacheEntries aside).
AGGREGATION_WINDOW_S = 600.0
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
    """Creates (or aggregates into) core/v1 Events. `dry_run` only returns what would be written."""

    def __init__(self, api: KubeApi | None, node_name: str, *, dry_run: bool = False, timeout_s: float = 10.0,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._api = None if dry_run else api
        self._node = node_name
        self._timeout_s = timeout_s
        self._clock = clock
        # (object UID, type, reason, message) -> the Event's name, its count, when it was last written.
        self._recent: dict[tuple[str, str, str, str], tuple[str, int, datetime]] = {}

    def node_ref(self) -> ObjectRef:
        """The node as the kubelet refers to it in events (its name doubles as UID; namespace "")."""
        return ObjectRef(kind="Node", name=self._node, namespace="", uid=self._node)

    def record(self, ref: ObjectRef, event_type: str, reason: str, message: str,
               annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Write one event (or count a repeat); return the Event body. Raises KubeError."""
        now = self._clock.wall()
        namespace = ref.namespace or "default"
        key = (ref.uid, event_type, reason, message)
        previous = self._recent.get(key)
        if previous is not None and (now - previous[2]).total_seconds() < AGGREGATION_WINDOW_S:
            name, count, _ = previous
            body: dict[str, Any] = {"count": count + 1, "lastTimestamp": rfc3339(now)}
            try:
                if self._api is not None:
                    self._api.patch_event(namespace, name, body, timeout_s=self._timeout_s)
                self._recent[key] = (name, count + 1, now)
                return body
            except KubeError as exc:
                if exc.status != NOT_FOUND:
                    raise
                # The event was removed meanwhile: create it anew, as client-go's recorder does.
                del self._recent[key]
        name = f"{ref.name}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
            "involvedObject": {"kind": ref.kind, "name": ref.name, "namespace": ref.namespace, "uid": ref.uid,
                               "apiVersion": "v1"},
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": COMPONENT, "host": self._node},
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": self._node,
        }
        if self._api is not None:
            self._api.create_event(namespace, body, timeout_s=self._timeout_s)
        self._recent = {k: v for k, v in self._recent.items() if (now - v[2]).total_seconds() < AGGREGATION_WINDOW_S}
        self._recent[key] = (name, 1, now)
        return body


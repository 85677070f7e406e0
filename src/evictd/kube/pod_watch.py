"""The pods bound to this node, kept current by a list and a watch on the Kubernetes API.

A background thread lists `pods?fieldSelector=spec.nodeName=<node>` in pages bounded in bytes (as client-go's
reflector pages; a tenant's large pods never decode all at once), then watches from the list's `resourceVersion`,
resuming after disconnections, relisting on `410 Gone`, reconnecting with capped, jittered backoff. A pod is
parsed once per `metadata.resourceVersion`; what the parser dropped past its caps goes to `on_dropped` when first
seen and when it changes.

Staleness: before the first list succeeds `active_pods()` raises (the manager then ranks the node's own pods, for
hard thresholds only: `cluster.NodeFallbackPods`). After a `410 Gone`, and while the API is unreachable, the last
known pods are served (`last_error` says why the watch is down) until a relist replaces them.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
from collections.abc import Callable
from typing import Any

from evictd.core.errors import DecodeError, KubeError
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import API_SERVER_SOURCE, CONFIG_SOURCE_ANNOTATION, Pod
from evictd.kube.api import AnswerTooLarge, KubeApi

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Server-side watch timeout: the API server ends the watch after this; the watcher resumes at once.
WATCH_TIMEOUT_S = 300
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
# The list's pages. Each answer is read only while it stays within LIST_PAGE_MAX_BYTES: at the API's 256 KiB of
# annotations per pod, a whole list of 100 such pods was 25 MiB, three times that while decoded (evictd's peak RSS
# was about 150 MiB; with pages of 10 it is about 60 MiB, bench/tenant_annotations.py). The first page asks for
# LIST_FIRST_PAGE_PODS pods; each next page for as many pods of the last page's mean size as fill
# LIST_PAGE_TARGET_BYTES, at most LIST_PAGE_MAX_PODS (client-go's reflector's page): ordinary pods (1-5 KiB) are
# listed 500 at a time (pages of 10 made 500 requests for 5,000 pods, which took longer than a test API server
# could answer before the daemon's first cycles, and cost a real API server as many requests per relist). An
# answer over the bound (large pods after small ones) is dropped unread and its page asked again for
# LIST_PAGE_SHRINK times fewer pods. An expired page (410) relists from the start, as any 410 does.
LIST_FIRST_PAGE_PODS = 10
LIST_PAGE_MAX_PODS = 500
LIST_PAGE_TARGET_BYTES = 2 << 20
LIST_PAGE_MAX_BYTES = 4 << 20
LIST_PAGE_SHRINK = 8


class _Gone(Exception):
    """The watch's resourceVersion has been compacted away: relist."""


class PodWatcher:
    """A PodSource fed by list+watch. `start()` runs the watch thread; `stop()` ends it."""

    def __init__(self, api: KubeApi, node_name: str, *, request_timeout_s: float = 10.0,
                 on_error: Callable[[KubeError], None] = lambda error: None,
                 on_dropped: Callable[[Pod], None] = lambda pod: None,
                 jitter: Callable[[], float] = random.random) -> None:
        self._api = api
        self._jitter = jitter  # each backoff waits 1 + jitter() times itself: client-go's wait.Jitter, factor 1.0
        self._selector = f"spec.nodeName={node_name}"
        self._timeout_s = request_timeout_s
        self._on_error = on_error
        self._on_dropped = on_dropped
        self._pods: dict[str, Pod] = {}
        # The resourceVersion each held pod was parsed from (a pod is parsed once per version).
        self._versions: dict[str, str] = {}
        self._resource_version: str | None = None
        self._events_since_list = 0
        self._synced = False
        self.last_error: KubeError | None = None
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._watch_opened = False

    def active_pods(self) -> list[Pod]:
        """Return the node's non-terminal pods; raise KubeError while the cache is known to be wrong."""
        with self._changed:
            if not self._synced:
                detail = str(self.last_error) if self.last_error else "the first list has not completed"
                raise KubeError("list pods", None, f"pod cache not synced: {detail}")
            return [pod for pod in self._pods.values() if pod.status_phase not in TERMINAL_PHASES]

    def pod(self, uid: str) -> Pod | None:
        with self._changed:
            return self._pods.get(uid)

    def pods(self) -> list[Pod]:
        """Every pod of the node the cache holds, terminal ones included (empty before the first list)."""
        with self._changed:
            return list(self._pods.values())

    def is_synced(self) -> bool:
        """True while the cache reflects a completed list (all sources ready, in kubelet terms)."""
        with self._changed:
            return self._synced

    def wait_first_answer(self, timeout_s: float) -> bool:
        """Wait until the first list succeeded or failed (at most `timeout_s`); return whether it succeeded."""
        with self._changed:
            self._changed.wait_for(lambda: self._synced or self.last_error is not None, timeout_s)
            return self._synced

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="evictd-pod-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        _interrupt(self._response)  # None: no watch open
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = BACKOFF_INITIAL_S
        while not self._stopping.is_set():
            self._watch_opened = False
            try:
                if self._resource_version is None:
                    self._relist()
                self._watch()
                backoff = BACKOFF_INITIAL_S
            except _Gone:
                # The watch's version expired: relist. The cache stays the last correct view meanwhile (it is
                # what the last list and events said), so cycles keep acting on it. A watch that expires before
                # it delivered anything is a storm (an API server that cannot keep up): back off before each
                # relist as client-go's reflector does, with jitter, so a thousand nodes do not relist at once.
                with self._changed:
                    self._resource_version = None
                if self._events_since_list == 0:
                    self._stopping.wait(backoff * (1.0 + self._jitter()))
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                else:
                    backoff = BACKOFF_INITIAL_S
            except Exception as exc:  # KubeError, or a broken stream (reset, truncated chunk): reconnect
                error = exc if isinstance(exc, KubeError) else KubeError("watch pods", None,
                                                                           f"{type(exc).__name__}: {exc}")
                if self._watch_opened:
                    # The API answered this time: only an unbroken run of failures grows the backoff.
                    backoff = BACKOFF_INITIAL_S
                self._failed(error)
                self._stopping.wait(backoff * (1.0 + self._jitter()))
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _failed(self, error: KubeError) -> None:
        if self._stopping.is_set():
            return
        with self._changed:
            self.last_error = error
            if error.status == 410:  # relist; the cache stays the last correct view meanwhile
                self._resource_version = None
            self._changed.notify_all()
        self._on_error(error)

    def _relist(self) -> None:
        pods: dict[str, Pod] = {}
        versions: dict[str, str] = {}
        token: str | None = None
        limit = LIST_FIRST_PAGE_PODS
        while True:
            try:
                document, size = self._api.list_pods_page(self._selector, limit=limit, continue_token=token,
                                                          max_bytes=LIST_PAGE_MAX_BYTES, timeout_s=self._timeout_s)
            except AnswerTooLarge:
                if limit == 1:
                    raise  # one pod larger than the bound: the API server's own limit on objects is far below it
                limit = max(1, limit // LIST_PAGE_SHRINK)
                continue
            items = document.get("items") or []
            for item in items:
                uid, pod_version = _identity(item)
                pod = self._held(uid, pod_version) or self._parse(item)
                if pod is not None:
                    pods[pod.uid] = pod
                    versions[pod.uid] = pod_version
            metadata = document.get("metadata") or {}
            # Every page of a list is of the same snapshot, whose version the last page names too.
            version = str(metadata.get("resourceVersion", ""))
            token = metadata.get("continue") or None
            limit = next_page_limit(size, len(items))
            del document, items
            if token is None:
                break
        with self._changed:
            self._pods = pods
            self._versions = versions
            self._events_since_list = 0
            self._resource_version = version
            self._synced = True
            self.last_error = None
            self._changed.notify_all()

    def _watch(self) -> None:
        response = self._api.watch_pods(self._selector, self._resource_version, timeout_seconds=WATCH_TIMEOUT_S,
                                        timeout_s=WATCH_TIMEOUT_S + self._timeout_s)
        self._response = response
        self._watch_opened = True
        try:
            if self._stopping.is_set():
                return
            buffer = b""
            for chunk in response.stream(amt=65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        self._event(json.loads(line))
                if self._stopping.is_set():
                    return
        finally:
            self._response = None
            response.release_conn()

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise KubeError("watch pods", obj.get("code"), str(obj.get("message", obj)))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        # Parsed before the lock is taken (a tenant's 1.4 MB pod takes 0.2 s): the loop's `active_pods` never waits
        # on it. Only this thread changes the held pods, so reading them here unlocked is safe.
        pod = None
        if kind in ("ADDED", "MODIFIED"):
            uid, pod_version = _identity(obj)
            if self._held(uid, pod_version) is None:
                pod = self._parse(obj)
        with self._changed:
            if version:
                self._resource_version = str(version)
            self._events_since_list += 1
            if pod is not None:
                self._pods[pod.uid] = pod
                self._versions[pod.uid] = pod_version
            elif kind == "DELETED":
                uid = str((obj.get("metadata") or {}).get("uid"))
                self._pods.pop(uid, None)
                self._versions.pop(uid, None)
            self._changed.notify_all()

    def _held(self, uid: str, version: str) -> Pod | None:
        """The pod held for `uid` when it was parsed from `version` (never for an object without a version)."""
        if not version or self._versions.get(uid) != version:
            return None
        return self._pods.get(uid)

    def _parse(self, obj: dict[str, Any]) -> Pod | None:
        try:
            pod = pod_from_dict(as_api_pod(obj))
        except DecodeError:
            return None  # an object the API server should never send; skipping it beats crashing the watch
        if not pod.uid:
            return None
        held = self._pods.get(pod.uid)
        if pod.fields_dropped and (held is None or held.fields_dropped != pod.fields_dropped):
            self._on_dropped(pod)
        return pod


def _identity(obj: dict[str, Any]) -> tuple[str, str]:
    """The (uid, resourceVersion) of a pod object as the API sent it ("" for what is missing)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return "", ""
    return str(metadata.get("uid") or ""), str(metadata.get("resourceVersion") or "")


def next_page_limit(size_bytes: int, pods: int) -> int:
    """How many pods the next page of a list asks for, after a page of `pods` pods answered in `size_bytes`."""
    if pods == 0:
        return LIST_PAGE_MAX_PODS
    return max(1, min(LIST_PAGE_MAX_PODS, LIST_PAGE_TARGET_BYTES * pods // max(size_bytes, 1)))


def as_api_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as the kubelet holds a pod it received from the API server: config.source "api".

    The kubelet overwrites that annotation for every pod of the API source (pkg/kubelet/config/config.go), so
    a pod created or annotated with `kubernetes.io/config.source: file` is never taken for a static, critical
    pod. Anyone may write annotations; only where the pod came from counts. (Mirror pods stay mirror pods:
    that is their own annotation, and the kubelet never runs a pod that carries it.)
    """
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return obj
    annotations = metadata.get("annotations")
    annotations = {**annotations} if isinstance(annotations, dict) else {}
    annotations[CONFIG_SOURCE_ANNOTATION] = API_SERVER_SOURCE
    return {**obj, "metadata": {**metadata, "annotations": annotations}}


def _interrupt(response: Any) -> None:
    """Unblock the thread reading a watch response by shutting its socket down.

    `response.close()` cannot do it: it waits for the reader's buffer lock, i.e. for the next event or bookmark.
    """
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

"""PodWatcher (src/evictd/kube/pod_watch.py) against the test API server with evictd's API client.

The watcher lists the node's pods (`fieldSelector=spec.nodeName=<node>`), then watches from the list's
resourceVersion: resuming from the last version seen after a broken stream, relisting after 410 Gone, and
backing off while the API errors, serving the last known pods meanwhile.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client, pod_lists, pod_watches
from kube_objects import pod_manifest

from evictd.core.errors import KubeError
from evictd.core.pods import MAX_KEPT_TOLERATIONS
from evictd.kube.pod_watch import (
    BACKOFF_INITIAL_S,
    LIST_FIRST_PAGE_PODS,
    LIST_PAGE_MAX_BYTES,
    LIST_PAGE_MAX_PODS,
    PodWatcher,
)
from polling import wait_until

NODE = "node-a"
SYNC_TIMEOUT_S = 5.0


class ErrorLog:
    """Records every error the watcher reports, with the monotonic time it was reported."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entries: list[tuple[float, KubeError]] = []

    def __call__(self, error: KubeError) -> None:
        with self._lock:
            self.entries.append((time.monotonic(), error))

    def count(self) -> int:
        with self._lock:
            return len(self.entries)

    def times(self) -> list[float]:
        with self._lock:
            return [moment for moment, _ in self.entries]


StartWatcher = Callable[..., PodWatcher]


@pytest.fixture
def start_watcher(apiserver: ApiServer) -> Iterator[StartWatcher]:
    """Start PodWatchers for NODE (synced unless `synced=False`); all are stopped after the test."""
    started: list[tuple[PodWatcher, Any]] = []

    def start(*, synced: bool = True, **kwargs: Any) -> PodWatcher:
        client = evictd_api_client(apiserver)
        watcher = PodWatcher(client, NODE, **kwargs)
        started.append((watcher, client))
        watcher.start()
        if synced:
            assert wait_until(watcher.is_synced, SYNC_TIMEOUT_S), f"not synced: {watcher.last_error}"
        return watcher

    yield start
    for watcher, client in started:
        watcher.stop()
        client.close()


def names(watcher: PodWatcher) -> list[str]:
    return sorted(pod.name for pod in watcher.active_pods())


def names_once_synced(watcher: PodWatcher) -> list[str] | None:
    """The active pods' names, or None while a relist is under way (active_pods raises then, by design)."""
    try:
        return names(watcher)
    except KubeError:
        return None


def open_watch_count(apiserver: ApiServer) -> int:
    return apiserver.faults.open_watches


# --- list and watch ------------------------------------------------------------------------------------------


def test_initial_list_sees_only_this_nodes_pods_and_active_pods_skip_terminal_ones(
    apiserver: ApiServer, start_watcher: StartWatcher
) -> None:
    mine = apiserver.store.create_pod(pod_manifest("web", namespace="shop"))
    apiserver.store.create_pod(pod_manifest("db"))
    done = apiserver.store.create_pod(pod_manifest("job-done", phase="Succeeded"))
    failed = apiserver.store.create_pod(pod_manifest("evicted-before", phase="Failed"))
    apiserver.store.create_pod(pod_manifest("elsewhere", node_name="node-b"))
    apiserver.store.create_pod(pod_manifest("pending", node_name=None, phase="Pending"))
    list_rv = str(apiserver.store.resource_version)

    watcher = start_watcher()

    assert names(watcher) == ["db", "web"]
    web = watcher.pod(mine["metadata"]["uid"])
    assert web is not None and (web.namespace, web.name, web.node_name) == ("shop", "web", NODE)
    # Terminal pods stay known (for container GC) but are not active.
    finished = [watcher.pod(done["metadata"]["uid"]), watcher.pod(failed["metadata"]["uid"])]
    assert [p.status_phase if p else None for p in finished] == ["Succeeded", "Failed"]
    assert watcher.is_synced() and watcher.last_error is None
    [listed] = pod_lists(apiserver)
    assert listed.param("fieldSelector") == f"spec.nodeName={NODE}"
    assert wait_until(lambda: len(pod_watches(apiserver)) == 1)
    [watched] = pod_watches(apiserver)
    assert watched.param("fieldSelector") == f"spec.nodeName={NODE}"
    assert watched.param("resourceVersion") == list_rv
    assert watched.param("allowWatchBookmarks") in ("true", "True")


def test_the_list_is_read_in_pages_of_one_snapshot(apiserver: ApiServer, start_watcher: StartWatcher) -> None:
    """Pages bound what is read and decoded at once (issue #25: pods with 256 KiB of annotations each)."""
    count = LIST_FIRST_PAGE_PODS + 3
    for i in range(count):
        apiserver.store.create_pod(pod_manifest(f"web-{i:03d}"))
    list_rv = str(apiserver.store.resource_version)
    watcher = start_watcher()
    assert names(watcher) == [f"web-{i:03d}" for i in range(count)]
    pages = pod_lists(apiserver)
    assert [page.param("limit") for page in pages] == [str(LIST_FIRST_PAGE_PODS), str(LIST_PAGE_MAX_PODS)]
    assert [page.param("continue") is None for page in pages] == [True, False]
    assert wait_until(lambda: len(pod_watches(apiserver)) == 1)
    assert pod_watches(apiserver)[0].param("resourceVersion") == list_rv


def test_a_long_list_of_ordinary_pods_takes_a_few_requests(apiserver: ApiServer,
                                                           start_watcher: StartWatcher) -> None:
    """Issue #25: at 5,000 pods, pages of 10 pods took 500 requests, longer than the daemon's first cycles."""
    for i in range(1200):
        apiserver.store.create_pod(pod_manifest(f"web-{i:04d}"))
    watcher = start_watcher()
    assert len(watcher.active_pods()) == 1200
    assert len(pod_lists(apiserver)) <= 4, [page.param("limit") for page in pod_lists(apiserver)]


def test_large_pods_after_small_ones_are_asked_again_in_smaller_pages(apiserver: ApiServer,
                                                                      start_watcher: StartWatcher) -> None:
    """A page grown on small pods that meets large ones is dropped once over the bound and asked again smaller,
    so no answer larger than LIST_PAGE_MAX_BYTES is held whatever order the pods come in."""
    blob_bytes = 200 * 1024
    for i in range(LIST_FIRST_PAGE_PODS):
        apiserver.store.create_pod(pod_manifest(f"a-small-{i:02d}"))
    for i in range(30):
        pod = pod_manifest(f"b-large-{i:02d}")
        pod["metadata"]["annotations"] = {"tenant.example.com/blob": f"{i:02d}" * (blob_bytes // 2)}
        apiserver.store.create_pod(pod)
    watcher = start_watcher()
    assert len(watcher.active_pods()) == LIST_FIRST_PAGE_PODS + 30
    pages = [(page.param("continue"), int(page.param("limit") or 0)) for page in pod_lists(apiserver)]
    second = pages[1]
    assert second[1] == LIST_PAGE_MAX_PODS
    again = [limit for token, limit in pages[2:] if token == second[0]]
    assert again and again[0] < LIST_PAGE_MAX_PODS, pages
    # Every page over the bound was dropped and its page asked again for fewer pods.
    for (token, limit), (next_token, next_limit) in itertools.pairwise(pages[1:]):
        if limit * blob_bytes > LIST_PAGE_MAX_BYTES:
            assert (next_token, next_limit < limit) == (token, True), pages
    assert pages[-1][1] * blob_bytes <= LIST_PAGE_MAX_BYTES, pages


def test_added_modified_and_deleted_pods_are_reflected(apiserver: ApiServer, start_watcher: StartWatcher) -> None:
    watcher = start_watcher()
    assert names(watcher) == []

    created = apiserver.store.create_pod(pod_manifest("web"))
    apiserver.store.create_pod(pod_manifest("other-node", node_name="node-b"))
    uid = created["metadata"]["uid"]
    assert wait_until(lambda: names(watcher) == ["web"])

    apiserver.store.delete_pod("default", "web", grace_period_s=30)
    assert wait_until(lambda: (p := watcher.pod(uid)) is not None and p.deletion_timestamp is not None)
    assert names(watcher) == ["web"]  # terminating is still active: its containers may run

    apiserver.store.set_pod_status("default", "web", {"phase": "Failed", "reason": "Evicted"})
    assert wait_until(lambda: (p := watcher.pod(uid)) is not None and p.status_phase == "Failed")
    assert names(watcher) == []

    apiserver.finish_deletion("default", "web")
    assert wait_until(lambda: watcher.pod(uid) is None)
    # The pod of another node was never seen, not even through the watch.
    assert watcher.active_pods() == [] and len(pod_lists(apiserver)) == 1


def test_a_tenants_huge_pod_is_held_capped_reported_once_and_parsed_once_per_version(
    apiserver: ApiServer, start_watcher: StartWatcher
) -> None:
    """A Pending pod bound to the node with 13,650 tolerations (1.1 MB): held with MAX_KEPT_TOLERATIONS, reported
    to `on_dropped` once (not again for a relist or a change that drops as much), and not parsed again by a relist
    while its version is unchanged."""
    huge = pod_manifest("huge", namespace="tenant", phase="Pending")
    huge["spec"]["tolerations"] = [{"key": f"example.com/key-{i}", "operator": "Exists", "effect": "NoSchedule"}
                                   for i in range(13_650)]
    stored = apiserver.store.create_pod(huge)  # with the API server's two default tolerations
    uid, tolerations = stored["metadata"]["uid"], len(stored["spec"]["tolerations"])
    apiserver.store.create_pod(pod_manifest("plain"))
    dropped: list[tuple[str, dict[str, int]]] = []
    watcher = start_watcher(on_dropped=lambda pod: dropped.append((pod.key, dict(pod.fields_dropped))))
    held = watcher.pod(uid)
    assert held is not None and len(held.tolerations) == MAX_KEPT_TOLERATIONS
    assert dropped == [("tenant/huge", {"tolerations": tolerations - MAX_KEPT_TOLERATIONS})]

    assert wait_until(lambda: open_watch_count(apiserver) == 1)
    assert apiserver.faults.expire_watches() == 1  # a relist: the same version of the pod again
    assert wait_until(lambda: len(pod_lists(apiserver)) == 2 and watcher.is_synced())
    assert watcher.pod(uid) is held, "an unchanged version is not parsed again"

    apiserver.store.set_pod_status("tenant", "huge", {"phase": "Running"})
    assert wait_until(lambda: (p := watcher.pod(uid)) is not None and p.status_phase == "Running")
    assert len(dropped) == 1, "what it drops did not change: reported once"


def test_active_pods_raises_until_the_first_list_completes(apiserver: ApiServer, start_watcher: StartWatcher) -> None:
    errors = ErrorLog()
    apiserver.faults.fail_next(2, code=500, path="^/api/v1/pods$", watch=False)
    watcher = start_watcher(synced=False, on_error=errors)

    assert wait_until(lambda: errors.count() >= 1)
    assert not watcher.is_synced()
    with pytest.raises(KubeError) as caught:
        watcher.active_pods()
    assert "pod cache not synced" in caught.value.detail
    assert watcher.last_error is not None and watcher.last_error.status == 500

    assert wait_until(watcher.is_synced, SYNC_TIMEOUT_S)
    assert watcher.active_pods() == [] and watcher.last_error is None
    assert [r.status for r in pod_lists(apiserver)] == [500, 500, 200]


def test_start_up_waits_for_the_first_list_to_answer_not_to_succeed(apiserver: ApiServer,
                                                                    start_watcher: StartWatcher) -> None:
    """`evictd run` waits for the first list before its first cycle; a refused list ends that wait at once (the
    cycles then rank the node's pods for hard thresholds), a slow one only after the wait's limit."""
    apiserver.faults.fail_next(1000, code=503, path="^/api/v1/pods$", watch=False)
    watcher = start_watcher(synced=False)
    started = time.monotonic()
    assert watcher.wait_first_answer(SYNC_TIMEOUT_S) is False
    assert time.monotonic() - started < 1.0 and watcher.last_error is not None
    assert watcher.last_error.status == 503

    apiserver.faults.clear()
    assert wait_until(watcher.is_synced, SYNC_TIMEOUT_S) and watcher.wait_first_answer(0.0) is True


@pytest.mark.parametrize(
    ("fault", "status"),
    [
        pytest.param(lambda f: f.fail_next(1, code=503, path="^/api/v1/pods$", watch=False), 503, id="503"),
        pytest.param(lambda f: f.throttle_next(1, path="^/api/v1/pods$", watch=False), 429, id="429-throttled"),
        pytest.param(lambda f: f.time_out_next(1, path="^/api/v1/pods$", watch=False), None, id="no-answer"),
    ],
)
def test_a_failed_first_list_is_retried(
    apiserver: ApiServer, start_watcher: StartWatcher, fault: Callable[[Any], None], status: int | None
) -> None:
    apiserver.store.create_pod(pod_manifest("web"))
    errors = ErrorLog()
    fault(apiserver.faults)
    watcher = start_watcher(synced=False, on_error=errors, request_timeout_s=0.5)

    assert wait_until(watcher.is_synced, SYNC_TIMEOUT_S)
    assert names(watcher) == ["web"]
    [(_, error)] = errors.entries
    assert (error.verb, error.status) == ("list pods", status)


# --- resuming, relisting, backing off ------------------------------------------------------------------------


def test_a_dropped_watch_resumes_from_the_last_resource_version_without_relisting(
    apiserver: ApiServer, start_watcher: StartWatcher
) -> None:
    watcher = start_watcher()
    apiserver.store.create_pod(pod_manifest("before-drop"))
    last_seen = str(apiserver.store.resource_version)
    assert wait_until(lambda: names(watcher) == ["before-drop"])

    assert apiserver.faults.drop_watches() == 1
    assert wait_until(lambda: open_watch_count(apiserver) == 0)
    # Created while no watch is open: the resumed watch must replay it.
    apiserver.store.create_pod(pod_manifest("during-drop"))

    assert wait_until(lambda: names(watcher) == ["before-drop", "during-drop"])
    first, resumed = pod_watches(apiserver)
    assert resumed.param("resourceVersion") == last_seen != first.param("resourceVersion")
    assert len(pod_lists(apiserver)) == 1  # no relist
    assert watcher.is_synced()


def test_an_expired_watch_relists(apiserver: ApiServer, start_watcher: StartWatcher) -> None:
    apiserver.store.create_pod(pod_manifest("web"))
    watcher = start_watcher()
    assert wait_until(lambda: open_watch_count(apiserver) == 1)

    assert apiserver.faults.expire_watches() == 1  # in-stream ERROR 410 Expired

    assert wait_until(lambda: len(pod_lists(apiserver)) == 2 and len(pod_watches(apiserver)) == 2)
    assert wait_until(lambda: names_once_synced(watcher) == ["web"])
    relist_rv = str(apiserver.store.resource_version)
    assert pod_watches(apiserver)[1].param("resourceVersion") == relist_rv


def test_a_compacted_version_relists_and_forgets_pods_deleted_while_disconnected(
    apiserver: ApiServer, start_watcher: StartWatcher
) -> None:
    apiserver.store.create_pod(pod_manifest("stays"))
    apiserver.store.create_pod(pod_manifest("goes"))
    watcher = start_watcher(jitter=lambda: 0.0)  # the gap below is exactly the backoff
    assert wait_until(lambda: open_watch_count(apiserver) == 1)
    stale_rv = str(apiserver.store.resource_version)

    # The next reconnection fails once, so the gap lasts 0.5 s + 1 s: long enough to change the cluster.
    apiserver.faults.fail_next(1, code=500, path="^/api/v1/pods$", watch=True)
    apiserver.faults.drop_watches()
    assert wait_until(lambda: watcher.last_error is not None and open_watch_count(apiserver) == 0)
    apiserver.store.delete_pod("default", "goes", grace_period_s=0)
    apiserver.store.create_pod(pod_manifest("new"))
    apiserver.compact()
    # Meanwhile the last known pods are served, with the error that keeps the watch down.
    assert names(watcher) == ["goes", "stays"] and watcher.last_error is not None

    assert wait_until(lambda: names_once_synced(watcher) == ["new", "stays"], timeout_s=6.0)
    watches = pod_watches(apiserver)
    assert [(w.param("resourceVersion"), w.status) for w in watches[1:3]] == [(stale_rv, 500), (stale_rv, 200)]
    assert len(pod_lists(apiserver)) == 2  # the 410 on the resumed watch made it relist
    assert watcher.is_synced()


def test_api_errors_back_off_exponentially_and_serve_the_last_known_pods(
    apiserver: ApiServer, start_watcher: StartWatcher
) -> None:
    apiserver.store.create_pod(pod_manifest("web"))
    errors = ErrorLog()
    watcher = start_watcher(on_error=errors, jitter=lambda: 0.0)  # the doubling itself, without random jitter
    assert wait_until(lambda: open_watch_count(apiserver) == 1)

    apiserver.faults.fail_next(1, code=500, path="^/api/v1/pods$", watch=True)
    apiserver.faults.throttle_next(1, path="^/api/v1/pods$", watch=True)
    apiserver.faults.drop_watches()
    assert wait_until(lambda: errors.count() >= 1)
    assert watcher.last_error is not None and names(watcher) == ["web"]  # stale, still served

    assert wait_until(lambda: errors.count() == 3, timeout_s=4.0)
    assert open_watch_count(apiserver) == 0 and names(watcher) == ["web"]
    assert [e.status for _, e in errors.entries] == [None, 500, 429]
    assert watcher.last_error is not None and watcher.last_error.status == 429
    assert wait_until(lambda: open_watch_count(apiserver) == 1, timeout_s=4.0)  # reconnected (no event needed)
    drop, first_retry, second_retry = errors.times()
    assert first_retry - drop >= BACKOFF_INITIAL_S * 0.9
    assert second_retry - first_retry >= 2 * BACKOFF_INITIAL_S * 0.9  # doubled
    assert len(pod_lists(apiserver)) == 1
    apiserver.store.create_pod(pod_manifest("after"))
    assert wait_until(lambda: names(watcher) == ["after", "web"])


class RecordedWaits(threading.Event):
    """A watcher's stop flag that records how long each wait on it was asked to last: the watcher's backoffs are
    waits on its stop flag (a stop ends them)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.asked.append(timeout)
        return super().wait(timeout)


def test_a_watch_that_worked_resets_the_backoff(apiserver: ApiServer, start_watcher: StartWatcher) -> None:
    watcher = start_watcher(jitter=lambda: 0.0)  # without jitter the initial and a grown backoff are told apart
    # The backoffs asked for, not the seconds to the next watch: after the initial 0.5 s one these once took 1.19 s
    # on a busy machine, past the 1 s a grown one waits.
    waits = RecordedWaits()
    watcher._stopping = waits  # between watches: no wait is under way on the flag it replaces
    for drop in range(4):
        # The watch worked: it brought a pod created now. (The server counts a watch open before its answer's head
        # is sent; one cut then never worked for the watcher, and its backoff rightly grows.)
        apiserver.store.create_pod(pod_manifest(f"seen-{drop}"))
        assert wait_until(lambda name=f"seen-{drop}": name in (names_once_synced(watcher) or []))
        apiserver.faults.drop_watches()
        watches_after_drop = drop + 2
        assert wait_until(lambda n=watches_after_drop: len(pod_watches(apiserver)) == n)
    # Every drop of a watch that had been working waits the initial backoff, not a grown one (1, 2, 4 s).
    assert waits.asked == [BACKOFF_INITIAL_S] * 4


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "evictd-pod-watch"]


def test_stop_ends_an_idle_watch_at_once(apiserver: ApiServer, start_watcher: StartWatcher) -> None:
    watcher = start_watcher()
    assert wait_until(lambda: open_watch_count(apiserver) == 1)
    assert len(watch_threads()) == 1
    started = time.monotonic()
    watcher.stop()  # no event or bookmark is coming: the blocked read must be interrupted
    assert time.monotonic() - started < 1.0
    assert watch_threads() == []


# --- watch storms ----------------------------------------------------------------------------------------------

STORM_S = 8.0


def test_watches_that_expire_at_once_relist_with_backoff_not_in_a_loop(apiserver: ApiServer,
                                                                        start_watcher: StartWatcher) -> None:
    """Every watch gets ERROR 410 Expired in-stream before anything else; lists succeed (a struggling API
    server). Without backoff this was 345 LISTs in 20 s from one node."""
    apiserver.store.create_pod(pod_manifest("web"))
    apiserver.faults.expire_every_watch = True
    jitters: list[float] = []

    def jitter() -> float:
        jitters.append(random.random())
        return jitters[-1]

    watcher = start_watcher(jitter=jitter)
    started = time.monotonic()
    time.sleep(STORM_S)
    lists = len(pod_lists(apiserver))
    per_minute = lists / (time.monotonic() - started) * 60
    print(f"LISTs under a watch storm: {lists} in {STORM_S:g} s ({per_minute:.0f} per minute)")
    # Backoff 0.5 s doubling, each with up to as much again of jitter: at most 1 + 4 relists in 8 s.
    assert lists <= 5, f"{lists} LISTs in {STORM_S:g} s"
    assert lists - 1 <= len(jitters) <= lists  # every relist of the storm waited a jittered backoff
    # Meanwhile the cache is the last list: cycles act on it.
    assert names(watcher) == ["web"]
    apiserver.faults.clear()
    assert wait_until(lambda: open_watch_count(apiserver) == 1, 35)  # the storm is over: watching again


def test_a_watch_refused_with_410_keeps_the_listed_pods_usable(apiserver: ApiServer,
                                                               start_watcher: StartWatcher) -> None:
    """Every watch answered HTTP 410 while lists succeed: a fresh list is a correct cache (before, the cache
    was flagged unsynced and nothing was evicted under a hard threshold)."""
    apiserver.store.create_pod(pod_manifest("web"))
    apiserver.faults.fail_next(1000, code=410, watch=True)
    watcher = start_watcher()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert names(watcher) == ["web"]  # never raises "pod cache not synced"
        time.sleep(0.05)
    assert {r.status for r in pod_watches(apiserver)} == {410} and len(pod_lists(apiserver)) >= 2

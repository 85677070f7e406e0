"""KubePodEvictor and EvictionJournal (src/evictd/kube/evictor.py, journal.py) against the test API server.

Evictions are decided by the real engine (`evictd.commands.simulate` on documents from tests/builders.py) for pods
seeded into the server with the same UIDs; they are carried out with evictd's API client. Checked:
what is sent and in which order (from the server's request log), what the pod, its events and the journal
file look like afterwards, and how API failures, restarts and replays play out.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client, read_json
from kube_faults import RecordedRequest

from builders import Gi, Mi, pod, pod_stats, summary
from clocks import ManualClock
from evictd.commands.simulate import parse_scenario, run_scenario
from evictd.core.engine import EvictForLocalStorage, Eviction
from evictd.core.errors import EvictdError, KubeError
from evictd.core.unanswered import UNANSWERED_QUIET_S
from evictd.cri import RuntimeSlot
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import ApiStep, EvictionJournal
from log_capture import LogCapture
from out_of_pids import run_without_new_tasks

NODE = "node-1"  # builders.pod binds pods to node-1
NOW = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
NOW_TEXT = "2026-11-21T10:00:00Z"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
HARD_MEMORY = {"evictionHard": {"memory.available": "1Gi"}}
SOFT_MEMORY = {
    "evictionSoft": {"memory.available": "1Gi"},
    "evictionSoftGracePeriod": {"memory.available": "30s"},
    "evictionMaxPodGracePeriod": 20,
}
# Conditions a kubelet would have written on a running pod; the eviction must keep them.
RUNNING_CONDITIONS = [
    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-21T09:00:00Z"},
    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-21T09:00:05Z"},
    {"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler",
     "lastTransitionTime": "2026-11-21T09:00:00Z"},
]


def hog(name: str = "hog", **kwargs: Any) -> dict[str, Any]:
    """A burstable pod over its memory request, with a kubelet-written status."""
    doc = pod(name, requests={"memory": "100Mi"}, **kwargs)
    doc["status"]["conditions"] = copy.deepcopy(RUNNING_CONDITIONS)
    return doc


def memory_evictions(config: dict[str, Any], doc: dict[str, Any]) -> list[Eviction]:
    """The evictions the engine decides when `doc` uses 2Gi with 512Mi available, at 0 s and 30 s."""
    step = {"summary": summary(memory=512 * Mi, pods=[pod_stats(doc, memory=2 * Gi)])}
    scenario = parse_scenario({"config": config, "pods": [doc], "steps": [{"at": 0, **step}, {"at": 30, **step}]})
    return [eviction for report in run_scenario(scenario) for eviction in report.acted.evictions]


def hard_eviction(doc: dict[str, Any]) -> Eviction:
    eviction = memory_evictions(HARD_MEMORY, doc)[0]
    assert eviction.threshold is not None and eviction.threshold.is_hard
    return eviction


def soft_eviction(doc: dict[str, Any]) -> Eviction:
    [eviction] = memory_evictions(SOFT_MEMORY, doc)  # only once the 30 s grace period has passed
    assert eviction.threshold is not None and not eviction.threshold.is_hard
    return eviction


def empty_dir_eviction(doc: dict[str, Any]) -> Eviction:
    scenario = parse_scenario({"config": {}, "pods": [doc], "steps": [
        {"at": 0, "summary": summary(pods=[pod_stats(doc, volumes={"scratch": 200 * Mi})])}]})
    [report] = run_scenario(scenario)
    [eviction] = report.acted.evictions
    assert report.decided.assessment.next_step == EvictForLocalStorage((eviction,)) and eviction.threshold is None
    return eviction


class RecordingLocalKill:
    """An attached container runtime that remembers the pods it was asked to stop. `errors`: what each stop raises,
    in turn (None: it stops the pod); after them, every stop stops it. `until`: each stop lasts until this holds
    (at most STOP_WAIT_S), and `seen` says for each stop whether it did, and on which thread the stop ran."""

    attached = True
    can_stop = True

    def __init__(self, error: EvictdError | None = None, *, errors: Sequence[EvictdError | None] = (),
                 until: Callable[[], bool] | None = None) -> None:
        self.calls: list[Eviction] = []
        self._errors = [error] if error is not None else list(errors)
        self._until = until
        self.seen: list[bool] = []
        self.threads: list[int] = []

    def stop_pod(self, eviction: Eviction) -> None:
        self.calls.append(eviction)
        self.threads.append(threading.get_ident())
        if self._until is not None:
            deadline = time.monotonic() + STOP_WAIT_S
            while not self._until() and time.monotonic() < deadline:
                time.sleep(0.01)
            self.seen.append(self._until())
        error = self._errors.pop(0) if self._errors else None
        if error is not None:
            raise error


# How long a RecordingLocalKill waits for its `until` (a stop that ran before the API's writes would wait it out).
STOP_WAIT_S = 5.0


class Harness:
    """An evictor over a journal file, with everything it sent visible through the server."""

    def __init__(self, apiserver: ApiServer, journal_path: Path, timeout_s: float = 10.0) -> None:
        self.apiserver = apiserver
        self.journal_path = journal_path
        self.client = evictd_api_client(apiserver)
        self.api_errors: list[KubeError] = []
        self.journal_seen: list[Any] = []  # the journal file, read whenever the API fails
        self.local_kill = RecordingLocalKill()
        # What the evictor said of each immediate eviction the API took: (pod, how it was stopped, why it was not).
        self.local_stops: list[tuple[str, str | None, str | None]] = []
        self.timeout_s = timeout_s
        self.journal, self.evictor = self.restart()

    def restart(self) -> tuple[EvictionJournal, KubePodEvictor]:
        """A new journal read from the same file and a new evictor: what a restarted daemon builds."""
        self.journal = EvictionJournal(str(self.journal_path), log=LogCapture())
        events = EventRecorder(self.client, NODE, clock=ManualClock(0.0, wall_at_zero=NOW))
        self.clock = ManualClock(0.0, wall_at_zero=NOW)  # the evictor's
        self.evictor = KubePodEvictor(self.client, self.journal, events, runtime=self.local_kill,  # type: ignore[arg-type]
                                      timeout_s=self.timeout_s, on_api_error=self._api_error,
                                      on_local_stop=self._local_stop, clock=self.clock)
        return self.journal, self.evictor

    def _local_stop(self, eviction: Eviction, how: str | None, error: EvictdError | None) -> None:
        self.local_stops.append((eviction.pod.name, how, None if error is None else str(error)))

    def _api_error(self, error: KubeError) -> None:
        self.api_errors.append(error)
        self.journal_seen.append(read_json(self.journal_path))

    def sent(self) -> list[RecordedRequest]:
        """The writes sent to pods and events, oldest first."""
        return [r for r in self.apiserver.requests if r.method in ("POST", "PATCH", "DELETE", "PUT")]

    def steps(self) -> list[tuple[str, str, int]]:
        return [(r.method, r.path, r.status) for r in self.sent()]

    def file_entries(self) -> dict[str, dict[str, Any]]:
        """The journal file's entries by UID (the file must be valid JSON)."""
        return {item["uid"]: item for item in read_json(self.journal_path)["evictions"]}


@pytest.fixture
def harness(apiserver: ApiServer, tmp_path: Path) -> Iterator[Harness]:
    made = Harness(apiserver, tmp_path / "state" / "evictions.json")
    yield made
    made.client.close()


POD_PATH = "/api/v1/namespaces/default/pods/{}"
STATUS_PATH = "/api/v1/namespaces/default/pods/{}/status"
EVENTS_PATH = "/api/v1/namespaces/default/events"


def full_steps(name: str) -> list[tuple[str, str, int]]:
    """A threshold eviction: the DisruptionTarget condition, the graceful DELETE, the Evicted event."""
    return [("PATCH", STATUS_PATH.format(name), 200), ("DELETE", POD_PATH.format(name), 200),
            ("POST", EVENTS_PATH, 201)]


def conditions_by_type(stored: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conditions = stored["status"].get("conditions") or []
    types = [c["type"] for c in conditions]
    assert len(types) == len(set(types)), f"duplicate condition types: {types}"
    return {c["type"]: c for c in conditions}


def evicted_events(apiserver: ApiServer) -> list[dict[str, Any]]:
    return [e for e in apiserver.store.events("default") if e["reason"] == "Evicted"]


# --- a complete eviction ---------------------------------------------------------------------------------------


def test_a_threshold_eviction_writes_the_condition_deletes_gracefully_and_records_the_event(
    apiserver: ApiServer, harness: Harness
) -> None:
    apiserver.store.create_pod(hog())
    eviction = hard_eviction(hog())

    harness.evictor.evict(eviction)

    assert harness.steps() == full_steps("hog")
    status, delete, event = harness.sent()
    assert eviction.effective_grace_period_s == 1  # hard threshold
    assert delete.body == {"gracePeriodSeconds": 1, "preconditions": {"uid": "uid-hog"}}
    assert status.headers["Content-Type"] == STRATEGIC_MERGE
    # Only the condition: phase, reason and message are the kubelet's, which overwrites them.
    assert status.body == {
        "metadata": {"uid": "uid-hog"},
        "status": {
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                            "message": eviction.message, "observedGeneration": 1,
                            "lastTransitionTime": NOW_TEXT}],
        },
    }
    assert eviction.message.startswith("The node was low on resource: memory. Threshold quantity: 1Gi, available: "
                                       "512Mi. Container app was using 2Gi, request is 100Mi")

    stored = apiserver.store.get_pod("default", "hog")
    assert stored is not None, "a graceful deletion keeps the pod until the kubelet has stopped it"
    assert stored["metadata"]["deletionTimestamp"] and stored["metadata"]["deletionGracePeriodSeconds"] == 1
    assert (stored["status"]["phase"], stored["status"].get("reason"), stored["status"].get("message")) == (
        "Running", None, None)
    conditions = conditions_by_type(stored)
    assert sorted(conditions) == ["DisruptionTarget", "PodScheduled", "Ready"]  # merged by type
    assert conditions["Ready"] == RUNNING_CONDITIONS[1]
    assert {k: conditions["DisruptionTarget"][k] for k in ("status", "reason", "message")} == {
        "status": "True", "reason": "TerminationByKubelet", "message": eviction.message}

    [recorded] = evicted_events(apiserver)
    assert event.body["metadata"]["annotations"] == dict(eviction.annotations)
    assert recorded["type"] == "Warning" and recorded["message"] == eviction.message
    assert recorded["involvedObject"] == {"kind": "Pod", "name": "hog", "namespace": "default", "uid": "uid-hog",
                                          "apiVersion": "v1"}
    assert recorded["metadata"]["annotations"] == {"offending_containers": "app",
                                                   "offending_containers_usage": "2Gi",
                                                   "starved_resource": "memory"}
    assert recorded["source"] == {"component": "evictd", "host": NODE}

    entry = harness.file_entries()["uid-hog"]
    assert (entry["condition_written"], entry["delete_sent"], entry["deleted"], entry["event_written"],
            entry["stopped_locally"]) == (True, True, True, True, True)
    assert entry["done_at"] is not None and entry["grace_period_s"] == 1 and "phase" not in entry
    assert harness.journal.pending() == [] and "uid-hog" in harness.journal.evicted_uids()
    # A hard threshold: the pod is also stopped on the node at once, as the kubelet's own eviction kills it.
    assert harness.local_kill.calls == [eviction] and harness.api_errors == []
    assert harness.local_stops == [("hog", "through the container runtime", None)]


def test_a_soft_eviction_deletes_with_the_effective_grace_period(apiserver: ApiServer, harness: Harness) -> None:
    apiserver.store.create_pod(hog(grace=30))
    eviction = soft_eviction(hog(grace=30))
    assert eviction.effective_grace_period_s == 20  # min(evictionMaxPodGracePeriod 20, the pod's 30)

    harness.evictor.evict(eviction)

    assert harness.steps() == full_steps("hog")
    assert harness.sent()[1].body == {"gracePeriodSeconds": 20, "preconditions": {"uid": "uid-hog"}}
    stored = apiserver.store.get_pod("default", "hog")
    assert stored is not None and stored["metadata"]["deletionGracePeriodSeconds"] == 20
    assert conditions_by_type(stored)["DisruptionTarget"]["reason"] == "TerminationByKubelet"


def test_the_evicted_event_names_the_decision_the_flight_recorder_can_explain(
    apiserver: ApiServer, harness: Harness
) -> None:
    apiserver.store.create_pod(hog())
    eviction = hard_eviction(hog())
    events = EventRecorder(harness.client, NODE, clock=ManualClock(0.0, wall_at_zero=NOW))
    evictor = KubePodEvictor(harness.client, harness.journal, events, decision=lambda: "20261123T100000Z-42/7",
                             clock=ManualClock(0.0, wall_at_zero=NOW))

    evictor.evict(eviction)

    [recorded] = evicted_events(apiserver)
    assert recorded["metadata"]["annotations"] == {**eviction.annotations,
                                                   "evictd.io/decision": "20261123T100000Z-42/7"}


def test_a_local_storage_eviction_writes_no_disruption_condition_and_no_annotations(
    apiserver: ApiServer, harness: Harness
) -> None:
    doc = pod("scratchy", volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "100Mi"}}])
    apiserver.store.create_pod(doc)
    eviction = empty_dir_eviction(doc)

    harness.evictor.evict(eviction)

    assert harness.steps() == full_steps("scratchy")[1:]  # no condition, so no status write at all
    delete, event = harness.sent()
    assert delete.body == {"gracePeriodSeconds": 1, "preconditions": {"uid": "uid-scratchy"}}
    assert eviction.message == 'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". '
    stored = apiserver.store.get_pod("default", "scratchy")
    assert stored is not None and "DisruptionTarget" not in conditions_by_type(stored)
    [recorded] = evicted_events(apiserver)
    assert not recorded["metadata"].get("annotations")
    assert event.body["message"] == eviction.message


# --- pods that are gone or replaced ----------------------------------------------------------------------------


def test_a_pod_recreated_with_the_same_name_is_left_alone(apiserver: ApiServer, harness: Harness) -> None:
    apiserver.store.create_pod(hog())
    eviction = hard_eviction(hog())
    apiserver.store.delete_pod("default", "hog", grace_period_s=0)
    apiserver.store.create_pod(hog(uid="uid-hog-successor"))

    harness.evictor.evict(eviction)  # ended, not failed: nothing raised

    # The UID in the condition patch keeps it off the successor, and nothing more is sent.
    assert harness.steps() == [("PATCH", STATUS_PATH.format("hog"), 422)]
    successor = apiserver.store.get_pod("default", "hog")
    assert successor is not None and successor["metadata"]["uid"] == "uid-hog-successor"
    assert "deletionTimestamp" not in successor["metadata"]
    assert successor["status"]["phase"] == "Running" and successor["status"].get("reason") is None
    assert conditions_by_type(successor)["DisruptionTarget"]["status"] == "False"
    assert evicted_events(apiserver) == []
    entry = harness.file_entries()["uid-hog"]
    assert entry["extra"]["ended"].startswith("422: ") and entry["done_at"] is not None
    # On the node, what still runs of the evicted pod's UID was stopped at once (the runtime finds it by that UID:
    # the successor's containers carry another).
    assert harness.journal.pending() == [] and [e.pod.uid for e in harness.local_kill.calls] == ["uid-hog"]
    assert harness.evictor.replay() == [] and len(harness.sent()) == 1  # nothing more is ever sent


def test_a_pod_already_gone_ends_the_eviction(apiserver: ApiServer, harness: Harness) -> None:
    eviction = hard_eviction(hog())  # never stored: the pod was deleted before the eviction

    harness.evictor.evict(eviction)

    assert harness.steps() == [("PATCH", STATUS_PATH.format("hog"), 404)]
    assert harness.file_entries()["uid-hog"]["extra"]["ended"].startswith("404: ")
    assert harness.journal.pending() == [] and harness.local_kill.calls == [eviction]  # whatever still ran of it
    assert [e.status for e in harness.api_errors] == [404]


def test_a_pod_gone_between_the_condition_and_the_delete_ends_the_eviction_without_an_event(
    apiserver: ApiServer, harness: Harness
) -> None:
    apiserver.store.create_pod(hog())
    apiserver.faults.fail_next(1, code=404, method="DELETE")  # e.g. its controller deleted it meanwhile

    harness.evictor.evict(soft_eviction(hog()))

    assert [(m, status) for m, _, status in harness.steps()] == [("PATCH", 200), ("DELETE", 404)]
    entry = harness.file_entries()["uid-hog"]
    assert entry["extra"]["ended"].startswith("404: ") and harness.journal.pending() == []
    assert evicted_events(apiserver) == []


@pytest.mark.parametrize(("successor", "refused"), [pytest.param(True, 409, id="replaced"),
                                                   pytest.param(False, 404, id="gone")])
def test_a_delete_that_may_have_gone_through_still_records_the_event(
    apiserver: ApiServer, harness: Harness, successor: bool, refused: int
) -> None:
    """A DELETE was sent but its answer lost; by the replay the kubelet removed the pod: it was evicted."""
    apiserver.store.create_pod(hog())
    eviction = soft_eviction(hog())
    apiserver.faults.fail_next(1, code=500, method="DELETE")
    with pytest.raises(KubeError):
        harness.evictor.evict(eviction)
    assert harness.file_entries()["uid-hog"]["delete_sent"] is True
    apiserver.finish_deletion("default", "hog")  # the kubelet stopped it and removed it
    if successor:
        apiserver.store.create_pod(hog(uid="uid-hog-successor"))  # its controller made a same-named successor

    assert harness.evictor.replay() == []

    deletes = [r for r in harness.sent() if r.method == "DELETE"]
    assert [r.status for r in deletes] == [500, refused]  # the UID precondition keeps it off a successor
    if successor:
        stored = apiserver.store.get_pod("default", "hog")
        assert stored is not None and "deletionTimestamp" not in stored["metadata"]
    entry = harness.file_entries()["uid-hog"]
    assert entry["extra"]["deleted"].startswith(f"{refused}: ") and "ended" not in entry["extra"]
    [event] = evicted_events(apiserver)
    assert event["involvedObject"]["uid"] == "uid-hog"
    assert harness.journal.pending() == []


# A daemon SIGKILLed right after the server carried out its DELETE, before the journal could note it: a real
# process with evictd's client and journal, whose DELETE returns from the server and then kills the process.
KILLED_AFTER_DELETE = r"""
import os, signal, sys
from evictd.kube.client import build_api_client
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal
from log_capture import LogCapture
from test_evictor import NODE, hog, soft_eviction

kubeconfig, journal_path = sys.argv[1:]
client = build_api_client(kubeconfig)
delete_pod = client.delete_pod

def delete_then_die(*args, **kwargs):
    delete_pod(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

client.delete_pod = delete_then_die
evictor = KubePodEvictor(client, EvictionJournal(journal_path, log=LogCapture()), EventRecorder(client, NODE))
evictor.evict(soft_eviction(hog()))
"""


def test_a_daemon_killed_between_its_delete_and_the_journal_still_records_the_event(
    apiserver: ApiServer, harness: Harness
) -> None:
    apiserver.store.create_pod(hog())
    tests = Path(__file__).resolve().parents[1]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_DELETE, str(apiserver.kubeconfig_path), str(harness.journal_path)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests / "kube")])},
        capture_output=True, text=True, check=False, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    stored = apiserver.store.get_pod("default", "hog")
    assert stored is not None and "deletionTimestamp" in stored["metadata"], "the DELETE went through"
    entry = harness.file_entries()["uid-hog"]
    assert (entry["condition_written"], entry["delete_sent"], entry["deleted"]) == (True, True, False)
    apiserver.finish_deletion("default", "hog")  # the kubelet stopped it and removed it meanwhile

    _, evictor = harness.restart()  # the restarted daemon reads the journal the killed one left
    assert evictor.replay() == []

    assert [(r.method, r.status) for r in harness.sent() if r.method == "DELETE"] == [("DELETE", 200), ("DELETE", 404)]
    entry = harness.file_entries()["uid-hog"]
    assert entry["extra"]["deleted"].startswith("404: ") and "ended" not in entry["extra"]
    [event] = evicted_events(apiserver)
    assert event["involvedObject"]["uid"] == "uid-hog" and event["reason"] == "Evicted"
    conditions = {c["type"]: c for c in stored["status"]["conditions"]}
    assert conditions["DisruptionTarget"]["reason"] == "TerminationByKubelet", "the status written before the DELETE"
    assert harness.journal.pending() == []


# --- API failures, the journal, restarts and replay ------------------------------------------------------------

FAULTS = {
    "500": lambda faults, method: faults.fail_next(1, code=500, method=method),
    "503": lambda faults, method: faults.fail_next(1, code=503, method=method),
    "429": lambda faults, method: faults.throttle_next(1, method=method),
    "timeout": lambda faults, method: faults.time_out_next(1, method=method),
    "reset": lambda faults, method: faults.reset_next(1, method=method),
    # Refused, not failed: expired credentials, RBAC, or an admission policy (deploy/kubernetes/node-restriction).
    "403": lambda faults, method: faults.fail_next(1, code=403, method=method),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_hard_eviction_the_api_refuses_is_stopped_locally_kept_and_replayed_after_a_restart(
    apiserver: ApiServer, tmp_path: Path, fault: str
) -> None:
    harness = Harness(apiserver, tmp_path / "evictions.json", timeout_s=0.5)
    try:
        apiserver.store.create_pod(hog())
        eviction = hard_eviction(hog())
        FAULTS[fault](apiserver.faults, "DELETE")

        with pytest.raises(KubeError) as caught:
            harness.evictor.evict(eviction)

        assert caught.value.status in (None, 403, 429, 500, 503)
        assert "stopped through the container runtime" in caught.value.detail
        assert harness.local_kill.calls == [eviction]
        # The decision was on disk before the API was asked.
        assert [[(e["uid"], e["deleted"]) for e in seen["evictions"]] for seen in harness.journal_seen] == [
            [("uid-hog", False)]]
        entry = harness.file_entries()["uid-hog"]
        assert (entry["condition_written"], entry["deleted"], entry["event_written"], entry["stopped_locally"]) == (
            True, False, False, True)
        stored = apiserver.store.get_pod("default", "hog")
        assert stored is not None and "deletionTimestamp" not in stored["metadata"]

        journal, evictor = harness.restart()  # the daemon restarts; the entry comes back from the file
        [pending] = journal.pending()
        assert (pending.uid, pending.stopped_locally, pending.grace_period_s) == ("uid-hog", True, 1)

        assert evictor.replay() == []
        assert harness.steps()[-2:] == full_steps("hog")[1:]  # the condition was written before the fault
        assert [r.method for r in harness.sent()].count("DELETE") == 2  # the refused one and the replayed one
        assert harness.file_entries()["uid-hog"]["event_written"] is True
        assert journal.pending() == [] and len(harness.local_kill.calls) == 1

        sent = len(harness.sent())
        assert evictor.replay() == [] and len(harness.sent()) == sent  # nothing is sent twice
        stored = apiserver.store.get_pod("default", "hog")
        assert stored is not None and stored["metadata"]["deletionTimestamp"]
        assert conditions_by_type(stored)["DisruptionTarget"]["status"] == "True"
    finally:
        harness.client.close()


def test_after_a_request_went_unanswered_hard_evictions_and_replays_do_not_wait_on_the_api_again(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    """On the arena's real node each hard eviction waited 2 s on a hung API and each cycle's replay 2-3 s more."""
    harness = Harness(apiserver, tmp_path / "evictions.json", timeout_s=0.5)
    try:
        for name in ("first", "second"):
            apiserver.store.create_pod(hog(name))
        apiserver.faults.time_out_next(1, method="PATCH")
        with pytest.raises(KubeError, match="stopped through the container runtime"):
            harness.evictor.evict(hard_eviction(hog("first")))
        sent = len(harness.apiserver.requests)

        with pytest.raises(KubeError) as caught:
            harness.evictor.evict(hard_eviction(hog("second")))
        assert "not asked: a request went unanswered 0.0 s ago" in caught.value.detail
        assert "stopped through the container runtime" in caught.value.detail
        assert [e.pod.name for e in harness.local_kill.calls] == ["first", "second"]
        [error] = harness.evictor.replay()
        assert error.status is None and "not asked" in error.detail
        assert len(harness.apiserver.requests) == sent, "nothing is sent within the quiet time"
        assert {e.uid for e in harness.journal.pending()} == {"uid-first", "uid-second"}

        harness.clock.advance(UNANSWERED_QUIET_S)
        assert harness.evictor.replay() == []
        assert harness.journal.pending() == []
        assert [r.method for r in harness.sent()].count("DELETE") == 2
    finally:
        harness.client.close()


def test_a_pod_the_api_evicted_but_its_kubelet_did_not_stop_is_stopped_locally_once(
    apiserver: ApiServer, harness: Harness
) -> None:
    apiserver.store.create_pod(hog())
    harness.local_kill = RecordingLocalKill(EvictdError("runtime unreachable"))
    _, evictor = harness.restart()
    eviction = hard_eviction(hog())
    evictor.evict(eviction)  # the API took it; the stop at once failed: left to the kubelet, no error
    assert harness.local_kill.calls == [eviction]
    assert harness.local_stops == [("hog", None, "runtime unreachable")]
    assert harness.file_entries()["uid-hog"]["stopped_locally"] is False

    assert evictor.stop_overdue(eviction) == "through the container runtime"
    assert harness.local_kill.calls == [eviction, eviction]
    assert harness.file_entries()["uid-hog"]["stopped_locally"] is True
    assert evictor.stop_overdue(eviction) is None, "stopped once"
    assert harness.local_kill.calls == [eviction, eviction]


def test_a_pod_stopped_at_once_is_not_stopped_again_when_overdue(apiserver: ApiServer, harness: Harness) -> None:
    apiserver.store.create_pod(hog())
    eviction = hard_eviction(hog())
    harness.evictor.evict(eviction)
    assert harness.evictor.stop_overdue(eviction) is None
    assert harness.local_kill.calls == [eviction]


def test_a_hard_eviction_stops_the_pod_on_the_node_while_the_api_takes_its_writes(
    apiserver: ApiServer, harness: Harness
) -> None:
    """The stop does not wait for the API, nor the API for the stop: the stop lasts until the server has answered
    the DELETE (at most STOP_WAIT_S), and it saw that answer while under way, on a thread of its own."""
    apiserver.store.create_pod(hog())
    harness.local_kill = RecordingLocalKill(until=lambda: bool([r for r in apiserver.requests if r.method == "DELETE"]))
    _, evictor = harness.restart()
    eviction = hard_eviction(hog())

    evictor.evict(eviction)

    assert harness.local_kill.seen == [True], "the stop waited out its time: the API's writes came after it"
    assert harness.local_kill.threads != [threading.get_ident()]
    assert harness.steps() == full_steps("hog")
    assert harness.file_entries()["uid-hog"]["stopped_locally"] is True


def test_with_the_api_hung_the_pod_is_stopped_during_the_api_s_wait_not_after_it(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    """On the arena's real node the kernel OOM-killed a fast leak while its hard eviction waited 2 s on a hung API
    server before the pod was stopped locally: the stop now lasts until the held PATCH reached the server, and the
    eviction still fails with the API's error, saying the pod was stopped, its writes pending."""
    harness = Harness(apiserver, tmp_path / "evictions.json", timeout_s=0.5)
    try:
        apiserver.store.create_pod(hog())
        harness.local_kill = RecordingLocalKill(until=lambda: bool([r for r in apiserver.requests if r.method == "PATCH"]))
        _, evictor = harness.restart()
        apiserver.faults.time_out_next(1, method="PATCH")

        with pytest.raises(KubeError) as caught:
            evictor.evict(hard_eviction(hog()))

        assert caught.value.status is None
        assert "pod stopped through the container runtime, API writes pending" in caught.value.detail
        assert harness.local_kill.seen == [True]
        assert harness.file_entries()["uid-hog"]["stopped_locally"] is True
        assert harness.local_stops == [], "reported with the API's error instead"
    finally:
        harness.client.close()


def test_where_no_thread_can_start_the_stop_runs_first_on_the_callers_thread() -> None:
    """On a node out of pids (tests/out_of_pids.py: a real pids cgroup allowing no new task) the local stop cannot
    run beside the API's writes: it runs at once, before them, on the caller's thread."""
    outcome = run_without_new_tasks(
        "from evictd.kube.evictor import LocalStop\norder = []\n",
        "stop = LocalStop(lambda: order.append(('stop', threading.get_ident())) or 'through the runtime')\n"
        "order.append(('writes', threading.get_ident()))\n"
        "outcome = {'how': stop.result(), 'order': [what for what, _ in order],\n"
        "           'threads': len({thread for _, thread in order})}\n")
    assert outcome == {"how": "through the runtime", "order": ["stop", "writes"], "threads": 1}


def test_a_soft_eviction_is_left_to_the_kubelet(apiserver: ApiServer, harness: Harness) -> None:
    apiserver.store.create_pod(hog(grace=30))
    harness.evictor.evict(soft_eviction(hog(grace=30)))
    assert harness.steps() == full_steps("hog")
    assert harness.local_kill.calls == [] and harness.local_stops == []
    assert harness.file_entries()["uid-hog"]["stopped_locally"] is False


def test_a_soft_eviction_the_api_refuses_waits_for_the_api(apiserver: ApiServer, harness: Harness) -> None:
    apiserver.store.create_pod(hog())
    eviction = soft_eviction(hog())
    apiserver.faults.fail_next(3, code=500, method="DELETE")

    with pytest.raises(KubeError) as caught:
        harness.evictor.evict(eviction)
    assert caught.value.status == 500 and harness.local_kill.calls == []
    assert harness.file_entries()["uid-hog"]["stopped_locally"] is False

    # Still failing: each replay stops at the first retryable error and keeps the entry.
    for _ in range(2):
        [error] = harness.evictor.replay()
        assert error.status == 500
        assert [e.uid for e in harness.journal.pending()] == ["uid-hog"]
        assert harness.file_entries()["uid-hog"]["deleted"] is False

    assert harness.evictor.replay() == []
    assert harness.steps()[-2:] == full_steps("hog")[1:]
    assert [r.status for r in harness.sent() if r.method == "DELETE"] == [500, 500, 500, 200]
    assert harness.local_kill.calls == [] and harness.journal.pending() == []


@pytest.mark.parametrize(
    ("method", "done_before", "replayed"),
    [pytest.param("PATCH", [], [("PATCH", 200), ("DELETE", 200), ("POST", 201)], id="condition-write-fails"),
     pytest.param("POST", ["condition_written", "deleted"], [("POST", 201)], id="event-fails")],
)
def test_a_failure_replays_only_the_missing_steps(
    apiserver: ApiServer, harness: Harness, method: str, done_before: Sequence[str],
    replayed: Sequence[tuple[str, int]],
) -> None:
    apiserver.store.create_pod(hog())
    eviction = soft_eviction(hog())  # soft: no local stop, the API is waited for
    apiserver.faults.fail_next(1, code=500, method=method)

    with pytest.raises(KubeError):
        harness.evictor.evict(eviction)

    assert harness.local_kill.calls == []
    entry = harness.file_entries()["uid-hog"]
    assert [flag for flag in ("condition_written", "deleted", "event_written") if entry[flag]] == list(done_before)
    before = len(harness.sent())

    journal, evictor = harness.restart()
    assert evictor.replay() == []

    assert [(r.method, r.status) for r in harness.sent()[before:]] == list(replayed)
    assert [r.method for r in harness.sent()].count("DELETE") == 1
    assert journal.pending() == [] and len(evicted_events(apiserver)) == 1


def test_a_journal_written_before_the_sequence_changed_is_read(apiserver: ApiServer, harness: Harness) -> None:
    """evictd 0.1.0 wrote `phase` and `status_written` (its status step came after the DELETE)."""
    apiserver.store.create_pod(hog())
    eviction = soft_eviction(hog())
    harness.evictor.evict(eviction)
    entries = read_json(harness.journal_path)
    [item] = entries["evictions"]
    item.update(phase="Failed", status_written=item.pop("condition_written"), event_written=False, done_at=None)
    del item["delete_sent"]
    harness.journal_path.write_text(json.dumps(entries))

    journal, evictor = harness.restart()
    [pending] = journal.pending()
    assert pending.done == {ApiStep.CONDITION, ApiStep.DELETION}
    assert evictor.replay() == [] and journal.pending() == []
    assert len(evicted_events(apiserver)) == 2


def test_a_local_stop_that_fails_is_reported(apiserver: ApiServer, harness: Harness) -> None:
    apiserver.store.create_pod(hog())
    harness.local_kill = RecordingLocalKill(error=EvictdError("runtime unreachable"))
    _, evictor = harness.restart()
    apiserver.faults.fail_next(1, code=503, method="DELETE")

    with pytest.raises(EvictdError, match="local stop failed: runtime unreachable"):
        evictor.evict(hard_eviction(hog()))

    entry = harness.file_entries()["uid-hog"]
    assert entry["stopped_locally"] is False and entry["deleted"] is False
    assert evictor.replay() == [] and harness.journal.pending() == []


def test_the_journal_survives_a_restart_with_several_pending_evictions(
    apiserver: ApiServer, harness: Harness
) -> None:
    for name in ("first", "second"):
        apiserver.store.create_pod(hog(name))
    apiserver.faults.fail_next(2, code=500, method="DELETE")
    for name in ("first", "second"):
        with pytest.raises(KubeError):
            harness.evictor.evict(soft_eviction(hog(name)))
    assert sorted(harness.file_entries()) == ["uid-first", "uid-second"]

    journal, evictor = harness.restart()
    assert [e.name for e in journal.pending()] == ["first", "second"]  # oldest first
    assert evictor.replay() == []
    assert journal.pending() == [] and len(evicted_events(apiserver)) == 2
    for name in ("first", "second"):
        stored = apiserver.store.get_pod("default", name)
        assert stored is not None and stored["metadata"]["deletionTimestamp"]
        assert conditions_by_type(stored)["DisruptionTarget"]["status"] == "True"


class Killed:
    """The cgroup kill a RuntimeSlot falls back on: the pod uids asked, and how many processes each had."""

    def __init__(self, found: int) -> None:
        self.found = found
        self.uids: list[str] = []

    def __call__(self, uid: str) -> int:
        self.uids.append(uid)
        return self.found


def test_with_no_runtime_a_slot_with_a_cgroup_kill_stops_the_pod_and_one_without_cannot() -> None:
    """`RuntimeSlot(kill_processes=...)`: until a runtime answers, `stop_pod` kills the pod's processes through its
    cgroup (tests/daemon/test_run_no_runtime_stop.py has the real one); without it (dry-run) nothing can stop a pod;
    once a runtime is attached it answers as that runtime."""
    eviction = hard_eviction(hog())
    killed = Killed(found=3)
    slot = RuntimeSlot(kill_processes=killed)
    assert slot.can_stop and not slot.attached
    assert slot.stop_pod(eviction) == "by killing its 3 processes through its cgroup (no container runtime answers)"
    assert killed.uids == [eviction.pod.uid]
    with pytest.raises(EvictdError, match="the pod's cgroup holds no process"):
        RuntimeSlot(kill_processes=Killed(found=0)).stop_pod(eviction)
    bare = RuntimeSlot()
    assert not bare.can_stop
    with pytest.raises(EvictdError, match="no container runtime answers"):
        bare.stop_pod(eviction)
    runtime = RecordingLocalKill()
    slot.current = runtime  # type: ignore[assignment]
    slot.stop_pod(eviction)
    assert runtime.calls == [eviction] and killed.uids == [eviction.pod.uid], "the runtime's stop, not the cgroup's"


def test_a_hard_eviction_the_api_refuses_is_stopped_through_the_cgroup_when_no_runtime_answers(
        harness: Harness) -> None:
    """The evictor asks `can_stop`, not `attached`: a slot with no runtime but a cgroup kill stops the pod whose
    deletion the API did not take, journals it stopped locally and keeps the API writes pending."""
    killed = Killed(found=1)
    harness.local_kill = RuntimeSlot(kill_processes=killed)  # type: ignore[assignment]
    journal, evictor = harness.restart()
    doc = hog()
    harness.apiserver.store.create_pod(doc)
    harness.apiserver.faults.fail_next(10, code=503, method="PATCH")
    eviction = hard_eviction(doc)
    with pytest.raises(KubeError, match="pod stopped by killing its 1 processes through its cgroup"):
        evictor.evict(eviction)
    assert killed.uids == [eviction.pod.uid]
    assert journal.get(eviction.pod.uid).stopped_locally

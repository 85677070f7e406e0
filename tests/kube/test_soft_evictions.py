"""Soft evictions through the Eviction API (`softEvictionsThroughEvictionAPI`) against the test API server.

The real EvictionManager, KubePodEvictor, EvictionRequests (the rounds of requests, off the loop) and journal over
the real `kubernetes` client; the test server's eviction subresource obeys PodDisruptionBudgets as kube-apiserver
does (kube_budgets.py). Only the stats (a Summary document) and the manager's clock are scripted. A cycle starts a
round and returns; `Node.settle` waits for the round to end, and the next cycle reports it. The cycle's report
goes through the daemon's own CycleLogger and Metrics, so the refusals are checked where an operator sees them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client, read_json
from kube_budgets import DisruptionBudget

from builders import Gi, Json, Mi, pod, pod_stats, summary
from clocks import ManualClock
from evictd.commands.simulate import FixedLayout
from evictd.core.engine import EngineConfig
from evictd.core.fs_layout import FsLayout
from evictd.core.kubelet_config import eviction_settings
from evictd.core.pods import FrozenMap
from evictd.core.summary_parser import summary_from_dict
from evictd.cycle.eviction_api_route import EvictionApiRoute
from evictd.cycle.manager import EvictionManager
from evictd.cycle.report import CycleReport, CycleStep, EvictionApiRefusal
from evictd.kube.cluster import EvictablePods
from evictd.kube.events import EventRecorder
from evictd.kube.eviction_requests import EvictionRequests
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal, JournalEntry
from evictd.kube.pod_watch import PodWatcher
from evictd.observe.cycle_logging import CycleLogger
from evictd.observe.metrics import Metrics
from evictd.record.decision import decision_of
from evictd.run.compose_node import ReportOnlyReclaimer
from log_capture import LogCapture
from polling import wait_until
from recorded_lines import decision_document

NODE = "node-1"
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def through_api(report: CycleReport) -> bool:
    """Whether an eviction `report` tells of was carried out by the Eviction API."""
    return report.acted.eviction_api is not None and report.acted.eviction_api.evicted is not None


def labelled(document: Json, **labels: str) -> Json:
    return {**document, "metadata": {**document["metadata"], "labels": labels}}


# Ranked for memory: best-effort hog first, then the modest burstable pod, then the small one.
HOG = labelled(pod("hog", grace=60), app="db")
MODEST = labelled(pod("modest", requests={"memory": "100Mi"}, grace=60), app="web")
SMALL = labelled(pod("small", requests={"memory": "1Gi"}, grace=5), app="cache")
PODS = [HOG, MODEST, SMALL]
SOFT = {"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "30s"},
        "evictionMaxPodGracePeriod": 20}


class FixedStats:
    def __init__(self, available: int) -> None:
        self.available = available
        self.pids = (10000, 100)  # (maxpid, running)

    def memory_reading(self) -> None:  # no reading of the memory alone: confirmed on whole Summaries
        return None

    def summary(self, pods: Any, *, reread: bool = False, runtime_wait_s: float | None = None) -> Any:
        return summary_from_dict(summary(memory=self.available, pids=self.pids, pods=[
            pod_stats(HOG, memory=2 * Gi), pod_stats(MODEST, memory=1200 * Mi), pod_stats(SMALL, memory=900 * Mi)]))


@dataclass
class Node:
    manager: EvictionManager
    stats: FixedStats
    clock: ManualClock
    log: LogCapture
    logger: CycleLogger
    metrics: Metrics
    journal_path: Path
    evictor: KubePodEvictor
    requests: EvictionRequests
    cycles: int = 0
    longest_cycle_s: float = 0.0

    def cycle(self, seconds: float) -> CycleReport:
        self.clock.advance(seconds)
        began = time.monotonic()
        report = self.manager.synchronize()
        self.longest_cycle_s = max(self.longest_cycle_s, time.monotonic() - began)
        self.cycles += 1
        self.logger.log_cycle(self.cycles, report)
        self.metrics.record_cycle(report, self.manager.state, 0.01, self.clock.wall(), dry_run=False)
        return report

    def journal_entries(self) -> list[Json]:
        """The journal's entries as written (none before the first eviction is journaled)."""
        return read_json(self.journal_path)["evictions"] if self.journal_path.exists() else []

    def settle(self, timeout_s: float = 5.0) -> None:
        """Wait for the round of Eviction API requests under way to end (the next cycle reports it)."""
        wait_until(lambda: self.requests.asking() is None, timeout_s, "the round of Eviction API requests ended")

    def refusals_counted(self, reason: str) -> float:
        value = self.metrics.registry.get_sample_value("evictd_eviction_api_refusals_total", {"reason": reason})
        return value or 0.0


def build_node(apiserver: ApiServer, tmp_path: Path, kubelet: dict[str, Any], *, deadline_s: float = 300.0,
               max_candidates: int = 3, request_timeout_s: float = 5.0) -> Iterator[Node]:
    for document in PODS:
        apiserver.store.create_pod(document)
    client = evictd_api_client(apiserver)
    watcher = PodWatcher(client, NODE)
    watcher.start()
    assert wait_until(watcher.is_synced, 5.0)
    journal_path = tmp_path / "evictions.json"
    journal = EvictionJournal(str(journal_path), log=LogCapture())
    evictor = KubePodEvictor(client, journal, EventRecorder(client, NODE))
    requests = EvictionRequests(evictor, request_timeout_s=request_timeout_s)
    clock = ManualClock(0.0)
    stats = FixedStats(512 * Mi)
    manager = EvictionManager(
        EngineConfig.from_settings(eviction_settings(kubelet)), stats=stats, layout=FixedLayout(FsLayout()),
        pods=EvictablePods(watcher, journal, own_uid=""), reclaimer=ReportOnlyReclaimer(), evictor=evictor, clock=clock,
        eviction_api=EvictionApiRoute(requests, max_candidates=max_candidates, deadline_s=deadline_s))
    log = LogCapture()
    yield Node(manager, stats, clock, log, CycleLogger(log, dry_run=False), Metrics(), journal_path, evictor, requests)
    watcher.stop()
    client.close()


@pytest.fixture
def node(apiserver: ApiServer, tmp_path: Path) -> Iterator[Node]:
    yield from build_node(apiserver, tmp_path, SOFT)


def deleting(apiserver: ApiServer, name: str) -> bool:
    stored = apiserver.store.get_pod("default", name)
    return stored is not None and bool(stored["metadata"].get("deletionTimestamp"))


def evictions_posted(apiserver: ApiServer) -> list[tuple[str, Any]]:
    return [(r.path.split("/")[-2], r.body) for r in apiserver.request_log.matching("POST", r".*/eviction")]


def budget(name: str, app: str) -> DisruptionBudget:
    return DisruptionBudget("default", name, {"app": app}, desired_healthy=1, current_healthy=1, disruptions_allowed=0)


def test_a_budget_refusal_moves_to_the_next_candidate_logged_counted_and_recorded(
    apiserver: ApiServer, node: Node
) -> None:
    apiserver.store.add_disruption_budget(budget("db-pdb", "db"))
    assert node.cycle(10).acted.evictions == ()  # the soft threshold's grace period starts
    asking = node.cycle(30)
    # The cycle only starts the round: nobody is evicted yet, and nothing is written before the API answers.
    assert asking.acted.evictions == () and asking.acted.eviction_api.asked == ("default/hog", "default/modest",
                                                                                "default/small")
    node.settle()
    report = node.cycle(1)

    assert report.acted.refusals == (EvictionApiRefusal(pod="default/hog", status=429, reason="DisruptionBudget",
                                               budget="db-pdb", message=BUDGET_MESSAGE),)
    assert [e.pod.name for e in report.acted.evictions] == ["modest"] and report.errors_of(CycleStep.EVICTION) == ()
    assert through_api(report) and report.acted.eviction_api.asked == ()  # no new round: modest goes
    # Both asked through the Eviction API, with the kubelet's soft grace period min(60, 20) and the UID.
    assert evictions_posted(apiserver) == [
        (name, {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"},
                "deleteOptions": {"gracePeriodSeconds": 20, "preconditions": {"uid": f"uid-{name}"}}})
        for name in ("hog", "modest")]
    assert apiserver.request_log.matching("DELETE", r".*/pods/.*") == []  # never the kubelet's DELETE
    assert not deleting(apiserver, "hog") and deleting(apiserver, "modest")
    assert [e["involvedObject"]["name"] for e in apiserver.store.events("default") if e["reason"] == "Evicted"] == [
        "modest"]
    # Only the accepted request is journaled (hog stays a candidate), marked and done.
    entries = node.journal_entries()
    assert [(e["name"], e.get("eviction_api"), e["deleted"]) for e in entries] == [("modest", True, True)]

    refused = [fields for event, fields in node.log.at("warning")
               if event == "Eviction API refused to evict pod; trying the next candidate"]
    assert refused == [{"cycle": 3, "pod": "default/hog", "budget": "db-pdb", "reason": "DisruptionBudget",
                        "status": 429, "message": BUDGET_MESSAGE}]
    assert [fields["through_eviction_api"] for event, fields in node.log.at("warning") if event == "evicting pod"] == [
        True]
    assert node.refusals_counted("DisruptionBudget") == 1
    assert decision_document(decision_of(report))["evictionApi"] == {"refusals": [
        {"pod": "default/hog", "status": 429, "reason": "DisruptionBudget", "budget": "db-pdb",
         "message": BUDGET_MESSAGE}], "evicted": "default/modest"}


def test_every_candidate_refused_evicts_nobody_and_says_so(apiserver: ApiServer, tmp_path: Path) -> None:
    nodes = build_node(apiserver, tmp_path, SOFT, max_candidates=2)
    node = next(nodes)
    for name, app in (("db-pdb", "db"), ("web-pdb", "web"), ("cache-pdb", "cache")):
        apiserver.store.add_disruption_budget(budget(name, app))
    node.cycle(10)
    node.cycle(30)
    node.settle()
    report = node.cycle(10)

    assert report.acted.evictions == () and report.errors_of(CycleStep.EVICTION) == ()
    # At most evictionAPIMaxCandidates (2) asked in a round, in ranking order: small is never asked.
    assert [(r.pod, r.budget) for r in report.acted.refusals] == [("default/hog", "db-pdb"), ("default/modest", "web-pdb")]
    assert not any(deleting(apiserver, name) for name in ("hog", "modest", "small"))
    assert node.journal_entries() == []
    assert ("Eviction API refused every candidate; no pod evicted",
            {"cycle": 3, "refused": ["default/hog", "default/modest"]}) in node.log.at("warning")
    assert node.refusals_counted("DisruptionBudget") == 2

    # The same cycle starts the next round (a refusal is not remembered): the budgets still say no.
    assert report.acted.eviction_api.asked == ("default/hog", "default/modest")
    node.settle()
    assert [r.pod for r in node.cycle(10).acted.refusals] == ["default/hog", "default/modest"]
    # (that cycle starts a third round: its first request may be under way)
    assert [name for name, _ in evictions_posted(apiserver)][:4] == ["hog", "modest", "hog", "modest"]
    assert node.refusals_counted("DisruptionBudget") == 4
    next(nodes, None)


def test_soft_evictions_past_the_deadline_evict_as_the_kubelet(apiserver: ApiServer, tmp_path: Path) -> None:
    nodes = build_node(apiserver, tmp_path, SOFT, deadline_s=60.0)
    node = next(nodes)
    apiserver.store.add_disruption_budget(budget("db-pdb", "db"))
    apiserver.store.add_disruption_budget(budget("web-pdb", "web"))
    apiserver.store.add_disruption_budget(budget("cache-pdb", "cache"))
    node.cycle(10)
    node.cycle(30)
    node.settle()
    assert [r.pod for r in node.cycle(30).acted.refusals] == ["default/hog", "default/modest", "default/small"]
    node.settle()
    assert node.cycle(30).acted.evictions == ()  # 60 s past the grace period: still within the deadline
    node.settle()
    report = node.cycle(10)  # 70 s past it

    # The round cycle 4 started, reported as it ended; this cycle's own soft eviction goes the kubelet's way.
    assert [r.pod for r in report.acted.refusals] == ["default/hog", "default/modest", "default/small"]
    assert not through_api(report)
    assert report.acted.eviction_api.bypassed == ("soft threshold memory.available met 70 s past its grace period, "
                                            "beyond the Eviction API deadline of 60 s")
    assert [e.pod.name for e in report.acted.evictions] == ["hog"] and report.errors_of(CycleStep.EVICTION) == ()
    deletes = apiserver.request_log.matching("DELETE", r".*/pods/hog")
    assert [d.body for d in deletes] == [{"gracePeriodSeconds": 20, "preconditions": {"uid": "uid-hog"}}]
    assert ("soft eviction not through the Eviction API: evicting as the kubelet does",
            {"cycle": 5, "reason": report.acted.eviction_api.bypassed}) in node.log.at("warning")
    next(nodes, None)


def test_a_hard_threshold_never_uses_the_eviction_api(apiserver: ApiServer, tmp_path: Path) -> None:
    nodes = build_node(apiserver, tmp_path, {**SOFT, "evictionHard": {"memory.available": "600Mi"}})
    node = next(nodes)
    apiserver.store.add_disruption_budget(budget("db-pdb", "db"))
    node.stats.available = 800 * Mi  # only the soft threshold: its grace period runs
    node.cycle(10)
    node.stats.available = 500 * Mi  # the hard threshold is met too: evictd acts as the kubelet, at once
    report = node.cycle(10)

    assert [e.pod.name for e in report.acted.evictions] == ["hog"] and report.acted.refusals == ()
    assert evictions_posted(apiserver) == []
    assert [d.body for d in apiserver.request_log.matching("DELETE", r".*/pods/hog")] == [
        {"gracePeriodSeconds": 1, "preconditions": {"uid": "uid-hog"}}]
    assert deleting(apiserver, "hog")

    # The soft grace period running into the hard threshold: once the soft one is due too, the hard one acts.
    # (Another signal's hard threshold, met while the soft memory one acts, is in the next test.)
    report = node.cycle(30)
    assert [e.pod.name for e in report.acted.evictions] == ["modest"] and report.acted.refusals == ()
    assert [d.body for d in apiserver.request_log.matching("DELETE", r".*/pods/modest")] == [
        {"gracePeriodSeconds": 1, "preconditions": {"uid": "uid-modest"}}]
    assert evictions_posted(apiserver) == []
    next(nodes, None)


def test_a_request_without_an_answer_is_no_eviction_and_never_replayed(apiserver: ApiServer, node: Node) -> None:
    """A 503 ends the round: nobody evicted, nothing journaled, no failed eviction counted; the pod stays a candidate
    and the next round asks again. An entry an older evictd journaled before its request is dropped, never asked."""
    apiserver.faults.fail_next(1, code=503, method="POST", path=r".*/pods/hog/eviction")
    node.cycle(10)
    node.cycle(30)
    node.settle()
    report = node.cycle(1)
    assert report.acted.evictions == () and report.errors_of(CycleStep.EVICTION) == ()
    assert report.acted.eviction_api.failure == (
        "default/hog: Kubernetes API create pods/eviction failed (503): injected fault")
    assert node.journal_entries() == []
    assert ("Eviction API request without an answer: no pod evicted, the pod stays a candidate",
            {"cycle": 3, "error": report.acted.eviction_api.failure}) in node.log.at("warning")
    assert report.acted.eviction_api.asked[0] == "default/hog"  # asked again by the same cycle
    node.settle()
    assert [e.pod.name for e in node.cycle(1).acted.evictions] == ["hog"]
    assert [name for name, _ in evictions_posted(apiserver)] == ["hog", "hog"]

    # What an older evictd left: an Eviction API request journaled before it was sent, never answered.
    stale = JournalEntry(uid="uid-modest", namespace="default", name="modest", signal="memory.available",
                         grace_period_s=20, message="m", reason="Evicted", conditions=(), annotations=FrozenMap({}),
                         decided_at=1.0, delete_sent=True, eviction_api=True)
    node.evictor._journal.record(stale)
    assert node.evictor.replay() == []
    assert [name for name, _ in evictions_posted(apiserver)] == ["hog", "hog"]  # replay asked nothing
    assert [e["name"] for e in node.journal_entries()] == ["hog"]


def test_a_hung_eviction_api_holds_no_cycle_and_hard_pressure_deletes_at_once(apiserver: ApiServer,
                                                                               tmp_path: Path) -> None:
    """The Eviction API never answers (a timing-out webhook): cycles return at once, the next one waits for the
    round, a hard threshold met meanwhile deletes the first candidate (the pod being asked for) the kubelet's way,
    and the round's timeout is no eviction."""
    nodes = build_node(apiserver, tmp_path, {**SOFT, "evictionHard": {"memory.available": "300Mi"}},
                       request_timeout_s=1.0)
    node = next(nodes)
    apiserver.faults.time_out_next(1, method="POST", path=r".*/eviction")
    node.cycle(10)
    assert node.cycle(30).acted.eviction_api.asked[0] == "default/hog"
    assert wait_until(lambda: apiserver.request_log.matching("POST", r".*/pods/hog/eviction"), 5.0)
    waiting = node.cycle(1)
    assert waiting.acted.evictions == () and waiting.acted.eviction_api.waiting == "default/hog"
    assert node.log.at("warning").count(("unable to evict any pods from the node", {
        "cycle": 3, "ranking": ["default/hog", "default/modest", "default/small"]})) == 0

    node.stats.available = 200 * Mi  # the hard threshold, the POST still hung
    hard = node.cycle(1)
    assert [e.pod.name for e in hard.acted.evictions] == ["hog"] and not through_api(hard)
    assert [d.body for d in apiserver.request_log.matching("DELETE", r".*/pods/hog")] == [
        {"gracePeriodSeconds": 1, "preconditions": {"uid": "uid-hog"}}]
    assert node.longest_cycle_s < 0.5, node.longest_cycle_s

    node.settle()  # the request times out after 1 s
    ended = node.cycle(1)
    assert ended.acted.eviction_api.failure is not None and "create pods/eviction failed: " in (
        ended.acted.eviction_api.failure)
    assert ended.acted.eviction_api.evicted is None
    [entry] = [e for e in node.journal_entries() if e["name"] == "hog"]  # the DELETE's entry, not the Eviction API's
    assert entry.get("eviction_api", False) is False
    next(nodes, None)


def test_slow_refusals_hold_no_cycle(apiserver: ApiServer, node: Node) -> None:
    """Three candidates each refused after 0.4 s (a slow webhook, or a budget behind a loaded API server): the round
    takes its 1.2 s off the loop; every cycle meanwhile returns at once."""
    for name, app in (("db-pdb", "db"), ("web-pdb", "web"), ("cache-pdb", "cache")):
        apiserver.store.add_disruption_budget(budget(name, app))
    apiserver.faults.delay_next(3, delay_s=0.4, method="POST", path=r".*/eviction")
    node.cycle(10)
    node.cycle(30)
    reports: list[CycleReport] = []
    while not (reports and reports[-1].acted.refusals):
        time.sleep(0.05)
        reports.append(node.cycle(0.1))
    assert [r.pod for r in reports[-1].acted.refusals] == ["default/hog", "default/modest", "default/small"]
    # Every cycle meanwhile saw the round under way (but one may fall between its end and its collection).
    assert len(reports) > 10 and len([r for r in reports[:-1] if r.acted.eviction_api.waiting is None]) <= 1
    assert node.longest_cycle_s < 0.3, node.longest_cycle_s


def test_a_soft_eviction_while_a_hard_threshold_is_met_evicts_as_the_kubelet(apiserver: ApiServer,
                                                                            tmp_path: Path) -> None:
    """Memory acts first (as the kubelet), so the soft memory threshold's eviction is the cycle's while a hard PID
    threshold is met too: the node is past a hard threshold, so no budget is asked."""
    nodes = build_node(apiserver, tmp_path, {**SOFT, "evictionHard": {"pid.available": "500"}})
    node = next(nodes)
    apiserver.store.add_disruption_budget(budget("db-pdb", "db"))
    node.cycle(10)
    node.stats.pids = (10000, 9800)  # 200 PIDs left: the hard pid.available<500 is met
    report = node.cycle(30)

    assert report.acted.eviction_api.bypassed == "hard threshold pid.available met"
    assert [e.pod.name for e in report.acted.evictions] == ["hog"] and report.acted.refusals == ()
    assert report.acted.evictions[0].signal == "memory.available"
    assert evictions_posted(apiserver) == []
    assert [d.body for d in apiserver.request_log.matching("DELETE", r".*/pods/hog")] == [
        {"gracePeriodSeconds": 20, "preconditions": {"uid": "uid-hog"}}]
    next(nodes, None)


def test_a_round_that_can_start_no_thread_is_asked_on_the_loop(apiserver: ApiServer, node: Node,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """On a node out of pids a thread is a task like any other: in the arena's fork bomb on the real node the local
    stop's `can't start new thread` took the daemon down. The Eviction API's round then runs on the loop's thread
    (this host cannot run out of pids for one thread alone: the failure is the one Python raises)."""
    start = threading.Thread.start

    def start_unless_the_round(thread: threading.Thread) -> None:
        if thread.name == "evictd-eviction-api":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_unless_the_round)
    assert node.cycle(10).acted.evictions == ()  # the soft threshold's grace period starts
    assert node.cycle(30).acted.eviction_api.asked == ("default/hog", "default/modest", "default/small")
    assert node.requests.asking() is None, "the round ended before the cycle did"
    report = node.cycle(1)
    assert [e.pod.name for e in report.acted.evictions] == ["hog"] and through_api(report)
    assert deleting(apiserver, "hog")

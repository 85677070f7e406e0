"""NodeStatusWriter (src/evictd/kube/node_writer.py) against the test API server with evictd's API client.

Conditions go in by strategic merge (merged by type, so the kubelet's and others' conditions survive); taints by
read-modify-write with the node's resourceVersion, retried on conflicts. Time is injected: a monotonic clock for
the update period and a wall clock for the condition times.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client
from kube_faults import RecordedRequest
from kube_objects import node_manifest
from kube_pki import write_kubeconfig
from kubernetes import client as kubernetes_client

from clocks import ManualClock
from evictd.core.errors import KubeError
from evictd.core.node_status import ConditionMode
from evictd.core.signals import NodeCondition
from evictd.kube.node_writer import TAINT_CONFLICT_RETRIES, NodeStatusWriter

NODE = "node-1"
MEMORY = NodeCondition.MEMORY_PRESSURE
DISK = NodeCondition.DISK_PRESSURE
PID = NodeCondition.PID_PRESSURE
START = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
FOREIGN_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
MEMORY_TAINT = {"key": "evictd.io/memory-pressure", "effect": "NoSchedule"}
DISK_TAINT = {"key": "evictd.io/disk-pressure", "effect": "NoSchedule"}
STATUS_PATH = f"/api/v1/nodes/{NODE}/status"
NODE_PATH = f"/api/v1/nodes/{NODE}"


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


MakeWriter = Callable[..., NodeStatusWriter]


@pytest.fixture
def clocks() -> ManualClock:
    return ManualClock(100.0, wall_at_zero=START - timedelta(seconds=100.0))


@pytest.fixture
def make_writer(apiserver: ApiServer, clocks: ManualClock) -> Iterator[MakeWriter]:
    """Seed node-1 (kubelet conditions, a foreign taint unless told otherwise) and build writers for it."""
    clients: list[Any] = []

    def make(mode: ConditionMode = ConditionMode.EVICTD, *, taints: list[dict[str, str]] | None = None,
             **kwargs: Any) -> NodeStatusWriter:
        if apiserver.store.get_node(NODE) is None:
            apiserver.store.create_node(node_manifest(NODE, taints=[FOREIGN_TAINT] if taints is None else taints))
        client = evictd_api_client(apiserver)
        clients.append(client)
        return NodeStatusWriter(client, NODE, mode, clock=clocks, **kwargs)

    yield make
    for client in clients:
        client.close()


def node(apiserver: ApiServer) -> dict[str, Any]:
    stored = apiserver.store.get_node(NODE)
    assert stored is not None
    return stored


def conditions(apiserver: ApiServer) -> dict[str, dict[str, Any]]:
    found = node(apiserver)["status"]["conditions"]
    types = [c["type"] for c in found]
    assert len(types) == len(set(types)), f"duplicate condition types: {types}"
    return {c["type"]: c for c in found}


def taints(apiserver: ApiServer) -> list[dict[str, Any]]:
    return list((node(apiserver).get("spec") or {}).get("taints") or [])


def writes(apiserver: ApiServer) -> list[RecordedRequest]:
    return [r for r in apiserver.requests if r.method in ("PATCH", "PUT", "POST", "DELETE")]


def texts(condition: dict[str, Any]) -> tuple[str, str, str]:
    return condition["status"], condition["reason"], condition["message"]


KUBELET_CONDITIONS = copy.deepcopy(node_manifest(NODE)["status"]["conditions"])


# --- conditions ------------------------------------------------------------------------------------------------


def test_evictd_conditions_carry_the_kubelets_texts_and_other_conditions_survive(
    apiserver: ApiServer, make_writer: MakeWriter
) -> None:
    writer = make_writer()

    assert writer.update([MEMORY]) == [("NodeHasInsufficientMemory", "MemoryPressure")]

    found = conditions(apiserver)
    now = stamp(START)
    assert texts(found["EvictdMemoryPressure"]) == (
        "True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
    assert texts(found["EvictdDiskPressure"]) == ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
    assert texts(found["EvictdPIDPressure"]) == (
        "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available")
    for kind in ("EvictdMemoryPressure", "EvictdDiskPressure", "EvictdPIDPressure"):
        assert (found[kind]["lastHeartbeatTime"], found[kind]["lastTransitionTime"]) == (now, now)
    # The kubelet's own conditions, its MemoryPressure included, are untouched.
    assert [found["MemoryPressure"], found["Ready"]] == KUBELET_CONDITIONS
    status_write = writes(apiserver)[0]
    assert (status_write.path, status_write.headers["Content-Type"]) == (
        STATUS_PATH, "application/strategic-merge-patch+json")
    assert [c["type"] for c in status_write.body["status"]["conditions"]] == [
        "EvictdMemoryPressure", "EvictdDiskPressure", "EvictdPIDPressure"]


def test_transition_times_are_kept_and_rewrites_wait_for_the_update_period(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    writer = make_writer(update_period_s=10.0)
    first = stamp(START)
    writer.update([MEMORY])
    sent = len(writes(apiserver))

    clocks.advance(9.5)
    assert writer.update([MEMORY]) == []
    assert len(writes(apiserver)) == sent  # unchanged and not due: nothing sent

    heartbeat = stamp(clocks.advance(0.5))  # 10 s after the last write: due
    assert writer.update([MEMORY]) == []  # no transition, but rewritten
    assert len(writes(apiserver)) == sent + 1
    memory = conditions(apiserver)["EvictdMemoryPressure"]
    assert (memory["status"], memory["lastHeartbeatTime"], memory["lastTransitionTime"]) == ("True", heartbeat, first)

    cleared = stamp(clocks.advance(1.0))  # a change is written at once, inside the period
    assert writer.update([]) == [("NodeHasSufficientMemory", "MemoryPressure")]
    found = conditions(apiserver)
    assert texts(found["EvictdMemoryPressure"]) == (
        "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available")
    assert found["EvictdMemoryPressure"]["lastTransitionTime"] == cleared
    assert (found["EvictdDiskPressure"]["lastHeartbeatTime"], found["EvictdDiskPressure"]["lastTransitionTime"]) == (
        cleared, first)


def test_the_heartbeat_keeps_its_period_when_cycles_come_a_little_early(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    # A cycle every 10 s (housekeepingInterval = nodeStatusUpdateFrequency) whose writes land 0.3 s before
    # each 10 s mark: each writes, not every other one; then four cycles a second: still one write per period.
    writer = make_writer(update_period_s=10.0)
    writer.update([MEMORY])
    for gap_s in (9.7, 10.0, 10.0, 10.0):
        clocks.advance(gap_s)
        writer.update([MEMORY])
    assert len([r for r in writes(apiserver) if r.path == STATUS_PATH]) == 5
    for _ in range(44):  # eleven seconds of cycles four times a second: one write, within a second of the 50 s mark
        clocks.advance(0.25)
        writer.update([MEMORY])
    assert len([r for r in writes(apiserver) if r.path == STATUS_PATH]) == 6
    assert conditions(apiserver)["EvictdMemoryPressure"]["lastHeartbeatTime"] == stamp(START + timedelta(seconds=49))


def test_a_new_writer_keeps_the_transition_times_on_the_node(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    make_writer().update([DISK])
    clocks.advance(30)
    restarted = make_writer()  # a restarted daemon: nothing remembered but the node itself
    assert restarted.update([DISK]) == [("NodeHasDiskPressure", "DiskPressure")]
    assert conditions(apiserver)["EvictdDiskPressure"]["lastTransitionTime"] == stamp(START)


# --- taints ----------------------------------------------------------------------------------------------------


def test_pressure_taints_follow_the_conditions_and_foreign_taints_stay(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    writer = make_writer()

    writer.update([MEMORY])
    assert taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT]
    clocks.advance(1)
    writer.update([MEMORY, DISK])
    assert taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT, DISK_TAINT]
    clocks.advance(1)
    writer.update([DISK])
    assert taints(apiserver) == [FOREIGN_TAINT, DISK_TAINT]
    clocks.advance(1)
    writer.update([])
    assert taints(apiserver) == [FOREIGN_TAINT]

    taint_writes = [r for r in writes(apiserver) if r.path == NODE_PATH]
    # On a quiet cluster every taint write succeeds at once, with the node's current version as precondition.
    assert [r.status for r in taint_writes] == [200, 200, 200, 200]
    assert all(r.headers["Content-Type"] == "application/merge-patch+json" for r in taint_writes)
    assert all(r.body["metadata"]["resourceVersion"] for r in taint_writes)


def test_no_taint_write_while_the_taints_are_right(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    writer = make_writer(update_period_s=10.0)
    writer.update([PID])
    clocks.advance(10)
    writer.update([PID])
    assert [r.path for r in writes(apiserver)] == [STATUS_PATH, NODE_PATH, STATUS_PATH]
    assert taints(apiserver) == [FOREIGN_TAINT, {"key": "evictd.io/pid-pressure", "effect": "NoSchedule"}]


def hook_after(apiserver: ApiServer, monkeypatch: pytest.MonkeyPatch, method: str, path: str,
               action: Callable[[], object], times: int = 1) -> None:
    """Run `action` in the server right after it committed the next `times` requests of `method` on `path`.

    The request log is written as the answer goes out, so the action lands between that answer and the
    client's next request: exactly what another controller writing the node at that moment would do.
    """
    log = apiserver.request_log
    original = log.add
    remaining = [times]

    def add(entry: RecordedRequest) -> None:
        original(entry)
        if remaining[0] > 0 and entry.method == method and entry.path == path and entry.status == 200:
            remaining[0] -= 1
            action()

    monkeypatch.setattr(log, "add", add)


AUTOSCALER = "system:serviceaccount:kube-system:cluster-autoscaler"


@pytest.fixture
def autoscaler(apiserver: ApiServer, tmp_path: Path) -> Iterator[Any]:
    """CoreV1Api of another controller writing the same node (its own client certificate)."""
    from kubernetes import client

    kubeconfig = write_kubeconfig(tmp_path / "autoscaler.kubeconfig", apiserver.url, apiserver.ca_path,
                                  client=apiserver.pki.client_cert(AUTOSCALER))
    api_client = apiserver.api_client(kubeconfig)
    yield client.CoreV1Api(api_client)
    api_client.close()


def add_taint(api: Any, taint: dict[str, str]) -> Callable[[], object]:
    """The other controller's read-modify-write of the node's taints, with its resourceVersion precondition."""

    def action() -> object:
        current = api.read_node(NODE)
        existing = [t.to_dict() for t in current.spec.taints or []]
        kept = [{k: v for k, v in t.items() if v is not None} for t in existing]
        body = {"metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": [*kept, taint]}}
        return api.patch_node(NODE, body, _content_type="application/merge-patch+json")

    return action


def test_a_concurrent_taint_change_is_retried_and_both_taints_stay(
    apiserver: ApiServer, make_writer: MakeWriter, monkeypatch: pytest.MonkeyPatch, autoscaler: Any
) -> None:
    writer = make_writer()
    autoscaler_taint = {"key": "autoscaler/scale-down", "value": "1", "effect": "PreferNoSchedule"}
    # Between evictd's status write and its taint write, another controller changes the taints.
    hook_after(apiserver, monkeypatch, "PATCH", STATUS_PATH, add_taint(autoscaler, autoscaler_taint))

    writer.update([MEMORY])

    assert taints(apiserver) == [FOREIGN_TAINT, autoscaler_taint, MEMORY_TAINT]
    evictd = [(r.method, r.path, r.status) for r in apiserver.requests if r.user != AUTOSCALER]
    assert evictd == [("GET", NODE_PATH, 200), ("PATCH", STATUS_PATH, 200), ("PATCH", NODE_PATH, 409),
                      ("GET", NODE_PATH, 200), ("PATCH", NODE_PATH, 200)]
    assert [(r.method, r.status) for r in apiserver.requests if r.user == AUTOSCALER] == [("GET", 200),
                                                                                         ("PATCH", 200)]


def test_conflicts_are_retried_a_few_times_then_reported(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    writer = make_writer()
    apiserver.faults.fail_next(TAINT_CONFLICT_RETRIES - 1, code=409, method="PATCH", path=f"^{NODE_PATH}$")
    writer.update([MEMORY])
    assert taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT]

    clocks.advance(1)
    apiserver.faults.fail_next(TAINT_CONFLICT_RETRIES, code=409, method="PATCH", path=f"^{NODE_PATH}$")
    with pytest.raises(KubeError) as caught:
        writer.update([])
    assert caught.value.status == 409 and taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT]
    # Not recorded as written: the next cycle tries again at once, and the transition is still reported.
    assert writer.update([]) == [("NodeHasSufficientMemory", "MemoryPressure")]
    assert taints(apiserver) == [FOREIGN_TAINT]


def test_an_unreachable_api_is_reported_and_retried_next_time(apiserver: ApiServer, make_writer: MakeWriter) -> None:
    writer = make_writer(timeout_s=0.5)
    apiserver.faults.fail_next(1, code=500, method="GET", path=f"^{NODE_PATH}$")
    with pytest.raises(KubeError) as caught:
        writer.update([MEMORY])
    assert (caught.value.verb, caught.value.status) == ("get nodes", 500)
    apiserver.faults.time_out_next(1, method="PATCH", path=f"^{STATUS_PATH}$")
    with pytest.raises(KubeError) as caught:
        writer.update([MEMORY])
    assert (caught.value.verb, caught.value.status) == ("patch nodes/status", None)
    assert "EvictdMemoryPressure" not in conditions(apiserver)

    assert writer.update([MEMORY]) == [("NodeHasInsufficientMemory", "MemoryPressure")]
    assert conditions(apiserver)["EvictdMemoryPressure"]["status"] == "True"
    assert taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT]


# --- modes -----------------------------------------------------------------------------------------------------


def test_standard_mode_writes_the_standard_conditions_and_no_evictd_taints(
    apiserver: ApiServer, make_writer: MakeWriter
) -> None:
    # A node left with an evictd taint by an earlier run in evictd mode.
    writer = make_writer(ConditionMode.STANDARD, taints=[FOREIGN_TAINT, MEMORY_TAINT])

    assert writer.update([MEMORY, PID]) == [("NodeHasInsufficientMemory", "MemoryPressure"),
                                             ("NodeHasInsufficientPID", "PIDPressure")]

    found = conditions(apiserver)
    assert texts(found["MemoryPressure"]) == (
        "True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
    assert texts(found["DiskPressure"]) == ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
    assert texts(found["PIDPressure"]) == ("True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
    assert found["Ready"] == KUBELET_CONDITIONS[1]
    assert not [kind for kind in found if kind.startswith("Evictd")]
    assert taints(apiserver) == [FOREIGN_TAINT]  # its own leftover taint removed, none added


def test_standard_mode_on_a_clean_node_touches_no_taints(apiserver: ApiServer, make_writer: MakeWriter) -> None:
    writer = make_writer(ConditionMode.STANDARD)
    writer.update([DISK])
    assert [r.path for r in writes(apiserver)] == [STATUS_PATH]
    assert taints(apiserver) == [FOREIGN_TAINT]


def test_dry_run_writes_nothing(apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock) -> None:
    writer = make_writer(dry_run=True)
    before = node(apiserver)

    assert writer.update([MEMORY, DISK]) == [("NodeHasInsufficientMemory", "MemoryPressure"),
                                             ("NodeHasDiskPressure", "DiskPressure")]
    clocks.advance(60)
    assert writer.update([]) == [("NodeHasSufficientMemory", "MemoryPressure"),
                                 ("NodeHasNoDiskPressure", "DiskPressure")]

    assert writes(apiserver) == [] and {r.method for r in apiserver.requests} == {"GET"}
    assert node(apiserver) == before


def test_a_mode_switched_to_dry_run_withdraws_and_back_to_acting_writes_at_once(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    # The node's mode (evictd.io/mode) is asked at each update: acting, then dry-run, then acting again.
    dry_run = [False]
    writer = make_writer(dry_run=lambda: dry_run[0])
    writer.update([MEMORY])
    assert conditions(apiserver)["EvictdMemoryPressure"]["status"] == "True"
    assert taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT]

    dry_run[0] = True
    clocks.advance(1)
    assert writer.update([MEMORY]) == [], "the switch's update withdraws; no transition to report"
    assert taints(apiserver) == [FOREIGN_TAINT], "a dry-run evictd keeps no taint on the node"
    assert texts(conditions(apiserver)["EvictdMemoryPressure"])[:2] == ("Unknown", "EvictdStopped")
    before, written = node(apiserver), len(writes(apiserver))
    clocks.advance(60)
    writer.update([MEMORY, DISK])
    assert len(writes(apiserver)) == written and node(apiserver) == before, "dry-run writes nothing"

    dry_run[0] = False
    clocks.advance(1)
    assert writer.update([MEMORY]) == [("NodeHasInsufficientMemory", "MemoryPressure")]
    assert conditions(apiserver)["EvictdMemoryPressure"]["status"] == "True", "written at the first acting update"
    assert taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT]


# --- a clean stop ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [ConditionMode.EVICTD, ConditionMode.STANDARD])
def test_a_clean_stop_removes_evictds_taints_and_leaves_its_conditions_unknown(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock, mode: ConditionMode
) -> None:
    writer = make_writer(mode)
    writer.update([MEMORY, DISK])
    stopped_at = stamp(clocks.advance(5))

    writer.withdraw(timeout_s=2.0)

    found = conditions(apiserver)
    kinds = (["EvictdMemoryPressure", "EvictdDiskPressure", "EvictdPIDPressure"] if mode is ConditionMode.EVICTD
             else ["MemoryPressure", "DiskPressure", "PIDPressure"])
    for kind in kinds:
        assert texts(found[kind]) == ("Unknown", "EvictdStopped", "evictd stopped; this condition is not being updated")
        assert (found[kind]["lastHeartbeatTime"], found[kind]["lastTransitionTime"]) == (stopped_at, stopped_at)
    if mode is ConditionMode.EVICTD:  # the kubelet's own conditions stay as they were
        assert [found["MemoryPressure"], found["Ready"]] == KUBELET_CONDITIONS
    assert taints(apiserver) == [FOREIGN_TAINT]


def test_a_clean_stop_in_dry_run_writes_nothing(apiserver: ApiServer, make_writer: MakeWriter) -> None:
    writer = make_writer(dry_run=True, taints=[FOREIGN_TAINT, MEMORY_TAINT])
    before = node(apiserver)
    writer.withdraw(timeout_s=2.0)
    assert writes(apiserver) == [] and node(apiserver) == before


def test_a_clean_stop_against_a_hung_api_gives_up_after_its_timeout(
    apiserver: ApiServer, make_writer: MakeWriter
) -> None:
    writer = make_writer()
    apiserver.faults.time_out_next(1, method="GET")
    started = time.monotonic()
    with pytest.raises(KubeError):
        writer.withdraw(timeout_s=0.5)
    assert time.monotonic() - started < 2.0


# --- with evictd's node Lease renewed: the kubelet's status cadence -------------------------------------------


class Lease:
    """The node Lease as the writer asks it (`NodeLease.renewing`), switched by the test."""

    def __init__(self) -> None:
        self.renewed = True

    def renewing(self) -> bool:
        return self.renewed


def status_writes(apiserver: ApiServer) -> int:
    """evictd's node status writes (not the test's own)."""
    return len([r for r in writes(apiserver) if r.path == STATUS_PATH
                and r.headers.get("User-Agent", "").startswith("evictd")])


def cycles_until(writer: NodeStatusWriter, clocks: ManualClock, until_s: float, pressure: list[NodeCondition],
                 step_s: float = 1.0) -> None:
    """A cycle every `step_s` until the clock reaches `until_s`, each updating the writer with `pressure`."""
    while clocks.now_s < until_s:
        clocks.advance(step_s)
        writer.update(pressure)


def test_with_the_lease_renewed_a_change_is_written_at_once_and_the_rest_every_report_period(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    jitters = [0.2]  # the kubelet's one-time delay after a change: +0.2 of the report period (60 s)
    writer = make_writer(update_period_s=10.0, report_period_s=300.0, heartbeat=Lease(), jitter=jitters.pop)
    writer.update([])  # the first write (the kubelet's, at start, has the jitter too)
    assert status_writes(apiserver) == 1
    jitters.append(-0.5)
    clocks.advance(5)
    assert writer.update([MEMORY]) == [("NodeHasInsufficientMemory", "MemoryPressure")]  # a change: at once
    assert status_writes(apiserver) == 2
    changed_at = clocks.now_s
    # A held minute of cycles every 2.5 s: nothing, where the heartbeat wrote 6 before.
    cycles_until(writer, clocks, changed_at + 60, [MEMORY], step_s=2.5)
    assert status_writes(apiserver) == 2
    # The next report: 300 s after the change, less the one-time jitter (-0.5: 150 s), then every 300 s.
    cycles_until(writer, clocks, changed_at + 150 - 1, [MEMORY])
    assert status_writes(apiserver) == 2
    cycles_until(writer, clocks, changed_at + 150, [MEMORY])
    assert status_writes(apiserver) == 3
    cycles_until(writer, clocks, clocks.now_s + 600, [MEMORY])
    assert status_writes(apiserver) == 5
    assert conditions(apiserver)["EvictdMemoryPressure"]["lastHeartbeatTime"] == stamp(clocks.wall())
    assert taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT]  # the taint written with the change, and kept


def test_a_lease_no_longer_renewed_brings_the_heartbeat_back_to_the_update_period(
    apiserver: ApiServer, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    lease = Lease()
    writer = make_writer(update_period_s=10.0, report_period_s=300.0, heartbeat=lease, jitter=lambda: 0.0)
    writer.update([DISK])
    cycles_until(writer, clocks, clocks.now_s + 30, [DISK], step_s=10)
    assert status_writes(apiserver) == 1
    lease.renewed = False  # the API refused the renewals (403) or stopped answering them
    clocks.advance(10)
    writer.update([DISK])  # at once: the last write is 40 s old
    assert status_writes(apiserver) == 2
    cycles_until(writer, clocks, clocks.now_s + 30, [DISK], step_s=10)
    assert status_writes(apiserver) == 5
    lease.renewed = True  # renewed again: the next report 300 s after the last write
    last_write_s = clocks.now_s
    cycles_until(writer, clocks, last_write_s + 290, [DISK], step_s=10)
    assert status_writes(apiserver) == 5
    cycles_until(writer, clocks, last_write_s + 300, [DISK], step_s=10)
    assert status_writes(apiserver) == 6


def test_with_the_lease_what_someone_else_changed_is_written_back_within_the_update_period(
    apiserver: ApiServer, api_client: Any, make_writer: MakeWriter, clocks: ManualClock
) -> None:
    writer = make_writer(update_period_s=10.0, report_period_s=300.0, heartbeat=Lease(), jitter=lambda: 0.0)
    writer.update([MEMORY])
    start_s = clocks.now_s
    # Between reports the Node is read once per update period, not written.
    cycles_until(writer, clocks, start_s + 60, [MEMORY], step_s=2.5)
    evictd_gets = [r for r in apiserver.requests if r.method == "GET" and r.path == NODE_PATH
                   and r.headers.get("User-Agent", "").startswith("evictd")]
    assert status_writes(apiserver) == 1 and 6 <= len(evictd_gets) <= 7
    # A restarted kubelet rewrites the taints (evictd's gone), and someone flips evictd's condition.
    core = kubernetes_client.CoreV1Api(api_client)
    core.patch_node(NODE, {"spec": {"taints": [FOREIGN_TAINT]}})
    core.patch_node_status(NODE, {"status": {"conditions": [{"type": "EvictdMemoryPressure", "status": "False"}]}})
    cycles_until(writer, clocks, clocks.now_s + 10, [MEMORY], step_s=2.5)
    assert taints(apiserver) == [FOREIGN_TAINT, MEMORY_TAINT]
    assert conditions(apiserver)["EvictdMemoryPressure"]["status"] == "True"
    assert status_writes(apiserver) == 2

"""Real `evictd run` processes and the node Lease (src/evictd/kube/node_lease.py) on the test API server: the
Lease is the guard across hosts and stateDirs. Two evictd for one node with different stateDirs and different
node locks (as on two hosts, or with two `EVICTD_NODE_LOCK`s): the second waits `stateLockTimeout`, then exits 2
naming the Lease and its holder, and the first never notices. A clean stop releases the Lease (the next evictd
takes it at once, counting a transition); a SIGKILLed holder on this host is taken over at once.

Started as tests/daemon/test_state_dir_lock.py starts them: no eviction threshold, no container runtime (a socket that does not
exist), so nothing on the machine is touched.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apiserver import ApiServer
from evictd_process import EvictdProcess
from kube_objects import node_manifest
from lease_contract import raw
from test_state_dir_lock import NODE
from test_state_dir_lock import start as start_with_state

WAIT_S = 2.0
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/evictd-system/leases/{NODE}"


def start(tmp_path: Path, name: str, apiserver: ApiServer, evictd_processes: list[EvictdProcess],
          extra: str = "") -> EvictdProcess:
    """`evictd run` for NODE with a stateDir and a node lock of its own (another host, as far as locks go)."""
    return start_with_state(tmp_path, name, apiserver, tmp_path / name / "state", evictd_processes, extra)


def lease_spec(apiserver: ApiServer) -> dict[str, Any]:
    client = apiserver.api_client()
    try:
        status, lease = raw(client, "GET", LEASE)
    finally:
        client.close()
    assert status == 200, lease
    spec: dict[str, Any] = lease["spec"]
    return spec


def test_a_second_evictd_for_the_node_elsewhere_waits_for_the_lease_then_exits_2(
        tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    # Its lease lasts 1 s: the second's wait is stateLockTimeout (2 s), at least the lease's duration and a poll.
    first = start(tmp_path, "first", apiserver, evictd_processes, "nodeLeaseDurationSeconds: 1\n")
    first.wait_event("evictd started")
    holder = lease_spec(apiserver)["holderIdentity"]
    assert holder.endswith(f"/{first.process.pid}")

    began = time.monotonic()
    second = start(tmp_path, "second", apiserver, evictd_processes, f"stateLockTimeout: {WAIT_S:g}s\n")
    waiting = second.wait_event("node lease held by another evictd: waiting for it to stop renewing")
    assert (waiting["lease"], waiting["holder"], waiting["wait_s"]) == (f"evictd-system/{NODE}", holder, WAIT_S)
    assert second.process.wait(timeout=30) == 2
    assert WAIT_S <= time.monotonic() - began < WAIT_S + 15
    [line] = second.stderr().splitlines()
    assert line.startswith(f"evictd: the node's Lease evictd-system/{NODE} is still renewed by another evictd "
                           f"(holder '{holder}', last renewed "), line
    assert line.endswith("after 2 s: evictd does not start (one evictd per node)"), line
    assert not any(e.get("event") == "evictd started" for e in second.events)

    # The first one never noticed: still running, still the holder.
    assert first.process.poll() is None and first.http("/healthz")[0] == 200
    assert lease_spec(apiserver)["holderIdentity"] == holder
    assert first.stop() == 0
    assert any(e.get("event") == "node lease released" for e in first.events)
    assert lease_spec(apiserver)["holderIdentity"] == ""


def test_after_a_clean_stop_or_a_sigkill_the_next_evictd_takes_the_lease_at_once(
        tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    first = start(tmp_path, "first", apiserver, evictd_processes)
    first.wait_event("evictd started")
    assert first.stop() == 0

    second = start(tmp_path, "second", apiserver, evictd_processes, "stateLockTimeout: 60s\n")
    began = time.monotonic()
    second.wait_event("evictd started")
    spec = lease_spec(apiserver)
    assert spec["holderIdentity"].endswith(f"/{second.process.pid}") and spec["leaseTransitions"] == 0

    second.kill()  # SIGKILL: no release; its Lease names a PID of this host's boot that no longer runs
    assert lease_spec(apiserver)["holderIdentity"].endswith(f"/{second.process.pid}")
    third = start(tmp_path, "third", apiserver, evictd_processes, "stateLockTimeout: 60s\n")
    third.wait_event("evictd started")
    assert time.monotonic() - began < 30  # never the 40 s of the Lease's duration, nor the 60 s wait
    spec = lease_spec(apiserver)
    assert spec["holderIdentity"].endswith(f"/{third.process.pid}") and spec["leaseTransitions"] == 1
    assert not any(e.get("event", "").startswith("node lease held by another") for e in third.events)
    assert third.stop() == 0



# Issue #38 item 3: a holder paused past its lease (SIGSTOP: a frozen VM) while another evictd takes the Lease over.
# Both see memory pressure (available under 99 % of capacity: always) and so write the node every second while
# they act; the first authenticates with the client certificate, the second with the bearer token, so that each
# write names its writer (`RecordedRequest.user`).
FAST = "nodeLeaseDurationSeconds: 2\nnodeStatusUpdateFrequency: 1s\nnodeStatusReportFrequency: 1s\n"


def start_acting(tmp_path: Path, name: str, kubeconfig: Path, evictd_processes: list[EvictdProcess]) -> EvictdProcess:
    work = tmp_path / name
    work.mkdir()
    daemon = EvictdProcess(
        work, kubelet='evictionHard: {memory.available: "99%"}\nenforceNodeAllocatable: []\n',
        evictd=(f"nodeName: {NODE}\nkubeconfig: {kubeconfig}\nstateDir: {work / 'state'}\n"
                f"containerRuntimeEndpoint: unix://{tmp_path}/no-runtime.sock\nhousekeepingInterval: 1s\n"
                "psiWakeups: false\nmemcgWakeups: false\nshutdownTimeout: 5s\nstateLockTimeout: 10s\n" + FAST),
        env={"EVICTD_NODE_LOCK": str(work / "node.lock")})
    evictd_processes.append(daemon)
    return daemon


def node_writers(apiserver: ApiServer, since: int) -> list[str]:
    """Who wrote the Node (its status or its taints) in the requests from index `since` on, in order."""
    return [r.user or "" for r in apiserver.requests[since:]
            if r.method in ("PATCH", "PUT") and r.path.startswith(f"/api/v1/nodes/{NODE}") and 200 <= r.status < 300]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_holder_paused_past_its_lease_stands_by_when_resumed_one_evictd_acting_at_a_time(
        tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    first = start_acting(tmp_path, "first", apiserver.kubeconfig_path, evictd_processes)
    first.wait_event("evictd started")
    wait_until(lambda: len(node_writers(apiserver, 0)) >= 2, 15, "the first evictd never wrote the node")
    [first_user] = set(node_writers(apiserver, 0))

    os.kill(first.process.pid, signal.SIGSTOP)  # frozen past its 2 s lease
    try:
        second = start_acting(tmp_path, "second", apiserver.token_kubeconfig_path, evictd_processes)
        second.wait_event("evictd started", timeout=30)  # after the first's record stood still for 2 s
        assert lease_spec(apiserver)["holderIdentity"].endswith(f"/{second.process.pid}")
        mark = len(apiserver.requests)
        wait_until(lambda: len(node_writers(apiserver, mark)) >= 2, 10, "the second evictd never wrote the node")
        [second_user] = set(node_writers(apiserver, mark))
        assert second_user != first_user
    finally:
        os.kill(first.process.pid, signal.SIGCONT)
    resumed = len(apiserver.requests)
    first.wait_event("standing by: not acting (no eviction, condition, taint or event)", timeout=10)
    first.wait_event("node lease lost to another evictd: not acting (no eviction, condition or taint) until its "
                     "holder stops renewing it", timeout=10)
    time.sleep(3.0)  # three of its cycles, had it acted
    writers = node_writers(apiserver, resumed)
    assert first_user not in writers and writers.count(second_user) >= 2, writers
    assert lease_spec(apiserver)["holderIdentity"].endswith(f"/{second.process.pid}")
    assert first.process.poll() is None and first.http("/healthz")[0] == 200  # alive, standing by

    # The second stops cleanly (releasing the Lease): the first takes it back and acts again.
    assert second.stop() == 0
    handed = len(apiserver.requests)
    first.wait_event("acting again: the node Lease is held", timeout=10)
    wait_until(lambda: first_user in node_writers(apiserver, handed), 10, "the first never acted again")
    assert second_user not in node_writers(apiserver, handed)[node_writers(apiserver, handed).index(first_user):]
    assert lease_spec(apiserver)["holderIdentity"].endswith(f"/{first.process.pid}")
    assert first.stop() == 0

"""Real `evictd run` processes and the node Lease (src/evictd/kube/node_lease.py) on the test API server: the
Lease is the guard across hosts and stateDirs. Two evictd for one node with different stateDirs and different
node locks (as on two hosts, or with two `EVICTD_NODE_LOCK`s): the second waits `stateLockTimeout`, then exits 2
naming the Lease and its holder, and the first never notices. A clean stop releases the Lease (the next evictd
takes it at once, counting a transition); a SIGKILLed holder on this host is taken over at once.

Started as tests/daemon/test_state_dir_lock.py starts them: no eviction threshold, no container runtime (a socket that does not
exist), so nothing on the machine is touched.
"""

from __future__ import annotations

import time
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
    first = start(tmp_path, "first", apiserver, evictd_processes)
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

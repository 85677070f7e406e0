"""A rollback that needs no API, on the real cluster: the API server stopped, the node-local mode file holds.

Issue #72: an acting evictd cut off from the API keeps the last `evictd.io/mode` label it read and still stops
pods through the runtime, so relabelling a partitioned canary does not roll it back. The way back without the API
is the node-local file `<stateDir>/mode`, set with `evictd mode dry-run` on the node.

Here: evictd acts (dryRun false, no label) with a hard `allocatableMemory.available` threshold 120 MiB under
what the node's pods have; a pod that will take 200 MiB once `HOG_DELAY_S` has passed; `evictd mode dry-run` on
the node, then the real kube-apiserver stopped (SIGSTOP: every request hangs, as across a partition). The hog
crosses the threshold while the API is away: evictd decides and reports it (`would evict pod`), and neither
deletes nor stops it (its processes still in its cgroup, nothing journaled). The API back and `evictd mode clear`
run, the same evictd evicts the hog at once: the pressure was real, and the file was what held it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backends import RealNode
from node_under_test import MiB, new_name, wait_until

from evictd.state_dir import JOURNAL_FILE

pytestmark = pytest.mark.real_cluster

HOG_MIB = 200
THRESHOLD_BELOW_MIB = 120
# Long enough to set the file and stop the API server after the pod runs; the hog takes its memory then.
HOG_DELAY_S = 20
SIGNAL = "allocatableMemory.available"


def evictd_mode(state_dir: Path, *words: str) -> str:
    done = subprocess.run([sys.executable, "-m", "evictd", "mode", *words, "--state-dir", str(state_dir)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"evictd mode {' '.join(words)} exited {done.returncode}: {done.stderr}"
    return done.stdout


def pod_processes(pods_cgroup: Path, uid: str) -> int:
    """The processes in the pod's v1 memory cgroup (kubepods/<qos>/pod<uid>), 0 when it is gone."""
    for found in pods_cgroup.glob(f"*/pod{uid}"):
        return sum(len((child / "cgroup.procs").read_text().split()) for child in found.iterdir() if child.is_dir())
    return 0


def test_with_the_api_server_stopped_a_node_held_in_dry_run_by_its_file_evicts_nothing(node: RealNode) -> None:
    cluster = node.cluster
    threshold_mib = node.settled_allocatable_available_bytes() // MiB - THRESHOLD_BELOW_MIB
    daemon = node.start_evictd(f"evictionHard: {{{SIGNAL}: {threshold_mib}Mi}}\nevictionPressureTransitionPeriod: 3s\n")
    daemon.wait_event("evictd started", timeout=30)
    assert daemon.wait_event("mode", timeout=30)["mode"] == "acting"
    hog = node.run_pod(new_name("hog"), f'trap "exit 0" TERM; echo ready; sleep {HOG_DELAY_S}; '
                       f"(dd if=/dev/zero bs={HOG_MIB}M count=1 2>/dev/null | sleep 2147483647) & "
                       "while true; do sleep 1; done", requests={"memory": "32Mi"})
    key = f"{hog.namespace}/{hog.name}"

    evictd_mode(daemon.state_dir, "dry-run")
    changed = daemon.wait_event("mode changed", timeout=30)
    assert (changed["mode"], changed["source"]) == ("dry-run", "node-file")
    apiserver = cluster.processes["kube-apiserver"]
    os.kill(apiserver.pid, signal.SIGSTOP)
    try:
        decided = daemon.wait_event("would evict pod", timeout=HOG_DELAY_S + 60, pod=key)
        assert decided["signal"] == SIGNAL
        time.sleep(3.0)  # a few cycles more under the pressure, the API still away
        assert not [e for e in daemon.events if e.get("event") == "evicting pod"]
        assert pod_processes(node.pods_cgroup(), hog.uid) > 0, "the hog was stopped on the node"
        journal = daemon.state_dir / JOURNAL_FILE
        assert not journal.exists() or hog.uid not in journal.read_text(), "an eviction was journaled"
    finally:
        os.kill(apiserver.pid, signal.SIGCONT)
    wait_until(cluster.api.ready, 60, "the API server to answer again")
    assert node.pod(hog) is not None and not node.events(hog, "Evicted")

    evictd_mode(daemon.state_dir, "clear")
    evicting = daemon.wait_event("evicting pod", timeout=60, pod=key)
    assert evicting["signal"] == SIGNAL
    node.wait_gone(hog)
    assert len(node.events(hog, "Evicted")) == 1
    assert daemon.stop() == 0

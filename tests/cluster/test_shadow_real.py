"""Shadow mode beside the real kubelet v1.36.2 evicting: evictd in dry-run with the same thresholds decides the
same pod, and `evictd shadow-report` says so. Runs only in `make test-cluster`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import RealNode
from evictd_process import EvictdProcess
from node_under_test import memory_hog, new_name, wait_until
from real_cluster import RealCluster
from side_by_side import HOG_MIB, kubelet_evicting, thresholds

pytestmark = pytest.mark.real_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def evicting_kubelet(real_cluster: RealCluster, tmp_path: Path) -> Iterator[RealNode]:
    real_cluster.restart_kubelet(kubelet_evicting())
    node = RealNode(real_cluster, tmp_path)
    try:
        yield node
    finally:
        node.close()
        real_cluster.restart_kubelet()  # its eviction off again, the pods cgroup as before


def test_a_dry_run_evictd_agrees_with_the_kubelets_own_eviction(evicting_kubelet: RealNode) -> None:
    node = evicting_kubelet
    daemon = node.start_evictd(thresholds(), "dryRun: true\n")
    daemon.wait_event("evictd started", timeout=30)
    quiet = node.run_pod(new_name("quiet"), 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done',
                         requests={"memory": "64Mi"})
    # A gradual rise (100 MiB every 2.5 s): the kubelet ranks by per-pod stats that cAdvisor refreshes about every
    # 10 s while the pods cgroup total is fresh; a hog that fills at once looked idle to it and it evicted a
    # BestEffort bystander instead (seen here: evictd's dry run chose the hog).
    hog = node.run_pod(new_name("hog"), memory_hog(HOG_MIB, steps=9, step_s=2.5), requests={"memory": "32Mi"})

    would = daemon.wait_event("would evict pod", timeout=60, pod=f"{hog.namespace}/{hog.name}")

    def evicted_by_the_kubelet() -> dict[str, object] | None:
        """The kubelet's record: terminal, with its DisruptionTarget (Succeeded with no reason for a container
        that exits 0 on SIGTERM, as this one does; Failed/Evicted otherwise)."""
        status = (node.pod(hog) or {}).get("status") or {}
        disrupted = [c for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"]
        return disrupted[0] if disrupted and status.get("phase") in ("Succeeded", "Failed") else None

    condition = wait_until(evicted_by_the_kubelet, 60, "the kubelet to evict the hog")
    assert condition["reason"] == "TerminationByKubelet"
    # The same choice and the same message (each says the available amount it saw, a moment apart).
    assert str(condition["message"]).split("available: ")[0] == would["message"].split("available: ")[0]
    comparison = daemon.wait_event("shadow comparison", timeout=30)
    assert comparison["outcome"] == "agree"
    assert comparison["evictd"]["pod"] == comparison["kubelet"]["pod"] == f"{hog.namespace}/{hog.name}"
    assert comparison["kubelet_later_by_s"] >= 0
    assert node.pod(quiet) is not None and not node.events(quiet, "Evicted")
    assert daemon.stop() == 0

    state_dir = Path(daemon_state_dir(daemon))
    report = subprocess.run([sys.executable, "-m", "evictd", "shadow-report", "--state-dir", str(state_dir),
                             "--output", "json"], cwd=ROOT, capture_output=True, text=True, check=True)
    summary = json.loads(report.stdout)
    assert summary["outcomes"]["agree"] == 1 and summary["agreement"] == 1.0 and summary["disagreements"] == []


def daemon_state_dir(daemon: EvictdProcess) -> str:
    for line in daemon.config_path.read_text().splitlines():
        if line.startswith("stateDir: "):
            return line.removeprefix("stateDir: ")
    raise AssertionError("no stateDir in the daemon's configuration")

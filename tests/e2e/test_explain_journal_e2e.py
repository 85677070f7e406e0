"""End to end: `evictd explain` of an eviction the flight recording does not hold, from the eviction journal.

The node of test_memory_eviction_e2e.py (the session's containerd, the test API server, the pods cgroup limited
to 400 MiB, a hard ``allocatableMemory.available<250Mi``), with `evictd run` configured ``recorder: false``: a
pod filling a 200 MiB buffer is evicted through the API, and nothing is recorded. `evictd explain --last` and
`evictd explain POD` then print what the journal holds (the pod, the signal, the kubelet's message, the grace
period, the API steps done) and say that the ranked table, the first-met times and the reclaim are not
available because the recording does not hold that cycle.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from containerd_harness import Containerd
from cri_fixtures import PodFactory
from e2e_node import ClusterNode, Container, MiB, hog_script, pods_memory_limit
from evictd_process import evictd_command

from polling import wait_until

SIGNAL = "allocatableMemory.available"


@pytest.fixture
def node(containerd: Containerd, pods: PodFactory, apiserver: ApiServer, tmp_path: Path) -> Iterator[ClusterNode]:
    cluster = ClusterNode(containerd, pods, apiserver, tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def test_explain_falls_back_to_the_journal_when_the_recorder_is_off(node: ClusterNode) -> None:
    with pods_memory_limit(node, 400 * MiB):
        daemon = node.start_evictd(f"evictionHard: {{{SIGNAL}: 250Mi}}\n", "recorder: false\n")
        daemon.wait_event("evictd started")
        hog = node.run_pod("hog", [Container("hog", hog_script(200), requests={"memory": "32Mi"})])
        key = f"{hog.namespace}/{hog.name}"
        evicting = daemon.wait_event("evicting pod", timeout=20, pod=key)
        assert "decision" not in evicting, "a run that does not record names no decision"
        wait_until(lambda: node.pod_events(hog, "Evicted"), 10, "the Evicted event")
        node.wait_gone(hog)
        assert not (node.state_dir / "recording").exists(), "recorder: false writes no recording"

        last = evictd_command("explain", "--last", "--state-dir", str(node.state_dir), "--output", "json")
        assert last.returncode == 0, last.stderr
        why = json.loads(last.stdout)
        assert (why["source"], why["pod"], why["uid"], why["signal"]) == ("journal", key, hog.uid, SIGNAL)
        assert why["message"] == evicting["message"] and why["decision"] is None
        assert why["effectiveGracePeriodSeconds"] == evicting["grace_period_seconds"] == 1
        assert why["annotations"]["offending_containers"] == "hog"
        steps = why["apiSteps"]
        assert steps["condition_written"] and steps["delete_sent"] and steps["deleted"] and steps["event_written"]
        assert why["notRecorded"] == "the run of evictd that decided it did not record (recorder: false)"
        assert "the recording does not hold that cycle" in why["notAvailable"]
        assert "ranking" not in why and "threshold" not in why, "nothing made up that only the recording knows"

        by_pod = evictd_command("explain", hog.name, "--state-dir", str(node.state_dir))
        assert by_pod.returncode == 0, by_pod.stderr
        lines = by_pod.stdout.splitlines()
        assert lines[0].endswith(f"evicted {key} for {SIGNAL}, grace 1s (from the eviction journal)"), lines[0]
        assert f"  message: {evicting['message']}" in lines
        assert "ranked table" in by_pod.stdout and "the recording does not hold that cycle" in by_pod.stdout

        # A pod evicted by neither: one line, exit status 1, naming both sources.
        unknown = evictd_command("explain", "e2e/nobody", "--state-dir", str(node.state_dir))
        assert unknown.returncode == 1 and unknown.stdout == ""
        assert unknown.stderr.startswith("evictd: no recorded cycles in ") and "nor in the journal" in unknown.stderr
        # `--now` needs the recording: there is none.
        now = evictd_command("explain", "--now", "--state-dir", str(node.state_dir))
        assert now.returncode == 1 and now.stderr.startswith("evictd: no recorded cycles in ")
        assert daemon.stop() == 0

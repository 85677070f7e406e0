"""End to end: a canary rolled back with the API unreachable, through the node-local mode file (`evictd mode`).

The node of test_api_faults_e2e.py: the session's containerd with its pods cgroup limited to 400 MiB, a hard
``allocatableMemory.available<250Mi``, 1 s housekeeping; a pod that fills a 200 MiB buffer on a trigger is the
pressure. evictd is configured `dryRun: true` (the fleet's setting) and its Node labelled ``evictd.io/mode=acting``
(the canary). Then the API server refuses everything (every connection closed unanswered, watches cut): the label
stays `acting` as last read, and an acting evictd would stop the pod through the CRI. The operator runs `evictd mode
dry-run` on the node.

What must hold: within a cycle evictd logs the mode change, set by the node-local file; under the pressure that
follows it decides the eviction and reports it ("would evict pod"), and the pod keeps running: no CRI stop, no
journal entry, no eviction counted. `evictd mode clear` then hands the mode back to the label, still `acting` as
last read: the same pressure now stops the pod through the CRI (the pressure was real, and the file was what held
it).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from e2e_node import (
    ClusterNode,
    Container,
    Trigger,
    hog_script,
    journal,
    pods_memory_limit,
    stopped_on_the_node,
    wait_until,
)
from evictd_process import ROOT

from evictd.core.engine_rules import MINIMUM_GRACE_PERIOD_S

MiB = 1 << 20
PODS_LIMIT_BYTES = 400 * MiB
HOG_MIB = 200
SIGNAL = "allocatableMemory.available"
KUBELET = f"evictionHard: {{{SIGNAL}: 250Mi}}\nevictionPressureTransitionPeriod: 3s\n"
MODE_LABEL = "evictd.io/mode"
EVERY_REQUEST = 1_000_000
# The file is read at the start of every cycle (1 s housekeeping): the cycle under way, the next one, and slack for
# a loaded 2-core machine.
HONOURED_WITHIN_S = 4.0
# Pressure onset to a decision: a memcg notification and one cycle; generous for a loaded machine.
DECISION_SLACK_S = 3.0
# Cycles under pressure in dry-run during which nothing may be stopped (1 s housekeeping).
HELD_FOR_S = 4.0


def evictd_mode(node: ClusterNode, setting: str) -> subprocess.CompletedProcess[str]:
    """Run `evictd mode SETTING` on the node's stateDir, as an operator would over SSH."""
    return subprocess.run([sys.executable, "-m", "evictd", "mode", setting, "--state-dir", str(node.state_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def test_with_the_api_down_the_node_local_file_rolls_an_acting_canary_back_to_dry_run(
    node: ClusterNode, tmp_path: Path
) -> None:
    faults = node.apiserver.faults
    labelled = node.apiserver.kubectl("label", "node", node.name, f"{MODE_LABEL}=acting")
    assert labelled.returncode == 0, labelled.stderr
    trigger = Trigger(node.folder / "trigger")
    quiet = node.run_pod("quiet", [Container("app", requests={"memory": "64Mi"})], priority=1000)
    hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB, triggered=True), options=trigger.mount())])
    key = f"{hog.namespace}/{hog.name}"
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(KUBELET, "dryRun: true\n")
        daemon.wait_event("evictd started")
        started = daemon.wait_event("mode")
        assert (started["mode"], started["source"], started["label"]) == ("acting", "node-label", "acting")
        wait_until(lambda: node.condition("EvictdMemoryPressure"), 15, "the first node status (acting)")

        # The API goes down: every request's connection is closed unanswered, open watches are cut.
        faults.reset_next(EVERY_REQUEST)
        faults.drop_watches()
        down_since = len(node.apiserver.requests)
        wait_until(lambda: any(r.status == 0 for r in node.apiserver.requests[down_since:]), 15,
                   "evictd to hit the API while it is down")

        # The rollback, on the node: no API needed.
        held = evictd_mode(node, "dry-run")
        assert held.returncode == 0 and held.stderr == "", held.stderr
        assert held.stdout.startswith(f"{node.state_dir / 'mode'}: dry-run: ")
        written_at = time.time()
        changed = daemon.wait_event("mode changed", timeout=HONOURED_WITHIN_S + 5)
        assert (changed["previous"], changed["mode"], changed["source"], changed["label"]) == (
            "acting", "dry-run", "node-file", "acting")
        assert changed["mode_file"] == str(node.state_dir / "mode")
        honoured_after_s = changed["_received"] - written_at
        print(f"mode file written to the mode change logged: {honoured_after_s:.2f} s")
        assert honoured_after_s < HONOURED_WITHIN_S, f"honoured after {honoured_after_s:.1f} s"
        assert daemon.metric("evictd_mode", mode="dry-run") == 1
        assert daemon.metric("evictd_mode_source", source="node-file") == 1

        # Real pressure: decided and reported, nothing stopped.
        trigger.pull()
        would = daemon.wait_event("would evict pod", timeout=DECISION_SLACK_S + 10, pod=key)
        assert would["dry_run"] is True and would["threshold"] == f"{SIGNAL}<250Mi (hard)"
        time.sleep(HELD_FOR_S)
        assert not stopped_on_the_node(node, hog), "a dry-run stopped the pod through the runtime"
        assert not stopped_on_the_node(node, quiet)
        assert hog.uid not in journal(node)
        assert not [e for e in daemon.events if e.get("event") == "evicting pod"]
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 0
        assert daemon.metric("evictd_dry_run_evictions_total", eviction_signal=SIGNAL) >= 1

        # Let go: the label as last read (acting) decides again, and the same pressure stops the pod on the node.
        released = evictd_mode(node, "clear")
        assert released.returncode == 0, released.stderr
        back = daemon.wait_for(lambda e: e.get("event") == "mode changed" and e.get("mode") == "acting",
                               timeout=HONOURED_WITHIN_S + 5)
        assert (back["previous"], back["source"], back["label"]) == ("dry-run", "node-label", "acting")
        assert "mode_file" not in back
        wait_until(lambda: stopped_on_the_node(node, hog), MINIMUM_GRACE_PERIOD_S + DECISION_SLACK_S + 5,
                   "the hog to be stopped through the CRI once acting again")
        evicting = daemon.wait_event("evicting pod", timeout=5, pod=key)
        assert evicting["_received"] >= back["_received"]
        assert journal(node)[hog.uid]["stopped_locally"]
        assert not stopped_on_the_node(node, quiet)
        assert daemon.process.poll() is None
        assert daemon.stop() == 0

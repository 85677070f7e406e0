"""NodeLabelWatch (src/evictd/kube/node_mode.py) against the test API server with evictd's API client: the Node's
evictd.io/mode label as last read (set and removed with the real kubectl), kept through an API that fails, and the
mode Events written on the Node off the caller's path."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client
from kube_objects import node_manifest

from evictd.core.followed import NodeKubelet
from evictd.core.run_mode import MODE_LABEL
from evictd.kube.events import EventRecorder
from evictd.kube.node_mode import NodeLabelWatch, node_kubelet
from log_capture import LogCapture
from polling import wait_until

NODE = "node-1"
PERIOD_S = 0.1


@pytest.fixture
def watch(apiserver: ApiServer) -> Iterator[tuple[NodeLabelWatch, LogCapture]]:
    client = evictd_api_client(apiserver)
    log = LogCapture()
    watch = NodeLabelWatch(client, NODE, EventRecorder(client, NODE), log=log, period_s=PERIOD_S)
    yield watch, log
    watch.stop()
    client.close()


def kubectl(apiserver: ApiServer, *args: str) -> None:
    done = apiserver.kubectl(*args)
    assert done.returncode == 0, done.stderr


def test_the_label_is_read_at_start_and_followed(apiserver: ApiServer,
                                                 watch: tuple[NodeLabelWatch, LogCapture]) -> None:
    labels = {MODE_LABEL: "dry-run"}
    apiserver.store.create_node(node_manifest(NODE, labels=labels))
    label_watch, log = watch
    label_watch.start()
    assert label_watch.label() == "dry-run", "read before the first cycle"
    kubectl(apiserver, "label", "node", NODE, f"{MODE_LABEL}=acting", "--overwrite")
    wait_until(lambda: label_watch.label() == "acting", timeout_s=5, what="the label read again")
    kubectl(apiserver, "label", "node", NODE, f"{MODE_LABEL}-")
    wait_until(lambda: label_watch.label() is None, timeout_s=5, what="the label's removal read")
    assert not log.at("warning")


def test_a_failing_api_keeps_the_last_value_and_is_logged_once(apiserver: ApiServer,
                                                               watch: tuple[NodeLabelWatch, LogCapture]) -> None:
    apiserver.store.create_node(node_manifest(NODE, labels={MODE_LABEL: "acting"}))
    label_watch, log = watch
    label_watch.start()
    assert label_watch.label() == "acting"
    apiserver.faults.fail_next(20, code=503, method="GET", path=f"/api/v1/nodes/{NODE}$")
    wait_until(lambda: len([r for r in apiserver.requests if r.path == f"/api/v1/nodes/{NODE}"]) >= 8,
               timeout_s=10, what="reads under the outage")
    assert label_watch.label() == "acting", "an outage must not flip the node"
    unreadable = [e for e, _ in log.at("warning") if e.startswith("node label unreadable")]
    assert len(unreadable) == 1
    wait_until(lambda: any(e == "node label readable again" for e, _ in log.at("info")), timeout_s=10,
               what="the outage's end")


def test_before_any_read_the_label_counts_as_absent(apiserver: ApiServer,
                                                    watch: tuple[NodeLabelWatch, LogCapture]) -> None:
    apiserver.store.create_node(node_manifest(NODE, labels={MODE_LABEL: "acting"}))
    apiserver.faults.fail_next(1, code=500, method="GET", path=f"/api/v1/nodes/{NODE}$")
    label_watch, _ = watch
    label_watch.start()
    assert label_watch.label() is None, "the configured dryRun holds until a read"
    wait_until(lambda: label_watch.label() == "acting", timeout_s=5, what="the next read")


def test_announced_events_are_written_on_the_node(apiserver: ApiServer,
                                                  watch: tuple[NodeLabelWatch, LogCapture]) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    label_watch, _ = watch
    label_watch.start()

    def written() -> list[dict[str, Any]]:
        return [e for e in apiserver.store.events() if e.get("reason") == "EvictdModeChanged"]

    # The Event's write is answered 2 s late: a caller that waited for the API would find it written on return.
    apiserver.faults.delay_next(1, delay_s=2.0, method="POST", path=r"/events$")
    label_watch.announce("Normal", "EvictdModeChanged", "evictd on this node is now acting")
    assert not written(), "the caller never waits for the API"
    wait_until(lambda: bool(written()), timeout_s=10, what="the Event")
    [event] = written()
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == NODE
    assert (event["type"], event["message"]) == ("Normal", "evictd on this node is now acting")


def patch_kubelet_version(apiserver: ApiServer, version: str) -> None:
    """What a kubelet upgraded in place writes: its new version in the Node's status.nodeInfo (a strategic-merge
    patch of nodes/status through the real `kubernetes` client, as the kubelet's status update is one)."""
    from kubernetes import client as k8s

    api_client = apiserver.api_client()
    try:
        k8s.CoreV1Api(api_client).patch_node_status(NODE, {"status": {"nodeInfo": {"kubeletVersion": version}}})
    finally:
        api_client.close()


def test_each_read_hands_over_what_the_node_says_of_its_kubelet(apiserver: ApiServer) -> None:
    apiserver.store.create_node(node_manifest(NODE, kubelet_version="v1.36.2-eks-1234"))
    client = evictd_api_client(apiserver)
    said: list[NodeKubelet] = []
    watch = NodeLabelWatch(client, NODE, EventRecorder(client, NODE), log=LogCapture(), period_s=PERIOD_S,
                           on_kubelet=said.append)
    try:
        watch.start()
        assert said[0] == NodeKubelet(NODE, "v1.36.2-eks-1234"), "read before the first cycle"
        patch_kubelet_version(apiserver, "v1.37.0")
        wait_until(lambda: said[-1] == NodeKubelet(NODE, "v1.37.0"), timeout_s=5, what="the upgrade read")
        apiserver.faults.fail_next(1, code=503, method="GET", path=f"/api/v1/nodes/{NODE}$")
        wait_until(lambda: any(s.unread for s in said), timeout_s=5, what="the failed read")
        [failed] = [s for s in said if s.unread]
        assert failed.node_name == NODE and "503" in failed.unread and failed.version_text == ""
    finally:
        watch.stop()
        client.close()


@pytest.mark.parametrize(("node", "expected"), [
    pytest.param({"status": {"nodeInfo": {"kubeletVersion": "v1.37.1"}}}, "v1.37.1", id="registered"),
    pytest.param({"status": {}}, "", id="no-node-info"),
    pytest.param({}, "", id="no-status"),
    pytest.param({"status": {"nodeInfo": None}}, "", id="null-node-info"),
    pytest.param({"status": ["not", "a", "map"]}, "", id="status-not-a-map"),
    pytest.param({"status": {"nodeInfo": {"kubeletVersion": 137}}}, "137", id="not-a-string"),
])
def test_the_kubelets_version_is_taken_from_node_info_whatever_the_object_holds(node: dict[str, Any],
                                                                               expected: str) -> None:
    assert node_kubelet("n", node) == NodeKubelet("n", expected)


def test_without_a_read_at_start_the_thread_reads_at_once(apiserver: ApiServer) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    client = evictd_api_client(apiserver)
    said: list[NodeKubelet] = []
    # A long period: only the thread's first read can hand anything over within the test.
    watch = NodeLabelWatch(client, NODE, EventRecorder(client, NODE, dry_run=True), log=LogCapture(), period_s=60.0,
                           on_kubelet=said.append, read_at_start=False)
    # The Node is answered 2 s late: a start that read would wait for it.
    apiserver.faults.delay_next(1, delay_s=2.0, method="GET", path=f"/api/v1/nodes/{NODE}$")
    try:
        began = time.monotonic()
        watch.start()
        assert time.monotonic() - began < 1.0 and not said, "start does not wait for the API"
        wait_until(lambda: said == [NodeKubelet(NODE, "v1.37.1")], timeout_s=10, what="the thread's first read")
    finally:
        watch.stop()
        client.close()

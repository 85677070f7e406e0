"""NodeLabelWatch (src/evictd/kube/node_mode.py) against the test API server with evictd's API client: the Node's
evictd.io/mode label as last read (set and removed with the real kubectl), kept through an API that fails, and the
mode Events written on the Node off the caller's path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client
from kube_objects import node_manifest

from evictd.core.run_mode import MODE_LABEL
from evictd.kube.events import EventRecorder
from evictd.kube.node_mode import NodeLabelWatch
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

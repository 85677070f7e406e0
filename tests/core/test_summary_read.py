"""`summary_read`: a bad figure of a Summary costs that figure, never the document (issue #43, item 1)."""

from __future__ import annotations

from typing import Any

import pytest

from builders import Gi, Mi, fs, pod, pod_stats, summary
from evictd.core.errors import DecodeError
from evictd.core.signals import Signal
from evictd.core.summary import signal_observations
from evictd.core.summary_parser import summary_from_dict, summary_read

# What cAdvisor's uint64 arithmetic writes for a container over its limit: limit - usage wrapped.
WRAPPED = 2**64 - Mi


def doc_with_bad_pod(where: str, value: object) -> dict[str, Any]:
    bad = pod_stats(pod("bad"), memory=Gi)
    if where == "pod.workingSetBytes":
        bad["memory"]["workingSetBytes"] = value
    else:
        bad["containers"][0]["memory"]["availableBytes"] = value
    return summary(memory=50 * Mi, memory_ws=8 * Gi, pods=[pod_stats(pod("good"), memory=2 * Gi), bad])


@pytest.mark.parametrize(("where", "value"), [
    pytest.param("pod.workingSetBytes", -1, id="negative-pod-working-set"),
    pytest.param("container.availableBytes", WRAPPED, id="cadvisor-uint64-wrap"),
    pytest.param("container.availableBytes", "lots", id="not-a-number"),
])
def test_one_bad_pod_figure_leaves_the_node_and_the_other_pods_whole(where: str, value: object) -> None:
    doc = doc_with_bad_pod(where, value)
    with pytest.raises(DecodeError):
        summary_from_dict(doc)  # the strict decoder (replay, simulate) still refuses it
    reading = summary_read(doc)
    observations = signal_observations(reading.summary)
    assert observations[Signal.MEMORY_AVAILABLE].available.value == 50 * Mi
    good, bad = reading.summary.pods
    assert good.memory is not None and good.memory.working_set_bytes == 2 * Gi
    assert bad.pod_ref.name == "bad", "the bad pod keeps its stats entry (a pod without one is ranked first)"
    assert len(reading.refused) == 1
    assert reading.refused[0].key.startswith("pods[1].")
    assert reading.refused[0].value == value


def test_a_bad_node_figure_costs_only_the_signals_built_on_it() -> None:
    doc = summary(memory=50 * Mi, nodefs={"availableBytes": -3, "capacityBytes": 100 * Gi, "inodesFree": 10,
                                          "inodes": 20}, imagefs=fs(Gi, 2 * Gi))
    reading = summary_read(doc)
    observations = signal_observations(reading.summary)
    assert Signal.NODEFS_AVAILABLE not in observations
    assert Signal.NODEFS_INODES_FREE in observations
    assert Signal.MEMORY_AVAILABLE in observations
    assert [e.key for e in reading.refused] == ["node.fs.availableBytes"]


def test_a_psi_line_out_of_range_drops_the_psi_block_only() -> None:
    doc = summary()
    line = {"total": 1, "avg10": 500, "avg60": 0, "avg300": 0}
    doc["node"]["memory"]["psi"] = {"some": line, "full": {**line, "avg10": 0}}
    reading = summary_read(doc)
    assert reading.summary.node.memory is not None
    assert reading.summary.node.memory.psi is None
    assert reading.summary.node.memory.available_bytes == 8 * Gi
    assert [e.key for e in reading.refused] == ["node.memory.psi.some.avg10"], "its consequences are not named"


@pytest.mark.parametrize("doc", [
    pytest.param({"node": [], "pods": "x"}, id="blocks-of-the-wrong-type"),
    pytest.param({"pods": [None, 3, {"memory": {"workingSetBytes": 2**70}}]}, id="odd-pods"),
])
def test_any_mapping_decodes(doc: dict[str, Any]) -> None:
    reading = summary_read(doc)
    assert reading.refused


def test_a_document_that_is_not_a_mapping_is_refused_whole() -> None:
    with pytest.raises(DecodeError):
        summary_read([])  # type: ignore[arg-type]


def test_a_sound_document_is_read_as_the_strict_decoder_reads_it() -> None:
    doc = summary(pods=[pod_stats(pod("a"), memory=Gi)])
    assert summary_read(doc).summary == summary_from_dict(doc)
    assert summary_read(doc).refused == ()

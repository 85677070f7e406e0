"""Tests of evictd.core.summary_parser.SummaryDecoder: one Summary after another that share their unchanged blocks
(as a recording's, rebuilt from changes), each decoded to what `summary_from_dict` gives, errors included."""

from __future__ import annotations

from typing import Any

import pytest

from evictd.core.errors import DecodeError
from evictd.core.summary_parser import SummaryDecoder, summary_from_dict


def _document(pods: int) -> dict[str, Any]:
    return {
        "node": {"nodeName": "n", "memory": {"availableBytes": 100, "workingSetBytes": 50}},
        "pods": [{"podRef": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}"},
                  "memory": {"time": "2026-11-23T01:00:00Z", "workingSetBytes": i},
                  "containers": [{"name": "c", "rootfs": {"usedBytes": i}}],
                  "ephemeral-storage": {"usedBytes": 2 * i}} for i in range(pods)],
    }


def _next(document: dict[str, Any], **blocks: Any) -> dict[str, Any]:
    """The next Summary as changes make it: each pod a new object sharing its blocks, with `blocks` replaced."""
    return {"node": document["node"],
            "pods": [{**pod, "memory": {"time": "2026-11-23T01:00:10Z", "workingSetBytes": index + 7}, **blocks}
                     for index, pod in enumerate(document["pods"])]}


def test_documents_sharing_blocks_decode_as_summary_from_dict() -> None:
    decoder = SummaryDecoder()
    first = _document(3)
    assert decoder(first) == summary_from_dict(first)
    second = _next(first)
    decoded = decoder(second)
    assert decoded == summary_from_dict(second)
    assert [p.memory.working_set_bytes for p in decoded.pods if p.memory] == [7, 8, 9]
    # A changed block (a new object) is decoded again.
    third = _next(second, containers=[{"name": "c", "rootfs": {"usedBytes": 99}}])
    assert decoder(third) == summary_from_dict(third)
    assert decoder(third).pods[0].containers[0].rootfs.used_bytes == 99  # type: ignore[union-attr]


def test_a_pod_with_other_keys_than_before_is_decoded_whole() -> None:
    decoder = SummaryDecoder()
    first = _document(1)
    ref = first["pods"][0]["podRef"]
    decoder({"pods": [{"podRef": ref, "containers": first["pods"][0]["containers"]}]})
    # The same podRef object, as many keys, but memory in place of containers: its containers are gone.
    second = {"pods": [{"podRef": ref, "memory": {"workingSetBytes": 5}}]}
    assert decoder(second) == summary_from_dict(second)
    assert decoder(second).pods[0].containers == ()


@pytest.mark.parametrize("memory", [{"workingSetBytes": -1}, {"time": "yesterday"}, [1]])
def test_a_bad_memory_block_of_a_known_pod_names_its_key(memory: object) -> None:
    decoder = SummaryDecoder()
    first = _document(2)
    decoder(first)
    second = _next(first)
    second["pods"][1]["memory"] = memory
    with pytest.raises(DecodeError) as expected:
        summary_from_dict(second)
    with pytest.raises(DecodeError) as caught:
        decoder(second)
    assert (caught.value.key, caught.value.reason) == (expected.value.key, expected.value.reason)
    assert caught.value.key.startswith("pods[1].memory")

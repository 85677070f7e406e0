"""The record of the node's critical pods (`CriticalPodRecord`), on real files in the test's folder.

Tier 1 for the rule (which pods are remembered), tier 3 for the file: written atomically only when the set
changes, read back by a new instance (a restarted evictd), and never a reason to fail: unreadable or hostile
files are ignored with the problem named, a write that fails keeps the record in memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from builders import pod
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import SYSTEM_CRITICAL_PRIORITY
from evictd.kube.critical_record import MAX_RECORD_BYTES, CriticalPodRecord, critical_uids
from evictd.kube.pod_watch import as_api_pod

CALICO = pod_from_dict(pod("calico-node-x1", namespace="calico-system", priority=SYSTEM_CRITICAL_PRIORITY + 1000,
                           priority_class="system-node-critical"))
DNS = pod_from_dict(pod("coredns-7f", namespace="kube-system", priority=SYSTEM_CRITICAL_PRIORITY,
                        priority_class="system-cluster-critical"))
WEB = pod_from_dict(pod("web", priority=1000))
MIRROR = pod_from_dict(as_api_pod(pod("etcd-node-1", namespace="kube-system", annotations={
    "kubernetes.io/config.mirror": "3f1e2d", "kubernetes.io/config.source": "file"})))


def test_the_pods_critical_by_priority_are_remembered_in_any_namespace() -> None:
    assert critical_uids([CALICO, DNS, WEB, MIRROR]) == {"uid-calico-node-x1", "uid-coredns-7f"}


def test_a_restarted_evictd_reads_what_the_last_pod_list_said(tmp_path: Path) -> None:
    path = tmp_path / "state" / "critical-pods.json"
    record = CriticalPodRecord(str(path))
    assert record.uids() == frozenset() and record.problem is None
    assert record.remember([CALICO, WEB])
    assert json.loads(path.read_text()) == {"criticalPodUIDs": ["uid-calico-node-x1"]}
    written = path.stat()

    assert not record.remember([WEB, CALICO])  # the same set: no write
    assert path.stat().st_mtime_ns == written.st_mtime_ns and path.stat().st_ino == written.st_ino
    assert os.listdir(path.parent) == ["critical-pods.json"]  # no temporary file left

    assert CriticalPodRecord(str(path)).uids() == {"uid-calico-node-x1"}
    assert record.remember([DNS])  # calico gone from the node: forgotten
    assert CriticalPodRecord(str(path)).uids() == {"uid-coredns-7f"}


@pytest.mark.parametrize("content", [
    b"{not json",
    b'{"criticalPodUIDs": "uid-a"}',
    b'{"criticalPodUIDs": [1, 2]}',
    b'["uid-a"]',
    b"[" * 100_000,
    b" " * (MAX_RECORD_BYTES + 1),
    b"\xff\xfe",
], ids=["broken", "not-a-list", "not-strings", "not-an-object", "nested-deep", "too-large", "not-utf8"])
def test_an_unreadable_record_is_ignored_and_named(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "critical-pods.json"
    path.write_bytes(content)
    record = CriticalPodRecord(str(path))
    assert record.uids() == frozenset()
    assert record.problem is not None and record.problem.startswith(f"{path}: unreadable, ignored: ")
    assert record.remember([CALICO]) and record.problem is None  # the next list replaces it
    assert CriticalPodRecord(str(path)).uids() == {"uid-calico-node-x1"}


def test_a_fifo_or_a_folder_in_the_records_place_is_named_and_never_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo" / "critical-pods.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # a blocking open() would wait for a writer forever
    folder = tmp_path / "folder" / "critical-pods.json"
    folder.mkdir(parents=True)
    for path, reason in ((fifo, "is not a regular file"), (folder, "is a directory")):
        record = CriticalPodRecord(str(path))
        assert record.uids() == frozenset()
        assert record.problem == f"{path}: unreadable, ignored: {reason}"


def test_a_record_that_cannot_be_written_stays_in_memory_and_is_written_later(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("")  # a file where the state folder should be
    record = CriticalPodRecord(str(blocker / "critical-pods.json"))
    assert record.remember([CALICO])
    assert record.uids() == {"uid-calico-node-x1"}
    assert record.problem is not None and "not written" in record.problem

    blocker.unlink()  # the folder can be made now: the same set is written after the next cycle
    assert record.remember([CALICO]) and record.problem is None
    assert CriticalPodRecord(str(blocker / "critical-pods.json")).uids() == {"uid-calico-node-x1"}
    assert not record.remember([CALICO])


def test_without_a_file_the_record_lives_in_memory() -> None:
    record = CriticalPodRecord(None)
    assert record.remember([CALICO, DNS]) and record.uids() == {"uid-calico-node-x1", "uid-coredns-7f"}
    assert record.problem is None

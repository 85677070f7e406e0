"""End to end: `evictd run` protecting a node while its stateDir is bad: a corrupt journal, a full filesystem.

Same node as test_api_faults_e2e.py: the session's containerd with its pods cgroup limited to 400 MiB, a hard
``allocatableMemory.available<250Mi``, 1 s housekeeping, a pod filling a 200 MiB buffer as the pressure. The
stateDir is the node's state folder, holding what a crash or a bad disk leaves there:

* a truncated journal and two temporary files of a write killed half-way: evictd moves the journal aside
  (``evictions.json.corrupt-<UTC time>``), logs it once as an error with the reason, counts it, removes the
  temporary files, and evicts the hog at once, its new journal written where the bad one was;
* a stateDir on a real 64 KiB tmpfs filled to ENOSPC: the eviction happens as usual (the "evicting pod" line,
  ``evictd_evictions_total``, the DELETE, the Evicted event), the failed writes are logged once and counted in
  ``evictd_journal_write_failures_total``, and the journal is written as soon as space is freed;
* the same full stateDir while the API is down: the pod is still stopped through the CRI at once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_node import (
    ClusterNode,
    Container,
    Trigger,
    hog_script,
    pods_memory_limit,
    stopped_on_the_node,
    wait_until,
)
from evictd_process import EvictdProcess

from evictd.core.engine_rules import MINIMUM_GRACE_PERIOD_S
from evictd.state_dir import ENGINE_STATE_FILE, ENGINE_STATE_TEMPORARY_PREFIX, RECORDING_FOLDER
from full_filesystem import UnwritableFolder

MiB = 1 << 20
PODS_LIMIT_BYTES = 400 * MiB
HOG_MIB = 200
SIGNAL = "allocatableMemory.available"
KUBELET = f"evictionHard: {{{SIGNAL}: 250Mi}}\nevictionPressureTransitionPeriod: 3s\n"
EVERY_REQUEST = 1_000_000
MOVED_ASIDE = "eviction journal unusable: moved aside, starting with an empty journal"
NOT_WRITTEN = "eviction journal not written: decisions kept in memory and carried out, the write is retried every cycle"
# Pressure onset to the containers stopped: a memcg notification, one cycle, the 2 s local-stop grace.
STOP_SLACK_S = 5.0



@pytest.fixture
def full_state_dir(node: ClusterNode) -> Iterator[UnwritableFolder]:
    """The node's stateDir on a 64 KiB tmpfs, filled to ENOSPC."""
    state = UnwritableFolder(node.state_dir, "full")
    try:
        state.make_unwritable()
        yield state
    finally:
        state.unmount()


def journal(node: ClusterNode) -> dict[str, dict[str, Any]]:
    """The eviction journal in evictd's stateDir, by pod UID ({} while there is no file)."""
    if not node.journal_path.exists():
        return {}
    return {entry["uid"]: entry for entry in json.loads(node.journal_path.read_text())["evictions"]}


def cycle_written(name: str) -> bool:
    """Whether a stateDir entry is one a cycle writes: the flight recording or the engine state."""
    return name in (RECORDING_FOLDER, ENGINE_STATE_FILE) or name.startswith(ENGINE_STATE_TEMPORARY_PREFIX)


def events_named(daemon: EvictdProcess, name: str) -> list[dict[str, Any]]:
    return [event for event in daemon.events if event.get("event") == name]


def test_a_corrupt_journal_and_leftover_temporary_files_do_not_keep_evictd_from_evicting(node: ClusterNode) -> None:
    truncated = b'{"version": 1, "evictions": [{"uid": "1f0c'
    node.journal_path.write_bytes(truncated)
    for leftover in (".journal-q8w7e6r5", ".journal-z1x2c3v4"):
        (node.state_dir / leftover).write_bytes(truncated)
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(KUBELET)
        daemon.wait_event("evictd started")

        moved = daemon.wait_event(MOVED_ASIDE)
        assert moved["level"] == "error" and moved["path"] == str(node.journal_path)
        assert moved["reason"].startswith("is not JSON: "), moved["reason"]
        assert re.fullmatch(re.escape(str(node.journal_path)) + r"\.corrupt-\d{8}T\d{6}Z", moved["moved_to"])
        assert Path(moved["moved_to"]).read_bytes() == truncated
        removed = daemon.wait_event("removed temporary journal files left by an interrupted write")
        assert removed["count"] == 2
        # Once a cycle ran, the flight recording and the engine state (mid-write: its own temporary file) lie beside:
        # those are other writers' files, not the journal's.
        assert sorted(name for name in (p.name for p in node.state_dir.iterdir()) if not cycle_written(name)) == sorted(
            [Path(moved["moved_to"]).name, "evictd.lock"])
        assert daemon.metric("evictd_journal_corrupt_total") == 1

        hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB))])
        daemon.wait_event("evicting pod", timeout=15, pod=f"{hog.namespace}/{hog.name}")
        wait_until(lambda: journal(node).get(hog.uid, {}).get("done_at"), 10, "the hog's eviction in the journal")
        [delete] = node.requests_to("DELETE", hog)
        assert delete.status == 200 and delete.body["preconditions"] == {"uid": hog.uid}
        node.wait_gone(hog)

        assert len(events_named(daemon, MOVED_ASIDE)) == 1
        assert daemon.metric("evictd_journal_corrupt_total") == 1
        assert daemon.metric("evictd_journal_write_failures_total") == 0
        assert daemon.stop() == 0


def test_a_full_state_dir_hides_no_eviction_and_the_journal_is_written_once_space_is_freed(
    node: ClusterNode, full_state_dir: UnwritableFolder
) -> None:
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(KUBELET)
        daemon.wait_event("evictd started")
        hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB))])

        evicting = daemon.wait_event("evicting pod", timeout=15, pod=f"{hog.namespace}/{hog.name}")
        assert evicting["signal"] == SIGNAL and evicting["grace_period_seconds"] == 1
        wait_until(lambda: node.pod_events(hog, "Evicted"), 10, "the Evicted event")
        [delete] = node.requests_to("DELETE", hog)
        assert (delete.status, delete.body) == (200, {"gracePeriodSeconds": 1, "preconditions": {"uid": hog.uid}})
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        failed = daemon.wait_event(NOT_WRITTEN)
        assert failed["level"] == "error" and failed["error"] == "No space left on device"
        node.wait_gone(hog)

        # Cycles go on retrying the write: counted every time, logged once, never evicted twice.
        failures = daemon.metric("evictd_journal_write_failures_total")
        wait_until(lambda: daemon.metric("evictd_journal_write_failures_total") >= failures + 2, 10,
                   "the write to be retried on later cycles")
        assert not node.journal_path.exists()
        assert len(events_named(daemon, NOT_WRITTEN)) == 1
        assert len(node.deletes()) == 1

        full_state_dir.make_writable()
        written = daemon.wait_event("eviction journal written again", timeout=10)
        assert written["failed_writes"] >= failures + 2
        entry = journal(node)[hog.uid]
        # A hard threshold: the pod was also stopped on the node at once, as the kubelet's own eviction does.
        assert entry["deleted"] and entry["event_written"] and entry["done_at"] and entry["stopped_locally"]
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        assert daemon.stop() == 0


def test_with_the_api_down_and_a_full_state_dir_the_pod_is_stopped_through_the_cri(
    node: ClusterNode, full_state_dir: UnwritableFolder, tmp_path: Path
) -> None:
    faults = node.apiserver.faults
    trigger = Trigger(tmp_path / "trigger")
    hog = node.run_pod("hog", [Container("hog", hog_script(HOG_MIB, triggered=True), options=trigger.mount())])
    with pods_memory_limit(node, PODS_LIMIT_BYTES):
        daemon = node.start_evictd(KUBELET)
        daemon.wait_event("evictd started")
        wait_until(lambda: node.condition("EvictdMemoryPressure"), 15, "the first node status")

        faults.reset_next(EVERY_REQUEST)
        faults.drop_watches()
        trigger.pull()
        pressure_at = time.monotonic()
        wait_until(lambda: stopped_on_the_node(node, hog), MINIMUM_GRACE_PERIOD_S + STOP_SLACK_S,
                   "the hog to be stopped through the CRI")
        print(f"pressure to containers stopped through the CRI: {time.monotonic() - pressure_at:.2f} s")
        daemon.wait_event("evicting pod", timeout=5, pod=f"{hog.namespace}/{hog.name}")
        assert daemon.wait_event(NOT_WRITTEN)["error"] == "No space left on device"
        assert daemon.metric("evictd_evictions_total", eviction_signal=SIGNAL) == 1
        assert not node.journal_path.exists()

        # The API and the disk come back: the pending writes reach both.
        faults.clear()
        full_state_dir.make_writable()
        wait_until(lambda: journal(node).get(hog.uid, {}).get("done_at"), 15, "the pending writes")
        entry = journal(node)[hog.uid]
        assert entry["stopped_locally"] and entry["deleted"] and entry["event_written"]
        assert [r.status for r in node.deletes() if r.status == 200] == [200]
        assert len(node.pod_events(hog, "Evicted")) == 1
        assert daemon.process.poll() is None and daemon.http("/healthz")[0] == 200
        assert daemon.stop() == 0

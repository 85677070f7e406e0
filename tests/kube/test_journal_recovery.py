"""The eviction journal (src/evictd/kube/journal.py) when its file or its folder is bad.

Real files and real filesystems: a journal file that is corrupt, empty, truncated, a directory, not UTF-8,
written by a newer evictd or holding values of the wrong type is moved aside and evictd starts empty; a stateDir
on a real full tmpfs (64 KiB, filled by a file) or a read-only tmpfs makes every write fail, and the evictor
still carries out the eviction against the test API server (DELETE, event, or the local stop when the API is
down) while the entry waits in memory until the file can be written again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client

from builders import Gi, Mi, pod, pod_stats, summary
from clocks import ManualClock
from counter import Counter
from evictd.commands.simulate import parse_scenario, run_scenario
from evictd.core.engine import Eviction, PodCondition
from evictd.core.errors import KubeError
from evictd.core.pods import FrozenMap
from evictd.core.unanswered import UNANSWERED_QUIET_S
from evictd.kube.events import EventRecorder
from evictd.kube.evictor import KubePodEvictor
from evictd.kube.journal import ApiStep, EvictionJournal, JournalEntry, Outcome, entry_to_json
from full_filesystem import UnwritableFolder
from log_capture import LogCapture

NOW = datetime(2026, 11, 22, 10, 15, 0, tzinfo=UTC)
CORRUPT_NAME = "evictions.json.corrupt-20261122T101500Z"


def entry(uid: str = "uid-1", **changes: Any) -> JournalEntry:
    base = JournalEntry(uid=uid, namespace="default", name=f"pod-{uid}", signal="memory.available",
                        grace_period_s=1, message="The node was low on resource: memory.", reason="Evicted",
                        conditions=(PodCondition("DisruptionTarget", "True", "TerminationByKubelet", "low"),),
                        annotations=FrozenMap({"starved_resource": "memory"}), decided_at=1_763_800_000.5)
    return replace(base, **changes)


def valid_document() -> dict[str, Any]:
    return {"version": 1, "evictions": [entry_to_json(entry())]}


def with_entry_field(name: str, value: Any) -> bytes:
    document = valid_document()
    document["evictions"][0][name] = value
    return json.dumps(document).encode()


VALID = json.dumps(valid_document()).encode()
BAD_FILES: dict[str, tuple[bytes, str]] = {
    "not-json": (b"{evictions: [", "is not JSON"),
    "empty": (b"", "is empty"),
    "truncated": (VALID[: len(VALID) // 2], "is not JSON"),
    "not-utf8": (b'{"evictions": ["\xff\xfe"]}', "is not UTF-8"),
    "json-list": (b"[]", "not a JSON object"),
    "evictions-not-a-list": (b'{"evictions": {}}', "evictions must be a list"),
    "entry-not-an-object": (b'{"evictions": [42]}', "entry 0 is not an object"),
    "newer-version": (json.dumps({**valid_document(), "version": 2}).encode(), "written by a newer evictd"),
    "unknown-top-level-field": (json.dumps({**valid_document(), "checksum": "x"}).encode(), "unknown field"),
    "unknown-entry-field": (with_entry_field("priority_class", "high"), "unknown field 'priority_class'"),
    "missing-uid": (json.dumps({"evictions": [{k: v for k, v in entry_to_json(entry()).items() if k != "uid"}]}).encode(),
                    "entry 0 has no uid"),
    "grace-period-a-string": (with_entry_field("grace_period_s", "30"), "grace_period_s must be an integer"),
    "grace-period-a-bool": (with_entry_field("grace_period_s", True), "grace_period_s must be an integer"),
    "flag-a-string": (with_entry_field("deleted", "yes"), "deleted must be true or false"),
    "uid-a-number": (with_entry_field("uid", 5), "uid must be a string"),
    "conditions-an-object": (with_entry_field("conditions", {}), "conditions must be a list of objects"),
    "annotation-a-number": (with_entry_field("annotations", {"a": 1}), "annotations must be an object of strings"),
    "decided-at-a-string": (with_entry_field("decided_at", "now"), "decided_at must be a number of seconds"),
    "decided-at-nan": (VALID.replace(b"1763800000.5", b"NaN"), "decided_at must be a number of seconds"),
    "done-at-a-list": (with_entry_field("done_at", []), "done_at must be a number of seconds or null"),
    "extra-a-list": (with_entry_field("extra", []), "extra must be an object"),
}


def open_journal(path: Path, log: LogCapture, corrupt: Counter | None = None,
                 failures: Counter | None = None) -> EvictionJournal:
    return EvictionJournal(str(path), log=log, on_corrupt=corrupt or Counter(), on_write_failure=failures or Counter(),
                           clock=ManualClock(now_s=0, wall_at_zero=NOW))


def assert_moved_aside_once(state: Path, log: LogCapture, corrupt: Counter, reason: str) -> None:
    assert sorted(p.name for p in state.iterdir()) == [CORRUPT_NAME]
    [(event, fields)] = log.at("error")
    assert "moved aside" in event and reason in fields["reason"], (event, fields)
    assert fields["moved_to"] == str(state / CORRUPT_NAME) and fields["path"] == str(state / "evictions.json")
    assert corrupt.count == 1


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_journal_file_is_moved_aside_and_evictd_starts_empty(tmp_path: Path, name: str) -> None:
    content, reason = BAD_FILES[name]
    state = tmp_path / "state"
    state.mkdir()
    (state / "evictions.json").write_bytes(content)
    log, corrupt = LogCapture(), Counter()

    journal = open_journal(state / "evictions.json", log, corrupt)

    assert journal.pending() == [] and journal.evicted_uids() == frozenset()
    assert_moved_aside_once(state, log, corrupt, reason)
    assert (state / CORRUPT_NAME).read_bytes() == content  # kept as it was, for a person to look at
    journal.record(entry("uid-2"))  # the new journal is written where the bad one was
    written = json.loads((state / "evictions.json").read_text())
    assert written["version"] == 1 and [e["uid"] for e in written["evictions"]] == ["uid-2"]
    assert open_journal(state / "evictions.json", LogCapture()).evicted_uids() == {"uid-2"}


def test_a_directory_in_place_of_the_journal_file_is_moved_aside(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "evictions.json").mkdir(parents=True)
    (state / "evictions.json" / "inside").write_text("x")
    log, corrupt = LogCapture(), Counter()

    journal = open_journal(state / "evictions.json", log, corrupt)

    assert_moved_aside_once(state, log, corrupt, "is a directory")
    assert (state / CORRUPT_NAME / "inside").read_text() == "x"
    journal.record(entry())
    assert json.loads((state / "evictions.json").read_text())["evictions"][0]["uid"] == "uid-1"


def test_a_second_bad_file_within_the_same_second_does_not_replace_the_first(tmp_path: Path) -> None:
    path = tmp_path / "evictions.json"
    for content in (b"first", b"second"):
        path.write_bytes(content)
        open_journal(path, LogCapture())
    assert (tmp_path / CORRUPT_NAME).read_bytes() == b"first"
    assert (tmp_path / f"{CORRUPT_NAME}-2").read_bytes() == b"second"


def test_a_journal_of_this_version_and_one_without_a_version_are_read(tmp_path: Path) -> None:
    path = tmp_path / "evictions.json"
    for document in (valid_document(), {"evictions": valid_document()["evictions"]}):
        path.write_text(json.dumps(document))
        log, corrupt = LogCapture(), Counter()
        assert open_journal(path, log, corrupt).get("uid-1") == entry()
        assert log.lines == [] and corrupt.count == 0 and path.exists()


FIXTURE_V1 = Path(__file__).resolve().parent.parent / "fixtures" / "journal" / "evictions-v1.json"


def test_a_journal_written_before_entries_were_typed_is_read_and_written_back_the_same(tmp_path: Path) -> None:
    """evictions-v1.json was written by evictd before its entries were typed (flags, `extra`, lists)."""
    path = tmp_path / "evictions.json"
    path.write_bytes(FIXTURE_V1.read_bytes())
    log, corrupt = LogCapture(), Counter()
    journal = open_journal(path, log, corrupt)
    assert log.lines == [] and corrupt.count == 0

    web, batch, gone, logs = (journal.get(uid) for uid in ("uid-web", "uid-batch", "uid-gone", "uid-logs"))
    assert web is not None and batch is not None and gone is not None and logs is not None
    assert (web.done, web.delete_sent, web.stopped_locally, web.done_at) == (
        {ApiStep.CONDITION}, True, True, None)
    assert web.conditions == (PodCondition("DisruptionTarget", "True", "TerminationByKubelet",
                                           "The node was low on resource: memory. Threshold quantity: 1Gi, "
                                           "available: 500Mi. ", observed_generation=3),)
    assert dict(web.annotations) == {"offending_containers": "app", "offending_containers_usage": "600Mi",
                                     "starved_resource": "memory"}
    assert batch.api_done and dict(batch.outcomes) == {Outcome.DELETED: '404: pods "batch" not found'}
    assert batch.conditions[0].observed_generation == 0 and batch.done_at == 1763800012.75
    assert gone.api_done and list(gone.outcomes) == [Outcome.ENDED] and gone.outcomes[Outcome.ENDED].startswith("409: ")
    assert (logs.conditions, dict(logs.annotations), logs.done, logs.grace_period_s) == ((), {}, frozenset(), 0)
    assert [e.uid for e in journal.pending()] == ["uid-web", "uid-logs"]

    journal.record(web)  # written back as it was read
    assert json.loads(path.read_text()) == json.loads(FIXTURE_V1.read_text())


@pytest.mark.parametrize(("extra", "reason"), [
    ({"retried": "x"}, "entry 0: extra has an unknown outcome 'retried'"),
    ({"ended": 404}, "entry 0: extra.ended must be a string, not 404"),
], ids=["unknown-outcome", "answer-not-a-string"])
def test_an_outcome_that_is_not_one_evictd_writes_makes_the_journal_unusable(
    tmp_path: Path, extra: dict[str, Any], reason: str
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "evictions.json").write_bytes(with_entry_field("extra", extra))
    log, corrupt = LogCapture(), Counter()
    open_journal(state / "evictions.json", log, corrupt)
    assert_moved_aside_once(state, log, corrupt, reason)


@pytest.mark.parametrize(("condition", "reason"), [
    ({"status": "True"}, "entry 0: conditions[0] has no type"),
    ({"type": "DisruptionTarget", "status": True}, "entry 0: conditions[0]: status must be a string"),
    ({"type": "DisruptionTarget", "status": "True", "observedGeneration": "3"},
     "entry 0: conditions[0]: observedGeneration must be an integer"),
    ({"type": "DisruptionTarget", "status": "True", "lastProbeTime": None},
     "entry 0: conditions[0] has an unknown field 'lastProbeTime'"),
], ids=["no-type", "status-a-bool", "generation-a-string", "unknown-field"])
def test_a_condition_evictd_never_writes_makes_the_journal_unusable(
    tmp_path: Path, condition: dict[str, Any], reason: str
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "evictions.json").write_bytes(with_entry_field("conditions", [condition]))
    log, corrupt = LogCapture(), Counter()
    open_journal(state / "evictions.json", log, corrupt)
    assert_moved_aside_once(state, log, corrupt, reason)


def test_temporary_files_of_a_killed_write_are_removed_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    path = state / "evictions.json"
    path.write_bytes(VALID)
    # What a SIGKILL between mkstemp and the rename leaves: half-written temporary files.
    for leftover in (".journal-k2j3h4", ".journal-a8s7d6"):
        (state / leftover).write_bytes(VALID[:40])
    (state / "evictd.lock").write_text("123\n")
    (state / "shadow.jsonl").write_text("{}\n")
    log = LogCapture()

    journal = open_journal(path, log)

    assert sorted(p.name for p in state.iterdir()) == ["evictd.lock", "evictions.json", "shadow.jsonl"]
    assert log.at("info") == [("removed temporary journal files left by an interrupted write",
                               {"folder": str(state), "count": 2})]
    assert journal.get("uid-1") == entry()


def test_temporary_files_left_by_a_process_killed_while_writing_are_removed(tmp_path: Path) -> None:
    """A real process SIGKILLed after creating its temporary file and before the rename."""
    code = ("import os, signal, sys, tempfile\n"
            "fd, name = tempfile.mkstemp(prefix='.journal-', dir=sys.argv[1])\n"
            "os.write(fd, b'{\"version\": 1, \"evic')\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=False)
    assert done.returncode == -9
    assert [p.name.startswith(".journal-") for p in tmp_path.iterdir()] == [True]
    log = LogCapture()

    open_journal(tmp_path / "evictions.json", log)

    assert list(tmp_path.iterdir()) == []
    assert [fields["count"] for _, fields in log.at("info")] == [1]


# --- a stateDir where nothing can be written -------------------------------------------------------------------


def test_a_journal_that_cannot_be_written_keeps_its_entries_and_writes_them_once_it_can(
    unwritable_state: UnwritableFolder
) -> None:
    path = unwritable_state.folder / "evictions.json"
    log, failures = LogCapture(), Counter()
    journal = open_journal(path, log, failures=failures)

    journal.record(entry("uid-1"))
    journal.note_step_done("uid-1", ApiStep.CONDITION)
    journal.record(entry("uid-2"))
    assert not journal.flush()

    assert failures.count == 4 and not path.exists()
    assert [e.uid for e in journal.pending()] == ["uid-1", "uid-2"]
    assert journal.get("uid-1") == entry("uid-1", done=frozenset({ApiStep.CONDITION}))
    [(event, fields)] = log.at("error")  # logged once, counted every time
    assert "not written" in event and fields["error"] == unwritable_state.write_error
    assert [p.name for p in unwritable_state.folder.iterdir() if p.name.startswith(".journal-")] == []

    unwritable_state.make_writable()
    assert journal.flush()
    assert [e["uid"] for e in json.loads(path.read_text())["evictions"]] == ["uid-1", "uid-2"]
    assert log.at("info")[-1] == ("eviction journal written again", {"path": str(path), "failed_writes": 4})
    assert journal.flush() and failures.count == 4  # nothing left to write


# --- the evictor over a journal that cannot be written ----------------------------------------------------------


def hog() -> dict[str, Any]:
    return pod("hog", requests={"memory": "100Mi"})


def hard_eviction(doc: dict[str, Any]) -> Eviction:
    """The engine's eviction of `doc` using 2Gi with 512Mi available under a hard 1Gi threshold."""
    scenario = parse_scenario({"config": {"evictionHard": {"memory.available": "1Gi"}}, "pods": [doc], "steps": [
        {"at": 0, "summary": summary(memory=512 * Mi, pods=[pod_stats(doc, memory=2 * Gi)])}]})
    [report] = run_scenario(scenario)
    [eviction] = report.acted.evictions
    return eviction


class Evictor:
    """A KubePodEvictor against the test API server over a journal in `folder`, stopping pods into `stopped`."""

    def __init__(self, apiserver: ApiServer, folder: Path) -> None:
        self.client = evictd_api_client(apiserver)
        self.log, self.failures = LogCapture(), Counter()
        self.journal = open_journal(folder / "evictions.json", self.log, failures=self.failures)
        self.stopped: list[Eviction] = []
        self.clock = ManualClock(0.0)
        self.evictor = KubePodEvictor(self.client, self.journal, EventRecorder(self.client, "node-1"),
                                      runtime=SimpleNamespace(attached=True, can_stop=True, stop_pod=self.stopped.append),  # type: ignore[arg-type]
                                      timeout_s=0.5, clock=self.clock)


@pytest.fixture
def make_evictor(apiserver: ApiServer) -> Iterator[Callable[[Path], Evictor]]:
    made: list[Evictor] = []

    def build(folder: Path) -> Evictor:
        made.append(Evictor(apiserver, folder))
        return made[-1]

    yield build
    for evictor in made:
        evictor.client.close()


def test_an_eviction_is_carried_out_when_its_journal_cannot_be_written(
    apiserver: ApiServer, unwritable_state: UnwritableFolder, make_evictor: Callable[[Path], Evictor]
) -> None:
    apiserver.store.create_pod(hog())
    eviction = hard_eviction(hog())
    made = make_evictor(unwritable_state.folder)

    made.evictor.evict(eviction)  # no exception: the decision is carried out

    deletes = apiserver.request_log.matching("DELETE", "/api/v1/namespaces/default/pods/hog")
    assert [(r.status, r.body) for r in deletes] == [(200, {"gracePeriodSeconds": 1,
                                                            "preconditions": {"uid": eviction.pod.uid}})]
    assert [e["reason"] for e in apiserver.store.events("default")] == ["Evicted"]
    assert made.stopped == [eviction] and made.failures.count >= 1  # a hard threshold: stopped on the node at once
    assert made.journal.pending() == [] and eviction.pod.uid in made.journal.evicted_uids()
    assert not (unwritable_state.folder / "evictions.json").exists()

    # Later cycles retry the write; once the folder takes it, the file holds the finished eviction.
    failures = made.failures.count
    assert made.evictor.replay() == [] and made.failures.count == failures + 1
    unwritable_state.make_writable()
    assert made.evictor.replay() == []
    [written] = json.loads((unwritable_state.folder / "evictions.json").read_text())["evictions"]
    assert written["uid"] == eviction.pod.uid and written["deleted"] and written["done_at"]
    assert len(made.log.at("error")) == 1


def test_with_the_api_down_and_an_unwritable_journal_the_pod_is_still_stopped_locally(
    apiserver: ApiServer, unwritable_state: UnwritableFolder, make_evictor: Callable[[Path], Evictor]
) -> None:
    apiserver.store.create_pod(hog())
    eviction = hard_eviction(hog())
    made = make_evictor(unwritable_state.folder)
    apiserver.faults.reset_next(1_000)

    with pytest.raises(KubeError, match="stopped through the container runtime"):
        made.evictor.evict(eviction)

    assert made.stopped == [eviction]
    [pending] = made.journal.pending()
    assert pending.uid == eviction.pod.uid and pending.stopped_locally and ApiStep.DELETION not in pending.done
    assert not (unwritable_state.folder / "evictions.json").exists()

    apiserver.faults.clear()
    unwritable_state.make_writable()
    made.clock.advance(UNANSWERED_QUIET_S)  # the API, unanswered (reset), is asked again after that
    assert made.evictor.replay() == []
    [written] = json.loads((unwritable_state.folder / "evictions.json").read_text())["evictions"]
    assert written["stopped_locally"] and written["deleted"] and written["event_written"]

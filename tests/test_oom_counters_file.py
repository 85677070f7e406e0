"""The OOM-kill counters file (src/evictd/record/oom_counters_file.py) on real files, and the OOM feedback across
restarts on a cgroup v2 fixture tree (tests/fixtures/cgroup/v2-cgroupfs, its counters moved as the kernel moves
them): kills while evictd was not running counted once, at the first cycle, attributed where the hierarchical
counters allow; a restart right after counts nothing; a reboot nothing from before.

The real v1 counterpart (a real OOM kill while no evictd runs) is tests/daemon/test_run_oom.py.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from builders import pod
from clocks import ManualClock
from counter import Counter
from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.oom_counters import OomCounters
from evictd.core.engine import Assessment, EngineState, NoneStarved
from evictd.core.oom import Activity, OomReading, OomReport, OomState, PodOomKill, oom_feedback
from evictd.core.oom_saved import Resumption
from evictd.core.pod_parser import pod_from_dict
from evictd.cycle.finished import Cycle
from evictd.cycle.report import CycleReport, Decided, Observed
from evictd.record.oom_counters_file import REFRESH_EVERY_S, OomCountersFile
from evictd.run.oom_feedback import OomFeedback
from evictd.state_dir import OOM_COUNTERS_FILE, StateDir
from full_filesystem import UnwritableFolder
from log_capture import LogCapture

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"
BOOT, OTHER_BOOT = "e097869e-cfd3-4a24-b48d-959aae3a1f4b", "0b5e4a71-9a43-4c36-b1f2-7d1e6b0c2f11"
PODS_CGROUP = "v1:/sys/fs/cgroup/memory/kubepods"
UID_G = "6f1c2a34-5b7d-4e8f-9a01-23456789abcd"  # guaranteed pod of the fixture
UID_B = "0d9e8f7a-6b5c-4d3e-8f21-0a1b2c3d4e5f"  # burstable pod of the fixture
CTR_G, CTR_B = "1f" * 32, "2e" * 32


def counters_file(path: Path, clock: ManualClock, log: LogCapture | None = None, errors: Counter | None = None,
                  boot_id: str | None = BOOT) -> OomCountersFile:
    return OomCountersFile(str(path), boot_id=boot_id, pods_cgroup=PODS_CGROUP, log=log or LogCapture(),
                           on_error=errors or Counter(), clock=clock)


def read(state: OomState, node: int) -> OomState:
    return oom_feedback(state, OomReading(node=node, cgroups=()), Activity.IDLE, 0.0)[0]


def test_saved_counters_are_resumed_by_the_next_process_of_the_same_boot(tmp_path: Path) -> None:
    path = tmp_path / "state" / OOM_COUNTERS_FILE
    clock = ManualClock()
    log = LogCapture()
    first = counters_file(path, clock, log)
    assert first.restore().resumption is Resumption.NONE_SAVED
    assert log.at("info") == [("OOM-kill counters none saved; kills before this start are not counted",
                               {"path": str(path), "resumed": "none-saved"})]
    first.save(read(OomState(), 4), clock.wall())
    document = json.loads(path.read_text())
    assert (document["bootId"], document["machine"], document["savedAt"]) == (BOOT, 4, clock.wall().timestamp())

    log = LogCapture()
    resumed = counters_file(path, clock, log).restore()
    assert resumed.resumption is Resumption.RESUMED and resumed.state.node == 4
    assert resumed.state.not_running_since_wall == clock.wall().timestamp()
    assert log.at("info") == [("OOM-kill counters restored; kills while evictd was not running are counted at the "
                               "first cycle", {"path": str(path), "resumed": "resumed",
                                               "saved_at": "2026-01-01T00:16:40Z"})]
    log = LogCapture()
    assert counters_file(path, clock, log, boot_id=OTHER_BOOT).restore().state == OomState()
    assert log.events() == ["OOM-kill counters saved before a reboot; kills before this start are not counted"]


def test_unchanged_counters_are_written_at_most_once_a_minute_and_the_last_reading_at_stop(tmp_path: Path) -> None:
    path = tmp_path / OOM_COUNTERS_FILE
    clock = ManualClock()
    saved = counters_file(path, clock)
    state = read(OomState(), 4)
    saved.save(state, clock.wall())
    first = os.stat(path).st_ino
    saved.save(read(state, 4), clock.advance(REFRESH_EVERY_S / 2))
    assert os.stat(path).st_ino == first, "the same counters within a minute: not written again"
    saved.save(read(state, 5), clock.advance(1.0))
    assert json.loads(path.read_text())["machine"] == 5, "changed counters are written at once"
    changed_at = clock.wall().timestamp()
    saved.save(read(state, 5), clock.advance(1.0))
    assert json.loads(path.read_text())["savedAt"] == changed_at
    saved.close()
    assert json.loads(path.read_text())["savedAt"] == clock.wall().timestamp(), "at stop: when evictd last looked"
    saved.save(read(state, 5), clock.advance(REFRESH_EVERY_S))
    assert json.loads(path.read_text())["savedAt"] == clock.wall().timestamp(), "refreshed after a minute"


def test_without_a_boot_id_nothing_is_saved_or_resumed(tmp_path: Path) -> None:
    path = tmp_path / OOM_COUNTERS_FILE
    clock = ManualClock()
    counters_file(path, clock).save(read(OomState(), 4), clock.wall())
    unknown = counters_file(path, clock, boot_id=None)
    assert unknown.restore().resumption is Resumption.BOOT_UNKNOWN
    unknown.save(read(OomState(), 9), clock.wall())
    unknown.close()
    assert json.loads(path.read_text())["machine"] == 4, "a file no run could tie to a boot is never written"


@pytest.mark.parametrize("case", ["corrupt", "a directory", "foreign", "negative counter"])
def test_an_unusable_file_is_moved_aside_counted_and_logged_once(tmp_path: Path, case: str) -> None:
    path = tmp_path / OOM_COUNTERS_FILE
    clock = ManualClock()
    if case == "corrupt":
        path.write_bytes(b'{"version": 1, "bo')
    elif case == "a directory":
        path.mkdir()
    else:
        counters_file(path, clock).save(read(OomState(), 4), clock.wall())
        document = json.loads(path.read_text())
        path.write_text(json.dumps({**document, "version": 2} if case == "foreign" else {**document, "machine": -3}))
    log, errors = LogCapture(), Counter()
    resumed = counters_file(path, clock, log, errors).restore()
    assert resumed.state == OomState() and errors.count == 1
    [(event, fields)] = log.at("error")
    kind = "of another format version" if case == "foreign" else "unusable"
    assert event == f"OOM-kill counters file {kind}: moved aside; kills before this start are not counted"
    suffix = "foreign" if case == "foreign" else "corrupt"
    assert fields["moved_to"] == f"{path}.{suffix}-20260101T001640Z" and os.path.lexists(fields["moved_to"])
    assert not os.path.lexists(path)
    assert {"corrupt": "is not JSON", "a directory": "is a directory", "foreign": "format version 2",
            "negative counter": "oomCounters.machine"}[case] in fields["reason"]


def test_temporary_files_of_an_interrupted_write_are_removed(tmp_path: Path) -> None:
    (tmp_path / ".oom-counters-abc123").write_bytes(b'{"version": 1, "no')
    (tmp_path / ".engine-state-keep").write_bytes(b"the engine state's own")
    log = LogCapture()
    counters_file(tmp_path / OOM_COUNTERS_FILE, ManualClock(), log).restore()
    assert sorted(os.listdir(tmp_path)) == [".engine-state-keep"]
    assert log.events()[0] == "removed temporary OOM-kill counters files left by an interrupted write"


def test_a_state_dir_that_takes_no_writes_costs_only_the_saving(unwritable_state: UnwritableFolder) -> None:
    path = unwritable_state.folder / OOM_COUNTERS_FILE
    clock = ManualClock()
    log, errors = LogCapture(), Counter()
    saved = counters_file(path, clock, log, errors)
    for node in range(3):
        saved.save(read(OomState(), node), clock.advance(1.0))  # never raises into the loop
    assert errors.count == 3, "every failed write is counted"
    assert [event for event, _ in log.at("warning")] == [
        "OOM-kill counters not saved: a restart now would count the kills since the last save again, or (with no "
        "file) none before it"], "logged once"
    unwritable_state.make_writable()
    saved.save(read(OomState(), 3), clock.advance(1.0))
    assert log.at("info") == [("OOM-kill counters saved again", {"path": str(path), "failed_writes": 3})]
    assert json.loads(path.read_text())["machine"] == 3


# --- across restarts, on a cgroup v2 fixture tree ---------------------------------------------------------------


def set_counter(cgroup: Path, kills: int, group_kills: int = 0) -> None:
    """Write a v2 `memory.events` as the kernel keeps it, with these OOM-kill counters."""
    (cgroup / "memory.events").write_text(f"low 0\nhigh 0\nmax {kills * 3}\noom {kills}\noom_kill {kills}\n"
                                          f"oom_group_kill {group_kills}\n")


class V2Node:
    """A copy of the v2 fixture tree and a procfs with `vmstat` and the boot ID, whose counters a test moves."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "cg"
        shutil.copytree(FIXTURES / "v2-cgroupfs", self.root)
        self.proc = tmp_path / "proc"
        (self.proc / "sys" / "kernel" / "random").mkdir(parents=True)
        self.state_dir = StateDir(str(tmp_path / "state"))
        self.clock = ManualClock()
        self.boot(BOOT, machine=7)

    @property
    def pods(self) -> Path:
        return self.root / "kubepods"

    def boot(self, boot_id: str, machine: int) -> None:
        (self.proc / "sys" / "kernel" / "random" / "boot_id").write_text(boot_id + "\n")
        self.machine(machine)

    def machine(self, kills: int) -> None:
        (self.proc / "vmstat").write_text(f"nr_free_pages 5722069\npgmajfault 1203\noom_kill {kills}\n")

    def start(self) -> tuple[OomFeedback, Resumption | None]:
        """A new run of evictd: its counters, its file, its feedback resumed."""
        counters = OomCounters(CgroupReader(CgroupLayout(version=2, root=self.root)), proc_root=self.proc)
        saved = OomCountersFile(self.state_dir.oom_counters, boot_id=counters.boot_id(),
                                pods_cgroup=counters.pods_cgroup_name, log=LogCapture(), on_error=Counter(),
                                clock=self.clock)
        feedback = OomFeedback(counters, dry_run=False, container_names=lambda uid: {}, clock=self.clock, saved=saved)
        resumed = feedback.resume()
        return feedback, None if resumed is None else resumed.resumption

    def cycle(self, feedback: OomFeedback) -> OomReport:
        """One cycle of a run: the feedback, then (after the report) the save."""
        self.clock.advance(10.0)
        report = CycleReport(now=self.clock.now_s, decided=Decided(Assessment(NoneStarved())), observed=Observed(
            pods=(pod_from_dict(pod("db", namespace="shop", uid=UID_G)),)))
        found = feedback.observe(report)
        feedback.save(Cycle(number=1, report=report, state=EngineState(), started_at=self.clock.now_s,
                            duration_s=0.0, wall=self.clock.wall()))
        return found


def test_v2_kills_while_evictd_was_not_running_are_counted_once_at_the_first_cycle(tmp_path: Path) -> None:
    node = V2Node(tmp_path)
    feedback, resumption = node.start()
    assert resumption is Resumption.NONE_SAVED
    assert not node.cycle(feedback).has_kills and feedback.problems == ()
    last_read = node.clock.wall()
    assert not node.cycle(feedback).has_kills
    feedback.close()  # stopped

    node.clock.advance(300.0)  # evictd down for 5 minutes; meanwhile:
    guaranteed = node.pods / f"pod{UID_G}"
    set_counter(guaranteed / CTR_G, 2)  # two kills in the guaranteed pod's container
    set_counter(guaranteed, 2)
    burstable = node.pods / "burstable" / f"pod{UID_B}"
    set_counter(burstable / CTR_B, 1, 1)  # one in the burstable pod's, whose pod was then removed
    shutil.rmtree(burstable)
    set_counter(node.pods / "burstable", 1, 1)
    set_counter(node.pods, 3, 1)
    node.machine(7 + 4)  # and one outside the pods cgroup

    feedback, resumption = node.start()
    assert resumption is Resumption.RESUMED
    report = node.cycle(feedback)
    assert report.activity is Activity.NOT_RUNNING and report.too_late_kills == 0
    # The file holds the last reading of the stopped run (at stop), which took place 10 s after `last_read`.
    assert report.since_wall == (last_read + timedelta(seconds=10)).timestamp()
    assert (report.node_kills, report.pods_kills, report.outside_pods_kills, report.unattributed_pods_kills) == (
        4, 3, 1, 1)
    assert report.pod_kills == (PodOomKill(pod_uid=UID_G, container_id=CTR_G, cgroup=f"kubepods/pod{UID_G}", kills=2,
                                           pod_key="shop/db"),)
    assert not node.cycle(feedback).has_kills, "counted once in the run"
    feedback.close()

    feedback, resumption = node.start()  # a restart right after
    assert resumption is Resumption.RESUMED
    again = node.cycle(feedback)
    assert not again.has_kills and again.activity is Activity.NOT_RUNNING, "nothing counted twice"
    feedback.close()

    node.boot(OTHER_BOOT, machine=1)  # a reboot: the kernel counts from zero again
    set_counter(guaranteed / CTR_G, 1)
    set_counter(guaranteed, 1)
    set_counter(node.pods, 1)
    feedback, resumption = node.start()
    assert resumption is Resumption.OTHER_BOOT
    after_reboot = node.cycle(feedback)
    assert not after_reboot.has_kills and after_reboot.activity is Activity.IDLE, "nothing from before the reboot"
    saved = json.loads(Path(node.state_dir.oom_counters).read_text())
    assert (saved["bootId"], saved["machine"], saved["pods"]) == (OTHER_BOOT, 1, 1)
    assert datetime.fromtimestamp(saved["savedAt"], UTC) <= node.clock.wall()

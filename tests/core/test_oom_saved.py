"""OOM kills while evictd was not running: the saved counters against the fresh ones, decided without I/O.

Each case is a run that read and saved its counters (`oom_counters_document`), evictd down, then a new run that
restores them (`resumed_oom_state`) and takes its first reading (`oom_feedback`): what that first cycle counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from evictd.core.oom import (
    OOM_KILL_REASON,
    TOO_LATE_ACTIVITIES,
    Activity,
    CgroupOomCount,
    OomReading,
    OomReport,
    OomState,
    PodOomKill,
    oom_feedback,
    oom_kill_events,
)
from evictd.core.oom_saved import (
    OOM_COUNTERS_VERSION,
    Resumption,
    oom_counters_document,
    resumed_oom_state,
)
from evictd.core.saved_state import UnusableState

BOOT, OTHER_BOOT = "e097869e-cfd3-4a24-b48d-959aae3a1f4b", "0b5e4a71-9a43-4c36-b1f2-7d1e6b0c2f11"
V1_PODS, V2_PODS = "v1:/sys/fs/cgroup/memory/kubepods", "v2:/sys/fs/cgroup/kubepods.slice"
SAVED_AT = 1_790_000_000.0  # 2026-09-21T14:13:20Z
UID_A, UID_B = "aaaa-1111", "bbbb-2222"
CTR_1, CTR_2 = "1" * 64, "2" * 64
POD_A, POD_B = f"kubepods/burstable/pod{UID_A}", f"kubepods/pod{UID_B}"


def v1(path: str, kills: int, uid: str = "", cid: str = "") -> CgroupOomCount:
    return CgroupOomCount(path=path, oom_kills=kills, pod_uid=uid, container_id=cid)


def v2(path: str, kills: int, uid: str, cid: str = "", groups: int = 0) -> CgroupOomCount:
    return CgroupOomCount(path=path, oom_kills=kills, pod_uid=uid, container_id=cid, group_kills=groups,
                          hierarchical=True)


def run_until_stop(readings: list[OomReading]) -> OomState:
    """The state of a run that took `readings`, one per cycle, from a fresh start."""
    state = OomState()
    for number, reading in enumerate(readings):
        state, _ = oom_feedback(state, reading, Activity.IDLE, float(number))
    return state


def first_cycle_after_start(document: object, boot_id: str | None, pods_cgroup: str,
                            reading: OomReading) -> tuple[Resumption, OomState, OomReport]:
    """Round-trip `document` through JSON (as the file holds it), restore it, take the first reading."""
    resumed = resumed_oom_state(json.loads(json.dumps(document)), boot_id=boot_id, pods_cgroup=pods_cgroup)
    state, report = oom_feedback(resumed.state, reading, Activity.IDLE, 1000.0)
    return resumed.resumption, state, report


V1_BEFORE = [v1("kubepods", 0), v1(POD_A, 0, UID_A), v1(f"{POD_A}/{CTR_1}", 2, UID_A, CTR_1),
             v1(f"{POD_A}/{CTR_2}", 0, UID_A, CTR_2), v1(POD_B, 0, UID_B), v1(f"{POD_B}/{CTR_1}", 1, UID_B, CTR_1)]
V2_BEFORE = [v2(POD_A, 2, UID_A), v2(f"{POD_A}/{CTR_1}", 2, UID_A, CTR_1), v2(f"{POD_A}/{CTR_2}", 0, UID_A, CTR_2),
             v2(POD_B, 1, UID_B, groups=1), v2(f"{POD_B}/{CTR_1}", 1, UID_B, CTR_1, groups=1)]
V1_SAVED = run_until_stop([OomReading(node=5, cgroups=tuple(V1_BEFORE))])
V2_SAVED = run_until_stop([OomReading(node=5, pods=3, cgroups=tuple(V2_BEFORE))])


def saved(state: OomState, boot_id: str = BOOT, pods_cgroup: str = V1_PODS) -> dict[str, object]:
    return oom_counters_document(state, boot_id=boot_id, pods_cgroup=pods_cgroup, now_wall=SAVED_AT)


@dataclass(frozen=True)
class Case:
    document: object
    reading: OomReading
    resumption: Resumption
    node_kills: int
    pods_kills: int
    pod_kills: tuple[PodOomKill, ...]
    boot_id: str | None = BOOT
    pods_cgroup: str = V1_PODS


CASES = [
    pytest.param(Case(
        saved(V1_SAVED),
        OomReading(node=9, cgroups=(v1("kubepods", 0), v1(POD_A, 0, UID_A), v1(f"{POD_A}/{CTR_1}", 4, UID_A, CTR_1),
                                    v1(f"{POD_A}/{CTR_2}", 1, UID_A, CTR_2), v1(POD_B, 0, UID_B),
                                    v1(f"{POD_B}/{CTR_1}", 1, UID_B, CTR_1))),
        Resumption.RESUMED, node_kills=4, pods_kills=3,
        pod_kills=(PodOomKill(UID_A, CTR_1, POD_A, 2), PodOomKill(UID_A, CTR_2, POD_A, 1))), id="v1-same-boot"),
    pytest.param(Case(
        saved(V2_SAVED, pods_cgroup=V2_PODS),
        OomReading(node=8, pods=6, cgroups=(v2(POD_A, 4, UID_A), v2(f"{POD_A}/{CTR_1}", 3, UID_A, CTR_1),
                                            v2(f"{POD_A}/{CTR_2}", 0, UID_A, CTR_2), v2(POD_B, 2, UID_B, groups=2),
                                            v2(f"{POD_B}/{CTR_1}", 2, UID_B, CTR_1, groups=2))),
        Resumption.RESUMED, node_kills=3, pods_kills=3,
        pod_kills=(PodOomKill(UID_A, "", POD_A, 1), PodOomKill(UID_A, CTR_1, POD_A, 1),
                   PodOomKill(UID_B, CTR_1, POD_B, 1, group_kills=1)), pods_cgroup=V2_PODS), id="v2-same-boot"),
    pytest.param(Case(
        saved(V1_SAVED, boot_id=OTHER_BOOT),
        OomReading(node=9, cgroups=(v1(f"{POD_A}/{CTR_1}", 4, UID_A, CTR_1),)),
        Resumption.OTHER_BOOT, node_kills=0, pods_kills=0, pod_kills=()), id="reboot-nothing-from-before"),
    pytest.param(Case(
        saved(V1_SAVED), OomReading(node=9, cgroups=(v1(f"{POD_A}/{CTR_1}", 4, UID_A, CTR_1),)),
        Resumption.BOOT_UNKNOWN, node_kills=0, pods_kills=0, pod_kills=(), boot_id=None), id="boot-id-unreadable"),
    pytest.param(Case(
        None, OomReading(node=9, cgroups=(v1(f"{POD_A}/{CTR_1}", 4, UID_A, CTR_1),)),
        Resumption.NONE_SAVED, node_kills=0, pods_kills=0, pod_kills=()), id="no-saved-file"),
    pytest.param(Case(
        saved(V1_SAVED),
        # The machine's counter lower on the same boot cannot happen without a reboot: nothing of before counts.
        # The container cgroup's lower: made anew since, its one kill is new.
        OomReading(node=2, cgroups=(v1(POD_A, 0, UID_A), v1(f"{POD_A}/{CTR_1}", 1, UID_A, CTR_1))),
        Resumption.RESUMED, node_kills=0, pods_kills=1, pod_kills=(PodOomKill(UID_A, CTR_1, POD_A, 1),)),
        id="counters-lower-nothing-negative"),
    pytest.param(Case(
        saved(V2_SAVED, pods_cgroup=V2_PODS),
        OomReading(node=4, pods=1, cgroups=(v2(POD_A, 1, UID_A), v2(f"{POD_A}/{CTR_1}", 1, UID_A, CTR_1))),
        Resumption.RESUMED, node_kills=0, pods_kills=1, pod_kills=(PodOomKill(UID_A, CTR_1, POD_A, 1),),
        pods_cgroup=V2_PODS), id="v2-pods-cgroup-made-anew-nothing-negative"),
    pytest.param(Case(
        saved(V1_SAVED),
        # Pod B's container cgroup was removed with its kill: counted on the machine, in no pod (v1 is local).
        OomReading(node=7, cgroups=(v1("kubepods", 0), v1(POD_A, 0, UID_A), v1(f"{POD_A}/{CTR_1}", 3, UID_A, CTR_1),
                                    v1(POD_B, 0, UID_B))),
        Resumption.RESUMED, node_kills=2, pods_kills=1, pod_kills=(PodOomKill(UID_A, CTR_1, POD_A, 1),)),
        id="v1-cgroup-gone"),
    pytest.param(Case(
        saved(V2_SAVED, pods_cgroup=V2_PODS),
        # Pod A's container cgroup was removed after a kill: the pod's hierarchical counter keeps it.
        OomReading(node=6, pods=4, cgroups=(v2(POD_A, 3, UID_A), v2(POD_B, 1, UID_B, groups=1),
                                            v2(f"{POD_B}/{CTR_1}", 1, UID_B, CTR_1, groups=1))),
        Resumption.RESUMED, node_kills=1, pods_kills=1, pod_kills=(PodOomKill(UID_A, "", POD_A, 1),),
        pods_cgroup=V2_PODS), id="v2-container-cgroup-gone"),
    pytest.param(Case(
        saved(V2_SAVED, pods_cgroup=V2_PODS),
        # Pod B removed whole (its cgroup gone): its kill is in the pods counter, in no pod.
        OomReading(node=6, pods=4, cgroups=(v2(POD_A, 2, UID_A), v2(f"{POD_A}/{CTR_1}", 2, UID_A, CTR_1))),
        Resumption.RESUMED, node_kills=1, pods_kills=1, pod_kills=(), pods_cgroup=V2_PODS), id="v2-pod-gone"),
    pytest.param(Case(
        saved(V1_SAVED),
        # cgroupRoot changed between the runs: the saved per-cgroup counters are another pods cgroup's.
        OomReading(node=8, pods=9, cgroups=(v2(POD_A, 9, UID_A),)),
        Resumption.MACHINE_ONLY, node_kills=3, pods_kills=0, pod_kills=(), pods_cgroup=V2_PODS),
        id="another-pods-cgroup-machine-only"),
]


@pytest.mark.parametrize("case", CASES)
def test_first_cycle_after_a_start_counts_what_happened_since_the_saved_counters(case: Case) -> None:
    resumption, state, report = first_cycle_after_start(case.document, case.boot_id, case.pods_cgroup, case.reading)
    assert resumption is case.resumption
    assert (report.node_kills, report.pods_kills) == (case.node_kills, case.pods_kills)
    assert report.pod_kills == case.pod_kills
    assert min(report.node_kills, report.pods_kills, report.attributed_kills, report.outside_pods_kills,
               report.unattributed_pods_kills) >= 0
    counted_before = case.resumption in (Resumption.RESUMED, Resumption.MACHINE_ONLY)
    assert report.activity is (Activity.NOT_RUNNING if counted_before else Activity.IDLE)
    assert report.since_wall == (SAVED_AT if counted_before else None)
    assert report.too_late_kills == 0, "nothing was watching: never judged too late"
    assert state.not_running_since_wall is None, "only the first interval is the time evictd was not running"

    # A restart right after: the counters saved after the report count nothing again.
    again = first_cycle_after_start(saved(state, pods_cgroup=case.pods_cgroup), case.boot_id, case.pods_cgroup,
                                    case.reading)[2]
    assert not again.has_kills


def test_kills_after_the_first_cycle_are_judged_as_usual() -> None:
    resumed = resumed_oom_state(saved(V1_SAVED), boot_id=BOOT, pods_cgroup=V1_PODS)
    state, first = oom_feedback(resumed.state, OomReading(node=6, cgroups=tuple(V1_BEFORE)), Activity.GRACE_PERIOD,
                                10.0)
    assert (first.node_kills, first.activity, first.too_late_kills) == (1, Activity.NOT_RUNNING, 0)
    state, second = oom_feedback(state, OomReading(node=7, cgroups=tuple(V1_BEFORE)), Activity.GRACE_PERIOD, 20.0)
    assert (second.node_kills, second.activity, second.too_late_kills) == (1, Activity.GRACE_PERIOD, 1)
    assert second.since_wall is None


def test_the_node_event_and_its_reason_say_evictd_was_not_running_and_since_when() -> None:
    report = OomReport(node_kills=3, pods_kills=2, pod_kills=(PodOomKill(UID_A, CTR_1, POD_A, 2, pod_key="shop/cart",
                                                                         container_name="app"),),
                       activity=Activity.NOT_RUNNING, pods_counted_exactly=True, since_wall=SAVED_AT)
    assert Activity.NOT_RUNNING not in TOO_LATE_ACTIVITIES
    assert report.kills == 3
    assert oom_kill_events(report) == (
        (OOM_KILL_REASON, "OOM killer killed 2 processes in pod shop/cart (container app) while evictd was not "
                          "running (since 2026-09-21T14:13:20Z)"),
        (OOM_KILL_REASON, "OOM killer killed 1 process outside the pods cgroup while evictd was not running "
                          "(since 2026-09-21T14:13:20Z)"),
    )


def test_only_counters_that_are_not_zero_are_saved_and_a_missing_one_counts_from_zero() -> None:
    document = saved(V2_SAVED, pods_cgroup=V2_PODS)
    assert document["cgroups"] == {
        POD_A: {"oomKill": 2, "oomGroupKill": 0}, f"{POD_A}/{CTR_1}": {"oomKill": 2, "oomGroupKill": 0},
        POD_B: {"oomKill": 1, "oomGroupKill": 1}, f"{POD_B}/{CTR_1}": {"oomKill": 1, "oomGroupKill": 1},
    }
    assert (document["version"], document["machine"], document["pods"], document["walked"]) == (
        OOM_COUNTERS_VERSION, 5, 3, True)
    restored = resumed_oom_state(document, boot_id=BOOT, pods_cgroup=V2_PODS).state
    assert restored == replace(V2_SAVED, cgroups={k: v for k, v in V2_SAVED.cgroups.items() if v},
                               not_running_since_wall=SAVED_AT)


def test_a_run_that_never_walked_the_cgroups_leaves_their_first_walk_a_baseline() -> None:
    # The per-cgroup walk failed in every cycle of the last run: its first walk now names no pod, counts no kill.
    state = run_until_stop([OomReading(node=5)])
    _, _, report = first_cycle_after_start(saved(state), BOOT, V1_PODS,
                                           OomReading(node=6, cgroups=(v1(f"{POD_A}/{CTR_1}", 3, UID_A, CTR_1),)))
    assert (report.node_kills, report.pods_kills, report.pod_kills) == (1, 0, ())


@pytest.mark.parametrize(("document", "reason", "foreign"), [
    pytest.param([], "not a JSON object", False, id="not-an-object"),
    pytest.param({"bootId": BOOT}, "no format version", False, id="no-version"),
    pytest.param({**saved(V1_SAVED), "version": 2}, "format version 2", True, id="newer-version"),
    pytest.param({**saved(V1_SAVED), "version": True}, "format version True", True, id="version-bool"),
    pytest.param({**saved(V1_SAVED), "machine": -1}, "oomCounters.machine", False, id="negative-counter"),
    pytest.param({**saved(V1_SAVED), "machine": 1.5}, "must be an integer", False, id="float-counter"),
    pytest.param({**saved(V1_SAVED), "walked": 1}, "must be true or false", False, id="walked-not-bool"),
    pytest.param({**saved(V1_SAVED), "savedAt": "yesterday"}, "oomCounters.savedAt", False, id="saved-at-text"),
    pytest.param({**saved(V1_SAVED), "bootId": None}, "oomCounters.bootId", False, id="boot-id-null"),
    pytest.param({**saved(V1_SAVED), "extra": 1}, "unknown field", False, id="unknown-field"),
    pytest.param({k: v for k, v in saved(V1_SAVED).items() if k != "cgroups"}, "missing", False, id="missing-field"),
    pytest.param({**saved(V1_SAVED), "cgroups": {"a": {"oomKill": 1}}}, "oomGroupKill", False,
                 id="cgroup-missing-group-kills"),
    pytest.param({**saved(V1_SAVED), "cgroups": {"a": {"oomKill": 1, "oomGroupKill": 0, "x": 1}}}, "unknown field",
                 False, id="cgroup-unknown-field"),
])
def test_a_document_evictd_did_not_write_is_unusable(document: object, reason: str, foreign: bool) -> None:
    with pytest.raises(UnusableState) as caught:
        resumed_oom_state(document, boot_id=BOOT, pods_cgroup=V1_PODS)
    assert reason in caught.value.reason and caught.value.foreign is foreign

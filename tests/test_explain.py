"""`evictd explain`: why a recorded eviction happened, and what would go next, from a flight recording.

The recordings are made by the real FlightRecorder from the example scenarios' cycles (as `test_recorder` makes
them); the command runs as a user runs it. `tests/daemon/test_run_recording.py` explains a recording of a real
`evictd run` under real memory and disk pressure.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import builders
from evictd.commands.replay import replayed_runs
from evictd.commands.simulate import parse_scenario
from evictd.cycle.report import EvictionApiRefusal, EvictionApiUse
from evictd.kube.evictor import journal_entry
from evictd.kube.journal import EvictionJournal
from evictd.record.recording import read_recording
from evictd.state_dir import JOURNAL_FILE, RECORDING_FOLDER
from log_capture import LogCapture
from test_recorder import EXAMPLES, SAMPLE, START, cycles, evictd, example, record, recorder


def when(seconds: float) -> str:
    """The RFC 3339 time of `seconds` into the example (as explain prints times)."""
    return datetime.fromtimestamp(START + seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def explained(state_dir: Path, *args: str) -> dict[str, Any]:
    done = evictd("explain", *args, "--state-dir", str(state_dir), "--output", "json")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def memory_recording(tmp_path: Path, proxy_priority: int | None = None) -> Path:
    """01-memory-pressure recorded: batch-job evicted at t=100 (soft, grace 90 s met), shop/web at t=110 (hard).
    With `proxy_priority` the static kube-proxy pod gets that priority (a low one ranks it first)."""
    _, scenario, settings = example(EXAMPLES[0])
    if proxy_priority is not None:
        steps = tuple(replace(step, pods=tuple(replace(p, priority=proxy_priority) if p.name.startswith("kube-proxy")
                                               else p for p in step.pods)) for step in scenario.steps)
        scenario = replace(scenario, steps=steps)
    record(scenario, recorder(tmp_path, settings))
    return tmp_path


def test_explain_a_soft_eviction_by_pod_name(tmp_path: Path) -> None:
    state_dir = memory_recording(tmp_path)
    records, _ = read_recording(str(state_dir / RECORDING_FOLDER))
    evicting = next(r for r in records if r.decision.evicted)

    document = explained(state_dir, "jobs/batch-job")
    assert document["decision"] == f"{evicting.run}/{evicting.cycle}" and evicting.cycle == 4
    assert (document["pod"], document["signal"], document["time"]) == ("jobs/batch-job", "memory.available", when(100))
    assert document["dryRun"] is False and document["gracePeriodSeconds"] == 10
    threshold = document["threshold"]
    # Below 2Gi since t=10: first met then, acted on once its 90 s grace period had passed.
    assert threshold == {**threshold, "kind": "soft", "value": {"quantity": "2Gi"}, "gracePeriodSeconds": 90,
                         "threshold": "2Gi", "available": "1750Mi", "capacity": "16Gi", "firstMet": when(10),
                         "metForSeconds": 90, "graceMet": True}
    assert document["reclaim"] == [] and document["unit"] == "bytes"
    ranking = document["ranking"]
    assert [(r["pod"], r["exceedsRequests"], r["priority"], r["outcome"]) for r in ranking] == [
        ("jobs/batch-job", True, 0, "evicted"),
        ("shop/web", True, 0, None),
        ("kube-system/kube-proxy-x7k2p", True, 2000001000, "never evicted: a mirror pod"),
        ("shop/db", False, 1000, None),
    ]
    assert ranking[0]["usageAboveRequest"] == 3 << 30 and ranking[0]["uid"].endswith("7a02")
    assert document["why"] == ["jobs/batch-job had more usage above its request (3.0 GiB) than shop/web (644.0 MiB)"]

    # The same eviction found by its UID, and by its name alone.
    assert explained(state_dir, "0b0e7a43-0002-4c1e-9d39-1f0a5c1b7a02") == document
    assert explained(state_dir, "batch-job") == document


def test_explain_says_why_a_pod_ranked_above_the_evicted_one_was_skipped(tmp_path: Path) -> None:
    state_dir = memory_recording(tmp_path, proxy_priority=-5)
    document = explained(state_dir, "--last")
    assert (document["pod"], document["time"]) == ("shop/web", when(110))
    assert [r["pod"] for r in document["ranking"]][:2] == ["kube-system/kube-proxy-x7k2p", "shop/web"]
    assert document["threshold"]["kind"] == "hard" and document["threshold"]["firstMet"] == when(110)
    soft = [t for t in document["thresholdsMet"] if t["kind"] == "soft"]
    assert soft == [{**soft[0], "firstMet": when(10), "metForSeconds": 100}]
    assert document["why"] == [
        "kube-system/kube-proxy-x7k2p ranked above it but is never evicted: a mirror pod",
        "shop/web used more memory than it requests and shop/db did not",
    ]

    text = evictd("explain", "--last", "--state-dir", str(state_dir))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"decision {document['decision']} at {when(110)}: evicted shop/web for "
                               "memory.available, grace 1s")
    assert (f"threshold acted on: memory.available < 1Gi (hard): available 700Mi of 16Gi, threshold 1Gi; "
            f"first met {when(110)} (0s before)") in lines
    header = next(i for i, line in enumerate(lines) if line.startswith("#  POD"))
    assert lines[header].split("  ")[0:2] == ["#", "POD"] and "USAGE - REQUEST" in lines[header]
    assert lines[header + 1].split() == ["1", "kube-system/kube-proxy-x7k2p", "yes", "-5", "50.0", "MiB", "never", "evicted:",
                                         "a", "mirror", "pod"]
    assert lines[header + 2].split() == ["2", "shop/web", "yes", "0", "644.0", "MiB", "evicted"]
    assert "  shop/web used more memory than it requests and shop/db did not" in lines


def test_explain_shows_node_level_reclaim_and_a_decision_by_its_id(tmp_path: Path) -> None:
    _, scenario, settings = example(EXAMPLES[1])  # 02-disk-pressure-single-fs: reclaim, not enough, evict
    record(scenario, recorder(tmp_path, settings))
    records, _ = read_recording(str(tmp_path / RECORDING_FOLDER))
    evicting = next(r for r in records if r.decision.evicted)
    document = explained(tmp_path, "--decision", f"{evicting.run}/{evicting.cycle}")
    assert document["pod"] == "default/cache" and document["signal"] == "nodefs.available"
    assert [r["action"] for r in document["reclaim"]] == ["containerGC", "imageGC"]
    assert document["reclaim"] == [r.document() for r in evicting.decision.reclaim_results] and document["reclaimSucceeded"] is False
    assert document["why"] == ["default/cache has a lower priority (0) than default/api (100)"]


def test_explain_now_shows_the_distance_to_each_threshold_and_the_next_pod(tmp_path: Path) -> None:
    state_dir = memory_recording(tmp_path)
    document = explained(state_dir, "--now")
    assert document["time"] == when(410) and document["conditions"] == []
    signals = {(s["signal"], s["kind"]): s for s in document["signals"]}
    hard = signals[("memory.available", "hard")]
    assert hard["distance"] == hard["available"] - hard["threshold"] and hard["threshold"] == 1 << 30
    assert hard["state"] == "ok" and signals[("memory.available", "soft")]["threshold"] == 2 << 30
    assert signals[("allocatableMemory.available", "hard")]["state"] == "no reading"
    ranking = document["ranking"]
    assert ranking["signal"] == "memory.available" and ranking["next"] == "shop/web"
    assert [p["pod"] for p in ranking["pods"]] == ["shop/web", "kube-system/kube-proxy-x7k2p", "shop/db"]

    text = evictd("explain", "--now", "--state-dir", str(state_dir))
    assert text.returncode == 0, text.stderr
    assert "next to go: shop/web" in text.stdout
    row = next(line for line in text.stdout.splitlines() if line.startswith("memory.available") and "hard" in line)
    assert row.split()[-3:] == ["5.0", "GiB", "ok"]


def test_explain_under_pressure_now_shows_the_grace_period_under_way(tmp_path: Path) -> None:
    state_dir = memory_recording(tmp_path)
    document = explained(state_dir, "--now", "--until", when(60))
    assert document["time"] == when(60) and document["conditions"] == ["MemoryPressure"]
    soft = next(s for s in document["signals"] if s["kind"] == "soft")
    assert soft["state"] == "in grace 50/90s" and soft["distance"] < 0


def test_explain_without_a_recording_or_an_eviction_says_so(tmp_path: Path) -> None:
    missing = evictd("explain", "--last", "--state-dir", str(tmp_path / "nowhere"))
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == (f"evictd: no recorded cycles in {tmp_path / 'nowhere'}; nor in the journal (it keeps "
                              "evictions 10 minutes after they finish; none in dry-run)\n")

    state_dir = memory_recording(tmp_path)
    unknown = evictd("explain", "shop/db", "--state-dir", str(state_dir))
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("evictd: no eviction of shop/db in the recording "
                                     "(evicted were: jobs/batch-job, shop/web); nor in the journal")
    calm = evictd("explain", "--last", "--state-dir", str(state_dir), "--until", when(60))
    assert calm.returncode == 1 and calm.stderr.startswith("evictd: no eviction in the recording; nor in the journal")
    records, _ = read_recording(str(state_dir / RECORDING_FOLDER))
    no_eviction = evictd("explain", "--decision", f"{records[0].run}/1", "--state-dir", str(state_dir))
    assert no_eviction.returncode == 1 and "evicted nobody" in no_eviction.stderr
    no_decision = evictd("explain", "--decision", "nope/3", "--state-dir", str(state_dir))
    assert no_decision.returncode == 1 and no_decision.stderr.startswith("evictd: no decision nope/3")

    # Usage errors: nothing to explain, or two things at once.
    for args in ((), ("shop/web", "--last"), ("--last", "--now")):
        usage = evictd("explain", *args, "--state-dir", str(state_dir))
        assert usage.returncode == 2 and usage.stderr.startswith("evictd: "), usage.stderr
        assert "Traceback" not in usage.stderr


def journal_of(state_dir: Path) -> None:
    """Journal every eviction of the recording in `state_dir`, as the daemon's evictor does (with its decision
    id and the cycle's time)."""
    records, _ = read_recording(str(state_dir / RECORDING_FOLDER))
    journal = EvictionJournal(str(state_dir / JOURNAL_FILE), log=LogCapture())
    for run in replayed_runs(records):
        for cycle_record, report in run.cycles:
            decision = f"{cycle_record.run}/{cycle_record.cycle}"
            for eviction in report.acted.evictions:
                journal.record(journal_entry(eviction, cycle_record.wall, decision))


def test_explain_falls_back_to_the_journal_when_the_recording_is_gone(tmp_path: Path) -> None:
    state_dir = memory_recording(tmp_path)
    journal_of(state_dir)
    recorded = explained(state_dir, "--last")
    assert recorded["source"] == "recording", "the recording holds it: the journal is not needed"

    shutil.rmtree(state_dir / RECORDING_FOLDER)
    document = explained(state_dir, "--decision", recorded["decision"])
    assert (document["source"], document["pod"], document["decision"]) == ("journal", "shop/web", recorded["decision"])
    assert (document["signal"], document["message"], document["time"]) == (
        "memory.available", recorded["message"], when(110))
    assert document["effectiveGracePeriodSeconds"] == recorded["effectiveGracePeriodSeconds"] == 1
    assert document["notRecorded"].startswith("the recording was deleted or cannot be read (no recorded cycles in ")
    assert not document["apiSteps"]["deleted"] and document["apiSteps"]["finished"] is None
    assert explained(state_dir, "--last") == document, "the last eviction: shop/web at 110 s"
    assert explained(state_dir, "batch-job")["time"] == when(100)

    text = evictd("explain", "jobs/batch-job", "--state-dir", str(state_dir))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"decision {document['decision'].split('/')[0]}/4 at {when(100)}: evicted jobs/batch-job"
                               " for memory.available, grace 10s (from the eviction journal)")
    assert "  API: nothing yet; API steps pending" in lines
    assert lines[-1] == ("the ranked table, the thresholds' first-met times and grace timing, and what node-level "
                         "reclaim ran and freed are not available: the recording does not hold that cycle.")

    # A journal that cannot be read: said, exit status 1.
    (state_dir / JOURNAL_FILE).write_text("{")
    broken = evictd("explain", "--last", "--state-dir", str(state_dir))
    assert broken.returncode == 1 and "the journal cannot be read either" in broken.stderr, broken.stderr


def test_explain_now_says_when_the_newest_cycle_is_not_now(tmp_path: Path) -> None:
    old = memory_recording(tmp_path / "old")  # recorded at 2026-11-22T23:00 + up to 410 s
    stale = evictd("explain", "--now", "--state-dir", str(old), "--output", "json")
    assert stale.returncode == 0, stale.stderr
    document = json.loads(stale.stdout)
    age = time.time() - datetime.fromisoformat(when(410).replace("Z", "+00:00")).timestamp()
    assert document["current"] is False and abs(document["ageSeconds"] - age) < 60
    assert stale.stderr.startswith("warning: the newest recorded cycle is ") and "this is not now" in stale.stderr
    text = evictd("explain", "--now", "--state-dir", str(old))
    assert text.stdout.startswith(f"NOT NOW: the newest recorded cycle, {document['decision']} at {when(410)}, is ")

    # Recorded up to a moment ago (a daemon running with its recorder): current, with its age.
    _, scenario, settings = example(EXAMPLES[0])
    fresh_dir = tmp_path / "fresh"
    hook = recorder(fresh_dir, settings)
    for cycle in cycles(scenario, start=time.time() - scenario.steps[-1].at - 1):
        hook(cycle)
    fresh = evictd("explain", "--now", "--state-dir", str(fresh_dir), "--output", "json")
    assert fresh.returncode == 0 and fresh.stderr == ""
    document = json.loads(fresh.stdout)
    assert document["current"] is True and 1 <= document["ageSeconds"] < 30
    text = evictd("explain", "--now", "--state-dir", str(fresh_dir))
    assert text.stdout.startswith(f"as of cycle {document['decision']} at ") and "s ago)" in text.stdout.split("\n")[0]


def test_explain_a_disk_eviction_says_how_old_the_pods_disk_figures_were(tmp_path: Path) -> None:
    """Issue #25: a pod whose walk takes longer than the staleness limit is decided on with its last complete
    figures; explain says how old they were."""
    document, _, settings = example(EXAMPLES[1])  # 02-disk-pressure-single-fs: default/cache evicted at t=10
    [cache] = [stats for stats in document["x-pod-stats"] if stats["podRef"]["name"] == "cache"]
    # Its last complete walk began ten minutes before the decision.
    cache["ephemeral-storage"] = {"time": when(10 - 600), "usedBytes": 3_452_960_768, "inodesUsed": 1200}
    record(parse_scenario(document), recorder(tmp_path, settings))

    explanation = explained(tmp_path, "default/cache")
    assert explanation["signal"] == "nodefs.available"
    assert explanation["podDiskFigures"] == {"measured": when(10 - 600), "ageSeconds": 600.0,
                                             "usedBytes": 3_452_960_768, "inodesUsed": 1200}
    text = evictd("explain", "default/cache", "--state-dir", str(tmp_path))
    assert text.returncode == 0, text.stderr
    assert ("disk figures of default/cache: 3.2 GiB measured " + when(10 - 600) + " (10m00s before this decision); "
            "older than 2m00s: its last complete measurement") in text.stdout


def test_explain_last_on_the_shipped_sample_recording() -> None:
    """The sample (config/examples/recorded/, 01-memory-pressure recorded by `simulate --record`) explains as a
    daemon's recording does: its last eviction is shop/web, at t=110, for the hard memory threshold."""
    before = sorted(p for p in SAMPLE.rglob("*"))
    document = explained(SAMPLE, "--last")
    assert (document["decision"], document["time"], document["dryRun"]) == (
        "19700101T000000Z-simulate/5", "1970-01-01T00:01:50.000Z", True)
    assert (document["pod"], document["signal"], document["threshold"]["kind"]) == (
        "shop/web", "memory.available", "hard")
    message = ("The node was low on resource: memory. Threshold quantity: 1Gi, available: 700Mi. Container nginx was "
               "using 900Mi, request is 256Mi, has larger consumption of memory. ")
    assert document["message"] == message
    assert [(r["pod"], r["outcome"]) for r in document["ranking"]] == [
        ("shop/web", "evicted"), ("kube-system/kube-proxy-x7k2p", "never evicted: a mirror pod"), ("shop/db", None)]

    text = evictd("explain", "--state-dir", str(SAMPLE), "--last")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == ("decision 19700101T000000Z-simulate/5 at 1970-01-01T00:01:50.000Z: would have evicted shop/web "
                        "for memory.available, grace 1s (effective 1s)")
    assert lines[1] == f"  message: {message}"
    # The earlier eviction, by name; and reading the sample leaves nothing in the checkout.
    assert explained(SAMPLE, "batch-job")["threshold"]["kind"] == "soft"
    assert sorted(p for p in SAMPLE.rglob("*")) == before


def test_explain_shows_what_the_eviction_api_answered(tmp_path: Path) -> None:
    """With softEvictionsThroughEvictionAPI the cycle's decision records the API's refusals; explain shows them as
    recorded (a replay cannot ask the API again)."""
    _, scenario, settings = example(EXAMPLES[0])
    hook = recorder(tmp_path, settings)
    refusal = EvictionApiRefusal(pod="shop/other", status=429, reason="DisruptionBudget", budget="other-pdb",
                              message="Cannot evict pod as it would violate the pod's disruption budget.")
    for cycle in cycles(scenario):
        if [e.pod.name for e in cycle.report.acted.evictions] == ["batch-job"]:
            acted = replace(cycle.report.acted, eviction_api=EvictionApiUse(refusals=(refusal,)))
            cycle = replace(cycle, report=replace(cycle.report, acted=acted))
        hook(cycle)

    document = explained(tmp_path, "jobs/batch-job")
    assert document["evictionApi"] == {"refusals": [
        {"pod": "shop/other", "status": 429, "reason": "DisruptionBudget", "budget": "other-pdb",
         "message": "Cannot evict pod as it would violate the pod's disruption budget."}]}
    assert "evictionApi" not in explained(tmp_path, "shop/web")  # the hard eviction: the kubelet's way
    text = evictd("explain", "jobs/batch-job", "--state-dir", str(tmp_path))
    assert text.returncode == 0, text.stderr
    assert ("through the Eviction API, after refusals:\n  shop/other: 429 DisruptionBudget (budget other-pdb): "
            "Cannot evict pod as it would violate the pod's disruption budget.\n") in text.stdout


def test_explain_a_disk_eviction_decided_after_a_wait_for_disk_figures_shows_the_figures_the_wait_brought(
        tmp_path: Path) -> None:
    """A disk ranking that waited for pods' disk figures (docs/how-a-cycle-decides.md step 9) ranked on the Summary
    read after the wait: explain shows the evicted pod's figures and keys from it, not the empty ones before."""
    b = builders
    db = b.pod("db", requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
    filler = b.pod("filler", volumes=[{"name": "scratch", "emptyDir": {}}])
    short = b.fs(b.Gi, 100 * b.Gi)
    unmeasured = b.summary(nodefs=short, pods=[b.pod_stats(db, memory=b.Gi), b.pod_stats(filler, memory=b.Mi)])
    figures = {"time": when(-1), "usedBytes": 3 * b.Gi, "inodesUsed": 3}
    measured = b.summary(nodefs=short, pods=[
        {**b.pod_stats(db, memory=b.Gi, logs=4096), "ephemeral-storage": {**figures, "usedBytes": 4096}},
        {**b.pod_stats(filler, memory=b.Mi, volumes={"scratch": 3 * b.Gi}), "ephemeral-storage": figures}])
    scenario = parse_scenario({"config": {"evictionHard": {"nodefs.available": "10%"}}, "pods": [db, filler],
                               "steps": [{"at": 0, "summary": unmeasured, "afterDiskWait": measured}]})
    record(scenario, recorder(tmp_path, scenario.settings))

    explanation = explained(tmp_path, "default/filler")
    assert explanation["signal"] == "nodefs.available"
    assert explanation["podDiskFigures"] == {"measured": when(-1), "ageSeconds": 1.0, "usedBytes": 3 * b.Gi,
                                             "inodesUsed": 3}
    assert [row["pod"] for row in explanation["ranking"]] == ["default/filler", "default/db"]

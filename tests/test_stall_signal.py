"""evictd's memory stall signals (docs/configuration.md "Memory stall thresholds"): their configuration (only in
EvictdConfiguration; a KubeletConfiguration is read as the kubelet reads it), the threshold semantics (met when the
stall share is at or above the value), the kernel's PSI file read for real, and scenarios showing that hard and
soft stall thresholds decide exactly as memory.available's do (condition, grace, ranking, minimum reclaim)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from builders import Gi, Mi, pod, pod_stats, stamp, summary
from cycle_reports import NOW_WALL, run, simulate_steps
from evictd.adapters.procfs import memory_pressure
from evictd.config import load_configuration
from evictd.core.errors import ConfigError, DecodeError, SampleError
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.quantity import Quantity, QuantityFormat
from evictd.core.signals import Signal
from evictd.core.summary import Observation, signal_observations
from evictd.core.summary_parser import summary_from_dict
from evictd.core.thresholds import parse_stall_thresholds, thresholds_met
from evictd.observe.live_view import render
from evictd.record.documents import kubelet_config_document
from evictd.record.summary_json import summary_to_dict

ROOT = Path(__file__).resolve().parents[1]
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
EVICTD = "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
SOME = "evictd.io/memory.stall.some"
FULL = "evictd.io/memory.stall.full"


def evictd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def psi(some10: float, full10: float = 0.0, recent: tuple[float, float] | None = None) -> dict[str, Any]:
    """A Summary `psi` block (KEP-4205's shape) with these avg10 shares, and evictd's own `recent` shares (some,
    full) where given."""
    block: dict[str, Any] = {"some": {"total": 1000, "avg10": some10, "avg60": 0.0, "avg300": 0.0},
                             "full": {"total": 500, "avg10": full10, "avg60": 0.0, "avg300": 0.0}}
    if recent is not None:
        block["some"]["evictdRecent"], block["full"]["evictdRecent"] = recent
    return block


def headroom(stall_points: int) -> Observation:
    return Observation(Quantity.from_int(10_000 - stall_points, QuantityFormat.DECIMAL_SI),
                       Quantity.from_int(10_000, QuantityFormat.DECIMAL_SI), None)


# --- configuration ---------------------------------------------------------------------------------------------


def test_stall_thresholds_come_from_the_evictd_configuration(tmp_path: Path) -> None:
    config = load_configuration([write(tmp_path, EVICTD + (
        f"stallEvictionHard: {{{FULL}: '20%'}}\n"
        f"stallEvictionSoft: {{{SOME}: '40.5%'}}\n"
        f"stallEvictionSoftGracePeriod: {{{SOME}: 30s}}\n"
        f"stallEvictionMinimumReclaim: {{{SOME}: '10%'}}\n"))])
    thresholds = [t for t in config.eviction.thresholds() if t.signal in (Signal.MEMORY_STALL_SOME,
                                                                           Signal.MEMORY_STALL_FULL)]
    assert [(t.signal, t.hard, t.grace_period_s) for t in thresholds] == [
        (Signal.MEMORY_STALL_FULL, True, 0.0), (Signal.MEMORY_STALL_SOME, False, 30.0)]
    # The kubelet's thresholds are untouched (its defaults here).
    assert config.eviction.hard["memory.available"] == "100Mi"
    # What a recording keeps of the configuration carries them, and is read back the same.
    document = kubelet_config_document(config.eviction)
    assert document["stallEvictionHard"] == {FULL: "20%"}
    assert "stallEvictionHard" not in kubelet_config_document(EvictionSettings())


@pytest.mark.parametrize(
    ("text", "key", "value", "reason"),
    [
        (f"stallEvictionHard: {{{SOME}: '101%'}}", f"stallEvictionHard[{SOME}]", "101%", "from 0% to 100%"),
        (f"stallEvictionHard: {{{SOME}: '-1%'}}", f"stallEvictionHard[{SOME}]", "-1%", "from 0% to 100%"),
        (f"stallEvictionHard: {{{SOME}: '20'}}", f"stallEvictionHard[{SOME}]", "20", "from 0% to 100%"),
        (f"stallEvictionHard: {{{SOME}: '12.345%'}}", f"stallEvictionHard[{SOME}]", "12.345%", "two decimals"),
        (f"stallEvictionHard: {{{SOME}: 'full 20%'}}", f"stallEvictionHard[{SOME}]", "full 20%", "from 0% to 100%"),
        ("stallEvictionHard: {memory.available: '20%'}", "stallEvictionHard[memory.available]", "20%",
         "unsupported stall signal memory.available"),
        (f"stallEvictionSoft: {{{SOME}: '20%'}}", f"stallEvictionSoftGracePeriod[{SOME}]", "<missing>",
         "grace period must be specified"),
        (f"stallEvictionSoft: {{{SOME}: '20%'}}\nstallEvictionSoftGracePeriod: {{{SOME}: soon}}",
         f"stallEvictionSoftGracePeriod[{SOME}]", "soon", ""),
        (f"stallEvictionMinimumReclaim: {{{SOME}: 5Mi}}", f"stallEvictionMinimumReclaim[{SOME}]", "5Mi",
         "from 0% to 100%"),
        ("stallEvictionHard: [a]", "stallEvictionHard", "['a']", ""),
        ("stallEvictionHrad: {}", "stallEvictionHrad", "{}", 'did you mean "stallEvictionHard"?'),
    ],
    ids=["over-100", "negative", "no-percent", "three-decimals", "kind-in-value", "kubelet-signal",
         "soft-without-grace", "bad-grace", "quantity-reclaim", "not-a-map", "typo"],
)
def test_a_bad_stall_setting_exits_2_naming_the_key_and_value(tmp_path: Path, text: str, key: str, value: str,
                                                              reason: str) -> None:
    result = evictd("check-config", "--config", write(tmp_path, EVICTD + text + "\n"))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert f"EvictdConfiguration: {key}: " in result.stderr
    assert (f"'{value}'" if value != "<missing>" else "missing") in result.stderr or value in result.stderr
    assert reason in result.stderr


def test_a_kubelet_configuration_naming_a_stall_signal_is_refused_with_the_kubelets_text(tmp_path: Path) -> None:
    result = evictd("check-config", "--config", write(tmp_path, KUBELET + f"evictionHard: {{{SOME}: '20%'}}\n"))
    assert result.returncode == 2
    assert f"unsupported eviction signal {SOME}" in result.stderr and f"evictionHard[{SOME}]" in result.stderr


def test_stall_maps_in_a_kubelet_configuration_are_an_unknown_field_the_kubelet_ignores(tmp_path: Path) -> None:
    path = write(tmp_path, KUBELET + f"stallEvictionHard: {{{SOME}: '0%'}}\n")
    config = load_configuration([path])
    assert not [t for t in config.eviction.thresholds() if t.signal is Signal.MEMORY_STALL_SOME]
    assert any("stallEvictionHard" in warning for warning in config.warnings)
    with pytest.raises(ConfigError):
        load_configuration([path], strict=True)


# --- the threshold: met at or above its share ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "stall_points", "met"),
    [("20%", 2000, True), ("20%", 1999, False), ("20%", 10_000, True), ("0%", 0, True), ("100%", 9999, False),
     ("100%", 10_000, True), ("12.5%", 1250, True), ("12.5%", 1249, False)],
)
def test_a_stall_threshold_is_met_when_the_share_is_at_or_above_it(value: str, stall_points: int,
                                                                   met: bool) -> None:
    (threshold,) = parse_stall_thresholds({SOME: value}, {}, {}, {})
    observations = {Signal.MEMORY_STALL_SOME: headroom(stall_points)}
    assert bool(thresholds_met([threshold], observations, False)) is met


def test_the_minimum_reclaim_lowers_the_share_that_relieves_the_signal() -> None:
    (threshold,) = parse_stall_thresholds({SOME: "20%"}, {}, {}, {SOME: "5%"})
    with_reclaim = [bool(thresholds_met([threshold], {Signal.MEMORY_STALL_SOME: headroom(points)}, True))
                    for points in (1501, 1500, 1499)]
    assert with_reclaim == [True, True, False]


def test_the_observation_is_the_headroom_of_the_kernels_10s_average() -> None:
    document = summary(allocatable=Gi)
    document["node"]["memory"]["psi"] = psi(12.34, 0.5)
    document["node"]["systemContainers"][0]["memory"]["psi"] = psi(100.0, 99.99)
    observations = signal_observations(summary_from_dict(document))
    assert observations[Signal.MEMORY_STALL_SOME] == headroom(1234)
    assert observations[Signal.MEMORY_STALL_FULL] == headroom(50)
    assert observations[Signal.ALLOCATABLE_MEMORY_STALL_SOME] == headroom(10_000)
    assert observations[Signal.ALLOCATABLE_MEMORY_STALL_FULL] == headroom(9999)
    # No psi block (a kernel without PSI, a kubelet without KEP-4205): no stall observation, never a guess.
    assert not {Signal.MEMORY_STALL_SOME, Signal.MEMORY_STALL_FULL} & set(signal_observations(
        summary_from_dict(summary())))


@pytest.mark.parametrize(
    ("avg10", "recent", "points"),
    [(12.34, None, 1234),  # no figure of evictd's own (the kubelet's Summary, an older recording): avg10
     (0.0, 35.5, 3550),  # the stall's onset: avg10 still 0, evictd's own window shows it
     (40.0, 3.0, 4000),  # after relief: avg10 decays over 10 s, the window's share is gone at once
     (20.0, 20.0, 2000)],
    ids=["avg10-alone", "recent-larger", "avg10-larger", "equal"],
)
def test_the_observation_is_the_larger_of_avg10_and_evictds_own_window(avg10: float, recent: float | None,
                                                                       points: int) -> None:
    document = summary(allocatable=Gi)
    document["node"]["memory"]["psi"] = psi(avg10, avg10, None if recent is None else (recent, recent))
    observations = signal_observations(summary_from_dict(document))
    assert observations[Signal.MEMORY_STALL_SOME] == observations[Signal.MEMORY_STALL_FULL] == headroom(points)


@pytest.mark.parametrize("recent", [None, (61.25, 0.0)], ids=["without", "with"])
def test_the_psi_block_is_written_back_with_evictds_own_share_only_where_there_is_one(
        recent: tuple[float, float] | None) -> None:
    document = summary(allocatable=Gi)
    document["node"]["memory"]["psi"] = psi(1.5, 0.5, recent)
    parsed = summary_from_dict(document)
    written = summary_to_dict(parsed)["node"]["memory"]["psi"]
    assert written == document["node"]["memory"]["psi"]  # an older recording's block stays without the key
    assert summary_from_dict(summary_to_dict(parsed)) == parsed
    line = parsed.node.memory.psi.some  # type: ignore[union-attr]
    assert line.recent == (None if recent is None else 61.25)


def test_a_stall_threshold_is_met_on_evictds_own_window_while_avg10_is_still_0() -> None:
    """The onset of a stall: avg10 reads 0.00 for up to 2 s, 18% of the share at its first update; evictd's own
    window (the Summary's `evictdRecent`) already shows the share, and the hard threshold evicts on it."""
    config = {"evictionHard": {}, "stallEvictionHard": {FULL: "20%"}, "evictionMaxPodGracePeriod": 5,
              "stallRequiresNodeReclaim": False}
    steps = []
    for second, recent in enumerate((None, (60.0, 25.0))):
        document = summary(memory=3 * Gi, time=stamp(second), pods=growing_stats(second))
        document["node"]["memory"]["psi"] = psi(0.0, 0.0, recent)
        steps.append({"at": 2 * second, "summary": document})
    quiet, stalled = simulate_steps({"config": config, "pods": PODS, "steps": steps})
    assert quiet["thresholdsMet"] == [] and quiet["evicted"] == []
    assert [threshold["signal"] for threshold in stalled["thresholdsMet"]] == [FULL]
    assert stalled["conditions"] == ["MemoryPressure"]
    assert [(e["name"], e["signal"]) for e in stalled["evicted"]] == [("hog", FULL)]


# --- the kernel's file, read for real --------------------------------------------------------------------------


def test_this_machines_memory_pressure_reads_as_a_psi_block() -> None:
    # This host (kernel 6.x, CONFIG_PSI) has /proc/pressure/memory; a machine without it fails here.
    stats = memory_pressure("/proc/pressure/memory")
    assert stats is not None, "this machine's kernel has no /proc/pressure/memory"
    assert stats.some.total >= stats.full.total >= 0
    assert all(0 <= share <= 100 for line in (stats.some, stats.full)
               for share in (line.avg10, line.avg60, line.avg300))
    assert memory_pressure("/proc/pressure/memory").some.total >= stats.some.total  # type: ignore[union-attr]


def test_a_constructed_pressure_file(tmp_path: Path) -> None:
    path = tmp_path / "memory.pressure"
    path.write_text("some avg10=1.44 avg60=0.26 avg300=0.11 total=18190333\n"
                    "full avg10=0.36 avg60=0.06 avg300=0.04 total=12229871\n")
    stats = memory_pressure(path)
    assert stats is not None
    assert (stats.some.avg10, stats.some.total, stats.full.avg300, stats.full.total) == (1.44, 18190333, 0.04,
                                                                                         12229871)
    assert memory_pressure(tmp_path / "absent") is None
    path.write_text("some avg10=1.44 avg60=0.26 avg300=0.11 total=18190333\n")
    with pytest.raises(SampleError, match="not both a some and a full line"):
        memory_pressure(path)


# --- scenarios: a stall threshold decides as memory.available's does -------------------------------------------

HOG = pod("hog", requests={"memory": "100Mi"}, priority=0)
SMALL = pod("small", requests={"memory": "1Gi"}, priority=0)
BEST_EFFORT = pod("best-effort")
PODS = [HOG, SMALL, BEST_EFFORT]
STATS = [pod_stats(HOG, memory=1 * Gi), pod_stats(SMALL, memory=500 * Mi), pod_stats(BEST_EFFORT, memory=300 * Mi)]
GROWTH = 16 * Mi  # each pod grows this much a reading in a stall scenario: a stall evicts only pods that grew


def growing_stats(second: int) -> list[dict[str, Any]]:
    """`STATS` at the `second`-th reading of pods that all grow by `GROWTH` a reading (as `STATS` at the third)."""
    return [pod_stats(HOG, memory=1 * Gi + (second - 2) * GROWTH),
            pod_stats(SMALL, memory=500 * Mi + (second - 2) * GROWTH),
            pod_stats(BEST_EFFORT, memory=300 * Mi + (second - 2) * GROWTH)]

# Each step's state: "ok", "soft" (past the soft threshold only) or "hard" (past both).
SEQUENCE = [(0, "ok"), (10, "soft"), (40, "soft"), (50, "hard"), (60, "ok"), (349, "ok"), (350, "ok")]
MEMORY_CONFIG = {"evictionHard": {"memory.available": "1Gi"}, "evictionSoft": {"memory.available": "2Gi"},
                 "evictionSoftGracePeriod": {"memory.available": "30s"}, "evictionMaxPodGracePeriod": 5,
                 "evictionPressureTransitionPeriod": "5m"}
STALL_CONFIG = {"evictionHard": {}, "stallEvictionHard": {FULL: "20%"}, "stallEvictionSoft": {SOME: "40%"},
                "stallEvictionSoftGracePeriod": {SOME: "30s"}, "evictionMaxPodGracePeriod": 5,
                "evictionPressureTransitionPeriod": "5m",
                # The stall gate (tests/test_stall_gate.py) is off: these summaries carry no reclaim counters.
                "stallRequiresNodeReclaim": False}
MEMORY_BY_STATE = {"ok": 3 * Gi, "soft": 1500 * Mi, "hard": 500 * Mi}
PSI_BY_STATE = {"ok": psi(10.0, 5.0), "soft": psi(40.0, 19.99), "hard": psi(80.0, 20.0)}


def scenario(config: dict[str, Any], stall: bool) -> list[dict[str, Any]]:
    steps = []
    for second, (at, state) in enumerate(SEQUENCE):
        document = summary(memory=3 * Gi if stall else MEMORY_BY_STATE[state], time=stamp(second),
                           pods=growing_stats(second) if stall else STATS)
        if stall:
            document["node"]["memory"]["psi"] = copy.deepcopy(PSI_BY_STATE[state])
        steps.append({"at": at, "summary": document})
    return simulate_steps({"config": config, "pods": PODS, "steps": steps})


def test_stall_thresholds_decide_as_memory_available_does() -> None:
    memory, stall = scenario(MEMORY_CONFIG, False), scenario(STALL_CONFIG, True)
    # Set at once; kept for the transition period (300 s) after the last step past a threshold (at 50 s).
    assert [s["conditions"] for s in stall] == [s["conditions"] for s in memory] == [[]] + [["MemoryPressure"]] * 5 + [[]]
    for one in (memory, stall):
        assert [[e["name"] for e in s["evicted"]] for s in one] == [[], [], ["hog"], ["hog"], [], [], []]
        assert [[e["gracePeriodSeconds"] for e in s["evicted"]] for s in one][2:4] == [[5], [1]]  # soft, then hard
        assert one[2]["ranking"] == ["default/hog", "default/best-effort", "default/small"]
    assert [e["signal"] for s in stall for e in s["evicted"]] == [SOME, FULL]
    assert stall[1]["thresholdsMet"] == [{"signal": SOME, "value": {"quantity": "6001"}, "gracePeriodSeconds": 30,
                                          "graceMet": False}]
    (soft,) = stall[2]["evicted"]
    assert soft["message"].startswith("The node was low on resource: memory. Threshold quantity: 6001, "
                                      "available: 6k. Container app was using 1Gi, request is 100Mi")
    assert soft["annotations"]["starved_resource"] == "memory"


def test_the_live_view_shows_the_stall_headroom_and_the_share_each_threshold_stands_for() -> None:
    steps = []
    for second, (at, state) in enumerate(SEQUENCE[:3]):
        document = summary(memory=3 * Gi, time=stamp(second), pods=STATS)
        document["node"]["memory"]["psi"] = copy.deepcopy(PSI_BY_STATE[state])
        steps.append({"at": at, "summary": document})
    ran = run(STALL_CONFIG, steps, pods=PODS)
    screen = render(ran.reports[1], ran.state, node_name="node-1", cycle=2, now_wall=NOW_WALL, dry_run=True,
                    recent=())
    cells = {line.split()[0]: re.split(r"\s{2,}", line.strip())[1:] for line in screen.splitlines()
             if line.startswith("evictd.io/")}
    assert cells[SOME] == ["grace 0/30s", "60.00%", "100.00%", "soft 60.01% (stall>=40%)"]
    assert cells[FULL] == ["ok", "80.01%", "100.00%", "hard 80.01% (stall>=20%)"]


@pytest.mark.parametrize(
    ("block", "key"),
    [({"some": {"total": 1, "avg10": 101, "avg60": 0, "avg300": 0}}, "node.memory.psi.some.avg10"),
     ({"some": {"total": 1, "avg10": True, "avg60": 0, "avg300": 0}}, "node.memory.psi.some.avg10"),
     ({"some": {"total": -1, "avg10": 1, "avg60": 0, "avg300": 0}}, "node.memory.psi.some.total"),
     ({"some": {"avg10": 1, "avg60": 0, "avg300": 0}}, "node.memory.psi.some.total"),
     ({"some": {"total": 1, "avg10": 1, "avg60": 0, "avg300": 0}}, "node.memory.psi.full"),
     ({"some": {"total": 1, "avg10": 1, "avg60": 0, "avg300": 0, "evictdRecent": 100.5}},
      "node.memory.psi.some.evictdRecent"),
     ({"some": {"total": 1, "avg10": 1, "avg60": 0, "avg300": 0, "evictdRecent": "5%"}},
      "node.memory.psi.some.evictdRecent"),
     ("high", "node.memory.psi")],
    ids=["over-100", "bool", "negative-total", "no-total", "no-full", "recent-over-100", "recent-not-a-number",
         "not-a-map"],
)
def test_a_bad_psi_block_is_refused_naming_its_path(block: object, key: str) -> None:
    document = summary()
    document["node"]["memory"]["psi"] = block
    with pytest.raises(DecodeError) as exc:
        summary_from_dict(document)
    assert exc.value.key == key

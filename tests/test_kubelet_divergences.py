"""Where evictd and the kubelet's own eviction code (v1.32.10 and v1.36.2, run on the same scenarios) decided
differently: one row per divergence, decided, with the scenario (tests/fixtures/kubelet-divergences, copied
from ../shared/kubelet-divergences), what the kubelet does, what evictd does, and for a deliberate difference
the line of docs/kubelet-differences.md that documents it. A row whose evictd outcome equals the kubelet's was fixed to match."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "fixtures" / "kubelet-divergences"
DIFFERENCES = (ROOT / "docs" / "kubelet-differences.md").read_text(encoding="utf-8")

Outcome = Callable[[dict[str, Any]], object]


def first_step(document: dict[str, Any]) -> tuple[object, ...]:
    step = document["steps"][0]
    return (step["conditions"], [t["signal"] for t in step["thresholdsMet"]], [e["name"] for e in step["evicted"]])


def thresholds_met(document: dict[str, Any]) -> list[tuple[str, float]]:
    return [(t["signal"], t["gracePeriodSeconds"]) for t in document["steps"][0]["thresholdsMet"]]


def soft_eviction_grace(document: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(e["name"], e["gracePeriodSeconds"], e["effectiveGracePeriodSeconds"]) for e in document["steps"][1]["evicted"]]


@dataclass(frozen=True)
class Divergence:
    scenario: str
    outcome: Outcome | None  # None: the scenario is refused (exit 2)
    kubelet: object  # the kubelet's outcome on the scenario
    evictd: object  # evictd's outcome, as decided
    readme: str | None  # the line of docs/kubelet-differences.md documenting a deliberate difference


DIVERGENCES = {
    "containerfs-thresholds-from-the-first-cycle": Divergence(
        "01-containerfs-thresholds-ignored-first-cycle.yaml", first_step,
        kubelet=([], [], []),
        evictd=(["DiskPressure"], ["containerfs.available"], ["app"]),
        readme="**`containerfs.*` thresholds count from the first cycle.**"),
    "identical-percentage-thresholds-are-one": Divergence(
        "02-identical-percentage-thresholds-collapse.yaml", thresholds_met,
        kubelet=[("allocatableMemory.available", 0)],
        evictd=[("allocatableMemory.available", 0)],
        readme=None),
    "nan-percentage": Divergence(
        "03-nan-percentage-accepted-by-kubelet.yaml", None,
        kubelet="accepted, never met on amd64",
        evictd="evictd: config.evictionHard[memory.available]: invalid value 'NaN%': eviction percentage threshold "
               "memory.available must be a number: NaN%",
        readme="**`NaN%` is rejected**"),
    "soft-eviction-override-0-gives-1s": Divergence(
        "04-soft-eviction-override-0-effective-grace.yaml", soft_eviction_grace,
        kubelet=[("app", 0, 1)],  # v1.36.2 pod worker: an explicit override of 0 is not the pod's 45 s
        evictd=[("app", 0, 1)],
        readme=None),
    # Issue #38 item 7: equal quantities are two Go map keys (pointers): the kubelet lists both.
    "identical-quantity-thresholds-are-two": Divergence(
        "05-identical-quantity-thresholds-stay-two.yaml", thresholds_met,
        kubelet=[("allocatableMemory.available", 0), ("allocatableMemory.available", 0)],
        evictd=[("allocatableMemory.available", 0), ("allocatableMemory.available", 0)],
        readme=None),
}


def simulate(scenario: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", "simulate", str(SCENARIOS / scenario), "--output", "json"],
                          capture_output=True, text=True, check=False, cwd=ROOT)


@pytest.mark.parametrize("name", sorted(DIVERGENCES))
def test_each_divergence_is_decided(name: str) -> None:
    divergence = DIVERGENCES[name]
    done = simulate(divergence.scenario)
    if divergence.outcome is None:
        assert done.returncode == 2 and done.stderr.strip() == divergence.evictd
    else:
        assert done.returncode == 0, done.stderr
        assert divergence.outcome(json.loads(done.stdout)) == divergence.evictd
    if divergence.evictd == divergence.kubelet:
        assert divergence.readme is None, "a difference that no longer exists is not documented as one"
    else:
        assert divergence.readme is not None and divergence.readme in DIFFERENCES, \
            "a deliberate difference is in docs/kubelet-differences.md"


def test_every_shared_scenario_has_a_row() -> None:
    assert sorted(d.scenario for d in DIVERGENCES.values()) == sorted(p.name for p in SCENARIOS.glob("*.yaml"))

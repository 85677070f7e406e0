"""The kubelet configurations fleets run (tests/data/fleet-configs, each citing its source): what the kubelet
applies, derived by hand in expected.yaml, against what `evictd check-config` says; and the lints' wording."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "fleet-configs"
CASES = yaml.safe_load((CORPUS / "expected.yaml").read_text(encoding="utf-8"))
ALLOCATABLE_COPY = "allocatableMemory.available"  # the kubelet's copy of memory.available, not a configured key


def check_config(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", "check-config", "--kubelet-config", "", "--kubelet-flags",
                           "", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def source_args(name: str) -> list[str]:
    """A .flags file's kubelet flags (one a line, # comments), else the file as --config."""
    path = CORPUS / name
    if path.suffix == ".flags":
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return ["--config", str(path)]


def float32(share: float) -> float:
    return float(struct.unpack("f", struct.pack("f", share))[0])


def shown(value: dict[str, Any]) -> str:
    """A threshold value of check-config's JSON as written in expected.yaml (5% or 100Mi)."""
    if value.get("quantity") is not None:
        return str(value["quantity"])
    for percent in range(101):  # the configured share is an integer percentage in every corpus file
        if float32(percent / 100) == value["percentage"]:
            return f"{percent}%"
    raise AssertionError(f"not an integer percentage: {value}")


def test_every_corpus_file_has_an_expectation_and_cites_its_source() -> None:
    files = {path.name for path in CORPUS.iterdir() if path.name != "expected.yaml"}
    assert files == {case["file"] for case in CASES}
    for name in files:
        header = (CORPUS / name).read_text(encoding="utf-8").splitlines()[0]
        assert header.startswith("# ") and ("/" in header or "#" in header[2:]), f"{name}: no source in its header"


@pytest.mark.parametrize("case", CASES, ids=[f"{c['file']}@{c['node_memory']}" for c in CASES])
def test_check_config_says_what_the_kubelet_applies_and_names_the_traps(case: dict[str, Any]) -> None:
    result = check_config("--config-only", "-o", "json", "--node-memory", case["node_memory"],
                          *source_args(case["file"]))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    configured = [t for t in report["thresholds"] if t["signal"] != ALLOCATABLE_COPY]
    hard = {t["signal"]: shown(t["value"]) for t in configured if t["gracePeriodSeconds"] == 0}
    soft = {t["signal"]: shown(t["value"]) for t in configured if t["gracePeriodSeconds"] > 0}
    assert (hard, soft) == (case["hard"], case["soft"])
    assert report["node_memory"]["allocatable_bytes"] == case["allocatable_bytes"]
    assert [[lint["code"], lint["key"]] for lint in report["lints"]] == case["lints"]
    for lint in report["lints"]:  # a warning on stderr with its key, value and fix; a note in the report only
        line = f"{lint['code']}: {lint['key']}: {lint['value']}: "
        assert (f"warning: {line}" in result.stderr) == (lint["severity"] == "warning"), result.stderr
        assert lint["fix"] and lint["value"]
    assert [lint["severity"] for lint in report["lints"]] == [
        "note" if code == "soft-margin-not-reserved" else "warning" for code, _ in case["lints"]]


def test_the_text_report_lists_every_lint_and_the_allocatable_memory() -> None:
    result = check_config("--config-only", "--node-memory", "16Gi", *source_args("aks.yaml"))
    assert result.returncode == 0 and result.stderr == ""  # notes only: nothing on stderr
    assert "configuration lints: 2" in result.stdout
    assert "note     soft-margin-not-reserved: evictionSoft.memory.available: soft 750Mi, hard 100Mi" in result.stdout
    assert ("allocatable memory: 17075011584 bytes = capacity 17179869184 (--node-memory) - systemReserved 0 - "
            "kubeReserved 0 - evictionHard memory.available 104857600") in result.stdout


def test_without_the_node_memory_the_karpenter_lints_name_the_capacity_from_which_they_hold() -> None:
    result = check_config("--config-only", "-o", "json", *source_args("karpenter-aws.yaml"))
    report = json.loads(result.stdout)
    memory = [lint for lint in report["lints"] if lint["key"] == "evictionSoft.memory.available"]
    # 500Mi / float32(5%): both lints, on either side of 9.77 GiB.
    assert [(lint["code"], "9.77 GiB and more" in lint["detail"], "9.77 GiB and less" in lint["detail"])
            for lint in memory] == [("soft-never-fires", True, False), ("soft-margin-not-reserved", False, True)]
    assert report["node_memory"]["capacity_bytes"] is None
    assert report["node_memory"]["allocatable_bytes"] is None


def test_a_fixed_configuration_has_no_lint() -> None:
    fixed = CORPUS.parent / "fleet-configs" / "karpenter-aws.yaml"
    text = fixed.read_text(encoding="utf-8").replace("memory.available: 500Mi", "memory.available: 10%")
    text = text.replace("nodefs.available: 15%", "nodefs.available: 10%")
    result = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--kubelet-config", "",
                             "--kubelet-flags", "", "--config-only", "-o", "json", "--node-memory", "16Gi",
                             "--config", "-"], cwd=ROOT, input=text, capture_output=True, text=True, timeout=60,
                            check=False)
    report = json.loads(result.stdout)
    # Soft 10% above hard 5%: it fires; its margin is still not reserved, and says so; nodefs 10%/10%: never fires.
    assert [[lint["code"], lint["key"]] for lint in report["lints"]] == [
        ["soft-margin-not-reserved", "evictionSoft.memory.available"],
        ["soft-never-fires", "evictionSoft.nodefs.available"]]


@pytest.mark.parametrize("value", ["lots", "0", "-1Gi"])
def test_a_bad_node_memory_exits_2_naming_the_option_the_value_and_what_is_accepted(value: str) -> None:
    result = check_config("--config-only", f"--node-memory={value}", *source_args("kubeadm.yaml"))
    assert result.returncode == 2
    assert "--node-memory" in result.stderr and value in result.stderr and "16Gi" in result.stderr


def test_the_node_kubelets_own_traps_are_named_as_its_even_when_evictds_configuration_has_none(
        tmp_path: Path) -> None:
    # k3s from v1.32 writes its maps as a kubelet drop-in, started with --config-dir and no --config: the kubelet
    # has no file to default from, so its evictionHard is the drop-in's two disk signals (no memory.available),
    # as with the older flag (k3s-io/k3s pkg/daemons/agent, kubeletConfig; docs/platforms.md).
    dropins = tmp_path / "kubelet.conf.d"
    dropins.mkdir()
    (dropins / "00-k3s-defaults.conf").write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "evictionHard: {imagefs.available: 5%, nodefs.available: 5%}\n"
        "evictionMinimumReclaim: {imagefs.available: 10%, nodefs.available: 10%}\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config-only", "-o", "json",
                             *source_args("kubeadm.yaml"), "--kubelet-flags", f"--config-dir={dropins}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    lints = json.loads(result.stdout)["lints"]
    assert [(lint["source"], lint["code"], lint["key"]) for lint in lints] == [
        ("the node's kubelet", "no-hard-threshold", "evictionHard.memory.available")]
    assert ("warning: no-hard-threshold: the node's kubelet: evictionHard.memory.available: absent from "
            in result.stderr)

"""The kubelet's `--config-dir`, read by evictd, against a real kubelet v1.36.2: for each folder of drop-ins the
real kubelet is restarted with it, and what its `/configz` says it runs with is what evictd reads (`--config-dir`
for its own thresholds, `--kubelet-config-dir` for the hand-over verdict). Runs only in `make test-cluster`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from real_cluster import RealCluster

from evictd.config import load_configuration
from evictd.core.errors import ConfigError
from evictd.core.kubelet_config import eviction_settings
from evictd.kubelet_file import read_kubelet_settings

pytestmark = pytest.mark.real_cluster

ROOT = Path(__file__).resolve().parents[2]
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
# The eviction fields /configz reports and evictd reads.
EVICTION_FIELDS = ("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim",
                   "evictionPressureTransitionPeriod", "evictionMaxPodGracePeriod", "localStorageCapacityIsolation")

# name -> (the base file's eviction fields, the drop-ins): each a case where merging differs from replacing.
CASES: dict[str, tuple[str, dict[str, str]]] = {
    # The case: the base has no evictionHard; one drop-in sets memory only; the disk defaults stay.
    "partial-hard-keeps-defaults": ("evictionHard: null\n", {
        "10-eviction.conf": KUBELET + "evictionHard: {memory.available: 500Mi}\n",
    }),
    # mergeDefaultEvictionSettings only in a drop-in changes nothing; a subfolder's file comes where its name
    # falls; null removes a signal; a later file wins; a file not ending in .conf is ignored.
    "order-null-and-merge-flag": ("evictionHard: {memory.available: 300Mi, nodefs.available: 5%, "
                                  "nodefs.inodesFree: 4%}\n", {
        "10-merge.conf": KUBELET + "mergeDefaultEvictionSettings: true\n",
        "20-dir/10-soft.conf": KUBELET + ("evictionSoft: {memory.available: 900Mi}\n"
                                          "evictionSoftGracePeriod: {memory.available: 1m}\n"),
        "30-null.conf": KUBELET + "evictionHard: {nodefs.inodesFree: null}\nevictionSoft: {memory.available: 800Mi}\n",
        "40-ignored.yaml": KUBELET + "evictionHard: {memory.available: 1Gi}\n",
    }),
    # A zero transition period in a drop-in is defaulted to 5m after the merge; evictionHard removed whole.
    "null-map-and-zero-period": ("", {
        "10-a.conf": KUBELET + 'evictionHard: null\nevictionPressureTransitionPeriod: "0s"\n'
                               "evictionMaxPodGracePeriod: 30\n",
    }),
}


def configz_eviction(cluster: RealCluster) -> dict[str, Any]:
    """The real kubelet's eviction fields, as evictd decodes them (so that `5m0s` and `300s` compare equal)."""
    configz = cluster.kubelet_configz()
    document = {key: configz[key] for key in EVICTION_FIELDS if key in configz}
    document.setdefault("evictionHard", {})  # /configz omits an empty map: no hard thresholds
    return {"settings": eviction_settings(document), "raw": document}


def evictd_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize("case", list(CASES))
def test_evictd_reads_the_dropins_as_the_real_kubelet_merges_them(real_cluster: RealCluster, tmp_path: Path,
                                                                    case: str) -> None:
    base_fields, dropins = CASES[case]
    try:
        real_cluster.restart_kubelet(base_fields, dropins)
        real = configz_eviction(real_cluster)
        config, folder = str(real_cluster.kubelet_config_path), str(real_cluster.kubelet_dropin_dir)
        # evictd's own thresholds from the kubelet's files (--config-dir), and the hand-over's reading of them.
        ours = load_configuration([config], config_dir=folder).eviction
        kubelet_side = read_kubelet_settings(config, folder).eviction
        for read in (ours, kubelet_side):
            assert read.hard == real["settings"].hard, (case, real["raw"])
            assert read.soft == real["settings"].soft
            assert read.soft_grace_period == real["settings"].soft_grace_period
            assert read.pressure_transition_period_s == real["settings"].pressure_transition_period_s
            assert read.max_pod_grace_period_s == real["settings"].max_pod_grace_period_s
        # Read as more --config files instead, the drop-ins would have replaced whole fields (or, with a null in a
        # map, been refused: a --config file's null is an empty quantity): every case differs.
        try:
            replaced = load_configuration([config, *[str(p) for p in sorted(Path(folder).rglob("*.conf"))]]).eviction
            assert (replaced.hard, replaced.soft) != (ours.hard, ours.soft), case
        except ConfigError as exc:
            assert "invalid value ''" in str(exc), exc

        # The hand-over verdict with the kubelet's drop-ins is the verdict against what /configz says it runs.
        effective = tmp_path / "configz.yaml"
        effective.write_text(KUBELET + yaml.safe_dump(real["raw"]))
        verdicts = []
        for kubelet_args in (["--kubelet-config", config, "--kubelet-config-dir", folder],
                             ["--kubelet-config", str(effective)]):
            result = evictd_cli("check-config", "--config-only", "--config", "config/kubelet-config.yaml",
                                *kubelet_args, "-o", "json")
            assert result.returncode == 0, result.stderr
            handover = json.loads(result.stdout)["handover"]
            verdicts.append((handover["mode"], [(s["signal"], s["evicts"]) for s in handover["signals"]]))
        assert verdicts[0] == verdicts[1], case
        if case == "partial-hard-keeps-defaults":  # the kubelet's 500Mi is above evictd's shipped 200Mi
            assert ("memory.available", "kubelet-first") in verdicts[0][1]
            assert ("nodefs.available", "same-threshold") in verdicts[0][1]
    finally:
        real_cluster.restart_kubelet()  # the kubelet's eviction off again, no drop-ins

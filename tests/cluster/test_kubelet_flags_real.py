"""The running kubelet read by evictd, against a real kubelet v1.36.2: restarted with a file, drop-ins and eviction
flags on its command line, what its `/configz` says it runs with is what evictd reads from its command line (the
file and folder it names, read through /proc/<pid>/root from the kubelet's own mount namespace, then its flags), and
what evictd reads from that /configz answer (`--kubelet-config configz.json`). Runs only in `make test-cluster`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from real_cluster import RealCluster

from evictd.core.configz import configz_document
from evictd.core.kubelet_config import eviction_settings
from evictd.kubelet_file import find_kubelet_file

pytestmark = pytest.mark.real_cluster

ROOT = Path(__file__).resolve().parents[2]
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

# name -> (the file's eviction fields, the drop-ins, the flags): thresholds far from this machine's figures, so the
# real kubelet evicts nothing while it runs with them.
CASES: dict[str, tuple[str, dict[str, str], tuple[str, ...]]] = {
    # The file's map merged with the defaults at load, a drop-in onto it, then the flag's map replaces it whole
    # (the defaults do not come back); a scalar flag over the drop-in over the file; a soft map from a flag with
    # its grace period from the file.
    "flag-map-over-merged-file-and-dropin": (
        "evictionHard: {memory.available: 40Mi}\nmergeDefaultEvictionSettings: true\nevictionMaxPodGracePeriod: 60\n"
        "evictionSoftGracePeriod: {memory.available: 1m}\n",
        {"10-eviction.conf": KUBELET + "evictionHard: {nodefs.available: 2%}\nevictionMaxPodGracePeriod: 45\n"},
        ("--eviction-hard", "memory.available<30Mi,nodefs.available<1%", "--eviction-max-pod-grace-period=20",
         "--eviction-soft=memory.available<50Mi", "--enforce-node-allocatable=")),
    # No eviction flag: the file and the drop-in only; a flag that is not an eviction flag changes nothing.
    "no-eviction-flag": (
        'evictionHard: {memory.available: 20Mi, nodefs.available: "1%", imagefs.available: "1%"}\n',
        {"10-soft.conf": KUBELET + "evictionSoft: {memory.available: 60Mi}\n"
                                   "evictionSoftGracePeriod: {memory.available: 2m}\n"},
        ("--kernel-memcg-notification=false",)),
}


def evictd_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.parametrize("case", list(CASES))
def test_evictd_reads_the_running_kubelet_as_it_runs(real_cluster: RealCluster, tmp_path: Path, case: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fields, dropins, flags = CASES[case]
    monkeypatch.setenv("EVICTD_PROC", "/proc")  # the machine's: the real kubelet is there (here and in the CLI)
    try:
        real_cluster.restart_kubelet(fields, dropins, flags)
        served = {"kubeletconfig": real_cluster.kubelet_configz()}
        real = eviction_settings(configz_document(served, "configz"))
        pid = real_cluster.processes["kubelet"].pid
        found = find_kubelet_file(None, str(real_cluster.kubelet_root), pid=pid)
        assert found.eviction is not None, found.note
        assert found.note.startswith(f"--config {real_cluster.kubelet_config_path} of process {pid} + --config-dir "
                                     f"{real_cluster.kubelet_dropin_dir}"), found.note
        ours = found.eviction
        assert dict(ours.hard) == dict(real.hard), (case, served["kubeletconfig"].get("evictionHard"))
        assert dict(ours.soft) == dict(real.soft)
        assert dict(ours.soft_grace_period) == dict(real.soft_grace_period)
        assert ours.max_pod_grace_period_s == real.max_pod_grace_period_s
        assert ours.pressure_transition_period_s == real.pressure_transition_period_s
        assert ours.enforce_node_allocatable == real.enforce_node_allocatable
        assert ours.kernel_memcg_notification == real.kernel_memcg_notification

        # check-config says the same with the kubelet's command line and with its /configz answer.
        configz = tmp_path / "configz.json"
        configz.write_text(json.dumps(served))
        verdicts = []
        for kubelet_args in (["--kubelet-cmdline-from-pid", str(pid)], ["--kubelet-config", str(configz)]):
            result = evictd_cli("check-config", "--config-only", "--config", "config/kubelet-config.yaml",
                                *kubelet_args, "-o", "json")
            assert result.returncode == 0, result.stderr
            handover = json.loads(result.stdout)["handover"]
            verdicts.append((handover["mode"], [(s["signal"], s["evicts"], s["kubelet"]) for s in handover["signals"]]))
        assert verdicts[0] == verdicts[1], case
        if case == "flag-map-over-merged-file-and-dropin":
            assert dict(real.hard) == {"memory.available": "30Mi", "nodefs.available": "1%"}
            assert real.max_pod_grace_period_s == 20 and real.enforce_node_allocatable == ()
    finally:
        real_cluster.restart_kubelet()  # the kubelet's eviction off again, no drop-ins, no flags

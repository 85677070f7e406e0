"""`evictd run` at start: an evictd without any threshold says so loudly (a warning naming the consequence, and
`evictd_thresholds_configured` at 0, which the EvictdNoThresholds alert fires on), and says who evicts on each
signal beside the node's kubelet (`--kubelet-config`); a backstop configuration is reported as one."""

from __future__ import annotations

from pathlib import Path

from evictd_process import EvictdProcess

KUBELET_HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
OFF = ('evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", '
       'imagefs.available: "0%", imagefs.inodesFree: "0%"}\n')


def test_an_evictd_without_thresholds_beside_a_kubelet_at_zero_warns_and_exports_it(
        tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET_HEADER + OFF)
    daemon = EvictdProcess(tmp_path, kubelet="evictionHard: {}\n", args=("--kubelet-config", str(kubelet)))
    evictd_processes.append(daemon)
    warning = daemon.wait_event("no eviction thresholds")
    assert warning["level"] == "warning" and "evicts nothing" in warning["detail"]
    assert "no node-pressure eviction at all" in warning["consequence"]
    handover = daemon.wait_event("hand-over")
    assert handover["level"] == "warning" and handover["mode"] == "none"
    assert handover["signals"]["memory.available"] == "nobody"
    daemon.wait_event("evictd started")
    problems = {e["signal"] for e in daemon.events if e.get("event") == "hand-over problem"}
    assert problems == {"memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
                        "imagefs.inodesFree"}
    daemon.wait_for_cycles(1)
    assert daemon.metric("evictd_thresholds_configured", kind="hard") == 0
    assert daemon.metric("evictd_thresholds_configured", kind="soft") == 0
    assert daemon.stop() == 0


def test_a_backstop_is_reported_as_one(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET_HEADER + "evictionHard: {memory.available: 100Mi, nodefs.available: 5%}\n"
                       "mergeDefaultEvictionSettings: true\n")  # the kubelet alone on the other signals
    daemon = EvictdProcess(tmp_path, kubelet="evictionHard: {memory.available: 500Mi, nodefs.available: 10%}\n"
                           "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}\n",
                           args=("--kubelet-config", str(kubelet)))
    evictd_processes.append(daemon)
    handover = daemon.wait_event("hand-over")
    assert (handover["level"], handover["mode"]) == ("info", "backstop"), handover
    assert handover["signals"]["memory.available"] == "evictd, the kubelet as backstop"
    daemon.wait_event("evictd started")
    daemon.wait_for_cycles(1)
    # memory.available hard and soft, nodefs.available hard, allocatableMemory.available's copy of the hard one.
    assert daemon.metric("evictd_thresholds_configured", kind="hard") == 3
    assert daemon.metric("evictd_thresholds_configured", kind="soft") == 1
    assert not any(e.get("event") == "no eviction thresholds" for e in daemon.events)
    assert daemon.stop() == 0

"""A real `evictd run` on a pod whose emptyDir holds folders nested past PATH_MAX (issue #25).

2,100 nested folders (`deep_tree.nest`) made every walk of the volume fail with "File name too long", and the
pod's disk figures were dropped: its 300 MiB over the emptyDir's 100Mi `sizeLimit` were never acted on. Now the
walk counts what a path can reach (as du does), keeps the pod's other figures, says once what it left out, and
the limit acts.

The pod is `real_pod_node`'s (real cgroups), its emptyDir on a tmpfs mounted as the kubelet root (the test
unmounts it: nothing has to remove the nested folders), 300 MiB of real data written into it; its spec, with the
`sizeLimit`, is in the test API server, which evictd watches through a kubeconfig. Dry-run: the decision is
logged ("would evict pod"), nothing is stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from evictd_process import EvictdProcess
from evictd_process import evictd_command as evictd
from kube_objects import node_manifest

from deep_tree import nest
from real_pod_node import MiB, RealPodNode

NODE = "deep-node"
DATA_BYTES = 300 * MiB
KUBELET_TMPFS_SIZE = "512m"
DISK_PROBLEM = "pod disk usage partly unreadable, old or not measured yet"


@pytest.fixture
def deep_pod(tmp_path: Path) -> Iterator[RealPodNode]:
    kubelet_root = tmp_path / "kubelet"
    kubelet_root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={KUBELET_TMPFS_SIZE}", "tmpfs", str(kubelet_root)],
                   check=True, capture_output=True)
    node = RealPodNode(kubelet_root=kubelet_root, pod_logs_dir=tmp_path / "pods-logs", pods_limit_bytes=512 * MiB)
    try:
        node.create(volume_files={}, log_bytes=4096)
        with open(node.volume_dir / "data.bin", "wb") as data:
            chunk = os.urandom(MiB)
            for _ in range(DATA_BYTES // MiB):
                data.write(chunk)
        nest(node.volume_dir)
        yield node
    finally:
        node.teardown()
        subprocess.run(["umount", "-l", str(kubelet_root)], capture_output=True, check=False)


def test_a_volume_nested_past_path_max_is_measured_and_its_size_limit_acts(
    tmp_path: Path, deep_pod: RealPodNode, apiserver: ApiServer, evictd_processes: list[EvictdProcess]
) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    apiserver.store.create_pod(deep_pod.manifest(NODE, volumes=[{"name": deep_pod.volume,
                                                                 "emptyDir": {"sizeLimit": "100Mi"}}]))
    daemon = EvictdProcess(
        tmp_path, kubelet="evictionHard: {memory.available: 1Mi}\nenforceNodeAllocatable: []\n",
        # evictd enforces the emptyDir's sizeLimit (no kubelet configuration is read here: by default the kubelet would).
        evictd=(f"nodeName: {NODE}\nkubeconfig: {apiserver.kubeconfig_path}\ndryRun: true\n"
                "ephemeralStorageLimitsEnforcer: evictd\n"
                f"containerRuntimeEndpoint: unix://{tmp_path}/no-runtime.sock\n"
                "housekeepingInterval: 500ms\npsiWakeups: false\nmemcgWakeups: false\n"
                + deep_pod.evictd_settings(tmp_path)))
    evictd_processes.append(daemon)
    evicted = daemon.wait_event("would evict pod", timeout=90)
    assert evicted["pod"] == deep_pod.key
    assert evicted["message"] == f'Usage of EmptyDir volume "{deep_pod.volume}" exceeds the limit "100Mi". '
    cycles = daemon.metric("evictd_cycles_total")
    daemon.wait_for_cycles(int(cycles) + 6, timeout=30)
    assert daemon.metric("evictd_pods_without_disk_usage") == 0
    assert daemon.stop() == 0
    # What the walk left out is said once, not every cycle (nor every pass).
    unreadable = [e for e in daemon.events if e.get("event") == DISK_PROBLEM]
    assert len(unreadable) == 1, unreadable
    detail = unreadable[0]["detail"]
    assert detail.startswith(f"disk usage of pod {deep_pod.key}: {deep_pod.volume_dir}: counted without")
    assert detail.endswith("/d/d: File name too long")
    # The recording explains it, with the figures the decision used and when they were measured.
    done = evictd("explain", deep_pod.key, "--state-dir", str(daemon.state_dir), "--output", "json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)["podDiskFigures"]
    assert figures["usedBytes"] >= DATA_BYTES and 0 <= figures["ageSeconds"] < 60

"""A real `evictd run` beside 100 pods that each carry a 250 KiB annotation (issue #25: tenant input bounded).

Anyone who may create pods may give each up to 256 KiB of annotations (the API server's limit). Before the fix
evictd held them all (about 25 MiB of text, more while a list was parsed) and the flight recorder wrote the whole
pod list, annotations included, as each segment's first line: a line bigger than a segment, so every cycle opened
a new segment with 25 MiB in it. Its peak RSS passed the DaemonSet's 128 MiB limit within seconds of the start.

Here the pods live in the test API server (tests/kube/apiserver.py) and evictd reaches them through a kubeconfig,
as a systemd service does; no container runtime (a socket that does not exist) and no threshold that could be met,
so nothing on the machine is touched.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from pathlib import Path

from apiserver import ApiServer
from evictd_process import EvictdProcess
from kube_objects import node_manifest

from evictd.state_dir import RECORDING_FOLDER

NODE = "tenant-node"
PODS = 100
ANNOTATION_BYTES = 250 * 1024
DAEMONSET_LIMIT_BYTES = 128 << 20  # deploy/: the DaemonSet's memory limit
# What one pod may take in a recorded line: its name, UID, containers and requests, the annotations the decisions
# read; a few hundred bytes here, nothing of the tenant's 250 KiB.
POD_RECORD_MAX_BYTES = 2048
CYCLES = 8


def tenant_pod(i: int) -> dict[str, object]:
    blob = base64.b64encode(random.Random(i).randbytes(ANNOTATION_BYTES))[:ANNOTATION_BYTES].decode()
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"tenant-{i}", "namespace": "tenant", "uid": f"uid-tenant-{i}",
                         "annotations": {"tenant.example.com/blob": blob}, "labels": {"app": "tenant"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox",
                                                       "resources": {"requests": {"memory": "64Mi"}}}]},
            "status": {"phase": "Running", "qosClass": "Burstable"}}


def peak_rss_bytes(pid: int) -> int:
    """VmHWM: the kernel's record of the process's largest resident set."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def recorded_lines(folder: Path) -> list[dict[str, object]]:
    lines = []
    for path in sorted(folder.iterdir()):
        data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        lines += [json.loads(line) for line in data.splitlines() if line.strip()]
    return lines


def test_pods_with_the_largest_annotations_cost_neither_memory_nor_recording(
    tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]
) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    for i in range(PODS):
        apiserver.store.create_pod(tenant_pod(i))
    daemon = EvictdProcess(
        tmp_path, kubelet="evictionHard: {memory.available: 1Mi}\nenforceNodeAllocatable: []\n",
        evictd=(f"nodeName: {NODE}\nkubeconfig: {apiserver.kubeconfig_path}\n"
                f"containerRuntimeEndpoint: unix://{tmp_path}/no-runtime.sock\n"
                "housekeepingInterval: 500ms\npsiWakeups: false\nmemcgWakeups: false\n"))
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started", timeout=60)
    daemon.wait_for_cycles(CYCLES, timeout=90)
    peak = peak_rss_bytes(daemon.process.pid)
    assert daemon.stop() == 0
    assert peak < DAEMONSET_LIMIT_BYTES, f"peak RSS {peak / (1 << 20):.1f} MiB"

    lines = recorded_lines(daemon.state_dir / RECORDING_FOLDER)
    assert len(lines) >= CYCLES
    assert [line["cycle"] for line in lines] == list(range(1, len(lines) + 1)), "one segment, every cycle kept"
    whole = [line["pods"] for line in lines if "pods" in line]
    assert len(whole) == 1, "the whole pod list once, on the segment's first line"
    [pods] = whole
    assert isinstance(pods, list) and len(pods) == PODS
    for pod in pods:
        assert len(json.dumps(pod)) <= POD_RECORD_MAX_BYTES
        # What the decisions read is kept: the source the kubelet gives pods of the API.
        assert pod["metadata"]["annotations"] == {"kubernetes.io/config.source": "api"}

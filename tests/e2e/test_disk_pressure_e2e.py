"""End to end: imagefs pressure on a dedicated image filesystem, reclaimed at node level first, then evicting.

The node: a containerd of its own whose root (content store, snapshots, writable layers) is a folder on a
64 MiB loop-mounted ext4, so the image filesystem is small, real and dedicated (the kubelet root is on
another filesystem); two running pods, "scratch" (priority 0) and "web" (priority 100), bound to the node
in the test API server; an unused 12 MiB image. `evictd run` has a hard ``imagefs.available<16Mi`` with a
minimum reclaim of 8Mi, ``imageMinimumGCAge: 0s``, the pause image protected (containerd never pins it).

1. The filesystem is filled from outside the runtime to just below the threshold: evictd runs the kubelet's
   node-level reclaim (container GC, then image GC), which deletes the unused image; statvfs shows the space
   back, the image-GC counter moves, the log says how much was freed and that reclaim resolved the
   pressure; no pod is evicted.
2. It is filled again with data no GC can free: reclaim frees nothing, so exactly one pod is evicted, the one
   ranked first (lowest priority): through the API, and stopped on the node at once through the runtime (a hard
   threshold: as the kubelet's own eviction kills the pod itself), which takes the pod's 2 s (it ignores
   SIGTERM); the space comes back meanwhile, and once the test (as its kubelet) has deleted that pod, nothing
   else is evicted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from containerd_harness import PAUSE_IMAGE, Containerd
from cri_fixtures import PodFactory
from e2e_node import IGNORES_SIGTERM, ClusterNode, Container, MiB, counter

from polling import wait_until

THRESHOLD_MIB = 16
MIN_RECLAIM_MIB = 8
BIG_IMAGE_MIB = 12
# How far below the threshold each fill leaves the filesystem.
BELOW_BY_MIB = 2
SIGNAL = "imagefs.available"
HARD_GRACE_PERIOD_S = 1
KUBELET = (
    f"evictionHard: {{{SIGNAL}: {THRESHOLD_MIB}Mi}}\n"
    f"evictionMinimumReclaim: {{{SIGNAL}: {MIN_RECLAIM_MIB}Mi}}\n"
    "evictionPressureTransitionPeriod: 3s\n"
    "imageMinimumGCAge: 0s\n"
)


@pytest.fixture
def node(containerd_on_ext4: Containerd, apiserver: ApiServer, tmp_path: Path) -> Iterator[ClusterNode]:
    factory = PodFactory(containerd_on_ext4)
    cluster = ClusterNode(containerd_on_ext4, factory, apiserver, tmp_path / "node")
    try:
        yield cluster
    finally:
        cluster.stop_all()
        factory.cleanup()


def available_bytes(path: Path) -> int:
    vfs = os.statvfs(path)
    return vfs.f_bavail * vfs.f_frsize


def settled_available_bytes(path: Path, steady_s: float = 0.5, timeout_s: float = 10.0) -> int:
    """Free bytes once they stopped changing: containerd removes snapshots in the background after deletions."""
    deadline = time.monotonic() + timeout_s
    last = available_bytes(path)
    while True:
        time.sleep(steady_s)
        now = available_bytes(path)
        if now == last:
            return now
        assert time.monotonic() < deadline, f"free space on {path} never settled"
        last = now


def fill_to_just_below_threshold(imagefs: Path, filler: Path) -> int:
    """Allocate a file outside the runtime so that the filesystem has BELOW_BY_MIB less than the threshold."""
    size = settled_available_bytes(imagefs) - (THRESHOLD_MIB - BELOW_BY_MIB) * MiB
    assert size > 0, f"only {available_bytes(imagefs) / MiB:.1f} MiB free before filling"
    with filler.open("wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, size)
        os.fsync(handle.fileno())
    left = available_bytes(imagefs)
    assert left < THRESHOLD_MIB * MiB, f"{left / MiB:.1f} MiB left"
    return size


def test_image_gc_relieves_imagefs_pressure_first_and_only_unreclaimable_pressure_evicts_one_pod(
    node: ClusterNode, ext4_mount: Path
) -> None:
    runtime = node.runtime
    imagefs = runtime.snapshotter_dir
    assert os.stat(imagefs).st_dev == os.stat(ext4_mount).st_dev != os.stat(node.kubelet_root).st_dev
    # It ignores SIGTERM: stopping it takes the kubelet's whole minimum grace period (2 s).
    scratch = node.run_pod("scratch", [Container("app", IGNORES_SIGTERM)], priority=0)
    web = node.run_pod("web", [Container("app")], priority=100)
    big = runtime.import_big_image(BIG_IMAGE_MIB, tag="unused")
    daemon = node.start_evictd(KUBELET, f"protectedImages: [{PAUSE_IMAGE}]\n")
    daemon.wait_event("evictd started")
    wait_until(lambda: node.condition("EvictdDiskPressure"), 15, "the first node status")
    assert counter(daemon, "evictd_image_garbage_collected_total", reason="space") == 0

    # 1. Just below the threshold: image GC deletes the unused image and that is enough.
    fill_to_just_below_threshold(imagefs, ext4_mount / "filler-1")
    before_gc = available_bytes(imagefs)
    resolved = daemon.wait_event("node-level reclaim resolved the pressure; no pod evicted", timeout=10)
    reclaims = [e for e in daemon.events if e.get("event") == "node-level reclaim" and e["cycle"] == resolved["cycle"]]
    assert [e["action"] for e in reclaims] == ["containerGC", "imageGC"]
    image_gc = reclaims[1]
    assert image_gc["freed_bytes"] >= BIG_IMAGE_MIB * MiB
    given_back = available_bytes(imagefs) - before_gc
    assert given_back >= BIG_IMAGE_MIB * MiB, f"statvfs shows {given_back / MiB:.1f} MiB back"
    assert available_bytes(imagefs) >= (THRESHOLD_MIB + MIN_RECLAIM_MIB) * MiB
    # The image's content and snapshot both go (the padding layer twice); the snapshot a little later.
    assert settled_available_bytes(imagefs) - before_gc >= 2 * BIG_IMAGE_MIB * MiB
    assert big not in {tag for image in runtime.cri.list_images() for tag in image.repo_tags}
    assert counter(daemon, "evictd_image_garbage_collected_total", reason="space") == 1
    assert not node.deletes() and not any(e.get("event") == "evicting pod" for e in daemon.events)

    # 2. Filled again with data no GC can free: reclaim is not enough, the first-ranked pod is evicted. The DELETE
    # goes out while the pod is being stopped on the node (it ignores SIGTERM: 2 s), and the cycle's decision is
    # logged once both have ended; the space comes back meanwhile (the filler, not the pod, held it).
    fill_to_just_below_threshold(imagefs, ext4_mount / "filler-2")
    wait_until(lambda: node.requests_to("DELETE", scratch), 10, "the DELETE of the evicted pod")
    (ext4_mount / "filler-2").unlink()
    evicting = daemon.wait_event("evicting pod", timeout=10)
    assert evicting["pod"] == f"{scratch.namespace}/{scratch.name}"
    assert (evicting["signal"], evicting["grace_period_seconds"]) == (SIGNAL, HARD_GRACE_PERIOD_S)
    assert evicting["ranking"] == [f"{scratch.namespace}/{scratch.name}", f"{web.namespace}/{web.name}"]
    assert evicting["message"].startswith(
        f"The node was low on resource: ephemeral-storage. Threshold quantity: {THRESHOLD_MIB}Mi, available: ")
    failed_reclaims = [e for e in daemon.events if e.get("event") == "node-level reclaim"
                       and e["cycle"] == evicting["cycle"]]
    assert [(e["action"], e["freed_bytes"]) for e in failed_reclaims] == [("containerGC", 0), ("imageGC", 0)]
    assert node.requests_to("DELETE", scratch)[0].body == {"gracePeriodSeconds": HARD_GRACE_PERIOD_S,
                                                           "preconditions": {"uid": scratch.uid}}
    pressure = node.condition("EvictdDiskPressure")  # held for the 3 s transition period after the space is back
    assert pressure is not None and pressure["status"] == "True"
    assert "evictd.io/disk-pressure:NoSchedule" in node.taint_keys()
    conditions = [c for r in node.requests_to("PATCH", scratch, "status")
                  for c in (r.body.get("status") or {}).get("conditions") or ()]
    assert ("DisruptionTarget", "True", "TerminationByKubelet") in [
        (c["type"], c["status"], c.get("reason")) for c in conditions]
    wait_until(lambda: node.pod_events(scratch, "Evicted"), 10, "the Evicted event")
    assert node.pod_events(scratch, "Evicted")[0]["metadata"]["annotations"]["starved_resource"] == \
        "ephemeral-storage"

    # evictd stopped the pod on the node itself, its SIGTERM ignored (the runtime killed it at the end of the
    # kubelet's minimum grace period, 2 s); the kubelet deletes the evicted pod: nothing else is evicted.
    stopped = daemon.wait_event("evicted pod stopped on the node", timeout=10)
    assert (stopped["pod"], stopped["how"]) == (f"{scratch.namespace}/{scratch.name}", "through the container runtime")
    time.sleep(HARD_GRACE_PERIOD_S)
    assert len(node.deletes()) == 1
    node.wait_gone(scratch)
    daemon.wait_event("evicted pods cleaned up", timeout=10)
    time.sleep(2)  # two more cycles
    assert counter(daemon, "evictd_evictions_total", eviction_signal=SIGNAL) == 1
    assert [r.body["preconditions"]["uid"] for r in node.deletes()] == [scratch.uid]
    stored_web = node.apiserver.store.get_pod(web.namespace, web.name)
    assert stored_web is not None and stored_web["status"]["phase"] == "Running"
    assert runtime.sandbox_state(web.sandbox_id).value == "SANDBOX_READY"
    assert daemon.http("/healthz")[0] == 200
    assert daemon.stop() == 0

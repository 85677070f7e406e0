"""Tests of evictd.adapters.runtime_gc: container and image GC through the CRI.

Two parts. First the adapters' own logic (error collection, the eviction switch, age-then-space order,
metrics hook) against a scripted runtime, fast and exact. Then the real thing: a real containerd 1.6
(tests/cri/containerd_harness.py) with real pods and images. Image tests each run a private containerd
whose root is on a 64 MiB ext4 loop mount, so statvfs shows what deleting an image gives back and no
other test's images are touched; container tests use the session containerd and the `pods` fixture.

Facts about containerd 1.6 these tests rely on (checked on it): `RemoveImage` deletes an image even
while containers use it (only evictd's in-use rule protects it), and frees its content and snapshot at
once; `ListContainerStats` reports writable-layer bytes for exited containers too; a removed
container's snapshot is cleaned up asynchronously (well under a second).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from containerd_harness import (
    BIG_IMAGE_REPOSITORY,
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    SLEEP_FOREVER_SCRIPT,
    Containerd,
    RunningPod,
    busybox_container,
)
from cri_fixtures import PodFactory

from clocks import ManualClock
from container_gc_plans import pod_state_from_mapping
from evictd.adapters.runtime_gc import (
    ContainerGCResult,
    CriContainerGC,
    CriImageGC,
    GCError,
    RuntimeReclaimer,
    imagefs_usage,
)
from evictd.adapters.runtime_node import PeriodicGC
from evictd.core.container_gc import GCPolicy, PodState
from evictd.core.errors import CRIError
from evictd.core.fs_layout import ReclaimAction
from evictd.core.image_gc import GCReason, ImageGCPolicy
from evictd.core.runtime import (
    CONTAINER_NAME_LABEL,
    POD_UID_LABEL,
    Container,
    ContainerState,
    Image,
    Sandbox,
    SandboxState,
)
from evictd.cri import ContainerUsage
from log_capture import LogCapture
from polling import wait_until

MiB = 1024 * 1024
STATS_REFRESH_TIMEOUT_S = 5.0
EXITED, RUNNING, UNKNOWN = ContainerState.EXITED, ContainerState.RUNNING, ContainerState.UNKNOWN
NOW_NS = 1_700_000_000 * 10**9


def gc_clock() -> ManualClock:
    """Monotonic 0, the wall at NOW_NS."""
    return ManualClock(0.0, datetime.fromtimestamp(NOW_NS / 10**9, UTC))


# --- a scripted runtime ----------------------------------------------------------------------------------


@dataclass
class FakeRuntime:
    """A scripted CRI: lists what it holds, records every call, and fails the (method, id) pairs in `fail`."""

    images: list[Image] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    sandboxes: list[Sandbox] = field(default_factory=list)
    layer_bytes: dict[str, int] = field(default_factory=dict)
    fail: set[tuple[str, str]] = field(default_factory=set)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def _call(self, method: str, target: str = "") -> None:
        self.calls.append((method, target))
        if (method, target) in self.fail:
            raise CRIError(method, "INTERNAL", f"scripted failure for {target or method}")

    def list_images(self) -> Sequence[Image]:
        self._call("ListImages")
        return list(self.images)

    def remove_image(self, image_id: str) -> None:
        self._call("RemoveImage", image_id)
        self.images = [i for i in self.images if i.id != image_id]

    def list_containers(self) -> Sequence[Container]:
        self._call("ListContainers")
        return list(self.containers)

    def stop_container(self, container_id: str, timeout_s: int) -> None:
        self._call("StopContainer", container_id)
        self.containers = [replace(c, state=EXITED) if c.id == container_id else c for c in self.containers]

    def remove_container(self, container_id: str) -> None:
        self._call("RemoveContainer", container_id)
        self.containers = [c for c in self.containers if c.id != container_id]

    def list_sandboxes(self) -> Sequence[Sandbox]:
        self._call("ListPodSandbox")
        return list(self.sandboxes)

    def stop_sandbox(self, sandbox_id: str) -> None:
        self._call("StopPodSandbox", sandbox_id)

    def remove_sandbox(self, sandbox_id: str) -> None:
        self._call("RemovePodSandbox", sandbox_id)
        self.sandboxes = [s for s in self.sandboxes if s.id != sandbox_id]

    def list_container_stats(self) -> Sequence[ContainerUsage]:
        self._call("ListContainerStats")
        return [
            ContainerUsage(cid, "", "", "", "", "", size, None, None, 0) for cid, size in self.layer_bytes.items()
        ]

    def removed(self, method: str) -> list[str]:
        return [target for called, target in self.calls if called == method and (called, target) not in self.fail]


def dead(pod: str, name: str, attempt: int, state: ContainerState = EXITED, image: str = "") -> Container:
    return Container(
        id=f"{pod}-{name}-{attempt}", name=name, pod_sandbox_id=f"{pod}-sb", state=state, created_at_ns=attempt,
        attempt=attempt, image_ref=image, labels={POD_UID_LABEL: pod, CONTAINER_NAME_LABEL: name},
    )


def notready_sandbox(pod: str) -> Sandbox:
    return Sandbox(f"{pod}-sb", pod, "ns", pod, SandboxState.NOTREADY, 0)


# --- RuntimeReclaimer ------------------------------------------------------------------------------------


def test_reclaimer_dispatches_and_honours_the_eviction_switch() -> None:
    runtime = FakeRuntime(images=[Image("sha256:a", 100)], containers=[dead("p", "c", 0), dead("p", "c", 1)],
                          layer_bytes={"p-c-0": 7})
    clock = gc_clock()
    containers = CriContainerGC(runtime, GCPolicy(), pod_state_from_mapping({}), None, clock=clock)
    off = CriImageGC(runtime, ImageGCPolicy(min_age_s=0, include_in_eviction=False), clock=clock)
    assert RuntimeReclaimer(containers, off).reclaim(ReclaimAction.IMAGE_GC) == 0
    assert not [c for c in runtime.calls if c[0] in ("ListImages", "RemoveImage")], "the switch touches nothing"
    assert RuntimeReclaimer(containers, off).reclaim(ReclaimAction.CONTAINER_GC) == 7
    assert runtime.removed("RemoveContainer") == ["p-c-0"]
    clock.now_s = 1.0
    on = CriImageGC(runtime, ImageGCPolicy(min_age_s=0), clock=clock)
    assert RuntimeReclaimer(containers, on).reclaim(ReclaimAction.IMAGE_GC) == 100
    assert runtime.images == []


# --- image GC adapter ------------------------------------------------------------------------------------


def test_image_reclaim_tries_every_image_and_raises_one_error() -> None:
    runtime = FakeRuntime(images=[Image("sha256:a", 1), Image("sha256:b", 10), Image("sha256:c", 100)])
    runtime.fail = {("RemoveImage", "sha256:b")}
    reasons: list[GCReason] = []
    gc = CriImageGC(runtime, ImageGCPolicy(min_age_s=0), on_image_removed=reasons.append, clock=gc_clock())
    with pytest.raises(GCError) as caught:
        gc.reclaim()
    error = caught.value
    assert isinstance(error, CRIError) and (error.method, error.code) == ("RemoveImage", "INTERNAL")
    assert error.freed_bytes == 101 and len(error.failures) == 1
    assert "1 removal(s) failed" in error.detail
    assert sorted(runtime.removed("RemoveImage")) == ["sha256:a", "sha256:c"]
    assert reasons == [GCReason.SPACE, GCReason.SPACE]
    assert set(gc.state.records) == {"sha256:b"}, "deleted images are forgotten, the failed one is kept"


def test_listing_failure_is_a_cri_error_and_changes_nothing() -> None:
    runtime = FakeRuntime(images=[Image("sha256:a", 1)], fail={("ListContainers", "")})
    gc = CriImageGC(runtime, ImageGCPolicy(min_age_s=0), clock=gc_clock())
    with pytest.raises(CRIError) as caught:
        gc.reclaim()
    assert caught.value.method == "ListContainers"
    assert runtime.removed("RemoveImage") == [] and gc.state.records == {}


def test_images_in_use_pinned_and_protected_survive_reclaim() -> None:
    runtime = FakeRuntime(
        images=[
            Image("sha256:used", 1, repo_tags=("docker.io/library/app:1",)),
            Image("sha256:pinned", 1, pinned=True),
            Image("sha256:mine", 1, repo_tags=("registry.local/tools/debug:2",)),
            Image("sha256:old", 1, repo_tags=("docker.io/library/old:1",)),
        ],
        containers=[replace(dead("p", "c", 0), image="app:1")],  # named by its spec reference only
    )
    gc = CriImageGC(runtime, ImageGCPolicy(min_age_s=0, protected=("registry.local/tools/*",)), clock=gc_clock())
    assert gc.reclaim() == 1
    assert runtime.removed("RemoveImage") == ["sha256:old"]


def test_periodic_image_gc_deletes_by_age_then_by_space() -> None:
    clock = gc_clock()
    runtime = FakeRuntime(images=[Image("sha256:a", 30), Image("sha256:b", 40), Image("sha256:c", 50)])
    usage = {"capacity": 1000, "available": 50}
    reasons: list[GCReason] = []
    gc = CriImageGC(
        runtime, ImageGCPolicy(90, 80, min_age_s=0, max_age_s=100), clock=clock,
        fs_usage=lambda: (usage["capacity"], usage["available"]), on_image_removed=reasons.append,
    )
    runtime.containers = [dead("p", "c", 0, image="sha256:b"), dead("p", "c", 1, image="sha256:c")]
    clock.now_s = 10.0
    gc.detect()  # a unused; b and c used at 10
    runtime.containers = [dead("p", "c", 1, image="sha256:c")]
    clock.now_s = 50.0
    gc.detect()  # c used at 50
    runtime.containers = []
    clock.now_s = 130.0  # GC began at 0: past max age; b unused for 120 s > 100, c for 80 s, a never used
    result = gc.periodic()
    assert [(i.image_id, i.reason) for i in result.removed] == [
        ("sha256:a", GCReason.AGE), ("sha256:b", GCReason.AGE), ("sha256:c", GCReason.SPACE)
    ]
    assert result.wanted_bytes == 150  # 95 % used: down to 80 %
    assert result.freed_bytes == 120
    assert result.shortfall == (
        "Failed to garbage collect required amount of images. Attempted to free 150 bytes, "
        "but only found 50 bytes eligible to free."
    )
    assert reasons == [GCReason.AGE, GCReason.AGE, GCReason.SPACE]


def test_periodic_gc_logs_the_kubelets_shortfall_when_it_frees_less_than_wanted() -> None:
    clock = gc_clock()
    runtime = FakeRuntime(images=[Image("sha256:a", 30)])
    usage = {"available": 50}  # 95 % of 1000 used: wants 150 bytes freed, down to 80 %
    images = CriImageGC(runtime, ImageGCPolicy(90, 80, min_age_s=0), clock=clock,
                        fs_usage=lambda: (1000, usage["available"]))
    containers = CriContainerGC(runtime, GCPolicy(), pod_state_from_mapping({}), None, clock=clock)
    log = LogCapture()
    periodic = PeriodicGC(containers, images, container_period_s=60.0, image_period_s=300.0, log=log, clock=clock)
    clock.now_s = 300.0
    periodic.tick()
    assert log.at("info") == [("periodic image GC", {"images": 1, "freed_bytes": 30})]
    assert log.at("warning") == [("periodic image GC freed less than wanted", {
        "message": "Failed to garbage collect required amount of images. Attempted to free 150 bytes, "
                   "but only found 30 bytes eligible to free.",
        "wanted_bytes": 150})]

    usage["available"] = 900  # below the high threshold: nothing wanted, nothing to say
    runtime.images = [Image("sha256:b", 10)]
    clock.now_s = 600.0
    periodic.tick()
    assert len(log.at("warning")) == 1
    assert runtime.removed("RemoveImage") == ["sha256:a"]


def test_periodic_image_gc_below_high_threshold_deletes_nothing() -> None:
    runtime = FakeRuntime(images=[Image("sha256:a", 30)])
    gc = CriImageGC(runtime, ImageGCPolicy(90, 80, min_age_s=0), clock=gc_clock(), fs_usage=lambda: (1000, 600))
    result = gc.periodic()
    assert result.removed == () and result.wanted_bytes is None
    assert runtime.removed("RemoveImage") == []


def test_age_deletion_errors_end_the_pass_before_the_space_step() -> None:
    clock = gc_clock()
    runtime = FakeRuntime(images=[Image("sha256:a", 30), Image("sha256:b", 30)], fail={("RemoveImage", "sha256:a")})
    reads: list[int] = []

    def usage() -> tuple[int, int]:
        reads.append(1)
        return 1000, 0

    gc = CriImageGC(runtime, ImageGCPolicy(90, 80, min_age_s=0, max_age_s=10), clock=clock, fs_usage=usage)
    clock.now_s = 11.0
    with pytest.raises(GCError) as caught:
        gc.periodic()
    assert caught.value.freed_bytes == 30 and runtime.removed("RemoveImage") == ["sha256:b"]
    assert reads == [], "the filesystem is not read once age deletion failed"


def test_periodic_image_gc_is_off_at_high_100_without_max_age_but_still_detects() -> None:
    runtime = FakeRuntime(images=[Image("sha256:a", 30)])
    gc = CriImageGC(runtime, ImageGCPolicy(100, 80, min_age_s=0), clock=gc_clock(), fs_usage=lambda: (1000, 0))
    assert gc.periodic().removed == ()
    assert set(gc.state.records) == {"sha256:a"}
    assert runtime.removed("RemoveImage") == []


# --- container GC adapter --------------------------------------------------------------------------------


def test_unknown_container_is_stopped_first_and_kept_when_that_fails() -> None:
    runtime = FakeRuntime(containers=[dead("p", "a", 0, UNKNOWN), dead("p", "b", 0, UNKNOWN)])
    runtime.fail = {("StopContainer", "p-b-0")}
    gc = CriContainerGC(runtime, GCPolicy(0, 0, -1), pod_state_from_mapping({}), None, clock=gc_clock())
    with pytest.raises(GCError) as caught:
        gc.periodic()
    assert caught.value.method == "StopContainer"
    container_calls = [c for c in runtime.calls if c[0] in ("StopContainer", "RemoveContainer")]
    assert container_calls == [("StopContainer", "p-a-0"), ("RemoveContainer", "p-a-0"), ("StopContainer", "p-b-0")]


def test_container_gc_collects_failures_and_carries_on(tmp_path: Path) -> None:
    runtime = FakeRuntime(
        containers=[dead("gone", "c", 0), dead("gone", "c", 1), dead("live", "c", 0)],
        sandboxes=[notready_sandbox("gone"), notready_sandbox("other")],
        layer_bytes={"gone-c-0": 1000, "gone-c-1": 24, "live-c-0": 5},
        fail={("RemoveContainer", "gone-c-0"), ("StopPodSandbox", "other-sb")},
    )
    logs = tmp_path / "pods"
    (logs / "ns_gone-pod_gone").mkdir(parents=True)
    (logs / "ns_gone-pod_gone" / "0.log").write_text("bye")
    (logs / "ns_live-pod_live").mkdir()
    states = pod_state_from_mapping({"gone": PodState.DELETED, "other": PodState.DELETED})
    gc = CriContainerGC(runtime, GCPolicy(), states, str(logs), clock=gc_clock())
    with pytest.raises(GCError) as caught:
        gc.reclaim()
    error = caught.value
    assert [(f.method, f.code) for f in error.failures] == [("RemoveContainer", "INTERNAL"), ("StopPodSandbox", "INTERNAL")]
    assert error.freed_bytes == 24, "only the removed container's layer counts"
    assert runtime.removed("RemoveContainer") == ["gone-c-1"]
    # "gone" still has a container (its removal failed): its sandbox stays; "other" could not be stopped.
    assert runtime.removed("RemovePodSandbox") == []
    assert sorted(os.listdir(logs)) == ["ns_live-pod_live"]


def test_container_gc_result_and_bytes_when_everything_succeeds(tmp_path: Path) -> None:
    runtime = FakeRuntime(
        containers=[dead("gone", "c", 0), dead("live", "c", 0), dead("live", "c", 1)],
        sandboxes=[notready_sandbox("gone")],
        layer_bytes={"gone-c-0": 1000, "live-c-1": 5},
    )
    states = pod_state_from_mapping({"gone": PodState.DELETED, "live": PodState.ACTIVE})
    result = CriContainerGC(runtime, GCPolicy(), states, None, clock=gc_clock()).periodic()
    assert result == ContainerGCResult(containers=("gone-c-0", "live-c-0"), sandboxes=("gone-sb",), freed_bytes=1000)
    assert ("StopPodSandbox", "gone-sb") in runtime.calls, "a sandbox is stopped before it is removed"


def test_sources_not_ready_keep_deleted_pods_and_their_logs(tmp_path: Path) -> None:
    runtime = FakeRuntime(containers=[dead("gone", "c", 0), dead("gone", "c", 1)])
    (tmp_path / "ns_p_gone").mkdir()
    gc = CriContainerGC(runtime, GCPolicy(), pod_state_from_mapping({"gone": PodState.DELETED}), str(tmp_path),
                        sources_ready=lambda: False, clock=gc_clock())
    assert gc.reclaim() == 0
    assert runtime.removed("RemoveContainer") == ["gone-c-0"], "only the per-container policy applies"
    assert (tmp_path / "ns_p_gone").is_dir()


def test_log_folder_problems(tmp_path: Path) -> None:
    """A missing pod logs folder means no logs (evictd's choice); an unreadable one is a collected failure."""
    runtime = FakeRuntime()
    missing = CriContainerGC(runtime, GCPolicy(), pod_state_from_mapping({}), str(tmp_path / "absent"))
    assert missing.periodic().log_dirs == ()
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    broken = CriContainerGC(runtime, GCPolicy(), pod_state_from_mapping({}), str(not_a_folder))
    with pytest.raises(GCError) as caught:
        broken.periodic()
    assert (caught.value.method, caught.value.code) == ("ReadPodLogsDirectory", "ENOTDIR")


def test_layer_sizes_unknown_count_zero() -> None:
    runtime = FakeRuntime(containers=[dead("gone", "c", 0)], fail={("ListContainerStats", "")})
    gc = CriContainerGC(runtime, GCPolicy(), pod_state_from_mapping({"gone": PodState.DELETED}), None, clock=gc_clock())
    assert gc.reclaim() == 0
    assert runtime.removed("RemoveContainer") == ["gone-c-0"]


# --- real containerd: dead-container GC ------------------------------------------------------------------


def containers_of(runtime: Containerd, pod: RunningPod) -> list[Container]:
    return sorted(runtime.cri.list_containers(pod_uid=pod.uid), key=lambda c: c.created_at_ns)


def run_with_dead_attempts(pods: PodFactory, name: str, attempts: int, script: str = "exit 0") -> RunningPod:
    """A pod whose container `app` has died `attempts` times (one CRI container per attempt) beside a live one."""
    specs = [busybox_container("app", script, attempt=i) for i in range(attempts)]
    pod = pods.run(name, [*specs, busybox_container("side", SLEEP_FOREVER_SCRIPT)])
    wait_until(lambda: sum(c.state is EXITED for c in containers_of(pods.runtime, pod)) == attempts, 10.0,
               f"{attempts} dead attempts of {name}/app")
    return pod


def test_real_dead_container_gc_keeps_the_newest_per_container(containerd: Containerd, pods: PodFactory) -> None:
    pod = run_with_dead_attempts(pods, "restarts", 3)
    before = containers_of(containerd, pod)
    apps = [c for c in before if c.name == "app"]
    gc = CriContainerGC(containerd.cri, GCPolicy(), pod_state_from_mapping({}), None)
    result = gc.periodic()
    assert set(result.containers) >= {apps[0].id, apps[1].id}
    after = containers_of(containerd, pod)
    assert [(c.name, c.attempt) for c in after] == [("app", 2), ("side", 0)]
    assert {c.state for c in after} == {EXITED, RUNNING}
    assert containerd.sandbox_state(pod.sandbox_id) is SandboxState.READY


def test_real_min_age_keeps_recently_created_dead_containers(containerd: Containerd, pods: PodFactory) -> None:
    pod = run_with_dead_attempts(pods, "young", 2)
    gc = CriContainerGC(containerd.cri, GCPolicy(min_age_s=3600), pod_state_from_mapping({}), None)
    gc.periodic()
    assert len(containers_of(containerd, pod)) == 3


def test_real_eviction_gc_removes_a_deleted_pods_containers_sandbox_and_logs(
    containerd: Containerd, pods: PodFactory
) -> None:
    pod = run_with_dead_attempts(pods, "deleted", 2, script="dd if=/dev/zero of=/fill bs=1M count=4; exit 0")
    apps = {c.id for c in containers_of(containerd, pod) if c.name == "app"}

    def layers_measured() -> bool:
        # containerd measures snapshots every stats_collect_period (1 s here); before that a layer is unknown.
        sizes = {s.container_id: s.writable_layer_bytes or 0 for s in containerd.cri.list_container_stats()}
        return all(sizes.get(cid, 0) >= 4 * MiB for cid in apps)

    wait_until(layers_measured, STATS_REFRESH_TIMEOUT_S, "the dead containers' writable layers to be measured")
    containerd.cri.stop_sandbox(pod.sandbox_id)  # the kubelet has killed the pod: sandbox not ready
    log_dir = Path(pod.spec.log_directory)
    assert log_dir.is_dir()
    states = pod_state_from_mapping({pod.uid: PodState.DELETED})
    gc = CriContainerGC(containerd.cri, GCPolicy(), states, str(containerd.logs_dir))
    freed = gc.reclaim()
    assert freed >= 2 * 4 * MiB, "both dead attempts wrote 4 MiB into their writable layer"
    assert containerd.cri.list_containers(pod_uid=pod.uid) == []
    assert containerd.cri.list_sandboxes(pod_uid=pod.uid) == []
    assert not log_dir.exists()


def test_real_terminated_pod_goes_only_at_eviction_time(containerd: Containerd, pods: PodFactory) -> None:
    pod = run_with_dead_attempts(pods, "terminated", 2)
    containerd.cri.stop_sandbox(pod.sandbox_id)
    states = pod_state_from_mapping({pod.uid: PodState.TERMINATED})
    gc = CriContainerGC(containerd.cri, GCPolicy(), states, str(containerd.logs_dir))
    gc.periodic()
    assert [(c.name, c.attempt) for c in containers_of(containerd, pod)] == [("app", 1), ("side", 0)]
    gc.reclaim()
    assert containers_of(containerd, pod) == []
    assert containerd.cri.list_sandboxes(pod_uid=pod.uid) == []
    assert Path(pod.spec.log_directory).is_dir(), "a pod still in the API keeps its logs"


# --- real containerd: image GC on its own ext4 -----------------------------------------------------------


def statvfs_available(path: Path) -> int:
    vfs = os.statvfs(path)
    return vfs.f_bavail * vfs.f_frsize


def usage_percent(path: Path) -> int:
    vfs = os.statvfs(path)
    return 100 - (vfs.f_bavail * 100) // vfs.f_blocks


def image_with_tag(runtime: Containerd, reference: str) -> Image | None:
    return next((i for i in runtime.cri.list_images() if reference in i.repo_tags), None)


@pytest.fixture
def image_node(containerd_on_ext4: Containerd) -> Iterator[Containerd]:
    """A private containerd on ext4 with a running busybox pod (so the busybox image is in use)."""
    containerd_on_ext4.run_pod("user", [busybox_container("app", SLEEP_FOREVER_SCRIPT)])
    yield containerd_on_ext4


def test_real_image_gc_frees_an_unused_big_image(image_node: Containerd, ext4_mount: Path) -> None:
    big = image_node.import_big_image(8, tag="unused")
    before = statvfs_available(ext4_mount)
    reported = image_with_tag(image_node, big)
    assert reported is not None
    # The sandbox (pause) image is not a container's: like the kubelet with containerd 1.6 (which never
    # pins it), only a protection keeps it.
    policy = ImageGCPolicy(min_age_s=0, protected=(PAUSE_IMAGE,), include_in_eviction=False)
    reasons: list[GCReason] = []
    images = CriImageGC(image_node.cri, policy, on_image_removed=reasons.append)
    containers = CriContainerGC(image_node.cri, GCPolicy(), pod_state_from_mapping({}), None)
    assert RuntimeReclaimer(containers, images).reclaim(ReclaimAction.IMAGE_GC) == 0
    assert image_with_tag(image_node, big) is not None, "image GC is switched off for eviction-time reclaim"
    images.policy = replace(policy, include_in_eviction=True)
    freed = RuntimeReclaimer(containers, images).reclaim(ReclaimAction.IMAGE_GC)
    assert freed == reported.size_bytes
    assert reasons == [GCReason.SPACE]
    assert {tag for image in image_node.cri.list_images() for tag in image.repo_tags} == {BUSYBOX_IMAGE, PAUSE_IMAGE}
    # Its content and snapshot (the 8 MiB padding, twice) go at once; the busybox layer is shared and stays.
    given_back = statvfs_available(ext4_mount) - before
    assert given_back >= 8 * MiB
    assert given_back >= 0.75 * reported.size_bytes


def test_real_image_gc_keeps_young_and_protected_images(image_node: Containerd) -> None:
    clock = ManualClock(0.0, datetime.now(UTC))
    kept = image_node.import_big_image(4, tag="keep-me")
    young = image_node.import_big_image(4, tag="young")
    policy = ImageGCPolicy(min_age_s=120, protected=(PAUSE_IMAGE, f"{BIG_IMAGE_REPOSITORY}:keep-*"))
    gc = CriImageGC(image_node.cri, policy, clock=clock)
    gc.detect()
    clock.now_s = 119.0
    assert gc.reclaim() == 0, "first detected 119 s ago: younger than imageMinimumGCAge"
    assert image_with_tag(image_node, young) is not None
    clock.now_s = 120.0
    assert gc.reclaim() > 0
    assert image_with_tag(image_node, young) is None
    assert image_with_tag(image_node, kept) is not None
    assert image_with_tag(image_node, BUSYBOX_IMAGE) is not None, "in use by a running container"
    assert image_with_tag(image_node, PAUSE_IMAGE) is not None


def test_real_image_used_only_by_an_exited_container_is_kept(image_node: Containerd) -> None:
    used = image_node.import_big_image(2, tag="exited-user")
    pod = image_node.run_pod("done", [replace(busybox_container("job", "exit 0"), image=used)])
    image_node.wait_for_container_state(pod.container_ids["job"], EXITED)
    gc = CriImageGC(image_node.cri, ImageGCPolicy(min_age_s=0, protected=(PAUSE_IMAGE,)))
    gc.reclaim()
    assert image_with_tag(image_node, used) is not None
    image_node.remove_pod(pod)  # the container goes: the image is unused now
    gc.reclaim()
    assert image_with_tag(image_node, used) is None


def test_real_periodic_image_gc_frees_down_to_the_low_threshold(image_node: Containerd, ext4_mount: Path) -> None:
    clock = ManualClock(0.0, datetime.now(UTC))
    reasons: list[GCReason] = []
    references = []
    gc = CriImageGC(image_node.cri, ImageGCPolicy(min_age_s=0, protected=(PAUSE_IMAGE,)), clock=clock,
                    fs_usage=imagefs_usage(image_node.cri), on_image_removed=reasons.append)
    for step, tag in enumerate(("first", "second", "third"), start=1):
        references.append(image_node.import_big_image(6, tag=tag))
        clock.now_s = float(step)
        gc.detect()  # detected one after the other: the first is the least recently detected
    clock.now_s = 10.0
    used = usage_percent(ext4_mount)
    high, low = used, used - 5
    gc.policy = replace(gc.policy, high_threshold_percent=high, low_threshold_percent=low)
    result = gc.periodic()
    assert result.wanted_bytes is not None and 0 < result.wanted_bytes < 8 * MiB
    assert [image_with_tag(image_node, ref) is None for ref in references] == [True, False, False]
    assert reasons == [GCReason.SPACE] and result.shortfall is None
    assert usage_percent(ext4_mount) <= low
    # Below the high threshold now: the next pass deletes nothing.
    again = gc.periodic()
    assert again.wanted_bytes is None and again.removed == ()
    assert image_with_tag(image_node, references[1]) is not None

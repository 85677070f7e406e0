"""``CriClient`` against a real containerd 1.6: every call evictd makes, on real images and real pods.

The session's containerd (conftest.py) serves most tests; the ImageFsInfo capacity test runs its own
containerd with its root on a 64 MiB ext4 loop mount. Pods are host-network busybox pods with the
kubelet's labels, removed by the ``pods`` fixture at the end of each test.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from pathlib import Path

import pytest
from containerd_harness import (
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    SLEEP_FOREVER_SCRIPT,
    Containerd,
    busybox_container,
    mounts_under,
    shim_pids,
)
from cri_fixtures import PodFactory, new_base

from evictd.core.errors import ConfigError, CRIError
from evictd.core.runtime import ContainerState, SandboxState
from evictd.cri import ContainerUsage, FilesystemUsage, channel_target
from evictd.cri.client import CriClient
from polling import wait_until

MiB = 1024 * 1024
# containerd refreshes snapshot usage every stats_collect_period (1 s here); allow a few periods.
STATS_REFRESH_TIMEOUT_S = 5.0
WRITTEN_MIB = 8
SHM_MIB = 16
# What a dead endpoint may take to fail with a 0.5 s deadline (it should fail at once: no socket).
DEAD_SOCKET_TIMEOUT_S = 0.5
DEAD_SOCKET_MAX_ELAPSED_S = 2.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# --- endpoints and errors without a runtime -----------------------------------------------------------------

@pytest.mark.parametrize(("endpoint", "target"), [
    ("unix:///run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
    ("unix:///var/run/crio/crio.sock", "unix:///var/run/crio/crio.sock"),
    ("/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"),
], ids=["containerd", "cri-o", "bare-path"])
def test_unix_endpoints_are_accepted(endpoint: str, target: str) -> None:
    assert channel_target(endpoint) == target


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:1234", "unix://", "containerd.sock", ""])
def test_other_endpoints_are_a_config_error(endpoint: str) -> None:
    with pytest.raises(ConfigError) as caught:
        channel_target(endpoint)
    assert caught.value.key == "containerRuntimeEndpoint"


def _socket_without_listener(folder: Path) -> Path:
    path = folder / "closed.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))  # bound, never listening: connect() is refused
    return path


@pytest.mark.parametrize("kind", ["no-socket-file", "nobody-listening"])
def test_a_dead_socket_is_a_cri_error_unavailable(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "missing.sock" if kind == "no-socket-file" else _socket_without_listener(tmp_path)
    with contextlib.closing(CriClient(f"unix://{path}", DEAD_SOCKET_TIMEOUT_S)) as client:
        started = time.monotonic()
        with pytest.raises(CRIError) as caught:
            client.version()
        elapsed = time.monotonic() - started
    assert (caught.value.method, caught.value.code) == ("Version", "UNAVAILABLE")
    assert caught.value.detail
    assert elapsed < DEAD_SOCKET_MAX_ELAPSED_S


# --- the runtime ----------------------------------------------------------------------------------------

def test_version_names_the_runtime_and_the_cri_version(containerd: Containerd) -> None:
    version = containerd.cri.version()
    assert version.runtime_name == "containerd"
    assert version.runtime_api_version == "v1"
    assert version.runtime_version.startswith("1.6.")


def test_a_missing_container_is_a_cri_error_not_found(containerd: Containerd) -> None:
    missing = uuid.uuid4().hex
    with pytest.raises(CRIError) as status:
        containerd.cri.container_status(missing)
    assert (status.value.method, status.value.code) == ("ContainerStatus", "NOT_FOUND")
    assert missing in str(status.value)
    with pytest.raises(CRIError) as stop:
        containerd.cri.stop_container(missing, 1)
    assert (stop.value.method, stop.value.code) == ("StopContainer", "NOT_FOUND")
    # RemoveContainer is idempotent by the CRI's contract: containerd answers OK for a missing container.
    containerd.cri.remove_container(missing)


# --- images and the image filesystem -------------------------------------------------------------------

def test_list_images_reports_imported_images(containerd: Containerd) -> None:
    images = {tag: image for image in containerd.cri.list_images() for tag in image.repo_tags}
    for reference in (PAUSE_IMAGE, BUSYBOX_IMAGE):
        image = images[reference]
        assert image.id.startswith("sha256:")
        assert image.size_bytes >= os.stat("/bin/busybox").st_size  # the layer holds the busybox binary
        assert image.pinned is False  # containerd 1.6 never reports pinned


def test_remove_image_deletes_it(containerd: Containerd) -> None:
    reference = containerd.import_big_image(2, tag=unique("remove"))
    image = next(i for i in containerd.cri.list_images() if reference in i.repo_tags)
    assert image.size_bytes >= 2 * MiB

    containerd.cri.remove_image(image.id)

    assert all(i.id != image.id for i in containerd.cri.list_images())
    containerd.cri.remove_image(image.id)  # idempotent: removing it again is not an error


def test_image_fs_info_reports_the_snapshotter_folder(containerd: Containerd) -> None:
    def measured() -> FilesystemUsage | None:
        (usage,) = containerd.cri.image_fs_info().image_filesystems
        return usage if usage.used_bytes else None

    usage = wait_until(measured, STATS_REFRESH_TIMEOUT_S, "the first ImageFsInfo refresh")
    assert usage.mountpoint == str(containerd.snapshotter_dir)
    assert usage.used_bytes is not None and usage.used_bytes >= os.stat("/bin/busybox").st_size
    assert usage.inodes_used is not None and usage.inodes_used > 100  # one symlink per busybox applet
    assert usage.timestamp_ns > 0
    assert containerd.cri.image_fs_info().container_filesystems == ()  # containerd does not split them


def _tree_usage(folder: Path) -> tuple[int, int]:
    """Return (bytes, inodes) of a tree as containerd's fs.DiskUsage counts them: blocks of unique inodes."""
    seen: dict[tuple[int, int], int] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in (*dirnames, *filenames):
            info = os.lstat(os.path.join(dirpath, name))
            seen[(info.st_dev, info.st_ino)] = info.st_blocks * 512
    return sum(seen.values()), len(seen)


def test_image_fs_info_on_ext4_matches_statvfs(containerd_on_ext4: Containerd, ext4_mount: Path) -> None:
    runtime = containerd_on_ext4
    (usage,) = runtime.cri.image_fs_info().image_filesystems
    assert usage.mountpoint == str(runtime.snapshotter_dir)
    assert Path(usage.mountpoint).is_relative_to(ext4_mount)

    # The reported folder is on the ext4: statvfs of it is statvfs of the loop filesystem.
    reported, mounted = os.statvfs(usage.mountpoint), os.statvfs(ext4_mount)
    assert (reported.f_fsid, reported.f_blocks, reported.f_frsize, reported.f_files) == (
        mounted.f_fsid, mounted.f_blocks, mounted.f_frsize, mounted.f_files)
    assert reported.f_blocks * reported.f_frsize <= 64 * MiB

    # After a refresh, usage is what lies in the snapshots (containerd's own measure), within what the
    # filesystem has in use.
    before = wait_until(lambda: _usage_above(runtime, 0), STATS_REFRESH_TIMEOUT_S, "the first refresh")
    snapshot_bytes, snapshot_inodes = _tree_usage(Path(usage.mountpoint) / "snapshots")
    assert before.used_bytes == pytest.approx(snapshot_bytes, rel=0.05)
    assert before.inodes_used == pytest.approx(snapshot_inodes, rel=0.05)
    fs_used = (mounted.f_blocks - mounted.f_bfree) * mounted.f_frsize
    assert before.used_bytes is not None and before.used_bytes <= fs_used

    # An 8 MiB image raises both the reported usage and what statvfs sees in use.
    runtime.import_big_image(WRITTEN_MIB, tag=unique("ext4"))
    after = wait_until(lambda: _usage_above(runtime, (before.used_bytes or 0) + WRITTEN_MIB * MiB),
                     STATS_REFRESH_TIMEOUT_S, "ImageFsInfo to count the new image")
    assert after.used_bytes is not None
    assert os.statvfs(ext4_mount).f_bfree * mounted.f_frsize <= mounted.f_bfree * mounted.f_frsize - WRITTEN_MIB * MiB


def _usage_above(runtime: Containerd, floor_bytes: int) -> FilesystemUsage | None:
    (usage,) = runtime.cri.image_fs_info().image_filesystems
    return usage if usage.used_bytes is not None and usage.used_bytes > floor_bytes else None


# --- pods, containers and their stats ------------------------------------------------------------------

def test_sandboxes_and_containers_carry_the_kubelet_labels(containerd: Containerd, pods: PodFactory) -> None:
    first = pods.run(unique("labels"), [busybox_container("main", SLEEP_FOREVER_SCRIPT)])
    second = pods.run(unique("other"), [busybox_container("main", SLEEP_FOREVER_SCRIPT)])

    (sandbox,) = containerd.cri.list_sandboxes(pod_uid=first.uid)
    assert (sandbox.id, sandbox.name, sandbox.namespace, sandbox.uid) == (
        first.sandbox_id, first.name, first.namespace, first.uid)
    assert sandbox.state is SandboxState.READY and sandbox.created_at_ns > 0
    assert {first.sandbox_id, second.sandbox_id} <= {s.id for s in containerd.cri.list_sandboxes()}

    (container,) = containerd.cri.list_containers(pod_uid=first.uid)
    assert (container.id, container.name, container.pod_sandbox_id) == (
        first.container_ids["main"], "main", first.sandbox_id)
    assert container.state is ContainerState.RUNNING
    assert container.pod_uid == first.uid
    assert container.image == BUSYBOX_IMAGE and container.image_ref.startswith("sha256:")
    assert container.labels["io.kubernetes.container.name"] == "main"


def test_running_pod_stats(containerd: Containerd, pods: PodFactory) -> None:
    # Writes 16 MiB into /dev/shm (tmpfs, charged to the container's memory cgroup as shmem: counted in the
    # working set), then 8 MiB into the writable layer, then idles. The shm comes first: containerd's
    # writable-layer figure is a snapshot of its last collection, its memory is read at the call, so a
    # written file counted means the shm was already there (CI at 8aa3c62 read 5.4 MiB of working set
    # when the order was the other way round).
    script = (f"dd if=/dev/zero of=/dev/shm/held bs=1M count={SHM_MIB} && "
              f"dd if=/dev/zero of=/written bs=1M count={WRITTEN_MIB} && "
              f"{SLEEP_FOREVER_SCRIPT}")
    pod = pods.run(unique("stats"), [busybox_container("writer", script)])
    container_id = pod.container_ids["writer"]

    def container_usage() -> ContainerUsage | None:
        for usage in containerd.cri.list_container_stats():
            if usage.container_id == container_id and (usage.writable_layer_bytes or 0) >= WRITTEN_MIB * MiB:
                return usage
        return None

    usage = wait_until(container_usage, STATS_REFRESH_TIMEOUT_S, "the writable layer to count the written file")
    assert usage.pod_sandbox_id == pod.sandbox_id
    assert (usage.name, usage.pod_uid, usage.pod_name, usage.pod_namespace) == (
        "writer", pod.uid, pod.name, pod.namespace)
    assert usage.writable_layer_inodes >= 1
    assert usage.working_set_bytes >= SHM_MIB * MiB
    assert usage.timestamp_ns > 0

    (sandbox_usage,) = [s for s in containerd.cri.list_pod_sandbox_stats() if s.sandbox_id == pod.sandbox_id]
    assert (sandbox_usage.uid, sandbox_usage.name, sandbox_usage.namespace) == (pod.uid, pod.name, pod.namespace)
    assert sandbox_usage.working_set_bytes is not None and sandbox_usage.working_set_bytes >= SHM_MIB * MiB
    # The pause process and the container's shell (plus, at times, its sleep).
    assert sandbox_usage.process_count is not None and sandbox_usage.process_count >= 2
    assert sandbox_usage.timestamp_ns > 0


def test_an_exited_container_can_be_removed(containerd: Containerd, pods: PodFactory) -> None:
    pod = pods.run(unique("exits"), [busybox_container("once", "exit 3")])
    container_id = pod.container_ids["once"]
    containerd.wait_for_container_state(container_id, ContainerState.EXITED)

    status = containerd.cri.container_status(container_id)
    assert (status.state, status.exit_code, status.reason) == (ContainerState.EXITED, 3, "Error")
    # Both set; containerd stamps started_at after the start call returns, so a process that exits at once
    # can have finished_at a few milliseconds *before* started_at: do not compare the two.
    assert status.started_at_ns > status.created_at_ns > 0
    assert status.finished_at_ns > status.created_at_ns
    (listed,) = containerd.cri.list_containers(pod_uid=pod.uid)
    assert listed.state is ContainerState.EXITED

    containerd.cri.remove_container(container_id)

    assert containerd.cri.list_containers(pod_uid=pod.uid) == []
    with pytest.raises(CRIError) as caught:
        containerd.cri.container_status(container_id)
    assert caught.value.code == "NOT_FOUND"


def test_stop_and_remove_sandbox(containerd: Containerd, pods: PodFactory) -> None:
    pod = pods.run(unique("sandbox"), [busybox_container("main", SLEEP_FOREVER_SCRIPT)])

    containerd.cri.stop_sandbox(pod.sandbox_id)

    assert containerd.sandbox_state(pod.sandbox_id) is SandboxState.NOTREADY
    (container,) = containerd.cri.list_containers(pod_uid=pod.uid)
    assert container.state is ContainerState.EXITED  # StopPodSandbox kills what still runs
    containerd.cri.stop_sandbox(pod.sandbox_id)  # idempotent

    containerd.cri.remove_sandbox(pod.sandbox_id)

    assert containerd.cri.list_sandboxes(pod_uid=pod.uid) == []
    assert containerd.cri.list_containers(pod_uid=pod.uid) == []


# --- the harness itself: a crashed containerd still leaves nothing behind --------------------------------

def test_teardown_after_a_containerd_crash_leaves_nothing_behind() -> None:
    runtime = Containerd(new_base())
    try:
        runtime.start()
        runtime.import_standard_images()
        pod = runtime.run_pod(unique("orphan"), [busybox_container("main", SLEEP_FOREVER_SCRIPT)])
        assert runtime.process is not None
        shims = shim_pids(str(runtime.socket))
        assert shims and mounts_under(runtime.base)
        assert (Path("/sys/fs/cgroup/memory") / pod.cgroup_parent.strip("/")).is_dir()

        runtime.process.kill()  # containerd dies; its shims and the pod's processes live on
        runtime.process.wait()

        assert runtime.stop() == []
    finally:
        runtime.stop()  # a no-op after a clean stop; cleans up if an assertion above failed
    assert mounts_under(runtime.base) == [] and not runtime.base.exists()
    assert shim_pids(str(runtime.socket)) == []
    assert not (Path("/sys/fs/cgroup/memory") / runtime.cgroup_root.strip("/")).exists()
    for pid in shims:  # gone, or a zombie waiting for PID 1 to reap it
        status = Path(f"/proc/{pid}/status")
        assert not status.exists() or "State:\tZ" in status.read_text()

"""A kubelet-like pod on this machine, for tier-3 tests: real cgroups, a real process, real pod folders.

`RealPodNode` builds, in the machine's cgroup v1 ``memory`` and ``pids`` hierarchies,

    evictd-test-<random>/kubepods/burstable/pod<uid>/<64-hex container id>

with ``kubepods`` limited (``memory.limit_in_bytes``) as a kubelet limits its pods cgroup to the node's
allocatable memory; the test cgroup is the kubelet's ``cgroupRoot`` (a `CgroupLayout` ``base``). Around it, the
folders the kubelet keeps for the pod: an emptyDir ``<kubelet root>/pods/<uid>/volumes/kubernetes.io~empty-dir/
<volume>/`` holding real files and a container log ``<pod logs>/<ns>_<name>_<uid>/<container>/0.log``. A real
Python process is moved into the container cgroup (its PID written to ``cgroup.procs`` of both hierarchies)
and allocates memory on command, so every charge is the kernel's own.

`oom_kill` makes the kernel OOM-kill the pod's process inside the pod cgroup (limited for that), as a container
over its limit is killed.

`teardown` stops the process, kills anything left in the test cgroups and removes them bottom-up; it runs
whatever the test's outcome (call it from a fixture's ``finally``). Needs root and a v1 memory hierarchy:
without them the test fails, it is never skipped.

`crowded_pod` is such a pod whose tenant keeps many files in its emptyDir and keeps changing them (the disk
walk's worst case); `walk_time_s` is how long one full measurement of a folder takes on this machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from evictd.adapters.cgroups import CgroupLayout, detect_cgroup_layout
from evictd.adapters.disk_usage import DiskUsageCache
from real_cgroups import CGROUP_MOUNT, HIERARCHIES, CgroupTree, ScriptedChild, new_test_cgroup_name

MiB = 1 << 20
# The pods cgroup limit (the node's allocatable memory) of the daemon tests' `real_pod` (tests/daemon/conftest.py).
REAL_POD_LIMIT_BYTES = 512 * MiB
EMPTY_DIR_PLUGIN = "kubernetes.io~empty-dir"


@dataclass
class RealPodNode:
    """One burstable pod with one container, as a kubelet with the cgroupfs driver lays it out."""

    kubelet_root: Path
    pod_logs_dir: Path
    pods_limit_bytes: int
    namespace: str = "shop"
    name: str = "cart-7d9f"
    container: str = "app"
    volume: str = "cache"
    base: str = field(default_factory=new_test_cgroup_name)
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    container_id: str = field(default_factory=lambda: uuid.uuid4().hex + uuid.uuid4().hex)
    tree: CgroupTree = field(default_factory=CgroupTree)
    qos_tier: str = "burstable"  # the QoS tier cgroup the pod's cgroup is in: burstable or besteffort

    @property
    def layout(self) -> CgroupLayout:
        layout = detect_cgroup_layout(CGROUP_MOUNT, base=self.base)
        assert layout.version == 1, "real pod tests use the machine's cgroup v1 memory and pids hierarchies"
        return layout

    @property
    def pods_cgroup(self) -> str:
        return f"{self.base}/kubepods"

    @property
    def pod_cgroup(self) -> str:
        return f"{self.pods_cgroup}/{self.qos_tier}/pod{self.uid}"

    @property
    def container_cgroup(self) -> str:
        return f"{self.pod_cgroup}/{self.container_id}"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def volume_dir(self) -> Path:
        return self.kubelet_root / "pods" / self.uid / "volumes" / EMPTY_DIR_PLUGIN / self.volume

    @property
    def log_dir(self) -> Path:
        return self.pod_logs_dir / f"{self.namespace}_{self.name}_{self.uid}" / self.container

    def evictd_settings(self, runtime_dir: Path) -> str:
        """The EvictdConfiguration lines that make `evictd run` watch this node (no runtime: `runtime_dir` is
        where its image and container filesystems would be)."""
        return (f"cgroupRoot: /{self.base}\nkubeletRootDir: {self.kubelet_root}\npodLogsDir: {self.pod_logs_dir}\n"
                f"imageFsPath: {runtime_dir}\ncontainerFsPath: {runtime_dir}\n")

    def evictd_api_settings(self, runtime_dir: Path, node: str, kubeconfig: Path, interval: str) -> str:
        """`evictd_settings` for `evictd run` with a Kubernetes API (`kubeconfig`) as the node `node`, no container
        runtime (a socket nobody serves in `runtime_dir`), a housekeeping `interval` and no PSI wake-ups."""
        return (f"nodeName: {node}\nkubeconfig: {kubeconfig}\n"
                f"containerRuntimeEndpoint: unix://{runtime_dir}/no-runtime.sock\n"
                f"housekeepingInterval: {interval}\npsiWakeups: false\n" + self.evictd_settings(runtime_dir))

    def manifest(self, node: str, volumes: list[dict[str, object]] | None = None, *,
                 memory_request: str | None = None) -> dict[str, object]:
        """The pod as the API holds it (running on `node`), with `volumes` in its spec if given: BestEffort, or
        Burstable with a `memory_request` (no limit)."""
        container: dict[str, object] = {"name": self.container, "image": "busybox"}
        if memory_request is not None:
            container["resources"] = {"requests": {"memory": memory_request}}
        spec: dict[str, object] = {"nodeName": node, "containers": [container]}
        if volumes is not None:
            spec["volumes"] = volumes
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid},
                "spec": spec, "status": {"phase": "Running",
                                         "qosClass": "BestEffort" if memory_request is None else "Burstable"}}

    def neighbour(self, namespace: str, name: str, qos_tier: str) -> RealPodNode:
        """Another pod of this node (same pods cgroup and cgroup tree, its own tier, folders and UID); `create` it,
        and tear the node down once, through this pod's `teardown`."""
        return RealPodNode(kubelet_root=self.kubelet_root, pod_logs_dir=self.pod_logs_dir,
                           pods_limit_bytes=self.pods_limit_bytes, namespace=namespace, name=name,
                           base=self.base, tree=self.tree, qos_tier=qos_tier)

    def memory_file(self, cgroup: str, name: str) -> Path:
        return CGROUP_MOUNT / "memory" / cgroup / name

    def create(self, volume_files: dict[str, int], log_bytes: int) -> None:
        """Make the cgroups (pods cgroup limited), the emptyDir with `volume_files` and the container log."""
        assert os.geteuid() == 0, "real pod tests need root to create cgroups"
        assert self.layout.version == 1
        self.tree.make(self.container_cgroup)
        self.memory_file(self.pods_cgroup, "memory.limit_in_bytes").write_text(f"{self.pods_limit_bytes}\n")
        self.volume_dir.mkdir(parents=True)
        for name, size in volume_files.items():
            (self.volume_dir / name).write_bytes(os.urandom(size))
        self.log_dir.mkdir(parents=True)
        (self.log_dir / "0.log").write_bytes(b"2026-11-21T10:00:00Z stdout F started\n" * (log_bytes // 40 + 1))

    def fill_volume(self, count: int) -> None:
        """Add `count` empty files (``f000000``, ...) to the emptyDir: a tenant's many small files."""
        folder = str(self.volume_dir)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        for index in range(count):
            os.close(os.open(f"{folder}/f{index:06d}", flags, 0o644))

    def start_toucher(self, interval_s: float) -> subprocess.Popen[bytes]:
        """Start a process that creates and removes a file in the emptyDir every `interval_s` seconds, as a
        tenant churning its files does: the volume's directory changes all the time, so every measurement
        lists it again. Stop it with ``kill()``."""
        script = 'while :; do : > "$1/churn"; rm -f "$1/churn"; sleep "$2"; done'
        return subprocess.Popen(["sh", "-c", script, "toucher", str(self.volume_dir), str(interval_s)])

    def start_process(self) -> ScriptedChild:
        """Start the container's process and move it into the container cgroup of both hierarchies."""
        return self.tree.start_child(self.container_cgroup, label="pod process")

    def oom_kill(self, process: ScriptedChild, pod_limit_bytes: int) -> None:
        """Limit the pod cgroup to `pod_limit_bytes` and make `process` allocate four times that: the kernel's
        OOM killer kills it inside the pod's cgroup (never anything outside the test's cgroups). Fails the test
        unless the process ends by SIGKILL."""
        self.memory_file(self.pod_cgroup, "memory.limit_in_bytes").write_text(f"{pod_limit_bytes}\n")
        assert process.proc.stdin is not None
        process.proc.stdin.write(f"alloc {4 * pod_limit_bytes}\n")
        process.proc.stdin.flush()
        assert process.proc.wait(timeout=30) == -signal.SIGKILL, "the pod's process was not OOM-killed"

    def teardown(self) -> None:
        """Stop the processes, kill whatever is left in the test cgroups, remove them bottom-up."""
        self.tree.remove()
        for hierarchy in HIERARCHIES:
            assert not (CGROUP_MOUNT / hierarchy / self.base).exists(), f"{hierarchy}/{self.base} left behind"


def du_bytes(path: Path) -> int:
    """Return what `du -s -x -B1` reports for `path`: allocated bytes, directories included."""
    done = subprocess.run(["du", "-s", "-x", "-B1", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def du_inodes(path: Path) -> int:
    """Return what `du -s -x --inodes` reports for `path`."""
    done = subprocess.run(["du", "-s", "-x", "--inodes", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


@contextlib.contextmanager
def crowded_pod(tmp_path: Path, mount_tmpfs_at: Callable[[Path], Path], *, files: int, touch_interval_s: float,
                pods_limit_bytes: int) -> Iterator[RealPodNode]:
    """Yield a RealPodNode whose emptyDir holds `files` empty files and a churning file (`start_toucher`).

    The kubelet root is a tmpfs (`mount_tmpfs_at`): 100,000 files are created there in a second or two.
    """
    kubelet_root = tmp_path / "kubelet"
    kubelet_root.mkdir()
    mount_tmpfs_at(kubelet_root)
    node = RealPodNode(kubelet_root=kubelet_root, pod_logs_dir=tmp_path / "pods-logs",
                       pods_limit_bytes=pods_limit_bytes)
    toucher = None
    try:
        node.create(volume_files={"data.bin": 1 * MiB}, log_bytes=64 * 1024)
        node.fill_volume(files)
        toucher = node.start_toucher(touch_interval_s)
        yield node
    finally:
        if toucher is not None:
            toucher.kill()
            toucher.wait()
        node.teardown()


def walk_time_s(folder: Path, walks: int = 3) -> float:
    """Return the median time of `walks` measurements of `folder` from scratch (each lists all of it)."""
    times = []
    for _ in range(walks):
        started = time.monotonic()
        measured = DiskUsageCache().usage(str(folder))
        times.append(time.monotonic() - started)
        assert measured is not None
    return statistics.median(times)

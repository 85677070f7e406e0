"""A synthetic node on disk: a cgroup v1 tree, a kubelet root and pod log folders, plus matching v1 Pods.

Built in a temporary folder so that the real adapters (CgroupReader over `CgroupLayout(version=1,
root=<tmp>/cgroup)`, NodeStatsSource, the disk walker's PodDiskWalker) read it exactly as they read a node:

    <tmp>/cgroup/memory/                      root: memory.usage_in_bytes, memory.stat, memory.limit_in_bytes,
                                              cgroup.procs, and the other v1 control files (empty stubs)
    <tmp>/cgroup/memory/kubepods/             pods cgroup (same files); guaranteed pods directly inside
    <tmp>/cgroup/memory/kubepods/{burstable,besteffort}/pod<uid>/<64-hex container id>/
    <tmp>/cgroup/pids/kubepods/.../pod<uid>/pids.current
    <tmp>/kubelet/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>/{data-0,data-1,sub/data-2}
    <tmp>/logs/<ns>_<name>_<uid>/<container>/0.log

File formats are cgroup v1's (copied from this machine's /sys/fs/cgroup/memory): `memory.stat` carries
every local and `total_*` key in kernel order, limits use v1's "unlimited" 9223372036854771712.

With `real_cgroups=True` (needs root and cgroup v1) the cgroup tree is made of real, empty cgroups instead, under
a base cgroup ``evictd-bench-<random>`` (the kubelet's cgroupRoot) in this machine's v1 memory and pids
hierarchies, and the node's root cgroup is the machine's; the rest stays in the temporary folder. `close()`
removes those cgroups bottom-up. Their readings cannot be written (`set_root_usage` and `move_pod_memory` refuse).

`SyntheticNode.floor_operations()` lists the file operations one housekeeping cycle needs (open+read, list,
stat, statvfs), and `walk_operations()` those of one disk walker pass, for the "only read the same files"
floors of `bench/cycle_cost.py`.

    .venv/bin/python bench/synthetic_node.py [--pods 250] [--real-cgroups]   # build one, print its size, remove it
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evictd.adapters.cgroups import CgroupLayout
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

# v1's "no limit": 2**63-1 rounded down to a 4 KiB page.
V1_UNLIMITED = 9223372036854771712

# Keys of a v1 memory.stat, in kernel order (this machine's /sys/fs/cgroup/memory/memory.stat).
V1_LOCAL_KEYS = (
    "cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback", "workingset_refault_anon",
    "workingset_refault_file", "swap", "swapcached", "pgpgin", "pgpgout", "pgfault", "pgmajfault",
    "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable",
)
# Control files of a v1 memory cgroup that evictd does not read: created empty in the root, tier and pod
# cgroups, so that listing a tier sees a real folder's worth of entries.
V1_MEMORY_STUBS = (
    "cgroup.clone_children", "cgroup.event_control", "memory.failcnt", "memory.force_empty",
    "memory.kmem.limit_in_bytes", "memory.kmem.usage_in_bytes", "memory.max_usage_in_bytes",
    "memory.memsw.limit_in_bytes", "memory.memsw.usage_in_bytes", "memory.move_charge_at_immigrate",
    "memory.numa_stat", "memory.oom_control", "memory.pressure_level", "memory.soft_limit_in_bytes",
    "memory.swappiness", "memory.use_hierarchy", "notify_on_release", "tasks",
)
V1_PIDS_STUBS = ("cgroup.clone_children", "cgroup.procs", "notify_on_release", "pids.events", "pids.max", "tasks")

# A pod mix like a busy node's: most pods burstable, some best-effort, a few guaranteed.
QOS_MIX = (("guaranteed", 0.1), ("burstable", 0.6), ("besteffort", 0.3))
PRIORITIES = (0, 0, 0, 1000, 100000)
NAMESPACES = ("default", "shop", "batch", "monitoring", "kube-system")
CONTAINERS_PER_POD = 2
# A volume: two files at the top and one in a sub-folder (so a cached walk stats two folders).
VOLUME_FILE_BYTES = (16 * KiB, 64 * KiB, 8 * KiB)
LOG_BYTES = 4 * KiB
# tmpfs: creating ~50 000 files there takes a second, on this machine's ext4 /tmp half a minute. Reading
# them back (what is measured) costs about the same on both once the ext4 metadata is cached.
SHM = "/dev/shm"
# Folder timestamps are set this far in the past: the disk-usage cache does not trust a folder listed within
# a second of its last change ("racy clean"), and the benchmark wants the steady state at once.
PAST_MTIME_S = 3600
# The machine's cgroup mount, for `real_cgroups`; the hierarchies a real node's tree is made in.
CGROUP_MOUNT = Path("/sys/fs/cgroup")
REAL_HIERARCHIES = ("memory", "pids")


def memory_stat(usage_bytes: int, inactive_file_bytes: int, limit_bytes: int) -> bytes:
    """Return a v1 memory.stat whose hierarchical inactive file pages are `inactive_file_bytes`."""
    cache = inactive_file_bytes + usage_bytes // 8
    rss = max(usage_bytes - cache, 0)
    local = {
        "cache": cache, "rss": rss, "mapped_file": cache // 4, "pgpgin": usage_bytes // 4096 * 3,
        "pgpgout": usage_bytes // 4096 * 2, "pgfault": usage_bytes // 1024, "inactive_anon": rss // 2,
        "active_anon": rss - rss // 2, "inactive_file": inactive_file_bytes,
        "active_file": cache - inactive_file_bytes,
    }
    lines = [f"{key} {local.get(key, 0)}" for key in V1_LOCAL_KEYS]
    lines += [f"hierarchical_memory_limit {limit_bytes}", f"hierarchical_memsw_limit {V1_UNLIMITED}"]
    lines += [f"total_{key} {local.get(key, 0)}" for key in V1_LOCAL_KEYS]
    return ("\n".join(lines) + "\n").encode()


@dataclass
class SyntheticNode:
    """A built synthetic node; `close()` removes it."""

    base: Path
    pods: list[Pod]
    pod_docs: list[dict[str, Any]]
    pod_cgroups: list[str] = field(default_factory=list)  # relative to a hierarchy root
    log_folders: list[Path] = field(default_factory=list)
    volumes: list[Path] = field(default_factory=list)
    real_base: str = ""  # the base cgroup in the machine's hierarchies; "" for a tree in the temporary folder

    @property
    def cgroup_root(self) -> Path:
        return CGROUP_MOUNT if self.real_base else self.base / "cgroup"

    @property
    def pods_cgroup(self) -> str:
        return f"{self.real_base}/kubepods" if self.real_base else "kubepods"

    @property
    def memory_root(self) -> Path:
        return self.cgroup_root / "memory"

    @property
    def pids_root(self) -> Path:
        return self.cgroup_root / "pids"

    @property
    def kubelet_root(self) -> Path:
        return self.base / "kubelet"

    @property
    def pod_logs_dir(self) -> Path:
        return self.base / "logs"

    @property
    def image_fs_path(self) -> Path:
        return self.base / "containerd"

    def layout(self) -> CgroupLayout:
        return CgroupLayout(version=1, root=self.cgroup_root, base=self.real_base)

    def set_root_usage(self, usage_bytes: int, inactive_file_bytes: int = 512 * MiB) -> None:
        """Rewrite the root cgroup's usage (to put the node under memory pressure or take it out)."""
        if self.real_base:
            raise ValueError("a node of real cgroups has the machine's root memory: it cannot be rewritten")
        _write_memory(self.memory_root, usage_bytes, inactive_file_bytes, V1_UNLIMITED)

    def move_pod_memory(self, step: int) -> None:
        """Rewrite every pod cgroup's memory usage to a value of its own that changes with `step` (readings that
        move from cycle to cycle, as on a real node)."""
        if self.real_base:
            raise ValueError("real cgroups' memory cannot be rewritten")
        for index, cgroup in enumerate(self.pod_cgroups):
            usage = (64 + (index * 7919 + step * 104729) % 256) * MiB + step * 4096 + index
            _write_memory(self.memory_root / cgroup, usage, usage // 8, V1_UNLIMITED)

    def floor_operations(self) -> list[tuple[str, str]]:
        """Return the file operations of one steady-state cycle of NodeStatsSource over this node.

        Kinds: ``read`` (open + one read + close), ``list`` (scandir, iterate), ``lstat``, ``stat``,
        ``statvfs``. Same files, same counts, nothing parsed.
        The pods' volumes and log folders are not read by the cycle: see `walk_operations`.
        """
        memory = str(self.memory_root)
        ops: list[tuple[str, str]] = []

        def memory_files(folder: str) -> None:
            ops.extend(("read", f"{folder}/{name}")
                       for name in ("memory.usage_in_bytes", "memory.stat", "memory.limit_in_bytes"))

        kubepods = f"{memory}/{self.pods_cgroup}"
        memory_files(memory)
        ops.append(("read", "/proc/meminfo"))
        ops.append(("stat", kubepods))
        memory_files(kubepods)
        for folder in (self.kubelet_root, self.image_fs_path, self.image_fs_path):
            ops.append(("stat", str(folder)))  # existing_ancestor
            ops.append(("statvfs", str(folder)))
        ops += [("read", "/proc/sys/kernel/pid_max"), ("read", "/proc/sys/kernel/threads-max"),
                ("read", "/proc/loadavg")]
        ops += [("list", kubepods), ("list", f"{kubepods}/burstable"), ("list", f"{kubepods}/besteffort")]
        for cgroup in self.pod_cgroups:
            memory_files(f"{memory}/{cgroup}")
            ops.append(("read", f"{self.pids_root}/{cgroup}/pids.current"))
        return ops

    def walk_operations(self) -> list[tuple[str, str]]:
        """Return the file operations of one steady-state pass of the disk walker (PodDiskWalker) over the
        pods' emptyDir volumes and log folders (kinds as in `floor_operations`)."""
        ops: list[tuple[str, str]] = []
        for pod, logs, volume in zip(self.pods, self.log_folders, self.volumes, strict=True):
            plugin = str(volume.parent)
            ops += [("stat", plugin), ("list_stat", plugin), ("lstat", str(volume)), ("lstat", f"{volume}/sub")]
            ops.append(("list", str(logs)))
            ops += [("lstat", str(logs / container)) for container in _container_names(pod)]
        return ops

    def close(self) -> None:
        if self.real_base:
            remove_real_cgroups(self.real_base)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> SyntheticNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_config(node: SyntheticNode, *, kubelet: dict[str, Any] | None = None,
                 evictd: dict[str, Any] | None = None, name: str = "evictd.yaml") -> Path:
    """Write a KubeletConfiguration + EvictdConfiguration stream pointing evictd at `node`; return its path.

    `kubelet` and `evictd` add or replace fields of the two documents (JSON is YAML, so no YAML writer).
    """
    kubelet_doc = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", **(kubelet or {})}
    evictd_doc = {
        "apiVersion": "evictd.io/v1alpha1",
        "kind": "EvictdConfiguration",
        "nodeName": "bench-node",
        "kubeletRootDir": str(node.kubelet_root),
        "podLogsDir": str(node.pod_logs_dir),
        "cgroupfsPath": str(node.cgroup_root),
        **({"cgroupRoot": "/" + node.real_base} if node.real_base else {}),
        "imageFsPath": str(node.image_fs_path),
        "containerFsPath": str(node.image_fs_path),
        "memcgWakeups": False,
        "psiWakeups": False,
        "logFormat": "json",
        "stateDir": str(node.base / "state"),  # the flight recording: never the machine's /var/lib/evictd
        **(evictd or {}),
    }
    path = node.base / name
    path.write_text(json.dumps(kubelet_doc) + "\n---\n" + json.dumps(evictd_doc) + "\n")
    return path


def _container_names(pod: Pod) -> list[str]:
    return sorted(container.name for container in pod.containers)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _write_memory(folder: Path, usage: int, inactive_file: int, limit: int) -> None:
    _write(folder / "memory.usage_in_bytes", b"%d\n" % usage)
    _write(folder / "memory.stat", memory_stat(usage, inactive_file, limit))
    _write(folder / "memory.limit_in_bytes", b"%d\n" % limit)


def _memory_cgroup(folder: Path, usage: int, inactive_file: int, limit: int, pids: list[int], *,
                   stubs: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    _write_memory(folder, usage, inactive_file, limit)
    _write(folder / "cgroup.procs", b"".join(b"%d\n" % pid for pid in pids))
    for name in V1_MEMORY_STUBS if stubs else ():
        _write(folder / name, b"")


def _pids_cgroup(folder: Path, tasks: int, *, stubs: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "pids.current", b"%d\n" % tasks)
    for name in V1_PIDS_STUBS if stubs else ():
        _write(folder / name, b"")


def _real_cgroup(cgroup: str) -> None:
    """Make the real cgroup `cgroup` (relative to the hierarchy roots) in the memory and pids hierarchies."""
    for hierarchy in REAL_HIERARCHIES:
        (CGROUP_MOUNT / hierarchy / cgroup).mkdir()


def remove_real_cgroups(base: str) -> None:
    """Remove the real cgroup `base` and every cgroup below it, bottom-up, in the memory and pids hierarchies
    (they hold no processes: nothing was ever moved in)."""
    for hierarchy in REAL_HIERARCHIES:
        top = CGROUP_MOUNT / hierarchy / base
        if top.exists():
            for dirpath, _, _ in os.walk(top, topdown=False):
                os.rmdir(dirpath)


def _pod_doc(index: int, uid: str, qos: str, rng: random.Random) -> dict[str, Any]:
    memory_mi = rng.choice((64, 128, 256, 512))
    containers = []
    for number in range(CONTAINERS_PER_POD):
        resources: dict[str, Any] = {}
        if qos == "guaranteed":
            amounts = {"cpu": "100m", "memory": f"{memory_mi}Mi", "ephemeral-storage": "1Gi"}
            resources = {"requests": amounts, "limits": amounts}
        elif qos == "burstable":
            resources = {"requests": {"cpu": "50m", "memory": f"{memory_mi}Mi", "ephemeral-storage": "256Mi"}}
        containers.append({"name": f"c{number}", "image": "registry.local/app:1", "resources": resources})
    namespace = NAMESPACES[index % len(NAMESPACES)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"app-{index:04d}", "namespace": namespace, "uid": uid, "generation": 1},
        "spec": {
            "nodeName": "bench-node",
            "priority": rng.choice(PRIORITIES),
            "terminationGracePeriodSeconds": 30,
            "containers": containers,
            "volumes": [{"name": "cache", "emptyDir": {}}],
        },
        "status": {"phase": "Running", "qosClass": {"guaranteed": "Guaranteed", "burstable": "Burstable",
                                                     "besteffort": "BestEffort"}[qos]},
    }


def default_parent() -> str | None:
    """Return /dev/shm when usable (tmpfs, an in-memory filesystem like cgroupfs), else the temp folder."""
    return SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK) else None


def build_node(pods: int, *, parent: str | None = None, seed: int = 1, real_cgroups: bool = False) -> SyntheticNode:
    """Build a synthetic node with `pods` pods in a new temporary folder (under `parent`, default
    `default_parent()`); with `real_cgroups`, its cgroups are real ones in this machine's v1 hierarchies."""
    rng = random.Random(seed)
    base = Path(tempfile.mkdtemp(prefix=f"evictd-bench-{pods}-", dir=parent or default_parent()))
    node = SyntheticNode(base=base, pods=[], pod_docs=[],
                         real_base=f"evictd-bench-{uuid.uuid4().hex[:12]}" if real_cgroups else "")
    try:
        _build(node, pods, rng)
    except BaseException:
        node.close()
        raise
    return node


def _build(node: SyntheticNode, pods: int, rng: random.Random) -> None:
    memory, pids_root = node.memory_root, node.pids_root
    real = bool(node.real_base)
    if real:
        _real_cgroup(node.real_base)
        for cgroup in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            _real_cgroup(f"{node.real_base}/{cgroup}")
    else:
        _memory_cgroup(memory, 6 * GiB, 1 * GiB, V1_UNLIMITED, [1, 2, 3])
        _pids_cgroup(pids_root, 300)
        pods_limit = 20 * GiB
        _memory_cgroup(memory / "kubepods", 4 * GiB, 512 * MiB, pods_limit, [])
        _pids_cgroup(pids_root / "kubepods", 0)
        for tier in ("burstable", "besteffort"):
            _memory_cgroup(memory / "kubepods" / tier, 2 * GiB, 256 * MiB, V1_UNLIMITED, [])
            _pids_cgroup(pids_root / "kubepods" / tier, 0)
    node.kubelet_root.mkdir()
    node.pod_logs_dir.mkdir()
    node.image_fs_path.mkdir()
    weights = [share for _, share in QOS_MIX]
    for index in range(pods):
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        qos = rng.choices([name for name, _ in QOS_MIX], weights)[0]
        doc = _pod_doc(index, uid, qos, rng)
        pod = pod_from_dict(doc)
        cgroup = f"{node.pods_cgroup}/pod{uid}" if qos == "guaranteed" else f"{node.pods_cgroup}/{qos}/pod{uid}"
        usage = rng.randrange(16, 768) * MiB
        limit = 2 * 512 * MiB if qos == "guaranteed" else V1_UNLIMITED
        if real:
            _real_cgroup(cgroup)
        else:
            _memory_cgroup(memory / cgroup, usage, usage // 10, limit, [])
            tasks = rng.randrange(1, 40)
            _pids_cgroup(pids_root / cgroup, tasks)
        # The sandbox (pause) container and the app containers, each a 64-hex cgroup with its own files.
        for _ in range(CONTAINERS_PER_POD + 1):
            container_id = f"{rng.getrandbits(256):064x}"
            if real:
                _real_cgroup(f"{cgroup}/{container_id}")
                continue
            # Container cgroups are listed by nobody in a cycle; their control-file stubs are left out to keep
            # building a 1000-pod node quick.
            _memory_cgroup(memory / cgroup / container_id, usage // 3, usage // 30, limit,
                           [rng.randrange(2, 32768)], stubs=False)
            _pids_cgroup(pids_root / cgroup / container_id, 1, stubs=False)
        volume = node.kubelet_root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "cache"
        (volume / "sub").mkdir(parents=True)
        _write(volume / "data-0", b"x" * VOLUME_FILE_BYTES[0])
        _write(volume / "data-1", b"x" * VOLUME_FILE_BYTES[1])
        _write(volume / "sub" / "data-2", b"x" * VOLUME_FILE_BYTES[2])
        logs = node.pod_logs_dir / f"{pod.namespace}_{pod.name}_{uid}"
        for name in _container_names(pod):
            (logs / name).mkdir(parents=True)
            _write(logs / name / "0.log", b"l" * LOG_BYTES)
        node.pods.append(pod)
        node.pod_docs.append(doc)
        node.pod_cgroups.append(cgroup)
        node.log_folders.append(logs)
        node.volumes.append(volume)
    past = time.time() - PAST_MTIME_S
    for folder in (node.kubelet_root, node.pod_logs_dir):
        for dirpath, _, _ in os.walk(folder):
            os.utime(dirpath, (past, past))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--real-cgroups", action="store_true", help="real cgroups in the machine's v1 hierarchies")
    args = parser.parse_args()
    started = time.perf_counter()
    with build_node(args.pods, real_cgroups=args.real_cgroups) as node:
        files = sum(len(names) for _, _, names in os.walk(node.base))
        folders = sum(len(dirs) for _, dirs, _ in os.walk(node.base))
        print(f"{args.pods} pods: {files} files, {folders} folders under {node.base} "
              f"(built in {time.perf_counter() - started:.2f} s); "
              f"{len(node.floor_operations())} file operations per cycle")


if __name__ == "__main__":
    main()

"""The cgroup filesystem adapter: memory readings, process counts, pod and container discovery.

Over 500 lines because it is the one mapping from cgroupfs (both versions, both drivers) to readings: layouts,
discovery, reads and parsing share the path rules and the one OSError -> SampleError place.

Reads what the kubelet (through cAdvisor and runc's cgroup library) reads, for v1 and v2 and the ``cgroupfs`` and
``systemd`` drivers (``CgroupLayout``; v2 only where ``cgroup.controllers`` lists ``memory``; paths relative to the
hierarchy root, ``base`` the kubelet's ``cgroupRoot``). Memory as cAdvisor's ``setMemoryStats``: working set =
usage - inactive_file, floored at 0; a limit above 2**62 is unlimited (``isMemoryUnlimited``); the v2 root's usage is
``anon + file`` of its ``memory.stat`` (``rootStatsFromMeminfo``, not kubernetes#118916's ``MemTotal - MemFree``).

Invariants: every read failure raises ``SampleError(path, reason)``, nothing guessed (values are ParseUint-valid);
each reading is a few small reads, through kept descriptors (`evictd.adapters.kept_files`) on a cgroup mount with
open + read as fallback (`end_cycle`, `close` release them); nothing is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

from evictd.adapters.kept_files import KeptFiles, keeps_files_in, kept_files_cap
from evictd.core.errors import ConfigError, SampleError
from evictd.core.memcg import UNLIMITED_ABOVE_BYTES, working_set_from  # a limit above it means "no limit"
from evictd.core.settled import settled_usage

# Values are Go uint64s upstream; anything at or above this is garbage, not a reading.
UINT64_DIGITS = len(str(2**64 - 1))
UINT64_LIMIT = 2**64

# cgroupfs files are tiny (memory.stat is ~2 KiB); one read of this size nearly always gets all.
READ_CHUNK_BYTES = 16384

# Malformed content is quoted in errors up to this many bytes, so one log line stays readable.
MAX_SHOWN_BYTES = 60

# Sub-folders of the cgroup mount holding the v1 hierarchies evictd reads.
V1_MEMORY_HIERARCHY = "memory"
V1_PIDS_HIERARCHY = "pids"

QOS_GUARANTEED = "guaranteed"
QOS_BURSTABLE = "burstable"
QOS_BESTEFFORT = "besteffort"

# The cgroup parenting every pod (pkg/kubelet/cm defaultNodeAllocatableCgroupName; a slice with systemd).
DRIVER_TO_PODS_CGROUP = {"cgroupfs": "kubepods", "systemd": "kubepods.slice"}

# The QoS-tier cgroups under the pods cgroup. Guaranteed pods sit directly in the pods cgroup.
DRIVER_TO_QOS_CGROUPS = {
    "cgroupfs": {QOS_BURSTABLE: "burstable", QOS_BESTEFFORT: "besteffort"},
    "systemd": {QOS_BURSTABLE: "kubepods-burstable.slice", QOS_BESTEFFORT: "kubepods-besteffort.slice"},
}

# Pod cgroup names per driver and tier; group 1 is the UID (systemd writes '_' for '-'; static pods' are md5 hex).
DRIVER_TO_POD_PATTERNS = {
    "cgroupfs": dict.fromkeys((QOS_GUARANTEED, QOS_BURSTABLE, QOS_BESTEFFORT),
                              re.compile(r"pod([0-9A-Za-z][0-9A-Za-z-]*)")),
    "systemd": {
        QOS_GUARANTEED: re.compile(r"kubepods-pod([0-9A-Za-z][0-9A-Za-z_]*)\.slice"),
        QOS_BURSTABLE: re.compile(r"kubepods-burstable-pod([0-9A-Za-z][0-9A-Za-z_]*)\.slice"),
        QOS_BESTEFFORT: re.compile(r"kubepods-besteffort-pod([0-9A-Za-z][0-9A-Za-z_]*)\.slice"),
    },
}

# Container cgroup names per driver; group 1 is the 64-hex ID (bare, "crio-<id>" or "<prefix>-<id>.scope").
DRIVER_TO_CONTAINER_PATTERN = {
    "cgroupfs": re.compile(r"(?:crio-)?([0-9a-f]{64})"),
    "systemd": re.compile(r"(?:cri-containerd|crio|docker)-([0-9a-f]{64})\.scope"),
}

# memory.stat keys: v1's hierarchical inactive file, v2's, and the two runc sums for the v2 root's usage.
V1_INACTIVE_FILE_KEY = b"total_inactive_file"
V2_INACTIVE_FILE_KEY = b"inactive_file"
# Anonymous memory (cAdvisor's rss): what a pod grew by when the growth is no page cache (`evictd.core.pod_growth`).
V1_ANON_KEY = b"total_rss"
V2_ANON_KEY = b"anon"
V2_ROOT_USAGE_KEYS = (b"anon", b"file")
# v1's memory.stat keys of what usage holds besides kernel memory: anonymous memory and page cache (shmem in it).
V1_USAGE_PART_KEYS = (b"total_rss", b"total_cache")
# A v1 cgroup's kernel memory, which its usage counts too.
V1_KMEM_USAGE_FILE = "memory.kmem.usage_in_bytes"
# A flushed memory.stat may leave this out of usage per CPU: charge stock, stat batch, flush threshold (64 pages each).
UNFOLDED_SLACK_PER_CPU_BYTES = 3 * 64 * 4096
# And this for the whole cgroup: usage moving between its reads; more is statistics not folded in yet (core/settled).
UNFOLDED_MARGIN_BYTES = 2 << 20


def unfolded_slack_bytes(cpus: int | None = None) -> int:
    """What a settled memory.stat may still leave out on `cpus` CPUs (None: this machine's online CPUs)."""
    return UNFOLDED_MARGIN_BYTES + (cpus or os.cpu_count() or 1) * UNFOLDED_SLACK_PER_CPU_BYTES


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    """Where the cgroup hierarchies are (``root``, ``version`` 1 or 2) and how the kubelet names its cgroups
    (``driver``, ``base``: its ``cgroupRoot``). ConfigError for a ``base`` that leaves the hierarchy."""

    version: int
    root: Path
    driver: str = "cgroupfs"
    base: str = ""

    def __post_init__(self) -> None:
        if ".." in self.base.split("/"):
            raise ConfigError("must stay inside the cgroup hierarchy (no '..')", key="cgroupRoot", value=self.base)
        # Normalised once here so that every path built later is a plain join.
        object.__setattr__(self, "root", Path(self.root))
        object.__setattr__(self, "base", self.base.strip("/"))

    @property
    def memory_hierarchy(self) -> Path:
        return self.root / V1_MEMORY_HIERARCHY if self.version == 1 else self.root

    @property
    def pids_hierarchy(self) -> Path:
        return self.root / V1_PIDS_HIERARCHY if self.version == 1 else self.root


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """Memory of one cgroup; ``limit_bytes`` is None when the cgroup is unlimited; ``unfolded_bytes``: of the v1 pods
    cgroup, the usage its memory.stat does not account for yet beyond the kernel's per-CPU batches (0: settled), None
    elsewhere or when a figure is missing; ``anon_bytes``: its anonymous memory (None: not printed, cgroup v1's
    settled reading, or a working set read alone)."""

    usage_bytes: int
    inactive_file_bytes: int
    working_set_bytes: int
    limit_bytes: int | None
    unfolded_bytes: int | None = None
    anon_bytes: int | None = None


# What `pod_figures_many` reads of a v1 pod cgroup: usage, memory.stat, limit, pids.current.
PodFiles = tuple[str, str, str, str]
# A pod's figures (`CgroupReader.pod_figures_many`): usage, working set, its process count or why it is unknown, and
# its anonymous memory (None: not read).
PodFigures = tuple[int, int, int | SampleError, int | None]
# Pods read per taking of the kept descriptors' lock (~0.5 ms of preads: what a memory watch's look may wait).
POD_FIGURES_BATCH = 32


@dataclass(frozen=True, slots=True)
class PodCgroup:
    """A pod's cgroup: its path relative to the hierarchy root and its QoS tier (lower-case)."""

    path: str
    qos: str


def detect_cgroup_layout(
    root: str | Path = "/sys/fs/cgroup", driver: str = "cgroupfs", *, base: str = ""
) -> CgroupLayout:
    """Return the layout of the cgroup mount at ``root``: v2 if ``cgroup.controllers`` lists ``memory``, else v1
    (needs ``root/memory``). SampleError when neither has a memory controller, ConfigError for a bad driver or base."""
    root_path = Path(root)
    controllers_path = str(root_path / "cgroup.controllers")
    controllers = read_file_if_present(controllers_path)
    if controllers is not None and b"memory" in controllers.split():
        return CgroupLayout(version=2, root=root_path, driver=driver, base=base)
    memory_path = root_path / V1_MEMORY_HIERARCHY
    if not memory_path.is_dir():
        raise SampleError(
            str(memory_path),
            "no memory controller: not a v1 memory hierarchy, and no v2 cgroup.controllers with memory",
        )
    return CgroupLayout(version=1, root=root_path, driver=driver, base=base)


class CgroupReader:
    """Reads memory and process counts of cgroups and discovers pod and container cgroups; call `end_cycle` after
    each cycle and `close` at the end (kept descriptors, at most ``kept_cap``)."""

    __slots__ = ("_container_pattern", "_keep_memory", "_keep_pids", "_kept", "_memory_dir", "_pids_dir",
                 "_pod_files", "_pod_patterns", "_pods_cgroup", "_qos_cgroups", "_read_memory", "_seen_pods",
                 "_unfolded_slack", "_v1", "layout")

    def __init__(self, layout: CgroupLayout, *, kept_cap: int | None = None, cpus: int | None = None) -> None:
        self.layout = layout
        self._unfolded_slack = unfolded_slack_bytes(cpus)  # `cpus`: online CPUs by default
        self._memory_dir = str(layout.memory_hierarchy)
        self._pids_dir = str(layout.pids_hierarchy)
        self._qos_cgroups = DRIVER_TO_QOS_CGROUPS[layout.driver]
        self._pod_patterns = DRIVER_TO_POD_PATTERNS[layout.driver]
        self._container_pattern = DRIVER_TO_CONTAINER_PATTERN[layout.driver]
        self._v1 = layout.version == 1
        self._pods_cgroup = join_cgroup(layout.base, DRIVER_TO_PODS_CGROUP[layout.driver])
        self._kept = KeptFiles(kept_files_cap() if kept_cap is None else kept_cap)
        self._keep_memory = keeps_files_in(self._memory_dir)
        self._read_memory: Callable[[str], bytes] = self._read_kept if self._keep_memory else read_file
        self._keep_pids = keeps_files_in(self._pids_dir)
        # (parent, folder name) -> (pod UID, PodCgroup) of the last listing, reused (a pod's folder keeps its name),
        # and the files `pod_figures_many` reads of each (`_pod_files` by cgroup path).
        self._seen_pods: dict[tuple[str, str], tuple[str, PodCgroup, PodFiles | None]] = {}
        self._pod_files: dict[str, PodFiles] = {}

    def end_cycle(self) -> None:
        """Close the kept descriptors of files not read since the previous call (cgroups that went away)."""
        self._kept.sweep()

    def close(self) -> None:
        """Close every kept descriptor (reading again opens them again)."""
        self._kept.close()

    def _read_kept(self, path: str) -> bytes:
        # Only `memory` reads through this: KEPT_FILE_NAMES (usage, stat, limit) and a signal cgroup's kmem usage.
        data = self._kept.read(path)
        return data if data is not None else read_file(path)

    # --- Readings ---------------------------------------------------------------------------------

    def memory(self, cgroup: str, *, working_set_only: bool = False) -> MemoryReading:
        """Return the memory reading of ``cgroup`` (``""`` = root); `working_set_only`: one usage read, no limit.
        Raises SampleError naming the file that is missing, unreadable or malformed."""
        folder = cgroup_folder(self._memory_dir, cgroup)
        # Memory signal cgroups (root, pods) bracket memory.stat with two usage reads (`settled_usage`); pods rank only.
        settled = not working_set_only and (folder == self._memory_dir or cgroup == self._pods_cgroup)
        if self._v1 and not settled:
            with_limit = not working_set_only
            usage, inactive_file, limit, anon = self._v1_reading(_v1_files(folder, with_limit=with_limit),
                                                                 with_limit=with_limit)
        elif self._v1:
            read = self._read_memory
            # The pods cgroup's usage memory.stat does not count yet; the root's: none (docs/kubelet-differences.md).
            usage, inactive_file, unfolded = v1_settled_figures(folder, read, accounted=folder != self._memory_dir)
            path = folder + "/memory.limit_in_bytes"
            limit = _limit(_uint(path, read(path)))
            return MemoryReading(usage_bytes=usage, inactive_file_bytes=inactive_file,
                                 working_set_bytes=working_set_from(usage, inactive_file), limit_bytes=limit,
                                 unfolded_bytes=None if unfolded is None else max(0, unfolded - self._unfolded_slack))
        elif folder == self._memory_dir:  # the v2 root: runc's anon + file of memory.stat, no limit
            path = folder + "/memory.stat"
            data = self._read_memory(path)
            usage = sum(flat_keyed_value(path, data, key) for key in V2_ROOT_USAGE_KEYS)
            inactive_file = flat_keyed_value(path, data, V2_INACTIVE_FILE_KEY)
            anon = None if working_set_only else optional_keyed_value(path, data, V2_ANON_KEY)
            limit = None
        else:
            read = self._read_memory
            path = folder + "/memory.current"
            usage = _uint(path, read(path))
            stat_path = folder + "/memory.stat"
            stat = read(stat_path)
            inactive_file = flat_keyed_value(stat_path, stat, V2_INACTIVE_FILE_KEY)
            anon = None if working_set_only else optional_keyed_value(stat_path, stat, V2_ANON_KEY)
            if settled:
                usage = settled_usage(usage, _uint(path, read(path)))
            limit = None if working_set_only else _v2_limit(folder + "/memory.max", read)
        return MemoryReading(usage_bytes=usage, inactive_file_bytes=inactive_file,
                             working_set_bytes=working_set_from(usage, inactive_file), limit_bytes=limit,
                             anon_bytes=anon)

    def pod_figures_many(self, cgroups: Sequence[str]) -> list[PodFigures | SampleError]:
        """The usage, working set and process count of each of `cgroups`' pods, in order, or the SampleError that
        `memory`/`process_count` would raise. The cycle's hot path: `POD_FIGURES_BATCH` pods' kept files are read
        under one lock taking, then parsed in the order `memory` and `process_count` read them."""
        results: list[PodFigures | SampleError] = []
        known = self._pod_files
        for start in range(0, len(cgroups), POD_FIGURES_BATCH):
            batch = cgroups[start:start + POD_FIGURES_BATCH]
            batch_files = [known.get(cgroup) or self._pod_files_of(cgroup) for cgroup in batch]
            got = self._kept.read_many([path for files in batch_files if files is not None for path in files])
            at = 0
            for cgroup, files in zip(batch, batch_files, strict=True):
                try:
                    if files is None:
                        results.append(self._pod_figures_read_apart(cgroup))
                        continue
                    data = got[at:at + 4]
                    at += 4
                    usage, inactive_file, _, anon = self._v1_parse(files, data, with_limit=True)
                    try:
                        count: int | SampleError = self._process_count_of(cgroup, files[3], data[3])
                    except SampleError as exc:
                        count = exc
                    results.append((usage, working_set_from(usage, inactive_file), count, anon))
                except SampleError as exc:
                    results.append(exc)
        return results

    def _pod_figures_read_apart(self, cgroup: str) -> PodFigures:
        """The figures of a cgroup whose files are not kept together: read as `memory` and `process_count` read."""
        reading = self.memory(cgroup)
        try:
            count: int | SampleError = self.process_count(cgroup)
        except SampleError as exc:
            count = exc
        return reading.usage_bytes, reading.working_set_bytes, count, reading.anon_bytes

    def _pod_files_of(self, cgroup: str) -> PodFiles | None:
        """The files `pod_figures_many` reads of a v1 pod `cgroup` at once; None: read as `memory` does."""
        folder = cgroup_folder(self._memory_dir, cgroup)
        if (not self._v1 or folder == self._memory_dir or cgroup == self._pods_cgroup
                or not self._keep_memory or not self._keep_pids):
            return None
        usage, stat, limit = _v1_files(folder, with_limit=True)
        return usage, stat, limit, self._pids_dir + folder[len(self._memory_dir):] + "/pids.current"  # checked above

    def _v1_reading(self, files: tuple[str, ...], *,
                    with_limit: bool) -> tuple[int, int, int | None, int | None]:
        """Usage, total_inactive_file, limit and total_rss (the last two with `with_limit`, else None) of a v1 memory
        cgroup, each file once."""
        got = self._kept.read_many(files) if self._keep_memory else (None,) * len(files)
        return self._v1_parse(files, got, with_limit=with_limit)

    @staticmethod
    def _v1_parse(files: Sequence[str], got: Sequence[bytes | None], *,
                  with_limit: bool) -> tuple[int, int, int | None, int | None]:
        """Usage, total_inactive_file, limit and total_rss (the last two with `with_limit`, else None) from `files` and
        what kept descriptors read (None: open + read)."""
        # The usage parsed before memory.stat is read, as `v1_usage_and_inactive_file` does.
        path, data = files[0], got[0]
        usage = _uint(path, read_file(path) if data is None else data)
        path, data = files[1], got[1]
        stat = read_file(path) if data is None else data
        inactive_file = flat_keyed_value(path, stat, V1_INACTIVE_FILE_KEY)
        if not with_limit:  # the memory watch's look: the working set alone
            return usage, inactive_file, None, None
        anon = optional_keyed_value(path, stat, V1_ANON_KEY)
        path, data = files[2], got[2]
        return usage, inactive_file, _limit(_uint(path, read_file(path) if data is None else data)), anon

    def process_count(self, cgroup: str) -> int:
        """Return the tasks in ``cgroup`` and below: ``pids.current``, or without one the ``cgroup.procs`` below
        (tasks vs processes, as cAdvisor's ``ProcessCount``)."""
        pids_current = cgroup_folder(self._pids_dir, cgroup) + "/pids.current"
        return self._process_count_of(cgroup, pids_current, self._kept.read(pids_current) if self._keep_pids else None)

    def _process_count_of(self, cgroup: str, pids_current: str, data: bytes | None) -> int:
        """`process_count` of `cgroup` from its ``pids.current`` path and what its kept descriptor read (None: open)."""
        if data is None:
            data = read_file_if_present(pids_current)
        if data is not None:
            return _uint(pids_current, data)
        return _count_procs_below(cgroup_folder(self._memory_dir, cgroup))

    # --- Discovery --------------------------------------------------------------------------------

    def pods_cgroup(self) -> str:
        """Return the cgroup that parents all pods: ``kubepods`` or ``kubepods.slice`` under ``base``."""
        return self._pods_cgroup

    def has_pods_cgroup(self) -> bool:
        """Return True when the pods cgroup exists (False on a machine where no kubelet manages pods)."""
        return os.path.isdir(cgroup_folder(self._memory_dir, self.pods_cgroup()))

    def other_driver_pods_cgroup(self) -> tuple[str, str] | None:
        """Return (driver, pods cgroup) of the other cgroup driver when its pods cgroup exists here: a kubelet
        configured with that driver runs this node's pods, not the one evictd was told of."""
        for driver, name in DRIVER_TO_PODS_CGROUP.items():
            cgroup = join_cgroup(self.layout.base, name)
            if driver != self.layout.driver and os.path.isdir(cgroup_folder(self._memory_dir, cgroup)):
                return driver, cgroup
        return None

    def pod_cgroups(self) -> dict[str, PodCgroup]:
        """Return pod UID (dashed) -> its cgroup for every pod cgroup on the node (Guaranteed in the pods cgroup,
        others in their tier's). SampleError if the pods cgroup or a tier cgroup cannot be listed."""
        pods = self._pods_cgroup
        found: dict[str, PodCgroup] = {}
        seen: dict[tuple[str, str], tuple[str, PodCgroup, PodFiles | None]] = {}
        files: dict[str, PodFiles] = {}
        names = child_cgroups(cgroup_folder(self._memory_dir, pods))
        self._collect_pods(pods, names, QOS_GUARANTEED, found, seen, files)
        for qos, tier_name in self._qos_cgroups.items():
            if tier_name in names:
                tier = join_cgroup(pods, tier_name)
                self._collect_pods(tier, child_cgroups(cgroup_folder(self._memory_dir, tier)), qos, found, seen, files)
        self._seen_pods = seen  # only this listing's: the folders of pods gone are forgotten
        self._pod_files = files
        return found

    def pod_folder(self, pod_uid: str) -> str | None:
        """The folder of the pod's cgroup in the memory hierarchy (None: the node has no cgroup for that pod).
        Raises SampleError if the pods cgroup cannot be listed."""
        pod = self.pod_cgroups().get(pod_uid)
        return None if pod is None else cgroup_folder(self._memory_dir, pod.path)

    def container_cgroups(self, pod_cgroup: str) -> dict[str, str]:
        """Return container ID -> cgroup path under ``pod_cgroup``; SampleError if it cannot be listed."""
        match = self._container_pattern.fullmatch
        found: dict[str, str] = {}
        for name in child_cgroups(cgroup_folder(self._memory_dir, pod_cgroup)):
            hit = match(name)
            if hit is not None:
                found[hit.group(1)] = join_cgroup(pod_cgroup, name)
        return found

    def _collect_pods(self, parent: str, names: frozenset[str], qos: str, found: dict[str, PodCgroup],
                      seen: dict[tuple[str, str], tuple[str, PodCgroup, PodFiles | None]],
                      files: dict[str, PodFiles]) -> None:
        """Add the pods among `names` (children of `parent`, of tier `qos`) to `found`, `seen` and `files`."""
        match = self._pod_patterns[qos].fullmatch
        systemd = self.layout.driver == "systemd"
        last = self._seen_pods
        for name in names:
            key = (parent, name)
            known = last.get(key)
            if known is None:
                hit = match(name)
                if hit is None:
                    continue
                uid = hit.group(1).replace("_", "-") if systemd else hit.group(1)
                path = join_cgroup(parent, name)
                known = (uid, PodCgroup(path=path, qos=qos), self._pod_files_of(path))
            seen[key] = known
            found[known[0]] = known[1]
            if known[2] is not None:
                files[known[1].path] = known[2]


# --- File access: the one place where OSError becomes SampleError. --------------------------------


_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def v1_hierarchy_root(folder: str) -> bool:
    """True when `folder` is the root of its cgroup v1 hierarchy: only the root holds ``release_agent``."""
    return os.path.exists(folder + "/release_agent")


def read_file(path: str) -> bytes:
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise SampleError(path, _reason(exc)) from exc
    return _read_and_close(path, fd)


def read_file_if_present(path: str) -> bytes | None:
    """Return the file's content, or None if it does not exist (other failures raise SampleError)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SampleError(path, _reason(exc)) from exc
    return _read_and_close(path, fd)


def _read_and_close(path: str, fd: int) -> bytes:
    """Return everything `fd` (opened on `path`) holds, and close it; raises SampleError."""
    try:
        data = os.read(fd, READ_CHUNK_BYTES)
        # cgroupfs (seq_file) hands out everything it has up to the buffer size in one read.
        if len(data) < READ_CHUNK_BYTES:
            return data
        chunks = [data]
        while chunk := os.read(fd, READ_CHUNK_BYTES):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise SampleError(path, _reason(exc)) from exc
    finally:
        os.close(fd)


def _v1_files(folder: str, *, with_limit: bool) -> tuple[str, ...]:
    """The files a v1 memory reading of `folder` reads, in order: usage, memory.stat and (`with_limit`) limit."""
    return (folder + "/memory.usage_in_bytes", folder + "/memory.stat",
            *((folder + "/memory.limit_in_bytes",) if with_limit else ()))


def v1_usage(folder: str, read: Callable[[str], bytes] = read_file, name: str = "memory.usage_in_bytes") -> int:
    """Return a v1 memory cgroup folder's ``memory.usage_in_bytes`` (or the usage file `name`; one read by `read`).
    Raises SampleError naming the file."""
    path = folder + "/" + name
    return _uint(path, read(path))


def v1_usage_and_inactive_file(folder: str, read: Callable[[str], bytes] = read_file) -> tuple[int, int]:
    """Return a v1 folder's usage and ``total_inactive_file`` (two reads: what a memcg firing is judged on)."""
    usage = v1_usage(folder, read)
    path = folder + "/memory.stat"
    return usage, flat_keyed_value(path, read(path), V1_INACTIVE_FILE_KEY)


def v1_settled_usage_and_inactive_file(folder: str, read: Callable[[str], bytes] = read_file) -> tuple[int, int]:
    """`v1_usage_and_inactive_file` with usage read again after memory.stat, the lower returned
    (`settled_usage`). Raises SampleError naming the file."""
    usage, inactive_file = v1_usage_and_inactive_file(folder, read)
    return settled_usage(usage, v1_usage(folder, read)), inactive_file


def v1_settled_figures(folder: str, read: Callable[[str], bytes] = read_file, *,
                       accounted: bool) -> tuple[int, int, int | None]:
    """`v1_settled_usage_and_inactive_file`, and (`accounted`: the pods cgroup) the part of that usage memory.stat
    does not account for: usage less kernel memory, ``total_rss`` and ``total_cache`` (< 0: it still counts memory
    gone); None when not `accounted` or a figure is missing. Raises SampleError naming the file."""
    usage = v1_usage(folder, read)
    stat_path = folder + "/memory.stat"
    stat = read(stat_path)
    inactive_file = flat_keyed_value(stat_path, stat, V1_INACTIVE_FILE_KEY)
    kernel: int | None = None
    if accounted:
        try:
            kernel = v1_usage(folder, read, V1_KMEM_USAGE_FILE)
        except SampleError:  # a kernel without v1 kernel memory accounting: no such figure
            kernel = None
    usage = settled_usage(usage, v1_usage(folder, read))
    if kernel is None:
        return usage, inactive_file, None
    try:
        parts = sum(flat_keyed_value(stat_path, stat, key) for key in V1_USAGE_PART_KEYS)
    except SampleError:
        return usage, inactive_file, None
    return usage, inactive_file, usage - kernel - parts


@overload
def child_cgroups(folder: str) -> frozenset[str]: ...
@overload
def child_cgroups(folder: str, *, missing_ok: bool) -> frozenset[str] | None: ...
def child_cgroups(folder: str, *, missing_ok: bool = False) -> frozenset[str] | None:
    """Return the names of the child folders (child cgroups) of ``folder``."""
    try:
        with os.scandir(folder) as entries:
            return frozenset(entry.name for entry in entries if entry.is_dir(follow_symlinks=False))
    except OSError as exc:
        if missing_ok and isinstance(exc, FileNotFoundError):
            return None
        raise SampleError(folder, _reason(exc)) from exc


def _count_procs_below(folder: str) -> int:
    """Count the PIDs in cgroup.procs of ``folder`` and of every cgroup below it."""
    procs_path = folder + "/cgroup.procs"
    total = _count_pids(procs_path, read_file(procs_path))
    stack = [folder + "/" + name for name in child_cgroups(folder)]
    while stack:
        child = stack.pop()
        # A child removed meanwhile held no processes (only empty cgroups can go): skipping it is exact.
        data = read_file_if_present(child + "/cgroup.procs")
        names = child_cgroups(child, missing_ok=True) if data is not None else None
        if data is None or names is None:
            continue
        total += _count_pids(child + "/cgroup.procs", data)
        stack.extend(child + "/" + name for name in names)
    return total


def _count_pids(path: str, data: bytes) -> int:
    pids = data.split()
    for pid in pids:
        if not pid.isdigit():
            raise SampleError(path, f"not a PID list: {_shown(data)}")
    return len(pids)


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# --- Parsing --------------------------------------------------------------------------------------


def _uint(path: str, raw: bytes) -> int:
    text = raw.strip()
    # bytes.isdigit() is ASCII-only and rejects signs, spaces and '_', which int() would accept.
    if not text.isdigit():
        raise SampleError(path, f"not an unsigned integer: {_shown(raw)}")
    if len(text) > UINT64_DIGITS:  # no kernel writes such a number (and int() refuses past 4300 digits)
        raise SampleError(path, f"out of the uint64 range: {_shown(raw)}")
    value = int(text)
    if value >= UINT64_LIMIT:
        raise SampleError(path, f"out of the uint64 range: {_shown(raw)}")
    return value


def uint_value(path: str, raw: bytes) -> int:
    """Return the unsigned integer a single-value cgroup file (`path`, read as `raw`) holds; raises SampleError."""
    return _uint(path, raw)


def flat_keyed_value(path: str, data: bytes, key: bytes) -> int:
    """Return the value of ``key`` in a flat-keyed file (``memory.stat``) without splitting it all."""
    if data.startswith(key + b" "):
        start = len(key) + 1
    else:
        # The leading newline keeps "inactive_file" from matching inside "total_inactive_file".
        needle = b"\n" + key + b" "
        at = data.find(needle)
        if at < 0:
            raise SampleError(path, f"no {key.decode()} line")
        start = at + len(needle)
    end = data.find(b"\n", start)
    return _uint(path, data[start:] if end < 0 else data[start:end])


def has_key(data: bytes, key: bytes) -> bool:
    """Whether a flat-keyed file (``memory.stat``) has a ``key`` line."""
    return data.startswith(key + b" ") or b"\n" + key + b" " in data


def optional_keyed_value(path: str, data: bytes, key: bytes) -> int | None:
    """`flat_keyed_value`, or None where the file has no ``key`` line (a figure only some decisions use)."""
    return flat_keyed_value(path, data, key) if has_key(data, key) else None


def _limit(value: int) -> int | None:
    return None if value > UNLIMITED_ABOVE_BYTES else value


def _v2_limit(path: str, read: Callable[[str], bytes]) -> int | None:
    raw = read(path)
    if raw.strip() == b"max":
        return None
    return _limit(_uint(path, raw))


# --- Paths ----------------------------------------------------------------------------------------


def cgroup_folder(hierarchy: str, cgroup: str) -> str:
    relative = cgroup.strip("/")
    if not relative:
        return hierarchy
    if ".." in relative and ".." in relative.split("/"):
        raise SampleError(cgroup, "cgroup path must stay inside the hierarchy (no '..')")
    return hierarchy + "/" + relative


def join_cgroup(parent: str, child: str) -> str:
    return f"{parent}/{child}" if parent else child


def _shown(raw: bytes) -> str:
    shown = repr(raw[:MAX_SHOWN_BYTES])
    return shown + "..." if len(raw) > MAX_SHOWN_BYTES else shown

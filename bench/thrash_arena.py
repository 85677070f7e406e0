"""The thrash arena: a node whose working set lives in file pages stalls while `memory.available` looks fine.

Issue #27, item 2. A small "node" is made inside this machine, in the cgroup v1 `memory` and `pids` hierarchies,
as a kubelet with the cgroupfs driver lays its pods out:

    evictd-arena-<random>/kubepods               memory.limit_in_bytes = the arena (--limit-mib, 1024)
    evictd-arena-<random>/kubepods/burstable/pod<uid>/<64-hex container id>   one per pod

with each pod's log folder (`<podLogsDir>/arena_<name>_<uid>/<container>/0.log`); `evictd run` is pointed at it
(`cgroupRoot` = the arena) and measures the pods there. The pods cgroup's limit plays the node's
allocatable memory: the kubelet's `allocatableMemory.available` (limit - (usage - total_inactive_file)) is the
arena's own `memory.available`. Two pods:

* `arena/reader`: two processes (--readers) read a file on disk (--file-mib, 640, in /var/tmp) page after page
  through mmap, in a loop; its working set is page cache. It reads the file once into the cache before the window.
* `arena/grower`: from the window's start grows anonymous memory (--grow-mib-per-s, 16 MiB a second, every page
  written) to --grow-to-mib (448), then holds. Past `limit - file` it squeezes the reader's pages out: a loop
  over more file than fits misses on every page (each fault reclaims a page and refaults another), and the
  machine's memory stall (PSI) climbs while the arena's memory keeps being "available" (inactive file pages).

Each variant runs in turn on a fresh arena, for a fixed window (--seconds, 60) from the grower's start:
* `kernel`: nothing watching (the kernel alone);
* `kubelet`: `evictd run` with the kubelet's default for memory, `memory.available<100Mi`, scaled from this
  machine's memory to the arena (100Mi x limit / MemTotal: 4.3 MiB for 1 GiB of 23.5 GiB), and
  `enforceNodeAllocatable: [pods]`, which copies it to `allocatableMemory.available` of the arena; housekeeping
  10 s, memcg and PSI wake-ups as shipped;
* `stall`: the same plus evictd's stall signal (`stallEvictionHard: evictd.io/memory.stall.<kind>: <share>`,
  --stall, default `some: 20%`). On cgroup v1 there is no per-cgroup PSI: the signal is the node-wide
  /proc/pressure/memory, which other work on this machine moves too (its level before each window is printed);
* `earlyoom`: Debian's earlyoom 1.7 with its default (SIGTERM at 10 % of memory available) scaled to the arena:
  earlyoom watches only the machine's MemAvailable, so `-M` is set to MemAvailable at the window's start minus
  90 % of the arena (`-m 99 -s 99` keep its percentage defaults from applying; this machine has no swap).

Who stops a pod. evictd runs as deployed, with the Kubernetes API: the test API server (tests/kube/apiserver.py)
in this process holds the node and the two pods (burstable, no memory requests, the UIDs of their cgroups), and
evictd evicts through it (status, DELETE, events) and then waits for the pod's cleanup, as the kubelet does. The
harness plays the kubelet: when the API marks an arena pod for deletion, it SIGKILLs every process in the pod's
cgroup and removes the pod from the API (which ends evictd's wait). earlyoom runs with `--dryrun` (it picks its
victim among all of the machine's processes): the harness SIGKILLs the victim's pod if it is in the arena, and
reports a victim outside the arena without touching it. Nothing outside the arena is ever stopped.

Measured per variant over the window: the machine's PSI memory `some` and `full` totals (seconds stalled, from
/proc/pressure/memory), the peak avg10 of both, kernel OOM kills in the arena (`oom_kill` of the pods cgroup's
memory.oom_control) and on the machine (`oom_kill` of /proc/vmstat: other work's kills count there), the lowest
`allocatableMemory.available` of the arena (a 100 ms sampler), which pods were stopped, by whom and when. Load
average is printed with each variant.

Needs root and cgroup v1 (memory and pids hierarchies); holds at most the arena's limit of memory; about 6 minutes.

    .venv/bin/python bench/thrash_arena.py [--seconds 60] [--variants kernel,kubelet,stall,earlyoom]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from detection_latency import mem_total_bytes
from earlyoom_side_by_side import Lines, ensure_earlyoom, evictd_event, free_port, load, meminfo_available_bytes

from evictd.adapters.procfs import memory_pressure
from evictd.core.summary import PsiStats

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "kube")]
from apiserver import ApiServer  # noqa: E402
from kube_objects import node_manifest, pod_manifest  # noqa: E402

from real_cgroups import CgroupTree  # noqa: E402

MiB = 1 << 20
CGROUPS = Path("/sys/fs/cgroup")
HIERARCHIES = ("memory", "pids")
PRESSURE = Path("/proc/pressure/memory")
SAMPLE_PERIOD_S = 0.1
READY_TIMEOUT_S = 60.0
WARM_TIMEOUT_S = 120.0
# Before each window the machine's memory stall should have settled from the previous one (other work may
# keep it up: then the window starts anyway after this long, and the level is printed).
QUIET_SOME_PERCENT = 3.0
QUIET_TIMEOUT_S = 60.0
REMOVE_TIMEOUT_S = 20.0
NAMESPACE = "arena"
NODE = "arena-node"
KUBELET_HARD_BYTES = 100 * MiB

# Each pod's script starts by joining its container cgroup in each hierarchy (the cgroup.procs files named by
# ARENA_PROCS), so that every page it touches is charged to the pod.
JOIN = r"""
import os
for procs in os.environ["ARENA_PROCS"].split(":"):
    with open(procs, "w") as joined:
        joined.write(str(os.getpid()))
"""

READER = JOIN + r"""
import mmap, sys
with open(sys.argv[1], "rb") as f:
    data = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
readers, index = int(sys.argv[2]), 0
for other in range(1, readers):
    if os.fork() == 0:
        index = other
        break
step = mmap.PAGESIZE
first = index * (len(data) // readers) // step * step  # each reader starts at its own share of the file
if index == 0:
    print("ready", flush=True)
passes = 0
while True:
    for offset in (*range(first, len(data), step), *range(0, first, step)):
        data[offset]
    passes += 1
    if passes == 1 and index == 0:
        os.write(1, b"warm\n")
"""

GROWER = JOIN + r"""
import mmap, sys, time
step, rate, cap = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
chunks, start, grown = [], time.monotonic(), 0
while grown < cap:
    chunk = mmap.mmap(-1, step, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    chunk[:] = b"\x01" * step
    chunks.append(chunk)
    grown += step
    delay = start + grown / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
print("full", flush=True)
while True:
    time.sleep(3600)
"""


# --------------------------------------------------------------------------------------------------
# The arena: cgroups, pods, their processes


@dataclass
class ArenaPod:
    name: str
    cgroup: str
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    process: subprocess.Popen[str] | None = None
    lines: Lines | None = None

    @property
    def key(self) -> str:
        return f"{NAMESPACE}/{self.name}"

    def procs_files(self) -> list[str]:
        return [str(CGROUPS / hierarchy / self.cgroup / "cgroup.procs") for hierarchy in HIERARCHIES]

    def pids(self) -> set[int]:
        with contextlib.suppress(FileNotFoundError):
            return {int(pid) for pid in (CGROUPS / "memory" / self.cgroup / "cgroup.procs").read_text().split()}
        return set()

    def stop(self) -> None:
        """SIGKILL every process in the pod's cgroup (what a stop of its containers amounts to here)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class Arena:
    """A pods cgroup limited to `limit` with a reader pod and a grower pod, and the kubelet's folders."""

    def __init__(self, workdir: Path, limit: int) -> None:
        self.base = f"evictd-arena-{uuid.uuid4().hex[:10]}"
        self.limit = limit
        self.workdir = workdir
        self.kubelet_root = workdir / "kubelet"
        self.pod_logs = workdir / "logs"
        self.tree = CgroupTree()
        self.pods = {name: ArenaPod(name, "") for name in ("reader", "grower")}
        for pod in self.pods.values():
            pod.cgroup = f"{self.pods_cgroup}/burstable/pod{pod.uid}/{uuid.uuid4().hex}{uuid.uuid4().hex}"
            self.tree.make(pod.cgroup, HIERARCHIES)
            log_dir = self.pod_logs / f"{NAMESPACE}_{pod.name}_{pod.uid}" / "main"
            log_dir.mkdir(parents=True)
            (log_dir / "0.log").write_text("2026-11-23T00:00:00Z stdout F started\n", encoding="utf-8")
            (self.kubelet_root / "pods" / pod.uid).mkdir(parents=True)
        (self.memory(self.pods_cgroup) / "memory.limit_in_bytes").write_text(f"{limit}\n")

    @property
    def pods_cgroup(self) -> str:
        return f"{self.base}/kubepods"

    def memory(self, cgroup: str) -> Path:
        return CGROUPS / "memory" / cgroup

    def start(self, pod_name: str, script: str, *args: str) -> ArenaPod:
        pod = self.pods[pod_name]
        pod.process = subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, bufsize=1,
                                       env={**os.environ, "ARENA_PROCS": ":".join(pod.procs_files())})
        assert pod.process.stdout is not None
        pod.lines = Lines(pod.process.stdout)
        if pod.lines.wait_for(lambda line: line == "ready", 0, READY_TIMEOUT_S) is None:
            raise RuntimeError(f"the {pod_name} pod did not start")
        return pod

    def available_bytes(self) -> int:
        """The kubelet's allocatableMemory.available of the arena: limit - (usage - total_inactive_file)."""
        folder = self.memory(self.pods_cgroup)
        usage = int((folder / "memory.usage_in_bytes").read_text())
        inactive = 0
        for line in (folder / "memory.stat").read_text().splitlines():
            if line.startswith("total_inactive_file "):
                inactive = int(line.split()[1])
        return self.limit - max(usage - inactive, 0)

    def oom_kills(self) -> int:
        for line in (self.memory(self.pods_cgroup) / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def pod_of(self, pid: int) -> ArenaPod | None:
        return next((pod for pod in self.pods.values() if pid in pod.pids()), None)

    def remove(self) -> None:
        """Kill what is left in the arena and remove its cgroups bottom-up."""
        for pod in self.pods.values():
            pod.stop()
            if pod.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    pod.process.wait(timeout=REMOVE_TIMEOUT_S)
        self.tree.remove()


# --------------------------------------------------------------------------------------------------
# What is measured


def machine_pressure() -> PsiStats:
    """The machine's memory stall lines, read as evictd reads them."""
    stats = memory_pressure(PRESSURE)
    if stats is None:
        raise RuntimeError(f"{PRESSURE} is gone")
    return stats


def vmstat_oom_kills() -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


@dataclass
class Stop:
    pod: str
    at_s: float
    by: str


@dataclass
class Outcome:
    variant: str
    load_before: str
    some_before: float
    stall_some_s: float = 0.0
    stall_full_s: float = 0.0
    peak_some: float = 0.0
    peak_full: float = 0.0
    arena_oom_kills: int = 0
    machine_oom_kills: int = 0
    min_available_mib: float = 0.0
    stops: list[Stop] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    load_after: str = ""


class Sampler(threading.Thread):
    """Every 100 ms: the peak PSI avg10 and the lowest allocatableMemory.available of the arena."""

    def __init__(self, arena: Arena, verbose: bool) -> None:
        super().__init__(daemon=True)
        self.arena = arena
        self.done = threading.Event()
        self.peak = (0.0, 0.0)
        self.min_available = arena.limit
        self.verbose = verbose

    def run(self) -> None:
        started, printed = time.monotonic(), 0
        while not self.done.wait(SAMPLE_PERIOD_S):
            stats = machine_pressure()
            some, full = stats.some.avg10, stats.full.avg10
            self.peak = (max(self.peak[0], some), max(self.peak[1], full))
            with contextlib.suppress(OSError, ValueError):
                available = self.arena.available_bytes()
                self.min_available = min(self.min_available, available)
                if self.verbose and time.monotonic() - started >= printed:
                    printed += 1
                    print(f"  {printed - 1:3d} s: avg10 some {some:5.1f}% full {full:5.1f}%, allocatable available "
                          f"{available / MiB:5.0f} MiB", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# The detectors, each decision acted on by stopping the chosen pod inside the arena


EARLYOOM_VICTIM = re.compile(r'process (\d+) uid \d+ "([^"]*)"')


class Detector:
    """One detector process; `decisions` turns its new output lines into (pod key or outside-process, time)."""

    name = "kernel"
    process: subprocess.Popen[str] | None = None
    lines: Lines | None = None

    def decisions(self, arena: Arena, after: int) -> tuple[int, list[tuple[ArenaPod | str, float]]]:
        return after, []

    def acted(self, pod: ArenaPod) -> None:
        """Called once the harness stopped `pod` on this detector's decision."""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Evictd(Detector):
    def __init__(self, name: str, arena: Arena, hard: int, stall: str | None, server: ApiServer) -> None:
        self.name = name
        self.server = server
        server.store.create_node(node_manifest(NODE))
        for pod in arena.pods.values():
            manifest = pod_manifest(pod.name, NAMESPACE, node_name=NODE, requests={"cpu": "100m"})
            manifest["metadata"]["uid"] = pod.uid
            manifest["status"]["qosClass"] = "Burstable"
            server.store.create_pod(manifest)
        kubelet = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                   "evictionHard": {"memory.available": str(hard)}, "enforceNodeAllocatable": ["pods"],
                   "cgroupRoot": f"/{arena.base}"}
        workdir = arena.workdir / "evictd"
        workdir.mkdir()
        own: dict[str, object] = {
            "apiVersion": "evictd.io/v1alpha1", "kind": "EvictdConfiguration", "nodeName": NODE,
            "kubeconfig": str(server.kubeconfig_path),
            "logFormat": "json", "metricsBindAddress": f"127.0.0.1:{free_port()}", "stateDir": str(workdir / "state"),
            "kubeletRootDir": str(arena.kubelet_root), "podLogsDir": str(arena.pod_logs),
            "imageFsPath": str(workdir), "containerFsPath": str(workdir),
            # No runtime: a containerd another process may start on this machine must not be attached.
            "containerRuntimeEndpoint": f"unix://{workdir}/no-runtime.sock"}
        if stall is not None:
            kind, share = stall.split(":")
            own["stallEvictionHard"] = {f"evictd.io/memory.stall.{kind.strip()}": share.strip()}
        config = workdir / "evictd.yaml"
        config.write_text(json.dumps(kubelet) + "\n---\n" + json.dumps(own) + "\n", encoding="utf-8")
        # A node lock of its own: the arena is a node of its own, beside whatever evictd this machine runs.
        env = {**os.environ, "EVICTD_NODE_LOCK": str(workdir / "node.lock")}
        self.process = subprocess.Popen([str(Path(sys.executable).with_name("evictd")), "run", "--config", str(config)],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                        env=env)
        assert self.process.stdout is not None
        self.lines = Lines(self.process.stdout)
        if self.lines.wait_for(lambda line: (evictd_event(line) or {}).get("event") == "evictd started", 0,
                               READY_TIMEOUT_S) is None:
            raise RuntimeError(f"evictd did not start: {self.lines.lines[-5:]}")

    def decisions(self, arena: Arena, after: int) -> tuple[int, list[tuple[ArenaPod | str, float]]]:
        """The arena's pods the API marks for deletion (evictd's DELETE), seen as the kubelet would see them."""
        found: list[tuple[ArenaPod | str, float]] = []
        for pod in arena.pods.values():
            stored = self.server.store.get_pod(NAMESPACE, pod.name)
            if stored is not None and stored["metadata"].get("deletionTimestamp") and pod.pids():
                found.append((pod, time.time()))
        return after, found

    def acted(self, pod: ArenaPod) -> None:
        """The pod's containers are gone: remove it from the API, as the kubelet does, which ends evictd's wait."""
        self.server.store.finish_deletion(NAMESPACE, pod.name)

    def events(self, name: str) -> list[dict[str, object]]:
        assert self.lines is not None
        with self.lines.changed:
            lines = list(self.lines.lines)
        return [event for _, line in lines if (event := evictd_event(line) or {}).get("event") == name]


class Earlyoom(Detector):
    name = "earlyoom"

    def __init__(self, arena: Arena) -> None:
        self.threshold_kib = (meminfo_available_bytes() - arena.limit * 9 // 10) // 1024
        self.process = subprocess.Popen(
            [ensure_earlyoom(), "--dryrun", "-r", "0", "-M", str(self.threshold_kib), "-m", "99", "-s", "99"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1)
        assert self.process.stderr is not None
        self.lines = Lines(self.process.stderr)
        if self.lines.wait_for(lambda line: line.startswith("sending SIGTERM when"), 0, READY_TIMEOUT_S) is None:
            raise RuntimeError(f"earlyoom did not start: {self.lines.lines[-5:]}")

    def decisions(self, arena: Arena, after: int) -> tuple[int, list[tuple[ArenaPod | str, float]]]:
        assert self.lines is not None
        found: list[tuple[ArenaPod | str, float]] = []
        with self.lines.changed:
            new = self.lines.lines[after:]
        for received, line in new:
            match = EARLYOOM_VICTIM.search(line)
            if match:
                pod = arena.pod_of(int(match.group(1)))
                found.append((pod if pod is not None else f"pid {match.group(1)} {match.group(2)!r}", received))
        return after + len(new), found


# --------------------------------------------------------------------------------------------------
# One variant


def wait_quiet() -> float:
    deadline = time.monotonic() + QUIET_TIMEOUT_S
    while (some := machine_pressure().some.avg10) >= QUIET_SOME_PERCENT and time.monotonic() < deadline:
        time.sleep(1)
    return some


def drop_cache(path: Path) -> None:
    with path.open("rb") as data:
        os.posix_fadvise(data.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def kubelet_hard_bytes(limit: int) -> int:
    """The kubelet's default `memory.available<100Mi`, scaled from this machine's memory to the arena's."""
    return KUBELET_HARD_BYTES * limit // mem_total_bytes()


def run_variant(variant: str, args: argparse.Namespace, data: Path, workdir: Path) -> Outcome:
    arena = Arena(workdir / variant, args.limit_mib * MiB)
    with contextlib.ExitStack() as stack:
        stack.callback(arena.remove)
        # The previous variant's stall must have decayed before a detector starts, or it acts on that one.
        wait_quiet()
        drop_cache(data)
        reader = arena.start("reader", READER, str(data), str(args.readers))
        assert reader.lines is not None
        if reader.lines.wait_for(lambda line: line == "warm", 0, WARM_TIMEOUT_S) is None:
            raise RuntimeError("the reader did not read its file once")
        grower = arena.start("grower", GROWER, str(MiB), str(args.grow_mib_per_s * MiB), str(args.grow_to_mib * MiB))
        detector = Detector()
        if variant in ("kubelet", "stall"):
            server = stack.enter_context(ApiServer(arena.workdir / "apiserver"))
            stall = args.stall if variant == "stall" else None
            detector = Evictd(variant, arena, kubelet_hard_bytes(arena.limit), stall, server)
        elif variant == "earlyoom":
            detector = Earlyoom(arena)
        stack.callback(detector.stop)
        return measure(variant, args, arena, grower, detector)
    raise AssertionError("unreachable")


def measure(variant: str, args: argparse.Namespace, arena: Arena, grower: ArenaPod,
            detector: Detector) -> Outcome:
    """Start the grower and, for the window, act on the detector's decisions; return what was measured."""
    some_before = wait_quiet()
    outcome = Outcome(variant, load(), some_before)
    sampler = Sampler(arena, args.verbose)
    before = machine_pressure()
    machine_ooms0, arena_ooms0 = vmstat_oom_kills(), arena.oom_kills()
    assert grower.process is not None and grower.process.stdin is not None
    started = time.time()
    grower.process.stdin.write("go\n")
    grower.process.stdin.flush()
    sampler.start()
    seen, outside = 0, set()
    while time.time() < started + args.seconds:
        seen, found = detector.decisions(arena, seen)
        for target, decided in found:
            if isinstance(target, ArenaPod):
                if target.pids() and target.key not in {stop.pod for stop in outcome.stops}:
                    target.stop()
                    outcome.stops.append(Stop(target.key, decided - started, detector.name))
                    detector.acted(target)
            elif target not in outside:
                outside.add(target)
                outcome.notes.append(f"{detector.name} would stop {target} at {decided - started:.1f} s "
                                     "(outside the arena: not stopped)")
        if grower.process.poll() is not None and not any(s.pod == grower.key for s in outcome.stops):
            outcome.stops.append(Stop(grower.key, time.time() - started, "kernel OOM killer"))
        time.sleep(0.05)
    after = machine_pressure()
    sampler.done.set()
    sampler.join()
    outcome.stall_some_s = (after.some.total - before.some.total) / 1e6
    outcome.stall_full_s = (after.full.total - before.full.total) / 1e6
    outcome.peak_some, outcome.peak_full = sampler.peak
    outcome.arena_oom_kills = arena.oom_kills() - arena_ooms0
    outcome.machine_oom_kills = vmstat_oom_kills() - machine_ooms0
    outcome.min_available_mib = sampler.min_available / MiB
    if isinstance(detector, Evictd):
        for event in (detector.events("threshold met") + detector.events("threshold no longer met")
                      + detector.events("evicting pod")):
            at = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp() - started
            what = event.get("pod") if event["event"] == "evicting pod" else event.get("threshold")
            outcome.notes.append(f"{variant}: {event['event']} {what} at {at:.1f} s")
    outcome.load_after = load()
    return outcome


# --------------------------------------------------------------------------------------------------
# The table


def table(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    rows = [
        f"thrash arena: pods cgroup limited to {args.limit_mib} MiB; reader mmaps {args.file_mib} MiB in a loop, "
        f"grower adds {args.grow_mib_per_s} MiB/s of anonymous memory; {args.seconds} s window per variant; "
        f"stall variant: {args.stall}",
        "| variant | stall `some` s | stall `full` s | peak avg10 some/full % | kernel OOM kills (arena/machine) "
        "| lowest allocatable avail. MiB | stopped (by, s into window) | load before -> after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        stops = ", ".join(f"{s.pod} ({s.by}, {s.at_s:.1f})" for s in o.stops) or "none"
        rows.append(f"| {o.variant} | {o.stall_some_s:.1f} | {o.stall_full_s:.1f} | {o.peak_some:.0f}/{o.peak_full:.0f}"
                    f" | {o.arena_oom_kills}/{o.machine_oom_kills} | {o.min_available_mib:.0f} | {stops} "
                    f"| {o.load_before} -> {o.load_after} |")
    notes = [f"  {o.variant}: node some avg10 {o.some_before:.1f}% before the window" for o in outcomes]
    notes += [f"  {note}" for o in outcomes for note in o.notes]
    return "\n".join(rows + notes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--limit-mib", type=int, default=1024)
    parser.add_argument("--file-mib", type=int, default=640)
    parser.add_argument("--grow-mib-per-s", type=int, default=16)
    parser.add_argument("--grow-to-mib", type=int, default=448)
    parser.add_argument("--readers", type=int, default=2, help="reader processes in the reader pod")
    parser.add_argument("--stall", default="some: 20%", help="the stall variant's threshold, '<some|full>: <share>'")
    parser.add_argument("--variants", default="kernel,kubelet,stall,earlyoom")
    parser.add_argument("--verbose", action="store_true", help="print the stall and the arena every second")
    args = parser.parse_args()
    if not (CGROUPS / "memory" / "memory.usage_in_bytes").exists() or not PRESSURE.exists():
        print("thrash arena: needs cgroup v1 memory and /proc/pressure/memory; not measured")
        return 0
    variants = [v.strip() for v in args.variants.split(",")]
    unknown = set(variants) - {"kernel", "kubelet", "stall", "earlyoom"}
    if unknown:
        parser.error(f"unknown variants: {sorted(unknown)}")
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="evictd-arena-") as work, \
            tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-arena-") as disk:  # a disk, not tmpfs
        data = Path(disk) / "working-set.bin"
        with data.open("wb") as out:
            block = os.urandom(MiB)
            for _ in range(args.file_mib):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        for variant in variants:
            outcome = run_variant(variant, args, data, Path(work))
            print(f"{variant}: done, {len(outcome.stops)} stopped, load {outcome.load_after}", file=sys.stderr,
                  flush=True)
            outcomes.append(outcome)
    print(table(outcomes, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

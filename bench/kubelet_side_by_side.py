"""The real kubelet's own eviction against evictd's, on the same real node, under the same memory or PID pressure.

    EVICTD_K8S_BIN=/folder/with/kube-apiserver-and-kubelet .venv/bin/python bench/kubelet_side_by_side.py \
        [--signal memory|pid|imagefs] [--trials 8] [--json results.json] [--shadow] [--cgroup-v2]

Starts the real cluster of `make test-cluster` (tests/cluster/real_cluster.py: kube-apiserver and kubelet
v1.36.2, etcd, a private containerd), then runs the same trial `--trials` times on each side:

* **kubelet**: the kubelet's own eviction on (`evictionHard: {memory.available: 500Mi}`, which it copies to
  `allocatableMemory.available`), no evictd;
* **evictd**: the kubelet's thresholds at `0%`, `evictd run` acting with the same KubeletConfiguration lines
  and the least-privilege identity of deploy/kubernetes (a token bound to a pod on the node).

In both the kubelet's pods cgroup is 1200 MiB (`systemReserved`: tests/cluster/side_by_side.py). One trial: a
quiet Burstable pod (64 MiB request, idle) and a hog (32 MiB request) that takes 600 MiB, waits 15 to 25 s
(so that the kubelet's cAdvisor-fed per-pod stats have seen it, and the crossing falls anywhere in the
kubelet's 10 s tick), then takes 200 MiB more: `allocatableMemory.available` drops below 500 MiB at once. The
hog's shell logs a line on SIGTERM and ignores it, so the SIGKILL at the end of its grace period stops it.

Timed against the node itself, not against either daemon's report:
* the crossing: a sampler reading the pods memory cgroup every 2 ms (limit minus working set, as both compute
  `allocatableMemory.available`);
* SIGTERM: the CRI log line's own timestamp (containerd stamps each line as it reads it);
* stopped: a poll of containerd's CRI every 20 ms until no container of the pod runs.
Reported per side: which pod was chosen, the message (up to the observed amount, which differs by moments),
the grace the container got (SIGTERM to stopped), and the distributions of crossing to SIGTERM and crossing to
stopped; where evictd runs, also crossing to its decision (the time of its "evicting pod" log line). Needs root
(cgroups, mounts) and about 1 minute per trial.

`--shadow`: on the kubelet's side, evictd runs beside it in dry-run (shadow mode, the same thresholds); its
`evictd shadow-report` and one `shadow comparison` per trial go into the results.

`--cgroup-v2`: the same run inside a cgroup v2 guest (user-mode Linux, tests/uml; tests/cluster/guest_cluster.py)
of 3 GiB and one CPU, where the cluster starts as here but for the detected layout (the kubelet keeps its
default `failCgroupV1: true`) and the sampler reads the v2 files (`memory.max`, `memory.current`,
`inactive_file`). The guest's kernel has no PSI, so evictd there is woken by its housekeeping cycle only.

`--signal pid`: the same trial under PID pressure. Both sides get `evictionHard: {pid.available: T}` with T
set PID_HEADROOM (400) tasks below what the node has free when the run starts (tests/cluster/side_by_side.py)
and the kubelet a `podPidsLimit` of 1500 as a safety net. The hog forks 200 sleeping processes, waits 15 to
25 s (cAdvisor's per-pod process counts, which the kubelet ranks by, have seen them), then forks 700 more:
`pid.available` falls below T as they start. The crossing is timed by a 2 ms sampler of `pid.available` as
both compute it (min(pid_max, threads-max) minus the task count of /proc/loadavg). The PID limit's crossing
is seen by evictd's housekeeping cycle only (no kernel notification exists for a task count): evictd runs with
the 1 s `housekeepingInterval` of the test harness, the kubelet with its fixed 10 s.

`--signal imagefs`: disk pressure on a dedicated imagefs. containerd's root (images and writable layers) is
on a loop-mounted ext4 of IMAGEFS_MIB (800 MiB); both sides get `evictionHard: {imagefs.available: 300Mi}`
and `imageMinimumGCAge: 1s`. Before each trial an unused image of UNUSED_IMAGE_MIB (50 MiB, about 100 MiB on
the imagefs with its unpacked snapshot) is imported and whoever acts is restarted: image GC deletes only
images first detected `imageMinimumGCAge` ago, and both the kubelet and evictd detect images when they start.
The hog writes 60 MiB into its writable layer, waits 15 to 25 s, then writes 450 MiB more: `imagefs.available`
falls below 300 MiB (to about 150 MiB, never so low that the filesystem fills), and deleting the unused image
(node-level reclaim, which both do first) does not bring it back above the threshold, so a pod is evicted
after the reclaim. Timed against a 2 ms sampler of statvfs on the snapshotter folder (the filesystem
ImageFsInfo names), and the moment the unused image left containerd's list (50 ms poll). containerd 1.6 does
not pin the sandbox image, so both sides' image GC deletes it too; it is imported again after the trial.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
for _folder in (TESTS, *(TESTS / name for name in ("cri", "kube", "daemon", "e2e", "contract", "cluster", "uml"))):
    sys.path.insert(0, str(_folder))

from backends import RealNode  # noqa: E402
from evictd_process import EvictdProcess, shadow_report  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from node_under_test import MiB, NodeUnderTest, PodRef, new_name  # noqa: E402
from real_cluster import BASE_PREFIX, RealCluster, k8s_bin_dir  # noqa: E402
from side_by_side import (  # noqa: E402
    HOG_FIRST_WRITE_MIB,
    HOG_WRITE_MIB,
    IMAGEFS_MIB,
    IMAGEFS_THRESHOLD_MIB,
    PID_HEADROOM,
    PID_HOG_TASKS,
    THRESHOLD_MIB,
    UNUSED_IMAGE_MIB,
    imagefs_thresholds,
    kubelet_evicting,
    kubelet_not_evicting,
    kubelet_pid_evicting,
    kubelet_pid_not_evicting,
    pid_available,
    pid_threshold,
    pid_thresholds,
    thresholds,
)

from evictd.core.runtime import ContainerState  # noqa: E402
from evictd.cri.client import CriClient  # noqa: E402
from polling import wait_until  # noqa: E402

SAMPLE_S = 0.002
STOP_POLL_S = 0.02
IMAGE_POLL_S = 0.05
TERM_LINE_WAIT_S = 10.0
TERM_POLL_S = 0.05
BASE_MIB = 600
SURGE_MIB = 200
WAIT_S = (15.0, 25.0)
# The hog: logs "term" when SIGTERM comes (`wait` returns at once for a trapped signal) and carries on.
HOG_SCRIPT = (
    "trap 'echo term' TERM; echo ready; "
    f"(dd if=/dev/zero bs={BASE_MIB}M count=1 2>/dev/null | sleep 2147483647) & "
    "sleep {wait_s:.1f}; "
    f"(dd if=/dev/zero bs={SURGE_MIB}M count=1 2>/dev/null | sleep 2147483647) & "
    "while true; do sleep 1000 & wait $!; done"
)
# The PID hog: PID_HEADROOM / 2 sleeping processes at first, the rest after the wait; SIGTERM as the memory hog.
PID_HOG_SCRIPT = (
    "trap 'echo term' TERM; echo ready; "
    f"i=0; while [ $i -lt {PID_HEADROOM // 2} ]; do sleep 2147483647 & i=$((i+1)); done; "
    "sleep {wait_s:.1f}; "
    f"while [ $i -lt {PID_HOG_TASKS} ]; do sleep 2147483647 & i=$((i+1)); done; "
    "while true; do sleep 1000 & wait $!; done"
)
# The disk hog: writes into its writable layer (on the imagefs) before and after the wait.
DISK_HOG_SCRIPT = (
    "trap 'echo term' TERM; echo ready; "
    f"dd if=/dev/zero of=/fill1 bs=1048576 count={HOG_FIRST_WRITE_MIB} 2>/dev/null; "
    "sleep {wait_s:.1f}; "
    f"dd if=/dev/zero of=/fill2 bs=1048576 count={HOG_WRITE_MIB} 2>/dev/null; "
    "while true; do sleep 1000 & wait $!; done"
)
QUIET_SCRIPT = 'trap "exit 0" TERM; echo ready; while true; do sleep 1; done'


@dataclass(frozen=True)
class Pressure:
    """What one kind of trial needs: the hog, the signal's value as both sides compute it, the configurations."""

    signal: str
    hog_script: str  # formatted with wait_s
    threshold: int  # in the signal's unit: bytes or tasks
    available: Callable[[RealNode], int]
    kubelet_on: str  # KubeletConfiguration lines: the kubelet's own eviction on
    kubelet_off: str  # the same node, the kubelet's eviction off
    evictd: str  # evictd's thresholds (the same as kubelet_on's)
    unused_image_mib: int = 0  # an unused image imported before each trial, for node-level reclaim


def memory_pressure() -> Pressure:
    return Pressure("memory", HOG_SCRIPT, THRESHOLD_MIB * MiB, lambda node: pods_available(node.pods_cgroup()),
                    kubelet_evicting(), kubelet_not_evicting(), thresholds())


def pid_pressure() -> Pressure:
    threshold = pid_threshold()
    return Pressure("pid", PID_HOG_SCRIPT, threshold, lambda node: pid_available(),
                    kubelet_pid_evicting(threshold), kubelet_pid_not_evicting(), pid_thresholds(threshold))


def imagefs_pressure(cluster: RealCluster) -> Pressure:
    snapshots = cluster.containerd.snapshotter_dir

    def available(node: RealNode) -> int:
        fs = os.statvfs(snapshots)
        return fs.f_bavail * fs.f_frsize

    lines = imagefs_thresholds()
    # The kubelet's eviction off: its harness default (every hard threshold 0%), the same image GC age.
    return Pressure("imagefs", DISK_HOG_SCRIPT, IMAGEFS_THRESHOLD_MIB * MiB, available, lines,
                    "imageMinimumGCAge: 1s\n", lines, unused_image_mib=UNUSED_IMAGE_MIB)


def pods_available(cgroup: Path) -> int:
    """The pods cgroup's limit minus its working set: `allocatableMemory.available` as both compute it.

    cgroup v1: memory.limit_in_bytes, memory.usage_in_bytes, total_inactive_file of memory.stat; v2:
    memory.max, memory.current, inactive_file.
    """
    v2 = (cgroup / "memory.current").is_file()
    limit_file, usage_file, inactive = (("memory.max", "memory.current", "inactive_file ") if v2 else
                                        ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file "))
    limit = int((cgroup / limit_file).read_text())  # "max" (no limit) is an error: the kubelet sets one
    usage = int((cgroup / usage_file).read_text())
    for line in (cgroup / "memory.stat").read_text().splitlines():
        if line.startswith(inactive):
            return limit - max(usage - int(line.split()[1]), 0)
    raise RuntimeError(f"no {inactive.strip()} in {cgroup / 'memory.stat'}")


@dataclass
class Trial:
    side: str
    chosen: str  # "hog", "quiet", "other" or "none"
    message: str
    crossing_to_sigterm_s: float | None
    crossing_to_stopped_s: float | None  # the chosen pod's containers
    grace_s: float | None  # SIGTERM to the container stopped
    crossing_to_reclaim_s: float | None = None  # the unused image gone (imagefs trials)
    pod: str = ""  # the chosen pod, namespace/name
    crossed_at: float | None = None  # epoch seconds
    log_tail: tuple[str, ...] = ()  # the end of the chosen pod's log when no SIGTERM line was found in it
    evicted_by: str = ""  # the source component of the pod's Evicted event
    crossing_to_decision_s: float | None = None  # evictd's "evicting pod" (or in dry-run "would evict pod") log line


class FirstTime:
    """The first time (epoch seconds) `happened` returned true, polled every `period_s` in a thread of its own;
    `close` stops the poll and then runs `cleanup`."""

    def __init__(self, happened: Callable[[], bool], period_s: float, cleanup: Callable[[], None] = lambda: None):
        self._happened = happened
        self._period_s = period_s
        self._cleanup = cleanup
        self.at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._happened():
                self.at = time.time()
                return
            time.sleep(self._period_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._cleanup()


def image_gone(endpoint: str, reference: str) -> FirstTime:
    """When `reference` left containerd's image list."""
    client = CriClient(endpoint, 2.0)
    return FirstTime(lambda: not any(reference in image.repo_tags for image in client.list_images()),
                     IMAGE_POLL_S, client.close)


def pod_stopped(endpoint: str, pod_uid: str) -> FirstTime:
    """When no container of the pod ran any more, by containerd's CRI."""
    client = CriClient(endpoint, 2.0)

    def stopped() -> bool:
        containers = client.list_containers(pod_uid=pod_uid)
        return bool(containers) and not any(c.state is ContainerState.RUNNING for c in containers)

    return FirstTime(stopped, STOP_POLL_S, client.close)


def sigterm_at(cluster: RealCluster, pod: PodRef) -> float | None:
    """The CRI log timestamp of the hog's "term" line, if SIGTERM came."""
    for log in (cluster.pod_logs_dir / f"{pod.namespace}_{pod.name}_{pod.uid}").glob("app/*.log"):
        for line in log.read_text().splitlines():
            stamp, _, rest = line.partition(" ")
            if rest.endswith(" term"):
                # RFC 3339 with nanoseconds: keep microseconds for datetime.
                head, _, fraction = stamp.rstrip("Z").partition(".")
                return datetime.fromisoformat(f"{head}.{fraction[:6]:0<6}+00:00").timestamp()
    return None


class TermLine:
    """The CRI log timestamp of the hog's "term" line (`at`), looked for every TERM_POLL_S from the hog's start
    until `close`: the kubelet removes the containers of a pod it evicted, and their logs, soon after they stopped
    (on the one-CPU v2 guest the log was gone by the time the kubelet's terminal status was seen)."""

    def __init__(self, cluster: RealCluster, pod: PodRef) -> None:
        self.at: float | None = None
        self._cluster = cluster
        self._pod = pod
        self._poll = FirstTime(self._logged, TERM_POLL_S)

    def _logged(self) -> bool:
        with contextlib.suppress(OSError):  # the folder or file removed while read
            self.at = sigterm_at(self._cluster, self._pod)
        return self.at is not None

    def close(self) -> None:
        self._poll.close()


def log_tail(cluster: RealCluster, pod: PodRef, lines: int = 4) -> tuple[str, ...]:
    """The last lines of each of the pod's container log files, with the files' names."""
    found: list[str] = []
    for log in sorted((cluster.pod_logs_dir / f"{pod.namespace}_{pod.name}_{pod.uid}").glob("*/*.log")):
        found += [f"{log.parent.name}/{log.name}:", *log.read_text().splitlines()[-lines:]]
    return tuple(found) or ("(no log file)",)


def poll_for(read: Callable[[], float | None], timeout_s: float) -> float | None:
    """`read()` until it gives a value or `timeout_s` passed (then None)."""
    deadline = time.monotonic() + timeout_s
    while (value := read()) is None and time.monotonic() < deadline:
        time.sleep(STOP_POLL_S)
    return value


def remove_image(endpoint: str, reference: str) -> None:
    client = CriClient(endpoint, 10.0)
    try:
        for image in client.list_images():
            if reference in image.repo_tags:
                client.remove_image(image.id)
    finally:
        client.close()


def evicted_message(node: NodeUnderTest, pod: PodRef) -> str:
    events = node.events(pod, "Evicted")
    return str(events[0]["message"]) if events else ""


def evicted_by(node: NodeUnderTest, pod: PodRef) -> str:
    """Who wrote the pod's Evicted event: its source component (kubelet or evictd)."""
    events = node.events(pod, "Evicted")
    return str((events[0].get("source") or {}).get("component", "")) if events else ""


def cleanup(node: NodeUnderTest, pods: list[PodRef]) -> None:
    for pod in pods:
        try:
            node.core.delete_namespaced_pod(pod.name, pod.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:  # gone already: the kubelet removes a pod evictd deleted once it stopped
                raise
    for pod in pods:
        node.wait_gone(pod, 60)


def one_trial(side: str, pressure: Pressure, cluster: RealCluster, node: RealNode, rng: random.Random,
              unused_image: str | None, shadow: EvictdProcess | None = None) -> Trial:
    images = None if unused_image is None else image_gone(cluster.containerd_endpoint, unused_image)
    quiet = node.run_pod(new_name("quiet"), QUIET_SCRIPT, requests={"memory": "64Mi"})
    sampler = FirstTime(lambda: pressure.available(node) < pressure.threshold, SAMPLE_S)
    hog = node.run_pod(new_name("hog"), pressure.hog_script.format(wait_s=rng.uniform(*WAIT_S)),
                       requests={"memory": "32Mi"})
    watcher = pod_stopped(cluster.containerd_endpoint, hog.uid)
    quiet_watcher = pod_stopped(cluster.containerd_endpoint, quiet.uid)
    term = TermLine(cluster, hog)
    try:
        wait_until(lambda: sampler.at is not None, 60, "the hog to cross the threshold")
        # Whoever acts: the hog stopped, or (a wrong choice) the quiet pod evicted.
        wait_until(lambda: watcher.at is not None or bool(node.events(quiet, "Evicted")), 60,
                   f"the {side} to act")
        crossed = sampler.at
        assert crossed is not None
        if watcher.at is None:
            # The wrong pod: the quiet one exits at once on SIGTERM, so its stop is when the signal came.
            wait_until(lambda: quiet_watcher.at is not None, 30, "the quiet pod to stop")
            assert quiet_watcher.at is not None
            return Trial(side, "quiet", evicted_message(node, quiet), None, quiet_watcher.at - crossed, None,
                         pod=f"{quiet.namespace}/{quiet.name}", crossed_at=crossed, evicted_by=evicted_by(node, quiet))
        wait_until(lambda: node.events(hog, "Evicted"), 30, "the Evicted event")
        pod_key = f"{hog.namespace}/{hog.name}"
        if side == "kubelet":
            # The kubelet's record of its eviction (Failed/Evicted), written once the containers are dead, after
            # its event: what a shadow evictd compares with, so the pod must not be deleted before it.
            wait_until(lambda: ((node.pod(hog) or {}).get("status") or {}).get("phase") in ("Failed", "Succeeded"),
                       30, "the kubelet's terminal status of the hog")
            if shadow is not None:
                # The shadow takes in the kubelet's evictions from the pods its watch holds at the end of a cycle:
                # a pod deleted before that is never seen as evicted (2 of 4 times on the v2 guest when the pod
                # went right after the kubelet's status). A node's evicted pods stay until the pod GC; so here.
                shadow.wait_for(lambda event: event.get("event") == "shadow comparison" and pod_key in (
                    (event.get("evictd") or {}).get("pod"), (event.get("kubelet") or {}).get("pod")), timeout=90)
        # containerd writes the log line on its own: on a slow node (a one-CPU guest) it can land after the stop.
        termed = poll_for(lambda: term.at, TERM_LINE_WAIT_S)
        tail = () if termed is not None else log_tail(cluster, hog)
        return Trial(
            side, "hog", evicted_message(node, hog),
            crossing_to_sigterm_s=None if termed is None else termed - crossed,
            crossing_to_stopped_s=watcher.at - crossed,
            grace_s=None if termed is None else watcher.at - termed,
            crossing_to_reclaim_s=None if images is None or images.at is None else images.at - crossed,
            pod=f"{hog.namespace}/{hog.name}", crossed_at=crossed, log_tail=tail, evicted_by=evicted_by(node, hog),
        )
    finally:
        sampler.close()
        watcher.close()
        quiet_watcher.close()
        term.close()
        if images is not None and unused_image is not None:
            images.close()
            if images.at is None:  # not reclaimed: remove it, or the next trial's import fills the imagefs
                remove_image(cluster.containerd_endpoint, unused_image)
        cleanup(node, [quiet, hog])
        if images is not None:
            restored = cluster.containerd.restore_standard_images()
            if restored:
                print(f"  image GC deleted {', '.join(restored)} (not pinned by containerd 1.6): imported again",
                      flush=True)
        time.sleep(6)  # past the pressure transition period (5 s), the memory and tasks given back
        # Under its own PIDPressure (or DiskPressure) the kubelet rejects every new non-critical pod at
        # admission: the next trial waits until the kubelet's own condition is gone (its next 10 s tick).
        wait_until(lambda: all((node.condition(kind) or {}).get("status") != "True"
                               for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")), 60,
                   "the kubelet's pressure to end")
        time.sleep(12)  # and one more tick: a pod admitted right after the condition cleared was still rejected


def with_decision(trial: Trial, daemon: EvictdProcess | None, event: str) -> Trial:
    """The trial with the time from the crossing to evictd's first log line `event` for the chosen pod."""
    assert daemon is not None and trial.crossed_at is not None
    decided = daemon.wait_event(event, timeout=30, pod=trial.pod)
    at = datetime.fromisoformat(str(decided["timestamp"]).replace("Z", "+00:00")).timestamp()
    return replace(trial, crossing_to_decision_s=at - trial.crossed_at)


def wait_events(daemon: EvictdProcess, name: str, count: int, timeout_s: float) -> list[dict[str, Any]]:
    """The daemon's first `count` log events called `name`, waiting up to `timeout_s` for them."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [event for event in daemon.events if event.get("event") == name]
        if len(found) >= count:
            return found[:count]
        seen = [id(event) for event in found]
        daemon.wait_for(lambda event, seen=seen: event.get("event") == name and id(event) not in seen,
                        timeout=max(0.1, deadline - time.monotonic()))


def run_side(side: str, pressure: Pressure, trials: int, cluster: RealCluster, rng: random.Random,
             folder: Path, shadows: dict[str, Any] | None = None) -> list[Trial]:
    """`trials` trials with `side` acting. With `shadows` on the kubelet's side, evictd runs beside it in dry-run
    (shadow mode, the same thresholds) and its `shadow-report` goes into `shadows["report"]`."""
    kubelet_config = pressure.kubelet_on if side == "kubelet" else pressure.kubelet_off
    cluster.restart_kubelet(kubelet_config)
    node = RealNode(cluster, folder / side)
    daemon = None
    shadow = None
    try:
        if side == "kubelet" and shadows is not None:
            shadow = node.start_evictd(pressure.evictd, "dryRun: true\n")
            shadow.wait_event("evictd started", timeout=60)
        results = []
        for number in range(trials):
            unused_image = None
            if pressure.unused_image_mib:
                # Image GC deletes only images first detected imageMinimumGCAge ago, and both the kubelet and
                # evictd detect images when they start (and every 5 min): import the unused image, then
                # (re)start whoever acts, so that its node-level reclaim may delete it at the crossing.
                unused_image = cluster.containerd.import_big_image(pressure.unused_image_mib)
                if side == "kubelet":
                    cluster.restart_kubelet(kubelet_config)
                elif daemon is not None:
                    daemon.stop()
                    daemon = None
            if side == "evictd" and daemon is None:
                daemon = node.start_evictd(pressure.evictd)
                daemon.wait_event("evictd started", timeout=60)
            trial = one_trial(side, pressure, cluster, node, rng, unused_image, shadow)
            if daemon is not None or shadow is not None:
                trial = with_decision(trial, daemon or shadow, "evicting pod" if daemon else "would evict pod")
            print(json.dumps({"trial": number + 1, **asdict(trial)}), flush=True)
            results.append(trial)
        if shadow is not None and shadows is not None:
            # One comparison per kubelet eviction, settled once the kubelet's record (Failed/Evicted) is seen.
            shadows["comparisons"] = wait_events(shadow, "shadow comparison", trials, 90)
            shadow.stop()
            shadows["report"] = shadow_report(shadow.state_dir)
        return results
    finally:
        for process in (daemon, shadow):
            if process is not None:
                process.stop()
                # Its log, for a look afterwards (the guest copies these out: tests/cluster/guest_cluster.py).
                (process.config_path.parent / "events.jsonl").write_text(
                    "".join(json.dumps(event, default=str) + "\n" for event in process.events))
        node.close()


class SmallExt4:
    """A loop-mounted ext4 of `size_mib` (no reserved blocks) in `folder`, removed by `close`."""

    def __init__(self, folder: Path, size_mib: int) -> None:
        folder.mkdir()
        self.image = folder / "fs.img"
        self.mountpoint = folder / "mnt"
        self.mountpoint.mkdir()
        subprocess.run(["truncate", "-s", f"{size_mib}M", str(self.image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)], check=True)
        self.device = subprocess.run(["losetup", "--find", "--show", str(self.image)], check=True,
                                     capture_output=True, text=True).stdout.strip()
        subprocess.run(["mount", "-t", "ext4", self.device, str(self.mountpoint)], check=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.mountpoint)], check=False)
        subprocess.run(["losetup", "-d", self.device], check=False)
        shutil.rmtree(self.image.parent, ignore_errors=True)


def quantiles(values: list[float]) -> str:
    if not values:
        return "no data"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return (f"min {ordered[0]:.2f}  p50 {statistics.median(ordered):.2f}  p90 {p90:.2f}  "
            f"max {ordered[-1]:.2f} s")


def summary(results: dict[str, list[Trial]]) -> list[str]:
    lines = []
    for side, trials in results.items():
        chosen = {name: sum(t.chosen == name for t in trials) for name in ("hog", "quiet")}
        graces = [t.grace_s for t in trials if t.grace_s is not None]
        messages = {t.message.split("available: ")[0] for t in trials if t.message}
        reclaims = [t.crossing_to_reclaim_s for t in trials if t.crossing_to_reclaim_s is not None]
        decisions = [t.crossing_to_decision_s for t in trials if t.crossing_to_decision_s is not None]
        lines += [
            f"{side}: {len(trials)} trials, hog chosen {chosen['hog']}, quiet pod chosen {chosen['quiet']}",
            *([f"  crossing -> unused image deleted : {quantiles(reclaims)}"] if reclaims else []),
            *([f"  crossing -> evictd's decision : {quantiles(decisions)}"] if decisions else []),
            f"  crossing -> SIGTERM : {quantiles([t.crossing_to_sigterm_s for t in trials if t.crossing_to_sigterm_s is not None])}",  # noqa: E501
            f"  crossing -> chosen pod stopped : {quantiles([t.crossing_to_stopped_s for t in trials if t.crossing_to_stopped_s is not None])}",  # noqa: E501
            f"  SIGTERM -> stopped  : {quantiles(graces)}",
            f"  messages (up to the observed amount): {sorted(messages)}",
        ]
    return lines


def in_guest(args: argparse.Namespace, argv: list[str]) -> int:
    """`--cgroup-v2`: the same run inside a cgroup v2 guest (tests/cluster/guest_cluster.py); its results here."""
    from guest_cluster import side_by_side_in_guest

    inner = [word for word in argv if word != "--cgroup-v2"]
    if args.json:  # the guest writes its own results file; this one gets a copy
        at = inner.index("--json") if "--json" in inner else -1
        inner = inner[:at] + inner[at + 2:] if at >= 0 else [w for w in inner if not w.startswith("--json=")]
    folder = Path(tempfile.mkdtemp(prefix="evictd-v2-bench-"))
    timeout_s = 600 + 240 * args.trials * len(args.sides.split(","))
    run, document = side_by_side_in_guest(folder, inner, timeout_s)
    print(run.text("bench.log"))
    print(f"(guest run {run.elapsed_s:.0f} s; its console and logs in {folder})")
    if args.json:
        args.json.write_text(json.dumps(document, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signal", choices=("memory", "pid", "imagefs"), default="memory",
                        help="the pressure (default memory)")
    parser.add_argument("--trials", type=int, default=8, help="trials per side (default 8)")
    parser.add_argument("--json", type=Path, help="write every trial and the machine here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sides", default="kubelet,evictd", help="which sides, in order (default kubelet,evictd)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's folder (component logs) at the end")
    parser.add_argument("--shadow", action="store_true",
                        help="on the kubelet's side, evictd beside it in dry-run (shadow mode): its shadow-report")
    parser.add_argument("--cgroup-v2", action="store_true",
                        help="run everything inside a cgroup v2 guest (user-mode Linux, tests/uml)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.cgroup_v2:
        return in_guest(args, argv)

    from run_all import machine_lines

    print("\n".join(machine_lines()), flush=True)
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix=BASE_PREFIX))
    imagefs = SmallExt4(base.with_name(base.name + "-imagefs"), IMAGEFS_MIB) if args.signal == "imagefs" else None
    # Every pod of a trial is on the host network: no pod network (none can be made in the v2 guest, whose kernel
    # has no IPv4 NAT).
    cluster = RealCluster(base, k8s_bin_dir(), containerd_root=None if imagefs is None else imagefs.mountpoint / "root",
                          pod_network=False)
    cluster.start()
    folder = cluster.base / "bench"
    results: dict[str, list[Trial]] = {}
    shadows: dict[str, Any] | None = {} if args.shadow else None
    configz = cluster.kubelet_configz()
    kubelet = {"cgroup_version": cluster.cgroup_version, "failCgroupV1": configz.get("failCgroupV1"),
               "cgroupDriver": configz.get("cgroupDriver")}
    print(f"kubelet: {kubelet}", flush=True)
    try:
        pressure = (memory_pressure() if args.signal == "memory" else pid_pressure() if args.signal == "pid"
                    else imagefs_pressure(cluster))
        print(f"signal {pressure.signal}, threshold {pressure.threshold}", flush=True)
        for side in args.sides.split(","):
            results[side] = run_side(side, pressure, args.trials, cluster, rng, folder, shadows)
    finally:
        problems = cluster.stop(remove_base=not args.keep)
        if imagefs is not None:
            imagefs.close()
    lines = summary(results)
    if shadows is not None:
        lines.append(f"shadow (evictd dry-run beside the kubelet): {json.dumps(shadows.get('report'))}")
    print("\n".join(lines))
    if problems:
        print("teardown problems: " + "; ".join(problems), file=sys.stderr)
    if args.json:
        document: dict[str, Any] = {"machine": machine_lines(), "signal": args.signal, "kubelet": kubelet,
                                    "trials": {side: [asdict(t) for t in trials] for side, trials in results.items()},
                                    "shadow": shadows}
        args.json.write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

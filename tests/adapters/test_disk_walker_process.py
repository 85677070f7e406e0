"""The disk walker process: its protocol, the real child and its supervision, and the cycle that never waits.

Real child processes (``python -m evictd.adapters.disk_walker_process``) walk real folders; the figures they
send are checked with coreutils ``du``. The last test is the point of it all: a real pod (real cgroups, a real
process) whose emptyDir holds 100,000 files that a real process keeps changing, read by `NodeStatsSource`
while the walker keeps walking them: no summary waits for a walk, and the disk figures it carries are the
walker's last completed ones, stamped with the time they were measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from evictd.adapters.cgroups import CgroupReader
from evictd.adapters.disk_walker_process import (
    DEFAULT_NICE,
    DiskWalkerProcess,
    LineError,
    WalkerSettings,
    figures_line,
    parse_figures_line,
    parse_pods_line,
    pods_line,
)
from evictd.adapters.node_pods import DiscoveredPods
from evictd.adapters.node_stats import NodeStatsSource
from evictd.adapters.pod_dirs import EMPTY_DIR_PLUGIN_DIR
from evictd.adapters.pod_disk_usage import PodDiskFigures, PodDiskStore, PodKey, SpaceUsed
from evictd.core.errors import SampleError
from evictd.core.summary import SYSTEM_CONTAINER_PODS
from log_capture import LogCapture
from polling import wait_until
from real_pod_node import MiB, RealPodNode, crowded_pod, du_bytes, du_inodes, walk_time_s

POD = PodKey("33333333-3333-4333-8333-333333333333", "shop", "cart")
WAIT_S = 20.0
TENANT_FILES = 100_000


MAX_NICE = 19  # the kernel's lowest priority: a nice value above it is this


def nice_of(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])  # field 19 of proc(5), counted after the command name


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture
def pod_folders(tmp_path: Path) -> tuple[Path, Path]:
    """A kubelet root and pod logs folder with POD's emptyDir `cache` and its container log folder `app`."""
    kubelet, logs = tmp_path / "kubelet", tmp_path / "logs"
    cache = kubelet / "pods" / POD.uid / "volumes" / EMPTY_DIR_PLUGIN_DIR / "cache"
    cache.mkdir(parents=True)
    (cache / "data.bin").write_bytes(b"\x01" * 300_000)
    app = logs / f"{POD.namespace}_{POD.name}_{POD.uid}" / "app"
    app.mkdir(parents=True)
    (app / "0.log").write_bytes(b"line\n" * 1000)
    return kubelet, logs


@pytest.fixture
def walkers() -> Iterator[list[DiskWalkerProcess]]:
    """DiskWalkerProcess objects the test starts; each is stopped at the end, whatever happened."""
    started: list[DiskWalkerProcess] = []
    yield started
    for walker in started:
        walker.stop()


def start_walker(walkers: list[DiskWalkerProcess], store: PodDiskStore, settings: WalkerSettings,
                 log: LogCapture, command: list[str] | None = None) -> DiskWalkerProcess:
    walker = DiskWalkerProcess(store, settings, log=log, command=command)
    walkers.append(walker)
    walker.start()
    return walker


# --------------------------------------------------------------------------------------------------
# The protocol


def test_lines_carry_pods_and_figures_unchanged() -> None:
    pods = [POD, PodKey("u2", "kube-system", "coredns-7db6d8ff4d-x2x4q")]
    assert parse_pods_line(pods_line(pods)) == pods
    figures = PodDiskFigures(POD, 1234.5, 1_790_000_000.25, volumes=(("cache", SpaceUsed(4096, 3)),),
                             logs=(("app", SpaceUsed(8192, 2)), ("sidecar", SpaceUsed(0, 1))))
    assert parse_figures_line(figures_line(figures)) == figures
    failed = PodDiskFigures(POD, 1.0, 2.0, problem=SampleError("/var/lib/kubelet/pods", "Permission denied"))
    parsed = parse_figures_line(figures_line(failed))
    assert parsed.problem is not None and (parsed.problem.source, parsed.problem.reason) == (
        "/var/lib/kubelet/pods", "Permission denied")


GOOD_FIGURES = {"pod": ["u", "ns", "n"], "at_monotonic": 1.0, "at_wall": 2.0, "volumes": [], "logs": [],
                "problem": None}


@pytest.mark.parametrize("line", [
    b"", b"{", b"[]", b"null", b'{"pods": "all"}', b'{"pods": [["u", "ns"]]}', b'{"pods": [[1, 2, 3]]}',
    b'{"pods": [null]}', b"\xff\xfe",
], ids=lambda line: repr(line)[:30])
def test_a_bad_pods_line_is_a_line_error(line: bytes) -> None:
    with pytest.raises(LineError):
        parse_pods_line(line)


@pytest.mark.parametrize("change", [
    {"pod": None}, {"at_monotonic": "soon"}, {"at_wall": float("nan")}, {"at_monotonic": True},
    {"volumes": [["cache", -1, 3]]}, {"volumes": [["cache", 1.5, 3]]}, {"volumes": [["cache", 1]]},
    {"logs": {"app": [1, 2]}}, {"problem": ["only the source"]}, {"problem": 42},
], ids=lambda change: json.dumps(change, allow_nan=True)[:40])
def test_a_bad_figures_line_is_a_line_error(change: dict[str, Any]) -> None:
    with pytest.raises(LineError):
        parse_figures_line(json.dumps({**GOOD_FIGURES, **change}).encode())


def test_a_figures_line_without_a_field_is_a_line_error() -> None:
    for field in GOOD_FIGURES:
        doc = {key: value for key, value in GOOD_FIGURES.items() if key != field}
        with pytest.raises(LineError):
            parse_figures_line(json.dumps(doc).encode())


# --------------------------------------------------------------------------------------------------
# The child and its supervision


def test_the_child_measures_the_wanted_pods_at_a_lower_priority(
        pod_folders: tuple[Path, Path], walkers: list[DiskWalkerProcess]) -> None:
    kubelet, logs = pod_folders
    store = PodDiskStore()
    settings = WalkerSettings(kubelet_root=str(kubelet), pod_logs_dir=str(logs), period_s=0.1)
    walker = start_walker(walkers, store, settings, LogCapture())
    asked_at = time.monotonic()
    store.want([POD])
    wait_until(lambda: store.latest(POD) is not None, WAIT_S, "the first figures")
    figures = store.latest(POD)
    assert figures is not None and figures.problem is None
    cache = kubelet / "pods" / POD.uid / "volumes" / EMPTY_DIR_PLUGIN_DIR / "cache"
    app = logs / f"{POD.namespace}_{POD.name}_{POD.uid}" / "app"
    assert figures.volumes == (("cache", SpaceUsed(du_bytes(cache), du_inodes(cache))),)
    assert figures.logs == (("app", SpaceUsed(du_bytes(app), du_inodes(app))),)
    assert asked_at <= figures.measured_at_monotonic <= time.monotonic(), "the monotonic clock is the machine's"
    assert abs(figures.measured_at_wall - time.time()) < WAIT_S
    pid = walker.child_pid()
    # os.nice(DEFAULT_NICE) in the child: DEFAULT_NICE above this process's own (make test's parallel tier runs at 19).
    assert pid is not None and nice_of(pid) == min(os.nice(0) + DEFAULT_NICE, MAX_NICE)

    (cache / "more.bin").write_bytes(b"\x02" * 500_000)
    wait_until(lambda: (store.latest(POD) or figures).volumes[0][1].used_bytes == du_bytes(cache), WAIT_S,
               "the figures after the volume grew")

    walker.stop()
    wait_until(lambda: gone(pid), 5, "the child gone after stop()")


def test_a_child_that_dies_is_started_again_and_the_figures_flow_again(
        pod_folders: tuple[Path, Path], walkers: list[DiskWalkerProcess]) -> None:
    kubelet, logs = pod_folders
    store = PodDiskStore()
    log = LogCapture()
    walker = start_walker(walkers, store, WalkerSettings(str(kubelet), str(logs), period_s=0.1), log)
    store.want([POD])
    wait_until(lambda: store.latest(POD) is not None, WAIT_S, "the first figures")
    first_pid = walker.child_pid()
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)
    wait_until(lambda: walker.child_pid() not in (None, first_pid), WAIT_S, "a new child")
    assert log.events() == ["disk walker exited; starting it again"]
    assert log.at("warning")[0][1] == {"status": -signal.SIGKILL}
    killed_at = time.monotonic()
    wait_until(lambda: (store.latest(POD) or PodDiskFigures(POD, 0, 0)).measured_at_monotonic > killed_at, WAIT_S,
               "figures from the new child (it was told the wanted pods)")
    assert walker.children_started == 2


def test_a_child_that_talks_nonsense_is_logged_and_replaced(walkers: list[DiskWalkerProcess]) -> None:
    store = PodDiskStore()
    log = LogCapture()
    nonsense = [sys.executable, "-c", "import sys, time; print('not a figures line', flush=True); time.sleep(60)"]
    walker = start_walker(walkers, store, WalkerSettings("/nonexistent", "/nonexistent"), log, command=nonsense)
    wait_until(lambda: walker.children_started >= 2, WAIT_S, "a second child after the first sent nonsense")
    assert log.events()[:2] == ["disk walker sent a line that cannot be read; restarting it",
                               "disk walker exited; starting it again"]
    assert store.latest(POD) is None


def test_a_child_that_cannot_start_is_logged_and_tried_again(walkers: list[DiskWalkerProcess]) -> None:
    log = LogCapture()
    start_walker(walkers, PodDiskStore(), WalkerSettings("/x", "/y"), log, command=["/nonexistent/python"])
    wait_until(lambda: len(log.lines) >= 2, 10, "two attempts (1 s apart)")
    assert set(log.events()) == {"disk walker could not be started"}
    assert "No such file or directory" in log.at("warning")[0][1]["error"]


def test_the_child_ends_when_the_daemon_closes_its_pipe_and_ignores_ctrl_c(pod_folders: tuple[Path, Path]) -> None:
    kubelet, logs = pod_folders
    settings = json.dumps(asdict(WalkerSettings(str(kubelet), str(logs), period_s=0.1)))
    child = subprocess.Popen([sys.executable, "-m", "evictd.adapters.disk_walker_process", settings],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(pods_line([POD]) + b"this is not json\n")
        child.stdin.flush()
        assert parse_figures_line(child.stdout.readline()).pod == POD
        child.send_signal(signal.SIGINT)
        assert parse_figures_line(child.stdout.readline()).pod == POD, "still walking after SIGINT"
        child.stdin.close()
        assert child.wait(timeout=10) == 0
        assert child.stderr is not None
        assert child.stderr.read().decode() == (
            "evictd disk walker: ignored a line from the daemon: not a pods line: Expecting value: line 1 "
            "column 1 (char 0)\n")
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("argv", [
    [], ["not json"], ['{"kubelet_root": "/x"}'], ['{"surprise": 1}'],
    ['{"kubelet_root": "/x", "pod_logs_dir": "/y", "entry_budget": 0}'],
    ['{"kubelet_root": "/x", "pod_logs_dir": "/y", "nice": "low"}'],
    ['{"kubelet_root": "/x", "pod_logs_dir": "/y", "period_s": "often"}'],
], ids=lambda argv: argv[0][:40] if argv else "none")
def test_the_child_refuses_bad_settings_in_one_line(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "evictd.adapters.disk_walker_process", *argv],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr.startswith("evictd disk walker: needs one JSON argument of settings")
    assert len(done.stderr.splitlines()) == 1


# --------------------------------------------------------------------------------------------------
# The cycle never waits for a walk


@pytest.fixture
def tenant_pod(tmp_path: Path, mount_tmpfs_at: Callable[[Path], Path]) -> Iterator[RealPodNode]:
    with crowded_pod(tmp_path, mount_tmpfs_at, files=TENANT_FILES, touch_interval_s=0.05,
                     pods_limit_bytes=512 * MiB) as node:
        yield node


def test_a_summary_never_waits_for_a_walk_and_carries_the_last_completed_figures_with_their_time(
        tmp_path: Path, tenant_pod: RealPodNode, walkers: list[DiskWalkerProcess]) -> None:
    walk_s = walk_time_s(tenant_pod.volume_dir)
    cgroups = CgroupReader(tenant_pod.layout)
    store = PodDiskStore()
    pods = DiscoveredPods(cgroups, str(tenant_pod.pod_logs_dir))
    source = NodeStatsSource(
        node_name="node-1", cgroups=cgroups,
        disk_usage=store, kubelet_root=str(tenant_pod.kubelet_root),
        image_fs_path=str(tmp_path / "containerd"), container_fs_path=str(tmp_path / "containerd"))
    # No pause between passes beyond the walker's own rest (as long as it walked): it walks half the time.
    settings = WalkerSettings(str(tenant_pod.kubelet_root), str(tenant_pod.pod_logs_dir), period_s=0.0)
    start_walker(walkers, store, settings, LogCapture())
    key = PodKey(tenant_pod.uid, tenant_pod.namespace, tenant_pod.name)
    (first,) = source.summary(pods.active_pods()).pods
    assert first.volume_stats == () and first.ephemeral_storage is None, "not measured yet: no disk figures"
    wait_until(lambda: store.latest(key) is not None, 60, "the first figures of the crowded pod")

    durations: list[float] = []
    figure_times: set[datetime] = set()
    # Read until the walker has completed three walks (about 8 walk times on a quiet machine; longer on a busy one,
    # where walks slow down more than the timing at the start said), within a bound that only a stuck walker meets.
    at_least = time.monotonic() + max(3.0, 8 * walk_s)
    until = time.monotonic() + max(60.0, 40 * walk_s)
    while (time.monotonic() < at_least or len(figure_times) < 3) and time.monotonic() < until:
        listed = pods.active_pods()  # the manager's listing, before the stats it hands the pods to
        before, started = store.latest(key), time.monotonic()
        summary = source.summary(listed)
        durations.append(time.monotonic() - started)
        after = store.latest(key)
        assert source.problems == () and before is not None and after is not None
        (stats,) = summary.pods
        volume = next(v for v in stats.volume_stats if v.name == tenant_pod.volume)
        assert volume.time is not None
        assert wall(before) <= volume.time <= wall(after), "the figures the walker completed last"
        memory = summary.node.system_containers[SYSTEM_CONTAINER_PODS].memory
        assert memory is not None and memory.time is not None and volume.time < memory.time, (
            "disk figures carry the time they were measured, memory the time of this cycle")
        # The volume folder, data.bin and the tenant's files, and the churning file when the walk saw it.
        assert volume.inodes_used in (TENANT_FILES + 2, TENANT_FILES + 3)
        assert stats.ephemeral_storage is not None and stats.ephemeral_storage.time == volume.time
        figure_times.add(volume.time)
        time.sleep(0.01)
    assert len(figure_times) >= 3, "the walker completed several walks while the summaries were read"
    # The walker walks about half the time, so a summary that waited for walks would be slow in a large share of
    # the reads; one in a hundred may meet a scheduling stall of a busy machine (85 ms once, beside the parallel tier).
    slow = [d for d in durations if d >= walk_s / 4]
    assert len(slow) <= len(durations) // 100, (
        f"{len(slow)} of {len(durations)} summaries took a quarter walk or more (slowest {max(durations):.3f} s); "
        f"one walk takes {walk_s:.3f} s")


def wall(figures: PodDiskFigures) -> datetime:
    return datetime.fromtimestamp(figures.measured_at_wall, UTC)


def test_names_are_one_object_across_the_lines_that_name_them() -> None:
    """Issue #25: 5,000 pods measured every pass made a new copy of each pod's names per line; the figures of
    successive passes share them, and every name reads as it was written."""
    def line(at: float) -> bytes:
        return figures_line(PodDiskFigures(pod=PodKey("uid-1", "shop", "web-0"), measured_at_monotonic=at,
                                           measured_at_wall=at, volumes=(("cache", SpaceUsed(4096, 2)),),
                                           logs=(("app", SpaceUsed(512, 1)),), problem=None))

    first, second = parse_figures_line(line(1.0)), parse_figures_line(line(2.0))
    assert first.pod == PodKey("uid-1", "shop", "web-0") and first.volumes[0][0] == "cache"
    assert all(a is b for a, b in zip(first.pod, second.pod, strict=True))
    assert first.volumes[0][0] is second.volumes[0][0] and first.logs[0][0] is second.logs[0][0]


def test_a_stop_wakes_the_feeding_threads_wait_for_wanted_pods() -> None:
    """`stop` must not wait out the feeder's wait for a change of the wanted pods (it added up to 1 s to every
    `evictd run` stop): `nudge` ends a wait whose `until` now holds, however long it was to be."""
    store = PodDiskStore()
    stopping = threading.Event()
    returned: list[int] = []
    waiter = threading.Thread(target=lambda: returned.append(
        store.wait_for_wanted(store.wanted()[0], timeout_s=600.0, until=stopping.is_set)[0]))
    waiter.start()
    store.nudge()  # a nudge while `until` does not hold changes nothing
    waiter.join(0.2)
    assert waiter.is_alive()
    stopping.set()
    store.nudge()
    waiter.join(60.0)
    assert not waiter.is_alive() and returned == [store.wanted()[0]]

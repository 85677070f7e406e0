"""`evictd run` as a user runs it, on this machine's real memory, filesystems, PIDs and terminal."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from evictd_process import (
    CROSSING_DEPTH,
    HOG_BYTES,
    ROOT,
    EvictdProcess,
    allocate,
    mem_available_bytes,
    memory_wakeups,
    pid_available,
    start_evictd,
)

from evictd.core.quantity import Quantity
from evictd.observe.metrics import WAKEUP_CAUSES
from real_cgroups import CGROUP_MOUNT, memory_stall, temporary_cgroup

GiB = 1 << 30
# A stop after SIGTERM, well within the default shutdownTimeout (15 s, after which evictd exits with status 1).
STOPPED_WITHIN_S = 10.0


def test_runs_cycles_and_exits_zero(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    process = EvictdProcess(tmp_path, evictd="housekeepingInterval: 200ms\n", args=("--cycles", "3"))
    evictd_processes.append(process)
    assert process.process.wait(timeout=30) == 0
    stopped = process.wait_event("evictd stopped")
    assert stopped["cycles"] == 3
    started = process.wait_event("evictd started")
    assert started["dry_run"] is True and started["interval_s"] == 0.2


def test_sigterm_finishes_the_cycle_and_exits_zero(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    process = EvictdProcess(tmp_path, evictd="housekeepingInterval: 1h\n")
    evictd_processes.append(process)
    process.wait_event("evictd started")
    deadline = time.monotonic() + 10
    while process.http("/healthz") != (200, "ok"):
        assert time.monotonic() < deadline, "healthz never became ok"
        time.sleep(0.05)
    # /healthz is ok while the first cycle runs (and before it starts): wait for the sleep after cycle 1.
    while process.metric("evictd_cycles_total") < 1:
        assert time.monotonic() < deadline, "the first cycle never ended"
        time.sleep(0.05)
    sent = time.monotonic()
    # The hour's sleep not cut short would run into the shutdown deadline (shutdownTimeout, 15 s): exit status 1.
    assert process.stop() == 0, "the sleep between cycles must be cut short by SIGTERM"
    # Well within it: the stop itself took 0.2-1.0 s here at load 5 (up to a second of it the disk walker's stop).
    assert time.monotonic() - sent < STOPPED_WITHIN_S
    assert process.wait_event("shutting down")["reason"] == "SIGTERM"
    assert process.wait_event("evictd stopped")["cycles"] == 1


@pytest.mark.quiet_machine  # compares whole-machine figures that any other test moves: run with nothing else
def test_metrics_and_health(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    process = EvictdProcess(tmp_path, kubelet="evictionHard: {memory.available: 1Gi, nodefs.available: 1%}\n",
                            evictd="housekeepingInterval: 100ms\n")
    evictd_processes.append(process)
    process.wait_event("evictd started")
    deadline = time.monotonic() + 10
    while process.metric("evictd_cycles_total") < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert process.http("/healthz") == (200, "ok")
    available = process.metric("evictd_signal_available_bytes", signal="memory.available")
    assert abs(available - mem_available_bytes()) < 512 << 20
    assert process.metric("evictd_threshold_bytes", kind="hard", signal="memory.available") == GiB
    assert process.metric("evictd_signal_capacity_bytes", signal="nodefs.available") > 0
    assert process.metric("evictd_node_condition", condition="MemoryPressure") == 0
    assert process.metric("evictd_cycle_duration_seconds_count") >= 3
    # What woke the cycles after the first: the 100 ms timer, or (on a busy machine, whose page cache moves
    # the whole-machine memcg levels) a memcg notification that came first; every wake-up is counted.
    wakeups = {cause: process.metric("evictd_wakeups_total", cause=cause) for cause in WAKEUP_CAUSES}
    assert sum(wakeups.values()) >= 2, wakeups
    assert process.http("/nothing")[0] == 404
    assert process.stop() == 0


@pytest.mark.serial  # a GiB hog against MemAvailable: the `serial` tier, one at a time
def test_a_real_memory_crossing_wakes_the_loop_and_the_decision_follows(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    # The loop sleeps an hour between ticks: only a memory wake-up can bring the decision this soon.
    threshold = mem_available_bytes() - CROSSING_DEPTH
    process = EvictdProcess(tmp_path, kubelet=f"evictionHard: {{memory.available: '{threshold}'}}\n"
                            "evictionPressureTransitionPeriod: 1s\n",
                            evictd="housekeepingInterval: 1h\npsiWakeups: false\n")
    evictd_processes.append(process)
    process.wait_event("evictd started")
    time.sleep(0.5)  # let the first cycle arm the notifiers
    hog = allocate(HOG_BYTES)
    try:
        assert hog.stdout is not None
        filled_at = float(hog.stdout.readline())
        met = process.wait_event("threshold met", timeout=10)
        assert met["threshold"].startswith("memory.available<")
        assert met["_received"] - filled_at < 1.0
        assert process.wait_event("node conditions changed")["conditions"] == ["MemoryPressure"]
        # The usage level or the memory watch's look (on v1 it looks beside the levels), whichever came first.
        assert memory_wakeups(process) >= 1
    finally:
        hog.kill()
        hog.wait()
    freed_at = time.time()
    gone = process.wait_event("threshold no longer met", timeout=10)
    assert gone["_received"] - freed_at < 2.0, "the downward crossing wakes the loop too"
    assert process.stop() == 0


@pytest.mark.quiet_machine  # compares whole-machine figures that any other test moves: run with nothing else
def test_a_real_memory_stall_wakes_the_loop_through_psi(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    # An hour between ticks and no memcg thresholds: only the PSI trigger on /proc/pressure/memory can wake it.
    process = EvictdProcess(tmp_path, evictd="housekeepingInterval: 1h\nmemcgWakeups: false\n")
    evictd_processes.append(process)
    process.wait_event("evictd started")
    time.sleep(0.5)  # the first cycle
    cycles_before = process.metric("evictd_cycles_total")
    assert process.metric("evictd_wakeups_total", cause="psi") == 0
    with temporary_cgroup(CGROUP_MOUNT / "memory") as memcg, memory_stall(memcg):
        deadline = time.monotonic() + 20
        while process.metric("evictd_wakeups_total", cause="psi") < 1:
            assert time.monotonic() < deadline, "no PSI wake-up within 20 s of real memory stall"
            time.sleep(0.2)
    time.sleep(0.5)
    assert process.metric("evictd_cycles_total") > cycles_before, "the wake-up runs a cycle on fresh stats"
    assert process.stop() == 0


def test_nodefs_bytes_and_inodes_on_a_real_ext4(
    tmp_path: Path, ext4_mount: Path, evictd_processes: list[EvictdProcess]
) -> None:
    root = ext4_mount / "kubelet"
    root.mkdir()
    process = EvictdProcess(
        tmp_path,
        kubelet="evictionHard: {nodefs.available: 50%, nodefs.inodesFree: 50%}\n",
        evictd=f"housekeepingInterval: 100ms\nkubeletRootDir: {root}\nimageFsPath: {root}\n"
               f"containerFsPath: {root}\npodLogsDir: {tmp_path / 'logs'}\n",
    )
    evictd_processes.append(process)
    process.wait_event("evictd started")
    (root / "big").write_bytes(b"\0" * (40 << 20))  # 40 of 64 MiB
    met = process.wait_event("threshold met", timeout=10)
    assert met["threshold"] == "nodefs.available<50% (hard)"
    assert process.wait_event("node conditions changed")["conditions"] == ["DiskPressure"]
    for index in range(2500):  # 4096 inodes in all
        (root / f"f{index}").touch()
    inodes = process.wait_for(lambda e: e.get("event") == "threshold met"
                              and e["threshold"] == "nodefs.inodesFree<50% (hard)", timeout=10)
    assert Quantity.parse(inodes["available"]).value < 2048  # logged as a quantity: "2k" at 2000
    assert process.stop() == 0


@pytest.mark.quiet_machine  # compares whole-machine figures that any other test moves: run with nothing else
def test_pid_pressure_from_real_tasks_in_a_pids_cgroup(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    with temporary_cgroup(CGROUP_MOUNT / "pids") as cgroup:
        (cgroup / "pids.max").write_text("1200")  # a safety net: the test can never exhaust the machine
        threshold = pid_available() - 400
        process = EvictdProcess(tmp_path, kubelet=f"evictionHard: {{pid.available: '{threshold}'}}\n",
                                evictd="housekeepingInterval: 100ms\n")
        evictd_processes.append(process)
        code = ("import os, sys, threading\n"
                f"open('{cgroup}/cgroup.procs', 'w').write(str(os.getpid()))\n"
                "stop = threading.Event()\n"
                "threads = [threading.Thread(target=stop.wait) for _ in range(800)]\n"
                "[t.start() for t in threads]\n"
                "print('ready', flush=True)\n"
                "sys.stdin.read(); stop.set()\n")
        spawner = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)
        try:
            process.wait_event("evictd started")
            assert spawner.stdout is not None and spawner.stdout.readline().strip() == "ready"
            met = process.wait_event("threshold met", timeout=10)
            assert met["threshold"].startswith("pid.available<")
            assert process.wait_event("node conditions changed")["conditions"] == ["PIDPressure"]
        finally:
            spawner.kill()
            spawner.wait()
    assert process.stop() == 0


def test_live_view_on_a_terminal(tmp_path: Path) -> None:
    config = tmp_path / "k.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      "evictionSoft: {memory.available: 1Ti}\nevictionSoftGracePeriod: {memory.available: 1h}\n"
                      "---\napiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nmetricsBindAddress: 127.0.0.1:0\n"
                      f"stateDir: {tmp_path / 'state'}\n")
    controller, terminal = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "evictd", "run", "--config", str(config), "--cycles", "2"],
                             cwd=ROOT, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    screen = b""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # to the end: what evictd writes as it stops counts too
            ready, _, _ = select.select([controller], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the child is gone and the terminal closed
                    break
                if not chunk:
                    break
                screen += chunk
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        os.close(controller)
    text = screen.decode(errors="replace")
    assert "SIGNAL" in text and "AVAILABLE" in text and "THRESHOLDS" in text
    assert "memory.available" in text and "soft 1024.0 GiB" in text
    assert "MemoryPressure" in text and "grace 0/3600s" in text
    assert "\x1b[H\x1b[2J" in text, "the view is redrawn in place"
    assert '{"event"' not in text, "no JSON lines on a terminal"
    # On the alternate screen, entered before the first frame and left after the last: no frame reaches the
    # scrollback but the last one, written once more on the normal screen.
    assert text.count("\x1b[?1049h") == 1 and text.count("\x1b[?1049l") == 1
    assert text.index("\x1b[?1049h") < text.index("\x1b[H\x1b[2J") < text.rindex("\x1b[H\x1b[2J") < text.index(
        "\x1b[?1049l")
    after = text[text.index("\x1b[?1049l"):]
    assert "cycle 2" in after and "cycle 1 " not in after and "\x1b[2J" not in after
    # Why evictions are only reported, and every threshold in the units of its row.
    assert " - no Kubernetes API: reports only" in text
    allocatable = next(line for line in after.splitlines() if line.startswith("allocatableMemory.available"))
    assert "hard 100.0 MiB" in allocatable, allocatable
    assert "100Mi" not in after, "the default hard threshold shown as MiB, like the others"


def test_systemd_notifications(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    import socket

    address = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(address)
        process = EvictdProcess(tmp_path, evictd="housekeepingInterval: 100ms\n", args=("--cycles", "3"),
                                env={"NOTIFY_SOCKET": address})
        evictd_processes.append(process)
        assert process.process.wait(timeout=30) == 0
        listener.settimeout(2)
        messages = []
        while not messages or messages[-1] != "STOPPING=1":
            messages.append(listener.recv(4096).decode())
    assert messages == ["READY=1", "WATCHDOG=1", "WATCHDOG=1", "WATCHDOG=1", "STOPPING=1"]


def test_a_pods_cgroup_of_the_other_cgroup_driver_is_named_in_a_warning(
        tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    # A systemd-driver node (kubepods.slice) while evictd is told cgroupfs: it would silently find no pods.
    with temporary_cgroup(CGROUP_MOUNT / "memory") as base:
        (base / "kubepods.slice").mkdir()
        daemon = start_evictd(tmp_path, evictd_processes,
                              evictd=f"cgroupDriver: cgroupfs\ncgroupRoot: /{base.name}\n")
        event = daemon.wait_for(lambda e: e.get("level") == "warning" and e.get("other_driver") is not None)
        assert event["cgroup_driver"] == "cgroupfs" and event["pods_cgroup"] == f"{base.name}/kubepods"
        assert event["other_driver"] == "systemd" and event["other_pods_cgroup"] == f"{base.name}/kubepods.slice"
        assert "cgroupDriver" in event["event"]
        assert daemon.stop() == 0
        assert not any("no pods cgroup on this node" in str(e.get("event")) for e in daemon.events)


def make_run(*variables: str) -> subprocess.CompletedProcess[str]:
    """`make run` in the checkout, as README tells a newcomer to type it (with variables to end it)."""
    process = subprocess.Popen(["make", "-s", "run", *variables], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # make and the evictd it started
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def runs_in(state_dir: Path) -> set[str]:
    from evictd.record.recording import read_recording
    from evictd.state_dir import RECORDING_FOLDER

    folder = state_dir / RECORDING_FOLDER
    return {record.run for record in read_recording(str(folder))[0]} if folder.is_dir() else set()


def test_make_run_keeps_its_state_in_the_checkout_even_where_a_file_names_a_state_dir_unless_state_is_empty(tmp_path: Path) -> None:
    # Another port than the default: other evictd processes on this machine may hold 10262.
    port_only = tmp_path / "port.yaml"
    port_only.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nmetricsBindAddress: 127.0.0.1:0\n")
    machine_runs = runs_in(Path("/var/lib/evictd"))
    checkout_runs = runs_in(ROOT / ".state")
    done = make_run(f"CONFIG=config/kubelet-config.yaml {port_only}", "ARGS=--cycles 2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ("make run: evictd is .venv/bin/evictd (for 'evictd ...' in this shell: "
                                           ". .venv/bin/activate)")
    (new_run,) = runs_in(ROOT / ".state") - checkout_runs
    assert runs_in(Path("/var/lib/evictd")) == machine_runs, "nothing of this run in the machine's stateDir"
    assert subprocess.run(["git", "check-ignore", "-q", ".state/"], cwd=ROOT, check=False).returncode == 0

    own = tmp_path / "own.yaml"
    own.write_text(port_only.read_text() + f"stateDir: {tmp_path / 'state'}\n")
    # config/evictd-config.yaml names /var/lib/evictd: make run's STATE overrides what a file names.
    overridden = make_run(f"CONFIG=config/kubelet-config.yaml {own}", "ARGS=--cycles 1")
    assert overridden.returncode == 0, overridden.stderr
    assert runs_in(tmp_path / "state") == set()
    assert len(runs_in(ROOT / ".state") - checkout_runs - {new_run}) == 1
    # STATE= (empty) leaves the stateDir to the files.
    named = make_run(f"CONFIG=config/kubelet-config.yaml {own}", "STATE=", "ARGS=--cycles 1")
    assert named.returncode == 0, named.stderr
    assert len(runs_in(tmp_path / "state")) == 1


def test_the_live_view_leaves_one_frame_in_a_real_terminals_scrollback(tmp_path: Path) -> None:
    # tmux is the terminal: it interprets what evictd writes, and its history is what a person scrolls back to.
    config = tmp_path / "e.yaml"
    config.write_text("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nhousekeepingInterval: 1s\n"
                      f"metricsBindAddress: 127.0.0.1:0\nstateDir: {tmp_path / 'state'}\n")
    socket_name = f"evictd-test-{os.getpid()}"
    tmux = ["tmux", "-L", socket_name]
    command = (f"cd {ROOT} && echo before && {sys.executable} -m evictd run --config {config} --cycles 3; "
               "echo after-$?; sleep 60")
    subprocess.run([*tmux, "new-session", "-d", "-x", "140", "-y", "45", command], check=True, timeout=30)
    try:
        deadline = time.monotonic() + 60
        history = ""
        while time.monotonic() < deadline and "after-" not in history:
            time.sleep(0.5)
            history = subprocess.run([*tmux, "capture-pane", "-p", "-S", "-1000"], capture_output=True, text=True,
                                     check=True, timeout=30).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, timeout=30)
    assert "after-0" in history, history
    lines = history.splitlines()
    headers = [line for line in lines if line.startswith("evictd on ")]
    assert len(headers) == 1 and " cycle 3 " in headers[0], history
    assert lines.index(headers[0]) > lines.index("before") and lines.index("after-0") > lines.index(headers[0])

"""Running `evictd run` as a real process in tests: configuration files, JSON log events, HTTP probes."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KUBELET_HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
EVICTD_HEADER = "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"

Event = dict[str, Any]
NODE_LOCK_ENV = "EVICTD_NODE_LOCK"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EvictdProcess:
    """`evictd run` with JSON logs on a pipe; every log line is parsed into an event as it arrives.

    Its stateDir is `<tmp_path>/state` unless `evictd` names one: processes of one test share it. `wrapper` is a
    command evictd is started through (`prlimit --memlock=...`, `setpriv ...`): what it changes holds from the
    interpreter's first instruction, unlike a `preexec_fn` (which forks in a process with gRPC loaded).
    """

    def __init__(self, tmp_path: Path, kubelet: str = "", evictd: str = "", args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, wrapper: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        if "stateDir:" not in evictd:  # never the machine's /var/lib/evictd: each test its own state
            evictd += f"stateDir: {tmp_path / 'state'}\n"
        config = tmp_path / "evictd.yaml"
        self.config_path = config
        # The test's own stateDir (the flight recording is written there), unless the test names one.
        self.state_dir = tmp_path / "state"
        if "stateDir:" not in evictd:
            evictd = (evictd if evictd.endswith("\n") or not evictd else evictd + "\n") + f"stateDir: {self.state_dir}\n"
        config.write_text(
            KUBELET_HEADER + kubelet + "---\n" + EVICTD_HEADER + f"metricsBindAddress: 127.0.0.1:{self.port}\n"
            "logFormat: json\n" + evictd,
            encoding="utf-8",
        )
        self.events: list[Event] = []
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._reading = threading.Event()  # cleared: the log pipe is not read (`pause_reading`)
        self._reading.set()
        self.process = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "evictd", "run", "--config", str(config), *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # Each process its own node lock unless the test names one (tests stand for several nodes at once).
            # PYTHONFAULTHANDLER: a daemon that does not stop is sent SIGABRT and prints every thread's stack (`stop`).
            env={**os.environ, NODE_LOCK_ENV: str(tmp_path / "node.lock"), "PYTHONFAULTHANDLER": "1", **(env or {})},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._reading.wait()
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"event": "unparsed", "line": line}
            event["_received"] = time.time()
            self._queue.put(event)
        self._queue.put(None)

    def pause_reading(self) -> None:
        """Stop reading evictd's stdout (after the line in hand): the pipe fills as a stalled journald's would."""
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def wait_for(self, predicate: Callable[[Event], bool], timeout: float = 20.0) -> Event:
        """Return the first event (old or new) matching `predicate`; fail after `timeout` seconds."""
        for event in self.events:
            if predicate(event):
                return event
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching event within {timeout}s; {self.loop_counts()}; "
                                     f"got: {self.events[-15:]}")
            try:
                event = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if event is None:
                raise AssertionError(f"evictd exited ({self.process.wait()}); stderr: {self.stderr()}; "
                                     f"events: {self.events[-15:]}")
            self.events.append(event)
            if predicate(event):
                return event

    def wait_event(self, name: str, timeout: float = 20.0, **fields: Any) -> Event:
        return self.wait_for(lambda e: e.get("event") == name and all(e.get(k) == v for k, v in fields.items()),
                             timeout)

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except urllib.error.URLError as exc:  # nothing listening: say whether evictd is gone, and what it said
            code = self.process.poll()
            state = "running" if code is None else f"exited {code}; stderr: {self.stderr()[-2000:]}"
            raise AssertionError(f"GET {path} on port {self.port} failed ({exc.reason}); evictd {state}; "
                                 f"events: {self.events[-10:]}") from exc

    def loop_counts(self) -> str:
        """What the loop did, from /metrics: cycles run and wake-ups by cause (a wait that timed out says whether
        the loop was woken at all), or why that could not be read."""
        if self.process.poll() is not None:
            return f"evictd exited {self.process.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
                page = response.read().decode()
        except OSError as exc:
            return f"/metrics unreadable ({exc})"
        wanted = ("evictd_cycles_total ", "evictd_wakeups_total{", "evictd_threshold_met{")
        return "loop: " + ", ".join(line for line in page.splitlines()
                                    if line.startswith(wanted) and not line.endswith(" 0.0"))

    def metric(self, name: str, **labels: str) -> float:
        """Return the one sample of the /metrics page named `name` whose labels include `labels` (two or more
        such samples fail: the labels given do not name one series)."""
        _, page = self.http("/metrics")
        found = []
        for line in page.splitlines():
            sample_name, _, rest = line.partition("{")
            if not rest:
                sample_name, _, rest = line.partition(" ")
                if sample_name == name and not labels:
                    found.append(float(rest.split()[-1]))
                continue
            if sample_name != name:
                continue
            label_text, _, value = rest.rpartition("} ")
            have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', label_text))
            if all(have.get(key) == wanted for key, wanted in labels.items()):
                found.append(float(value.split()[-1]))
        assert len(found) <= 1, f"{name} {labels} names {len(found)} series"
        if not found:
            raise AssertionError(f"{name} {labels} not in /metrics")
        return found[0]

    def wait_for_cycles(self, count: int, timeout: float = 10.0) -> None:
        """Return once `count` cycles have finished (by /metrics); fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.metric("evictd_cycles_total") < count:
            assert time.monotonic() < deadline, f"{count} cycles did not finish within {timeout}s"
            time.sleep(0.05)

    def stop(self, timeout: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Where it hangs: faulthandler prints each thread's stack to stderr on SIGABRT.
            self.process.send_signal(signal.SIGABRT)
            self.process.wait(timeout=10)
            raise AssertionError(f"evictd did not stop within {timeout} s of SIGTERM; its threads at SIGABRT:\n"
                                 f"{self.stderr()[-6000:]}") from None
        self._reader.join(timeout=5)
        while not self._queue.empty():
            event = self._queue.get()
            if event is not None:
                self.events.append(event)
        return code

    def stderr(self) -> str:
        return self.process.stderr.read() if self.process.stderr and self.process.poll() is not None else ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def memory_wakeups(process: EvictdProcess) -> float:
    """How many times a memory crossing woke `process`'s loop: a memcg usage level (v1) or the memory watch's look
    (which on v1 looks beside the levels; whichever sees a crossing first wakes the loop)."""
    return (process.metric("evictd_wakeups_total", cause="memcg")
            + process.metric("evictd_wakeups_total", cause="memory_watch"))


def start_evictd(tmp_path: Path, processes: list[EvictdProcess], *, kubelet: str = "", evictd: str = "",
                 cycles: int = 1) -> EvictdProcess:
    """Start `evictd run` (added to `processes`, the fixture that kills what is left) and return once it has
    finished `cycles` cycles."""
    daemon = EvictdProcess(tmp_path, kubelet=kubelet, evictd=evictd)
    processes.append(daemon)
    daemon.wait_event("evictd started")
    daemon.wait_for_cycles(cycles)
    return daemon


def evictd_command(*args: str) -> subprocess.CompletedProcess[str]:
    """Run an offline `evictd` command (replay, explain, record export) to its end."""
    return subprocess.run([sys.executable, "-m", "evictd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def shadow_report(state_dir: Path) -> dict[str, Any]:
    """`evictd shadow-report --output json` of a dry-run evictd's state folder (its shadow.jsonl)."""
    done = evictd_command("shadow-report", "--state-dir", str(state_dir), "--output", "json")
    if done.returncode != 0:
        raise AssertionError(f"evictd shadow-report exited {done.returncode}: {done.stderr.strip()}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def mem_available_bytes() -> int:
    """MemTotal minus the root memory cgroup's working set: the node's memory.available right now."""
    with open("/proc/meminfo", encoding="ascii") as handle:
        total = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("MemTotal:"))
    usage = int(Path("/sys/fs/cgroup/memory/memory.usage_in_bytes").read_text())
    stat = Path("/sys/fs/cgroup/memory/memory.stat").read_text().split("\n")
    inactive = next(int(line.split()[1]) for line in stat if line.startswith("total_inactive_file "))
    return total - max(usage - inactive, 0)


# A whole-machine crossing (the `serial` tier, where nothing but the linters runs beside, a few hundred MiB that
# hardly move): a threshold this far below what is available at the start, crossed by a hog of HOG_BYTES, which
# passes it by 1 GiB. Smaller hogs are quicker: a page fault costs ~10 us in these VMs, 5 GiB took 12-18 s.
CROSSING_DEPTH = 3 << 29  # 1.5 GiB
HOG_BYTES = 5 << 29  # 2.5 GiB


def allocate(size: int) -> subprocess.Popen[str]:
    """Start a process that fills `size` bytes (every page touched), prints the time, and holds them."""
    code = ("import sys, time\n"
            f"block = b'\\x01' * {size}\n"
            "print(time.time(), flush=True)\n"
            "sys.stdin.read()\n")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def pid_available() -> int:
    limits = [int(Path(f"/proc/sys/kernel/{name}").read_text()) for name in ("pid_max", "threads-max")]
    tasks = int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
    return min(limits) - tasks



def summary_api_settings(tmp_path: Path, kubeconfig: Path, node: str, summary_url: str) -> str:
    """The EvictdConfiguration body of an evictd reading the kubelet's Summary API at `summary_url` (a token in
    `tmp_path`), the node `node` through `kubeconfig`, no container runtime, at a 1 s interval without wake-ups."""
    token = tmp_path / "kubelet-token"
    token.write_text("kubelet-reader-token")
    return (f"nodeName: {node}\nkubeconfig: {kubeconfig}\n"
            f"containerRuntimeEndpoint: unix://{tmp_path}/no-runtime.sock\n"
            f"statsSource: kubelet\nkubeletSummaryURL: {summary_url}\nkubeletTokenFile: {token}\n"
            "housekeepingInterval: 1s\npsiWakeups: false\nmemcgWakeups: false\nshutdownTimeout: 5s\n")

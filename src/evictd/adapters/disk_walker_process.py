"""The disk walker process: pods' volumes and logs walked in a child process, so no walk slows a cycle.

Runs `PodDiskWalker` passes in ``python -m evictd.adapters.disk_walker_process`` and brings its figures into the
daemon's `PodDiskStore`. A process, not a thread: a walking thread holds the interpreter lock between system calls
(bench/disk_walk_isolation.py), and a niced child (`DEFAULT_NICE`) yields the CPU to the daemon. JSON lines:
daemon -> child ``{"pods": [[uid, namespace, name], ...]}`` when the wanted pods change; child -> daemon one line per
completed round (``pod``, ``at_monotonic``, ``at_wall``, ``volumes``, ``logs``, ``problem``). The child's pace is
docs/disk-usage.md's; it exits when stdin closes or at SIGTERM. `DiskWalkerProcess`: one thread reads lines into the
store, another writes wanted pods (the cycle never writes to a pipe); a failed child is restarted after a growing
delay, figures aging meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any

from evictd.adapters.pod_disk_usage import (
    DEFAULT_ENTRY_BUDGET,
    PodDiskFigures,
    PodDiskStore,
    PodDiskWalker,
    PodKey,
    SpaceUsed,
)
from evictd.core.errors import ConfigError, SampleError
from evictd.log import Log

# A pass every 10 s: the housekeeping interval's default, so figures are as fresh as when every cycle walked.
DEFAULT_PERIOD_S = 10.0
# After a pass, rest at least this many seconds per second walked: the walker stays under half a core.
REST_PER_WALK_SECOND = 1.0
# ... and never less than this, so that a short period over tiny trees does not spin.
MIN_REST_S = 0.1
# The child's nice value: the daemon (nice 0) gets the CPU first when both are runnable.
DEFAULT_NICE = 10
# Delays before starting a child again after one exited, doubling up to the last.
RESTART_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
# How long `stop` waits for the child to exit after SIGTERM, before killing it.
STOP_WAIT_S = 2.0
# The longest line either side accepts (a round's figures of a pod with hundreds of volumes fit easily).
MAX_LINE_BYTES = 1 << 20
# Names up to a DNS subdomain's length are shared between lines (`_shared`).
SHARED_NAME_MAX_CHARS = 253


@dataclass(frozen=True, slots=True)
class WalkerSettings:
    """What the child needs to know: where pod folders are and how much it may walk."""

    kubelet_root: str
    pod_logs_dir: str
    entry_budget: int = DEFAULT_ENTRY_BUDGET
    period_s: float = DEFAULT_PERIOD_S


class LineError(ValueError):
    """A line from the other side that is not what the protocol says."""


# --- The protocol ---------------------------------------------------------------------------------


def pods_line(pods: Sequence[PodKey]) -> bytes:
    """Return the daemon's line naming the wanted pods."""
    return json.dumps({"pods": [[p.uid, p.namespace, p.name] for p in pods]}).encode() + b"\n"


def parse_pods_line(line: bytes) -> list[PodKey]:
    """Return the pods of a daemon line; raise LineError if it is not one."""
    try:
        doc = json.loads(line)
        return [PodKey(*_strings(entry, 3)) for entry in doc["pods"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise LineError(f"not a pods line: {exc}") from None


def figures_line(figures: PodDiskFigures) -> bytes:
    """Return the child's line carrying one round's figures."""
    pod = figures.pod
    doc = {
        "pod": [pod.uid, pod.namespace, pod.name],
        "at_monotonic": figures.measured_at_monotonic,
        "at_wall": figures.measured_at_wall,
        "volumes": [[name, used.used_bytes, used.inodes_used] for name, used in figures.volumes],
        "logs": [[name, used.used_bytes, used.inodes_used] for name, used in figures.logs],
        "problem": None if figures.problem is None else [figures.problem.source, figures.problem.reason],
    }
    return json.dumps(doc).encode() + b"\n"


def parse_figures_line(line: bytes) -> PodDiskFigures:
    """Return the figures of a child line; raise LineError if it is not one."""
    try:
        doc = json.loads(line)
        problem = doc["problem"]
        return PodDiskFigures(
            pod=PodKey(*_strings(doc["pod"], 3)),
            measured_at_monotonic=_finite(doc["at_monotonic"]),
            measured_at_wall=_finite(doc["at_wall"]),
            volumes=_usages(doc["volumes"]),
            logs=_usages(doc["logs"]),
            problem=None if problem is None else SampleError(*_strings(problem, 2)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise LineError(f"not a figures line: {exc}") from None


def _strings(value: Any, count: int) -> list[str]:
    if not (isinstance(value, list) and len(value) == count and all(isinstance(item, str) for item in value)):
        raise TypeError(f"expected {count} strings, got {str(value)[:80]}")
    return [_shared(item) for item in value]


def _shared(name: str) -> str:
    """A name as one object across every line that names it (not a new copy per line)."""
    return sys.intern(name) if len(name) <= SHARED_NAME_MAX_CHARS else name


def _finite(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"expected a number, got {str(value)[:80]}")
    return float(value)


def _usages(value: Any) -> tuple[tuple[str, SpaceUsed], ...]:
    if not isinstance(value, list):
        raise TypeError("expected a list of [name, bytes, inodes]")
    result = []
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and all(type(n) is int and n >= 0 for n in entry[1:])):
            raise TypeError(f"expected [name, bytes, inodes], got {str(entry)[:80]}")
        result.append((_shared(entry[0]), SpaceUsed(entry[1], entry[2])))
    return tuple(result)


# --- The child ------------------------------------------------------------------------------------


class _WantedPods:
    """The pods the daemon last asked for: one reference replaced whole by the stdin thread (no lock needed)."""

    def __init__(self) -> None:
        self.pods: tuple[PodKey, ...] = ()
        self.arrived = threading.Event()  # set when a pods line came in since the loop last looked

    def take(self) -> tuple[PodKey, ...]:
        self.arrived.clear()
        return self.pods


def _read_requests(stream: IO[bytes], wanted: _WantedPods) -> None:
    """Read pods lines until the daemon closes the pipe, then end the process: nobody reads the figures."""
    for line in iter(lambda: stream.readline(MAX_LINE_BYTES), b""):
        try:
            wanted.pods = tuple(parse_pods_line(line))
            wanted.arrived.set()
        except LineError as exc:
            print(f"evictd disk walker: ignored a line from the daemon: {exc}", file=sys.stderr, flush=True)
    os._exit(0)


def child_main(walker: PodDiskWalker, period_s: float, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Walk the wanted pods pass after pass, writing each completed round to `stdout`; never returns."""
    wanted = _WantedPods()
    threading.Thread(target=_read_requests, args=(stdin, wanted), name="requests", daemon=True).start()
    wanted.arrived.wait()
    while True:
        started = time.monotonic()
        for figures in walker.run_pass(wanted.take()):
            stdout.write(figures_line(figures))
            stdout.flush()
        walked = time.monotonic() - started
        time.sleep(max(walked * REST_PER_WALK_SECOND, MIN_REST_S))
        wanted.arrived.wait(max(0.0, started + period_s - time.monotonic()))


def main(argv: Sequence[str]) -> int:
    """Entry point of the child: `argv` is one JSON object of WalkerSettings."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        settings = WalkerSettings(**json.loads(argv[0]))
        walker = PodDiskWalker(kubelet_root=settings.kubelet_root, pod_logs_dir=settings.pod_logs_dir,
                               entry_budget=settings.entry_budget)
        period_s = _finite(settings.period_s)
        os.nice(DEFAULT_NICE)
    except (IndexError, ValueError, TypeError, OSError, ConfigError) as exc:
        print(f"evictd disk walker: needs one JSON argument of settings: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(BrokenPipeError):  # the daemon is gone
        child_main(walker, period_s, sys.stdin.buffer, sys.stdout.buffer)
    return 0


# --- The daemon's side ----------------------------------------------------------------------------


class DiskWalkerProcess:
    """Keeps a disk walker child running and its figures flowing into `store`; `start` once, `stop` once. `log`
    gets warnings; `command` is the child's command line without its settings (tests may run another program)."""

    def __init__(self, store: PodDiskStore, settings: WalkerSettings, *,
                 log: Log | None = None, command: Sequence[str] | None = None) -> None:
        self.store = store
        self.settings = settings
        self._warn: Callable[..., object] = log.warning if log is not None else (lambda event, **fields: None)
        self._command = list(command) if command is not None else [
            sys.executable, "-m", "evictd.adapters.disk_walker_process"]
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._supervisor: threading.Thread | None = None
        self.children_started = 0

    def start(self) -> None:
        self._supervisor = threading.Thread(target=self._supervise, name="evictd-disk-walker", daemon=True)
        self._supervisor.start()

    def stop(self) -> None:
        """End the child (SIGTERM, SIGKILL after STOP_WAIT_S) and its threads; a signal, since the feeding thread
        may be blocked writing to its stdin."""
        self._stopping.set()
        self.store.nudge()  # the feeding thread ends now, not at its wait's end (up to 1 s more on every stop)
        with self._lock:
            child = self._child
        if child is not None:
            _end(child)
        if self._supervisor is not None:
            self._supervisor.join(STOP_WAIT_S)

    def child_pid(self) -> int | None:
        with self._lock:
            return self._child.pid if self._child is not None and self._child.poll() is None else None

    def _supervise(self) -> None:
        delays = iter(RESTART_DELAYS_S)
        delay = RESTART_DELAYS_S[0]
        while not self._stopping.is_set():
            child = self._spawn()
            if child is not None:
                feeder = threading.Thread(target=self._feed, args=(child,), name="evictd-disk-walker-feed",
                                          daemon=True)
                feeder.start()
                if self._read(child):
                    delays = iter(RESTART_DELAYS_S)  # it worked for a while: the next restart is quick again
                status = child.wait()
                feeder.join()
                if self._stopping.is_set():
                    return
                self._warn("disk walker exited; starting it again", status=status)
            delay = next(delays, delay)
            self._stopping.wait(delay)

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        argument = json.dumps(asdict(self.settings))
        try:
            child = subprocess.Popen([*self._command, argument], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as exc:
            self._warn("disk walker could not be started", error=str(exc))
            return None
        with self._lock:
            self._child = child
        self.children_started += 1
        if self._stopping.is_set():  # stop() ran before the child existed: it saw no child to end
            _end(child)
        return child

    def _read(self, child: subprocess.Popen[bytes]) -> bool:
        """Record every figures line until the child's stdout ends; return whether any line was read."""
        assert child.stdout is not None
        got_any = False
        for line in iter(lambda: child.stdout.readline(MAX_LINE_BYTES), b""):  # type: ignore[union-attr]
            try:
                self.store.record(parse_figures_line(line))
                got_any = True
            except LineError as exc:
                self._warn("disk walker sent a line that cannot be read; restarting it", error=str(exc))
                child.kill()
                break
        return got_any

    def _feed(self, child: subprocess.Popen[bytes]) -> None:
        """Write the wanted pods to the child each time they change, until the child ends."""
        assert child.stdin is not None
        sent = -1
        while child.poll() is None and not self._stopping.is_set():
            version, pods = self.store.wait_for_wanted(sent, timeout_s=1.0, until=self._stopping.is_set)
            if version == sent:
                continue
            try:
                child.stdin.write(pods_line(pods))
                child.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                return  # the child ended (or stop() closed the pipe)
            sent = version


def _end(child: subprocess.Popen[bytes]) -> None:
    """Terminate `child`, kill it if it has not exited after STOP_WAIT_S, and reap it."""
    child.terminate()
    try:
        child.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

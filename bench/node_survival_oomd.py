"""systemd-oomd as a node-survival protector (issue 36 item 5), guest side.

systemd-oomd (Debian's ``systemd-oomd`` package, systemd 252) kills a whole cgroup with SIGKILL when the memory
pressure (``memory.pressure``, ``full`` avg10) of a cgroup it watches stays above a limit for a duration, with
reclaim going on in it. It learns which cgroups to watch from the service manager, not from its configuration:
at start-up it connects to PID 1's varlink socket (``/run/systemd/io.system.ManagedOOM``) and subscribes
(``io.systemd.ManagedOOM.SubscribeManagedOOMCGroups``, ``more``); PID 1 answers with the cgroups of the active
units that set ``ManagedOOMMemoryPressure=kill`` (or ``ManagedOOMSwap=kill``), each with its limit. oomd exits
at start-up when that socket cannot be connected to, and again when a reconnection fails later (systemd 252,
src/oom/oomd-manager.c ``manager_start`` and the memory-pressure timer). The guest has no systemd as PID 1, so
`ManagedOOMServer` plays PID 1's part: it listens on that socket and reports the pods cgroup.

What the arena reports (an operator putting the pods cgroup under oomd the way Debian's package puts user
sessions under it: its drop-in /usr/lib/systemd/system/user@.service.d/10-oomd-user-service-defaults.conf sets
``ManagedOOMMemoryPressure=kill`` and ``ManagedOOMMemoryPressureLimit=50%``; the drop-ins are the
distribution's, not upstream's): ``/kubepods`` (the kubelet's cgroupfs layout), kill, 50 %. The duration is
oomd's own ``DefaultMemoryPressureDurationSec``: Debian's package sets 20 s
(/usr/lib/systemd/oomd.conf.d/10-oomd-defaults.conf; systemd's built-in default is 30 s, and 60 % its default
limit). oomd reads the configuration of the guest's root, which is this host's (read-only to the guest).

How oomd picks its victim under the watched cgroup (systemd 252, src/oom/oomd-manager.c and oomd-util.c): the
candidates are the leaf cgroups below it (or the highest cgroups with ``memory.oom.group`` set), ranked by
their ``pgscan`` (memory.stat) growth since oomd's last look, then by ``memory.current``; it kills every process
of the first with SIGKILL, then waits 15 s before it acts again. In the arena's stand-in layout the leaves are
the pods' container cgroups. Its pressure signal is the watched cgroup's own: a stall of the daemons outside
the pods cgroup is not in it.

The protector runs as its unit runs it (/lib/systemd/system/systemd-oomd.service): in
``system.slice/systemd-oomd.service`` with ``OOMScoreAdjust=-900``, ``MemoryMin=64M`` and ``MemoryLow=64M`` (written,
but system.slice has no protection of its own and the guest mounts cgroup2 without memory_recursiveprot: the
kernel bounds a child's protection by its parent's, so they protect little here),
as the ``systemd-oom`` user with ``CAP_KILL`` and ``CAP_DAC_OVERRIDE`` (``setpriv``); no D-Bus in the guest (oomd
waits for the system bus socket to appear, ``bus_open_system_watch_bind``, and goes on without it).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from guest_v2_node import CGROUP
from node_survival_nodes import join_unit

OOMD = "systemd-oomd"
OOMD_BINARY = "/lib/systemd/systemd-oomd"
OOMD_UNIT = "system.slice/systemd-oomd.service"
OOMD_USER = "systemd-oom"
# lib/systemd/system/systemd-oomd.service
OOMD_OOM_SCORE_ADJ = -900
OOMD_MEMORY_PROTECTION = 64 << 20  # MemoryMin= and MemoryLow=
OOMD_CAPS = "+kill,+dac_override"  # AmbientCapabilities= and CapabilityBoundingSet=
# PID 1's side (systemd 252 src/basic/def.h VARLINK_ADDR_PATH_MANAGED_OOM_SYSTEM) and oomd's own server
# (VARLINK_ADDR_PATH_MANAGED_OOM_USER, where user managers report; oomd creates it).
SYSTEM_ADDRESS = Path("/run/systemd/io.system.ManagedOOM")
OOMD_ADDRESS = Path("/run/systemd/oom/io.system.ManagedOOM")
SUBSCRIBE = "io.systemd.ManagedOOM.SubscribeManagedOOMCGroups"
PODS_CGROUP = "/kubepods"
PRESSURE_LIMIT_PERCENT = 50  # as the distributions' user@.service drop-in
READY_S = 15.0
UINT32_MAX = 2**32 - 1


def limit_scaled(percent: float) -> int:
    """A percentage as systemd sends ManagedOOMMemoryPressureLimit= (100 % is 2^32 - 1, rounded)."""
    return int((round(percent * 100) * UINT32_MAX + 5000) // 10000)


def managed_cgroups(path: str = PODS_CGROUP, percent: float = PRESSURE_LIMIT_PERCENT) -> dict[str, Any]:
    """What PID 1 reports for one active unit with ManagedOOMMemoryPressure=kill and its limit."""
    return {"cgroups": [{"mode": "kill", "path": path, "property": "ManagedOOMMemoryPressure",
                         "limit": limit_scaled(percent)}]}


class ManagedOOMServer:
    """PID 1's io.systemd.ManagedOOM varlink service, reduced to what oomd asks of it: one subscription,
    answered with `managed_cgroups()` as a reply that continues (the connection stays open; nothing changes
    later). Varlink's framing: JSON objects, each ended by a NUL byte, over a stream socket."""

    def __init__(self, address: Path = SYSTEM_ADDRESS, report: dict[str, Any] | None = None) -> None:
        self.address, self.report = address, report or managed_cgroups()
        self.calls: list[dict[str, Any]] = []
        self.errors: list[str] = []
        address.parent.mkdir(parents=True, exist_ok=True)
        address.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(address))
        self.listener.listen(4)
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def subscribed(self) -> bool:
        return any(call.get("method") == SUBSCRIBE for call in self.calls)

    def _accept(self) -> None:
        while True:
            try:
                peer, _ = self.listener.accept()
            except OSError:  # closed
                return
            self._open.append(peer)
            threading.Thread(target=self._serve, args=(peer,), daemon=True).start()

    def _serve(self, peer: socket.socket) -> None:
        pending = b""
        try:
            while chunk := peer.recv(65536):
                pending += chunk
                while b"\0" in pending:
                    message, pending = pending.split(b"\0", 1)
                    call = json.loads(message)
                    self.calls.append(call)
                    peer.sendall(json.dumps(self.answer(call)).encode() + b"\0")
        except (OSError, ValueError) as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            peer.close()

    def answer(self, call: dict[str, Any]) -> dict[str, Any]:
        if call.get("method") != SUBSCRIBE:
            return {"error": "org.varlink.service.MethodNotFound", "parameters": {"method": call.get("method")}}
        if call.get("parameters"):
            return {"error": "org.varlink.service.InvalidParameter", "parameters": {"parameter": "parameters"}}
        return {"parameters": self.report, **({"continues": True} if call.get("more") else {})}

    def close(self) -> None:
        self.listener.close()
        for peer in self._open:
            with contextlib.suppress(OSError):
                peer.shutdown(socket.SHUT_RDWR)
        self.address.unlink(missing_ok=True)


class PressureWatch:
    """What oomd acts on, read as it reads it: the watched cgroup's ``memory.pressure`` ``full`` avg10, once a
    second (oomd's MEM_PRESSURE_INTERVAL_USEC). Recorded beside the run for diagnosis: its peak and the longest
    stretch above the limit (oomd needs DefaultMemoryPressureDurationSec of it, with reclaim in the cgroup)."""

    def __init__(self, cgroup: str = PODS_CGROUP, limit_percent: float = PRESSURE_LIMIT_PERCENT) -> None:
        self.path, self.limit = CGROUP / cgroup.lstrip("/") / "memory.pressure", limit_percent
        self.samples: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self.stopping.wait(1.0):
            with contextlib.suppress(OSError, ValueError, IndexError):
                full = next(line for line in self.path.read_text().splitlines() if line.startswith("full"))
                self.samples.append((time.monotonic(), float(full.split()[1].split("=")[1])))

    def figures(self) -> dict[str, Any]:
        self.stopping.set()
        self._thread.join(timeout=3)
        longest, since = 0.0, None
        for at, avg10 in self.samples:
            if avg10 > self.limit:
                since = at if since is None else since
                longest = max(longest, at - since)
            else:
                since = None
        return {"fullAvg10Max": max((a for _, a in self.samples), default=None),
                "secondsAboveLimit": sum(1 for _, a in self.samples if a > self.limit),
                "longestAboveLimitS": round(longest, 1), "limitPercent": self.limit}


def oomd_argv() -> list[str]:
    """Its unit's ExecStart= as its unit's user with its unit's capabilities, in its unit's cgroup."""
    setpriv = ["setpriv", f"--reuid={OOMD_USER}", f"--regid={OOMD_USER}", "--clear-groups",
               f"--inh-caps={OOMD_CAPS}", f"--ambient-caps={OOMD_CAPS}", f"--bounding-set=-all,{OOMD_CAPS}"]
    prefix = join_unit(OOMD_UNIT, OOMD_OOM_SCORE_ADJ)
    return ["sh", "-c", prefix + 'exec "$@"', "sh", *setpriv, OOMD_BINARY]


class OomdProcess:
    """systemd-oomd in the guest beside `ManagedOOMServer`; its log (stderr, no journal) in `log_path`."""

    def __init__(self, log_path: Path, log_level: str = "info") -> None:
        if not Path("/proc/pressure/memory").exists():
            raise RuntimeError("systemd-oomd needs PSI (/proc/pressure/memory): run with --kernel psi")
        if not Path(OOMD_BINARY).exists():
            raise RuntimeError(f"{OOMD_BINARY} missing: apt-get install systemd-oomd (at the host's systemd version)")
        self.log_path = log_path
        self.server = ManagedOOMServer()
        own = OOMD_ADDRESS.parent  # where oomd binds its own server: its unit's socket unit makes it
        own.mkdir(parents=True, exist_ok=True)
        uid = int(subprocess.run(["id", "-u", OOMD_USER], check=True, capture_output=True, text=True).stdout)
        os.chown(own, uid, uid)
        argv = oomd_argv()  # (makes its cgroup)
        for name in ("memory.min", "memory.low"):
            (CGROUP / OOMD_UNIT / name).write_text(str(OOMD_MEMORY_PROTECTION))
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed in stop)
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "SYSTEMD_LOG_TARGET": "console",
               "SYSTEMD_LOG_LEVEL": log_level}
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.watch = PressureWatch()
        deadline = time.monotonic() + READY_S
        while not (self.server.subscribed() and OOMD_ADDRESS.exists()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"systemd-oomd not ready (exit {self.process.returncode}): "
                                   f"{log_path.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)

    @classmethod
    def for_run(cls, work: Path) -> OomdProcess:
        """oomd for the run whose protector folder is `work`; its log kept in $UML_OUT (debug level: what it
        read and decided, for diagnosis; the outcomes come from the kernel and the API server)."""
        return cls(Path(os.environ["UML_OUT"]) / f"oomd-{work.parent.name}-{work.name}.log", "debug")

    def kills(self) -> list[str]:
        """The cgroups oomd's log says it killed ("Killed <cgroup> due to memory pressure ...")."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [line.split("Killed ", 1)[1].split(" ", 1)[0] for line in text.splitlines() if "Killed /" in line]

    def stop(self) -> dict[str, Any]:
        alive = self.process.poll() is None
        if alive:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.server.close()
        self._log.close()
        return {"oomdAliveAtEnd": alive, "oomdExit": self.process.returncode, "oomdKills": self.kills(),
                "oomdWatched": self.watch.figures(),
                "oomdSubscriptions": sum(1 for c in self.server.calls if c.get("method") == SUBSCRIBE),
                "oomdServerErrors": self.server.errors[:5]}

"""What a busy node without pressure costs evictd: cycles and CPU beside a page-cache churner (issue #29).

Runs the real `evictd run` (no Kubernetes API, 10 s housekeeping interval, memcg and PSI wake-ups on, the
recorder on: the shipped defaults) for `--duration` seconds (30) in each of three situations:

* ``churn, held``: beside a loop that writes a 64 MiB file (through the page cache, no fsync) and deletes it,
  with ``memory.available: 99%`` (a threshold held met, nothing to evict: no API);
* ``churn, far``: the same churner, a threshold far from met (``memory.available: 100Mi``);
* ``quiet``: no churner, the far threshold.

For each: the cycles finished in the window (``evictd_cycles_total`` on /metrics), the wake-ups by cause, the
daemon's CPU seconds in the window (utime + stime of /proc/<pid>/stat) and that CPU per hour. The load average is
printed at the start and the end: this machine is shared.

    .venv/bin/python bench/busy_idle.py [--duration 30] [--root CHECKOUT] [--only held|far|quiet]

`--root` runs another checkout's evictd (e.g. a `git worktree add` of an older commit) for a before/after.
Root is needed (memcg notifiers on the root memory cgroup).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHURN_BYTES = 64 << 20
CHURN_CHUNK = 1 << 20
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
WAKEUP_CAUSES = ("timer", "memcg", "memcg_rearm", "psi", "memory_watch", "signal", "eviction", "pod")
SITUATIONS = {
    "held": ("memory.available: '99%'", True),
    "far": ("memory.available: 100Mi", True),
    "quiet": ("memory.available: 100Mi", False),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def churn(folder: Path, stop: threading.Event) -> int:
    """Write a 64 MiB file and delete it, again and again, until `stop`; return the rounds."""
    chunk = os.urandom(CHURN_CHUNK)
    path = folder / "churn.bin"
    rounds = 0
    while not stop.is_set():
        with open(path, "wb") as handle:
            for _ in range(CHURN_BYTES // CHURN_CHUNK):
                handle.write(chunk)
        path.unlink()
        rounds += 1
    return rounds


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        page = response.read().decode()
    samples: dict[str, float] = {}
    for line in page.splitlines():
        if line.startswith(("evictd_cycles_total ", "evictd_wakeups_total{")):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime (fields 14 and 15)


def wait_for_cycles(port: int, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if metrics(port).get("evictd_cycles_total", 0) >= count:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"evictd did not finish {count} cycles within {timeout} s")
        time.sleep(0.1)


def run(root: Path, threshold: str, churning: bool, duration: float, work: Path) -> dict[str, float]:
    port = free_port()
    config = work / "evictd.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        f"evictionHard: {{{threshold}}}\n---\n"
        "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
        f"metricsBindAddress: 127.0.0.1:{port}\nlogFormat: json\nhousekeepingInterval: 10s\n"
        f"stateDir: {work / 'state'}\n", encoding="utf-8")
    env = {**os.environ, "EVICTD_NODE_LOCK": str(work / "node.lock"), "PYTHONPATH": str(root / "src")}
    daemon = subprocess.Popen([sys.executable, "-m", "evictd", "run", "--config", str(config)], cwd=root, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop = threading.Event()
    churner = threading.Thread(target=churn, args=(work, stop), daemon=True)
    try:
        wait_for_cycles(port, 1, 30)
        if churning:
            churner.start()
        time.sleep(2.0)  # the first notifications and their follow-ups settle
        before, cpu_before, began = metrics(port), cpu_s(daemon.pid), time.monotonic()
        time.sleep(duration)
        after, cpu_after, elapsed = metrics(port), cpu_s(daemon.pid), time.monotonic() - began
    finally:
        stop.set()
        if churner.is_alive():
            churner.join()
        daemon.terminate()
        daemon.wait(timeout=30)
    figures = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    figures["elapsed_s"] = elapsed
    figures["cpu_s"] = cpu_after - cpu_before
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose evictd runs")
    parser.add_argument("--only", choices=sorted(SITUATIONS), action="append")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON lines too")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, {os.uname().release}; load {os.getloadavg()[0]:.1f} at the start; "
          f"evictd from {args.root}")
    print(f"{'situation':14} {'cycles':>7} {'per interval':>12} {'CPU s':>7} {'CPU s/h':>8}  wake-ups")
    for name, (threshold, churning) in SITUATIONS.items():
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory(prefix="busy-idle-", dir="/var/tmp") as folder:
            figures = run(args.root, threshold, churning, args.duration, Path(folder))
        cycles = figures.get("evictd_cycles_total", 0.0)
        wakeups = {cause: int(figures.get(f'evictd_wakeups_total{{cause="{cause}"}}', 0)) for cause in WAKEUP_CAUSES}
        per_hour = figures["cpu_s"] / figures["elapsed_s"] * 3600
        label = f"{'churn' if churning else 'quiet'}, {name}" if churning else name
        print(f"{label:14} {cycles:7.0f} {cycles / (figures['elapsed_s'] / 10):12.1f} {figures['cpu_s']:7.2f} "
              f"{per_hour:8.0f}  " + " ".join(f"{c}={n}" for c, n in wakeups.items() if n))
        if args.json:
            print(json.dumps({"situation": name, **figures}))
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

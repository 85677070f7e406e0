"""A request flood on evictd's `/metrics`: the CPU the endpoint's thread spends, and what a probe waits.

The endpoint (evictd.observe.http_endpoint.HttpEndpoint with the daemon's own metrics registry) runs in this
process; FLOODERS client processes request `/metrics` back to back over new connections (as fast as they are
answered) for --seconds; a probe client asks `/healthz` every 0.5 s and times the answer. The endpoint thread's CPU
time comes from /proc/self/task/<tid>/stat. Two rows: as shipped (a render budget, then the last page; a request
budget) and unbounded (a rendering per request, no budget: the endpoint before the budgets). One JSON line per row
is appended to bench/results/metrics_flood.jsonl. Usage: .venv/bin/python bench/metrics_flood.py [--seconds 20]
[--flooders 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from evictd.core.signals import Signal
from evictd.observe.http_endpoint import Health, HttpEndpoint
from evictd.observe.metrics import Metrics

RESULTS = Path(__file__).resolve().parent / "results" / "metrics_flood.jsonl"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROBE_EVERY_S = 0.5


def thread_cpu_s(thread: threading.Thread) -> float:
    """utime + stime of `thread` (a thread of this process)."""
    fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def request(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def flood(port: int, until: float, counter: multiprocessing.Value) -> None:  # type: ignore[valid-type]
    done = 0
    while time.time() < until:
        try:
            request(port, "/metrics")
            done += 1
        except OSError:
            time.sleep(0.01)
    with counter.get_lock():
        counter.value += done


def populated_metrics() -> Metrics:
    """The daemon's registry with a series per signal, as after a few cycles."""
    metrics = Metrics()
    for signal in Signal:
        metrics.available.of(signal).labels(signal=str(signal)).set(1 << 30)
    for _ in range(5):
        metrics.cycles.inc()
    return metrics


def run(bounded: bool, seconds: float, flooders: int) -> dict[str, object]:
    metrics = populated_metrics()
    options = {} if bounded else {"renders_per_s": float("inf"), "requests_per_s": float("inf"),
                                  "request_burst": float("inf")}
    endpoint = HttpEndpoint("127.0.0.1:0", metrics.registry, Health(3600.0), **options)
    endpoint.start()
    try:
        page_bytes = len(request(endpoint.port, "/metrics"))
        cpu_before = thread_cpu_s(endpoint._thread)
        until = time.time() + seconds
        counter = multiprocessing.Value("i", 0)
        workers = [multiprocessing.Process(target=flood, args=(endpoint.port, until, counter))
                   for _ in range(flooders)]
        for worker in workers:
            worker.start()
        waits: list[float] = []

        def probe() -> None:
            while time.time() < until:
                began = time.monotonic()
                answer = request(endpoint.port, "/healthz")
                assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
                waits.append(time.monotonic() - began)
                time.sleep(PROBE_EVERY_S)

        prober = threading.Thread(target=probe)
        began = time.monotonic()
        prober.start()
        for worker in workers:
            worker.join()
        prober.join()
        elapsed = time.monotonic() - began
        cpu = thread_cpu_s(endpoint._thread) - cpu_before
    finally:
        endpoint.stop()
    waits.sort()
    return {"endpoint": "as shipped" if bounded else "unbounded", "seconds": round(elapsed, 1),
            "flooders": flooders, "requests_answered": counter.value,
            "requests_per_s": round(counter.value / elapsed), "page_bytes": page_bytes,
            "cpu_share_of_a_core": round(cpu / elapsed, 3),
            "healthz_p50_ms": round(1000 * waits[len(waits) // 2], 1), "healthz_max_ms": round(1000 * waits[-1], 1),
            "probes": len(waits)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--flooders", type=int, default=2)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()
    machine = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit,
               "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               "kernel": platform.release(), "load_before": os.getloadavg()[0]}
    RESULTS.parent.mkdir(exist_ok=True)
    for bounded in (True, False):
        row = {**machine, **run(bounded, args.seconds, args.flooders)}
        print(json.dumps(row))
        with RESULTS.open("a") as out:
            out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()

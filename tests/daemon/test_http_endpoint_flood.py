"""`evictd run` under a connection flood on its /metrics and /healthz port, all on 127.0.0.1.

The attack: any pod that reaches the port opens idle connections by the thousand (one thread each used to
OOM-kill evictd at its 128 MiB limit, or hit TasksMax), or resets connections mid-request (a traceback on stderr
each). Here a real `evictd run` is flooded, and its threads (/proc/<pid>/task), its VmRSS, /healthz and its
housekeeping cycles are measured while the flood lasts; every loop below is bounded in count and in time.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path

from evictd_process import EvictdProcess

IDLE_FLOOD = 2000
# Growth of VmRSS allowed while 2,000 connections are held ("a few MiB"; one thread each cost ~25 KiB).
RSS_GROWTH_LIMIT_KIB = 4 * 1024
INTERVAL_S = 0.2
# Opening the flood must not take longer than this (it takes well under a second when connections are cheap).
OPEN_DEADLINE_S = 60.0
# /healthz answers within this under the flood: the kubelet's probe allows 5 s (timeoutSeconds in the DaemonSet). A
# limit of 2 s failed twice in CI at load 8 on 2 cores (3.8 s: one SYN retry takes 1 s, the rest was the machine).
HEALTHZ_LIMIT_S = 5.0


def started(tmp_path: Path, evictd_processes: list[EvictdProcess]) -> EvictdProcess:
    process = EvictdProcess(tmp_path, evictd=f"housekeepingInterval: {INTERVAL_S * 1000:.0f}ms\n")
    evictd_processes.append(process)
    process.wait_event("evictd started")
    deadline = time.monotonic() + 20
    while process.metric("evictd_cycles_total") < 3:
        assert time.monotonic() < deadline, "no cycles"
        time.sleep(0.05)
    return process


def tasks(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def settled_tasks(pid: int, quiet_s: float = 1.0, timeout_s: float = 15.0) -> int:
    """The thread count once it held still for `quiet_s`: threads the daemon starts lazily after its first cycles
    (a walker's reader) come up slower on a loaded machine than a fixed pause allows. (The memcg re-arm thread
    was one, started at the first re-arm; a full run once counted 14 threads against 13 during the flood, most
    likely that thread. It now starts with the notifier set.)"""
    deadline = time.monotonic() + timeout_s
    count, since = tasks(pid), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "the thread count never held still"
        time.sleep(0.05)
        now = tasks(pid)
        if now != count:
            count, since = now, time.monotonic()
    return count


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def healthz_seconds(process: EvictdProcess) -> float:
    began = time.monotonic()
    assert process.http("/healthz") == (200, "ok")
    return time.monotonic() - began


def reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_idle_connection_flood_costs_no_thread_and_little_memory(
        tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    process = started(tmp_path, evictd_processes)
    pid = process.process.pid
    tasks_before = settled_tasks(pid)  # past start-up threads and allocations
    rss_before = rss_kib(pid)
    cycles_before, began = process.metric("evictd_cycles_total"), time.monotonic()
    idle: list[socket.socket] = []
    try:
        for _ in range(IDLE_FLOOD):
            assert time.monotonic() - began < OPEN_DEADLINE_S, f"{len(idle)} connections opened in 60 s"
            idle.append(socket.create_connection(("127.0.0.1", process.port), timeout=5))
        time.sleep(1.0)
        took = healthz_seconds(process)
        tasks_after, rss_after = tasks(pid), rss_kib(pid)
        cycles_after, elapsed = process.metric("evictd_cycles_total"), time.monotonic() - began
    finally:
        for sock in idle:
            sock.close()
    print(f"threads {tasks_before} -> {tasks_after}, VmRSS {rss_before} -> {rss_after} KiB, "
          f"/healthz {took * 1000:.1f} ms, {cycles_after - cycles_before:.0f} cycles in {elapsed:.1f} s")
    assert tasks_after == tasks_before, "threads started for connections"
    assert rss_after - rss_before < RSS_GROWTH_LIMIT_KIB
    assert took < HEALTHZ_LIMIT_S
    # The loop kept its pace (a cycle every 0.2 s): at least half the cycles it would run unflooded.
    assert cycles_after - cycles_before >= elapsed / INTERVAL_S / 2
    assert process.stop() == 0


def test_hostile_clients_leave_no_traceback_and_do_not_hold_up_the_loop(
        tmp_path: Path, evictd_processes: list[EvictdProcess]) -> None:
    process = started(tmp_path, evictd_processes)
    port = process.port
    flood_s = 4.0
    stop = threading.Event()
    failures: list[BaseException] = []

    def hostile(kind: str) -> None:
        try:
            while not stop.is_set():
                try:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                except OSError:
                    continue  # refused or queued too long: the next try
                try:
                    if kind == "reset-mid-request":
                        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost:")
                    elif kind == "reset-before-answer":
                        sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                    elif kind == "garbage":
                        sock.sendall(os.urandom(512) + b"\r\n\r\n")
                    elif kind == "scrape":
                        sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                        while sock.recv(65536):
                            pass
                    elif kind == "slowloris":
                        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
                        while not stop.wait(0.5):
                            sock.sendall(b"X")
                except OSError:
                    pass  # the server closed it first
                reset(sock)
        except BaseException as exc:  # surfaced in the test thread
            failures.append(exc)

    kinds = ["reset-mid-request", "reset-before-answer", "garbage", "scrape", "slowloris", "slowloris"]
    workers = [threading.Thread(target=hostile, args=(kind,), daemon=True) for kind in kinds]
    cycles_before, began = process.metric("evictd_cycles_total"), time.monotonic()
    for worker in workers:
        worker.start()
    slowest = 0.0
    while time.monotonic() - began < flood_s:
        slowest = max(slowest, healthz_seconds(process))
        time.sleep(0.2)
    cycles_after, elapsed = process.metric("evictd_cycles_total"), time.monotonic() - began
    stop.set()
    for worker in workers:
        worker.join(timeout=10)
    assert not failures, failures
    print(f"/healthz slowest {slowest * 1000:.1f} ms, {cycles_after - cycles_before:.0f} cycles in {elapsed:.1f} s")
    assert slowest < HEALTHZ_LIMIT_S
    assert cycles_after - cycles_before >= elapsed / INTERVAL_S / 2
    assert process.stop() == 0
    # Nothing but JSON log lines on stdout, nothing at all on stderr.
    assert [e for e in process.events if e.get("event") == "unparsed"] == []
    assert process.stderr() == ""

"""A tenant that moves a real pod's memory near a threshold on `allocatableMemory.available`, for tests and benches.

`start_tenant` starts it in the pod's container cgroup (memory and pids hierarchies of cgroup v1); it grows the pods
cgroup's working set to a given distance short of the threshold, counting its own interpreter (a few MiB: once
left out, it ate a 4 MiB margin and the base sat 8 KiB under the level, where v1's threshold events, checked every
128 pages charged or freed, missed a crossing), says "ready", then does one of:

* ``churn <folder> [<held s>]``: writes and deletes a 64 MiB file in `folder` 10 times a second (page cache that
  usage counts and the working set does not); with `held s`, keeps each file that long after writing it and sleeps
  as long after deleting it (issue 76's churner: 0.05);
* ``dip <bytes> <count>``: every 2 s holds `bytes` more for 80 ms, `count` times, then holds them for good and says
  ``held`` followed by each dip's length in ms (from the start of its allocation to the end of its release: at least
  its time past the level);
* ``flap <bytes> <hz>``: `hz` times a second holds `bytes` more for half of the period, until killed (0: holds
  nothing more, a quiet tenant).

Memory comes from anonymous mmap(MAP_POPULATE): faulted in at once, and given back at once by close() (a freed heap
block may stay charged).
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from real_pod_node import RealPodNode

TENANT = r"""
import mmap, os, sys, time
def charged(size):
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
def working_set(folder):
    with open(os.path.join(folder, "memory.usage_in_bytes")) as usage:
        used = int(usage.read())
    with open(os.path.join(folder, "memory.stat")) as stat:
        return used - int(dict(line.split() for line in stat)["total_inactive_file"])
held = charged(max(1, int(sys.argv[1]) - working_set(sys.argv[2])))
print("ready", flush=True)
mode = sys.argv[3]
if mode == "churn":
    chunk = b"y" * (1 << 20)
    path = os.path.join(sys.argv[4], "churn.bin")
    held_s = float(sys.argv[5]) if len(sys.argv) > 5 else None
    while True:
        started = time.monotonic()
        with open(path, "wb") as fh:
            for _ in range(64):
                fh.write(chunk)
        if held_s is not None:
            time.sleep(held_s)
        os.unlink(path)
        time.sleep(held_s if held_s is not None else max(0.0, 0.1 - (time.monotonic() - started)))
elif mode == "dip":
    size, dips = int(sys.argv[4]), int(sys.argv[5])
    lasted = []
    for _ in range(dips):
        started = time.monotonic()
        extra = charged(size)
        # Half the allocation is past the level: above it for half the fill time and the sleep, 80 ms in all.
        time.sleep(max(0.0, 0.08 - (time.monotonic() - started) / 2))
        extra.close()
        lasted.append(round((time.monotonic() - started) * 1000, 1))
        time.sleep(1.9)
    extra = charged(size)
    print("held", *lasted, flush=True)
    time.sleep(3600)
else:
    size, hz = int(sys.argv[4]), float(sys.argv[5])
    if hz <= 0:
        time.sleep(3600)
    period = 1.0 / hz
    next_at = time.monotonic()
    while True:
        extra = charged(size)
        time.sleep(max(0.0, next_at + period / 2 - time.monotonic()))
        extra.close()
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))
"""


def start_tenant(real_pod: RealPodNode, level_available_bytes: int, under_level_bytes: int, *args: str,
                 on_time: bool = False) -> subprocess.Popen[str]:
    """Start the tenant (`args`: its mode, see the module's description) in the pod's container cgroup and return
    once the pods cgroup's working set is `under_level_bytes` short of leaving `level_available_bytes` available.
    `on_time`: at a real-time priority (SCHED_FIFO 1), so that its sleeps end on time on a loaded machine (the
    parallel test tier runs 4 workers on 2 cores: a normal tenant's 80 ms dip lasted over 100 ms there)."""

    # A shell joins the cgroups and execs the interpreter (at SCHED_FIFO 1 through chrt when `on_time`): all of its
    # memory is charged to the pod from its first page. Not a `preexec_fn`: that forks the test's process, where
    # gRPC may be loaded, and the child once died of SIGABRT before it said anything.
    joins = " ".join(f"echo $$ > {shlex.quote(f'/sys/fs/cgroup/{hierarchy}/{real_pod.container_cgroup}/cgroup.procs')};"
                     for hierarchy in ("memory", "pids"))
    priority = ["chrt", "-f", "1"] if on_time else []
    working_set = real_pod.pods_limit_bytes - level_available_bytes - under_level_bytes
    pods_folder = str(real_pod.memory_file(real_pod.pods_cgroup, ""))
    tenant = subprocess.Popen(["sh", "-c", f'set -e; {joins} exec "$@"', "sh", *priority, sys.executable, "-c", TENANT,
                               str(working_set), pods_folder, *args], stdout=subprocess.PIPE, text=True)
    assert tenant.stdout is not None
    said = tenant.stdout.readline()
    if said != "ready\n":
        try:
            status: int | None = tenant.wait(timeout=5)
        except subprocess.TimeoutExpired:
            status = None
        raise AssertionError(f"the tenant did not hold its working set: it said {said!r}, exit status {status} "
                             "(negative: the signal that ended it; None: still running)")
    return tenant


def stop_tenant(tenant: subprocess.Popen[str]) -> None:
    tenant.kill()
    tenant.wait()
    if tenant.stdout is not None:
        tenant.stdout.close()

"""The node-survival arena's workloads: what runs on the node, as an operator could read it (issue #36, item 1).

A workload is a list of pods plus the node's "system daemon"; the same specs run on both backends of the arena
(bench/node_survival_guest.py: the stand-in node and the real cluster). Every pod runs one process, `GROWER`
below: it takes anonymous memory at a steady rate (every page faulted in by the kernel at mmap time, as
MAP_POPULATE does: a page-by-page write goes through the user-mode kernel's ptrace for every page) to a cap,
then holds it until it is stopped. A pod marked `pressure` is one the workload is about; the run ends once every
pressure pod has stopped (OOM-killed, evicted, killed by earlyoom), or after the workload's hold when those still
running hold at their caps (and, after a stop, 30 s more: the protector's next act under the same demand), or at
the run's time-out. The protector is stopped before the run's pods are deleted.

The head start. A node's idle memory is large and filling it at 10 MiB/s would take minutes of nothing
happening; so the pressure pods first take (together, as fast as the kernel faults pages in) what the node has
available beyond `start_available_mib` (an option of the arena, stated in its output). The workload starts
when all of them have it: they grow at their rate from then on, and what is measured starts then.

Workloads:

* ``be-slow`` / ``be-fast`` / ``be-burst``: one BestEffort pod grows at 10 MiB/s / 200 MiB/s / as fast as the
  guest's kernel faults pages in (`BURST_RATE_MIB_S`, far past any memory bandwidth, so the grower maps
  `BURST_CHUNK_MIB` after `BURST_CHUNK_MIB` with no pause: the rate is the kernel's, not the script's) without
  bound, beside a Guaranteed pod holding `GUARANTEED_HOLD_MIB` (limit `GUARANTEED_LIMIT_MIB`) and the system
  daemon. The Guaranteed pod and the daemon must survive; the grower should pay.
* ``many-small``: 10 Burstable pods grow together (20 MiB/s in all), each to 95 % of its request; the requests
  add up to the node's MemTotal: its allocatable memory when nothing is reserved and the kubelet's own
  eviction thresholds are 0 % (the handover to evictd), as a scheduler would fill that node; on the real backend
  to MemTotal less the kubelet protectors' largest hard ``memory.available`` (200Mi), the allocatable memory its
  admission checks requests against (the 10th pod was rejected, phase Failed, otherwise). No pod exceeds
  its request: the node runs out because of what runs outside the pods (the daemons, evictd, the kubelet),
  and someone must pay anyway.
* ``many-small-slow``: ``many-small`` at 8 MiB/s in all (`MANY_SMALL_VARIANTS`): slow enough that the
  kubelet's 10 s housekeeping sees the hard threshold crossed at least twice before the kernel would kill (200 MiB
  of margin is 25 s), so the kubelet with evictd's thresholds gets to evict, and its count of evictions can be set
  beside evictd's (at 20 MiB/s the kernel kills first). Its runs go on 120 s once every pod held its cap, past the
  shipped soft threshold's 90 s grace period, so that the soft threshold's evictions count for every protector.

Page-cache workloads (bench/node_survival_pagecache.py, which says what they do and how they are sized; their
files on the guest's own disk, --disk-mib):

* ``thrash``: a Burstable reader pod whose working set is 400 MiB of file pages (re-read every second through a
  mapping) and a system daemon keeping 150 MiB of file pages (re-read every 100 ms), beside a Guaranteed pod and
  a BestEffort pod growing anonymous memory at 10 MiB/s: the node re-reads its own files (refaults) and the
  daemon stalls while ``memory.available`` (inactive file counts as available) still looks fine.
* ``active-file``: a BestEffort pod reads the same 500 MiB file twice (its pages active: working set, for the
  kubelet's formula), beside a Guaranteed pod and a Burstable pod holding the head start within its request;
  ``memory.available`` falls under evictd's threshold while the kernel could drop those pages and kills nobody
  (kubernetes/kubernetes#43916).

Own-limit workloads (bench/node_survival_ownlimit.py: stalls and reclaim with the node not short of memory, for
the stall gate):

* ``own-limit-thrash``: a Burstable pod (limit 64 MiB) re-reads a 200 MiB file through a mapping without a pause,
  thrashing inside its own limit, beside a Guaranteed pod, a BestEffort pod holding 150 MiB and the daemon.
* ``backup-stream``: a backup job in ``system.slice`` reads a file of 1.5 x MemTotal once (cold cache), beside a
  Guaranteed pod and the daemon: kswapd reclaims use-once page cache, nothing is worth an eviction.

The deploy burst (bench/node_survival_deploy.py: a false trigger for the stall and refault signals):

* ``deploy-burst``: 8 Burstable app pods whose 40 MiB binaries were pushed out of the cache by earlier reclaim are
  rolled out again on the same files: the new pods read them at once (a burst of refaults and some PSI stall, a
  few seconds long) on a node with ~1.5 GiB free, beside a Guaranteed pod and the daemon.

The false triggers (bench/node_survival_falsetriggers.py: busy nodes not short of memory, run as shipped; nobody
must be evicted, no OOM kill):

* ``jvm-warmup``: a Burstable JVM-like pod pre-touches a heap of 40 % of MemTotal at start on a node whose free
  memory is page cache from before, then holds it.
* ``db-fits``: a Burstable database pod reads its 400 MiB data file, then random 8 KiB pages of it, 500 a second.
* ``log-shipper``: an app pod appends log lines at 4 MiB/s and a shipper pod tails the file (dirty pages,
  writeback).
* ``compaction``: a Burstable job pod streams a file of 1.5 x MemTotal once and writes half of it out (page cache
  fills RAM, kswapd reclaims it).

The system daemon (`HEARTBEAT`) is a process outside the pods cgroup, in ``system.slice/heartbeat.service``,
that writes the monotonic time to a file every 100 ms; the arena reads its largest gap.

The non-memory controls (bench/node_survival_controls.py, scripts and all, beside these; its docstring says why
the figures are what they are):

* ``fork-bomb``: one BestEffort pod forks as fast as the guest forks, children that hold a pid and wait, beside
  the Guaranteed pod; the guest's ``kernel.pid_max`` lowered to 2048 for the run. The system daemon also forks a
  short-lived child every 100 ms and counts its failures.
* ``disk-fill`` / ``disk-fill-fast``: one BestEffort pod writes into its emptyDir on the guest's own disk (the
  kubelet root evictd reads nodefs from), first to 20 % of the disk available, then 20 / 100 MiB/s without
  bound, beside the Guaranteed pod; the system daemon also appends 64 KiB to a journal on that disk every 100 ms
  and counts its failed writes (ENOSPC).
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20

# The largest chunk a grower maps at once: be-burst's, which maps chunk after chunk with no pause.
BURST_CHUNK_MIB = 64
# The workload of every pod: anonymous memory at a steady rate to a cap, then held.
GROWER = r"""
# argv: HEAD_START_MIB RATE_MIB_PER_S CAP_MIB (0: no cap) CONTROL_FOLDER NAME. Once CONTROL_FOLDER/go.NAME exists,
# takes the head start at once and creates CONTROL_FOLDER/ready.NAME; once CONTROL_FOLDER/grow exists, grows at
# the rate in chunks of 50 ms worth (at least 1 MiB, at most CHUNK_MAX_MIB) and holds at the cap. (Files, not a
# pipe: a container started by the real kubelet has no pipe to the arena; the folder is on the node, seen through
# a hostPath.)
import mmap, os, sys, time
MiB = 1 << 20
CHUNK_MAX_MIB = BURST_CHUNK_MIB
head, rate, cap = (float(word) for word in sys.argv[1:4])
control, name = sys.argv[4:6]
def wait_for(path):
    while not os.path.exists(os.path.join(control, path)):
        time.sleep(0.02)
held, total = [], 0.0
def take(mib):
    global total
    held.append(mmap.mmap(-1, int(mib * MiB), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE))
    total += mib
wait_for("go." + name)
if head > 0:
    take(head)
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
start, chunk = time.monotonic(), min(CHUNK_MAX_MIB, max(1.0, rate * 0.05))
while True:
    due = head + rate * (time.monotonic() - start)
    behind = (min(due, cap) if cap > 0 else due) - total
    if behind >= chunk or (cap > 0 and due >= cap and behind > 0):
        take(min(behind, chunk))
    else:
        time.sleep(0.05)
""".replace("= BURST_CHUNK_MIB", f"= {BURST_CHUNK_MIB}.0")

# The system daemon: a heartbeat every 100 ms into the file named by argv[1] (monotonic seconds, one a line).
HEARTBEAT = r"""
import sys, time
with open(sys.argv[1], "a", buffering=1) as beats:
    while True:
        beats.write(f"{time.monotonic():.3f}\n")
        time.sleep(0.1)
"""
HEARTBEAT_PERIOD_S = 0.1

GUARANTEED_HOLD_MIB = 200
GUARANTEED_LIMIT_MIB = 256
# be-burst: a rate no guest reaches, so the grower takes chunk after chunk (the GROWER's largest) as fast as the
# kernel faults them in.
BURST_RATE_MIB_S = 1e6
GROWER_RATES_MIB_S = {"be-slow": 10.0, "be-fast": 200.0, "be-burst": BURST_RATE_MIB_S}
MANY_SMALL_PODS = 10
# Per many-small workload: the pods' growth in all (MiB/s), and how long a run goes on once every pod held its cap
# (s). many-small-slow's hold outlasts the shipped soft threshold's grace period (90 s) and a housekeeping tick:
# with 20 s, whether the soft threshold's evictions came before the run ended was a race of seconds (the kubelet
# with evictd's thresholds: 2, 2, 2, 4, 4 pods a run).
MANY_SMALL_VARIANTS = {"many-small": (20.0, 20.0), "many-small-slow": (8.0, 120.0)}
MANY_SMALL_FILL = 0.95


@dataclass(frozen=True)
class PodSpec:
    """One pod of a workload: its QoS class by its resources, what its process does."""

    name: str
    qos: str  # "guaranteed" | "burstable" | "besteffort"
    request_mib: int | None
    limit_mib: int | None
    rate_mib_s: float
    cap_mib: float  # 0: no cap
    pressure: bool  # a pod the workload is about (grows); the head start is shared among these
    hold_mib: float = 0.0  # taken at once at the start (a pod that is not a pressure pod)
    script: str = ""  # its process's script, with GROWER's argv and go/ready/grow files ("": GROWER)
    volumes: tuple[str, ...] = ()  # emptyDir volumes (node disk) in its spec


@dataclass(frozen=True)
class Workload:
    name: str
    pods: tuple[PodSpec, ...]
    # After every pressure pod reached its cap, how long the run goes on (0: grows without bound).
    hold_s: float = 0.0
    daemon: str = ""  # the system daemon's script, with HEARTBEAT's argv ("": HEARTBEAT)


def guaranteed_pod() -> PodSpec:
    return PodSpec("guaranteed", "guaranteed", GUARANTEED_LIMIT_MIB, GUARANTEED_LIMIT_MIB, 0.0,
                   GUARANTEED_HOLD_MIB, pressure=False, hold_mib=GUARANTEED_HOLD_MIB)


def oom_score_adj(spec: PodSpec, mem_total_bytes: int) -> int:
    """The oom_score_adj the kubelet gives the pod's containers (pkg/kubelet/qos/policy.go): Guaranteed -997,
    BestEffort 1000, Burstable 1000 - 1000 * request / capacity, kept within [2, 999]."""
    if spec.qos == "guaranteed":
        return -997
    if spec.qos == "besteffort":
        return 1000
    request = (spec.request_mib or 0) * MiB
    return min(999, max(2, 1000 - (1000 * request) // mem_total_bytes))

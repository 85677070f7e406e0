"""The node-survival arena's non-memory controls (issue #36, item 1): a fork bomb and a disk fill.

Two workloads that put the node out of something other than memory, each beside the Guaranteed pod of the
memory workloads (`guaranteed_pod`, holding 200 MiB) and a system daemon that needs what runs out:

* ``fork-bomb``: one BestEffort pod (`FORKER`) forks children that only wait, as fast as the guest forks
  (a linear bomb: one shell forking, bounded by the kernel's pid limit; each child holds one pid until the pod
  is killed). The arena lowers the guest's ``kernel.pid_max`` to `FORK_BOMB_PID_MAX` for this workload (and puts
  it back after): a node's default is 32768 on up to 32 CPUs; in user-mode Linux every guest process is a host
  process too, so a small figure keeps the host safe and the exhaustion within seconds. The system daemon
  (`SPAWNING_DAEMON`) beats every 100 ms as the heartbeat does and forks a short-lived child every 100 ms; each
  fork that fails is a line in ``<heartbeat>.failures``.
* ``disk-fill``: one BestEffort pod (`FILLER`) writes into its emptyDir volume ``scratch`` (in its spec, its
  folder where the kubelet keeps it: ``<kubelet root>/pods/<uid>/volumes/kubernetes.io~empty-dir/scratch``,
  the kubelet root on the guest's own disk, /run/disk) and a line a second to its container log (``<pod logs
  dir>/<namespace>_<name>_<uid>/filler/0.log``). It first writes, as fast as it can, until the disk has
  `DISK_HEAD_START_AVAILABLE` of its size available (the head start), then `DISK_FILL_RATE_MIB_S` without
  bound; writes that fail (ENOSPC) are retried every 100 ms. ``disk-fill-fast`` asks for
  `DISK_FILL_FAST_RATE_MIB_S`. The system daemon (`WRITING_DAEMON`) beats and appends 64 KiB to a journal
  on the same disk every 100 ms (starting the journal over at 8 MiB); each failed write is a failure line.

Why 20 MiB/s for ``disk-fill``: the guest's disk is 2 GiB, so the shipped hard threshold ``nodefs.available<10%``
leaves ~200 MiB between the crossing and a full disk; at 20 MiB/s that is ~10 s, one housekeeping interval
(evictd reads disk signals once a cycle, 10 s as shipped: the memory watch does not cover them). A node's
100 GiB disk filled at 100 MiB/s leaves 100 s. ``disk-fill-fast`` (100 MiB/s asked) shows what a filler faster
than one interval per margin does.

The scripts take GROWER's argv (HEAD RATE CAP CONTROL_FOLDER NAME; HEAD, the memory head start, is not used)
and its go/ready/grow files, so the arena starts them as it starts every pod. Nothing here runs anything:
bench/node_survival_controls_guest.py lays the disk out, samples the figures and reads the failures.
"""

from __future__ import annotations

from typing import Any

from node_survival_workloads import PodSpec, Workload

FORK_BOMB, DISK_FILL, DISK_FILL_FAST = "fork-bomb", "disk-fill", "disk-fill-fast"
CONTROL_WORKLOADS = (FORK_BOMB, DISK_FILL, DISK_FILL_FAST)
FORK_BOMB_PID_MAX = 2048
DISK_HEAD_START_AVAILABLE = 0.2
DISK_FILL_RATE_MIB_S = 20.0
DISK_FILL_FAST_RATE_MIB_S = 100.0
VOLUME = "scratch"
DAEMON_JOURNAL = "daemon/journal"  # under the disk's mount

_WAIT = r"""
import errno, os, sys, time
control, name = sys.argv[4:6]
def wait_for(path):
    while not os.path.exists(os.path.join(control, path)):
        time.sleep(0.02)
"""

# A fork bomb bounded by the kernel: a shell (dash: a small address space, forked far faster than Python in the
# user-mode kernel) forks subshells that block opening a FIFO no one writes (each holds a pid, uses no CPU) until
# fork fails; then it is started again (when it can be) every 10 ms. RATE and CAP are not used.
FORKER = _WAIT + r"""
import subprocess
wait_for("go." + name)
fifo = os.path.join(control, "fifo." + name)
os.mkfifo(fifo)
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
while True:
    try:
        subprocess.call(["/bin/sh", "-c", 'while :; do { read x < "$0"; } & done', fifo], stderr=subprocess.DEVNULL)
    except OSError:
        pass
    time.sleep(0.01)
"""

# A disk filler: its emptyDir and log file are named in CONTROL_FOLDER/volume.NAME (two lines), written before go.
FILLER = _WAIT + r"""
MiB = 1 << 20
rate, cap = float(sys.argv[2]), float(sys.argv[3])
wait_for("go." + name)
volume, log_path = open(os.path.join(control, "volume." + name)).read().split("\n")[:2]
log = open(log_path, "a", buffering=1)
block = b"\xa5" * MiB
written, files, fd = 0, 0, -1
def write_mib():
    global written, files, fd
    try:
        if fd < 0 or written >= files * 64 * MiB:  # files of 64 MiB
            if fd >= 0:
                os.close(fd)
                fd = -1
            fd = os.open(os.path.join(volume, "fill-%05d" % (files + 1)), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            files += 1
        os.write(fd, block)
        written += MiB
        return True
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        return False
while True:  # the head start: until the disk has HEAD_AVAILABLE of its size available
    disk = os.statvfs(volume)
    if disk.f_bavail <= HEAD_AVAILABLE * disk.f_blocks or not write_mib():
        break
open(os.path.join(control, "ready." + name), "w").close()
wait_for("grow")
start, head, failures, logged = time.monotonic(), written, 0, 0.0
while True:
    now = time.monotonic()
    if now - logged >= 1.0:
        logged = now
        log.write("%.3f written %d MiB, %d failed writes\n" % (now, written // MiB, failures))
    due = head + rate * MiB * (now - start)
    if cap and written >= cap * MiB or written + MiB > due:
        time.sleep(0.01)
    elif not write_mib():
        failures += 1
        time.sleep(0.1)
""".replace("HEAD_AVAILABLE", str(DISK_HEAD_START_AVAILABLE))

# System daemons: HEARTBEAT's beats into argv[1], plus one action every 100 ms whose failures are lines of
# argv[1] + ".failures" (monotonic time, what failed).
_DAEMON = r"""
import errno, os, sys, time
beats = open(sys.argv[1], "a", buffering=1)
failures = open(sys.argv[1] + ".failures", "a", buffering=1)
ACTION_SETUP
while True:
    beats.write(f"{time.monotonic():.3f}\n")
    try:
        ACTION
    except OSError as error:
        failures.write(f"{time.monotonic():.3f} {errno.errorcode.get(error.errno, error.errno)}\n")
    time.sleep(0.1)
"""
SPAWNING_DAEMON = _DAEMON.replace("ACTION_SETUP", "pass").replace(
    "ACTION", "pid = os.fork()\n        if pid == 0:\n            os._exit(0)\n        os.waitpid(pid, 0)")
WRITING_DAEMON = _DAEMON.replace("ACTION_SETUP", (
    "journal = os.path.join(os.environ.get('UML_DISK_MOUNT', '/run/disk'), 'DAEMON_JOURNAL')\n"
    "os.makedirs(os.path.dirname(journal), exist_ok=True)\n"
    "fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)\nchunk = b'j' * 65536").replace(
    "DAEMON_JOURNAL", DAEMON_JOURNAL)).replace(
    "ACTION", "if os.fstat(fd).st_size >= 8 << 20:\n            os.ftruncate(fd, 0)\n        os.write(fd, chunk)")


def control_workload(name: str, guaranteed: Any) -> Any:
    """The control workload `name` (a node_survival_workloads.Workload) beside `guaranteed` (its PodSpec)."""
    if name == FORK_BOMB:
        bomb = PodSpec("forker", "besteffort", None, None, 0.0, 0.0, True, script=FORKER)
        return Workload(name, (guaranteed, bomb), daemon=SPAWNING_DAEMON)
    rate = DISK_FILL_RATE_MIB_S if name == DISK_FILL else DISK_FILL_FAST_RATE_MIB_S
    filler = PodSpec("filler", "besteffort", None, None, rate, 0.0, True, script=FILLER, volumes=(VOLUME,))
    return Workload(name, (guaranteed, filler), daemon=WRITING_DAEMON)

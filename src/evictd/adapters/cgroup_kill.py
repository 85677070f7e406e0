"""Kill every process of a pod through its cgroup: the hard eviction's last resort when the runtime cannot stop it;
and send them SIGTERM, a hard memory eviction's first step (`pod_process_terminator`).

Under memory exhaustion the runtime thrashes with everything else (docs/node-survival.md); the pod's cgroup needs
nobody. SIGKILL: v2 ``cgroup.kill`` (5.14+, atomic with forks), else every PID in ``cgroup.procs`` below the pod
cgroup, in rounds until none is left. SIGTERM (what StopContainer sends first) goes once to every process before the
runtime is asked (`CriRuntime.stop_pod`), which still enforces the grace period. A listed PID may be reused before
the signal: each is opened as a pidfd, the listing read again, and only pidfds still listed are signalled (by number
before 5.3).

Invariants: only the given folder and below are touched; a process gone meanwhile is no error; the count returned is
the processes found (0: none or gone). The runtime sees what an OOM kill leaves.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections.abc import Callable, Iterable

from evictd.adapters.cgroups import CgroupReader
from evictd.core.errors import SampleError

# Rounds of listing and killing on cgroup v1 before giving up on a cgroup that keeps forking.
KILL_ROUNDS = 5
# pidfds held open at once while confirming a listing: a fork bomb's thousands of PIDs in batches, not as many fds.
PIDFD_BATCH = 256


def _per_pod(cgroups: CgroupReader, per_tree: Callable[[str], int]) -> Callable[[str], int]:
    """`per_tree` on the cgroup folder of the pod with a uid (0 where that pod has no cgroup on the node)."""

    def on_pod(pod_uid: str) -> int:
        folder = cgroups.pod_folder(pod_uid)
        return 0 if folder is None else per_tree(folder)

    return on_pod


def pod_process_killer(cgroups: CgroupReader) -> Callable[[str], int]:
    """SIGKILL every process of the pod with a uid through its cgroup (`kill_cgroup_tree`); the processes found (0: no
    cgroup of that pod on the node). Raises SampleError."""
    return _per_pod(cgroups, kill_cgroup_tree)


def pod_process_terminator(cgroups: CgroupReader) -> Callable[[str], int]:
    """SIGTERM, once, every process of the pod with a uid through its cgroup (`terminate_cgroup_tree`); the processes
    found (0: no cgroup of that pod on the node). Raises SampleError."""
    return _per_pod(cgroups, terminate_cgroup_tree)


def pod_process_counter(cgroups: CgroupReader) -> Callable[[str], int]:
    """How many processes the pod with a uid still has in its cgroup and below (`count_cgroup_tree`; 0: none, or no
    cgroup of that pod on the node). Raises SampleError."""
    return _per_pod(cgroups, count_cgroup_tree)


def count_cgroup_tree(folder: str) -> int:
    """How many processes the cgroup at `folder` and those below it hold (0: it is gone). Raises SampleError when it
    cannot be read."""
    try:
        return len(_pids_below(folder))
    except FileNotFoundError:
        return 0


def terminate_cgroup_tree(folder: str) -> int:
    """Send SIGTERM once to every process in the cgroup at `folder` and below; return how many were found. Raises
    SampleError when the cgroup cannot be read (not: when it is gone)."""
    try:
        listed = _pids_by_file(folder)
    except FileNotFoundError:
        return 0
    _signal_listed(listed, signal.SIGTERM)
    return sum(len(pids) for pids in listed.values())


def kill_cgroup_tree(folder: str) -> int:
    """SIGKILL every process in the cgroup at `folder` and below; return how many were found. Raises SampleError
    when the cgroup cannot be read or written (not: when it is gone)."""
    try:
        found = len(_pids_below(folder))
    except FileNotFoundError:
        return 0
    kill_file = os.path.join(folder, "cgroup.kill")
    if os.path.exists(kill_file):
        try:
            with open(kill_file, "w", encoding="ascii") as handle:
                handle.write("1")
            return found
        except FileNotFoundError:
            return found  # removed meanwhile: its processes are gone
        except OSError as exc:
            raise SampleError(kill_file, exc.strerror or str(exc)) from None
    for _ in range(KILL_ROUNDS):
        try:
            listed = _pids_by_file(folder)
        except FileNotFoundError:
            break
        if not any(listed.values()):
            break
        _signal_listed(listed, signal.SIGKILL)
    return found


def _signal_listed(listed: dict[str, set[int]], signum: int,
                   reread: Callable[[str], set[int]] | None = None) -> None:
    """Send `signum` to each listed process (`cgroup.procs` path -> PIDs) still listed once a pidfd holds it."""
    again = reread or _read_procs
    for path, pids in listed.items():
        ordered = sorted(pids)
        for start in range(0, len(ordered), PIDFD_BATCH):
            _signal_confirmed(path, ordered[start:start + PIDFD_BATCH], signum, again)


def _signal_confirmed(path: str, pids: Iterable[int], signum: int, reread: Callable[[str], set[int]]) -> None:
    handles: dict[int, int] = {}
    try:
        pidfds = True
        for pid in pids:
            try:
                handles[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                continue  # gone already
            except OSError as exc:
                if exc.errno not in (errno.ENOSYS, errno.EINVAL):
                    raise SampleError(path, exc.strerror or str(exc)) from None
                pidfds = False  # no pidfds in this kernel: the PIDs still listed get the signal by number
                handles[pid] = -1
        try:
            still = reread(path)
        except FileNotFoundError:
            return  # the cgroup is gone, and its processes with it
        for pid, handle in handles.items():
            if pid not in still:
                continue  # exited, and its PID maybe another process's now
            with contextlib.suppress(ProcessLookupError):
                if pidfds and handle >= 0:
                    signal.pidfd_send_signal(handle, signum)
                else:
                    os.kill(pid, signum)
    finally:
        for handle in handles.values():
            if handle >= 0:
                os.close(handle)


def _pids_below(folder: str) -> set[int]:
    """The processes of the cgroup at `folder` and below; FileNotFoundError when gone, SampleError when unreadable."""
    return set().union(*_pids_by_file(folder).values())


def _pids_by_file(folder: str) -> dict[str, set[int]]:
    """Each `cgroup.procs` file at `folder` and below with its PIDs; FileNotFoundError or SampleError as above."""
    listed: dict[str, set[int]] = {}
    for current, _, _ in os.walk(folder, onerror=_gone_or_unreadable):
        path = os.path.join(current, "cgroup.procs")
        try:
            listed[path] = _read_procs(path)
        except FileNotFoundError:
            if current == folder:
                raise
    if not os.path.isdir(folder):
        raise FileNotFoundError(folder)
    return listed


def _read_procs(path: str) -> set[int]:
    """The PIDs a `cgroup.procs` file lists. Raises FileNotFoundError when it is gone, SampleError otherwise."""
    try:
        with open(path, encoding="ascii") as handle:
            return {int(word) for word in handle.read().split()}
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise SampleError(path, str(exc)) from None


def _gone_or_unreadable(error: OSError) -> None:
    if not isinstance(error, FileNotFoundError):
        raise SampleError(str(error.filename), error.strerror or str(error))

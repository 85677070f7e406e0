"""The exclusive lock on stateDir: at most one evictd acts on a node's state folder at a time.

Two evictd sharing a stateDir would overwrite each other's eviction journal and both evict on the same node
(a DaemonSet pod next to a systemd unit, or two pods during a rolling update). The lock is `flock(LOCK_EX)` on
`<stateDir>/evictd.lock`, which holds the holder's PID (a host PID in the DaemonSet, which runs with hostPID).
The kernel releases it when the holder's process ends, however it ends (SIGKILL, OOM kill), so a stale lock
file never blocks anyone; the file itself stays (removing it would let two processes lock two different files).

How a second evictd waits (`stateLockTimeout`, then `StateLockError`) and what happens when the lock file
cannot be created (logged, evictd runs without the lock) is README's "State" paragraph.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Any

from evictd.core.errors import StateLockError

LOCK_FILE = "evictd.lock"
# How often a waiting evictd tries the lock again: a rolling update is seconds, not milliseconds.
RETRY_INTERVAL_S = 0.2
# The lock file holds one PID: anything longer is not ours, and is shown cut.
MAX_HOLDER_CHARS = 32


def holder_pid(descriptor: int) -> str:
    """Return what the lock file says about its holder (its PID), or "unknown" while it is being written."""
    try:
        text = os.pread(descriptor, MAX_HOLDER_CHARS, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return "unknown"
    return text or "unknown"


def _try_lock(descriptor: int) -> bool:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def acquire_state_lock(state_dir: str, timeout_s: float, log: Any) -> None:
    """Lock `state_dir` for the rest of this process's life, waiting up to `timeout_s` for another evictd holding
    it (the lock file's descriptor is never closed). When the lock file cannot be created, logs it and returns
    without the lock; raises StateLockError when another process still holds it after `timeout_s`."""
    path = os.path.join(state_dir, LOCK_FILE)
    try:
        os.makedirs(state_dir, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        log.error("stateDir lock file cannot be created: running without the lock", lock_file=path,
                  error=exc.strerror or str(exc))
        return
    deadline = time.monotonic() + timeout_s
    if not _try_lock(descriptor):
        holder = holder_pid(descriptor)
        log.warning("stateDir is locked by another evictd: waiting for it to stop", holder_pid=holder,
                    lock_file=path, wait_s=timeout_s)
        while not _try_lock(descriptor):
            if time.monotonic() >= deadline:
                holder = holder_pid(descriptor)
                os.close(descriptor)
                raise StateLockError(state_dir, path, holder, timeout_s)
            time.sleep(RETRY_INTERVAL_S)
        log.info("stateDir lock taken over", previous_holder_pid=holder, lock_file=path)
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError as exc:  # a full stateDir: the lock holds all the same, only the PID is not shown
        log.warning("PID not written to the stateDir lock file", lock_file=path, error=exc.strerror or str(exc))

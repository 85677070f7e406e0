"""The locks that keep evictd to one per node: the node lock, then the stateDir lock, both taken at start.

Two evictd on a node would both evict; two on a stateDir would overwrite each other's state. Each lock is
`flock(LOCK_EX)` on a file holding the holder's (host) PID: `/run/evictd/node.lock` (`EVICTD_NODE_LOCK` for tests)
and `<stateDir>/evictd.lock`, before anything in stateDir is touched. The kernel releases a lock however its holder
ends; the file stays (removing it would let two processes lock two files). A lock file is opened without following
symlinks and must be a regular file (`LockFileError`, exit 2). Waiting (`stateLockTimeout`, `StateLockError`) and
an uncreatable file (logged, run without) are docs/state-and-recording.md's "State".
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import LockFileError, StateLockError
from evictd.kube.atomic_file import file_kind
from evictd.log import Log
from evictd.state_dir import StateDir

NODE_LOCK_FILE = "/run/evictd/node.lock"
NODE_LOCK_ENV = "EVICTD_NODE_LOCK"
# How often a waiting evictd tries the lock again: a rolling update is seconds, not milliseconds.
RETRY_INTERVAL_S = 0.2
# The lock file holds one PID: anything longer is not ours, and is shown cut.
MAX_HOLDER_CHARS = 32
# Lock files this process holds, by (device, inode): a second daemon in the same process is the same evictd.
_HELD: set[tuple[int, int]] = set()


def holder_pid(descriptor: int) -> str:
    """Return what the lock file says about its holder (its PID), or "unknown" while it is being written."""
    try:
        text = os.pread(descriptor, MAX_HOLDER_CHARS, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def _try_lock(descriptor: int) -> bool:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _file_identity(descriptor: int) -> tuple[int, int]:
    status = os.fstat(descriptor)
    return status.st_dev, status.st_ino


def _open_lock_file(path: str, locked: str) -> int:
    """Open (create) the lock file at `path`, refusing anything but a regular file (LockFileError)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a symlink, a folder, a socket
            raise LockFileError(locked, path, file_kind(os.lstat(path).st_mode)) from exc
        raise
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise LockFileError(locked, path, file_kind(mode))
    return descriptor


def _acquire(path: str, label: str, locked: str, timeout_s: float, log: Log, clock: Clock) -> None:
    """Lock `path` for the rest of this process's life, waiting up to `timeout_s` for another evictd holding it;
    `label` names the lock in log events, `locked` what it locks in errors."""
    try:
        descriptor = _open_lock_file(path, locked)
    except OSError as exc:
        log.error(f"{label} lock file cannot be created: running without the lock", lock_file=path,
                  error=exc.strerror or str(exc))
        return
    identity = _file_identity(descriptor)
    if identity in _HELD:
        os.close(descriptor)
        return
    deadline = clock.monotonic() + timeout_s
    if not _try_lock(descriptor):
        holder = holder_pid(descriptor)
        log.warning(f"{label} is locked by another evictd: waiting for it to stop", holder_pid=holder,
                    lock_file=path, wait_s=timeout_s)
        while not _try_lock(descriptor):
            if clock.monotonic() >= deadline:
                holder = holder_pid(descriptor)
                os.close(descriptor)
                raise StateLockError(locked, path, holder, timeout_s)
            clock.sleep(RETRY_INTERVAL_S)
        log.info(f"{label} lock taken over", previous_holder_pid=holder, lock_file=path)
    _HELD.add(identity)
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError as exc:  # a full filesystem: the lock holds all the same, only the PID is not shown
        log.warning("PID not written to the lock file", lock_file=path, error=exc.strerror or str(exc))


def node_lock_path() -> str:
    """Where the node lock is: `/run/evictd/node.lock`, or what `EVICTD_NODE_LOCK` names."""
    return os.environ.get(NODE_LOCK_ENV) or NODE_LOCK_FILE


def acquire_node_lock(timeout_s: float, log: Log, clock: Clock = SYSTEM_CLOCK) -> None:
    """Take the node lock (see the module's description): one evictd per node, whatever its stateDir."""
    _acquire(node_lock_path(), "node", "the node", timeout_s, log, clock)


def acquire_state_lock(state_dir: str, timeout_s: float, log: Log, clock: Clock = SYSTEM_CLOCK) -> None:
    """Take `state_dir`'s lock (see the module's description). When the lock file cannot be created, logs it and
    returns without the lock; raises StateLockError when another process still holds it after `timeout_s`, and
    LockFileError when it is not a regular file."""
    _acquire(StateDir(state_dir).lock, "stateDir", f"stateDir {state_dir}", timeout_s, log, clock)

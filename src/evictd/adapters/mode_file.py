"""The node-local mode file, `<stateDir>/mode`: read by `evictd run` before every cycle, written by `evictd mode`.

Reading is one open (a missing file: one failed syscall), one fstat and one read of at most MAX_MODE_FILE_BYTES,
never blocking (a FIFO put in its place) and never following a symlink; what cannot be used is returned as a
`ModeFile` with its `problem`, never raised: `evictd.core.run_mode` holds the node in dry-run for any file present.
Writing replaces the file atomically (a temporary file beside it, fsync, rename, the folder synced), so a reader
sees the old content or the new, never a part.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile

from evictd.core.errors import os_error_reason
from evictd.core.run_mode import ModeFile
from evictd.state_dir import MODE_TEMPORARY_PREFIX

# `dry-run` and a newline are 8 bytes; a file far longer holds no mode, and is not read further.
MAX_MODE_FILE_BYTES = 64
# Readable by anyone on the node, as the stateDir's other files are to root: it holds no secret.
MODE_FILE_PERMISSIONS = 0o644


def read_mode_file(path: str) -> ModeFile | None:
    """Return what the mode file at `path` holds (its text stripped), a `ModeFile` with a `problem` when it cannot be
    used, or None when there is none."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None  # no file, or no stateDir yet
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return ModeFile(problem="is a symlink")
        return ModeFile(problem=f"cannot be opened: {os_error_reason(exc)}")
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            return ModeFile(problem="is a directory" if stat.S_ISDIR(mode) else "is not a regular file")
        raw = os.read(descriptor, MAX_MODE_FILE_BYTES + 1)
    except OSError as exc:
        return ModeFile(problem=f"cannot be read: {os_error_reason(exc)}")
    finally:
        os.close(descriptor)
    if len(raw) > MAX_MODE_FILE_BYTES:
        return ModeFile(problem=f"is longer than {MAX_MODE_FILE_BYTES} bytes")
    try:
        return ModeFile(raw.decode("utf-8").strip())
    except UnicodeDecodeError as exc:
        return ModeFile(problem=f"is not UTF-8 text (byte {exc.start})")


def write_mode_file(path: str, text: str) -> None:
    """Replace the mode file at `path` with `text` and a newline; its folder must exist. Raises OSError."""
    folder = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=MODE_TEMPORARY_PREFIX, dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(f"{text}\n")
            stream.flush()
            os.fchmod(stream.fileno(), MODE_FILE_PERMISSIONS)
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _sync_folder(folder)


def remove_mode_file(path: str) -> bool:
    """Remove the mode file at `path`; return whether there was one. Raises OSError (a folder in its place:
    IsADirectoryError)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    _sync_folder(os.path.dirname(path) or ".")
    return True


def _sync_folder(folder: str) -> None:
    """The rename or removal on disk too: a hold set just before a crash or a reboot is still there after it."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)

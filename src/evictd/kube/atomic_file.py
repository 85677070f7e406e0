"""Small state files in stateDir: replaced so that a crash leaves either the old or the new file, read back
without trusting what is there, and moved aside when they cannot be used.

Writing: to a temporary file beside it (`prefix`, so a reader can find and remove those a killed process left
behind), fsync, rename over the file. Reading: a regular file of bounded size holding UTF-8 JSON, or a
`SampleError` saying why not (a FIFO in its place does not block). Used by the eviction journal, the
critical-pod record and the engine state file.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from datetime import UTC, datetime
from typing import Any

from evictd.core.errors import SampleError
from evictd.log import Log

# What a file that is not a regular one is called in messages (a lock file, a recording's segment, ...).
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))

# The UTC time in the name of a file moved aside, e.g. `evictions.json.corrupt-20261122T101500Z`.
ASIDE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"


def file_kind(mode: int) -> str:
    """What a file of `st_mode` `mode` that is not a regular file is ("a FIFO", "a symlink", ...), for messages."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def write_json_atomically(path: str, document: Any, *, prefix: str = ".tmp-") -> None:
    """Replace `path` with `document` as JSON (the folder is created if missing). Raises OSError."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=prefix, dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(document, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def read_json_file(path: str, max_bytes: int) -> object | None:
    """Return the decoded JSON of the file at `path`, None when there is none; raise SampleError(path, reason)
    when it cannot be used (not a regular file, unreadable, empty, larger than `max_bytes` (whole MiB), not JSON)."""
    try:
        # Non-blocking: a FIFO put in its place would otherwise wait for a writer forever.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SampleError(path, f"cannot be opened: {exc.strerror}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):  # checked before reading: Python refuses to wrap a directory in a file
            raise SampleError(path, "is a directory" if stat.S_ISDIR(mode) else "is not a regular file")
        raw = b""
        while len(raw) <= max_bytes:
            chunk = os.read(descriptor, max_bytes + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
    except OSError as exc:
        raise SampleError(path, f"cannot be read: {exc.strerror}") from None
    finally:
        os.close(descriptor)
    if not raw:
        raise SampleError(path, "is empty")
    if len(raw) > max_bytes:
        raise SampleError(path, f"is larger than {max_bytes >> 20} MiB")
    try:
        document: object = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SampleError(path, f"is not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # JSONDecodeError: truncated, garbage
        raise SampleError(path, f"is not JSON: {exc}") from None
    except RecursionError:
        raise SampleError(path, "is JSON nested too deeply") from None
    return document


def move_aside(path: str, suffix: str, now: datetime) -> str:
    """Rename `path` to `<path><suffix><UTC time>` (numbered when that exists); return the new path. Raises
    OSError."""
    stamp = now.astimezone(UTC).strftime(ASIDE_TIME_FORMAT)
    target = f"{path}{suffix}{stamp}"
    number = 1
    while os.path.lexists(target):  # a second bad file within the same second
        number += 1
        target = f"{path}{suffix}{stamp}-{number}"
    os.rename(path, target)
    return target


def remove_temporaries(folder: str, prefix: str, log: Log, kind: str) -> None:
    """Remove the temporary files (`prefix`) of writes a killed process left in `folder`, logging how many (and
    each one that could not be removed) as the `kind` of file ("journal"). A missing or unreadable folder has
    none."""
    try:
        names = [name for name in os.listdir(folder) if name.startswith(prefix)]
    except OSError:
        return  # no folder yet, or none readable: nothing to clean, and a write will say what is wrong
    removed = 0
    for name in names:
        path = os.path.join(folder, name)
        try:
            os.unlink(path)
            removed += 1
        except OSError as exc:
            log.warning(f"temporary {kind} file not removed", path=path, error=exc.strerror)
    if removed:
        log.info(f"removed temporary {kind} files left by an interrupted write", folder=folder, count=removed)

"""A flight recording's segment files: read as hostile input (bounded, never blocking, in time order), and a closed
segment compressed (`compress_segment`, the recorder's).

The readers run during incidents on the node, on whatever is in the folder: a segment is opened without following
symlinks and without blocking, and read only when it is a regular file; a line is at most MAX_LINE_BYTES (longer
ones skipped without being held), a segment at most MAX_SEGMENT_BYTES decompressed (gzip bombs stop), both far above
what the recorder writes. Wall-clock names can misorder runs, so segments are ordered by their first line's run
sequence (`"seq"`), then run start, then first cycle; a segment that says none keeps its name's place. A plain
segment closed since it was listed is read from its compressed copy (complete once it has its name).
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import stat
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import IO, BinaryIO

from evictd.kube.atomic_file import file_kind
from evictd.state_dir import RECORDING_TEMPORARY_PREFIX

# A segment's name ends so while it is written, and once closed.
OPEN_SUFFIX = ".jsonl"
CLOSED_SUFFIX = ".jsonl.gz"
MAX_LINE_BYTES = 16 << 20
MAX_SEGMENT_BYTES = 256 << 20
# What is read of a segment to find its run and first cycle.
HEAD_BYTES = 4096
_HEAD = re.compile(rb'\{"v":\d{1,3},"run":"([0-9A-Za-z._-]{1,64})","cycle":(\d{1,18})(?:,"seq":(\d{1,18}))?[,}]')
# A segment's name and a run id both begin with a UTC time, to the second: 20261123T101500.
_STAMP_CHARS = 15

Problem = Callable[[str], None]


class NotRegularFile(OSError):
    """A segment that is not a regular file (a FIFO, a device, a symlink, a folder): never read."""


def open_segment(path: str) -> BinaryIO:
    """Open `path` for reading, refusing anything but a regular file (NotRegularFile). Raises OSError."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(errno.ELOOP, "a symlink, not a regular file: not read") from None
        raise
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise NotRegularFile(errno.EINVAL, f"{file_kind(mode)}, not a regular file: not read")
    return os.fdopen(descriptor, "rb")


def _open_listed(path: str) -> tuple[BinaryIO, bool]:
    """Open the segment listed as `path`, or its compressed copy if closed since; return it and whether compressed."""
    try:
        return open_segment(path), path.endswith(".gz")
    except FileNotFoundError as gone:
        if not path.endswith(OPEN_SUFFIX):
            raise
        try:
            return open_segment(path[: -len(OPEN_SUFFIX)] + CLOSED_SUFFIX), True
        except FileNotFoundError:
            raise gone from None  # deleted whole (the recording's bounds): say so of the name listed


def segment_lines(path: str, problem: Problem) -> Iterator[bytes | None]:
    """The lines of the segment at `path`; None for a line that could not be read (the reader loses its context),
    with `problem` told why. A compressed segment cut short (a crash while closing it) yields what it holds."""
    try:
        handle, compressed = _open_listed(path)
    except OSError as exc:
        problem(f"{path}: {exc.strerror or exc}")
        yield None
        return
    with handle:
        stream: IO[bytes] | gzip.GzipFile = handle
        if compressed:
            stream = gzip.GzipFile(fileobj=handle, mode="rb")
        total = 0
        try:
            while line := stream.readline(MAX_LINE_BYTES + 1):
                total += len(line)
                too_long = len(line) > MAX_LINE_BYTES
                while too_long and line and not line.endswith(b"\n") and total <= MAX_SEGMENT_BYTES:
                    line = stream.readline(MAX_LINE_BYTES)  # read through, not held
                    total += len(line)
                if total > MAX_SEGMENT_BYTES:
                    problem(f"{path}: more than {MAX_SEGMENT_BYTES >> 20} MiB of lines: the rest is not read")
                    yield None
                    return
                if too_long:
                    problem(f"{path}: a line longer than {MAX_LINE_BYTES >> 20} MiB: skipped")
                    yield None
                    continue
                yield line
        except (EOFError, OSError, zlib.error):
            return


def _head(path: str) -> tuple[str, int, int] | None:
    """The run, cycle and run sequence (0: none) the segment's first line starts with (None: not said or unreadable)."""
    try:
        handle, compressed = _open_listed(path)
        with handle:
            stream = gzip.GzipFile(fileobj=handle, mode="rb") if compressed else handle
            start = stream.read(HEAD_BYTES)
    except (EOFError, OSError, zlib.error):
        return None
    found = _HEAD.match(start)
    return (found[1].decode("ascii"), int(found[2]), int(found[3] or 0)) if found else None


def in_time_order(paths: Sequence[str]) -> list[tuple[str, tuple[str, int, int] | None]]:
    """`paths` (sorted by name) ordered by run sequence, run start and first cycle, each with what its first line
    says (None: nothing); runs without a sequence (0) come first, by their start."""
    heads = [(position, path, _head(path)) for position, path in enumerate(paths)]

    def key(item: tuple[int, str, tuple[str, int, int] | None]) -> tuple[int, str, str, int, int]:
        position, path, head = item
        if head is None:
            return 0, os.path.basename(path)[:_STAMP_CHARS], "", -1, position
        return head[2], head[0][:_STAMP_CHARS], head[0], head[1], position

    return [(path, head) for _, path, head in sorted(heads, key=key)]


def next_sequence(paths: Sequence[str]) -> int:
    """One more than the largest run sequence the segments at `paths` say (1 for none)."""
    return 1 + max((head[2] for head in map(_head, paths) if head is not None), default=0)


def compress_segment(folder: str, path: str) -> None:
    """Replace the closed plain segment `path` (in `folder`) by its gzip file, written owner-only under a temporary
    name, synced, then renamed; raises OSError, leaving the plain segment as it was."""
    compressed = path[: -len(OPEN_SUFFIX)] + CLOSED_SUFFIX
    temporary = os.path.join(folder, RECORDING_TEMPORARY_PREFIX + os.path.basename(compressed))
    try:
        # Owner-only, whatever the umask (the DaemonSet sets none): a recording holds every pod's details.
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o600)
        os.fchmod(descriptor, 0o600)
        with open(path, "rb") as source, os.fdopen(descriptor, "wb") as target:
            with gzip.GzipFile(fileobj=target, mode="wb", compresslevel=6, mtime=0) as zipped:
                shutil.copyfileobj(source, zipped)
            target.flush()
            os.fsync(target.fileno())
        os.replace(temporary, compressed)
        os.unlink(path)  # a crash before this leaves both: readers take the compressed one
    except OSError:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise  # the plain segment stays, and is read as it is

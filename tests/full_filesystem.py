"""A folder on a real filesystem that takes no more writes, for the tests of evictd's stateDir.

`UnwritableFolder` mounts a 64 KiB tmpfs on a folder and makes it refuse writes the way a real node's disk
does: "full" fills it with a file until the kernel answers ENOSPC (checked with a probe write), "read-only"
mounts it read-only (EROFS). `make_writable` frees the space (or remounts read-write), as an operator would;
`unmount` lazily unmounts whatever the test's outcome. Needs root; a failed mount fails the test.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

TINY_TMPFS = "size=64k"
FILLER = "filler"
KINDS = ("full", "read-only")
# What a failed write says in each case (OSError.strerror).
WRITE_ERROR = {"full": "No space left on device", "read-only": "Read-only file system"}


def fill(folder: Path) -> None:
    """Write a file (`filler`) into `folder` until its filesystem is full; check that a new write fails."""
    descriptor = os.open(folder / FILLER, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(descriptor, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(descriptor)
    probe = os.open(folder / "probe", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left"):
            os.write(probe, b"x")
    finally:
        os.close(probe)
        os.unlink(folder / "probe")


class UnwritableFolder:
    """`folder` on a 64 KiB tmpfs that is full (ENOSPC) or read-only (EROFS) once `make_unwritable` ran."""

    def __init__(self, folder: Path, kind: str) -> None:
        assert kind in KINDS, kind
        self.folder = folder
        self.kind = kind
        folder.mkdir(parents=True, exist_ok=True)
        options = TINY_TMPFS if kind == "full" else f"ro,{TINY_TMPFS}"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            pytest.fail(f"mount -t tmpfs -o {options} {folder} failed: {done.stderr.strip()}")

    @property
    def write_error(self) -> str:
        return WRITE_ERROR[self.kind]

    def make_unwritable(self) -> None:
        if self.kind == "full":
            fill(self.folder)

    def make_writable(self) -> None:
        if self.kind == "full":
            (self.folder / FILLER).unlink()
        else:
            subprocess.run(["mount", "-o", "remount,rw", str(self.folder)], check=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.folder)], capture_output=True, check=False)

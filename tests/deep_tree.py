"""Folders nested past PATH_MAX on a real filesystem, as a tenant can make them in its emptyDir.

No path can name the deepest folders (the kernel refuses paths of PATH_MAX, 4096 bytes, and more: "File name
too long"), so the chain is made one level at a time relative to an open folder (`mkdir` and `open` with
`dir_fd`), as a process that `chdir`s into each new folder makes it. Python's own recursive removal would fail on
it (and recursion past its limit): make it on a filesystem the test unmounts.
"""

from __future__ import annotations

import os
from pathlib import Path

# "d/" per level: 2,100 levels make paths of more than 4,200 bytes below the folder.
PAST_PATH_MAX_LEVELS = 2100
LEVEL_NAME = "d"


def nest(folder: Path, levels: int = PAST_PATH_MAX_LEVELS, leaf_bytes: int = 0) -> None:
    """Make `levels` folders `d/d/.../d` inside `folder`, with a file `leaf` of `leaf_bytes` at the bottom."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(LEVEL_NAME, dir_fd=fd)
            deeper = os.open(LEVEL_NAME, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
        try:
            os.write(leaf, b"\x17" * leaf_bytes)
        finally:
            os.close(leaf)
    finally:
        os.close(fd)


def reachable_levels(folder: Path) -> int:
    """How many levels of the chain in `folder` a path can name (lstat works on them)."""
    level, path = 0, str(folder)
    while True:
        path = f"{path}/{LEVEL_NAME}"
        try:
            os.lstat(path)
        except OSError:
            return level
        level += 1

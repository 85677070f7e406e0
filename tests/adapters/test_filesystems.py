"""statvfs readings and layout detection against real filesystems (a tmpfs and a loop-mounted ext4).

Every reading is checked against ``df`` (coreutils, an independent reader of the same kernel numbers)
while the filesystems are filled with data and then with inodes until they are full.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from evictd.adapters.filesystems import FsReading, detect_layout, statvfs_reading
from evictd.core.errors import SampleError
from evictd.core.fs_layout import FsLayout

MIB = 1024 * 1024
WRITE_CHUNK_BYTES = 64 * 1024
FS_FIXTURES = ["tmpfs_mount", "ext4_mount"]


def df_numbers(path: Path) -> dict[str, int]:
    """Return what df reports for the filesystem of `path`: bytes in 1-byte blocks and inode counts."""
    sizes = (
        subprocess.run(["df", "-B1", "--output=size,used,avail", str(path)], capture_output=True, text=True, check=True)
        .stdout.splitlines()[1]
        .split()
    )
    inodes = (
        subprocess.run(["df", "--output=itotal,iused,iavail", str(path)], capture_output=True, text=True, check=True)
        .stdout.splitlines()[1]
        .split()
    )
    size, used, avail = (int(v) for v in sizes)
    itotal, iused, iavail = (int(v) for v in inodes)
    return {"size": size, "used": used, "avail": avail, "itotal": itotal, "iused": iused, "iavail": iavail}


def assert_matches_df(path: Path, reading: FsReading) -> None:
    df = df_numbers(path)
    assert (
        reading.capacity_bytes,
        reading.used_bytes,
        reading.available_bytes,
        reading.inodes,
        reading.inodes_used,
        reading.inodes_free,
    ) == (df["size"], df["used"], df["avail"], df["itotal"], df["iused"], df["iavail"])


def write_file(path: Path, size_bytes: int) -> None:
    chunk = b"\xa5" * WRITE_CHUNK_BYTES
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = size_bytes
        while left > 0:
            left -= os.write(fd, chunk[: min(left, WRITE_CHUNK_BYTES)])
        os.fsync(fd)
    finally:
        os.close(fd)


def fill_with_data(existing_file: Path) -> int:
    """Append to an existing file until the filesystem refuses (ENOSPC); return the bytes written."""
    chunk = b"\x5a" * WRITE_CHUNK_BYTES
    written = 0
    fd = os.open(existing_file, os.O_WRONLY | os.O_APPEND)
    try:
        while True:
            try:
                written += os.write(fd, chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        os.fsync(fd)
    finally:
        os.close(fd)
    return written


def fill_with_inodes(folder: Path) -> int:
    """Create empty files until the filesystem runs out of inodes; return how many were created."""
    created = 0
    while True:
        try:
            (folder / f"i{created}").touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            return created
        created += 1


@pytest.mark.parametrize("fs_fixture", FS_FIXTURES)
def test_reading_follows_data_and_inodes_until_full(fs_fixture: str, request: pytest.FixtureRequest) -> None:
    mount: Path = request.getfixturevalue(fs_fixture)
    empty = statvfs_reading(str(mount))
    assert_matches_df(mount, empty)

    write_file(mount / "data", 4 * MIB)
    after_data = statvfs_reading(str(mount))
    assert_matches_df(mount, after_data)
    assert after_data.capacity_bytes == empty.capacity_bytes
    assert after_data.used_bytes - empty.used_bytes >= 4 * MIB
    assert empty.available_bytes - after_data.available_bytes >= 4 * MIB

    for i in range(100):
        (mount / f"empty{i}").touch()
    after_files = statvfs_reading(str(mount))
    assert_matches_df(mount, after_files)
    assert after_files.inodes == empty.inodes
    assert after_files.inodes_free == after_data.inodes_free - 100
    assert after_files.inodes_used == after_data.inodes_used + 100

    # Inodes first: once the data blocks are gone, ext4 could not grow the directory for more entries.
    (mount / "filler").touch()
    created = fill_with_inodes(mount)
    no_inodes = statvfs_reading(str(mount))
    assert_matches_df(mount, no_inodes)
    assert created == after_files.inodes_free - 1
    assert no_inodes.inodes_free == 0
    assert no_inodes.inodes_used == no_inodes.inodes

    written = fill_with_data(mount / "filler")
    full = statvfs_reading(str(mount))
    assert_matches_df(mount, full)
    assert written > 0
    assert full.available_bytes <= no_inodes.available_bytes - written
    # Less than a mebibyte is left (ext4 keeps a few clusters back for delayed allocation; tmpfs none).
    assert full.available_bytes < MIB
    if fs_fixture == "tmpfs_mount":
        assert full.available_bytes == 0  # tmpfs hands out every page up to size=


def test_tmpfs_reports_its_mount_options_exactly(tmpfs_mount: Path) -> None:
    reading = statvfs_reading(str(tmpfs_mount))
    assert reading.capacity_bytes == 64 * MIB
    assert reading.inodes == 2000
    # The root directory is the only inode in use on a fresh tmpfs.
    assert (reading.inodes_used, reading.inodes_free) == (1, 1999)
    assert reading.used_bytes == 0
    assert reading.available_bytes == 64 * MIB


def test_ext4_reports_its_mkfs_inode_count(ext4_mount: Path) -> None:
    reading = statvfs_reading(str(ext4_mount))
    assert reading.inodes == 4096
    # Reserved blocks (and ext4's own reserve for delayed allocation) make used + available < capacity.
    assert reading.used_bytes + reading.available_bytes <= reading.capacity_bytes


def test_reading_of_a_file_is_the_reading_of_its_filesystem(ext4_mount: Path) -> None:
    write_file(ext4_mount / "f", 1000)
    os.chmod(ext4_mount / "f", 0)  # O_PATH needs no read permission
    assert statvfs_reading(str(ext4_mount / "f")) == statvfs_reading(str(ext4_mount))


def test_missing_path_is_a_sample_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(SampleError) as info:
        statvfs_reading(missing)
    assert info.value.source == missing
    assert info.value.reason == "No such file or directory"


# Where each of the three paths lives: "ext4" and "tmpfs" are the fixtures, "host" is the test's tmp dir.
LAYOUT_CASES = [
    pytest.param(("ext4", "ext4", "ext4"), FsLayout(False, False), id="single-fs"),
    pytest.param(("ext4", "tmpfs", "tmpfs"), FsLayout(True, False), id="dedicated-imagefs"),
    pytest.param(("ext4", "tmpfs", "ext4"), FsLayout(True, True), id="imagefs-split-containerfs-on-nodefs"),
    pytest.param(("ext4", "tmpfs", "host"), FsLayout(True, True), id="imagefs-split-containerfs-on-third-fs"),
    pytest.param(("ext4", "ext4", "tmpfs"), FsLayout(False, True), id="containerfs-split-without-imagefs"),
]


@pytest.mark.parametrize(("where", "expected"), LAYOUT_CASES)
def test_detect_layout(
    where: tuple[str, str, str], expected: FsLayout, tmpfs_mount: Path, ext4_mount: Path, tmp_path: Path
) -> None:
    bases = {"ext4": ext4_mount, "tmpfs": tmpfs_mount, "host": tmp_path / "host"}
    paths = []
    for role, fs in zip(("kubelet", "images", "containers"), where, strict=True):
        folder = bases[fs] / role
        folder.mkdir(parents=True)
        paths.append(str(folder))
    assert detect_layout(*paths) == expected


def test_detect_layout_names_the_missing_path(ext4_mount: Path) -> None:
    (ext4_mount / "kubelet").mkdir()
    missing = str(ext4_mount / "images")
    with pytest.raises(SampleError) as info:
        detect_layout(str(ext4_mount / "kubelet"), missing, str(ext4_mount / "kubelet"))
    assert info.value.source == missing

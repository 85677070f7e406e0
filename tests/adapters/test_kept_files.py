"""`KeptFiles` on plain files: a file larger than one ``pread`` chunk is read whole, the cap falls back to None
(the caller opens the file itself), a missing file is left to the caller, and a cache dropped without `close`
closes its descriptors. The cgroup behaviour is in
test_kept_files_real.py (v1) and tests/uml/test_kept_files_v2.py (v2)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from evictd.adapters.kept_files import PREAD_CHUNK_BYTES, KeptFiles


def test_a_file_past_one_chunk_is_read_whole_and_again_after_an_in_place_rewrite(tmp_path: Path) -> None:
    big = tmp_path / "memory.stat"
    content = b"".join(b"key%d %d\n" % (n, n * 4096) for n in range(4000))
    assert len(content) > 2 * PREAD_CHUNK_BYTES
    big.write_bytes(content)
    kept = KeptFiles(cap=4)
    assert kept.read(str(big)) == content
    big.write_bytes(content[:100])  # same inode, truncated and rewritten
    assert kept.read(str(big)) == content[:100]
    kept.close()


def test_cap_and_missing_files_are_left_to_the_caller(tmp_path: Path) -> None:
    files = [tmp_path / f"f{n}" for n in range(3)]
    for n, path in enumerate(files):
        path.write_bytes(b"%d\n" % n)
    kept = KeptFiles(cap=2)
    assert [kept.read(str(path)) for path in files] == [b"0\n", b"1\n", None]
    assert kept.read(str(tmp_path / "missing")) is None
    assert kept.sweep() == 0  # both kept files were read in this cycle
    assert kept.sweep() == 2  # and none in the next: both closed
    assert kept.read(str(files[2])) == b"2\n"  # room again
    kept.close()


def test_a_dropped_cache_closes_its_descriptors(tmp_path: Path) -> None:
    path = tmp_path / "pids.current"
    path.write_bytes(b"3\n")
    kept = KeptFiles(cap=1)
    assert kept.read(str(path)) == b"3\n"
    assert str(path) in open_targets()
    del kept
    assert str(path) not in open_targets()


def open_targets() -> set[str]:
    found = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found.add(os.readlink(f"/proc/self/fd/{name}"))
    return found


def test_read_many_reads_each_file_as_read_does(tmp_path: Path) -> None:
    files = [tmp_path / f"f{n}" for n in range(3)]
    for n, path in enumerate(files):
        path.write_bytes(b"%d\n" % n)
    big = tmp_path / "memory.stat"
    content = b"".join(b"key%d %d\n" % (n, n * 4096) for n in range(4000))
    big.write_bytes(content)
    kept = KeptFiles(cap=3)
    paths = [str(files[0]), str(big), str(tmp_path / "missing"), str(files[1]), str(files[2])]
    assert kept.read_many(paths) == [b"0\n", content, None, b"1\n", None]  # the cap reached at the fourth file
    assert kept.sweep() == 0  # all three kept files were read
    files[0].write_bytes(b"10\n")  # rewritten in place: read fresh through the kept descriptor
    assert kept.read_many(paths[:2]) == [b"10\n", content]
    assert kept.sweep() == 1  # files[1] was not read since the last sweep
    assert kept.read_many([str(files[2])]) == [b"2\n"]  # room again
    kept.close()


def test_read_many_from_the_first_file_one_pread_does_not_take_on_reads_as_read_does(tmp_path: Path) -> None:
    files = [tmp_path / name for name in ("memory.usage_in_bytes", "memory.stat", "pids.current")]
    for n, path in enumerate(files):
        path.write_bytes(b"%d\n" % n)
    paths = [str(path) for path in files]
    kept = KeptFiles(cap=3)
    assert kept.read_many(paths) == [b"0\n", b"1\n", b"2\n"]  # all three kept now
    content = b"".join(b"key%d %d\n" % (n, n * 4096) for n in range(4000))
    files[1].write_bytes(content)  # the middle one past one chunk: read whole, and the one after it
    files[2].write_bytes(b"20\n")
    assert kept.read_many(paths) == [b"0\n", content, b"20\n"]
    # The first one's kept descriptor fails (as a removed cgroup's do, ENODEV): opened anew, and the others read.
    folder = os.open(tmp_path, os.O_RDONLY)
    os.dup2(folder, kept._fds[paths[0]])  # the descriptor now reads a folder: EISDIR
    os.close(folder)
    files[0].write_bytes(b"10\n")
    files[1].write_bytes(b"11\n")
    assert kept.read_many(paths) == [b"10\n", b"11\n", b"20\n"]
    assert kept.sweep() == 0  # every file was read, whichever way
    assert kept.read_many(paths) == [b"10\n", b"11\n", b"20\n"]
    kept.close()

"""The node-local mode file (src/evictd/adapters/mode_file.py) on real files: what the reader makes of what an
operator (or an accident) leaves at `<stateDir>/mode`, without blocking or following a link, and the writer's
atomic replacement."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from evictd.adapters.mode_file import MAX_MODE_FILE_BYTES, read_mode_file, remove_mode_file, write_mode_file
from evictd.core.run_mode import ModeFile
from evictd.state_dir import MODE_TEMPORARY_PREFIX, StateDir


@pytest.mark.parametrize(("content", "read"), [
    pytest.param(b"dry-run\n", ModeFile("dry-run"), id="as-written"),
    pytest.param(b"  dry-run \r\n\n", ModeFile("dry-run"), id="surrounding-whitespace"),
    pytest.param(b"dry-run", ModeFile("dry-run"), id="no-newline"),
    pytest.param(b"acting\n", ModeFile("acting"), id="acting-read-as-written"),
    pytest.param(b"", ModeFile(""), id="empty-touch"),
    pytest.param(b"\xff\xfe", ModeFile(problem="is not UTF-8 text (byte 0)"), id="not-utf8"),
    pytest.param(b"dry-run\n" * 9, ModeFile(problem=f"is longer than {MAX_MODE_FILE_BYTES} bytes"), id="too-long"),
])
def test_what_a_regular_file_holds(tmp_path: Path, content: bytes, read: ModeFile) -> None:
    path = tmp_path / "mode"
    path.write_bytes(content)
    assert read_mode_file(str(path)) == read
    assert read.accepted is (read == ModeFile("dry-run"))


def test_no_file_and_no_state_dir_are_none(tmp_path: Path) -> None:
    assert read_mode_file(str(tmp_path / "mode")) is None
    assert read_mode_file(str(tmp_path / "missing" / "mode")) is None


def test_a_folder_a_fifo_and_a_symlink_in_its_place_are_problems_read_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    assert read_mode_file(str(tmp_path / "folder")) == ModeFile(problem="is a directory")
    os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open would wait forever
    done: list[ModeFile | None] = []
    reader = threading.Thread(target=lambda: done.append(read_mode_file(str(tmp_path / "fifo"))), daemon=True)
    reader.start()
    reader.join(5)
    assert done == [ModeFile(problem="is not a regular file")]
    (tmp_path / "target").write_text("dry-run\n")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert read_mode_file(str(tmp_path / "link")) == ModeFile(problem="is a symlink")


def test_the_writer_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = StateDir(str(tmp_path)).mode
    write_mode_file(path, "dry-run")
    assert Path(path).read_text() == "dry-run\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    Path(path).write_text("acting\n")  # by hand
    write_mode_file(path, "dry-run")
    assert read_mode_file(path) == ModeFile("dry-run")
    assert not [name for name in os.listdir(tmp_path) if name.startswith(MODE_TEMPORARY_PREFIX)]
    assert remove_mode_file(path) and not os.path.lexists(path)
    assert not remove_mode_file(path), "nothing to remove the second time"


def test_the_writer_needs_the_folder_and_says_why_not(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_mode_file(str(tmp_path / "missing" / "mode"), "dry-run")
    (tmp_path / "mode").mkdir()
    with pytest.raises(IsADirectoryError):
        remove_mode_file(str(tmp_path / "mode"))
    with pytest.raises(IsADirectoryError):
        write_mode_file(str(tmp_path / "mode"), "dry-run")
    assert not [name for name in os.listdir(tmp_path) if name.startswith(MODE_TEMPORARY_PREFIX)]

"""`evictd mode` as an operator runs it on a node (src/evictd/commands/mode.py): real processes on a real stateDir,
and what `evictd run`'s reader then makes of the file. Bad input exits 2 with one line naming the value and what is
accepted, never a traceback; a file that cannot be written exits 1 with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evictd.adapters.mode_file import read_mode_file
from evictd.core.run_mode import ModeFile
from evictd.state_dir import LOCK_FILE, MODE_TEMPORARY_PREFIX
from test_cli import evictd, write


def state_dir(tmp_path: Path) -> Path:
    """A stateDir an evictd has run with (its lock file there)."""
    folder = tmp_path / "state"
    folder.mkdir()
    (folder / LOCK_FILE).write_text("1\n")
    return folder


def test_dry_run_writes_the_file_run_reads_and_clear_removes_it(tmp_path: Path) -> None:
    folder = state_dir(tmp_path)
    mode_file = folder / "mode"
    shown = evictd("mode", "--state-dir", str(folder))
    assert shown.returncode == 0 and shown.stderr == ""
    assert shown.stdout == f"{mode_file}: none: the Node label evictd.io/mode and dryRun decide evictd's mode\n"

    held = evictd("mode", "dry-run", "--state-dir", str(folder))
    assert held.returncode == 0 and held.stderr == "", held.stderr
    assert held.stdout.startswith(f"{mode_file}: dry-run: evictd on this node is in dry-run from its next cycle")
    assert mode_file.read_text() == "dry-run\n" and read_mode_file(str(mode_file)) == ModeFile("dry-run")
    assert not [name for name in os.listdir(folder) if name.startswith(MODE_TEMPORARY_PREFIX)]
    again = evictd("mode", "dry-run", "--state-dir", str(folder))
    assert again.returncode == 0 and mode_file.read_text() == "dry-run\n", "setting it twice is no error"
    assert "stays in dry-run" in evictd("mode", "show", "--state-dir", str(folder)).stdout

    cleared = evictd("mode", "clear", "--state-dir", str(folder))
    assert cleared.returncode == 0 and cleared.stderr == ""
    assert cleared.stdout.startswith(f"{mode_file} removed: ") and not mode_file.exists()
    twice = evictd("mode", "clear", "--state-dir", str(folder))
    assert twice.returncode == 0 and twice.stdout.startswith(f"{mode_file}: none to clear: ")


def test_the_state_dir_comes_from_the_configuration(tmp_path: Path) -> None:
    folder = state_dir(tmp_path)
    config = write(tmp_path, "evictd.yaml", f"apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                   f"stateDir: {folder}\n")
    held = evictd("mode", "dry-run", "--config", config)
    assert held.returncode == 0, held.stderr
    assert (folder / "mode").read_text() == "dry-run\n"


def test_show_says_what_evictd_makes_of_a_file_written_by_hand(tmp_path: Path) -> None:
    folder = state_dir(tmp_path)
    (folder / "mode").write_text("acting\n")
    shown = evictd("mode", "--state-dir", str(folder))
    assert shown.returncode == 0
    assert shown.stdout == (f"{folder / 'mode'}: holds 'acting', not accepted (accepted: dry-run): evictd holds this "
                            "node in dry-run until the file is corrected or removed (`evictd mode clear`)\n")


@pytest.mark.parametrize(("setting", "expected"), [
    pytest.param("acting", "evictd: mode: invalid value 'acting': expected dry-run, clear or show (the node-local "
                 "file only holds a node in dry-run; to let this node act, run `evictd mode clear` and label the "
                 "Node evictd.io/mode=acting, or set dryRun: false)", id="acting"),
    pytest.param("dryrun", "evictd: mode: invalid value 'dryrun': expected dry-run, clear or show", id="typo"),
    pytest.param("Dry-Run", "evictd: mode: invalid value 'Dry-Run': expected dry-run, clear or show", id="case"),
    pytest.param("dry-run\n", "evictd: mode: invalid value 'dry-run\\n': expected dry-run, clear or show",
                 id="control-character-escaped"),
])
def test_a_setting_not_accepted_exits_2_naming_it_and_writes_nothing(tmp_path: Path, setting: str,
                                                                      expected: str) -> None:
    folder = state_dir(tmp_path)
    refused = evictd("mode", setting, "--state-dir", str(folder))
    assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", expected + "\n")
    assert sorted(os.listdir(folder)) == [LOCK_FILE]


def test_a_state_dir_that_is_no_folder_exits_2_and_one_that_cannot_be_written_exits_1(tmp_path: Path) -> None:
    missing = evictd("mode", "dry-run", "--state-dir", str(tmp_path / "typo"))
    assert missing.returncode == 2 and missing.stdout == "" and "Traceback" not in missing.stderr
    assert missing.stderr == (f"evictd: stateDir: invalid value '{tmp_path / 'typo'}': no such folder: evictd's "
                              "stateDir (--state-dir, or the configuration's stateDir), where evictd run reads its "
                              "mode file\n")
    folder = state_dir(tmp_path)
    (folder / "mode").mkdir()  # a folder in its place: neither written over nor removed
    for setting, verb in (("dry-run", "written"), ("clear", "removed")):
        failed = evictd("mode", setting, "--state-dir", str(folder))
        assert failed.returncode == 1 and "Traceback" not in failed.stderr
        assert failed.stderr.startswith(f"evictd: {folder / 'mode'}: cannot be {verb}: "), failed.stderr
    assert sorted(os.listdir(folder)) == [LOCK_FILE, "mode"]


def test_a_state_dir_no_evictd_ran_with_is_a_warning(tmp_path: Path) -> None:
    held = evictd("mode", "dry-run", "--state-dir", str(tmp_path))
    assert held.returncode == 0
    assert held.stderr == (f"warning: no evictd has run with the stateDir {tmp_path} (no {LOCK_FILE} in it): check "
                           "that it is the running evictd's (--state-dir, or --config with its configuration)\n")
    assert (tmp_path / "mode").read_text() == "dry-run\n"

"""tests/apt-get-wait.sh: the set-up's apt-get waits for another apt or dpkg holding the lock, never gives up at once.

A stand-in `apt-get` first on PATH answers as apt-get does while another process holds the lock, a given number of
times, then succeeds; the wrapper must pass the dpkg lock time-out, try again, and stop trying at its limit.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WRAPPER = REPO / "tests" / "apt-get-wait.sh"
LOCKED = "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 2023 (apt-get)"


def fake_apt_get(folder: Path, locked_times: int, other_error: str = "") -> Path:
    """An `apt-get` that records its arguments, fails with the lock message `locked_times` times, then succeeds
    (or fails with `other_error`)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "apt-get"
    script.write_text(f"""#!/bin/sh
echo "$*" >> {folder}/calls
n=$(wc -l < {folder}/calls)
if [ "$n" -le {locked_times} ]; then echo '{LOCKED}' >&2; exit 100; fi
if [ -n '{other_error}' ]; then echo '{other_error}' >&2; exit 100; fi
exit 0
""", encoding="utf-8")
    script.chmod(0o755)
    return folder


def run_wrapper(folder: Path, wait_s: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}", "APT_LOCK_WAIT_S": str(wait_s),
           "APT_LOCK_POLL_S": "0.1"}
    return subprocess.run([str(WRAPPER), "update", "-qq"], env=env, capture_output=True, text=True, timeout=60)


def test_a_held_lock_is_waited_for_then_apt_get_runs(tmp_path: Path) -> None:
    folder = fake_apt_get(tmp_path / "bin", locked_times=2)
    done = run_wrapper(folder, wait_s=600)
    assert done.returncode == 0, done.stderr
    calls = (folder / "calls").read_text().splitlines()
    assert calls == ["-o DPkg::Lock::Timeout=600 update -qq"] * 3
    assert done.stderr.count("another apt or dpkg holds the lock") == 2


def test_a_lock_held_past_the_limit_fails_naming_it(tmp_path: Path) -> None:
    folder = fake_apt_get(tmp_path / "bin", locked_times=10_000)
    done = run_wrapper(folder, wait_s=1)
    assert done.returncode == 100
    assert "the apt/dpkg lock was still held after 1 s" in done.stderr


def test_another_failure_is_not_retried(tmp_path: Path) -> None:
    folder = fake_apt_get(tmp_path / "bin", locked_times=0, other_error="E: Unable to locate package nothing-here")
    done = run_wrapper(folder, wait_s=600)
    assert done.returncode == 100 and "Unable to locate package" in done.stderr
    assert len((folder / "calls").read_text().splitlines()) == 1


def test_every_apt_get_install_or_update_of_the_set_up_goes_through_the_wrapper() -> None:
    files = [REPO / "Makefile", *sorted((REPO / "tests" / "uml").glob("provision-*.sh")),
             REPO / "tests" / "deploy" / "systemd_smoke.sh"]
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            # A bare apt-get installing or updating the machine's own lists gives up on a held lock. (Updates of
            # a private list folder, `-o Dir::State::Lists=...` through $opts, and downloads take no machine lock.)
            bare = re.search(r"(?<![-\w/\"$])apt-get\s+(-\S+\s+)*(install|update)\b", line)
            assert bare is None, f"{path.relative_to(REPO)}:{number}: {line.strip()}"
    assert "APT_GET := tests/apt-get-wait.sh" in (REPO / "Makefile").read_text(encoding="utf-8")

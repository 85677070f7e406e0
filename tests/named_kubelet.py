"""A real process named `kubelet`, holding a kubelet's flags on its command line, for the tests that read the
running kubelet (`evictd.adapters.kubelet_process`, `evictd.kubelet_file`).

`named_kubelet(*flags)` starts the interpreter through bash's `exec -a kubelet`, so that its `argv[0]` is `kubelet`
and `/proc/<pid>/cmdline` reads `kubelet -c <sleep program> <flags>...`: the interpreter's `-c PROGRAM` reads as a
short flag with its value, which evictd skips as it skips any flag it does not read, and the flags follow. It
sleeps a minute at most and is killed on leaving. `proc_of(folder, *processes)` makes a folder holding only these
processes (links to their /proc entries), for `EVICTD_PROC`: a kubelet elsewhere on the machine is never seen.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SLEEP = "import time; time.sleep(60)"
STARTED_WITHIN_S = 10.0


@contextlib.contextmanager
def named_kubelet(*flags: str) -> Iterator[int]:
    """Yield the PID of a process named `kubelet` whose command line holds `flags` (see above)."""
    python = os.path.realpath(sys.executable)  # the interpreter itself: a wrapper script would re-exec it
    process = subprocess.Popen(["bash", "-c", 'exec -a kubelet "$0" -c "$1" "${@:2}"', python, SLEEP, *flags])
    try:
        cmdline = Path(f"/proc/{process.pid}/cmdline")
        deadline = time.monotonic() + STARTED_WITHIN_S
        while not cmdline.read_bytes().startswith(b"kubelet\0"):  # until bash has exec'd
            assert time.monotonic() < deadline and process.poll() is None, "the named kubelet did not start"
            time.sleep(0.01)
        yield process.pid
    finally:
        process.kill()
        process.wait()


def proc_of(folder: Path, *pids: int) -> str:
    """A folder holding links to the /proc entries of `pids` only, as `EVICTD_PROC` names it."""
    folder.mkdir(parents=True, exist_ok=True)
    for pid in pids:
        (folder / str(pid)).symlink_to(f"/proc/{pid}")
    return str(folder)

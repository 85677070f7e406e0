"""Real test cgroups on this machine, for tier-3 tests: make them, move processes in, tear them down.

Test cgroups are named ``evictd-test-<random>`` and created in the machine's cgroup hierarchies under
``/sys/fs/cgroup`` (the v1 ``memory`` and ``pids`` hierarchies, or the v2 ``unified`` one):

* `new_test_cgroup_name` draws such a name;
* `CgroupTree` creates cgroup paths (and their missing parents) in some hierarchies, starts `ScriptedChild`
  processes and moves them into a cgroup (their PID written to ``cgroup.procs``), and removes it all;
* `remove_cgroups` kills whatever is left in the given folders and removes them in the order given (pass
  them bottom-up); `remove_cgroup_tree` does that for a folder and everything below it;
* `temporary_cgroup` makes one fresh test cgroup in a hierarchy and removes its whole tree afterwards;
* `ScriptedChild` is a real Python process obeying one command per stdin line (`CHILD_SCRIPT`);
* `memory_stall` makes real memory pressure stall (PSI): page-cache thrashing in a small memory cgroup.

A cgroup left behind is a test error: removal retries while killed tasks leave (EBUSY), then raises.
Needs root; without it the tests fail, they are never skipped.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
HIERARCHIES = ("memory", "pids")
REPLY_TIMEOUT_S = 30.0
TEARDOWN_TIMEOUT_S = 10.0
RMDIR_RETRY_S = 0.05

# A child that obeys one command per stdin line and answers "ok" when done; on EOF it kills and reaps the
# children it forked, then exits.
CHILD_SCRIPT = r"""
import os, signal, sys
kids, blobs = [], []
for line in iter(sys.stdin.readline, ""):
    cmd, *args = line.split()
    if cmd == "alloc":
        blobs.append(b"\x01" * int(args[0]))  # written, so every page is really charged
    elif cmd == "free":
        blobs.clear()
    elif cmd == "write":
        chunk = b"y" * (1 << 20)
        with open(args[0], "wb") as fh:
            for _ in range(int(args[1]) >> 20):
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())  # clean pages: they stay cached but are no longer dirty
    elif cmd == "read":
        for _ in range(int(args[1])):  # read(2) as cat does: a second read makes the file's cached pages active
            with open(args[0], "rb", buffering=0) as fh:
                while fh.read(1 << 20):
                    pass
    elif cmd == "fork":
        for _ in range(int(args[0])):
            pid = os.fork()
            if pid == 0:
                while True:
                    signal.pause()
            kids.append(pid)
    elif cmd == "reap":
        for pid in kids:
            os.kill(pid, signal.SIGKILL)
        for pid in kids:
            os.waitpid(pid, 0)
        kids.clear()
    print("ok", flush=True)
for pid in kids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""


def new_test_cgroup_name(hex_digits: int = 12) -> str:
    """Return a fresh test cgroup name, ``evictd-test-<random hex>``."""
    return f"evictd-test-{uuid.uuid4().hex[:hex_digits]}"


def remove_cgroups(folders: Iterable[Path], timeout_s: float = TEARDOWN_TIMEOUT_S) -> None:
    """Kill every process left in each folder and remove it, in the order given (children before parents).

    A folder still busy (EBUSY until the killed tasks have left the cgroup) is retried until ``timeout_s``,
    then the error is raised; a folder already gone is passed over.
    """
    deadline = time.monotonic() + timeout_s
    for folder in folders:
        while True:
            with contextlib.suppress(FileNotFoundError):
                for pid in (folder / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):  # already gone
                        os.kill(int(pid), signal.SIGKILL)
            try:
                folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise  # a cgroup left behind is a test error, not something to hide
                time.sleep(RMDIR_RETRY_S)


def remove_cgroup_tree(top: Path, timeout_s: float = TEARDOWN_TIMEOUT_S) -> None:
    """Remove the cgroup folder ``top`` and every cgroup below it, bottom-up (see `remove_cgroups`)."""
    if top.exists():
        remove_cgroups([Path(dirpath) for dirpath, _, _ in os.walk(top, topdown=False)], timeout_s)


@contextlib.contextmanager
def temporary_cgroup(hierarchy_root: Path, hex_digits: int = 8) -> Iterator[Path]:
    """Yield a fresh cgroup ``<hierarchy_root>/evictd-test-<random>``; its whole tree is removed afterwards."""
    path = hierarchy_root / new_test_cgroup_name(hex_digits)
    path.mkdir()
    try:
        yield path
    finally:
        remove_cgroup_tree(path)


class ScriptedChild:
    """A real Python process running `CHILD_SCRIPT`, driven line by line over pipes."""

    def __init__(self, label: str = "child") -> None:
        self.label = label
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def do(self, command: str) -> None:
        """Send one command and wait for its "ok"; fail the test if none comes."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT_S)
        assert ready, f"{self.label} {self.pid} did not answer {command!r} within {REPLY_TIMEOUT_S} s"
        assert self.proc.stdout.readline() == "ok\n", f"{self.label} {self.pid} failed {command!r}"

    def stop(self) -> None:
        """Close stdin (the child then kills and reaps its own children and exits); kill it if it lingers."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
            try:
                self.proc.wait(TEARDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class CgroupTree:
    """The test cgroups a test made and the `ScriptedChild` processes it started in them.

    `remove` stops the processes, kills whatever is left in the cgroups and removes them bottom-up; call it
    from a fixture's ``finally``.
    """

    def __init__(self) -> None:
        self.cgroups: list[Path] = []  # created folders, parents first
        self.children: list[ScriptedChild] = []

    def make(self, cgroup: str, hierarchies: Iterable[str] = HIERARCHIES) -> None:
        """Create ``cgroup`` (and its missing parents) in each of ``hierarchies``."""
        for hierarchy in hierarchies:
            parts = cgroup.split("/")
            for depth in range(1, len(parts) + 1):
                folder = CGROUP_MOUNT / hierarchy / "/".join(parts[:depth])
                if not folder.exists():
                    folder.mkdir()
                    self.cgroups.append(folder)

    def start_child(self, cgroup: str, hierarchies: Iterable[str] = HIERARCHIES, label: str = "child") -> ScriptedChild:
        """Start a child and move it into ``cgroup`` of each hierarchy by writing its PID to cgroup.procs."""
        child = ScriptedChild(label)
        self.children.append(child)
        for hierarchy in hierarchies:
            (CGROUP_MOUNT / hierarchy / cgroup / "cgroup.procs").write_text(f"{child.pid}\n")
        return child

    def remove(self) -> None:
        """Stop the children, kill whatever is left in the cgroups, remove them bottom-up."""
        for child in self.children:
            child.stop()
        remove_cgroups(reversed(self.cgroups))


# A file several times a small memory cgroup's limit, read over and over by processes in that cgroup: every
# fault reclaims a page and refaults another, which the kernel accounts as memory stall of the thrashers,
# in their cgroups and machine-wide (/proc/pressure/memory).
MiB = 1 << 20
THRASH_FILE_BYTES = 128 * MiB
THRASH_LIMIT_BYTES = 40 * MiB
THRASHERS = 2
THRASHER = r"""
import mmap, os, sys
for procs in sys.argv[2:]:
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
with open(sys.argv[1], "rb") as f:
    data = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print("ready", flush=True)
while True:
    for offset in range(0, len(data), mmap.PAGESIZE):
        data[offset]
"""


@contextlib.contextmanager
def memory_stall(memcg: Path, also_in: Sequence[Path] = ()) -> Iterator[None]:
    """Thrash the page cache from processes in the v1 memory cgroup `memcg` (its limit is set to
    THRASH_LIMIT_BYTES) and in the cgroups `also_in` (e.g. a v2 group, to see its memory.pressure) until the
    block ends; the processes are killed afterwards."""
    (memcg / "memory.limit_in_bytes").write_text(str(THRASH_LIMIT_BYTES))
    thrashers: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="evictd-psi-") as folder:  # a disk, not tmpfs
        data = Path(folder) / "thrash.bin"
        with data.open("wb") as out:
            block = b"\x5a" * MiB
            for _ in range(THRASH_FILE_BYTES // MiB):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
            # Drop it from the page cache, so that the thrashers' faults are charged to their cgroup.
            os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        procs = [str(group / "cgroup.procs") for group in (memcg, *also_in)]
        try:
            for _ in range(THRASHERS):
                thrashers.append(subprocess.Popen([sys.executable, "-c", THRASHER, str(data), *procs],
                                                  stdout=subprocess.PIPE, text=True))
            for thrasher in thrashers:
                assert thrasher.stdout is not None
                ready, _, _ = select.select([thrasher.stdout], [], [], REPLY_TIMEOUT_S)
                assert ready and thrasher.stdout.readline() == "ready\n", f"thrasher {thrasher.pid} did not start"
            yield
        finally:
            for thrasher in thrashers:
                thrasher.kill()
                thrasher.wait()
                if thrasher.stdout is not None:
                    thrasher.stdout.close()

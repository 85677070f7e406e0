"""Inside a cgroup v2 guest: `CgroupReader`'s kept descriptors on real v2 cgroups; writes what it saw as JSON.

Run by tests/uml/test_kept_files_v2.py as the guest's work: ``python guest_kept_files.py <out folder>``. Makes
``/sys/fs/cgroup/kept/pod``, reads it through kept descriptors, changes its memory, limit and processes, removes
it, makes it again, and records each reading, error and the descriptors held (from ``/proc/self/fd``) in
``<out>/kept.json``. The host side asserts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from evictd.adapters.cgroups import CgroupLayout, CgroupReader, MemoryReading
from evictd.core.errors import SampleError

ROOT = Path("/sys/fs/cgroup")
BASE = "kept"
POD = f"{BASE}/pod"
MiB = 1 << 20
ALLOC_BYTES = 32 * MiB
HOG = "import sys\nb = bytearray(int(sys.argv[1]))\nb[::4096] = b'\\x01' * len(b[::4096])\nprint('ok', flush=True)\nsys.stdin.read()\n"


def held(cgroup: str) -> dict[str, int]:
    """Files of `cgroup` this process holds a descriptor on -> their inode through that descriptor."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
            inode = os.fstat(int(name)).st_ino
        except OSError:
            continue
        if target.startswith(f"{ROOT}/{cgroup}/"):
            found[target.rsplit("/", 1)[1].removesuffix(" (deleted)")] = inode
    return found


def hog(cgroup: str) -> subprocess.Popen[str]:
    """A process in `cgroup` holding ALLOC_BYTES of anonymous memory until its stdin closes."""
    child = subprocess.Popen([sys.executable, "-c", HOG, str(ALLOC_BYTES)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    (ROOT / cgroup / "cgroup.procs").write_text(f"{child.pid}\n")
    assert child.stdout is not None and child.stdout.readline() == "ok\n"
    return child


def stop(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    child.wait()


def reading(value: MemoryReading) -> dict[str, Any]:
    return {"usage": value.usage_bytes, "working_set": value.working_set_bytes, "limit": value.limit_bytes}


def failure(read: Any) -> list[str] | None:
    try:
        read()
    except SampleError as exc:
        return [exc.source, exc.reason]
    return None


def main(out: Path) -> None:
    seen: dict[str, Any] = {}
    (ROOT / BASE).mkdir()
    (ROOT / BASE / "cgroup.subtree_control").write_text("+memory +pids\n")
    (ROOT / POD).mkdir()
    layout = CgroupLayout(version=2, root=ROOT, base=BASE)
    reader = CgroupReader(layout)
    seen["before"] = reading(reader.memory(POD)) | {"tasks": reader.process_count(POD)}
    seen["held_before"] = held(POD)
    child = hog(POD)
    (ROOT / POD / "memory.max").write_text(f"{256 * MiB}\n")
    seen["after"] = reading(reader.memory(POD)) | {"tasks": reader.process_count(POD)}
    seen["held_after"] = held(POD)
    stop(child)
    reader.end_cycle()
    (ROOT / POD).rmdir()
    seen["removed_kept"] = failure(lambda: reader.memory(POD))
    seen["removed_opened"] = failure(lambda: CgroupReader(layout, kept_cap=0).memory(POD))
    reader.end_cycle()
    seen["held_removed"] = held(POD)
    (ROOT / POD).mkdir()
    child = hog(POD)
    seen["recreated"] = reading(reader.memory(POD)) | {"tasks": reader.process_count(POD)}
    seen["held_recreated"] = held(POD)
    seen["inodes_now"] = {name: os.stat(ROOT / POD / name).st_ino for name in seen["held_recreated"]}
    stop(child)
    reader.end_cycle()
    reader.end_cycle()
    seen["held_after_two_idle_cycles"] = held(POD)
    reader.close()
    (ROOT / POD).rmdir()
    (ROOT / BASE).rmdir()
    (out / "kept.json").write_text(json.dumps(seen, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

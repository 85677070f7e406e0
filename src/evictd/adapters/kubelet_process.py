"""The running kubelet, seen through procfs: which process it is, its command line, and its files as it sees them.

The kubelet is the process whose name (`comm`) or program (`argv[0]`'s last part) is `kubelet`; the DaemonSet sees
the host's processes (hostPID), the systemd unit sees them all. Its command line is `/proc/<pid>/cmdline`, its
arguments separated by NUL bytes. A path on it is the kubelet's: in a container the same file is reached through
`/proc/<pid>/root` (a relative one through `/proc/<pid>/cwd`) when the kernel lets evictd in (ptrace access, as
root with CAP_SYS_PTRACE), else as the path says.

Invariants: every function takes `root` (`/proc`) so tests point it at a folder of their own; a process that
vanishes or cannot be read while the folder is scanned is skipped; reads only; `read_cmdline` raises SampleError.
"""

from __future__ import annotations

import os

from evictd.core.errors import SampleError, os_error_reason

PROC = "/proc"
KUBELET_NAME = "kubelet"
# A command line is a few KiB; past this it is not read (the kernel allows a few MiB of arguments).
MAX_CMDLINE_BYTES = 1 << 20
# `comm` is at most 16 bytes.
MAX_COMM_BYTES = 64


def _read_bytes(path: str, limit: int) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(limit + 1)


def read_cmdline(pid: int, root: str = PROC) -> tuple[str, ...]:
    """Return the arguments of process `pid` (its program first). Raises SampleError when the process is gone, has
    no command line (a kernel thread, a zombie) or has one past MAX_CMDLINE_BYTES."""
    path = os.path.join(root, str(pid), "cmdline")
    try:
        raw = _read_bytes(path, MAX_CMDLINE_BYTES)
    except OSError as exc:
        raise SampleError(path, os_error_reason(exc)) from None
    if len(raw) > MAX_CMDLINE_BYTES:
        raise SampleError(path, f"a command line longer than {MAX_CMDLINE_BYTES >> 20} MiB")
    if not raw:
        raise SampleError(path, "no command line (a kernel thread or a process that has ended)")
    body = raw[:-1] if raw.endswith(b"\0") else raw  # each argument ends with a NUL; an empty one is kept
    return tuple(part.decode("utf-8", "surrogateescape") for part in body.split(b"\0"))


def _is_kubelet(entry: str) -> bool:
    """True for the process folder `entry` whose name or program is the kubelet; False if it cannot be read."""
    try:
        if _read_bytes(os.path.join(entry, "comm"), MAX_COMM_BYTES).strip() == KUBELET_NAME.encode():
            return True
        program = _read_bytes(os.path.join(entry, "cmdline"), MAX_CMDLINE_BYTES).split(b"\0", 1)[0]
    except OSError:
        return False  # gone meanwhile, or not ours to read
    return program.rsplit(b"/", 1)[-1] == KUBELET_NAME.encode()


def kubelet_pids(root: str = PROC) -> list[int]:
    """Return the PIDs of the processes named `kubelet` under `root`, in order. Raises SampleError when `root`
    itself cannot be read."""
    try:
        entries = [entry.name for entry in os.scandir(root) if entry.name.isdigit()]
    except OSError as exc:
        raise SampleError(root, os_error_reason(exc)) from None
    return sorted(int(name) for name in entries if _is_kubelet(os.path.join(root, name)))


def path_as_process_sees_it(pid: int, path: str, root: str = PROC) -> str:
    """Return where evictd reads the file or folder `path` of process `pid`: through `<root>/<pid>/root` (or `cwd`
    for a relative path) when that reaches it, else `path` itself."""
    inside = (os.path.join(root, str(pid), "root") + path if os.path.isabs(path)
              else os.path.join(root, str(pid), "cwd", path))
    return inside if os.path.exists(inside) else path

"""Boots a user-mode Linux guest, a real cgroup v2 kernel run as an ordinary process, for the v2 tier.

These machines are cgroup v1 hybrid; inside the guest cgroup v2 is real (memory.current, memory.events with
real OOM kills, pids.current). The guest's root is this machine's / through hostfs, so the checkout, its
.venv and the interpreter run unchanged inside it. A test hands `boot_guest` the body of a shell script: it
becomes the guest's PID 1 after tests/uml/guest-prelude.sh, which keeps the host's files read-only to the
guest and lets it write only to the folder it was given (`out`). The test then reads what the guest wrote.

The kernel is the one tests/uml/provision-uml.sh prepared (run by `make test`): without it the tier fails,
it never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UML_CACHE = Path(os.environ.get("EVICTD_UML_CACHE", "/var/tmp/evictd-uml"))
REPO = Path(__file__).resolve().parents[2]
PRELUDE = Path(__file__).with_name("guest-prelude.sh")
# A guest's memory: evictd, a test API server and workloads fit in 768 MiB with room for pressure trials.
DEFAULT_MEM_MIB = 768
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class GuestRun:
    """What one guest boot left: its exit, its console, and the folder it wrote."""

    returncode: int
    console: str
    out: Path
    elapsed_s: float

    def text(self, name: str) -> str:
        """The guest-written file `name`, failing with the console's tail when the guest did not write it."""
        path = self.out / name
        if not path.exists():
            raise AssertionError(f"the guest wrote no {name}; console tail:\n{self.console[-4000:]}")
        return path.read_text(encoding="utf-8", errors="replace")

    def json(self, name: str) -> Any:
        return json.loads(self.text(name))


def uml_kernel() -> tuple[Path, Path]:
    """The kernel binary and its module folder, as provision-uml.sh left them; AssertionError when absent."""
    kernel, modules = UML_CACHE / "linux.uml", UML_CACHE / "modules"
    if not (kernel.exists() and modules.is_dir()):
        raise AssertionError(
            f"no user-mode Linux kernel at {kernel}: the cgroup v2 tier needs one; "
            f"run `make test` (or tests/uml/provision-uml.sh) to install it"
        )
    return kernel, modules


def boot_guest(
    body: str,
    out: Path,
    *,
    mem_mib: int = DEFAULT_MEM_MIB,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> GuestRun:
    """Boots a guest whose init runs `body` after the prelude; returns once it halted (or `timeout_s` passed).

    `env` reaches the init as environment variables through the kernel command line, so its values may hold
    no white space. The guest sees EVICTD_PYTHON (this interpreter, with evictd installed) and EVICTD_REPO.
    """
    kernel, modules = uml_kernel()
    out.mkdir(parents=True, exist_ok=True)
    init = out / "init.sh"
    init.write_text(f"#!/bin/sh\n. {PRELUDE}\n{body}\n", encoding="utf-8")
    init.chmod(0o755)
    words = {
        "UML_OUT": str(out),
        "UML_MODULES": str(modules.resolve()),
        "EVICTD_REPO": str(REPO),
        "EVICTD_PYTHON": sys.executable,
        **(env or {}),
    }
    for key, value in words.items():
        if not value or any(c.isspace() for c in value):
            raise ValueError(f"guest environment {key}={value!r}: the kernel command line needs one word")
    scratch = Path(tempfile.mkdtemp(prefix="evictd-uml-"))
    argv = [
        str(kernel), f"mem={mem_mib}M", f"uml_dir={scratch}", "root=/dev/root", "rootfstype=hostfs",
        "rootflags=/", "rw", f"init={init}", "con0=fd:0,fd:1", "con=null", "cgroup_no_v1=all",
        *(f"{key}={value}" for key, value in words.items()),
    ]
    console_path = out / "console.log"
    started = time.monotonic()
    with open(console_path, "wb") as console:
        # A session of its own: the kernel runs as several host processes, all ended together on a time-out.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            returncode = -signal.SIGKILL
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started
    console_text = console_path.read_text(encoding="utf-8", errors="replace")
    if returncode == -signal.SIGKILL:
        raise AssertionError(f"the guest did not halt within {timeout_s:.0f} s; console tail:\n{console_text[-4000:]}")
    return GuestRun(returncode, console_text, out, elapsed)

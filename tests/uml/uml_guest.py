"""Boots a user-mode Linux guest, a real cgroup v2 kernel run as an ordinary process, for the v2 tier.

These machines are cgroup v1 hybrid; inside the guest cgroup v2 is real (memory.current, memory.events with
real OOM kills, pids.current). The guest's root is this machine's / through hostfs, so the checkout, its
.venv and the interpreter run unchanged inside it. A test hands `boot_guest` the body of a shell script: it
becomes the guest's PID 1 after tests/uml/guest-prelude.sh, which keeps the host's files read-only to the
guest and lets it write only to the folder it was given (`out`). The test then reads what the guest wrote.
`boot_systemd_guest` boots one whose PID 1 is systemd instead, for units under a real service manager.

The kernel is the one tests/uml/provision-uml.sh prepared (run by `make test`): without it the tier fails,
it never skips. That kernel (Debian's) has no PSI; `kernel="psi"` (or EVICTD_UML_KERNEL=psi for every boot
that names no kernel) boots the one tests/uml/provision-uml-psi.sh built (`make uml-kernel-psi`, not part of
`make test`): /proc/pressure and each cgroup's memory.pressure and memory.reclaim. Without it such a boot
fails too.
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
from typing import Any, Literal

UML_CACHE = Path(os.environ.get("EVICTD_UML_CACHE", "/var/tmp/evictd-uml"))
# The kernel with PSI (provision-uml-psi.sh's default cache folder, below the default kernel's).
UML_PSI_CACHE = Path(os.environ.get("EVICTD_UML_PSI_CACHE", str(UML_CACHE / "psi")))
# Which kernel a boot that names none gets: "default" (provision-uml.sh's) or "psi".
KERNEL_ENV = "EVICTD_UML_KERNEL"
Kernel = Literal["default", "psi"]
KERNELS: tuple[Kernel, ...] = ("default", "psi")
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


def uml_kernel(kernel: Kernel | None = None) -> tuple[Path, Path]:
    """The kernel binary and its module folder: `kernel` ("default" or "psi"; None: EVICTD_UML_KERNEL, else
    "default"), as its provisioning script left them; AssertionError when absent."""
    name = kernel or os.environ.get(KERNEL_ENV) or "default"
    if name not in KERNELS:
        raise ValueError(f"user-mode Linux kernel {name!r} (from {KERNEL_ENV}?): one of {', '.join(KERNELS)}")
    if name == "psi":
        return psi_kernel()
    binary, modules = UML_CACHE / "linux.uml", UML_CACHE / "modules"
    if not (binary.exists() and modules.is_dir()):
        raise AssertionError(
            f"no user-mode Linux kernel at {binary}: the cgroup v2 tier needs one; "
            f"run `make test` (or tests/uml/provision-uml.sh) to install it"
        )
    return binary, modules


def psi_kernel() -> tuple[Path, Path]:
    """The kernel with PSI and its module folder, as provision-uml-psi.sh left them; AssertionError when absent."""
    binary, modules = UML_PSI_CACHE / "linux.uml", UML_PSI_CACHE / "modules"
    if not (binary.exists() and modules.is_dir()):
        raise AssertionError(
            f"no user-mode Linux kernel with PSI at {binary}: this guest needs one (Debian's has no PSI); "
            f"run `make uml-kernel-psi` (tests/uml/provision-uml-psi.sh, a build of 30-90 minutes) to build it"
        )
    return binary, modules


def finished_run(out: Path, returncode: int, elapsed_s: float, timeout_s: float) -> GuestRun:
    """What a boot that wrote its console to `out`/console.log left; AssertionError with the console's tail when
    it was killed at its time-out (`returncode` -SIGKILL)."""
    console_text = (out / "console.log").read_text(encoding="utf-8", errors="replace")
    if returncode == -signal.SIGKILL:
        raise AssertionError(f"the guest did not halt within {timeout_s:.0f} s; console tail:\n{console_text[-4000:]}")
    return GuestRun(returncode, console_text, out, elapsed_s)


def make_disk(disk: Path, disk_mib: int) -> None:
    """A fresh ext4 file system of `disk_mib` MiB in the sparse file `disk` (a guest's own disk)."""
    disk.unlink(missing_ok=True)
    with open(disk, "wb") as image:
        image.truncate(disk_mib << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(disk)], check=True, capture_output=True)


def write_init(out: Path, body: str) -> Path:
    """The guest's init, `out`/init.sh: the prelude, then `body`."""
    init = out / "init.sh"
    init.write_text(f"#!/bin/sh\n. {PRELUDE}\n{body}\n", encoding="utf-8")
    init.chmod(0o755)
    return init


def guest_words(out: Path, modules: Path, env: dict[str, str] | None) -> dict[str, str]:
    """What the guest's init gets as environment through the kernel command line: the prelude's words (UML_OUT,
    UML_MODULES, EVICTD_REPO, EVICTD_PYTHON) and `env`; ValueError for a value that is not one word."""
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
    return words


def boot_guest(
    body: str,
    out: Path,
    *,
    mem_mib: int = DEFAULT_MEM_MIB,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: dict[str, str] | None = None,
    kernel: Kernel | None = None,
    disk_mib: int = 0,
) -> GuestRun:
    """Boots a guest whose init runs `body` after the prelude; returns once it halted (or `timeout_s` passed).

    `env` reaches the init as environment variables through the kernel command line, so its values may hold
    no white space. The guest sees EVICTD_PYTHON (this interpreter, with evictd installed) and EVICTD_REPO.
    `kernel` chooses the kernel (`uml_kernel`): "psi" for one with PSI. `disk_mib` gives the guest a disk of
    its own: a fresh ext4 of that size (a sparse file in `out`, removed after the boot) on the guest's
    /dev/ubda, mounted by the prelude at $UML_DISK_MOUNT (/run/disk). Files read through the hostfs root leave
    no page cache in the guest; files on this disk do, and filling it fills no host disk beyond the image.
    """
    binary, modules = uml_kernel(kernel)
    out.mkdir(parents=True, exist_ok=True)
    disk = out / "disk.img"
    disk_words: list[str] = []
    if disk_mib:
        make_disk(disk, disk_mib)
        disk_words = [f"ubd0={disk}"]
        env = {**(env or {}), "UML_DISK": "/dev/ubda"}
    init = write_init(out, body)
    words = guest_words(out, modules, env)
    scratch = Path(tempfile.mkdtemp(prefix="evictd-uml-"))
    argv = [
        str(binary), f"mem={mem_mib}M", f"uml_dir={scratch}", "root=/dev/root", "rootfstype=hostfs",
        "rootflags=/", "rw", f"init={init}", "con0=fd:0,fd:1", "con=null", "cgroup_no_v1=all", *disk_words,
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
            if disk_mib:
                disk.unlink(missing_ok=True)
    return finished_run(out, returncode, time.monotonic() - started, timeout_s)



# A systemd guest's machine: a private writable /etc (a copy of the host's, with no unit of the host's enabled)
# and /var/lib. systemd loads units only from /etc/systemd/system and /run/systemd/system, so that a unit's
# default dependencies (sysinit.target, basic.target: empty here) do not pull in the host's boot units (one of
# them, systemd-remount-fs, would try to remount the root file system read-write). The journal runs, so that
# `journalctl` works. multi-user.target, the one target started, holds the probe.
SYSTEMD_GUEST = """
mkdir -p /run/guest-etc
mount -t tmpfs -o mode=0755 tmpfs /run/guest-etc
cp -a /etc/. /run/guest-etc/
mount --bind /run/guest-etc /etc
umount /run/guest-etc
rm -rf /etc/systemd/system/*
mount -t tmpfs -o mode=0755 tmpfs /var/lib
# A writable /tmp and /var/tmp, as on a real machine: PrivateTmp= and PrivateDevices= make their folders
# there (on the read-only host /tmp a sandboxed unit fails with 226/NAMESPACE). $UML_OUT may be below /tmp: it
# is moved aside first, then mounted back inside the new /tmp. So are the checkout, the interpreter's venv
# and the interpreter itself when they live there (a checkout under /tmp): each is bind-mounted aside,
# read-only like the rest of the host, and back at its own path, so that $EVICTD_REPO and $EVICTD_PYTHON
# still work. The new /var/tmp hides the kernel's modules.
mkdir -p /run/guest-out
mount --move "$UML_OUT" /run/guest-out
kept=""
venv=${EVICTD_PYTHON%/bin/*}
interpreter=$(readlink -f "$EVICTD_PYTHON"); interpreter=${interpreter%/bin/*}
for path in "$EVICTD_REPO" "$venv" "$interpreter"; do
  case "$path" in /tmp/*|/var/tmp/*) ;; *) continue;; esac
  inside=""
  for pair in $kept; do case "$path/" in "${pair#*:}"/*) inside=yes;; esac; done
  [ -z "$inside" ] && [ -d "$path" ] || continue
  n=$(( $(echo $kept | wc -w) + 1 ))
  mkdir -p "/run/guest-keep/$n"
  mount --bind "$path" "/run/guest-keep/$n" && mount -o remount,bind,ro "/run/guest-keep/$n"
  kept="$kept $n:$path"
done
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
mkdir -p "$UML_OUT"
mount --move /run/guest-out "$UML_OUT"
: > "$UML_OUT/kept-paths"
for pair in $kept; do
  mkdir -p "${pair#*:}"
  mount --move "/run/guest-keep/${pair%%:*}" "${pair#*:}"
  # One line a kept path: the path, then "read-only" (the host's files stay the host's) or "WRITABLE".
  touch "${pair#*:}/.guest-write-probe" 2>/dev/null && state=WRITABLE || state=read-only
  echo "${pair#*:} $state" >> "$UML_OUT/kept-paths"
done
# What the setup and the probe stand on: without it they would fail one by one, slowly; fail at once instead.
if ! "$EVICTD_PYTHON" -c 'import evictd' 2> "$UML_OUT/guest-python-error"; then
  echo "the guest cannot run $EVICTD_PYTHON with evictd (see guest-python-error)" > "$UML_OUT/probe.log"
  echo 1 > "$UML_OUT/probe-exit"
  exit 1
fi
mkdir -p /run/systemd/system
for unit in systemd-journald.service systemd-journald.socket systemd-journald-dev-log.socket \\
    systemd-journald-audit.socket; do
  ln -s "/lib/systemd/system/$unit" "/run/systemd/system/$unit"
done
for target in sysinit.target basic.target shutdown.target network-online.target; do
  printf '[Unit]\\nDescription=%s (empty in the test guest)\\n' "$target" > "/run/systemd/system/$target"
done
cat > /run/systemd/system/multi-user.target <<UNIT
[Unit]
Description=the test guest's target: the journal, then the probe
Wants=systemd-journald.service guest-probe.service
UNIT
cat > /run/systemd/system/guest-probe.service <<UNIT
[Unit]
DefaultDependencies=no
After=systemd-journald.service
[Service]
Type=oneshot
TimeoutStartSec=infinity
Environment=UML_OUT=$UML_OUT EVICTD_REPO=$EVICTD_REPO EVICTD_PYTHON=$EVICTD_PYTHON PATH=$PATH
ExecStart=/bin/sh -c '/bin/sh $UML_OUT/probe.sh > $UML_OUT/probe.log 2>&1; echo \\$\\$? > $UML_OUT/probe-exit; \\
  systemctl halt --force --force'
UNIT
"""


def boot_systemd_guest(
    setup: str,
    probe: str,
    out: Path,
    *,
    mem_mib: int = DEFAULT_MEM_MIB,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: dict[str, str] | None = None,
    kernel: Kernel | None = None,
) -> GuestRun:
    """Boots a guest whose PID 1 is systemd 252 (SYSTEMD_GUEST says what machine it gets).

    `setup` runs first, as root in the guest before systemd starts: it installs files (a unit into
    /etc/systemd/system, its configuration). Then systemd runs the probe, a shell body, as a oneshot service
    (root, outside any sandbox) once the journal is up; it drives the units with systemctl like an operator.
    Its output goes to `out`/probe.log, its exit status to `out`/probe-exit, and its end halts the guest.
    systemd's own log is the console (`GuestRun.console`).
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.sh").write_text(probe, encoding="utf-8")
    body = (
        SYSTEMD_GUEST
        + setup
        + "\nexport SYSTEMD_UNIT_PATH=/etc/systemd/system:/run/systemd/system\n"
        + "exec /lib/systemd/systemd --unit=multi-user.target --log-target=console --show-status=no\n"
    )
    return boot_guest(body, out, mem_mib=mem_mib, timeout_s=timeout_s, env=env, kernel=kernel)

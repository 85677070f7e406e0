"""Boots a guest on qemu: a multi-CPU, preemptible cgroup v2 node, where user-mode Linux gives one CPU and no preemption.

The guest runs Debian's stock amd64 kernel (6.1: PREEMPT_DYNAMIC, PSI, cgroup v2) under qemu-system-x86_64 with
QEMU's own multi-threaded emulator (TCG), `cpus` vCPUs. These machines' /dev/kvm is paravirtual (kvm_pvm), which
runs only kernels built as PVM guests, so no hardware acceleration is used: guest CPU work is about 10-16x slower
than on the host (docs/node-survival.md), while memory, page cache, PSI and the scheduler are a real kernel's.

`boot_guest` has tests/uml/uml_guest.py's signature and GuestRun, and runs the same init (guest-prelude.sh, then
the body), so the arena runs unchanged on either (bench/node_survival.py --vm qemu). The guest's root is this
machine's / over virtio-9p, read-only at qemu's level (the fsdev's readonly=on: nothing the guest does can write
the host's files); `out` is a second share, read-write, at the same path; `disk_mib` gives it an ext4 disk of
its own at /dev/vda. tests/qemu/provision-qemu.sh (`make qemu-node`) installs qemu and unpacks the kernel; without
them a boot fails, it never skips.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from uml_guest import GuestRun, finished_run, guest_words, make_disk, write_init

QEMU_CACHE = Path(os.environ.get("EVICTD_QEMU_CACHE", "/var/tmp/evictd-qemu"))
DEFAULT_CPUS = 2
DEFAULT_MEM_MIB = 768
# halt(2), the prelude's way to end a guest, parks the vCPUs but leaves qemu running: its console line ends qemu.
HALTED = b"reboot: System halted"
# How much of the console's end is searched for that line, and how often.
CONSOLE_TAIL_BYTES = 4096
POLL_S = 0.2


def qemu_node() -> tuple[Path, Path, Path]:
    """The kernel, its module folder and the initramfs, as provision-qemu.sh left them; AssertionError when absent."""
    kernel, modules, initramfs = QEMU_CACHE / "vmlinuz", QEMU_CACHE / "modules", QEMU_CACHE / "initramfs.cpio.gz"
    if not (kernel.exists() and modules.is_dir() and initramfs.exists()):
        raise AssertionError(f"no qemu guest kernel at {kernel} (with {modules.name} and {initramfs.name}): "
                             "run `make qemu-node` (tests/qemu/provision-qemu.sh) to install qemu and unpack it")
    return kernel, modules, initramfs


def boot_guest(body: str, out: Path, *, mem_mib: int = DEFAULT_MEM_MIB, timeout_s: float = 300.0,
               env: dict[str, str] | None = None, kernel: str | None = None, disk_mib: int = 0,
               cpus: int = DEFAULT_CPUS, psi: bool = True) -> GuestRun:
    """uml_guest.boot_guest on qemu: boots a guest whose init runs `body` after the prelude and returns once it
    halted (or `timeout_s` passed: AssertionError). `kernel` is ignored: there is one kernel, with PSI, which `psi`
    False turns off at boot (``psi=0``: a multi-CPU node without PSI).
    `out` may not be under /run, which the guest covers with tmpfs."""
    binary, modules, initramfs = qemu_node()
    out = out.resolve()
    if str(out).startswith("/run/"):
        raise ValueError(f"{out}: the guest covers /run with tmpfs; give a folder elsewhere")
    out.mkdir(parents=True, exist_ok=True)
    disk = out / "disk.img"
    drive: list[str] = []
    if disk_mib:
        make_disk(disk, disk_mib)
        # cache=none: the guest's page cache is the only one in play, none of the host's under the disk.
        drive = ["-drive", f"file={disk},format=raw,if=virtio,cache=none,aio=threads"]
        env = {**(env or {}), "UML_DISK": "/dev/vda"}
    init = write_init(out, body)
    words = guest_words(out, modules, {**(env or {}), "QEMU_INIT": str(init)})
    append = " ".join(["console=ttyS0", "panic=-1", f"psi={int(psi)}", "cgroup_no_v1=all", "quiet",
                       *(f"{key}={value}" for key, value in words.items())])
    argv = ["qemu-system-x86_64", "-accel", "tcg,thread=multi,tb-size=256", "-cpu", "max", "-smp", str(cpus),
            "-m", str(mem_mib), "-nographic", "-no-reboot", "-nic", "none",
            "-kernel", str(binary), "-initrd", str(initramfs), "-append", append,
            "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-fsdev", f"local,id=out,path={out},security_model=none,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=out,mount_tag=out", *drive]
    console_path = out / "console.log"
    started = time.monotonic()
    returncode: int
    with open(console_path, "wb") as console:
        # A session of its own: qemu and its threads ended together on a time-out.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            while True:
                polled = proc.poll()
                if polled is not None:
                    returncode = polled
                    break
                if time.monotonic() - started > timeout_s:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    returncode = -signal.SIGKILL
                    break
                if HALTED in _tail(console_path):
                    proc.terminate()
                    proc.wait()
                    returncode = 0
                    break
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if disk_mib:
                disk.unlink(missing_ok=True)
    return finished_run(out, returncode, time.monotonic() - started, timeout_s)


def _tail(path: Path) -> bytes:
    with open(path, "rb") as console:
        console.seek(max(0, console.seek(0, os.SEEK_END) - CONSOLE_TAIL_BYTES))
        return console.read()

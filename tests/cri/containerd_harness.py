"""A private, real containerd for tests: images without a registry, real host-network pods, full teardown.

Job: start containerd 1.6 (Debian's, with its built-in CRI plugin) in a temporary folder, give it images
built locally from busybox-static, run real pods through the CRI the way the kubelet does, and afterwards
leave nothing behind (processes, mounts, cgroups, files).

Used through the fixtures of cri_fixtures.py (a plugin registered for the whole suite by tests/conftest.py:
the session-wide ``containerd`` fixture, the per-test ``pods`` fixture and ``containerd_on_ext4``), so any
test folder can have a real runtime; or import this module directly (it does not depend on pytest; its
failures are ``HarnessError``)::

    with Containerd(base) as runtime:           # start() on enter, stop() (full teardown) on exit
        runtime.import_standard_images()        # the pause image (sandbox_image) and busybox
        pod = runtime.run_pod("web", [busybox_container("app", "sleep 3600")])
        runtime.cri.list_container_stats()      # a CriClient on this runtime
        runtime.remove_pod(pod)

Layout under ``base`` (a short path: Unix socket paths are limited to 107 bytes)::

    config.toml  containerd.log  containerd.sock  containerd.sock.ttrpc
    root/   (or the ``root`` argument)   state/   opt/   runc/   cni/bin  cni/conf   images/   logs/

Choices and why:

* Snapshotter ``overlayfs`` (the default on real nodes): writable layers are upper directories, so a
  container's writes show up as its writable-layer usage and images share their busybox layer. The
  ``native`` snapshotter (full copies) also works (``snapshotter="native"``); ``ctr import`` is told to
  unpack into whichever the CRI uses.
* ``stats_collect_period = 1``: ImageFsInfo usage is refreshed every second (it is empty before the
  first refresh). ``restrict_oom_score_adj = true``: root here lacks CAP_SYS_RESOURCE, so runc could not
  set the negative/low scores pods ask for. runc uses the cgroupfs driver (``SystemdCgroup = false``) and
  its own state ``Root``; CNI folders are empty (pods use the host network, so CNI is never called).
  ``network_ready=True`` (for a real kubelet, which calls its node Ready only when the runtime reports
  NetworkReady) writes one CNI conflist the CRI loads but never calls; no CNI plugin binary is needed.
  ``cni=(plugin folder, conflist)`` gives pods off the host network a real one (the real cluster's bridge).
* Pods run under a test cgroup root ``/evictd-test-<random>`` (``cgroup_parent`` =
  ``/evictd-test-<random>/kubepods/<qos>/pod<uid>``); containerd never removes pod cgroup folders, so
  ``remove_pod`` and ``stop`` remove them bottom-up in every hierarchy.

Teardown (``stop``; also run when ``start`` fails half-way) never raises on a missing piece: it removes
every sandbox through the CRI, stops containerd by its PID (SIGTERM, then SIGKILL), kills by PID any shim
still serving this containerd's address and any process left in the test cgroups, lazily unmounts what
is left under the folders it used (sandbox shm, container rootfs), removes the test cgroups bottom-up,
the shim sockets of its sandboxes and the base folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from harness_cri import ContainerSpec, HarnessCriClient, PodSandboxSpec

from evictd.core.errors import CRIError
from evictd.core.runtime import SandboxState
from polling import wait_until

BUSYBOX_BINARY = Path("/bin/busybox")
CONTAINERD_BINARY = "containerd"
CTR_BINARY = "ctr"
K8S_NAMESPACE = "k8s.io"  # the containerd namespace the CRI plugin uses; imports must go there

# Image references. A first component with a dot is a registry domain, so containerd keeps them as is.
PAUSE_IMAGE = "evictd.test/pause:1"
BUSYBOX_IMAGE = "evictd.test/busybox:1"
BIG_IMAGE_REPOSITORY = "evictd.test/big"
# The pause process: sleeps for the largest 32-bit number of seconds, i.e. until the sandbox is stopped.
PAUSE_ENTRYPOINT = ("/bin/sleep", "2147483647")
IMAGE_PATH_ENV = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

DEFAULT_SNAPSHOTTER = "overlayfs"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
CRI_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05
# containerd 1.6 puts shim sockets here whatever its own folders are (runtime/v2/shim/util_unix.go).
SHIM_SOCKET_DIR = Path("/run/containerd/s")
CGROUP_MOUNT_TYPES = ("cgroup", "cgroup2")
MiB = 1024 * 1024
_COPY_CHUNK_BYTES = MiB
LOG_TAIL_CHARS = 4000

# A network configuration the CRI loads (so it reports NetworkReady) and never uses: pods use the host network.
CNI_CONFLIST_NAME = "10-pods.conflist"
UNUSED_CNI_CONFLIST = '{"cniVersion": "0.4.0", "name": "unused", "plugins": [{"type": "loopback"}]}\n'

T = TypeVar("T")


class HarnessError(Exception):
    """The harness could not do what was asked (containerd would not start, an import failed, ...)."""


# --- images ---------------------------------------------------------------------------------------------


class _ZeroReader:
    """A file-like object yielding ``size`` zero bytes, so big layers are streamed, not held in memory."""

    def __init__(self, size: int) -> None:
        self._left = size

    def read(self, size: int = -1) -> bytes:
        count = self._left if size < 0 else min(size, self._left)
        self._left -= count
        return bytes(count)


def _tar_info(name: str, kind: bytes, mode: int, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.linkname = linkname
    info.mtime = 0  # fixed, so the same content always gives the same layer digest
    info.uname = info.gname = "root"
    return info


def busybox_applets() -> list[str]:
    """Return the applet names of the installed busybox-static (``busybox --list``)."""
    done = subprocess.run([str(BUSYBOX_BINARY), "--list"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HarnessError(f"{BUSYBOX_BINARY} --list failed ({done.returncode}): {done.stderr.strip()}")
    return sorted({name for name in done.stdout.split() if name and name != "busybox"})


def write_busybox_layer(path: Path) -> str:
    """Write a layer tar with /bin/busybox, a /bin symlink per applet, /tmp and /etc; return its sha256."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as layer:
        for folder, mode in (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777), ("var", 0o755)):
            layer.addfile(_tar_info(folder, tarfile.DIRTYPE, mode))
        size = BUSYBOX_BINARY.stat().st_size
        with BUSYBOX_BINARY.open("rb") as binary:
            layer.addfile(_tar_info("bin/busybox", tarfile.REGTYPE, 0o755, size), binary)
        for applet in busybox_applets():
            layer.addfile(_tar_info(f"bin/{applet}", tarfile.SYMTYPE, 0o777, linkname="busybox"))
    return _sha256_of(path)


def write_padding_layer(path: Path, size_bytes: int, tag: str) -> str:
    """Write a layer tar holding ``/padding/<tag>`` of ``size_bytes`` zero bytes; return its sha256.

    The tag is part of the content, so two padded images of the same size have different layers.
    """
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as layer:
        layer.addfile(_tar_info("padding", tarfile.DIRTYPE, 0o755))
        layer.addfile(_tar_info(f"padding/{tag}", tarfile.REGTYPE, 0o644, size_bytes), _ZeroReader(size_bytes))
    return _sha256_of(path)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_COPY_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def write_image_archive(
    archive: Path,
    reference: str,
    layers: Sequence[tuple[Path, str]],
    *,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
) -> Path:
    """Write a docker-archive (``docker save`` format) tarball of one image and return its path.

    ``layers`` are ``(layer tar, sha256 hex)`` from ``write_busybox_layer``/``write_padding_layer``,
    lowest first. The archive holds ``manifest.json``, the config JSON (named by its digest) and
    ``<digest>/layer.tar`` per layer: what ``ctr images import`` reads.
    """
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": [IMAGE_PATH_ENV], "Entrypoint": list(entrypoint) or None, "Cmd": list(cmd) or None},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest}" for _, digest in layers]},
        "history": [{"created_by": "evictd test harness"} for _ in layers],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [
        {"Config": config_name, "RepoTags": [reference], "Layers": [f"{digest}/layer.tar" for _, digest in layers]}
    ]
    manifest_bytes = json.dumps(manifest).encode()
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as out:
        for name, data in ((config_name, config_bytes), ("manifest.json", manifest_bytes)):
            out.addfile(_tar_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
        for layer_path, digest in dict.fromkeys(layers):
            out.addfile(_tar_info(digest, tarfile.DIRTYPE, 0o755))
            with layer_path.open("rb") as layer:
                out.addfile(
                    _tar_info(f"{digest}/layer.tar", tarfile.REGTYPE, 0o644, layer_path.stat().st_size), layer
                )
    return archive


# --- containers -----------------------------------------------------------------------------------------


def busybox_container(name: str, script: str, **options: Any) -> ContainerSpec:
    """Return a container running ``sh -c <script>`` in the busybox image (options: ContainerSpec fields)."""
    return ContainerSpec(name=name, image=BUSYBOX_IMAGE, command=("/bin/sh", "-c", script), **options)


# Scripts print READY once their signal handling is in place (see ``Containerd.wait_for_output``). The
# shell is PID 1 of its container, so without a handler it would ignore SIGTERM altogether.
READY = "ready"
# Exits 2 s after SIGTERM (a "graceful" app); ``sleep 1`` in the loop lets the shell run the trap.
GRACEFUL_SCRIPT = f'trap "sleep 2; exit 0" TERM; echo {READY}; while true; do sleep 1; done'
# Ignores SIGTERM: only SIGKILL (after the grace period) ends it.
STUBBORN_SCRIPT = f'trap "" TERM; echo {READY}; while true; do sleep 1; done'
# Exits at once on SIGTERM (within the current ``sleep 1``).
QUICK_EXIT_SCRIPT = f'trap "exit 0" TERM; echo {READY}; while true; do sleep 1; done'
SLEEP_FOREVER_SCRIPT = "while true; do sleep 1; done"


@dataclass
class RunningPod:
    """A pod the harness started: its sandbox spec, sandbox ID, containers by name and cgroup."""

    spec: PodSandboxSpec
    sandbox_id: str
    container_ids: dict[str, str] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return self.spec.uid

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def namespace(self) -> str:
        return self.spec.namespace

    @property
    def cgroup_parent(self) -> str:
        return self.spec.cgroup_parent


# --- host state: mounts, cgroups, processes -----------------------------------------------------------------


def _unescape_mount_path(raw: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    return raw.encode().decode("unicode_escape")


def mounts() -> list[tuple[str, str]]:
    """Return ``(mount point, fs type)`` for every mount this process sees."""
    found: list[tuple[str, str]] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        found.append((_unescape_mount_path(fields[4]), fields[separator + 1]))
    return found


def mounts_under(folder: Path) -> list[str]:
    """Return the mount points strictly inside ``folder``, deepest first."""
    prefix = str(folder).rstrip("/") + "/"
    inside = {point for point, _ in mounts() if point.startswith(prefix)}
    return sorted(inside, key=lambda point: point.count("/"), reverse=True)


def unmount_under(folder: Path) -> list[str]:
    """Lazily unmount everything mounted inside ``folder``; return what was unmounted."""
    done: list[str] = []
    for point in mounts_under(folder):
        result = subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        if result.returncode == 0:
            done.append(point)
    return done


def cgroup_hierarchies() -> list[Path]:
    """Return the mount point of every cgroup hierarchy (v1 controllers, named ones, the v2 tree)."""
    return sorted({Path(point) for point, kind in mounts() if kind in CGROUP_MOUNT_TYPES})


def _pids_in_cgroup_tree(folder: Path) -> set[int]:
    pids: set[int] = set()
    for dirpath, _, _ in os.walk(folder):
        with contextlib.suppress(OSError):
            pids.update(int(pid) for pid in (Path(dirpath) / "cgroup.procs").read_text().split())
    return pids


def kill_cgroup_processes(relative: str) -> set[int]:
    """SIGKILL every process in the cgroup ``relative`` (and below) in any hierarchy; return their PIDs."""
    pids: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        folder = hierarchy / relative.strip("/")
        if folder.is_dir():
            pids |= _pids_in_cgroup_tree(folder)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def remove_cgroup_tree(relative: str, timeout_s: float = STOP_TIMEOUT_S) -> list[Path]:
    """Remove the cgroup ``relative`` and everything below it, bottom-up, in every hierarchy.

    Processes still inside are killed first; a folder whose last process is still exiting is retried
    until ``timeout_s``. Returns the folders that could not be removed (empty on success).
    """
    if not relative.strip("/"):
        raise HarnessError("refusing to remove the root cgroup")
    deadline = time.monotonic() + timeout_s
    left: list[Path] = []
    kill_cgroup_processes(relative)
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / relative.strip("/")
        if not top.is_dir():
            continue
        folders = [Path(dirpath) for dirpath, _, _ in os.walk(top, topdown=False)]
        for folder in folders:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        left.append(folder)
                        break
                    kill_cgroup_processes(str(folder.relative_to(hierarchy)))
                    time.sleep(POLL_INTERVAL_S)
    return left


def _process_args(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def shim_pids(address: str) -> list[int]:
    """Return the PIDs of containerd shims serving the containerd at ``address`` (its ``-address`` argument)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        args = _process_args(int(entry.name))
        if args and "containerd-shim" in Path(args[0]).name and address in args:
            found.append(int(entry.name))
    return found


def shim_socket(address: str, namespace: str, sandbox_id: str) -> Path:
    """Return the shim socket containerd 1.6 uses for a sandbox (sha256 of ``<address>/<ns>/<id>``)."""
    digest = hashlib.sha256(os.path.join(address, namespace, sandbox_id).encode()).hexdigest()
    return SHIM_SOCKET_DIR / digest


# --- containerd -----------------------------------------------------------------------------------------


def _toml_string(value: str | Path) -> str:
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


class Containerd:
    """A private containerd under ``base``; ``root`` (default ``base/root``) holds its images and snapshots.

    Pass a folder on a small filesystem as ``root`` to put the image store (and the writable layers) on
    it; ``network_ready=True`` to have the CRI report NetworkReady (see the module docstring). ``start()`` fails with ``HarnessError`` (after cleaning up) if containerd does not come up.
    """

    def __init__(
        self,
        base: Path,
        *,
        root: Path | None = None,
        snapshotter: str = DEFAULT_SNAPSHOTTER,
        cgroup_root: str | None = None,
        network_ready: bool = False,
        cni: tuple[Path, str] | None = None,
    ) -> None:
        """``cni``: a real pod network, as (the folder of the CNI plugin binaries, the conflist to load)."""
        self.base = base
        self.network_ready = network_ready or cni is not None
        self.cni_bin_dir = cni[0] if cni is not None else base / "cni" / "bin"
        self.cni_conflist = cni[1] if cni is not None else UNUSED_CNI_CONFLIST
        self.root = root if root is not None else base / "root"
        self.state = base / "state"
        self.snapshotter = snapshotter
        self.socket = base / "containerd.sock"
        self.config_path = base / "config.toml"
        self.log_path = base / "containerd.log"
        self.images_dir = base / "images"
        self.logs_dir = base / "logs"
        self.cgroup_root = cgroup_root or f"/evictd-test-{uuid.uuid4().hex[:8]}"
        self.process: subprocess.Popen[bytes] | None = None
        self._cri: HarnessCriClient | None = None
        self._sandbox_ids: set[str] = set()
        self._imported: set[str] = set()
        self._busybox_layer: tuple[Path, str] | None = None

    # -- life cycle --

    @property
    def endpoint(self) -> str:
        """The CRI endpoint, ``unix://<base>/containerd.sock``."""
        return f"unix://{self.socket}"

    @property
    def snapshotter_dir(self) -> Path:
        """The folder ImageFsInfo reports as the image filesystem's mount point."""
        return self.root / f"io.containerd.snapshotter.v1.{self.snapshotter}"

    @property
    def cri(self) -> HarnessCriClient:
        """A CRI client on this containerd (created on first use, closed by ``stop``)."""
        if self._cri is None:
            self._cri = HarnessCriClient(self.endpoint, CRI_TIMEOUT_S)
        return self._cri

    def config_text(self) -> str:
        """Return the config.toml this harness runs containerd with."""
        cri = '[plugins."io.containerd.grpc.v1.cri"]'
        runc = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]'
        return "\n".join(
            [
                "version = 2",
                f"root = {_toml_string(self.root)}",
                f"state = {_toml_string(self.state)}",
                # Plugins that cannot work here (or are not wanted) are left out, to start faster and quieter.
                'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",'
                ' "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",'
                ' "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
                "[grpc]",
                f"  address = {_toml_string(self.socket)}",
                "[ttrpc]",
                f"  address = {_toml_string(str(self.socket) + '.ttrpc')}",
                "[debug]",
                '  level = "info"',
                '[plugins."io.containerd.internal.v1.opt"]',
                f"  path = {_toml_string(self.base / 'opt')}",
                cri,
                f"  sandbox_image = {_toml_string(PAUSE_IMAGE)}",
                "  stats_collect_period = 1",
                "  restrict_oom_score_adj = true",
                "  enable_selinux = false",
                f"{cri[:-1]}.containerd]",
                f"  snapshotter = {_toml_string(self.snapshotter)}",
                '  default_runtime_name = "runc"',
                runc,
                '  runtime_type = "io.containerd.runc.v2"',
                f"{runc[:-1]}.options]",
                "  SystemdCgroup = false",
                f"  Root = {_toml_string(self.base / 'runc')}",
                f"{cri[:-1]}.cni]",
                f"  bin_dir = {_toml_string(self.cni_bin_dir)}",
                f"  conf_dir = {_toml_string(self.base / 'cni' / 'conf')}",
                "",
            ]
        )

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Write the config, start containerd and wait until its CRI answers ``Version``.

        Raises ``HarnessError`` with the end of containerd's log if it exits or does not answer in time;
        everything started so far is torn down first.
        """
        for folder in (self.base, self.root, self.state, self.base / "opt", self.base / "runc",
                       self.base / "cni" / "bin", self.base / "cni" / "conf", self.images_dir, self.logs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text())
        if self.network_ready:
            (self.base / "cni" / "conf" / CNI_CONFLIST_NAME).write_text(self.cni_conflist)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [CONTAINERD_BINARY, "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the test terminal must not kill it before teardown
            )
        try:
            wait_until(self._answers, timeout_s, f"containerd to answer on {self.socket}", interval_s=POLL_INTERVAL_S,
                       error=HarnessError)
        except HarnessError as exc:
            log_tail = self.log_tail()
            self.stop()
            raise HarnessError(f"{exc}\n--- containerd.log (end) ---\n{log_tail}") from None

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise HarnessError(f"containerd exited with status {self.process.returncode}")
        if not self.socket.exists():
            return False
        try:
            self.cri.version()
        except CRIError:
            return False
        return True

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        """Return the end of containerd's log (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no log: {exc})"

    def stop(self) -> list[str]:
        """Tear everything down (see the module docstring); return a list of what could not be cleaned.

        Safe to call more than once and after a failed ``start``.
        """
        problems: list[str] = []
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(CRIError, HarnessError):
                self.remove_all_pods()
        if self._cri is not None:
            self._cri.close()
            self._cri = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(STOP_TIMEOUT_S)
            self.process = None
        for pid in shim_pids(str(self.socket)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for folder in {self.base, self.root, self.state}:
            unmount_under(folder)
        left = remove_cgroup_tree(self.cgroup_root)
        problems += [f"cgroup not removed: {folder}" for folder in left]
        for sandbox_id in self._sandbox_ids:
            with contextlib.suppress(FileNotFoundError):
                shim_socket(str(self.socket), K8S_NAMESPACE, sandbox_id).unlink()
        self._sandbox_ids.clear()
        for folder in {self.base, self.root, self.state}:
            still = mounts_under(folder)
            if still:
                problems.append(f"still mounted under {folder}: {still}")
        if not problems:
            shutil.rmtree(self.base, ignore_errors=True)
            if self.root.exists() and not self.root.is_relative_to(self.base):
                # A caller-provided root (e.g. a loop mount): empty it but leave the folder to its owner.
                shutil.rmtree(self.root, ignore_errors=True)
        return problems

    def __enter__(self) -> Containerd:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        problems = self.stop()
        if problems and exc is None:
            raise HarnessError("teardown incomplete: " + "; ".join(problems))

    # -- images --

    def ctr(self, *args: str, timeout_s: float = 120.0) -> str:
        """Run ``ctr --address <socket> -n k8s.io <args>``; return stdout or raise ``HarnessError``."""
        argv = [CTR_BINARY, "--address", str(self.socket), "-n", K8S_NAMESPACE, *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise HarnessError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def import_archive(self, archive: Path) -> None:
        """Import a docker-archive tarball into the CRI's namespace, unpacked for the CRI's snapshotter."""
        self.ctr("images", "import", "--snapshotter", self.snapshotter, str(archive))

    def busybox_layer(self) -> tuple[Path, str]:
        """Return the busybox layer tar (built once per harness) and its sha256."""
        if self._busybox_layer is None:
            path = self.images_dir / "busybox-layer.tar"
            self._busybox_layer = (path, write_busybox_layer(path))
        return self._busybox_layer

    def import_image(
        self, reference: str, *, entrypoint: Sequence[str] = (), cmd: Sequence[str] = (), padding_bytes: int = 0
    ) -> str:
        """Build and import a busybox-based image (plus a zero-filled layer of ``padding_bytes``); return its reference."""
        layers = [self.busybox_layer()]
        safe = reference.replace("/", "_").replace(":", "_")
        if padding_bytes:
            pad_path = self.images_dir / f"{safe}-padding.tar"
            layers.append((pad_path, write_padding_layer(pad_path, padding_bytes, safe)))
        archive = write_image_archive(
            self.images_dir / f"{safe}.tar", reference, layers, entrypoint=entrypoint, cmd=cmd
        )
        self.import_archive(archive)
        # The archives are only a way in: drop the big ones so they do not fill the test's disk.
        archive.unlink()
        for path, _ in layers[1:]:
            path.unlink()
        self._imported.add(reference)
        return reference

    def import_standard_images(self) -> None:
        """Import the pause image (the CRI's ``sandbox_image``) and the busybox image, once."""
        if PAUSE_IMAGE not in self._imported:
            self.import_image(PAUSE_IMAGE, entrypoint=PAUSE_ENTRYPOINT)
        if BUSYBOX_IMAGE not in self._imported:
            self.import_image(BUSYBOX_IMAGE, cmd=("/bin/sh",))

    def restore_standard_images(self) -> list[str]:
        """Import again the standard images that image GC deleted; return their references.

        containerd 1.6 does not pin the sandbox image, so the kubelet's image GC (and evictd's, which follows
        it) may delete it under imagefs pressure; a node with a registry pulls it again, this offline one
        imports it again.
        """
        present = {tag for image in self.cri.list_images() for tag in image.repo_tags}
        missing = [reference for reference in (PAUSE_IMAGE, BUSYBOX_IMAGE) if reference not in present]
        self._imported.difference_update(missing)
        self.import_standard_images()
        return missing

    def import_big_image(self, size_mib: int, tag: str | None = None) -> str:
        """Import an image with a padded layer of ``size_mib`` MiB; return its reference (unique per tag)."""
        reference = f"{BIG_IMAGE_REPOSITORY}:{tag or uuid.uuid4().hex[:8]}"
        return self.import_image(reference, cmd=("/bin/sh",), padding_bytes=size_mib * MiB)

    # -- pods --

    def pod_cgroup_parent(self, uid: str, qos: str = "besteffort") -> str:
        """Return the cgroupfs parent of a pod, as the kubelet's cgroupfs driver names it under the test root."""
        if qos == "guaranteed":
            return f"{self.cgroup_root}/kubepods/pod{uid}"
        return f"{self.cgroup_root}/kubepods/{qos}/pod{uid}"

    def run_pod(
        self,
        name: str,
        containers: Sequence[ContainerSpec],
        *,
        namespace: str = "evictd-test",
        uid: str | None = None,
        qos: str = "besteffort",
        annotations: dict[str, str] | None = None,
    ) -> RunningPod:
        """Run a host-network pod with the kubelet's labels and start its containers; return it.

        On any failure the partly started pod is removed and ``CRIError`` propagates.
        """
        pod_uid = uid or str(uuid.uuid4())
        log_directory = self.logs_dir / f"{namespace}_{name}_{pod_uid}"
        log_directory.mkdir(parents=True, exist_ok=True)
        spec = PodSandboxSpec(
            name=name,
            namespace=namespace,
            uid=pod_uid,
            cgroup_parent=self.pod_cgroup_parent(pod_uid, qos),
            log_directory=str(log_directory),
            host_network=True,
            annotations=annotations or {},
        )
        sandbox_id = self.cri.run_pod_sandbox(spec)
        self._sandbox_ids.add(sandbox_id)
        pod = RunningPod(spec=spec, sandbox_id=sandbox_id)
        try:
            for container in containers:
                logged = container if container.log_path else _with_log_path(container)
                container_id = self.cri.create_container(sandbox_id, logged, spec)
                pod.container_ids[container.name] = container_id
                self.cri.start_container(container_id)
        except BaseException:
            self.remove_pod(pod)
            raise
        return pod

    def remove_pod(self, pod: RunningPod) -> None:
        """Stop and remove the pod's sandbox (and so its containers), then remove its cgroup folders."""
        self.remove_sandbox(pod.sandbox_id)
        remove_cgroup_tree(pod.cgroup_parent)

    def remove_sandbox(self, sandbox_id: str) -> None:
        """Stop and remove one sandbox (idempotent: a missing one is fine).

        A sandbox whose processes were all killed behind the runtime's back (through its cgroup) has a shim that
        is shutting down: a stop in that moment fails with "ttrpc: closed" (seen once in CI, 2026-11-26). The
        kubelet retries such a stop on its next pod sync; this retries it for up to 10 s."""
        deadline = time.monotonic() + 10.0
        while True:
            try:
                self.cri.stop_sandbox(sandbox_id)
                break
            except CRIError as exc:
                if exc.code == "NOT_FOUND":  # containerd answers NOT_FOUND to stopping a removed sandbox
                    break
                if "ttrpc: closed" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(POLL_INTERVAL_S)
        self.cri.remove_sandbox(sandbox_id)

    def remove_all_pods(self) -> None:
        """Stop and remove every sandbox this containerd has (it is private: they are all the tests')."""
        for sandbox in self.cri.list_sandboxes():
            self.remove_sandbox(sandbox.id)

    def wait_for_container_state(self, container_id: str, state: str, timeout_s: float = 10.0) -> None:
        """Wait until the container reaches ``state`` (a ``ContainerState`` value)."""
        wait_until(lambda: self.cri.container_status(container_id).state == state, timeout_s,
                   f"container {container_id[:12]} to be {state}", interval_s=POLL_INTERVAL_S, error=HarnessError)

    def container_output(self, pod: RunningPod, container_name: str) -> str:
        """Return what the container wrote so far: the message part of its CRI log lines, one per line."""
        path = Path(pod.spec.log_directory) / f"{container_name}/0.log"
        try:
            lines = path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        # CRI log format: "<RFC3339Nano time> <stdout|stderr> <F|P> <message>".
        return "\n".join(line.split(" ", 3)[3] for line in lines if line.count(" ") >= 3)

    def wait_for_output(self, pod: RunningPod, container_name: str, text: str = READY,
                        timeout_s: float = 10.0) -> None:
        """Wait until the container has printed a line equal to ``text`` (e.g. ``READY`` from the scripts)."""
        wait_until(lambda: text in self.container_output(pod, container_name).splitlines(), timeout_s,
                   f"{container_name!r} of pod {pod.name} to print {text!r}", interval_s=POLL_INTERVAL_S,
                   error=HarnessError)

    def sandbox_state(self, sandbox_id: str) -> SandboxState:
        """Return the sandbox's current state."""
        return self.cri.sandbox_status(sandbox_id).state


def _with_log_path(container: ContainerSpec) -> ContainerSpec:
    # The kubelet's layout: <pod log directory>/<container name>/<attempt>.log.
    return dataclasses.replace(container, log_path=f"{container.name}/{container.attempt}.log")


@contextlib.contextmanager
def running_containerd(base: Path, **options: Any) -> Iterator[Containerd]:
    """Start a ``Containerd`` (options: its keyword arguments) with the standard images; tear down on exit."""
    with Containerd(base, **options) as runtime:
        runtime.import_standard_images()
        yield runtime

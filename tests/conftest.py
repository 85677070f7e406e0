"""The suite's shared plumbing: helper folders on the import path, suite-wide fixture plugins, small filesystems.

Helpers live next to the tests that first needed them (tests/cri: containerd, tests/kube: the API server,
tests/daemon: `evictd run` as a process, tests/e2e: a node with a kubelet stand-in, tests/contract: the node
the contract tests run on, tests/cluster: a real kube-apiserver and kubelet). Their folders are on the import
path by pytest's own setting (``pythonpath`` in pyproject.toml) and their fixtures are registered as plugins
here (``pytest_plugins``), so every test folder, tests/e2e included, can use them whatever part of the suite is
run. Only this top-level conftest may register plugins (pytest refuses it elsewhere).

* ``cri_fixtures`` (tests/cri): ``containerd``, ``pods``, ``containerd_on_ext4``, ``unstarted_containerd``;
* ``kube_fixtures`` (tests/kube): ``kube_pki``, ``apiserver``, ``api_client``, ``core_v1``;
* ``cluster_fixtures`` (tests/cluster): ``real_cluster`` (a real kube-apiserver and kubelet; started only
  when a test asks for it, i.e. in `make test-cluster`);
* ``e2e_fixtures`` (tests/e2e): ``node`` (a node of the e2e tier: real containerd, the test API server, the
  kubelet stand-in).

Real small filesystems for tests: a size-limited tmpfs and a loop-mounted ext4 image.

Fixtures (function-scoped, so every test starts from an empty filesystem):
* ``tmpfs_mount``: a tmpfs of 64 MiB and 2000 inodes, mounted under the test's tmp dir;
* ``ext4_mount``: a 64 MiB ext4 image with 4096 inodes and no reserved blocks, attached to a loop device
  and mounted under the test's tmp dir;
* ``mount_tmpfs_at``: a function mounting a small tmpfs on an existing folder (e.g. a memory-backed
  emptyDir inside ``ext4_mount``);
* ``unwritable_state``: a stateDir that takes no more writes, once full (ENOSPC) and once read-only (EROFS)
  (tests/full_filesystem.py).

``evictd run`` processes take the node lock at ``EVICTD_NODE_LOCK``: the session sets it to a file of its own
(``node_lock_of_the_session``), so that test sessions run side by side on one machine never wait for each other
on /run/evictd/node.lock; tests/daemon's ``EvictdProcess`` gives each process its own unless told.

The hand-over report looks for the running kubelet under ``EVICTD_PROC`` (/proc by default): the session sets it to
an empty folder of its own (``no_kubelet_of_the_host``), so that a kubelet running on the test machine (the
real-cluster tier's, say) never changes what a test reads; the tests of that lookup name their own folder.

Hypothesis runs without a per-example deadline (the ``evictd`` profile).

Mounting needs root; when it fails the fixture errors (the test fails, it is never skipped). Everything
mounted is unmounted lazily (``umount -l``, which also detaches submounts) and loop devices are detached in
finalizers, whatever the test's outcome.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from full_filesystem import KINDS, UnwritableFolder

pytest_plugins = ["cri_fixtures", "kube_fixtures", "cluster_fixtures", "cycle_reports", "e2e_fixtures"]

# Property tests assert behaviour, not speed (speed is bench/'s): no per-example deadline, which a loaded machine
# (the parallel tier beside guests) overran with a correct example.
settings.register_profile("evictd", deadline=None)
settings.load_profile("evictd")

TMPFS_SIZE = "64m"
TMPFS_NR_INODES = 2000
EXT4_IMAGE_SIZE = "64M"
EXT4_INODES = 4096
NESTED_TMPFS_SIZE = "8m"


@pytest.fixture(autouse=True, scope="session")
def node_lock_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every `evictd run` of the session takes its node lock in the session's tmp dir (see above)."""
    before = os.environ.get("EVICTD_NODE_LOCK")
    os.environ["EVICTD_NODE_LOCK"] = str(tmp_path_factory.mktemp("node-lock") / "node.lock")
    yield
    if before is None:
        os.environ.pop("EVICTD_NODE_LOCK", None)
    else:
        os.environ["EVICTD_NODE_LOCK"] = before


@pytest.fixture(autouse=True, scope="session")
def no_kubelet_of_the_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every evictd of the session looks for the running kubelet in an empty folder (see above)."""
    before = os.environ.get("EVICTD_PROC")
    os.environ["EVICTD_PROC"] = str(tmp_path_factory.mktemp("no-kubelet-proc"))
    yield
    if before is None:
        os.environ.pop("EVICTD_PROC", None)
    else:
        os.environ["EVICTD_PROC"] = before


def _run(*argv: str) -> str:
    """Run a command; fail the test (not skip it) with the command's stderr if it does not succeed."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _unmount(mountpoint: Path) -> None:
    # Lazy, so a busy mount still goes; errors ignored because an enclosing lazy unmount may have taken it.
    subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)


@pytest.fixture
def tmpfs_mount(tmp_path: Path) -> Iterator[Path]:
    """Yield the mount point of a fresh tmpfs (size=64m, nr_inodes=2000)."""
    mountpoint = tmp_path / "tmpfs"
    mountpoint.mkdir()
    _run("mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},nr_inodes={TMPFS_NR_INODES}", "tmpfs", str(mountpoint))
    try:
        yield mountpoint
    finally:
        _unmount(mountpoint)


@pytest.fixture
def ext4_mount(tmp_path: Path) -> Iterator[Path]:
    """Yield the mount point of a fresh loop-mounted ext4 (64 MiB, 4096 inodes, no reserved blocks)."""
    image = tmp_path / "ext4.img"
    mountpoint = tmp_path / "ext4"
    mountpoint.mkdir()
    _run("truncate", "-s", EXT4_IMAGE_SIZE, str(image))
    _run("mkfs.ext4", "-q", "-F", "-N", str(EXT4_INODES), "-m", "0", str(image))
    device = _run("losetup", "--find", "--show", str(image)).strip()
    try:
        _run("mount", "-t", "ext4", device, str(mountpoint))
        yield mountpoint
    finally:
        _unmount(mountpoint)
        subprocess.run(["losetup", "-d", device], capture_output=True, check=False)


@pytest.fixture
def mount_tmpfs_at() -> Iterator[Callable[[Path], Path]]:
    """Yield a function that mounts a small tmpfs on an existing folder and returns that folder."""
    mounted: list[Path] = []

    def mount(folder: Path) -> Path:
        _run("mount", "-t", "tmpfs", "-o", f"size={NESTED_TMPFS_SIZE}", "tmpfs", str(folder))
        mounted.append(folder)
        return folder

    try:
        yield mount
    finally:
        for folder in reversed(mounted):
            _unmount(folder)


@pytest.fixture(params=KINDS)
def unwritable_state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[UnwritableFolder]:
    """`<tmp_path>/state` on a 64 KiB tmpfs, full or read-only."""
    state = UnwritableFolder(tmp_path / "state", request.param)
    try:
        state.make_unwritable()
        yield state
    finally:
        state.unmount()


# The modules that take longest (a guest booted, an image built, for a minute or more each): collected first, so
# that pytest-xdist's workers start them first and the rest fills the time around them (tests/run-tiers.sh).
SLOWEST_MODULES = ("uml/test_evictd_v2.py", "uml/test_systemd_unit.py", "uml/test_node_survival.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> tuple[bool, int]:
        # The `alone` tier runs the quiet_machine tests after the serial ones (tests/run-tiers.sh).
        path = item.nodeid.split("::", 1)[0]
        slow = next((n for n, slow in enumerate(SLOWEST_MODULES) if path.endswith(slow)), len(SLOWEST_MODULES))
        return item.get_closest_marker("quiet_machine") is not None, slow

    items.sort(key=rank)  # stable: the order within each module, and of the others, is kept


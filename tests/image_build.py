"""The evictd image as a user builds it: `make image`, or `make release SNAPSHOT=1`, in a fresh clone of HEAD.

Job: clone the commit under test into a folder of its own, run `make image` there (buildah, the Debian base
where no registry answers; deploy/build-image.sh) and hand back the OCI archive, its image reference and the
build's own summary (`build_from_fresh_clone`; `shared_image_build` once per test session: the real-cluster
DaemonSet, chart and fleet tests, whose manifests name the version's tag). `shared_snapshot_release` runs `make
release SNAPSHOT=1` there instead (the wheel, the sdist, the chart package and the image, in dist/snapshot/), once
per test session whichever module and pytest-xdist worker asks first: tests/deploy/test_image.py runs its image,
tests/deploy/test_registry_release.py and tests/cluster/test_registry_install_real.py push it and its chart (all in
`make test-cluster`). A build that fails is a test failure carrying the end of its output.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from evictd import __version__

T = TypeVar("T", "ImageBuild", "SnapshotRelease")  # what a session builds once

REPO = Path(__file__).resolve().parents[1]
# What `make image` tags (deploy/build-image.sh's default, the DaemonSet's image): the version's tag.
IMAGE_REFERENCE = f"ghcr.io/evictd/evictd:{__version__}"
# A cold build (Debian base made first) took about 2 minutes on a loaded 2-core VM: generous, not tight.
BUILD_TIMEOUT_S = 1200.0
OUTPUT_TAIL_CHARS = 4000


class ImageBuildError(Exception):
    """`git clone` or `make image` failed; the message carries the end of their output."""


@dataclass(frozen=True, slots=True)
class ImageBuild:
    """A built image: its OCI archive, the reference inside it, the clone and commit it came from, how long it
    took."""

    archive: Path
    clone: Path
    reference: str
    commit: str
    seconds: float
    summary: str


def _run(args: list[str], cwd: Path, timeout_s: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise ImageBuildError(f"{' '.join(args)} exited {done.returncode}:\n{output[-OUTPUT_TAIL_CHARS:]}")
    return done.stdout


def build_from_fresh_clone(workdir: Path) -> ImageBuild:
    """Clone HEAD into ``workdir``/evictd, run `make image` there; return the archive it wrote."""
    clone = workdir / "evictd"
    _run(["git", "clone", "--quiet", str(REPO), str(clone)], cwd=workdir, timeout_s=120.0)
    commit = _run(["git", "rev-parse", "HEAD"], cwd=clone, timeout_s=30.0).strip()
    archive = workdir / "evictd-image.oci.tar"
    env = {**os.environ, "IMAGE": IMAGE_REFERENCE, "IMAGE_ARCHIVE": str(archive)}
    started = time.monotonic()
    summary = _run(["make", "image"], cwd=clone, timeout_s=BUILD_TIMEOUT_S, env=env)
    seconds = time.monotonic() - started
    if not archive.is_file():
        raise ImageBuildError(f"make image succeeded but wrote no {archive}:\n{summary[-OUTPUT_TAIL_CHARS:]}")
    return ImageBuild(archive=archive, clone=clone, reference=IMAGE_REFERENCE, commit=commit, seconds=seconds, summary=summary)


@dataclass(frozen=True, slots=True)
class SnapshotRelease:
    """What `make release SNAPSHOT=1` left in a clone's dist/snapshot/: the release's name
    (<version>-snapshot.g<shortsha>), its chart package and its image (the archive and the reference it carries)."""

    name: str
    dist: Path
    chart: Path
    image: ImageBuild


def _untag(reference: str) -> None:
    # The release leaves its image tagged in buildah's store; a snapshot's tag is new with every commit, so the
    # tests' builds would pile up there. The archive is what the tests use.
    subprocess.run(["buildah", "rmi", reference], capture_output=True, timeout=120.0, check=False)


def build_snapshot_release(workdir: Path) -> SnapshotRelease:
    """Clone HEAD into ``workdir``/evictd and run `make release SNAPSHOT=1` there; return what it built.

    The clone's .venv is this one's packages (a .pth onto its site-packages, the Makefile's stamps touched), so the
    build installs nothing from PyPI into a venv of its own; everything else is the Makefile's, unchanged.
    """
    clone = workdir / "evictd"
    _run(["git", "clone", "--quiet", str(REPO), str(clone)], cwd=workdir, timeout_s=120.0)
    commit = _run(["git", "rev-parse", "HEAD"], cwd=clone, timeout_s=30.0).strip()
    venv = clone / ".venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=workdir, timeout_s=60.0)
    site = _run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                cwd=workdir, timeout_s=30.0).strip()
    (Path(site) / "zz-evictd-test-venv.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    for stamp in (".installed-run", ".installed"):  # in the Makefile's order: each newer than what it needs
        (venv / stamp).touch()
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    started = time.monotonic()
    summary = _run(["make", "release", "SNAPSHOT=1"], cwd=clone, timeout_s=BUILD_TIMEOUT_S, env=env)
    seconds = time.monotonic() - started
    dist = clone / "dist" / "snapshot"
    charts = sorted(dist.glob("evictd-*.tgz"))
    archives = sorted(dist.glob("evictd-image-*.oci.tar"))
    if len(charts) != 1 or len(archives) != 1:
        raise ImageBuildError(f"make release SNAPSHOT=1 left {charts} and {archives} in {dist}:\n"
                              f"{summary[-OUTPUT_TAIL_CHARS:]}")
    name = charts[0].name.removeprefix("evictd-").removesuffix(".tgz")
    reference = f"ghcr.io/evictd/evictd:{name}"
    _untag(reference)
    image = ImageBuild(archive=archives[0], clone=clone, reference=reference, commit=commit, seconds=seconds,
                       summary=summary)
    return SnapshotRelease(name=name, dist=dist, chart=charts[0], image=image)


def _session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Under pytest-xdist each worker's base folder is popen-gwN inside the session's own: the parent is shared.
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _image_of(fields: dict[str, Any]) -> ImageBuild:
    return ImageBuild(**{**fields, "archive": Path(fields["archive"]), "clone": Path(fields["clone"])})


def _release_of(fields: dict[str, Any]) -> SnapshotRelease:
    return SnapshotRelease(name=fields["name"], dist=Path(fields["dist"]), chart=Path(fields["chart"]),
                           image=_image_of(fields["image"]))


def _once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T],
                         load: Callable[[dict[str, Any]], T]) -> T:
    # The first caller builds into the session's folder `name`, holding a lock there; later callers (other modules,
    # other workers) wait on the lock and get the same build (`load` of its JSON), or its failure.
    folder = _session_folder(tmp_path_factory) / name
    with (folder.parent / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        built, failed = folder / "built.json", folder / "failed.txt"
        if built.is_file():
            return load(json.loads(built.read_text(encoding="utf-8")))
        if failed.is_file():
            raise ImageBuildError(f"this session's {name} build failed: {failed.read_text(encoding='utf-8')}")
        folder.mkdir(exist_ok=True)
        try:
            result = build(folder)
        except (ImageBuildError, subprocess.TimeoutExpired) as exc:
            failed.write_text(str(exc), encoding="utf-8")
            raise
        built.write_text(json.dumps(asdict(result), default=str), encoding="utf-8")
        return result


def shared_snapshot_release(tmp_path_factory: pytest.TempPathFactory) -> SnapshotRelease:
    """`make release SNAPSHOT=1` once per test session, whichever module and worker asks first."""
    return _once_per_session(tmp_path_factory, "snapshot-release", build_snapshot_release, _release_of)


def shared_image_build(tmp_path_factory: pytest.TempPathFactory) -> ImageBuild:
    """`make image` in a fresh clone once per test session (`build_from_fresh_clone`): the real-cluster DaemonSet,
    chart and fleet modules import the same archive and read the same clone's deploy/, which none of them writes."""
    return _once_per_session(tmp_path_factory, "fresh-clone-image", build_from_fresh_clone, _image_of)

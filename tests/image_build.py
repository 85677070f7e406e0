"""The evictd image as a user builds it: `make image` in a fresh clone of this repository's HEAD.

Job: clone the commit under test into a folder of its own, run `make image` there (buildah, the Debian base
where no registry answers; deploy/build-image.sh) and hand back the OCI archive, its image reference and the
build's own summary. Used by tests/deploy/test_image.py and by the real-cluster DaemonSet tests; a build that
fails is a test failure carrying the end of its output.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from evictd import __version__

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

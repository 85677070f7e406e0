"""Releases: one version, said once (src/evictd/__init__.py), and everything that ships agreeing with it.

The package metadata reads the version from evictd.__version__ (pyproject.toml's dynamic version); the image build
tags with it; the chart, the DaemonSet's image, the docs' image references and CHANGELOG.md's newest heading say it
and are held equal to it here. The wheel and the sdist are built as `make release` builds them (offline: no build
isolation), and the wheel installed into a fresh venv answers `evictd --version` with the version.
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from evictd import __version__
from image_build import IMAGE_REFERENCE

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "evictd"
CHANGELOG = REPO / "CHANGELOG.md"
IMAGE_REPOSITORY = "ghcr.io/evictd/evictd"
# Where the docs and manifests name the image with a tag.
IMAGE_TAG = re.compile(re.escape(IMAGE_REPOSITORY) + r":([0-9][0-9A-Za-z.+-]*[0-9A-Za-z])")
BUILD_TIMEOUT_S = 120.0


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--", *patterns], cwd=REPO, capture_output=True, text=True,
                            check=True, timeout=30).stdout
    return [REPO / line for line in listed.splitlines() if (REPO / line).is_file() and not (REPO / line).is_symlink()]


def test_the_version_is_said_once_in_the_package() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "evictd.__version__"}
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?", __version__)
    containerfile = (REPO / "deploy" / "Containerfile").read_text(encoding="utf-8")
    assert __version__ not in containerfile  # the label takes the build's VERSION
    build_image = (REPO / "deploy" / "build-image.sh").read_text(encoding="utf-8")
    assert "IMAGE=${IMAGE:-ghcr.io/evictd/evictd:$VERSION}" in build_image and __version__ not in build_image


def test_the_chart_the_daemonset_and_the_image_tag_say_the_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)
    daemonset = yaml.safe_load((REPO / "deploy" / "kubernetes" / "daemonset.yaml").read_text(encoding="utf-8"))
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == f"{IMAGE_REPOSITORY}:{__version__}"
    assert f"{IMAGE_REPOSITORY}:{__version__}" == IMAGE_REFERENCE  # what tests build and `make image` tags


def test_every_image_reference_in_docs_and_deploy_has_the_versions_tag() -> None:
    found = {}
    for path in tracked("README.md", "docs", "deploy", "CHANGELOG.md"):
        for tag in IMAGE_TAG.findall(path.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(tag, []).append(str(path.relative_to(REPO)))
    assert found, "no image reference with a tag found"
    assert set(found) == {__version__}, found


def changelog_versions() -> list[str]:
    return re.findall(r"^# v(\S+)$", CHANGELOG.read_text(encoding="utf-8"), flags=re.MULTILINE)


def test_changelog_opens_with_the_version_in_kubernetes_release_notes_layout() -> None:
    text = CHANGELOG.read_text(encoding="utf-8")
    versions = changelog_versions()
    assert versions[0] == __version__
    assert len(set(versions)) == len(versions)
    sections = re.split(r"^# v\S+$", text, flags=re.MULTILINE)[1:]
    assert len(sections) == len(versions)
    for version, section in zip(versions, sections, strict=True):
        headings = re.findall(r"^(#{2,3} .+)$", section, flags=re.MULTILINE)
        expected = ["## Urgent Upgrade Notes", "### (No, really, you MUST read this before you upgrade)",
                    "## Changes by Kind"]
        assert headings[:3] == expected, version
        assert set(headings[3:]) <= {"### Feature", "### Bug or Regression", "### Other", "### Deprecation",
                                     "### API Change", "### Documentation"}, version
    assert "docs/upgrading.md" in text


def test_upgrade_notes_name_the_state_formats_this_version_writes() -> None:
    from evictd.core.oom_saved import OOM_COUNTERS_VERSION
    from evictd.core.saved_state import STATE_VERSION
    from evictd.kube.journal import JOURNAL_VERSION
    from evictd.record.model import FORMAT_VERSION, READ_VERSIONS

    notes = (REPO / "docs" / "upgrading.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in notes.splitlines()
            if line.startswith("| `")}
    assert rows["`engine-state.json`"] == f"engine state version {STATE_VERSION}"
    assert rows["`oom-counters.json`"] == f"version {OOM_COUNTERS_VERSION}"
    assert rows["`evictions.json`"].startswith(f"journal version {JOURNAL_VERSION} ")
    assert rows["`recording/`"] == f"recording line format {FORMAT_VERSION} ({READ_VERSIONS[0]} is read too)"
    mkdocs = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert {"Upgrading": "upgrading.md"} in mkdocs["nav"]


def run(args: list[str], cwd: Path = REPO) -> str:
    # No PYTHONPATH: a checkout's src/ on it (with the egg-info a build leaves there) would be an evictd installed.
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
                          env=env)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def test_wheel_and_sdist_carry_the_version_and_the_installed_evictd_says_it(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", str(dist), str(REPO)])
    run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})"])
    wheel = dist / f"evictd-{__version__}-py3-none-any.whl"
    sdist = dist / f"evictd-{__version__}.tar.gz"
    assert sorted(p.name for p in dist.iterdir()) == sorted([wheel.name, sdist.name])
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"evictd-{__version__}.dist-info/METADATA").decode()
        assert "evictd/py.typed" in archive.namelist()
    assert email.parser.Parser().parsestr(metadata)["Version"] == __version__
    with tarfile.open(sdist) as archive:
        pkg_info = archive.extractfile(f"evictd-{__version__}/PKG-INFO")
        assert pkg_info is not None
        assert email.parser.Parser().parsestr(pkg_info.read().decode())["Version"] == __version__
    # A fresh venv with the wheel alone; its dependencies come from this venv's site-packages (appended to its
    # path: not a site folder, so this venv's editable install of the checkout is not seen there).
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip())
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
         str(wheel)])
    # After the install: with this venv's path, pip would see its evictd as installed already.
    (site / "zz-evictd-test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    assert run([str(venv / "bin" / "evictd"), "--version"]).strip() == f"evictd {__version__}"
    where = run([str(python), "-c", "import evictd; print(evictd.__file__)"]).strip()
    assert Path(where).is_relative_to(site)


# `make release` builds only from a clean checkout whose HEAD carries the tag v<version> (deploy/release-check.sh,
# run first by the Makefile). Shown in a clone of this repository, with this checkout's Makefile and check
# committed into it, so that the clone's HEAD is what a release would be built from.
RELEASE_FILES = ("Makefile", "deploy/release-check.sh")
GIT_IDENTITY = ("-c", "user.name=evictd tests", "-c", "user.email=tests@evictd.invalid")


def git(clone: Path, *args: str) -> str:
    return run(["git", *GIT_IDENTITY, *args], cwd=clone)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of this repository without its tags, this checkout's release files committed on top."""
    folder = tmp_path / "clone"
    run(["git", "clone", "--quiet", "--no-tags", "--no-hardlinks", str(REPO), str(folder)], cwd=tmp_path)
    for name in RELEASE_FILES:
        shutil.copy2(REPO / name, folder / name)
    git(folder, "add", *RELEASE_FILES)
    if git(folder, "status", "--porcelain"):
        git(folder, "commit", "--quiet", "--no-verify", "-m", "this checkout's release files")
    assert not git(folder, "tag", "--list")
    return folder


def release_check(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(clone / "deploy" / "release-check.sh"), *args], cwd=clone, capture_output=True,
                          text=True, timeout=30, check=False)


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused check prints."""
    assert (done.returncode, done.stdout) == (1, ""), done
    [line] = done.stderr.splitlines()
    assert line.startswith("make release: ")
    return line


def short_head(clone: Path) -> str:
    return git(clone, "rev-parse", "--short=7", "HEAD").strip()


def test_a_release_is_refused_without_the_versions_tag_on_head(clone: Path) -> None:
    head = short_head(clone)
    assert f"HEAD {head} carries no tag v{__version__} " in refusal(release_check(clone))
    git(clone, "tag", f"v{__version__}", "HEAD~1")  # the version's tag, on another commit
    line = refusal(release_check(clone))
    assert f"tag v{__version__} is on {git(clone, 'rev-parse', '--short=7', 'HEAD~1').strip()}, not on HEAD {head}" \
        in line


def test_a_release_is_refused_when_heads_tag_names_another_version(clone: Path) -> None:
    git(clone, "tag", "-a", "-m", "another", "v99.0.0")
    line = refusal(release_check(clone))
    assert f"HEAD {short_head(clone)} is tagged v99.0.0, not v{__version__} " in line
    assert f"src/evictd/__init__.py says {__version__}" in line


def test_a_release_is_built_from_the_tagged_clean_checkout_only(clone: Path) -> None:
    git(clone, "tag", f"v{__version__}")
    done = release_check(clone)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{__version__}\n", "")
    # Uncommitted changes refuse it again: a changed tracked file, then a new untracked one alone.
    readme = clone / "README.md"
    original = readme.read_text(encoding="utf-8")
    readme.write_text(original + "\nchanged\n", encoding="utf-8")
    assert "uncommitted changes in the checkout (1: README.md)" in refusal(release_check(clone))
    readme.write_text(original, encoding="utf-8")
    (clone / "src" / "evictd" / "extra.py").write_text("", encoding="utf-8")
    assert "uncommitted changes in the checkout (1: src/evictd/extra.py)" in refusal(release_check(clone))


def test_make_release_refuses_before_building_anything(clone: Path) -> None:
    done = subprocess.run(["make", "release"], cwd=clone, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert done.stderr.splitlines()[0].startswith(f"make release: HEAD {short_head(clone)} carries no tag v")
    assert not (clone / ".venv").exists() and not (clone / "dist").exists()
    assert not git(clone, "status", "--porcelain", "--ignored")


def test_a_snapshot_is_named_after_the_commit_from_any_checkout(clone: Path) -> None:
    head = short_head(clone)
    done = release_check(clone, "--snapshot")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{__version__}-snapshot.g{head}\n", "")
    (clone / "README.md").write_text("changed\n", encoding="utf-8")
    assert release_check(clone, "--snapshot").stdout == f"{__version__}-snapshot.g{head}.dirty\n"


# `make push REGISTRY=... [SNAPSHOT=1] [PLAIN_HTTP=1]` (deploy/push-release.sh) pushes what `make release` left in
# dist/ or dist/snapshot/; tests/deploy/test_registry_release.py pushes a real snapshot to a real registry. Here:
# what it refuses, in one line, before pushing anything.
PUSH_RELEASE = REPO / "deploy" / "push-release.sh"


def push_refusal(dist: Path, registry: str) -> str:
    done = subprocess.run([str(PUSH_RELEASE), str(dist), registry], capture_output=True, text=True, timeout=30,
                          check=False)
    assert (done.returncode, done.stdout) == (1, ""), done
    [line] = done.stderr.splitlines()
    assert line.startswith("make push: ")
    return line


def test_push_refuses_without_one_build_in_dist_or_without_a_registry(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    snapshot = dist / "snapshot"
    snapshot.mkdir(parents=True)
    assert f"{dist} holds 0 chart packages and 0 image archives, not one of each: make release first" \
        in push_refusal(dist, "registry.example.com/org")
    assert "make release SNAPSHOT=1 first" in push_refusal(snapshot, "registry.example.com/org")
    (snapshot / "evictd-0.1.0-snapshot.g1111111.tgz").touch()
    (snapshot / "evictd-image-0.1.0-snapshot.g2222222.oci.tar").touch()
    assert "the chart (0.1.0-snapshot.g1111111) and the image (0.1.0-snapshot.g2222222) in" \
        in push_refusal(snapshot, "registry.example.com/org")
    assert "no REGISTRY: make push REGISTRY=" in push_refusal(snapshot, "")
    assert "without a scheme" in push_refusal(snapshot, "https://registry.example.com")

"""A release pushed to a real registry and pulled back, end to end: the path a published release takes, with only
the registry's address changed.

`make release SNAPSHOT=1` in a fresh clone of HEAD (tests/image_build.py: the session's one build, which
tests/deploy/test_image.py runs), then `make push REGISTRY=127.0.0.1:PORT PLAIN_HTTP=1 SNAPSHOT=1` in that clone
(deploy/push-release.sh: skopeo for the image's archive, `helm push` for the chart) to a real registry, Debian's
docker-registry (distribution 2.8) on loopback (tests/deploy/registry_server.py). Then as a cluster would use it:
`helm pull` of the chart, whose DaemonSet renders with the registry's image, and a real containerd pulling that image
through the CRI (PullImage, as the kubelet asks), with no registry configuration (containerd 1.6 speaks plain HTTP to
127.0.0.1): the config's and the manifest's digests are the archive's in dist/, and every blob came from the
registry. Beyond the build: the push about 3 s, the pull 12-15 s (most of it unpacking 94 MB of layers), on a
2-core host at load 9 to 11.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from containerd_harness import Containerd, HarnessError
from cri_fixtures import new_base
from registry_server import RegistryServer, helm_home_env, running_registry

from evictd.core.errors import CRIError
from helm_tool import NAMESPACE, RELEASE, helm
from image_build import SnapshotRelease, shared_snapshot_release

PUSH_TIMEOUT_S = 300.0
# The pulled image's content (94 MB) and its unpacked snapshots (370 MB), with room to spare.
NODE_ROOT_TMPFS_SIZE = "1g"

pytestmark = pytest.mark.image  # `make test-cluster`, not `make test` (Makefile)


@dataclass(frozen=True, slots=True)
class Pushed:
    """`make push`'s output and time, and the references it pushed to."""

    output: str
    seconds: float
    image: str  # REGISTRY/evictd/evictd:<name>
    chart: str  # oci://REGISTRY/evictd/charts/evictd


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> SnapshotRelease:
    return shared_snapshot_release(tmp_path_factory)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    yield from running_registry(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return helm_home_env(tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def pushed(release: SnapshotRelease, registry: RegistryServer, helm_home: dict[str, str]) -> Pushed:
    started = time.monotonic()
    done = subprocess.run(["make", "--no-print-directory", "push", f"REGISTRY={registry.address}", "PLAIN_HTTP=1",
                           "SNAPSHOT=1"], cwd=release.image.clone, capture_output=True, text=True,
                          timeout=PUSH_TIMEOUT_S, check=False, env=helm_home)
    seconds = time.monotonic() - started
    assert done.returncode == 0, f"make push exited {done.returncode}:\n{done.stdout}{done.stderr}"
    print(f"\nmake push: {seconds:.1f} s\n{done.stdout}")
    return Pushed(output=done.stdout + done.stderr, seconds=seconds,
                  image=f"{registry.address}/evictd/evictd:{release.name}",
                  chart=f"oci://{registry.address}/evictd/charts/evictd")


def archive_json(archive: Path, name: str) -> Any:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        assert member is not None, name
        return json.load(member)


def archive_digests(archive: Path) -> tuple[str, str, list[str]]:
    """The OCI archive's one manifest: its digest, its config's digest and its layers' digests."""
    [entry] = archive_json(archive, "index.json")["manifests"]
    manifest = archive_json(archive, "blobs/" + entry["digest"].replace(":", "/"))
    return entry["digest"], manifest["config"]["digest"], [layer["digest"] for layer in manifest["layers"]]


def registry_json(registry: RegistryServer, path: str) -> Any:
    with urllib.request.urlopen(f"http://{registry.address}/v2/{path}", timeout=10) as response:
        return json.load(response)


def test_make_push_puts_the_image_and_the_chart_in_the_registry(release: SnapshotRelease, registry: RegistryServer,
                                                                pushed: Pushed) -> None:
    manifest_digest, _, _ = archive_digests(release.image.archive)
    # The image under the release's name, with the archive's own manifest (skopeo --preserve-digests).
    assert f"image: {pushed.image}@{manifest_digest}" in pushed.output.splitlines()
    assert f"chart: Pushed: {registry.address}/evictd/charts/evictd:{release.name}" in pushed.output.splitlines()
    assert registry_json(registry, "evictd/evictd/tags/list")["tags"] == [release.name]
    assert registry_json(registry, "evictd/charts/evictd/tags/list")["tags"] == [release.name]


def test_the_pulled_chart_is_the_release_and_renders_the_registrys_image(
        release: SnapshotRelease, registry: RegistryServer, pushed: Pushed, helm_home: dict[str, str],
        tmp_path: Path) -> None:
    helm("pull", pushed.chart, "--version", release.name, "--plain-http", "--destination", str(tmp_path),
         env=helm_home)
    pulled = tmp_path / release.chart.name
    assert hashlib.sha256(pulled.read_bytes()).hexdigest() == hashlib.sha256(release.chart.read_bytes()).hexdigest()
    # As docs/upgrading.md installs it ("Build and push to your own registry").
    repository = f"{registry.address}/evictd/evictd"
    rendered = helm("template", RELEASE, str(pulled), "--namespace", NAMESPACE, "--set", f"image.repository={repository}",
                    "--set", f"image.tag={release.name}", env=helm_home).stdout
    [daemonset] = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "DaemonSet"]
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == pushed.image
    # The tag is the chart's appVersion when left out: the release's name too.
    rendered = helm("template", RELEASE, str(pulled), "--namespace", NAMESPACE, "--set", f"image.repository={repository}",
                    env=helm_home).stdout
    [daemonset] = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "DaemonSet"]
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"] == pushed.image


@pytest.fixture
def node_runtime(tmp_path: Path) -> Iterator[Containerd]:
    """A containerd of its own holding no image, started as the CRI tests' (tests/cri/containerd_harness.py) and the
    real-cluster tier's nodes are: whatever it holds after the pull came from the registry. Its root (the content
    store and the unpacked snapshots, about 470 MB) is on a tmpfs: removing it from disk took 13 s, from a tmpfs 1 s."""
    root = tmp_path / "containerd-root"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={NODE_ROOT_TMPFS_SIZE}", "tmpfs", str(root)], check=True,
                   capture_output=True, timeout=30)
    runtime = Containerd(new_base(), root=root / "root")
    try:
        try:
            runtime.start()
        except (HarnessError, CRIError, OSError) as exc:
            pytest.fail(f"could not start containerd: {exc}", pytrace=False)
        yield runtime
    finally:
        problems = runtime.stop()
        subprocess.run(["umount", "-l", str(root)], capture_output=True, check=False, timeout=30)
    if problems:
        pytest.fail("containerd teardown incomplete: " + "; ".join(problems), pytrace=False)


def test_containerd_pulls_the_pushed_image_with_the_archives_digests(
        release: SnapshotRelease, registry: RegistryServer, pushed: Pushed, node_runtime: Containerd) -> None:
    manifest_digest, config_digest, layers = archive_digests(release.image.archive)
    started = time.monotonic()
    image_ref = node_runtime.cri.pull_image(pushed.image)
    seconds = time.monotonic() - started
    print(f"\nCRI PullImage of {pushed.image}: {seconds:.1f} s")
    assert image_ref == config_digest
    [image] = [image for image in node_runtime.cri.list_images() if pushed.image in image.repo_tags]
    assert image.id == config_digest
    assert image.repo_digests == (f"{registry.address}/evictd/evictd@{manifest_digest}",)
    # Every blob fetched whole from the registry by containerd: the runtime held none of them before.
    assert registry.blobs_served("evictd/evictd", "containerd/") == {config_digest, *layers}

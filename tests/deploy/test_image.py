"""The evictd image, built here as a user builds it and run by a real containerd.

`make release SNAPSHOT=1` in a fresh clone of HEAD (tests/image_build.py, the session's one build, which
tests/deploy/test_registry_release.py pushes to a registry): its `make image` (deploy/build-image.sh) builds with
buildah, on the Debian base mmdebstrap makes where no registry answers (this machine), into an OCI archive; the
archive imported into the private containerd of the CRI tests with `ctr images import`, and evictd run from it as
a container. Needs PyPI and a Debian mirror, buildah and mmdebstrap (`make system-deps` installs them); about 1
minute with the Debian base already built, 2 without (a 2-core VM; 4 beside other work). The DaemonSet itself runs
the same image in tests/cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml
from containerd_harness import Containerd
from cri_fixtures import PodFactory
from harness_cri import ContainerSpec

from evictd import __version__
from evictd.core.runtime import ContainerState
from evictd.kubelet_file import PROC_ENV
from image_build import REPO, ImageBuild, shared_snapshot_release

CONFIGMAP = REPO / "deploy" / "kubernetes" / "configmap.yaml"
DAEMONSET = REPO / "deploy" / "kubernetes" / "daemonset.yaml"
# What the package build reads (deploy/Containerfile's COPY lines): all .dockerignore lets into the context.
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "src/")
RUN_TIMEOUT_S = 120.0


def buildah() -> str:
    found = shutil.which("buildah")
    if found is None:
        pytest.fail("buildah not found on PATH (make system-deps installs it)")
    return found


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> ImageBuild:
    built = shared_snapshot_release(tmp_path_factory).image
    print(f"\n{built.summary}commit {built.commit[:12]}, {built.seconds:.0f} s")
    return built


def run_in_image(runtime: Containerd, pods: PodFactory, image: ImageBuild, name: str, args: list[str],
                 mounts: list[tuple[str, str, bool]] | None = None,
                 command: Sequence[str] = ("evictd",), envs: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `evictd ARGS` (or `command` ARGS) from the image as a container; return its exit code and output."""
    pod = pods.run(name, [ContainerSpec(name="evictd", image=image.reference, command=list(command), args=args,
                                        mounts=mounts or [], envs=envs or {})])
    container_id = pod.container_ids["evictd"]
    runtime.wait_for_container_state(container_id, ContainerState.EXITED, timeout_s=RUN_TIMEOUT_S)
    return runtime.cri.container_status(container_id).exit_code, runtime.container_output(pod, "evictd")


@pytest.fixture(scope="module")
def imported(image: ImageBuild, containerd: Containerd) -> Iterator[Containerd]:
    containerd.import_archive(image.archive)
    yield containerd
    containerd.ctr("images", "rm", image.reference)


def test_dockerignore_keeps_only_what_the_package_build_reads(tmp_path: Path) -> None:
    # A real buildah build of a context laid out as a working copy is: a clone (.git, tests, bench, ...), a
    # virtualenv, build output and bytecode. Only the package build's inputs may reach the image.
    context = tmp_path / "context"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(context)], check=True, timeout=120)
    for litter in (".venv/lib/python3.11/site-packages/big.bin", "build/evictd-image.oci.tar",
                   "src/evictd/__pycache__/cli.cpython-311.pyc", "src/evictd.egg-info/PKG-INFO"):
        (context / litter).parent.mkdir(parents=True, exist_ok=True)
        (context / litter).write_bytes(b"\0" * 1024)
    probe = tmp_path / "Containerfile"
    probe.write_text("FROM scratch\nCOPY . /context/\n", encoding="utf-8")
    out = tmp_path / "out"
    tag = f"localhost/evictd-context-probe:{tmp_path.name}"
    try:
        subprocess.run([buildah(), "bud", "--quiet", "--isolation", "chroot", "--output", f"type=local,dest={out}",
                        "-t", tag, "-f", str(probe), str(context)], check=True, capture_output=True, timeout=300)
    finally:
        subprocess.run([buildah(), "rmi", tag], capture_output=True, check=False)  # the image buildah kept too
    copied = sorted(str(p.relative_to(out / "context")) for p in (out / "context").rglob("*") if p.is_file())
    tracked = subprocess.run(["git", "ls-files"], cwd=context, check=True, capture_output=True, text=True).stdout
    expected = sorted(path for path in tracked.splitlines() if path.startswith(BUILD_INPUTS))
    assert copied == expected
    assert "LICENSE" in copied and "src/evictd/cli.py" in copied


def test_license_is_the_apache_license_pyproject_names() -> None:
    license_text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert 'license = "Apache-2.0"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")


@pytest.mark.image  # `make test-cluster`, not `make test` (Makefile)
def test_image_from_a_fresh_clone_runs_evictd(image: ImageBuild, imported: Containerd, pods: PodFactory) -> None:
    tags = {tag for listed in imported.cri.list_images() for tag in listed.repo_tags}
    assert image.reference in tags
    code, output = run_in_image(imported, pods, image, "evictd-version", ["--version"])
    assert (code, output) == (0, f"evictd {__version__}")


@pytest.mark.image  # `make test-cluster`, not `make test` (Makefile)
def test_image_runs_the_daemonsets_command(image: ImageBuild, imported: Containerd, pods: PodFactory) -> None:
    # The DaemonSet starts evictd through nice(1) and ionice(1) (its priorities): both must be in the image. This
    # container is not privileged, so nice may not raise the priority and says so; evictd still runs.
    command = yaml.safe_load(DAEMONSET.read_text(encoding="utf-8"))["spec"]["template"]["spec"]["containers"][0]
    code, output = run_in_image(imported, pods, image, "evictd-priorities", ["--version"], command=command["command"])
    assert code == 0, output
    assert output.splitlines()[-1] == f"evictd {__version__}"


@pytest.mark.image  # `make test-cluster`, not `make test` (Makefile)
def test_image_holds_what_the_daemon_imports(image: ImageBuild, imported: Containerd, pods: PodFactory) -> None:
    # `evictd run` in a cluster loads the CRI client (grpc, a C++ extension) and the kubernetes client, which
    # the offline commands above never import: the base must carry their shared libraries (libstdc++).
    pod = pods.run("evictd-imports", [ContainerSpec(
        name="evictd", image=image.reference, command=["python3"],
        args=["-c", "import evictd.cri.client, evictd.kube.client, kubernetes.client, grpc; print('imported')"])])
    container_id = pod.container_ids["evictd"]
    imported.wait_for_container_state(container_id, ContainerState.EXITED, timeout_s=RUN_TIMEOUT_S)
    output = imported.container_output(pod, "evictd")
    assert (imported.cri.container_status(container_id).exit_code, output) == (0, "imported"), output


@pytest.mark.image  # `make test-cluster`, not `make test` (Makefile)
def test_image_reads_the_shipped_configmap_as_the_host_does(image: ImageBuild, imported: Containerd,
                                                            pods: PodFactory, tmp_path: Path) -> None:
    # The ConfigMap's config.yaml, mounted where the DaemonSet mounts it: the image's evictd derives the same
    # thresholds and settings as this checkout's.
    configmap = yaml.safe_load(CONFIGMAP.read_text(encoding="utf-8"))
    config = tmp_path / "config.yaml"
    config.write_text(configmap["data"]["config.yaml"], encoding="utf-8")
    # --config-only: the container's cgroup view is not the host's, and the node's protection is not the question.
    args = ["check-config", "--config", "/etc/evictd/config.yaml", "--output", "json", "--config-only"]
    # Where each looks for a running kubelet is its own (the container's /proc, the test session's EVICTD_PROC):
    # both look in the same absent folder, so the hand-over says the same.
    no_kubelet = {PROC_ENV: "/nonexistent/proc"}
    code, output = run_in_image(imported, pods, image, "evictd-check-config", args,
                                mounts=[("/etc/evictd/config.yaml", str(config), True)], envs=no_kubelet)
    assert code == 0, output
    here = subprocess.run([sys.executable, "-m", "evictd", *args[:2], str(config), *args[3:]], capture_output=True,
                          text=True, timeout=60, check=True, env={**os.environ, **no_kubelet})
    assert json.loads(output) == json.loads(here.stdout)
    assert json.loads(output)["thresholds"], "the ConfigMap sets thresholds"


@pytest.mark.image  # `make test-cluster`, not `make test` (Makefile)
def test_image_holds_a_node_in_dry_run_through_the_daemonsets_state_mount(image: ImageBuild, imported: Containerd,
                                                                         pods: PodFactory, tmp_path: Path) -> None:
    # `kubectl exec POD -- evictd mode dry-run` (or `crictl exec` with the API down): the image's evictd, with the
    # ConfigMap at /etc/evictd and the host's stateDir where the DaemonSet mounts it, writes the file the host (and
    # evictd run) reads there.
    configmap = yaml.safe_load(CONFIGMAP.read_text(encoding="utf-8"))
    config = tmp_path / "config.yaml"
    config.write_text(configmap["data"]["config.yaml"], encoding="utf-8")
    state = tmp_path / "state"
    state.mkdir()
    (state / "evictd.lock").write_text("1\n")  # the running evictd's
    mounts = [("/etc/evictd/config.yaml", str(config), True), ("/var/lib/evictd", str(state), False)]
    code, output = run_in_image(imported, pods, image, "evictd-mode", ["mode", "dry-run", "--config",
                                                                        "/etc/evictd/config.yaml"], mounts=mounts)
    assert code == 0, output
    assert output.startswith("/var/lib/evictd/mode: dry-run: "), output
    assert (state / "mode").read_text(encoding="utf-8") == "dry-run\n"

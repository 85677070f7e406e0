"""The chart's commands as README.md and deploy/helm/evictd/README.md give them, checked offline with the real helm.

Read from the documents' marked blocks by tests/documented_commands.py, exactly as written: the namespace made and
labelled for the privileged Pod Security level by the operator, then `helm install`, `upgrade`, `rollback` and
`uninstall` of one release in that namespace, never `--create-namespace`. The install runs as `helm install
--dry-run=client` (offline with Helm 4; Helm 3.17 asks a cluster even then) and, like the upgrade, as `helm template`
with the same chart and flags; neither renders a Namespace, so `helm uninstall` cannot delete the namespace. Run on a cluster: the real-cluster tier can take the
same list (`documented_commands.lifecycle`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from documented_commands import (
    CHART_README,
    DOCUMENTS,
    HELM_ACTIONS,
    MARKER,
    README,
    REPO,
    Command,
    Lifecycle,
    lifecycle,
)
from helm_tool import CHART, helm

PSA_PRIVILEGED = "pod-security.kubernetes.io/enforce=privileged"


def documented(path: Path) -> Lifecycle:
    return lifecycle(path)


def chart_of(command: Command) -> Path:
    """The chart a helm install/upgrade names, as the checkout's root resolves it."""
    return (REPO / command.argv[3]).resolve()


def as_template(command: Command) -> list[str]:
    """The command's words with its action replaced by `template`: the same release, chart and flags."""
    assert command.program == "helm" and command.action in ("install", "upgrade")
    return ["template", *command.argv[2:]]


def rendered(command: Command) -> list[dict[str, Any]]:
    done = helm(*as_template(command), cwd=REPO)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.mark.parametrize("path", DOCUMENTS, ids=["README", "chart-README"])
def test_each_document_gives_the_lifecycle_in_one_namespace(path: Path) -> None:
    steps = documented(path)
    assert list(steps.helm) == list(HELM_ACTIONS)
    namespace = steps.helm["install"].option("--namespace")
    assert namespace == "evictd-system"
    for command in steps.helm.values():
        assert command.argv[2] == "evictd", command.text
        assert command.option("--namespace") == namespace, command.text
        assert "--create-namespace" not in command.argv, command.text
    for action in ("install", "upgrade"):
        assert chart_of(steps.helm[action]) == CHART.resolve(), steps.helm[action].text
    # The operator's namespace, labelled before the install so the privileged pods are admitted from the start.
    assert [command.argv[:4] for command in steps.namespace] == [
        ("kubectl", "create", "namespace", namespace), ("kubectl", "label", "namespace", namespace)]
    assert PSA_PRIVILEGED in steps.namespace[1].argv
    assert steps.commands[-1] is steps.helm["uninstall"]


def test_both_documents_give_the_same_commands() -> None:
    readme, chart_readme = (documented(path) for path in (README, CHART_README))
    assert [c.argv for c in readme.commands] == [c.argv for c in chart_readme.commands]


@pytest.mark.parametrize("action", ["install", "upgrade"])
def test_install_and_upgrade_render_with_helm_template(action: str) -> None:
    command = documented(README).helm[action]
    objects = rendered(command)
    kinds = {obj["kind"] for obj in objects}
    assert {"DaemonSet", "ConfigMap", "ServiceAccount"} <= kinds
    assert "Namespace" not in kinds, "the chart must not own the namespace: helm uninstall would delete it"
    namespaced = [obj for obj in objects if obj["metadata"].get("namespace")]
    assert namespaced and {obj["metadata"]["namespace"] for obj in namespaced} == {command.option("--namespace")}
    [config] = [obj["data"]["config.yaml"] for obj in objects if obj["kind"] == "ConfigMap"
                and obj["metadata"]["name"] == "evictd-config"]
    assert [doc.get("dryRun") for doc in yaml.safe_load_all(config) if doc and doc["kind"] == "EvictdConfiguration"] \
        == [True], "as documented, the install starts in dry-run"


def test_install_runs_as_written_as_a_client_dry_run() -> None:
    command = documented(README).helm["install"]
    done = helm(*command.argv[1:], "--dry-run=client", cwd=REPO)
    assert "STATUS: pending-install" in done.stdout and "NOTES:" in done.stdout
    assert "kind: Namespace" not in done.stdout


def test_no_document_installs_with_create_namespace() -> None:
    # Helm would make the namespace without the Pod Security label, and clusters enforcing baseline or restricted
    # would refuse the privileged pods.
    pages = [*DOCUMENTS, *sorted((REPO / "docs").glob("*.md")), REPO / "deploy" / "kubernetes" / "README.md"]
    offending = [f"{page.relative_to(REPO)}:{number}" for page in pages
                 for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)
                 if re.search(r"helm (install|upgrade)\b.*--create-namespace", line)]
    assert offending == []


# ------------------------------------------------------------------------ the reader refuses what it should

BLOCK = """\
{marker}

```sh
kubectl create namespace evictd-system
kubectl label namespace evictd-system \\
  pod-security.kubernetes.io/enforce=privileged   # admitted from the start
{helm}
```
"""
IN_ORDER = ("helm install evictd deploy/helm/evictd --namespace evictd-system\n"
            "helm upgrade evictd deploy/helm/evictd --namespace evictd-system\n"
            "helm rollback evictd --namespace evictd-system\n"
            "helm uninstall evictd --namespace evictd-system")


def test_the_reader_joins_continued_lines_and_drops_comments(tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    page.write_text(BLOCK.format(marker=MARKER, helm=IN_ORDER), encoding="utf-8")
    steps = lifecycle(page)
    label = steps.namespace[1]
    assert label.text == "kubectl label namespace evictd-system pod-security.kubernetes.io/enforce=privileged"
    assert label.argv[-1] == PSA_PRIVILEGED and label.line == 5
    assert steps.helm["rollback"].argv == ("helm", "rollback", "evictd", "--namespace", "evictd-system")


@pytest.mark.parametrize(("text", "complaint"), [
    (BLOCK.format(marker="", helm=IN_ORDER), "0 lines"),
    (BLOCK.format(marker=MARKER, helm=IN_ORDER) * 2, "2 lines"),
    (BLOCK.format(marker=MARKER, helm=IN_ORDER.replace("helm rollback", "helm history")), "'history' where 'rollback'"),
    (BLOCK.format(marker=MARKER, helm="\n".join(IN_ORDER.splitlines()[:3])), "uninstall missing"),
    (BLOCK.format(marker=MARKER, helm=IN_ORDER + "\nkubectl delete namespace evictd-system"), "kubectl after"),
    (BLOCK.format(marker=MARKER, helm=IN_ORDER).replace("```sh", "```yaml"), "not followed by a shell code block"),
])
def test_the_reader_refuses_a_block_out_of_shape(text: str, complaint: str, tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    page.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(complaint)):
        lifecycle(page)

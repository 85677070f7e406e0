"""The real helm of `make helm` (deploy/helm/provision-helm.sh), and the chart rendered with it.

Used by tests/deploy/test_helm_chart.py and the real-cluster chart test. A missing helm fails the test with how to
get it: never a skip.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "evictd"
HELM_CACHE = Path("/var/tmp/evictd-helm-cache")
HELM = HELM_CACHE / "bin" / "helm"
HELM_VERSION = "v4.1.4"
NAMESPACE = "evictd-system"
RELEASE = "evictd"


def helm(*args: str, check: bool = True, timeout_s: float = 120.0, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the provisioned helm (in ``cwd``: a documented command's relative chart path); with ``check``, fail the
    test with its output when it exits non-zero."""
    if not HELM.is_file():
        pytest.fail(f"helm not found at {HELM}: `make helm` (deploy/helm/provision-helm.sh) provisions it", pytrace=False)
    done = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=timeout_s, check=False, env=env,
                          cwd=cwd)
    if check and done.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stderr}", pytrace=False)
    return done


def values_file(folder: Path, values: dict[str, Any]) -> Path:
    path = folder / "values.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    return path


def render(values: Path | None = None, *, namespace: str = NAMESPACE, chart: Path | str = CHART) -> list[dict[str, Any]]:
    """`helm template` of the chart: its objects, in order."""
    args = ["template", RELEASE, str(chart), "--namespace", namespace]
    if values is not None:
        args += ["--values", str(values)]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]

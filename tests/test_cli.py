"""The `evictd` command as a user runs it: real processes, real files, exit codes and output contracts."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evictd import __version__
from evictd.commands.simulate import parse_scenario
from evictd.core.saved_state import STATE_VERSION, threshold_record
from real_cgroups import CGROUP_MOUNT, temporary_cgroup

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.yaml"))


def evictd(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- check-config -----------------------------------------------------------------------------------------

def test_check_config_defaults_json() -> None:
    result = evictd("check-config", "--output", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["thresholds"][0] == {"signal": "memory.available", "operator": "LessThan",
                                         "value": {"quantity": "100Mi"}, "gracePeriodSeconds": 0,
                                         "minReclaim": None}
    signals = [t["signal"] for t in document["thresholds"]]
    assert signals == ["memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
                       "imagefs.inodesFree", "allocatableMemory.available", "containerfs.available",
                       "containerfs.inodesFree"]
    nodefs = document["thresholds"][1]
    assert nodefs["value"] == {"percentage": 0.10000000149011612}


def test_check_config_layers_files_then_flags(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", """
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard: {memory.available: 1Gi, nodefs.available: 5%}
evictionSoft: {memory.available: 2Gi}
evictionSoftGracePeriod: {memory.available: 1.5s}
evictionMinimumReclaim: {memory.available: "0"}
enforceNodeAllocatable: []
""")
    second = write(tmp_path, "b.yaml", """
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionMinimumReclaim: {memory.available: 10%}
---
apiVersion: evictd.io/v1alpha1
kind: EvictdConfiguration
housekeepingInterval: 2s
""")
    result = evictd("check-config", "--config", first, "--config", second, "--eviction-hard=memory.available<500Mi",
                    "--output", "json")
    assert result.returncode == 0, result.stderr
    thresholds = json.loads(result.stdout)["thresholds"]
    assert thresholds == [
        {"signal": "memory.available", "operator": "LessThan", "value": {"quantity": "500Mi"},
         "gracePeriodSeconds": 0, "minReclaim": {"percentage": 0.10000000149011612}},
        {"signal": "memory.available", "operator": "LessThan", "value": {"quantity": "2Gi"},
         "gracePeriodSeconds": 1.5, "minReclaim": {"percentage": 0.10000000149011612}},
    ]


def test_check_config_zero_min_reclaim_is_a_quantity(tmp_path: Path) -> None:
    config = write(tmp_path, "k.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                   "evictionHard: {pid.available: 1k}\nevictionMinimumReclaim: {pid.available: '0'}\n")
    result = evictd("check-config", "--config", config, "--output", "json")
    assert json.loads(result.stdout)["thresholds"][0]["minReclaim"] == {"quantity": "0"}


def test_check_config_text_and_layouts(tmp_path: Path) -> None:
    result = evictd("check-config", "--config", "config/kubelet-config.yaml", "--dedicated-imagefs")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["SIGNAL", "KIND", "THRESHOLD", "GRACE", "MIN-RECLAIM"]
    assert ["containerfs.available", "hard", "<", "15%", "0s", "-"] in [line.split() for line in lines]
    assert "pressure transition period: 300s" in result.stdout


@pytest.mark.parametrize(
    ("args", "contents", "expected"),
    [
        (["--eviction-hard=memory.available>1Gi"], None,
         'evictd: invalid argument "memory.available>1Gi" for "--eviction-hard" flag: malformed pair, '
         "expect string<string"),
        ([], "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: {memory.available: 1Gb}\n",
         "evictd: evictionHard[memory.available]: invalid value '1Gb': quantities must match the regular "
         "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        ([], "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionSoft: {memory.available: 1Gi}\n",
         "evictd: evictionSoftGracePeriod[memory.available]: missing: grace period must be specified "
         "for the soft eviction threshold memory.available"),
        ([], "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nhousekeepingIntervl: 5s\n",
         "evictd: EvictdConfiguration: housekeepingIntervl: invalid value '5s': unknown field in EvictdConfiguration "
         '(did you mean "housekeepingInterval"?)'),
        ([], "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nhousekeepingInterval: -5s\n",
         "evictd: EvictdConfiguration: housekeepingInterval: invalid value '-5s': must be a positive duration"),
        ([], "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1\n",
         'no kind "KubeletConfiguration" is registered for version "kubelet.config.k8s.io/v1"'),
        ([], "evictionHard: [\n", "invalid YAML"),
        ([], "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nrecorderMaxBytes: 1000\n",
         "evictd: EvictdConfiguration: recorderMaxBytes: invalid value 1000: must be at least 1048576 (1 MiB)"),
        ([], "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\npsiWindow: 30s\n",
         "evictd: EvictdConfiguration: psiWindow: invalid value '30s': PSI trigger window must be between 500ms and 10s"),
    ],
    ids=["bad-flag", "bad-quantity", "soft-without-grace", "unknown-evictd-field", "negative-interval",
         "wrong-api-version", "broken-yaml", "recorder-too-small", "psi-window-over-10s"],
)
def test_bad_configuration_exits_2_with_one_line(tmp_path: Path, args: list[str], contents: str | None,
                                                 expected: str) -> None:
    config = ["--config", write(tmp_path, "bad.yaml", contents)] if contents else []
    result = evictd("check-config", *config, *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert expected in result.stderr


KUBELET_HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def test_a_kubelet_config_typo_is_a_warning_naming_the_nearest_field_and_an_error_with_strict(tmp_path: Path) -> None:
    config = write(tmp_path, "k.yaml", KUBELET_HEADER + "evictionHardd: {memory.available: 1Gi}\n")
    lenient = evictd("check-config", "--config", config)
    assert lenient.returncode == 0, lenient.stderr
    assert lenient.stderr.count("\n") == 1, lenient.stderr
    assert "evictionHardd" in lenient.stderr and 'did you mean "evictionHard"?' in lenient.stderr
    assert lenient.stderr.startswith("warning: ")
    strict = evictd("check-config", "--strict", "--config", config)
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr.count("\n") == 1 and "Traceback" not in strict.stderr
    assert "evictionHardd" in strict.stderr and 'did you mean "evictionHard"?' in strict.stderr


def test_every_kubelet_field_of_v1_36_is_accepted_without_a_warning(tmp_path: Path) -> None:
    # Fields from all over the v1beta1 type, the newest among them (userNamespaces, failCgroupV1,
    # imagePullCredentialsVerificationPolicy, memoryReservationPolicy), and a node's ordinary ones.
    config = write(tmp_path, "k.yaml", KUBELET_HEADER + """
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: /etc/ca.crt}}
authorization: {mode: Webhook}
cgroupDriver: systemd
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
crashLoopBackOff: {maxContainerRestartPeriod: 30s}
failCgroupV1: false
featureGates: {NodeSwap: true}
imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages
logging: {format: text}
memoryReservationPolicy: None
memorySwap: {swapBehavior: NoSwap}
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
tracing: {samplingRatePerMillion: 0}
userNamespaces: {idsPerPod: 65536}
""")
    result = evictd("check-config", "--strict", "--config", config)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert evictd("check-config", "--strict", "--config", "config/kubelet-config.yaml").stderr == ""


def test_a_config_document_without_kind_says_what_a_config_file_needs(tmp_path: Path) -> None:
    result = evictd("check-config", "--config", write(tmp_path, "k.yaml", "evictionHard: {memory.available: 1Gi}\n"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "None" not in result.stderr
    assert "kind: missing:" in result.stderr and "kind: KubeletConfiguration" in result.stderr
    assert "only a scenario's config may leave them out" in result.stderr


NODE_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /{root}
{kubelet}"""


def test_check_config_reports_the_node_memory_protection_of_this_machine(tmp_path: Path) -> None:
    # The kubelet's cgroupRoot is a private cgroup of the real v1 memory hierarchy, its kubepods limited.
    with temporary_cgroup(CGROUP_MOUNT / "memory") as root:
        (root / "kubepods").mkdir()
        (root / "kubepods" / "memory.limit_in_bytes").write_text(str(512 << 20))
        config = write(tmp_path, "k.yaml", NODE_CONFIG.format(root=root.name, kubelet="systemReserved: {memory: 1Gi}\n"))
        text = evictd("check-config", "--config", config)
        as_json = evictd("check-config", "--config", config, "-o", "json")
    assert text.returncode == as_json.returncode == 0, text.stderr + as_json.stderr
    limit = f"{root}/kubepods/memory.limit_in_bytes"
    section = text.stdout.split("\n\nnode memory protection:\n", 1)
    assert len(section) == 2 and "\n\nprotections against thrash:" in section[0], "after what it printed"
    said = [line.split(None, 1) for line in section[1].splitlines() if not line.startswith("    ")]
    assert said == [
        ["ok", "systemReserved.memory, kubeReserved.memory: systemReserved.memory=1Gi, kubeReserved.memory=absent"],
        ["ok", "enforceNodeAllocatable: [pods]"],
        ["ok", "enforceNodeAllocatable system-reserved, systemReservedCgroup: not enforced, systemReservedCgroup=unset"],
        ["ok", "enforceNodeAllocatable kube-reserved, kubeReservedCgroup: not enforced, kubeReservedCgroup=unset"],
        ["ok", f"{limit}: {512 << 20}"],
        ["ok", "memory.min, memory.low: cgroup v1: none"],
    ]
    findings = json.loads(as_json.stdout)["node_protection"]
    assert [(f["status"], f["what"], f["value"]) for f in findings][4] == ("ok", limit, str(512 << 20))
    assert all(set(f) == {"status", "what", "value", "detail", "advice"} for f in findings) and len(findings) == 6


def test_check_config_warns_where_nothing_protects_and_still_exits_0(tmp_path: Path) -> None:
    with temporary_cgroup(CGROUP_MOUNT / "memory") as root:  # no kubepods cgroup under it: no kubelet here
        config = write(tmp_path, "k.yaml", NODE_CONFIG.format(root=root.name, kubelet="enforceNodeAllocatable: []\n"))
        result = evictd("check-config", "--config", config, "-o", "json")
        offline = evictd("check-config", "--config", config, "--config-only")
    assert result.returncode == offline.returncode == 0, result.stderr + offline.stderr
    warned = {f["what"]: f for f in json.loads(result.stdout)["node_protection"] if f["status"] == "warning"}
    assert set(warned) == {"systemReserved.memory, kubeReserved.memory", "enforceNodeAllocatable",
                           f"{root}/kubepods/memory.limit_in_bytes"}
    assert warned[f"{root}/kubepods/memory.limit_in_bytes"]["value"] == "not found"
    assert "systemReserved: {memory: 1Gi}" in warned["systemReserved.memory, kubeReserved.memory"]["advice"]
    # --config-only: the configuration's findings alone, this machine's cgroups not read.
    assert "node memory protection: (configuration only: cgroups not read)" in offline.stdout
    assert "memory.limit_in_bytes" not in offline.stdout and "warning  enforceNodeAllocatable: []" in offline.stdout


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    result = evictd("check-config", "--config", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr and "No such file or directory" in result.stderr


# --- check-config and shadow-report: who evicts, evictd or the node's kubelet --------------------------------

KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
KUBELET_OFF = KUBELET + ('evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", '
                         'imagefs.available: "0%", imagefs.inodesFree: "0%"}\n')
KUBELET_BELOW = KUBELET + ("evictionHard: {memory.available: 100Mi, nodefs.available: 5%, nodefs.inodesFree: 3%, "
                           "imagefs.available: 10%, imagefs.inodesFree: 3%}\n")


def handover(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    document: dict[str, object] = json.loads(result.stdout)["handover"]
    return document


def test_check_config_verifies_the_backstop_ordering_against_the_kubelets_configuration(tmp_path: Path) -> None:
    ours = "config/kubelet-config.yaml"  # memory.available<200Mi, nodefs.available<10%, ..., imagefs.available<15%
    below = write(tmp_path, "below.yaml", KUBELET_BELOW)
    text = evictd("check-config", "--config", ours, "--kubelet-config", below)
    assert text.returncode == 0, text.stderr
    assert f"who evicts (the kubelet's configuration: --kubelet-config {below}):" in text.stdout
    assert "backstop mode: on every signal both guard, evictd's hard threshold is above the kubelet's" in text.stdout
    document = handover(evictd("check-config", "--config", ours, "--kubelet-config", below, "-o", "json"))
    signals = {s["signal"]: s for s in document["signals"]}  # type: ignore[attr-defined]
    assert document["mode"] == "backstop" and signals["memory.available"]["evicts"] == "evictd-first"
    assert signals["imagefs.inodesFree"]["evicts"] == "kubelet"  # evictd has none there: the kubelet alone

    # The kubelet's memory threshold at evictd's: not a backstop any more, and said so on stderr.
    same = write(tmp_path, "same.yaml", KUBELET_BELOW.replace("100Mi", "200Mi"))
    result = evictd("check-config", "--config", ours, "--kubelet-config", same)
    assert result.returncode == 0 and "not a backstop" in result.stdout
    # The same threshold is a race: a problem line with the fix, on stderr and under the table.
    race = ("memory.available: both at the same threshold: whichever checks first evicts, the kubelet and evictd race; "
            "fix: lower the kubelet's threshold for this signal below evictd's hard threshold (a backstop), or to 0% "
            "(evictd alone)")
    assert f"warning: memory.available: both, at the same threshold: {race.split(': ', 1)[1]}" in result.stderr
    assert f"  {race}" in result.stdout
    above = write(tmp_path, "above.yaml", KUBELET_BELOW.replace("100Mi", "300Mi"))
    result = evictd("check-config", "--config", ours, "--kubelet-config", above)
    assert "warning: memory.available: the kubelet first, then evictd: the kubelet's threshold is above" in result.stderr
    assert "fix: lower the kubelet's threshold for this signal below evictd's hard threshold" in result.stderr


def test_check_config_says_who_enforces_ephemeral_storage_limits(tmp_path: Path) -> None:
    ours = "config/kubelet-config.yaml"
    isolated = write(tmp_path, "isolated.yaml", KUBELET_BELOW)  # localStorageCapacityIsolation absent: true
    text = evictd("check-config", "--config", ours, "--kubelet-config", isolated)
    assert ("ephemeral-storage limits enforced by: kubelet (ephemeralStorageLimitsEnforcer: auto, and the kubelet's "
            "localStorageCapacityIsolation is true)") in text.stdout.splitlines()
    unknown = evictd("check-config", "--config", ours, "--kubelet-config", "", "-o", "json")
    assert unknown.returncode == 0, unknown.stderr
    assert json.loads(unknown.stdout)["ephemeralStorageLimits"] == {
        "enforcer": "kubelet", "setting": "auto",
        "reason": "ephemeralStorageLimitsEnforcer: auto, and the kubelet's configuration was not read (its default, "
                  "localStorageCapacityIsolation: true, assumed)"}
    off = write(tmp_path, "off.yaml", KUBELET_BELOW + "localStorageCapacityIsolation: false\n")
    document = json.loads(evictd("check-config", "--config", ours, "--kubelet-config", off, "-o", "json").stdout)
    assert document["ephemeralStorageLimits"]["enforcer"] == "evictd"
    # Both off: nobody enforces them, and that is a warning.
    both_off = write(tmp_path, "evictd-off.yaml", KUBELET + "localStorageCapacityIsolation: false\n")
    result = evictd("check-config", "--config", both_off, "--kubelet-config", off)
    assert result.returncode == 0 and "ephemeral-storage limits enforced by: nobody (" in result.stdout
    assert "warning: nobody enforces pods' ephemeral-storage limits" in result.stderr


def test_check_config_without_kubelet_version_says_run_takes_it_from_the_node(tmp_path: Path) -> None:
    # check-config reads no API: without kubeletVersion it follows v1.36 and says where `run` finds the version.
    unset = evictd("check-config", "--config-only", "--config", "config/kubelet-config.yaml", "-o", "json")
    assert unset.returncode == 0, unset.stderr
    semantics = json.loads(unset.stdout)["kubelet_semantics"]
    assert (semantics["version"], semantics["hugepage_aware_eviction"]) == ("v1.36", False)
    assert semantics["version_source"] == (
        "evictd's default: kubeletVersion not set; check-config reads no Node; `evictd run` with the Kubernetes API "
        "takes the version from its Node's nodeInfo.kubeletVersion at start-up")
    given = write(tmp_path, "given.yaml", "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                                          "kubeletVersion: v1.37.1\n")
    text = evictd("check-config", "--config-only", "--config", "config/kubelet-config.yaml", "--config", given)
    assert text.returncode == 0, text.stderr
    assert "kubelet semantics followed: v1.37 (kubeletVersion v1.37.1); HugepageAwareEviction: on" in text.stdout


def test_check_config_says_nobody_evicts_when_evictd_lost_its_thresholds_and_the_kubelets_are_off(
        tmp_path: Path) -> None:
    lost = write(tmp_path, "lost.yaml", KUBELET + "evictionHard: {}\n")
    off = write(tmp_path, "off.yaml", KUBELET_OFF)
    result = evictd("check-config", "--config", lost, "--kubelet-config", off)
    assert result.returncode == 0
    assert result.stdout.startswith("NO EVICTION THRESHOLDS: no eviction threshold configured")
    assert "warning: no eviction threshold configured" in result.stderr
    assert "NO EVICTION: neither evictd nor the kubelet has a threshold" in result.stdout
    assert "warning: memory.available: nobody: no threshold on either side" in result.stderr
    document = handover(evictd("check-config", "--config", lost, "--kubelet-config", off, "-o", "json"))
    assert document["mode"] == "none"
    # evictd's thresholds with the kubelet's at 0%: evictd alone, nothing wrong as long as it acts.
    alone = handover(evictd("check-config", "--config", "config/kubelet-config.yaml", "--kubelet-config", off,
                            "-o", "json"))
    assert alone["mode"] == "evictd-alone"


def test_check_config_reads_the_kubelets_file_from_the_kubelet_root_by_default(tmp_path: Path) -> None:
    root = tmp_path / "kubelet"
    root.mkdir()
    ours = write(tmp_path, "evictd.yaml", (ROOT / "config" / "kubelet-config.yaml").read_text() + "---\n"
                 f"apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nkubeletRootDir: {root}\n")
    missing = handover(evictd("check-config", "--config", ours, "-o", "json"))
    assert missing["mode"] == "kubelet-unknown" and "not found at" in str(missing["kubeletConfig"])
    (root / "config.yaml").write_text(KUBELET_OFF)
    found = handover(evictd("check-config", "--config", ours, "-o", "json"))
    assert found["mode"] == "evictd-alone" and str(found["kubeletConfig"]).startswith(str(root / "config.yaml"))
    none = handover(evictd("check-config", "--config", ours, "--kubelet-config", "", "-o", "json"))
    assert none["mode"] == "kubelet-unknown"


@pytest.mark.parametrize(("content", "named"), [
    pytest.param(None, "--kubelet-config: ", id="missing"),
    pytest.param(KUBELET + "evictionHard: {memory.available: -1Gi}\n", "memory.available", id="bad-threshold"),
    pytest.param(KUBELET + "evictionHard: [memory.available]\n", "evictionHard", id="bad-type"),
    pytest.param("apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n", ".kind", id="not-kubelet"),
])
def test_a_kubelet_config_named_by_the_option_that_cannot_be_used_exits_2(tmp_path: Path, content: str | None,
                                                                          named: str) -> None:
    path = tmp_path / "kubelet.yaml"
    if content is not None:
        path.write_text(content)
    result = evictd("check-config", "--config", "config/kubelet-config.yaml", "--kubelet-config", str(path))
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert str(path) in result.stderr and named in result.stderr, result.stderr


def test_shadow_report_says_who_would_evict_once_evictd_acts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    side = {"pod": "shop/web", "resource": "memory"}
    (state / "shadow.jsonl").write_text(json.dumps({"outcome": "agree", "time": "2026-11-25T10:00:00Z",
                                                    "evictd": side, "kubelet": side}) + "\n")
    ours = write(tmp_path, "evictd.yaml", (ROOT / "config" / "kubelet-config.yaml").read_text() + "---\n"
                 f"apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\nstateDir: {state}\ndryRun: true\n")
    below = write(tmp_path, "below.yaml", KUBELET_BELOW)
    text = evictd("shadow-report", "--config", ours, "--kubelet-config", below)
    assert text.returncode == 0, text.stderr
    assert "who would evict once evictd acts (dryRun: false)" in text.stdout
    assert "evictd, the kubelet as backstop" in text.stdout and "backstop mode" in text.stdout
    assert handover(evictd("shadow-report", "--config", ours, "--kubelet-config", below, "-o", "json"))["mode"] \
        == "backstop"
    bare = evictd("shadow-report", "--state-dir", str(state))
    assert "pass evictd's --config (and --kubelet-config) to see" in bare.stdout


# --- simulate ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_simulate_in_both_formats(example: Path) -> None:
    as_json = evictd("simulate", str(example), "--output", "json")
    assert as_json.returncode == 0, as_json.stderr
    steps = json.loads(as_json.stdout)["steps"]
    assert steps and all(set(step) == {"at", "conditions", "thresholdsMet", "reclaim", "reclaimSucceeded",
                                       "ranking", "evicted"} for step in steps)
    assert any(step["evicted"] for step in steps)
    as_text = evictd("simulate", str(example))
    assert as_text.returncode == 0 and as_text.stdout.startswith("AT ")
    for step in steps:
        for eviction in step["evicted"]:
            assert f"evict {eviction['namespace']}/{eviction['name']}" in as_text.stdout


def test_memory_example_story() -> None:
    steps = json.loads(evictd("simulate", "config/examples/01-memory-pressure.yaml", "--output", "json").stdout)["steps"]
    assert [bool(s["conditions"]) for s in steps] == [False, True, True, True, True, True, True, False]
    assert [[e["name"] for e in s["evicted"]] for s in steps] == [[], [], [], ["batch-job"], ["web"], [], [], []]
    soft, hard = steps[3]["evicted"][0], steps[4]["evicted"][0]
    assert (soft["gracePeriodSeconds"], hard["gracePeriodSeconds"]) == (10, 1)
    assert "kube-system/kube-proxy-x7k2p" in steps[3]["ranking"]


def test_a_scenario_starts_from_its_engine_state(tmp_path: Path) -> None:
    """01-memory-pressure from t=60 on, its soft grace period (met since t=10) under way in `engineState`, as a
    restarted daemon restores it: batch-job goes at t=100 as in the whole example; without it, not at all."""
    document = yaml.safe_load((ROOT / "config" / "examples" / "01-memory-pressure.yaml").read_text())
    steps = [{**step, "at": step["at"] - 60} for step in document["steps"] if step["at"] >= 60]
    soft = next(t for t in parse_scenario(document).config.thresholds if not t.hard)
    saved_at = 1_795_000_000.0  # the wall-clock time of the first step (t=60)
    state = {"version": STATE_VERSION, "node": "node-1", "savedAt": saved_at,
             "firstObservedAt": [{"threshold": threshold_record(soft), "at": saved_at - 50}], "thresholdsMet": [],
             "conditionLastObservedAt": {"MemoryPressure": saved_at}, "lastObservations": {}}
    evicted = {}
    for name, scenario in (("restored", {**document, "steps": steps, "engineState": state}),
                           ("fresh", {**document, "steps": steps})):
        result = evictd("simulate", write(tmp_path, f"{name}.yaml", yaml.safe_dump(scenario)), "--output", "json")
        assert result.returncode == 0, result.stderr
        evicted[name] = [(s["at"], e["name"]) for s in json.loads(result.stdout)["steps"] for e in s["evicted"]]
    assert evicted["restored"] == [(40, "batch-job"), (50, "web")]
    assert evicted["fresh"] == [(50, "web")], "afresh, the grace period would have started again at t=60"


def test_simulate_record_takes_a_new_folder_and_says_when_it_cannot_write(tmp_path: Path) -> None:
    example = "config/examples/01-memory-pressure.yaml"
    assert evictd("simulate", example, "--record", str(tmp_path / "state")).returncode == 0
    segments = sorted((tmp_path / "state" / "recording").iterdir())
    again = evictd("simulate", example, "--record", str(tmp_path / "state"))
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == (f"evictd: --record: invalid value '{tmp_path / 'state'}': already holds a recording "
                            f"({tmp_path / 'state' / 'recording'}); record into a new folder\n")
    assert sorted((tmp_path / "state" / "recording").iterdir()) == segments  # left as it was

    (tmp_path / "file").write_text("")
    unwritable = evictd("simulate", example, "--record", str(tmp_path / "file" / "state"))
    assert (unwritable.returncode, unwritable.stdout) == (1, "")
    assert unwritable.stderr == (f"evictd: cannot write the recording into {tmp_path / 'file' / 'state' / 'recording'}"
                                 ": Not a directory\n")


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("steps: [{at: 5}, {at: 1}]\n", "steps[1].at: invalid value 1: must not be earlier than the previous step"),
        ("steps: [{at: '5'}]\n", "steps[0].at: invalid value '5': must be a number of seconds"),
        ("stepz: []\n", "stepz"),
        ("config: {evictionHard: {memory.available: 0}}\n", "config.evictionHard[memory.available]"),
        ("pods: [{metadata: {name: 5}}]\n", "pods[0].metadata.name"),
        ("steps: [{at: 0, summary: {node: {memory: {availableBytes: -1}}}}]\n",
         "steps[0].summary.node.memory.availableBytes"),
        ("layout: {dedicatedImageFs: 'yes'}\n", "layout.dedicatedImageFs"),
        ("engineState: {savedAt: soon}\nsteps: [{at: 0}]\n", "engineState.savedAt: invalid value 'soon'"),
        ("engineState: {version: 9, node: n, savedAt: 1}\nsteps: [{at: 0}]\n",
         "engineState: not a usable engine state: format version 9"),
    ],
    ids=["time-goes-back", "at-not-number", "unknown-field", "bad-config", "bad-pod", "bad-summary", "bad-layout",
         "state-not-timed", "state-foreign"],
)
def test_bad_scenarios_exit_2_naming_the_path(tmp_path: Path, scenario: str, expected: str) -> None:
    result = evictd("simulate", write(tmp_path, "s.yaml", scenario), "--output", "json")
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr and result.stdout == ""


# --- --version ------------------------------------------------------------------------------------------------

def test_version_prints_the_installed_distribution_version() -> None:
    # The version the package metadata carries (pyproject.toml reads it from evictd.__version__), so an image
    # shows which evictd it holds.
    expected = importlib.metadata.version("evictd")
    assert expected == __version__
    result = evictd("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"evictd {expected}\n" and result.stderr == ""


# --- start-up contract --------------------------------------------------------------------------------------

def test_offline_commands_do_not_import_kubernetes_or_grpc() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from evictd.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['check-config']) == 0\n"
        "    assert main(['simulate', 'config/examples/01-memory-pressure.yaml', '--output', 'json']) == 0\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'kubernetes', 'grpc', 'structlog', 'psutil', 'prometheus_client'})\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --- the command line itself ------------------------------------------------------------------------------

def test_a_reader_that_closes_the_pipe_ends_evictd_quietly_with_the_sigpipe_status() -> None:
    reader, writer = os.pipe()
    os.close(reader)  # like `| head -3` once it has its lines: every write meets a closed pipe
    try:
        result = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config",
                                 "config/kubelet-config.yaml"], cwd=ROOT, stdout=writer, stderr=subprocess.PIPE,
                                text=True, timeout=60, check=False)
    finally:
        os.close(writer)
    assert result.stderr == ""
    assert result.returncode == 141
    shell = subprocess.run(f"{sys.executable} -m evictd check-config --config config/kubelet-config.yaml | head -1",
                           shell=True, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert shell.returncode == 0 and shell.stderr == "" and shell.stdout.split() == ["SIGNAL", "KIND", "THRESHOLD",
                                                                                      "GRACE", "MIN-RECLAIM"]


def test_version_and_every_subcommands_help_has_a_description_and_examples() -> None:
    version = evictd("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"evictd {__version__}"
    for command in (["check-config"], ["run"], ["shadow-report"], ["record"], ["record", "export"], ["replay"],
                    ["explain"], ["simulate"], ["mode"]):
        shown = evictd(*command, "--help")
        assert shown.returncode == 0, shown.stderr
        usage, description = shown.stdout.split("\n\n")[:2]
        assert usage.startswith(f"usage: evictd {' '.join(command)}")
        assert not description.lstrip().startswith(("positional arguments", "options")), shown.stdout
        examples = shown.stdout.split("examples:\n")[1].splitlines()
        assert examples and all(line.startswith(f"  evictd {command[0]}") or "| evictd" in line
                                for line in examples), shown.stdout
        if "--output" in shown.stdout:
            assert "-o {text,json}, --output {text,json}" in shown.stdout
            assert "json: one JSON document alone on stdout" in " ".join(shown.stdout.split())


def test_kubelet_flags_are_offered_only_where_thresholds_matter_and_options_are_never_abbreviated() -> None:
    for command, has_flags in ((["check-config"], True), (["run"], True), (["replay"], True), (["explain"], False),
                               (["record", "export"], False), (["shadow-report"], False), (["simulate"], False)):
        assert ("--eviction-hard" in evictd(*command, "--help").stdout) is has_flags, command
    refused = evictd("explain", "--last", "--eviction-hard=memory.available<1Gi")
    assert refused.returncode == 2 and "unrecognized arguments: --eviction-hard" in refused.stderr
    abbreviated = evictd("check-config", "--conf", "config/kubelet-config.yaml")
    assert abbreviated.returncode == 2 and abbreviated.stdout == ""
    assert "unrecognized arguments: --conf" in abbreviated.stderr
    short = evictd("check-config", "-o", "json", "--config", "config/kubelet-config.yaml")
    assert short.returncode == 0 and json.loads(short.stdout)["thresholds"]


def test_a_missing_kubeconfig_file_is_named_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    config = write(tmp_path, "e.yaml", "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                   f"kubeconfig: {missing}\nstateDir: {tmp_path / 'state'}\nmetricsBindAddress: 127.0.0.1:0\n")
    result = evictd("run", "--config", config, "--cycles", "1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("evictd: kubeconfig: invalid value ") and "Invalid kube-config" not in line
    assert line.endswith(f": cannot read {missing}: No such file or directory"), line



def test_a_malformed_kubeconfig_is_named_at_its_entry_not_in_pythons_words(tmp_path: Path) -> None:
    # The kubernetes package's loader said "'str' object has no attribute 'safe_get'" for this one (issue 38).
    kubeconfig = write(tmp_path, "kc.yaml", "apiVersion: v1\nclusters: [{name: c, cluster: {server: 'https://x'}}]\n"
                       "users: [{name: u, user: x}]\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                       "current-context: a\n")
    config = write(tmp_path, "e.yaml", "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                   f"kubeconfig: {kubeconfig}\nstateDir: {tmp_path / 'state'}\nmetricsBindAddress: 127.0.0.1:0\n")
    result = evictd("run", "--config", config, "--cycles", "1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("evictd: kubeconfig: invalid value '"), line  # a long path is shortened in the middle
    assert line.endswith("kc.yaml': malformed kubeconfig: users[0].user: a mapping expected, not 'x'"), line

def completions(*words: str) -> list[str]:
    """What bash completes for `words` (the last one being completed) with `evictd completion bash` loaded."""
    script = evictd("completion", "bash")
    assert script.returncode == 0, script.stderr
    shell = (f"{script.stdout}\ncomplete -p evictd >/dev/null || exit 3\n"
             f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
             '_evictd; printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", shell], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return sorted(line for line in done.stdout.splitlines() if line)


def test_bash_completion_generated_from_the_parser() -> None:
    assert completions("evictd", "che") == ["check-config"]
    assert completions("evictd", "--v") == ["--version"]
    assert completions("evictd", "check-config", "--out") == ["--output"]
    assert completions("evictd", "check-config", "--output", "") == ["json", "text"]
    assert completions("evictd", "replay", "-o", "j") == ["json"]
    assert completions("evictd", "record", "") == ["--help", "-h", "export"]
    assert completions("evictd", "record", "export", "--s") == ["--since", "--state-dir"]
    assert completions("evictd", "explain", "--eviction") == [], "no kubelet flags where they mean nothing"
    assert "--eviction-soft-grace-period" in completions("evictd", "run", "--eviction")
    assert completions("evictd", "check-config", "--config", "config/kubelet-c") == ["config/kubelet-config.yaml"]
    assert completions("evictd", "run", "--eviction-hard", "") == [], "a threshold is not a file name"


def zsh_completions(*words: str) -> tuple[str, list[str]]:
    """What zsh registers for evictd with `source <(evictd completion zsh)` in a bare zsh, and what it offers for
    `words`: the candidates the script's function gives as bashcompinit's `_bash_complete` calls it, matched
    against the word being completed as zsh's completion matches them (bashcompinit's compgen leaves that to zsh)."""
    script = evictd("completion", "zsh")
    assert script.returncode == 0, script.stderr
    shell = (f"{script.stdout}\nprint -r -- \"registered=${{_comps[evictd]}}\"\n"
             "emulate -L sh; setopt kshglob noshglob braceexpand\n"
             f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
             'cur="${COMP_WORDS[COMP_CWORD]}"; _evictd; for w in "${COMPREPLY[@]}"; do\n'
             '  case "$w" in "$cur"*) printf "%s\\n" "$w";; esac; done\n')
    done = subprocess.run(["zsh", "-f", "-c", shell], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "HOME": str(ROOT / "tests"), "ZDOTDIR": "/nonexistent"})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    registered, *offered = done.stdout.splitlines()
    return registered, sorted(line for line in offered if line)


def test_zsh_completion_offers_what_bash_completion_offers() -> None:
    registered, _ = zsh_completions("evictd", "")
    assert registered == "registered=_bash_complete -o default -F _evictd"
    for words in [("evictd", "che"), ("evictd", "check-config", "--out"), ("evictd", "check-config", "--output", ""),
                  ("evictd", "record", "export", "--s"), ("evictd", "run", "--eviction-hard", "")]:
        assert zsh_completions(*words)[1] == completions(*words), words
    assert zsh_completions("evictd", "che")[1] == ["check-config"]


def test_the_man_page_generated_from_the_parser_renders_without_warnings() -> None:
    page = evictd("man")
    assert page.returncode == 0, page.stderr
    checked = subprocess.run(["groff", "-man", "-ww", "-z"], input=page.stdout, capture_output=True, text=True,
                             timeout=60, check=False)
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    shown = subprocess.run(["man", "-l", "-"], input=page.stdout, capture_output=True, text=True, timeout=60,
                           check=False, env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "100"})
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert text.startswith("EVICTD(8)") and "evictd - Kubernetes node-pressure eviction, outside the kubelet" in text
    for command in ("check-config", "run", "shadow-report", "record export", "replay", "explain", "simulate"):
        assert f"usage: evictd {command}" not in text and f"evictd {command} [-h]" in text, command
    assert "--strict an unknown or duplicate KubeletConfiguration key is an error" in text
    assert "evictd record export --state-dir /var/lib/evictd | evictd simulate -" in text


def test_a_typo_in_a_scenarios_config_is_a_warning_as_in_a_config_file(tmp_path: Path) -> None:
    scenario = write(tmp_path, "s.yaml", "config:\n  evictionHardd: {memory.available: 1Gi}\nsteps: []\n")
    result = evictd("simulate", scenario)
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("warning: config.evictionHardd: ") and 'did you mean "evictionHard"?' in line

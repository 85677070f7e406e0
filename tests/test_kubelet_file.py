"""The node's kubelet configuration for the hand-over: found (the kubelet's command line, the file and drop-ins it
names, the known places) and read as the kubelet builds it (defaults, file, drop-ins, flags); a /configz answer;
`check-config --strict` as a pre-flight gate. Real processes named `kubelet` stand for the running kubelet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import evictd.kubelet_file as kubelet_file
from evictd.core.errors import ConfigError
from evictd.core.kubelet_config import DEFAULT_EVICTION_HARD
from evictd.kubelet_file import KnownFile, find_kubelet_file
from named_kubelet import named_kubelet, proc_of

ROOT = Path(__file__).resolve().parents[1]
CONFIGZ = ROOT / "tests" / "fixtures" / "configz" / "kubeadm-v1.36.json"
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
# evictd's shipped thresholds (config/kubelet-config.yaml): memory.available<200Mi, nodefs.available<10%, ...
OURS = "config/kubelet-config.yaml"


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def evictd(*args: str, proc: str | None = None) -> subprocess.CompletedProcess[str]:
    env = None if proc is None else {**__import__("os").environ, "EVICTD_PROC": proc}
    return subprocess.run([sys.executable, "-m", "evictd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False, env=env)


def handover(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    document: dict[str, object] = json.loads(result.stdout)["handover"]
    return document


def evicts(document: dict[str, object]) -> dict[str, str]:
    return {s["signal"]: s["evicts"] for s in document["signals"]}  # type: ignore[attr-defined]


# --- the running kubelet: its command line names its file and drop-ins, its flags apply last -----------------

def test_the_running_kubelets_file_dropins_and_flags_are_read_in_its_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path / "kubelet.yaml", KUBELET + "evictionHard: {memory.available: 100Mi, nodefs.available: 8%}\n"
                   "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}\n"
                   "evictionMaxPodGracePeriod: 60\n")
    write(tmp_path / "conf.d" / "10-eviction.conf", KUBELET + "evictionHard: {nodefs.available: 6%}\n"
          "evictionMaxPodGracePeriod: 45\n")
    flags = ("--kubeconfig", "/etc/kubernetes/kubelet.conf", f"--config={config}", "--config-dir",
             str(tmp_path / "conf.d"), "--eviction-soft", "memory.available<2Gi", "--v=2",
             "--eviction-max-pod-grace-period=15", "--enforce-node-allocatable=pods,kube-reserved",
             "--kube-reserved=memory=1Gi")
    with named_kubelet(*flags) as pid:
        monkeypatch.setenv("EVICTD_PROC", proc_of(tmp_path / "proc", pid))
        found = find_kubelet_file(None, "/nonexistent")
    assert found.path == config and found.eviction is not None
    assert found.note == (f"--config {config} of the kubelet (PID {pid}) + --config-dir {tmp_path / 'conf.d'} + its "
                          "flags: --eviction-soft, --eviction-max-pod-grace-period, --enforce-node-allocatable, "
                          "--kube-reserved")
    eviction = found.eviction
    assert dict(eviction.hard) == {"memory.available": "100Mi", "nodefs.available": "6%"}  # file < drop-in
    assert dict(eviction.soft) == {"memory.available": "2Gi"}  # < flag, the whole map
    assert dict(eviction.soft_grace_period) == {"memory.available": "1m"}  # the file's: no flag names it
    assert eviction.max_pod_grace_period_s == 15  # file 60 < drop-in 45 < flag 15
    assert eviction.enforce_node_allocatable == ("pods", "kube-reserved")


def test_a_kubelet_without_config_reads_no_file_and_has_only_its_flags_thresholds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with named_kubelet("--eviction-hard=imagefs.available<5%,nodefs.available<5%",
                       "--eviction-minimum-reclaim=imagefs.available=10%,nodefs.available=10%") as pid:
        monkeypatch.setenv("EVICTD_PROC", proc_of(tmp_path / "proc", pid))
        found = find_kubelet_file(None, str(tmp_path))
    assert found.path is None and found.eviction is not None
    assert found.note.startswith(f"no file (the kubelet (PID {pid}) has no --config")
    assert dict(found.eviction.hard) == {"imagefs.available": "5%", "nodefs.available": "5%"}
    assert dict(found.eviction.minimum_reclaim) == {"imagefs.available": "10%", "nodefs.available": "10%"}
    with named_kubelet("--v=2") as pid:
        monkeypatch.setenv("EVICTD_PROC", proc_of(tmp_path / "proc2", pid))
        bare = find_kubelet_file(None, str(tmp_path))
    assert bare.eviction is not None and dict(bare.eviction.hard) == {}  # no file: no default hard thresholds


def test_the_options_name_the_file_and_the_running_kubelets_flags_still_apply(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named = write(tmp_path / "named.yaml", KUBELET + "evictionHard: {memory.available: 100Mi}\n")
    own = write(tmp_path / "own.yaml", KUBELET + "evictionHard: {memory.available: 999Mi}\n")
    write(tmp_path / "own.d" / "10.conf", KUBELET + "evictionSoft: {memory.available: 1Gi}\n")
    with named_kubelet(f"--config={own}", f"--config-dir={tmp_path / 'own.d'}",
                       "--eviction-max-pod-grace-period=5") as pid:
        monkeypatch.setenv("EVICTD_PROC", proc_of(tmp_path / "proc", pid))
        found = find_kubelet_file(named, str(tmp_path))
    assert found.note == f"--kubelet-config {named} + the flags of the kubelet (PID {pid}): --eviction-max-pod-grace-period"
    assert found.eviction is not None and dict(found.eviction.hard) == {"memory.available": "100Mi"}
    assert dict(found.eviction.soft) == {}  # its --config-dir goes with its --config, which the option replaced
    assert found.eviction.max_pod_grace_period_s == 5


def test_the_command_line_given_by_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path / "kubelet.yaml", KUBELET + "evictionHard: {memory.available: 100Mi}\n")
    given = find_kubelet_file(None, str(tmp_path), flags=f"kubelet --config {config} --eviction-hard "
                                                         "'memory.available<150Mi'")
    assert given.note == f"--config {config} of --kubelet-flags + its flags: --eviction-hard"
    assert given.eviction is not None and dict(given.eviction.hard) == {"memory.available": "150Mi"}
    with named_kubelet(f"--config={config}") as pid:
        monkeypatch.setenv("EVICTD_PROC", proc_of(tmp_path / "proc", pid))
        by_pid = find_kubelet_file(None, str(tmp_path), pid=pid)
        # '' looks for no process: the known places instead.
        none = find_kubelet_file(None, str(tmp_path), flags="")
    assert by_pid.note == f"--config {config} of process {pid}"
    assert none.eviction is None and "no kubelet command line (--kubelet-flags '')" in none.note
    with pytest.raises(ConfigError, match=r"^--kubelet-cmdline-from-pid: invalid value 4194305: cannot read the "
                                          r"process's command line \(No such file or directory\)"):
        find_kubelet_file(None, str(tmp_path), pid=4194305)
    with pytest.raises(ConfigError, match=r"^--kubelet-flags: --config: invalid value '/absent.yaml': cannot read"):
        find_kubelet_file(None, str(tmp_path), flags="--config=/absent.yaml")


def test_what_was_found_without_an_option_is_only_noted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = write(tmp_path / "broken.yaml", KUBELET + "evictionHard: [memory.available]\n")
    with named_kubelet(f"--config={broken}") as pid, named_kubelet("--v=1") as other:
        monkeypatch.setenv("EVICTD_PROC", proc_of(tmp_path / "one", pid))
        found = find_kubelet_file(None, str(tmp_path))
        assert found.eviction is None
        assert found.note.startswith(f"--config {broken} of the kubelet (PID {pid}) cannot be used: ")
        monkeypatch.setenv("EVICTD_PROC", proc_of(tmp_path / "two", pid, other))
        several = find_kubelet_file(None, str(tmp_path))
    assert several.eviction is None
    assert f"2 kubelet processes ({min(pid, other)}, {max(pid, other)}): name one with --kubelet-cmdline-from-pid" \
        in several.note


def test_without_a_command_line_the_known_places_are_tried_in_order(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    kubeadm, eks, gke = tmp_path / "var-lib-kubelet" / "config.yaml", tmp_path / "eks" / "config.json", \
        tmp_path / "gke" / "kubelet-config.yaml"
    places = (KnownFile(str(kubeadm), "the default: kubeletRootDir/config.yaml"),
              KnownFile(str(eks), "EKS", str(tmp_path / "eks" / "config.json.d")), KnownFile(str(gke), "GKE"))
    monkeypatch.setattr(kubelet_file, "known_files", lambda root: places)
    missing = find_kubelet_file(None, str(tmp_path))
    assert missing.eviction is None and missing.note.startswith(f"not found at {kubeadm} (the default: "
                                                                f"kubeletRootDir/config.yaml), {eks} (EKS), {gke} (GKE);")
    write(gke, KUBELET + "evictionHard: {memory.available: 50Mi}\n")
    assert find_kubelet_file(None, str(tmp_path)).note == f"{gke} (GKE)"
    write(eks, json.dumps({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                           "evictionHard": {"memory.available": "100Mi"}}))
    write(tmp_path / "eks" / "config.json.d" / "00-nodeadm.conf", KUBELET + "evictionSoft: {memory.available: 1Gi}\n"
          "evictionSoftGracePeriod: {memory.available: 1m}\n")
    found = find_kubelet_file(None, str(tmp_path))
    assert found.note == f"{eks} (EKS) + {tmp_path / 'eks' / 'config.json.d'}"
    assert found.eviction is not None and dict(found.eviction.soft) == {"memory.available": "1Gi"}
    write(kubeadm, KUBELET)
    kubeadm_found = find_kubelet_file(None, str(tmp_path))
    assert kubeadm_found.note == f"{kubeadm} (the default: kubeletRootDir/config.yaml)"
    assert kubeadm_found.eviction is not None and dict(kubeadm_found.eviction.hard) == dict(DEFAULT_EVICTION_HARD)


# --- a /configz answer -----------------------------------------------------------------------------------------

def test_a_configz_answer_is_read_wherever_the_kubelets_file_is(tmp_path: Path) -> None:
    result = evictd("check-config", "--config-only", "--config", OURS, "--kubelet-config", str(CONFIGZ), "-o", "json")
    assert result.returncode == 0, result.stderr
    document = handover(result)
    assert str(document["kubeletConfig"]).endswith("(a /configz answer: the kubelet's file, drop-ins and flags as it "
                                                   "runs with them)")
    # The stock kubelet beside evictd's shipped thresholds: a race on the disk signals at 10%, 5% and 15%.
    assert evicts(document)["memory.available"] == "evictd-first"
    assert evicts(document)["nodefs.available"] == "same-threshold"
    # As evictd's own configuration: the stock thresholds, and no unknown field (v1.36's fields, every one).
    own = evictd("check-config", "--config-only", "--config", str(CONFIGZ), "--kubelet-config", "", "-o", "json")
    assert own.returncode == 0 and own.stderr == "", own.stderr
    thresholds = {t["signal"]: t["value"] for t in json.loads(own.stdout)["thresholds"] if t["gracePeriodSeconds"] == 0}
    assert thresholds["memory.available"] == {"quantity": "100Mi"} and "imagefs.inodesFree" in thresholds


def test_a_configz_answer_holds_the_flags_and_dropins_and_refuses_them_again(tmp_path: Path) -> None:
    answer = json.loads(CONFIGZ.read_text())
    # What a kubelet with mergeDefaultEvictionSettings and `--eviction-hard=memory.available<500Mi` serves.
    answer["kubeletconfig"].update(evictionHard={"memory.available": "500Mi"}, mergeDefaultEvictionSettings=True)
    configz = write(tmp_path / "configz.json", json.dumps(answer))
    document = handover(evictd("check-config", "--config-only", "--config", OURS, "--kubelet-config", configz,
                               "-o", "json"))
    assert evicts(document)["memory.available"] == "kubelet-first"
    assert evicts(document)["nodefs.available"] == "evictd"  # the defaults not merged back
    for beside in (["--kubelet-config-dir", str(tmp_path)], ["--kubelet-flags", "--eviction-hard=memory.available<1Gi"]):
        result = evictd("check-config", "--config-only", "--config", OURS, "--kubelet-config", configz, *beside)
        assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
        assert f"--kubelet-config: invalid value '{configz}': a /configz answer is the kubelet's configuration with " \
               f"its drop-ins and flags applied: {beside[0]} cannot apply to it again" in result.stderr
    broken = write(tmp_path / "broken.json", '{"kubeletconfig": ["evictionHard"]}')
    result = evictd("check-config", "--config-only", "--config", OURS, "--kubelet-config", broken)
    assert result.returncode == 2 and "kubeletconfig: invalid value ['evictionHard']: a /configz answer holds" \
        in result.stderr, result.stderr


def test_a_running_kubelets_flags_are_left_out_of_a_configz_answer(tmp_path: Path) -> None:
    with named_kubelet("--eviction-hard=memory.available<1Gi") as pid:
        result = evictd("check-config", "--config-only", "--config", OURS, "--kubelet-config", str(CONFIGZ), "-o",
                        "json", proc=proc_of(tmp_path / "proc", pid))
    assert result.returncode == 0, result.stderr
    assert evicts(handover(result))["memory.available"] == "evictd-first"  # the answer's 100Mi, not the flag's 1Gi


# --- the command line options, through the CLI ----------------------------------------------------------------

def test_the_running_kubelet_is_read_by_check_config(tmp_path: Path) -> None:
    config = write(tmp_path / "kubelet.yaml", KUBELET + "evictionHard: {memory.available: 100Mi, nodefs.available: 5%}\n")
    with named_kubelet("--config", config, "--eviction-hard", "memory.available<200Mi,nodefs.available<5%") as pid:
        result = evictd("check-config", "--config-only", "--config", OURS, proc=proc_of(tmp_path / "proc", pid))
    assert result.returncode == 0, result.stderr
    assert (f"who evicts (the kubelet's configuration: --config {config} of the kubelet (PID {pid}) + its flags: "
            "--eviction-hard):") in result.stdout
    # The flag replaced the file's map: 200Mi, the same as evictd's, is a race; both fixes are offered.
    fix = ("memory.available: both at the same threshold: whichever checks first evicts, the kubelet and evictd race; "
           "fix: lower the kubelet's threshold for this signal below evictd's hard threshold (a backstop), or to 0% "
           "(evictd alone); or raise evictd's hard threshold above the kubelet's 200Mi, e.g. `evictionHard: "
           "{memory.available: 400Mi}` (fleet-wide: the chart's `eviction` value)")
    assert f"  {fix}" in result.stdout.splitlines()
    assert "evictionHard: {memory.available: 400Mi}` (fleet-wide" in result.stderr


def test_kubelet_flags_are_one_argument_with_or_without_equals(tmp_path: Path) -> None:
    for words in (["--kubelet-flags", "--eviction-hard=memory.available<300Mi"],
                  ["--kubelet-flags=--eviction-hard=memory.available<300Mi"],
                  ["--kubelet-flags", "/usr/bin/kubelet --eviction-hard 'memory.available<300Mi'"]):
        result = evictd("check-config", "--config-only", "--config", OURS, *words, "-o", "json")
        assert result.returncode == 0, (words, result.stderr)
        assert evicts(handover(result))["memory.available"] == "kubelet-first", words


@pytest.mark.parametrize(("flags", "message"), [
    ("--eviction-hard=memory.available>1Gi",
     'evictd: --kubelet-flags: invalid argument "memory.available>1Gi" for "--eviction-hard" flag: malformed pair, '
     "expect string<string"),
    ("--eviction-hard=memory.available<1Gx",
     "evictd: the kubelet's defaults (no file) + --kubelet-flags: evictionHard[memory.available]: invalid value "
     "'1Gx': quantities must match the regular expression"),
    ("--system-reserved memory=lots",
     "evictd: --kubelet-flags: --system-reserved: invalid value 'memory=lots': failed to parse quantity 'lots'"),
    ("--config /etc/kubelet.yaml stray",
     "evictd: --kubelet-flags: kubelet argument: invalid value 'stray': not a flag: the kubelet takes flags only"),
    ("--eviction-hard='memory.available<1Gi",
     "evictd: --kubelet-flags: invalid value \"--eviction-hard='memory.available<1Gi\": not a command line (No "
     "closing quotation)"),
], ids=["operator", "quantity", "reservation", "positional", "quoting"])
def test_bad_kubelet_flags_exit_2_with_one_line(flags: str, message: str) -> None:
    result = evictd("check-config", "--config-only", "--config", OURS, "--kubelet-flags", flags)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(message), result.stderr


# --- check-config --strict: a pre-flight gate ------------------------------------------------------------------

@pytest.mark.parametrize(("kubelet", "evictd_extra", "status", "mode"), [
    ("evictionHard: {memory.available: 100Mi, nodefs.available: 5%, nodefs.inodesFree: 2%, imagefs.available: 10%}\n"
     "mergeDefaultEvictionSettings: true\n", "", 0, "backstop"),
    ("evictionHard: {memory.available: 200Mi}\n", "", 1, "overlap"),  # the same threshold: a race
    ("evictionHard: {memory.available: 300Mi}\n", "", 1, "overlap"),  # the kubelet first
    ("evictionHard: {memory.available: 200Mi}\n", "dryRun: true\n", 1, "overlap"),  # a race once it acts
    ("evictionHard: {memory.available: 5%}\n", "", 1, "overlap"),  # a quantity against a share: unchecked
    ('evictionHard: {memory.available: "0%"}\n', "", 0, "evictd-alone"),
    ('evictionHard: {memory.available: "0%"}\n', "evictionHard: {}\n", 1, "none"),  # nobody evicts
    (None, "", 0, "kubelet-unknown"),  # not read: nothing to gate on
], ids=["backstop", "same", "kubelet-first", "same-in-dry-run", "unchecked-order", "evictd-alone", "nobody",
        "kubelet-unknown"])
def test_strict_exits_1_when_the_hand_over_is_not_a_backstop(tmp_path: Path, kubelet: str | None, evictd_extra: str,
                                                              status: int, mode: str) -> None:
    ours = (ROOT / OURS).read_text()
    if evictd_extra.startswith("evictionHard"):
        ours = ours.split("evictionHard:")[0] + evictd_extra + "evictionSoft: {}\n"
    elif evictd_extra:
        ours += "---\napiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n" + evictd_extra
    config = write(tmp_path / "evictd.yaml", ours)
    kubelet_config = write(tmp_path / "kubelet.yaml", KUBELET + kubelet) if kubelet is not None else ""
    result = evictd("check-config", "--strict", "--config-only", "--config", config, "--kubelet-config",
                    kubelet_config, "-o", "json")
    assert result.returncode == status, result.stderr
    assert handover(result)["mode"] == mode
    strict_lines = [line for line in result.stderr.splitlines() if line.startswith("evictd: --strict: ")]
    assert len(strict_lines) == (1 if status else 0)
    # Without --strict the same configuration is valid: exit 0.
    assert evictd("check-config", "--config-only", "--config", config, "--kubelet-config", kubelet_config).returncode == 0


def test_strict_names_the_signals_and_a_bad_configuration_stays_2(tmp_path: Path) -> None:
    kubelet = write(tmp_path / "kubelet.yaml", KUBELET + "evictionHard: {memory.available: 200Mi}\n")
    result = evictd("check-config", "--strict", "--config-only", "--config", OURS, "--kubelet-config", kubelet)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "evictd: --strict: not a backstop: on some signal the kubelet acts before evictd, at the same threshold, or "
        "in an order that cannot be checked; nobody evicts on imagefs.inodesFree "
        "(memory.available, allocatableMemory.available, imagefs.inodesFree)")
    broken = write(tmp_path / "broken.yaml", KUBELET + "evictionHard: {memory.available: -1Gi}\n")
    assert evictd("check-config", "--strict", "--config-only", "--config", OURS, "--kubelet-config",
                  broken).returncode == 2


def test_a_configz_answer_as_evictds_own_configuration_says_what_a_file_cannot(tmp_path: Path) -> None:
    from evictd.config import load_configuration

    answer = json.loads(CONFIGZ.read_text())
    answer["kubeletconfig"]["evictionPressureTransitionPeriod"] = "0s"  # a kubelet flag's zero, not a file's
    configz = write(tmp_path / "configz.json", json.dumps(answer))
    loaded = load_configuration([configz])
    assert loaded.eviction.pressure_transition_period_s == 300
    assert loaded.warnings == (f"{configz}: evictionPressureTransitionPeriod '0s' in a /configz answer (the kubelet's "
                               "flag set it): read as in a file, a zero is 5m; give "
                               "--eviction-pressure-transition-period 0s to keep it",)
    kept = load_configuration([configz], [("eviction-pressure-transition-period", "0s")])
    assert kept.eviction.pressure_transition_period_s == 0

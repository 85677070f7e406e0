"""Loading configuration files: document kinds, layering, EvictdConfiguration, settings taken from the kubelet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evictd.config import EvictdSettings, LogFormat, StatsOrigin, load_configuration
from evictd.core.cgroup_driver import CgroupDriver
from evictd.core.errors import ConfigError
from evictd.core.limits_enforcer import LimitsEnforcer
from evictd.core.node_status import ConditionMode

KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
EVICTD = "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_no_file_means_all_defaults() -> None:
    configuration = load_configuration([])
    assert configuration.evictd == EvictdSettings()
    assert str(configuration.eviction.thresholds()[0].signal) == "memory.available"


def test_the_daemons_memory_low_is_off_by_default_and_takes_an_unquoted_off(tmp_path: Path) -> None:
    assert load_configuration([]).evictd.daemons_memory_low == "off"
    assert load_configuration([write(tmp_path, "a.yaml", EVICTD + "daemonsMemoryLow: auto\n")]).evictd \
        .daemons_memory_low == "auto"
    # YAML 1.1 reads an unquoted off as false: still off, never "must be a string".
    assert load_configuration([write(tmp_path, "o.yaml", EVICTD + "daemonsMemoryLow: off\n")]).evictd \
        .daemons_memory_low == "off"
    with pytest.raises(ConfigError, match=r"daemonsMemoryLow.*70%.*at most 50%"):
        load_configuration([write(tmp_path, "b.yaml", EVICTD + "daemonsMemoryLow: 70%\n")])


def test_the_daemons_memory_low_without_psi_counts_only_on_a_kernel_without_psi(tmp_path: Path) -> None:
    own = write(tmp_path, "w.yaml", EVICTD + "daemonsMemoryLowWithoutPSI: auto\n")
    configuration = load_configuration([own])
    assert configuration.for_kernel(None).evictd.daemons_memory_low == "off"
    assert configuration.for_kernel("/proc/pressure/memory: absent").evictd.daemons_memory_low == "auto"
    both = write(tmp_path, "b.yaml", EVICTD + "daemonsMemoryLow: 10%\ndaemonsMemoryLowWithoutPSI: 512Mi\n")
    assert load_configuration([both]).for_kernel(None).evictd.daemons_memory_low == "10%"
    assert load_configuration([both]).for_kernel("no PSI").evictd.daemons_memory_low == "512Mi"
    with pytest.raises(ConfigError, match=r"daemonsMemoryLowWithoutPSI.*lots"):
        load_configuration([write(tmp_path, "x.yaml", EVICTD + "daemonsMemoryLowWithoutPSI: lots\n")])


def test_cgroup_and_log_settings_come_from_the_kubelet_unless_evictd_overrides(tmp_path: Path) -> None:
    kubelet = write(tmp_path, "k.yaml", KUBELET + "cgroupDriver: systemd\ncgroupRoot: /custom\npodLogsDir: /logs\n")
    inherited = load_configuration([kubelet]).evictd
    assert (inherited.cgroup_driver, inherited.cgroup_root, inherited.pod_logs_dir) == ("systemd", "/custom", "/logs")
    own = write(tmp_path, "e.yaml", EVICTD + "cgroupDriver: cgroupfs\n")
    overridden = load_configuration([kubelet, own]).evictd
    assert (overridden.cgroup_driver, overridden.cgroup_root) == ("cgroupfs", "/custom")


def test_the_node_status_update_frequency_comes_from_the_kubelet_unless_evictd_overrides(tmp_path: Path) -> None:
    kubelet = write(tmp_path, "k.yaml", KUBELET + "nodeStatusUpdateFrequency: 20s\n")
    assert load_configuration([kubelet]).evictd.node_status_update_frequency_s == 20.0
    own = write(tmp_path, "e.yaml", EVICTD + "nodeStatusUpdateFrequency: 5s\n")
    assert load_configuration([kubelet, own]).evictd.node_status_update_frequency_s == 5.0
    # The kubelet's defaulting: a zero frequency is its default, 10 s.
    zero = write(tmp_path, "z.yaml", KUBELET + "nodeStatusUpdateFrequency: 0s\n")
    assert load_configuration([zero]).evictd.node_status_update_frequency_s == 10.0


def test_the_report_frequency_and_lease_duration_are_the_kubelets(tmp_path: Path) -> None:
    defaults = load_configuration([]).evictd
    assert (defaults.node_status_report_frequency_s, defaults.node_lease_duration_s, defaults.lease_namespace) == (
        300.0, 40, "")
    kubelet = write(tmp_path, "k.yaml", KUBELET + "nodeStatusReportFrequency: 1m\nnodeLeaseDurationSeconds: 60\n")
    inherited = load_configuration([kubelet]).evictd
    assert (inherited.node_status_report_frequency_s, inherited.node_lease_duration_s) == (60.0, 60)
    own = write(tmp_path, "e.yaml", EVICTD + "nodeStatusReportFrequency: 2m\nnodeLeaseDurationSeconds: 20\n"
                "leaseNamespace: ops\n")
    overridden = load_configuration([kubelet, own]).evictd
    assert (overridden.node_status_report_frequency_s, overridden.node_lease_duration_s,
            overridden.lease_namespace) == (120.0, 20, "ops")
    # The kubelet's defaulting: zero is the default (5m, 40 s)...
    zero = load_configuration([write(tmp_path, "z.yaml", KUBELET + "nodeStatusReportFrequency: 0s\n"
                                     "nodeLeaseDurationSeconds: 0\n")]).evictd
    assert (zero.node_status_report_frequency_s, zero.node_lease_duration_s) == (300.0, 40)
    # ... and the report frequency, when not given, is an explicitly given update frequency (backward
    # compatibility: whoever set nodeStatusUpdateFrequency keeps a status write per update).
    update_only = write(tmp_path, "u.yaml", KUBELET + "nodeStatusUpdateFrequency: 20s\n")
    assert load_configuration([update_only]).evictd.node_status_report_frequency_s == 20.0
    own_update = write(tmp_path, "ou.yaml", EVICTD + "nodeStatusUpdateFrequency: 5s\n")
    assert load_configuration([own_update]).evictd.node_status_report_frequency_s == 5.0


@pytest.mark.parametrize(("line", "key", "says"), [
    ("nodeLeaseDurationSeconds: 0", "nodeLeaseDurationSeconds", "must be at least 1"),
    ("nodeLeaseDurationSeconds: -5", "nodeLeaseDurationSeconds", "must be at least 1"),
    ("nodeLeaseDurationSeconds: 40s", "nodeLeaseDurationSeconds", "must be an integer"),
    ("nodeLeaseDurationSeconds: 100000", "nodeLeaseDurationSeconds", "must be at most 86,400"),
    ("nodeStatusReportFrequency: 5", "nodeStatusReportFrequency", "duration string"),
    ("nodeStatusReportFrequency: -1m", "nodeStatusReportFrequency", "positive"),
    ("leaseNamespace: Evictd_System", "leaseNamespace", "must be a namespace name"),
    ("leaseNamespace: " + "a" * 64, "leaseNamespace", "must be a namespace name"),
])
def test_bad_lease_settings_name_the_key_and_value(tmp_path: Path, line: str, key: str, says: str) -> None:
    path = write(tmp_path, "e.yaml", EVICTD + line + "\n")
    with pytest.raises(ConfigError) as exc:
        load_configuration([path])
    assert exc.value.key is not None and exc.value.key.endswith(key), exc.value
    assert says in str(exc.value) and line.split(": ", 1)[1][:10] in str(exc.value), exc.value


def test_a_runtime_endpoint_may_be_a_bare_socket_path(tmp_path: Path) -> None:
    path = write(tmp_path, "e.yaml", EVICTD + "containerRuntimeEndpoint: /var/run/crio/crio.sock\n")
    assert load_configuration([path]).evictd.container_runtime_endpoint == "/var/run/crio/crio.sock"


def test_one_stream_may_hold_both_kinds(tmp_path: Path) -> None:
    both = write(tmp_path, "both.yaml", KUBELET + "evictionHard: {pid.available: 1k}\n---\n" + EVICTD
                 + "housekeepingInterval: 500ms\ndryRun: true\npsiWindow: 4s\n")
    configuration = load_configuration([both])
    assert [str(t.signal) for t in configuration.eviction.thresholds()] == ["pid.available"]
    assert configuration.evictd.housekeeping_interval_s == 0.5
    assert configuration.evictd.dry_run is True and configuration.evictd.psi_window_s == 4


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (EVICTD + "dryRun: 'yes'\n", "dryRun"),
        (EVICTD + "statsSource: cadvisor\n", "statsSource"),
        (EVICTD + "logFormat: xml\n", "logFormat"),
        (EVICTD + "nodeName: 5\n", "nodeName"),
        (KUBELET + "cgroupDriver: docker\n", "cgroupDriver"),
        ("apiVersion: v1\nkind: ConfigMap\n", "kind"),
        (EVICTD + "containerRuntimeEndpoint: tcp://10.0.0.1:3735\n", "containerRuntimeEndpoint"),
        (EVICTD + "containerRuntimeEndpoint: run/containerd.sock\n", "containerRuntimeEndpoint"),
        (EVICTD + "recorder: 1\n", "recorder"),
        (EVICTD + "recorderMaxBytes: 64Mi\n", "recorderMaxBytes"),
        (EVICTD + "recorderMaxBytes: 4096\n", "recorderMaxBytes"),
        (EVICTD + "recorderMaxAge: 0s\n", "recorderMaxAge"),
        (EVICTD + "recorderMaxAge: 1d\n", "recorderMaxAge"),
        (EVICTD + "psiWindow: 30s\n", "psiWindow"),
        (EVICTD + "psiWindow: 3s\npsiStallThreshold: 5s\n", "psiStallThreshold"),
        (EVICTD + "softEvictionsThroughEvictionAPI: 'on'\n", "softEvictionsThroughEvictionAPI"),
        (EVICTD + "evictionAPIMaxCandidates: 0\n", "evictionAPIMaxCandidates"),
        (EVICTD + "evictionAPIMaxCandidates: 101\n", "evictionAPIMaxCandidates"),
        (EVICTD + "evictionAPIDeadline: 5\n", "evictionAPIDeadline"),
        (EVICTD + "memoryCrossingHold: 2s\n", "memoryCrossingHold"),
        (EVICTD + "memoryReclaimBeforeEviction: 'yes'\n", "memoryReclaimBeforeEviction"),
        (EVICTD + "memoryReclaimBudget: 1s\n", "memoryReclaimBudget"),
        (EVICTD + "memoryReclaimBudget: 0s\n", "memoryReclaimBudget"),
    ],
    ids=["bool", "stats-source", "log-format", "string", "inherited-driver", "other-kind", "tcp-endpoint",
         "relative-endpoint", "recorder-bool", "recorder-size-string", "recorder-size-too-small",
         "recorder-age-zero", "recorder-age-days", "psi-window-over-10s", "psi-stall-over-window",
         "eviction-api-bool", "eviction-api-no-candidate", "eviction-api-too-many", "eviction-api-deadline-number",
         "crossing-hold-over-1s", "memory-reclaim-bool", "memory-reclaim-budget-over-200ms",
         "memory-reclaim-budget-zero"],
)
def test_bad_documents_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError) as exc:
        load_configuration([path])
    assert exc.value.key is not None and key in exc.value.key


def test_the_flight_recorder_settings(tmp_path: Path) -> None:
    path = write(tmp_path, "recorder.yaml", EVICTD + "recorderMaxBytes: 16777216\nrecorderMaxAge: 72h\n")
    settings = load_configuration([path]).evictd
    assert (settings.recorder, settings.recorder_max_bytes, settings.recorder_max_age_s) == (True, 16 << 20, 72 * 3600)
    assert (EvictdSettings().recorder_max_bytes, EvictdSettings().recorder_max_age_s) == (64 << 20, 24 * 3600)
    off = write(tmp_path, "off.yaml", EVICTD + "recorder: false\n")
    assert load_configuration([off]).evictd.recorder is False


def test_soft_evictions_through_the_eviction_api_are_off_by_default_and_settable(tmp_path: Path) -> None:
    defaults = EvictdSettings()
    assert (defaults.soft_evictions_through_eviction_api, defaults.eviction_api_max_candidates,
            defaults.eviction_api_deadline_s) == (False, 3, 300.0)
    path = write(tmp_path, "api.yaml", EVICTD + "softEvictionsThroughEvictionAPI: true\nevictionAPIMaxCandidates: 5\n"
                 "evictionAPIDeadline: 0s\n")
    settings = load_configuration([path]).evictd
    assert (settings.soft_evictions_through_eviction_api, settings.eviction_api_max_candidates,
            settings.eviction_api_deadline_s) == (True, 5, 0.0)


@pytest.mark.parametrize(
    ("document", "key", "choices", "setting", "member"),
    [
        (EVICTD, "statsSource", "node, kubelet", "stats_source", StatsOrigin.KUBELET),
        (EVICTD, "logFormat", "auto, json, console", "log_format", LogFormat.CONSOLE),
        (EVICTD, "nodeConditionMode", "evictd, standard", "node_condition_mode", ConditionMode.STANDARD),
        (KUBELET, "cgroupDriver", "cgroupfs, systemd", "cgroup_driver", CgroupDriver.SYSTEMD),  # inherited
        (EVICTD, "ephemeralStorageLimitsEnforcer", "auto, kubelet, evictd", "ephemeral_storage_limits_enforcer",
         LimitsEnforcer.EVICTD),
    ],
    ids=["stats-source", "log-format", "node-condition-mode", "cgroup-driver", "ephemeral-storage-limits-enforcer"],
)
def test_a_choice_setting_is_one_of_its_values(
    tmp_path: Path, document: str, key: str, choices: str, setting: str, member: object
) -> None:
    with pytest.raises(ConfigError) as exc:
        load_configuration([write(tmp_path, "bad.yaml", f"{document}{key}: bogus\n")])
    assert exc.value.describe() == f"EvictdConfiguration: {key}: invalid value 'bogus': must be one of {choices}"
    chosen = load_configuration([write(tmp_path, "good.yaml", f"{document}{key}: {member}\n")]).evictd
    assert getattr(chosen, setting) is member


def test_a_document_that_is_not_a_mapping_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "list.yaml", "- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping") as exc:
        load_configuration([path])
    assert path in str(exc.value)


KUBE_PROXY = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n"


def test_other_kinds_after_the_kubelets_document_are_ignored_as_the_kubelet_ignores_them(tmp_path: Path) -> None:
    """kind and kubeadm write a KubeProxyConfiguration after the KubeletConfiguration; the kubelet starts."""
    path = write(tmp_path, "kubeadm.yaml", KUBELET + "evictionHard: {memory.available: 200Mi}\n---\n" + KUBE_PROXY
                 + "---\n" + EVICTD + "housekeepingInterval: 5s\n")
    configuration = load_configuration([path])
    assert [str(t.signal) for t in configuration.eviction.thresholds()] == ["memory.available", "allocatableMemory.available"]
    assert configuration.evictd.housekeeping_interval_s == 5  # evictd's own document is kept
    assert configuration.warnings == (f"{path}[1]: kind 'KubeProxyConfiguration' ignored: the kubelet reads only "
                                      "the first document of its configuration file",)


def test_another_kind_first_is_still_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "proxy-first.yaml", KUBE_PROXY + "---\n" + KUBELET)
    with pytest.raises(ConfigError, match="unknown kind") as exc:
        load_configuration([path])
    assert exc.value.key == f"{path}.kind"


def test_a_soft_threshold_without_a_grace_period_says_the_grace_period_is_missing(tmp_path: Path) -> None:
    path = write(tmp_path, "soft.yaml", KUBELET + "evictionSoft: {memory.available: 1Gi}\n")
    with pytest.raises(ConfigError) as exc:
        load_configuration([path])
    assert str(exc.value) == ("evictionSoftGracePeriod[memory.available]: missing: grace period "
                              "must be specified for the soft eviction threshold memory.available")


def test_a_yaml_alias_bomb_is_refused_with_a_short_message(tmp_path: Path) -> None:
    """A 1 KB file whose value expands to 10^8 strings: the error names the key and shows a few of them."""
    anchors = "anchors:\n  l0: &l0 [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"  l{n}: &l{n} [{','.join([f'*l{n - 1}'] * 10)}]\n" for n in range(1, 7))
    path = write(tmp_path, "bomb.yaml", KUBELET + anchors + "evictionHard:\n  memory.available: [" +
                 ",".join(["*l6"] * 10) + "]\n")
    assert (tmp_path / "bomb.yaml").stat().st_size < 1024
    with pytest.raises(ConfigError) as exc:
        load_configuration([path])
    message = str(exc.value)
    assert message.startswith("KubeletConfiguration: evictionHard[memory.available]: invalid value [[[[...], ")
    assert len(message) < 300 and "cannot unmarshal array" in message


SAMPLE_EVICTD_CONFIG = Path(__file__).resolve().parents[1] / "config" / "evictd-config.yaml"


def test_the_sample_evictd_config_after_a_systemd_kubelet_config_keeps_the_systemd_driver(tmp_path: Path) -> None:
    kubelet = write(tmp_path, "k.yaml", KUBELET + "cgroupDriver: systemd\ncgroupRoot: /custom\npodLogsDir: /logs\n")
    settings = load_configuration([kubelet, str(SAMPLE_EVICTD_CONFIG)]).evictd
    assert (settings.cgroup_driver, settings.cgroup_root, settings.pod_logs_dir) == ("systemd", "/custom", "/logs")


def test_a_memory_crossing_waits_100ms_for_its_second_reading_unless_set_to_0s(tmp_path: Path) -> None:
    assert EvictdSettings().memory_crossing_hold_s == 0.1
    path = write(tmp_path, "hold.yaml", EVICTD + "memoryCrossingHold: 0s\n")
    assert load_configuration([path]).evictd.memory_crossing_hold_s == 0.0


def test_the_sample_evictd_config_alone_is_the_defaults() -> None:
    assert load_configuration([str(SAMPLE_EVICTD_CONFIG)]).evictd == EvictdSettings()


def test_self_protection_defaults_lock_memory_and_leave_the_oom_score_adj(tmp_path: Path) -> None:
    defaults = EvictdSettings()
    assert (defaults.lock_memory, defaults.oom_score_adj) == (True, None)
    path = write(tmp_path, "own.yaml", EVICTD + "lockMemory: false\noomScoreAdj: -999\n")
    settings = load_configuration([path]).evictd
    assert (settings.lock_memory, settings.oom_score_adj) == (False, -999)
    for bound in (-1000, 1000):
        edge = write(tmp_path, "edge.yaml", EVICTD + f"oomScoreAdj: {bound}\n")
        assert load_configuration([edge]).evictd.oom_score_adj == bound


@pytest.mark.parametrize(
    ("line", "key", "says"),
    [
        ("lockMemory: 'yes'", "lockMemory", "invalid value 'yes': must be true or false"),
        ("lockMemory: 1", "lockMemory", "invalid value 1: must be true or false"),
        ("oomScoreAdj: -1001", "oomScoreAdj", "invalid value -1001: must be at least -1,000"),
        ("oomScoreAdj: 1001", "oomScoreAdj", "invalid value 1001: must be at most 1,000"),
        ("oomScoreAdj: '-999'", "oomScoreAdj", "invalid value '-999': must be an integer"),
        ("oomScoreAdj: true", "oomScoreAdj", "invalid value True: must be an integer"),
    ],
    ids=["lock-string", "lock-number", "adj-below-kernel-min", "adj-above-kernel-max", "adj-string", "adj-bool"],
)
def test_bad_self_protection_settings_name_the_key_and_value(tmp_path: Path, line: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_configuration([write(tmp_path, "bad.yaml", f"{EVICTD}{line}\n")])
    assert exc.value.describe() == f"EvictdConfiguration: {key}: {says}"


def test_check_config_refuses_a_bad_oom_score_adj_with_status_2_and_says_the_settings(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", EVICTD + "oomScoreAdj: -2000\n")
    refused = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config", bad], capture_output=True,
                             text=True, timeout=60, check=False)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "oomScoreAdj" in refused.stderr and "-2000" in refused.stderr and "at least -1,000" in refused.stderr
    good = write(tmp_path, "good.yaml", EVICTD + "oomScoreAdj: -999\n")
    shown = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config", good], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert "lock memory: true (mlockall at start" in shown
    assert "oom_score_adj: -999 (set at start; lowering needs CAP_SYS_RESOURCE)" in shown


def test_yaml_merge_keys_are_read_as_the_kubelets_yaml_reads_them(tmp_path: Path) -> None:
    path = write(tmp_path, "merge.yaml", KUBELET + "evictionSoftGracePeriod: &grace {memory.available: 1m}\n"
                 "evictionHard:\n  <<: {memory.available: 300Mi, nodefs.available: 7%}\n  nodefs.available: 5%\n"
                 "evictionSoft:\n  <<: *grace\n  memory.available: 1Gi\n")
    eviction = load_configuration([path]).eviction
    assert eviction.hard == {"memory.available": "300Mi", "nodefs.available": "5%"}, "the explicit key wins"
    assert eviction.soft == {"memory.available": "1Gi"}
    # A key given twice beside a merge key is still a key given twice.
    twice = write(tmp_path, "twice.yaml", EVICTD + "<<: {dryRun: true}\ndryRun: false\ndryRun: true\n")
    with pytest.raises(ConfigError, match="duplicate key"):
        load_configuration([twice])


@pytest.mark.parametrize(("field", "value"), [
    ("stallEvictionHard", "{evictd.io/memory.stall.some: \"\u0664\u0660%\"}"),  # Arabic-Indic 40
    ("stallEvictionHard", "{evictd.io/memory.stall.some: \"\uff14\uff10%\"}"),  # full-width 40
])
def test_numbers_in_evictd_settings_are_ascii_digits_only(tmp_path: Path, field: str, value: str) -> None:
    path = write(tmp_path, "e.yaml", f"{EVICTD}{field}: {value}\n")
    with pytest.raises(ConfigError, match="must be a share"):
        load_configuration([path])


@pytest.mark.parametrize("value", ["\u0664\u0660%", "\uff11\uff10%", "1\u0660%"])
def test_percentages_of_kubelet_thresholds_are_ascii_digits_only(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, "k.yaml", KUBELET + f'evictionHard: {{nodefs.available: "{value}"}}\n')
    with pytest.raises(ConfigError, match=r"nodefs\.available"):
        load_configuration([path]).eviction.thresholds()


@pytest.mark.parametrize(("value", "key", "says"), [
    pytest.param('{evictd.io/memory.stall.full: "20%"}', "stallEvictionHardWithoutPSI[evictd.io/memory.stall.full]",
                 "needs PSI, so it cannot stand in where the kernel has none (accepted: evictd.io/daemons.refault, "
                 "evictd.io/memory.refault)", id="a-psi-signal"),
    pytest.param('{evictd.io/daemons.refault: "110%"}', "stallEvictionHardWithoutPSI[evictd.io/daemons.refault]",
                 "must be a share of the daemons' memory re-read in 2 s from 0% to 100%", id="over-100"),
    pytest.param('{memory.available: "10%"}', "stallEvictionHardWithoutPSI[memory.available]",
                 "unsupported stall signal memory.available", id="a-kubelet-signal"),
])
def test_a_bad_without_psi_threshold_exits_2_naming_key_and_value(tmp_path: Path, value: str, key: str,
                                                                  says: str) -> None:
    path = write(tmp_path, "e.yaml", f"{EVICTD}stallEvictionHardWithoutPSI: {value}\n")
    done = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config", path], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert key in done.stderr and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_signal_both_always_and_without_psi_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "e.yaml", EVICTD + 'stallEvictionHard: {evictd.io/daemons.refault: "50%"}\n'
                 'stallEvictionHardWithoutPSI: {evictd.io/daemons.refault: "10%"}\n')
    with pytest.raises(ConfigError, match="in stallEvictionHard too, where it counts on every kernel") as info:
        load_configuration([path])
    assert info.value.key == "EvictdConfiguration: stallEvictionHardWithoutPSI[evictd.io/daemons.refault]"


def test_without_psi_thresholds_join_only_on_a_kernel_without_psi(tmp_path: Path) -> None:
    path = write(tmp_path, "e.yaml", EVICTD + 'stallEvictionHard: {evictd.io/memory.stall.full: "20%"}\n'
                 'stallEvictionHardWithoutPSI: {evictd.io/daemons.refault: "10%"}\n')
    configuration = load_configuration([path])
    signals = [str(t.signal) for t in configuration.eviction.thresholds()]
    assert "evictd.io/daemons.refault" not in signals, "not counted as loaded: PSI unknown yet"
    assert configuration.for_kernel(None) is configuration, "a kernel with PSI: standing by"
    without = configuration.for_kernel("/proc/pressure/memory: absent")
    assert [str(t.signal) for t in without.eviction.thresholds()] == [*signals, "evictd.io/daemons.refault"]
    assert without.eviction.psi_stand_ins == ("evictd.io/daemons.refault",)
    assert without.protections_wanted().stand_ins == ("evictd.io/daemons.refault",)
    assert [str(t.signal) for t in configuration.protections_wanted().standing_by] == ["evictd.io/daemons.refault"]
    # Resolved once; a resolved configuration validates (the signal is in stallEvictionHard now, by design).
    assert without.without_psi_thresholds() == []
    assert without.for_kernel("again") is without

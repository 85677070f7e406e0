"""The kubelet's command line read as the kubelet reads it (cmd/kubelet/app/options/options.go registers the flags;
pflag parses them with cliflag.WordSepNormalizeFunc; server.go's kubeletConfigFlagPrecedence applies them onto the
loaded file and drop-ins), and what they do to the eviction settings."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evictd.core.dropin import with_dropins
from evictd.core.errors import ConfigError
from evictd.core.kubelet_config import DEFAULT_EVICTION_HARD, EvictionSettings, eviction_settings
from evictd.core.kubelet_flags import KubeletCommandLine, parse_kubelet_command_line


def parsed(*args: str) -> KubeletCommandLine:
    return parse_kubelet_command_line(["/usr/bin/kubelet", *args], program=True)


def applied(*args: str, base: EvictionSettings | None = None) -> EvictionSettings:
    return parsed(*args).apply(base or EvictionSettings())


# --- every flag read, in both syntaxes -----------------------------------------------------------------------

@pytest.mark.parametrize("syntax", ["equals", "separate"])
@pytest.mark.parametrize(("flag", "value", "attribute", "expected"), [
    ("eviction-hard", "memory.available<1Gi,nodefs.available<5%", "hard",
     {"memory.available": "1Gi", "nodefs.available": "5%"}),
    ("eviction-soft", "memory.available<2Gi", "soft", {"memory.available": "2Gi"}),
    ("eviction-soft-grace-period", "memory.available=1m30s", "soft_grace_period", {"memory.available": "1m30s"}),
    ("eviction-minimum-reclaim", "memory.available=100Mi,nodefs.available=1Gi", "minimum_reclaim",
     {"memory.available": "100Mi", "nodefs.available": "1Gi"}),
    ("eviction-max-pod-grace-period", "30", "max_pod_grace_period_s", 30),
    ("eviction-pressure-transition-period", "1m", "pressure_transition_period_s", 60.0),
    ("enforce-node-allocatable", "pods,kube-reserved", "enforce_node_allocatable", ("pods", "kube-reserved")),
    ("local-storage-capacity-isolation", "false", "local_storage_capacity_isolation", False),
    ("kernel-memcg-notification", "true", "kernel_memcg_notification", True),
], ids=lambda value: value if isinstance(value, str) and "<" not in value and "=" not in value else None)
def test_each_settings_flag_in_both_syntaxes(syntax: str, flag: str, value: str, attribute: str,
                                             expected: object) -> None:
    args = [f"--{flag}={value}"] if syntax == "equals" else [f"--{flag}", value]
    if syntax == "separate" and flag in ("local-storage-capacity-isolation", "kernel-memcg-notification"):
        args = [f"--{flag}"] if value == "true" else [f"--{flag}={value}"]  # a boolean takes no separate value
    settings = applied(*args)
    actual = getattr(settings, attribute)
    assert (dict(actual) if isinstance(expected, dict) else actual) == expected
    assert parsed(*args).read_flags() == [f"--{flag}"]


@pytest.mark.parametrize("syntax", ["equals", "separate"])
def test_the_file_flags_and_the_reservations_in_both_syntaxes(syntax: str) -> None:
    pairs = [("config", "/var/lib/kubelet/config.yaml"), ("config-dir", "/etc/kubernetes/kubelet.conf.d"),
             ("root-dir", "/data/kubelet"), ("kube-reserved", "memory=1Gi,cpu=500m"),
             ("system-reserved", "memory=512Mi,ephemeral-storage=1Gi,pid=1000")]
    args = [word for name, value in pairs
            for word in ([f"--{name}={value}"] if syntax == "equals" else [f"--{name}", value])]
    line = parsed(*args)  # --root-dir is skipped with its value: it does not say where the file is
    assert (line.config, line.config_dir) == ("/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet.conf.d")
    assert line.reserved_flags == (("kube-reserved", "memory=1Gi,cpu=500m"),
                                   ("system-reserved", "memory=512Mi,ephemeral-storage=1Gi,pid=1000"))
    assert line.settings_flags == ()
    assert line.read_flags() == ["--kube-reserved", "--system-reserved"]


def test_a_running_kubelets_other_flags_are_skipped_with_their_values() -> None:
    line = parsed("--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig",
                  "/etc/kubernetes/kubelet.conf", "--node-ip", "10.0.0.7", "-v", "2", "--fail-swap-on",
                  "--eviction-hard", "memory.available<500Mi", "--container-runtime-endpoint",
                  "unix:///run/containerd/containerd.sock", "--config", "/var/lib/kubelet/config.yaml", "-v=4")
    assert line.config == "/var/lib/kubelet/config.yaml"
    assert line.settings_flags == (("eviction-hard", "memory.available<500Mi"),)


def test_underscores_read_as_dashes_and_the_last_scalar_wins() -> None:
    line = parsed("--eviction_hard=memory.available<1Gi", "--config_dir=/a", "--config-dir", "/b",
                  "--eviction-max-pod-grace-period=10", "--eviction_max_pod_grace_period", "20")
    assert line.config_dir == "/b"
    assert dict(line.apply(EvictionSettings()).hard) == {"memory.available": "1Gi"}
    assert line.apply(EvictionSettings()).max_pod_grace_period_s == 20


def test_a_flag_that_takes_a_value_takes_the_next_argument_whatever_it_is() -> None:
    # pflag's `--flag arg`: the next argument is the value even when it starts with a dash (then it fails as one).
    with pytest.raises(ConfigError, match='invalid argument "--config=/x" for "--eviction-hard" flag: malformed pair'):
        parsed("--eviction-hard", "--config=/x")
    assert parsed("--config", "-odd-but-a-path").config == "-odd-but-a-path"


def test_a_command_line_given_by_hand_may_start_with_the_program() -> None:
    for words in (["kubelet", "--config=/c"], ["/usr/local/bin/kubelet", "--config=/c"], ["--config=/c"]):
        assert parse_kubelet_command_line(words, program=False).config == "/c"


def test_an_empty_value_empties_the_map_and_the_list() -> None:
    settings = applied("--eviction-hard=", "--enforce-node-allocatable=")
    assert dict(settings.hard) == {} and settings.enforce_node_allocatable == ()
    assert "allocatableMemory.available" not in [str(t.signal) for t in settings.thresholds()]


# --- bad input: the flag, the value, and what would be accepted ----------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["--eviction-hard=memory.available=1Gi"],
     'invalid argument "memory.available=1Gi" for "--eviction-hard" flag: malformed pair, expect string<string'),
    (["--eviction-soft-grace-period", "memory.available<1m"],
     'invalid argument "memory.available<1m" for "--eviction-soft-grace-period" flag: malformed pair, expect '
     "string=string"),
    (["--eviction-max-pod-grace-period=ten"],
     'invalid argument "ten" for "--eviction-max-pod-grace-period" flag: strconv.ParseInt: parsing "ten": invalid '
     "syntax"),
    (["--eviction-pressure-transition-period", "5"],
     'invalid argument "5" for "--eviction-pressure-transition-period" flag: time: missing unit in duration "5"'),
    (["--local-storage-capacity-isolation=maybe"],
     'invalid argument "maybe" for "--local-storage-capacity-isolation" flag: strconv.ParseBool: parsing "maybe": '
     "invalid syntax (write --local-storage-capacity-isolation, --local-storage-capacity-isolation=true or "
     "--local-storage-capacity-isolation=false)"),
    (["--enforce-node-allocatable=pods,node"],
     "enforceNodeAllocatable: invalid value ['pods', 'node']: invalid configuration: option \"node\" specified for "
     'enforceNodeAllocatable (--enforce-node-allocatable). Valid options are "pods", "system-reserved", '
     '"system-reserved-compressible", "kube-reserved", "kube-reserved-compressible" or "none"'),
    (["--enforce-node-allocatable=none,pods"],
     "enforceNodeAllocatable: invalid value ['none', 'pods']: invalid configuration: enforceNodeAllocatable "
     '(--enforce-node-allocatable) may not contain additional enforcements when "none" is specified'),
    (["--kube-reserved=memory=1GB"],
     "--kube-reserved: invalid value 'memory=1GB': failed to parse quantity '1GB' for 'memory' resource: quantities "
     "must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (write a quantity such as "
     "1Gi or 500m)"),
    (["--system-reserved", "gpu=1"],
     "--system-reserved: invalid value 'gpu=1': cannot reserve 'gpu' resource (the kubelet reserves cpu, memory, "
     "ephemeral-storage, pid)"),
    (["--system-reserved=memory=-1Gi"],
     "--system-reserved: invalid value 'memory=-1Gi': resource quantity for 'memory' cannot be negative: -1Gi"),
    (["--kube-reserved=memory"],
     "--kube-reserved: invalid value 'memory': malformed pair, expect string=string (write resource=quantity pairs: "
     "memory=1Gi,cpu=500m)"),
    (["--eviction-hard"],
     "--eviction-hard: invalid value '': needs a value (as the kubelet: --eviction-hard=VALUE or --eviction-hard "
     "VALUE)"),
    (["--config=/c", "stray"],
     "kubelet argument: invalid value 'stray': not a flag: the kubelet takes flags only (it refuses to start on "
     "`stray`: unknown command); give each flag with its value: --eviction-hard=memory.available<100Mi or "
     "--eviction-hard 'memory.available<100Mi'"),
    (["--kernel-memcg-notification", "false"],
     "kubelet argument: invalid value 'false': not a flag: the kubelet takes flags only (it refuses to start on "
     "`false`: unknown command); give each flag with its value: --eviction-hard=memory.available<100Mi or "
     "--eviction-hard 'memory.available<100Mi'"),
    (["---config=/c"],
     "kubelet argument: invalid value '---config=/c': bad flag syntax (the kubelet refuses it): write --name=value or "
     "--name value"),
    (["--", "x"],
     "--: invalid value 'x': the kubelet takes no argument after `--` (it refuses to start: unknown command)"),
], ids=["hard-equals-pair", "grace-angle-pair", "int32", "duration-unit", "bool", "enforcement-unknown",
        "enforcement-none-and-more", "reserved-quantity", "reserved-resource", "reserved-negative",
        "reserved-pair", "missing-value", "positional", "bool-with-separate-value", "three-dashes",
        "after-double-dash"])
def test_bad_flags_name_the_flag_the_value_and_what_is_accepted(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parsed(*args)
    assert str(exc.value) == message


@given(st.lists(st.one_of(
    st.sampled_from(["--eviction-hard", "--eviction-soft", "--eviction-soft-grace-period", "--config",
                     "--eviction-minimum-reclaim", "--eviction-max-pod-grace-period", "--kube-reserved",
                     "--eviction-pressure-transition-period", "--enforce-node-allocatable", "--",
                     "--local-storage-capacity-isolation", "--system-reserved", "-v", "--node-ip"]),
    st.text(max_size=20)), max_size=8))
def test_any_command_line_reads_or_fails_with_a_config_error(args: list[str]) -> None:
    with contextlib.suppress(ConfigError):  # any other exception fails the test
        parse_kubelet_command_line(args, program=False).apply(EvictionSettings()).thresholds()


# --- the kubelet's order: defaults < file < drop-ins < flags --------------------------------------------------

FILE = {"evictionHard": {"memory.available": "300Mi", "nodefs.available": "8%"},
        "evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "1m"},
        "evictionMaxPodGracePeriod": 60, "enforceNodeAllocatable": ["pods"]}
DROPIN = {"evictionHard": {"nodefs.available": "6%"}, "evictionMaxPodGracePeriod": 45}


def test_defaults_then_file_then_dropins_then_flags() -> None:
    file_only = eviction_settings(with_dropins(FILE, []))
    assert dict(file_only.hard) == {"memory.available": "300Mi", "nodefs.available": "8%"}  # the defaults dropped
    with_dropin = eviction_settings(with_dropins(FILE, [DROPIN]))
    assert dict(with_dropin.hard) == {"memory.available": "300Mi", "nodefs.available": "6%"}  # merged key by key
    assert with_dropin.max_pod_grace_period_s == 45
    flags = parsed("--eviction-max-pod-grace-period=15", "--eviction-soft=memory.available<2Gi")
    final = flags.apply(with_dropin)
    assert final.max_pod_grace_period_s == 15  # a scalar flag over the drop-in over the file
    assert dict(final.soft) == {"memory.available": "2Gi"}  # a map flag replaces the file's map
    assert dict(final.soft_grace_period) == {"memory.available": "1m"}  # a field no flag names is the file's
    assert dict(final.hard) == dict(with_dropin.hard)


def test_an_eviction_map_flag_replaces_the_whole_map_even_with_merge_defaults() -> None:
    # mergeDefaultEvictionSettings merges the defaults when the kubelet loads its file, before its flags: the flag's
    # map is the whole map (the kubelet's MapStringString clears the map on its first Set).
    loaded = eviction_settings({"evictionHard": {"memory.available": "300Mi"}, "mergeDefaultEvictionSettings": True})
    assert dict(loaded.hard) == {**DEFAULT_EVICTION_HARD, "memory.available": "300Mi"}
    final = parsed("--eviction-hard=memory.available<500Mi", "--eviction-hard", "nodefs.available<5%").apply(loaded)
    assert dict(final.hard) == {"memory.available": "500Mi", "nodefs.available": "5%"}  # later uses accumulate


def test_enforce_node_allocatable_replaced_then_accumulated_as_a_string_slice() -> None:
    final = parsed("--enforce-node-allocatable=system-reserved", "--enforce-node-allocatable", "kube-reserved").apply(
        eviction_settings({"enforceNodeAllocatable": ["pods"]}))
    assert final.enforce_node_allocatable == ("system-reserved", "kube-reserved")
    assert "allocatableMemory.available" not in [str(t.signal) for t in final.thresholds()]


def test_a_kubelet_without_a_file_has_no_default_hard_thresholds() -> None:
    # server.go defaults evictionHard only in loadConfigFile: no --config, no defaults; flags or drop-ins only.
    no_file = eviction_settings(with_dropins({}, [], from_file=False))
    assert dict(no_file.hard) == {}
    from_dropin = eviction_settings(with_dropins({}, [{"evictionHard": {"memory.available": "200Mi"}}],
                                                 from_file=False))
    assert dict(from_dropin.hard) == {"memory.available": "200Mi"}
    with_file = eviction_settings(with_dropins({}, [{"evictionHard": {"memory.available": "200Mi"}}]))
    assert dict(with_file.hard) == {**DEFAULT_EVICTION_HARD, "memory.available": "200Mi"}

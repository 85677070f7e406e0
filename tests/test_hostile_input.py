"""Hostile or broken input as a user or an attacker hands it to `evictd`: each case exits 2 with one line naming
the key and the value (never 1, never a traceback, never a hang, bounded memory), and the readers of the node
report an impossible number as an unreadable source instead of failing every cycle."""

from __future__ import annotations

import functools
import gzip
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from evictd.adapters import procfs
from evictd.adapters.cgroups import _uint
from evictd.config import load_configuration
from evictd.core.errors import ConfigError, SampleError
from evictd.core.signals import Signal
from evictd.record.recording import segment_paths
from test_explain import memory_recording

ROOT = Path(__file__).resolve().parents[1]
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
EVICTD = "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
# Generous for a loaded machine; before the fixes these cases took minutes, hung or were killed by the OOM killer.
TIMEOUT_S = 30


def evictd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)


def file_with(text: str) -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        path = folder / "config.yaml"
        path.write_text(text, encoding="utf-8")
        return str(path)
    return make


def fifo(folder: Path) -> str:
    path = folder / "fifo"
    os.mkfifo(path)
    return str(path)


def alias_bomb() -> str:
    levels = "anchors:\n  l0: &l0 [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"  l{n}: &l{n} [{','.join([f'*l{n - 1}'] * 10)}]\n" for n in range(1, 8))
    return KUBELET + levels + "evictionHard:\n  memory.available: [" + ",".join(["*l7"] * 10) + "]\n"


CONFIGS = {
    "dev-zero": (lambda folder: "/dev/zero", "--config: invalid value '/dev/zero': not a regular file"),
    "fifo": (fifo, "not a regular file"),
    "alias-bomb": (file_with(alias_bomb()), "evictionHard[memory.available]: invalid value [[[[...]"),
    "5000-digit-integer": (file_with(KUBELET + "evictionMaxPodGracePeriod: " + "9" * 5000 + "\n"),
                           "unreadable value: Exceeds the limit (4300 digits)"),
    "nested-5000-deep": (file_with(KUBELET + "x: " + "[" * 5000 + "]" * 5000 + "\n"), "YAML nested too deeply"),
    "kind-is-a-list": (file_with("apiVersion: v1\nkind: [a]\n"), ".kind: invalid value ['a']: unknown kind"),
    "interval-of-292-years": (file_with(EVICTD + "housekeepingInterval: 9223372036s\n"),
                              "housekeepingInterval: invalid value '9223372036s': must be at most 24h0m0s"),
    "recording-of-90-tib": (file_with(EVICTD + "recorderMaxBytes: 99999999999999\n"),
                            "recorderMaxBytes: invalid value 99999999999999: must be at most 4,294,967,296"),
    "5000-digit-quantity": (file_with(KUBELET + 'evictionHard: {memory.available: "' + "0" * 4999 + '1Gi"}\n'),
                            "longer than 64 characters (evictd's bound)"),
    "duplicate-evictd-key": (file_with(EVICTD + "dryRun: true\ndryRun: false\n"),
                             "dryRun: invalid value False: duplicate key in EvictdConfiguration"),
    "cgroupfs-path-missing": (file_with(EVICTD + "cgroupfsPath: /nonexistent-cgroupfs\n"),
                              "cgroupfsPath: invalid value '/nonexistent-cgroupfs': no such folder"),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_hostile_configuration_exits_2_with_one_line(tmp_path: Path, case: str) -> None:
    make, expected = CONFIGS[case]
    # `run --cycles 1` reaches every check there is (check-config does not look at the machine).
    command = "run" if case == "cgroupfs-path-missing" else "check-config"
    extra = ["--cycles", "1"] if command == "run" else []
    done = evictd(command, "--config", make(tmp_path), *extra)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("evictd: ") and expected in line and len(line) < 400


SCENARIOS = {
    "5000-digit-integer": ("config: {}\nsteps:\n- at: " + "9" * 5000 + "\n  summary: {}\n",
                           "scenario: invalid value"),
    "nested-5000-deep": ("config: " + "[" * 5000 + "]" * 5000 + "\n", "YAML nested too deeply"),
    "kind-is-a-list": ("config: {kind: [a]}\nsteps: []\n", "config.kind: invalid value ['a']"),
}


@pytest.mark.parametrize("case", sorted(SCENARIOS))
def test_hostile_scenario_exits_2_with_one_line(tmp_path: Path, case: str) -> None:
    text, expected = SCENARIOS[case]
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    done = evictd("simulate", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert expected in line and len(line) < 400


def test_a_duplicate_key_in_the_kubelets_document_is_a_warning_as_in_the_kubelet(tmp_path: Path) -> None:
    """The kubelet's strict decoding fails on it, its lenient fallback takes the last value and starts."""
    path = tmp_path / "kubelet.yaml"
    path.write_text(KUBELET + "evictionMaxPodGracePeriod: 10\nevictionMaxPodGracePeriod: 20\n", encoding="utf-8")
    configuration = load_configuration([str(path)])
    assert configuration.eviction.max_pod_grace_period_s == 20
    assert configuration.warnings == (
        f"{path}: key 'evictionMaxPodGracePeriod' given twice; the last value is used, as the kubelet does",)


def test_a_threshold_below_one_byte_is_kept_as_the_kubelet_keeps_it_and_warned_of(tmp_path: Path) -> None:
    """The kubelet parses `1e-999999999` as 1n and starts: a threshold met only when nothing is left (issue 38)."""
    path = tmp_path / "kubelet.yaml"
    path.write_text(KUBELET + "evictionHard:\n  memory.available: 1e-999999999\n  nodefs.available: 10%\n",
                    encoding="utf-8")
    configuration = load_configuration([str(path)])
    [threshold] = [t for t in configuration.eviction.thresholds() if t.signal is Signal.MEMORY_AVAILABLE]
    assert threshold.value.quantity is not None and str(threshold.value.quantity) == "1e-9"
    assert configuration.warnings == (
        "evictionHard: memory.available: '1e-999999999' is below one unit (the kubelet reads it as 1e-9): the "
        "threshold is met only when nothing at all is available",)
    with pytest.raises(ConfigError, match="below one unit"):
        load_configuration([str(path)], strict=True)


def test_empty_items_of_a_threshold_flag_are_skipped_as_the_kubelet_skips_them_and_warned_of() -> None:
    configuration = load_configuration([], [("eviction-hard", "memory.available<1Gi,,,,")])
    assert configuration.eviction.hard == {"memory.available": "1Gi"}
    assert configuration.warnings == (
        "--eviction-hard 'memory.available<1Gi,,,,': empty items skipped, as the kubelet does",)
    assert load_configuration([], [("eviction-hard", "memory.available<1Gi")]).warnings == ()


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_as_a_configuration_file_raise_only_a_configuration_error(tmp_path_factory: pytest.TempPathFactory,
                                                                        raw: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    path.write_bytes(KUBELET.encode() + raw)
    try:
        load_configuration([str(path)])
    except ConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 1000


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children,
                                                                                    max_size=4), max_leaves=30),
       st.sampled_from(["evictionHard", "evictionSoft", "evictionMaxPodGracePeriod", "kind", "cgroupDriver",
                        "evictionPressureTransitionPeriod", "imageGCHighThresholdPercent"]))
def test_any_value_under_a_kubelet_key_raises_only_a_configuration_error(
        tmp_path_factory: pytest.TempPathFactory, value: object, key: str) -> None:
    import yaml

    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    document = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", key: value}
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    try:
        load_configuration([str(path)])
    except ConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 1000


@pytest.mark.parametrize("raw", [b"9" * 5001, b"18446744073709551616", b"1" * 21 + b"\n"])
def test_a_number_no_kernel_writes_is_an_unreadable_cgroup_file(raw: bytes) -> None:
    with pytest.raises(SampleError, match="out of the uint64 range"):
        _uint("/sys/fs/cgroup/memory/memory.usage_in_bytes", raw)


def test_a_number_no_kernel_writes_is_an_unreadable_proc_file() -> None:
    with pytest.raises(SampleError, match="out of the uint64 range"):
        procfs._uint(Path("/proc/sys/kernel/pid_max"), "9" * 5001)


# --- a recording in stateDir as hostile input: `explain`, `replay` and `record export` ---------------------------

READERS = (("explain", "--last", "--state-dir", "{state}"), ("replay", "{state}"),
           ("record", "export", "--state-dir", "{state}"))
# A reader's address space: far above what reading a small recording takes, far below what the hostile files
# below would make it take.
READER_ADDRESS_SPACE = 1 << 30
LAST_NAME = "20991231T000000.000000Z-1"  # sorts after the recorded segments


# The reader limits its own address space before evictd's command line runs. Not a `preexec_fn`: that makes
# subprocess fork() instead of vfork(), and fork() runs the pthread_atfork handlers of gRPC, which earlier tests
# of the session loaded: its child handler restarts gRPC's poller thread in the child, which then fails on the
# epoll descriptor that subprocess closes before exec ("Epoll1Poller ... epoll_wait error: Bad file descriptor")
# and aborts the child (SIGABRT). vfork() runs no atfork handler.
LIMITED_EVICTD = ("import resource, runpy, sys; "
                  f"resource.setrlimit(resource.RLIMIT_AS, ({READER_ADDRESS_SPACE}, {READER_ADDRESS_SPACE})); "
                  "sys.argv[0] = 'evictd'; runpy.run_module('evictd', run_name='__main__', alter_sys=True)")


def read_with(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    """Run a reader with its address space limited (a memory bomb fails it: MemoryError, exit 1)."""
    return subprocess.run([sys.executable, "-c", LIMITED_EVICTD, *(a.format(state=state) for a in args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def a_recording(tmp_path: Path) -> Path:
    """01-memory-pressure recorded by the real recorder: batch-job and shop/web evicted."""
    return memory_recording(tmp_path)


def fifo_segment(folder: Path) -> str:
    os.mkfifo(folder / f"{LAST_NAME}.jsonl")
    return "a FIFO, not a regular file: not read"


def dev_zero_segment(folder: Path) -> str:
    (folder / f"{LAST_NAME}.jsonl").symlink_to("/dev/zero")
    return "a symlink, not a regular file: not read"


@functools.cache
def gzip_bomb() -> bytes:
    """2 GiB of zeros, and no newline, in 2 MiB of gzip: 128 gzip members of 16 MiB of zeros each (a gzip file may
    hold several members, read back as one stream), made once for the session in a few milliseconds instead of
    deflating 2 GiB for each reader."""
    member = gzip.compress(bytes(16 << 20), compresslevel=9)
    return member * 128


def gzip_bomb_segment(folder: Path) -> str:
    """2 GiB of zeros, and no newline, in a 2 MiB gzip file."""
    (folder / f"{LAST_NAME}.jsonl.gz").write_bytes(gzip_bomb())
    return "more than 256 MiB of lines: the rest is not read"


def bad_lines_segment(folder: Path) -> str:
    """A segment of the recording's own lines, with lines no evictd writes between them."""
    first = Path(segment_paths(str(folder))[0])
    raw = gzip.decompress(first.read_bytes()) if first.suffix == ".gz" else first.read_bytes()
    lines = raw.splitlines(keepends=True)
    nested = b"[" * 200_000 + b"]" * 200_000 + b"\n"
    overflowing = lines[1].replace(b'"wall":', b'"wall":1e999,"x":', 1)
    huge = lines[2].replace(b'"cycle":', b'"cycle":' + b"9" * 4000 + b',"y":', 1)
    (folder / f"{LAST_NAME}.jsonl").write_bytes(b"".join([lines[0], nested, overflowing, huge, *lines[3:]]))
    return "a line cannot be read (nested too deeply): skipped"


HOSTILE_SEGMENTS = {"fifo": fifo_segment, "dev-zero-symlink": dev_zero_segment, "gzip-bomb": gzip_bomb_segment,
                    "bad-lines": bad_lines_segment}


@pytest.mark.parametrize("case", sorted(HOSTILE_SEGMENTS))
@pytest.mark.parametrize("reader", READERS, ids=[r[0] for r in READERS])
def test_a_hostile_segment_is_skipped_with_a_message_and_the_rest_is_read(tmp_path: Path, case: str,
                                                                         reader: tuple[str, ...]) -> None:
    state = a_recording(tmp_path)
    folder = state / "recording"
    expected = HOSTILE_SEGMENTS[case](folder)
    started = time.monotonic()
    done = read_with(*reader, state=state)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert any(line.startswith("warning: ") and expected in line for line in done.stderr.splitlines()), done.stderr
    assert len(done.stderr) < 10_000
    if reader[0] == "explain":
        assert done.stdout.startswith("decision ") and "evicted shop/web for memory.available" in done.stdout
    print(f"{case}, {reader[0]}: {time.monotonic() - started:.1f} s")


def test_strings_from_a_recording_are_printed_with_terminal_controls_escaped(tmp_path: Path) -> None:
    state = a_recording(tmp_path)
    evil = "run\x1b]0;owned\x07\x1b[2J\nFAKE LINE\u202e"
    for path in map(Path, segment_paths(str(state / "recording"))):
        text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        run = json.loads(text.splitlines()[0])["run"]
        path.unlink()
        plain = path.with_suffix("") if path.suffix == ".gz" else path
        # The run id, and the recorded eviction messages (so that `replay` shows them as differences).
        text = text.replace(json.dumps(run).encode(), json.dumps(evil).encode())
        text = text.replace(b'"message":"', b'"message":"\\u001b[2J\\nFAKE LINE')
        # A namespace too: errors name recorded pods.
        plain.write_bytes(text.replace(b'"namespace":"jobs"', b'"namespace":"jobs\\u001b[2J"'))
    for reader in (("explain", "--last", "--state-dir", str(state)), ("replay", str(state)),
                   ("explain", "--now", "--state-dir", str(state))):
        done = evictd(*reader)
        assert done.returncode == 0, done.stderr
        for output in (done.stdout, done.stderr):
            assert not any(ch in output for ch in "\x1b\x07\u202e"), (reader, output)
            assert "\nFAKE LINE" not in output
    not_found = evictd("explain", "nobody", "--state-dir", str(state))
    assert not_found.returncode == 1 and "jobs\\x1b[2J/batch-job" in not_found.stderr, not_found.stderr
    assert "\x1b" not in not_found.stderr
    replayed = evictd("replay", str(state))
    assert "\\x1b[2J\\nFAKE LINE" in replayed.stdout, replayed.stdout
    # The export keeps recorded strings as they are, escaped as YAML escapes them, and reads back the same.
    exported = evictd("record", "export", "--state-dir", str(state))
    assert exported.returncode == 0 and "\x1b" not in exported.stdout
    scenario = yaml.safe_load(exported.stdout)
    assert "jobs\x1b[2J" in {pod["metadata"]["namespace"] for pod in scenario["pods"]}
    explained = evictd("explain", "--last", "--state-dir", str(state))
    assert explained.stdout.splitlines()[0].startswith("decision run\\x1b]0;owned\\x07\\x1b[2J\\nFAKE LINE\\u202e/")


def test_a_config_file_error_names_the_whole_path(tmp_path: Path) -> None:
    """A path is shown whole, where any other value is cut at 80 characters: a path cut short names no file."""
    deep = tmp_path / ("a-folder-with-a-long-name-" * 6) / "kubelet.yaml"
    with pytest.raises(ConfigError) as raised:
        load_configuration([str(deep)])
    assert len(str(deep)) > 120 and repr(str(deep)) in str(raised.value)

"""Small things an operator reads: the same pod described the same way by every command, ages printed as ages,
sentences that end, API errors that say no status rather than `(None)`."""

from __future__ import annotations

from pathlib import Path

from evictd.core.errors import KubeError
from evictd.run.runtime_link import RuntimeLink
from test_cli import evictd

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "config" / "examples" / "recorded" / "01-memory-pressure"


def test_simulate_and_explain_describe_the_mirror_pod_in_the_same_words() -> None:
    simulated = evictd("simulate", "config/examples/01-memory-pressure.yaml")
    explained = evictd("explain", "--state-dir", str(RECORDED), "--last")
    assert simulated.returncode == 0 and explained.returncode == 0, simulated.stderr + explained.stderr
    # The scenario's kube-proxy carries kubernetes.io/config.mirror: the API's copy of a static pod.
    assert "kube-system/kube-proxy-x7k2p (never evicted: a mirror pod)" in simulated.stdout
    (row,) = [line for line in explained.stdout.splitlines() if line.split()[1:2] == ["kube-system/kube-proxy-x7k2p"]]
    assert row.endswith("never evicted: a mirror pod")
    assert "static pod" not in simulated.stdout + explained.stdout


def test_explain_now_prints_the_age_of_an_old_recording_without_e_notation() -> None:
    done = evictd("explain", "--state-dir", str(RECORDED), "--now")
    assert done.returncode == 0, done.stderr
    assert "e+" not in done.stderr + done.stdout, done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if "this is not now" in line]
    # The recording is of 1970: decades old, said in days as the NOT NOW line says it.
    assert warning.startswith("warning: the newest recorded cycle is ") and "d" in warning.split(" is ")[1], warning


def test_an_api_error_without_a_status_says_none_in_parentheses_nowhere() -> None:
    assert str(KubeError("list pods", None, "pod cache not synced")) == (
        "Kubernetes API list pods failed: pod cache not synced")
    assert str(KubeError("get nodes/n", 403, "forbidden")) == "Kubernetes API get nodes/n failed (403): forbidden"


class Silent:
    endpoint = "unix:///nowhere.sock"
    timeout_s = 10.0

    def version(self, timeout_s: float) -> object:
        from evictd.core.errors import EvictdError

        raise EvictdError("no container runtime answers")


def test_the_no_runtime_line_says_when_it_asks_again() -> None:
    from clocks import ManualClock
    from log_capture import LogCapture

    log = LogCapture()
    link = RuntimeLink(Silent(), lambda version: None, log, retry_s=30.0, clock=ManualClock())  # type: ignore[arg-type]
    assert link.connect() is None
    ((_, event, fields),) = log.lines
    assert event.endswith("asked again after a cycle, at most every retry_s seconds"), event
    assert fields["retry_s"] == 30.0


def test_bare_evictd_prints_its_usage_line_and_its_commands() -> None:
    done = evictd()
    assert done.returncode == 2 and done.stdout == ""
    usage, said = done.stderr.splitlines()
    assert usage == "usage: evictd [-h] [--version] COMMAND ..."
    assert said.startswith("evictd: a COMMAND is needed, one of: check-config, run, ") and "evictd --help" in said


def kubelet_file(tmp_path: Path, hard: dict[str, str]) -> Path:
    import yaml

    path = tmp_path / "kubelet.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                                    "evictionHard": hard}), encoding="utf-8")
    return path


def test_a_bare_small_number_for_a_bytes_signal_is_hinted_as_a_forgotten_percent(tmp_path: Path) -> None:
    from evictd.config import load_configuration

    config = load_configuration([kubelet_file(tmp_path, {"nodefs.available": "10", "memory.available": "100Mi",
                                                         "nodefs.inodesFree": "5", "imagefs.available": "15%"})])
    # Read as the kubelet reads it (10 bytes), with a hint; counts (inodes) and amounts with a unit are left alone.
    assert config.warnings == ("evictionHard: nodefs.available: '10' is 10 bytes, a threshold met only when almost "
                               "nothing is left: a forgotten '%'? (10% is a share; 100Mi, 1Gi are amounts)",)
    nodefs = [t for t in config.eviction.thresholds() if t.signal == "nodefs.available"]
    assert [str(t.value.quantity) for t in nodefs] == ["10"]
    big = load_configuration([kubelet_file(tmp_path, {"nodefs.available": str(2 << 20), "memory.available": "1"})])
    assert [w for w in big.warnings if "forgotten" in w] == [
        "evictionHard: memory.available: '1' is 1 bytes, a threshold met only when almost nothing is left: a "
        "forgotten '%'? (1% is a share; 100Mi, 1Gi are amounts)"]


def test_check_config_shows_the_hint_and_run_logs_it(tmp_path: Path) -> None:
    path = kubelet_file(tmp_path, {"nodefs.available": "10"})
    checked = evictd("check-config", "--config", str(path))
    assert checked.returncode == 0 and "warning: evictionHard: nodefs.available: '10' is 10 bytes" in checked.stderr
    ran = evictd("run", "--config", str(path), "--state-dir", str(tmp_path / "state"), "--dry-run", "--cycles", "1")
    warned = [line for line in ran.stdout.splitlines() + ran.stderr.splitlines() if "configuration warning" in line]
    assert any("a forgotten '%'?" in line for line in warned), ran.stdout + ran.stderr

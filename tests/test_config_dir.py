"""`--config-dir` and `--kubelet-config-dir`: the kubelet's drop-in folders read and merged as the kubelet does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evictd.config import load_configuration
from evictd.config_files import dropin_files
from evictd.core.errors import ConfigError
from evictd.core.kubelet_config import DEFAULT_EVICTION_HARD

ROOT = Path(__file__).resolve().parents[1]
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
EVICTD = "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def evictd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evictd", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


def test_files_are_taken_in_the_kubelets_walk_order(tmp_path: Path) -> None:
    for name in ("20-b.conf", "10-a.conf", "15-dir/99-z.conf", "15-dir/01-y.conf", "30-c.yaml", "README",
                 ".conf", "40-d.conf.bak"):
        write(tmp_path / name, KUBELET)
    names = [str(Path(path).relative_to(tmp_path)) for path in dropin_files(str(tmp_path))]
    assert names == [".conf", "10-a.conf", "15-dir/01-y.conf", "15-dir/99-z.conf", "20-b.conf"]


def test_a_dropin_merges_onto_the_config_where_a_second_config_replaces(tmp_path: Path) -> None:
    base = write(tmp_path / "config.yaml", KUBELET + "evictionSoft: {memory.available: 1Gi}\n"
                 "evictionSoftGracePeriod: {memory.available: 1m}\n")
    dropin = write(tmp_path / "conf.d" / "10-eviction.conf", KUBELET + "evictionHard: {memory.available: 500Mi}\n")
    merged = load_configuration([base], config_dir=str(tmp_path / "conf.d"))
    assert merged.eviction.hard == {**DEFAULT_EVICTION_HARD, "memory.available": "500Mi"}
    assert merged.eviction.soft == {"memory.available": "1Gi"}
    replaced = load_configuration([base, dropin])
    assert replaced.eviction.hard == {"memory.available": "500Mi"}, "a second --config replaces whole fields"


def test_flags_apply_after_the_dropins_and_evictd_settings_beside_them(tmp_path: Path) -> None:
    base = write(tmp_path / "config.yaml", KUBELET + "cgroupDriver: systemd\n---\n" + EVICTD + "dryRun: true\n")
    write(tmp_path / "d" / "10.conf", KUBELET + "evictionHard: {memory.available: 500Mi}\ncgroupDriver: cgroupfs\n")
    merged = load_configuration([base], [("eviction-hard", "memory.available<1Gi")], config_dir=str(tmp_path / "d"))
    assert merged.eviction.hard == {"memory.available": "1Gi"}, "a kubelet flag replaces the map, as the kubelet's"
    assert merged.evictd.dry_run is True
    assert merged.evictd.cgroup_driver == "cgroupfs", "inherited from the merged KubeletConfiguration"


@pytest.mark.parametrize(("name", "text", "says"), [
    ("10-empty.conf", "", "holds no document: the kubelet refuses to start on an empty drop-in"),
    ("10-kindless.conf", "evictionHard: {memory.available: 500Mi}\n", "each document of a --config file names"),
    ("10-other.conf", EVICTD + "dryRun: false\n", "a drop-in must be a KubeletConfiguration"),
    ("10-bad.conf", KUBELET + "evictionHard: {memory.available: 500MB}\n", "evictionHard"),
    ("10-yaml.conf", KUBELET + "evictionHard: {memory.available: [\n", "invalid YAML"),
    ("10-twice.conf", KUBELET + "evictionMaxPodGracePeriod: 10\nevictionMaxPodGracePeriod: 20\n", "duplicate key"),
])
def test_a_bad_dropin_is_a_config_error_naming_the_file(tmp_path: Path, name: str, text: str, says: str) -> None:
    path = write(tmp_path / "d" / name, text)
    with pytest.raises(ConfigError) as error:
        load_configuration([], config_dir=str(tmp_path / "d"))
    assert says in str(error.value)
    result = evictd("check-config", "--config-only", "--config-dir", str(tmp_path / "d"))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and says in result.stderr
    assert path in result.stderr or "evictionHard" in result.stderr


def test_a_missing_folder_is_a_config_error(tmp_path: Path) -> None:
    result = evictd("check-config", "--config-only", "--config-dir", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert "--config-dir" in result.stderr and "not a folder" in result.stderr


def test_unknown_fields_in_a_dropin_warn_and_fail_when_strict(tmp_path: Path) -> None:
    write(tmp_path / "d" / "10.conf", KUBELET + "evictionHrad: {memory.available: 500Mi}\n")
    assert any("evictionHrad" in warning
               for warning in load_configuration([], config_dir=str(tmp_path / "d")).warnings)
    with pytest.raises(ConfigError, match="evictionHard"):
        load_configuration([], config_dir=str(tmp_path / "d"), strict=True)


KUBELET_OFF = KUBELET + ('evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", '
                         'imagefs.available: "0%", imagefs.inodesFree: "0%"}\n')


def test_the_handover_check_reads_the_kubelets_dropins(tmp_path: Path) -> None:
    """The kubelet's base file turns its eviction off; its drop-in turns memory back on above evictd's threshold:
    the kubelet would evict first, which the base file alone hides."""
    ours = "config/kubelet-config.yaml"  # memory.available<200Mi
    base = write(tmp_path / "kubelet.yaml", KUBELET_OFF)
    write(tmp_path / "kubelet.conf.d" / "10-eviction.conf", KUBELET + "evictionHard: {memory.available: 500Mi}\n")
    alone = evictd("check-config", "--config", ours, "--kubelet-config", base, "-o", "json")
    assert json.loads(alone.stdout)["handover"]["mode"] == "evictd-alone"
    both = evictd("check-config", "--config", ours, "--kubelet-config", base,
                  "--kubelet-config-dir", str(tmp_path / "kubelet.conf.d"), "-o", "json")
    assert both.returncode == 0, both.stderr
    handover = json.loads(both.stdout)["handover"]
    signals = {s["signal"]: s for s in handover["signals"]}
    assert signals["memory.available"]["evicts"] == "kubelet-first"
    assert signals["nodefs.available"]["evicts"] == "evictd", "the base's 0% stays: the drop-in merged one key"
    assert f"--kubelet-config-dir {tmp_path / 'kubelet.conf.d'}" in handover["kubeletConfig"]


def test_the_kubelet_dropins_need_its_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    result = evictd("check-config", "--config-only", "--kubelet-config", "", "--kubelet-config-dir",
                    str(tmp_path / "d"))
    assert result.returncode == 2
    assert "--kubelet-config-dir" in result.stderr and "needs the kubelet's configuration file" in result.stderr


def test_config_from_standard_input_is_read_and_only_once() -> None:
    text = KUBELET + "evictionHard: {memory.available: 500Mi}\n"
    done = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config-only", "--config", "-",
                           "-o", "json"], cwd=ROOT, input=text, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert next(t["value"] for t in json.loads(done.stdout)["thresholds"]) == {"quantity": "500Mi"}
    twice = subprocess.run([sys.executable, "-m", "evictd", "check-config", "--config-only", "--config", "-",
                            "--config", "-"], cwd=ROOT, input=text, capture_output=True, text=True, timeout=60,
                           check=False)
    assert twice.returncode == 2 and "standard input can be read once" in twice.stderr


def test_a_bad_quantity_says_what_would_be_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "k.yaml", KUBELET + "evictionHard: {memory.available: 500MB}\n")
    result = evictd("check-config", "--config-only", "--config", path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "evictionHard[memory.available]: invalid value '500MB'" in result.stderr
    assert "such as 500Mi, 1Gi or 500M, or a percentage such as 10%" in result.stderr

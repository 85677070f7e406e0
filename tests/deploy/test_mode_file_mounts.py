"""The node-local mode file where every shipped deployment can reach it: `evictd mode` (run on the host over SSH, or
in the evictd container with `kubectl exec`/`crictl exec`) writes `<stateDir>/mode`, and `evictd run` reads it there.

For the kustomize DaemonSet, every DaemonSet the chart renders (a pool's too, and with its state on another host
path) and the systemd unit: the stateDir the shipped configuration gives `evictd run` is the one `evictd mode` uses
without options (and with `--config` of the same file), it is mounted (or given by systemd) writable, as a folder of
the host at the path the docs tell operators to write, and the container's read-only root filesystem does not hold
the command's temporary file (it is written beside the mode file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from test_manifests import K8S, SYSTEMD, UNIT, container, load_configuration_text, pod_spec, the, unit_sections

from evictd.config import load_configuration
from evictd.state_dir import StateDir
from helm_tool import render, values_file

# Where docs/deployment.md's rollback tells an operator on the node to write (`echo dry-run > ...`).
HOST_MODE_FILE = "/var/lib/evictd/mode"
POOL_STATE = "/data/evictd"


def state_mount(spec: dict[str, Any], state_dir: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The container's mount holding `state_dir` and its volume (fails when none does)."""
    [evictd] = [c for c in spec["containers"] if c["name"] == "evictd"]
    [mount] = [m for m in evictd["volumeMounts"] if state_dir == m["mountPath"]
               or state_dir.startswith(m["mountPath"].rstrip("/") + "/")]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return mount, volume


def assert_writable_state(spec: dict[str, Any], config: str, folder: Path, host_state: str) -> None:
    """The configuration `config`'s stateDir: mounted writable from the host folder `host_state`, and the one
    `evictd mode` uses without options."""
    state_dir = load_configuration_text(config, folder).evictd.state_dir
    assert state_dir == load_configuration([]).evictd.state_dir, "`evictd mode` alone writes where run reads"
    mount, volume = state_mount(spec, state_dir)
    assert not mount.get("readOnly", False), "the mode file is written from inside the container too"
    assert volume["hostPath"] == {"path": host_state, "type": "DirectoryOrCreate"}
    # The mode file straight in the mounted folder: on the host it is <host_state>/mode.
    assert Path(StateDir(state_dir).mode).relative_to(mount["mountPath"]) == Path("mode")
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True  # hence the temporary beside


def test_the_kustomize_daemonset_mounts_the_state_dir_writable_where_the_command_writes(tmp_path: Path) -> None:
    config = the("ConfigMap", K8S / "configmap.yaml")["data"]["config.yaml"]
    assert_writable_state(pod_spec(), config, tmp_path, "/var/lib/evictd")
    assert StateDir("/var/lib/evictd").mode == HOST_MODE_FILE
    assert "--state-dir" not in container()["args"], "the configuration's stateDir, as `evictd mode` reads it"


def test_every_daemonset_of_the_chart_mounts_the_state_dir_writable_pools_too(tmp_path: Path) -> None:
    values = {"dryRun": True, "pools": [{"name": "canary", "nodeSelector": {"evictd.io/pool": "canary"},
                                         "dryRun": False, "hostPaths": {"state": POOL_STATE}}]}
    objects = render(values_file(tmp_path, values))
    configs = {o["metadata"]["name"]: o["data"]["config.yaml"] for o in objects if o["kind"] == "ConfigMap"}
    daemonsets = [o for o in objects if o["kind"] == "DaemonSet"]
    assert sorted(d["metadata"]["name"] for d in daemonsets) == ["evictd", "evictd-canary"]
    for daemonset in daemonsets:
        spec = daemonset["spec"]["template"]["spec"]
        [config_volume] = [v for v in spec["volumes"] if v["name"] == "config"]
        host_state = POOL_STATE if daemonset["metadata"]["name"] == "evictd-canary" else "/var/lib/evictd"
        folder = tmp_path / daemonset["metadata"]["name"]
        folder.mkdir()
        assert_writable_state(spec, configs[config_volume["configMap"]["name"]], folder, host_state)


def test_the_systemd_unit_gives_evictd_the_state_dir_the_command_writes() -> None:
    service = unit_sections(UNIT)["Service"]
    assert service["StateDirectory"] == ["evictd"], "systemd makes /var/lib/evictd, writable by the service"
    assert "DynamicUser" not in service, "no /var/lib/private indirection: the operator's path is the unit's"
    assert "/var/lib/evictd" not in " ".join(service.get("ReadOnlyPaths", []) + service.get("InaccessiblePaths", []))
    [settings_document] = [d for d in yaml.safe_load_all((SYSTEMD / "config.yaml").read_text(encoding="utf-8"))
                           if d.get("kind") == "EvictdConfiguration"]
    state_dir = settings_document.get("stateDir", load_configuration([]).evictd.state_dir)
    assert StateDir(state_dir).mode == HOST_MODE_FILE
    assert load_configuration([str(SYSTEMD / "config.yaml")]).evictd.state_dir == state_dir

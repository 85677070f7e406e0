"""A kubelet's /configz answer read as the resolved configuration it is (`evictd.core.configz`).

tests/fixtures/configz/kubeadm-v1.36.json is what `kubectl get --raw /api/v1/nodes/NODE/proxy/configz` prints for
a kubeadm node's kubelet v1.36 run with its stock eviction settings: one line of JSON, the answer itself without
apiVersion or kind, the configuration under `kubeletconfig` with its own kind and apiVersion first, then v1beta1's
fields in the order of the Go struct, every default filled in, durations as Go prints them (`5m0s`), empty maps and
lists left out. It was taken from the real kubelet v1.36.2 of tests/cluster, with that node's paths, ports, cgroup
root and eviction thresholds set to a kubeadm node's stock ones (tests/cluster/test_kubelet_flags_real.py reads the
real answer itself).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from evictd.core.configz import CONFIGZ_KEY, configz_document, is_configz, zero_transition_period
from evictd.core.errors import ConfigError
from evictd.core.kubelet_config import (
    DEFAULT_EVICTION_HARD,
    KUBELET_API_VERSION,
    KUBELET_FIELDS,
    KUBELET_KIND,
    eviction_settings,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "configz" / "kubeadm-v1.36.json"


def answer() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FIXTURE.read_text())
    return loaded


def resolved(**changes: Any) -> dict[str, Any]:
    """The fixture's answer with top-level fields of its configuration changed (None: left out, as omitempty)."""
    changed = copy.deepcopy(answer())
    for key, value in changes.items():
        if value is None:
            changed[CONFIGZ_KEY].pop(key, None)
        else:
            changed[CONFIGZ_KEY][key] = value
    return changed


def test_the_fixture_is_a_v1_36_answer_with_fields_the_kubelet_knows() -> None:
    document = answer()
    assert list(document) == [CONFIGZ_KEY]
    inner = document[CONFIGZ_KEY]
    assert list(inner)[:2] == ["kind", "apiVersion"] and (inner["kind"], inner["apiVersion"]) == (
        KUBELET_KIND, KUBELET_API_VERSION)
    assert set(inner) - {"kind", "apiVersion"} <= KUBELET_FIELDS


def test_the_shape_is_told_apart_from_a_kubelet_configuration() -> None:
    assert is_configz(answer())
    assert not is_configz({"apiVersion": KUBELET_API_VERSION, "kind": KUBELET_KIND, "kubeletconfig": {}})
    assert not is_configz({"evictionHard": {}})
    assert not is_configz(["kubeletconfig"])


def test_the_stock_answer_reads_as_the_stock_kubelet() -> None:
    document = configz_document(answer(), "configz.json")
    assert (document["apiVersion"], document["kind"]) == (KUBELET_API_VERSION, KUBELET_KIND)
    settings = eviction_settings(document)
    assert dict(settings.hard) == dict(DEFAULT_EVICTION_HARD)
    assert settings.pressure_transition_period_s == 300
    assert settings.enforce_node_allocatable == ("pods",)
    assert settings.local_storage_capacity_isolation is True
    assert [str(t.signal) for t in settings.thresholds()].count("allocatableMemory.available") == 1


@pytest.mark.parametrize(("changes", "hard", "enforced"), [
    # `--eviction-hard=` emptied the map: omitempty leaves it out, and it is no threshold, not the defaults.
    ({"evictionHard": None}, {}, ("pods",)),
    # mergeDefaultEvictionSettings was applied at load, then `--eviction-hard=memory.available<500Mi` replaced the
    # map: the answer shows the flag's map and `true`, and the defaults must not come back.
    ({"evictionHard": {"memory.available": "500Mi"}, "mergeDefaultEvictionSettings": True},
     {"memory.available": "500Mi"}, ("pods",)),
    # `--enforce-node-allocatable=` emptied the list: left out, and no enforcement (no allocatable copy), not [pods].
    ({"enforceNodeAllocatable": None}, dict(DEFAULT_EVICTION_HARD), ()),
], ids=["empty-hard-left-out", "merge-flag-then-flag-map", "empty-enforcement-left-out"])
def test_what_the_answer_leaves_out_or_already_merged_is_not_defaulted_again(
        changes: dict[str, Any], hard: dict[str, str], enforced: tuple[str, ...]) -> None:
    settings = eviction_settings(configz_document(resolved(**changes), "configz.json"))
    assert dict(settings.hard) == hard
    assert settings.enforce_node_allocatable == enforced


def test_a_zero_transition_period_is_told_apart() -> None:
    assert not zero_transition_period(configz_document(answer(), "c"))
    assert zero_transition_period(configz_document(resolved(evictionPressureTransitionPeriod="0s"), "c"))


@pytest.mark.parametrize("inner", [None, [], "x"], ids=["null", "list", "string"])
def test_an_answer_without_a_mapping_names_the_key(inner: object) -> None:
    with pytest.raises(ConfigError) as exc:
        configz_document({CONFIGZ_KEY: inner}, "configz.json")
    assert str(exc.value).startswith(f"configz.json.kubeletconfig: invalid value {inner!r}: a /configz answer holds")

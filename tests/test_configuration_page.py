"""docs/configuration.md states the configuration the code has: each table lists every key, once, with its default.

The EvictdConfiguration table must list exactly the settings `EvictdSettings` declares (each field's YAML name)
and the stall settings an EvictdConfiguration carries; the KubeletConfiguration table exactly the fields evictd
reads from a KubeletConfiguration (found by loading a configuration whose merged documents record each key the
code looks up). Each default is what `load_configuration` gives with no file at all.

A table row is `| keys | default | notes |`: the keys are the backticked names of the first cell; the default is
read from the backticked values of the second cell: one per key when there are as many as keys, else the last
one for every key (`the KubeletConfiguration's, else `cgroupfs``); a map is its `key: value` items. A default
that is empty (an empty string, unset, no items) is a cell starting with "empty", "none" or "unset".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

import evictd.config
from evictd.config import STALL_SETTINGS, Configuration, EvictdSettings, load_configuration
from evictd.core.duration import parse_go_duration
from evictd.core.kubelet_config import KUBELET_FIELDS

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
EMPTY_WORDS = ("empty", "none", "unset")


def table(heading: str) -> dict[str, str]:
    """The default cell of each key of the first table under the `## ` heading that starts with `heading`."""
    section = PAGE.read_text().split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 3:
            continue
        keys = re.findall(r"`([^`]+)`", cells[0])
        values = re.findall(r"`([^`]+)`", cells[1])
        for index, key in enumerate(keys):
            assert key not in rows, f"{key} listed twice"
            if cells[1].lower().startswith(EMPTY_WORDS):
                rows[key] = ""
            elif len(values) == len(keys) and len(keys) > 1:
                rows[key] = values[index]
            else:
                rows[key] = "\n".join(values) if ":" in "".join(values) and len(values) > 1 else values[-1]
    return rows


def stated(text: str, default: object) -> bool:
    """Whether the page's `text` states the code's `default`."""
    if default in ("", None, (), {}):
        return text == ""
    if isinstance(default, bool):
        return text == str(default).lower()
    if isinstance(default, Enum):
        return text == str(default.value)
    if isinstance(default, int):
        return text.replace(",", "") == str(default)
    if isinstance(default, float):
        return parse_go_duration(text) == default
    if isinstance(default, tuple):
        return text == f"[{', '.join(default)}]"
    if isinstance(default, Mapping):
        return dict(item.split(": ", 1) for item in text.splitlines()) == dict(default)
    return text == default


def read_kubelet_keys() -> tuple[set[str], Configuration]:
    """The KubeletConfiguration keys `load_configuration` looks up, and the configuration it returns, no file given."""
    documents: list[set[str]] = []

    class Recording(dict[str, Any]):
        def __init__(self, merged: Mapping[str, object]) -> None:
            super().__init__(merged)
            self.seen: set[str] = set()
            documents.append(self.seen)

        def get(self, key: str, default: object = None) -> Any:
            self.seen.add(key)
            return super().get(key, default)

        def __getitem__(self, key: str) -> Any:
            self.seen.add(key)
            return super().__getitem__(key)

        def __contains__(self, key: object) -> bool:
            self.seen.add(str(key))
            return super().__contains__(key)

    merge = evictd.config.merge_documents
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evictd.config, "merge_documents", lambda docs: Recording(merge(docs)))
        configuration = load_configuration([])
    kubelet, _evictd = documents  # merged in this order: the KubeletConfiguration's, then the EvictdConfiguration's
    return kubelet, configuration


def evictd_defaults() -> dict[str, object]:
    configuration = load_configuration([])
    defaults: dict[str, object] = {f.metadata["yaml"]: getattr(configuration.evictd, f.name)
                                   for f in fields(EvictdSettings)}
    eviction = configuration.eviction
    defaults |= dict(zip(STALL_SETTINGS, (eviction.stall_hard, eviction.stall_soft, eviction.stall_soft_grace_period,
                                          eviction.stall_minimum_reclaim, eviction.stall_hard_without_psi,
                                          eviction.stall_requires_node_reclaim),
                         strict=True))
    return defaults


# The KubeletConfiguration fields' defaults as evictd applies them, from the configuration loaded without a file.
KUBELET_DEFAULT: dict[str, Callable[[Configuration], object]] = {
    "evictionHard": lambda c: c.eviction.hard,
    "evictionSoft": lambda c: c.eviction.soft,
    "evictionSoftGracePeriod": lambda c: c.eviction.soft_grace_period,
    "evictionMinimumReclaim": lambda c: c.eviction.minimum_reclaim,
    "evictionPressureTransitionPeriod": lambda c: c.eviction.pressure_transition_period_s,
    "evictionMaxPodGracePeriod": lambda c: c.eviction.max_pod_grace_period_s,
    # Its default shows in what an `evictionHard: {}` keeps: true would add the default signals back.
    "mergeDefaultEvictionSettings": lambda c: bool(load_configuration([], base={"evictionHard": {}}).eviction.hard),
    "enforceNodeAllocatable": lambda c: c.eviction.enforce_node_allocatable,
    "localStorageCapacityIsolation": lambda c: c.eviction.local_storage_capacity_isolation,
    "kernelMemcgNotification": lambda c: c.eviction.kernel_memcg_notification,
    "featureGates": lambda c: c.eviction.feature_gates,
    "imageGCHighThresholdPercent": lambda c: c.image_gc.high_threshold_percent,
    "imageGCLowThresholdPercent": lambda c: c.image_gc.low_threshold_percent,
    "imageMinimumGCAge": lambda c: c.image_gc.minimum_gc_age_s,
    "imageMaximumGCAge": lambda c: c.image_gc.maximum_gc_age_s,
    "cgroupDriver": lambda c: c.evictd.cgroup_driver,
    "cgroupRoot": lambda c: c.evictd.cgroup_root,
    "podLogsDir": lambda c: c.evictd.pod_logs_dir,
    "nodeStatusUpdateFrequency": lambda c: c.evictd.node_status_update_frequency_s,
    "nodeStatusReportFrequency": lambda c: c.evictd.node_status_report_frequency_s,
    "nodeLeaseDurationSeconds": lambda c: c.evictd.node_lease_duration_s,
    "systemReserved": lambda c: c.reservation.system_reserved.text,
    "kubeReserved": lambda c: c.reservation.kube_reserved.text,
    "systemReservedCgroup": lambda c: c.reservation.system_reserved_cgroup.name,
    "kubeReservedCgroup": lambda c: c.reservation.kube_reserved_cgroup.name,
}


def test_the_evictd_table_lists_every_setting_the_code_declares_once() -> None:
    page = table("`EvictdConfiguration`")
    declared = set(evictd_defaults())
    assert sorted(set(page) - declared) == [], "on the page, not in the code"
    assert sorted(declared - set(page)) == [], "in the code, not on the page"


def test_the_evictd_table_states_each_default_the_code_has() -> None:
    page = table("`EvictdConfiguration`")
    wrong = {key: (page[key], default) for key, default in evictd_defaults().items()
             if key in page and not stated(page[key], default)}
    assert wrong == {}, "key: (the page's default, the code's)"


def test_the_kubelet_table_lists_every_field_evictd_reads_once() -> None:
    page = table("`KubeletConfiguration`")
    read, _ = read_kubelet_keys()
    assert set(page) <= KUBELET_FIELDS, "only KubeletConfiguration fields"
    assert sorted(set(page) - read) == [], "on the page, never read"
    assert sorted(read - set(page)) == [], "read, not on the page"
    assert set(KUBELET_DEFAULT) == read, "each field read has its default checked below"


def test_the_kubelet_table_states_each_default_evictd_applies() -> None:
    page = table("`KubeletConfiguration`")
    _, configuration = read_kubelet_keys()
    wrong = {key: (page[key], default(configuration)) for key, default in KUBELET_DEFAULT.items()
             if key in page and not stated(page[key], default(configuration))}
    assert wrong == {}, "key: (the page's default, the code's)"

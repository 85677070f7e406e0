"""The real kubelet v1.36.2 and evictd side by side on cgroup v2 (issue 23): the same memory trial, in a guest.

A user-mode Linux guest (tests/uml) runs etcd, kube-apiserver, kube-controller-manager, containerd and the
kubelet as real_cluster.py starts them on this (cgroup v1) host, with nothing told about v2: the kubelet keeps
its default ``failCgroupV1: true``. There bench/kubelet_side_by_side.py runs one memory trial with the kubelet's
own eviction (evictd beside it in dry-run, shadow mode) and one with evictd's (the kubelet's thresholds at
``0%``). Both must choose the hog with the same message, and the shadow must agree with the kubelet. Runs only
in `make test-cluster` (it needs the kube binaries and the guest kernel of `make test`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from guest_cluster import side_by_side_in_guest

pytestmark = pytest.mark.real_cluster

# Boot, the cluster's start in a one-CPU guest, a kubelet restart per side and two trials of about a minute.
GUEST_TIMEOUT_S = 1800.0
MESSAGE_HEAD = "The node was low on resource: memory. Threshold quantity: 500Mi, available: "
# What follows the observed amount, with the hog's usage blanked (it differs by moments).
MESSAGE_TAIL = "Container app was using #Ki, request is 32Mi, has larger consumption of memory. "


def message_shape(message: str) -> tuple[str, str]:
    """The message up to the observed amount, and the rest with its figures blanked."""
    head, _, rest = message.partition("available: ")
    return head + "available: ", re.sub(r"\d+Ki", "#Ki", rest.partition(". ")[2])


def check_trial(trial: dict[str, Any]) -> None:
    """The hog chosen, with the kubelet's message, and its containers stopped after the crossing (the times are
    the bench's figures, not asserted here: a one-CPU guest on a loaded machine makes them vary widely)."""
    assert trial["chosen"] == "hog", trial
    assert message_shape(trial["message"]) == (MESSAGE_HEAD, MESSAGE_TAIL), trial["message"]
    assert trial["crossing_to_stopped_s"] is not None and trial["crossing_to_stopped_s"] > 0, trial


def test_kubelet_and_evictd_on_cgroup_v2_choose_the_same_pod_and_the_shadow_agrees(tmp_path: Path) -> None:
    run, results = side_by_side_in_guest(tmp_path / "guest", ["--trials", "1", "--shadow"], GUEST_TIMEOUT_S)

    # cgroup v2, and the kubelet running with its own default: failCgroupV1 true (it would refuse a v1 node).
    assert results["kubelet"] == {"cgroup_version": 2, "failCgroupV1": True, "cgroupDriver": "cgroupfs"}
    assert "cgroup v2" in results["machine"][1]
    [by_kubelet], [by_evictd] = results["trials"]["kubelet"], results["trials"]["evictd"]
    check_trial(by_kubelet)
    check_trial(by_evictd)
    # Each side evicted on its own: the Evicted event's source, and evictd's decision (its "evicting pod" line)
    # after the crossing.
    assert (by_kubelet["evicted_by"], by_evictd["evicted_by"]) == ("kubelet", "evictd")
    assert by_evictd["crossing_to_decision_s"] is not None and by_evictd["crossing_to_decision_s"] > 0, by_evictd

    # evictd in dry-run beside the kubelet's own eviction decided the pod the kubelet evicted.
    [comparison] = results["shadow"]["comparisons"]
    assert comparison["outcome"] == "agree", comparison
    assert comparison["kubelet"]["pod"] == comparison["evictd"]["pod"]
    assert comparison["evictd"]["pod"] == by_kubelet["pod"]
    report = results["shadow"]["report"]
    assert report["outcomes"]["agree"] == 1 and report["agreement"] == 1.0 and report["disagreements"] == [], report
    assert run.returncode == 0

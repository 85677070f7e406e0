"""The kubelet's drop-in merge (`evictd.core.dropin`): RFC 7386 onto the base as the kubelet loads it."""

from __future__ import annotations

import pytest

from evictd.core.dropin import loaded_base, merge_patch, with_dropins
from evictd.core.kubelet_config import DEFAULT_EVICTION_HARD, eviction_settings

KIND = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}


@pytest.mark.parametrize(("target", "patch", "merged"), [
    # RFC 7386's own examples (appendix A), those a YAML document can hold.
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch_follows_rfc_7386(target: object, patch: object, merged: object) -> None:
    before = repr(target)
    assert merge_patch(target, patch) == merged
    assert repr(target) == before, "the target is not changed"


def test_a_partial_eviction_hard_in_a_dropin_keeps_the_defaults_of_a_base_without_one() -> None:
    merged = with_dropins(dict(KIND), [{**KIND, "evictionHard": {"memory.available": "500Mi"}}])
    assert eviction_settings(merged).hard == {**DEFAULT_EVICTION_HARD, "memory.available": "500Mi"}


def test_a_base_with_its_own_eviction_hard_keeps_only_its_keys_and_the_dropins() -> None:
    base = {**KIND, "evictionHard": {"memory.available": "300Mi", "nodefs.available": "5%"}}
    merged = with_dropins(base, [{**KIND, "evictionHard": {"memory.available": "500Mi"}}])
    assert eviction_settings(merged).hard == {"memory.available": "500Mi", "nodefs.available": "5%"}


def test_merge_defaults_counts_in_the_base_only() -> None:
    partial = {**KIND, "evictionHard": {"memory.available": "300Mi"}}
    in_dropin = with_dropins(partial, [{**KIND, "mergeDefaultEvictionSettings": True}])
    assert eviction_settings(in_dropin).hard == {"memory.available": "300Mi"}
    in_base = with_dropins({**partial, "mergeDefaultEvictionSettings": True}, [])
    assert eviction_settings(in_base).hard == {**DEFAULT_EVICTION_HARD, "memory.available": "300Mi"}


def test_null_removes_a_signal_or_the_whole_map() -> None:
    one = with_dropins(dict(KIND), [{**KIND, "evictionHard": {"imagefs.inodesFree": None}}])
    assert "imagefs.inodesFree" not in eviction_settings(one).hard
    assert len(eviction_settings(one).hard) == len(DEFAULT_EVICTION_HARD) - 1
    # Removed by a drop-in, evictionHard is not defaulted again: the kubelet defaults it only at load time.
    whole = with_dropins(dict(KIND), [{**KIND, "evictionHard": None}])
    assert eviction_settings(whole).hard == {}


def test_dropins_apply_in_order_and_later_ones_win() -> None:
    merged = with_dropins(dict(KIND), [
        {**KIND, "evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "1m"}},
        {**KIND, "evictionSoft": {"memory.available": "800Mi"}, "evictionPressureTransitionPeriod": "0s"},
    ])
    settings = eviction_settings(merged)
    assert settings.soft == {"memory.available": "800Mi"}
    assert settings.soft_grace_period == {"memory.available": "1m"}
    assert settings.pressure_transition_period_s == 300.0, "0s is defaulted to 5m after the merge, as v1beta1 does"


def test_lists_are_replaced_whole() -> None:
    base = {**KIND, "enforceNodeAllocatable": ["pods", "system-reserved"]}
    merged = with_dropins(base, [{**KIND, "enforceNodeAllocatable": ["pods"]}])
    assert eviction_settings(merged).enforce_node_allocatable == ("pods",)


def test_the_base_is_not_changed() -> None:
    base = {**KIND, "evictionHard": {"memory.available": "300Mi"}}
    with_dropins(base, [{**KIND, "evictionHard": {"memory.available": None}}])
    assert base == {**KIND, "evictionHard": {"memory.available": "300Mi"}}
    assert loaded_base(base) is not base

"""KubeletConfiguration decoding, defaults and flag grammar (KUBELET_SPEC §2.1-§2.2, §3)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evictd.core.errors import ConfigError
from evictd.core.kubelet_config import (
    DEFAULT_EVICTION_HARD,
    EvictionSettings,
    ImageGCSettings,
    apply_flags,
    eviction_settings,
    image_gc_settings,
    merge_documents,
)


@pytest.mark.parametrize(
    ("document", "hard"),
    [
        ({}, dict(DEFAULT_EVICTION_HARD)),
        ({"evictionHard": None}, dict(DEFAULT_EVICTION_HARD)),
        ({"evictionHard": {}}, {}),
        ({"evictionHard": {"memory.available": "1Gi"}}, {"memory.available": "1Gi"}),
        (
            {"evictionHard": {"memory.available": "1Gi"}, "mergeDefaultEvictionSettings": True},
            {**DEFAULT_EVICTION_HARD, "memory.available": "1Gi"},
        ),
        ({"evictionHard": {}, "mergeDefaultEvictionSettings": True}, dict(DEFAULT_EVICTION_HARD)),
        ({"evictionHard": {"nodefs.available": "0%"}, "mergeDefaultEvictionSettings": True},
         {**DEFAULT_EVICTION_HARD, "nodefs.available": "0%"}),
    ],
    ids=["absent-means-defaults", "null-means-defaults", "empty-means-none", "partial-drops-the-rest",
         "merge-adds-missing-defaults", "merge-into-empty", "merge-keeps-user-disable"],
)
def test_eviction_hard_defaulting(document: dict[str, object], hard: dict[str, str]) -> None:
    assert dict(eviction_settings(document).hard) == hard


def test_other_defaults_and_ignored_fields() -> None:
    settings = eviction_settings({"maxPods": 110, "clusterDNS": ["10.96.0.10"], "evictionSoft": None})
    assert settings == EvictionSettings()
    assert settings.pressure_transition_period_s == 300
    assert settings.enforce_node_allocatable == ("pods",)
    assert settings.local_storage_capacity_isolation is True
    assert settings.max_pod_grace_period_s == 0


def test_zero_transition_period_in_a_file_becomes_five_minutes() -> None:
    assert eviction_settings({"evictionPressureTransitionPeriod": "0s"}).pressure_transition_period_s == 300
    assert eviction_settings({"evictionPressureTransitionPeriod": "30s"}).pressure_transition_period_s == 30


def test_empty_enforce_node_allocatable_means_no_copies() -> None:
    settings = eviction_settings({"enforceNodeAllocatable": []})
    assert settings.enforce_node_allocatable == ()
    assert "allocatableMemory.available" not in [str(t.signal) for t in settings.thresholds()]
    default = [str(t.signal) for t in eviction_settings({}).thresholds()]
    assert default.count("allocatableMemory.available") == 1


def test_documents_replace_top_level_fields_in_order() -> None:
    merged = merge_documents(
        [{"evictionHard": {"memory.available": "1Gi", "nodefs.available": "5%"}, "evictionMaxPodGracePeriod": 5},
         {"evictionHard": {"memory.available": "2Gi"}}]
    )
    assert merged == {"evictionHard": {"memory.available": "2Gi"}, "evictionMaxPodGracePeriod": 5}


@pytest.mark.parametrize(
    ("document", "key", "reason"),
    [
        ({"evictionHard": {"memory.available": 100}}, "evictionHard[memory.available]",
         "json: cannot unmarshal number into Go struct field KubeletConfiguration.evictionHard of type string"),
        ({"evictionHard": ["memory.available<1Gi"]}, "evictionHard",
         "json: cannot unmarshal array into Go struct field KubeletConfiguration.evictionHard of type "
         "map[string]string"),
        ({"evictionMaxPodGracePeriod": "30"}, "evictionMaxPodGracePeriod",
         "json: cannot unmarshal string into Go struct field KubeletConfiguration.evictionMaxPodGracePeriod of "
         "type int32"),
        ({"evictionMaxPodGracePeriod": 2**31}, "evictionMaxPodGracePeriod",
         "json: cannot unmarshal number into Go struct field KubeletConfiguration.evictionMaxPodGracePeriod of "
         "type int32"),
        ({"evictionPressureTransitionPeriod": "5x"}, "evictionPressureTransitionPeriod",
         'time: unknown unit "x" in duration "5x"'),
        ({"evictionPressureTransitionPeriod": 300}, "evictionPressureTransitionPeriod",
         "json: cannot unmarshal number into Go struct field KubeletConfiguration.evictionPressureTransitionPeriod "
         "of type v1.Duration"),
        ({"mergeDefaultEvictionSettings": "yes"}, "mergeDefaultEvictionSettings",
         "json: cannot unmarshal string into Go struct field KubeletConfiguration.mergeDefaultEvictionSettings of "
         "type bool"),
        ({"enforceNodeAllocatable": ["pods", "pods"]}, "enforceNodeAllocatable",
         'invalid configuration: duplicated enforcements "pods" in enforceNodeAllocatable '
         "(--enforce-node-allocatable)"),
        ({"enforceNodeAllocatable": ["nodes"]}, "enforceNodeAllocatable",
         'invalid configuration: option "nodes" specified for enforceNodeAllocatable (--enforce-node-allocatable). '
         'Valid options are "pods", "system-reserved", "system-reserved-compressible", "kube-reserved", '
         '"kube-reserved-compressible" or "none"'),
        ({"enforceNodeAllocatable": ["none", "pods"]}, "enforceNodeAllocatable",
         "invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional "
         'enforcements when "none" is specified'),
    ],
    ids=["number-in-map", "list-for-map", "string-for-int", "int32-overflow", "bad-duration",
         "number-for-duration", "string-for-bool", "duplicate-enforcement", "unknown-enforcement",
         "none-with-others"],
)
def test_decoding_errors(document: dict[str, object], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as exc:
        eviction_settings(document)
    assert (exc.value.key, exc.value.reason) == (key, reason)


# --- flags ---------------------------------------------------------------------------------------------

def test_first_eviction_hard_flag_drops_defaults_and_repeats_accumulate() -> None:
    settings = apply_flags(
        EvictionSettings(),
        [("eviction-hard", "memory.available<150Mi,memory.available<100Mi"), ("eviction-hard", " nodefs.available < 5% ,")],
    )
    assert dict(settings.hard) == {"memory.available": "100Mi", "nodefs.available": "5%"}


def test_flag_replaces_the_map_from_files() -> None:
    base = eviction_settings({"evictionSoft": {"memory.available": "1Gi"},
                              "evictionSoftGracePeriod": {"memory.available": "1m"}})
    settings = apply_flags(base, [("eviction-soft", "nodefs.available<20%"),
                                  ("eviction-soft-grace-period", "nodefs.available=30s")])
    assert dict(settings.soft) == {"nodefs.available": "20%"}
    assert dict(settings.soft_grace_period) == {"nodefs.available": "30s"}
    assert dict(settings.hard) == dict(DEFAULT_EVICTION_HARD)


def test_le_operator_leaves_equals_sign_in_the_value() -> None:
    settings = apply_flags(EvictionSettings(), [("eviction-hard", "memory.available<=100Mi")])
    assert dict(settings.hard) == {"memory.available": "=100Mi"}
    with pytest.raises(ConfigError, match="quantities must match"):
        settings.thresholds()


def test_scalar_flags_apply_after_file_defaults() -> None:
    settings = apply_flags(
        eviction_settings({"evictionPressureTransitionPeriod": "1m"}),
        [("eviction-pressure-transition-period", "0s"), ("eviction-max-pod-grace-period", "0x10")],
    )
    assert settings.pressure_transition_period_s == 0  # only a flag can set 0 (a file's 0 becomes 5m)
    assert settings.max_pod_grace_period_s == 16


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("eviction-hard", "memory.available>100Mi",
         'invalid argument "memory.available>100Mi" for "--eviction-hard" flag: malformed pair, expect string<string'),
        ("eviction-minimum-reclaim", "memory.available:1Gi",
         'invalid argument "memory.available:1Gi" for "--eviction-minimum-reclaim" flag: malformed pair, '
         "expect string=string"),
        ("eviction-pressure-transition-period", "5",
         'invalid argument "5" for "--eviction-pressure-transition-period" flag: time: missing unit in '
         'duration "5"'),
        ("eviction-max-pod-grace-period", "ten",
         'invalid argument "ten" for "--eviction-max-pod-grace-period" flag: strconv.ParseInt: parsing "ten": '
         "invalid syntax"),
        ("eviction-max-pod-grace-period", "4294967296",
         'invalid argument "4294967296" for "--eviction-max-pod-grace-period" flag: strconv.ParseInt: parsing '
         '"4294967296": value out of range'),
    ],
    ids=["greater-than", "colon-pair", "duration-without-unit", "not-a-number", "int32-range"],
)
def test_flag_errors(flag: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        apply_flags(EvictionSettings(), [(flag, value)])
    assert str(exc.value) == message


@given(
    st.dictionaries(
        st.sampled_from(["evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim",
                         "evictionPressureTransitionPeriod", "evictionMaxPodGracePeriod",
                         "mergeDefaultEvictionSettings", "enforceNodeAllocatable", "other"]),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner, max_size=3),
            max_leaves=8,
        ),
    )
)
def test_decoding_raises_only_config_errors(document: dict[str, object]) -> None:
    with contextlib.suppress(ConfigError):  # any other exception fails the test
        eviction_settings(document).thresholds()


@given(st.lists(st.tuples(st.sampled_from(["eviction-hard", "eviction-soft", "eviction-soft-grace-period",
                                          "eviction-minimum-reclaim", "eviction-pressure-transition-period",
                                          "eviction-max-pod-grace-period"]), st.text(max_size=30)), max_size=4))
def test_flags_raise_only_config_errors(flags: list[tuple[str, str]]) -> None:
    with contextlib.suppress(ConfigError):  # any other exception fails the test
        apply_flags(EvictionSettings(), flags).thresholds()


# --- image garbage collection settings -------------------------------------------------------------------

def test_image_gc_defaults_and_values() -> None:
    assert image_gc_settings({}) == ImageGCSettings(85, 80, 120.0, 0.0)
    assert image_gc_settings({"imageGCHighThresholdPercent": 90, "imageGCLowThresholdPercent": 50,
                              "imageMinimumGCAge": "5m", "imageMaximumGCAge": "168h"}) == ImageGCSettings(
        90, 50, 300.0, 604800.0)


@pytest.mark.parametrize(
    ("document", "key", "reason"),
    [
        ({"imageGCHighThresholdPercent": 101}, "imageGCHighThresholdPercent",
         "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and "
         "100, inclusive"),
        ({"imageGCLowThresholdPercent": 85}, "imageGCLowThresholdPercent",
         "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 85 must be less than "
         "imageGCHighThresholdPercent (--image-gc-high-threshold) 85"),
        ({"imageMinimumGCAge": "-1m"}, "imageMinimumGCAge",
         "invalid configuration: imageMinimumGCAge -1m must not be negative"),
        ({"imageMaximumGCAge": "1m"}, "imageMaximumGCAge",
         "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"),
        ({"imageGCHighThresholdPercent": "90"}, "imageGCHighThresholdPercent",
         "json: cannot unmarshal string into Go struct field KubeletConfiguration.imageGCHighThresholdPercent of "
         "type int32"),
    ],
    ids=["high-over-100", "low-not-below-high", "negative-min-age", "max-not-above-min", "string-percent"],
)
def test_image_gc_validation(document: dict[str, object], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as exc:
        image_gc_settings(document)
    assert (exc.value.key, exc.value.reason) == (key, reason)

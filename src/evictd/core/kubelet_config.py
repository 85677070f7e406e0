"""The eviction part of a KubeletConfiguration, decoded, defaulted and overridden exactly as the kubelet does.

Input is already-decoded YAML/JSON (plain dicts), so this module stays pure. The steps mirror the kubelet:
1. decode each field with Go's JSON typing rules (maps of strings, metav1.Duration, int32, bool, []string);
   several documents apply in order, each top-level field replacing the earlier one;
2. default (cmd/kubelet/app/server.go loadConfigFile + v1beta1 defaults, KUBELET_SPEC §3.2): an absent or
   null `evictionHard` becomes the Linux defaults; with `mergeDefaultEvictionSettings` missing default keys
   are added; a zero `evictionPressureTransitionPeriod` becomes 5m; an absent `enforceNodeAllocatable` is
   `[pods]`; `localStorageCapacityIsolation` defaults to true;
3. apply the kubelet's eviction flags (KUBELET_SPEC §2.2): the first use of a map flag replaces the map.
Every error is a ConfigError naming the key (or flag) and the bad value, worded as the kubelet words it.
EvictionSettings also carries evictd's memory stall maps (`with_stall_settings`): an EvictdConfiguration's, or a
scenario's or recording's configuration's; `eviction_settings` never reads them from a KubeletConfiguration.
"""

from __future__ import annotations

import csv
import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evictd.core.decode import INT32_MAX, INT32_MIN
from evictd.core.duration import format_go_duration, parse_go_duration
from evictd.core.errors import ConfigError, DurationError, QuantityError
from evictd.core.quantity import Quantity
from evictd.core.signals import Unit, parse_signal, spec_of
from evictd.core.stall_gate import STALL_GATE_FIELD
from evictd.core.thresholds import (
    STALL_FIELDS,
    WITHOUT_PSI_FIELD,
    Threshold,
    parse_stall_thresholds,
    parse_threshold_config,
)

KUBELET_API_VERSION = "kubelet.config.k8s.io/v1beta1"
KUBELET_KIND = "KubeletConfiguration"

# DefaultEvictionHard on Linux (pkg/kubelet/eviction/defaults_linux.go, since kubernetes#121834).
DEFAULT_EVICTION_HARD: Mapping[str, str] = {"memory.available": "100Mi", "nodefs.available": "10%",
                                            "nodefs.inodesFree": "5%", "imagefs.available": "15%",
                                            "imagefs.inodesFree": "5%"}
DEFAULT_PRESSURE_TRANSITION_PERIOD_S = 300.0  # v1beta1 default: a zero value becomes 5m
DEFAULT_ENFORCE_NODE_ALLOCATABLE: tuple[str, ...] = ("pods",)

# Valid enforceNodeAllocatable entries (kubelet validation.go).
ENFORCEMENT_KEYS = ("pods", "system-reserved", "system-reserved-compressible", "kube-reserved",
                    "kube-reserved-compressible", "none")

# Every top-level field of v1beta1 KubeletConfiguration v1.36.2 (k8s.io/kubelet config/v1beta1/types.go) but
# apiVersion and kind: anything else is what strict decoding reports as unknown.
KUBELET_FIELDS = frozenset((
    "enableServer", "staticPodPath", "podLogsDir", "syncFrequency", "fileCheckFrequency", "httpCheckFrequency",
    "staticPodURL", "staticPodURLHeader", "address", "port", "readOnlyPort", "tlsCertFile", "tlsPrivateKeyFile",
    "tlsCipherSuites", "tlsCurvePreferences", "tlsMinVersion", "rotateCertificates", "serverTLSBootstrap",
    "authentication", "authorization", "registryPullQPS", "registryBurst", "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist", "eventRecordQPS", "eventBurst", "enableDebuggingHandlers",
    "enableContentionProfiling", "healthzPort", "healthzBindAddress", "oomScoreAdj", "clusterDomain", "clusterDNS",
    "streamingConnectionIdleTimeout", "nodeStatusUpdateFrequency", "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds", "imageMinimumGCAge", "imageMaximumGCAge", "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent", "volumeStatsAggPeriod", "kubeletCgroups", "systemCgroups", "cgroupRoot",
    "cgroupsPerQOS", "cgroupDriver", "cpuManagerPolicy", "singleProcessOOMKill", "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod", "memoryManagerPolicy", "topologyManagerPolicy", "topologyManagerScope",
    "topologyManagerPolicyOptions", "qosReserved", "runtimeRequestTimeout", "hairpinMode", "maxPods", "podCIDR",
    "podPidsLimit", "resolvConf", "runOnce", "cpuCFSQuota", "cpuCFSQuotaPeriod", "nodeStatusMaxImages",
    "maxOpenFiles", "contentType", "kubeAPIQPS", "kubeAPIBurst", "serializeImagePulls", "maxParallelImagePulls",
    "evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod", "evictionMinimumReclaim", "mergeDefaultEvictionSettings", "podsPerCore",
    "enableControllerAttachDetach", "protectKernelDefaults", "makeIPTablesUtilChains", "iptablesMasqueradeBit",
    "iptablesDropBit", "featureGates", "failSwapOn", "memorySwap", "containerLogMaxSize", "containerLogMaxFiles",
    "containerLogMaxWorkers", "containerLogMonitorInterval", "configMapAndSecretChangeDetectionStrategy",
    "systemReserved", "kubeReserved", "reservedSystemCPUs", "showHiddenMetricsForVersion", "systemReservedCgroup",
    "kubeReservedCgroup", "enforceNodeAllocatable", "allowedUnsafeSysctls", "volumePluginDir", "providerID",
    "kernelMemcgNotification", "logging", "enableSystemLogHandler", "enableSystemLogQuery", "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods", "shutdownGracePeriodByPodPriority", "crashLoopBackOff", "reservedMemory",
    "enableProfilingHandler", "enableDebugFlagsHandler", "seccompDefault", "memoryThrottlingFactor",
    "memoryReservationPolicy", "registerWithTaints", "registerNode", "tracing", "localStorageCapacityIsolation",
    "containerRuntimeEndpoint", "imageServiceEndpoint", "failCgroupV1", "userNamespaces",
))

# Decodes the value of a field named by its first argument (raises ConfigError naming the field).
_Decoder = Callable[[str, object], Any]

MAP_FIELDS = ("evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim")


@dataclass(frozen=True, slots=True)
class EvictionSettings:
    """The eviction settings of a kubelet after decoding, defaulting and flags. Maps keep their order."""

    hard: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_EVICTION_HARD))
    soft: Mapping[str, str] = field(default_factory=dict)
    soft_grace_period: Mapping[str, str] = field(default_factory=dict)
    minimum_reclaim: Mapping[str, str] = field(default_factory=dict)
    pressure_transition_period_s: float = DEFAULT_PRESSURE_TRANSITION_PERIOD_S
    max_pod_grace_period_s: int = 0
    enforce_node_allocatable: tuple[str, ...] = DEFAULT_ENFORCE_NODE_ALLOCATABLE
    local_storage_capacity_isolation: bool = True
    kernel_memcg_notification: bool = False
    # evictd's memory stall thresholds (EvictdConfiguration's STALL_FIELDS, never the kubelet's): empty unless asked.
    stall_hard: Mapping[str, str] = field(default_factory=dict)
    stall_soft: Mapping[str, str] = field(default_factory=dict)
    stall_soft_grace_period: Mapping[str, str] = field(default_factory=dict)
    stall_minimum_reclaim: Mapping[str, str] = field(default_factory=dict)
    # Hard stall thresholds counted only without PSI (WITHOUT_PSI_FIELD), and those moved into stall_hard for such a
    # kernel (`evictd.config.Configuration.for_kernel`).
    stall_hard_without_psi: Mapping[str, str] = field(default_factory=dict)
    psi_stand_ins: tuple[str, ...] = ()
    # evictd's stall gate (`evictd.core.stall_gate`, EvictdConfiguration's STALL_GATE_FIELD): on unless turned off.
    stall_requires_node_reclaim: bool = True
    # The kubelet's featureGates, for the gates that change evictd's figures (`evictd.core.followed`).
    feature_gates: Mapping[str, bool] = field(default_factory=dict)

    def thresholds(self) -> list[Threshold]:
        """Return the configured thresholds (before the layout-dependent containerfs derivation), the kubelet's
        then evictd's stall thresholds."""
        return parse_threshold_config(
            self.enforce_node_allocatable, self.hard, self.soft, self.soft_grace_period, self.minimum_reclaim
        ) + parse_stall_thresholds(self.stall_hard, self.stall_soft, self.stall_soft_grace_period,
                                   self.stall_minimum_reclaim)

    def stall_maps(self) -> dict[str, Mapping[str, str]]:
        """The stall maps by their EvictdConfiguration key, those that are not empty."""
        maps = (self.stall_hard, self.stall_soft, self.stall_soft_grace_period, self.stall_minimum_reclaim)
        return {key: values for key, values in zip(STALL_FIELDS, maps, strict=True) if values}


def below_one_unit_warnings(settings: EvictionSettings) -> list[str]:
    """Warnings for hard and soft quantities above zero and below one unit: the kubelet accepts them (1n) and they
    are met only when nothing is left. evictd decides as the kubelet does, and says so."""
    warnings = []
    for key, statements in (("evictionHard", settings.hard), ("evictionSoft", settings.soft)):
        for signal, raw in statements.items():
            if raw.endswith("%"):
                continue
            try:
                quantity = Quantity.parse(raw)
            except QuantityError:
                continue  # parse_threshold_config reports it
            if 0 < quantity.value < 1:
                warnings.append(f"{key}: {signal}: {raw!r} is below one unit (the kubelet reads it as {quantity}): "
                                "the threshold is met only when nothing at all is available")
            elif _bytes_signal(signal) and raw.strip().isdigit() and 0 < quantity.value < FORGOTTEN_PERCENT_BELOW:
                bare = raw.strip()
                warnings.append(f"{key}: {signal}: {raw!r} is {bare} bytes, a threshold met only when almost "
                                f"nothing is left: a forgotten '%'? ({bare}% is a share; 100Mi, 1Gi are amounts)")
    return warnings


# A bare number of bytes under this is taken for a percentage missing its '%' (`nodefs.available: "10"`).
FORGOTTEN_PERCENT_BELOW = 1 << 20


def _bytes_signal(name: str) -> bool:
    try:
        return spec_of(parse_signal(name)).unit is Unit.BYTES
    except ConfigError:
        return False  # an unknown signal: parse_threshold_config reports it


def empty_flag_item_warnings(flags: Sequence[tuple[str, str]]) -> list[str]:
    """Warnings for map flags (`--eviction-hard` ...) with empty items, which the kubelet skips without a word."""
    return [f"--{name} {value!r}: empty items skipped, as the kubelet does" for name, value in flags
            if name in MAP_FLAGS and "" in value.split(",")]


def with_stall_settings(settings: EvictionSettings, document: Mapping[str, object]) -> EvictionSettings:
    """Return `settings` with the stall maps (STALL_FIELDS) of `document`: an EvictdConfiguration, or a scenario's
    or recording's configuration, and its stall gate switch (STALL_GATE_FIELD, true when absent). Raises ConfigError
    (a value that is not a map of strings, a switch that is not true or false)."""
    hard, soft, grace, reclaim = (_string_map(key, document.get(key)) or {} for key in STALL_FIELDS)
    without_psi = _string_map(WITHOUT_PSI_FIELD, document.get(WITHOUT_PSI_FIELD)) or {}
    gate = document.get(STALL_GATE_FIELD, True)
    if not isinstance(gate, bool):
        raise ConfigError("must be true or false", key=STALL_GATE_FIELD, value=gate)
    return replace(settings, stall_hard=hard, stall_soft=soft, stall_soft_grace_period=grace,
                   stall_minimum_reclaim=reclaim, stall_hard_without_psi=without_psi, stall_requires_node_reclaim=gate)


def did_you_mean(key: object, known: Iterable[str]) -> str:
    """Return ` (did you mean "<nearest known name>"?)`, or "" when no known name is close to `key`."""
    nearest = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    return f' (did you mean "{nearest[0]}"?)' if nearest else ""


def unknown_kubelet_fields(document: Mapping[str, object], where: str) -> list[ConfigError]:
    """Return an error for each top-level key of a KubeletConfiguration document that the kubelet does not know."""
    return [ConfigError(f"unknown field in {KUBELET_KIND} ({where}){did_you_mean(key, KUBELET_FIELDS)}; the kubelet's "
                        "strict decoding reports it and its lenient fallback ignores it", key=str(key),
                        value=document[key])
            for key in document if key not in KUBELET_FIELDS and key not in ("apiVersion", "kind")]


# --- decoding with Go's JSON typing -------------------------------------------------------------------


def _go_type_name(value: object) -> str:
    """Return the JSON kind Go's decoder names in its 'cannot unmarshal X' errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


def _type_error(field_name: str, value: object, go_type: str) -> ConfigError:
    return ConfigError(
        f"json: cannot unmarshal {_go_type_name(value)} into Go struct field "
        f"{KUBELET_KIND}.{field_name} of type {go_type}",
        key=field_name,
        value=value,
    )


def _string_map(field_name: str, value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _type_error(field_name, value, "map[string]string")
    decoded: dict[str, str] = {}
    for key, item in value.items():
        if item is None:
            decoded[str(key)] = ""  # JSON null into a string map value is Go's zero value
        elif isinstance(item, str):
            decoded[str(key)] = item
        else:
            raise _type_error(field_name, item, "string").at(f"{field_name}[{key}]", item)
    return decoded


def _duration_s(field_name: str, value: object) -> float:
    if not isinstance(value, str):
        raise _type_error(field_name, value, "v1.Duration")
    try:
        return parse_go_duration(value)
    except DurationError as exc:
        raise exc.at(field_name, value) from None


def _int32(field_name: str, value: object) -> int:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or (isinstance(value, float) and not value.is_integer()) or not INT32_MIN <= value <= INT32_MAX):
        raise _type_error(field_name, value, "int32")
    return int(value)


def _bool(field_name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _type_error(field_name, value, "bool")
    return value


def _bool_map(field_name: str, value: object) -> dict[str, bool]:
    if not isinstance(value, Mapping):
        raise _type_error(field_name, value, "map[string]bool")
    for key, item in value.items():
        if not isinstance(item, bool):
            raise _type_error(field_name, item, "bool").at(f"{field_name}[{key}]", item)
    return {str(key): item for key, item in value.items()}


def _string_list(field_name: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise _type_error(field_name, value, "[]string")
    for item in value:
        if not isinstance(item, str):
            raise _type_error(field_name, item, "string").at(field_name, value)
    return tuple(value)


def _decoded(document: Mapping[str, object], fields: Mapping[str, tuple[str, _Decoder]]) -> dict[str, Any]:
    """Return attribute -> decoded value of each field (name -> (attribute, decoder)) that `document` sets."""
    return {attribute: decode(name, document[name])
            for name, (attribute, decode) in fields.items() if document.get(name) is not None}


def merge_documents(documents: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Return the documents merged in order: each top-level field replaces the one before it."""
    merged: dict[str, object] = {}
    for document in documents:
        merged.update(document)
    return merged


def _validate_enforce_node_allocatable(values: tuple[str, ...]) -> None:
    for index, value in enumerate(values):
        if value in values[:index]:
            reason = f'duplicated enforcements "{value}" in enforceNodeAllocatable (--enforce-node-allocatable)'
        elif value not in ENFORCEMENT_KEYS:
            options = ", ".join(f'"{key}"' for key in ENFORCEMENT_KEYS[:-1])
            reason = (f'option "{value}" specified for enforceNodeAllocatable (--enforce-node-allocatable). '
                      f'Valid options are {options} or "{ENFORCEMENT_KEYS[-1]}"')
        elif value == "none" and len(values) > 1:
            reason = ("enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements "
                      'when "none" is specified')
        else:
            continue
        raise ConfigError(f"invalid configuration: {reason}", key="enforceNodeAllocatable", value=list(values))


def eviction_settings(document: Mapping[str, object]) -> EvictionSettings:
    """Return the defaulted eviction settings of one (merged) KubeletConfiguration document; other fields are
    ignored. Raises ConfigError."""
    maps = {name: _string_map(name, document.get(name)) for name in MAP_FIELDS}
    merge_defaults = document.get("mergeDefaultEvictionSettings")
    merge = _bool("mergeDefaultEvictionSettings", merge_defaults) if merge_defaults is not None else False
    hard = maps["evictionHard"]
    if hard is None:
        hard = dict(DEFAULT_EVICTION_HARD)
    elif merge:
        hard = {**hard, **{k: v for k, v in DEFAULT_EVICTION_HARD.items() if k not in hard}}
    settings = EvictionSettings(
        hard=hard,
        soft=maps["evictionSoft"] or {},
        soft_grace_period=maps["evictionSoftGracePeriod"] or {},
        minimum_reclaim=maps["evictionMinimumReclaim"] or {},
    )
    period = document.get("evictionPressureTransitionPeriod")
    if period is not None:
        seconds = _duration_s("evictionPressureTransitionPeriod", period)
        settings = replace(
            settings, pressure_transition_period_s=seconds or DEFAULT_PRESSURE_TRANSITION_PERIOD_S
        )
    settings = replace(settings, **_decoded(document, {
        "evictionMaxPodGracePeriod": ("max_pod_grace_period_s", _int32),
        "localStorageCapacityIsolation": ("local_storage_capacity_isolation", _bool),
        "kernelMemcgNotification": ("kernel_memcg_notification", _bool),
        "enforceNodeAllocatable": ("enforce_node_allocatable", _string_list),
        "featureGates": ("feature_gates", _bool_map),
    }))
    _validate_enforce_node_allocatable(settings.enforce_node_allocatable)
    return settings


# --- image garbage collection (read from the same KubeletConfiguration) ---------------------------------

DEFAULT_IMAGE_GC_HIGH_PERCENT = 85
DEFAULT_IMAGE_GC_LOW_PERCENT = 80
DEFAULT_IMAGE_MINIMUM_GC_AGE_S = 120.0
DEFAULT_IMAGE_MAXIMUM_GC_AGE_S = 0.0  # 0 disables age-based image GC


@dataclass(frozen=True, slots=True)
class ImageGCSettings:
    """The kubelet's image garbage-collection settings (v1beta1 defaults: 85 %, 80 %, 2m, 0)."""

    high_threshold_percent: int = DEFAULT_IMAGE_GC_HIGH_PERCENT
    low_threshold_percent: int = DEFAULT_IMAGE_GC_LOW_PERCENT
    minimum_gc_age_s: float = DEFAULT_IMAGE_MINIMUM_GC_AGE_S
    maximum_gc_age_s: float = DEFAULT_IMAGE_MAXIMUM_GC_AGE_S


def image_gc_settings(document: Mapping[str, object]) -> ImageGCSettings:
    """Return the image GC settings of a (merged) KubeletConfiguration, validated as the kubelet does."""
    settings = ImageGCSettings(**_decoded(document, {
        "imageGCHighThresholdPercent": ("high_threshold_percent", _int32),
        "imageGCLowThresholdPercent": ("low_threshold_percent", _int32),
        "imageMinimumGCAge": ("minimum_gc_age_s", _duration_s),
        "imageMaximumGCAge": ("maximum_gc_age_s", _duration_s),
    }))
    min_age, max_age = document.get("imageMinimumGCAge"), document.get("imageMaximumGCAge")
    checks = (
        (not 0 <= settings.high_threshold_percent <= 100, "imageGCHighThresholdPercent",
         settings.high_threshold_percent,
         f"invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) "
         f"{settings.high_threshold_percent} must be between 0 and 100, inclusive"),
        (not 0 <= settings.low_threshold_percent <= 100, "imageGCLowThresholdPercent",
         settings.low_threshold_percent,
         f"invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) "
         f"{settings.low_threshold_percent} must be between 0 and 100, inclusive"),
        (settings.low_threshold_percent >= settings.high_threshold_percent, "imageGCLowThresholdPercent",
         settings.low_threshold_percent,
         f"invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) "
         f"{settings.low_threshold_percent} must be less than imageGCHighThresholdPercent "
         f"(--image-gc-high-threshold) {settings.high_threshold_percent}"),
        (settings.minimum_gc_age_s < 0, "imageMinimumGCAge", min_age,
         f"invalid configuration: imageMinimumGCAge {min_age} must not be negative"),
        (settings.maximum_gc_age_s < 0, "imageMaximumGCAge", max_age,
         f"invalid configuration: imageMaximumGCAge {max_age} must not be negative"),
        (0 < settings.maximum_gc_age_s <= settings.minimum_gc_age_s, "imageMaximumGCAge", max_age,
         f"invalid configuration: imageMaximumGCAge {format_go_duration(settings.maximum_gc_age_s)} must be "
         f"greater than imageMinimumGCAge {format_go_duration(settings.minimum_gc_age_s)}"),
    )
    for failed, key, value, reason in checks:
        if failed:
            raise ConfigError(reason, key=key, value=value)
    return settings


# --- kubelet flags ---------------------------------------------------------------------------------------

# flag name -> (settings attribute, separator of its key/value pairs)
MAP_FLAGS: Mapping[str, tuple[str, str]] = {
    "eviction-hard": ("hard", "<"),
    "eviction-soft": ("soft", "<"),
    "eviction-soft-grace-period": ("soft_grace_period", "="),
    "eviction-minimum-reclaim": ("minimum_reclaim", "="),
}
SCALAR_FLAGS = ("eviction-pressure-transition-period", "eviction-max-pod-grace-period")
# The kubelet eviction flags evictd's own commands take too (`check-config`, `run`, `replay`).
FLAG_NAMES = tuple(MAP_FLAGS) + SCALAR_FLAGS
# The kubelet's other flags that change EvictionSettings, read from its command line only: a list (pflag's
# StringSlice: comma-separated values, the first use replacing the file's list) and booleans (attribute by flag).
LIST_FLAG = "enforce-node-allocatable"
BOOL_FLAGS: Mapping[str, str] = {
    "local-storage-capacity-isolation": "local_storage_capacity_isolation",
    "kernel-memcg-notification": "kernel_memcg_notification",
}
KUBELET_SETTINGS_FLAGS = (*FLAG_NAMES, LIST_FLAG, *BOOL_FLAGS)
# What Go's strconv.ParseBool accepts, as pflag reads a boolean flag's value.
GO_BOOLS: Mapping[str, bool] = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
                                "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


def _flag_error(name: str, value: str, reason: str) -> ConfigError:
    """Return the error pflag reports for a bad flag value (it names the flag and the value itself)."""
    return ConfigError(f'invalid argument "{value}" for "--{name}" flag: {reason}')


def _parse_go_int32(text: str) -> int:
    """Return `text` parsed like Go's strconv.ParseInt(text, 0, 32) (base prefixes, underscores)."""
    body = text.lstrip("+-")
    valid = bool(body) and not body.startswith("_") and not body.endswith("_") and "__" not in body
    underscores_ok = body[:2].lower() in ("0x", "0o", "0b") or (body.startswith("0") and len(body) > 1)
    if "_" in body and not underscores_ok:
        valid = False
    try:
        number = int(text, 0) if valid else None
    except ValueError:
        number = None
    if number is None:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    if not INT32_MIN <= number <= INT32_MAX:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return number


def _csv_values(name: str, value: str) -> list[str]:
    """Return a StringSlice flag's value as pflag reads it (one CSV record; empty: no value)."""
    if not value:
        return []
    try:
        return next(csv.reader([value]))
    except csv.Error as exc:
        raise _flag_error(name, value, f"{exc} (write comma-separated values: pods,system-reserved)") from None


def apply_flags(settings: EvictionSettings, flags: Sequence[tuple[str, str]]) -> EvictionSettings:
    """Return `settings` with the kubelet's flags applied in order (name without dashes, value): the eviction
    flags (FLAG_NAMES) and, from a kubelet's command line, KUBELET_SETTINGS_FLAGS. Raises ConfigError."""
    replaced: set[str] = set()
    for name, value in flags:
        if name in MAP_FLAGS:
            attribute, separator = MAP_FLAGS[name]
            current = dict(getattr(settings, attribute)) if name in replaced else {}
            replaced.add(name)
            for item in value.split(","):
                if not item:
                    continue
                if separator not in item:
                    raise _flag_error(name, value, f"malformed pair, expect string{separator}string")
                key, _, raw = item.partition(separator)
                current[key.strip()] = raw.strip()
            changes: dict[str, Any] = {attribute: current}
            settings = replace(settings, **changes)
        elif name == "eviction-pressure-transition-period":
            try:
                settings = replace(settings, pressure_transition_period_s=parse_go_duration(value))
            except DurationError as exc:
                raise _flag_error(name, value, exc.reason) from None
        elif name == "eviction-max-pod-grace-period":
            try:
                settings = replace(settings, max_pod_grace_period_s=_parse_go_int32(value))
            except ValueError as exc:
                raise _flag_error(name, value, str(exc)) from None
        elif name == LIST_FLAG:
            kept = settings.enforce_node_allocatable if name in replaced else ()
            replaced.add(name)
            settings = replace(settings, enforce_node_allocatable=(*kept, *_csv_values(name, value)))
        elif name in BOOL_FLAGS:
            if value not in GO_BOOLS:
                raise _flag_error(name, value, f'strconv.ParseBool: parsing "{value}": invalid syntax (write '
                                  f"--{name}, --{name}=true or --{name}=false)")
            changes = {BOOL_FLAGS[name]: GO_BOOLS[value]}  # one attribute, named by the flag
            settings = replace(settings, **changes)
        else:
            raise ConfigError(f"unknown flag: --{name}")
    if LIST_FLAG in replaced:
        _validate_enforce_node_allocatable(settings.enforce_node_allocatable)
    return settings

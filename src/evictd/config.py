"""Loading evictd's configuration: KubeletConfiguration and EvictdConfiguration documents, plus kubelet flags.

A configuration file is a YAML stream of `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration` documents (read as
the kubelet reads them for eviction, `evictd.core.kubelet_config`; other fields ignored, an unknown key a warning or
with strict an error; a kubelet's /configz answer reads as the KubeletConfiguration it resolves to,
`evictd.core.configz`) and `evictd.io/v1alpha1` `EvictdConfiguration` ones (`EvictdSettings`, strictly checked). Files
apply in order, a top-level field replacing the same field of earlier documents of its kind; `--config-dir` drop-ins
merge as the kubelet's (`evictd.core.dropin`), then the kubelet eviction flags apply. Every problem is a
ConfigError naming the file, key and value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from evictd.config_files import STDIN_PATHS, dropin_files, read_documents
from evictd.core.cgroup_driver import CgroupDriver
from evictd.core.configz import configz_document, is_configz, zero_transition_period
from evictd.core.daemons_protection import KEYS as DAEMONS_LOW_KEYS
from evictd.core.daemons_protection import OFF, parse_daemons_low
from evictd.core.dropin import with_dropins
from evictd.core.duration import format_go_duration_ns, parse_go_duration
from evictd.core.errors import MISSING, ConfigError, DurationError, FilePath
from evictd.core.followed import KubeletSemantics, kubelet_semantics, parse_kubelet_version
from evictd.core.kubelet_config import (
    KUBELET_API_VERSION,
    KUBELET_KIND,
    EvictionSettings,
    ImageGCSettings,
    apply_flags,
    below_one_unit_warnings,
    did_you_mean,
    empty_flag_item_warnings,
    eviction_settings,
    image_gc_settings,
    merge_documents,
    unknown_kubelet_fields,
    with_stall_settings,
)
from evictd.core.limits_enforcer import LimitsEnforcer
from evictd.core.memory_reclaim import DEFAULT_BUDGET_S, MAX_BUDGET_S
from evictd.core.node_status import ConditionMode
from evictd.core.protections import KUBELET_STATS_NO_DAEMONS, ProtectionWanted
from evictd.core.psi import microseconds, psi_trigger
from evictd.core.reserved_memory import NodeReservation, node_reservation
from evictd.core.self_protection import OOM_SCORE_ADJ_MAX, OOM_SCORE_ADJ_MIN
from evictd.core.settled import CROSSING_HOLD_S
from evictd.core.stall_gate import STALL_GATE_FIELD
from evictd.core.thresholds import STALL_FIELDS, WITHOUT_PSI_FIELD, Threshold, parse_without_psi_thresholds
from evictd.cri import DEFAULT_ENDPOINT, channel_target

# The EvictdConfiguration keys that are eviction settings (`with_stall_settings`): the stall maps and the stall gate.
STALL_SETTINGS = (*STALL_FIELDS, WITHOUT_PSI_FIELD, STALL_GATE_FIELD)
EVICTD_API_VERSION = "evictd.io/v1alpha1"
EVICTD_KIND = "EvictdConfiguration"
# A flight recording smaller than this holds too few cycles of a real node to replay anything.
MIN_RECORDER_BYTES = 1 << 20
# Bounds of evictd's own settings: durations a day, ages and waits a year, counts a million, the recording 4 GiB (a
# segment at most 256 MiB, what segment_files reads); beyond is a typo or an attack, and some would overflow.
MAX_DURATION_S = 86400.0
LONG_DURATION_S = 366 * 86400.0
MAX_COUNT = 1_000_000
MAX_RECORDER_BYTES = 4 << 30
# nodeLeaseDurationSeconds is an int32 in the KubeletConfiguration; evictd holds it to a day, as its durations.
MAX_LEASE_DURATION_S = 86400
# A namespace name: an RFC 1123 label.
NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The cluster CA in every service-account pod: it signs the API server's and, mostly, the kubelets' certificates.
SERVICE_ACCOUNT_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


class StatsOrigin(StrEnum):
    """The `statsSource` setting: where evictd reads the node's stats."""

    NODE = "node"  # cgroupfs, statvfs and procfs, read directly
    KUBELET = "kubelet"  # the kubelet's Summary API


class MetricsAuthorization(StrEnum):
    """The `metricsAuthorization` setting, in the kubelet's words (its `authorization.mode`)."""

    ALWAYS_ALLOW = "AlwaysAllow"  # any client that reaches the port (the NetworkPolicy decides who can)
    WEBHOOK = "Webhook"  # a bearer token passing a TokenReview and a SubjectAccessReview (get /metrics)


class LogFormat(StrEnum):
    """The `logFormat` setting: `auto` is a live view on a terminal, JSON lines otherwise."""

    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


@dataclass(frozen=True, slots=True)
class EvictdSettings:
    """evictd's own settings, each with its YAML name in `metadata`. docs/configuration.md's EvictdConfiguration
    table says what each one does and why its default is what it is (keep the two in step)."""

    node_name: str = field(default="", metadata={"yaml": "nodeName"})
    housekeeping_interval_s: float = field(default=10.0, metadata={"yaml": "housekeepingInterval"})
    dry_run: bool = field(default=False, metadata={"yaml": "dryRun"})
    kubelet_root_dir: str = field(default="/var/lib/kubelet", metadata={"yaml": "kubeletRootDir"})
    pod_logs_dir: str = field(default="/var/log/pods", metadata={"yaml": "podLogsDir"})
    container_runtime_endpoint: str = field(default=DEFAULT_ENDPOINT, metadata={"yaml": "containerRuntimeEndpoint"})
    runtime_request_timeout_s: float = field(default=10.0, metadata={"yaml": "runtimeRequestTimeout"})
    kubeconfig: str = field(default="", metadata={"yaml": "kubeconfig"})
    # The kubelet's version, for the semantics evictd follows (`evictd.core.followed`); empty: the Node's, else v1.36's.
    kubelet_version: str = field(default="", metadata={"yaml": "kubeletVersion"})
    node_condition_mode: ConditionMode = field(default=ConditionMode.EVICTD, metadata={"yaml": "nodeConditionMode"})
    node_status_update_frequency_s: float = field(default=10.0, metadata={"yaml": "nodeStatusUpdateFrequency"})
    node_status_report_frequency_s: float = field(default=300.0, metadata={"yaml": "nodeStatusReportFrequency"})
    node_lease_duration_s: int = field(default=40, metadata={"yaml": "nodeLeaseDurationSeconds",
                                                              "max": MAX_LEASE_DURATION_S})
    lease_namespace: str = field(default="", metadata={"yaml": "leaseNamespace"})
    state_dir: str = field(default="/var/lib/evictd", metadata={"yaml": "stateDir"})
    state_lock_timeout_s: float = field(default=30.0, metadata={"yaml": "stateLockTimeout", "allow_zero": True,
                                                                "max": LONG_DURATION_S})
    metrics_bind_address: str = field(default="127.0.0.1:10262", metadata={"yaml": "metricsBindAddress"})
    metrics_authorization: MetricsAuthorization = field(default=MetricsAuthorization.ALWAYS_ALLOW,
                                                        metadata={"yaml": "metricsAuthorization"})
    cgroupfs_path: str = field(default="/sys/fs/cgroup", metadata={"yaml": "cgroupfsPath"})
    cgroup_driver: CgroupDriver = field(default=CgroupDriver.CGROUPFS, metadata={"yaml": "cgroupDriver"})
    cgroup_root: str = field(default="/", metadata={"yaml": "cgroupRoot"})
    image_fs_path: str = field(default="/var/lib/containerd", metadata={"yaml": "imageFsPath"})
    container_fs_path: str = field(default="/var/lib/containerd", metadata={"yaml": "containerFsPath"})
    stats_source: StatsOrigin = field(default=StatsOrigin.NODE, metadata={"yaml": "statsSource"})
    kubelet_summary_url: str = field(default="", metadata={"yaml": "kubeletSummaryURL"})
    kubelet_token_file: str = field(
        default="/var/run/secrets/kubernetes.io/serviceaccount/token", metadata={"yaml": "kubeletTokenFile"}
    )
    kubelet_ca_file: str = field(default=SERVICE_ACCOUNT_CA_FILE, metadata={"yaml": "kubeletCAFile"})
    kubelet_insecure_tls: bool = field(default=False, metadata={"yaml": "kubeletInsecureTLS"})
    kubelet_summary_timeout_s: float = field(default=5.0, metadata={"yaml": "kubeletSummaryTimeout"})
    memcg_wakeups: bool = field(default=True, metadata={"yaml": "memcgWakeups"})
    psi_wakeups: bool = field(default=True, metadata={"yaml": "psiWakeups"})
    psi_stall_threshold_s: float = field(default=0.1, metadata={"yaml": "psiStallThreshold"})
    psi_window_s: float = field(default=2.0, metadata={"yaml": "psiWindow"})
    # How long a newly met memory threshold waits for a second reading (core/settled.py); 0s: as the kubelet.
    memory_crossing_hold_s: float = field(default=CROSSING_HOLD_S, metadata={"yaml": "memoryCrossingHold",
                                                                             "allow_zero": True, "max": 1.0})
    # Reclaim before evict (core/memory_reclaim.py; cgroup v2 memory.reclaim): off keeps the kubelet's decisions.
    memory_reclaim_before_eviction: bool = field(default=False, metadata={"yaml": "memoryReclaimBeforeEviction"})
    memory_reclaim_budget_s: float = field(default=DEFAULT_BUDGET_S, metadata={"yaml": "memoryReclaimBudget",
                                                                              "max": MAX_BUDGET_S})
    # Reclaim for the daemons (core/daemons_reclaim.py): off until the arena measures it.
    daemons_reclaim: bool = field(default=False, metadata={"yaml": "daemonsReclaim"})
    # system.slice's memory.low kept by evictd (core/daemons_protection.py), and its value without PSI ("": the same).
    daemons_memory_low: str = field(default=OFF, metadata={"yaml": "daemonsMemoryLow"})
    daemons_memory_low_without_psi: str = field(default="", metadata={"yaml": "daemonsMemoryLowWithoutPSI"})
    shutdown_timeout_s: float = field(default=15.0, metadata={"yaml": "shutdownTimeout"})
    log_format: LogFormat = field(default=LogFormat.AUTO, metadata={"yaml": "logFormat"})
    container_gc_min_age_s: float = field(
        default=0.0, metadata={"yaml": "minimumContainerTTLDuration", "allow_zero": True, "max": LONG_DURATION_S}
    )
    max_dead_containers_per_container: int = field(default=1, metadata={"yaml": "maximumDeadContainersPerContainer",
                                                                          "max": MAX_COUNT})
    max_dead_containers: int = field(default=-1, metadata={"yaml": "maximumDeadContainers", "max": MAX_COUNT})
    container_gc_period_s: float = field(default=60.0, metadata={"yaml": "containerGCPeriod"})
    image_gc_period_s: float = field(default=300.0, metadata={"yaml": "imageGCPeriod"})
    protected_images: tuple[str, ...] = field(default=(), metadata={"yaml": "protectedImages"})
    image_gc_during_eviction: bool = field(default=True, metadata={"yaml": "imageGCDuringEviction"})
    soft_evictions_through_eviction_api: bool = field(default=False,
                                                      metadata={"yaml": "softEvictionsThroughEvictionAPI"})
    eviction_api_max_candidates: int = field(default=3, metadata={"yaml": "evictionAPIMaxCandidates", "max": 100})
    eviction_api_deadline_s: float = field(default=300.0, metadata={"yaml": "evictionAPIDeadline",
                                                                    "allow_zero": True})
    # Who enforces pods' ephemeral-storage limits (core/limits_enforcer.py): never both evictd and the kubelet.
    ephemeral_storage_limits_enforcer: LimitsEnforcer = field(default=LimitsEnforcer.AUTO,
                                                              metadata={"yaml": "ephemeralStorageLimitsEnforcer"})
    recorder: bool = field(default=True, metadata={"yaml": "recorder"})
    recorder_max_bytes: int = field(default=64 << 20, metadata={"yaml": "recorderMaxBytes",
                                                                "max": MAX_RECORDER_BYTES})
    recorder_max_age_s: float = field(default=86400.0, metadata={"yaml": "recorderMaxAge", "max": LONG_DURATION_S})
    # Self-protection (docs/deployment.md "What protects evictd"): its pages locked in memory, its OOM score.
    lock_memory: bool = field(default=True, metadata={"yaml": "lockMemory"})
    # None: leave the value evictd was started with (the unit's OOMScoreAdjust=, the kubelet's for the pod).
    oom_score_adj: int | None = field(default=None, metadata={"yaml": "oomScoreAdj", "type": int,
                                                                "min": OOM_SCORE_ADJ_MIN, "max": OOM_SCORE_ADJ_MAX})


@dataclass(frozen=True, slots=True)
class Configuration:
    eviction: EvictionSettings
    evictd: EvictdSettings
    image_gc: ImageGCSettings = field(default_factory=ImageGCSettings)
    # Memory reserved for the node's daemons: only reported (`evictd.core.node_protection`), never decided on.
    reservation: NodeReservation = field(default_factory=NodeReservation)
    warnings: tuple[str, ...] = ()  # what the kubelet lets pass: ignored documents, unknown or repeated keys

    def semantics(self, no_node: str = "") -> KubeletSemantics:
        """The kubelet release followed and its gates' states without a Node's word (`no_node`: why none;
        `evictd.core.followed`)."""
        return kubelet_semantics(self.evictd.kubelet_version, self.eviction.feature_gates, no_node=no_node)

    def for_kernel(self, psi_missing: str | None) -> Configuration:
        """This configuration on a kernel that gives PSI (`psi_missing` None: they stand by) or not: without it
        stallEvictionHardWithoutPSI joins stallEvictionHard, daemonsMemoryLowWithoutPSI replaces daemonsMemoryLow."""
        if psi_missing is None:
            return self
        own = self.evictd
        configured = self if not own.daemons_memory_low_without_psi else replace(self, evictd=replace(
            own, daemons_memory_low=own.daemons_memory_low_without_psi, daemons_memory_low_without_psi=""))
        eviction = configured.eviction
        if not eviction.stall_hard_without_psi:
            return configured
        return replace(configured, eviction=replace(
            eviction, stall_hard={**eviction.stall_hard, **eviction.stall_hard_without_psi}, stall_hard_without_psi={},
            psi_stand_ins=tuple(eviction.stall_hard_without_psi)))

    def without_psi_thresholds(self) -> list[Threshold]:
        """The thresholds of stallEvictionHardWithoutPSI (ConfigError: a signal that needs PSI, or one set twice)."""
        return parse_without_psi_thresholds(self.eviction.stall_hard_without_psi, self.eviction.stall_hard)

    def protections_wanted(self, reported_only: str | None = None) -> ProtectionWanted:
        """What this configuration asks of the protections against thrash (`evictd.core.protections`)."""
        return ProtectionWanted.of(self.eviction.thresholds(), stall_gate=self.eviction.stall_requires_node_reclaim,
                                   standing_by=self.without_psi_thresholds(),
                                   stand_ins=self.eviction.psi_stand_ins,
                                   memory_reclaim=self.evictd.memory_reclaim_before_eviction,
                                   daemons_reclaim=self.evictd.daemons_reclaim, reported_only=reported_only,
                                   daemons_low=self.evictd.daemons_memory_low,
                                   daemons_low_standing_by=self.evictd.daemons_memory_low_without_psi,
                                   daemons_unread=KUBELET_STATS_NO_DAEMONS
                                   if self.evictd.stats_source is StatsOrigin.KUBELET else None)


def _decode_setting(yaml_name: str, default: object, value: object, allow_zero: bool,
                    highest: float | None = None, lowest: int | None = None) -> object:
    """Return `value` decoded to the type of `default`, within `lowest` and `highest` (durations: MAX_DURATION_S by
    default), or raise ConfigError at `yaml_name`."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError("must be true or false", key=yaml_name, value=value)
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError("must be an integer", key=yaml_name, value=value)
        if highest is not None and value > highest:
            raise ConfigError(f"must be at most {highest:,.0f}", key=yaml_name, value=value)
        if lowest is not None and value < lowest:
            raise ConfigError(f"must be at least {lowest:,}", key=yaml_name, value=value)
        return value
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError("must be a list of strings", key=yaml_name, value=value)
        return tuple(value)
    if isinstance(default, float):
        # Durations are Go duration strings, as in KubeletConfiguration ("10s", "500ms").
        if not isinstance(value, str):
            raise ConfigError('must be a duration string such as "10s"', key=yaml_name, value=value)
        try:
            seconds = parse_go_duration(value)
        except DurationError as exc:
            raise exc.at(yaml_name, value) from None
        if seconds < 0 or (seconds == 0 and not allow_zero):
            raise ConfigError("must be a positive duration", key=yaml_name, value=value)
        highest = MAX_DURATION_S if highest is None else highest
        if seconds > highest:
            raise ConfigError(f"must be at most {format_go_duration_ns(int(highest * 1e9))}", key=yaml_name,
                              value=value)
        return seconds
    if not isinstance(value, str):
        raise ConfigError("must be a string", key=yaml_name, value=value)
    if isinstance(default, StrEnum):  # a choice: the setting's type names the values
        choices = type(default)
        try:
            return choices(value)
        except ValueError:
            raise ConfigError(f"must be one of {', '.join(choices)}", key=yaml_name, value=value) from None
    return value


PERIOD_FIELD = "evictionPressureTransitionPeriod"
# Settings the kubelet's configuration already states: taken from there unless the EvictdConfiguration says otherwise.
INHERITED_FROM_KUBELET = ("cgroupDriver", "cgroupRoot", "podLogsDir", "nodeStatusUpdateFrequency",
                          "nodeStatusReportFrequency", "nodeLeaseDurationSeconds")
# Of those, the ones SetDefaults_KubeletConfiguration replaces when zero (zero there means the default).
ZERO_IS_KUBELET_DEFAULT = ("nodeStatusUpdateFrequency", "nodeStatusReportFrequency", "nodeLeaseDurationSeconds")
UPDATE_FREQUENCY = "nodeStatusUpdateFrequency"
REPORT_FREQUENCY = "nodeStatusReportFrequency"


def _inherited_from_kubelet(kubelet: Mapping[str, object]) -> dict[str, object]:
    inherited = {}
    for key in INHERITED_FROM_KUBELET:
        value = kubelet.get(key)
        if value is None or (key in ZERO_IS_KUBELET_DEFAULT and _is_zero(value)):
            continue
        inherited[key] = value
    return inherited


def _with_report_frequency(settings: Mapping[str, object]) -> dict[str, object]:
    """The kubelet's defaulting of nodeStatusReportFrequency: absent or zero, it is nodeStatusUpdateFrequency when
    that is given (backward compatibility), else 5m."""
    merged = dict(settings)
    update = merged.get(UPDATE_FREQUENCY)
    report = merged.get(REPORT_FREQUENCY)
    if (report is None or _is_zero(report)) and update is not None and not _is_zero(update):
        merged[REPORT_FREQUENCY] = update
    elif report is not None and _is_zero(report):
        del merged[REPORT_FREQUENCY]
    return merged


def _is_zero(value: object) -> bool:
    """A zero duration string or the integer 0 (what the kubelet's defaulting replaces)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value == 0
    try:
        return isinstance(value, str) and parse_go_duration(value) == 0
    except DurationError:
        return False  # reported when the value is decoded


def evictd_settings(document: Mapping[str, object], kubelet: Mapping[str, object]) -> EvictdSettings:
    """Return the EvictdSettings of one (merged) EvictdConfiguration document, whose defaults the merged
    KubeletConfiguration `kubelet` gives for INHERITED_FROM_KUBELET; unknown fields are errors."""
    by_yaml = {f.metadata["yaml"]: f for f in fields(EvictdSettings)}
    settings = EvictdSettings()
    changes: dict[str, Any] = {}
    inherited = _inherited_from_kubelet(kubelet)
    for key, value in _with_report_frequency({**inherited, **document}).items():
        if key in ("apiVersion", "kind") or key in STALL_SETTINGS:  # the stall settings are eviction settings
            continue
        setting = by_yaml.get(key)
        if setting is None:
            raise ConfigError(f"unknown field in {EVICTD_KIND}{did_you_mean(key, [*by_yaml, *STALL_SETTINGS])}",
                              key=key, value=value)
        default = getattr(settings, setting.name)
        if key in DAEMONS_LOW_KEYS:  # their own values, an unquoted off among them
            changes[setting.name] = parse_daemons_low(value, key).text
            continue
        if default is None:  # an optional setting, unset by default: decoded as its type's values are
            default = setting.metadata["type"]()
        changes[setting.name] = _decode_setting(
            key, default, value, setting.metadata.get("allow_zero", False), setting.metadata.get("max"),
            setting.metadata.get("min"),
        )
    settings = replace(settings, **changes)
    parse_kubelet_version(settings.kubelet_version)  # a version that cannot be read fails here, naming it
    if settings.recorder_max_bytes < MIN_RECORDER_BYTES:
        raise ConfigError(f"must be at least {MIN_RECORDER_BYTES} (1 MiB)", key="recorderMaxBytes",
                          value=settings.recorder_max_bytes)
    if settings.node_lease_duration_s < 1:
        raise ConfigError("must be at least 1 (seconds)", key="nodeLeaseDurationSeconds",
                          value=settings.node_lease_duration_s)
    if settings.lease_namespace and (len(settings.lease_namespace) > 63
                                     or not NAMESPACE_NAME.match(settings.lease_namespace)):
        raise ConfigError("must be a namespace name (lower case letters, digits and '-', at most 63)",
                          key="leaseNamespace", value=settings.lease_namespace)
    if settings.eviction_api_max_candidates < 1:
        raise ConfigError("must be at least 1", key="evictionAPIMaxCandidates",
                          value=settings.eviction_api_max_candidates)
    channel_target(settings.container_runtime_endpoint)  # only Unix sockets: a bad endpoint is a config error
    # The kernel's limits, as a privileged process has them; `run` checks the unprivileged 2 s step too.
    psi_trigger("some", microseconds(settings.psi_stall_threshold_s), microseconds(settings.psi_window_s),
                privileged=True)
    return settings


def classify_document(document: object, where: str) -> str:
    """Return the kind of a configuration document after checking its apiVersion; raise ConfigError."""
    if not isinstance(document, Mapping):
        raise ConfigError("a configuration document must be a mapping", key=where, value=document)
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    expected = {KUBELET_KIND: KUBELET_API_VERSION, EVICTD_KIND: EVICTD_API_VERSION}
    if kind is None:
        raise ConfigError(f"each document of a --config file names its kind (kind: {KUBELET_KIND} with "
                          f"apiVersion: {KUBELET_API_VERSION}, or kind: {EVICTD_KIND} with apiVersion: "
                          f"{EVICTD_API_VERSION}); only a scenario's config may leave them out", key=f"{where}.kind",
                          value=MISSING)
    if not isinstance(kind, str) or kind not in expected:
        raise ConfigError(
            f"unknown kind; expected {KUBELET_KIND} or {EVICTD_KIND}", key=f"{where}.kind", value=kind
        )
    if api_version != expected[str(kind)]:
        raise ConfigError(
            f'no kind "{kind}" is registered for version "{api_version}" (expected {expected[str(kind)]})',
            key=f"{where}.apiVersion",
            value=api_version,
        )
    return str(kind)


def is_foreign_document(document: object) -> bool:
    """True for a document of another kind than evictd reads (a KubeProxyConfiguration, say)."""
    return isinstance(document, Mapping) and isinstance(document.get("kind"), str) and document["kind"] not in (
        KUBELET_KIND, EVICTD_KIND)


def _located(exc: ConfigError, where: str) -> ConfigError:
    """Return `exc` with its key prefixed by the document it came from."""
    if exc.key is None:
        return ConfigError(f"{where}: {exc.reason}")
    return exc.at(f"{where}: {exc.key}", exc.value)


def read_dropins(folder: str, key: str = "--config-dir") -> list[tuple[str, Mapping[str, object]]]:
    """Return (path, document) for each drop-in under `folder`, in the kubelet's order. As the kubelet requires,
    each holds a KubeletConfiguration document with its apiVersion and kind (the first document; the kubelet's
    YAML decoding sees no other). Raises ConfigError naming the file."""
    documents: list[tuple[str, Mapping[str, object]]] = []
    for path in dropin_files(folder, key):
        read = read_documents(path, key=key)
        where = f"{key} {path}"
        if not read:
            raise ConfigError("holds no document: the kubelet refuses to start on an empty drop-in (write a "
                              f"KubeletConfiguration with apiVersion {KUBELET_API_VERSION}, or remove the file)",
                              key=key, value=FilePath(path))
        document, duplicates = read[0]
        if classify_document(document, where) != KUBELET_KIND:
            raise ConfigError(f"a drop-in must be a {KUBELET_KIND}", key=f"{where}.kind",
                              value=document.get("kind"))
        if duplicates:  # the kubelet decodes drop-ins strictly: a key given twice stops it
            raise ConfigError(f"duplicate key in a drop-in ({where}); the kubelet refuses to start on it",
                              key=duplicates[0], value=document.get(duplicates[0]))
        documents.append((path, document))
    return documents


def load_configuration(paths: Sequence[str], flags: Sequence[tuple[str, str]] = (), *, strict: bool = False,
                       base: Mapping[str, object] | None = None, config_dir: str | None = None) -> Configuration:
    """Return the configuration from the files at `paths` (in order) and the kubelet eviction `flags`. No file: a
    kubelet with an empty config file (defaults apply). What the kubelet's strict decoding rejects but its lenient
    fallback accepts is a warning (with `strict`, an error). `base` (a recording's configuration) comes first, so
    files and flags change only what they state. Raises ConfigError."""
    base = base or {}
    kubelet_docs: list[Mapping[str, object]] = [{k: v for k, v in base.items()
                                                 if k not in STALL_SETTINGS and k not in ("apiVersion", "kind")}]
    evictd_docs: list[Mapping[str, object]] = [{k: v for k, v in base.items() if k in STALL_SETTINGS}]
    warnings: list[str] = []
    if sum(path in STDIN_PATHS for path in paths) > 1:
        raise ConfigError("standard input can be read once", key="--config", value=FilePath("-"))
    for path in paths:
        kubelet_file = False
        for index, (document, duplicates) in enumerate(read_documents(path, stdin_ok=True)):
            where = f"{path}[{index}]" if index else path
            if is_configz(document):  # the kubelet's /configz answer: its resolved configuration
                document = configz_document(document, where)
                if zero_transition_period(document):
                    warnings.append(f"{where}: evictionPressureTransitionPeriod {document[PERIOD_FIELD]!r} in a "
                                    "/configz answer (the kubelet's flag set it): read as in a file, a zero is 5m; "
                                    "give --eviction-pressure-transition-period 0s to keep it")
            if kubelet_file and is_foreign_document(document):
                # The kubelet decodes only its config file's first document; evictd keeps its own documents too.
                warnings.append(f"{where}: kind {document['kind']!r} ignored: the kubelet reads only the first "
                                "document of its configuration file")
                continue
            kind = classify_document(document, where)
            kubelet_file = kubelet_file or (index == 0 and kind == KUBELET_KIND)
            for key in duplicates:
                if kind == EVICTD_KIND or strict:  # strictly checked: which of the two was meant?
                    raise ConfigError(f"duplicate key in {kind} ({where})", key=key,
                                      value=document.get(key) if isinstance(document, Mapping) else None)
                # The kubelet's strict decoding fails on it and its lenient fallback keeps the last value.
                warnings.append(f"{where}: key {key!r} given twice; the last value is used, as the kubelet does")
            if kind == KUBELET_KIND:
                unknown = unknown_kubelet_fields(document, where)
                if unknown and strict:
                    raise unknown[0]
                warnings += [str(problem) for problem in unknown]
            (kubelet_docs if kind == KUBELET_KIND else evictd_docs).append(document)
    dropins = read_dropins(config_dir) if config_dir else []
    for path, document in dropins:
        unknown = unknown_kubelet_fields(document, path)
        if unknown and strict:
            raise unknown[0]
        warnings += [str(problem) for problem in unknown]
    try:
        kubelet = merge_documents(kubelet_docs)
        if config_dir:
            kubelet = with_dropins(kubelet, [document for _, document in dropins])
        eviction = eviction_settings(kubelet)
        image_gc = image_gc_settings(kubelet)
    except ConfigError as exc:
        raise _located(exc, KUBELET_KIND) from None
    eviction = apply_flags(eviction, flags)
    eviction.thresholds()  # a bad threshold fails the configuration here, not the first cycle
    # What the kubelet accepts although it cannot mean what it says.
    lenient = empty_flag_item_warnings(flags) + below_one_unit_warnings(eviction)
    if lenient and strict:
        raise ConfigError(lenient[0])
    warnings += lenient
    try:
        evictd_document = merge_documents(evictd_docs)
        own = evictd_settings(evictd_document, kubelet)
        # evictd's stall thresholds are eviction settings, but only an EvictdConfiguration states them.
        eviction = with_stall_settings(eviction, evictd_document)
        eviction.thresholds()
        parse_without_psi_thresholds(eviction.stall_hard_without_psi, eviction.stall_hard)
    except ConfigError as exc:
        raise _located(exc, EVICTD_KIND) from None
    return Configuration(eviction=eviction, evictd=own, image_gc=image_gc, reservation=node_reservation(kubelet),
                         warnings=tuple(warnings))

"""Pods parsed from Kubernetes v1 JSON (`pod_from_dict`), and what a pod keeps of its annotations.

Turns a pod object into `evictd.core.pods`' frozen values, keeping what decisions read and no more
(`kept_annotations` is the same rule for pods built elsewhere), and shares what many pods carry alike.

Invariants: `pod_from_dict` never mutates its input and raises only `DecodeError`, keyed by a path such as
``pods[3].spec.containers[0].resources.requests.memory``; JSON null means absent, except a resource quantity (Go
stores a present zero). Only `DECISION_ANNOTATIONS` are kept, values cut; no labels; messages cut (every
annotation and label is still type-checked). Lists are capped (`MAX_KEPT_*`) without changing any sum: containers
past the cap fold into one (`_folded`); `Pod.fields_dropped` counts what was left out. Shared values are immutable
and the tables bounded. Source: core/v1/types.go (KUBELET_SPEC §9.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from evictd.core.decode import (
    EMPTY_MAPPING,
    INT32_MAX,
    INT32_MIN,
    child,
    integer,
    invalid,
    list_of,
    mapping,
    sequence,
    string,
)
from evictd.core.errors import QuantityError
from evictd.core.pods import (
    DECISION_ANNOTATIONS,
    DEFAULT_NAMESPACE,
    MAX_KEPT_CONTAINERS,
    MAX_KEPT_MESSAGE_CHARS,
    MAX_KEPT_TOLERATIONS,
    MAX_KEPT_VALUE_CHARS,
    MAX_KEPT_VOLUMES,
    NO_COUNTS,
    NO_QUANTITIES,
    NO_STRINGS,
    RESTART_POLICY_ALWAYS,
    Container,
    FrozenMap,
    Pod,
    PodResources,
    QOSClass,
    Toleration,
    Volume,
    is_restartable_init_container,
    read_by_decisions,
)
from evictd.core.quantity import ERR_NUMERIC, ZERO, Quantity

# A JSON integer quantity wider than this cannot be a valid quantity (evictd.core.quantity rejects magnitudes
# of 10**1000 and more) and str() of it may exceed CPython's int-to-str digit limit, so it is refused first.
_MAX_QUANTITY_INT_BITS = 3400


# Pods share what many of them carry alike (issue #25, 5,000 pods: 3 KiB a pod, most of it the same namespaces,
# container names, quantities and resource lists, once per pod): a repeated string is one interned object, an
# equal resource list (same names, same JSON values) one FrozenMap of the same Quantity objects, equal kept
# annotations one FrozenMap. All are immutable, so sharing changes nothing a decision or an encoding sees. The
# tables are bounded in entries and in the length of what a key holds (a tenant writes these values).
_SHARED_MAX_ENTRIES = 4096
_SHARED_MAX_CHARS = 64
# Strings are shared through a table of their own (the core does not use `sys.intern`: no `sys` in the core).
_SHARED_STRINGS: dict[str, str] = {}
_SHARED_RESOURCE_LISTS: dict[tuple[tuple[str, type, object], ...], FrozenMap[str, Quantity]] = {}
# The kept annotations (`kept_annotations`: two names, values of at most MAX_KEPT_VALUE_CHARS), shared alike.
_SHARED_ANNOTATIONS: dict[tuple[tuple[str, str], ...], FrozenMap[str, str]] = {}


def _shared(text: str, *, add: bool = True) -> str:
    """`text` as the one object all pods share for it (a name or kind many pods repeat); `add` False: only when
    the table holds it already (what a pod will not keep must not fill the table for everybody else)."""
    if len(text) > _SHARED_MAX_CHARS:
        return text
    shared = _SHARED_STRINGS.get(text)
    if shared is not None:
        return shared
    if add and len(_SHARED_STRINGS) < _SHARED_MAX_ENTRIES:
        _SHARED_STRINGS[text] = text
    return text


def _shared_or_none(text: str | None) -> str | None:
    return None if text is None else _shared(text)


def _shareable_key(entries: Mapping[str, object]) -> tuple[tuple[str, type, object], ...] | None:
    """The key of a resource list in the shared table (its names, and its values with their JSON types, so that
    1, 1.0 and "1" stay apart), or None when it is not worth sharing or not hashable."""
    key = []
    for name, raw in entries.items():
        if not isinstance(raw, str | int | float) or len(name) > _SHARED_MAX_CHARS or (
                isinstance(raw, str) and len(raw) > _SHARED_MAX_CHARS):
            return None
        key.append((name, type(raw), raw))
    return tuple(key)


def _required_name(obj: Mapping[str, object], path: str) -> str:
    key = child(path, "name")
    name = string(obj.get("name"), key, if_null="")
    if not name:
        raise invalid("name is required", key, obj.get("name"))
    return name


def _quantity(value: object, key: str) -> Quantity:
    """Parse a quantity given as a JSON string or number (Go's Quantity.UnmarshalJSON accepts both)."""
    if value is None:
        return ZERO
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _MAX_QUANTITY_INT_BITS:
            raise invalid(ERR_NUMERIC, key, value)
        text = str(value)
    elif isinstance(value, float) and math.isfinite(value):
        text = repr(value)
    else:
        raise invalid("must be a quantity (a string or a number)", key, value)
    try:
        return Quantity.parse(text)
    except QuantityError as exc:
        raise invalid(exc.reason, key, value) from exc


def _resource_list(value: object, key: str, *, share: bool = True) -> FrozenMap[str, Quantity]:
    entries = mapping(value, key, if_null=EMPTY_MAPPING)
    if not entries:
        return NO_QUANTITIES
    shared_key = _shareable_key(entries)
    shared = _SHARED_RESOURCE_LISTS.get(shared_key) if shared_key is not None else None
    if shared is not None:
        return shared
    resources = FrozenMap({_shared(name, add=share): _quantity(raw, child(key, name)) for name, raw in entries.items()})
    if share and shared_key is not None and len(_SHARED_RESOURCE_LISTS) < _SHARED_MAX_ENTRIES:
        _SHARED_RESOURCE_LISTS[shared_key] = resources
    return resources


def kept_annotations(annotations: Mapping[str, str]) -> FrozenMap[str, str]:
    """Return what a pod keeps of `annotations`: DECISION_ANNOTATIONS only, values cut to MAX_KEPT_VALUE_CHARS."""
    kept = sorted((name, annotations[name][:MAX_KEPT_VALUE_CHARS]) for name in DECISION_ANNOTATIONS
                  if name in annotations)
    if not kept:
        return NO_STRINGS
    shared_key = tuple(kept)
    shared = _SHARED_ANNOTATIONS.get(shared_key)
    if shared is None:
        shared = FrozenMap(kept)
        if len(_SHARED_ANNOTATIONS) < _SHARED_MAX_ENTRIES:
            _SHARED_ANNOTATIONS[shared_key] = shared
    return shared


# A pod's containers, volumes and tolerations, each and as a whole tuple (5,000 pods of a few deployments: the same
# two tolerations, containers and volumes again and again, 0.9 KiB a pod when each pod had its own), shared
# through one table keyed by what each part exactly is: quantities by their value, format and text (equal
# Quantity objects may print differently), strings up to _SHARED_MAX_PART_CHARS in all (longer: not shared).
_SHARED_MAX_PART_CHARS = 1024
_SHARED_PARTS: dict[object, object] = {}


def _quantity_key(quantity: Quantity | None) -> object:
    return None if quantity is None else (quantity.value, quantity.format, quantity.verbatim)


def _resource_list_key(resources: Mapping[str, Quantity]) -> tuple[object, ...]:
    return tuple((name, _quantity_key(quantity)) for name, quantity in resources.items())


def _part_key(part: Container | Volume | Toleration) -> tuple[object, ...]:
    """What exactly `part` is, with its class: equal keys, interchangeable parts."""
    if isinstance(part, Container):
        return (Container, part.name, part.restart_policy, _resource_list_key(part.requests),
                _resource_list_key(part.limits))
    if isinstance(part, Volume):
        return (Volume, part.name, part.kind, part.empty_dir_medium, _quantity_key(part.empty_dir_size_limit))
    return (Toleration, part.key, part.operator, part.value, part.effect, part.toleration_seconds)


def _key_chars(key: object) -> int:
    """How many characters the strings of a part's key hold (names, and quantities' text)."""
    if isinstance(key, str):
        return len(key)
    if isinstance(key, tuple):
        return sum(map(_key_chars, key))
    return 0


_P = TypeVar("_P", Container, Volume, Toleration)


def _shared_parts(parts: tuple[_P, ...]) -> tuple[_P, ...]:
    """`parts`, each part and the tuple itself the one object all pods share for equal ones (bounded table)."""
    if not parts:
        return ()
    keys = tuple(map(_part_key, parts))
    whole_key = (tuple, keys)
    shared = _SHARED_PARTS.get(whole_key)
    if shared is not None:
        return shared  # type: ignore[return-value]  # (stored under a key of its own class and parts)
    if _key_chars(keys) > _SHARED_MAX_PART_CHARS or len(_SHARED_PARTS) + len(parts) >= _SHARED_MAX_ENTRIES:
        return parts
    shared_parts = tuple(_SHARED_PARTS.setdefault(key, part) for key, part in zip(keys, parts, strict=True))
    _SHARED_PARTS[whole_key] = shared_parts
    return shared_parts  # type: ignore[return-value]


def _checked_string_map(value: object, key: str) -> Mapping[str, object]:
    """Check that `value` maps strings to strings (null values are ""), as Go's decoder would; return it."""
    entries = mapping(value, key, if_null=EMPTY_MAPPING)
    for name, raw in entries.items():
        string(raw, child(key, name), if_null="")
    return entries


def _annotations(value: object, key: str) -> FrozenMap[str, str]:
    entries = _checked_string_map(value, key)
    return kept_annotations({name: str(entries[name] or "") for name in DECISION_ANNOTATIONS if name in entries})


def _message(value: object, key: str) -> str | None:
    text = string(value, key, if_null=None)
    return None if text is None else text[:MAX_KEPT_MESSAGE_CHARS]


def _requests_and_limits(value: object, key: str, *, share: bool = True
                         ) -> tuple[FrozenMap[str, Quantity], FrozenMap[str, Quantity]]:
    """Decode a v1.ResourceRequirements object (container or pod level) into its requests and limits."""
    resources = mapping(value, key, if_null=EMPTY_MAPPING)
    requests = _resource_list(resources.get("requests"), child(key, "requests"), share=share)
    limits = _resource_list(resources.get("limits"), child(key, "limits"), share=share)
    return requests, limits


def _container(value: object, key: str, *, share: bool = True) -> Container:
    obj = mapping(value, key, if_null=EMPTY_MAPPING)
    requests, limits = _requests_and_limits(obj.get("resources"), child(key, "resources"), share=share)
    restart_policy = string(obj.get("restartPolicy"), child(key, "restartPolicy"), if_null=None)
    return Container(
        name=_shared(_required_name(obj, key), add=share),
        requests=requests,
        limits=limits,
        restart_policy=None if restart_policy is None else _shared(restart_policy),
    )


def _pod_resources(value: object, key: str) -> PodResources | None:
    """Decode pod-level spec.resources; absent stays None, since present-but-empty decides QoS differently."""
    if value is None:
        return None
    requests, limits = _requests_and_limits(value, key)
    return PodResources(requests=requests, limits=limits)


def _volume(value: object, key: str, *, share: bool = True) -> Volume:
    obj = mapping(value, key, if_null=EMPTY_MAPPING)
    name = _shared(_required_name(obj, key), add=share)
    # A v1.Volume is its name plus exactly one source (validation: "must specify exactly 1 volume type").
    sources = [kind for kind, raw in obj.items() if kind != "name" and raw is not None]
    if len(sources) != 1:
        raise invalid("must specify exactly 1 volume type", key, sorted(sources))
    kind = _shared(sources[0])
    source_key = child(key, kind)
    source = mapping(obj[kind], source_key)
    if kind != "emptyDir":
        return Volume(name=name, kind=kind)
    size_key = child(source_key, "sizeLimit")
    raw_size = source.get("sizeLimit")
    return Volume(
        name=name,
        kind=kind,
        empty_dir_medium=string(source.get("medium"), child(source_key, "medium"), if_null=""),
        empty_dir_size_limit=None if raw_size is None else _quantity(raw_size, size_key),
    )


def _toleration(value: object, key: str) -> Toleration:
    obj = mapping(value, key, if_null=EMPTY_MAPPING)
    return Toleration(
        key=string(obj.get("key"), child(key, "key"), if_null=""),
        operator=string(obj.get("operator"), child(key, "operator"), if_null=""),
        value=string(obj.get("value"), child(key, "value"), if_null=""),
        effect=string(obj.get("effect"), child(key, "effect"), if_null=""),
        toleration_seconds=integer(obj.get("tolerationSeconds"), child(key, "tolerationSeconds"), if_null=None),
    )


def _tolerations(value: object, key: str) -> tuple[tuple[Toleration, ...], int]:
    """The first MAX_KEPT_TOLERATIONS tolerations (decoded) and how many more there were (not decoded: no decision
    reads tolerations, and decoding 13,000 of them took a fifth of a second)."""
    entries = sequence(value, key, if_null=())
    kept = tuple(_toleration(item, f"{key}[{i}]") for i, item in enumerate(entries[:MAX_KEPT_TOLERATIONS]))
    return kept, len(entries) - len(kept)


def _containers(value: object, key: str, *, init: bool) -> tuple[Container, ...]:
    """Every container of the list `value`; only those `_folded` keeps as they are add to the shared tables."""
    entries = sequence(value, key, if_null=())
    kept = len(entries) if len(entries) <= MAX_KEPT_CONTAINERS else MAX_KEPT_CONTAINERS - (2 if init else 1)
    return tuple(_container(item, f"{key}[{i}]", share=i < kept) for i, item in enumerate(entries))


def _volumes(value: object, key: str) -> tuple[Volume, ...]:
    """The volumes a pod keeps (`_kept_volumes`), each decoded; past the cap only the kept ones' names are shared."""
    entries = sequence(value, key, if_null=())
    share = len(entries) <= MAX_KEPT_VOLUMES
    volumes = tuple(_volume(item, f"{key}[{i}]", share=share) for i, item in enumerate(entries))
    if share:
        return volumes
    return tuple(replace(volume, name=_shared(volume.name)) for volume in _kept_volumes(volumes))


def _kept_volumes(volumes: tuple[Volume, ...]) -> tuple[Volume, ...]:
    """At most MAX_KEPT_VOLUMES of `volumes`, in their order: those a decision reads first, then the others."""
    if len(volumes) <= MAX_KEPT_VOLUMES:
        return volumes
    read = sum(map(read_by_decisions, volumes))
    others_left = MAX_KEPT_VOLUMES - min(read, MAX_KEPT_VOLUMES)
    read_left = MAX_KEPT_VOLUMES - others_left
    kept = []
    for volume in volumes:
        if read_by_decisions(volume):
            if read_left:
                kept.append(volume)
                read_left -= 1
        elif others_left:
            kept.append(volume)
            others_left -= 1
    return tuple(kept)


def _summed(lists: Iterable[Mapping[str, Quantity]]) -> FrozenMap[str, Quantity]:
    """Each resource's sum over `lists` (Go's addResourceList, a missing entry left out)."""
    total: dict[str, Quantity] = {}
    for resources in lists:
        for name, quantity in resources.items():
            total[name] = quantity if name not in total else total[name] + quantity
    return FrozenMap(total) if total else NO_QUANTITIES


def _init_peak_and_sidecars(tail: Iterable[Container], pick: Callable[[Container], Mapping[str, Quantity]]
                            ) -> tuple[FrozenMap[str, Quantity], FrozenMap[str, Quantity]]:
    """For init containers run after some sidecars S0 (any): M, the most any of them needs above S0 (an init
    container its own request plus the sidecars of `tail` started before it, a sidecar those and itself), and T, the
    sum of the sidecars of `tail`. An init container needing M then a sidecar of T give the pod the same requests
    and limits as `tail` (evictd.core.resources: the peak S0 + M, the running sidecars S0 + T <= S0 + M).

    Linear: a sidecar raises only its own resources' running sum, and the peak already holds every earlier one."""
    peak: dict[str, Quantity] = {}
    sidecars: dict[str, Quantity] = {}
    for container in tail:
        restartable = is_restartable_init_container(container)
        for name, own in pick(container).items():
            running = sidecars.get(name)
            need = own if running is None else running + own
            if restartable:
                sidecars[name] = need
            if name not in peak or need.cmp(peak[name]) > 0:
                peak[name] = need
    return (FrozenMap(peak) if peak else NO_QUANTITIES), (FrozenMap(sidecars) if sidecars else NO_QUANTITIES)


def _folded(containers: tuple[Container, ...], *, init: bool) -> tuple[Container, ...]:
    """`containers` when within MAX_KEPT_CONTAINERS; else the first ones and, in place of the rest, one container
    (init containers: an init container and a sidecar) with the same effect on the pod's requests and limits."""
    if len(containers) <= MAX_KEPT_CONTAINERS:
        return containers
    stand_ins = 2 if init else 1
    kept, rest = containers[:MAX_KEPT_CONTAINERS - stand_ins], containers[MAX_KEPT_CONTAINERS - stand_ins:]
    what = f"({len(rest)} more {'init containers' if init else 'containers'})"
    if not init:
        return (*kept, Container(name=what, requests=_summed(c.requests for c in rest),
                                 limits=_summed(c.limits for c in rest)))
    peak_requests, sidecar_requests = _init_peak_and_sidecars(rest, lambda c: c.requests)
    peak_limits, sidecar_limits = _init_peak_and_sidecars(rest, lambda c: c.limits)
    return (*kept, Container(name=what, requests=peak_requests, limits=peak_limits),
            Container(name=f"{what[:-1]}: sidecars)", requests=sidecar_requests, limits=sidecar_limits,
                      restart_policy=RESTART_POLICY_ALWAYS))


def _qos_status(value: object, key: str) -> QOSClass | None:
    text = string(value, key, if_null="")
    if not text:
        return None
    try:
        return QOSClass(text)
    except ValueError:
        raise invalid("must be Guaranteed, Burstable or BestEffort", key, value) from None


def _termination_by_kubelet(conditions: object, key: str) -> str | None:
    """The message of a True DisruptionTarget condition with reason TerminationByKubelet, if any."""
    found = [message for message in list_of(conditions, key, _kubelet_disruption, if_null=()) if message is not None]
    return found[0] if found else None


def _kubelet_disruption(value: object, key: str) -> str | None:
    condition = mapping(value, key)
    if (condition.get("type"), condition.get("status"), condition.get("reason")) != (
            "DisruptionTarget", "True", "TerminationByKubelet"):
        return None
    return _message(condition.get("message"), child(key, "message")) or ""


def pod_from_dict(obj: Mapping[str, object], *, where: str = "pod") -> Pod:
    """Return the Pod described by a v1 Pod JSON object (as `kubectl get pod -o json` prints it).

    Unknown fields are ignored. metadata.name, container names and volume names are required; a missing or
    empty namespace is "default". Raises DecodeError (key = path below `where`) for anything malformed,
    including a document that is not a mapping at all.
    """
    root = mapping(obj, where)
    meta_key, spec_key, status_key = (child(where, part) for part in ("metadata", "spec", "status"))
    meta = mapping(root.get("metadata"), meta_key, if_null=EMPTY_MAPPING)
    spec = mapping(root.get("spec"), spec_key, if_null=EMPTY_MAPPING)
    status = mapping(root.get("status"), status_key, if_null=EMPTY_MAPPING)
    _checked_string_map(meta.get("labels"), child(meta_key, "labels"))  # checked, not kept: no decision reads them
    containers = _containers(spec.get("containers"), child(spec_key, "containers"), init=False)
    init_containers = _containers(spec.get("initContainers"), child(spec_key, "initContainers"), init=True)
    kept_volumes = _volumes(spec.get("volumes"), child(spec_key, "volumes"))
    volumes_left = len(sequence(spec.get("volumes"), child(spec_key, "volumes"), if_null=())) - len(kept_volumes)
    tolerations, tolerations_left = _tolerations(spec.get("tolerations"), child(spec_key, "tolerations"))
    kept_containers, kept_init = _folded(containers, init=False), _folded(init_containers, init=True)
    dropped = {field: count for field, count in (
        ("containers", len(containers) - len(kept_containers) + (kept_containers is not containers)),
        ("initContainers", len(init_containers) - len(kept_init) + 2 * (kept_init is not init_containers)),
        ("volumes", volumes_left), ("tolerations", tolerations_left)) if count}
    del containers, init_containers
    return Pod(
        name=_required_name(meta, meta_key),
        namespace=_shared(string(meta.get("namespace"), child(meta_key, "namespace"), if_null="")
                          or DEFAULT_NAMESPACE),
        uid=string(meta.get("uid"), child(meta_key, "uid"), if_null=""),
        annotations=_annotations(meta.get("annotations"), child(meta_key, "annotations")),
        generation=integer(meta.get("generation"), child(meta_key, "generation"), if_null=0),
        deletion_timestamp=string(meta.get("deletionTimestamp"), child(meta_key, "deletionTimestamp"), if_null=None),
        deletion_grace_period_s=integer(
            meta.get("deletionGracePeriodSeconds"), child(meta_key, "deletionGracePeriodSeconds"), if_null=None
        ),
        priority=integer(
            spec.get("priority"), child(spec_key, "priority"), low=INT32_MIN, high=INT32_MAX, if_null=None
        ),
        priority_class_name=_shared(string(spec.get("priorityClassName"), child(spec_key, "priorityClassName"),
                                           if_null="")),
        termination_grace_period_s=integer(
            spec.get("terminationGracePeriodSeconds"), child(spec_key, "terminationGracePeriodSeconds"), if_null=None
        ),
        node_name=_shared(string(spec.get("nodeName"), child(spec_key, "nodeName"), if_null="")),
        containers=_shared_parts(kept_containers),
        init_containers=_shared_parts(kept_init),
        overhead=_resource_list(spec.get("overhead"), child(spec_key, "overhead")),
        resources=_pod_resources(spec.get("resources"), child(spec_key, "resources")),
        volumes=_shared_parts(kept_volumes),
        tolerations=_shared_parts(tolerations),
        status_phase=_shared_or_none(string(status.get("phase"), child(status_key, "phase"), if_null=None)),
        status_reason=_message(status.get("reason"), child(status_key, "reason")),
        status_message=_message(status.get("message"), child(status_key, "message")),
        status_termination_by_kubelet=_termination_by_kubelet(status.get("conditions"),
                                                              child(status_key, "conditions")),
        status_qos_class=_qos_status(status.get("qosClass"), child(status_key, "qosClass")),
        fields_dropped=FrozenMap(dropped) if dropped else NO_COUNTS,
    )

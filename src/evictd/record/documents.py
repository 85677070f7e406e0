"""The documents a recording holds that evictd writes from its own values: a pod as a v1 Pod object (the inverse
of `core.pod_parser.pod_from_dict`; `PodDocuments`, a pod list's objects made one at a time) and the eviction
settings as a KubeletConfiguration (the inverse of `core.kubelet_config.eviction_settings`). `simulate` reads both
back, as a recording exported or replayed is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import overload

from evictd.core.duration import format_go_duration
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.pods import Container, Pod, Toleration, Volume
from evictd.core.quantity import Quantity
from evictd.core.stall_gate import STALL_GATE_FIELD


def kubelet_config_document(settings: EvictionSettings) -> dict[str, object]:
    """Return a KubeletConfiguration document (without apiVersion and kind) whose `eviction_settings` are
    `settings`: what a recording stores of the configuration, and what an exported scenario carries."""
    return {
        "evictionHard": dict(settings.hard),
        "evictionSoft": dict(settings.soft),
        "evictionSoftGracePeriod": dict(settings.soft_grace_period),
        "evictionMinimumReclaim": dict(settings.minimum_reclaim),
        "evictionPressureTransitionPeriod": format_go_duration(settings.pressure_transition_period_s),
        "evictionMaxPodGracePeriod": settings.max_pod_grace_period_s,
        "enforceNodeAllocatable": list(settings.enforce_node_allocatable),
        "localStorageCapacityIsolation": settings.local_storage_capacity_isolation,
        "kernelMemcgNotification": settings.kernel_memcg_notification,
        **{key: dict(values) for key, values in settings.stall_maps().items()},
        # The stall gate only when turned off: its default (on) is what a configuration without the key means.
        **({} if settings.stall_requires_node_reclaim else {STALL_GATE_FIELD: False}),
    }



def _present(pairs: Iterable[tuple[str, object]]) -> dict[str, object]:
    """Return the pairs whose value is present: None, and empty maps and lists, are left out."""
    return {name: value for name, value in pairs if value is not None and value != {} and value != []}


def _quantities_json(quantities: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(quantity) for name, quantity in quantities.items()}


def _resources_json(requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]) -> dict[str, object]:
    return _present((("requests", _quantities_json(requests)), ("limits", _quantities_json(limits))))


def _container_json(container: Container) -> dict[str, object]:
    return _present((("name", container.name), ("resources", _resources_json(container.requests, container.limits)),
                     ("restartPolicy", container.restart_policy)))


def _volume_json(volume: Volume) -> dict[str, object]:
    source: dict[str, object] = {}
    if volume.kind == "emptyDir":
        source = _present((("medium", volume.empty_dir_medium or None),
                           ("sizeLimit", None if volume.empty_dir_size_limit is None
                            else str(volume.empty_dir_size_limit))))
    return {"name": volume.name, volume.kind: source}


def _toleration_json(toleration: Toleration) -> dict[str, object]:
    return _present((("key", toleration.key or None), ("operator", toleration.operator or None),
                     ("value", toleration.value or None), ("effect", toleration.effect or None),
                     ("tolerationSeconds", toleration.toleration_seconds)))


class PodDocuments(Sequence[Mapping[str, object]]):
    """The v1 Pod objects of a pod list (`pod_to_dict`), each made when it is asked for and not kept: writing a
    whole list of 5,000 pods one object after another holds one object at a time, not 12 MiB of them."""

    __slots__ = ("_pods",)

    def __init__(self, pods: Sequence[Pod]) -> None:
        self._pods = pods

    def __len__(self) -> int:
        return len(self._pods)

    @overload
    def __getitem__(self, index: int) -> Mapping[str, object]: ...

    @overload
    def __getitem__(self, index: slice) -> list[Mapping[str, object]]: ...

    def __getitem__(self, index: int | slice) -> Mapping[str, object] | list[Mapping[str, object]]:
        if isinstance(index, slice):
            return [pod_to_dict(pod) for pod in self._pods[index]]
        return pod_to_dict(self._pods[index])

    def __iter__(self) -> Iterator[Mapping[str, object]]:
        return map(pod_to_dict, self._pods)


def pod_to_dict(pod: Pod) -> dict[str, object]:
    """Return the v1 Pod JSON object of `pod`, holding what evictd reads: `pod_from_dict` of it gives back an
    equal Pod. Absent values are left out."""
    resources = None if pod.resources is None else _resources_json(pod.resources.requests, pod.resources.limits)
    conditions = None if pod.status_termination_by_kubelet is None else [
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
         "message": pod.status_termination_by_kubelet}]
    return _present((
        ("metadata", _present((
            ("name", pod.name), ("namespace", pod.namespace), ("uid", pod.uid or None),
            ("annotations", dict(pod.annotations)),
            ("generation", pod.generation or None), ("deletionTimestamp", pod.deletion_timestamp),
            ("deletionGracePeriodSeconds", pod.deletion_grace_period_s)))),
        ("spec", _present((
            ("priority", pod.priority), ("priorityClassName", pod.priority_class_name or None),
            ("terminationGracePeriodSeconds", pod.termination_grace_period_s),
            ("nodeName", pod.node_name or None),
            ("containers", [_container_json(c) for c in pod.containers]),
            ("initContainers", [_container_json(c) for c in pod.init_containers]),
            ("overhead", _quantities_json(pod.overhead)),
            # Present but empty differs from absent (QoS): kept as {} by hand below.
            ("volumes", [_volume_json(v) for v in pod.volumes]),
            ("tolerations", [_toleration_json(t) for t in pod.tolerations])))
         | ({} if resources is None else {"resources": resources})),
        ("status", _present((
            ("phase", pod.status_phase), ("reason", pod.status_reason), ("message", pod.status_message),
            ("conditions", conditions),
            ("qosClass", None if pod.status_qos_class is None else str(pod.status_qos_class))))),
    ))

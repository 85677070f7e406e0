"""What a pod costs evictd however its owner wrote it: the caps on containers, volumes and tolerations
(`evictd.core.pods` MAX_KEPT_*), and that they never change a decision.

A tenant's Pending pod of 1.3 MB (13,650 tolerations; volumes or containers alike) held 3-6 MiB in evictd: 30 of
them pushed it past the DaemonSet's memory limit. The retained pod is measured here by walking every object it
holds (each once), not timed.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from evictd.core import pod_parser
from evictd.core.fs_layout import FsLayout
from evictd.core.local_storage import local_storage_evictions
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import (
    MAX_KEPT_CONTAINERS,
    MAX_KEPT_TOLERATIONS,
    MAX_KEPT_VOLUMES,
    Pod,
    is_critical_pod,
    pod_priority,
    read_by_decisions,
)
from evictd.core.ranking import rank_pods_with_keys
from evictd.core.resources import pod_limit, pod_request
from evictd.core.signals import Signal
from evictd.core.summary import ContainerStats, FsStats, MemoryStats, PodReference, PodStats, VolumeStats
from evictd.record.documents import pod_to_dict

HOSTILE_ENTRIES = 13_650
# A hostile pod of any one shape holds at most 40 KiB (measured: containers with resource lists of their own, names
# as long as the API allows); 250 such pods (the most a node may run) are 10 MiB.
MAX_RETAINED_BYTES = 48 << 10
# A pod at every cap at once, with the longest names and a quantity of its own everywhere: 98 KiB measured.
MAX_RETAINED_AT_EVERY_CAP_BYTES = 112 << 10
RESOURCES = ("cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "example.com/gpu")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def deep_size(root: object) -> int:
    """Bytes of every object `root` holds (each counted once; classes, functions and modules not counted)."""
    seen: set[int] = set()
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type) or callable(obj) or type(obj).__name__ == "module":
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def _pod(spec: dict[str, Any], name: str = "tenant") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "tenant", "uid": f"uid-{name}", "resourceVersion": "7",
                         "labels": {f"tenant.example.com/label-{i}": "v" * 63 for i in range(200)}},
            "spec": {"nodeName": "node-a", "priority": 100, **spec},
            "status": {"phase": "Pending", "qosClass": "Burstable"}}


def _name(i: int) -> str:
    """A name as long as the API allows for a container or volume (a DNS label: 63 characters)."""
    return f"{i:06d}-" + "n" * 56


ENV = [{"name": f"VAR_{i}", "value": "x" * 64} for i in range(1000)]
HOSTILE_SHAPES: dict[str, dict[str, Any]] = {
    "tolerations": {"containers": [{"name": "app", "image": "busybox"}],
                    "tolerations": [{"key": f"example.com/key-{i}", "operator": "Exists", "effect": "NoSchedule"}
                                    for i in range(HOSTILE_ENTRIES)]},
    "volumes": {"containers": [{"name": "app", "image": "busybox"}],
                "volumes": [{"name": _name(i), ("emptyDir" if i % 2 else "configMap"): {}}
                            for i in range(HOSTILE_ENTRIES)]},
    "containers": {"containers": [{"name": _name(i), "image": "busybox", "env": ENV[:2],
                                   "resources": {"requests": {"cpu": f"{i + 1}m", "memory": f"{i + 1}Ki"},
                                                 "limits": {"ephemeral-storage": f"{i + 1}Mi"}}}
                                  for i in range(HOSTILE_ENTRIES // 2)]},
    "initContainers": {"containers": [{"name": "app", "image": "busybox"}],
                       "initContainers": [{"name": _name(i), "image": "busybox",
                                           **({"restartPolicy": "Always"} if i % 3 == 0 else {}),
                                           "resources": {"requests": {"memory": f"{i + 1}Ki"}}}
                                          for i in range(HOSTILE_ENTRIES // 2)]},
    "env": {"containers": [{"name": f"c{i}", "image": "busybox", "env": ENV} for i in range(12)]},
}


def test_hostile_pods_of_every_shape_stay_small_once_parsed() -> None:
    for shape, spec in HOSTILE_SHAPES.items():
        document = _pod(spec, shape)
        assert len(json.dumps(document)) > 900_000, f"{shape}: as large as the issue's pods"
        pod = pod_from_dict(document)
        assert deep_size(pod) < MAX_RETAINED_BYTES, shape
        assert len(pod.containers) <= MAX_KEPT_CONTAINERS and len(pod.init_containers) <= MAX_KEPT_CONTAINERS
        assert len(pod.volumes) <= MAX_KEPT_VOLUMES and len(pod.tolerations) <= MAX_KEPT_TOLERATIONS
    assert dict(pod_from_dict(_pod(HOSTILE_SHAPES["tolerations"])).fields_dropped) == {
        "tolerations": HOSTILE_ENTRIES - MAX_KEPT_TOLERATIONS}
    assert dict(pod_from_dict(_pod(HOSTILE_SHAPES["containers"])).fields_dropped) == {
        "containers": HOSTILE_ENTRIES // 2 - MAX_KEPT_CONTAINERS + 1}
    assert not pod_from_dict(_pod(HOSTILE_SHAPES["env"])).fields_dropped, "env is never held: nothing to drop"


def test_a_pod_at_every_cap_with_the_longest_names_stays_under_the_bound() -> None:
    spec = {"containers": [{"name": _name(i), "resources": {"requests": {"memory": f"{i + 1}Mi"},
                                                            "limits": {"ephemeral-storage": f"{i + 1}Gi"}}}
                           for i in range(MAX_KEPT_CONTAINERS)],
            "initContainers": [{"name": _name(i), "resources": {"requests": {"cpu": f"{i + 1}m"}}}
                               for i in range(MAX_KEPT_CONTAINERS)],
            "volumes": [{"name": _name(i), "emptyDir": {"sizeLimit": f"{i + 1}Mi"}} for i in range(MAX_KEPT_VOLUMES)],
            "tolerations": [{"key": "k" * 253, "operator": "Equal", "value": f"{i:063d}", "effect": "NoExecute",
                             "tolerationSeconds": i} for i in range(MAX_KEPT_TOLERATIONS)]}
    pod = pod_from_dict(_pod(spec))
    assert not pod.fields_dropped, "at the caps nothing is dropped"
    assert deep_size(pod) < MAX_RETAINED_AT_EVERY_CAP_BYTES


@contextmanager
def _uncapped() -> Iterator[None]:
    with mock.patch.multiple(pod_parser, MAX_KEPT_CONTAINERS=10**9, MAX_KEPT_VOLUMES=10**9,
                             MAX_KEPT_TOLERATIONS=10**9):
        yield


def _decisions(pod: Pod, stats: PodStats) -> dict[str, object]:
    """Everything a decision reads of `pod`: its requests and limits, priority, criticality, its rank among
    neighbours under memory and disk pressure (with their sort keys) and its local-storage eviction."""
    neighbours = [pod_from_dict(_pod({"containers": [{"name": "app", "resources": {"requests": {
        "memory": f"{i}Gi", "ephemeral-storage": f"{i}Gi"}}}]}, f"n{i}")) for i in range(1, 4)]
    all_stats = {p.uid: PodStats(pod_ref=PodReference(p.name, p.namespace, p.uid),
                                 memory=MemoryStats(time=NOW, working_set_bytes=2 << 30),
                                 ephemeral_storage=FsStats(time=NOW, used_bytes=2 << 30)) for p in neighbours}
    all_stats[pod.uid] = stats
    pods = [*neighbours, pod]
    ranked = {signal: [(p.name, key) for p, key in zip(*rank_pods_with_keys(
        signal, FsLayout(), pods, lambda p: all_stats[p.uid]), strict=True)]
        for signal in (Signal.MEMORY_AVAILABLE, Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE)}
    evictions = local_storage_evictions([pod], lambda p: all_stats[p.uid], FsLayout())
    return {
        "requests": {r: pod_request(pod, r).value for r in RESOURCES},
        "limits": {r: (None if (q := pod_limit(pod, r)) is None else q.value) for r in RESOURCES},
        "priority": pod_priority(pod), "critical": is_critical_pod(pod), "ranked": ranked,
        "local storage": [(e.signal, e.message) for e in evictions],
        "read volumes": [v for v in pod.volumes if read_by_decisions(v)],
    }


def _stats(document: dict[str, Any], memory: int, volume_used: int, container_used: int) -> PodStats:
    meta = document["metadata"]
    spec = document["spec"]
    return PodStats(
        pod_ref=PodReference(meta["name"], meta["namespace"], meta["uid"]),
        memory=MemoryStats(time=NOW, working_set_bytes=memory),
        containers=tuple(ContainerStats(name=c["name"], logs=FsStats(time=NOW, used_bytes=container_used))
                         for c in spec.get("containers", [])[:3]),
        volume_stats=tuple(VolumeStats(name=v["name"], used_bytes=volume_used, inodes_used=10)
                           for v in spec.get("volumes", [])),
        ephemeral_storage=FsStats(time=NOW, used_bytes=volume_used))


def test_decisions_for_a_pod_past_the_caps_equal_those_without_caps() -> None:
    """300 containers, 100 init containers (a sidecar every third), 250 volumes (half of them secrets, read by no
    decision) and 100 tolerations: capped, the pod is ranked and limited exactly as uncapped."""
    spec = {
        "containers": [{"name": f"c{i}", "resources": {
            "requests": {"memory": f"{i + 1}Mi", **({"cpu": "100m"} if i % 2 else {})},
            "limits": {"ephemeral-storage": f"{i + 1}Gi", **({"memory": "1Gi"} if i % 5 else {})}}}
            for i in range(300)],
        "initContainers": [{"name": f"i{i}", **({"restartPolicy": "Always"} if i % 3 == 0 else {}),
                            "resources": {"requests": {"memory": f"{(i * 37) % 100 + 1}Mi", "example.com/gpu": "1"},
                                          "limits": {"ephemeral-storage": f"{(i * 53) % 90 + 1}Gi"}}}
                           for i in range(100)],
        "volumes": [{"name": f"v{i}", **({"secret": {"secretName": "s"}} if i % 2 else
                                         {"emptyDir": {"sizeLimit": f"{i + 1}Gi"}} if i % 4 == 0 else
                                         {"hostPath": {"path": "/tmp"}})} for i in range(250)],
        "tolerations": [{"key": f"k{i}", "operator": "Exists"} for i in range(100)],
    }
    document = _pod(spec)
    capped = pod_from_dict(document)
    with _uncapped():
        whole = pod_from_dict(document)
    assert dict(capped.fields_dropped) == {"containers": 300 - MAX_KEPT_CONTAINERS + 1,
                                           "initContainers": 100 - MAX_KEPT_CONTAINERS + 2,
                                           "volumes": 250 - MAX_KEPT_VOLUMES,
                                           "tolerations": 100 - MAX_KEPT_TOLERATIONS}
    assert not whole.fields_dropped
    for memory, volume_used, container_used in ((1 << 30, 0, 0), (64 << 30, 3 << 30, 0), (0, 1 << 30, 1 << 40)):
        stats = _stats(document, memory, volume_used, container_used)
        assert _decisions(capped, stats) == _decisions(whole, stats)
    assert pod_from_dict(pod_to_dict(capped)) == capped, "a recording of the capped pod reads back as it"


quantity = st.sampled_from(["0", "1", "100m", "1Mi", "3Gi", "1.5", "250M"])
init_container = st.fixed_dictionaries(
    {"name": st.just("i")},
    optional={"restartPolicy": st.sampled_from(["Always", "Never"]),
              "resources": st.fixed_dictionaries({}, optional={
                  "requests": st.dictionaries(st.sampled_from(RESOURCES[:3]), quantity),
                  "limits": st.dictionaries(st.sampled_from(RESOURCES[:3]), quantity)})})


@settings(max_examples=300, deadline=None)
@given(containers=st.lists(init_container, max_size=12), init_containers=st.lists(init_container, max_size=12))
def test_folding_keeps_every_request_and_limit_whatever_the_order_of_sidecars(
        containers: list[dict[str, Any]], init_containers: list[dict[str, Any]]) -> None:
    """With a cap of 4 (so that folding happens), any containers and init containers, sidecars anywhere."""
    document = {"metadata": {"name": "p"},
                "spec": {"containers": [{**c, "name": f"c{i}"} for i, c in enumerate(containers)],
                         "initContainers": [{**c, "name": f"i{i}"} for i, c in enumerate(init_containers)]}}
    with mock.patch.object(pod_parser, "MAX_KEPT_CONTAINERS", 4):
        capped = pod_from_dict(document)
    with _uncapped():
        whole = pod_from_dict(document)
    for resource in RESOURCES[:3]:
        assert pod_request(capped, resource).value == pod_request(whole, resource).value, resource
        capped_limit, whole_limit = pod_limit(capped, resource), pod_limit(whole, resource)
        assert (capped_limit is None) == (whole_limit is None), resource
        assert capped_limit is None or whole_limit is None or capped_limit.value == whole_limit.value, resource


def test_what_a_pod_does_not_keep_never_fills_the_tables_pods_share() -> None:
    """The names and resource lists of containers folded away and volumes dropped are not added to the bounded
    tables of what pods share: one hostile pod filled them (4,096 entries) and no later pod shared its namespace."""
    tables = {"_SHARED_STRINGS": {}, "_SHARED_RESOURCE_LISTS": {}, "_SHARED_PARTS": {}}
    with mock.patch.multiple(pod_parser, **tables):
        for shape in ("containers", "initContainers", "volumes"):
            pod_from_dict(_pod(HOSTILE_SHAPES[shape], shape))
        kept = MAX_KEPT_CONTAINERS + MAX_KEPT_VOLUMES
        assert len(pod_parser._SHARED_STRINGS) < kept + 20, "the kept names, kinds and a few resource names"
        assert len(pod_parser._SHARED_RESOURCE_LISTS) <= 4 * MAX_KEPT_CONTAINERS, "requests and limits of the kept"
        first, second = (pod_from_dict(_pod({"containers": [{"name": "app"}]}, name)) for name in ("a", "b"))
        assert first.namespace is second.namespace and first.containers[0].name is second.containers[0].name

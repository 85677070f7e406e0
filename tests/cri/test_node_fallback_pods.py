"""The pods the node shows, against a real containerd: what evictd ranks while the API has given no pod list.

Pods run in the session's containerd with the sandbox annotations a kubelet puts there (the pod's own, and
its ``kubernetes.io/config.source``: ``api`` for a pod of the API server, ``file`` for a static pod), in pod
cgroups under the harness's cgroup root, found by `DiscoveredPods` over the real cgroup tree and named by
`CriClient.list_sandboxes`. `NodeFallbackPods` then keeps only the pods that may be stopped without the API
(and none an earlier pod list said are critical).
"""

from __future__ import annotations

import contextlib
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from containerd_harness import SLEEP_FOREVER_SCRIPT, Containerd, RunningPod, busybox_container
from cri_fixtures import PodFactory

from evictd.adapters.cgroups import CgroupReader, detect_cgroup_layout
from evictd.adapters.node_pods import DiscoveredPods
from evictd.core.errors import EvictdError
from evictd.core.pods import (
    CONFIG_SOURCE_ANNOTATION,
    SYSTEM_CRITICAL_PRIORITY,
    FrozenMap,
    Pod,
    is_critical_pod,
    is_static_pod,
)
from evictd.cri import RuntimeSlot
from evictd.cri.client import CriClient
from evictd.kube.cluster import NodeFallbackPods
from evictd.kube.critical_record import CriticalPodRecord
from evictd.kube.journal import EvictionJournal, JournalEntry
from log_capture import LogCapture

API = {CONFIG_SOURCE_ANNOTATION: "api"}
STATIC = {CONFIG_SOURCE_ANNOTATION: "file", "kubernetes.io/config.hash": "3f1e2d"}
NO_SUCH_RUNTIME = "unix:///nonexistent/containerd.sock"


def discovered_on(containerd: Containerd, runtime: RuntimeSlot) -> DiscoveredPods:
    """The node's pods as `evictd run` finds them: the cgroup tree under the harness's root, its log folders,
    and the runtime slot (empty until the test fills it)."""
    layout = detect_cgroup_layout("/sys/fs/cgroup", "cgroupfs", base=containerd.cgroup_root.strip("/"))
    return DiscoveredPods(CgroupReader(layout), str(containerd.logs_dir), runtime)


def answering(client: CriClient) -> Any:
    """A runtime that answered, as far as listing sandboxes goes."""
    return SimpleNamespace(attached=True, list_sandboxes=client.list_sandboxes)


def run(pods: PodFactory, name: str, *, namespace: str = "shop", annotations: dict[str, str] | None = None,
        **options: Any) -> RunningPod:
    return pods.run(name, [busybox_container("app", SLEEP_FOREVER_SCRIPT)], namespace=namespace, qos="burstable",
                    annotations=annotations, **options)


def evicted(pod: RunningPod) -> JournalEntry:
    return JournalEntry(uid=pod.uid, namespace=pod.namespace, name=pod.name, signal="memory.available",
                        grace_period_s=1, message="", reason="Evicted", conditions=(), annotations=FrozenMap(),
                        decided_at=0.0, stopped_locally=True)


def by_uid(listed: list[Pod] | tuple[Pod, ...], *running: RunningPod) -> dict[str, Pod]:
    """The listed pods among `running` (the session's containerd may hold other tests' pods)."""
    wanted = {pod.uid for pod in running}
    return {pod.uid: pod for pod in listed if pod.uid in wanted}


def test_sandboxes_name_the_nodes_pods_and_tell_static_pods(containerd: Containerd, pods: PodFactory) -> None:
    web = run(pods, "web", annotations={**API, "team": "payments"})
    static = run(pods, "etcd-node-1", namespace="kube-system", annotations=STATIC)
    slot = RuntimeSlot()
    discovered = discovered_on(containerd, slot)

    # Without a runtime: named from the log folders, nothing says where they came from.
    before = by_uid(discovered.active_pods(), web, static)
    assert {p.key for p in before.values()} == {"shop/web", "kube-system/etcd-node-1"}
    assert all(not p.annotations for p in before.values())

    slot.current = answering(containerd.cri)
    found = by_uid(discovered.active_pods(), web, static)
    # Only what decisions read is kept of the sandbox's annotations (issue #25: a tenant's can be 256 KiB).
    assert dict(found[web.uid].annotations) == API
    assert not is_static_pod(found[web.uid]) and not is_critical_pod(found[web.uid])
    assert dict(found[static.uid].annotations) == {CONFIG_SOURCE_ANNOTATION: "file"}
    assert is_static_pod(found[static.uid]) and is_critical_pod(found[static.uid])
    assert discovered.sandbox_problem is None
    # The same listing again: the same pod objects (nothing rebuilt).
    again = by_uid(discovered.active_pods(), web, static)
    assert all(again[uid] is found[uid] for uid in found)


def test_without_a_pod_list_only_pods_the_node_vouches_for_are_candidates(containerd: Containerd,
                                                                           pods: PodFactory) -> None:
    web = run(pods, "web", annotations=API)
    static = run(pods, "etcd-node-1", annotations=STATIC)
    system = run(pods, "kube-proxy-x7", namespace="kube-system", annotations=API)
    remembered = run(pods, "calico-node-x1", namespace="calico-system", annotations=API)  # critical, said a list
    own = run(pods, "evictd-q2", namespace="evictd-system", annotations=API)
    done = run(pods, "evicted-before", annotations=API)
    unknown = run(pods, "made-by-hand")  # a sandbox no kubelet made: no config.source
    stopped = run(pods, "stopped", annotations=API)
    containerd.cri.stop_sandbox(stopped.sandbox_id)  # its cgroup stays (containerd leaves it), nothing runs
    journal = EvictionJournal(None, log=LogCapture())
    journal.record(evicted(done))
    slot = RuntimeSlot()
    discovered = discovered_on(containerd, slot)
    critical = CriticalPodRecord(None)
    critical.remember([Pod(name=remembered.name, namespace=remembered.namespace, uid=remembered.uid,
                           priority=SYSTEM_CRITICAL_PRIORITY + 1000)])
    fallback = NodeFallbackPods(discovered, journal, own_uid=own.uid, critical=critical)
    everyone = (web, static, system, remembered, own, done, unknown, stopped)

    with pytest.raises(EvictdError, match="no container runtime"):
        fallback.active_pods()  # nothing it finds could be stopped

    slot.current = answering(containerd.cri)
    assert len(by_uid(discovered.active_pods(), *everyone)) == len(everyone)  # the node shows them all
    candidates = by_uid(fallback.active_pods(), *everyone)
    assert sorted(p.key for p in candidates.values()) == ["shop/etcd-node-1", "shop/web"]
    assert is_critical_pod(candidates[static.uid])  # ranked, then skipped by the engine


def test_a_runtime_that_cannot_list_sandboxes_leaves_no_candidate(containerd: Containerd, pods: PodFactory) -> None:
    run(pods, "web", annotations=API)
    with contextlib.closing(CriClient(NO_SUCH_RUNTIME, 1.0)) as client:
        slot = RuntimeSlot()
        slot.current = answering(client)
        discovered = discovered_on(containerd, slot)
        fallback = NodeFallbackPods(discovered, EvictionJournal(None, log=LogCapture()), own_uid=str(uuid.uuid4()))
        with pytest.raises(EvictdError, match="could not list the pod sandboxes"):
            fallback.active_pods()
        assert discovered.active_pods(), "the node still shows its pods (unnamed by the runtime)"

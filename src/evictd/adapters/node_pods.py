"""Pods discovered from the node itself, for when no Kubernetes API is configured or it gave no pod list.

Every pod cgroup under kubepods is a running pod (UID and QoS tier from its path); the kubelet's log folders
`<podLogsDir>/<namespace>_<name>_<uid>/` give its namespace and name, or with a runtime its ready sandbox does, with
the annotations the kubelet copies there (`kubernetes.io/config.source` tells static pods). No requests, limits or
priority: rankings order by usage alone; an unnamed pod is its UID in namespace `unknown`. Without the API these pods
are never acted on; when the API gave no list, `NodeFallbackPods` chooses what a hard threshold may stop. One listing
per cycle: the stats source finds the same pods' cgroups through `listed_cgroups`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from evictd.adapters.cgroups import CgroupReader, PodCgroup
from evictd.core.errors import EvictdError, SampleError, os_error_reason
from evictd.core.pod_parser import kept_annotations
from evictd.core.pods import FrozenMap, Pod, QOSClass
from evictd.core.runtime import Sandbox, SandboxState
from evictd.cri import NO_RUNTIME, Runtime

UNKNOWN_NAMESPACE = "unknown"
_QOS_BY_TIER = {"guaranteed": QOSClass.GUARANTEED, "burstable": QOSClass.BURSTABLE, "besteffort": QOSClass.BEST_EFFORT}


def log_folder_names(pod_logs_dir: str) -> dict[str, tuple[str, str]]:
    """Return pod UID -> (namespace, name) from the kubelet's log folders (empty when there are none)."""
    try:
        entries = os.listdir(pod_logs_dir)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SampleError(pod_logs_dir, os_error_reason(exc)) from exc
    names: dict[str, tuple[str, str]] = {}
    for entry in entries:
        # Namespaces and pod names cannot contain "_" (DNS labels/subdomains), so the split is unambiguous.
        parts = entry.split("_")
        if len(parts) == 3 and all(parts):
            namespace, name, uid = parts
            names[uid] = (namespace, name)
    return names


class DiscoveredPods:
    """A PodSource listing the pods that have a cgroup on this node; `sandbox_problem` says why the runtime could not
    name the last listing's pods (None: it did, or no runtime)."""

    def __init__(self, cgroups: CgroupReader, pod_logs_dir: str, runtime: Runtime = NO_RUNTIME) -> None:
        self._cgroups = cgroups
        self._pod_logs_dir = pod_logs_dir
        self._runtime = runtime
        self._listed: tuple[list[Pod], Mapping[str, PodCgroup], SampleError | None] | None = None
        # The last listing's pods by content: an unchanged pod is the same object next cycle (memos kept).
        self._known: dict[tuple[str, str, str, str, Sandbox | None], Pod] = {}
        self.sandbox_problem: str | None = None

    @property
    def runtime_attached(self) -> bool:
        return self._runtime.attached

    def active_pods(self) -> list[Pod]:
        """List the running pods now, named from their log folders. Unreadable cgroups mean no pods."""
        self._listed = self._list()
        return self._listed[0]

    def listed_cgroups(self) -> Mapping[str, PodCgroup]:
        """Return pod UID -> cgroup of the last listing; raise the SampleError that listing met, if any."""
        _, cgroups, error = self._last()
        if error is not None:
            raise error
        return cgroups

    def _last(self) -> tuple[list[Pod], Mapping[str, PodCgroup], SampleError | None]:
        if self._listed is None:
            self._listed = self._list()
        return self._listed

    def _list(self) -> tuple[list[Pod], Mapping[str, PodCgroup], SampleError | None]:
        if not self._cgroups.has_pods_cgroup():
            return [], {}, None
        try:
            cgroups = self._cgroups.pod_cgroups()
        except SampleError as exc:
            return [], {}, exc
        try:
            names = log_folder_names(self._pod_logs_dir)
        except SampleError:
            names = {}
        sandboxes = self._ready_sandboxes()
        pods = []
        known: dict[tuple[str, str, str, str, Sandbox | None], Pod] = {}
        for uid, cgroup in sorted(cgroups.items()):
            sandbox = sandboxes.get(uid)
            if sandbox is not None and sandbox.name and sandbox.namespace:
                namespace, name = sandbox.namespace, sandbox.name
            else:
                namespace, name = names.get(uid, (UNKNOWN_NAMESPACE, uid))
            identity = (uid, namespace, name, cgroup.qos, sandbox)
            pod = self._known.get(identity)
            if pod is None:
                pod = Pod(name=name, namespace=namespace, uid=uid, status_phase="Running",
                          annotations=kept_annotations(sandbox.annotations) if sandbox is not None else FrozenMap(),
                          status_qos_class=_QOS_BY_TIER.get(cgroup.qos))
            known[identity] = pod
            pods.append(pod)
        self._known = known
        return pods, cgroups, None

    def _ready_sandboxes(self) -> dict[str, Sandbox]:
        """Pod UID -> its newest ready sandbox; empty (and `sandbox_problem` set) when the runtime cannot answer."""
        self.sandbox_problem = None
        if not self._runtime.attached:
            return {}
        try:
            sandboxes = sorted(self._runtime.list_sandboxes(), key=lambda s: s.created_at_ns)
        except EvictdError as exc:
            self.sandbox_problem = f"the container runtime could not list the pod sandboxes: {exc}"
            return {}
        return {s.uid: s for s in sandboxes if s.state is SandboxState.READY and s.uid}

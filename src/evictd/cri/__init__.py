"""The Container Runtime Interface (CRI, ``runtime.v1``) as evictd uses it: values here, the client in ``client``.

Job: name what a CRI runtime (containerd, CRI-O) reports to the eviction manager beyond the inventory
that ``evictd.core.runtime`` already models (images, containers, sandboxes): the runtime's version, the
image/container filesystems (``ImageFsInfo``), per-container and per-pod usage (``ListContainerStats``,
``ListPodSandboxStats``).

Layout of the package:

* ``evictd.cri`` (this module): frozen values, the endpoint check and ``Runtime``, the runtime as adapters
  use it (``RuntimeSlot``, empty until one answers), standard library only. Shell modules and the
  ``LocalKiller`` adapter type against them without importing gRPC, so the offline commands
  (``check-config``, ``simulate``) never load ``grpc`` (tests/test_cli.py checks it).
* ``evictd.cri.client``: ``CriClient``, the only module that imports ``grpc`` and the generated stubs.
* ``evictd.cri.api_pb2`` / ``api_pb2_grpc``: generated from ``api.proto`` (see README.md there).

Invariants:

* A value the runtime did not report is ``None``, never 0: the CRI wraps optional numbers in
  ``UInt64Value`` messages, and "missing" must skip a signal rather than look like an empty disk.
* Times are nanoseconds since the epoch, as the CRI reports them; sizes are bytes, counts are ints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from evictd.core.engine import Eviction
from evictd.core.errors import ConfigError, EvictdError
from evictd.core.runtime import Sandbox

# The containerd default; CRI-O listens on unix:///var/run/crio/crio.sock and is reached the same way.
DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
UNIX_SCHEME = "unix://"


def channel_target(endpoint: str) -> str:
    """Return the gRPC target for a runtime endpoint; raise ``ConfigError`` for anything but a Unix socket.

    ``unix:///run/containerd/containerd.sock`` is taken as is; a bare absolute path gets the ``unix://``
    scheme, as the kubelet used to accept before it required the scheme.
    """
    if endpoint.startswith(UNIX_SCHEME) and len(endpoint) > len(UNIX_SCHEME):
        return endpoint
    if endpoint.startswith("/"):
        return UNIX_SCHEME + endpoint
    raise ConfigError("only unix:// endpoints are supported", key="containerRuntimeEndpoint", value=endpoint)

# The CRI version evictd speaks; runtimes answer Version with the one they serve.
CRI_API_VERSION = "v1"


@dataclass(frozen=True, slots=True)
class RuntimeVersion:
    """What ``Version`` answers: e.g. ``containerd``, ``1.6.20~ds1``, ``v1``."""

    runtime_name: str
    runtime_version: str
    runtime_api_version: str


@dataclass(frozen=True, slots=True)
class FilesystemUsage:
    """One filesystem the runtime stores images or writable layers on (CRI ``FilesystemUsage``).

    ``mountpoint`` is the folder the runtime names (containerd: its snapshotter's folder), which need not
    be a mount point itself: statvfs it for capacity. ``used_bytes``/``inodes_used`` count only what the
    runtime stores there; ``None`` if the runtime left them out. containerd measures them in the
    background every ``stats_collect_period`` seconds and reports 0 before its first measurement.
    """

    mountpoint: str
    used_bytes: int | None
    inodes_used: int | None
    timestamp_ns: int


@dataclass(frozen=True, slots=True)
class ImageFsInfo:
    """``ImageFsInfo``: the image filesystems and, when the runtime splits them, the container ones.

    An empty ``container_filesystems`` means writable layers live on the image filesystem (the kubelet's
    "imagefs only" or "single fs" layouts); a non-empty one is the split imagefs/containerfs layout.
    """

    image_filesystems: tuple[FilesystemUsage, ...]
    container_filesystems: tuple[FilesystemUsage, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """One running container's usage from ``ListContainerStats``.

    ``pod_sandbox_id`` comes from ``ListContainers`` (stats carry no sandbox ID) and is ``""`` when the
    container vanished between the two calls. ``pod_uid``/``pod_name``/``pod_namespace`` are the kubelet
    labels (``""`` for containers the kubelet did not create). ``timestamp_ns`` is the memory sample's
    time, or the writable layer's when memory was not reported.
    """

    container_id: str
    pod_sandbox_id: str
    name: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    writable_layer_bytes: int | None
    writable_layer_inodes: int | None
    working_set_bytes: int | None
    timestamp_ns: int


@dataclass(frozen=True, slots=True)
class SandboxUsage:
    """One pod's usage from ``ListPodSandboxStats`` (Linux stats: the pod cgroup as a whole)."""

    sandbox_id: str
    uid: str
    name: str
    namespace: str
    working_set_bytes: int | None
    process_count: int | None
    timestamp_ns: int


class Runtime(Protocol):
    """The container runtime as evictd's adapters ask it (they hold the daemon's `RuntimeSlot`). Calls that reach
    the runtime raise ``EvictdError`` (``CRIError``) when it fails to answer."""

    @property
    def attached(self) -> bool: ...  # True once a runtime answered

    @property
    def can_stop(self) -> bool: ...  # `stop_pod` can stop a pod: a runtime attached, or its cgroup's processes killed

    def list_sandboxes(self) -> Sequence[Sandbox]: ...  # every pod sandbox (none without a runtime)

    # The runtime's image and container filesystems' folders; None: use the configured ones.
    def filesystem_paths(self) -> tuple[str, str] | None: ...

    # Pod UID -> its containers' usage, or its sandbox's usage; None without a runtime (nothing to ask).
    def container_stats(self) -> Mapping[str, Sequence[ContainerUsage]] | None: ...

    def sandbox_stats(self) -> Mapping[str, SandboxUsage] | None: ...

    def container_names(self, pod_uid: str) -> dict[str, str]: ...  # container ID -> name (empty without one)

    def pod_running(self, pod_uid: str) -> bool | None: ...  # anything of the pod still runs; None: cannot tell

    def stop_pod(self, eviction: Eviction) -> str | None: ...  # stop the evicted pod (only when `can_stop`): how

    def collect_garbage(self) -> None: ...  # the periodic container and image GC when due (none without one)


def stop_through_cgroup(kill_processes: Callable[[str], int], eviction: Eviction, why: str) -> str | None:
    """Kill the evicted pod's processes through its cgroup because of `why` (`kill_processes`: pod uid -> processes
    found); return how it was stopped, or None when its cgroup held no process (the caller says why that fails)."""
    found = kill_processes(eviction.pod.uid)
    return f"by killing its {found} processes through its cgroup ({why})" if found else None


class RuntimeSlot:
    """Where the adapters find the container runtime: empty (nothing to list, measure or collect) until
    `evictd.run.runtime_link.RuntimeLink` puts the runtime that answered in `current`; it then answers as that one.

    `kill_processes` (pod uid -> processes found; None: none, as in dry-run) is the runtime's own last resort
    (`evictd.run.runtime_link.CriRuntime.stop_pod`) for a node whose runtime never answered: a pod evicted at once
    while the API does not take the deletion is then stopped by killing its processes through its cgroup, not
    left running while another pod pays for the same pressure (the arena's stand-in node, which has no runtime:
    an eviction the starved API server timed out was never carried out, and 30 s on the next pod of the ranking,
    the Guaranteed one, was evicted for the stall the first one caused)."""

    def __init__(self, kill_processes: Callable[[str], int] | None = None) -> None:
        self.current: Runtime | None = None
        self._kill_processes = kill_processes

    @property
    def attached(self) -> bool:
        return self.current is not None

    @property
    def can_stop(self) -> bool:
        return self.current.can_stop if self.current is not None else self._kill_processes is not None

    def list_sandboxes(self) -> Sequence[Sandbox]:
        return self.current.list_sandboxes() if self.current else ()

    def filesystem_paths(self) -> tuple[str, str] | None:
        return self.current.filesystem_paths() if self.current else None

    def container_stats(self) -> Mapping[str, Sequence[ContainerUsage]] | None:
        return self.current.container_stats() if self.current else None

    def sandbox_stats(self) -> Mapping[str, SandboxUsage] | None:
        return self.current.sandbox_stats() if self.current else None

    def container_names(self, pod_uid: str) -> dict[str, str]:
        return self.current.container_names(pod_uid) if self.current else {}

    def pod_running(self, pod_uid: str) -> bool | None:
        return self.current.pod_running(pod_uid) if self.current else None

    def stop_pod(self, eviction: Eviction) -> str | None:
        if self.current is not None:
            return self.current.stop_pod(eviction)
        if self._kill_processes is None:
            raise EvictdError("no container runtime answers")
        how = stop_through_cgroup(self._kill_processes, eviction, "no container runtime answers")
        if how is None:
            raise EvictdError("no container runtime answers, and the pod's cgroup holds no process")
        return how

    def collect_garbage(self) -> None:
        if self.current is not None:
            self.current.collect_garbage()


# A slot never filled: the runtime of adapters built without one.
NO_RUNTIME: Runtime = RuntimeSlot()

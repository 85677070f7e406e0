"""The Container Runtime Interface (CRI, ``runtime.v1``) as evictd uses it: values here, the client in ``client``.

Names what a CRI runtime reports beyond ``evictd.core.runtime``'s inventory: its version, the image and container
filesystems (``ImageFsInfo``), per-container and per-pod usage. This module (standard library only) holds the frozen
values, the endpoint check and ``Runtime`` as adapters use it (``RuntimeSlot``, empty until one answers), so the
offline commands never load ``grpc`` (tests/test_cli.py checks it); ``client`` is the only module importing ``grpc``
and the stubs generated from ``api.proto`` (``api_pb2*``, see README.md).

Invariants: a value the runtime did not report is ``None``, never 0 (a missing figure skips a signal); times are
nanoseconds since the epoch, sizes bytes.
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
    """Return the gRPC target for a runtime endpoint (a bare absolute path gets ``unix://``, as the kubelet used to
    accept); ``ConfigError`` for anything but a Unix socket."""
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
    """One filesystem the runtime stores images or writable layers on (CRI ``FilesystemUsage``): ``mountpoint`` is
    its folder (statvfs it for capacity); ``used_bytes``/``inodes_used`` count only the runtime's data (None: not
    reported; containerd reports 0 before its first background measurement)."""

    mountpoint: str
    used_bytes: int | None
    inodes_used: int | None
    timestamp_ns: int


@dataclass(frozen=True, slots=True)
class ImageFsInfo:
    """``ImageFsInfo``: the image filesystems and, when split, the container ones (empty: writable layers on the
    image filesystem)."""

    image_filesystems: tuple[FilesystemUsage, ...]
    container_filesystems: tuple[FilesystemUsage, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """One running container's usage from ``ListContainerStats``: ``pod_sandbox_id`` from ``ListContainers`` (""
    when it vanished between the calls); the kubelet's pod labels ("" when the kubelet did not create it);
    ``timestamp_ns`` the memory sample's time, else the writable layer's."""

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
    """Where the adapters find the container runtime: empty until `RuntimeLink` puts the one that answered in
    `current`. `kill_processes` (pod uid -> processes found; None in dry-run) is the last resort where no runtime
    ever answered: a pod evicted at once whose deletion the API does not take is stopped through its cgroup, not left
    running while the next pod pays for its pressure."""

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

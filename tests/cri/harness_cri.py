"""The CRI calls only the test harness makes: running sandboxes and containers, reading one's status, pulling.

evictd itself never creates anything, never asks for one container's or sandbox's status and never pulls, so these
calls live here, on `HarnessCriClient`, a `CriClient` with them added (same channel, deadline and error mapping).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from evictd.core.runtime import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    ContainerState,
    Sandbox,
)
from evictd.cri import api_pb2 as pb
from evictd.cri.client import CriClient, _container_state, _sandbox, map_rpc_error

# A pull fetches and unpacks every layer: the evictd image's (94 MB) took 12-39 s on a 2-core host at load 9 to 11.
PULL_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class PodSandboxSpec:
    """A pod sandbox to run, as the kubelet would describe it.

    ``host_network`` pods need no CNI; their ``hostname`` must then be empty (the runtime uses the
    node's). ``cgroup_parent`` uses the cgroupfs driver's syntax, e.g.
    ``/kubepods/besteffort/pod<uid>``. The kubelet's pod labels are added from name/namespace/uid.
    """

    name: str
    namespace: str
    uid: str
    cgroup_parent: str = ""
    log_directory: str = ""
    host_network: bool = True
    attempt: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def kubelet_labels(self) -> dict[str, str]:
        """Return the labels the kubelet puts on a sandbox, then this spec's own labels."""
        return {
            POD_NAME_LABEL: self.name,
            POD_NAMESPACE_LABEL: self.namespace,
            POD_UID_LABEL: self.uid,
            **self.labels,
        }


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """A container to create in a sandbox.

    ``mounts`` are ``(container_path, host_path, readonly)``; ``memory_limit_bytes`` 0 means no limit.
    ``image`` is a reference the runtime already holds (the harness imports images, it never pulls).
    """

    name: str
    image: str
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[tuple[str, str, bool]] = ()
    memory_limit_bytes: int = 0
    log_path: str = ""
    attempt: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ContainerStatus:
    """One container's status from ``ContainerStatus``.

    ``reason`` is the runtime's CamelCase word (``OOMKilled``, ``Completed``, ``Error``); ``exit_code``,
    ``started_at_ns`` and ``finished_at_ns`` are 0 while they do not apply, as the CRI defines them.
    """

    id: str
    name: str
    state: ContainerState
    created_at_ns: int
    started_at_ns: int
    finished_at_ns: int
    exit_code: int
    reason: str
    message: str
    image_ref: str
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


def _namespace_options(host_network: bool) -> pb.NamespaceOption:
    # What the kubelet sends for a v1 pod: network NODE or POD, PID per container, IPC per pod.
    return pb.NamespaceOption(network=pb.NODE if host_network else pb.POD, pid=pb.CONTAINER, ipc=pb.POD)


def _sandbox_config(spec: PodSandboxSpec) -> pb.PodSandboxConfig:
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=spec.name, uid=spec.uid, namespace=spec.namespace, attempt=spec.attempt),
        hostname="",
        log_directory=spec.log_directory,
        labels=spec.kubelet_labels(),
        annotations=dict(spec.annotations),
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=spec.cgroup_parent,
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=_namespace_options(spec.host_network)),
        ),
    )


def _container_config(spec: ContainerSpec, sandbox: PodSandboxSpec) -> pb.ContainerConfig:
    labels = {**sandbox.kubelet_labels(), CONTAINER_NAME_LABEL: spec.name, **spec.labels}
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=spec.name, attempt=spec.attempt),
        image=pb.ImageSpec(image=spec.image),
        command=list(spec.command),
        args=list(spec.args),
        envs=[pb.KeyValue(key=key, value=value) for key, value in spec.envs.items()],
        mounts=[
            pb.Mount(container_path=inside, host_path=outside, readonly=readonly)
            for inside, outside, readonly in spec.mounts
        ],
        labels=labels,
        annotations=dict(spec.annotations),
        log_path=spec.log_path,
        linux=pb.LinuxContainerConfig(
            resources=pb.LinuxContainerResources(memory_limit_in_bytes=spec.memory_limit_bytes),
            security_context=pb.LinuxContainerSecurityContext(
                namespace_options=_namespace_options(sandbox.host_network)
            ),
        ),
    )


class HarnessCriClient(CriClient):
    """A `CriClient` that can also start pods and read one container's or sandbox's status."""

    def run_pod_sandbox(self, spec: PodSandboxSpec, runtime_handler: str = "") -> str:
        """Run a pod sandbox and return its ID. Raises ``CRIError``."""
        reply: pb.RunPodSandboxResponse = self._call(
            self._runtime,
            "RunPodSandbox",
            pb.RunPodSandboxRequest(config=_sandbox_config(spec), runtime_handler=runtime_handler),
        )
        return reply.pod_sandbox_id

    def create_container(self, sandbox_id: str, spec: ContainerSpec, sandbox: PodSandboxSpec) -> str:
        """Create a container in a sandbox and return its ID. Raises ``CRIError``."""
        reply: pb.CreateContainerResponse = self._call(
            self._runtime,
            "CreateContainer",
            pb.CreateContainerRequest(
                pod_sandbox_id=sandbox_id,
                config=_container_config(spec, sandbox),
                sandbox_config=_sandbox_config(sandbox),
            ),
        )
        return reply.container_id

    def pull_image(self, reference: str, timeout_s: float = PULL_TIMEOUT_S) -> str:
        """Pull an image as the kubelet asks the runtime to (``ImageService/PullImage``, no credentials); return the
        image reference the runtime answers (containerd: the image ID, its config's digest). Raises ``CRIError``.

        evictd's api.proto has no PullImage messages (evictd never pulls), so the request is sent as the bytes of a
        ``RemoveImageRequest``, whose one field is PullImageRequest's first (``ImageSpec image = 1``; the auth and
        the sandbox config, fields 2 and 3, stay unset), and the reply (``string image_ref = 1``) is read as an
        ``ImageSpec``, whose field 1 is a string too: the same bytes on the wire as upstream's messages.
        """
        pull = self._channel.unary_unary(
            "/runtime.v1.ImageService/PullImage",
            request_serializer=lambda ref: pb.RemoveImageRequest(image=pb.ImageSpec(image=ref)).SerializeToString(),
            response_deserializer=lambda data: pb.ImageSpec.FromString(data).image,
        )
        try:
            return str(pull(reference, timeout=timeout_s))
        except grpc.RpcError as exc:
            raise map_rpc_error("PullImage", exc) from exc

    def start_container(self, container_id: str) -> None:
        """Start a created container. Raises ``CRIError``."""
        self._call(self._runtime, "StartContainer", pb.StartContainerRequest(container_id=container_id))

    def container_status(self, container_id: str) -> ContainerStatus:
        """Return one container's status; ``CRIError`` (``NOT_FOUND`` on containerd) if it does not exist."""
        reply: pb.ContainerStatusResponse = self._call(
            self._runtime, "ContainerStatus", pb.ContainerStatusRequest(container_id=container_id)
        )
        status = reply.status
        return ContainerStatus(
            id=status.id,
            name=status.metadata.name,
            state=_container_state(status.state),
            created_at_ns=int(status.created_at),
            started_at_ns=int(status.started_at),
            finished_at_ns=int(status.finished_at),
            exit_code=int(status.exit_code),
            reason=status.reason,
            message=status.message,
            image_ref=status.image_id or status.image_ref,
            labels=dict(status.labels),
        )

    def sandbox_status(self, sandbox_id: str) -> Sandbox:
        """Return one sandbox's current status; ``CRIError`` if it does not exist."""
        reply: pb.PodSandboxStatusResponse = self._call(
            self._runtime, "PodSandboxStatus", pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id)
        )
        status = reply.status
        return _sandbox(status.id, status.metadata, status.state, status.created_at, status.labels,
                        status.annotations)

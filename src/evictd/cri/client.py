"""``CriClient``: a synchronous gRPC client for a CRI runtime (containerd, CRI-O) over its Unix socket.

The ``runtime.v1`` calls evictd needs (stats, GC inventory and deletions, the local pod kill), every reply translated
into evictd values; evictd creates nothing (the test harness extends this client for that). Invariants: only here
and in the stubs is ``grpc`` imported; every call has a deadline (``StopContainer``: plus the grace period, as the
kubelet's remote runtime); every failure leaves through ``map_rpc_error`` as ``CRIError(method, code, detail)``;
unset readings are ``None``, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc

from evictd.core.errors import CRIError
from evictd.core.pod_parser import kept_annotations
from evictd.core.runtime import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    Container,
    ContainerState,
    Image,
    Sandbox,
    SandboxState,
)
from evictd.cri import (
    CRI_API_VERSION,
    ContainerUsage,
    FilesystemUsage,
    ImageFsInfo,
    RuntimeVersion,
    SandboxUsage,
    api_pb2_grpc,
    channel_target,
)
from evictd.cri import api_pb2 as pb

# The kubelet's CRI client accepts replies up to 16 MiB (maxMsgSize): thousands of containers list several MiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

def map_rpc_error(method: str, exc: grpc.RpcError) -> CRIError:
    """Return the ``CRIError`` for a failed RPC (a runtime's status or a channel failure alike): the one place
    where gRPC failures become evictd errors."""
    return CRIError(method, exc.code().name, exc.details() or str(exc))


def _wrapped(message: Any, field: str, reported: bool = True) -> int | None:
    """The UInt64Value `field` of `message`; None when it (or the message, `reported`) is unset, never 0."""
    return int(getattr(message, field).value) if reported and message.HasField(field) else None


def _filesystem_usage(usage: pb.FilesystemUsage) -> FilesystemUsage:
    return FilesystemUsage(
        mountpoint=usage.fs_id.mountpoint,
        used_bytes=_wrapped(usage, "used_bytes"),
        inodes_used=_wrapped(usage, "inodes_used"),
        timestamp_ns=int(usage.timestamp),
    )


def _container_state(value: int) -> ContainerState:
    # Values a newer runtime might add are not states evictd can act on: treat them as unknown.
    try:
        return ContainerState(pb.ContainerState.Name(value))
    except ValueError:
        return ContainerState.UNKNOWN


def _image(image: pb.Image) -> Image:
    return Image(
        id=image.id,
        size_bytes=int(image.size),
        repo_tags=tuple(image.repo_tags),
        repo_digests=tuple(image.repo_digests),
        pinned=image.pinned,
    )


def _container(container: pb.Container) -> Container:
    return Container(
        id=container.id,
        name=container.metadata.name,
        pod_sandbox_id=container.pod_sandbox_id,
        state=_container_state(container.state),
        created_at_ns=int(container.created_at),
        attempt=int(container.metadata.attempt),
        # image_id (CRI 1.30+) is the unique image ID; older runtimes (containerd 1.6) put it in image_ref.
        image_ref=container.image_id or container.image_ref,
        image=container.image.image,
        labels=dict(container.labels),
    )


def _sandbox(sandbox_id: str, metadata: pb.PodSandboxMetadata, state: int, created_at: int, labels: Mapping[str, str],
             annotations: Mapping[str, str]) -> Sandbox:
    return Sandbox(
        id=sandbox_id,
        name=metadata.name,
        namespace=metadata.namespace,
        uid=metadata.uid,
        state=SandboxState.READY if state == pb.SANDBOX_READY else SandboxState.NOTREADY,  # anything else is not
        created_at_ns=int(created_at),
        attempt=int(metadata.attempt),
        labels=dict(labels),
        # Only what decisions read (a tenant's pod may carry 256 KiB of annotations, copied here by the kubelet).
        annotations=dict(kept_annotations(annotations)),
    )


def _container_usage(stats: pb.ContainerStats, sandbox_of: Mapping[str, str]) -> ContainerUsage:
    attributes = stats.attributes
    labels = attributes.labels
    memory_reported = stats.HasField("memory")
    layer_reported = stats.HasField("writable_layer")
    timestamp = stats.memory.timestamp if memory_reported else stats.writable_layer.timestamp
    return ContainerUsage(
        container_id=attributes.id,
        pod_sandbox_id=sandbox_of.get(attributes.id, ""),
        name=attributes.metadata.name or labels.get(CONTAINER_NAME_LABEL, ""),
        pod_uid=labels.get(POD_UID_LABEL, ""),
        pod_name=labels.get(POD_NAME_LABEL, ""),
        pod_namespace=labels.get(POD_NAMESPACE_LABEL, ""),
        writable_layer_bytes=_wrapped(stats.writable_layer, "used_bytes", layer_reported),
        writable_layer_inodes=_wrapped(stats.writable_layer, "inodes_used", layer_reported),
        working_set_bytes=_wrapped(stats.memory, "working_set_bytes", memory_reported),
        timestamp_ns=int(timestamp),
    )


def _sandbox_usage(stats: pb.PodSandboxStats) -> SandboxUsage:
    metadata = stats.attributes.metadata
    linux = stats.linux
    memory_reported = stats.HasField("linux") and linux.HasField("memory")
    process_reported = stats.HasField("linux") and linux.HasField("process")
    timestamp = linux.memory.timestamp if memory_reported else linux.process.timestamp
    return SandboxUsage(
        sandbox_id=stats.attributes.id,
        uid=metadata.uid,
        name=metadata.name,
        namespace=metadata.namespace,
        working_set_bytes=_wrapped(linux.memory, "working_set_bytes", memory_reported),
        process_count=_wrapped(linux.process, "process_count", process_reported),
        timestamp_ns=int(timestamp),
    )


class CriClient:
    """A CRI runtime reached over ``endpoint``; ``timeout_s`` is each call's deadline. The channel connects lazily
    (while the runtime is down the first call fails UNAVAILABLE); thread-safe; ``close()`` releases it."""

    def __init__(self, endpoint: str, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._channel: Any = grpc.insecure_channel(
            channel_target(endpoint),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        # The generated stubs are untyped; every call goes through _call, which types the replies.
        self._runtime: Any = api_pb2_grpc.RuntimeServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._images: Any = api_pb2_grpc.ImageServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Close the channel; later calls fail."""
        self._channel.close()

    def _call(self, stub: Any, method: str, request: Any, timeout_s: float | None = None) -> Any:
        try:
            return getattr(stub, method)(request, timeout=self.timeout_s if timeout_s is None else timeout_s)
        except grpc.RpcError as exc:
            raise map_rpc_error(method, exc) from exc

    def version(self, timeout_s: float | None = None) -> RuntimeVersion:
        """Return the runtime's name, version and CRI API version (within ``timeout_s`` if given, else the
        client's deadline). Raises ``CRIError``."""
        reply: pb.VersionResponse = self._call(
            self._runtime, "Version", pb.VersionRequest(version=CRI_API_VERSION), timeout_s
        )
        return RuntimeVersion(reply.runtime_name, reply.runtime_version, reply.runtime_api_version)

    def image_fs_info(self, timeout_s: float | None = None) -> ImageFsInfo:
        """Return the image (and container) filesystems with the runtime's usage of them. Raises ``CRIError``."""
        reply: pb.ImageFsInfoResponse = self._call(self._images, "ImageFsInfo", pb.ImageFsInfoRequest(), timeout_s)
        return ImageFsInfo(
            image_filesystems=tuple(_filesystem_usage(fs) for fs in reply.image_filesystems),
            container_filesystems=tuple(_filesystem_usage(fs) for fs in reply.container_filesystems),
        )

    def list_images(self) -> list[Image]:
        reply: pb.ListImagesResponse = self._call(self._images, "ListImages", pb.ListImagesRequest())
        return [_image(image) for image in reply.images]

    def remove_image(self, image_id: str) -> None:
        """Remove an image by ID (or any of its references). Idempotent per the CRI. Raises ``CRIError``."""
        self._call(self._images, "RemoveImage", pb.RemoveImageRequest(image=pb.ImageSpec(image=image_id)))

    def list_containers(self, *, pod_uid: str | None = None, timeout_s: float | None = None) -> list[Container]:
        """Return every container (in any state), or only those labelled with ``pod_uid``. Raises ``CRIError``."""
        reply: pb.ListContainersResponse = self._call(self._runtime, "ListContainers", pb.ListContainersRequest(
            filter=None if pod_uid is None else {"label_selector": {POD_UID_LABEL: pod_uid}}), timeout_s)
        return [_container(container) for container in reply.containers]

    def stop_container(self, container_id: str, timeout_s: int, *, answer_within_s: float | None = None) -> None:
        """Stop a container: the stop signal, then SIGKILL after ``timeout_s`` seconds; the deadline is
        ``answer_within_s`` (None: the client's) plus ``timeout_s``. Idempotent. Raises ``CRIError``."""
        grace_s = max(0, int(timeout_s))
        self._call(
            self._runtime,
            "StopContainer",
            pb.StopContainerRequest(container_id=container_id, timeout=grace_s),
            timeout_s=(self.timeout_s if answer_within_s is None else answer_within_s) + grace_s,
        )

    def remove_container(self, container_id: str) -> None:
        """Remove a container (a running one is killed first). Idempotent per the CRI. Raises ``CRIError``."""
        self._call(self._runtime, "RemoveContainer", pb.RemoveContainerRequest(container_id=container_id))

    def list_sandboxes(self, *, pod_uid: str | None = None, timeout_s: float | None = None) -> list[Sandbox]:
        """Return every pod sandbox (ready or not), or only those of ``pod_uid``. Raises ``CRIError``."""
        reply: pb.ListPodSandboxResponse = self._call(self._runtime, "ListPodSandbox", pb.ListPodSandboxRequest(
            filter=None if pod_uid is None else {"label_selector": {POD_UID_LABEL: pod_uid}}), timeout_s)
        return [_sandbox(item.id, item.metadata, item.state, item.created_at, item.labels, item.annotations)
                for item in reply.items]

    def stop_sandbox(self, sandbox_id: str, *, timeout_s: float | None = None) -> None:
        """Stop a sandbox, forcibly killing any container still running in it (within ``timeout_s`` if given, else
        the client's deadline). Idempotent. Raises ``CRIError``."""
        self._call(self._runtime, "StopPodSandbox", pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout_s)

    def remove_sandbox(self, sandbox_id: str) -> None:
        """Remove a sandbox and its containers. Idempotent per the CRI. Raises ``CRIError``."""
        self._call(self._runtime, "RemovePodSandbox", pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id))

    def list_container_stats(self, timeout_s: float | None = None) -> list[ContainerUsage]:
        """Return the usage of every running container with its sandbox ID (``ListContainerStats`` and
        ``ListContainers``, each within ``timeout_s`` or the client's deadline). Raises ``CRIError``."""
        reply: pb.ListContainerStatsResponse = self._call(
            self._runtime, "ListContainerStats", pb.ListContainerStatsRequest(), timeout_s
        )
        listing: pb.ListContainersResponse = self._call(self._runtime, "ListContainers", pb.ListContainersRequest(),
                                                        timeout_s)
        sandbox_of = {container.id: container.pod_sandbox_id for container in listing.containers}
        return [_container_usage(stats, sandbox_of) for stats in reply.stats]

    def list_pod_sandbox_stats(self, timeout_s: float | None = None) -> list[SandboxUsage]:
        reply: pb.ListPodSandboxStatsResponse = self._call(
            self._runtime, "ListPodSandboxStats", pb.ListPodSandboxStatsRequest(), timeout_s
        )
        return [_sandbox_usage(stats) for stats in reply.stats]

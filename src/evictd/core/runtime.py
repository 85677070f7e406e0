"""What the container runtime holds, as the eviction manager's garbage collectors see it.

Values translated from the CRI (`runtime.v1` ListImages / ListContainers / ListPodSandbox) by the CRI
adapter, so that the garbage-collection policies (`evictd.core.gc`) stay pure. Times are nanoseconds since
the epoch, as the CRI reports them. Pods are identified by the labels kubelets put on sandboxes and
containers (`io.kubernetes.pod.uid`, `.namespace`, `.name`, `io.kubernetes.container.name`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_NAME_LABEL = "io.kubernetes.pod.name"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"


class ContainerState(StrEnum):
    """CRI ContainerState, by the names of its enum values."""

    CREATED = "CONTAINER_CREATED"
    RUNNING = "CONTAINER_RUNNING"
    EXITED = "CONTAINER_EXITED"
    UNKNOWN = "CONTAINER_UNKNOWN"


class SandboxState(StrEnum):
    """CRI PodSandboxState, by the names of its enum values."""

    READY = "SANDBOX_READY"
    NOTREADY = "SANDBOX_NOTREADY"


@dataclass(frozen=True, slots=True)
class Image:
    """An image the runtime stores. `id` is the image ID (content digest) the CRI reports."""

    id: str
    size_bytes: int
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()
    pinned: bool = False

    @property
    def references(self) -> tuple[str, ...]:
        return (self.id, *self.repo_tags, *self.repo_digests)


@dataclass(frozen=True, slots=True)
class Container:
    """A container as ListContainers reports it."""

    id: str
    name: str
    pod_sandbox_id: str
    state: ContainerState
    created_at_ns: int
    attempt: int = 0
    image_ref: str = ""  # the image ID the container runs (ContainerStatus.image_ref / Container.image_ref)
    image: str = ""  # the image as the pod spec named it
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def pod_uid(self) -> str:
        return self.labels.get(POD_UID_LABEL, "")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A pod sandbox as ListPodSandbox reports it."""

    id: str
    name: str
    namespace: str
    uid: str
    state: SandboxState
    created_at_ns: int
    attempt: int = 0
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # The pod's annotations, the kubelet's `kubernetes.io/config.source` included: what tells a static pod on the node.
    annotations: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

"""Garbage collection through the container runtime: the kubelet's container and image GC over a CRI client.

Carries out what `evictd.core.container_gc` and `evictd.core.image_gc` decide, for node-level reclaim under disk
pressure (`reclaim`: DeleteAllUnusedContainers, DeleteUnusedImages; `RuntimeReclaimer` is the manager's
`NodeReclaimer`) and periodic GC (`periodic`: ContainerGCPeriod, ImageGCPeriod).

Invariants: every removal is attempted; failures are raised once at the end as one `GCError` with what the pass
achieved; a failed listing stops only its step, as in the kubelet. Freed bytes: deleted images' sizes; removed
containers' writable layers as ListContainerStats reported them (a lower bound); sandboxes and logs uncounted. Time
comes from the injected Clock (monotonic for image records, wall-clock ns for container ages, as the CRI's). Image
records persist between calls like imageRecords: call `detect()` at start and every image GC period.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol, assert_never

from evictd.adapters.filesystems import statvfs_reading
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.container_gc import (
    UNKNOWN_CONTAINER_STOP_TIMEOUT_S,
    ContainerRemoval,
    GCPolicy,
    PodStateFunc,
    containers_to_remove,
    pod_log_dirs_to_remove,
    sandboxes_to_remove,
)
from evictd.core.errors import CRIError, SampleError
from evictd.core.fs_layout import ReclaimAction
from evictd.core.image_gc import (
    MAX_INT64,
    GCReason,
    ImageGCPolicy,
    ImageGCState,
    ImageToFree,
    detect_images,
    images_in_use,
    images_past_max_age,
    images_to_free,
    periodic_bytes_to_free,
    without_images,
)
from evictd.core.runtime import Container, Image, Sandbox
from evictd.cri import ContainerUsage, ImageFsInfo

# Method names used in GCError for failures that are not CRI calls.
REMOVE_LOG_DIR = "RemovePodLogsDirectory"
READ_LOG_DIR = "ReadPodLogsDirectory"


class RuntimeGCClient(Protocol):
    """The CRI calls garbage collection makes (`evictd.cri.client.CriClient` has them all)."""

    def list_images(self) -> Sequence[Image]: ...

    def remove_image(self, image_id: str) -> None: ...

    def list_containers(self) -> Sequence[Container]: ...

    def stop_container(self, container_id: str, timeout_s: int) -> None: ...

    def remove_container(self, container_id: str) -> None: ...

    def list_sandboxes(self) -> Sequence[Sandbox]: ...

    def stop_sandbox(self, sandbox_id: str) -> None: ...

    def remove_sandbox(self, sandbox_id: str) -> None: ...

    def list_container_stats(self) -> Sequence[ContainerUsage]: ...


class ImageFsClient(Protocol):
    """The CRI call that names the image filesystem."""

    def image_fs_info(self) -> ImageFsInfo: ...


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _wall_ns(clock: Clock) -> int:
    """The clock's wall time in nanoseconds since the epoch (the CRI's `created_at` unit)."""
    return (clock.wall() - _EPOCH) // timedelta(microseconds=1) * 1000


class GCError(CRIError):
    """Some removals of one GC pass failed (all were tried): `failures` each, `freed_bytes` the rest; `method` and
    `code` are the first failure's."""

    def __init__(self, what: str, failures: Sequence[CRIError], freed_bytes: int) -> None:
        self.failures = tuple(failures)
        self.freed_bytes = freed_bytes
        listed = "; ".join(str(failure) for failure in self.failures)
        detail = f"{what}: {len(self.failures)} removal(s) failed, {freed_bytes} bytes freed: [{listed}]"
        super().__init__(self.failures[0].method, self.failures[0].code, detail)


def _os_failure(method: str, path: str, exc: OSError) -> CRIError:
    code = errno.errorcode.get(exc.errno or 0, "UNKNOWN")
    return CRIError(method, code, f"{path}: {exc.strerror or exc}")


# --- container GC --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerGCResult:
    """What one container GC pass removed, and the writable-layer bytes it freed as far as they are known."""

    containers: tuple[str, ...] = ()
    sandboxes: tuple[str, ...] = ()
    log_dirs: tuple[str, ...] = ()
    freed_bytes: int = 0


class CriContainerGC:
    """The kubelet's container GC (kuberuntime_gc.go GarbageCollect) over a CRI client. `pod_state` per pod UID
    (unvouched pods ACTIVE), `sources_ready` the kubelet's allSourcesReady, `log_dirs_root` /var/log/pods (None:
    leave log folders alone)."""

    def __init__(self, client: RuntimeGCClient, policy: GCPolicy, pod_state: PodStateFunc, log_dirs_root: str | None, *,
                 sources_ready: Callable[[], bool] = lambda: True, clock: Clock = SYSTEM_CLOCK) -> None:
        self.client = client
        self.policy = policy
        self.pod_state = pod_state
        self.log_dirs_root = log_dirs_root
        self._sources_ready = sources_ready
        self._clock = clock

    def reclaim(self) -> int:
        """DeleteAllUnusedContainers: GC with terminated pods' containers too; return writable bytes freed.
        Raises GCError when a removal failed (after trying all), CRIError when nothing could be listed."""
        return self.collect(evict_terminating_pods=True).freed_bytes

    def periodic(self) -> ContainerGCResult:
        """The kubelet's periodic container GC (evictNonDeletedPods false). Raises as `reclaim`."""
        return self.collect(evict_terminating_pods=False)

    def collect(self, *, evict_terminating_pods: bool) -> ContainerGCResult:
        """Run one GC pass: dead containers, then sandboxes (on a fresh listing), then log folders."""
        ready = self._sources_ready()
        failures: list[CRIError] = []
        removed, freed = self._evict_containers(ready, evict_terminating_pods, failures)
        sandboxes = self._evict_sandboxes(evict_terminating_pods, failures)
        log_dirs = self._evict_log_dirs(ready, failures)
        if failures:
            raise GCError("container garbage collection", failures, freed)
        return ContainerGCResult(removed, sandboxes, log_dirs, freed)

    def _evict_containers(
        self, ready: bool, evict_terminating_pods: bool, failures: list[CRIError]
    ) -> tuple[tuple[str, ...], int]:
        try:
            containers = self.client.list_containers()
        except CRIError as exc:
            failures.append(exc)
            return (), 0
        plan = containers_to_remove(containers, self.policy, self.pod_state, all_sources_ready=ready,
                                    evict_terminating_pods=evict_terminating_pods, now_ns=_wall_ns(self._clock))
        layers = self._writable_layers() if plan else {}
        removed: list[str] = []
        freed = 0
        for removal in plan:
            if self._remove_container(removal, failures):
                removed.append(removal.container_id)
                freed += layers.get(removal.container_id, 0)
        return tuple(removed), freed

    def _writable_layers(self) -> Mapping[str, int]:
        try:
            stats = self.client.list_container_stats()
        except CRIError:
            return {}  # unknown sizes count 0: the freed figure is a lower bound, never a failure
        return {s.container_id: s.writable_layer_bytes for s in stats if s.writable_layer_bytes is not None}

    def _remove_container(self, removal: ContainerRemoval, failures: list[CRIError]) -> bool:
        try:
            if removal.kill_first:
                # A container in unknown state could be running: stop it first; if that fails, keep it.
                self.client.stop_container(removal.container_id, UNKNOWN_CONTAINER_STOP_TIMEOUT_S)
            self.client.remove_container(removal.container_id)
        except CRIError as exc:
            failures.append(exc)
            return False
        return True

    def _evict_sandboxes(self, evict_terminating_pods: bool, failures: list[CRIError]) -> tuple[str, ...]:
        try:
            containers = self.client.list_containers()
            sandboxes = self.client.list_sandboxes()
        except CRIError as exc:
            failures.append(exc)
            return ()
        removed: list[str] = []
        plan = sandboxes_to_remove(sandboxes, containers, self.pod_state, evict_terminating_pods=evict_terminating_pods)
        for sandbox_id in plan:
            try:
                # Normally stopped long ago; stopping first guards the rare case it was not (as the kubelet).
                self.client.stop_sandbox(sandbox_id)
                self.client.remove_sandbox(sandbox_id)
            except CRIError as exc:
                failures.append(exc)
                continue
            removed.append(sandbox_id)
        return tuple(removed)

    def _evict_log_dirs(self, ready: bool, failures: list[CRIError]) -> tuple[str, ...]:
        if self.log_dirs_root is None or not ready:
            return ()
        root = self.log_dirs_root
        try:
            names = sorted(os.listdir(root))  # Go's ReadDir order
        except FileNotFoundError:
            return ()  # no folder, no logs to remove (the kubelet reports an error here every minute)
        except OSError as exc:
            failures.append(_os_failure(READ_LOG_DIR, root, exc))
            return ()
        removed: list[str] = []
        for name in pod_log_dirs_to_remove(names, self.pod_state, all_sources_ready=ready):
            path = os.path.join(root, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError as exc:
                failures.append(_os_failure(REMOVE_LOG_DIR, path, exc))
                continue
            removed.append(name)
        return tuple(removed)


# --- image GC ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImageGCResult:
    """What one image GC pass deleted and freed: `wanted_bytes` periodic GC's aim (None: below the high threshold,
    or eviction-time), `shortfall` the kubelet's FreeDiskSpaceFailed message when it freed less."""

    removed: tuple[ImageToFree, ...] = ()
    freed_bytes: int = 0
    wanted_bytes: int | None = None
    shortfall: str | None = None


class CriImageGC:
    """The kubelet's image GC manager (image_gc_manager.go) over a CRI client. `fs_usage` gives the image
    filesystem's (capacity, available) bytes; `on_image_removed` is called per deleted image with its reason."""

    def __init__(self, client: RuntimeGCClient, policy: ImageGCPolicy, *,
                 fs_usage: Callable[[], tuple[int, int]] | None = None,
                 on_image_removed: Callable[[GCReason], None] = lambda reason: None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.client = client
        self.policy = policy
        self.state = ImageGCState()
        self._fs_usage = fs_usage
        self._on_image_removed = on_image_removed
        self._clock = clock
        # beganGC: age-based deletion waits until GC has run for longer than the maximum age.
        self.began_gc_s = self._clock.monotonic()

    def detect(self) -> tuple[Sequence[Image], frozenset[str], float]:
        """Update the records from the runtime; return the images, the IDs in use and the detection time.
        Raises CRIError when images or containers cannot be listed (the records are then unchanged)."""
        now_s = self._clock.monotonic()
        images = self.client.list_images()
        containers = self.client.list_containers()
        self.state = detect_images(self.state, images, containers, now_s)
        return images, images_in_use(images, containers), now_s

    def reclaim(self) -> int:
        """DeleteUnusedImages for the eviction manager: delete every eligible unused image (in use, pinned,
        protected and young kept); return the bytes deleted (raises as `periodic`)."""
        images, in_use, now_s = self.detect()
        _, freed, failures = self._free(self._unused(images, in_use, now_s), MAX_INT64)
        if failures:
            raise GCError("image garbage collection", failures, freed)
        return freed

    def periodic(self) -> ImageGCResult:
        """The kubelet's periodic GarbageCollect: images past the maximum age, then down to the low threshold.
        CRIError when listing fails, GCError when a deletion failed (age errors end the pass), SampleError for the
        filesystem."""
        images, in_use, now_s = self.detect()
        if self.policy.periodic_disabled:
            return ImageGCResult()
        old = images_past_max_age(self.state, images, in_use, now_s, self.policy.max_age_s, began_gc_s=self.began_gc_s,
                                  protected=self.policy.protected)
        aged, aged_freed, failures = self._free(old, MAX_INT64)
        if failures:
            raise GCError("image garbage collection by age", failures, aged_freed)
        if self._fs_usage is None:
            raise SampleError("imagefs", "no image filesystem usage source configured")
        capacity, available = self._fs_usage()
        wanted = periodic_bytes_to_free(
            capacity, available, self.policy.high_threshold_percent, self.policy.low_threshold_percent
        )
        if wanted is None:
            return ImageGCResult(removed=aged, freed_bytes=aged_freed)
        spaced, freed, failures = self._free(self._unused(images, in_use, now_s), wanted)
        if failures:
            raise GCError("image garbage collection", failures, aged_freed + freed)
        shortfall = None
        if freed < wanted:
            shortfall = (
                f"Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, "
                f"but only found {freed} bytes eligible to free."
            )
        return ImageGCResult(aged + spaced, aged_freed + freed, wanted, shortfall)

    def _unused(self, images: Sequence[Image], in_use: frozenset[str], now_s: float) -> tuple[ImageToFree, ...]:
        """Every image freeSpace may delete, in the order it deletes them."""
        return images_to_free(self.state, images, in_use, now_s, self.policy.min_age_s, MAX_INT64,
                              self.policy.protected)

    def _free(
        self, candidates: Sequence[ImageToFree], bytes_to_free: int
    ) -> tuple[tuple[ImageToFree, ...], int, list[CRIError]]:
        """Delete candidates in order until `bytes_to_free` is reached (counting only successful deletions)."""
        removed: list[ImageToFree] = []
        failures: list[CRIError] = []
        freed = 0
        for image in candidates:
            try:
                self.client.remove_image(image.image_id)
            except CRIError as exc:
                failures.append(exc)
                continue
            self.state = without_images(self.state, (image.image_id,))
            self._on_image_removed(image.reason)
            removed.append(image)
            freed += image.size_bytes
            if freed >= bytes_to_free:
                break
        return tuple(removed), freed, failures


def imagefs_usage(client: ImageFsClient) -> Callable[[], tuple[int, int]]:
    """Return a reader of the image filesystem's (capacity, available) bytes: statvfs of what ImageFsInfo names;
    it raises CRIError when the runtime does not answer, SampleError otherwise."""

    def read() -> tuple[int, int]:
        info = client.image_fs_info()
        if not info.image_filesystems:
            raise SampleError("ImageFsInfo", "the runtime reported no image filesystem")
        reading = statvfs_reading(info.image_filesystems[0].mountpoint)
        return reading.capacity_bytes, reading.available_bytes

    return read


# --- the manager's NodeReclaimer -----------------------------------------------------------------------


class RuntimeReclaimer:
    """Node-level reclaim for the eviction manager: containerGC and imageGC through the runtime (IMAGE_GC frees 0
    while `include_in_eviction` is false)."""

    def __init__(self, containers: CriContainerGC, images: CriImageGC) -> None:
        self.containers = containers
        self.images = images

    def reclaim(self, action: ReclaimAction) -> int:
        """Run one reclaim function; return the bytes it freed. Raises CRIError (GCError) on failures."""
        if action is ReclaimAction.CONTAINER_GC:
            return self.containers.reclaim()
        if action is ReclaimAction.IMAGE_GC:
            if not self.images.policy.include_in_eviction:
                return 0
            return self.images.reclaim()
        if action is ReclaimAction.MEMORY_RECLAIM:  # not the runtime's: `evictd.cycle.reclaim_first` runs it
            return 0
        assert_never(action)

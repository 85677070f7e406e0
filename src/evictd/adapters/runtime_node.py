"""What the container runtime tells about the node: its filesystems, the layout, per-container usage.

- `RuntimeFilesystems`: the image and container filesystems the runtime names in `ImageFsInfo` (the
  snapshotter folders), re-asked at most every minute; the configured folders stand in until the runtime
  answers. Their statvfs give `imagefs.*` and `containerfs.*`.
- `RuntimeLayout`: the filesystem layout by device id, from those folders and the kubelet root.
- `container_stats_by_pod`: one `ListContainerStats` per cycle, grouped by pod UID: writable-layer bytes
  and inodes, working set, and the container names the kubelet gave (from the labels).
- `PeriodicGC`: the kubelet's periodic garbage collection, run after cycles when due (container GC every
  minute, image GC every five by default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evictd.adapters.filesystems import detect_layout
from evictd.adapters.node_stats import existing_ancestor
from evictd.adapters.runtime_gc import CriContainerGC, CriImageGC
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import EvictdError
from evictd.core.fs_layout import FsLayout
from evictd.cri import ContainerUsage
from evictd.cri.client import CriClient
from evictd.log import Log

# How often the runtime is asked where its filesystems are (they move only on a runtime reconfiguration).
FILESYSTEM_REFRESH_S = 60.0


# A runtime read on the loop's path waits at most this long, not runtimeRequestTimeout: a runtime hung in thrash
# would hold each cycle 10 s a call; the cycle uses the last answer instead.
CYCLE_READ_TIMEOUT_S = 2.0


class RuntimeFilesystems:
    """The runtime's image and container folders; the configured ones until ImageFsInfo answers."""

    def __init__(self, client: CriClient, image_fs_path: str, container_fs_path: str,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._client = client
        self._paths = (image_fs_path, container_fs_path)
        self._asked_at = float("-inf")
        self._clock = clock
        self.last_error: EvictdError | None = None

    def paths(self, *, ask: bool = True) -> tuple[str, str]:
        """Return (image filesystem folder, container filesystem folder): asked again a minute after an answer
        naming them, at the next call after a failure or none named; without `ask`, the folders last known."""
        now = self._clock.monotonic()
        if ask and now - self._asked_at >= FILESYSTEM_REFRESH_S:
            try:
                info = self._client.image_fs_info(timeout_s=CYCLE_READ_TIMEOUT_S)
            except EvictdError as exc:
                self.last_error = exc
            else:
                self.last_error = None
                if info.image_filesystems:
                    self._asked_at = now
                    image = info.image_filesystems[0].mountpoint
                    container = info.container_filesystems[0].mountpoint if info.container_filesystems else image
                    self._paths = (image, container)
        return self._paths


class RuntimeLayout:
    """A LayoutSource: dedicated imagefs and split containerfs, by the device ids of the runtime's folders."""

    def __init__(self, kubelet_root: str, filesystems: RuntimeFilesystems) -> None:
        self._kubelet_root = kubelet_root
        self._filesystems = filesystems

    def layout(self) -> FsLayout:
        image, container = self._filesystems.paths()
        return detect_layout(existing_ancestor(self._kubelet_root), existing_ancestor(image),
                             existing_ancestor(container))


def container_stats_by_pod(client: CriClient,
                           timeout_s: float | None = None) -> Mapping[str, Sequence[ContainerUsage]]:
    """Return pod UID -> its containers' usage, from one ListContainerStats (each call within `timeout_s`, if
    given). Raises CRIError."""
    grouped: dict[str, list[ContainerUsage]] = {}
    for usage in client.list_container_stats(timeout_s):
        grouped.setdefault(usage.pod_uid, []).append(usage)
    return grouped


class PeriodicGC:
    """Runs the kubelet's periodic container and image GC when due; failures are logged, never raised."""

    def __init__(self, containers: CriContainerGC, images: CriImageGC, *, container_period_s: float,
                 image_period_s: float, log: Log, clock: Clock = SYSTEM_CLOCK) -> None:
        self._containers = containers
        self._images = images
        self._container_period_s = container_period_s
        self._image_period_s = image_period_s
        self._log = log
        self._clock = clock
        started = clock.monotonic()
        self._containers_due = started + container_period_s
        self._images_due = started + image_period_s

    def tick(self) -> None:
        now = self._clock.monotonic()
        if now >= self._containers_due:
            self._containers_due = now + self._container_period_s
            try:
                result = self._containers.periodic()
                if result.containers or result.sandboxes or result.log_dirs:
                    self._log.info("periodic container GC", containers=len(result.containers),
                                   sandboxes=len(result.sandboxes), log_dirs=len(result.log_dirs))
            except EvictdError as exc:
                self._log.warning("periodic container GC failed", error=str(exc))
        if now >= self._images_due:
            self._images_due = now + self._image_period_s
            try:
                images = self._images.periodic()
                if images.removed:
                    self._log.info("periodic image GC", images=len(images.removed), freed_bytes=images.freed_bytes)
                if images.shortfall:  # the kubelet's FreeDiskSpaceFailed: imagefs stays above the low threshold
                    self._log.warning("periodic image GC freed less than wanted", message=images.shortfall,
                                      wanted_bytes=images.wanted_bytes)
            except EvictdError as exc:
                self._log.warning("periodic image GC failed", error=str(exc))

"""One cgroup v1 memory usage threshold as a notifier (an eventfd), and a notifier that could not be armed.

Job: the kubelet's memcg notifier (KUBELET_SPEC §13): an eventfd registered by writing
``"<eventfd> <fd of memory.usage_in_bytes> <bytes>"`` to the cgroup's ``cgroup.event_control``. The kernel
signals the eventfd when usage crosses the level in either direction (it checks about every 128 pages charged
or uncharged); closing the eventfd unregisters it, and removing the cgroup signals it once. Works on the root
memory cgroup. cgroup v2 has no such interface: there the kubelet's notifier does nothing, and so does
evictd's (use PSI instead). Each threshold has three such notifiers (`evictd.core.memcg_wakeups.Watch`: its
level and two watches beside it), kept armed by `evictd.adapters.memcg_notifier_set`.

Invariants: a notifier owns exactly one eventfd, opened O_CLOEXEC (the files it registers through are closed
before the constructor returns); a failed constructor closes whatever it opened and raises SampleError naming
the file; a crossing between the reading a level was computed from and its registration is signalled at once;
``close()`` is idempotent.
"""

from __future__ import annotations

import os
import select
from dataclasses import dataclass

from evictd.adapters.notifiers import FdOwner, close_quietly, os_sample_error
from evictd.core.errors import SampleError
from evictd.core.memcg_wakeups import Watch, notifier_description
from evictd.core.thresholds import Threshold
from evictd.core.wake import Wake

MEMORY_USAGE_FILE = "memory.usage_in_bytes"
EVENT_CONTROL_FILE = "cgroup.event_control"


class MemcgThresholdNotifier(FdOwner):
    """A cgroup v1 memory usage threshold: an eventfd signalled when usage crosses `threshold_bytes`."""

    poll_events = select.POLLIN

    def __init__(self, cgroup_dir: str, threshold_bytes: int, description: str, *, cause: str = Wake.MEMCG,
                 usage_seen: int | None = None) -> None:
        """Register the threshold on ``<cgroup_dir>/memory.usage_in_bytes``.

        `usage_seen` is the usage the level was computed from: when usage read after the registration is on
        the other side of the level, it crossed while the kernel was not yet watching (a registration waits
        for an RCU grace period), and the eventfd is signalled here as the kernel would have.
        Raises SampleError (naming the file) when the level is negative, when the cgroup or its v1
        files are missing (e.g. on cgroup v2), or when the kernel refuses the registration.
        """
        self._fd = -1
        self.cgroup_dir = cgroup_dir
        self.threshold_bytes = threshold_bytes
        self.description = description
        self.cause = cause
        usage_path = os.path.join(cgroup_dir, MEMORY_USAGE_FILE)
        control_path = os.path.join(cgroup_dir, EVENT_CONTROL_FILE)
        if threshold_bytes < 0:
            raise SampleError(control_path, f"cannot register a negative threshold of {threshold_bytes} bytes")
        watch_fd = control_fd = event_fd = -1
        current = usage_path
        try:
            watch_fd = os.open(usage_path, os.O_RDONLY | os.O_CLOEXEC)
            current = control_path
            control_fd = os.open(control_path, os.O_WRONLY | os.O_CLOEXEC)
            event_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            # The registration outlives both files: only the eventfd has to stay open (as in the kubelet).
            os.write(control_fd, f"{event_fd} {watch_fd} {threshold_bytes}".encode())
            current = usage_path
            if usage_seen is not None and _crossed(usage_seen, int(os.pread(watch_fd, 32, 0)), threshold_bytes):
                os.eventfd_write(event_fd, 1)
        except (OSError, ValueError) as exc:
            close_quietly(event_fd)
            if isinstance(exc, ValueError):
                raise SampleError(current, f"not a number: {exc}") from exc
            raise os_sample_error(current, exc) from exc
        finally:
            close_quietly(control_fd)
            close_quietly(watch_fd)
        self._fd = event_fd

    def consume(self) -> None:
        """Reset the eventfd counter (it counts crossings since the last read)."""
        try:
            os.eventfd_read(self.fileno())
        except BlockingIOError:
            pass  # already consumed: nothing crossed since
        except OSError as exc:
            raise os_sample_error(f"eventfd of {os.path.join(self.cgroup_dir, MEMORY_USAGE_FILE)}", exc) from exc


def _crossed(before: int, after: int, level: int) -> bool:
    """True when usage went from one side of `level` to the other (the kernel's notion: below vs at or above)."""
    return (before < level) != (after < level)


@dataclass(frozen=True, slots=True)
class NotifierFailure:
    """A memcg notifier that could not be armed: the threshold it watches, which notifier of it, why."""

    threshold: Threshold
    watch: Watch
    error: SampleError

    @property
    def description(self) -> str:
        """What the notifier is called in logs (`notifier_description`)."""
        return notifier_description(self.threshold, self.watch)

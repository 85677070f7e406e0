"""Filling the container runtime slot (`evictd.cri.RuntimeSlot`) when a runtime answers, at start or later.

A runtime may come up after evictd; until `Version` answers, evictd observes and reports, asking again after a cycle
at most every `retry_s` with a short deadline. Then the runtime's parts are built (`attach`) and the slot answers as
`CriRuntime` (node-level reclaim, GC, writable layers, the local stop); adapters hold the slot from the start, so
none is rewired. Once attached it stays: gRPC reconnects by itself, and an unanswered call is that call's failure.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from evictd.adapters.local_kill import STOPPABLE_STATES, UNANSWERED, LocalKiller
from evictd.adapters.runtime_node import CYCLE_READ_TIMEOUT_S, PeriodicGC, RuntimeFilesystems, container_stats_by_pod
from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.engine import Eviction
from evictd.core.errors import CRIError, EvictdError
from evictd.core.fs_layout import FsLayout, ReclaimAction
from evictd.core.runtime import Container, Sandbox, SandboxState
from evictd.core.signals import spec_of
from evictd.core.unanswered import Unanswered, overdue_for
from evictd.cri import ContainerUsage, Runtime, RuntimeSlot, RuntimeVersion, SandboxUsage, stop_through_cgroup
from evictd.cri.client import CriClient
from evictd.cycle.manager import LayoutSource, NodeReclaimer
from evictd.log import Log

# How often an absent runtime is asked again, and how long one Version call may take.
RUNTIME_RETRY_S = 5.0
VERSION_PROBE_TIMEOUT_S = 2.0
T = TypeVar("T")


class NodeLevel:
    """What the manager acts through at node level: a layout source and a reclaimer, the configured ones until a
    runtime brings its own (`attach`); `changes` counts attachments, after which the manager detects the layout again
    (built whole, never patched)."""

    def __init__(self, layout: LayoutSource, reclaimer: NodeReclaimer) -> None:
        self._layout = layout
        self._reclaimer = reclaimer
        self.changes = 0

    def attach(self, layout: LayoutSource, reclaimer: NodeReclaimer) -> None:
        """Act through a runtime's layout and reclaimer from the next cycle on."""
        self._layout = layout
        self._reclaimer = reclaimer
        self.changes += 1

    def layout(self) -> FsLayout:
        return self._layout.layout()

    def reclaim(self, action: ReclaimAction) -> int:
        return self._reclaimer.reclaim(action)


# How often a hard memory eviction's stop looks whether the node's memory ran short during the grace period.
GUARD_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class MemoryGuard:
    """What a hard memory eviction's stop does beside the runtime's (`CriRuntime.stop_pod`): `terminate` SIGTERMs the
    pod's processes through its cgroup at once; during the grace period, once `ran_short(eviction)`
    (`memory_ran_short` on a fresh memory reading) with `running` processes left, they are killed through the cgroup
    (a process deaf to SIGTERM would otherwise meet the OOM killer first)."""

    terminate: Callable[[str], int]
    running: Callable[[str], int]
    ran_short: Callable[[Eviction], bool]


def _hard_memory(eviction: Eviction) -> bool:
    threshold = eviction.threshold
    return threshold is not None and threshold.is_hard and spec_of(threshold.signal).is_memory


def _quietly(count: Callable[[], int]) -> int:
    """`count()`, or 0 when the cgroup cannot be read (the runtime's stop goes on regardless)."""
    try:
        return count()
    except EvictdError:
        return 0


def _after_sigterm(terminated: int) -> str:
    """How a stop says that SIGTERM went to `terminated` processes through the pod's cgroup before it ("": none)."""
    return f" (after SIGTERM to its {terminated} processes through its cgroup)" if terminated else ""


class GatedGC:
    """The periodic GC, run only while the node's mode acts (`dry_run` false): a dry-run collects nothing."""

    def __init__(self, gc: PeriodicGC, dry_run: Callable[[], bool]) -> None:
        self._gc = gc
        self._dry_run = dry_run

    def tick(self) -> None:
        if not self._dry_run():
            self._gc.tick()


class CriRuntime:
    """A runtime that answered on the CRI endpoint, as the adapters use it (a `Runtime`; `gc` None in dry-run).

    Reads on the loop's path wait at most CYCLE_READ_TIMEOUT_S each; after one went unanswered, reads fail at once
    for a while (`evictd.core.unanswered`), so a hung runtime costs a cycle one wait. The local stop's calls wait as
    long (StopContainer: plus the grace) and one unanswered ends the runtime's stop: the processes are then killed
    through the cgroup, as when the runtime says it could not stop them. A stop beginning while a read is `OVERDUE_S`
    old does not ask the runtime at all. GC keeps the client's own deadlines.
    """

    attached = True
    can_stop = True

    def __init__(self, client: CriClient, filesystems: RuntimeFilesystems, gc: PeriodicGC | GatedGC | None,
                 clock: Clock = SYSTEM_CLOCK, kill_processes: Callable[[str], int] | None = None,
                 memory_guard: MemoryGuard | None = None) -> None:
        self._client = client
        # Last resort when the runtime does not stop a pod: kill via its cgroup (pod uid -> processes; None: none).
        self._kill_processes = kill_processes
        # What a hard memory eviction's stop does beside the runtime's (None: dry-run, no cgroups or memory reading).
        self._memory_guard = memory_guard if kill_processes is not None else None
        self._filesystems = filesystems
        self._killer = LocalKiller(client, answer_within_s=CYCLE_READ_TIMEOUT_S)
        self._gc = gc
        self._clock = clock
        self._unanswered = Unanswered()  # the last read (or stop's call) the runtime left unanswered
        # When each read under way began (monotonic), by a number of its own: the loop and the stats worker read.
        self._reads_under_way: dict[int, float] = {}
        self._read_numbers = itertools.count()
        self._reads_lock = threading.Lock()

    def _read(self, method: str, call: Callable[[float], T]) -> T:
        not_asked = self._unanswered.not_asked("read", self._clock.monotonic())
        if not_asked is not None:
            raise CRIError(method, UNANSWERED, not_asked)
        number = next(self._read_numbers)
        with self._reads_lock:
            self._reads_under_way[number] = self._clock.monotonic()
        try:
            return call(CYCLE_READ_TIMEOUT_S)
        except CRIError as exc:
            if exc.code == UNANSWERED:
                self._unanswered.at = self._clock.monotonic()
            raise
        finally:
            with self._reads_lock:
                del self._reads_under_way[number]

    def _overdue_read_s(self) -> float | None:
        """How long the oldest read under way has been waiting, when it is overdue (`overdue_for`); else None."""
        with self._reads_lock:
            oldest = min(self._reads_under_way.values(), default=None)
        return overdue_for(oldest, self._clock.monotonic())

    def list_sandboxes(self) -> Sequence[Sandbox]:
        return self._read("ListPodSandbox", lambda timeout_s: self._client.list_sandboxes(timeout_s=timeout_s))

    def filesystem_paths(self) -> tuple[str, str] | None:
        """The runtime's image and container folders (ImageFsInfo, on its own schedule; not asked while reads go
        unanswered: the folders last known)."""
        if self._unanswered.quiet(self._clock.monotonic()):
            return self._filesystems.paths(ask=False)
        before = self._filesystems.last_error
        paths = self._filesystems.paths()
        error = self._filesystems.last_error
        if error is not before and isinstance(error, CRIError) and error.code == UNANSWERED:
            self._unanswered.at = self._clock.monotonic()
        return paths

    def container_stats(self) -> Mapping[str, Sequence[ContainerUsage]] | None:
        return self._read("ListContainerStats", lambda timeout_s: container_stats_by_pod(self._client, timeout_s))

    def sandbox_stats(self) -> Mapping[str, SandboxUsage] | None:
        return self._read("ListPodSandboxStats", lambda timeout_s: {
            usage.uid: usage for usage in self._client.list_pod_sandbox_stats(timeout_s)})

    def container_names(self, pod_uid: str) -> dict[str, str]:
        return {container.id: container.name for container in self._client.list_containers(pod_uid=pod_uid)}

    def _containers(self, pod_uid: str) -> Sequence[Container]:
        """The pod's containers as the runtime lists them. Raises EvictdError."""
        return self._read("ListContainers", lambda timeout_s: self._client.list_containers(
            pod_uid=pod_uid, timeout_s=timeout_s))

    def _containers_stopped(self, pod_uid: str) -> bool:
        """Whether the runtime lists the pod's containers and none of them runs (False when it cannot say)."""
        try:
            containers = self._containers(pod_uid)
        except EvictdError:
            return False
        return bool(containers) and not any(c.state in STOPPABLE_STATES for c in containers)

    def pod_running(self, pod_uid: str) -> bool | None:
        """A ready sandbox or a live container; None when the runtime cannot answer (the wait after an eviction
        then relies on the API alone)."""
        try:
            sandboxes = self._read("ListPodSandbox", lambda timeout_s: self._client.list_sandboxes(
                pod_uid=pod_uid, timeout_s=timeout_s))
            containers = self._containers(pod_uid)
        except EvictdError:
            return None
        return any(s.state is SandboxState.READY for s in sandboxes) or any(
            c.state in STOPPABLE_STATES for c in containers)

    def stop_pod(self, eviction: Eviction) -> str:
        """Stop the evicted pod as the kubelet's runtime manager would; when the runtime does not answer (unanswered
        moments ago, a read overdue, or this stop's calls timing out) or says it could not, kill its processes through
        its cgroup instead (a thrashing or pid-starved node's runtime cannot; a deliberate difference from the kubelet,
        which can only wait). A hard memory eviction first SIGTERMs the processes through the cgroup. Returns how the
        pod was stopped. Raises EvictdError."""
        guard = self._memory_guard if _hard_memory(eviction) else None
        terminated = _quietly(lambda: guard.terminate(eviction.pod.uid)) if guard is not None else 0
        if self._kill_processes is not None and self._unanswered.quiet(self._clock.monotonic()):
            return self._kill_through_cgroup(eviction, "the runtime does not answer: a read went unanswered "
                                                       "moments ago", None, terminated)
        overdue_s = self._overdue_read_s() if self._kill_processes is not None else None
        if overdue_s is not None:
            return self._kill_through_cgroup(eviction, f"the runtime does not answer: a read under way for "
                                                       f"{overdue_s:.1f} s", None, terminated)
        error = self._runtime_stop(eviction) if guard is None else self._guarded_stop(eviction, guard)
        if isinstance(error, str):  # the guard ended the grace period: how
            return f"{error}{_after_sigterm(terminated)}"
        if error is None:
            return "through the container runtime" + _after_sigterm(terminated)
        if self._kill_processes is None:
            raise error
        if error.code == UNANSWERED:
            self._unanswered.at = self._clock.monotonic()
            return self._kill_through_cgroup(eviction, f"the runtime does not answer: {error}", None, terminated)
        return self._kill_through_cgroup(eviction, f"the runtime could not stop it: {error}", error, terminated)

    def _runtime_stop(self, eviction: Eviction) -> CRIError | None:
        """Stop the pod through the runtime (`LocalKiller`); its failure, or None."""
        try:
            self._killer.kill(eviction)
        except CRIError as exc:
            return exc
        return None

    def _guarded_stop(self, eviction: Eviction, guard: MemoryGuard) -> CRIError | str | None:
        """The runtime's stop on a thread of its own, checked every GUARD_POLL_S: once memory ran short with the pod
        running, its processes are killed through its cgroup and how is returned; else the runtime's failure or None.
        Without a thread, the runtime's stop unguarded on this one."""
        outcome: list[CRIError | None] = []
        raised: list[Exception] = []

        def stop() -> None:
            try:
                outcome.append(self._runtime_stop(eviction))
            except Exception as exc:  # handed to the caller's thread below
                raised.append(exc)

        thread = threading.Thread(target=stop, name="evictd-runtime-stop", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread": the node has no task left for one
            return self._runtime_stop(eviction)
        while True:
            thread.join(GUARD_POLL_S)
            if not thread.is_alive():
                if raised:
                    raise raised[0]
                return outcome[0] if outcome else None
            if _quietly(lambda: guard.running(eviction.pod.uid)) and guard.ran_short(eviction):
                assert self._kill_processes is not None
                how = stop_through_cgroup(self._kill_processes, eviction,
                                          "memory ran short during its grace period")
                if how is not None:
                    return how

    def _kill_through_cgroup(self, eviction: Eviction, why: str, failure: CRIError | None, terminated: int = 0) -> str:
        """Kill the pod's processes through its cgroup because of `why`; raise when it holds none (the runtime's
        `failure` or a CRIError), unless `terminated` processes ended on SIGTERM first or, after the runtime's
        `failure`, it lists the pod's containers and none runs."""
        assert self._kill_processes is not None
        how = stop_through_cgroup(self._kill_processes, eviction, why)
        if how is None:
            if terminated:
                return f"by SIGTERM to its {terminated} processes through its cgroup ({why})"
            if failure is not None and self._containers_stopped(eviction.pod.uid):
                # A shim that died mid-stop has containerd's clean-up kill what it ran: stopped, not a failure to
                # evict (which would rank the next pod).
                return f"by the runtime after all: its cgroup holds no process and no container of it runs ({why})"
            if failure is not None:
                raise failure
            raise CRIError("StopPodSandbox", UNANSWERED, f"{why}, and the pod's cgroup holds no process")
        return f"{how}{_after_sigterm(terminated)}; the runtime finds its containers exited"

    def collect_garbage(self) -> None:
        if self._gc is not None:
            self._gc.tick()


class RuntimeLink:
    """Asks the CRI endpoint for the runtime until it answers, then attaches it once (`attach(version)` builds
    the runtime that then fills `slot`). As a daemon part, `start` asks once before the first cycle."""

    def __init__(self, client: CriClient, attach: Callable[[RuntimeVersion], Runtime], log: Log, *,
                 slot: RuntimeSlot | None = None, retry_s: float = RUNTIME_RETRY_S,
                 probe_timeout_s: float = VERSION_PROBE_TIMEOUT_S, clock: Clock = SYSTEM_CLOCK) -> None:
        self.client = client
        self.slot = slot if slot is not None else RuntimeSlot()
        self._attach = attach
        self._log = log
        self._retry_s = retry_s
        self._probe_timeout_s = min(probe_timeout_s, client.timeout_s)
        self._clock = clock
        self._next_try = float("-inf")
        self._failures = 0
        self._attached: Runtime | None = None

    def connect(self) -> Runtime | None:
        """Ask the runtime now (unless attached) and attach it if it answers; return it, or None."""
        if self._attached is not None:
            return self._attached
        self._next_try = self._clock.monotonic() + self._retry_s
        try:
            version = self.client.version(timeout_s=self._probe_timeout_s)
        except EvictdError as exc:
            if self._failures == 0:
                self._log.info("no container runtime answers: node-level reclaim is reported, not carried out; "
                               "asked again after a cycle, at most every retry_s seconds",
                               endpoint=self.client.endpoint, error=str(exc), retry_s=self._retry_s)
            self._failures += 1
            return None
        self._attached = self.slot.current = self._attach(version)
        # Logged once attached, so that everything the line announces (metrics, reclaim) is already in place.
        self._log.info("container runtime", endpoint=self.client.endpoint, runtime=version.runtime_name,
                       version=version.runtime_version, api=version.runtime_api_version,
                       unanswered_attempts=self._failures)
        return self._attached

    def poll(self) -> Runtime | None:
        """After a cycle: ask again if the runtime is absent and the retry period has passed."""
        if self._attached is None and self._clock.monotonic() >= self._next_try:
            return self.connect()
        return self._attached

    def start(self) -> None:
        self.connect()

    def stop(self) -> None:
        """Nothing to stop: the client's channel is released with the process."""

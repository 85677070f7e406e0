"""Filling the container runtime slot (`evictd.cri.RuntimeSlot`) when a runtime answers, at start or later.

A node's runtime may come up after evictd (a systemd ordering that only orders, a runtime that failed to start
and is restarted, a runtime being upgraded). Without the runtime evictd observes and reports; once `Version`
answers on the CRI endpoint, the runtime's parts are built (`attach`) and the slot answers as that runtime
(`CriRuntime`): node-level reclaim, periodic GC, writable layers and the local stop work from then on. The
adapters hold the slot (`RuntimeSlot`) from the start, so none is rewired. Until then the endpoint is asked
again after a housekeeping cycle, at most every `retry_s`, with a short deadline so that a runtime that
hangs cannot hold the loop up. Once attached it stays attached: the gRPC channel reconnects by itself when the runtime
restarts, and every CRI call already treats an unanswered call as a failure of that call.
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
from evictd.core.runtime import Sandbox, SandboxState
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
    """What the eviction manager acts through at node level: a layout source and a reclaimer, the ones given
    first (the configured folders' layout, a reclaimer that frees nothing) until a container runtime that answers
    brings its own (`attach`). `changes` counts the attachments: the manager detects the layout again after
    each (`EvictionManager`'s `layout_changes`), so it is built whole and never patched."""

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
    """What a hard memory eviction's stop does beside the runtime's (`CriRuntime.stop_pod`): `terminate` sends SIGTERM
    to the pod's processes through its cgroup at once, what the runtime's stop sends first, without waiting on the
    runtime to deliver it (pod uid -> processes signalled); while the runtime's stop runs the grace period, the
    pod's processes are killed through its cgroup once `ran_short(eviction)` says the node's memory ran short
    (`evictd.core.engine_rules.memory_ran_short`, on a fresh reading of the node's memory) with `running` (pod uid ->
    processes left) still above 0. On the arena's real node a fast leak, PID 1 of its container and so deaf to
    SIGTERM, took the whole 2 s grace period and was OOM-killed by the kernel 0.6-0.7 s after evictd's decision."""

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
    """A runtime that answered on the CRI endpoint, as the adapters use it (a `Runtime`).

    `gc` is None where evictd must not collect (dry-run). The reads on the loop's path (the node's sandboxes, the
    containers' and sandboxes' stats, a pod's sandboxes and containers in the wait after an eviction) wait at most
    CYCLE_READ_TIMEOUT_S each; after one went unanswered (DEADLINE_EXCEEDED), reads fail at once for 5 s
    (`evictd.core.unanswered`; a CRIError saying so), so that a hung runtime costs a cycle one such wait, not one
    per call. The local stop's calls wait CYCLE_READ_TIMEOUT_S too (StopContainer: plus the grace period), and one
    unanswered ends the stop through the runtime: the pod's processes are then killed through its cgroup, as they
    are when the runtime answers that it could not stop them. A stop that begins while a read has been under way
    for `OVERDUE_S` or more (the cycle's ListContainerStats, which an urgent cycle stopped waiting for) does not ask
    the runtime at all: it hangs now, and its calls would hold the stop their 2 s each while the node runs out of
    memory. The garbage collection keeps the client's own deadlines.
    """

    attached = True
    can_stop = True

    def __init__(self, client: CriClient, filesystems: RuntimeFilesystems, gc: PeriodicGC | GatedGC | None,
                 clock: Clock = SYSTEM_CLOCK, kill_processes: Callable[[str], int] | None = None,
                 memory_guard: MemoryGuard | None = None) -> None:
        self._client = client
        # The last resort of a stop the runtime does not answer: the pod's processes killed through its cgroup
        # (`evictd.adapters.cgroup_kill`; pod uid -> processes found). None: none (dry-run, no cgroups).
        self._kill_processes = kill_processes
        # What a hard memory eviction's stop does beside the runtime's (`MemoryGuard`). None: none (dry-run, no
        # cgroups, no reading of the node's memory alone); it needs `kill_processes` too.
        self._memory_guard = memory_guard if kill_processes is not None else None
        self._filesystems = filesystems
        self._killer = LocalKiller(client, answer_within_s=CYCLE_READ_TIMEOUT_S)
        self._gc = gc
        self._clock = clock
        self._unanswered = Unanswered()  # the last read (or stop's call) the runtime left unanswered
        # When each read under way began (monotonic seconds), by a number of its own: reads run on the loop and on
        # the stats worker's thread (`evictd.adapters.runtime_stats_worker`).
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

    def pod_running(self, pod_uid: str) -> bool | None:
        """A ready sandbox or a live container; None when the runtime cannot answer (the wait after an eviction
        then relies on the API alone)."""
        try:
            sandboxes = self._read("ListPodSandbox", lambda timeout_s: self._client.list_sandboxes(
                pod_uid=pod_uid, timeout_s=timeout_s))
            containers = self._read("ListContainers", lambda timeout_s: self._client.list_containers(
                pod_uid=pod_uid, timeout_s=timeout_s))
        except EvictdError:
            return None
        return any(s.state is SandboxState.READY for s in sandboxes) or any(
            c.state in STOPPABLE_STATES for c in containers)

    def stop_pod(self, eviction: Eviction) -> str:
        """Stop the evicted pod as the kubelet's runtime manager would; when the runtime does not answer (a read
        unanswered moments ago, a read under way past `OVERDUE_S`, or this stop's own calls timing out) or answers
        that it could not stop it, kill its processes through its cgroup instead: on a node in thrash the runtime
        hangs with everything else, and the
        kernel's OOM killer would do it seconds later after the node stalled; on a node out of pids the runtime
        cannot start the OCI runtime that would send the signal (the arena's fork bomb on the real node: "fork/exec
        /usr/sbin/runc: resource temporarily unavailable", and the pod went on forking). A deliberate difference
        from the kubelet, which can only wait. A hard memory eviction first sends SIGTERM to the pod's processes
        through its cgroup (`evictd.adapters.cgroup_kill`): what the runtime's stop sends first, without waiting on
        the runtime to deliver it; the runtime's stop then ends the grace period as before. Returns how the pod was
        stopped. Raises EvictdError."""
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
        """The runtime's stop on a thread of its own, looked at every GUARD_POLL_S while its grace period runs: once
        the node's memory ran short with the pod still running, its processes are killed through its cgroup and how
        is returned (the runtime's call goes on, and finds them gone); else the runtime's failure, or None. Where no
        thread can start, the runtime's stop on this one, unguarded. What else the runtime's stop raises is raised
        here, as an unguarded stop raises it."""
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
        """Kill the pod's processes through its cgroup because of `why`; raise when its cgroup holds none: the
        runtime's own `failure` when it answered one (its containers may be gone, its sandbox not), else a CRIError
        saying so; unless SIGTERM went to `terminated` processes first: they ended on it."""
        assert self._kill_processes is not None
        how = stop_through_cgroup(self._kill_processes, eviction, why)
        if how is None:
            if terminated:
                return f"by SIGTERM to its {terminated} processes through its cgroup ({why})"
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

"""evictd's Lease for its node: its heartbeat in the API, and the guard that keeps one evictd per node.

Over 500 lines because holding, renewing, judging another holder live (client-go's rules) and judging our own lapse
(a pause against an API that does not answer) are one state, shared by the renewal thread and the loop.

As the kubelet's node lease: named after the node in `leaseNamespace`, renewed on its own thread every quarter of its
duration by a PUT of the Lease last written (a conflict re-reads); failures retry at doubling intervals, never fatal.
Another holder (`<host>/<boot id>/<PID>`) is live when its record changed within its duration on this host's
monotonic clock since first seen (client-go's observedTime, never the remote `renewTime` against the local clock);
unusable records are expired. At `start` a live holder is waited for up to `stateLockTimeout`, then
`NodeLeaseHeldError` (exit 2); a crashed holder on this boot is taken over at once. `standby_reason` says why evictd
must not act: the Lease lost to another live holder, or lapsed for a duration since the last successful request,
except while the API does not answer (nobody can take it then). A lost Lease is taken back once its holder stops
renewing (not exiting: a restart loop); a clean stop releases it (docs/kubernetes-api.md).
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from evictd.clock import SYSTEM_CLOCK, Clock
from evictd.core.errors import KubeError, NodeLeaseHeldError
from evictd.kube.api import LEASES_GROUP_VERSION, KubeApi
from evictd.log import Log

# The kubelet's nodeLeaseDurationSeconds and renewal interval (a quarter), with wait.JitterUntil's 4 % jitter.
DEFAULT_LEASE_DURATION_S = 40
RENEW_INTERVAL_FRACTION = 0.25
RENEW_JITTER_FRACTION = 0.04
# After a failed renewal: the first retry after this, doubling up to the renewal interval.
FIRST_RETRY_S = 1.0
# The longest usable leaseDurationSeconds (a day): a longer one would hold every start for its length.
MAX_LEASE_DURATION_S = 86400
# While waiting at start for another evictd's Lease to expire, how often it is read again.
WAIT_POLL_S = 1.0
REQUEST_TIMEOUT_S = 10.0
# The most requests one attempt makes (a conflicting PUT, a read, a create that conflicts, a read, a PUT).
REQUESTS_PER_ATTEMPT = 5
# At start each request waits less: a silent API must not hold the first cycle long (the thread keeps trying).
START_REQUEST_TIMEOUT_S = 3.0
# A Lease evictd may not write (403) is tried again this seldom: an RBAC fixed later is picked up.
FORBIDDEN_RETRY_S = 300.0
# At stop: how long the thread's last request may hold the stop up, and the release's own deadline.
STOP_WAIT_S = 2.0
# Where a pod's service account names the pod's namespace; outside a pod, the namespace deploy/kubernetes uses.
SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_NAMESPACE = "evictd-system"
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
FORBIDDEN = 403
CONFLICT = 409
NOT_FOUND = 404


def lease_namespace(configured: str, in_cluster: bool, namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE) -> str:
    """The namespace of evictd's node Leases: `configured`, else (in a pod) the pod's, else DEFAULT_NAMESPACE."""
    if configured:
        return configured
    if in_cluster:
        try:
            with open(namespace_file, encoding="utf-8") as handle:
                found = handle.read(256).strip()
        except OSError:
            found = ""
        if found:
            return found
    return DEFAULT_NAMESPACE


def holder_identity(pid: int | None = None, boot_id_file: str = BOOT_ID_FILE) -> str:
    """This process as a Lease holder: `<host name>/<boot id>/<PID>` (the boot id tells a holder on this host)."""
    try:
        with open(boot_id_file, encoding="ascii") as handle:
            boot_id = handle.read(64).strip() or "unknown"
    except OSError:
        boot_id = "unknown"
    return f"{socket.gethostname()}/{boot_id}/{os.getpid() if pid is None else pid}"


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it runs, as someone else
        return True
    return True


def crashed_on_this_host(holder: str, identity: str, pid_runs: Callable[[int], bool] = _pid_runs) -> bool:
    """True when `holder` names this host's boot (as `identity` does) and a PID that no longer runs."""
    theirs, ours = holder.split("/"), identity.split("/")
    if len(theirs) != 3 or len(ours) != 3 or theirs[1] != ours[1] or ours[1] == "unknown":
        return False
    return theirs[2].isascii() and theirs[2].isdigit() and theirs[2] != ours[2] and not pid_runs(int(theirs[2]))


def micro_time(moment: datetime) -> str:
    """A metav1.MicroTime as the API writes it."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def usable_duration_s(lease: Mapping[str, Any]) -> int | None:
    """The Lease's leaseDurationSeconds when it is usable (an int of 1 to MAX_LEASE_DURATION_S), else None."""
    duration = (lease.get("spec") or {}).get("leaseDurationSeconds")
    if not isinstance(duration, int) or isinstance(duration, bool) or not 1 <= duration <= MAX_LEASE_DURATION_S:
        return None
    return duration


def usable_record(lease: Mapping[str, Any]) -> bool:
    """True when the Lease's renewTime is a MicroTime whose expiry (plus its duration) is still a time, and its
    duration usable: only then can it be held by anyone. The remote time is never compared with the local clock."""
    duration = usable_duration_s(lease)
    renewed = _parse_time((lease.get("spec") or {}).get("renewTime"))
    if duration is None or renewed is None:
        return False
    try:
        renewed + timedelta(seconds=duration)
    except OverflowError:  # 9999-12-31T23:59:59.999999Z: its expiry is past the last representable time
        return False
    return True


def record_of(lease: Mapping[str, Any]) -> str:
    """The Lease's record as leader election compares it (its spec; metadata edits are not renewals)."""
    return json.dumps(lease.get("spec") or {}, sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class Observation:
    """A Lease record as this evictd last saw it change, and when (monotonic seconds on this host): client-go's
    observedRecord and observedTime."""

    record: str
    observed_at: float

    def seen(self, lease: Mapping[str, Any], now: float) -> Observation:
        """This observation after reading `lease` at `now`: kept while the record is the same, else restarted."""
        record = record_of(lease)
        return self if record == self.record else Observation(record, now)


def live_holder(lease: Mapping[str, Any], identity: str, observation: Observation, now: float) -> str | None:
    """The holder of `lease` when it is another than `identity` and its record changed within its duration before
    `now` (monotonic, as `observation` was timed); else None (ours, released, expired, or unusable: free to take)."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if not isinstance(holder, str) or not holder or holder == identity or not usable_record(lease):
        return None
    duration = usable_duration_s(lease)
    assert duration is not None  # usable_record checked it
    return holder if now - observation.observed_at < duration else None


class NodeLease:
    """Holds and renews evictd's Lease for one node (see the module's description); a daemon Part."""

    def __init__(self, api: KubeApi, namespace: str, node_name: str, *, log: Log,
                 duration_s: int = DEFAULT_LEASE_DURATION_S, wait_s: float = 30.0, identity: str | None = None,
                 on_error: Callable[[KubeError], None] = lambda error: None, clock: Clock = SYSTEM_CLOCK,
                 jitter: Callable[[], float] = random.random, pid_runs: Callable[[int], bool] = _pid_runs,
                 request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._api = api
        self.namespace = namespace
        self.name = node_name
        self.identity = identity if identity is not None else holder_identity()
        self._log = log
        self.duration_s = duration_s
        self.renew_interval_s = duration_s * RENEW_INTERVAL_FRACTION
        self._wait_s = wait_s
        self._on_error = on_error
        self._clock = clock
        self._jitter = jitter
        self._pid_runs = pid_runs
        self._request_timeout_s = request_timeout_s
        self._latest: dict[str, Any] | None = None  # the Lease as last written by us
        # Monotonic start of the last successful write (the Lease cannot expire for others sooner than a duration on).
        self._renewed_at: float | None = None
        self._renewal_answered_at: float | None = None  # and at its end (its answer read)
        # Monotonic end of the last attempt that failed without an answer, and start of the one under way (None).
        self._failed_at: float | None = None
        self._attempt_started_at: float | None = None
        self._observation: Observation | None = None  # another holder's record as last seen changing
        self._lost_to = ""  # the other live holder the last attempt found ("": none)
        self._foreign_duration_s = 0  # its usable leaseDurationSeconds
        self._failures = 0  # consecutive failed renewals
        self._forbidden = False  # the last attempt was refused (403)
        self._forbidden_logged = False
        self._foreign_logged = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    def renewing(self) -> bool:
        """True while the Lease was renewed by us within its duration (what the Node heartbeat's period follows)."""
        renewed_at = self._renewed_at
        return renewed_at is not None and self._clock.monotonic() - renewed_at < self.duration_s

    def standby_reason(self) -> str | None:
        """Why evictd must not act now (see the module's description: lost, or lapsed while the API answers); None
        while it may."""
        if self._lost_to:
            return f"the node Lease {self.where} is held by another evictd ({self._lost_to})"
        renewed_at = self._renewed_at
        now = self._clock.monotonic()
        if renewed_at is None or now - renewed_at < self.duration_s:
            return None
        if self._api_not_answering(now, renewed_at):
            return None  # nobody can take the Lease through an API that does not answer
        return (f"the node Lease {self.where} was not renewed for {now - renewed_at:.0f} s (paused past it?): "
                "not acting until it is renewed or taken back")

    def _api_not_answering(self, now: float, renewed_at: float) -> bool:
        """True when the renewals lapsed because the API does not answer, not because this process was paused: an
        attempt failed since the last renewal and one is under way or the last failed recently; or the last renewal
        was answered so late the Lease runs out during the next, on-schedule attempt. A resumed process has neither
        and stands by until its thread has asked the API again."""
        started = self._attempt_started_at
        # At most a lease duration: an attempt "under way" since before a longer pause is a pause, not an API.
        in_flight_s = min(self._request_timeout_s * REQUESTS_PER_ATTEMPT + FIRST_RETRY_S, self.duration_s)
        under_way = started is not None and now - started < in_flight_s
        longest_wait_s = self.renew_interval_s * (1 + RENEW_JITTER_FRACTION) + FIRST_RETRY_S
        failed = self._failed_at
        if failed is None or failed <= renewed_at:
            # No failure since: the last renewal came late; only a next attempt begun on schedule excuses the lapse.
            answered = self._renewal_answered_at
            return (under_way and started is not None and answered is not None
                    and 0 <= started - answered <= longest_wait_s)
        return under_way or now - failed <= longest_wait_s

    # -- the daemon Part -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Take the Lease, waiting up to `wait_s` for another live holder (NodeLeaseHeldError after), then renew it
        on a thread."""
        self.acquire()
        self._thread = threading.Thread(target=self._run, name="evictd-node-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and release the Lease (logged, never raised)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S)
            if self._thread.is_alive():  # a renewal still waiting for the API: the Lease expires by itself
                return
        self.release()

    def acquire(self) -> None:
        """The start-up guard (see the module's description)."""
        began = self._clock.monotonic()
        waited_for: tuple[str, str] | None = None
        while True:
            try:
                foreign = self._sync(START_REQUEST_TIMEOUT_S)
            except KubeError as exc:
                self._failed(exc, starting=True)
                return
            if foreign is None:
                if waited_for is not None:
                    self._log.info("node lease taken over", lease=self.where, previous_holder=waited_for[0])
                return
            holder, renew_time = foreign
            # At least one of its lease durations: a holder that stopped renewing is always outwaited.
            wait_s = max(self._wait_s, self._foreign_duration_s + WAIT_POLL_S)
            if waited_for is None:
                self._log.warning("node lease held by another evictd: waiting for it to stop renewing",
                                  lease=self.where, holder=holder, renew_time=renew_time, wait_s=wait_s)
            waited_for = foreign
            remaining = began + wait_s - self._clock.monotonic()
            if remaining <= 0:
                raise NodeLeaseHeldError(self.where, holder, renew_time, wait_s)
            self._clock.sleep(min(WAIT_POLL_S, remaining))

    def renew(self) -> None:
        """One renewal (the thread's step): logged when it fails, never raised."""
        try:
            foreign = self._sync(self._request_timeout_s)
        except KubeError as exc:
            self._failed(exc, starting=False)
            return
        if foreign is not None:
            self._failures += 1
            if self._foreign_logged != foreign[0]:
                self._foreign_logged = foreign[0]
                self._log.error("node lease lost to another evictd: not acting (no eviction, condition or taint) "
                                "until its holder stops renewing it", lease=self.where, holder=foreign[0],
                                renew_time=foreign[1])
            return
        if self._foreign_logged:
            self._log.info("node lease taken back: acting again", lease=self.where,
                           previous_holder=self._foreign_logged)
        elif self._failures:
            self._log.info("node lease renewed again: the Node heartbeat back to nodeStatusReportFrequency",
                           lease=self.where, failed_attempts=self._failures)
        self._failures = 0
        self._forbidden = False
        self._foreign_logged = ""

    def release(self) -> None:
        """On a clean stop: the Lease's holder emptied, so that the next evictd takes it at once."""
        if self._latest is None:
            return
        lease = _copy(self._latest)
        lease["spec"]["holderIdentity"] = ""
        try:
            self._api.replace_lease(self.namespace, self.name, lease, timeout_s=STOP_WAIT_S)
        except KubeError as exc:
            self._on_error(exc)
            self._log.warning("node lease not released at stop (it expires by itself)", lease=self.where,
                              error=str(exc))
            return
        self._latest = None
        self._renewed_at = None
        self._log.info("node lease released", lease=self.where)

    def next_delay_s(self) -> float:
        """When the thread renews next: the renewal interval with its jitter, sooner after a failure."""
        if self._forbidden:
            return FORBIDDEN_RETRY_S
        if self._failures:
            return min(FIRST_RETRY_S * 2.0 ** min(self._failures - 1, 16), self.renew_interval_s)
        return self.renew_interval_s * (1 + RENEW_JITTER_FRACTION * self._jitter())

    def _run(self) -> None:
        while not self._stop.wait(self.next_delay_s()):
            try:
                self.renew()
            except Exception:  # the renewal thread is a loop of its own: a bug in one step must not end it
                self._failures += 1
                self._log.exception("node lease renewal failed", lease=self.where)

    # -- writing the Lease -----------------------------------------------------------------------------------

    def _sync(self, timeout_s: float = REQUEST_TIMEOUT_S) -> tuple[str, str] | None:
        """Renew or take the Lease; return another live holder's (holder, renewTime) instead. Raises KubeError."""
        attempt_at = self._attempt_started_at = self._clock.monotonic()
        try:
            foreign = self._sync_once(attempt_at, timeout_s)
        except KubeError:
            self._failed_at = self._clock.monotonic()
            raise
        finally:
            self._attempt_started_at = None
        self._lost_to = "" if foreign is None else foreign[0]
        return foreign

    def _sync_once(self, attempt_at: float, timeout_s: float) -> tuple[str, str] | None:
        if self._latest is not None:
            try:
                self._written(self._api.replace_lease(self.namespace, self.name, self._renewed(self._latest),
                                                      timeout_s=timeout_s), attempt_at)
                return None
            except KubeError as exc:
                if exc.status != CONFLICT:
                    raise
                self._on_error(exc)  # written by someone else meanwhile: read it again
                self._latest = None
        try:
            current = self._api.read_lease(self.namespace, self.name, timeout_s=timeout_s)
        except KubeError as exc:
            if exc.status != NOT_FOUND:
                raise
            try:
                self._written(self._api.create_lease(self.namespace, self._new_lease(), timeout_s=timeout_s),
                              attempt_at)
                return None
            except KubeError as created:
                if created.status != CONFLICT:  # AlreadyExists: another evictd created it meanwhile
                    raise
            current = self._api.read_lease(self.namespace, self.name, timeout_s=timeout_s)
        now = self._clock.monotonic()
        observation = self._observation
        self._observation = (Observation(record_of(current), now) if observation is None
                             else observation.seen(current, now))
        holder = live_holder(current, self.identity, self._observation, now)
        if holder is not None and not crashed_on_this_host(holder, self.identity, self._pid_runs):
            self._foreign_duration_s = usable_duration_s(current) or 0
            return holder, str((current.get("spec") or {}).get("renewTime"))
        self._written(self._api.replace_lease(self.namespace, self.name, self._taken(current),
                                              timeout_s=timeout_s), attempt_at)
        return None

    def _written(self, lease: dict[str, Any], attempt_at: float) -> None:
        self._latest = lease
        self._renewed_at = attempt_at
        self._renewal_answered_at = self._clock.monotonic()
        self._observation = None

    def _failed(self, exc: KubeError, *, starting: bool) -> None:
        self._on_error(exc)
        self._failures += 1
        self._forbidden = exc.status == FORBIDDEN
        if self._forbidden:
            if not self._forbidden_logged:
                self._forbidden_logged = True
                self._log.error("node lease may not be written (403): the Node heartbeat stays at "
                                "nodeStatusUpdateFrequency; grant evictd's Role in deploy/kubernetes/rbac.yaml",
                                lease=self.where, error=str(exc))
            return
        if starting:
            self._log.warning("node lease not taken at start (the API does not answer?): starting without knowing "
                              "whether another evictd runs for this node; retrying", lease=self.where, error=str(exc))
        elif self._failures == 1 or self._failures % 10 == 0:
            self._log.warning("node lease not renewed; retrying", lease=self.where, error=str(exc),
                              failed_attempts=self._failures)

    def _new_lease(self) -> dict[str, Any]:
        return new_lease(self.namespace, self.name, self.identity, self.duration_s, self._clock.wall())

    def _renewed(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        return renewed_lease(lease, self.duration_s, self._clock.wall())

    def _taken(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        return taken_lease(lease, self.identity, self.duration_s, self._clock.wall())


def new_lease(namespace: str, name: str, identity: str, duration_s: int, now: datetime) -> dict[str, Any]:
    """The Lease evictd creates for node `name`: held by `identity`, acquired and renewed `now`."""
    at = micro_time(now)
    return {"apiVersion": LEASES_GROUP_VERSION, "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "evictd"}},
            "spec": {"holderIdentity": identity, "leaseDurationSeconds": duration_s, "acquireTime": at,
                     "renewTime": at, "leaseTransitions": 0}}


def renewed_lease(lease: Mapping[str, Any], duration_s: int, now: datetime) -> dict[str, Any]:
    """`lease` renewed `now` (its resourceVersion kept: the update's precondition)."""
    renewed = _copy(lease)
    renewed["spec"].update(renewTime=micro_time(now), leaseDurationSeconds=duration_s)
    return renewed


def taken_lease(lease: Mapping[str, Any], identity: str, duration_s: int, now: datetime) -> dict[str, Any]:
    """`lease` (ours, or released, expired or crashed) renewed as `identity`'s: acquired now and a transition
    counted when it was another's, as leader election counts them."""
    taken = renewed_lease(lease, duration_s, now)
    spec = taken["spec"]
    if spec.get("holderIdentity") != identity:
        if spec.get("holderIdentity"):
            transitions = spec.get("leaseTransitions")
            spec["leaseTransitions"] = (transitions if isinstance(transitions, int) else 0) + 1
        spec["holderIdentity"] = identity
        spec["acquireTime"] = spec["renewTime"]
    return taken


def _copy(lease: Mapping[str, Any]) -> dict[str, Any]:
    """A Lease with its own metadata and spec (the parts a write changes)."""
    copied = dict(lease)
    copied["metadata"] = dict(lease.get("metadata") or {})
    copied["spec"] = dict(lease.get("spec") or {})
    return copied

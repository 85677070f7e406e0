"""NodeLease (src/evictd/kube/node_lease.py) against the test API server with evictd's API client: the Lease it
creates and renews, when it renews, the start-up guard (a live Lease of another evictd: wait, then refuse; an
expired, released or crashed one: taken over), the 403 fallback, and the release at stop. Time is a ManualClock
(monotonic for the renewal's bookkeeping and for judging another holder's liveness, wall for the times evictd
writes) except in the one test of the thread. Another holder is live while its record changes within its
duration as timed here (client-go's observedTime), whatever its renewTime says: `renew_theirs` plays a live holder.
Losing the Lease (`standby_reason`) and unusable Leases (issue #38 item 3) are at the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apiserver import ApiServer
from evictd_kube_support import evictd_api_client
from lease_contract import lease_body, raw

from clocks import ManualClock
from evictd.clock import SYSTEM_CLOCK
from evictd.core.errors import KubeError, NodeLeaseHeldError
from evictd.kube.node_lease import (
    FIRST_RETRY_S,
    FORBIDDEN_RETRY_S,
    NodeLease,
    crashed_on_this_host,
    holder_identity,
    lease_namespace,
    micro_time,
)
from log_capture import LogCapture

NODE = "node-1"
NAMESPACE = "evictd-system"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
START = datetime(2026, 11, 24, 5, 0, 0, tzinfo=UTC)
OURS = "host-a/boot-1/100"
THEIRS = "host-b/boot-2/200"

MakeLease = Callable[..., NodeLease]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(500.0, wall_at_zero=START - timedelta(seconds=500.0))


@pytest.fixture
def log() -> LogCapture:
    return LogCapture()


@pytest.fixture
def make_lease(apiserver: ApiServer, clock: ManualClock, log: LogCapture) -> Iterator[MakeLease]:
    clients: list[Any] = []

    def make(**kwargs: Any) -> NodeLease:
        client = evictd_api_client(apiserver)
        clients.append(client)
        options: dict[str, Any] = {"identity": OURS, "clock": clock, "log": log, "jitter": lambda: 0.5,
                                   "pid_runs": lambda pid: True, **kwargs}
        return NodeLease(client, NAMESPACE, NODE, **options)

    yield make
    for client in clients:
        client.close()


def stored(api_client: Any) -> dict[str, Any]:
    status, lease = raw(api_client, "GET", f"{LEASE_PATH}/{NODE}")
    assert status == 200, lease
    return lease


def seed(api_client: Any, holder: str, renewed: datetime, transitions: int = 0) -> None:
    body = lease_body(NAMESPACE, NODE, holder, micro_time(renewed))
    body["spec"]["leaseTransitions"] = transitions
    status, created = raw(api_client, "POST", LEASE_PATH, body)
    assert status == 201, created


def renew_theirs(api_client: Any, renew_time: str | None = None) -> None:
    """Another live holder's renewal: its record changes (renewTime, unless `renew_time` pins it: the record's
    other fields still change, as a holder's writes do)."""
    current = stored(api_client)
    spec = current["spec"]
    if renew_time is None:
        spec["renewTime"] = micro_time(_parse(spec["renewTime"]) + timedelta(seconds=10))
    else:
        spec["renewTime"] = renew_time
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    status, body = raw(api_client, "PUT", f"{LEASE_PATH}/{NODE}", current)
    assert status == 200, body


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def lease_requests(apiserver: ApiServer) -> list[tuple[str, str]]:
    """evictd's requests to the Lease (by its User-Agent: not the test's own reads)."""
    return [(r.method, r.path) for r in apiserver.requests
            if "/leases" in r.path and r.headers.get("User-Agent", "").startswith("evictd")]


# --- creating and renewing -----------------------------------------------------------------------------------


def test_the_lease_is_created_then_renewed_with_a_put_of_the_last_one_written(
        apiserver: ApiServer, api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    lease = make_lease()
    assert not lease.renewing()
    lease.acquire()
    created = stored(api_client)
    assert created["spec"] == {"holderIdentity": OURS, "leaseDurationSeconds": 40, "acquireTime": micro_time(START),
                               "renewTime": micro_time(START), "leaseTransitions": 0}
    assert created["metadata"]["labels"] == {"app.kubernetes.io/name": "evictd"}
    assert lease.renewing()

    for _ in range(3):
        clock.advance(10)
        lease.renew()
    renewed = stored(api_client)
    assert renewed["spec"]["renewTime"] == micro_time(START + timedelta(seconds=30))
    assert renewed["spec"]["acquireTime"] == micro_time(START)  # acquired once
    # A GET (404) and a POST at start; then each renewal one PUT, no GET first (as the kubelet's controller).
    assert lease_requests(apiserver) == [("GET", f"{LEASE_PATH}/{NODE}"), ("POST", LEASE_PATH)] + [
        ("PUT", f"{LEASE_PATH}/{NODE}")] * 3


def test_renewing_lasts_a_lease_duration_after_the_last_renewal(make_lease: MakeLease, clock: ManualClock) -> None:
    lease = make_lease(duration_s=40)
    lease.acquire()
    clock.advance(39.9)
    assert lease.renewing()
    clock.advance(0.2)
    assert not lease.renewing()


def test_renewal_timing_is_the_kubelets_and_a_failure_is_retried_sooner(
        apiserver: ApiServer, make_lease: MakeLease, log: LogCapture) -> None:
    jitter = [0.0]
    lease = make_lease(duration_s=40, jitter=lambda: jitter[0])
    lease.acquire()
    # A quarter of nodeLeaseDurationSeconds, plus up to 4 % (wait.JitterUntil's 0.04).
    assert lease.renew_interval_s == 10.0
    assert lease.next_delay_s() == 10.0
    jitter[0] = 1.0
    assert lease.next_delay_s() == pytest.approx(10.4)

    apiserver.faults.fail_next(5, code=503, path="/leases")
    delays = []
    for _ in range(5):
        lease.renew()
        delays.append(lease.next_delay_s())
    assert delays == [FIRST_RETRY_S, 2.0, 4.0, 8.0, 10.0]
    warned = [fields for event, fields in log.at("warning") if event == "node lease not renewed; retrying"]
    assert [fields["failed_attempts"] for fields in warned] == [1]  # then every tenth, not every time
    lease.renew()
    assert lease.renewing() and lease.next_delay_s() == pytest.approx(10.4)
    assert ("node lease renewed again: the Node heartbeat back to nodeStatusReportFrequency",
            {"lease": f"{NAMESPACE}/{NODE}", "failed_attempts": 5}) in log.at("info")


def test_a_conflict_reads_the_lease_again_and_renews_it(
        apiserver: ApiServer, api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    lease = make_lease()
    lease.acquire()
    # Someone (an admin's edit) writes the Lease meanwhile: its resourceVersion moves.
    current = stored(api_client)
    current["metadata"]["labels"]["edited"] = "yes"
    assert raw(api_client, "PUT", f"{LEASE_PATH}/{NODE}", current)[0] == 200
    clock.advance(10)
    lease.renew()
    after = stored(api_client)
    assert after["spec"]["renewTime"] == micro_time(START + timedelta(seconds=10))
    assert after["metadata"]["labels"]["edited"] == "yes" and lease.renewing()
    assert [r.status for r in apiserver.requests if r.method == "PUT"][-2:] == [409, 200]


def test_the_thread_renews_every_quarter_of_the_duration(apiserver: ApiServer, log: LogCapture) -> None:
    client = evictd_api_client(apiserver)
    lease = NodeLease(client, NAMESPACE, NODE, log=log, duration_s=2, wait_s=0.0)  # renewed every 0.5 s
    try:
        lease.start()
        time.sleep(2.6)
        puts = [r for r in apiserver.requests if r.method == "PUT"]
        # 5 renewals in 2.6 s at 0.5-0.52 s each; a loaded machine may be a little late, never early.
        assert 3 <= len(puts) <= 5, len(puts)
        assert lease.renewing()
    finally:
        lease.stop()
        client.close()
    assert stored(apiserver.api_client())["spec"]["holderIdentity"] == ""  # released at stop


# --- one evictd per node ---------------------------------------------------------------------------------------


def test_a_live_lease_of_another_evictd_refuses_the_start_after_the_wait(
        apiserver: ApiServer, api_client: Any, make_lease: MakeLease, clock: ManualClock, log: LogCapture) -> None:
    seed(api_client, THEIRS, START - timedelta(seconds=5))  # renewed 5 s ago, for 40 s
    lease = make_lease(wait_s=3.0)
    # Theirs renews every 10 s of our waiting: live throughout.
    clock.on_sleep.append(lambda now: renew_theirs(api_client) if now % 10 == 0 else None)
    with pytest.raises(NodeLeaseHeldError) as refused:
        lease.acquire()
    last = stored(api_client)["spec"]["renewTime"]
    # At least one of its lease durations (40 s, and a poll), though stateLockTimeout is 3 s: a holder that stopped
    # renewing is always outwaited.
    assert str(refused.value) == (
        f"the node's Lease {NAMESPACE}/{NODE} is still renewed by another evictd (holder '{THEIRS}', last renewed "
        f"{last}) after 41 s: evictd does not start (one evictd per node)")
    assert clock.now_s == pytest.approx(541.0)
    assert log.at("warning")[0] == ("node lease held by another evictd: waiting for it to stop renewing", {
        "lease": f"{NAMESPACE}/{NODE}", "holder": THEIRS, "renew_time": micro_time(START - timedelta(seconds=5)),
        "wait_s": 41.0})
    assert stored(api_client)["spec"]["holderIdentity"] == THEIRS  # never overwritten
    assert {method for method, _ in lease_requests(apiserver)} == {"GET"}  # read, never written


def test_a_lease_that_expires_during_the_wait_is_taken_over(
        api_client: Any, make_lease: MakeLease, clock: ManualClock, log: LogCapture) -> None:
    seed(api_client, THEIRS, START - timedelta(seconds=38), transitions=2)  # renewed once more, then no more
    clock.on_sleep.append(lambda now: renew_theirs(api_client) if now == 502.0 else None)
    lease = make_lease(wait_s=60.0)
    lease.acquire()
    # Its record last changed at 502 s as timed here: expired 40 s later, whatever its renewTime says.
    assert 542.0 <= clock.now_s <= 543.0
    spec = stored(api_client)["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == (OURS, 3)
    assert spec["acquireTime"] == spec["renewTime"] == micro_time(clock.wall())
    assert ("node lease taken over", {"lease": f"{NAMESPACE}/{NODE}", "previous_holder": THEIRS}) in log.at("info")


def test_a_released_lease_is_taken_at_once(api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    seed(api_client, "", START - timedelta(seconds=1))
    make_lease().acquire()
    spec = stored(api_client)["spec"]
    assert clock.now_s == 500.0 and spec["holderIdentity"] == OURS
    assert spec["leaseTransitions"] == 0  # a released Lease has no holder to transition from


def test_an_unrenewed_lease_is_taken_after_one_duration_timed_here_not_by_its_renew_time(
        api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    # Renewed "an hour ago" by the remote clock: says nothing here (the remote clock may be an hour behind).
    seed(api_client, THEIRS, START - timedelta(hours=1))
    make_lease(wait_s=30.0).acquire()
    spec = stored(api_client)["spec"]
    assert 540.0 <= clock.now_s <= 541.0 and spec["holderIdentity"] == OURS and spec["leaseTransitions"] == 1


def test_a_crashed_evictd_on_this_host_is_taken_over_at_once(
        api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    crashed = "host-a/boot-1/4321"  # this boot, a PID that no longer runs
    seed(api_client, crashed, START - timedelta(seconds=1))
    make_lease(pid_runs=lambda pid: pid != 4321).acquire()
    assert clock.now_s == 500.0 and stored(api_client)["spec"]["holderIdentity"] == OURS


def test_which_holders_crashed_on_this_host() -> None:
    gone = {4321}.__contains__
    assert crashed_on_this_host("h/boot-1/4321", "h/boot-1/100", lambda pid: not gone(pid))
    assert not crashed_on_this_host("h/boot-1/4322", "h/boot-1/100", lambda pid: not gone(pid))  # still runs
    assert not crashed_on_this_host("h/boot-2/4321", "h/boot-1/100", lambda pid: False)  # another host or boot
    assert not crashed_on_this_host("h/unknown/4321", "h/unknown/100", lambda pid: False)  # boot not known
    assert not crashed_on_this_host("kubelet-node-1", "h/boot-1/100", lambda pid: False)  # not evictd's shape


def test_a_lease_found_held_by_another_at_renewal_is_not_overwritten(
        apiserver: ApiServer, api_client: Any, make_lease: MakeLease, clock: ManualClock, log: LogCapture) -> None:
    lease = make_lease()
    lease.acquire()
    # Another evictd (started while the API did not answer ours, say) takes the Lease over.
    current = stored(api_client)
    current["spec"].update(holderIdentity=THEIRS, renewTime=micro_time(clock.wall()))
    assert raw(api_client, "PUT", f"{LEASE_PATH}/{NODE}", current)[0] == 200
    clock.advance(10)
    lease.renew()
    lease.renew()
    assert stored(api_client)["spec"]["holderIdentity"] == THEIRS
    errors = [event for event, _ in log.at("error")]
    assert errors == ["node lease lost to another evictd: not acting (no eviction, condition or taint) until its "
                      "holder stops renewing it"]  # once, not at every renewal
    assert lease.standby_reason() == f"the node Lease {NAMESPACE}/{NODE} is held by another evictd ({THEIRS})"
    clock.advance(41)
    lease.renew()  # theirs not renewed for 41 s as timed here: ours again
    assert stored(api_client)["spec"]["holderIdentity"] == OURS and lease.renewing()
    assert lease.standby_reason() is None
    assert ("node lease taken back: acting again", {"lease": f"{NAMESPACE}/{NODE}", "previous_holder": THEIRS}) in (
        log.at("info"))


def test_an_api_that_does_not_answer_at_start_does_not_hold_the_start_up(
        apiserver: ApiServer, make_lease: MakeLease, log: LogCapture) -> None:
    apiserver.faults.fail_next(1, code=503, path="/leases")
    lease = make_lease()
    lease.acquire()
    assert not lease.renewing()
    assert log.at("warning")[0][0].startswith("node lease not taken at start")
    lease.renew()
    assert lease.renewing()


# --- the 403 fallback and the release -----------------------------------------------------------------------------


def test_a_forbidden_lease_is_logged_once_and_tried_again_seldom(
        apiserver: ApiServer, make_lease: MakeLease, log: LogCapture) -> None:
    apiserver.faults.fail_next(3, code=403, path="/leases")
    lease = make_lease()
    lease.acquire()
    lease.renew()
    assert not lease.renewing()
    assert lease.next_delay_s() == FORBIDDEN_RETRY_S
    assert [event for event, _ in log.at("error")] == [
        "node lease may not be written (403): the Node heartbeat stays at nodeStatusUpdateFrequency; grant evictd's "
        "Role in deploy/kubernetes/rbac.yaml"]
    lease.renew()
    lease.renew()  # RBAC fixed meanwhile
    assert lease.renewing() and lease.next_delay_s() == pytest.approx(10.2)
    assert len(log.at("error")) == 1


def test_stop_releases_the_lease_and_the_next_evictd_takes_it_at_once(
        api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    first = make_lease(wait_s=30.0)
    first.acquire()
    first.release()
    assert stored(api_client)["spec"]["holderIdentity"] == ""
    assert not first.renewing()
    second = make_lease(identity=THEIRS, wait_s=30.0)
    second.acquire()
    assert clock.now_s == 500.0 and stored(api_client)["spec"]["holderIdentity"] == THEIRS


# --- where and who ----------------------------------------------------------------------------------------------


def test_the_namespace_is_configured_or_the_pods_or_evictd_system(tmp_path: Any) -> None:
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("evictd-prod\n")
    assert lease_namespace("ops", True, str(namespace_file)) == "ops"
    assert lease_namespace("", True, str(namespace_file)) == "evictd-prod"
    assert lease_namespace("", True, str(tmp_path / "missing")) == "evictd-system"
    assert lease_namespace("", False, str(namespace_file)) == "evictd-system"


def test_the_holder_identity_names_host_boot_and_pid(tmp_path: Any) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("1b2c3d4e-aaaa-bbbb-cccc-111122223333\n")
    host, boot_id, pid = holder_identity(4242, str(boot)).split("/")
    assert (boot_id, pid) == ("1b2c3d4e-aaaa-bbbb-cccc-111122223333", "4242") and host
    assert holder_identity(1, str(tmp_path / "missing")).split("/")[1] == "unknown"


def test_a_lease_created_by_another_evictd_meanwhile_is_read_again_not_overwritten(
        apiserver: ApiServer, api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    seed(api_client, THEIRS, START - timedelta(seconds=1))
    # The read answers 404 as if before the other evictd's create: the create then finds it (409 AlreadyExists).
    apiserver.faults.fail_next(1, code=404, method="GET", path="/leases/")
    clock.on_sleep.append(lambda now: renew_theirs(api_client) if now % 10 == 0 else None)  # live
    with pytest.raises(NodeLeaseHeldError):
        make_lease(wait_s=0.0).acquire()
    assert stored(api_client)["spec"]["holderIdentity"] == THEIRS
    assert [r.status for r in apiserver.requests if r.method == "POST"][-1] == 409


# --- issue #38 item 3: unusable Leases, remote clocks, and losing the Lease ------------------------------------------


@pytest.mark.parametrize("renew_time, duration_s", [
    ("9999-12-31T23:59:59.999999Z", 40),  # a valid MicroTime whose expiry is not a time
    (micro_time(START), 2147483647),  # 68 years
    (micro_time(START), 86401),  # longer than evictd's own bound (a day)
], ids=["renew-time-9999", "duration-int32-max", "duration-over-a-day"])
def test_an_unusable_lease_is_expired_at_start_never_a_crash(
        api_client: Any, make_lease: MakeLease, clock: ManualClock, renew_time: str, duration_s: int) -> None:
    status, created = raw(api_client, "POST", LEASE_PATH, lease_body(NAMESPACE, NODE, THEIRS, renew_time, duration_s))
    assert status == 201, created
    make_lease(wait_s=30.0).acquire()
    spec = stored(api_client)["spec"]
    assert clock.now_s == 500.0 and (spec["holderIdentity"], spec["leaseDurationSeconds"]) == (OURS, 40)


def test_an_unusable_lease_written_while_running_does_not_end_the_renewal_thread(
        apiserver: ApiServer, api_client: Any, log: LogCapture) -> None:
    client = evictd_api_client(apiserver)
    lease = NodeLease(client, NAMESPACE, NODE, log=log, duration_s=2, wait_s=0.0, identity=OURS)
    try:
        lease.start()
        current = stored(api_client)
        current["spec"].update(holderIdentity=THEIRS, renewTime="9999-12-31T23:59:59.999999Z")
        assert raw(api_client, "PUT", f"{LEASE_PATH}/{NODE}", current)[0] == 200
        deadline = time.monotonic() + 5
        while stored(api_client)["spec"]["holderIdentity"] != OURS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stored(api_client)["spec"]["holderIdentity"] == OURS  # taken back: the thread lives on
        assert lease.standby_reason() is None
        assert not log.at("error")
    finally:
        lease.stop()
        client.close()


def test_a_live_holder_whose_renew_time_is_an_hour_ahead_is_waited_for_its_duration_not_the_hour(
        api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    ahead = micro_time(START + timedelta(hours=1))
    seed(api_client, THEIRS, START + timedelta(hours=1))
    # It renews twice more (its renewTime pinned an hour ahead of ours: a clock set wrong), then stops.
    clock.on_sleep.append(lambda now: renew_theirs(api_client, ahead) if now in (510.0, 520.0) else None)
    make_lease(wait_s=90.0).acquire()
    assert 560.0 <= clock.now_s <= 561.0  # 40 s after its last change, not an hour
    assert stored(api_client)["spec"]["holderIdentity"] == OURS


def test_a_holder_paused_past_its_lease_stands_by_until_it_asks_the_api_again(
        api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    lease = make_lease(duration_s=40)
    lease.acquire()
    clock.advance(39.0)
    assert lease.standby_reason() is None
    clock.advance(2.0)  # SIGSTOP, a frozen VM: no renewal for 41 s, however the wall clock moved
    assert lease.standby_reason() == (f"the node Lease {NAMESPACE}/{NODE} was not renewed for 41 s (paused past "
                                      "it?): not acting until it is renewed or taken back")
    lease.renew()  # nobody took it meanwhile: renewed, acting again
    assert lease.standby_reason() is None and stored(api_client)["spec"]["holderIdentity"] == OURS


def test_a_holder_resumed_after_another_took_the_lease_stands_by_and_takes_it_back_when_it_stops(
        api_client: Any, make_lease: MakeLease, clock: ManualClock) -> None:
    ours = make_lease()
    ours.acquire()
    clock.advance(45.0)  # paused past its lease
    theirs = make_lease(identity=THEIRS, wait_s=60.0)
    theirs.acquire()  # waits its 41 s (our record unchanged meanwhile), then takes it over
    assert stored(api_client)["spec"]["holderIdentity"] == THEIRS and theirs.standby_reason() is None
    ours.renew()  # resumed: its PUT conflicts, the read shows a live holder
    assert ours.standby_reason() == f"the node Lease {NAMESPACE}/{NODE} is held by another evictd ({THEIRS})"
    for _ in range(3):
        clock.advance(10.0)
        theirs.renew()
        ours.renew()
        assert ours.standby_reason() is not None and stored(api_client)["spec"]["holderIdentity"] == THEIRS
    theirs.release()  # stopped cleanly: ours takes it back at its next attempt
    ours.renew()
    assert ours.standby_reason() is None and stored(api_client)["spec"]["holderIdentity"] == OURS
    assert theirs.standby_reason() is None  # released: it acts no more, it stopped


def test_an_api_that_stops_answering_does_not_stop_evictd_acting(
        apiserver: ApiServer, make_lease: MakeLease, clock: ManualClock) -> None:
    lease = make_lease(duration_s=40)
    lease.acquire()
    apiserver.faults.fail_next(100, code=503, path="/leases")
    for _ in range(8):  # 80 s of failing renewals: nobody can take the Lease through that API either
        clock.advance(10.0)
        lease.renew()
        assert lease.standby_reason() is None


def test_an_api_that_hangs_does_not_stop_evictd_acting_while_its_thread_waits_for_it(
        apiserver: ApiServer, make_lease: MakeLease) -> None:
    """Requests held unanswered until their timeout, as an API server in a thrashing node's memory does (issue 36's
    arena: evictd stood by for 8 s of hard pressure after 69 s without a renewal, every attempt timing out). Scaled
    down, on the real clock: a 2 s Lease renewed every 0.5 s, each request waiting 0.5 s."""
    lease = make_lease(duration_s=2, clock=SYSTEM_CLOCK, request_timeout_s=0.5)
    lease.acquire()
    apiserver.faults.time_out_next(1000, path="/leases")
    lease._thread = threading.Thread(target=lease._run, daemon=True)  # start() without its acquire
    lease._thread.start()
    try:
        reasons = set()
        deadline = time.monotonic() + 4.0  # two lease durations without an answer
        while time.monotonic() < deadline:
            reasons.add(lease.standby_reason())
            time.sleep(0.02)
        assert reasons == {None}
        assert not lease.renewing()  # the Node heartbeat follows the lapse all the same
        apiserver.faults.clear()
        deadline = time.monotonic() + 5.0
        while not lease.renewing() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lease.renewing() and lease.standby_reason() is None
    finally:
        lease.stop()


class TimingOut:
    """The API client as it behaves when the API server does not answer: every Lease request returns after its
    `timeout_s` (advanced on the test's clock) with no answer. `during` is called halfway through each request."""

    def __init__(self, api: Any, clock: ManualClock, during: Callable[[], None]) -> None:
        self._api, self._clock, self._during = api, clock, during

    def _hang(self, verb: str, timeout_s: float) -> None:
        self._clock.advance(timeout_s / 2)
        self._during()
        self._clock.advance(timeout_s / 2)
        raise KubeError(verb, None, f"ReadTimeoutError: Read timed out. (read timeout={timeout_s})")

    def replace_lease(self, namespace: str, name: str, body: Any, *, timeout_s: float) -> Any:
        self._hang("update leases", timeout_s)

    def read_lease(self, namespace: str, name: str, *, timeout_s: float) -> Any:
        self._hang("get leases", timeout_s)


def test_renewals_timing_out_at_the_shipped_timings_never_stand_evictd_by_and_a_pause_still_does(
        make_lease: MakeLease, clock: ManualClock) -> None:
    """The thread's own schedule at the shipped timings (a 40 s Lease renewed every 10 s, requests waiting 10 s, retries
    after 1, 2, 4, 8, 10 s), each request timing out: looked at during every attempt and between attempts, evictd
    keeps acting for five minutes (it stood by after 69 s in issue 36's arena). A pause (no attempt at all for a
    lease duration) still stands it by."""
    lease = make_lease(duration_s=40)
    lease.acquire()
    reasons: list[str | None] = []
    lease._api = TimingOut(lease._api, clock, lambda: reasons.append(lease.standby_reason()))  # type: ignore[assignment]
    began = clock.now_s
    while clock.now_s - began < 300.0:
        clock.advance(lease.next_delay_s())
        reasons.append(lease.standby_reason())
        lease.renew()
        reasons.append(lease.standby_reason())
    assert len(reasons) > 40 and set(reasons) == {None}
    clock.advance(lease.duration_s + 1.0)  # frozen: the thread asked nothing meanwhile
    assert lease.standby_reason() is not None and "paused past it" in lease.standby_reason()


def test_a_holder_paused_in_the_middle_of_a_renewal_stands_by_when_resumed(
        make_lease: MakeLease, clock: ManualClock) -> None:
    """Frozen while a renewal was under way (its request sent, its answer not read): resumed, the attempt still
    looks under way, but one that began more than a lease duration ago is a pause, not an API that hangs."""
    lease = make_lease(duration_s=40)
    lease.acquire()
    seen: list[str | None] = []

    class Frozen:
        def replace_lease(self, namespace: str, name: str, body: Any, *, timeout_s: float) -> Any:
            clock.advance(45.0)  # SIGSTOP here, SIGCONT 45 s later (past the 40 s lease, within 5 request timeouts)
            seen.append(lease.standby_reason())
            raise KubeError("update leases", 409, "the object has been modified")

        def read_lease(self, namespace: str, name: str, *, timeout_s: float) -> Any:
            raise KubeError("get leases", None, "connection reset")

    lease._api = Frozen()  # type: ignore[assignment]
    clock.advance(10.0)
    lease.renew()
    assert seen and seen[0] is not None and "paused past it" in seen[0]


def test_the_attempt_a_resumed_holder_starts_on_waking_does_not_excuse_the_lapse(
        make_lease: MakeLease, clock: ManualClock) -> None:
    """Frozen between renewals past its lease: while the renewal it starts on waking is under way, it stands by (an
    attempt under way excuses a lapse only after one failed since the last renewal; else the resumed holder wrote
    the node while that renewal ran: tests/daemon/test_node_lease_run.py, 1 run in 4 under load)."""
    lease = make_lease(duration_s=40)
    lease.acquire()
    seen: list[str | None] = []

    class Answering:
        def replace_lease(self, namespace: str, name: str, body: Any, *, timeout_s: float) -> Any:
            seen.append(lease.standby_reason())
            raise KubeError("update leases", 409, "the object has been modified")

        def read_lease(self, namespace: str, name: str, *, timeout_s: float) -> Any:
            raise KubeError("get leases", None, "connection reset")

    clock.advance(45.0)  # SIGSTOP between renewals, SIGCONT 45 s later
    lease._api = Answering()  # type: ignore[assignment]
    lease.renew()
    assert seen and seen[0] is not None and "paused past it" in seen[0]


def test_a_renewal_answered_late_does_not_stand_evictd_by_while_the_next_one_waits(
        make_lease: MakeLease, clock: ManualClock) -> None:
    """Issue 36's arena (real API server in the thrashing guest): a renewal sent at 16:40:42 was answered at 16:41:07;
    the next, begun on schedule, was still waiting at 16:41:24, 42 s after the last renewal began, and evictd stood
    by at a hard threshold while the kernel OOM-killed a pod. No attempt had failed since that renewal, so only the
    failure rule could excuse the lapse. Here: a renewal answered 25 s after it was sent, the next one on schedule
    waiting its full request timeout: evictd keeps acting throughout; it stands by once that attempt has failed and
    nothing is under way past the thread's longest wait, or if it had been paused instead."""
    lease = make_lease(duration_s=40)
    lease.acquire()
    api = lease._api
    seen: list[tuple[float, str | None]] = []

    class Slow:
        def __init__(self, answer_after_s: float | None) -> None:
            self.answer_after_s = answer_after_s

        def replace_lease(self, namespace: str, name: str, body: Any, *, timeout_s: float) -> Any:
            if self.answer_after_s is not None:  # answered late
                clock.advance(self.answer_after_s)
                return api.replace_lease(namespace, name, body, timeout_s=timeout_s)
            for _ in range(int(timeout_s)):  # no answer within the request's timeout
                clock.advance(1.0)
                seen.append((clock.now_s, lease.standby_reason()))
            raise KubeError("update leases", None, f"ReadTimeoutError: Read timed out. (read timeout={timeout_s})")

        def read_lease(self, namespace: str, name: str, *, timeout_s: float) -> Any:
            return api.read_lease(namespace, name, timeout_s=timeout_s)

    clock.advance(lease.next_delay_s())
    lease._api = Slow(answer_after_s=25.0)  # type: ignore[assignment]
    renewal_began = clock.now_s
    lease.renew()
    assert lease.standby_reason() is None
    clock.advance(lease.next_delay_s())  # the next attempt, on the thread's schedule
    lease._api = Slow(answer_after_s=None)  # type: ignore[assignment]
    with pytest.raises(KubeError):
        lease._sync(10.0)
    lapsed = [reason for at, reason in seen if at - renewal_began >= lease.duration_s]
    assert lapsed and set(reason for _, reason in seen) == {None}  # past the Lease's duration, still acting
    # The attempt failed: the failure rule carries on until the thread's longest wait has passed with none under way.
    assert lease.standby_reason() is None
    clock.advance(lease.renew_interval_s * 1.1 + 2.0)
    assert lease.standby_reason() is not None and "paused past it" in lease.standby_reason()


def test_an_attempt_begun_late_after_a_late_answer_does_not_excuse_the_lapse(
        make_lease: MakeLease, clock: ManualClock) -> None:
    """The same late answer, then a pause (SIGSTOP) before the next attempt: the attempt the resumed process starts
    on waking began later than the schedule allows after that answer, so it excuses nothing."""
    lease = make_lease(duration_s=40)
    lease.acquire()
    api = lease._api
    seen: list[str | None] = []

    class LateThenWaking:
        late = True

        def replace_lease(self, namespace: str, name: str, body: Any, *, timeout_s: float) -> Any:
            if self.late:
                self.late = False
                clock.advance(25.0)
                return api.replace_lease(namespace, name, body, timeout_s=timeout_s)
            seen.append(lease.standby_reason())
            raise KubeError("update leases", 409, "the object has been modified")

        def read_lease(self, namespace: str, name: str, *, timeout_s: float) -> Any:
            raise KubeError("get leases", None, "connection reset")

    lease._api = LateThenWaking()  # type: ignore[assignment]
    clock.advance(lease.next_delay_s())
    lease.renew()
    clock.advance(30.0)  # frozen between renewals: 55 s after the last renewal began
    lease.renew()
    assert seen and seen[0] is not None and "paused past it" in seen[0]

"""The shutdown deadline of `evictd run` (evictd.daemon.ShutdownDeadline, Daemon.request_stop)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from evictd.daemon import Daemon, ShutdownDeadline


def test_an_armed_deadline_expires_and_a_disarmed_one_does_not() -> None:
    expired = threading.Event()
    deadline = ShutdownDeadline(0.2, expired.set)
    deadline.arm()
    assert expired.wait(5), "the deadline never expired"
    deadline.disarm()

    quiet = threading.Event()
    disarmed = ShutdownDeadline(0.5, quiet.set)
    disarmed.arm()
    disarmed.disarm()  # the loop finished in time
    assert not quiet.wait(1.0)

    never = ShutdownDeadline(0.1, quiet.set)
    never.disarm()  # no signal ever came: the watchdog thread ends too
    assert not quiet.wait(0.3)
    assert not any(t.name == "evictd-shutdown-deadline" for t in threading.enumerate())


def test_a_stop_request_starts_no_thread_and_takes_no_lock() -> None:
    """What a signal handler runs must not start a thread: Thread.start takes threading's internal locks and
    waits for the new thread, which a handler interrupting the main thread inside threading cannot afford.
    The watchdog runs from `install_signal_handlers` on; arming it is one os.write."""
    waiter = SimpleNamespace(wake=lambda: None, close=lambda: None)
    daemon = Daemon(manager=None, waiter=waiter, metrics=None, health=SimpleNamespace(stopping=False),  # type: ignore[arg-type]
                    interval_s=1.0, dry_run=True, node_name="n", shutdown_timeout_s=30.0)
    daemon.install_signal_handlers()
    before = {t.ident for t in threading.enumerate()}
    try:
        daemon.request_stop("SIGTERM")
        assert daemon.stopping and daemon.stop_reason == "SIGTERM"
        assert {t.ident for t in threading.enumerate()} == before
    finally:
        assert daemon._deadline is not None
        daemon._deadline.disarm()

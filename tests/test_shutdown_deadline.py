"""The stop signal of `evictd run` and its shutdown deadline (evictd.run.stop_signal)."""

from __future__ import annotations

import signal
import threading

from evictd.run.stop_signal import ShutdownDeadline, StopSignal
from log_capture import LogCapture


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
    The watchdog runs from `install` on; arming it is one os.write."""
    woken: list[bool] = []
    stop = StopSignal(lambda: woken.append(True), 30.0, log=None)
    stop.install()
    before = {t.ident for t in threading.enumerate()}
    try:
        stop.request("SIGTERM")
        stop.request("SIGINT")  # a second request changes nothing
        assert stop.is_set() and stop.reason == "SIGTERM" and woken == [True]
        assert {t.ident for t in threading.enumerate()} == before
    finally:
        stop.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_a_stop_that_outlives_its_deadline_logs_and_exits_with_status_1() -> None:
    log, exited = LogCapture(), threading.Event()
    statuses: list[int] = []

    def exit_(status: int) -> None:
        statuses.append(status)
        exited.set()

    stop = StopSignal(lambda: None, 0.2, log, exit=exit_)
    stop.install()
    try:
        assert not exited.wait(0.4), "the deadline runs only once a stop was requested"
        stop.request("SIGTERM")
        assert exited.wait(5), "the deadline never passed"
        assert statuses == [1]
        assert log.lines == [("error", "shutdown deadline passed with the cycle still running; exiting", {"deadline_s": 0.2})]
    finally:
        stop.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)

"""The stop signal of `evictd run` and its shutdown deadline (evictd.run.stop_signal)."""

from __future__ import annotations

import signal
import threading
import time

from evictd.adapters.notifiers import Waiter
from evictd.core.wake import Wake
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


def test_a_sigterm_delivered_to_another_thread_ends_the_main_threads_wait_at_once() -> None:
    """The kernel may deliver a process's SIGTERM to any of its threads; Python runs the handler in the main thread
    only when that thread runs bytecode again. Blocked in the loop's poll (an hour's interval), the main thread then
    slept on, and a test's `evictd run` outlived its 15 s stop in 1 of 45 runs. The waiter's descriptor, given to
    `signal.set_wakeup_fd`, ends the poll wherever the signal lands."""
    waiter = Waiter(time.monotonic)
    stop = StopSignal(waiter.wake, 30.0, log=None, wakeup_fd=waiter.wakeup_fd)
    stop.install()
    other = threading.Thread(target=time.sleep, args=(5.0,), daemon=True)
    other.start()
    try:
        assert other.ident is not None
        threading.Timer(0.2, signal.pthread_kill, (other.ident, signal.SIGTERM)).start()
        started = time.monotonic()
        causes = waiter.wait(20.0)
        waited_s = time.monotonic() - started
        assert causes == [Wake.SIGNAL], causes
        assert stop.is_set() and stop.reason == "SIGTERM"
        assert waited_s < 10.0, f"the wait ended only after {waited_s:.1f} s"  # the handler's doing, not a timeout
    finally:
        stop.close()
        waiter.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)

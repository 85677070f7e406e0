"""RuntimeStatsWorker: the runtime's container stats waited for at most a given time, the call going on after.

The call is a function the test holds up on an event (what a runtime that answers late does to the caller), a real
Unix socket that accepts and never answers (a hung runtime, through the real CRI client and `CriRuntime`), and a
process that can start no thread (a node out of pids).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evictd.adapters.runtime_node import CYCLE_READ_TIMEOUT_S, RuntimeFilesystems
from evictd.adapters.runtime_stats_worker import NOT_WAITED_FOR, RuntimeStatsWorker
from evictd.core.errors import CRIError
from evictd.run.runtime_link import CriRuntime
from hung_socket import hung_cri_client
from out_of_pids import run_without_new_tasks

ANSWER = {"uid-1": ()}
LATER = {"uid-2": ()}
# Room for a loaded machine around a wait the test expects to end at a given time.
SLACK_S = 1.0


class HeldCall:
    """A runtime call that answers `answers` in turn, each once the test releases it; counts the calls and the
    threads they ran on."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.release = threading.Event()
        self.calls = 0
        self.threads: list[str] = []

    def __call__(self) -> object:
        self.calls += 1
        self.threads.append(threading.current_thread().name)
        self.release.wait(30)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_read_with_no_wait_given_and_nothing_under_way_is_a_plain_call_on_the_callers_thread() -> None:
    call = HeldCall(ANSWER)
    call.release.set()
    worker = RuntimeStatsWorker(call)  # type: ignore[arg-type]
    assert worker.stats(None) == ANSWER
    assert call.threads == [threading.current_thread().name]


def test_a_call_not_answered_within_the_wait_ends_the_wait_and_its_answer_is_kept_as_a_late_one() -> None:
    call = HeldCall(ANSWER, LATER)
    worker = RuntimeStatsWorker(call, thread_name="stats-test")  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(CRIError) as caught:
        worker.stats(0.2)
    waited = time.monotonic() - started
    assert (caught.value.method, caught.value.code) == ("ListContainerStats", NOT_WAITED_FOR)
    assert 0.2 <= waited < 0.2 + SLACK_S
    assert worker.take_late() == (False, None), "nothing came yet"
    call.release.set()
    deadline = time.monotonic() + 10
    while (late := worker.take_late()) == (False, None) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert late == (True, ANSWER), "the answer that came after the wait ended is kept"
    assert worker.take_late() == (False, None), "once"
    assert worker.stats(0.2) == LATER, "the next read asks again, on the same thread"
    assert call.threads == ["stats-test", "stats-test"]


def test_a_read_while_a_call_is_under_way_waits_for_that_call_instead_of_starting_a_second() -> None:
    call = HeldCall(ANSWER)
    worker = RuntimeStatsWorker(call)  # type: ignore[arg-type]
    with pytest.raises(CRIError):
        worker.stats(0.05)
    threading.Timer(0.2, call.release.set).start()
    assert worker.stats(None) == ANSWER, "the call under way, waited for to its end"
    assert call.calls == 1
    assert worker.take_late() == (False, None), "an answer a caller waited for is not a late one"


def test_a_read_that_may_stop_waiting_does_not_wait_again_for_a_call_an_earlier_read_left_under_way() -> None:
    """The call is overdue already: on the real node the 200 MiB/s leak's hard crossing waited 0.5 s more on the
    ListContainerStats the soft crossing's cycle had left under way, and the kernel OOM-killed the leak first."""
    call = HeldCall(ANSWER)
    worker = RuntimeStatsWorker(call)  # type: ignore[arg-type]
    with pytest.raises(CRIError):
        worker.stats(0.05)
    started = time.monotonic()
    with pytest.raises(CRIError) as caught:
        worker.stats(5.0)
    assert time.monotonic() - started < SLACK_S, "not the 5 s it may wait for a call of its own"
    assert caught.value.code == NOT_WAITED_FOR and "an earlier read left under way" in caught.value.detail
    assert call.calls == 1, "no second call"
    call.release.set()
    deadline = time.monotonic() + 10
    while (late := worker.take_late()) == (False, None) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert late == (True, ANSWER), "its answer, when it came, is kept for the source"


def test_what_the_call_raises_is_raised_to_the_caller_that_waits_and_the_thread_serves_the_next_call() -> None:
    failure = CRIError("ListContainerStats", "UNAVAILABLE", "connection refused")
    call = HeldCall(failure, ANSWER)
    call.release.set()
    worker = RuntimeStatsWorker(call)  # type: ignore[arg-type]
    with pytest.raises(CRIError) as caught:
        worker.stats(5.0)
    assert caught.value is failure
    assert worker.stats(5.0) == ANSWER


def test_against_a_hung_runtime_an_urgent_read_waits_its_short_time_and_the_next_read_the_rest_of_the_deadline(
        tmp_path: Path) -> None:
    """A socket that accepts and never speaks HTTP/2, through the real CRI client and `CriRuntime` (each read's
    deadline CYCLE_READ_TIMEOUT_S): the urgent read gives up after its wait, the call goes on, and the next read
    waits for that call's end (its DEADLINE_EXCEEDED), not for a second call's."""
    with hung_cri_client(tmp_path) as client:
        runtime = CriRuntime(client, RuntimeFilesystems(client, str(tmp_path), str(tmp_path)), gc=None)
        worker = RuntimeStatsWorker(runtime.container_stats)
        started = time.monotonic()
        with pytest.raises(CRIError) as urgent:
            worker.stats(0.25)
        urgent_s = time.monotonic() - started
        with pytest.raises(CRIError) as next_read:
            worker.stats(None)
        both_s = time.monotonic() - started
    assert urgent.value.code == NOT_WAITED_FOR and 0.25 <= urgent_s < 0.25 + SLACK_S
    assert next_read.value.code == "DEADLINE_EXCEEDED"
    assert CYCLE_READ_TIMEOUT_S <= both_s < CYCLE_READ_TIMEOUT_S + SLACK_S, "one call's deadline, not two"


# The worker in a process that can start no thread: it reads with a short wait and records on which thread it asked.
OUT_OF_PIDS_SETUP = """
from evictd.adapters.runtime_stats_worker import RuntimeStatsWorker

threads = []
def ask():
    threads.append(threading.current_thread().name)
    return {"uid-1": []}
"""
OUT_OF_PIDS_READ = """
outcome = {"answer": RuntimeStatsWorker(ask).stats(0.25), "threads": threads}
"""


def test_where_no_thread_can_start_the_read_is_a_plain_call_on_the_callers_thread() -> None:
    """A node out of pids (the arena's fork bomb): the read is made as before, waiting for the call's end, rather
    than failing for want of a thread."""
    outcome = run_without_new_tasks(OUT_OF_PIDS_SETUP, OUT_OF_PIDS_READ)
    assert outcome["answer"] == {"uid-1": []}
    assert outcome["threads"] == ["MainThread"]

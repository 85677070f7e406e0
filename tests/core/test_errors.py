"""A reading's problem kept after the cycle (`attempt`) keeps its message, not the frames it was raised through."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from evictd.core.errors import SampleError, attempt, without_traceback


class Readings:
    """Stands for what a cycle holds in its frames while it reads (its Summary, its pods)."""


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Only reference counting frees objects: what a reference cycle holds stays until the test ends."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def failing_read() -> None:
    try:
        raise OSError(2, "No such file or directory")
    except OSError as exc:
        raise SampleError("/sys/fs/cgroup/memory/kubepods/memory.oom_control", exc.strerror) from None


def read_in_a_cycle(problems: list[SampleError]) -> weakref.ref[Readings]:
    readings = Readings()
    attempt(failing_read, problems)
    return weakref.ref(readings)


def test_a_kept_problem_does_not_keep_the_cycle_that_read_it(no_gc: None) -> None:
    problems: list[SampleError] = []
    readings = read_in_a_cycle(problems)
    assert readings() is None
    assert [(problem.source, problem.reason) for problem in problems] == [
        ("/sys/fs/cgroup/memory/kubepods/memory.oom_control", "No such file or directory")]


def test_a_reading_that_works_is_returned() -> None:
    problems: list[SampleError] = []
    assert attempt(lambda: 42, problems) == 42
    assert problems == []


def test_without_traceback_clears_the_whole_chain() -> None:
    try:
        try:
            try:
                raise KeyError("inner")
            except KeyError as inner:
                raise OSError("cause") from inner
        except OSError:
            raise SampleError("source", "reason")  # noqa: B904 (the implicit __context__ is what is tested)
    except SampleError as exc:
        raised = exc
        kept = without_traceback(exc)
    assert kept is raised
    chain = [kept, kept.__context__, kept.__context__.__cause__]  # type: ignore[union-attr]
    assert [type(link).__name__ for link in chain] == ["SampleError", "OSError", "KeyError"]
    assert [link.__traceback__ for link in chain] == [None, None, None]  # type: ignore[union-attr]

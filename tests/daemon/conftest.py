"""Fixtures of the daemon tests: `evictd run` processes that never outlive the test that started them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from evictd_process import EvictdProcess


@pytest.fixture
def evictd_processes() -> Iterator[list[EvictdProcess]]:
    """A list the test appends its EvictdProcess objects to; every one still running is killed at the end."""
    started: list[EvictdProcess] = []
    yield started
    for process in started:
        process.kill()

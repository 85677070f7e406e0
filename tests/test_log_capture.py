"""The tests' one logger stand-in has every method of evictd's Log protocol and keeps what each was told."""

from __future__ import annotations

from evictd.log import Log
from log_capture import LogCapture

LEVELS = [name for name in vars(Log) if not name.startswith("_")]


def test_every_level_of_the_log_protocol_is_kept_with_its_event_and_fields() -> None:
    assert sorted(LEVELS) == ["error", "exception", "info", "warning"]
    log = LogCapture()
    for number, level in enumerate(LEVELS):
        getattr(log, level)(f"event {number}", number=number)
    assert log.lines == [(level, f"event {n}", {"number": n}) for n, level in enumerate(LEVELS)]
    assert log.at("warning") == [(f"event {LEVELS.index('warning')}", {"number": LEVELS.index("warning")})]
    assert log.named("event 0") == [{"number": 0}]
    assert log.events() == [f"event {n}" for n in range(len(LEVELS))]
    assert len(log.take()) == len(LEVELS) and log.lines == [] and log.take() == []

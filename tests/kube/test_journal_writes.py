"""An eviction journal that cannot be written: a SampleError naming the file, and the failure reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from evictd.core.errors import SampleError
from evictd.kube.journal import EvictionJournal, JournalEntry


def entry() -> JournalEntry:
    return JournalEntry(uid="uid-hog", namespace="default", name="hog", signal="memory.available", grace_period_s=1,
                        message="m", reason="Evicted", conditions=[], annotations={}, decided_at=0.0)


def test_a_journal_file_that_cannot_be_written_is_a_sample_error_and_counted(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder should be")  # root ignores permissions, not this
    failures: list[None] = []
    journal = EvictionJournal(str(blocker / "evictions.json"), on_write_error=lambda: failures.append(None))
    with pytest.raises(SampleError) as caught:
        journal.record(entry())
    assert caught.value.source == str(blocker / "evictions.json")
    assert "eviction journal not written" in caught.value.reason
    assert len(failures) == 1
    assert [e.uid for e in journal.pending()] == ["uid-hog"], "the decision is kept in memory and retried"
    blocker.unlink()
    journal.update("uid-hog", deleted=True)  # the disk is back: the next write goes through
    assert len(failures) == 1 and (blocker / "evictions.json").exists()

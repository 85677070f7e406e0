"""Kept descriptors (``pread`` at offset 0) on a real cgroup v2 kernel (the user-mode Linux guest of tests/uml).

One guest boot runs tests/uml/guest_kept_files.py with this checkout's ``src`` first on the path; this asserts on
the JSON it wrote: values read through kept descriptors follow the cgroup (memory, limit, processes), a removed
cgroup fails as it does without kept descriptors, a cgroup made again under the same path is read anew, and the
descriptors of a cgroup no longer read are closed. Fails, never skips, when the guest kernel is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from uml_guest import boot_guest

MiB = 1 << 20
ALLOC_BYTES = 32 * MiB
KEPT = {"memory.current", "memory.stat", "memory.max", "pids.current"}
GUEST = 'PYTHONPATH="$EVICTD_REPO/src:$EVICTD_REPO/tests/uml" "$EVICTD_PYTHON" ' \
        '"$EVICTD_REPO/tests/uml/guest_kept_files.py" "$UML_OUT" > "$UML_OUT/kept.log" 2>&1\n'


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    run = boot_guest(GUEST, tmp_path_factory.mktemp("kept") / "out", mem_mib=256, timeout_s=120)
    if not (run.out / "kept.json").exists():
        raise AssertionError(f"the guest wrote no kept.json:\n{run.text('kept.log')}")
    yield json.loads(run.text("kept.json"))


def test_kept_descriptors_read_fresh_v2_values(seen: dict[str, Any]) -> None:
    before, after = seen["before"], seen["after"]
    assert set(seen["held_before"]) == KEPT
    assert seen["held_after"] == seen["held_before"]  # the same descriptors, read again
    assert after["usage"] - before["usage"] >= ALLOC_BYTES
    assert after["working_set"] - before["working_set"] >= ALLOC_BYTES
    assert (before["limit"], after["limit"]) == (None, 256 * MiB)
    assert (before["tasks"], after["tasks"]) == (0, 1)


def test_removed_v2_cgroup_fails_as_without_kept_descriptors(seen: dict[str, Any]) -> None:
    assert seen["removed_kept"] == seen["removed_opened"]
    assert seen["removed_kept"][0].endswith("/kept/pod/memory.current")
    assert seen["removed_kept"][1] == "No such file or directory"
    assert seen["held_removed"] == {}


def test_recreated_v2_cgroup_is_read_anew_and_idle_descriptors_closed(seen: dict[str, Any]) -> None:
    recreated = seen["recreated"]
    assert recreated["limit"] is None and recreated["usage"] >= ALLOC_BYTES and recreated["tasks"] == 1
    assert set(seen["held_recreated"]) == KEPT
    assert seen["held_recreated"] == seen["inodes_now"]  # on the new cgroup's files
    assert seen["held_after_two_idle_cycles"] == {}

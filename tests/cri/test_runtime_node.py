"""RuntimeFilesystems against a real containerd: the image and container folders come from ImageFsInfo.

The configured folders stand in until the runtime names its own; a runtime that is down or has not measured
its filesystems yet is asked again at the next call, one that answered only a minute later.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from containerd_harness import Containerd

from clocks import ManualClock
from evictd.adapters.runtime_node import FILESYSTEM_REFRESH_S, RuntimeFilesystems
from evictd.cri.client import CriClient

ANSWER_TIMEOUT_S = 10.0


def named_by_runtime(filesystems: RuntimeFilesystems, configured: tuple[str, str]) -> tuple[str, str]:
    """Call paths() until the runtime's folders replace the configured ones (containerd measures its
    filesystems about a second after it starts); return them."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while (paths := filesystems.paths()) == configured:
        assert time.monotonic() < deadline, f"ImageFsInfo never named a filesystem ({filesystems.last_error})"
        time.sleep(0.2)
    return paths


def test_the_runtime_names_its_snapshotter_folder(containerd: Containerd, tmp_path: Path) -> None:
    configured = (str(tmp_path / "images"), str(tmp_path / "containers"))
    filesystems = RuntimeFilesystems(containerd.cri, *configured, clock=ManualClock())
    snapshots = str(containerd.snapshotter_dir)
    assert named_by_runtime(filesystems, configured) == (snapshots, snapshots)
    assert filesystems.last_error is None


def test_a_runtime_down_at_first_is_asked_again_at_the_next_call(unstarted_containerd: Containerd,
                                                                  tmp_path: Path) -> None:
    configured = (str(tmp_path / "images"), str(tmp_path / "containers"))
    clock = ManualClock()
    client = CriClient(unstarted_containerd.endpoint, 5.0)
    try:
        filesystems = RuntimeFilesystems(client, *configured, clock=clock)
        assert filesystems.paths() == configured
        assert filesystems.last_error is not None and "UNAVAILABLE" in str(filesystems.last_error)

        unstarted_containerd.start()  # no time passes on the clock: no minute to wait for
        snapshots = str(unstarted_containerd.snapshotter_dir)
        assert named_by_runtime(filesystems, configured) == (snapshots, snapshots)
        assert filesystems.last_error is None

        # Answered: the next question is a minute away, so a runtime gone meanwhile is not noticed before.
        assert unstarted_containerd.process is not None
        unstarted_containerd.process.send_signal(signal.SIGTERM)
        unstarted_containerd.process.wait(timeout=10)
        clock.now_s += FILESYSTEM_REFRESH_S - 1
        assert filesystems.paths() == (snapshots, snapshots) and filesystems.last_error is None
        clock.now_s += 1
        assert filesystems.paths() == (snapshots, snapshots), "the last folders the runtime named are kept"
        assert filesystems.last_error is not None and "UNAVAILABLE" in str(filesystems.last_error)
    finally:
        client.close()

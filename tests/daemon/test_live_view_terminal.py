"""The live view of a real `evictd run` in a real terminal (tmux) of 80x24 and 100x30: the header, the signal table
and the pinned start-up warnings are on screen, the events are sentences, and no line is longer than the terminal.

tmux interprets what evictd writes; `capture-pane -J` joins a line the terminal wrapped, so a joined line longer
than the width is one that overflowed. The warnings are made certain: `oomScoreAdj: 500` (raising it needs no
privilege) exposes evictd to the OOM killer, and a KubeletConfiguration without systemReserved or kubeReserved
reserves no memory. tmux is a system dependency (`make system-deps`): without it the test fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
---
apiVersion: evictd.io/v1alpha1
kind: EvictdConfiguration
housekeepingInterval: 1s
metricsBindAddress: 127.0.0.1:0
oomScoreAdj: 500
stateDir: {state}
"""
# A key=value pair as the old events area showed them (`status=ok`, `advice=`).
KEY_VALUE = re.compile(r"\b[a-z_]+=")


def screen_at(tmp_path: Path, columns: int, rows: int) -> list[str]:
    """The lines of the terminal once evictd has drawn its third cycle (wrapped lines joined)."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is missing: install it (make system-deps)")
    config = tmp_path / f"config-{columns}.yaml"
    config.write_text(CONFIG.format(state=tmp_path / f"state-{columns}"))
    tmux = ["tmux", "-L", f"evictd-live-{os.getpid()}-{columns}"]
    command = (f"cd {ROOT} && {sys.executable} -m evictd run --config {config} --cycles 30; "
               "echo after-$?; sleep 60")
    subprocess.run([*tmux, "new-session", "-d", "-x", str(columns), "-y", str(rows), command], check=True,
                   timeout=30)
    try:
        deadline = time.monotonic() + 60
        screen = ""
        while time.monotonic() < deadline and not re.search(r" - cycle ([3-9]|\d\d) at ", screen):
            time.sleep(0.3)
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-J"], capture_output=True, text=True,
                                    check=True, timeout=30).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, timeout=30)
    assert "after-" not in screen, f"evictd stopped early:\n{screen}"
    return screen.rstrip("\n").splitlines()


@pytest.mark.parametrize(("columns", "rows"), [(80, 24), (100, 30)])
def test_the_live_view_fits_the_terminal_with_signals_and_pinned_warnings(tmp_path: Path, columns: int,
                                                                         rows: int) -> None:
    lines = screen_at(tmp_path, columns, rows)
    text = "\n".join(lines)
    assert lines[0].startswith("evictd on ") and " - cycle " in lines[0], text
    assert lines[1].startswith("node conditions: "), text
    assert lines[3].split()[:3] == ["SIGNAL", "STATE", "AVAILABLE"], text
    table = {line.split()[0]: line.split()[1] for line in lines[4:] if line.split() and "." in line.split()[0]}
    assert table.get("memory.available") == "ok" and table.get("nodefs.available") == "ok", text
    warnings = lines.index(next(line for line in lines if line.startswith("warnings (pinned until resolved")))
    pinned = [line for line in lines[warnings + 1:] if line.startswith("! ")]
    assert any(line.startswith("! oom_score_adj 500 exposes evictd") for line in pinned), text
    assert any("no memory is reserved" in line for line in pinned), text
    assert len(lines) <= rows and all(len(line) <= columns for line in lines), \
        f"{max(len(line) for line in lines)} columns, {len(lines)} rows:\n{text}"
    assert "recent events:" in lines, text
    events = lines[lines.index("recent events:") + 1:]
    assert events and not [line for line in events if KEY_VALUE.search(line)], text

"""A real `evictd run` that cannot read the signals it has thresholds for says so (issue #43, item 2): within three
cycles a warning, `evictd_signal_blind` 1, `/readyz` 503 while `/healthz` stays 200 (alive: a restart would not
make the stats readable). The stats source here is a kubelet Summary URL where nothing listens."""

from __future__ import annotations

import socket
from pathlib import Path

from evictd_process import EvictdProcess, start_evictd

from polling import wait_until


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_signal_with_a_threshold_unread_three_cycles_in_a_row_is_blind_loudly_and_not_ready(
    tmp_path: Path, evictd_processes: list[EvictdProcess]
) -> None:
    token = tmp_path / "kubelet-token"
    token.write_text("kubelet-reader-token")
    process = start_evictd(
        tmp_path, evictd_processes, kubelet="evictionHard: {memory.available: 100Mi}\n",
        evictd=f"statsSource: kubelet\nkubeletSummaryURL: http://127.0.0.1:{closed_port()}/stats/summary\n"
               f"kubeletTokenFile: {token}\nhousekeepingInterval: 200ms\npsiWakeups: false\nmemcgWakeups: false\n")
    blind = process.wait_event("signal blind: no figure for a signal with a threshold; nothing can act on it",
                               signal="memory.available")
    assert blind["cycles"] == 3, "blind from the third cycle in a row without a figure, not before"
    assert process.metric("evictd_signal_blind", signal="memory.available") == 1
    assert wait_until(lambda: process.http("/readyz")[0] == 503, 5), process.http("/readyz")
    status, text = process.http("/healthz")
    assert status == 200 and "blind: no figure for memory.available" in text, (status, text)
    cycles = process.metric("evictd_cycles_total")
    assert wait_until(lambda: process.metric("evictd_cycles_total") >= cycles + 5, 10)
    assert len([e for e in process.events if e.get("event", "").startswith("signal blind")]) == 1, \
        "one warning per episode, not one per cycle"
    assert process.stop() == 0

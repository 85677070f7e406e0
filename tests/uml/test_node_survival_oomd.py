"""The arena's stand-in for PID 1's io.systemd.ManagedOOM varlink side (bench/node_survival_oomd.py), on the host:
what systemd-oomd 252 sends and expects (src/oom/oomd-manager.c acquire_managed_oom_connect and
process_managed_oom_message; src/core/core-varlink.c). The whole protector runs in the arena's guest only."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from node_survival_oomd import SUBSCRIBE, ManagedOOMServer, limit_scaled, managed_cgroups


def test_the_limit_is_scaled_as_systemd_scales_a_percentage() -> None:
    # UINT32_SCALE_FROM_PERMYRIAD: 100 % is 2^32 - 1, rounded to the closest.
    assert limit_scaled(50) == 2147483648
    assert limit_scaled(100) == 2**32 - 1
    assert limit_scaled(60) == 2576980377


def exchange(address: Path, message: dict[str, object]) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
        peer.connect(str(address))
        peer.sendall(json.dumps(message).encode() + b"\0")
        reply = b""
        while not reply.endswith(b"\0"):
            reply += peer.recv(4096)
    answer: dict[str, object] = json.loads(reply[:-1])
    return answer


def test_oomd_s_subscription_is_answered_with_the_pods_cgroup_as_a_continuing_reply(tmp_path: Path) -> None:
    server = ManagedOOMServer(tmp_path / "io.system.ManagedOOM")
    try:
        # What oomd sends (its debug log in the guest): parameters empty, "more".
        answer = exchange(server.address, {"method": SUBSCRIBE, "parameters": {}, "more": True})
        assert answer == {"parameters": managed_cgroups(), "continues": True}
        assert managed_cgroups()["cgroups"] == [{"mode": "kill", "path": "/kubepods",
                                                 "property": "ManagedOOMMemoryPressure", "limit": 2147483648}]
        assert exchange(server.address, {"method": "io.systemd.Other"})["error"] == \
            "org.varlink.service.MethodNotFound"
        assert server.subscribed()
    finally:
        server.close()
    assert not server.address.exists()

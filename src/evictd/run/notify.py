"""systemd's notification protocol (sd_notify), for `Type=notify` units with a watchdog.

When systemd starts a `Type=notify` service it passes a datagram socket in `$NOTIFY_SOCKET` (a path, or an
abstract socket name starting with `@`). The daemon sends `READY=1` once it is serving, `WATCHDOG=1` at
least every `WatchdogSec` (here: once per housekeeping cycle), and `STOPPING=1` when it shuts down. Outside
systemd the variable is unset and every call does nothing. Send failures are swallowed: systemd being
unreachable must never stop the eviction loop.
"""

from __future__ import annotations

import contextlib
import os
import socket


class SystemdNotifier:
    """Sends sd_notify messages to `$NOTIFY_SOCKET`; a no-op when there is none."""

    def __init__(self) -> None:
        address = os.environ.get("NOTIFY_SOCKET", "")
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._socket: socket.socket | None = None
        if self._address:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    def notify(self, state: str) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.sendto(state.encode(), self._address)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

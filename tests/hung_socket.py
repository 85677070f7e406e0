"""A container runtime that hangs, as evictd's CRI client meets one: a Unix socket that accepts connections (the kernel
completes them) but never speaks HTTP/2, so every call waits for its deadline.

`hung_cri_client(folder, timeout_s)` yields a real `CriClient` (its own deadline `timeout_s`) on such a socket under
`folder`, closed afterwards.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evictd.cri.client import CriClient


@contextmanager
def hung_cri_client(folder: Path, timeout_s: float = 10.0) -> Iterator[CriClient]:
    path = folder / "hung.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(8)  # accepts, never answers
        client = CriClient(f"unix://{path}", timeout_s)
        try:
            yield client
        finally:
            client.close()

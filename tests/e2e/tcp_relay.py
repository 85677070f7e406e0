"""An API server address that is down until the test brings it up: a TCP port that refuses connections until
`start()`, then relays each connection to the real server's port, bytes unchanged (TLS stays end to end).

While down the port is held by a bound socket that does not listen: a connection is refused as by a closed port,
and no other socket can take the port meanwhile. (A port only remembered as free was taken once in CI: `start()`
failed with EADDRINUSE, by another process's connection or by the client's own, which, connecting to a closed
port of its own host, may be given that very port as its source and connect to itself.)

A kubeconfig naming `TcpRelay.url` makes a client meet what an unreachable API server looks like from a node
(connection refused), and then the very same server coming back, without restarting anything. `stop()` closes
the port and every relayed connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading

CHUNK_BYTES = 65536


class TcpRelay:
    """127.0.0.1:`port` (bound now, not listening yet) relayed to 127.0.0.1:`target_port` once started."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._held: socket.socket | None = socket.socket()
        self._held.bind(("127.0.0.1", 0))
        self.port = int(self._held.getsockname()[1])
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        listener, self._held = self._held, None
        if listener is None:  # started again after a stop: the port is bound anew
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="tcp-relay", daemon=True).start()

    def stop(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(CHUNK_BYTES):
                sink.sendall(chunk)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

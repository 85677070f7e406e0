"""A real pipe filled to the brim, as a reader that stopped reading leaves it: the writer's next write blocks."""

from __future__ import annotations

import os
import time

FILLER = b'{"event": "filler"}\n'


def fill_pipe(write_end: str, rounds: int = 1) -> int:
    """Write filler lines through a non-blocking descriptor of its own to `write_end` (a /proc/<pid>/fd/<n> path
    of a pipe's write end) until the pipe takes no more, `rounds` times 0.2 s apart (a reader may still take a
    last chunk); return the bytes written. The other descriptors of the pipe stay blocking."""
    side = os.open(write_end, os.O_WRONLY | os.O_NONBLOCK)
    written = 0
    try:
        for round_ in range(rounds):
            if round_:
                time.sleep(0.2)
            while True:
                try:
                    written += os.write(side, FILLER)
                except BlockingIOError:
                    break
    finally:
        os.close(side)
    return written

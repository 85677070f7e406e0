"""Names each Python thread of the process at the OS (``/proc/<pid>/task/<tid>/comm``), for the arena's trace.

Put on PYTHONPATH by bench/node_survival_guest.py for evictd under EVICTD_ARENA_TRACE=1 only: the trace then says
which of evictd's threads took the CPU when (the kernel knows a thread only by its tid otherwise).
"""
import ctypes
import threading

PR_SET_NAME = 15  # prctl(2); the kernel keeps 15 bytes of the name
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]


def _named(self: threading.Thread) -> None:
    _prctl(PR_SET_NAME, self.name.encode()[:15], 0, 0, 0)
    _bootstrap(self)


threading.Thread._bootstrap_inner = _named  # type: ignore[attr-defined]

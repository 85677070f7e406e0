"""evictd: a standalone, kubelet-compatible node-pressure eviction daemon.

`evictd.core` is the pure decision engine (standard library only, no I/O, no clock); everything else is the
shell around it: `adapters`, `cri` and `kube` talk to one outside system each, `run` is the live daemon,
`record` what it writes down and reads back, `observe` what people see of it, and `commands` with `cli` the
command line.
"""

from __future__ import annotations

import platform

# The one place the version is said; metadata, --version, User-Agent, image and chart follow (test_release.py).
__version__ = "0.1.0"


def user_agent() -> str:
    """evictd's User-Agent in every HTTP request, `evictd/<version> (<os>/<arch>)` as client-go words its default:
    the API server names managedFields after its first segment, so writes show as manager `evictd`."""
    return f"evictd/{__version__} ({platform.system().lower()}/{platform.machine()})"

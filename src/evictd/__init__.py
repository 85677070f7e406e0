"""evictd: a standalone, kubelet-compatible node-pressure eviction daemon.

`evictd.core` is the pure decision engine (standard library only, no I/O, no clock); everything else is the
shell around it: configuration loading, the command line, and adapters to the outside world.
"""

from __future__ import annotations

__version__ = "0.1.0"

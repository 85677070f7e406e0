"""What the kernel accepts as a PSI trigger (Documentation/accounting/psi.rst), checked before anything is opened.

The configuration checks psiStallThreshold and psiWindow with it, so `check-config` refuses what `run` would;
the PSI notifier checks it again with the process's real privilege.
"""

from __future__ import annotations

from evictd.core.duration import format_go_duration_ns
from evictd.core.errors import ConfigError

PSI_KINDS = ("some", "full")
# Documented PSI trigger window range (newer kernels accept shorter; no use to a 10 s loop).
PSI_WINDOW_MIN_US = 500_000
PSI_WINDOW_MAX_US = 10_000_000
# Without CAP_SYS_RESOURCE the kernel only takes windows that are multiples of its 2 s averaging period.
PSI_UNPRIVILEGED_WINDOW_STEP_US = 2_000_000
STALL_KEY = "psiStallThreshold"
WINDOW_KEY = "psiWindow"


def microseconds(seconds: float) -> int:
    """Return a configured duration in the whole microseconds a trigger is written in (nearest)."""
    return round(seconds * 1_000_000)


def format_us(value_us: int) -> str:
    """Return a duration in microseconds as Go prints it (2s, 150ms, 1.5ms)."""
    return format_go_duration_ns(value_us * 1000)


def psi_trigger(kind: str, stall_us: int, window_us: int, *, privileged: bool) -> str:
    """Return the PSI trigger text (without its NUL terminator); ConfigError, at the setting's key, when the
    kernel would refuse it."""
    if kind not in PSI_KINDS:
        raise ConfigError(f"PSI trigger kind must be one of {', '.join(PSI_KINDS)}", key="psi.kind", value=kind)
    window = format_us(window_us)
    if not PSI_WINDOW_MIN_US <= window_us <= PSI_WINDOW_MAX_US:
        raise ConfigError(f"PSI trigger window must be between {format_us(PSI_WINDOW_MIN_US)} and "
                          f"{format_us(PSI_WINDOW_MAX_US)}", key=WINDOW_KEY, value=window)
    if not privileged and window_us % PSI_UNPRIVILEGED_WINDOW_STEP_US:
        raise ConfigError(f"PSI trigger window must be a whole multiple of {format_us(PSI_UNPRIVILEGED_WINDOW_STEP_US)}"
                          " without CAP_SYS_RESOURCE (the kernel answers EINVAL otherwise)", key=WINDOW_KEY,
                          value=window)
    if not 0 < stall_us <= window_us:
        raise ConfigError(f"PSI trigger stall must be more than 0 and at most the window ({window})",
                          key=STALL_KEY, value=format_us(stall_us))
    return f"{kind} {stall_us} {window_us}"

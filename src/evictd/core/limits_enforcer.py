"""Who enforces pods' ephemeral-storage limits (emptyDir `sizeLimit`, pod and container
`limits.ephemeral-storage`): the kubelet or evictd, never both.

The kubelet enforces them whenever its `localStorageCapacityIsolation` is true (turning it off also drops the
scheduler's ephemeral-storage capacity). `ephemeralStorageLimitsEnforcer`: `kubelet`, `evictd`, or `auto` (the
kubelet unless its configuration says `localStorageCapacityIsolation: false`; unread counts as true). evictd enforces
only while its own `localStorageCapacityIsolation` is true; nobody enforcing is said. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class LimitsEnforcer(StrEnum):
    """The `ephemeralStorageLimitsEnforcer` setting."""

    AUTO = "auto"
    KUBELET = "kubelet"
    EVICTD = "evictd"


class Enforcer(StrEnum):
    """Who enforces the limits after all."""

    KUBELET = "kubelet"
    EVICTD = "evictd"
    NOBODY = "nobody"  # both sides have localStorageCapacityIsolation false


@dataclass(frozen=True, slots=True)
class EnforcerChoice:
    enforcer: Enforcer
    reason: str

    @property
    def evictd_enforces(self) -> bool:
        return self.enforcer is Enforcer.EVICTD


def limits_enforcer(setting: LimitsEnforcer, *, evictd_isolation: bool,
                    kubelet_isolation: bool | None) -> EnforcerChoice:
    """Who enforces pods' ephemeral-storage limits, for the setting, evictd's own `localStorageCapacityIsolation`
    and the kubelet's (`kubelet_isolation`; None: its configuration was not read)."""
    kubelet_on = kubelet_isolation is not False
    kubelet_said = ("the kubelet's configuration was not read (its default, localStorageCapacityIsolation: true, "
                    "assumed)" if kubelet_isolation is None else
                    f"the kubelet's localStorageCapacityIsolation is {str(kubelet_isolation).lower()}")
    if setting is LimitsEnforcer.AUTO:
        wanted = Enforcer.KUBELET if kubelet_on else Enforcer.EVICTD
        why = f"ephemeralStorageLimitsEnforcer: auto, and {kubelet_said}"
    else:
        wanted = Enforcer(str(setting))
        why = f"ephemeralStorageLimitsEnforcer: {setting}"
    if wanted is Enforcer.EVICTD and not evictd_isolation:
        wanted = Enforcer.KUBELET if kubelet_on else Enforcer.NOBODY
        why += "; evictd's own localStorageCapacityIsolation is false"
    elif wanted is Enforcer.EVICTD and kubelet_isolation is True:
        why += "; the kubelet's localStorageCapacityIsolation is true: it enforces them as well"
    elif wanted is Enforcer.KUBELET and not kubelet_on:
        wanted = Enforcer.NOBODY
        why += f"; {kubelet_said}"
    return EnforcerChoice(wanted, why)

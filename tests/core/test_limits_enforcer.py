"""Who enforces pods' ephemeral-storage limits (src/evictd/core/limits_enforcer.py): the setting, evictd's own
localStorageCapacityIsolation and the kubelet's (None: its configuration was not read), as a table."""

from __future__ import annotations

import pytest

from evictd.core.limits_enforcer import Enforcer, LimitsEnforcer, limits_enforcer

AUTO, KUBELET, EVICTD = LimitsEnforcer.AUTO, LimitsEnforcer.KUBELET, LimitsEnforcer.EVICTD


@pytest.mark.parametrize(("setting", "evictd_isolation", "kubelet_isolation", "enforcer", "reason_has"), [
    pytest.param(AUTO, True, True, Enforcer.KUBELET, "the kubelet's localStorageCapacityIsolation is true",
                 id="auto-kubelet-isolation-on"),
    pytest.param(AUTO, True, None, Enforcer.KUBELET, "was not read", id="auto-kubelet-unknown-is-its-default"),
    pytest.param(AUTO, True, False, Enforcer.EVICTD, "is false", id="auto-kubelet-isolation-off"),
    pytest.param(AUTO, False, False, Enforcer.NOBODY, "evictd's own localStorageCapacityIsolation is false",
                 id="auto-both-off"),
    pytest.param(AUTO, False, True, Enforcer.KUBELET, "is true", id="auto-evictd-off-kubelet-on"),
    pytest.param(KUBELET, True, None, Enforcer.KUBELET, "kubelet", id="kubelet"),
    pytest.param(KUBELET, True, False, Enforcer.NOBODY, "is false", id="kubelet-but-its-isolation-off"),
    pytest.param(EVICTD, True, None, Enforcer.EVICTD, "evictd", id="evictd"),
    pytest.param(EVICTD, True, True, Enforcer.EVICTD, "it enforces them as well", id="evictd-both-enforce"),
    pytest.param(EVICTD, False, None, Enforcer.KUBELET, "evictd's own", id="evictd-but-own-isolation-off"),
])
def test_who_enforces(setting: LimitsEnforcer, evictd_isolation: bool, kubelet_isolation: bool | None,
                      enforcer: Enforcer, reason_has: str) -> None:
    choice = limits_enforcer(setting, evictd_isolation=evictd_isolation, kubelet_isolation=kubelet_isolation)
    assert choice.enforcer is enforcer and reason_has in choice.reason, choice.reason
    assert choice.evictd_enforces is (enforcer is Enforcer.EVICTD)

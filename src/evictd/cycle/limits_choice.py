"""Who enforces pods' ephemeral-storage limits on this node (`evictd.core.limits_enforcer`), for `evictd run` and
`evictd check-config`: the choice for a configuration beside the kubelet's configuration as found, and the
configuration `run` decides with (its `localStorageCapacityIsolation` false when the kubelet enforces them, so that
the engine, the flight recording and a replay of it all see the same switch).
"""

from __future__ import annotations

from dataclasses import replace

from evictd.config import Configuration
from evictd.core.kubelet_config import EvictionSettings
from evictd.core.limits_enforcer import EnforcerChoice, limits_enforcer

# What the limits are, as check-config and the start-up log line name them.
LIMITS = "pods' ephemeral-storage limits (emptyDir sizeLimit, pod and container limits.ephemeral-storage)"


def limits_choice(config: Configuration, theirs: EvictionSettings | None) -> EnforcerChoice:
    """Who enforces the limits with `config` beside the kubelet's eviction settings `theirs` (None: its
    configuration not read)."""
    return limits_enforcer(config.evictd.ephemeral_storage_limits_enforcer,
                           evictd_isolation=config.eviction.local_storage_capacity_isolation,
                           kubelet_isolation=None if theirs is None else theirs.local_storage_capacity_isolation)


def enforced_as_chosen(config: Configuration, choice: EnforcerChoice) -> Configuration:
    """`config` with evictd's `localStorageCapacityIsolation` as `choice` says: true only when evictd enforces."""
    if config.eviction.local_storage_capacity_isolation == choice.evictd_enforces:
        return config
    return replace(config, eviction=replace(config.eviction, local_storage_capacity_isolation=choice.evictd_enforces))


def limits_json(config: Configuration, choice: EnforcerChoice) -> dict[str, str]:
    """The choice as check-config's JSON shows it."""
    return {"enforcer": str(choice.enforcer), "setting": str(config.evictd.ephemeral_storage_limits_enforcer),
            "reason": choice.reason}


def limits_text(choice: EnforcerChoice) -> str:
    """The choice as one line of check-config's text."""
    return f"ephemeral-storage limits enforced by: {choice.enforcer} ({choice.reason})"

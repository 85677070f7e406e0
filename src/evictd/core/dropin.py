"""The kubelet's `--config-dir`: drop-in KubeletConfiguration files merged onto the defaulted base, as the kubelet
merges them (`mergeKubeletConfigurations`, GA in Kubernetes 1.35).

Each drop-in is an RFC 7386 JSON merge patch onto what came before: a mapping merges key by key (so a drop-in's
`evictionHard: {memory.available: 500Mi}` keeps the base's other signals), a list or a scalar replaces, a null
removes the key. The base is the kubelet's configuration file after the kubelet's load-time defaulting (an absent
`evictionHard` is already the full default map), so `mergeDefaultEvictionSettings` stated only in a drop-in changes
nothing. Pure: documents in, the merged document out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evictd.core.kubelet_config import DEFAULT_EVICTION_HARD

# The drop-ins' file name extension: other files in the folder are ignored, as the kubelet ignores them.
DROPIN_EXTENSION = ".conf"
MERGE_DEFAULTS_FIELD = "mergeDefaultEvictionSettings"


def merge_patch(target: object, patch: object) -> object:
    """Return `target` with the RFC 7386 merge `patch` applied; neither is changed."""
    if not isinstance(patch, Mapping):
        return patch
    merged: dict[Any, object] = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def loaded_base(document: Mapping[str, object]) -> dict[str, object]:
    """Return the kubelet configuration file's document after the kubelet's load-time eviction defaulting: an
    absent `evictionHard` becomes the full default map; with `mergeDefaultEvictionSettings: true` the default
    signals the file leaves out are added. (A malformed value is left for the decoder to report.)"""
    base = dict(document)
    hard = base.get("evictionHard")
    if hard is None:
        base["evictionHard"] = dict(DEFAULT_EVICTION_HARD)
    elif isinstance(hard, Mapping) and base.get(MERGE_DEFAULTS_FIELD) is True:
        base["evictionHard"] = {**hard, **{k: v for k, v in DEFAULT_EVICTION_HARD.items() if k not in hard}}
    return base


def with_dropins(base: Mapping[str, object], dropins: Sequence[Mapping[str, object]], *,
                 from_file: bool = True) -> dict[str, object]:
    """Return the kubelet's effective configuration: `base` defaulted as the kubelet loads it, then each drop-in
    merged onto it. The result is defaulted (`mergeDefaultEvictionSettings` dropped); a drop-in that nulls
    `evictionHard` leaves no hard thresholds. Without `from_file` (a kubelet started without `--config`), `base` is
    not defaulted: such a kubelet's `evictionHard` is only what the drop-ins give."""
    merged: object = loaded_base(base) if from_file else dict(base)
    for dropin in dropins:
        merged = merge_patch(merged, {k: v for k, v in dropin.items() if k not in ("apiVersion", "kind")})
    assert isinstance(merged, dict)  # a mapping patched by mappings
    merged.pop(MERGE_DEFAULTS_FIELD, None)
    merged.setdefault("evictionHard", {})
    return merged

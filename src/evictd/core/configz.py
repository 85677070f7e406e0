"""A kubelet's `/configz` answer (`kubectl get --raw /api/v1/nodes/NODE/proxy/configz`), read as the configuration
the kubelet runs with.

The answer is `{"kubeletconfig": {...}}`, itself without apiVersion or kind: the kubelet's resolved configuration
(file, drop-ins and flags already applied, every default filled in) converted to v1beta1 (v1.36.2's holds its kind
and apiVersion inside; they are not needed). Being resolved, it is not defaulted again: v1beta1's `omitempty` leaves
out an empty map or list, so an absent `evictionHard` is no hard threshold (not the defaults) and an absent
`enforceNodeAllocatable` no enforcement (not `[pods]`), and `mergeDefaultEvictionSettings` was applied when the
kubelet loaded its file (before its flags) and is not applied again. `configz_document` turns the answer into the
KubeletConfiguration document that decodes to those values. Pure: documents in, a document out.
"""

from __future__ import annotations

from collections.abc import Mapping

from evictd.core.duration import parse_go_duration
from evictd.core.errors import ConfigError, DurationError
from evictd.core.kubelet_config import KUBELET_API_VERSION, KUBELET_KIND

# The one key of the kubelet's /configz answer (the component name it registers with `configz.New`).
CONFIGZ_KEY = "kubeletconfig"
# Fields v1beta1 serialises with `omitempty` whose defaulting would misread an absent (empty) value.
EMPTY_WHEN_ABSENT: Mapping[str, object] = {"evictionHard": {}, "enforceNodeAllocatable": []}
MERGE_DEFAULTS_FIELD = "mergeDefaultEvictionSettings"


def is_configz(document: object) -> bool:
    """True for a document shaped as a /configz answer: no kind or apiVersion, a `kubeletconfig` key."""
    return (isinstance(document, Mapping) and "kind" not in document and "apiVersion" not in document
            and CONFIGZ_KEY in document)


def configz_document(document: Mapping[str, object], where: str) -> dict[str, object]:
    """Return the KubeletConfiguration document (with apiVersion and kind) that decodes to what the /configz answer
    `document` says the kubelet runs with. Raises ConfigError naming `where` when `kubeletconfig` is not a
    mapping."""
    resolved = document.get(CONFIGZ_KEY)
    if not isinstance(resolved, Mapping):
        raise ConfigError("a /configz answer holds the kubelet's configuration as a mapping under "
                          f"{CONFIGZ_KEY!r} (as `kubectl get --raw /api/v1/nodes/NODE/proxy/configz` prints it)",
                          key=f"{where}.{CONFIGZ_KEY}", value=resolved)
    converted: dict[str, object] = {"apiVersion": KUBELET_API_VERSION, "kind": KUBELET_KIND}
    converted.update({key: value for key, value in resolved.items() if key not in ("apiVersion", "kind")})
    for key, empty in EMPTY_WHEN_ABSENT.items():
        if converted.get(key) is None:
            converted[key] = type(empty)()
    converted.pop(MERGE_DEFAULTS_FIELD, None)  # applied by the kubelet already, before its flags
    return converted


def zero_transition_period(document: Mapping[str, object]) -> bool:
    """True when a converted /configz document holds a zero `evictionPressureTransitionPeriod`: the kubelet runs
    with 0 (a flag set it after its file's defaulting), where a file's zero reads as the 5m default."""
    period = document.get("evictionPressureTransitionPeriod")
    if not isinstance(period, str):
        return False
    try:
        return parse_go_duration(period) == 0
    except DurationError:
        return False  # the decoder reports it

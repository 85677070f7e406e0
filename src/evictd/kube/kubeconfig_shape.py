"""The shape of a kubeconfig file, checked before the `kubernetes` package's loader reads it.

The loader assumes the shape and fails on a malformed file with Python's own words (`'str' object has no
attribute 'safe_get'`, `list indices must be integers or slices, not str`). This names the entry instead:
`contexts[0].context: a mapping expected, not 'x'`. Only what the loader walks is checked (kubectl's
`clientcmd` accepts the same shapes): the lists of named clusters, users and contexts, the current context and
the cluster and user it names. What is inside a cluster or a user (server, certificates, tokens) is the
loader's to judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


def kubeconfig_problem(document: Any) -> str | None:
    """Return what is wrong with the kubeconfig `document` (parsed YAML) as "<where>: <what>", or None."""
    if not isinstance(document, Mapping):
        return f"the file: a mapping expected, not {_shown(document)}"
    named: dict[str, dict[str, Mapping[str, Any]]] = {}
    for section, entry_key in SECTIONS:
        entries = document.get(section)
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            return f"{section}: a list expected, not {_shown(entries)}"
        named[section] = {}
        for index, entry in enumerate(entries):
            where = f"{section}[{index}]"
            if not isinstance(entry, Mapping):
                return f"{where}: a mapping expected, not {_shown(entry)}"
            if not isinstance(entry.get("name"), str):
                return f"{where}.name: a name expected, not {_shown(entry.get('name'))}"
            body = entry.get(entry_key)
            if body is not None and not isinstance(body, Mapping):
                return f"{where}.{entry_key}: a mapping expected, not {_shown(body)}"
            named[section][entry["name"]] = body or {}
    current = document.get("current-context")
    if not isinstance(current, str) or not current:
        return f"current-context: the name of a context expected, not {_shown(current)}"
    if current not in named["contexts"]:
        return f"current-context: no context named {current!r}"
    context = named["contexts"][current]
    for section, entry_key in SECTIONS[:2]:
        name = context.get(entry_key)
        if name is None:
            continue
        if not isinstance(name, str):
            return f"context {current!r}.{entry_key}: a name expected, not {_shown(name)}"
        if name not in named[section]:
            return f"context {current!r}.{entry_key}: no {entry_key} named {name!r} in {section}"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

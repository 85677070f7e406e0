"""The three patch types kube-apiserver accepts for built-in objects, on plain JSON values.

* Strategic merge patch (k8s.io/apimachinery/pkg/util/strategicpatch): maps merge recursively, `null` deletes
  a key, lists merge only where the Go type declares `patchStrategy:"merge"`: lists of objects by their
  `patchMergeKey` (`STRATEGIC_MERGE_KEYS` copies those tags for the fields these tests touch, e.g. pod
  `status.conditions` by `type`), lists of scalars as a union; every other list (node `spec.taints`, pod
  `spec.tolerations`, `status.containerStatuses`) is replaced whole. Directives: `$patch: replace|delete|merge`
  on maps and list items, `$retainKeys`, `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`.
* JSON merge patch (RFC 7386).
* JSON patch (RFC 6902): add, remove, replace, move, copy, test; failures raise `PatchError` with the texts of
  the evanphx/json-patch library the server uses.

All functions return new values and never mutate their inputs.
"""

from __future__ import annotations

import copy
from typing import Any

PRIMITIVE_MERGE = ""  # a `patchStrategy:"merge"` list of scalars (no merge key): merged as a set union

_CONTAINER_LISTS = {"ports": "containerPort", "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath"}
_METADATA_LISTS = {"metadata.ownerReferences": "uid", "metadata.finalizers": PRIMITIVE_MERGE}

# Paths (list items written `[]`) of lists with patchStrategy merge, and their patchMergeKey
# (k8s.io/api/core/v1/types.go struct tags).
STRATEGIC_MERGE_KEYS: dict[str, dict[str, str]] = {
    "pods": {
        **_METADATA_LISTS,
        "spec.containers": "name",
        "spec.initContainers": "name",
        "spec.ephemeralContainers": "name",
        **{f"spec.{c}[].{f}": k for c in ("containers", "initContainers", "ephemeralContainers")
           for f, k in _CONTAINER_LISTS.items()},
        "spec.volumes": "name",
        "spec.imagePullSecrets": "name",
        "spec.hostAliases": "ip",
        "spec.resourceClaims": "name",
        "status.conditions": "type",
        "status.podIPs": "ip",
        "status.hostIPs": "ip",
        "status.resourceClaimStatuses": "name",
    },
    "nodes": {
        **_METADATA_LISTS,
        "spec.podCIDRs": PRIMITIVE_MERGE,
        "status.conditions": "type",
        "status.addresses": "type",
    },
    "events": dict(_METADATA_LISTS),
}

_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


class PatchError(ValueError):
    """A patch that cannot be applied; `bad_request` says whether it is malformed (400) or inapplicable (422)."""

    def __init__(self, message: str, *, bad_request: bool = False) -> None:
        super().__init__(message)
        self.bad_request = bad_request


def strategic_merge(original: dict[str, Any], patch: Any, resource: str) -> dict[str, Any]:
    """Apply a strategic merge patch to an object of `resource` (pods, nodes, events)."""
    if not isinstance(patch, dict):
        raise PatchError(f"json: cannot unmarshal {_json_type(patch)} into Go value of type map[string]interface {{}}",
                         bad_request=True)
    merged = _merge_map(copy.deepcopy(original), patch, "", STRATEGIC_MERGE_KEYS.get(resource, {}))
    return merged if isinstance(merged, dict) else {}


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "bool", int: "number", float: "number"}.get(type(value), "null")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _merge_map(original: dict[str, Any], patch: dict[str, Any], path: str, keys: dict[str, str]) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive} in map: {patch}", bad_request=True)
    if "$retainKeys" in patch:
        retain = set(patch["$retainKeys"] or [])
        original = {k: v for k, v in original.items() if k in retain}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith(_SET_ORDER):
            orders[key[len(_SET_ORDER):]] = value or []
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE):]
            doomed = value or []
            if isinstance(original.get(field), list):
                original[field] = [item for item in original[field] if item not in doomed]
            continue
        sub_path = _join(path, key)
        if value is None:
            original.pop(key, None)
        elif isinstance(value, dict):
            current = original.get(key)
            merged = _merge_map(current if isinstance(current, dict) else {}, value, sub_path, keys)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, list) and sub_path in keys:
            current = original.get(key)
            original[key] = _merge_list(current if isinstance(current, list) else [], value, sub_path, keys)
        else:
            original[key] = _strip_directives(value)
    for field, order in orders.items():
        if isinstance(original.get(field), list):
            original[field] = _ordered(original[field], order, keys.get(_join(path, field), PRIMITIVE_MERGE))
    return original


def _merge_list(original: list[Any], patch: list[Any], path: str, keys: dict[str, str]) -> list[Any]:
    merge_key = keys[path]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    if merge_key == PRIMITIVE_MERGE:
        return original + [item for item in patch if item not in original]
    result = copy.deepcopy(original)
    item_path = path + "[]"
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {merge_key}", bad_request=True)
        index = next((i for i, o in enumerate(result) if isinstance(o, dict) and o.get(merge_key) == item[merge_key]),
                     None)
        if item.get("$patch") == "delete":
            result = [o for o in result if not (isinstance(o, dict) and o.get(merge_key) == item[merge_key])]
        elif index is None:
            result.append(_strip_directives(item))
        else:
            merged = _merge_map(result[index], item, item_path, keys)
            if merged is None:
                del result[index]
            else:
                result[index] = merged
    return result


def _ordered(items: list[Any], order: list[Any], merge_key: str) -> list[Any]:
    def identity(item: Any) -> Any:
        return item.get(merge_key) if merge_key and isinstance(item, dict) else item

    wanted = [identity(o) for o in order]
    first = [i for w in wanted for i in items if identity(i) == w]
    return first + [i for i in items if identity(i) not in wanted]


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items()
                if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'JSON pointer must be empty or start with a "/": {path}')
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _container(doc: Any, parts: list[str], op: str, path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return node, parts[-1]


def _get(doc: Any, path: str, op: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    node, last = _container(doc, parts, op, path)
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node[int(last)]
    raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')


def _remove(doc: Any, path: str, op: str) -> Any:
    node, last = _container(doc, _pointer(path), op, path)
    if isinstance(node, dict) and last in node:
        return node.pop(last)
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node.pop(int(last))
    raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')


def _add(doc: Any, path: str, value: Any, op: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    node, last = _container(doc, parts, op, path)
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list):
        if last == "-":
            node.append(value)
        elif last.isdigit() and int(last) <= len(node):
            node.insert(int(last), value)
        else:
            raise PatchError(f"{op} operation does not apply: index out of bounds: {last}")
    else:
        raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return doc


def json_patch(original: Any, operations: Any) -> Any:
    """RFC 6902 applied in order; any failing operation fails the whole patch."""
    if not isinstance(operations, list):
        raise PatchError(f"json: cannot unmarshal {_json_type(operations)} into Go value of type jsonpatch.Patch",
                         bad_request=True)
    doc = copy.deepcopy(original)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation:
            raise PatchError("Unexpected kind: unknown", bad_request=True)
        op = operation["op"]
        path = operation.get("path", "")
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(operation.get("value")), op)
        elif op == "remove":
            _remove(doc, path, op)
        elif op == "replace":
            _get(doc, path, op)
            if _pointer(path):
                _remove(doc, path, op)
            doc = _add(doc, path, copy.deepcopy(operation.get("value")), op)
        elif op in ("move", "copy"):
            source = operation.get("from", "")
            value = _remove(doc, source, op) if op == "move" else copy.deepcopy(_get(doc, source, op))
            doc = _add(doc, path, value, op)
        elif op == "test":
            if _get(doc, path, op) != operation.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {op}", bad_request=True)
    return doc

"""The generic registry (k8s.io/apiserver/pkg/registry/generic/registry.Store) for pods, nodes and events.

`Registry` turns API verbs into storage writes with the real semantics: name generation, defaulting and
validation on create; optimistic concurrency (`metadata.resourceVersion` must match or 409) and no-op
detection on update (an update that changes nothing writes nothing, keeping the resourceVersion); the
main/status strategies (a pod or node update keeps the stored status, a status update keeps the spec); and
deletion as `rest.BeforeDelete` + `Store.Delete` do it: UID/resourceVersion preconditions, graceful pod deletion
that only sets `deletionTimestamp`/`deletionGracePeriodSeconds` (and bumps `generation`), a shorter grace
period shortening it, grace 0 writing that state and then removing the object, finalizers holding it.

Objects cross this module in the external form of the requested API (`ResourceInfo.view`); storage always
holds the core/v1 form (events.k8s.io/v1 Events are a second view of core Events, as upstream).
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import kube_resources as res
from kube_patch import PatchError, json_patch, merge_patch, strategic_merge
from kube_selectors import (
    FieldTerm,
    Requirement,
    SelectorError,
    check_fields_supported,
    fields_match,
    labels_match,
)
from kube_status import (
    MODIFIED_CONFLICT,
    ApiError,
    FieldError,
    already_exists,
    bad_request,
    conflict,
    expired,
    internal_error,
    invalid,
    not_found,
    status_body,
    unprocessable_patch,
)
from kube_store import Key, Store, json_copy, rfc3339

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")
NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand
NAME_SUFFIX_LENGTH = 5
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json")


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


@dataclass(frozen=True)
class ResourceInfo:
    """What discovery says about a resource and how its objects are stored and shown."""

    name: str
    kind: str
    group: str
    version: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    storage_version_hash: str
    storage: str
    fields: Callable[[dict[str, Any]], dict[str, str]]
    subresources: tuple[str, ...] = ()
    to_storage: Callable[[dict[str, Any]], dict[str, Any]] = _identity
    view: Callable[[dict[str, Any]], dict[str, Any]] = _identity
    field_names: frozenset[str] = field(default_factory=frozenset)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def storage_kind(self) -> str:
        """The kind of the stored core/v1 form (the same Kind for every view served here)."""
        return self.kind

    @property
    def storage_api_version(self) -> str:
        """The apiVersion of the stored form: core/v1 for pods, nodes and both views of events; the group's for
        a resource stored only in its group (leases)."""
        return self.api_version if self.storage == self.name and self.group and self.view is _identity else "v1"


def _info(**kwargs: Any) -> ResourceInfo:
    sample = kwargs["fields"]({})
    return ResourceInfo(field_names=frozenset(sample), **kwargs)


PODS = _info(name="pods", kind="Pod", group="", version="v1", namespaced=True, singular="pod", short_names=("po",),
             categories=("all",), storage_version_hash="xPOwRZ+Yhw8=", storage="pods", fields=res.pod_fields,
             subresources=("status", "eviction"))
NODES = _info(name="nodes", kind="Node", group="", version="v1", namespaced=False, singular="node",
              short_names=("no",), categories=(), storage_version_hash="XwShjMxG9Fs=", storage="nodes",
              fields=res.node_fields, subresources=("status",))
EVENTS = _info(name="events", kind="Event", group="", version="v1", namespaced=True, singular="event",
               short_names=("ev",), categories=(), storage_version_hash="r2yiGXH7wu8=", storage="events",
               fields=res.event_fields)
EVENTS_V1 = _info(name="events", kind="Event", group="events.k8s.io", version="v1", namespaced=True,
                  singular="event", short_names=("ev",), categories=(), storage_version_hash="r2yiGXH7wu8=",
                  storage="events", fields=res.event_fields, to_storage=res.event_from_events_v1,
                  view=res.event_to_events_v1)
LEASES = _info(name="leases", kind="Lease", group="coordination.k8s.io", version="v1", namespaced=True,
               singular="lease", short_names=(), categories=(), storage_version_hash="gqkMMb/YqFM=", storage="leases",
               fields=res.generic_fields)
CORE_RESOURCES = (PODS, NODES, EVENTS)
# In the real server's discovery order (events.k8s.io before coordination.k8s.io).
GROUP_RESOURCES = {"events.k8s.io": (EVENTS_V1,), "coordination.k8s.io": (LEASES,)}


def find_resource(group: str, name: str) -> ResourceInfo | None:
    """The resource served at /api/v1 (group "") or /apis/<group>/v1 under that plural name."""
    for info in CORE_RESOURCES if not group else GROUP_RESOURCES.get(group, ()):
        if info.name == name:
            return info
    return None


@dataclass(frozen=True, slots=True)
class ListQuery:
    """The list options of one request, parsed."""

    labels: tuple[Requirement, ...] = ()
    fields: tuple[FieldTerm, ...] = ()
    resource_version: str = ""
    resource_version_match: str = ""
    limit: int = 0
    continue_token: str = ""


def encode_continue(rv: int, start_key: str) -> str:
    """A continue token in the real format (base64 JSON of version, rv and the key to start after)."""
    payload = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start_key + "\x00"}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from exc


def _key_text(key: Key) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


def object_key(info: ResourceInfo, obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace", "") if info.namespaced else "", meta.get("name", ""))


class Registry:
    """API verbs over a `Store`; every method raises `ApiError` shaped like the real server's."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.too_large_rv_wait_s = TOO_LARGE_RV_WAIT_S

    # -- reads -------------------------------------------------------------------------------------------------

    def get(self, info: ResourceInfo, namespace: str, name: str) -> dict[str, Any]:
        stored = self.store.get(info.storage, (namespace, name))
        if stored is None:
            raise not_found(info.name, name, info.group)
        return info.view(stored)

    def list(self, info: ResourceInfo, namespace: str, query: ListQuery) -> dict[str, Any]:
        """A `<Kind>List` honouring selectors, resourceVersion semantics and limit/continue."""
        try:
            check_fields_supported(query.fields, info.field_names)
        except SelectorError as exc:
            raise bad_request(str(exc)) from exc
        start_after = ""
        if query.continue_token:
            list_rv, start_after = decode_continue(query.continue_token)
            start_after = start_after.rstrip("\x00")
            try:
                items = self.store.snapshot_at(info.storage, list_rv, namespace, copies=False)
            except ApiError as exc:
                raise expired("The provided continue parameter is too old to display a consistent list result. "
                              "You can start a new list without the continue parameter, or use the continue token "
                              "in this response to retrieve the remainder of the results. Continuing with the "
                              "provided token results in an inconsistent list - objects that were created, "
                              "modified, or deleted between the time the first chunk was returned and now may "
                              "show up in the list.") from exc
        elif query.resource_version and query.resource_version_match == "Exact":
            list_rv = _parse_rv(query.resource_version)
            try:
                items = self.store.snapshot_at(info.storage, list_rv, namespace, copies=False)
            except ApiError as exc:
                raise expired("The resourceVersion for the provided list is too old.") from exc
        else:
            if query.resource_version not in ("", "0"):
                wanted = _parse_rv(query.resource_version)
                if not self.store.wait_for_rv(wanted, self.too_large_rv_wait_s):
                    raise too_large_resource_version(wanted, self.store.resource_version)
            items, list_rv = self.store.list(info.storage, namespace, copies=False)
        selected = [obj for obj in items
                    if labels_match(query.labels, (obj.get("metadata") or {}).get("labels"))
                    and fields_match(query.fields, info.fields(obj))]
        if start_after:
            selected = [obj for obj in selected if _key_text(object_key(info, obj)) > start_after]
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        # The watch cache serves resourceVersion=0 lists whole, ignoring limit (like kube-apiserver).
        if query.limit > 0 and query.resource_version != "0" and len(selected) > query.limit:
            rest = len(selected) - query.limit
            selected = selected[: query.limit]
            meta["continue"] = encode_continue(list_rv, _key_text(object_key(info, selected[-1])))
            if not query.labels and not query.fields:
                meta["remainingItemCount"] = rest
        views = []
        for obj in selected:  # the stored objects: only the page's are copied (a list in pages stays linear)
            view = info.view(json_copy(obj))
            # List items carry no kind/apiVersion on the wire: the list's own say what they are.
            view.pop("kind", None)
            view.pop("apiVersion", None)
            views.append(view)
        return {"kind": info.list_kind, "apiVersion": info.api_version, "metadata": meta, "items": views}

    # -- create ------------------------------------------------------------------------------------------------

    def create(self, info: ResourceInfo, namespace: str, body: Any, *, seed: bool = False) -> dict[str, Any]:
        """POST: returns the stored object. `seed` keeps a pod's status (writing storage directly, for tests)."""
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized")
        _check_decodable(info, body)
        obj = res.normalize_times(info.to_storage(json_copy(body)))
        obj["kind"], obj["apiVersion"] = info.storage_kind, info.storage_api_version
        meta = obj.setdefault("metadata", {})
        if info.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                                  "request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(
                random.choice(NAME_SUFFIX_ALPHABET) for _ in range(NAME_SUFFIX_LENGTH))
        if not seed:
            if meta.get("resourceVersion"):
                # etcd3 store Create: storage.ErrResourceVersionSetOnCreate, surfaced as an internal error.
                raise internal_error("resourceVersion should not be set on objects to be created")
            # FillObjectMetaSystemFields and BeforeCreate: the server owns these.
            for server_field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(server_field, None)
        errors = res.validate_object_name(meta)
        if info.storage == "pods":
            if seed:
                res.default_pod(obj)
                status = obj.setdefault("status", {})
                status.setdefault("phase", "Pending")
                status.setdefault("qosClass", res.pod_qos_class(obj))
            else:
                res.prepare_pod_for_create(obj)
            meta["generation"] = 1
            errors += res.validate_pod(obj)
        elif info.storage == "nodes":
            errors += res.validate_node(obj)
        elif info.storage == "events":
            res.default_core_event(obj)
            errors += res.validate_event(obj, info.group)
        elif info.storage == "leases":
            errors += res.validate_lease(obj)
        if errors:
            raise invalid(info.kind, meta.get("name", ""), errors, info.group)
        stored = self.store.create(info.storage, object_key(info, obj), obj)
        if stored is None:
            raise already_exists(info.name, meta["name"], info.group)
        return info.view(stored)

    # -- update and patch --------------------------------------------------------------------------------------

    def update(self, info: ResourceInfo, namespace: str, name: str, body: Any, subresource: str = "") -> dict[str, Any]:
        """PUT of the object or its status."""
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized")
        body_name = (body.get("metadata") or {}).get("name", "")
        if body_name and body_name != name:
            raise bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        body_ns = (body.get("metadata") or {}).get("namespace", "")
        if info.namespaced and body_ns and body_ns != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        with self.store.lock:
            return self._write(info, namespace, name, lambda _current: json_copy(body), subresource)

    def patch(self, info: ResourceInfo, namespace: str, name: str, content_type: str, body: Any,
              subresource: str = "") -> dict[str, Any]:
        """PATCH of the object or its status with a JSON, merge or strategic merge patch."""
        def apply(current: dict[str, Any]) -> dict[str, Any]:
            try:
                if content_type == "application/json-patch+json":
                    patched = json_patch(current, body)
                elif content_type == "application/merge-patch+json":
                    patched = merge_patch(current, body)
                else:
                    patched = strategic_merge(current, body, info.storage)
            except PatchError as exc:
                raise (bad_request(str(exc)) if exc.bad_request else unprocessable_patch(str(exc))) from exc
            if not isinstance(patched, dict):
                raise bad_request("the patched object is not a JSON object")
            return patched

        with self.store.lock:
            return self._write(info, namespace, name, apply, subresource)

    def _write(self, info: ResourceInfo, namespace: str, name: str,
               change: Callable[[dict[str, Any]], dict[str, Any]], subresource: str) -> dict[str, Any]:
        key = (namespace, name)
        stored = self.store.get(info.storage, key)
        if stored is None:
            raise not_found(info.name, name, info.group)
        changed = change(info.view(stored))
        _check_decodable(info, changed)
        new = res.normalize_times(info.to_storage(changed))
        new["kind"], new["apiVersion"] = info.storage_kind, info.storage_api_version
        meta = new.setdefault("metadata", {})
        old_meta = stored["metadata"]
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != old_meta["resourceVersion"]:
            raise conflict(info.name, name, MODIFIED_CONFLICT, info.group)
        errors = [FieldError("invalid", f"metadata.{f}", "field is immutable", meta.get(f))
                  for f in ("name", "namespace", "uid", "creationTimestamp")
                  if f in meta and meta.get(f) != old_meta.get(f)]
        if errors:
            raise invalid(info.kind, name, errors, info.group)
        # Fields only the server sets are carried over from storage.
        for f in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "generation"):
            if f in old_meta:
                meta[f] = old_meta[f]
            else:
                meta.pop(f, None)
        if subresource == "status":
            new["spec"] = json_copy(stored.get("spec"))
            if info.storage == "pods":
                meta["ownerReferences"] = json_copy(old_meta.get("ownerReferences"))
                if meta["ownerReferences"] is None:
                    meta.pop("ownerReferences")
                errors = res.validate_pod_status(new, stored)
        else:
            if "status" in stored:
                new["status"] = json_copy(stored["status"])
            else:
                new.pop("status", None)
            if info.storage == "pods":
                errors = res.validate_pod(new) + res.validate_pod_update(new, stored)
                if new.get("spec") != stored.get("spec"):
                    meta["generation"] = int(old_meta.get("generation", 1)) + 1
            elif info.storage == "nodes":
                errors = res.validate_node(new)
            elif info.storage == "events":
                res.default_core_event(new)
                errors = res.validate_event(new, "")
            elif info.storage == "leases":
                errors = res.validate_lease(new)
        if errors:
            raise invalid(info.kind, name, errors, info.group)
        if new == stored:
            return info.view(stored)  # a no-op update writes nothing and keeps the resourceVersion
        if (old_meta.get("deletionTimestamp") and not meta.get("finalizers")
                and old_meta.get("deletionGracePeriodSeconds", 0) == 0):
            # The last finalizer of an object whose deletion already ran out is gone: it is removed now
            # (shouldDeleteDuringUpdate), without writing the update first.
            self.store.delete(info.storage, key)
            return info.view(new)
        return info.view(self.store.update(info.storage, key, new))

    # -- delete ------------------------------------------------------------------------------------------------

    def delete(self, info: ResourceInfo, namespace: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
        """DELETE with DeleteOptions; returns the pod (graceful or gone) or, for others, a Success Status."""
        validate_delete_options(options)
        key = (namespace, name)
        with self.store.lock:
            stored = self.store.get(info.storage, key)
            if stored is None:
                raise not_found(info.name, name, info.group)
            meta = stored["metadata"]
            preconditions = options.get("preconditions") or {}
            if preconditions.get("uid") is not None and preconditions["uid"] != meta.get("uid"):
                raise conflict(info.kind, name, f"the UID in the precondition ({preconditions['uid']}) does not "
                               f"match the UID in record ({meta.get('uid')}). The object might have been deleted "
                               "and then recreated", info.group)
            if (preconditions.get("resourceVersion") is not None
                    and preconditions["resourceVersion"] != meta.get("resourceVersion")):
                raise conflict(info.kind, name, f"the ResourceVersion in the precondition "
                               f"({preconditions['resourceVersion']}) does not match the ResourceVersion in record "
                               f"({meta.get('resourceVersion')}). The object might have been modified", info.group)
            requested = options.get("gracePeriodSeconds")
            if requested is not None and requested < 0:
                requested = 1
            if info.storage != "pods":
                return self._delete_now(info, key, stored)
            if meta.get("deletionTimestamp"):
                current_grace = meta.get("deletionGracePeriodSeconds")
                if not current_grace:
                    return self._delete_now(info, key, stored)
                if requested is None or requested >= current_grace:
                    return info.view(stored)  # a longer or equal grace period changes nothing
                started = _parse_time(meta["deletionTimestamp"]) - timedelta(seconds=current_grace)
                meta["deletionTimestamp"] = rfc3339(started + timedelta(seconds=requested))
                meta["deletionGracePeriodSeconds"] = requested
                period = requested
            else:
                period = res.pod_graceful_period(stored, requested)
                meta["deletionTimestamp"] = rfc3339(datetime.now(UTC) + timedelta(seconds=period))
                meta["deletionGracePeriodSeconds"] = period
                if meta.get("generation", 0) > 0:
                    meta["generation"] += 1
            updated = self.store.update(info.storage, key, stored)
            if period > 0 or meta.get("finalizers"):
                return info.view(updated)
            return self._delete_now(info, key, updated)

    def delete_collection(self, info: ResourceInfo, namespace: str, query: ListQuery,
                          options: dict[str, Any]) -> dict[str, Any]:
        """DELETE on a collection: each selected object deleted as by DELETE; returns the list of results."""
        listed = self.list(info, namespace, ListQuery(query.labels, query.fields))
        items = []
        for item in listed["items"]:
            meta = item["metadata"]
            try:
                result = self.delete(info, meta.get("namespace", ""), meta["name"], json_copy(options))
            except ApiError as error:
                if error.code == 404:
                    continue  # deleted meanwhile
                raise
            if result.get("kind") != "Status":
                result.pop("kind", None)
                result.pop("apiVersion", None)
                items.append(result)
        return {"kind": info.list_kind, "apiVersion": info.api_version,
                "metadata": {"resourceVersion": str(self.store.resource_version)}, "items": items}

    def _delete_now(self, info: ResourceInfo, key: Key, stored: dict[str, Any]) -> dict[str, Any]:
        meta = stored.get("metadata") or {}
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return info.view(stored)
            # markAsDeleting: finalizers hold the object; it is only marked, with a zero grace period.
            meta["deletionTimestamp"] = rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
            return info.view(self.store.update(info.storage, key, stored))
        removed = self.store.delete(info.storage, key) or stored
        if info.storage == "pods":
            return info.view(removed)  # the pod registry returns the deleted object (ReturnDeletedObject)
        details: dict[str, Any] = {"name": key[1]}
        if info.group:
            details["group"] = info.group
        details.update({"kind": info.name, "uid": removed["metadata"].get("uid", "")})
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def _check_decodable(info: ResourceInfo, body: dict[str, Any]) -> None:
    """What decoding a Lease refuses (400): MicroTimes other than RFC3339Micro."""
    if info.storage == "leases":
        problem = res.micro_time_problem(body, info.kind, ("acquireTime", "renewTime"))
        if problem is not None:
            raise bad_request(problem)


TOO_LARGE_RV_WAIT_S = 3.0  # the watch cache waits this long for a future resourceVersion before failing


def too_large_resource_version(wanted: int, current: int) -> ApiError:
    """`storage.NewTooLargeResourceVersionError` as the API returns it (504 with a retry hint)."""
    details = {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
               "retryAfterSeconds": 1}
    message = f"Timeout: Too large resource version: {wanted}, current: {current}"
    return ApiError(504, status_body(504, "Timeout", message, details))


def validate_delete_options(options: dict[str, Any]) -> None:
    """`ValidateDeleteOptions`: propagationPolicy values and not both orphanDependents and propagationPolicy."""
    errors: list[FieldError] = []
    policy = options.get("propagationPolicy")
    if options.get("orphanDependents") is not None and policy is not None:
        errors.append(FieldError("invalid", "propagationPolicy", "orphanDependents and deletionPropagation cannot "
                                 "be both set", policy))
    if policy is not None and policy not in ("Foreground", "Background", "Orphan"):
        errors.append(FieldError("unsupported", "propagationPolicy", "", policy,
                                 ("Foreground", "Background", "Orphan")))
    for dry_run in options.get("dryRun") or []:
        if dry_run != "All":
            errors.append(FieldError("unsupported", "dryRun", "", dry_run, ("All",)))
    if errors:
        raise invalid("DeleteOptions", "", errors, "meta.k8s.io")


def _parse_rv(text: str) -> int:
    if not text.isdigit():
        raise bad_request(f'resourceVersion: Invalid value: "{text}": strconv.ParseUint: parsing "{text}": invalid '
                          "syntax")
    return int(text)


def _parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)

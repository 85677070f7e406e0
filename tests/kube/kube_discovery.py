"""Discovery documents: `/version`, legacy discovery (`/api`, `/api/v1`, `/apis`, `/apis/<group>[/v1]`) and the
aggregated discovery (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`) that kubectl asks for first.

Both views are built from the same resource table (`kube_registry`), so they always agree. The aggregated form
is served only when the Accept header asks for it, with its own Content-Type; a client that does not ask, or a
server built with `aggregated=False`, gets the legacy documents, which is how client-go tells the two apart.
"""

from __future__ import annotations

from typing import Any

from kube_registry import ALL_VERBS, CORE_RESOURCES, GROUP_RESOURCES, STATUS_VERBS, ResourceInfo

SERVER_MAJOR = "1"
SERVER_MINOR = "37"
VERSION_INFO = {
    "major": SERVER_MAJOR,
    "minor": SERVER_MINOR,
    "emulationMajor": SERVER_MAJOR,
    "emulationMinor": SERVER_MINOR,
    "minCompatibilityMajor": SERVER_MAJOR,
    "minCompatibilityMinor": "36",
    "gitVersion": "v1.37.1",
    "gitCommit": "f78e722310e50bcaca9276be22276d9e91d91308",
    "gitTreeState": "clean",
    "buildDate": "2026-09-23T16:55:09Z",
    "goVersion": "go1.26.8",
    "compiler": "gc",
    "platform": "linux/amd64",
}

AGGREGATED_V2_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
EVICTION_KIND = {"group": "policy", "version": "v1", "kind": "Eviction"}


def _subresource_verbs(subresource: str) -> tuple[str, ...]:
    return ("create",) if subresource == "eviction" else STATUS_VERBS


def _legacy_resource(info: ResourceInfo) -> list[dict[str, Any]]:
    main: dict[str, Any] = {"name": info.name, "singularName": info.singular, "namespaced": info.namespaced,
                            "kind": info.kind, "verbs": list(ALL_VERBS)}
    if info.short_names:
        main["shortNames"] = list(info.short_names)
    if info.categories:
        main["categories"] = list(info.categories)
    main["storageVersionHash"] = info.storage_version_hash
    entries = [main]
    for sub in info.subresources:
        entry: dict[str, Any] = {"name": f"{info.name}/{sub}", "singularName": "", "namespaced": info.namespaced}
        if sub == "eviction":
            entry.update(group=EVICTION_KIND["group"], version=EVICTION_KIND["version"])
            entry["kind"] = EVICTION_KIND["kind"]
        else:
            entry["kind"] = info.kind
        entry["verbs"] = list(_subresource_verbs(sub))
        entries.append(entry)
    return entries


def api_versions(server_address: str) -> dict[str, Any]:
    """`/api`."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def resource_list(group: str) -> dict[str, Any] | None:
    """`/api/v1` (group "") or `/apis/<group>/v1`; None for a group this server does not serve."""
    infos = CORE_RESOURCES if not group else GROUP_RESOURCES.get(group)
    if infos is None:
        return None
    body: dict[str, Any] = {"kind": "APIResourceList"}
    if group:
        body["apiVersion"] = "v1"
    body["groupVersion"] = f"{group}/v1" if group else "v1"
    body["resources"] = [entry for info in infos for entry in _legacy_resource(info)]
    return body


def _group(name: str) -> dict[str, Any]:
    version = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [version], "preferredVersion": version}


def api_group(name: str) -> dict[str, Any] | None:
    """`/apis/<group>`."""
    if name not in GROUP_RESOURCES:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


def api_group_list() -> dict[str, Any]:
    """`/apis`."""
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(name) for name in GROUP_RESOURCES]}


def _aggregated_resource(info: ResourceInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": info.name,
        "responseKind": {"group": info.group, "version": info.version, "kind": info.kind},
        "scope": "Namespaced" if info.namespaced else "Cluster",
        "singularResource": info.singular,
        "verbs": list(ALL_VERBS),
    }
    if info.short_names:
        entry["shortNames"] = list(info.short_names)
    if info.categories:
        entry["categories"] = list(info.categories)
    if info.subresources:
        entry["subresources"] = [
            {"subresource": sub,
             "responseKind": dict(EVICTION_KIND) if sub == "eviction"
             else {"group": info.group, "version": info.version, "kind": info.kind},
             "verbs": list(_subresource_verbs(sub))}
            for sub in info.subresources
        ]
    return entry


def _aggregated_group(name: str, infos: tuple[ResourceInfo, ...]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name} if name else {}
    return {"metadata": metadata, "versions": [
        {"version": "v1", "resources": [_aggregated_resource(i) for i in infos], "freshness": "Current"}]}


def aggregated(legacy_root: bool) -> dict[str, Any]:
    """The APIGroupDiscoveryList of `/api` (legacy_root) or `/apis`."""
    if legacy_root:
        items = [_aggregated_group("", CORE_RESOURCES)]
    else:
        items = [_aggregated_group(name, infos) for name, infos in GROUP_RESOURCES.items()]
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}


def wants_aggregated(accept: str) -> bool:
    """True when the Accept header lists the v2 APIGroupDiscoveryList before any plain JSON."""
    for media in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in media.split(";")[1:] if "=" in p)
        mime = media.split(";")[0].strip()
        if mime == "application/json" and params.get("g") == "apidiscovery.k8s.io" and params.get("v") == "v2" \
                and params.get("as") == "APIGroupDiscoveryList":
            return True
        if mime in ("application/json", "*/*", "application/*") and not params.get("as"):
            return False
    return False

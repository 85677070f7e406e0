"""evictd's Kubernetes API operations, over the `kubernetes` package's REST client alone.

`KubeApi` sends exactly what `kubernetes.client.CoreV1Api` (37.0.2) sent for evictd's calls (URLs, query order and
encoding, headers, bodies) with only `Configuration` and `RESTClientObject`, so the ApiClient, pydantic and models
(~20 MiB) are never loaded. Results are parsed JSON; a watch is the raw streaming response. Authentication is read
per request through `Configuration.auth_settings()` as the ApiClient does (its refresh hook re-reads tokens).

The one place where failures become `KubeError(verb, status, detail)`: a non-2xx status with the API's Status
message, `status` None when the server never answered usably (connection, timeout, TLS, non-JSON body).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from evictd import user_agent
from evictd.core.errors import KubeError
from evictd.kube.lean_import import import_module

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
# The Accept header the generated client picks for these operations (the first JSON type they produce).
JSON = "application/json"
ANY = "*/*"
PODS = "/api/v1/pods"
LEASES_GROUP_VERSION = "coordination.k8s.io/v1"

Query = Sequence[tuple[str, str | int | bool]]
# A bounded answer is read in chunks of this size.
ANSWER_CHUNK_BYTES = 65536


class AnswerTooLarge(KubeError):
    """An answer was larger than the bound its caller set; it was not read beyond the bound."""


class KubeApi:
    """The API operations evictd uses, each raising KubeError. `close()` drops the pooled connections."""

    def __init__(self, configuration: Any) -> None:
        self._configuration = configuration
        self._rest = import_module("kubernetes.client.rest").RESTClientObject(configuration)
        self._api_exception: type[Exception] = import_module("kubernetes.client.exceptions").ApiException
        self._user_agent = user_agent()

    def close(self) -> None:
        self._rest.close()

    def list_pods_page(self, field_selector: str, *, limit: int | None, continue_token: str | None, max_bytes: int,
                       timeout_s: float) -> tuple[dict[str, Any], int]:
        """List pods (one page of at most `limit`; `continue_token` the last page's `metadata.continue`), reading the
        answer only within `max_bytes`; return the page and its size. AnswerTooLarge (connection dropped) beyond."""
        verb = "list pods"
        response = self._send(verb, "GET", PODS, query=_list_query(field_selector, limit, continue_token),
                              stream=True, timeout_s=timeout_s)
        stream = response.response  # the urllib3 response, its body not read yet
        chunks: list[bytes] = []
        size = 0
        try:
            while chunk := stream.read(ANSWER_CHUNK_BYTES):
                size += len(chunk)
                if size > max_bytes:
                    stream.close()  # the rest is never read: the connection cannot serve another request
                    raise AnswerTooLarge(verb, None, f"the answer of a page of {limit} pods is larger than "
                                                     f"{max_bytes} bytes")
                chunks.append(chunk)
        except AnswerTooLarge:
            raise
        except Exception as exc:  # a broken stream (reset, timeout, truncated chunk)
            raise KubeError(verb, None, f"{type(exc).__name__}: {exc}") from None
        finally:
            stream.release_conn()
        data = b"".join(chunks)
        del chunks
        return _json_object(verb, data), size

    def watch_pods(self, field_selector: str, resource_version: str | None, *, timeout_seconds: int,
                   timeout_s: float) -> Any:
        """Open a watch of pods from `resource_version` with bookmarks; return the streaming urllib3 response."""
        query: list[tuple[str, str | int | bool]] = [("allowWatchBookmarks", True), ("fieldSelector", field_selector)]
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        query += [("timeoutSeconds", timeout_seconds), ("watch", True)]
        return self._send("watch pods", "GET", PODS, query=query, stream=True, timeout_s=timeout_s).response

    def delete_pod(self, namespace: str, name: str, options: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """`DELETE pods/{name}` with a DeleteOptions body (grace period, preconditions)."""
        return self._json("delete pods", "DELETE", self._path("namespaces", namespace, "pods", name), body=options,
                          timeout_s=timeout_s)

    def evict_pod(self, namespace: str, name: str, eviction: Mapping[str, Any], *,
                  timeout_s: float) -> dict[str, Any]:
        """`POST pods/{name}/eviction` with a policy/v1 Eviction (its deleteOptions: grace period, preconditions):
        the API server deletes the pod only if its disruption budgets and admission webhooks allow it."""
        return self._json("create pods/eviction", "POST", self._path("namespaces", namespace, "pods", name,
                                                                      "eviction"), body=eviction, timeout_s=timeout_s)

    def patch_pod_status(self, namespace: str, name: str, patch: Mapping[str, Any], *,
                         timeout_s: float) -> dict[str, Any]:
        return self._json("patch pods/status", "PATCH", self._path("namespaces", namespace, "pods", name, "status"),
                          body=patch, content_type=STRATEGIC_MERGE, timeout_s=timeout_s)

    def create_event(self, namespace: str, event: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        return self._json("create events", "POST", self._path("namespaces", namespace, "events"), body=event,
                          timeout_s=timeout_s)

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """Strategic-merge `patch` into a core/v1 Event (the generated client's default patch type for a map)."""
        return self._json("patch events", "PATCH", self._path("namespaces", namespace, "events", name), body=patch,
                          content_type=STRATEGIC_MERGE, timeout_s=timeout_s)

    def read_node(self, name: str, *, timeout_s: float) -> dict[str, Any]:
        return self._json("get nodes", "GET", self._path("nodes", name), timeout_s=timeout_s)

    def patch_node(self, name: str, patch: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """JSON merge `patch` into the Node (its `spec.taints` list is replaced whole)."""
        return self._json("patch nodes", "PATCH", self._path("nodes", name), body=patch, content_type=MERGE_PATCH,
                          timeout_s=timeout_s)

    def patch_node_status(self, name: str, patch: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """Strategic-merge `patch` into `nodes/{name}/status`; return the Node as stored after it."""
        return self._json("patch nodes/status", "PATCH", self._path("nodes", name, "status"), body=patch,
                          content_type=STRATEGIC_MERGE, timeout_s=timeout_s)

    def get_node_proxy(self, name: str, path: str, *, timeout_s: float) -> bytes:
        """`GET nodes/{name}/proxy/{path}` (the path is one escaped segment, as the generated client sends it)."""
        return bytes(self._send("get nodes/proxy", "GET", self._path("nodes", name, "proxy", path), accept=ANY,
                                timeout_s=timeout_s).data)

    def read_lease(self, namespace: str, name: str, *, timeout_s: float) -> dict[str, Any]:
        """`GET` a coordination.k8s.io/v1 Lease."""
        return self._json("get leases", "GET", self._lease_path(namespace, name), timeout_s=timeout_s)

    def create_lease(self, namespace: str, lease: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """`POST` a Lease; return it as stored."""
        return self._json("create leases", "POST", self._lease_path(namespace), body=lease, timeout_s=timeout_s)

    def replace_lease(self, namespace: str, name: str, lease: Mapping[str, Any], *,
                      timeout_s: float) -> dict[str, Any]:
        """`PUT` the whole Lease (its `metadata.resourceVersion` is the precondition: 409 when it moved meanwhile),
        as the kubelet renews its own; return it as stored."""
        return self._json("update leases", "PUT", self._lease_path(namespace, name), body=lease, timeout_s=timeout_s)

    def create_token_review(self, token: str, *, timeout_s: float) -> dict[str, Any]:
        """POST a TokenReview of `token` (no audiences: the API server's own); return it with its status."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        return self._json("create tokenreviews", "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body,
                          timeout_s=timeout_s)

    def create_subject_access_review(self, spec: Mapping[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """POST a SubjectAccessReview of `spec`; return it with its status (`allowed`, `denied`, `reason`)."""
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": dict(spec)}
        return self._json("create subjectaccessreviews", "POST",
                          "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body, timeout_s=timeout_s)

    def _lease_path(self, namespace: str, name: str = "") -> str:
        return self._path("namespaces", namespace, "leases", *([name] if name else []),
                          root=f"/apis/{LEASES_GROUP_VERSION}/")

    def _path(self, *segments: str, root: str = "/api/v1/") -> str:
        """`root` (the core group's by default) and the segments, escaped as the generated client escapes them."""
        safe = self._configuration.safe_chars_for_path_param
        return root + "/".join(quote(segment, safe=safe) for segment in segments)

    def _json(self, verb: str, method: str, path: str, *, query: Query = (), body: Mapping[str, Any] | None = None,
              content_type: str | None = None, timeout_s: float) -> dict[str, Any]:
        response = self._send(verb, method, path, query=query, body=body, content_type=content_type,
                              timeout_s=timeout_s)
        return _json_object(verb, response.data)

    def _send(self, verb: str, method: str, path: str, *, query: Query = (), body: Mapping[str, Any] | None = None,
              content_type: str | None = None, accept: str = JSON, stream: bool = False, timeout_s: float) -> Any:
        """Send one request; return the RESTResponse of a 2xx answer, its body read unless `stream`."""
        url = self._configuration.host + path
        if query:
            # Booleans as the generated client sends them: `true`, `false`.
            url += "?" + "&".join(f"{key}={quote(str(value).lower() if isinstance(value, bool) else str(value))}"
                                  for key, value in query)
        headers = {"Accept": accept}
        if content_type is not None:
            headers["Content-Type"] = content_type
        headers["User-Agent"] = self._user_agent
        try:
            headers.update(self._auth_headers())
            response = self._rest.request(method, url, headers=headers, body=body, _request_timeout=timeout_s)
            if not stream or not 200 <= response.status <= 299:
                response.read()
        except self._api_exception as exc:  # a TLS failure, raised with status 0
            status = getattr(exc, "status", None)
            raise KubeError(verb, status if isinstance(status, int) and status > 0 else None,
                            str(getattr(exc, "reason", "") or exc)) from None
        except Exception as exc:  # urllib3/ssl/socket errors, timeouts, credential refresh failures: no answer
            raise KubeError(verb, None, f"{type(exc).__name__}: {exc}") from None
        if not 200 <= response.status <= 299:
            reason, causes = status_reason(response.data)
            raise KubeError(verb, response.status, status_message(response.data, response.reason), reason=reason,
                            causes=causes)
        return response

    def _auth_headers(self) -> dict[str, str]:
        """The credentials' headers, as the ApiClient adds them (this runs the configuration's refresh hook)."""
        return {setting["key"]: setting["value"] for setting in self._configuration.auth_settings().values()
                if setting.get("in") == "header" and setting.get("value")}


def _status(body: bytes | None) -> dict[str, Any]:
    """The metav1.Status of an error body ({} when it is none)."""
    if not body:
        return {}
    try:
        status = json.loads(body)
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def _list_query(field_selector: str, limit: int | None, continue_token: str | None) -> Query:
    """A pod list's query parameters, in the generated client's order."""
    query: list[tuple[str, str | int | bool]] = [] if continue_token is None else [("continue", continue_token)]
    query.append(("fieldSelector", field_selector))
    if limit is not None:
        query.append(("limit", limit))
    return query


def _json_object(verb: str, data: bytes) -> dict[str, Any]:
    """An answer's body as the JSON object it must be; KubeError when it is not."""
    try:
        document = json.loads(data)
    except ValueError as exc:  # also UnicodeDecodeError
        raise KubeError(verb, None, f"the API server's answer is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise KubeError(verb, None, "the API server's answer is not a JSON object")
    return document


def status_message(body: bytes | None, reason: str | None) -> str:
    """The API's Status message from an error body, else the HTTP reason phrase."""
    message = _status(body).get("message")
    return str(message) if message else str(reason or "")


def status_reason(body: bytes | None) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The Status `reason` of an error body and its `details.causes` as (reason, message) pairs."""
    status = _status(body)
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    pairs = tuple((str(cause.get("reason", "")), str(cause.get("message", "")))
                  for cause in (causes if isinstance(causes, list) else ()) if isinstance(cause, dict))
    return str(status.get("reason") or ""), pairs

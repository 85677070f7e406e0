"""The HTTP side of the test API server: TLS, authentication, routing, content negotiation and watch streaming.

One `ApiHandler` per connection (HTTP/1.1 keep-alive, a thread each). A request goes: TLS client certificate or
bearer token -> 401 if neither -> armed faults (`kube_faults`) -> route to discovery, a registry verb or a
watch stream. Errors leave as metav1.Status JSON with the matching HTTP code. JSON bodies are accepted with
`application/json`, no Content-Type at all (the Python client sends DELETE bodies that way) or YAML; PATCH
needs one of the three patch media types, as the real server requires.

Watch streams are chunked JSON lines. The handler polls its `WatchControl` switches and the server's stop flag
between store waits of at most `kube_watch.WATCH_POLL_S`, so faults and shutdown take effect quickly.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import kube_discovery as discovery
import yaml
from kube_faults import FaultRule, RecordedRequest
from kube_registry import PATCH_TYPES, ListQuery, ResourceInfo, find_resource
from kube_selectors import SelectorError, parse_field_selector, parse_label_selector
from kube_status import (
    ApiError,
    bad_request,
    internal_error,
    method_not_allowed,
    not_acceptable,
    not_found,
    not_found_path,
    status_body,
    timeout,
    too_many_requests,
    unauthorized,
    unsupported_media_type,
)
from kube_tables import TABLE_RESOURCES, table_for, wants_table
from kube_watch import WATCH_POLL_S, StreamDropped, WatchStreamMixin, query_bool

if TYPE_CHECKING:
    from apiserver import ApiServerCore

TLS_HANDSHAKE_TIMEOUT_S = 10.0
BODY_MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/cbor")
JSON_ACCEPTS = ("application/json", "application/*", "*/*", "*")


def canonical_header(name: str) -> str:
    """Go's CanonicalMIMEHeaderKey, as a Go server shows header names: `content-type` -> `Content-Type`."""
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def _dumps(body: Any) -> bytes:
    # Go's encoder writes compact JSON followed by a newline.
    return (json.dumps(body, separators=(",", ":")) + "\n").encode()


class ApiHandler(WatchStreamMixin, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-apiserver"
    sys_version = ""
    core: ApiServerCore  # set on the subclass the server builds

    # -- connection --------------------------------------------------------------------------------------------

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(TLS_HANDSHAKE_TIMEOUT_S)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        self.core.track_connection(self.request, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.core.track_connection(self.request, False)

    def log_message(self, format: str, *args: Any) -> None:
        return  # the request log records requests; stderr stays quiet

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- request pipeline --------------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.url_path = url.path.rstrip("/") or "/"
        self.query = parse_qs(url.query, keep_blank_values=True)
        self.raw_body = self._read_body()
        self.user = self._authenticate()
        self.logged = False
        self.method = method
        try:
            if self.user is None:
                raise unauthorized()
            fault = self.core.faults.take(method, self.url_path, self._is_watch())
            if fault is not None and fault.action == "delay":
                time.sleep(fault.delay_s)
                fault = None
            if fault is not None:
                self._fault(fault)
                return
            self._route(method)
        except ApiError as error:
            self._send_json(error.code, error.body, error.headers)
        except StreamDropped:
            self._drop()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError, OSError):
            self.close_connection = True
        except Exception as exc:  # a bug in the test server must still answer like a server: 500 InternalError
            error = internal_error(f"{type(exc).__name__}: {exc}")
            self._send_json(500, error.body)
            raise

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _authenticate(self) -> str | None:
        if isinstance(self.request, ssl.SSLSocket):
            cert = self.request.getpeercert()
            if cert:
                for rdn in cert.get("subject", ()):
                    for name, value in rdn:
                        if name == "commonName":
                            return str(value)
        scheme, _, token = self.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer":  # the scheme is case-insensitive; the in-cluster loader sends "bearer"
            return self.core.tokens.get(token.strip())
        return None

    def _is_watch(self) -> bool:
        return query_bool(self.query.get("watch")) or "/watch/" in self.url_path

    def _record(self, status: int) -> None:
        if self.logged:
            return
        self.logged = True
        body: Any = None
        if self.raw_body:
            try:
                body = json.loads(self.raw_body)
            except ValueError:
                body = self.raw_body.decode(errors="replace")
        headers = {canonical_header(name): value for name, value in self.headers.items()}
        self.core.requests.add(RecordedRequest(self.method, self.url_path, self.query, body, headers, self.user,
                                               status))

    def _fault(self, fault: FaultRule) -> None:
        if fault.action == "reset":
            self._record(0)
            raise StreamDropped()
        if fault.action == "hold":
            self._record(0)
            if self._hold():
                error = timeout("request did not complete within the allotted timeout", retry_after_s=0)
                self._send_json(504, error.body)
            else:
                self.close_connection = True
            return
        if fault.code == 429:
            error = too_many_requests(fault.retry_after_s)
        elif fault.code == 500:
            error = internal_error("injected fault")
        elif fault.code == 504:
            error = timeout("request did not complete within requested timeout - context deadline exceeded",
                            fault.retry_after_s)
        else:
            reason = {503: "ServiceUnavailable", 409: "Conflict", 403: "Forbidden"}.get(fault.code, "Unknown")
            error = ApiError(fault.code, status_body(fault.code, reason, "injected fault"))
            if fault.retry_after_s:
                error.headers["Retry-After"] = str(fault.retry_after_s)
        self._send_json(error.code, error.body, error.headers)

    def _hold(self) -> bool:
        """Wait for the client to give up; True if the server's request timeout came first."""
        deadline = time.monotonic() + self.core.hold_max_s
        while time.monotonic() < deadline and not self.core.stopping.is_set():
            readable, _, _ = select.select([self.connection], [], [], WATCH_POLL_S)
            if readable:
                return False  # the client closed (or sent more): either way this exchange is over
        return not self.core.stopping.is_set()

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- responses ---------------------------------------------------------------------------------------------

    def _headers(self, code: int, content_type: str, extra: dict[str, str] | None = None) -> None:
        self._record(code)
        self.send_response(code)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", content_type)
        self.send_header("X-Kubernetes-Pf-Flowschema-Uid", self.core.flow_schema_uid)
        self.send_header("X-Kubernetes-Pf-Prioritylevel-Uid", self.core.priority_level_uid)
        for name, value in (extra or {}).items():
            self.send_header(name, value)

    def _send_json(self, code: int, body: Any, extra: dict[str, str] | None = None,
                   content_type: str = "application/json") -> None:
        data = _dumps(body)
        self._headers(code, content_type, extra)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, code: int, text: str) -> None:
        data = text.encode()
        self._headers(code, "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, body: Any) -> None:
        data = _dumps(body)
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # -- routing -----------------------------------------------------------------------------------------------

    def _check_accept(self) -> None:
        accept = self.headers.get("Accept") or "*/*"
        media = [part.split(";")[0].strip() for part in accept.split(",")]
        if not any(m in JSON_ACCEPTS for m in media):
            raise not_acceptable()

    def _route(self, method: str) -> None:
        path = self.url_path
        if path in ("/healthz", "/livez", "/readyz"):
            self._send_text(200, "ok")
            return
        self._check_accept()
        if path == "/version" and method == "GET":
            self._send_json(200, discovery.VERSION_INFO)
            return
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"]:
            if len(parts) == 1:
                self._discovery(True)
                return
            if parts[1] != "v1":
                raise not_found_path()
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"]:
            if len(parts) == 1:
                self._discovery(False)
                return
            if len(parts) == 2:
                self._send_found(discovery.api_group(parts[1]))
                return
            if parts[2] != "v1":
                raise not_found_path()
            group, rest = parts[1], parts[3:]
        else:
            raise not_found_path()
        if not rest:
            self._send_found(discovery.resource_list(group))
            return
        if (group, rest, method) == ("authentication.k8s.io", ["tokenreviews"], "POST"):
            self._send_json(201, self.core.reviews.token_review(self.user or "", self._json_body()))
            return
        if (group, rest, method) == ("authorization.k8s.io", ["subjectaccessreviews"], "POST"):
            self._send_json(201, self.core.reviews.access_review(self.user or "", self._json_body()))
            return
        self._resource(method, group, rest)

    def _discovery(self, legacy_root: bool) -> None:
        if self.core.aggregated_discovery and discovery.wants_aggregated(self.headers.get("Accept", "")):
            self._send_json(200, discovery.aggregated(legacy_root), {"Vary": "Accept"},
                            content_type=discovery.AGGREGATED_V2_CONTENT_TYPE)
        elif legacy_root:
            self._send_json(200, discovery.api_versions(f"127.0.0.1:{self.core.port}"), {"Vary": "Accept"})
        else:
            self._send_json(200, discovery.api_group_list(), {"Vary": "Accept"})

    def _send_found(self, body: dict[str, Any] | None) -> None:
        if body is None:
            raise not_found_path()
        self._send_json(200, body)

    def _resource(self, method: str, group: str, rest: list[str]) -> None:
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise not_found_path()
        info = find_resource(group, rest[0])
        if info is None or (namespace and not info.namespaced):
            raise not_found_path()
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if (sub and sub not in info.subresources) or (name and info.namespaced and not namespace):
            raise not_found_path()
        registry = self.core.registry
        if method == "GET" and not name:
            if watch_path or query_bool(self.query.get("watch")):
                self._watch(info, namespace)
            else:
                self._send_object(info, registry.list(info, namespace, self._list_query()))
        elif watch_path:
            raise not_found_path()
        elif method == "GET" and sub != "eviction":
            self._send_object(info, registry.get(info, namespace, name))
        elif method == "POST" and not name:
            if info.namespaced and not namespace:
                raise method_not_allowed()
            self._send_json(201, registry.create(info, namespace, self._json_body()))
        elif method == "POST" and sub == "eviction":
            self._evict(info, namespace, name)
        elif method == "PUT" and name and sub != "eviction":
            self._send_json(200, registry.update(info, namespace, name, self._json_body(), sub))
        elif method == "PATCH" and name and sub != "eviction":
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type not in PATCH_TYPES:
                raise unsupported_media_type((*PATCH_TYPES, "application/apply-patch+yaml"))
            body = self._json_body(patch=True)
            self._send_json(200, registry.patch(info, namespace, name, content_type, body, sub))
        elif method == "DELETE" and name and not sub:
            options = self._delete_options()
            result = registry.delete(info, namespace, name, options)
            status = 202 if result.get("metadata", {}).get("deletionTimestamp") and \
                options.get("orphanDependents") is False else 200
            self._send_json(status, result)
        elif method == "DELETE" and not name and (namespace or not info.namespaced):
            self._send_json(200, registry.delete_collection(info, namespace, self._list_query(),
                                                            self._delete_options()))
        else:
            raise method_not_allowed()

    def _send_object(self, info: ResourceInfo, body: dict[str, Any]) -> None:
        accept = self.headers.get("Accept", "")
        if wants_table(accept) and not info.group and info.storage in TABLE_RESOURCES:
            include = (self.query.get("includeObject") or ["Metadata"])[0]
            self._send_json(200, table_for(info, body, include))
        else:
            self._send_json(200, body)

    def _json_body(self, patch: bool = False) -> Any:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if not patch and content_type not in ("", "application/json", "application/yaml", "*/*"):
            raise unsupported_media_type(BODY_MEDIA_TYPES)
        if not self.raw_body:
            raise bad_request("the body of the request is empty" if not patch else "empty patch")
        try:
            if content_type == "application/yaml":
                return yaml.safe_load(self.raw_body)
            return json.loads(self.raw_body)
        except ValueError as exc:
            raise bad_request(f"the object provided is unrecognized: {exc}") from exc

    def _delete_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.raw_body:
            body = self._json_body()
            if not isinstance(body, dict):
                raise bad_request("the object provided is unrecognized")
            options = body
        for name in ("gracePeriodSeconds",):
            if name in self.query:
                options[name] = int(self.query[name][0])
        if "propagationPolicy" in self.query:
            options["propagationPolicy"] = self.query["propagationPolicy"][0]
        if "orphanDependents" in self.query:
            options["orphanDependents"] = query_bool(self.query["orphanDependents"])
        return options

    def _evict(self, info: ResourceInfo, namespace: str, name: str) -> None:
        body = self._json_body()
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized")
        body_name = (body.get("metadata") or {}).get("name", "")
        if body_name != name:
            raise bad_request("name in URL does not match name in Eviction object")
        stored = self.core.store.get(info.storage, (namespace, name))
        if stored is None:
            raise not_found(info.name, name)
        self.core.budgets.admit(stored)
        if (namespace, name) in self.core.background_evictions:
            self.core.registry.patch(info, namespace, name, "application/merge-patch+json", {"metadata": {
                "annotations": {"descheduler.alpha.kubernetes.io/eviction-in-progress": "kubevirt"}}}, "")
        else:
            self.core.registry.delete(info, namespace, name, dict(body.get("deleteOptions") or {}))
        self._send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                              "code": 201})

    def _list_query(self) -> ListQuery:
        def first(name: str) -> str:
            return (self.query.get(name) or [""])[0]

        try:
            labels = parse_label_selector(first("labelSelector"))
            fields = parse_field_selector(first("fieldSelector"))
        except SelectorError as exc:
            raise bad_request(str(exc)) from exc
        limit = first("limit")
        if limit and not limit.lstrip("-").isdigit():
            raise bad_request(f'limit: Invalid value: "{limit}"')
        return ListQuery(labels, fields, first("resourceVersion"), first("resourceVersionMatch"),
                         int(limit or 0), first("continue"))

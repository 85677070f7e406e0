"""A Kubernetes API server for tests: the real `kubernetes` client and the real kubectl talk to it unchanged.

No kube-apiserver can run on these machines, so this stands in for it, and only for it. It serves over HTTPS
on 127.0.0.1 (port 0) with mutual TLS (or bearer tokens), discovery, pods, nodes, core/v1 and events.k8s.io/v1
events with the real semantics: see the modules it is built from:

    kube_pki        CA, server and client certificates (openssl CLI), kubeconfigs
    kube_http       TLS, authentication, routing, content negotiation, watch streaming
    kube_registry   verbs: create/get/list/update/patch/delete with defaulting, validation, preconditions
    kube_resources  per-resource strategies (pods, nodes, events), field selectors, event conversion
    kube_store      versioned storage, change history, compaction, snapshots at a resourceVersion
    kube_watch      which watch events a filtered watcher sees; bookmarks
    kube_patch      strategic merge / merge / JSON patch
    kube_selectors  label and field selectors
    kube_discovery  /version, legacy and aggregated discovery
    kube_tables     server-side printing for kubectl get
    kube_status     metav1.Status failure bodies
    kube_budgets    PodDisruptionBudgets as the eviction subresource enforces them
    kube_reviews    TokenReviews and SubjectAccessReviews (delegated authentication and authorization)
    kube_faults     fault switches (429/500/timeouts/resets, watch drops and expiry) and the request log

`ApiServer` is the handle tests use (the `apiserver` fixture in kube_fixtures.py yields one, started):
`.url`, `.kubeconfig_path` (client certificate), `.token_kubeconfig_path` (bearer token), `.ca_path`,
`.token`, `.store` (seed and inspect objects as the rest of a cluster would: `create_pod`, `get_pod`,
`create_node`, `finish_deletion`, ...), `.faults`, `.requests`, `.compact()`, `.kubectl(...)`,
`.api_client()`.

Known differences from kube-apiserver, none of which evictd relies on: no namespaces resource (any namespace
name is accepted), no managedFields, no server-side apply (415), no service-account admission, only pods, nodes
and events (and token and access reviews), and PodDisruptionBudgets only as the eviction subresource obeys them (`store.add_disruption_budget`); and a client certificate from an unknown CA fails the TLS handshake here, where the real server
completes it and answers 401 (Python's ssl cannot request a certificate without verifying it).
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kube_budgets import DisruptionBudget, DisruptionBudgets
from kube_faults import Faults, RecordedRequest, RequestLog
from kube_http import ApiHandler
from kube_pki import Pki, write_kubeconfig
from kube_registry import EVENTS, NODES, PODS, ListQuery, Registry
from kube_reviews import Reviews
from kube_status import ApiError
from kube_store import DEFAULT_HISTORY_LIMIT, Store

DEFAULT_BOOKMARK_INTERVAL_S = 60.0  # the watch cache sends bookmarks about once a minute
DEFAULT_HOLD_MAX_S = 60.0  # kube-apiserver's --request-timeout: a held request is answered 504 after this
KUBECTL = Path(sys.executable).parent / "kubectl"
TOKEN_USER = "system:serviceaccount:kube-system:evictd"


class ApiServerCore:
    """What every connection handler shares: storage, registry, faults, log, settings and the live sockets."""

    def __init__(self, history_limit: int, aggregated_discovery: bool) -> None:
        self.store = Store(history_limit)
        self.registry = Registry(self.store)
        self.budgets = DisruptionBudgets()
        # Pods (namespace, name) whose eviction is accepted and carried out in the background, as KubeVirt's live
        # migration does: annotated eviction in progress, not deleted (`ClusterStore.evict_in_background`).
        self.background_evictions: set[tuple[str, str]] = set()
        self.faults = Faults()
        self.requests = RequestLog()
        self.tokens: dict[str, str] = {}
        self.reviews = Reviews(self.tokens)
        self.aggregated_discovery = aggregated_discovery
        self.bookmark_interval_s = DEFAULT_BOOKMARK_INTERVAL_S
        self.hold_max_s = DEFAULT_HOLD_MAX_S
        self.stopping = threading.Event()
        self.port = 0
        self.flow_schema_uid = str(uuid.uuid4())
        self.priority_level_uid = str(uuid.uuid4())
        self.tls_failures = 0
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def track_connection(self, sock: socket.socket, open_: bool) -> None:
        with self._lock:
            if open_:
                self._sockets.add(sock)
            else:
                self._sockets.discard(sock)

    def close_connections(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _TlsHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, core: ApiServerCore, context: ssl.SSLContext) -> None:
        handler = type("BoundApiHandler", (ApiHandler,), {"core": core})
        self.core = core
        self.context = context
        super().__init__(("127.0.0.1", 0), handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, address = self.socket.accept()
        # Headers and body leave in separate writes: without NODELAY, Nagle + delayed ACK add ~40 ms per response.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The handshake runs in the connection's own thread (ApiHandler.setup), never in the accept loop.
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request: Any, client_address: Any) -> None:
        kind = sys.exc_info()[0]
        if kind is not None and issubclass(kind, (ssl.SSLError, ConnectionError, TimeoutError, OSError)):
            self.core.tls_failures += issubclass(kind, ssl.SSLError)
            return  # a refused handshake or a client that went away: nothing to report
        super().handle_error(request, client_address)


class ClusterStore:
    """Seed and inspect objects directly, as the rest of a cluster (scheduler, kubelet) would."""

    def __init__(self, core: ApiServerCore) -> None:
        self._core = core

    @property
    def resource_version(self) -> int:
        return self._core.store.resource_version

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Store a pod as a scheduler and kubelet left it: spec defaults filled, the given status kept."""
        namespace = (pod.get("metadata") or {}).get("namespace", "default")
        return self._core.registry.create(PODS, namespace, pod, seed=True)  # the registry copies it

    def add_disruption_budget(self, budget: DisruptionBudget) -> None:
        """State a PodDisruptionBudget as the disruption controller left it: the eviction subresource obeys it."""
        self._core.budgets.add(budget)

    def disruption_budget(self, namespace: str, name: str) -> DisruptionBudget | None:
        return self._core.budgets.get(namespace, name)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(PODS, namespace, name)

    def pods(self, namespace: str = "") -> list[dict[str, Any]]:
        return self._core.registry.list(PODS, namespace, ListQuery())["items"]

    def evict_in_background(self, namespace: str, name: str) -> None:
        """Accept this pod's evictions without deleting it: annotate it eviction in progress instead (KubeVirt)."""
        self._core.background_evictions.add((namespace, name))

    def set_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Strategic-merge `status` into the pod's status, as the kubelet's status manager does."""
        return self._core.registry.patch(PODS, namespace, name, "application/strategic-merge-patch+json",
                                         {"status": status}, "status")

    def delete_pod(self, namespace: str, name: str, grace_period_s: int | None = None) -> dict[str, Any]:
        options = {} if grace_period_s is None else {"gracePeriodSeconds": grace_period_s}
        return self._core.registry.delete(PODS, namespace, name, options)

    def finish_deletion(self, namespace: str, name: str) -> dict[str, Any]:
        """What the kubelet does once a terminating pod's containers are gone: delete with grace 0 and its UID."""
        pod = self.get_pod(namespace, name)
        if pod is None:
            raise KeyError(f"pod {namespace}/{name} does not exist")
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}}
        return self._core.registry.delete(PODS, namespace, name, options)

    def pod_versions(self, namespace: str, name: str) -> list[tuple[str, dict[str, Any]]]:
        """Every stored version of the pod(s) of this name still in the change history, oldest first, each as
        (ADDED | MODIFIED | DELETED, object): what a watch from the start would have shown."""
        store = self._core.store
        return [(change.type, copy.deepcopy(change.object))
                for change in store.changes_after(store.oldest_watchable_rv, 0)
                if change.resource == PODS.storage and change.key == (namespace, name)]

    def create_node(self, node: dict[str, Any]) -> dict[str, Any]:
        return self._core.registry.create(NODES, "", copy.deepcopy(node))

    def get_node(self, name: str) -> dict[str, Any] | None:
        return self._get(NODES, "", name)

    def nodes(self) -> list[dict[str, Any]]:
        return self._core.registry.list(NODES, "", ListQuery())["items"]

    def events(self, namespace: str = "") -> list[dict[str, Any]]:
        """Stored events in their core/v1 form (events.k8s.io/v1 ones included, converted)."""
        return self._core.registry.list(EVENTS, namespace, ListQuery())["items"]

    def _get(self, info: Any, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._core.registry.get(info, namespace, name)
        except ApiError:
            return None


class ApiServer:
    """A running test API server; use as a context manager or call `start()`/`stop()`."""

    def __init__(self, folder: Path, pki: Pki | None = None, *, history_limit: int = DEFAULT_HISTORY_LIMIT,
                 aggregated_discovery: bool = True) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.pki = pki or Pki.create(folder / "pki")
        self._core = ApiServerCore(history_limit, aggregated_discovery)
        self.token = secrets.token_urlsafe(24)
        self._core.tokens[self.token] = TOKEN_USER
        self.store = ClusterStore(self._core)
        self._server: _TlsHttpServer | None = None
        self._thread: threading.Thread | None = None
        self.kubeconfig_path = folder / "kubeconfig"
        self.token_kubeconfig_path = folder / "kubeconfig-token"
        self.token_path = folder / "token"
        self.kubectl_cache = folder / "kubectl-cache"

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> ApiServer:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.pki.server_cert, self.pki.server_key)
        context.load_verify_locations(self.pki.ca_cert)
        # Like --client-ca-file: a certificate is asked for but optional (a bearer token may authenticate instead).
        context.verify_mode = ssl.CERT_OPTIONAL
        context.set_alpn_protocols(["http/1.1"])
        self._server = _TlsHttpServer(self._core, context)
        self._core.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="test-apiserver", daemon=True)
        self._thread.start()
        write_kubeconfig(self.kubeconfig_path, self.url, self.pki.ca_cert, client=self.pki.client)
        write_kubeconfig(self.token_kubeconfig_path, self.url, self.pki.ca_cert, token=self.token)
        self.token_path.write_text(self.token)
        return self

    def stop(self) -> None:
        self._core.stopping.set()
        self._core.store.close()
        if self._server is not None:
            self._server.shutdown()
            self._core.close_connections()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses and settings --------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._core.port

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._core.port}"

    @property
    def ca_path(self) -> Path:
        return self.pki.ca_cert

    @property
    def bookmark_interval_s(self) -> float:
        return self._core.bookmark_interval_s

    @bookmark_interval_s.setter
    def bookmark_interval_s(self, value: float) -> None:
        self._core.bookmark_interval_s = value

    @property
    def hold_max_s(self) -> float:
        return self._core.hold_max_s

    @hold_max_s.setter
    def hold_max_s(self, value: float) -> None:
        self._core.hold_max_s = value

    @property
    def too_large_rv_wait_s(self) -> float:
        """How long a list at a future resourceVersion waits before its 504 (the watch cache waits 3 s)."""
        return self._core.registry.too_large_rv_wait_s

    @too_large_rv_wait_s.setter
    def too_large_rv_wait_s(self, value: float) -> None:
        self._core.registry.too_large_rv_wait_s = value

    @property
    def tls_failures(self) -> int:
        """How many TLS handshakes the server refused (e.g. a client certificate from an unknown CA)."""
        return self._core.tls_failures

    # -- faults, log, storage ----------------------------------------------------------------------------------

    @property
    def reviews(self) -> Reviews:
        """TokenReviews and SubjectAccessReviews: the tokens they authenticate and the grants they allow."""
        return self._core.reviews

    @property
    def faults(self) -> Faults:
        return self._core.faults

    @property
    def request_log(self) -> RequestLog:
        return self._core.requests

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first."""
        return self._core.requests.all()

    def compact(self, resource_version: int | None = None) -> int:
        """Compact the change history up to `resource_version` (default: now); returns the compacted revision."""
        return self._core.store.compact(resource_version)

    def finish_deletion(self, namespace: str, name: str) -> dict[str, Any]:
        return self.store.finish_deletion(namespace, name)

    # -- clients -----------------------------------------------------------------------------------------------

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A real `kubernetes.client.ApiClient` loaded from this server's kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig_path))

    def kubectl(self, *args: str, kubeconfig: Path | None = None, timeout_s: float = 60.0,
                input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this server (own discovery cache folder, never the user's)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env["HOME"] = str(self.folder)
        argv = [str(KUBECTL), "--kubeconfig", str(kubeconfig or self.kubeconfig_path),
                "--cache-dir", str(self.kubectl_cache), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, input=input_text,
                              check=False)

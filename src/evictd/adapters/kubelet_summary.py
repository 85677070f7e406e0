"""The kubelet's own Summary API as a stats source, for nodes where the kubelet's numbers are wanted exactly.

Two ways to reach it:
- directly: `GET <kubeletSummaryURL>` (e.g. `https://127.0.0.1:10250/stats/summary`) with a bearer token file
  and an optional CA bundle (no CA bundle: the kubelet's self-signed serving certificate is not verified, as
  metrics-server's `--kubelet-insecure-tls` does; say so in the configuration);
- through the API server's node proxy: `GET /api/v1/nodes/<node>/proxy/stats/summary` with evictd's API client
  (`evictd.kube`) and a kubeconfig or the in-cluster service account (RBAC: `nodes/proxy` get).
Any failure (connection, HTTP status, bad JSON, bad document) is a SampleError: the cycle then has no stats
and the engine freezes its state, as the kubelet does when its summary provider fails.
"""

from __future__ import annotations

import http
import http.client
import json
import ssl
import urllib.error
import urllib.request

from evictd import user_agent
from evictd.core.errors import ConfigError, KubeError, SampleError, ScenarioError
from evictd.core.summary import Summary, summary_from_dict


def _summary_of(body: bytes, source: str) -> Summary:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SampleError(source, f"the Summary is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise SampleError(source, "the Summary is not a JSON object")
    try:
        return summary_from_dict(document)
    except ScenarioError as exc:
        raise SampleError(source, f"bad Summary document: {exc}") from None


class KubeletSummarySource:
    """Reads `/stats/summary` from the kubelet's own port."""

    def __init__(self, url: str, *, token_file: str = "", ca_file: str = "", timeout_s: float = 10.0) -> None:
        if not url.startswith(("https://", "http://")):
            raise ConfigError("must be an http(s) URL", key="kubeletSummaryURL", value=url)
        self._url = url
        self._token_file = token_file
        self._timeout_s = timeout_s
        self._context: ssl.SSLContext | None = None
        if url.startswith("https://"):
            if ca_file:
                try:
                    self._context = ssl.create_default_context(cafile=ca_file)
                except (OSError, ssl.SSLError) as exc:
                    raise ConfigError(f"cannot load CA bundle: {exc}", key="kubeletCAFile", value=ca_file) from None
            else:
                # Documented choice: without a CA bundle the kubelet's self-signed certificate is accepted.
                self._context = ssl._create_unverified_context()

    def _token(self) -> str | None:
        if not self._token_file:
            return None
        try:
            with open(self._token_file, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError as exc:
            raise SampleError(self._token_file, exc.strerror or str(exc)) from None

    def summary(self) -> Summary:
        """Fetch and parse the Summary (the token is re-read each time: projected tokens rotate)."""
        request = urllib.request.Request(self._url, headers={"Accept": "application/json", "User-Agent": user_agent()})
        token = self._token()
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s, context=self._context) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            raise SampleError(self._url, f"HTTP {exc.code} {exc.reason}") from None
        except http.client.HTTPException as exc:  # not HTTP, or cut short (BadStatusLine, IncompleteRead)
            raise SampleError(self._url, f"bad HTTP response from the kubelet: {exc!r}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SampleError(self._url, f"cannot reach the kubelet: {reason}") from None
        return _summary_of(body, self._url)


class ApiProxySummarySource:
    """Reads the node's Summary through the API server's node proxy with evictd's API client."""

    def __init__(self, node_name: str, *, kubeconfig: str = "", timeout_s: float = 10.0) -> None:
        from evictd.kube.client import build_api_client  # the kubernetes package, only for this mode

        self._api = build_api_client(kubeconfig)
        self._node = node_name
        self._timeout_s = timeout_s
        self._source = f"/api/v1/nodes/{node_name}/proxy/stats/summary"

    def summary(self) -> Summary:
        """Fetch and parse the Summary through the API server."""
        try:
            body = self._api.get_node_proxy(self._node, "stats/summary", timeout_s=self._timeout_s)
        except KubeError as exc:
            if exc.status is None:
                raise SampleError(self._source, f"cannot reach the API server: {exc.detail}") from None
            raise SampleError(self._source, f"HTTP {exc.status} {_reason_phrase(exc.status)}: {exc.detail}") from None
        return _summary_of(body, self._source)


def _reason_phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""

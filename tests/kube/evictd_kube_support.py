"""Helpers for the tests of evictd's Kubernetes adapters (`src/evictd/kube`) against the test API server.

The adapters get their client from evictd's own `build_api_client` (urllib3 retries off, as in production),
loaded from the test server's kubeconfig. Conditions that a background thread or the server brings about
are awaited with `wait_until`, never with fixed sleeps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from apiserver import ApiServer
from kube_faults import RecordedRequest

from evictd.kube.client import build_api_client

PODS_PATH = "/api/v1/pods"


def evictd_api_client(apiserver: ApiServer) -> Any:
    """The API client evictd builds for a kubeconfig (`KubeApi`), pointed at the test server."""
    return build_api_client(str(apiserver.kubeconfig_path))


def is_watch(request: RecordedRequest) -> bool:
    value = request.param("watch")
    return value is not None and value.lower() not in ("0", "false")


def pod_lists(apiserver: ApiServer) -> list[RecordedRequest]:
    """Every list (not watch) of pods across namespaces, oldest first."""
    return [r for r in apiserver.request_log.matching("GET", PODS_PATH) if not is_watch(r)]


def pod_watches(apiserver: ApiServer) -> list[RecordedRequest]:
    """Every watch of pods across namespaces, oldest first."""
    return [r for r in apiserver.request_log.matching("GET", PODS_PATH) if is_watch(r)]


def read_json(path: Path) -> Any:
    """The file's JSON document (fails the test if it is not valid JSON)."""
    return json.loads(path.read_text(encoding="utf-8"))

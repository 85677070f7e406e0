"""A real `evictd run` with `metricsAuthorization: Webhook`: its /metrics answers only a token the API server
authenticates and authorizes for `get /metrics`; the probes stay open (tests/test_metrics_authorization.py has
the endpoint's cases)."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from pathlib import Path

from apiserver import ApiServer
from evictd_process import EvictdProcess
from kube_objects import node_manifest
from kube_reviews import UserInfo

NODE = "auth-node"
SCRAPER = UserInfo("system:serviceaccount:monitoring:prometheus", groups=("system:serviceaccounts:monitoring",))


def scrape(daemon: EvictdProcess, token: str | None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{daemon.port}/metrics",
                                     headers={} if token is None else {"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_only_an_authorized_token_reads_the_metrics_of_a_running_evictd(
        tmp_path: Path, apiserver: ApiServer, evictd_processes: list[EvictdProcess]) -> None:
    apiserver.store.create_node(node_manifest(NODE))
    granted, other = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    apiserver.reviews.issue(granted, SCRAPER)
    apiserver.reviews.issue(other, UserInfo("alice"))
    apiserver.reviews.grant_non_resource("Group:system:serviceaccounts:monitoring", "get", "/metrics")
    daemon = EvictdProcess(tmp_path, kubelet="enforceNodeAllocatable: []\n", evictd=(
        f"nodeName: {NODE}\nkubeconfig: {apiserver.kubeconfig_path}\nmetricsAuthorization: Webhook\n"
        f"containerRuntimeEndpoint: unix://{tmp_path}/no-runtime.sock\nhousekeepingInterval: 1s\n"))
    evictd_processes.append(daemon)
    daemon.wait_event("evictd started", timeout=60)
    assert daemon.http("/healthz")[0] == 200  # the kubelet's probes carry no token
    assert scrape(daemon, None) == (401, "Unauthorized: a bearer token is required")
    assert scrape(daemon, "made-up")[0] == 401
    assert scrape(daemon, other) == (403, "Forbidden (user=alice, verb=get, path=/metrics)")
    status, page = scrape(daemon, granted)
    assert status == 200
    assert 'evictd_metrics_token_reviews_total{verdict="allowed"} 1.0' in page
    assert 'evictd_metrics_token_reviews_total{verdict="unauthenticated"} 1.0' in page
    assert 'evictd_metrics_token_reviews_total{verdict="forbidden"} 1.0' in page
    assert daemon.stop() == 0

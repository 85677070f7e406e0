"""`metricsAuthorization: Webhook`: `/metrics` only for a bearer token the API server authenticates (TokenReview)
whose user may `get /metrics` (SubjectAccessReview), as the kubelet authorizes its own endpoints.

The endpoint is evictd's real HttpEndpoint on a free port, its reviews sent by the real `kubernetes` client
(`KubeApi`, from the test API server's kubeconfig) to the test API server (tests/kube/kube_reviews.py answers
the reviews as kube-apiserver does); the scrapes are plain HTTP requests. The last tests run the whole daemon.
"""

from __future__ import annotations

import http.client
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from kube_pki import DEFAULT_USER
from kube_reviews import UserInfo
from prometheus_client import CollectorRegistry, Counter

from evictd.core.metrics_access import FAILED_TTL_S
from evictd.kube.client import build_api_client
from evictd.kube.metrics_access import REVIEW_TIMEOUT_S, metrics_access_review
from evictd.observe.http_endpoint import Health, HttpEndpoint
from evictd.observe.metrics_authorization import REVIEW_BURST, REVIEWS_PER_S, MetricsAuthorizer
from polling import wait_until

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = UserInfo("system:serviceaccount:monitoring:prometheus", uid="uid-prometheus",
                      groups=("system:serviceaccounts", "system:serviceaccounts:monitoring"))


class Endpoint:
    """A running HttpEndpoint whose /metrics takes a Webhook authorizer talking to `apiserver`."""

    def __init__(self, apiserver: ApiServer) -> None:
        self.api = build_api_client(str(apiserver.kubeconfig_path))
        registry = CollectorRegistry()
        Counter("evictd_test_total", "A metric, to see the page.", registry=registry).inc()
        self.verdicts: list[int] = []
        self.authorizer = MetricsAuthorizer(metrics_access_review(self.api),
                                            on_review=lambda verdict: self.verdicts.append(verdict.status))
        self.http = HttpEndpoint("127.0.0.1:0", registry, Health(1.0), authorizer=self.authorizer)
        self.http.start()

    def get(self, path: str = "/metrics", token: str | None = None, method: str = "GET",
            header: str | None = None) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.http.port, timeout=15)
        try:
            headers = {} if token is None else {"Authorization": header or f"Bearer {token}"}
            connection.request(method, path, headers=headers)
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()

    def close(self) -> None:
        self.http.stop()
        self.api.close()


@pytest.fixture
def endpoint(apiserver: ApiServer) -> Iterator[Endpoint]:
    opened = Endpoint(apiserver)
    yield opened
    opened.close()


def issue(apiserver: ApiServer, user: UserInfo = PROMETHEUS) -> str:
    token = secrets.token_urlsafe(32)
    apiserver.reviews.issue(token, user)
    return token


def test_a_scrape_without_a_bearer_token_is_401_and_asks_the_api_nothing(
        apiserver: ApiServer, endpoint: Endpoint) -> None:
    assert endpoint.get() == (401, "Unauthorized: a bearer token is required")
    assert endpoint.get(token="x", header="Basic dXNlcjpwYXNz")[0] == 401
    assert apiserver.reviews.token_reviews == 0
    # The probes stay open: the kubelet sends no token.
    assert endpoint.get("/healthz")[0] == 200 and endpoint.get("/readyz")[0] == 200


def test_a_token_the_api_does_not_know_is_401_and_its_verdict_is_cached(
        apiserver: ApiServer, endpoint: Endpoint) -> None:
    status, body = endpoint.get(token="made-up-token")
    assert (status, body) == (401, "Unauthorized: [invalid bearer token]")
    assert endpoint.get(token="made-up-token")[0] == 401
    assert apiserver.reviews.token_reviews == 1 and apiserver.reviews.access_reviews == 0
    assert endpoint.verdicts == [401]


def test_an_authenticated_user_without_the_grant_is_403_with_it_200(apiserver: ApiServer, endpoint: Endpoint) -> None:
    token = issue(apiserver)
    status, body = endpoint.get(token=token)
    assert status == 403
    assert body == "Forbidden (user=system:serviceaccount:monitoring:prometheus, verb=get, path=/metrics)"
    # A grant to the group it belongs to (as a ClusterRoleBinding to a Group); the other user's verdict is fresh.
    apiserver.reviews.grant_non_resource("Group:system:serviceaccounts:monitoring", "get", "/metrics")
    other = issue(apiserver, UserInfo("system:serviceaccount:monitoring:grafana",
                                      groups=("system:serviceaccounts:monitoring",)))
    status, body = endpoint.get(token=other)
    assert status == 200 and "evictd_test_total 1.0" in body
    assert endpoint.get(token=other, method="HEAD") == (200, "")
    # The first user's 403 holds for its lifetime (the kubelet's cacheUnauthorizedTTL): no new review meanwhile.
    reviews = apiserver.reviews.access_reviews
    assert endpoint.get(token=token)[0] == 403
    assert apiserver.reviews.access_reviews == reviews
    assert endpoint.verdicts == [403, 200]


def test_the_access_review_asks_for_the_users_groups_uid_and_the_url(apiserver: ApiServer, endpoint: Endpoint) -> None:
    apiserver.reviews.grant_non_resource("User:system:serviceaccount:monitoring:prometheus", "get", "/metric*")
    assert endpoint.get(token=issue(apiserver))[0] == 200
    [review] = apiserver.request_log.matching("POST", r"/apis/authorization.k8s.io/v1/subjectaccessreviews")
    assert review.body == {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": PROMETHEUS.username, "uid": PROMETHEUS.uid,
        "groups": [*PROMETHEUS.groups, "system:authenticated"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}}


def test_when_evictd_may_not_create_reviews_a_scrape_is_503_and_asked_again_soon(
        apiserver: ApiServer, endpoint: Endpoint) -> None:
    apiserver.reviews.forbid_reviews(DEFAULT_USER)
    token = issue(apiserver)
    status, body = endpoint.get(token=token)
    assert status == 503
    assert body == "authorization unavailable: the token could not be reviewed; retry later"
    assert endpoint.verdicts == [503]
    # A failed review is kept a moment only: once evictd's binding exists the same token passes.
    apiserver.reviews.allow_reviews(DEFAULT_USER)
    apiserver.reviews.grant_non_resource(f"User:{PROMETHEUS.username}", "get", "/metrics")
    assert endpoint.get(token=token)[0] == 503, "the failed verdict holds for FAILED_TTL_S"
    time.sleep(FAILED_TTL_S)
    assert endpoint.get(token=token)[0] == 200


def test_a_hung_api_costs_the_scrape_a_503_after_the_request_deadline_and_the_probes_nothing(
        apiserver: ApiServer, endpoint: Endpoint) -> None:
    apiserver.faults.time_out_next(method="POST", path=r"/apis/authentication.k8s.io/v1/tokenreviews")
    token = issue(apiserver)
    answers: list[tuple[int, str]] = []
    scrape = threading.Thread(target=lambda: answers.append(endpoint.get(token=token)))
    started = time.monotonic()
    scrape.start()
    assert wait_until(lambda: apiserver.request_log.matching("POST", r".*/tokenreviews"), 5.0)
    for _ in range(5):  # the endpoint's one thread answers the probes while the review hangs
        probe_started = time.monotonic()
        assert endpoint.get("/healthz")[0] == 200
        assert time.monotonic() - probe_started < 0.5
    scrape.join(timeout=15)
    assert answers == [(503, "authorization unavailable: the token could not be reviewed; retry later")]
    assert REVIEW_TIMEOUT_S <= time.monotonic() - started < REVIEW_TIMEOUT_S + 3
    assert endpoint.verdicts == [503]


def test_a_flood_of_made_up_tokens_reaches_the_api_at_a_bounded_rate(apiserver: ApiServer, endpoint: Endpoint) -> None:
    started = time.monotonic()
    answers = [endpoint.get(token=f"flood-{i}")[0] for i in range(40)]
    bound = REVIEW_BURST + REVIEWS_PER_S * (time.monotonic() - started) + 1  # the burst, then 5 a second
    assert set(answers) <= {401, 429}, answers
    assert apiserver.reviews.token_reviews <= bound
    assert answers.count(429) >= 40 - bound
    token = issue(apiserver)
    apiserver.reviews.grant_non_resource(f"User:{PROMETHEUS.username}", "get", "/metrics")
    assert wait_until(lambda: endpoint.get(token=token)[0] == 200, 5.0), "a real scraper gets through after it"


def run_config(tmp_path: Path, evictd_lines: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "evictd.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n---\n"
                      "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
                      f"stateDir: {tmp_path / 'state'}\nmetricsBindAddress: 127.0.0.1:0\n" + evictd_lines,
                      encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "evictd", "run", "--config", str(config), "--cycles", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"),
                               "EVICTD_NODE_LOCK": str(tmp_path / "node.lock")})


def test_a_bad_value_or_webhook_without_an_api_exits_2_naming_key_and_value(tmp_path: Path) -> None:
    bad = run_config(tmp_path, "metricsAuthorization: RBAC\n")
    assert bad.returncode == 2, bad.stderr
    assert "metricsAuthorization" in bad.stderr and "RBAC" in bad.stderr
    assert "AlwaysAllow" in bad.stderr and "Webhook" in bad.stderr
    assert "Traceback" not in bad.stderr
    alone = run_config(tmp_path, "metricsAuthorization: Webhook\n")
    assert alone.returncode == 2, alone.stderr
    assert "metricsAuthorization" in alone.stderr and "Webhook" in alone.stderr and "Kubernetes API" in alone.stderr
    assert "Traceback" not in alone.stderr

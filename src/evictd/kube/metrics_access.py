"""The API conversation behind `metricsAuthorization: Webhook`: a TokenReview of the scrape's bearer token, then a
SubjectAccessReview of its user for `get /metrics` (evictd.core.metrics_access reads both answers).

Invariant: returns a Verdict for any token and any answer; an API failure is a 503 verdict, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from evictd.core.errors import KubeError
from evictd.core.metrics_access import (
    Verdict,
    access_review_spec,
    access_verdict,
    token_review_user,
    unreviewed,
)
from evictd.kube.api import KubeApi

# Each review's request deadline: the scrape waits for both (Prometheus' default scrape timeout is 10 s).
REVIEW_TIMEOUT_S = 4.0


def metrics_access_review(api: KubeApi, timeout_s: float = REVIEW_TIMEOUT_S) -> Callable[[str], Verdict]:
    """A function reviewing one bearer token for `get /metrics` through `api`."""

    def review(token: str) -> Verdict:
        try:
            user = token_review_user(api.create_token_review(token, timeout_s=timeout_s))
            if isinstance(user, Verdict):
                return user
            username = str(user["username"])
            spec = access_review_spec(user)
            answer: Mapping[str, object] = api.create_subject_access_review(spec, timeout_s=timeout_s)
            return access_verdict(answer, username)
        except KubeError as exc:
            return unreviewed(str(exc))

    return review

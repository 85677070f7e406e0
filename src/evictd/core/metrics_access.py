"""Who may read `/metrics` under `metricsAuthorization: Webhook`, decided as the kubelet decides for its own
endpoints: the bearer token's TokenReview names a user, and that user's SubjectAccessReview for the
non-resource URL (`get /metrics`) allows it.

Invariants: every answer of the API becomes a `Verdict` (an HTTP status and the reason sent to the client);
nothing here raises on a malformed review; a verdict's lifetime is the kubelet's webhook cache default for its
kind, so a revoked token or binding stops working within that time.

Source: pkg/kubelet/server/auth.go; the KubeletConfiguration defaults authentication.webhook.cacheTTL 2m,
authorization.webhook.cacheAuthorizedTTL 5m and cacheUnauthorizedTTL 30s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

METRICS_URL = "/metrics"
# How long each verdict is kept (the kubelet's defaults): a token's authentication 2 min (either way), an allowed
# user's verdict no longer than its token's, a forbidden one 30 s; a failed review (no answer) 1 s, so that a
# flood of scrapes during an API outage asks the API once a second.
AUTHENTICATED_TTL_S = 120.0
UNAUTHENTICATED_TTL_S = 120.0
FORBIDDEN_TTL_S = 30.0
FAILED_TTL_S = 1.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a scrape carrying a token gets: `status` 200, 401, 403 or 503, the reason in the answer's body, and
    how long the verdict holds (`ttl_s`)."""

    status: int
    reason: str
    ttl_s: float


def unauthenticated(reason: str) -> Verdict:
    return Verdict(401, f"Unauthorized: {reason}", UNAUTHENTICATED_TTL_S)


def unreviewed(reason: str) -> Verdict:
    """The API could not be asked (down, slow, evictd not allowed to create reviews): 503, retried soon."""
    return Verdict(503, f"authorization unavailable: {reason}", FAILED_TTL_S)


def token_review_user(review: Mapping[str, Any]) -> Mapping[str, Any] | Verdict:
    """The user an answered TokenReview names, or the 401 verdict when it does not authenticate the token."""
    status = review.get("status")
    if not isinstance(status, Mapping) or status.get("authenticated") is not True:
        error = status.get("error") if isinstance(status, Mapping) else None
        return unauthenticated(str(error) if isinstance(error, str) and error else "token not authenticated")
    user = status.get("user")
    if not isinstance(user, Mapping) or not isinstance(user.get("username"), str) or not user["username"]:
        return unauthenticated("the token review names no user")
    return user


def access_review_spec(user: Mapping[str, Any], verb: str = "get") -> dict[str, Any]:
    """The SubjectAccessReview spec asking whether `user` (a TokenReview's) may `verb` the metrics URL."""
    spec: dict[str, Any] = {"user": user["username"],
                            "nonResourceAttributes": {"path": METRICS_URL, "verb": verb}}
    groups = user.get("groups")
    if isinstance(groups, list) and all(isinstance(group, str) for group in groups):
        spec["groups"] = list(groups)
    if isinstance(user.get("uid"), str) and user["uid"]:
        spec["uid"] = user["uid"]
    extra = user.get("extra")
    if isinstance(extra, Mapping) and all(isinstance(v, list) for v in extra.values()):
        spec["extra"] = {str(key): list(values) for key, values in extra.items()}
    return spec


def access_verdict(review: Mapping[str, Any], username: str, verb: str = "get") -> Verdict:
    """200 when the answered SubjectAccessReview allows it, else 403 naming user, verb and path (as the kubelet)."""
    status = review.get("status")
    if isinstance(status, Mapping) and status.get("allowed") is True and status.get("denied") is not True:
        return Verdict(200, "ok", AUTHENTICATED_TTL_S)
    reason = status.get("reason") if isinstance(status, Mapping) else None
    said = f": {reason}" if isinstance(reason, str) and reason else ""
    return Verdict(403, f"Forbidden (user={username}, verb={verb}, path={METRICS_URL}){said}", FORBIDDEN_TTL_S)

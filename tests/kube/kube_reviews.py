"""TokenReviews and SubjectAccessReviews as kube-apiserver answers them (the delegated authentication and
authorization the kubelet and kube-rbac-proxy use), for the test API server.

`POST /apis/authentication.k8s.io/v1/tokenreviews` authenticates `spec.token` against the tokens the test
issued (`issue`: a user with uid, groups and extra; the server's own client tokens too, as service accounts);
`POST /apis/authorization.k8s.io/v1/subjectaccessreviews` evaluates the spec against non-resource grants in
the RBAC manner (`grant_non_resource`: a ClusterRole rule `nonResourceURLs`/`verbs`, bound to a user or a
group; a URL ending in `*` is a prefix; `system:masters` may do anything). Both answer 201 with the spec echoed
and the `status` filled, as the real server does; a bad spec is 400 (TokenReview without a token) or 422
(SubjectAccessReview without a user or group, or without exactly one of resource and non-resource attributes).
The caller must be allowed to create reviews (`system:auth-delegator`'s rules): `forbid_reviews(user)` takes
that away from a user, who then gets the real 403.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from kube_status import ApiError, FieldError, bad_request, invalid, status_body

AUTHENTICATION = "authentication.k8s.io"
AUTHORIZATION = "authorization.k8s.io"
ALL_AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class UserInfo:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        user: dict[str, Any] = {"username": self.username}
        if self.uid:
            user["uid"] = self.uid
        user["groups"] = [*self.groups, ALL_AUTHENTICATED]
        if self.extra:
            user["extra"] = {key: list(values) for key, values in self.extra.items()}
        return user


def service_account_user(username: str) -> UserInfo:
    """The user a service account's token authenticates as (its groups as the token authenticator gives them)."""
    parts = username.split(":")
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{parts[2]}") if len(parts) == 4 else ()
    return UserInfo(username, uid=f"uid-{parts[-1]}", groups=groups)


class Reviews:
    """Issued tokens, non-resource grants, and who may not create reviews."""

    def __init__(self, client_tokens: dict[str, str]) -> None:
        self._client_tokens = client_tokens
        self._issued: dict[str, UserInfo] = {}
        self._grants: set[tuple[str, str, str]] = set()  # (User:name | Group:name, verb, url)
        self._forbidden: set[str] = set()
        self._lock = threading.Lock()
        self.token_reviews = 0
        self.access_reviews = 0

    def issue(self, token: str, user: UserInfo) -> None:
        with self._lock:
            self._issued[token] = user

    def revoke(self, token: str) -> None:
        with self._lock:
            self._issued.pop(token, None)

    def grant_non_resource(self, subject: str, verb: str, url: str) -> None:
        """Bind a ClusterRole rule {nonResourceURLs: [url], verbs: [verb]} to `User:<name>` or `Group:<name>`."""
        assert subject.startswith(("User:", "Group:")), subject
        with self._lock:
            self._grants.add((subject, verb, url))

    def forbid_reviews(self, username: str) -> None:
        with self._lock:
            self._forbidden.add(username)

    def allow_reviews(self, username: str) -> None:
        with self._lock:
            self._forbidden.discard(username)

    def token_review(self, caller: str, body: Any) -> dict[str, Any]:
        self._check_caller(caller, "tokenreviews", AUTHENTICATION)
        spec = body.get("spec") if isinstance(body, dict) else None
        token = spec.get("token") if isinstance(spec, dict) else None
        if not isinstance(token, str) or not token:
            raise bad_request("token is required for TokenReview in authentication")
        with self._lock:
            self.token_reviews += 1
            user = self._issued.get(token)
            if user is None and token in self._client_tokens:
                user = service_account_user(self._client_tokens[token])
        status: dict[str, Any] = {"user": {}, "error": "[invalid bearer token]"}
        if user is not None:
            status = {"authenticated": True, "user": user.as_json(), "audiences": ["https://kubernetes.default.svc"]}
        return {"kind": "TokenReview", "apiVersion": f"{AUTHENTICATION}/v1", "metadata": {"creationTimestamp": None},
                "spec": spec, "status": status}

    def access_review(self, caller: str, body: Any) -> dict[str, Any]:
        self._check_caller(caller, "subjectaccessreviews", AUTHORIZATION)
        spec = body.get("spec") if isinstance(body, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        errors = []
        user, groups = spec.get("user") or "", spec.get("groups") or []
        attributes = [name for name in ("resourceAttributes", "nonResourceAttributes") if spec.get(name)]
        if len(attributes) == 2:
            errors.append(FieldError("invalid", "spec.nonResourceAttributes",
                                     "cannot be specified in combination with resourceAttributes",
                                     spec["nonResourceAttributes"]))
        if not attributes:
            errors.append(FieldError("invalid", "spec.resourceAttributes",
                                     "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
        if not user and not groups:
            errors.append(FieldError("invalid", "spec.user", "at least one of user or group must be specified", user))
        if errors:
            raise invalid("SubjectAccessReview", "", errors, AUTHORIZATION)
        allowed = False
        if attributes == ["nonResourceAttributes"]:
            wanted = spec["nonResourceAttributes"]
            subjects = {f"User:{user}", *(f"Group:{group}" for group in groups)}
            with self._lock:
                self.access_reviews += 1
                allowed = "Group:system:masters" in subjects or any(
                    subject in subjects and verb in (wanted.get("verb"), "*")
                    and _url_matches(url, wanted.get("path", "")) for subject, verb, url in self._grants)
        status = {"allowed": True, "reason": "RBAC: allowed by ClusterRoleBinding"} if allowed else {"allowed": False}
        return {"kind": "SubjectAccessReview", "apiVersion": f"{AUTHORIZATION}/v1",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}

    def _check_caller(self, caller: str, resource: str, group: str) -> None:
        with self._lock:
            forbidden = caller in self._forbidden
        if forbidden:
            message = (f'{resource}.{group} is forbidden: User "{caller}" cannot create resource "{resource}" in '
                       f'API group "{group}" at the cluster scope')
            raise ApiError(403, status_body(403, "Forbidden", message, {"group": group, "kind": resource}))


def _url_matches(rule: str, path: str) -> bool:
    return rule == path or rule == "*" or (rule.endswith("*") and path.startswith(rule[:-1]))

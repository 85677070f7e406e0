"""The test API server's TokenReviews and SubjectAccessReviews through the `kubernetes` package's generated
clients (AuthenticationV1Api, AuthorizationV1Api): its answers deserialize into the real models and mean what
kube-apiserver's mean (tests/kube/kube_reviews.py)."""

from __future__ import annotations

import json

import pytest
from apiserver import ApiServer
from kube_pki import DEFAULT_USER
from kube_reviews import UserInfo
from kubernetes import client
from kubernetes.client.exceptions import ApiException

SCRAPER = UserInfo("system:serviceaccount:monitoring:prometheus", uid="u-1", groups=("system:serviceaccounts",),
                   extra={"authentication.kubernetes.io/pod-name": ["prometheus-0"]})


def non_resource_review(user: str, groups: list[str] | None = None, path: str = "/metrics",
                        verb: str = "get") -> client.V1SubjectAccessReview:
    return client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, groups=groups, non_resource_attributes=client.V1NonResourceAttributes(path=path, verb=verb)))


def test_a_token_review_names_the_issued_user_or_says_the_token_is_invalid(apiserver: ApiServer) -> None:
    apiserver.reviews.issue("scraper-token", SCRAPER)
    api = client.AuthenticationV1Api(apiserver.api_client())
    review = api.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="scraper-token")))
    assert review.status.authenticated is True
    assert review.status.user.username == SCRAPER.username and review.status.user.uid == "u-1"
    assert review.status.user.groups == ["system:serviceaccounts", "system:authenticated"]
    assert review.status.user.extra == {"authentication.kubernetes.io/pod-name": ["prometheus-0"]}
    # The server's own client tokens are service accounts' tokens: they authenticate too.
    own = api.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=apiserver.token)))
    assert own.status.authenticated is True and own.status.user.username.startswith("system:serviceaccount:")
    unknown = api.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="nope")))
    assert not unknown.status.authenticated and unknown.status.error == "[invalid bearer token]"
    apiserver.reviews.revoke("scraper-token")
    revoked = api.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="scraper-token")))
    assert not revoked.status.authenticated


def test_an_access_review_follows_the_grants_to_users_groups_and_url_prefixes(apiserver: ApiServer) -> None:
    api = client.AuthorizationV1Api(apiserver.api_client())
    assert api.create_subject_access_review(non_resource_review("alice")).status.allowed is False
    apiserver.reviews.grant_non_resource("User:alice", "get", "/metrics")
    assert api.create_subject_access_review(non_resource_review("alice")).status.allowed is True
    assert api.create_subject_access_review(non_resource_review("alice", verb="post")).status.allowed is False
    assert api.create_subject_access_review(non_resource_review("alice", path="/metrics/x")).status.allowed is False
    apiserver.reviews.grant_non_resource("Group:readers", "get", "/debug/*")
    assert api.create_subject_access_review(non_resource_review("bob", ["readers"], "/debug/x")).status.allowed
    assert api.create_subject_access_review(non_resource_review("root", ["system:masters"], "/x", "put")).status.allowed


def test_bad_reviews_and_callers_without_the_grant_are_refused_as_kube_apiserver_refuses_them(
        apiserver: ApiServer) -> None:
    rest = apiserver.api_client()
    with pytest.raises(ApiException) as empty:
        client.AuthenticationV1Api(rest).create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="")))
    assert empty.value.status == 400
    with pytest.raises(ApiException) as nobody:
        client.AuthorizationV1Api(rest).create_subject_access_review(non_resource_review(""))
    assert nobody.value.status == 422 and "at least one of user or group" in str(nobody.value.body)
    apiserver.reviews.forbid_reviews(DEFAULT_USER)
    with pytest.raises(ApiException) as forbidden:
        client.AuthorizationV1Api(rest).create_subject_access_review(non_resource_review("alice"))
    assert forbidden.value.status == 403
    status = json.loads(forbidden.value.body)
    assert (status["reason"], status["message"]) == ("Forbidden", (
        f'subjectaccessreviews.authorization.k8s.io is forbidden: User "{DEFAULT_USER}" cannot create resource '
        '"subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope'))

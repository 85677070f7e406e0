"""The kubeconfig's shape is checked before the `kubernetes` loader walks it: a malformed entry is named."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from evictd.kube.kubeconfig_shape import kubeconfig_problem

GOOD = yaml.safe_load("""
apiVersion: v1
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: a, context: {cluster: c, user: u}}, {name: b, context: {cluster: c}}]
current-context: a
""")


def edited(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def test_a_well_formed_kubeconfig_has_no_problem() -> None:
    assert kubeconfig_problem(GOOD) is None
    assert kubeconfig_problem(edited(**{"current-context": "b"})) is None  # a context without a user


@pytest.mark.parametrize(("document", "problem"), [
    (["a"], "the file: a mapping expected, not ['a']"),
    (edited(clusters="x"), "clusters: a list expected, not 'x'"),
    (edited(users=["x"]), "users[0]: a mapping expected, not 'x'"),
    (edited(users=[{"user": {}}]), "users[0].name: a name expected, not None"),
    (edited(contexts=[{"name": "a", "context": "x"}]), "contexts[0].context: a mapping expected, not 'x'"),
    (edited(**{"current-context": None}), "current-context: the name of a context expected, not None"),
    (edited(**{"current-context": "z"}), "current-context: no context named 'z'"),
    (edited(contexts=[{"name": "a", "context": {"cluster": "nope", "user": "u"}}]),
     "context 'a'.cluster: no cluster named 'nope' in clusters"),
    (edited(contexts=[{"name": "a", "context": {"cluster": "c", "user": 7}}]), "context 'a'.user: a name expected, not 7"),
])
def test_a_malformed_kubeconfig_names_the_entry(document: Any, problem: str) -> None:
    assert kubeconfig_problem(document) == problem

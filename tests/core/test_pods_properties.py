"""Property tests of evictd.core.pod_parser.pod_from_dict: on any JSON-like input only DecodeError escapes,
the input is never mutated, and every rule runs on whatever parses.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import Json
from evictd.core.errors import DecodeError
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import Pod, QOSClass, counts_for_local_disk
from evictd.core.resources import pod_limit, pod_request
from evictd.record.documents import pod_to_dict

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


quantity_text = st.sampled_from(["1Gi", "100m", "0", "1e3", "1.5Gi", "2", "512Mi", "+1Ki", "1.500", "3G"])
resource_list = st.dictionaries(
    st.sampled_from(["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu"]), quantity_text
)
requirements = st.fixed_dictionaries({}, optional={"requests": resource_list, "limits": resource_list})
container_like = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", "c"])},
    optional={"restartPolicy": st.sampled_from(["Always", "Never"]), "resources": requirements},
)
volume_like = st.fixed_dictionaries(
    {
        "name": st.just("v"),
        "emptyDir": st.fixed_dictionaries(
            {}, optional={"medium": st.sampled_from(["", "Memory"]), "sizeLimit": quantity_text}
        ),
    }
) | st.builds(lambda kind: {"name": "o", kind: {}}, st.sampled_from(["hostPath", "configMap", "secret"]))
toleration_like = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["", "node.kubernetes.io/memory-pressure"]),
        "operator": st.sampled_from(["", "Exists", "Equal", "Lt"]),
        "value": st.sampled_from(["", "1"]),
        "effect": st.sampled_from(["", "NoSchedule"]),
        "tolerationSeconds": st.integers(0, 3600),
    },
)
valid_pod = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.just("p")},
            optional={
                "namespace": st.sampled_from(["", "ns"]),
                "annotations": st.dictionaries(
                    st.sampled_from(["kubernetes.io/config.source", "kubernetes.io/config.mirror"]),
                    st.sampled_from(["api", "file"]),
                ),
                "generation": st.integers(0, 10),
            },
        ),
        "spec": st.fixed_dictionaries(
            {"containers": st.lists(container_like, max_size=3)},
            optional={
                "initContainers": st.lists(container_like, max_size=3),
                "overhead": resource_list,
                "resources": requirements,
                "volumes": st.lists(volume_like, max_size=3),
                "tolerations": st.lists(toleration_like, max_size=2),
                "priority": st.integers(-(2**31), 2**31 - 1),
                "priorityClassName": st.sampled_from(["", "system-node-critical"]),
            },
        ),
    },
    optional={"status": st.fixed_dictionaries({}, optional={"qosClass": st.sampled_from(list(QOSClass))})},
)


def _positions(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (dict keys and list indices) to a value nested in `doc`."""
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(doc, dict):
        items = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    paths: list[tuple[Any, ...]] = []
    for key, value in items:
        paths.append((*prefix, key))
        paths.extend(_positions(value, (*prefix, key)))
    return paths


@st.composite
def corrupted_pod(draw: st.DrawFn) -> Json:
    """A valid pod with one nested value replaced by arbitrary JSON (reaches every level of the parser)."""
    doc: Json = draw(valid_pod)
    path = draw(st.sampled_from(_positions(doc)))
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = draw(json_value)
    return doc


def _parse_or_scenario_error(doc: Any) -> Pod | None:
    try:
        return pod_from_dict(doc)
    except DecodeError:
        return None


def _exercise(pod: Pod) -> None:
    """Run every rule on a parsed pod; none may raise."""
    for resource in ("cpu", "memory", "ephemeral-storage", "hugepages-2Mi"):
        pod_request(pod, resource)
        pod_limit(pod, resource)
    for volume in pod.volumes:
        counts_for_local_disk(volume)


@settings(max_examples=300, deadline=None)
@given(json_value)
def test_arbitrary_json_raises_only_scenario_error_and_is_not_mutated(doc: Any) -> None:
    before = copy.deepcopy(doc)
    _parse_or_scenario_error(doc)
    assert doc == before


@settings(max_examples=300, deadline=None)
@given(valid_pod)
def test_valid_pods_parse_and_every_rule_runs(doc: Json) -> None:
    before = copy.deepcopy(doc)
    pod = pod_from_dict(doc)
    assert doc == before
    assert len(pod.containers) == len(doc["spec"]["containers"])
    assert pod_from_dict(pod_to_dict(pod)) == pod, "a flight recording writes the pod back as it was read"
    _exercise(pod)


@settings(max_examples=600, deadline=None)
@given(corrupted_pod())
def test_corrupted_pods_raise_only_scenario_error_and_are_not_mutated(doc: Json) -> None:
    before = copy.deepcopy(doc)
    pod = _parse_or_scenario_error(doc)
    assert doc == before
    if pod is not None:
        _exercise(pod)

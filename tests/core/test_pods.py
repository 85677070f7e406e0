"""Tests of evictd.core.pods: parsing v1 Pod JSON and the kubelet's pod rules.

Cases are taken from the upstream unit tests where they exist (component-helpers resource helpers_test.go,
pkg/apis/core/v1/helper/qos qos_test.go, pkg/kubelet/qos policy_test.go, pkg/kubelet/types
pod_update_test.go, k8s.io/api/core/v1 toleration_test.go, eviction_manager_test.go TestAdmit*), with the
upstream case names as ids.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evictd.core.errors import ScenarioError
from evictd.core.pods import (
    MEMORY_PRESSURE_TAINT,
    Container,
    FrozenMap,
    Pod,
    QOSClass,
    Taint,
    Toleration,
    Volume,
    admit,
    compute_qos_class,
    container_request,
    counts_for_local_disk,
    is_critical_pod,
    is_local_ephemeral_volume,
    is_mirror_pod,
    is_node_critical_pod,
    is_static_pod,
    oom_score_adj,
    pod_from_dict,
    pod_limit,
    pod_priority,
    pod_request,
    qos_class,
    toleration_tolerates_taint,
)
from evictd.core.quantity import Quantity

Json = dict[str, Any]

# policy_test.go standardMemoryAmount and the quantities derived from it.
STANDARD_MEMORY = 8_000_000_000
MEM_REQ = str(STANDARD_MEMORY // 8)
MEM_LIM = str(1000 + STANDARD_MEMORY // 8)
POD_MEM_REQ = str(STANDARD_MEMORY // 4)
POD_MEM_LIM = str(1000 + STANDARD_MEMORY // 4)


def ctr(
    name: str = "c",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    *,
    sidecar: bool = False,
) -> Json:
    """A v1 container; `sidecar` sets restartPolicy Always (meaningful on init containers)."""
    out: Json = {"name": name, "image": "busybox", "resources": {}}
    if requests is not None:
        out["resources"]["requests"] = requests
    if limits is not None:
        out["resources"]["limits"] = limits
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def rl(cpu: str = "", memory: str = "") -> dict[str, str]:
    """A resource list like upstream's getResourceList: empty strings are left out."""
    out = {}
    if cpu:
        out["cpu"] = cpu
    if memory:
        out["memory"] = memory
    return out


def pod_json(
    containers: list[Json] | None = None,
    init: list[Json] | None = None,
    *,
    name: str = "p",
    spec: Json | None = None,
    metadata: Json | None = None,
    status: Json | None = None,
) -> Json:
    body: Json = {"containers": containers if containers is not None else [ctr()]}
    if init:
        body["initContainers"] = init
    body.update(spec or {})
    meta: Json = {"name": name, "namespace": "ns", "uid": "uid-1"}
    meta.update(metadata or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": status or {}}


def make(containers: list[Json] | None = None, init: list[Json] | None = None, **kw: Any) -> Pod:
    return pod_from_dict(pod_json(containers, init, **kw))


def q(text: str) -> Quantity:
    return Quantity.parse(text)


# --- parsing -----------------------------------------------------------------------------------------------

KUBECTL_POD: Json = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "annotations": {"kubernetes.io/config.seen": "2024-01-01T00:00:00Z"},
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "deletionGracePeriodSeconds": 30,
        "deletionTimestamp": "2024-01-01T00:05:00Z",
        "generation": 3,
        "labels": {"app": "web"},
        "name": "web-0",
        "namespace": "prod",
        "uid": "6a1b2c3d",
    },
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "nginx",
                "resources": {
                    "limits": {"memory": "1Gi", "ephemeral-storage": "2Gi"},
                    "requests": {"cpu": "100m", "memory": "512Mi"},
                },
            }
        ],
        "initContainers": [
            {"name": "log-shipper", "image": "fluent", "restartPolicy": "Always", "resources": {}},
        ],
        "nodeName": "node-a",
        "overhead": {"memory": "10Mi"},
        "priority": 1000,
        "priorityClassName": "high",
        "terminationGracePeriodSeconds": 45,
        "tolerations": [
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "tolerationSeconds": 300,
            }
        ],
        "volumes": [
            {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {"name": "kube-api-access-x", "projected": {"sources": []}},
        ],
    },
    "status": {"phase": "Running", "qosClass": "Burstable"},
}


def test_pod_from_dict_reads_every_field_kubectl_prints() -> None:
    pod = pod_from_dict(KUBECTL_POD)
    assert (pod.namespace, pod.name, pod.uid, pod.key) == ("prod", "web-0", "6a1b2c3d", "prod/web-0")
    assert dict(pod.annotations) == {"kubernetes.io/config.seen": "2024-01-01T00:00:00Z"}
    assert dict(pod.labels) == {"app": "web"}
    assert (pod.generation, pod.deletion_timestamp, pod.deletion_grace_period_s) == (
        3,
        "2024-01-01T00:05:00Z",
        30,
    )
    assert pod.is_terminating
    assert (pod.priority, pod.priority_class_name, pod.termination_grace_period_s) == (1000, "high", 45)
    assert pod.node_name == "node-a"
    assert [c.name for c in pod.containers] == ["app"]
    app = pod.containers[0]
    assert str(app.requests["cpu"]) == "100m" and str(app.requests["memory"]) == "512Mi"
    assert str(app.limits["ephemeral-storage"]) == "2Gi" and app.restart_policy is None
    assert pod.init_containers == (Container(name="log-shipper", restart_policy="Always"),)
    assert str(pod.overhead["memory"]) == "10Mi"
    assert pod.resources is None and dict(pod.pod_level_requests) == {}
    assert pod.tolerations == (
        Toleration(key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute", toleration_seconds=300),
    )
    assert pod.volumes[0] == Volume(name="scratch", kind="emptyDir", empty_dir_medium="", empty_dir_size_limit=q("1Gi"))
    assert pod.volumes[1] == Volume(name="shm", kind="emptyDir", empty_dir_medium="Memory")
    assert pod.volumes[2] == Volume(name="kube-api-access-x", kind="projected")
    assert (pod.status_phase, pod.status_qos_class) == ("Running", QOSClass.BURSTABLE)


def test_pod_from_dict_defaults_for_a_minimal_pod() -> None:
    pod = pod_from_dict({"metadata": {"name": "solo"}})
    assert pod == Pod(name="solo")
    assert pod.key == "default/solo"
    assert (pod.uid, pod.generation, pod.priority, pod.is_terminating) == ("", 0, None, False)
    assert pod.status_qos_class is None and pod.resources is None
    assert pod_priority(pod) == 0


@pytest.mark.parametrize(
    ("metadata", "namespace"),
    [
        pytest.param({"namespace": None}, "default", id="null-namespace"),
        pytest.param({"namespace": ""}, "default", id="empty-namespace"),
        pytest.param({"namespace": "kube-system"}, "kube-system", id="explicit"),
    ],
)
def test_namespace_defaults_to_default(metadata: Json, namespace: str) -> None:
    assert make(metadata=metadata).namespace == namespace


def test_pod_level_resources_present_but_empty_is_kept_apart_from_absent() -> None:
    assert make(spec={"resources": {}}).resources is not None
    assert make(spec={"resources": None}).resources is None


def test_null_quantity_in_a_resource_list_is_a_present_zero_as_in_go() -> None:
    pod = make([ctr(limits={"ephemeral-storage": None})])  # type: ignore[dict-item]
    assert pod.containers[0].limits["ephemeral-storage"].sign() == 0


def test_numeric_quantities_are_accepted_like_go_unmarshal_json() -> None:
    pod = make([ctr(requests={"memory": 1024, "cpu": 0.5})])  # type: ignore[dict-item]
    assert str(pod.containers[0].requests["memory"]) == "1024"
    assert str(pod.containers[0].requests["cpu"]) == "500m"


def test_pods_are_hashable_values() -> None:
    first, second = pod_from_dict(KUBECTL_POD), pod_from_dict(copy.deepcopy(KUBECTL_POD))
    assert first == second and hash(first) == hash(second)
    assert len({first, second}) == 1
    assert FrozenMap({"a": 1}) == {"a": 1} and hash(FrozenMap({"a": 1})) == hash(FrozenMap([("a", 1)]))


def _with(path: list[str | int], value: Any) -> Json:
    doc = copy.deepcopy(KUBECTL_POD)
    target: Any = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "key", "reason"),
    [
        pytest.param([], "pod", "expected a Pod object", id="not-an-object"),
        pytest.param({"metadata": {}}, "pod.metadata.name", "name is required", id="no-name"),
        pytest.param({"metadata": {"name": ""}}, "pod.metadata.name", "name is required", id="empty-name"),
        pytest.param({"metadata": []}, "pod.metadata", "expected an object", id="metadata-list"),
        pytest.param(_with(["metadata", "name"], 7), "pod.metadata.name", "expected a string", id="name-int"),
        pytest.param(
            _with(["metadata", "annotations"], {"a": 1}),
            "pod.metadata.annotations.a",
            "expected a string",
            id="annotation-value-int",
        ),
        pytest.param(
            _with(["metadata", "labels"], {"app.kubernetes.io/name": True}),
            "pod.metadata.labels[app.kubernetes.io/name]",
            "expected a string",
            id="label-key-bracketed",
        ),
        pytest.param(
            _with(["spec", "containers", 0, "resources", "requests", "memory"], "12Q"),
            "pod.spec.containers[0].resources.requests.memory",
            "",
            id="bad-quantity",
        ),
        pytest.param(
            _with(["spec", "containers", 0, "resources", "limits"], {"nvidia.com/gpu": [1]}),
            "pod.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "expected a quantity string",
            id="quantity-list",
        ),
        pytest.param(
            _with(["spec", "containers", 0, "resources", "requests", "cpu"], True),
            "pod.spec.containers[0].resources.requests.cpu",
            "expected a quantity string",
            id="quantity-bool",
        ),
        pytest.param(_with(["spec", "containers"], {}), "pod.spec.containers", "expected a list", id="containers-obj"),
        pytest.param(
            _with(["spec", "containers", 0], "app"),
            "pod.spec.containers[0]",
            "expected an object",
            id="container-string",
        ),
        pytest.param(
            _with(["spec", "initContainers", 0, "name"], None),
            "pod.spec.initContainers[0].name",
            "name is required",
            id="init-container-no-name",
        ),
        pytest.param(
            _with(["spec", "priority"], "high"),
            "pod.spec.priority",
            "expected an integer",
            id="priority-string",
        ),
        pytest.param(_with(["spec", "priority"], True), "pod.spec.priority", "expected an integer", id="priority-bool"),
        pytest.param(_with(["spec", "priority"], 2.0), "pod.spec.priority", "expected an integer", id="priority-float"),
        pytest.param(_with(["spec", "priority"], 2**31), "pod.spec.priority", "out of range", id="priority-int32"),
        pytest.param(
            _with(["spec", "volumes", 0], {"name": "v"}),
            "pod.spec.volumes[0]",
            "must specify exactly 1 volume type",
            id="volume-without-source",
        ),
        pytest.param(
            _with(["spec", "volumes", 0], {"name": "v", "emptyDir": {}, "hostPath": {"path": "/"}}),
            "pod.spec.volumes[0]",
            "must specify exactly 1 volume type",
            id="volume-two-sources",
        ),
        pytest.param(
            _with(["spec", "volumes", 0, "emptyDir"], "yes"),
            "pod.spec.volumes[0].emptyDir",
            "expected an object",
            id="volume-source-not-object",
        ),
        pytest.param(
            _with(["spec", "volumes", 0, "emptyDir", "sizeLimit"], "lots"),
            "pod.spec.volumes[0].emptyDir.sizeLimit",
            "",
            id="emptydir-size-limit",
        ),
        pytest.param(
            _with(["spec", "tolerations", 0, "tolerationSeconds"], "300"),
            "pod.spec.tolerations[0].tolerationSeconds",
            "expected an integer",
            id="toleration-seconds",
        ),
        pytest.param(
            _with(["status", "qosClass"], "Premium"),
            "pod.status.qosClass",
            "unsupported QoS class",
            id="unknown-qos-class",
        ),
    ],
)
def test_pod_from_dict_rejects_malformed_pods(doc: Any, key: str, reason: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        pod_from_dict(doc)
    assert caught.value.key == key
    assert reason in caught.value.reason


HUGE = 10**5000  # str()/repr() of this raises ValueError in CPython (int max str digits)


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        pytest.param(_with(["spec", "priority"], HUGE), "pod.spec.priority", id="huge-priority"),
        pytest.param(_with(["spec", "overhead"], {"memory": HUGE}), "pod.spec.overhead.memory", id="huge-int-quantity"),
        pytest.param(_with(["metadata"], [HUGE]), "pod.metadata", id="list-holding-huge-int"),
        pytest.param(
            _with(["spec", "containers", 0, "resources", "limits", "cpu"], 10**1500),
            "pod.spec.containers[0].resources.limits.cpu",
            id="int-quantity-too-large-for-quantity",
        ),
    ],
)
def test_unprintable_values_still_give_scenario_error(doc: Json, key: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        pod_from_dict(doc)
    assert caught.value.key == key
    assert str(caught.value)


def test_error_keys_start_at_where() -> None:
    with pytest.raises(ScenarioError) as caught:
        pod_from_dict(_with(["spec", "containers", 0, "resources", "requests", "memory"], "x"), where="pods[3]")
    assert caught.value.key == "pods[3].spec.containers[0].resources.requests.memory"
    assert caught.value.value == "x"


# --- arbitrary input: only ScenarioError, never a mutation ------------------------------------------------

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
    except ScenarioError:
        return None


def _exercise(pod: Pod) -> None:
    """Run every rule on a parsed pod; none may raise."""
    for resource in ("cpu", "memory", "ephemeral-storage", "hugepages-2Mi"):
        pod_request(pod, resource)
        pod_limit(pod, resource)
    for conditions in (set(), {"MemoryPressure"}, {"DiskPressure"}):
        admit(pod, conditions)
    for container in (*pod.containers, *pod.init_containers):
        # No range check: like upstream, a pod-level request below the containers' sum goes above 1000.
        assert isinstance(oom_score_adj(pod, container.name, 1 << 30), int)
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
    _exercise(pod)


@settings(max_examples=600, deadline=None)
@given(corrupted_pod())
def test_corrupted_pods_raise_only_scenario_error_and_are_not_mutated(doc: Json) -> None:
    before = copy.deepcopy(doc)
    pod = _parse_or_scenario_error(doc)
    assert doc == before
    if pod is not None:
        _exercise(pod)


# --- critical pods (pod_update_test.go) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "priority", "class_name", "static", "mirror", "critical", "node_critical"),
    [
        pytest.param({}, None, "", False, False, False, False, id="regular-pod"),
        pytest.param({"kubernetes.io/config.source": "file"}, None, "", True, False, True, False, id="static-file"),
        pytest.param({"kubernetes.io/config.source": "http"}, None, "", True, False, True, False, id="static-http"),
        pytest.param({"kubernetes.io/config.source": "api"}, None, "", False, False, False, False, id="source-api"),
        pytest.param({"kubernetes.io/config.source": ""}, None, "", True, False, True, False, id="source-empty"),
        pytest.param({"kubernetes.io/config.mirror": "abc"}, None, "", False, True, True, False, id="mirror"),
        pytest.param({"kubernetes.io/config.mirror": ""}, None, "", False, True, True, False, id="mirror-empty"),
        pytest.param({}, 1999999999, "", False, False, False, False, id="priority-below-critical"),
        pytest.param({}, 2000000000, "system-cluster-critical", False, False, True, False, id="cluster-critical"),
        pytest.param({}, 2000001000, "system-node-critical", False, False, True, True, id="node-critical"),
        pytest.param({}, None, "system-node-critical", False, False, False, False, id="node-class-no-priority"),
        pytest.param(
            {"kubernetes.io/config.source": "file"},
            None,
            "system-node-critical",
            True,
            False,
            True,
            True,
            id="static-node-critical-class",
        ),
        pytest.param(
            {"scheduler.alpha.kubernetes.io/critical-pod": ""},
            None,
            "",
            False,
            False,
            False,
            False,
            id="legacy-critical-annotation-ignored",
        ),
    ],
)
def test_critical_pods(
    annotations: dict[str, str],
    priority: int | None,
    class_name: str,
    static: bool,
    mirror: bool,
    critical: bool,
    node_critical: bool,
) -> None:
    pod = Pod(
        name="p",
        namespace="kube-system",
        annotations=FrozenMap(annotations),
        priority=priority,
        priority_class_name=class_name,
    )
    assert (is_static_pod(pod), is_mirror_pod(pod), is_critical_pod(pod), is_node_critical_pod(pod)) == (
        static,
        mirror,
        critical,
        node_critical,
    )


# --- requests (GetResourceRequestQuantity over component-helpers PodRequests) -----------------------------


def sidecar(name: str, cpu: str) -> Json:
    return ctr(name, {"cpu": cpu}, sidecar=True)


def init(name: str, cpu: str) -> Json:
    return ctr(name, {"cpu": cpu})


@pytest.mark.parametrize(
    ("pod", "resource", "expected"),
    [
        pytest.param(
            make([ctr(requests={"cpu": "1"})], [init("i", "4")]),
            "cpu",
            "4",
            id="nil-options-larger-init-container",
        ),
        pytest.param(
            make([ctr("a", {"cpu": "2"}), ctr("b", {"cpu": "3"})], [init("i", "2")]),
            "cpu",
            "5",
            id="nil-options-larger-containers",
        ),
        pytest.param(
            make(
                [ctr("a", {"cpu": "2"}), ctr("b", {"cpu": "3"})],
                [init("i", "2")],
                spec={"overhead": {"cpu": "1", "memory": "1Gi"}},
            ),
            "cpu",
            "6",
            id="pod-overhead-included",
        ),
        pytest.param(
            make([ctr("a", {"cpu": "2"})], spec={"overhead": {"memory": "1Gi"}}),
            "memory",
            "0",
            id="overhead-not-added-to-zero-request",
        ),
        pytest.param(
            make([ctr("container-1", {"cpu": "1"})], [sidecar("restartable-init-1", "1")]),
            "cpu",
            "2",
            id="restartable-init-container",
        ),
        pytest.param(
            make(
                [ctr("container-1", {"cpu": "1"})],
                [init("init-1", "5"), sidecar("r1", "1"), sidecar("r2", "2"), sidecar("r3", "3")],
            ),
            "cpu",
            "7",
            id="multiple-restartable-init-containers",
        ),
        pytest.param(
            make(
                [ctr("container-1", {"cpu": "1"})],
                [
                    init("init-1", "5"),
                    sidecar("r1", "1"),
                    sidecar("r2", "2"),
                    init("init-2", "5"),
                    sidecar("r3", "3"),
                ],
            ),
            "cpu",
            "8",
            id="multiple-restartable-and-regular-init-containers",
        ),
        pytest.param(
            make([ctr("container-1", {"cpu": "100"})], [sidecar("r1", "10"), init("init-1", "200")]),
            "cpu",
            "210",
            id="restartable-init-init-and-regular",
        ),
        pytest.param(
            make([ctr("a", {"memory": "1Gi"}), ctr("b", {"memory": "512Mi"})]),
            "memory",
            "1536Mi",
            id="sum-keeps-binary-format",
        ),
        pytest.param(
            make([ctr("a", {"memory": "0"}), ctr("b", {"memory": "1Gi"})]),
            "memory",
            "1Gi",
            id="zero-receiver-takes-addend-format",
        ),
        pytest.param(make([ctr("a")]), "ephemeral-storage", "0", id="missing-is-zero"),
        pytest.param(
            make([ctr("a", {"ephemeral-storage": "1Gi"})], spec={"overhead": {"ephemeral-storage": "1Mi"}}),
            "ephemeral-storage",
            "1025Mi",
            id="overhead-added-to-non-zero",
        ),
        pytest.param(
            make(
                [ctr("a", {"memory": "1Gi", "ephemeral-storage": "1Gi"})],
                spec={"resources": {"requests": {"memory": "3Gi"}}},
            ),
            "memory",
            "3Gi",
            id="pod-level-request-wins",
        ),
        pytest.param(
            make(
                [ctr("a", {"memory": "1Gi", "ephemeral-storage": "1Gi"})],
                spec={"resources": {"requests": {"memory": "3Gi"}}},
            ),
            "ephemeral-storage",
            "0",
            id="pod-level-set-ignores-container-ephemeral-storage",
        ),
        pytest.param(
            make([ctr("a", {"memory": "1Gi"})], spec={"resources": {"limits": {"memory": "3Gi"}}}),
            "memory",
            "0",
            id="pod-level-limits-only-request-zero",
        ),
        pytest.param(
            make([ctr("a", {"memory": "1Gi", "cpu": "1"})], spec={"resources": {"requests": {"memory": "3Gi"}}}),
            "cpu",
            "0",
            id="pod-level-set-other-supported-resource-zero",
        ),
        pytest.param(
            make(
                [ctr("a", {"ephemeral-storage": "1Gi"})],
                spec={"resources": {"requests": {"ephemeral-storage": "5Gi"}}},
            ),
            "ephemeral-storage",
            "1Gi",
            id="pod-level-unsupported-only-uses-containers",
        ),
        pytest.param(
            make(
                [ctr("a", {"hugepages-2Mi": "2Mi"})],
                spec={"resources": {"requests": {"hugepages-2Mi": "4Mi"}}},
            ),
            "hugepages-2Mi",
            "4Mi",
            id="pod-level-hugepages",
        ),
        pytest.param(
            make(
                [ctr("a", {"memory": "1Gi"})],
                spec={"resources": {"requests": {"memory": "3Gi"}}, "overhead": {"memory": "1Gi"}},
            ),
            "memory",
            "4Gi",
            id="pod-level-request-plus-overhead",
        ),
    ],
)
def test_pod_request(pod: Pod, resource: str, expected: str) -> None:
    assert str(pod_request(pod, resource)) == expected


def test_container_request_missing_is_zero() -> None:
    container = Container(name="c", requests=FrozenMap({"memory": q("1Gi")}))
    assert container_request(container, "memory") == q("1Gi")
    assert container_request(container, "cpu").sign() == 0


# --- limits (component-helpers PodLimits, as localStorageEviction uses it) --------------------------------


def lim(name: str, cpu: str = "", memory: str = "", *, side: bool = False) -> Json:
    return ctr(name, limits=rl(cpu, memory), sidecar=side)


@pytest.mark.parametrize(
    ("pod", "resource", "expected"),
    [
        pytest.param(make([lim("c", "1")], [lim("i", "4")]), "cpu", "4", id="nil-options-larger-init-container"),
        pytest.param(make([lim("a", "2"), lim("b", "3")], [lim("i", "2")]), "cpu", "5", id="larger-containers"),
        pytest.param(
            make(
                [lim("a", "2"), lim("b", "3")],
                [lim("i", "2")],
                spec={"overhead": {"cpu": "1", "memory": "1Gi"}},
            ),
            "cpu",
            "6",
            id="pod-overhead-included",
        ),
        pytest.param(
            make([lim("a", "2"), lim("b", "3")], spec={"overhead": {"cpu": "1", "memory": "1Gi"}}),
            "memory",
            None,
            id="overhead-only-on-non-zero-limits",
        ),
        pytest.param(make([ctr("a")]), "cpu", None, id="no-limited-containers-no-pod-limit"),
        pytest.param(make([lim("a", "2", "2Gi"), ctr("b")]), "memory", "2Gi", id="one-limited-one-unlimited"),
        pytest.param(
            make([lim("a", "1", "1Gi")], [lim("i", "2", "2Gi"), ctr("j")]),
            "memory",
            "2Gi",
            id="one-limited-one-unlimited-init",
        ),
        pytest.param(make([lim("c", "1")], [lim("r1", "1", side=True)]), "cpu", "2", id="restartable-init-container"),
        pytest.param(
            make(
                [lim("c", "1")],
                [
                    lim("i1", "5"),
                    lim("r1", "1", side=True),
                    lim("r2", "2", side=True),
                    lim("r3", "3", side=True),
                ],
            ),
            "cpu",
            "7",
            id="multiple-restartable-init-containers",
        ),
        pytest.param(
            make(
                [lim("c", "1")],
                [
                    lim("i1", "5"),
                    lim("r1", "1", side=True),
                    lim("r2", "2", side=True),
                    lim("i2", "5"),
                    lim("r3", "3", side=True),
                ],
            ),
            "cpu",
            "8",
            id="multiple-restartable-and-regular-init-containers",
        ),
        pytest.param(
            make([lim("c", "100")], [lim("r1", "10", side=True), lim("i1", "200")]),
            "cpu",
            "210",
            id="restartable-init-init-and-regular",
        ),
        pytest.param(
            make([ctr("a", limits={"ephemeral-storage": "0"})], spec={"overhead": {"ephemeral-storage": "1Gi"}}),
            "ephemeral-storage",
            "0",
            id="zero-limit-is-set-and-gets-no-overhead",
        ),
        pytest.param(
            make(
                [ctr("a", limits={"ephemeral-storage": "1Gi"}), ctr("b")],
                spec={"overhead": {"ephemeral-storage": "512Mi"}},
            ),
            "ephemeral-storage",
            "1536Mi",
            id="ephemeral-storage-plus-overhead",
        ),
        pytest.param(
            make([lim("a", "1", "1Gi")], spec={"resources": {"limits": {"memory": "4Gi"}}}),
            "memory",
            "4Gi",
            id="pod-level-limit-wins",
        ),
        pytest.param(
            make([ctr("a")], spec={"resources": {"limits": {"memory": "4Gi"}}}),
            "memory",
            "4Gi",
            id="pod-level-limit-without-container-limits",
        ),
        pytest.param(
            make([lim("a", "1", "1Gi")], spec={"resources": {"requests": {"memory": "4Gi"}}}),
            "memory",
            "1Gi",
            id="pod-level-requests-only-keep-container-limit",
        ),
        pytest.param(
            make(
                [ctr("a", limits={"ephemeral-storage": "1Gi"})],
                spec={"resources": {"limits": {"memory": "4Gi", "ephemeral-storage": "9Gi"}}},
            ),
            "ephemeral-storage",
            "1Gi",
            id="pod-level-ephemeral-storage-unsupported",
        ),
    ],
)
def test_pod_limit(pod: Pod, resource: str, expected: str | None) -> None:
    limit = pod_limit(pod, resource)
    assert (None if limit is None else str(limit)) == expected


# --- volumes (IsLocalEphemeralVolume, localVolumeNames) ----------------------------------------------------


@pytest.mark.parametrize(
    ("volume", "local_ephemeral", "local_disk"),
    [
        pytest.param(Volume(name="v", kind="emptyDir", empty_dir_medium=""), True, True, id="emptydir-default"),
        pytest.param(Volume(name="v", kind="emptyDir", empty_dir_medium="Memory"), False, False, id="emptydir-memory"),
        pytest.param(
            Volume(name="v", kind="emptyDir", empty_dir_medium="HugePages"),
            False,
            False,
            id="emptydir-hugepages",
        ),
        pytest.param(
            Volume(name="v", kind="emptyDir", empty_dir_medium="HugePages-2Mi"),
            False,
            False,
            id="emptydir-hugepages-2mi",
        ),
        pytest.param(Volume(name="v", kind="gitRepo"), True, True, id="gitrepo"),
        pytest.param(Volume(name="v", kind="configMap"), True, True, id="configmap"),
        pytest.param(Volume(name="v", kind="hostPath"), False, True, id="hostpath"),
        pytest.param(Volume(name="v", kind="secret"), False, False, id="secret"),
        pytest.param(Volume(name="v", kind="downwardAPI"), False, False, id="downward-api"),
        pytest.param(Volume(name="v", kind="projected"), False, False, id="projected"),
        pytest.param(Volume(name="v", kind="persistentVolumeClaim"), False, False, id="pvc"),
    ],
)
def test_local_volumes(volume: Volume, local_ephemeral: bool, local_disk: bool) -> None:
    assert is_local_ephemeral_volume(volume) is local_ephemeral
    assert counts_for_local_disk(volume) is local_disk


def test_emptydir_medium_parsed_from_json() -> None:
    pod = make(spec={"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {"medium": "Memory"}}]})
    assert [is_local_ephemeral_volume(v) for v in pod.volumes] == [True, False]


# --- QoS (qos_test.go TestGetPodQOS, plus pod-level resources) --------------------------------------------

GUARANTEED = rl("100m", "100Mi")


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(make([ctr("g", GUARANTEED, GUARANTEED)]), QOSClass.GUARANTEED, id="guaranteed"),
        pytest.param(
            make([ctr("g", GUARANTEED, GUARANTEED), ctr("g", GUARANTEED, GUARANTEED)]),
            QOSClass.GUARANTEED,
            id="guaranteed-guaranteed",
        ),
        pytest.param(make([ctr("a"), ctr("b")]), QOSClass.BEST_EFFORT, id="best-effort-best-effort"),
        pytest.param(make([ctr("a")]), QOSClass.BEST_EFFORT, id="best-effort"),
        pytest.param(make([ctr("a"), ctr("b", rl("1"), rl("2"))]), QOSClass.BURSTABLE, id="best-effort-burstable"),
        pytest.param(
            make([ctr("a"), ctr("b", rl("10m", "100Mi"), rl("10m", "100Mi"))]),
            QOSClass.BURSTABLE,
            id="best-effort-guaranteed",
        ),
        pytest.param(
            make([ctr("b", rl("", "100Mi"), rl("", "100Mi"))]),
            QOSClass.BURSTABLE,
            id="burstable-cpu-guaranteed-memory",
        ),
        pytest.param(make([ctr("b", GUARANTEED, {})]), QOSClass.BURSTABLE, id="burstable-no-limits"),
        pytest.param(
            make([ctr("b", rl("1", "100Mi"), rl("2", "100Mi")), ctr("g", GUARANTEED, GUARANTEED)]),
            QOSClass.BURSTABLE,
            id="burstable-guaranteed",
        ),
        pytest.param(
            make([ctr("b", GUARANTEED, rl("200m", "200Mi")), ctr("u", GUARANTEED, {})]),
            QOSClass.BURSTABLE,
            id="burstable-unbounded-but-requests-match-limits",
        ),
        pytest.param(make([ctr("b", rl("10m", "100Mi"), rl("100m", "200Mi"))]), QOSClass.BURSTABLE, id="burstable-1"),
        pytest.param(make([ctr("b", rl("0", "0"), rl("100m", "200Mi"))]), QOSClass.BURSTABLE, id="burstable-2"),
        pytest.param(
            make([ctr("h", {**rl("0", "0"), "hugepages-2Mi": "1Gi"}, {**rl("0", "0"), "hugepages-2Mi": "1Gi"})]),
            QOSClass.BEST_EFFORT,
            id="best-effort-hugepages",
        ),
        pytest.param(
            make([ctr("be")], [ctr("b", rl("10m", "100Mi"), rl("100m", "200Mi"))]),
            QOSClass.BURSTABLE,
            id="init-container",
        ),
        pytest.param(
            make([ctr("g", GUARANTEED, GUARANTEED)], [ctr("i", GUARANTEED, GUARANTEED)]),
            QOSClass.GUARANTEED,
            id="guaranteed-with-guaranteed-init",
        ),
        pytest.param(make([ctr("z", limits={"memory": "0"})]), QOSClass.BEST_EFFORT, id="zero-memory-limit"),
        pytest.param(
            make([ctr("e", {"ephemeral-storage": "1Gi"}, {"ephemeral-storage": "1Gi"})]),
            QOSClass.BEST_EFFORT,
            id="ephemeral-storage-only-is-best-effort",
        ),
        pytest.param(
            make([ctr("a"), ctr("b")], spec={"resources": {"requests": GUARANTEED, "limits": GUARANTEED}}),
            QOSClass.GUARANTEED,
            id="pod-level-guaranteed-no-container-resources",
        ),
        pytest.param(
            make(
                [ctr("b", rl("3m", "1Gi"), rl("5m", "2Gi")), ctr("e")],
                spec={"resources": {"requests": GUARANTEED, "limits": GUARANTEED}},
            ),
            QOSClass.GUARANTEED,
            id="pod-level-guaranteed-unequal-container-requests",
        ),
        pytest.param(
            make([ctr("a")], spec={"resources": {"requests": GUARANTEED, "limits": rl("100m", "200Mi")}}),
            QOSClass.BURSTABLE,
            id="pod-level-burstable",
        ),
        pytest.param(
            make([ctr("a")], spec={"resources": {"limits": GUARANTEED}}),
            QOSClass.BURSTABLE,
            id="pod-level-limits-without-requests",
        ),
        pytest.param(
            make([ctr("g", GUARANTEED, GUARANTEED)], spec={"resources": {}}),
            QOSClass.BEST_EFFORT,
            id="pod-level-present-but-empty-overrides-containers",
        ),
    ],
)
def test_compute_qos_class(pod: Pod, expected: QOSClass) -> None:
    assert compute_qos_class(pod) is expected
    assert qos_class(pod) is expected


def test_status_qos_class_wins() -> None:
    pod = make([ctr("g", GUARANTEED, GUARANTEED)], status={"qosClass": "BestEffort"})
    assert compute_qos_class(pod) is QOSClass.GUARANTEED
    assert qos_class(pod) is QOSClass.BEST_EFFORT
    assert qos_class(make([ctr("a")], status={"qosClass": ""})) is QOSClass.BEST_EFFORT


# --- oom_score_adj (policy_test.go TestGetContainerOOMScoreAdjust) ----------------------------------------

MAIN = ctr("main-1", {"memory": MEM_REQ}, {"memory": MEM_LIM})
INIT = ctr("init-container", {"memory": MEM_REQ}, {"memory": MEM_LIM})


def _side(name: str, request: str) -> Json:
    return ctr(name, {"memory": request}, {"memory": MEM_LIM}, sidecar=True)


POD_GUARANTEED = {
    "requests": {"cpu": "5m", "memory": POD_MEM_REQ},
    "limits": {"cpu": "5m", "memory": POD_MEM_REQ},
}
POD_BURSTABLE = {
    "requests": {"cpu": "5m", "memory": POD_MEM_REQ},
    "limits": {"cpu": "5m", "memory": POD_MEM_LIM},
}
MEM_GUARANTEED_CTR = {"cpu": "5m", "memory": MEM_REQ}


@pytest.mark.parametrize(
    ("pod", "capacity", "expected"),
    [
        pytest.param(make([ctr("cpu-limit", limits={"cpu": "10"})]), 4_000_000_000, {"cpu-limit": 999}, id="cpu-limit"),
        pytest.param(
            make([ctr("m", {"cpu": "0"}, {"memory": "10G"})]),
            8_000_000_000,
            {"m": 999},
            id="memory-limit-cpu-request",
        ),
        pytest.param(make([ctr("z", limits={"memory": "0"})]), 7_230_457_451, {"z": 1000}, id="zero-memory-limit"),
        pytest.param(make([ctr("n")]), 4_000_000_000, {"n": 1000}, id="no-request-limit"),
        pytest.param(
            make([ctr("e", {"memory": "10G", "cpu": "5m"}, {"cpu": "5m", "memory": "10G"})]),
            123456789,
            {"e": -997},
            id="equal-request-limit-cpu-memory",
        ),
        pytest.param(
            make([ctr("c", {"memory": str(STANDARD_MEMORY // 2), "cpu": "5m"}, {"memory": "10G"})]),
            STANDARD_MEMORY,
            {"c": 500},
            id="cpu-unlimited-memory-limited-with-requests",
        ),
        pytest.param(
            make([ctr("r", {"memory": str(STANDARD_MEMORY - 1), "cpu": "5m"})]),
            STANDARD_MEMORY,
            {"r": 3},
            id="request-no-limit",
        ),
        pytest.param(
            make([ctr("cc")], spec={"priority": 2000000000, "priorityClassName": "system-cluster-critical"}),
            4_000_000_000,
            {"cc": 1000},
            id="cluster-critical",
        ),
        pytest.param(
            make([ctr("nc")], spec={"priority": 2000001000, "priorityClassName": "system-node-critical"}),
            4_000_000_000,
            {"nc": -997},
            id="node-critical",
        ),
        pytest.param(
            make([ctr("u", {"memory": MEM_REQ}, {"memory": MEM_LIM})]),
            STANDARD_MEMORY,
            {"u": 875},
            id="burstable-unique-container-pod",
        ),
        pytest.param(
            make([MAIN], [INIT]),
            STANDARD_MEMORY,
            {"init-container": 875, "main-1": 875},
            id="burstable-mixed-unique-main-container-pod",
        ),
        pytest.param(
            make([MAIN], [INIT, _side("sidecar-small-container", str(STANDARD_MEMORY // 20))]),
            STANDARD_MEMORY,
            {"init-container": 875, "sidecar-small-container": 875, "main-1": 875},
            id="burstable-mixed-multi-container-small-sidecar-pod",
        ),
        pytest.param(
            make([MAIN], [INIT, _side("sidecar-container", MEM_REQ)]),
            STANDARD_MEMORY,
            {"init-container": 875, "sidecar-container": 875, "main-1": 875},
            id="burstable-mixed-multi-container-sample-request-pod",
        ),
        pytest.param(
            make([MAIN], [INIT, _side("sidecar-big-container", str(STANDARD_MEMORY // 2))]),
            STANDARD_MEMORY,
            {"init-container": 875, "sidecar-big-container": 500, "main-1": 875},
            id="burstable-mixed-multi-container-big-sidecar-container-pod",
        ),
        pytest.param(
            make([ctr("n1"), ctr("n2")], spec={"resources": POD_GUARANTEED}),
            4_000_000_000,
            {"n1": -997, "n2": -997},
            id="guaranteed-pod-resources-no-container-resources",
        ),
        pytest.param(
            make(
                [
                    ctr("g1", MEM_GUARANTEED_CTR, MEM_GUARANTEED_CTR),
                    ctr("g2", MEM_GUARANTEED_CTR, MEM_GUARANTEED_CTR),
                ],
                spec={"resources": POD_GUARANTEED},
            ),
            4_000_000_000,
            {"g1": -997, "g2": -997},
            id="guaranteed-pod-resources-equal-container-resources",
        ),
        pytest.param(
            make(
                [ctr("b", {"cpu": "3m", "memory": MEM_REQ}, {"cpu": "5m", "memory": MEM_LIM}), ctr("e")],
                spec={"resources": POD_GUARANTEED},
            ),
            4_000_000_000,
            {"b": -997, "e": -997},
            id="guaranteed-pod-resources-unequal-container-requests",
        ),
        pytest.param(
            make([ctr("n1"), ctr("n2")], spec={"resources": POD_BURSTABLE}),
            4_000_000_000,
            {"n1": 750, "n2": 750},
            id="burstable-pod-resources-no-container-resources",
        ),
        pytest.param(
            make(
                [
                    ctr("g1", MEM_GUARANTEED_CTR, MEM_GUARANTEED_CTR),
                    ctr("g2", MEM_GUARANTEED_CTR, MEM_GUARANTEED_CTR),
                ],
                spec={"resources": POD_BURSTABLE},
            ),
            4_000_000_000,
            {"g1": 750, "g2": 750},
            id="burstable-pod-resources-equal-container-requests",
        ),
        pytest.param(
            make(
                [ctr("b", {"cpu": "3m", "memory": MEM_REQ}, {"cpu": "5m", "memory": MEM_REQ}), ctr("e")],
                spec={"resources": POD_BURSTABLE},
            ),
            4_000_000_000,
            {"b": 625, "e": 875},
            id="burstable-pod-resources-unequal-container-requests",
        ),
        pytest.param(
            make([ctr("n")], [ctr("ns", sidecar=True)], spec={"resources": POD_BURSTABLE}),
            4_000_000_000,
            {"n": 750, "ns": 750},
            id="burstable-pod-resources-no-container-resources-with-sidecar",
        ),
        pytest.param(
            make(
                [ctr("b", MEM_GUARANTEED_CTR, {"cpu": "5m", "memory": MEM_LIM})],
                [ctr("s", MEM_GUARANTEED_CTR, {"cpu": "5m", "memory": MEM_LIM}, sidecar=True)],
                spec={"resources": POD_BURSTABLE},
            ),
            4_000_000_000,
            {"b": 750, "s": 750},
            id="burstable-pod-resources-equal-container-requests-with-sidecar",
        ),
        pytest.param(
            make(
                [
                    ctr("b1", {"cpu": "5m", "memory": "1000000000"}, {"cpu": "5m", "memory": POD_MEM_LIM}),
                    ctr("b2", {"cpu": "5m", "memory": "500000000"}, {"cpu": "5m", "memory": POD_MEM_LIM}),
                ],
                [
                    ctr(
                        "s",
                        {"cpu": "5m", "memory": "200000000"},
                        {"cpu": "5m", "memory": POD_MEM_LIM},
                        sidecar=True,
                    )
                ],
                spec={
                    "resources": {
                        "requests": {"cpu": "5m", "memory": "2000000000"},
                        "limits": {"cpu": "5m", "memory": POD_MEM_LIM},
                    }
                },
            ),
            4_000_000_000,
            {"b1": 725, "b2": 850, "s": 850},
            id="burstable-pod-resources-unequal-container-requests-with-sidecar",
        ),
        pytest.param(
            make([ctr("c", {"memory": "1Gi"})], status={"qosClass": "Guaranteed"}),
            4_000_000_000,
            {"c": -997},
            id="status-qos-class-decides",
        ),
        pytest.param(make([ctr("c", {"memory": "500m"})]), 1000, {"c": 999}, id="fractional-request-rounds-up"),
        pytest.param(make([ctr("c", {"memory": "999"})]), 1000, {"c": 3}, id="clamped-to-three"),
        pytest.param(make([ctr("c", {"memory": "3"})]), 1000, {"c": 997}, id="integer-division-truncates"),
        pytest.param(
            make(
                [ctr("c1", {"memory": "1000"}), ctr("c2")],
                spec={"resources": {"requests": {"memory": "100"}}},
            ),
            1001,
            {"c1": 451, "c2": 1449},
            id="pod-level-request-below-containers-truncates-toward-zero-and-exceeds-1000",
        ),
    ],
)
def test_oom_score_adj(pod: Pod, capacity: int, expected: dict[str, int]) -> None:
    got = {c.name: oom_score_adj(pod, c.name, capacity) for c in (*pod.init_containers, *pod.containers)}
    assert got == expected


def test_oom_score_adj_rejects_unknown_container_and_bad_capacity() -> None:
    pod = make([ctr("c")])
    with pytest.raises(ValueError, match="no container named"):
        oom_score_adj(pod, "nope", 1 << 30)
    with pytest.raises(ValueError, match="must be positive"):
        oom_score_adj(pod, "c", 0)


def test_oom_score_adj_sidecar_without_regular_containers_is_not_clamped() -> None:
    # Upstream would index Containers[0] and panic; evictd skips the sidecar rule.
    pod = make([], [ctr("s", {"memory": "250"}, sidecar=True)])
    assert oom_score_adj(pod, "s", 1000) == 750


# --- tolerations (toleration_test.go TestTolerationToleratesTaint) ----------------------------------------

FOO_NOSCHEDULE = Taint(key="foo", effect="NoSchedule")
FOO_BAR = Taint(key="foo", value="bar", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        pytest.param(
            Toleration(key="foo", operator="Exists", effect="NoSchedule"),
            FOO_NOSCHEDULE,
            True,
            id="exists-same-key-effect-no-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Exists", effect="NoSchedule"),
            FOO_BAR,
            True,
            id="exists-same-key-effect-some-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="bar", effect="NoSchedule"),
            FOO_BAR,
            True,
            id="equal-same-value",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="value1", effect="NoSchedule"),
            Taint(key="foo", value="value2", effect="NoSchedule"),
            False,
            id="equal-different-value",
        ),
        pytest.param(
            Toleration(key="foo", value="bar", effect="NoSchedule"),
            FOO_BAR,
            True,
            id="empty-operator-means-equal",
        ),
        pytest.param(
            Toleration(key="foo", operator="Equal", value="bar", effect="NoExecute"),
            FOO_BAR,
            False,
            id="different-effect",
        ),
        pytest.param(Toleration(key="foo", operator="Equal", value="bar"), FOO_BAR, True, id="empty-effect-matches"),
        pytest.param(
            Toleration(key="foo", operator="Exists", effect="NoSchedule"),
            Taint(key="bar", effect="NoSchedule"),
            False,
            id="different-key",
        ),
        pytest.param(Toleration(operator="Exists"), FOO_BAR, True, id="empty-key-exists-matches-all"),
        pytest.param(
            Toleration(operator="Exists", effect="NoExecute"),
            FOO_BAR,
            False,
            id="empty-key-exists-wrong-effect",
        ),
        pytest.param(
            Toleration(key="foo", operator="Gt", value="100"),
            Taint(key="foo", value="150"),
            True,
            id="gt-taint-greater",
        ),
        pytest.param(
            Toleration(key="foo", operator="Gt", value="100"),
            Taint(key="foo", value="100"),
            False,
            id="gt-equal",
        ),
        pytest.param(
            Toleration(key="foo", operator="Lt", value="100"),
            Taint(key="foo", value="-5"),
            True,
            id="lt-negative",
        ),
        pytest.param(
            Toleration(key="foo", operator="Lt", value="100"),
            Taint(key="foo", value="95.5"),
            False,
            id="lt-non-integer-taint",
        ),
        pytest.param(
            Toleration(key="foo", operator="Lt", value="1e3"),
            Taint(key="foo", value="5"),
            False,
            id="lt-non-integer-toleration",
        ),
        pytest.param(
            Toleration(key="foo", operator="Gt", value="1"),
            Taint(key="foo", value="9223372036854775808"),
            False,
            id="gt-int64-overflow",
        ),
        pytest.param(Toleration(key="foo", operator="Bogus", value="bar"), FOO_BAR, False, id="unknown-operator"),
    ],
)
def test_toleration_tolerates_taint(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration_tolerates_taint(toleration, taint) is tolerated


# --- admission (eviction_manager_test.go TestAdmitUnderNodeConditions and friends) ------------------------

G_POD = make([ctr("g", rl("100m", "1Gi"), rl("100m", "1Gi"))], name="guaranteed-pod")
B_POD = make([ctr("b", rl("100m", "1Gi"))], name="burstable-pod")
BE_POD = make([ctr("be")], name="best-effort-pod")
MEMORY_TOLERATION = {
    "key": "node.kubernetes.io/memory-pressure",
    "operator": "Exists",
    "effect": "NoSchedule",
}
REJECT_MEMORY = (False, "Evicted", "The node had condition: [MemoryPressure]. ")
REJECT_BOTH = (False, "Evicted", "The node had condition: [MemoryPressure DiskPressure]. ")
ADMITTED = (True, "", "")


@pytest.mark.parametrize(
    ("pod", "conditions", "expected"),
    [
        pytest.param(G_POD, set(), ADMITTED, id="no-conditions-guaranteed"),
        pytest.param(BE_POD, frozenset(), ADMITTED, id="no-conditions-best-effort"),
        pytest.param(G_POD, {"MemoryPressure"}, ADMITTED, id="memory-pressure-guaranteed"),
        pytest.param(B_POD, {"MemoryPressure"}, ADMITTED, id="memory-pressure-burstable"),
        pytest.param(BE_POD, {"MemoryPressure"}, REJECT_MEMORY, id="memory-pressure-best-effort"),
        pytest.param(G_POD, {"MemoryPressure", "DiskPressure"}, REJECT_BOTH, id="memory-and-disk-guaranteed"),
        pytest.param(B_POD, {"DiskPressure", "MemoryPressure"}, REJECT_BOTH, id="memory-and-disk-burstable"),
        pytest.param(BE_POD, {"MemoryPressure", "DiskPressure"}, REJECT_BOTH, id="memory-and-disk-best-effort"),
        pytest.param(
            G_POD,
            {"DiskPressure"},
            (False, "Evicted", "The node had condition: [DiskPressure]. "),
            id="disk-pressure-guaranteed",
        ),
        pytest.param(
            G_POD,
            {"PIDPressure"},
            (False, "Evicted", "The node had condition: [PIDPressure]. "),
            id="pid-pressure-guaranteed",
        ),
        pytest.param(
            G_POD,
            {"PIDPressure", "DiskPressure", "MemoryPressure"},
            (False, "Evicted", "The node had condition: [MemoryPressure DiskPressure PIDPressure]. "),
            id="all-three-in-fixed-order",
        ),
        pytest.param(
            make([ctr("be")], spec={"tolerations": [MEMORY_TOLERATION]}),
            {"MemoryPressure"},
            ADMITTED,
            id="best-effort-tolerating-memory-pressure",
        ),
        pytest.param(
            make([ctr("be")], spec={"tolerations": [MEMORY_TOLERATION]}),
            {"MemoryPressure", "DiskPressure"},
            REJECT_BOTH,
            id="toleration-does-not-help-with-disk-pressure",
        ),
        pytest.param(
            make([ctr("be")], spec={"tolerations": [{"operator": "Exists"}]}),
            {"MemoryPressure"},
            ADMITTED,
            id="best-effort-tolerating-everything",
        ),
        pytest.param(
            make(
                [ctr("be")],
                spec={
                    "tolerations": [
                        {
                            "key": "node.kubernetes.io/disk-pressure",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        }
                    ]
                },
            ),
            {"MemoryPressure"},
            REJECT_MEMORY,
            id="best-effort-tolerating-disk-pressure-only",
        ),
        pytest.param(
            make([ctr("be")], spec={"tolerations": [{**MEMORY_TOLERATION, "effect": "NoExecute"}]}),
            {"MemoryPressure"},
            REJECT_MEMORY,
            id="best-effort-toleration-wrong-effect",
        ),
        pytest.param(
            make([ctr("be")], metadata={"annotations": {"kubernetes.io/config.source": "file"}}),
            {"MemoryPressure", "DiskPressure"},
            ADMITTED,
            id="static-pod-always-admitted",
        ),
        pytest.param(
            make([ctr("be")], metadata={"annotations": {"kubernetes.io/config.mirror": "x"}}),
            {"DiskPressure"},
            ADMITTED,
            id="mirror-pod-always-admitted",
        ),
        pytest.param(
            make([ctr("be")], spec={"priority": 2000000000}),
            {"PIDPressure"},
            ADMITTED,
            id="critical-priority-always-admitted",
        ),
        pytest.param(
            make([ctr("g", rl("100m", "1Gi"), rl("100m", "1Gi"))], status={"qosClass": "BestEffort"}),
            {"MemoryPressure"},
            REJECT_MEMORY,
            id="status-qos-class-best-effort-decides",
        ),
        pytest.param(
            G_POD,
            {"NetworkUnavailable", "MemoryPressure"},
            (False, "Evicted", "The node had condition: [MemoryPressure NetworkUnavailable]. "),
            id="unknown-condition-listed-last",
        ),
    ],
)
def test_admit(pod: Pod, conditions: set[str], expected: tuple[bool, str, str]) -> None:
    assert admit(pod, conditions) == expected


def test_memory_pressure_taint_is_the_node_lifecycle_taint() -> None:
    assert (MEMORY_PRESSURE_TAINT.key, MEMORY_PRESSURE_TAINT.value, MEMORY_PRESSURE_TAINT.effect) == (
        "node.kubernetes.io/memory-pressure",
        "",
        "NoSchedule",
    )

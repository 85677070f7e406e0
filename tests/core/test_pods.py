"""Tests of evictd.core.pods: parsing v1 Pod JSON, critical pods, and local volumes.

Cases are taken from the upstream unit tests where they exist (pkg/kubelet/types pod_update_test.go,
pkg/volume/util util_test.go), with the upstream case names as ids. Property tests of the parser are in
test_pods_properties.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from builders import Json, container, core_pod, pod
from evictd.core import pod_parser as pods_module
from evictd.core.errors import DecodeError
from evictd.core.pod_parser import pod_from_dict
from evictd.core.pods import (
    MAX_KEPT_MESSAGE_CHARS,
    MAX_KEPT_VALUE_CHARS,
    Container,
    FrozenMap,
    Pod,
    QOSClass,
    Toleration,
    Volume,
    counts_for_local_disk,
    is_critical_pod,
    is_local_ephemeral_volume,
    is_mirror_pod,
    is_static_pod,
    pod_priority,
)
from evictd.core.quantity import Quantity
from evictd.record.documents import pod_to_dict

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


def test_a_pod_keeps_only_what_decisions_read_however_much_its_owner_wrote() -> None:
    """Issue #25: 250 KiB of annotations per pod made evictd hold, parse and record them all."""
    tenant = "x" * (250 * 1024)
    doc = _with(["metadata", "annotations"], {"tenant.example.com/blob": tenant,
                                              "kubernetes.io/config.mirror": "m" * 5000,
                                              "kubernetes.io/config.source": "file" + tenant})
    doc = _with(["metadata", "labels"], {f"label-{i}": "v" * 63 for i in range(2000)}, doc)
    doc = _with(["status"], {"phase": "Failed", "reason": "Evicted" + tenant, "message": "The node was low" + tenant,
                             "conditions": [{"type": "DisruptionTarget", "status": "True",
                                             "reason": "TerminationByKubelet", "message": tenant}]}, doc)
    pod = pod_from_dict(doc)
    assert dict(pod.annotations) == {"kubernetes.io/config.mirror": "m" * MAX_KEPT_VALUE_CHARS,
                                     "kubernetes.io/config.source": ("file" + tenant)[:MAX_KEPT_VALUE_CHARS]}
    assert is_static_pod(pod) and is_mirror_pod(pod), "what the cut values decide is unchanged"
    assert pod.status_message == ("The node was low" + tenant)[:MAX_KEPT_MESSAGE_CHARS]
    assert pod.status_reason is not None and len(pod.status_reason) == MAX_KEPT_MESSAGE_CHARS
    assert pod.status_termination_by_kubelet == tenant[:MAX_KEPT_MESSAGE_CHARS]
    recorded = json.dumps(pod_to_dict(pod))
    # Three cut messages, two cut annotation values and the pod's own fields (about 1.1 KiB here).
    assert len(recorded) < 3 * MAX_KEPT_MESSAGE_CHARS + 2 * MAX_KEPT_VALUE_CHARS + 2048, "bounded whatever its owner wrote"
    assert pod_from_dict(pod_to_dict(pod)) == pod


def test_pod_from_dict_reads_every_field_kubectl_prints() -> None:
    pod = pod_from_dict(KUBECTL_POD)
    assert (pod.namespace, pod.name, pod.uid, pod.key) == ("prod", "web-0", "6a1b2c3d", "prod/web-0")
    assert dict(pod.annotations) == {}, "config.seen is no annotation a decision reads; labels are not kept either"
    assert (pod.generation, pod.deletion_timestamp, pod.deletion_grace_period_s) == (
        3,
        "2024-01-01T00:05:00Z",
        30,
    )
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
    scratch = Volume(name="scratch", kind="emptyDir", empty_dir_medium="", empty_dir_size_limit=Quantity.parse("1Gi"))
    assert pod.volumes[0] == scratch
    assert pod.volumes[1] == Volume(name="shm", kind="emptyDir", empty_dir_medium="Memory")
    assert pod.volumes[2] == Volume(name="kube-api-access-x", kind="projected")
    assert (pod.status_phase, pod.status_qos_class) == ("Running", QOSClass.BURSTABLE)


def test_pod_from_dict_defaults_for_a_minimal_pod() -> None:
    pod = pod_from_dict({"metadata": {"name": "solo"}})
    assert pod == Pod(name="solo")
    assert pod.key == "default/solo"
    assert (pod.uid, pod.generation, pod.priority, pod.deletion_timestamp) == ("", 0, None, None)
    assert pod.status_qos_class is None and pod.resources is None
    assert pod_priority(pod) == 0


@pytest.mark.parametrize(
    ("written", "namespace"),
    [
        pytest.param(None, "default", id="null-namespace"),
        pytest.param("", "default", id="empty-namespace"),
        pytest.param("kube-system", "kube-system", id="explicit"),
    ],
)
def test_namespace_defaults_to_default(written: str | None, namespace: str) -> None:
    doc = pod("p")
    doc["metadata"]["namespace"] = written
    assert pod_from_dict(doc).namespace == namespace


def test_pod_level_resources_present_but_empty_is_kept_apart_from_absent() -> None:
    assert core_pod(pod_resources={}).resources is not None
    null_resources = pod("p")
    null_resources["spec"]["resources"] = None
    assert pod_from_dict(null_resources).resources is None


def test_null_quantity_in_a_resource_list_is_a_present_zero_as_in_go() -> None:
    pod = core_pod(containers=[container(limits={"ephemeral-storage": None})])  # type: ignore[dict-item]
    assert pod.containers[0].limits["ephemeral-storage"].sign() == 0


def test_numeric_quantities_are_accepted_like_go_unmarshal_json() -> None:
    pod = core_pod(containers=[container(requests={"memory": 1024, "cpu": 0.5})])  # type: ignore[dict-item]
    assert str(pod.containers[0].requests["memory"]) == "1024"
    assert str(pod.containers[0].requests["cpu"]) == "500m"


def test_pods_are_hashable_values() -> None:
    first, second = pod_from_dict(KUBECTL_POD), pod_from_dict(copy.deepcopy(KUBECTL_POD))
    assert first == second and hash(first) == hash(second)
    assert len({first, second}) == 1
    assert FrozenMap({"a": 1}) == {"a": 1} and hash(FrozenMap({"a": 1})) == hash(FrozenMap([("a", 1)]))


def _with(path: list[str | int], value: Any, base: Json | None = None) -> Json:
    doc = copy.deepcopy(KUBECTL_POD if base is None else base)
    target: Any = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "key", "reason"),
    [
        pytest.param([], "pod", "must be a mapping", id="not-an-object"),
        pytest.param({"metadata": {}}, "pod.metadata.name", "name is required", id="no-name"),
        pytest.param({"metadata": {"name": ""}}, "pod.metadata.name", "name is required", id="empty-name"),
        pytest.param({"metadata": []}, "pod.metadata", "must be a mapping", id="metadata-list"),
        pytest.param(_with(["metadata", "name"], 7), "pod.metadata.name", "must be a string", id="name-int"),
        pytest.param(
            _with(["metadata", "annotations"], {"a": 1}),
            "pod.metadata.annotations.a",
            "must be a string",
            id="annotation-value-int",
        ),
        pytest.param(
            _with(["metadata", "annotations"], {"tenant.example.com/not-kept": 1}),
            "pod.metadata.annotations[tenant.example.com/not-kept]",
            "must be a string",
            id="annotation-not-kept-is-still-checked",
        ),
        pytest.param(
            _with(["metadata", "labels"], {"app.kubernetes.io/name": True}),
            "pod.metadata.labels[app.kubernetes.io/name]",
            "must be a string",
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
            "must be a quantity (a string or a number)",
            id="quantity-list",
        ),
        pytest.param(
            _with(["spec", "containers", 0, "resources", "requests", "cpu"], True),
            "pod.spec.containers[0].resources.requests.cpu",
            "must be a quantity (a string or a number)",
            id="quantity-bool",
        ),
        pytest.param(_with(["spec", "containers"], {}), "pod.spec.containers", "must be a list", id="containers-obj"),
        pytest.param(
            _with(["spec", "containers", 0], "app"),
            "pod.spec.containers[0]",
            "must be a mapping",
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
            "must be an integer",
            id="priority-string",
        ),
        pytest.param(_with(["spec", "priority"], True), "pod.spec.priority", "must be an integer", id="priority-bool"),
        pytest.param(_with(["spec", "priority"], 2.0), "pod.spec.priority", "must be an integer", id="priority-float"),
        pytest.param(
            _with(["spec", "priority"], 2**31),
            "pod.spec.priority",
            "must be between -2147483648 and 2147483647",
            id="priority-int32",
        ),
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
            "must be a mapping",
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
            "must be an integer",
            id="toleration-seconds",
        ),
        pytest.param(
            _with(["status", "qosClass"], "Premium"),
            "pod.status.qosClass",
            "must be Guaranteed, Burstable or BestEffort",
            id="unknown-qos-class",
        ),
    ],
)
def test_pod_from_dict_rejects_malformed_pods(doc: Any, key: str, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
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
    with pytest.raises(DecodeError) as caught:
        pod_from_dict(doc)
    assert caught.value.key == key
    assert str(caught.value)


def test_error_keys_start_at_where() -> None:
    with pytest.raises(DecodeError) as caught:
        pod_from_dict(_with(["spec", "containers", 0, "resources", "requests", "memory"], "x"), where="pods[3]")
    assert caught.value.key == "pods[3].spec.containers[0].resources.requests.memory"
    assert caught.value.value == "x"


# --- critical pods (pod_update_test.go) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "priority", "class_name", "static", "mirror", "critical"),
    [
        pytest.param({}, None, "", False, False, False, id="regular-pod"),
        pytest.param({"kubernetes.io/config.source": "file"}, None, "", True, False, True, id="static-file"),
        pytest.param({"kubernetes.io/config.source": "http"}, None, "", True, False, True, id="static-http"),
        pytest.param({"kubernetes.io/config.source": "api"}, None, "", False, False, False, id="source-api"),
        pytest.param({"kubernetes.io/config.source": ""}, None, "", True, False, True, id="source-empty"),
        pytest.param({"kubernetes.io/config.mirror": "abc"}, None, "", False, True, True, id="mirror"),
        pytest.param({"kubernetes.io/config.mirror": ""}, None, "", False, True, True, id="mirror-empty"),
        pytest.param({}, 1999999999, "", False, False, False, id="priority-below-critical"),
        pytest.param({}, 2000000000, "system-cluster-critical", False, False, True, id="cluster-critical"),
        pytest.param({}, 2000001000, "system-node-critical", False, False, True, id="node-critical"),
        pytest.param({}, None, "system-node-critical", False, False, False, id="node-class-no-priority"),
        pytest.param(
            {"kubernetes.io/config.source": "file"},
            None,
            "system-node-critical",
            True,
            False,
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
) -> None:
    pod = Pod(
        name="p",
        namespace="kube-system",
        annotations=FrozenMap(annotations),
        priority=priority,
        priority_class_name=class_name,
    )
    assert (is_static_pod(pod), is_mirror_pod(pod), is_critical_pod(pod)) == (static, mirror, critical)


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
    pod = core_pod(volumes=[{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {"medium": "Memory"}}])
    assert [is_local_ephemeral_volume(v) for v in pod.volumes] == [True, False]


def test_pod_to_dict_writes_back_every_field_evictd_reads() -> None:
    evicted = {**KUBECTL_POD, "status": {
        "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
        "qosClass": "Burstable",
        "conditions": [{"type": "Ready", "status": "False"},
                       {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                        "message": "The node was low on resource: memory."}]}}
    with_pod_resources = {**KUBECTL_POD, "spec": {**KUBECTL_POD["spec"], "resources": {}}}
    for document in (KUBECTL_POD, evicted, with_pod_resources):
        pod = pod_from_dict(document)
        assert pod_from_dict(pod_to_dict(pod)) == pod
    # Present-but-empty pod-level resources stay present: they decide the QoS class differently from none.
    assert pod_to_dict(pod_from_dict(with_pod_resources))["spec"]["resources"] == {}  # type: ignore[index]
    assert "resources" not in pod_to_dict(pod_from_dict(KUBECTL_POD))["spec"]  # type: ignore[operator]


def _resource_pod(name: str, memory: object, namespace: str = "shop") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "".join(namespace), "uid": f"uid-{name}"},
            "spec": {"nodeName": "".join(["node-", "a"]),
                     "containers": [{"name": "".join(["app"]), "resources": {"requests": {"memory": memory}}}]}}


def test_pods_share_equal_resource_lists_and_repeated_names() -> None:
    """Issue #25 (5,000 pods): what many pods carry alike is held once, not once per pod."""
    first, second = (pod_from_dict(_resource_pod(name, "64Mi")) for name in ("a", "b"))
    assert first.containers[0].requests is second.containers[0].requests
    assert first.namespace is second.namespace and first.node_name is second.node_name
    assert first.containers[0].name is second.containers[0].name
    assert first.annotations is second.annotations


def _replica(name: str, memory: object = "64Mi", size_limit: object = "1Gi") -> dict[str, Any]:
    """A pod of a deployment: two containers, an emptyDir and the two default tolerations, as each replica has."""
    return {"metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "".join(["app"]), "resources": {"requests": {"memory": memory}}},
                                    {"name": "".join(["sidecar"])}],
                     "volumes": [{"name": "".join(["cache"]), "emptyDir": {"sizeLimit": size_limit}}],
                     "tolerations": [{"key": "".join(["node.kubernetes.io/", what]), "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 300}
                                     for what in ("not-ready", "unreachable")]}}


def test_pods_share_equal_containers_volumes_and_tolerations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #25 (5,000 pods): the replicas of a deployment hold one tuple of containers, of volumes and of
    tolerations (each pod its own two tolerations were 0.6 KiB a pod); parts that differ, or print differently
    (a quantity equal in value but written otherwise), are not shared, and each pod reads as a parse without
    sharing gives it."""
    first, second = (pod_from_dict(_replica(name)) for name in ("a", "b"))
    for part in ("containers", "volumes", "tolerations"):
        assert getattr(first, part) is getattr(second, part), part
    other_memory = pod_from_dict(_replica("c", memory="67108864"))  # equal to 64Mi, written otherwise
    other_limit = pod_from_dict(_replica("d", size_limit="1024Mi"))
    assert other_memory.containers is not first.containers and other_memory.volumes is first.volumes
    assert other_memory.containers[1] is first.containers[1]  # the sidecar alike
    assert other_limit.volumes is not first.volumes and other_limit.tolerations is first.tolerations
    shared = [pod_to_dict(pod) for pod in (first, second, other_memory, other_limit)]
    monkeypatch.setattr(pods_module, "_SHARED_MAX_ENTRIES", 0)
    monkeypatch.setattr(pods_module, "_SHARED_PARTS", {})
    alone = [pod_from_dict(_replica(name, **changed)) for name, changed in (
        ("a", {}), ("b", {}), ("c", {"memory": "67108864"}), ("d", {"size_limit": "1024Mi"}))]
    assert alone[0].tolerations is not alone[1].tolerations  # (no sharing: the comparison below means something)
    assert shared == [pod_to_dict(pod) for pod in alone]
    assert [pod_from_dict(document) for document in shared] == alone


def test_shared_pod_parts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table of shared parts stops growing at its bound (tenants write these values), and a part whose
    strings are longer than the bound of a shared part is never kept in it."""
    monkeypatch.setattr(pods_module, "_SHARED_PARTS", {})
    monkeypatch.setattr(pods_module, "_SHARED_MAX_ENTRIES", 40)
    for index in range(100):
        pod_from_dict(_replica(f"p{index}", memory=f"{index + 1}Mi"))
    assert len(pods_module._SHARED_PARTS) <= 40
    monkeypatch.setattr(pods_module, "_SHARED_PARTS", {})
    monkeypatch.setattr(pods_module, "_SHARED_MAX_ENTRIES", 4096)
    long_key = _replica("long")
    long_key["spec"]["tolerations"][0]["key"] = "x" * 2000
    assert pod_from_dict(long_key).tolerations[0].key == "x" * 2000
    assert not any(isinstance(part, pods_module.Toleration) or (part and isinstance(part, tuple) and isinstance(
        part[0], pods_module.Toleration)) for part in pods_module._SHARED_PARTS.values())
    assert len(pods_module._SHARED_PARTS) == 5  # the two containers and their tuple, the volume and its tuple


def test_shared_resource_lists_keep_each_value_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal dict keys that are different JSON values (1, 1.0, True) never share a resource list: each pod's
    quantities are those a parse without sharing gives, and a bool is refused even after 1 was shared."""
    values: tuple[object, ...] = (1, 1.0, "1", "1.0", 1.5, "1500m", "64Mi", "67108864", 67108864)
    shared = [pod_from_dict(_resource_pod(f"p{i}", value)) for i, value in enumerate(values)]
    with pytest.raises(DecodeError):
        pod_from_dict(_resource_pod("bad", True))
    monkeypatch.setattr(pods_module, "_SHARED_MAX_ENTRIES", 0)
    monkeypatch.setattr(pods_module, "_SHARED_RESOURCE_LISTS", {})
    alone = [pod_from_dict(_resource_pod(f"p{i}", value)) for i, value in enumerate(values)]
    for one, other in zip(shared, alone, strict=True):
        quantity, expected = one.containers[0].requests["memory"], other.containers[0].requests["memory"]
        assert (str(quantity), quantity.format, quantity.value) == (str(expected), expected.format, expected.value)
        assert pod_to_dict(one) == pod_to_dict(other)

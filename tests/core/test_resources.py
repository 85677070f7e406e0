"""Tests of evictd.core.resources: what a pod requests and limits.

Cases are taken from upstream component-helpers resource helpers_test.go (TestPodRequests,
TestPodLimits and the pod-level resources cases) and pkg/api/v1/resource helpers_test.go, with the upstream
case names as ids.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import Json, container, core_pod
from evictd.core.pods import Container, FrozenMap, Pod
from evictd.core.quantity import Quantity
from evictd.core.resources import pod_limit, pod_request


def rl(cpu: str = "", memory: str = "") -> dict[str, str]:
    """A resource list like upstream's getResourceList: empty strings are left out."""
    return {name: value for name, value in (("cpu", cpu), ("memory", memory)) if value}


# --- requests (GetResourceRequestQuantity over component-helpers PodRequests) -----------------------------


def sidecar(name: str, cpu: str) -> Json:
    return container(name, {"cpu": cpu}, sidecar=True)


def init(name: str, cpu: str) -> Json:
    return container(name, {"cpu": cpu})


@pytest.mark.parametrize(
    ("pod", "resource", "expected"),
    [
        pytest.param(core_pod(containers=[container(requests={"cpu": "1"})], init_containers=[init("i", "4")]),
                     "cpu", "4", id="nil-options-larger-init-container"),
        pytest.param(
            core_pod(
                containers=[container("a", {"cpu": "2"}), container("b", {"cpu": "3"})],
                init_containers=[init("i", "2")],
            ),
            "cpu",
            "5",
            id="nil-options-larger-containers",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", {"cpu": "2"}), container("b", {"cpu": "3"})],
                init_containers=[init("i", "2")],
                overhead={"cpu": "1", "memory": "1Gi"},
            ),
            "cpu",
            "6",
            id="pod-overhead-included",
        ),
        pytest.param(core_pod(containers=[container("a", {"cpu": "2"})], overhead={"memory": "1Gi"}),
                     "memory", "0", id="overhead-not-added-to-zero-request"),
        pytest.param(
            core_pod(
                containers=[container("container-1", {"cpu": "1"})],
                init_containers=[sidecar("restartable-init-1", "1")],
            ),
            "cpu",
            "2",
            id="restartable-init-container",
        ),
        pytest.param(
            core_pod(
                containers=[container("container-1", {"cpu": "1"})],
                init_containers=[init("init-1", "5"), sidecar("r1", "1"), sidecar("r2", "2"), sidecar("r3", "3")],
            ),
            "cpu",
            "7",
            id="multiple-restartable-init-containers",
        ),
        pytest.param(
            core_pod(
                containers=[container("container-1", {"cpu": "1"})],
                init_containers=[
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
            core_pod(
                containers=[container("container-1", {"cpu": "100"})],
                init_containers=[sidecar("r1", "10"), init("init-1", "200")],
            ),
            "cpu",
            "210",
            id="restartable-init-init-and-regular",
        ),
        pytest.param(core_pod(containers=[container("a", {"memory": "1Gi"}), container("b", {"memory": "512Mi"})]),
                     "memory", "1536Mi", id="sum-keeps-binary-format"),
        pytest.param(core_pod(containers=[container("a", {"memory": "0"}), container("b", {"memory": "1Gi"})]),
                     "memory", "1Gi", id="zero-receiver-takes-addend-format"),
        pytest.param(core_pod(containers=[container("a")]), "ephemeral-storage", "0", id="missing-is-zero"),
        pytest.param(
            core_pod(containers=[container("a", {"ephemeral-storage": "1Gi"})], overhead={"ephemeral-storage": "1Mi"}),
            "ephemeral-storage",
            "1025Mi",
            id="overhead-added-to-non-zero",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", {"memory": "1Gi", "ephemeral-storage": "1Gi"})],
                pod_resources={"requests": {"memory": "3Gi"}},
            ),
            "memory",
            "3Gi",
            id="pod-level-request-wins",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", {"memory": "1Gi", "ephemeral-storage": "1Gi"})],
                pod_resources={"requests": {"memory": "3Gi"}},
            ),
            "ephemeral-storage",
            "0",
            id="pod-level-set-ignores-container-ephemeral-storage",
        ),
        pytest.param(
            core_pod(containers=[container("a", {"memory": "1Gi"})], pod_resources={"limits": {"memory": "3Gi"}}),
            "memory",
            "0",
            id="pod-level-limits-only-request-zero",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", {"memory": "1Gi", "cpu": "1"})],
                pod_resources={"requests": {"memory": "3Gi"}},
            ),
            "cpu",
            "0",
            id="pod-level-set-other-supported-resource-zero",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", {"ephemeral-storage": "1Gi"})],
                pod_resources={"requests": {"ephemeral-storage": "5Gi"}},
            ),
            "ephemeral-storage",
            "1Gi",
            id="pod-level-unsupported-only-uses-containers",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", {"hugepages-2Mi": "2Mi"})],
                pod_resources={"requests": {"hugepages-2Mi": "4Mi"}},
            ),
            "hugepages-2Mi",
            "4Mi",
            id="pod-level-hugepages",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", {"memory": "1Gi"})],
                pod_resources={"requests": {"memory": "3Gi"}},
                overhead={"memory": "1Gi"},
            ),
            "memory",
            "4Gi",
            id="pod-level-request-plus-overhead",
        ),
    ],
)
def test_pod_request(pod: Pod, resource: str, expected: str) -> None:
    assert str(pod_request(pod, resource)) == expected


# --- limits (component-helpers PodLimits, as localStorageEviction uses it) --------------------------------


def lim(name: str, cpu: str = "", memory: str = "", *, side: bool = False) -> Json:
    return container(name, limits=rl(cpu, memory), sidecar=side)


@pytest.mark.parametrize(
    ("pod", "resource", "expected"),
    [
        pytest.param(core_pod(containers=[lim("c", "1")], init_containers=[lim("i", "4")]),
                     "cpu", "4", id="nil-options-larger-init-container"),
        pytest.param(core_pod(containers=[lim("a", "2"), lim("b", "3")], init_containers=[lim("i", "2")]),
                     "cpu", "5", id="larger-containers"),
        pytest.param(
            core_pod(
                containers=[lim("a", "2"), lim("b", "3")],
                init_containers=[lim("i", "2")],
                overhead={"cpu": "1", "memory": "1Gi"},
            ),
            "cpu",
            "6",
            id="pod-overhead-included",
        ),
        pytest.param(core_pod(containers=[lim("a", "2"), lim("b", "3")], overhead={"cpu": "1", "memory": "1Gi"}),
                     "memory", None, id="overhead-only-on-non-zero-limits"),
        pytest.param(core_pod(containers=[container("a")]), "cpu", None, id="no-limited-containers-no-pod-limit"),
        pytest.param(core_pod(containers=[lim("a", "2", "2Gi"), container("b")]),
                     "memory", "2Gi", id="one-limited-one-unlimited"),
        pytest.param(
            core_pod(containers=[lim("a", "1", "1Gi")], init_containers=[lim("i", "2", "2Gi"), container("j")]),
            "memory",
            "2Gi",
            id="one-limited-one-unlimited-init",
        ),
        pytest.param(core_pod(containers=[lim("c", "1")], init_containers=[lim("r1", "1", side=True)]),
                     "cpu", "2", id="restartable-init-container"),
        pytest.param(
            core_pod(
                containers=[lim("c", "1")],
                init_containers=[lim("i1", "5"), lim("r1", "1", side=True), lim("r2", "2", side=True), lim("r3", "3", side=True)],
            ),
            "cpu",
            "7",
            id="multiple-restartable-init-containers",
        ),
        pytest.param(
            core_pod(
                containers=[lim("c", "1")],
                init_containers=[
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
            core_pod(containers=[lim("c", "100")], init_containers=[lim("r1", "10", side=True), lim("i1", "200")]),
            "cpu",
            "210",
            id="restartable-init-init-and-regular",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", limits={"ephemeral-storage": "0"})],
                overhead={"ephemeral-storage": "1Gi"},
            ),
            "ephemeral-storage",
            "0",
            id="zero-limit-is-set-and-gets-no-overhead",
        ),
        pytest.param(
            core_pod(
                containers=[container("a", limits={"ephemeral-storage": "1Gi"}), container("b")],
                overhead={"ephemeral-storage": "512Mi"},
            ),
            "ephemeral-storage",
            "1536Mi",
            id="ephemeral-storage-plus-overhead",
        ),
        pytest.param(core_pod(containers=[lim("a", "1", "1Gi")], pod_resources={"limits": {"memory": "4Gi"}}),
                     "memory", "4Gi", id="pod-level-limit-wins"),
        pytest.param(core_pod(containers=[container("a")], pod_resources={"limits": {"memory": "4Gi"}}),
                     "memory", "4Gi", id="pod-level-limit-without-container-limits"),
        pytest.param(core_pod(containers=[lim("a", "1", "1Gi")], pod_resources={"requests": {"memory": "4Gi"}}),
                     "memory", "1Gi", id="pod-level-requests-only-keep-container-limit"),
        pytest.param(
            core_pod(
                containers=[container("a", limits={"ephemeral-storage": "1Gi"})],
                pod_resources={"limits": {"memory": "4Gi", "ephemeral-storage": "9Gi"}},
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


# --- requests and limits are remembered on the (immutable) pod --------------------------------------------


def test_requests_and_limits_are_computed_once_per_pod_object() -> None:
    pod = core_pod(
        containers=[container("a", {"memory": "1Gi"}, {"memory": "2Gi"}), container("b", {"memory": "512Mi"})],
    )
    first_request, first_limit = pod_request(pod, "memory"), pod_limit(pod, "memory")
    assert (str(first_request), str(first_limit)) == ("1536Mi", "2Gi")
    assert pod_request(pod, "memory") is first_request, "a second ranking reuses the first answer"
    assert pod_limit(pod, "memory") is first_limit
    assert pod_limit(pod, "ephemeral-storage") is None and pod_limit(pod, "ephemeral-storage") is None
    assert str(pod_request(pod, "cpu")) == "0", "each resource is its own entry"


def test_a_changed_pod_is_a_new_object_with_its_own_answers() -> None:
    pod = core_pod(containers=[container("a", {"memory": "1Gi"})])
    assert str(pod_request(pod, "memory")) == "1Gi"
    resized = replace(pod, containers=(Container(name="a", requests=FrozenMap({"memory": Quantity.parse("3Gi")})),))
    assert str(pod_request(resized, "memory")) == "3Gi"
    assert str(pod_request(pod, "memory")) == "1Gi"


def test_remembered_answers_take_no_part_in_identity() -> None:
    asked = core_pod(containers=[container("a", {"memory": "1Gi"})])
    fresh = core_pod(containers=[container("a", {"memory": "1Gi"})])
    pod_request(asked, "memory")
    assert asked == fresh and hash(asked) == hash(fresh)
    assert repr(asked) == repr(fresh)

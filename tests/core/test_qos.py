"""Tests of evictd.core.qos: QoS classes and oom_score_adj.

Cases are taken from upstream pkg/apis/core/v1/helper/qos qos_test.go and pkg/kubelet/qos policy_test.go,
with the upstream case names as ids.
"""

from __future__ import annotations

import pytest
from pod_json_builders import Json, ctr, make, rl

from evictd.core.pods import Pod, QOSClass
from evictd.core.qos import compute_qos_class, oom_score_adj, qos_class

# policy_test.go standardMemoryAmount and the quantities derived from it.
STANDARD_MEMORY = 8_000_000_000
MEM_REQ = str(STANDARD_MEMORY // 8)
MEM_LIM = str(1000 + STANDARD_MEMORY // 8)
POD_MEM_REQ = str(STANDARD_MEMORY // 4)
POD_MEM_LIM = str(1000 + STANDARD_MEMORY // 4)

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

"""The node's memory protection judged (evictd.core.node_protection) from the KubeletConfiguration's reservations
(evictd.core.reserved_memory) and the cgroup files as read: one case per rule, ok and warning."""

from __future__ import annotations

import pytest

from evictd.core.node_protection import (
    NOT_FOUND,
    CgroupFile,
    CgroupProtection,
    Finding,
    NodeCgroups,
    Status,
    cgroup_findings,
    configuration_findings,
    daemon_protection_finding,
    memory_file_bytes,
    node_protection_findings,
    pods_enforcement_finding,
    pods_limit_finding,
    reserved_cgroup_finding,
    reserved_memory_finding,
    unread_cgroups_finding,
)
from evictd.core.reserved_memory import NodeReservation, ReservedCgroup, ReservedMemory, node_reservation

GiB = 1 << 30
PAGE_COUNTER_MAX = "9223372036854771712"  # v1 memory.limit_in_bytes of a cgroup without a limit (4 KiB pages)
LIMIT_PATH = "/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes"


def reservation(document: dict[str, object]) -> NodeReservation:
    return node_reservation(document)


# --- the KubeletConfiguration's reservations, decoded leniently ---------------------------------------------

@pytest.mark.parametrize(
    ("document", "system", "kube"),
    [
        ({}, ReservedMemory("systemReserved"), ReservedMemory("kubeReserved")),
        ({"systemReserved": {"memory": "1Gi", "cpu": "500m"}},
         ReservedMemory("systemReserved", "1Gi", GiB), ReservedMemory("kubeReserved")),
        ({"kubeReserved": {"memory": "0.5Gi"}, "systemReserved": {"cpu": "1"}},
         ReservedMemory("systemReserved"), ReservedMemory("kubeReserved", "0.5Gi", GiB // 2)),
        ({"systemReserved": {"memory": "1.5"}}, ReservedMemory("systemReserved", "1.5", 2), ReservedMemory("kubeReserved")),
        ({"systemReserved": None, "kubeReserved": {"memory": None}},
         ReservedMemory("systemReserved"), ReservedMemory("kubeReserved")),
    ],
    ids=["empty", "system-1Gi", "kube-half-Gi", "rounded-up-as-Value", "nulls"],
)
def test_reserved_memory_decodes_as_the_kubelet(document: dict[str, object], system: ReservedMemory,
                                                kube: ReservedMemory) -> None:
    decoded = reservation(document)
    assert (decoded.system_reserved, decoded.kube_reserved) == (system, kube)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1Gi", ""),
        ({"memory": "1GB"}, "not a quantity"),
        ({"memory": 1073741824}, "not a string"),
        ({"memory": "-1Gi"}, "negative"),
        ("1Gi", "not a map"),
    ],
    ids=["ok", "bad-quantity", "a-number", "negative", "not-a-map"],
)
def test_reserved_memory_the_kubelet_would_refuse_is_kept_with_its_reason(value: object, problem: str) -> None:
    document = {"systemReserved": value if problem else {"memory": value}}
    decoded = reservation(document).system_reserved
    assert decoded.problem.startswith(problem) and (decoded.memory_bytes is None) == bool(problem), decoded
    finding = reserved_memory_finding(decoded, ReservedMemory("kubeReserved", "1Gi", GiB))
    assert finding.status is (Status.WARNING if problem else Status.OK), finding
    if problem:
        assert "the kubelet refuses this configuration" in finding.detail


def test_reserved_cgroups_decode_names_and_refuse_nothing() -> None:
    decoded = reservation({"systemReservedCgroup": "/system.slice", "kubeReservedCgroup": 5})
    assert decoded.system_reserved_cgroup == ReservedCgroup("systemReservedCgroup", "/system.slice")
    assert decoded.kube_reserved_cgroup.problem.startswith("not a string")


# --- rule (a): memory reserved for the daemons --------------------------------------------------------------

@pytest.mark.parametrize(
    ("system", "kube", "status"),
    [
        (None, None, Status.WARNING),
        ("0", "0", Status.WARNING),
        ("0", None, Status.WARNING),
        ("1Gi", None, Status.OK),
        (None, "512Mi", Status.OK),
        ("1Gi", "512Mi", Status.OK),
    ],
    ids=["both-absent", "both-zero", "zero-and-absent", "system-only", "kube-only", "both"],
)
def test_no_memory_reserved_for_the_daemons_is_a_warning(system: str | None, kube: str | None,
                                                         status: Status) -> None:
    document: dict[str, object] = {}
    if system is not None:
        document["systemReserved"] = {"memory": system}
    if kube is not None:
        document["kubeReserved"] = {"memory": kube}
    decoded = reservation(document)
    finding = reserved_memory_finding(decoded.system_reserved, decoded.kube_reserved)
    assert finding.status is status, finding
    assert finding.what == "systemReserved.memory, kubeReserved.memory"
    assert finding.value == (f"systemReserved.memory={system or 'absent'}, kubeReserved.memory={kube or 'absent'}")
    if status is Status.WARNING:
        assert "pods may use all memory but evictionHard" in finding.detail
        assert "systemReserved: {memory: 1Gi}" in finding.advice
    else:
        assert finding.advice == ""


# --- rule (b): pods held under allocatable ------------------------------------------------------------------

@pytest.mark.parametrize(
    ("enforced", "status"),
    [(("pods",), Status.OK), (("pods", "system-reserved"), Status.OK), ((), Status.WARNING),
     (("none",), Status.WARNING), (("system-reserved",), Status.WARNING)],
    ids=["pods", "pods-and-system", "empty", "none", "system-only"],
)
def test_pods_not_enforced_is_a_warning(enforced: tuple[str, ...], status: Status) -> None:
    finding = pods_enforcement_finding(enforced)
    assert (finding.status, finding.what, finding.value) == (status, "enforceNodeAllocatable",
                                                             "[" + ", ".join(enforced) + "]")
    assert ("not held under allocatable" in finding.detail) == (status is Status.WARNING)
    assert ("enforceNodeAllocatable: [pods]" in finding.advice) == (status is Status.WARNING)


@pytest.mark.parametrize(
    ("text", "problem", "status", "said"),
    [
        ("536870912", "", Status.OK, "held under 536870912 bytes (0.50 GiB)"),
        (PAGE_COUNTER_MAX, "", Status.WARNING, "no memory limit on the kubepods cgroup"),
        ("max", "", Status.WARNING, "no memory limit on the kubepods cgroup"),
        (None, NOT_FOUND, Status.WARNING, "no kubepods cgroup here"),
        (None, "unreadable: Permission denied", Status.WARNING, "could not be read"),
        ("12k", "", Status.WARNING, "not a byte count"),
    ],
    ids=["limited", "v1-page-counter-max", "v2-max", "not-found", "unreadable", "garbage"],
)
def test_a_kubepods_cgroup_without_a_limit_is_a_warning(text: str | None, problem: str, status: Status,
                                                        said: str) -> None:
    finding = pods_limit_finding(CgroupFile(LIMIT_PATH, text, problem))
    assert (finding.status, finding.what) == (status, LIMIT_PATH), finding
    assert finding.value == (text if text is not None else problem)
    assert said in finding.detail, finding


# --- the reserved cgroups enforceNodeAllocatable may cap ------------------------------------------------------

@pytest.mark.parametrize(
    ("enforced", "cgroup", "status", "value"),
    [
        (("pods",), ReservedCgroup("systemReservedCgroup"), Status.OK, "not enforced, systemReservedCgroup=unset"),
        (("pods", "system-reserved"), ReservedCgroup("systemReservedCgroup", "/system.slice"), Status.OK,
         "enforced, systemReservedCgroup=/system.slice"),
        (("pods", "system-reserved"), ReservedCgroup("systemReservedCgroup"), Status.WARNING,
         "enforced, systemReservedCgroup=unset"),
        (("pods",), ReservedCgroup("systemReservedCgroup", "5", "not a string (the kubelet refuses it)"),
         Status.WARNING, "systemReservedCgroup=5"),
    ],
    ids=["not-enforced", "enforced-on-a-cgroup", "enforced-without-a-cgroup", "not-a-string"],
)
def test_an_enforced_reservation_needs_its_cgroup(enforced: tuple[str, ...], cgroup: ReservedCgroup, status: Status,
                                                  value: str) -> None:
    finding = reserved_cgroup_finding(cgroup, "system-reserved", enforced, ReservedMemory("systemReserved", "1Gi", GiB))
    assert (finding.status, finding.value) == (status, value), finding
    if finding.value == "enforced, systemReservedCgroup=unset":
        assert "the kubelet refuses to start" in finding.detail and "systemReservedCgroup" in finding.advice


# --- rule (c): the daemons' protection from reclaim (cgroup v2) ------------------------------------------------

def protection(cgroup: str, low: str | None = "0", minimum: str | None = "0", problem: str = NOT_FOUND,
               ) -> CgroupProtection:
    folder = f"/sys/fs/cgroup/{cgroup}"
    return CgroupProtection(cgroup, min=CgroupFile(folder + "/memory.min", minimum, "" if minimum else problem),
                            low=CgroupFile(folder + "/memory.low", low, "" if low else problem))


def v2(system: CgroupProtection, kubelet: CgroupProtection) -> NodeCgroups:
    return NodeCgroups(2, CgroupFile("/sys/fs/cgroup/kubepods/memory.max", "8589934592"), system, kubelet)


@pytest.mark.parametrize(
    ("system", "kubelet", "status", "said"),
    [
        (protection("system.slice"), protection("system.slice/kubelet.service"), Status.WARNING,
         "neither system.slice nor kubelet.service has memory.min or memory.low"),
        (protection("system.slice", low=None, minimum=None), protection("system.slice/kubelet.service", None, None),
         Status.WARNING, "as freely as the pods'"),
        (protection("system.slice", low="1073741824"), protection("system.slice/kubelet.service"), Status.OK,
         "reclaims pods' pages before"),
        (protection("system.slice", minimum="268435456"), protection("system.slice/kubelet.service"), Status.OK,
         "reclaims pods' pages before"),
        (protection("system.slice", low="max"), protection("system.slice/kubelet.service"), Status.OK,
         "reclaims pods' pages before"),
        (protection("system.slice"), protection("system.slice/kubelet.service", low="536870912"), Status.WARNING,
         "system.slice has none: the kernel bounds a cgroup's protection by its parent's"),
        (protection("system.slice", low=None, problem="unreadable: Permission denied"),
         protection("system.slice/kubelet.service", low="536870912"), Status.WARNING,
         "system.slice's protection could not be read"),
        (protection("system.slice", low=None, problem="unreadable: Permission denied"),
         protection("system.slice/kubelet.service"), Status.WARNING,
         "not confirmed, unreadable: /sys/fs/cgroup/system.slice/memory.low"),
        (protection("system.slice", low="lots"), protection("system.slice/kubelet.service"), Status.WARNING,
         "neither system.slice"),
    ],
    ids=["all-zero", "not-found", "system-low", "system-min", "system-low-max", "kubelet-only",
         "kubelet-only-system-unreadable", "zero-and-unreadable", "garbage-is-not-protection"],
)
def test_daemons_without_memory_min_or_low_is_a_warning_on_v2(system: CgroupProtection, kubelet: CgroupProtection,
                                                              status: Status, said: str) -> None:
    finding = daemon_protection_finding(v2(system, kubelet))
    assert finding.status is status, finding
    assert said in finding.detail, finding
    assert finding.what == "memory.min, memory.low of system.slice and system.slice/kubelet.service"
    assert finding.value.startswith(f"system.slice: memory.min={system.min.shown()} memory.low={system.low.shown()}; ")
    assert ("systemctl set-property system.slice MemoryLow=" in finding.advice) == (status is Status.WARNING)


def test_cgroup_v1_says_it_has_no_memory_min_or_low() -> None:
    finding = daemon_protection_finding(NodeCgroups(1, CgroupFile(LIMIT_PATH, "536870912")))
    assert (finding.status, finding.value) == (Status.OK, "cgroup v1: none")
    assert "only protection is the kubepods limit plus reserved memory" in finding.detail


# --- parsing the cgroup files (v1 and v2 formats) ------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0), ("1073741824", GiB), ("max", None), (PAGE_COUNTER_MAX, None), ("9223372036854710272", None),
     (str(1 << 62), 1 << 62)],
    ids=["zero", "bytes", "v2-max", "v1-4k-page-counter-max", "v1-64k-page-counter-max", "at-the-cut-off"],
)
def test_memory_file_bytes_reads_both_versions(text: str, expected: int | None) -> None:
    assert memory_file_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "1G", "MAX", "0x10", "١٢", "9" * 30, "1 2"])
def test_memory_file_bytes_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="not a byte count"):
        memory_file_bytes(text)


# --- the whole report ---------------------------------------------------------------------------------------

def test_findings_are_the_configurations_then_the_machines_and_carry_their_fields() -> None:
    configured = reservation({"systemReserved": {"memory": "1Gi"}})
    cgroups = NodeCgroups(1, CgroupFile(LIMIT_PATH, PAGE_COUNTER_MAX))
    findings = node_protection_findings(configured, ("pods",), cgroups)
    assert findings == configuration_findings(configured, ("pods",)) + cgroup_findings(cgroups)
    assert [f.status for f in findings] == [Status.OK, Status.OK, Status.OK, Status.OK, Status.WARNING, Status.OK]
    assert node_protection_findings(configured, ("pods",), None) == configuration_findings(configured, ("pods",))
    assert findings[4].fields() == {"status": "warning", "what": LIMIT_PATH, "value": PAGE_COUNTER_MAX,
                                    "detail": findings[4].detail, "advice": findings[4].advice}


def test_an_unreadable_cgroup_mount_is_one_warning() -> None:
    finding = unread_cgroups_finding("/nowhere/memory", "no memory controller")
    assert finding == Finding(Status.WARNING, "/nowhere/memory", "unreadable: no memory controller", finding.detail,
                              "set cgroupfsPath to where cgroupfs is mounted")

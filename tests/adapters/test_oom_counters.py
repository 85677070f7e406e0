"""The OOM-kill counter reader on fixture trees in the kernel's own file formats, for both cgroup versions.

The formats are copied from real files: v1 `memory.oom_control` and `/proc/vmstat` from this machine (Linux 6.18),
v2 `memory.events` as in tests/fixtures/cgroup. The real v1 counters are exercised in test_oom_counters_real.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from evictd.adapters.cgroups import CgroupLayout, CgroupReader
from evictd.adapters.oom_counters import OomCounters
from evictd.core.errors import SampleError
from evictd.core.oom import CgroupOomCount

UID_G = "6f1c2a34-5b7d-4e8f-9a01-23456789abcd"
UID_B = "0d9e8f7a-6b5c-4d3e-8f21-0a1b2c3d4e5f"
CTR_1, CTR_2 = "1f" * 32, "2e" * 32


def oom_control(kills: int) -> str:
    return f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n"


def memory_events(kills: int, groups: int | None = 0) -> str:
    text = f"low 0\nhigh 0\nmax 3\noom 2\noom_kill {kills}\n"
    return text if groups is None else text + f"oom_group_kill {groups}\n"


def vmstat(kills: int) -> str:
    return (f"nr_free_pages 5722069\nnr_zone_inactive_anon 0\npgmajfault 1203\noom_kill {kills}\n"
            "numa_pte_updates 0\nunevictable_pgs_culled 0\n")


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def v1_counters(tmp_path: Path, files: dict[str, str], node: int = 7) -> OomCounters:
    write_tree(tmp_path / "cg" / "memory", files)
    write_tree(tmp_path / "proc", {"vmstat": vmstat(node)})
    return OomCounters(CgroupReader(CgroupLayout(version=1, root=tmp_path / "cg")), proc_root=tmp_path / "proc")


def test_v1_every_cgroup_below_pods_is_read_and_tagged_with_its_pod_and_container(tmp_path: Path) -> None:
    counters = v1_counters(tmp_path, {
        "memory.oom_control": oom_control(9),  # the root cgroup: outside pods, not read
        "kubepods/memory.oom_control": oom_control(0),
        "kubepods/burstable/memory.oom_control": oom_control(1),
        f"kubepods/pod{UID_G}/memory.oom_control": oom_control(2),
        f"kubepods/pod{UID_G}/{CTR_1}/memory.oom_control": oom_control(3),
        f"kubepods/pod{UID_G}/{CTR_1}/nested/memory.oom_control": oom_control(4),
        f"kubepods/burstable/pod{UID_B}/memory.oom_control": oom_control(0),
        f"kubepods/burstable/pod{UID_B}/not-a-container/memory.oom_control": oom_control(5),
    })
    assert counters.node_kills() == 7
    assert counters.pods_kills() is None, "v1 counters are local: the pods total is summed"
    pod_g, pod_b = f"kubepods/pod{UID_G}", f"kubepods/burstable/pod{UID_B}"
    assert sorted(counters.cgroup_kills(), key=lambda c: c.path) == [
        CgroupOomCount("kubepods", 0),
        CgroupOomCount("kubepods/burstable", 1),
        CgroupOomCount(pod_b, 0, pod_uid=UID_B),
        CgroupOomCount(f"{pod_b}/not-a-container", 5, pod_uid=UID_B),
        CgroupOomCount(pod_g, 2, pod_uid=UID_G),
        CgroupOomCount(f"{pod_g}/{CTR_1}", 3, pod_uid=UID_G, container_id=CTR_1),
        CgroupOomCount(f"{pod_g}/{CTR_1}/nested", 4, pod_uid=UID_G, container_id=CTR_1),
    ]


def test_v2_pods_counter_and_pod_and_container_counters_are_hierarchical(tmp_path: Path) -> None:
    pod_g = f"kubepods.slice/kubepods-pod{UID_G.replace('-', '_')}.slice"
    root = tmp_path / "cg"
    write_tree(root, {
        "cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
        "kubepods.slice/memory.events": memory_events(6, 1),
        f"{pod_g}/memory.events": memory_events(4, 1),
        f"{pod_g}/cri-containerd-{CTR_1}.scope/memory.events": memory_events(3, 1),
        f"{pod_g}/cri-containerd-{CTR_2}.scope/memory.events": memory_events(1, None),  # a kernel before 5.17
    })
    write_tree(tmp_path / "proc", {"vmstat": vmstat(11)})
    counters = OomCounters(CgroupReader(CgroupLayout(version=2, root=root, driver="systemd")),
                           proc_root=tmp_path / "proc")
    assert (counters.node_kills(), counters.pods_kills()) == (11, 6)
    assert sorted(counters.cgroup_kills(), key=lambda c: c.path) == [
        CgroupOomCount(pod_g, 4, pod_uid=UID_G, group_kills=1, hierarchical=True),
        CgroupOomCount(f"{pod_g}/cri-containerd-{CTR_1}.scope", 3, pod_uid=UID_G, container_id=CTR_1,
                       group_kills=1, hierarchical=True),
        CgroupOomCount(f"{pod_g}/cri-containerd-{CTR_2}.scope", 1, pod_uid=UID_G, container_id=CTR_2,
                       hierarchical=True),
    ]


def test_no_pods_cgroup_means_no_pod_counters(tmp_path: Path) -> None:
    counters = v1_counters(tmp_path, {"memory.oom_control": oom_control(1)})
    assert counters.pods_kills() is None and counters.cgroup_kills() == ()


@pytest.mark.parametrize(("where", "text", "reason"), [
    pytest.param("proc/vmstat", "nr_free_pages 1\n", "no oom_kill line", id="vmstat-kernel-before-4.13"),
    pytest.param("proc/vmstat", "oom_kill -1\n", "not an unsigned integer", id="vmstat-negative"),
    pytest.param("cg/memory/kubepods/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n", "no oom_kill line",
                 id="oom-control-kernel-before-4.13"),
    pytest.param("cg/memory/kubepods/memory.oom_control", "oom_kill 99999999999999999999999\n", "out of the uint64",
                 id="oom-control-huge"),
])
def test_malformed_counters_are_sample_errors_naming_the_file(tmp_path: Path, where: str, text: str,
                                                              reason: str) -> None:
    counters = v1_counters(tmp_path, {"kubepods/memory.oom_control": oom_control(0)})
    (tmp_path / where).write_text(text)
    with pytest.raises(SampleError) as caught:
        counters.node_kills()
        counters.cgroup_kills()
    assert caught.value.source == str(tmp_path / where) and reason in caught.value.reason


def test_unreadable_vmstat_is_a_sample_error(tmp_path: Path) -> None:
    counters = v1_counters(tmp_path, {})
    (tmp_path / "proc" / "vmstat").unlink()
    with pytest.raises(SampleError, match="vmstat"):
        counters.node_kills()


def test_the_boot_id_is_read_from_procfs_and_the_pods_cgroup_named_with_its_version(tmp_path: Path) -> None:
    counters = v1_counters(tmp_path, {"kubepods/memory.oom_control": oom_control(0)})
    with pytest.raises(SampleError, match="boot_id"):
        counters.boot_id()  # a procfs without it: unreadable, never guessed
    boot_id = tmp_path / "proc" / "sys" / "kernel" / "random" / "boot_id"
    boot_id.parent.mkdir(parents=True)
    boot_id.write_text("e097869e-cfd3-4a24-b48d-959aae3a1f4b\n")  # as the kernel writes it
    assert counters.boot_id() == "e097869e-cfd3-4a24-b48d-959aae3a1f4b"
    boot_id.write_text("")
    with pytest.raises(SampleError, match="not a boot ID"):
        counters.boot_id()
    assert counters.pods_cgroup_name == f"v1:{tmp_path}/cg/memory/kubepods"
    v2 = OomCounters(CgroupReader(CgroupLayout(version=2, root=tmp_path / "cg2", driver="systemd", base="test")))
    assert v2.pods_cgroup_name == f"v2:{tmp_path}/cg2/test/kubepods.slice"


def test_the_real_boot_id_is_a_uuid() -> None:
    counters = OomCounters(CgroupReader(CgroupLayout(version=1, root=Path("/sys/fs/cgroup"))))
    assert str(uuid.UUID(counters.boot_id())) == counters.boot_id()

"""Memory pressure both the real kubelet and evictd act on, with the same thresholds (tests/cluster, bench/).

The kubelet's pods cgroup is made small (`systemReserved` = all memory but POD_MEMORY_MIB) so that one pod
filling HOG_MIB crosses `allocatableMemory.available < THRESHOLD_MIB` (the allocatable copy of a hard
`memory.available` threshold, as the kubelet makes it with the default `enforceNodeAllocatable: [pods]`),
while the machine itself (`memory.available`) stays far above the threshold. The same KubeletConfiguration
lines go to the kubelet (its own eviction on) or, with the kubelet's thresholds at `0%`, to evictd.
"""

from __future__ import annotations

from pathlib import Path

MiB = 1 << 20
POD_MEMORY_MIB = 1200
THRESHOLD_MIB = 500
HOG_MIB = 900


def machine_memory_mib() -> int:
    """MemTotal, the kubelet's memory capacity on this machine."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def reserved() -> str:
    """The kubelet's systemReserved that leaves POD_MEMORY_MIB to the pods cgroup."""
    return f"systemReserved: {{memory: {machine_memory_mib() - POD_MEMORY_MIB}Mi}}\n"


def thresholds() -> str:
    """The eviction thresholds both sides use."""
    return f"evictionHard: {{memory.available: {THRESHOLD_MIB}Mi}}\nevictionPressureTransitionPeriod: 5s\n"


def kubelet_evicting() -> str:
    """The kubelet's configuration with its own eviction on."""
    return reserved() + thresholds()


def kubelet_not_evicting() -> str:
    """The same pods cgroup, the kubelet's eviction off (its default here: every hard threshold 0%)."""
    return reserved()

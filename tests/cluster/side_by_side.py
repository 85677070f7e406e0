"""Memory and PID pressure both the real kubelet and evictd act on, with the same thresholds (tests/cluster, bench/).

The kubelet's pods cgroup is made small (`systemReserved` = all memory but POD_MEMORY_MIB) so that one pod
filling HOG_MIB crosses `allocatableMemory.available < THRESHOLD_MIB` (the allocatable copy of a hard
`memory.available` threshold, as the kubelet makes it with the default `enforceNodeAllocatable: [pods]`),
while the machine itself (`memory.available`) stays far above the threshold. The same KubeletConfiguration
lines go to the kubelet (its own eviction on) or, with the kubelet's thresholds at `0%`, to evictd.
"""

from __future__ import annotations

from pathlib import Path

from evictd.adapters.procfs import pid_limit, running_tasks

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


# PID pressure: `pid.available` (the node's task limit minus its running tasks, threads included) set a fixed
# number of tasks below what the node has free when the run starts, so that one pod forking PID_HOG_TASKS
# sleeping processes crosses it while the rest of the machine's ups and downs (a few dozen tasks) do not.
# The kubelet's podPidsLimit bounds every pod's tasks, a safety net for the machine if a pod is never stopped.
PID_HEADROOM = 400
PID_HOG_TASKS = 900
POD_PIDS_LIMIT = 1500


def pid_available() -> int:
    """`pid.available` as both compute it: min(pid_max, threads-max) minus the tasks in /proc/loadavg."""
    return pid_limit("/proc") - running_tasks("/proc")


def pid_threshold() -> int:
    """A `pid.available` threshold PID_HEADROOM tasks below what the node has free now."""
    return pid_available() - PID_HEADROOM


def pid_thresholds(threshold: int) -> str:
    """The PID eviction thresholds both sides use."""
    return f"evictionHard: {{pid.available: '{threshold}'}}\nevictionPressureTransitionPeriod: 5s\n"


def kubelet_pid_evicting(threshold: int) -> str:
    """The kubelet's configuration with its own PID eviction on."""
    return f"podPidsLimit: {POD_PIDS_LIMIT}\n" + pid_thresholds(threshold)


def kubelet_pid_not_evicting() -> str:
    """The same pod PID limit, the kubelet's eviction off."""
    return f"podPidsLimit: {POD_PIDS_LIMIT}\n"


# Disk pressure on a dedicated imagefs: containerd's root on a small ext4 of IMAGEFS_MIB, an unused image of
# UNUSED_IMAGE_MIB (about twice that on the imagefs: its content blob and its unpacked snapshot) that node-level
# reclaim can delete (`imageMinimumGCAge: 1s` on both sides, so a freshly imported image counts; 0s would be
# defaulted to 2m), and a hog writing HOG_FIRST_WRITE_MIB then HOG_WRITE_MIB into its writable layer. The
# second write takes `imagefs.available` about 150 MiB below the threshold: more than the image frees, so a pod
# is evicted after the reclaim, and never so far that the filesystem fills (a full imagefs stops containerd).
IMAGEFS_MIB = 800
UNUSED_IMAGE_MIB = 50
IMAGEFS_THRESHOLD_MIB = 300
HOG_FIRST_WRITE_MIB = 60
HOG_WRITE_MIB = 450


def imagefs_thresholds() -> str:
    """The imagefs eviction thresholds both sides use."""
    return (f"evictionHard: {{imagefs.available: {IMAGEFS_THRESHOLD_MIB}Mi}}\nevictionPressureTransitionPeriod: 5s\n"
            "imageMinimumGCAge: 1s\n")

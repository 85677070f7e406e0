"""How the node protects its daemons' memory from its pods, judged (no I/O): findings for `check-config` and the
start-up log.

Judged on what was read, nothing guessed: the KubeletConfiguration (reserved memory, `enforceNodeAllocatable`) and
the machine's cgroups (`NodeCgroups`: the kubepods limit; on v2 `memory.min`/`memory.low` of `system.slice` and
`kubelet.service`). Warnings: no memory reserved; pods not held under allocatable (or unknown); a reserved cgroup
enforced but not named (the kubelet refuses it); on v2 neither unit protected, or kubelet.service protected while
system.slice is not (cgroup-v2.rst: protection is bounded by the ancestors'). cgroup v1 has no memory.min/low: an
ok finding. evictd reports; it changes no cgroup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from evictd.core.memcg import UNLIMITED_ABOVE_BYTES
from evictd.core.reserved_memory import NodeReservation, ReservedCgroup, ReservedMemory

# What a cgroup v2 memory file holds for "no limit" (memory.max) or "all of it protected" (memory.min, memory.low).
V2_MAX = "max"
# `CgroupFile.problem` of a file (or its cgroup) that does not exist.
NOT_FOUND = "not found"
PODS_ENFORCEMENT = "pods"
SYSTEM_RESERVED_ENFORCEMENT = "system-reserved"
KUBE_RESERVED_ENFORCEMENT = "kube-reserved"
# The cgroups whose protection from reclaim is judged on cgroup v2: system.slice and the kubelet's unit in it.
SYSTEM_SLICE = "system.slice"
KUBELET_UNIT = "system.slice/kubelet.service"
GIB = 1 << 30

PROTECT_DAEMONS_ADVICE = (
    "protect the daemons from reclaim with a systemd drop-in: `systemctl set-property system.slice MemoryLow=1G` "
    "(MemoryMin= for a hard guarantee; it writes /etc/systemd/system.control/system.slice.d/), sized to what the "
    "daemons use, and for the kubelet its own share: `systemctl set-property kubelet.service MemoryLow=512M`")


class Status(StrEnum):
    """A finding's verdict: `ok`, or `warning` where nothing protects (or it cannot be known)."""

    OK = "ok"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing evictd read about the node's memory protection: `what` names the file or the configuration key,
    `value` what it held, `detail` what that means for the node, `advice` what an operator should set (empty when
    nothing)."""

    status: Status
    what: str
    value: str
    detail: str
    advice: str = ""

    def fields(self) -> dict[str, str]:
        """The finding as a JSON object and as a log line's fields."""
        return {"status": str(self.status), "what": self.what, "value": self.value, "detail": self.detail,
                "advice": self.advice}


@dataclass(frozen=True, slots=True)
class CgroupFile:
    """One cgroup file as read: its `path`, its content stripped (`text`; None when it was not read) and why there
    is none (`problem`: `NOT_FOUND`, or "unreadable: <reason>")."""

    path: str
    text: str | None = None
    problem: str = ""

    def shown(self) -> str:
        return self.text if self.text is not None else self.problem


@dataclass(frozen=True, slots=True)
class CgroupProtection:
    """`memory.min` and `memory.low` of one cgroup v2 cgroup (`cgroup`, relative to the hierarchy root)."""

    cgroup: str
    min: CgroupFile
    low: CgroupFile


@dataclass(frozen=True, slots=True)
class NodeCgroups:
    """What the machine's cgroups enforce: `version` 1 or 2; the kubepods cgroup's memory limit (v1
    `memory.limit_in_bytes`, v2 `memory.max`); on v2 the protection of system.slice and of the kubelet's unit
    (None on v1, which has no memory.min or memory.low)."""

    version: int
    pods_limit: CgroupFile
    system_slice: CgroupProtection | None = None
    kubelet_unit: CgroupProtection | None = None


def memory_file_bytes(text: str) -> int | None:
    """Return the bytes a cgroup memory file holds, None for "max" or above `UNLIMITED_ABOVE_BYTES`; ValueError
    for anything else."""
    if text == V2_MAX:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(2**64)):
        raise ValueError(f"not a byte count: {text[:40]!r}")
    value = int(text)
    return None if value > UNLIMITED_ABOVE_BYTES else value


def node_protection_findings(reservation: NodeReservation, enforced: Sequence[str],
                             cgroups: NodeCgroups | None) -> list[Finding]:
    """The findings of the configuration and, when read (`cgroups`), of the machine's cgroups."""
    findings = configuration_findings(reservation, enforced)
    return findings if cgroups is None else findings + cgroup_findings(cgroups)


def configuration_findings(reservation: NodeReservation, enforced: Sequence[str]) -> list[Finding]:
    """The findings of a KubeletConfiguration's reservations and `enforceNodeAllocatable` (`enforced`)."""
    return [
        reserved_memory_finding(reservation.system_reserved, reservation.kube_reserved),
        pods_enforcement_finding(enforced),
        reserved_cgroup_finding(reservation.system_reserved_cgroup, SYSTEM_RESERVED_ENFORCEMENT, enforced,
                                reservation.system_reserved),
        reserved_cgroup_finding(reservation.kube_reserved_cgroup, KUBE_RESERVED_ENFORCEMENT, enforced,
                                reservation.kube_reserved),
    ]


def cgroup_findings(cgroups: NodeCgroups) -> list[Finding]:
    """The findings of what the machine's cgroups enforce."""
    return [pods_limit_finding(cgroups.pods_limit), daemon_protection_finding(cgroups)]


def unread_cgroups_finding(where: str, reason: str) -> Finding:
    """The finding when the cgroup mount itself cannot be read (no memory controller found at `where`)."""
    return Finding(Status.WARNING, where, f"unreadable: {reason}",
                   "the machine's cgroups could not be read: not known what holds pods under allocatable or "
                   "protects the daemons", "set cgroupfsPath to where cgroupfs is mounted")


def reserved_memory_finding(system: ReservedMemory, kube: ReservedMemory) -> Finding:
    """Warning when neither reservation keeps memory from pods, or a written one cannot be read."""
    what = f"{system.key}.memory, {kube.key}.memory"
    value = ", ".join(f"{item.key}.memory={item.text if item.text is not None else 'absent'}"
                      for item in (system, kube))
    broken = [item for item in (system, kube) if item.problem]
    if broken:
        return Finding(Status.WARNING, what, value,
                       "; ".join(f"{item.key}.memory is {item.problem}" for item in broken)
                       + ": the kubelet refuses this configuration",
                       "write the memory reservation as a quantity string, e.g. `systemReserved: {memory: 1Gi}`")
    if not (system.reserves or kube.reserves):
        return Finding(Status.WARNING, what, value,
                       "no memory is reserved for system or kube daemons: allocatable is the capacity less "
                       "evictionHard, so pods may use all memory but evictionHard",
                       "reserve what the daemons use: `systemReserved: {memory: 1Gi}` (OS daemons) and "
                       "`kubeReserved: {memory: 512Mi}` (kubelet, runtime) in the KubeletConfiguration")
    total = (system.memory_bytes or 0) + (kube.memory_bytes or 0)
    return Finding(Status.OK, what, value, f"{_bytes_shown(total)} kept from pods' allocatable for the daemons")


def pods_enforcement_finding(enforced: Sequence[str]) -> Finding:
    """Warning when `pods` is not in enforceNodeAllocatable: the kubelet then sets no limit on kubepods."""
    value = "[" + ", ".join(enforced) + "]"
    if PODS_ENFORCEMENT in enforced:
        return Finding(Status.OK, "enforceNodeAllocatable", value,
                       "the kubelet limits the kubepods cgroup to allocatable memory (capacity less systemReserved "
                       "and kubeReserved)")
    return Finding(Status.WARNING, "enforceNodeAllocatable", value,
                   "pods is not enforced: the kubelet sets no memory limit on the kubepods cgroup, so pods are not "
                   "held under allocatable", "include pods: `enforceNodeAllocatable: [pods]` (the kubelet's default)")


def reserved_cgroup_finding(cgroup: ReservedCgroup, enforcement: str, enforced: Sequence[str],
                            reserved: ReservedMemory) -> Finding:
    """Whether the kubelet caps a reserved cgroup at its reservation; warning when it is told to but cannot."""
    what = f"enforceNodeAllocatable {enforcement}, {cgroup.key}"
    named = cgroup.name or "unset"
    if cgroup.problem:
        return Finding(Status.WARNING, what, f"{cgroup.key}={named}",
                       f"{cgroup.key} is {cgroup.problem}", f"write {cgroup.key} as a cgroup name such as "
                       "/system.slice")
    if enforcement not in enforced:
        return Finding(Status.OK, what, f"not enforced, {cgroup.key}={named}",
                       f"{reserved.key} is only subtracted from allocatable; the daemons' cgroup is not capped (the "
                       "usual choice)")
    if not cgroup.name:
        return Finding(Status.WARNING, what, f"enforced, {cgroup.key}=unset",
                       f"the kubelet refuses to start: {cgroup.key} must be set when {enforcement} is in "
                       "enforceNodeAllocatable", f"set {cgroup.key} (e.g. /system.slice) or drop {enforcement} from "
                       "enforceNodeAllocatable")
    return Finding(Status.OK, what, f"enforced, {cgroup.key}={cgroup.name}",
                   f"the kubelet caps {cgroup.name} at {reserved.key} memory: daemons past it are reclaimed, or "
                   "OOM-killed, inside it")


def pods_limit_finding(limit: CgroupFile) -> Finding:
    """Warning when the kubepods cgroup has no memory limit, is not there, or its limit cannot be read."""
    if limit.text is None:
        if limit.problem == NOT_FOUND:
            return Finding(Status.WARNING, limit.path, NOT_FOUND,
                           "no kubepods cgroup here (no kubelet on this node, or the kubelet uses another "
                           "cgroupDriver or cgroupRoot): not known whether pods are held under allocatable",
                           "run evictd with the kubelet's cgroupDriver and cgroupRoot")
        return Finding(Status.WARNING, limit.path, limit.problem,
                       "the kubepods limit could not be read: not known whether pods are held under allocatable")
    try:
        limit_bytes = memory_file_bytes(limit.text)
    except ValueError as exc:
        return Finding(Status.WARNING, limit.path, limit.text[:40], f"unreadable: {exc}")
    if limit_bytes is None:
        return Finding(Status.WARNING, limit.path, limit.text,
                       "no memory limit on the kubepods cgroup: pods are not held under allocatable, only "
                       "evictions stop them before the kernel's OOM killer",
                       "let the kubelet enforce pods (`enforceNodeAllocatable: [pods]`, `cgroupsPerQOS: true`) "
                       "and check that evictd's cgroupDriver and cgroupRoot are the kubelet's")
    return Finding(Status.OK, limit.path, limit.text, f"pods are held under {_bytes_shown(limit_bytes)}")


def daemon_protection_finding(cgroups: NodeCgroups) -> Finding:
    """Whether the kernel protects the daemons' memory from reclaim (memory.min/memory.low, cgroup v2 only)."""
    system, kubelet = cgroups.system_slice, cgroups.kubelet_unit
    if system is None or kubelet is None:
        return Finding(Status.OK, "memory.min, memory.low", f"cgroup v{cgroups.version}: none",
                       "cgroup v1 has no memory.min or memory.low: the daemons' only protection is the kubepods "
                       "limit plus reserved memory",
                       "on cgroup v2, MemoryLow=/MemoryMin= on system.slice protect the daemons' pages from reclaim")
    what = f"memory.min, memory.low of {system.cgroup} and {kubelet.cgroup}"
    value = "; ".join(f"{item.cgroup}: memory.min={item.min.shown()} memory.low={item.low.shown()}"
                      for item in (system, kubelet))
    system_protected, kubelet_protected = protects(system), protects(kubelet)
    if system_protected:
        return Finding(Status.OK, what, value,
                       f"the kernel reclaims pods' pages before those {system.cgroup} holds below its protection")
    if kubelet_protected:
        parent = f"{system.cgroup}'s protection could not be read" if system_protected is None \
            else f"{system.cgroup} has none"
        return Finding(Status.WARNING, what, value,
                       f"{kubelet.cgroup} is protected but {parent}: the kernel bounds a cgroup's protection by "
                       "its parent's, so the kubelet's may have no effect", PROTECT_DAEMONS_ADVICE)
    unread = [file.path for item in (system, kubelet) for file in (item.min, item.low)
              if file.text is None and file.problem != NOT_FOUND]
    detail = ("neither system.slice nor kubelet.service has memory.min or memory.low: the kernel reclaims the "
              "daemons' file pages as freely as the pods' (the thrash of issue 44)")
    if unread:
        detail += f"; not confirmed, unreadable: {', '.join(unread)}"
    return Finding(Status.WARNING, what, value, detail, PROTECT_DAEMONS_ADVICE)


def protects(protection: CgroupProtection) -> bool | None:
    """True when memory.min or memory.low of the cgroup is above 0; False when both read 0 (or are not there);
    None when neither is above 0 and one could not be read or understood."""
    unknown = False
    for file in (protection.min, protection.low):
        if file.text is None:
            unknown = unknown or file.problem != NOT_FOUND
            continue
        try:
            protected = memory_file_bytes(file.text)
        except ValueError:
            unknown = True
            continue
        if protected is None or protected > 0:  # "max" protects everything
            return True
    return None if unknown else False


def _bytes_shown(value: int) -> str:
    return f"{value} bytes ({value / GIB:.2f} GiB)"

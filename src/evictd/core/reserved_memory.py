"""What a KubeletConfiguration reserves for the node's own daemons (no I/O): `systemReserved` and `kubeReserved`
memory and the cgroups `enforceNodeAllocatable` may cap (`systemReservedCgroup`, `kubeReservedCgroup`).

Allocatable is capacity less both; with `pods` enforced the kubepods cgroup is limited to it
(cm/node_container_manager_linux.go). Decoded as the kubelet does but leniently: what it would refuse is kept with
the reason in `problem`, never raised, since these figures are only reported (`evictd.core.node_protection`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evictd.core.errors import QuantityError, bounded_repr
from evictd.core.quantity import Quantity

SYSTEM_RESERVED = "systemReserved"
KUBE_RESERVED = "kubeReserved"
SYSTEM_RESERVED_CGROUP = "systemReservedCgroup"
KUBE_RESERVED_CGROUP = "kubeReservedCgroup"
# The resource name of memory in the reservation maps (v1.ResourceMemory).
MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class ReservedMemory:
    """One reservation's memory: `key`, `text` as written (None: absent), `memory_bytes` rounded up as
    `Quantity.Value()` (None: absent or unreadable), `problem` (empty when readable)."""

    key: str
    text: str | None = None
    memory_bytes: int | None = None
    problem: str = ""

    @property
    def reserves(self) -> bool:
        """True when this reservation keeps some memory from pods."""
        return bool(self.memory_bytes)


@dataclass(frozen=True, slots=True)
class ReservedCgroup:
    """`systemReservedCgroup` or `kubeReservedCgroup` (`key`): the cgroup's name as written (empty: unset), or why
    the value cannot be read (`problem`)."""

    key: str
    name: str = ""
    problem: str = ""


@dataclass(frozen=True, slots=True)
class NodeReservation:
    """The reservations of a KubeletConfiguration; the defaults are an empty configuration's."""

    system_reserved: ReservedMemory = ReservedMemory(SYSTEM_RESERVED)
    kube_reserved: ReservedMemory = ReservedMemory(KUBE_RESERVED)
    system_reserved_cgroup: ReservedCgroup = ReservedCgroup(SYSTEM_RESERVED_CGROUP)
    kube_reserved_cgroup: ReservedCgroup = ReservedCgroup(KUBE_RESERVED_CGROUP)


def node_reservation(document: Mapping[str, object]) -> NodeReservation:
    """Return the reservations of one (merged) KubeletConfiguration document. Never raises: what the kubelet
    would refuse is kept in the fields' `problem`."""
    return NodeReservation(
        system_reserved=reserved_memory(SYSTEM_RESERVED, document.get(SYSTEM_RESERVED)),
        kube_reserved=reserved_memory(KUBE_RESERVED, document.get(KUBE_RESERVED)),
        system_reserved_cgroup=reserved_cgroup(SYSTEM_RESERVED_CGROUP, document.get(SYSTEM_RESERVED_CGROUP)),
        kube_reserved_cgroup=reserved_cgroup(KUBE_RESERVED_CGROUP, document.get(KUBE_RESERVED_CGROUP)),
    )


def reserved_memory(key: str, value: object) -> ReservedMemory:
    """Return the memory of the reservation map `value` (a KubeletConfiguration's `key`); never raises."""
    if value is None:
        return ReservedMemory(key)
    if not isinstance(value, Mapping):
        return ReservedMemory(key, text=bounded_repr(value), problem="not a map of resource names to quantities "
                              f"(the kubelet refuses it: {key} is a map[string]string)")
    memory = value.get(MEMORY)
    if memory is None:
        return ReservedMemory(key)
    if not isinstance(memory, str):
        return ReservedMemory(key, text=bounded_repr(memory), problem="not a string (the kubelet refuses a "
                              "number here: write a quantity such as '1Gi')")
    try:
        quantity = Quantity.parse(memory)
    except QuantityError as exc:
        return ReservedMemory(key, text=bounded_repr(memory), problem=f"not a quantity ({exc.reason})")
    if quantity.sign() < 0:
        return ReservedMemory(key, text=memory, problem="negative (the kubelet refuses a negative reservation)")
    return ReservedMemory(key, text=memory, memory_bytes=quantity.ceil_int())


def reserved_cgroup(key: str, value: object) -> ReservedCgroup:
    """Return the cgroup name of `key` (`systemReservedCgroup` or `kubeReservedCgroup`); never raises."""
    if value is None:
        return ReservedCgroup(key)
    if not isinstance(value, str):
        return ReservedCgroup(key, name=bounded_repr(value), problem="not a string (the kubelet refuses it)")
    return ReservedCgroup(key, name=value)

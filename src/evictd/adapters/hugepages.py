"""The node's hugepage capacity, from /sys/kernel/mm/hugepages: the sum over the pools of `nr_hugepages` times the
page size its folder names (`hugepages-2048kB`).

Why sysfs and not the Node object: the kubelet's Node capacity `hugepages-<size>`, which a 1.37 kubelet subtracts
from `memory.available` (`evictd.core.followed`), is cAdvisor's MachineInfo.HugePages, read from these same files;
reading them needs no API access (evictd's node source runs without it) and costs two small reads a pool. The one
difference: cAdvisor reads them when the kubelet starts, evictd each time; they disagree only while a pool is
resized under a running kubelet (which then reports the old figure until restarted).
"""

from __future__ import annotations

import os
import re

from evictd.core.errors import SampleError

HUGEPAGES_ROOT = "/sys/kernel/mm/hugepages"
# A pool's folder: hugepages-<page size in kB>kB (mm/hugetlb.c hugetlb_sysfs_add_hstate).
_POOL = re.compile(r"hugepages-(\d+)kB")
NR_FILE = "nr_hugepages"


def hugepages_bytes(root: str = HUGEPAGES_ROOT) -> int:
    """The bytes of every hugepage pool under `root` (0: no pool, or no hugetlb support: no folder). Raises
    SampleError naming the file that cannot be read."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise SampleError(root, exc.strerror or str(exc)) from None
    total = 0
    for name in sorted(names):
        match = _POOL.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(root, name, NR_FILE)
        try:
            with open(path, "rb") as file:
                text = file.read(64).decode("ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SampleError(path, getattr(exc, "strerror", None) or str(exc)) from None
        if not text.isdigit():
            raise SampleError(path, f"not a count: {text!r}")
        total += int(text) * int(match.group(1)) * 1024
    return total

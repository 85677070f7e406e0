"""The refault watch's thread against a /proc of plain files: it reads vmstat once a look while a refault threshold is
watched, wakes a real Waiter once when the share refaulted reaches it, then idles until the next cycle arms it again.

(With a real thrash and the loop, on this machine's /proc/vmstat: tests/daemon/test_run_stall.py.)
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from evictd.adapters.cgroups import CgroupLayout
from evictd.adapters.notifiers import Waiter
from evictd.adapters.sensors import daemons_refault_watch, node_refault_watch
from evictd.core.wake import Wake

PAGE = 4096
MEMORY = 10_000 * (1 << 20)  # 1 MiB refaulted within the window is 1 basis point


def vmstat(proc: Path, refaulted_mib: int, scanned: int = 0) -> None:
    pages = refaulted_mib * (1 << 20) // PAGE
    (proc / "vmstat").write_text(f"pgscan_kswapd {scanned}\npgscan_direct 0\nworkingset_refault_file {pages}\n"
                                 f"workingset_activate_file 0\n")


def test_a_share_reached_wakes_the_waiter_once_then_the_watch_idles(tmp_path: Path) -> None:
    vmstat(tmp_path, 0)
    seconds = itertools.count()  # every look is a second later
    watch = node_refault_watch(gated=False, proc_root=str(tmp_path), monotonic=lambda: float(next(seconds)),
                         look_s=0.01)
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([100], MEMORY)  # 1% within 10 s
        assert waiter.wait(0.2) == [], "nothing refaulted: no wake-up"
        assert watch.looks >= 5
        vmstat(tmp_path, 200)  # 200 MiB more: 2% of the memory within the window
        started = time.monotonic()
        assert waiter.wait(5.0) == [Wake.REFAULT_WATCH]
        assert time.monotonic() - started < 2.0
        looks = watch.looks
        assert waiter.wait(0.2) == [], "woken once: nothing more until the next cycle arms it"
        assert watch.looks == looks
    finally:
        waiter.close()


def test_gated_a_share_without_global_reclaim_wakes_nothing(tmp_path: Path) -> None:
    vmstat(tmp_path, 0, scanned=1000)
    seconds = itertools.count()
    watch = node_refault_watch(gated=True, proc_root=str(tmp_path), monotonic=lambda: float(next(seconds)),
                         look_s=0.01)
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([100], MEMORY)
        assert waiter.wait(0.1) == []
        vmstat(tmp_path, 200, scanned=1000)  # a pod re-reading its files in its own limit: no global scans
        assert waiter.wait(0.3) == []
        vmstat(tmp_path, 400, scanned=2000)  # the node reclaims
        assert waiter.wait(5.0) == [Wake.REFAULT_WATCH]
    finally:
        waiter.close()


def test_nothing_armed_nothing_read(tmp_path: Path) -> None:
    vmstat(tmp_path, 0)
    watch = node_refault_watch(gated=False, proc_root=str(tmp_path), look_s=0.01, monotonic=time.monotonic)
    try:
        watch.look_for([], MEMORY)
        time.sleep(0.1)
        assert watch.looks == 0
    finally:
        watch.close()


def test_the_daemons_watch_wakes_when_memavailable_no_longer_covers_their_protected_cache(tmp_path: Path) -> None:
    """cgroup v2 system.slice files and a /proc: the daemons re-read nothing and the kernel takes nothing below their
    616 MiB memory.low, but MemAvailable falls from 1 GiB to 100 MiB under their 256 MiB of cache: the watch wakes
    the loop (156 MiB of the 32 MiB floor it takes a share of: 100 %)."""
    daemons = tmp_path / "cgroup" / "system.slice"
    daemons.mkdir(parents=True)
    (daemons / "memory.stat").write_text("anon 0\nfile 268435456\nworkingset_refault_file 10\npgsteal 3\n")
    (daemons / "memory.current").write_text(f"{256 << 20}\n")
    (daemons / "memory.events").write_text("low 0\nhigh 0\nmax 0\n")
    (daemons / "memory.low").write_text(f"{616 << 20}\n")
    proc = tmp_path / "proc"
    proc.mkdir()
    vmstat(proc, 0)
    (proc / "meminfo").write_text("MemTotal: 2621440 kB\nMemAvailable: 1048576 kB\n")
    seconds = itertools.count()
    watch = daemons_refault_watch(CgroupLayout(version=2, root=tmp_path / "cgroup"), gated=False,
                                  monotonic=lambda: float(next(seconds)), proc_root=str(proc))
    waiter = Waiter(time.monotonic)
    waiter.set_notifiers([watch])
    try:
        watch.look_for([5000])  # 50 % of the daemons' memory
        assert waiter.wait(1.2) == [], "covered: no wake-up"
        (proc / "meminfo").write_text("MemTotal: 2621440 kB\nMemAvailable: 102400 kB\n")
        assert waiter.wait(3.0) == [Wake.DAEMONS_REFAULT_WATCH]
    finally:
        waiter.close()

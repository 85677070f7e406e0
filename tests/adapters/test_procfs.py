"""The procfs adapter: against fixture files in the real formats, and against this machine's /proc."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from evictd.adapters.procfs import inactive_file_bytes, mem_total_bytes, meminfo_bytes, pid_limit, running_tasks
from evictd.core.errors import SampleError

# Copied from this kind of machine (Debian 12 VM, 24 GiB, kernel 6.x).
MEMINFO = """\
MemTotal:       24682416 kB
MemFree:        23936752 kB
MemAvailable:   24343456 kB
Buffers:            4624 kB
Cached:           597516 kB
SwapCached:            0 kB
Active:           219540 kB
Inactive:         356924 kB
Inactive(file):   301312 kB
SwapTotal:             0 kB
SwapFree:              0 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""
LOADAVG = "0.58 0.88 0.51 3/99 10295\n"


def fake_proc(
    tmp_path: Path,
    *,
    meminfo: str | None = MEMINFO,
    pid_max: str | None = "32768\n",
    threads_max: str | None = "192686\n",
    loadavg: str | None = LOADAVG,
) -> Path:
    """Return a folder laid out like /proc holding the given files (None = absent)."""
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    for relative, content in (
        ("meminfo", meminfo),
        ("sys/kernel/pid_max", pid_max),
        ("sys/kernel/threads-max", threads_max),
        ("loadavg", loadavg),
    ):
        if content is not None:
            (tmp_path / relative).write_text(content)
    return tmp_path


# --------------------------------------------------------------------------------------------------
# Fixture files


def test_mem_total_bytes(tmp_path: Path) -> None:
    assert mem_total_bytes(fake_proc(tmp_path)) == 24682416 * 1024


@pytest.mark.parametrize(("field", "kib"), [("MemFree", 23936752), ("Cached", 597516), ("SwapCached", 0)])
def test_any_meminfo_field_in_bytes(tmp_path: Path, field: str, kib: int) -> None:
    assert meminfo_bytes(field, fake_proc(tmp_path)) == kib * 1024


def test_a_missing_meminfo_field_is_named(tmp_path: Path) -> None:
    with pytest.raises(SampleError) as info:
        meminfo_bytes("NoSuchField", fake_proc(tmp_path))
    assert info.value.reason == "no NoSuchField line"


def test_inactive_file_bytes(tmp_path: Path) -> None:
    assert inactive_file_bytes(fake_proc(tmp_path)) == 301312 * 1024


def test_mem_total_accepts_a_string_root(tmp_path: Path) -> None:
    assert mem_total_bytes(str(fake_proc(tmp_path))) == 24682416 * 1024


@pytest.mark.parametrize(
    ("meminfo", "reason"),
    [
        pytest.param("MemFree: 1 kB\n", "no MemTotal line", id="no-memtotal"),
        pytest.param("", "no MemTotal line", id="empty"),
        pytest.param("MemTotal:       24682416\n", "MemTotal is not '<n> kB'", id="no-unit"),
        pytest.param("MemTotal:       24682416 MB\n", "MemTotal is not '<n> kB'", id="wrong-unit"),
        pytest.param("MemTotal:       lots kB\n", "not an unsigned integer", id="not-a-number"),
        pytest.param("MemTotal:       -5 kB\n", "not an unsigned integer", id="negative"),
        pytest.param("MemTotal:       ２４ kB\n", "not ASCII text", id="non-ascii-digits"),
    ],
)
def test_mem_total_malformed(tmp_path: Path, meminfo: str, reason: str) -> None:
    root = fake_proc(tmp_path, meminfo=meminfo)
    with pytest.raises(SampleError) as info:
        mem_total_bytes(root)
    assert info.value.source == str(root / "meminfo")
    assert info.value.reason.startswith(reason)


def test_mem_total_missing_file(tmp_path: Path) -> None:
    root = fake_proc(tmp_path, meminfo=None)
    with pytest.raises(SampleError) as info:
        mem_total_bytes(root)
    assert (info.value.source, info.value.reason) == (str(root / "meminfo"), "No such file or directory")


@pytest.mark.parametrize(
    ("pid_max", "threads_max", "expected"),
    [
        pytest.param("32768\n", "192686\n", 32768, id="pid_max-smaller"),
        pytest.param("4194304\n", "192686\n", 192686, id="threads-max-smaller"),
        pytest.param("4096\n", "4096\n", 4096, id="equal"),
    ],
)
def test_pid_limit_is_the_smaller_limit(tmp_path: Path, pid_max: str, threads_max: str, expected: int) -> None:
    assert pid_limit(fake_proc(tmp_path, pid_max=pid_max, threads_max=threads_max)) == expected


@pytest.mark.parametrize(
    ("file", "kwargs"),
    [
        pytest.param("pid_max", {"pid_max": None}, id="pid_max-missing"),
        pytest.param("threads-max", {"threads_max": None}, id="threads-max-missing"),
        pytest.param("pid_max", {"pid_max": "lots\n"}, id="pid_max-garbage"),
        pytest.param("threads-max", {"threads_max": "\n"}, id="threads-max-empty"),
        pytest.param("pid_max", {"pid_max": "-1\n"}, id="pid_max-negative"),
    ],
)
def test_pid_limit_needs_both_files(tmp_path: Path, file: str, kwargs: dict[str, str | None]) -> None:
    root = fake_proc(tmp_path, **kwargs)
    with pytest.raises(SampleError) as info:
        pid_limit(root)
    assert info.value.source == str(root / "sys" / "kernel" / file)


@pytest.mark.parametrize(
    ("loadavg", "expected"),
    [
        pytest.param(LOADAVG, 99, id="real"),
        pytest.param("1.36 3.49 4.53 2/3518 3715089\n", 3518, id="kubelet-comment-example"),
        pytest.param("0.00 0.00 0.00 1/70000 1\n", 70000, id="beyond-sysinfo-16-bit-procs"),
    ],
)
def test_running_tasks(tmp_path: Path, loadavg: str, expected: int) -> None:
    assert running_tasks(fake_proc(tmp_path, loadavg=loadavg)) == expected


@pytest.mark.parametrize(
    "loadavg",
    [
        pytest.param("0.58 0.88 0.51 3/99\n", id="four-fields"),
        pytest.param("0.58 0.88 0.51 99 10295\n", id="no-slash"),
        pytest.param("0.58 0.88 0.51 3/9/9 10295\n", id="two-slashes"),
        pytest.param("0.58 0.88 0.51 3/x 10295\n", id="total-garbage"),
        pytest.param("0.58 0.88 0.51 ?/99 10295\n", id="running-garbage"),
        pytest.param("", id="empty"),
    ],
)
def test_running_tasks_malformed(tmp_path: Path, loadavg: str) -> None:
    root = fake_proc(tmp_path, loadavg=loadavg)
    with pytest.raises(SampleError) as info:
        running_tasks(root)
    assert info.value.source == str(root / "loadavg")


def test_running_tasks_missing_file(tmp_path: Path) -> None:
    root = fake_proc(tmp_path, loadavg=None)
    with pytest.raises(SampleError) as info:
        running_tasks(root)
    assert info.value.source == str(root / "loadavg")


# --------------------------------------------------------------------------------------------------
# The real /proc


def test_real_mem_total_matches_the_kernels_page_count() -> None:
    # MemTotal and sysconf(_SC_PHYS_PAGES) both come from the kernel's totalram_pages.
    assert mem_total_bytes() == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_real_pid_limit() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    threads_max = int(Path("/proc/sys/kernel/threads-max").read_text())
    limit = pid_limit()
    assert 0 < limit <= pid_max
    assert limit == min(pid_max, threads_max)


THREADS = 50


def test_real_running_tasks_counts_threads() -> None:
    before = running_tasks()
    assert before > 0
    release = threading.Event()
    threads = [threading.Thread(target=release.wait, daemon=True) for _ in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        during = running_tasks()
    finally:
        release.set()
        for thread in threads:
            thread.join()
    # Other tasks on the machine come and go meanwhile; 50 of ours must show up nearly all.
    assert during - before >= THREADS - 10, (before, during)
    deadline = time.monotonic() + 5
    after = running_tasks()
    while after - before >= THREADS - 10 and time.monotonic() < deadline:
        time.sleep(0.05)
        after = running_tasks()
    assert after - before < THREADS - 10, (before, during, after)

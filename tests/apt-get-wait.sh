#!/bin/sh
# apt-get that waits for another apt or dpkg (unattended-upgrades, a second `make test`) instead of giving up.
# Usage: tests/apt-get-wait.sh ARGS...   (as apt-get ARGS...; used by the Makefile and tests/uml/provision-*.sh)
#
# -o DPkg::Lock::Timeout makes apt-get wait for dpkg's locks (install); `apt-get update` does not wait on the
# package lists' lock with it, so a run that fails on a lock ("Could not get lock", "Unable to lock") is tried
# again every APT_LOCK_POLL_S (5) seconds until APT_LOCK_WAIT_S (600) seconds have passed. Any other failure
# ends it at once with apt-get's status.
set -u
wait_s=${APT_LOCK_WAIT_S:-600}
poll_s=${APT_LOCK_POLL_S:-5}
start=$(date +%s)
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
while :; do
	apt-get -o DPkg::Lock::Timeout="$wait_s" "$@" 2>"$errors"
	status=$?
	cat "$errors" >&2
	[ "$status" -eq 0 ] && exit 0
	grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock' "$errors" || exit "$status"
	if [ $(( $(date +%s) - start )) -ge "$wait_s" ]; then
		echo "apt-get-wait: the apt/dpkg lock was still held after ${wait_s} s" >&2
		exit "$status"
	fi
	echo "apt-get-wait: another apt or dpkg holds the lock; trying again in ${poll_s} s" >&2
	sleep "$poll_s"
done

#!/bin/sh
# Makes sure this machine has a user-mode Linux kernel that boots, for the cgroup v2 tier (tests/uml).
# Usage: provision-uml.sh [CACHE_DIR]   (default /var/tmp/evictd-uml)
# Result: CACHE_DIR/linux.uml (a kernel that booted here) and CACHE_DIR/modules (its module folder).
#
# Debian 12's user-mode-linux (6.1) is installed first and used when it boots. On hosts whose CPU has AMX
# (amx_tile), its guest dies at its first process: "userspace - ptrace set fp regs failed, errno = 14" (the
# host's XSAVE area grew past what that UML hands to PTRACE_SETREGSET). Debian's newer user-mode-linux
# (unstable, 7.x) sizes the area from the host and boots there; it is fetched with apt-get from the machine's
# own Debian source (same mirror, suite unstable), unpacked (not installed), and pointed at the matching libc
# with patchelf, since it needs a newer glibc than Debian 12's.
set -eu
CACHE=${1:-/var/tmp/evictd-uml}
HERE=$(cd "$(dirname "$0")" && pwd)
# apt-get that waits for another apt or dpkg holding the lock, instead of giving up.
APT_GET="$HERE/../apt-get-wait.sh"
mkdir -p "$CACHE"

. "$HERE/uml-probe.sh"
. "$HERE/debian-unstable.sh"

use() {  # use KERNEL MODULES
	ln -sfn "$1" "$CACHE/linux.uml"; ln -sfn "$2" "$CACHE/modules"
	echo "user-mode Linux: $1 ($(basename "$2"))"
}

if [ ! -x /usr/bin/linux.uml ]; then
	"$APT_GET" update -qq && DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq user-mode-linux >/dev/null
fi
debian_mods=$(ls -d /usr/lib/uml/modules/* | head -1)
if uml_probe /usr/bin/linux.uml; then use /usr/bin/linux.uml "$debian_mods"; exit 0; fi
echo "Debian 12's user-mode-linux does not boot on this CPU; using Debian's newer one" >&2

newer="$CACHE/newer"
if [ ! -x "$newer/linux.uml" ] || ! uml_probe "$newer/linux.uml"; then
	command -v patchelf >/dev/null || DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq patchelf >/dev/null
	rm -rf "$CACHE/apt" "$newer"
	unstable_update "$CACHE/apt"
	unstable_unpack "$CACHE/apt" "$newer/root" user-mode-linux libc6
	libdir="$newer/root/usr/lib/x86_64-linux-gnu"
	cp "$newer/root/usr/bin/linux.uml" "$newer/linux.uml"
	patchelf --set-interpreter "$libdir/ld-linux-x86-64.so.2" --set-rpath "$libdir" "$newer/linux.uml"
	uml_probe "$newer/linux.uml" || { echo "no user-mode Linux kernel boots on this machine" >&2; exit 1; }
fi
use "$newer/linux.uml" "$(ls -d "$newer"/root/usr/lib/uml/modules/* | head -1)"

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
	apt_dir="$CACHE/apt"; rm -rf "$apt_dir" "$newer"; mkdir -p "$apt_dir/etc" "$apt_dir/lists/partial" \
		"$apt_dir/cache/archives/partial" "$newer"
	# The machine's own Debian stanza (not the security one), with the suite changed.
	python3 "$HERE/debian_source.py" /etc/apt/sources.list.d/debian.sources unstable > "$apt_dir/etc/unstable.sources"
	opts="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$apt_dir/etc -o Dir::State::Lists=$apt_dir/lists
		-o Dir::Cache=$apt_dir/cache -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root"
	# shellcheck disable=SC2086
	apt-get $opts update -qq
	# shellcheck disable=SC2086
	(cd "$apt_dir/cache" && apt-get $opts download user-mode-linux libc6 >/dev/null)
	for deb in "$apt_dir"/cache/*.deb; do dpkg -x "$deb" "$newer/root"; done
	libdir="$newer/root/usr/lib/x86_64-linux-gnu"
	cp "$newer/root/usr/bin/linux.uml" "$newer/linux.uml"
	patchelf --set-interpreter "$libdir/ld-linux-x86-64.so.2" --set-rpath "$libdir" "$newer/linux.uml"
	uml_probe "$newer/linux.uml" || { echo "no user-mode Linux kernel boots on this machine" >&2; exit 1; }
fi
use "$newer/linux.uml" "$(ls -d "$newer"/root/usr/lib/uml/modules/* | head -1)"

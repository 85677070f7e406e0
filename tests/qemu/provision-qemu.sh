#!/bin/sh
# Makes sure this machine can boot the arena's multi-CPU node: Debian's stock amd64 kernel (2 vCPUs,
# preemptible, PSI, cgroup v2) under qemu-system-x86_64, for bench/node_survival.py --vm qemu (tests/qemu).
# Usage: provision-qemu.sh [CACHE_DIR]   (default /var/tmp/evictd-qemu)
# Result: CACHE_DIR/vmlinuz (the kernel), CACHE_DIR/modules (its module folder), CACHE_DIR/initramfs.cpio.gz
# (a static busybox, the modules the guest needs to mount the host's / over virtio-9p and its own ext4 disk,
# and tests/qemu/initramfs-init.sh as /init).
#
# qemu comes from Debian (apt-get install qemu-system-x86). The kernel is what linux-image-amd64 depends on, in the
# machine's own Debian source: downloaded and unpacked (`apt-get download`, `dpkg-deb -x`), not installed.
# Nothing is built: a minute or two the first time (about 100 MB of packages), cached after that.
set -eu
CACHE=${1:-/var/tmp/evictd-qemu}
HERE=$(cd "$(dirname "$0")" && pwd)
APT_GET="$HERE/../apt-get-wait.sh"
mkdir -p "$CACHE"

need=""
command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
[ -x /bin/busybox ] || need="$need busybox-static"
command -v depmod >/dev/null || need="$need kmod"
if [ -n "$need" ]; then
	# shellcheck disable=SC2086
	"$APT_GET" update -qq && DEBIAN_FRONTEND=noninteractive "$APT_GET" install -y -qq --no-install-recommends $need >/dev/null
fi

if [ ! -f "$CACHE/vmlinuz" ] || [ ! -d "$CACHE/modules" ]; then
	# linux-image-amd64 names the current kernel package (linux-image-6.1.0-NN-amd64).
	image=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')
	if [ -z "$image" ]; then
		"$APT_GET" update -qq
		image=$(apt-cache depends linux-image-amd64 | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')
	fi
	[ -n "$image" ] || { echo "provision-qemu: no linux-image-amd64 in this machine's Debian source" >&2; exit 1; }
	rm -rf "$CACHE/deb" "$CACHE/kernel"; mkdir -p "$CACHE/deb" "$CACHE/kernel"
	(cd "$CACHE/deb" && apt-get -o APT::Sandbox::User=root download -qq "$image" >/dev/null)
	dpkg-deb -x "$CACHE"/deb/*.deb "$CACHE/kernel"
	release=$(ls "$CACHE/kernel/lib/modules")
	depmod -b "$CACHE/kernel" "$release"
	ln -sfn "$CACHE/kernel/boot/vmlinuz-$release" "$CACHE/vmlinuz"
	ln -sfn "$CACHE/kernel/lib/modules/$release" "$CACHE/modules"
	rm -f "$CACHE/initramfs.cpio.gz"
	rm -rf "$CACHE/deb"
fi

if [ ! -f "$CACHE/initramfs.cpio.gz" ] || [ "$HERE/initramfs-init.sh" -nt "$CACHE/initramfs.cpio.gz" ]; then
	release=$(basename "$(readlink "$CACHE/modules")")
	stage=$CACHE/initramfs
	rm -rf "$stage"; mkdir -p "$stage/bin" "$stage/modules" "$stage/proc" "$stage/sys" "$stage/dev" "$stage/newroot"
	cp /bin/busybox "$stage/bin/busybox"
	: > "$stage/modules.list"
	# The modules and what they need, in load order: 9p over virtio (the host's root), virtio-blk and ext4 (the
	# guest's disk), overlay and dummy (the stand-in node's images and network, as guest-node.sh asks for).
	for module in 9p 9pnet_virtio virtio_pci virtio_blk ext4 crc32c_intel overlay dummy; do
		modprobe -d "$CACHE/kernel" -S "$release" --show-depends "$module" | awk '$1 == "insmod" {print $2}'
	done | awk '!seen[$0]++' | while read -r path; do
		cp "$path" "$stage/modules/"; basename "$path" >> "$stage/modules.list"
	done
	cp "$HERE/initramfs-init.sh" "$stage/init"; chmod 755 "$stage/init"
	(cd "$stage" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$CACHE/initramfs.cpio.gz.new"
	mv "$CACHE/initramfs.cpio.gz.new" "$CACHE/initramfs.cpio.gz"
	rm -rf "$stage"
fi
echo "qemu node: $(qemu-system-x86_64 --version | head -1), kernel $(basename "$(readlink "$CACHE/modules")")"

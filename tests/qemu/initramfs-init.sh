#!/bin/busybox sh
# PID 1 of the qemu guest's initramfs (tests/qemu/provision-qemu.sh builds it): loads the modules, mounts this
# machine's / READ-ONLY over virtio-9p (tag hostroot; qemu's fsdev is readonly=on as well, so nothing the guest
# does can write it) at /newroot and the one writable share (tag out) at $UML_OUT inside it, then hands PID 1 to
# $QEMU_INIT on the new root: the init tests/qemu/qemu_guest.py wrote (tests/uml/guest-prelude.sh, which puts tmpfs
# on the folders a guest writes as on user-mode Linux, then the body). Kernel command line words the kernel does
# not know arrive here as environment; switch_root keeps them.
/bin/busybox --install -s /bin
export PATH=/bin
fail() { echo "initramfs: $*"; echo "initramfs: powering off"; sync; poweroff -f; sleep 5; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for module in $(cat /modules.list); do insmod "/modules/$module" 2>/dev/null || echo "initramfs: insmod $module failed"; done
opts="trans=virtio,version=9p2000.L,msize=512000"
# cache=loose: the host's files (Python, evictd, the workloads) leave page cache in the guest, as a real node's
# binaries and libraries on its disk do, and can be reclaimed and read back.
mount -t 9p -o "ro,$opts,cache=loose" hostroot /newroot || fail "cannot mount the host root"
case "${UML_OUT:-}" in
  /run/*|"") fail "UML_OUT=${UML_OUT:-} is unset or under /run, which the guest covers with tmpfs";;
  *) [ -d "/newroot$UML_OUT" ] || fail "no folder $UML_OUT on the host"
     # cache=none: every write reaches the host at once (a guest killed mid-way keeps what it wrote).
     mount -t 9p -o "rw,$opts,cache=none" out "/newroot$UML_OUT" || fail "cannot mount the out share";;
esac
mount --move /dev /newroot/dev
# /proc and /sys are left for the next init to mount (the prelude mounts them; a second sysfs mount fails).
umount /sys /proc
[ -x "/newroot${QEMU_INIT:-/nonexistent}" ] || fail "no executable QEMU_INIT=${QEMU_INIT:-} on the host root"
exec switch_root /newroot "$QEMU_INIT"

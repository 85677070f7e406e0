# Sourced by a guest init after guest-prelude.sh, for a real kubelet inside the guest (tests/cluster):
# - a host name of the guest's own (UML leaves "(none)", which is no valid Node name);
# - a "cpu MHz" line in /proc/cpuinfo: UML's has none and the kubelet's cAdvisor exits without a clock speed
#   (a copy bind-mounted over it, for this guest only);
# - a node IP: the kubelet takes the address of the default route; a dummy interface of the guest's own kernel
#   with a default route through it (no packet leaves the guest);
# - overlayfs, containerd's snapshotter, loaded from the kernel's modules;
# - a writable /var/lib/kubelet: the kubelet's device-plugin folder is there whatever its --root-dir. A tmpfs on
#   /var/lib (guest only) whose entries are links to the host's, which stay read-only, seen through a bind,
#   but for the host's own /var/lib/kubelet (a kubelet run on the host leaves one).
hostname "${GUEST_HOSTNAME:-evictd-v2}"
if ! grep -q 'cpu MHz' /proc/cpuinfo; then
	{ sed '/^$/d' /proc/cpuinfo; printf 'cpu MHz\t\t: 2000.000\n\n'; } > /run/cpuinfo
	mount --bind /run/cpuinfo /proc/cpuinfo
fi
insmod "$UML_MODULES/kernel/drivers/net/dummy.ko" 2>/dev/null
ip link add dummy0 type dummy 2>/dev/null
ip addr add 10.0.2.15/24 dev dummy0
ip link set dummy0 up
ip route add default via 10.0.2.1 dev dummy0
grep -qw overlay /proc/filesystems || insmod "$UML_MODULES/kernel/fs/overlayfs/overlay.ko"
mkdir -p /run/host-var-lib
mount --bind /var/lib /run/host-var-lib
mount -t tmpfs tmpfs /var/lib
for entry in /run/host-var-lib/* /run/host-var-lib/.[!.]*; do
	[ -e "$entry" ] && [ "${entry##*/}" != kubelet ] && ln -s "$entry" "/var/lib/${entry##*/}"
done
mkdir -p /var/lib/kubelet
guest_log "node ready: host name $(hostname), cgroup $(stat -f -c %T /sys/fs/cgroup)"

# Sourced first by every guest init of the cgroup v2 tier (tests/uml/uml_guest.py writes the init).
# The guest's root is the host's / (hostfs): it is remounted read-only for the guest, and the one host folder
# the guest may write, $UML_OUT, is bind-mounted read-write before that. Everything a daemon writes goes to
# guest-private tmpfs (/run, /var/log, /var/cache: give every stateDir, root-dir and data-dir a folder under
# /run, as /var/lib has no such folders on the host and stays read-only); HOME and TMPDIR point
# into /run. cgroup2 is mounted with cpu, memory and pids delegated to children; loopback is up.
# Kernel command line words the kernel does not know reach this init as environment: UML_OUT, UML_MODULES,
# EVICTD_REPO, EVICTD_PYTHON, UML_DISK (set by the harness).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/run/home TMPDIR=/run/tmp PYTHONDONTWRITEBYTECODE=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
grep -q ' /dev ' /proc/mounts || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm 2>/dev/null
mount -t devpts devpts /dev/pts 2>/dev/null
mount -t tmpfs shm /dev/shm 2>/dev/null
mount --bind "$UML_OUT" "$UML_OUT"
mount -o remount,bind,ro /
for d in /run /var/log /var/cache; do [ -d "$d" ] && mount -t tmpfs tmpfs "$d"; done
mkdir -p /run/tmp /run/home
# A disk of the guest's own (boot_guest's disk_mib: an ext4 on /dev/ubda), where files leave page cache.
export UML_DISK_MOUNT=/run/disk
if [ -n "${UML_DISK:-}" ]; then mkdir -p "$UML_DISK_MOUNT" && mount -t ext4 "$UML_DISK" "$UML_DISK_MOUNT"; fi
mount -t cgroup2 none /sys/fs/cgroup
echo "+cpu +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control
ip link set lo up 2>/dev/null || true
guest_uptime() { cut -d' ' -f1 /proc/uptime; }
guest_log() { echo "[guest $(guest_uptime)] $*"; }
# guest_halt: ends the guest (PID 1 exiting would panic the kernel).
guest_halt() { sync; /sbin/halt -f; }
# A guest init that fails anywhere still halts: the harness reads what was written to $UML_OUT.
trap guest_halt EXIT
guest_log "guest ready; cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"

# Sourced by provision-uml.sh and provision-uml-psi.sh: does a user-mode Linux kernel boot on this machine?
#
# uml_probe KERNEL [CHECK]: boots KERNEL (mem=64M, this machine's / as hostfs root) with a small init and
# succeeds when that init wrote its mark into a temporary folder. CHECK, when given, is shell run by the init
# first (with /proc, /sys and cgroup2 on /sys/fs/cgroup mounted): the mark is written only when it succeeds.
# The guest's console goes to UML_PROBE_LOG when that is set (for a failure's reason), otherwise nowhere.
uml_probe() {
	probe_dir=$(mktemp -d); probe_mark="$probe_dir/mark"
	{
		echo '#!/bin/sh'
		if [ -n "${2:-}" ]; then
			echo 'mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t cgroup2 none /sys/fs/cgroup'
			printf '{ %s\n} && ' "$2"
		fi
		printf 'echo booted > %s\nexec /sbin/halt -f\n' "$probe_mark"
	} > "$probe_dir/init"
	chmod +x "$probe_dir/init"
	timeout 60 "$1" mem=64M uml_dir="$probe_dir" root=/dev/root rootfstype=hostfs rootflags=/ rw \
		init="$probe_dir/init" cgroup_no_v1=all con0=fd:0,fd:1 con=null </dev/null >"$probe_dir/log" 2>&1 || true
	probe_ok=1; [ -s "$probe_mark" ] && probe_ok=0
	[ -n "${UML_PROBE_LOG:-}" ] && cp "$probe_dir/log" "$UML_PROBE_LOG"
	rm -rf "$probe_dir"; return $probe_ok
}

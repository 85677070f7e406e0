#!/usr/bin/env bash
# Boots deploy/systemd/evictd.service under a real systemd (systemd-nspawn, this machine's own OS as a
# throw-away overlay) and checks what the unit promises: Type=notify readiness, watchdog pings, the bounding
# set, the memcg registration through ReadWritePaths=, the PSI trigger, /healthz, a clean stop.
# Manual (root, ~1 min, needs apt's systemd-container and PyPI for evictd's dependencies); not run by pytest.
#   bash tests/deploy/systemd_smoke.sh
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/evictd-smoke.XXXXXX)
command -v systemd-nspawn >/dev/null || { "$(dirname "$0")/../apt-get-wait.sh" update -qq && "$(dirname "$0")/../apt-get-wait.sh" install -y -qq systemd-container >/dev/null; }

cleanup() {
    umount -R "$WORK/root" 2>/dev/null || true
    umount "$WORK/layers" 2>/dev/null || true
    [ -n "${NSPAWN_TMPFS:-}" ] && umount /run/systemd/nspawn 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# evictd in a virtualenv at /opt/evictd built with the system Python (the unit's ProtectHome=yes hides
# interpreters under /root and /home), made in a private mount namespace so the host's /opt is untouched.
mkdir -p "$WORK/opt-evictd"
unshare -m sh -c "mount -t tmpfs tmpfs /opt && mkdir /opt/evictd && mount --bind '$WORK/opt-evictd' /opt/evictd \
  && /usr/bin/python3 -m venv /opt/evictd && /opt/evictd/bin/pip install -q --disable-pip-version-check '$REPO'" \
  > "$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log"; exit 1; }

# The OS: this machine's root file system under a tmpfs overlay, with its own machine id.
mkdir -p "$WORK/layers" "$WORK/root" "$WORK/out"
mount -t tmpfs tmpfs "$WORK/layers"
mkdir -p "$WORK/layers/upper" "$WORK/layers/work"
mount -t overlay overlay -o "lowerdir=/,upperdir=$WORK/layers/upper,workdir=$WORK/layers/work" "$WORK/root"
systemd-id128 new > "$WORK/root/etc/machine-id"
# nspawn refuses to clean up its propagation folder unless it is on a temporary file system.
if ! findmnt -n /run/systemd/nspawn >/dev/null; then
    mkdir -p /run/systemd/nspawn && mount -t tmpfs tmpfs /run/systemd/nspawn && NSPAWN_TMPFS=1
fi

sed '/^kubeconfig:/d' "$REPO/deploy/systemd/config.yaml" > "$WORK/config.yaml"   # no API server here
cat > "$WORK/probe.sh" <<'EOF'
#!/bin/sh
# nspawn mounts the v1 memory hierarchy read-only in the container; a node's own is writable.
mount -o remount,bind,rw /sys/fs/cgroup/memory 2>/dev/null && systemctl restart evictd
sleep 30
systemctl show evictd -p ActiveState -p SubState -p NRestarts -p WatchdogUSec -p WatchdogTimestampMonotonic \
  -p ActiveEnterTimestampMonotonic > /out/show.txt
P=$(systemctl show -p MainPID --value evictd)
grep -E '^(CapBnd|NoNewPrivs|Seccomp):' /proc/$P/status > /out/status.txt
ls -l /proc/$P/fd > /out/fds.txt
/usr/bin/python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:10262/healthz").read().decode())' > /out/healthz.txt 2>&1
journalctl -b -u evictd --no-pager -o cat --since "-25s" > /out/journal-running.txt
systemctl stop evictd
systemctl show evictd -p Result -p ExecMainStatus > /out/stop.txt
systemctl poweroff
EOF
chmod +x "$WORK/probe.sh"
cat > "$WORK/probe.service" <<'EOF'
[Unit]
After=evictd.service
[Service]
Type=oneshot
ExecStart=/probe.sh
EOF
cat > "$WORK/probe.target" <<'EOF'
[Unit]
Requires=basic.target evictd.service probe.service
After=basic.target
AllowIsolate=yes
EOF

timeout 180 systemd-nspawn -D "$WORK/root" --register=no --keep-unit --link-journal=no --console=pipe \
    --bind-ro="$WORK/opt-evictd:/opt/evictd" --bind-ro="$WORK/config.yaml:/etc/evictd/config.yaml" \
    --bind="$WORK/out:/out" --bind-ro="$WORK/probe.sh:/probe.sh" \
    --bind-ro="$REPO/deploy/systemd/evictd.service:/etc/systemd/system/evictd.service" \
    --bind-ro="$WORK/probe.service:/etc/systemd/system/probe.service" \
    --bind-ro="$WORK/probe.target:/etc/systemd/system/probe.target" \
    -b -- systemd.unit=probe.target > "$WORK/console.log" 2>&1 || { tail -20 "$WORK/console.log"; exit 1; }

fail=0
check() { if grep -q -- "$2" "$WORK/out/$1"; then echo "ok   $3"; else echo "FAIL $3 ($1)"; fail=1; fi; }
check show.txt 'SubState=running' "started after READY=1 and still running"
check show.txt 'NRestarts=0' "no restart"
check show.txt 'WatchdogUSec=1min' "watchdog armed (60 s)"
check status.txt 'NoNewPrivs:	1' "no new privileges"
check status.txt 'Seccomp:	2' "seccomp filter on"
check fds.txt '/proc/pressure/memory' "PSI trigger open on /proc/pressure/memory"
check fds.txt 'eventfd' "memcg threshold eventfds registered"
check healthz.txt '^ok' "/healthz answers ok"
check stop.txt 'ExecMainStatus=0' "stopped cleanly with status 0"
if grep -q EROFS "$WORK/out/journal-running.txt"; then echo "FAIL cgroup.event_control not writable"; fail=1; fi
# Bounding set: CAP_DAC_OVERRIDE (1), CAP_DAC_READ_SEARCH (2), CAP_SYS_RESOURCE (24) where root has it.
bnd=$(awk '/CapBnd/ {print $2}' "$WORK/out/status.txt")
case $((16#$bnd & ~(1<<1 | 1<<2 | 1<<24))) in 0) echo "ok   bounding set $bnd";; *) echo "FAIL bounding set $bnd"; fail=1;; esac
watchdog=$(sed -n 's/^WatchdogTimestampMonotonic=//p' "$WORK/out/show.txt")
active=$(sed -n 's/^ActiveEnterTimestampMonotonic=//p' "$WORK/out/show.txt")
if [ "${watchdog:-0}" -gt "${active:-0}" ]; then echo "ok   WATCHDOG=1 received after READY=1"; else echo "FAIL no watchdog ping"; fail=1; fi
exit $fail

"""deploy/systemd/evictd.service as shipped, under a real systemd 252 as PID 1 of a user-mode Linux guest.

The guest is installed as deploy/systemd/README.md tells an operator: a virtualenv of the system Python at
/opt/evictd (holding this checkout's evictd and its dependencies; the guest has no network for `pip install`),
the shipped config.yaml at /etc/evictd/config.yaml checked with `evictd check-config`, a kubeconfig at
/etc/evictd/kubeconfig (for an API server that is not there: evictd must run without one), the unit file
byte for byte in /etc/systemd/system, then `systemctl enable --now evictd`. No drop-in changes the unit.
/opt, /etc and /var/lib are guest-private tmpfs; the host stays read-only to the guest.

One boot (about 1.5 minutes, most of it the unit's own 60 s watchdog) shows, from systemctl, /proc and the
service's own mount namespace: activation only after READY=1, a SIGSTOPped evictd killed by the watchdog and
restarted, `systemctl stop` ending it cleanly with its state lock released, what the sandbox lets it write,
its capabilities, its memory locked and its OOM score, and the `systemd-analyze security` score
deploy/systemd/README.md states.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from uml_guest import REPO, GuestRun, boot_systemd_guest

import evictd

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, outside /root (make system-deps installs it)
SYSTEMD_README = REPO / "deploy" / "systemd" / "README.md"
UNIT = REPO / "deploy" / "systemd" / "evictd.service"
WATCHDOG_S = 60.0  # the shipped WatchdogSec=
RESTART_S = 5.0  # the shipped RestartSec=
STOP_TIMEOUT_S = 30.0  # the shipped TimeoutStopSec=
CAPABILITIES = {"CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_IPC_LOCK": 14, "CAP_SYS_RESOURCE": 24}

# The operator's steps 1-3 of deploy/systemd/README.md (and the unit file of step 5), inside the guest.
SETUP = """
mount -t tmpfs -o mode=0755 tmpfs /opt
/usr/bin/python3 -m venv --without-pip /opt/evictd
site=$(echo /opt/evictd/lib/python3*/site-packages)
# The checkout's evictd and the test venv's packages, bind-mounted (read-only) into /opt/evictd: the unit's
# PrivateTmp= hides /tmp, where a checkout may live, and its ProtectHome= /root.
mkdir -p /opt/evictd/checkout-src /opt/evictd/checkout-site
mount --bind '{source}' /opt/evictd/checkout-src && mount -o remount,bind,ro /opt/evictd/checkout-src
mount --bind '{purelib}' /opt/evictd/checkout-site && mount -o remount,bind,ro /opt/evictd/checkout-site
echo "import sys, site; sys.path.append('/opt/evictd/checkout-src'); site.addsitedir('/opt/evictd/checkout-site')" \\
  > "$site/evictd-checkout.pth"
printf '#!/opt/evictd/bin/python\\nimport sys\\nfrom evictd.cli import main\\nsys.exit(main())\\n' > /opt/evictd/bin/evictd
chmod 0755 /opt/evictd/bin/evictd
install -d -m 0755 /etc/evictd
install -m 0644 "$EVICTD_REPO/deploy/systemd/config.yaml" /etc/evictd/config.yaml
cat > /etc/evictd/kubeconfig <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{{name: absent, cluster: {{server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}}}]
users: [{{name: evictd, user: {{token: not-checked}}}}]
contexts: [{{name: evictd, context: {{cluster: absent, user: evictd}}}}]
current-context: evictd
KUBECONFIG
chmod 0600 /etc/evictd/kubeconfig
/opt/evictd/bin/evictd check-config --config /etc/evictd/config.yaml > "$UML_OUT/check-config.txt" 2>&1
echo "exit=$?" >> "$UML_OUT/check-config.txt"
cat /proc/pressure/memory > "$UML_OUT/psi.txt" 2>&1
install -m 0644 "$EVICTD_REPO/deploy/systemd/evictd.service" /etc/systemd/system/evictd.service
"""

# Run by systemd as a oneshot service once the journal is up; every result goes to a file in $UML_OUT.
PROBE = r"""
up() { cut -d' ' -f1 /proc/uptime; }
prop() { systemctl show -p "$1" --value evictd; }
cgroup=/sys/fs/cgroup/system.slice/evictd.service

# Step 5 of the README: `systemctl enable --now` returns once the unit is active (after READY=1).
systemctl daemon-reload
started=$(up)
systemctl enable --now evictd
echo "exit=$? started=$started returned=$(up)" > "$UML_OUT/enable.txt"
systemctl show evictd > "$UML_OUT/show-ready.txt"
/usr/bin/python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:10262/healthz").read().decode())' \
  > "$UML_OUT/healthz.txt" 2>&1
P=$(prop MainPID)
cat /proc/$P/status > "$UML_OUT/status.txt"
cat /proc/$P/mountinfo > "$UML_OUT/mountinfo.txt"
echo "memory.max=$(cat $cgroup/memory.max) pids.max=$(cat $cgroup/pids.max) oom_score_adj=$(cat /proc/$P/oom_score_adj)" \
  "nice=$(cut -d' ' -f19 /proc/$P/stat) ioprio=$(ionice -p $P | tr -d ' ')" \
  "memlock=$(awk '/^Max locked memory/ {print $4 ":" $5}' /proc/$P/limits)" \
  > "$UML_OUT/limits.txt"
cat /proc/$P/smaps_rollup > "$UML_OUT/smaps-rollup.txt"
/usr/bin/python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:10262/metrics").read().decode())' \
  > "$UML_OUT/metrics.txt" 2>&1

# The sandbox, from inside the service's own mount namespace (nsenter) and, for contrast, from outside it.
attempt() {  # name, shell command: one line "name<TAB>inside<TAB>outside", each "ok" or the error
  inside=$(nsenter -t "$P" -m sh -c "$2" 2>&1 && echo ok)
  outside=$(sh -c "$2" 2>&1 && echo ok)
  printf '%s\t%s\t%s\n' "$1" "$(echo $inside | tail -c 120)" "$(echo $outside | tail -c 120)" >> "$UML_OUT/sandbox.tsv"
}
attempt state-dir 'echo x > /var/lib/evictd/probe'
attempt etc 'echo x > /etc/evictd/probe'
attempt var-lib 'echo x > /var/lib/probe'
attempt run 'echo x > /run/probe'
attempt opt 'echo x > /opt/evictd/probe'
attempt cgroup 'mkdir /sys/fs/cgroup/probe && rmdir /sys/fs/cgroup/probe'
attempt sysctl 'cat /proc/sys/vm/overcommit_memory > /tmp/v && cat /tmp/v > /proc/sys/vm/overcommit_memory'
attempt tmp 'echo x > /tmp/probe-$$ && ls /tmp | grep -c "^probe-"'
attempt home 'test -e /root/.pyenv'
attempt devices 'test -e /dev/kmsg'
ls -ld /var/lib/evictd > "$UML_OUT/state-dir.txt"

# The watchdog: SIGSTOP right after a WATCHDOG=1, then follow the unit until a new process is running.
cat $cgroup/cgroup.procs > "$UML_OUT/procs-before.txt"
last=$(prop WatchdogTimestampMonotonic)
i=0; while [ "$(prop WatchdogTimestampMonotonic)" = "$last" ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
ping=$(prop WatchdogTimestampMonotonic)
kill -STOP "$P"
echo "pid=$P ping=$ping stopped=$(up)" > "$UML_OUT/watchdog.txt"
i=0
while [ $i -lt 150 ]; do
  line=$(systemctl show evictd -p ActiveState -p SubState -p Result -p MainPID -p NRestarts | tr '\n' ' ')
  echo "$(up) $line" >> "$UML_OUT/watchdog-timeline.txt"
  case "$line" in *NRestarts=1*SubState=running*|*SubState=running*NRestarts=1*) break;; esac
  sleep 1; i=$((i+1))
done
kill -0 "$P" 2>/dev/null && echo "old=alive" >> "$UML_OUT/watchdog.txt" || echo "old=gone" >> "$UML_OUT/watchdog.txt"
systemctl show evictd > "$UML_OUT/show-restarted.txt"
cat $cgroup/cgroup.procs > "$UML_OUT/procs-after.txt"

# `systemctl stop`: how long it takes, how the process ended, what it left.
Q=$(prop MainPID)
before=$(up)
systemctl stop evictd
echo "exit=$? before=$before after=$(up) pid=$Q" > "$UML_OUT/stop.txt"
kill -0 "$Q" 2>/dev/null && echo "process=alive" >> "$UML_OUT/stop.txt" || echo "process=gone" >> "$UML_OUT/stop.txt"
[ -d $cgroup ] && echo "cgroup-procs=$(cat $cgroup/cgroup.procs | wc -l)" >> "$UML_OUT/stop.txt"
flock -n -x /var/lib/evictd/evictd.lock true && echo "lock=free" >> "$UML_OUT/stop.txt" || echo "lock=held" >> "$UML_OUT/stop.txt"
echo "lock-holder=$(cat /var/lib/evictd/evictd.lock)" >> "$UML_OUT/stop.txt"
systemctl show evictd > "$UML_OUT/show-stopped.txt"
journalctl -u evictd -o json --no-pager > "$UML_OUT/journal.json"

systemd-analyze security evictd.service --no-pager > "$UML_OUT/security.txt" 2>&1
"""

# How far a log line's stamp, converted through journald's clock offset, may land after the event it precedes.
STAMP_CONVERSION_SLACK_US = 100_000


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def fields(text: str) -> dict[str, str]:
    """The `key=value` words of a probe file."""
    return dict(word.split("=", 1) for word in text.split() if "=" in word)


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> GuestRun:
    # The venv of the system Python loads this interpreter's compiled packages: same minor version needed.
    system = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert system == str(sys.version_info[:2]), f"{SYSTEM_PYTHON} is Python {system}, the tests run {sys.version}"
    setup = SETUP.format(purelib=sysconfig.get_paths()["purelib"], source=Path(evictd.__file__).parents[1])
    run = boot_systemd_guest(setup, PROBE, tmp_path_factory.mktemp("systemd-unit") / "out", timeout_s=400)
    assert run.text("probe-exit").strip() == "0", run.text("probe.log")
    return run


def test_a_checkout_under_tmp_is_kept_visible_and_read_only_in_the_guest(guest: GuestRun) -> None:
    # The guest mounts a fresh tmpfs over /tmp and /var/tmp; a checkout (and its venv) there is mounted back,
    # read-only. Elsewhere nothing needs keeping.
    kept = dict(line.split() for line in guest.text("kept-paths").splitlines())
    assert set(kept.values()) <= {"read-only"}, kept
    under_tmp = REPO.is_relative_to("/tmp") or REPO.is_relative_to("/var/tmp")
    assert (str(REPO) in kept) == under_tmp, kept
    assert not (REPO / ".guest-write-probe").exists()


def test_the_shipped_config_passes_check_config(guest: GuestRun) -> None:
    assert fields(guest.text("check-config.txt"))["exit"] == "0"
    # On this real cgroup v2 kernel the daemons' protection is read: systemd sets no MemoryLow=/MemoryMin= by
    # default and the guest has no kubelet, so nothing protects them (a warning, exit 0 all the same).
    said = [line.split(None, 1) for line in guest.text("check-config.txt").splitlines() if len(line.split()) > 1]
    protection = [text for _, text in said if text.startswith("memory.min, memory.low of system.slice ")]
    assert protection and protection[0].endswith(
        "system.slice/kubelet.service: memory.min=not found memory.low=not found"), guest.text("check-config.txt")
    assert ["warning", protection[0]] in said


def test_on_a_kernel_without_psi_the_shipped_daemons_refault_threshold_stands_in(guest: GuestRun) -> None:
    """The guest's kernel has no PSI: the shipped stallEvictionHardWithoutPSI joins the thresholds, which
    `check-config` and the unit's start-up log say, beside the stall signal being unavailable."""
    assert not guest.text("psi.txt").strip().startswith("some"), guest.text("psi.txt")
    checked = {line.split()[1].rstrip(":"): line for line in guest.text("check-config.txt").splitlines()
               if len(line.split()) > 2 and line.split()[1].rstrip(":") in ("memory_stall", "daemons_refault")}
    assert checked["memory_stall"].split()[0] == "unavailable", checked
    # check-config runs before systemd made system.slice: the threshold counts, the slice is not there yet.
    assert "daemons_refault: evictd.io/daemons.refault (hard): " in checked["daemons_refault"], checked
    assert "standing by" not in checked["daemons_refault"], checked
    logged = {entry["protection"]: entry for entry in journal(guest) if entry["event"] == "protection"}
    assert logged["daemons_refault"]["state"] == "active", logged
    assert logged["daemons_refault"]["detail"] == (
        "evictd.io/daemons.refault (hard): system.slice's re-reads within 2 s, or its memory reclaimed below "
        "memory.low, or its page cache under memory.low that MemAvailable no longer covers, of its memory that is "
        "neither anonymous nor protected by memory.low "
        "(stallEvictionHardWithoutPSI: the kernel gives no PSI)"), logged
    assert logged["memory_stall"]["state"] == "unavailable", logged


def test_the_unit_runs_as_shipped_with_its_resource_settings(guest: GuestRun) -> None:
    show = properties(guest.text("show-ready.txt"))
    # No drop-in: `systemctl show` leaves DropInPaths= out when there is none.
    assert show["FragmentPath"] == "/etc/systemd/system/evictd.service" and show.get("DropInPaths", "") == ""
    assert show["ControlGroup"] == "/system.slice/evictd.service"
    # The unit's MemoryMax=, TasksMax=256, OOMScoreAdjust=-999, Nice=-5, the I/O priority and LimitMEMLOCK=infinity
    # as the kernel holds them for the running service.
    (memory_max,) = re.findall(r"^MemoryMax=(\d+)M$", UNIT.read_text(encoding="utf-8"), re.MULTILINE)
    assert fields(guest.text("limits.txt")) == {"memory.max": str(int(memory_max) << 20), "pids.max": "256",
                                               "oom_score_adj": "-999",
                                               "nice": "-5", "ioprio": "best-effort:prio0",
                                               "memlock": "unlimited:unlimited"}


def test_the_unit_locks_its_memory_and_reports_its_oom_score(guest: GuestRun) -> None:
    # lockMemory (on by default): mlockall with MCL_ONFAULT, allowed by CAP_IPC_LOCK and LimitMEMLOCK=infinity.
    status = dict(line.split(":", 1) for line in guest.text("status.txt").splitlines() if ":" in line)
    rollup = dict(line.split(":", 1) for line in guest.text("smaps-rollup.txt").splitlines()[1:] if ":" in line)
    kib = {name: int(value.split()[0]) for name, value in
           (("VmLck", status["VmLck"]), ("VmRSS", status["VmRSS"]), ("Locked", rollup["Locked"]))}
    assert kib["VmLck"] > 0 and kib["Locked"] > 0, kib
    # Only what was touched is resident, well inside MemoryMax=128M.
    assert kib["VmRSS"] < 96 << 10, kib
    metrics = guest.text("metrics.txt").splitlines()
    assert "evictd_memory_locked 1.0" in metrics and "evictd_oom_score_adj -999.0" in metrics
    said = {entry["event"]: entry for entry in journal(guest)}
    assert said["memory locked"]["locked_kib"] > 0, said["memory locked"]
    assert said["oom_score_adj"]["oom_score_adj"] == -999 and said["oom_score_adj"]["level"] == "info"
    assert "memory not locked" not in said and "oom_score_adj exposes evictd" not in said


def test_it_becomes_active_only_after_ready_and_serves(guest: GuestRun) -> None:
    enable = fields(guest.text("enable.txt"))
    assert enable["exit"] == "0", guest.text("probe.log")
    show = properties(guest.text("show-ready.txt"))
    assert (show["ActiveState"], show["SubState"], show["NRestarts"]) == ("active", "running", "0")
    assert show["Type"] == "notify" and show["WatchdogUSec"] == "1min"
    # Active once READY=1 came, after the first cycle: later than evictd's "evictd started" line, which it
    # logs (its own time stamp) once its parts run, before that cycle; not when the process was started.
    started = [entry for entry in journal(guest) if entry["event"] == "evictd started"]
    assert started, "evictd logged no start"
    assert int(show["ExecMainStartTimestampMonotonic"]) < started[0]["monotonic_us"]
    # evictd's wall-clock stamp comes to the monotonic clock through journald's offset, which was once 31 ms off in
    # a loaded parallel tier; READY=1 sent at the process's start would come about a second before that line.
    assert started[0]["monotonic_us"] <= int(show["ActiveEnterTimestampMonotonic"]) + STAMP_CONVERSION_SLACK_US
    # /healthz answers (HTTP 200) and says what is missing: here the API server the kubeconfig names.
    assert guest.text("healthz.txt").startswith("degraded: pod-list-unavailable: no pod list from the Kubernetes API")


def test_a_hung_evictd_is_killed_by_the_watchdog_and_restarted(guest: GuestRun) -> None:
    watchdog = fields(guest.text("watchdog.txt"))
    timeline = guest.text("watchdog-timeline.txt")
    restarted = properties(guest.text("show-restarted.txt"))
    assert (restarted["ActiveState"], restarted["SubState"], restarted["NRestarts"]) == ("active", "running", "1"), \
        timeline
    assert "Result=watchdog" in timeline
    assert restarted["MainPID"] != watchdog["pid"]
    assert watchdog["old"] == "gone"
    # Killed WatchdogSec after its last ping (SIGSTOP came right after a ping), restarted RestartSec later.
    killed_after_s = (int(restarted["ActiveExitTimestampMonotonic"]) - int(watchdog["ping"])) / 1e6
    assert WATCHDOG_S <= killed_after_s < WATCHDOG_S + 10, killed_after_s
    back_after_s = (int(restarted["ActiveEnterTimestampMonotonic"]) - int(restarted["ActiveExitTimestampMonotonic"])) / 1e6
    assert back_after_s >= RESTART_S
    # The hung instance's processes (evictd and its disk walker) went with it: the new one has two of its own.
    before, after = guest.text("procs-before.txt").split(), guest.text("procs-after.txt").split()
    assert len(before) == len(after) == 2 and not set(before) & set(after), (before, after)


def test_systemctl_stop_ends_it_cleanly_within_its_timeout(guest: GuestRun) -> None:
    stop = fields(guest.text("stop.txt"))
    shown = properties(guest.text("show-stopped.txt"))
    assert stop["exit"] == "0"
    assert float(stop["after"]) - float(stop["before"]) < STOP_TIMEOUT_S
    assert (shown["ActiveState"], shown["Result"]) == ("inactive", "success")
    assert (shown["ExecMainCode"], shown["ExecMainStatus"]) == ("1", "0")  # exited by itself, status 0
    assert stop["process"] == "gone" and stop.get("cgroup-procs", "0") == "0"
    # The stateDir lock is free for the next evictd; the lock file names the last holder.
    assert stop["lock"] == "free" and stop["lock-holder"] == stop["pid"]
    events = [entry.get("event") for entry in journal(guest)]
    assert events[-1] == "evictd stopped" and "shutting down" in events


def test_the_sandbox_lets_it_write_only_its_state_dir(guest: GuestRun) -> None:
    rows = {name: (inside, outside) for name, inside, outside in
            (line.split("\t") for line in guest.text("sandbox.tsv").splitlines())}
    assert rows["state-dir"] == ("ok", "ok")  # StateDirectory=evictd
    for name in ("etc", "var-lib", "run", "opt", "cgroup", "sysctl"):  # ProtectSystem=strict, ProtectControlGroups,
        inside, outside = rows[name]  # ProtectKernelTunables: writable to root outside the service, not in it
        assert "Read-only file system" in inside and outside == "ok", (name, inside, outside)
    # PrivateTmp=yes: /tmp is writable inside and its files are not the machine's.
    inside, outside = rows["tmp"]
    assert inside.endswith("1 ok") and outside.endswith("1 ok"), (inside, outside)
    # ProtectHome=yes hides /root; PrivateDevices=yes and ProtectKernelLogs=yes leave no /dev/kmsg.
    assert rows["home"][0] != "ok" and rows["home"][1] == "ok"
    assert rows["devices"][0] != "ok" and rows["devices"][1] == "ok"
    assert guest.text("state-dir.txt").startswith("drwx------ ")  # StateDirectoryMode=0700


def test_it_runs_with_exactly_the_bounding_set_no_new_privileges_and_seccomp(guest: GuestRun) -> None:
    status = dict(line.split(":\t", 1) for line in guest.text("status.txt").splitlines() if ":\t" in line)
    expected = sum(1 << bit for bit in CAPABILITIES.values())
    assert int(status["CapBnd"], 16) == expected
    assert int(status["CapEff"], 16) == expected
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"


def test_the_readme_states_the_exposure_score_systemd_gives(guest: GuestRun) -> None:
    found = re.search(r"Overall exposure level for evictd\.service: (\d+\.\d)", guest.text("security.txt"))
    assert found, guest.text("security.txt")
    stated = re.search(r"under a running systemd 252 rates the result (\d+\.\d)", SYSTEMD_README.read_text())
    assert stated, "deploy/systemd/README.md states no score of a running systemd"
    assert found.group(1) == stated.group(1)


def journal(guest: GuestRun) -> list[dict[str, Any]]:
    """evictd's log objects from the journal, each with `monotonic_us`: its own time stamp on the guest's
    monotonic clock (journald's stamps are when a line arrived through the pipe, later than it was written)."""
    entries = []
    for line in guest.text("journal.json").splitlines():
        record = json.loads(line)
        message = record.get("MESSAGE")
        if isinstance(message, str) and message.startswith("{"):
            entry = json.loads(message)
            # The journal's own pair of clocks gives the offset between the wall clock and the monotonic one.
            offset_us = int(record["__REALTIME_TIMESTAMP"]) - int(record["__MONOTONIC_TIMESTAMP"])
            wall_us = round(datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp() * 1e6)
            entries.append({**entry, "monotonic_us": wall_us - offset_us})
    return entries

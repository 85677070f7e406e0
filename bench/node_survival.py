"""Node survival: does the node live under memory pressure, and who pays? (issue #36, items 1, 2 and 6)

A matrix of cells (backend x workload x protector), each run N times inside user-mode Linux guests on cgroup
v2 (one CPU, no preemption), or with --vm qemu on qemu guests (tests/qemu: Debian's stock kernel, 2 vCPUs,
preemptible, PSI; CPU work 10-16x slower), with node-sized memory (--mem-mib, 2560).
One guest boot per protector (its runs of every workload one after
the other in that boot, to save boot time; --one-boot puts every protector in one boot: on the real backend one
cluster start for all, the kubelet restarted with each protector's eviction settings). The guest side,
bench/node_survival_guest.py, says what the node, the protectors and the records are;
bench/node_survival_workloads.py what the workloads are; bench/node_survival_outcomes.py how the figures are
read. Outcomes come from the guest kernel (its ``oom-kill:`` records, exit statuses, cgroups, /proc/meminfo)
and the API server (the pods' objects), never from evictd's logs.

Backends (bench/node_survival_nodes.py): ``stand-in`` (no kube binaries: the test API server and a stand-in
kubelet that carries deletions out; pods are real processes in the kubelet's cgroup layout); ``real`` (the
real kube-apiserver, kubelet v1.36.2 and containerd in the guest, binaries from EVICTD_K8S_BIN; pods created
through the API server with spec.nodeName; --mem-mib 3072 leaves the cluster's ~500 MiB beside a node).
Protectors: kernel, evictd, evictd-stall, evictd-stall-nogate and systemd-oomd (--kernel psi or --vm qemu only;
bench/node_survival_oomd.py), evictd-refault, evictd-reclaim (reclaim before evict: cgroup v2 memory.reclaim),
evictd-daemons-reclaim (reclaim for the daemons: daemonsReclaim: true), evictd-daemons-refault (a hard
evictd.io/daemons.refault threshold added, EVICTD_ARENA_DAEMONS_REFAULT, 25%),
earlyoom on both; kubelet-defaults, kubelet-same and kubelet-pid (kubelet-same plus pid.available<25%) on the real
backend only; evictd-pid (evictd with pid.available<25% added, for the fork-bomb control); evictd-no-minreclaim
(evictd without the memory.available minimum reclaim); kubelet-same-dryrun (kubelet-same with evictd beside it in
dry-run: its footprint on the node). The non-memory controls
(fork-bomb, disk-fill, disk-fill-fast: bench/node_survival_controls.py) get a second table of their own figures, the
own-limit workloads (own-limit-thrash, backup-stream: bench/node_survival_ownlimit.py) a third, the deploy burst
(deploy-burst: bench/node_survival_deploy.py) a fourth, the false triggers (jvm-warmup, db-fits, log-shipper,
compaction: bench/node_survival_falsetriggers.py) a fifth.

Output: one JSON line per run in <out>/<backend>-<protector>/runs.jsonl, every run in <out>/runs.jsonl, and the
table (median / worst over the runs of each cell) on stdout and in <out>/table.md, with the guest kernel and
this machine's CPUs and load average before and after.

    .venv/bin/python bench/node_survival.py --out /work/arena-out/m1 [--backend stand-in]
        [--protectors kernel,evictd,evictd-stall,earlyoom]
        [--workloads be-slow,be-fast,be-burst,many-small,thrash,active-file]
        [--runs 5]
        [--kernel default|psi | --vm qemu [--psi-off] --run-timeout-s 400] [--mem-mib 2560] [--start-available-mib 600]

The output folder must not be under /tmp or /var/tmp: the guest mounts tmpfs over them (tests/uml/README).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent / "tests" / "uml"), str(BENCH.parent / "tests" / "qemu")]
import qemu_guest  # noqa: E402
import uml_guest  # noqa: E402
from node_survival_outcomes import (  # noqa: E402
    cell_rows,
    control_rows,
    deploy_rows,
    false_trigger_rows,
    markdown_table,
    own_limit_rows,
)
from node_survival_pagecache import (  # noqa: E402
    ACTIVE_FILE_ENV,
    DAEMONS_REFAULT_ENV,
    STALL_PROTECTORS,
    SYSTEM_MEMORY_LOW_ENV,
    TRACE_ENV,
)
from uml_guest import KERNELS, REPO, GuestRun, Kernel  # noqa: E402

GUEST_MEM_MIB = 2560
GUEST = BENCH / "node_survival_guest.py"
BODY = """
export PYTHONPATH="$EVICTD_REPO/src:$EVICTD_REPO/bench:$EVICTD_REPO/tests/uml:$EVICTD_REPO/tests/daemon:\
$EVICTD_REPO/tests/kube:$EVICTD_REPO/tests/cluster:$EVICTD_REPO/tests/cri:$EVICTD_REPO/tests"
{node_setup}
guest_log "node survival: {args}"
"$EVICTD_PYTHON" {guest} {args} > "$UML_OUT/guest.log" 2>&1
echo "$?" > "$UML_OUT/guest-exit"
mkdir -p "$UML_OUT/components"  # the real cluster's component logs (kubelet, kube-apiserver, ...), kept
cp /run/survival/node/rk/run/*.log "$UML_OUT/components/" 2>/dev/null
"""
# Per run: set-up (pods, protector) and settling about 20 s, the run itself up to --run-timeout-s.
SETUP_S = 30.0
# ...on the real backend more: a thrashed single-node cluster's API server may not answer for minutes after a run
# (node_survival_nodes.API_BACK_TIMEOUT_S), a 20-run thrash boot ran out of its budget after 14 runs, and a 10-run
# boot of the controls (about 4 minutes a run with the clean-up) after 9 at 120 s.
REAL_SETUP_S = 180.0
BOOT_S = 60.0
# The guest's machine: "uml" (user-mode Linux: one CPU, no preemption, user code at native speed) or "qemu" (Debian's
# stock kernel under QEMU's emulator: 2 vCPUs, preemptible, PSI; its CPU work 10-16x slower, its set-up as well).
VMS = ("uml", "qemu")
QEMU_SETUP_FACTOR = 3.0
CLUSTER_START_S = 300.0  # the real cluster in the guest: node Ready 56-86 s after boot, more under load
NODE_SETUP = REPO / "tests" / "uml" / "guest-node.sh"


def host_load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_boot(out: Path, *, backend: str, protectors: Sequence[str], workloads: Sequence[str], runs: int,
             kernel: Kernel | None, mem_mib: int, start_available_mib: int, disk_mib: int,
             run_timeout_s: float, vm: str = "uml", psi_off: bool = False) -> tuple[GuestRun, list[dict[str, Any]]]:
    """One guest boot running every (protector, workload, run) given; returns the boot and its runs' records.

    A run that failed in the guest is in the list with its "error" and "traceback"; a guest that wrote
    nothing fails here (AssertionError with the end of its output)."""
    if vm == "qemu":
        label = (f"qemu, {qemu_guest.DEFAULT_CPUS} vCPUs, preemptible{', psi=0' if psi_off else ''} "
                 "(tests/qemu/provision-qemu.sh)")
    else:
        label = f"{kernel or 'default'} kernel (tests/uml/provision-uml{'-psi' if kernel == 'psi' else ''}.sh)"
    args = ["--backend", backend, "--protectors", ",".join(protectors), "--workloads", ",".join(workloads),
            "--runs", str(runs), "--start-available-mib", str(start_available_mib),
            "--run-timeout-s", str(run_timeout_s), "--kernel-label", label.replace(" ", "_")]
    # The active-file reader's file size, the daemons refault share, the trace and the node's own protection of its
    # daemons, when given (bench/node_survival_pagecache.py).
    passed = (ACTIVE_FILE_ENV, DAEMONS_REFAULT_ENV, TRACE_ENV, SYSTEM_MEMORY_LOW_ENV)
    env: dict[str, str] = {name: os.environ[name] for name in passed if name in os.environ}
    node_setup = ""
    if backend == "real":
        # What a kubelet needs of the guest (tests/uml/guest-node.sh), the kube binaries (fails here, saying how
        # to get them, when they are missing), etcd fetched on this host first: the guest has no network.
        sys.path[:0] = [str(REPO / "tests" / "cluster"), str(REPO / "tests" / "cri"), str(REPO / "tests")]
        from real_cluster import BIN_ENV, etcd_binary, k8s_bin_dir

        env[BIN_ENV] = str(k8s_bin_dir())
        etcd_binary()
        node_setup = f". {shlex.quote(str(NODE_SETUP))}"
    body = BODY.format(guest=shlex.quote(str(GUEST)), args=shlex.join(args), node_setup=node_setup)
    per_boot = BOOT_S + (CLUSTER_START_S if backend == "real" else 0)
    setup_s = (REAL_SETUP_S if backend == "real" else SETUP_S) * (QEMU_SETUP_FACTOR if vm == "qemu" else 1.0)
    timeout = per_boot + len(protectors) * len(workloads) * runs * (setup_s + run_timeout_s)
    if vm == "qemu":
        boot = qemu_guest.boot_guest(body, out, mem_mib=mem_mib, timeout_s=timeout, env=env, disk_mib=disk_mib,
                                     psi=not psi_off)
    else:
        boot = uml_guest.boot_guest(body, out, mem_mib=mem_mib, timeout_s=timeout, kernel=kernel, env=env,
                                    disk_mib=disk_mib)
    path = out / "runs.jsonl"
    if not path.exists():
        raise AssertionError(f"the guest wrote no runs; its output ends:\n{_tail(out / 'guest.log')}\n"
                             f"console:\n{boot.console[-3000:]}")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return boot, records


def _tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else f"({path.name} not written)"


# The programs a protector runs in the user-mode guest, which sees the host's files: the host must have them.
# (systemd-oomd's path is node_survival_oomd.OOMD_BINARY, a guest-side module this one cannot import.)
HOST_PROGRAMS = {
    "earlyoom": ("earlyoom", "apt-get install earlyoom"),
    "systemd-oomd": ("/lib/systemd/systemd-oomd", "apt-get install systemd-oomd=<the host's systemd version>"),
}


def missing_host_programs(protectors: Sequence[str]) -> list[str]:
    """What each chosen protector's program lacks on the host, with how to install it (nothing: all there)."""
    missing = []
    for protector in protectors:
        program, install = HOST_PROGRAMS.get(protector, (None, ""))
        if program is not None and shutil.which(program) is None:
            missing.append(f"{protector} needs {program} ({install})")
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--backend", default="stand-in", choices=("stand-in", "real"))
    parser.add_argument("--protectors", default="kernel,evictd,earlyoom")
    parser.add_argument("--workloads", default="be-slow,be-fast,many-small")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--vm", choices=VMS, default="uml",
                        help="the guest: uml (one CPU, no preemption) or qemu (make qemu-node: 2 vCPUs, preemptible, "
                             "PSI; CPU work 10-16x slower, give --run-timeout-s 400)")
    parser.add_argument("--psi-off", action="store_true",
                        help="with --vm qemu: boot the guest with psi=0, a multi-CPU node without PSI")
    parser.add_argument("--kernel", choices=KERNELS, default=None,
                        help="the user-mode kernel: default (Debian's, no PSI) or psi (make uml-kernel-psi)")
    parser.add_argument("--mem-mib", type=int, default=GUEST_MEM_MIB)
    parser.add_argument("--disk-mib", type=int, default=2048,
                        help="the guest's own ext4 disk, mounted at /run/disk (sparse; page cache, disk fill)")
    parser.add_argument("--start-available-mib", type=int, default=600,
                        help="the pressure pods take what is available beyond this at once (the head start)")
    parser.add_argument("--run-timeout-s", type=float, default=180.0)
    parser.add_argument("--one-boot", action="store_true", help="every protector in one guest boot")
    args = parser.parse_args()
    protectors = args.protectors.split(",")
    if args.vm == "uml":
        missing = missing_host_programs(protectors)
        if missing:
            parser.error("the user-mode guest runs the host's own programs, and these protectors' are not "
                         "installed here: " + "; ".join(missing))
    if str(args.out.resolve()).startswith(("/tmp/", "/var/tmp/")):
        parser.error("--out under /tmp or /var/tmp is hidden from the guest by its tmpfs; use another folder")
    if args.vm == "qemu" and args.kernel is not None:
        parser.error("--kernel chooses a user-mode kernel: the qemu guest has one kernel (Debian's, with PSI)")
    if args.psi_off and args.vm != "qemu":
        parser.error("--psi-off boots the qemu guest with psi=0: give --vm qemu (the default user-mode kernel has "
                     "no PSI already)")
    psi = args.kernel == "psi" or (args.vm == "qemu" and not args.psi_off)
    for stall in set(protectors) & set(STALL_PROTECTORS):
        if not psi:
            parser.error(f"protector {stall} is evictd with its memory stall signal (PSI): it needs --kernel psi "
                         "or --vm qemu (the default user-mode kernel has no PSI)")
    if "systemd-oomd" in protectors and not psi:
        parser.error("protector systemd-oomd acts on memory pressure (PSI) and refuses to start without it: it "
                     "needs --kernel psi or --vm qemu (the default user-mode kernel has no PSI)")
    groups = [protectors] if args.one_boot else [[p] for p in protectors]
    load_before, started = host_load(), time.monotonic()
    records: list[dict[str, Any]] = []
    for group in groups:
        folder = args.out / f"{args.backend}-{'-'.join(group)}"
        _, found = run_boot(folder, backend=args.backend, protectors=group, workloads=args.workloads.split(","),
                            runs=args.runs, kernel=args.kernel, mem_mib=args.mem_mib, disk_mib=args.disk_mib,
                            start_available_mib=args.start_available_mib, run_timeout_s=args.run_timeout_s,
                            vm=args.vm, psi_off=args.psi_off)
        records += found
        print(f"boot {folder.name}: {len(found)} runs, load {host_load()}", flush=True)
    with open(args.out / "runs.jsonl", "w") as everything:
        everything.writelines(json.dumps(r) + "\n" for r in records)
    good = [r for r in records if "error" not in r]
    failed = [r for r in records if "error" in r]
    kernels = sorted({f"{r['kernel']['release']} ({r['kernel']['label']}, PSI {'yes' if r['kernel']['psi'] else 'no'})"
                      for r in good})
    header = (f"node survival, backend {args.backend}, guest {args.mem_mib} MiB, head start to "
              f"{args.start_available_mib} MiB available, {args.runs} runs per cell\n"
              f"guest kernel: {', '.join(kernels) or '?'}\n"
              f"host: {os.cpu_count()} CPUs, load average {load_before} before, {host_load()} after "
              f"({time.monotonic() - started:.0f} s)\n"
              f"figures: median / worst over the runs\n")
    table = header + "\n" + markdown_table(cell_rows(good))
    if control_rows(good):
        table += "\nnon-memory controls (bench/node_survival_controls.py):\n\n" + markdown_table(control_rows(good))
    if own_limit_rows(good):
        table += "\nown-limit figures (bench/node_survival_ownlimit.py):\n\n" + markdown_table(own_limit_rows(good))
    if deploy_rows(good):
        table += ("\ndeploy burst figures (bench/node_survival_deploy.py; worst: the weakest burst):\n\n"
                  + markdown_table(deploy_rows(good)))
    if false_trigger_rows(good):
        table += ("\nfalse-trigger figures (bench/node_survival_falsetriggers.py; worst: the run that pressed hardest):"
                  "\n\n" + markdown_table(false_trigger_rows(good)))
    if failed:
        table += "\nfailed runs:\n" + "".join(f"- {r['protector']} {r['workload']} {r['run']}: {r['error']}\n"
                                              for r in failed)
    (args.out / "table.md").write_text(table)
    print(table)
    print(f"repository: {REPO}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

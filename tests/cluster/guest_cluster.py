"""The real cluster of this tier inside a cgroup v2 guest: the side by side of bench/kubelet_side_by_side.py run there.

Job: boot a user-mode Linux guest (tests/uml/uml_guest.py, a real cgroup v2 kernel) in which etcd,
kube-apiserver, kube-controller-manager, containerd and the kubelet v1.36.2 run as real_cluster.py starts them
on this host, unchanged but for what it detects (cgroup v2: the kubelet keeps its default ``failCgroupV1``),
and run ``bench/kubelet_side_by_side.py`` there with the arguments given; return the guest's run and the
results file the bench wrote. The guest has no network to this host: the binaries are this host's, read
through hostfs (the kube binaries from ``EVICTD_K8S_BIN``, etcd from the cache ``etcd_binary`` fills here
first); everything the cluster writes is in the guest's own /run, and the bench's output, its results, the
component logs and each evictd's configuration and log events go to ``out``. tests/uml/guest-node.sh gives the
guest what a kubelet needs of a node.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from real_cluster import BIN_ENV, etcd_binary, k8s_bin_dir
from uml_guest import REPO, GuestRun, boot_guest

# Enough for the trial of the side by side unchanged: a 1200 MiB pods cgroup under an 800 MiB hog, beside the
# cluster (about 500 MiB) and containerd's tmpfs root, with the node's own memory.available far above 500 MiB.
GUEST_MEM_MIB = 3072
NODE_SETUP = REPO / "tests" / "uml" / "guest-node.sh"
RESULTS = "results.json"
BENCH_LOG = "bench.log"

BODY = """
. {setup}
cd "$EVICTD_REPO"
"$EVICTD_PYTHON" bench/kubelet_side_by_side.py {args} --keep --json "$UML_OUT/{results}" > "$UML_OUT/{log}" 2>&1
echo "$?" > "$UML_OUT/bench-exit"
for base in /run/tmp/evictd-rk-*; do
	cp "$base"/run/*.log "$UML_OUT/" 2>/dev/null  # (containerd's own folder is gone after its clean stop)
	for daemon in "$base"/bench/*/evictd-*; do
		[ -d "$daemon" ] || continue
		kept="$UML_OUT/${{daemon#$base/bench/}}"
		mkdir -p "$kept"
		cp "$daemon"/events.jsonl "$daemon"/evictd.yaml "$daemon"/state/shadow.jsonl "$kept/" 2>/dev/null
	done
done
"""


def side_by_side_in_guest(out: Path, args: Sequence[str], timeout_s: float) -> tuple[GuestRun, dict[str, Any]]:
    """Run ``bench/kubelet_side_by_side.py args`` in a cgroup v2 guest; return the run and the bench's results.

    Fails (AssertionError, with the end of the bench's output) when the bench did not finish with status 0.
    """
    binaries = k8s_bin_dir()  # fails here, with how to get them, when they are missing
    etcd_binary()  # the guest cannot download it: fetched and cached on this host first
    body = BODY.format(setup=shlex.quote(str(NODE_SETUP)), args=shlex.join(args), results=RESULTS, log=BENCH_LOG)
    run = boot_guest(body, out, mem_mib=GUEST_MEM_MIB, timeout_s=timeout_s, env={BIN_ENV: str(binaries)})
    status = run.text("bench-exit").strip()
    if status != "0":
        raise AssertionError(f"the side by side in the guest exited {status}; its output ends:\n"
                             f"{run.text(BENCH_LOG)[-6000:]}")
    document: dict[str, Any] = json.loads(run.text(RESULTS))
    return run, document

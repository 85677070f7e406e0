"""API writes of evictd and of the real kubelet in the same minute of held memory pressure, from the real
kube-apiserver's audit log.

    EVICTD_K8S_BIN=/folder/with/kube-apiserver-and-kubelet .venv/bin/python bench/cluster_api_writes.py \
        [--runs 1] [--json results.json] [--keep]

Starts the real cluster of `make test-cluster` (tests/cluster/real_cluster.py: kube-apiserver, kubelet,
kube-controller-manager and kube-scheduler v1.36.2, etcd, a private containerd) and runs the minute of
tests/cluster/held_pressure.py `--runs` times: the kubelet's own eviction on and `evictd run` with its
shipped cadence (10 s housekeeping, wake-ups on), the same KubeletConfiguration lines on both (a 1200 MiB pods
cgroup, `evictionHard: {memory.available: 500Mi}`, copied to `allocatableMemory.available`), then a
`system-node-critical` pod taking 900 MiB and holding it for the 60 s after the crossing, nothing either may
evict. Prints, per run, both columns from the audit log: event writes by reason,
node status, node and lease writes; and evictd's cycles and wake-ups by cause. Needs root and about 2
minutes per run (half a minute more for the cluster).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
for _folder in (TESTS, *(TESTS / name for name in ("cri", "kube", "daemon", "e2e", "contract", "cluster"))):
    sys.path.insert(0, str(_folder))

from backends import RealNode  # noqa: E402
from held_pressure import hold_a_minute  # noqa: E402
from real_cluster import BASE_PREFIX, RealCluster, k8s_bin_dir  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="minutes to measure, one after the other (default 1)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's folder (logs, audit log)")
    args = parser.parse_args(argv)
    cluster = RealCluster(Path(tempfile.mkdtemp(prefix=BASE_PREFIX)), k8s_bin_dir())
    cluster.start()
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="evictd-cluster-writes-") as folder:
            node = RealNode(cluster, Path(folder))
            try:
                for run in range(args.runs):
                    figures = hold_a_minute(cluster, node).as_dict()
                    results.append(figures)
                    print(json.dumps({"run": run + 1, **figures}, indent=1), flush=True)
            finally:
                node.close()
                cluster.restart_kubelet()
    finally:
        problems = cluster.stop(remove_base=not args.keep)
        if problems:
            print("cluster teardown incomplete: " + "; ".join(problems), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

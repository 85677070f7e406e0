"""API writes of `evictd run` under held pressure with nothing left to evict, counted at the API server.

Runs `evictd run` against the test API server (tests/kube/apiserver.py, in this process) for DURATION seconds
with a threshold that stays met (`memory.available: 99%`: below 99% of the machine's memory is always
available) and no pod to evict (the API has none, and there is no container runtime: a socket that does not
exist). Every cycle then decides to reclaim memory and finds nothing to act on, which is what issue #29 saw on
the real cluster, where each cycle PATCHed the node's `EvictionThresholdMet` event.

The cycle rate is `--interval` (housekeepingInterval; default 250 ms: the ~4 cycles a second measured there,
memcg re-arm wake-ups with a 10 s interval). Memory and PSI wake-ups are off, so the rate is the interval's.
Reported, from the server's request log: event creates (POST) and PATCHes, node status PATCHes, node
(taint) PATCHes, node GETs, the cycles run (`evictd_cycles_total`), and the events stored at the end with their
counts. For comparison, the kubelet's writes for the same minute: one EvictionThresholdMet per 10 s
monitoring period through the same correlator plus the NodeHasInsufficientMemory transition event, one node
status write on the change (the next every nodeStatusReportFrequency, 5 min) and a Lease renewal per 10 s (evictd's
own node Lease: its lease PUTs are reported too). To measure the code of another commit:
`git archive COMMIT src | tar -x -C DIR` and run with `PYTHONPATH=DIR/src` (the daemon process inherits it).

    .venv/bin/python bench/api_writes.py [--duration 60] [--interval 0.25]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "kube"), str(ROOT / "tests" / "daemon")]

from apiserver import ApiServer  # noqa: E402
from evictd_process import EvictdProcess  # noqa: E402
from kube_objects import node_manifest  # noqa: E402

NODE = "bench-node"
EVENTS_PATH = r"/api/v1/namespaces/[^/]+/events(/[^/]+)?"
NODE_PATH = f"/api/v1/nodes/{NODE}"
LEASES_PATH = r"/apis/coordination.k8s.io/v1/namespaces/[^/]+/leases(/[^/]+)?"


def measure(folder: Path, duration_s: float, interval_s: float) -> dict[str, object]:
    with ApiServer(folder / "apiserver") as server:
        server.store.create_node(node_manifest(NODE))
        (folder / "evictd").mkdir()
        daemon = EvictdProcess(
            folder / "evictd",
            kubelet='evictionHard: {"memory.available": "99%"}\nenforceNodeAllocatable: []\n',
            evictd=(f"nodeName: {NODE}\n"
                    f"kubeconfig: {server.kubeconfig_path}\n"
                    f"containerRuntimeEndpoint: unix://{folder}/no-runtime.sock\n"
                    f"housekeepingInterval: {interval_s * 1000:g}ms\n"
                    "psiWakeups: false\n"
                    "memcgWakeups: false\n"
                    "recorder: false\n"),
        )
        try:
            # Pressure is held from the first cycle: everything the server received since start counts.
            daemon.wait_event("evictd started", timeout=60)
            time.sleep(duration_s)
            cycles = daemon.metric("evictd_cycles_total")
            log = server.request_log
            events = server.store.events()
            return {
                "duration_s": duration_s,
                "interval_s": interval_s,
                "cycles": int(cycles),
                "event_posts": len(log.matching("POST", EVENTS_PATH)),
                "event_patches": len(log.matching("PATCH", EVENTS_PATH)),
                "node_status_patches": len(log.matching("PATCH", NODE_PATH + "/status")),
                "node_patches": len(log.matching("PATCH", NODE_PATH)),
                "node_gets": len(log.matching("GET", NODE_PATH)),
                "lease_writes": len(log.matching("PUT", LEASES_PATH)) + len(log.matching("POST", LEASES_PATH)),
                "events_stored": sorted((e["reason"], e["count"]) for e in events),
            }
        finally:
            daemon.stop()


def kubelet_reference(duration_s: float) -> dict[str, int]:
    """The kubelet's writes in `duration_s` of held pressure: one EvictionThresholdMet per 10 s monitoring period
    (within its 25 tokens), the NodeHasInsufficientMemory transition event, its status on the change (then one
    per nodeStatusReportFrequency, 5 min) and a Lease renewal per 10 s."""
    periods = int(duration_s // 10.0) + 1
    return {"event_writes": min(periods, 25) + 1, "node_status_patches": 1 + int(duration_s // 300.0),
            "lease_writes": int(duration_s // 10.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of held pressure (default 60)")
    parser.add_argument("--interval", type=float, default=0.25, help="housekeepingInterval, s (default 0.25)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evictd-api-writes-") as folder:
        figures = measure(Path(folder), args.duration, args.interval)
    figures["kubelet_reference"] = kubelet_reference(args.duration)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()

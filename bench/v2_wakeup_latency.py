"""Wake-up latency on cgroup v2 without PSI: how late `evictd run` decides a crossing, without and with the
memory watch.

Real kernel, real daemon: one user-mode Linux guest (tests/uml/uml_guest.py; cgroup v2, no PSI, 1 CPU) runs
the ``wakeup`` scenario of tests/uml/guest_v2_node.py: `evictd run` with the kubelet's 10 s housekeeping
interval and a hard ``allocatableMemory.available<60Mi`` threshold on a 320 MiB pods cgroup, the test API
server, a stand-in kubelet; for each crossing a new pod gets 270 MiB at once (one mmap with MAP_POPULATE:
every page charged), at a different point of the tick, and is evicted. The kernel's figure is sampled every 5 ms
beside it: latency = the time evictd logged the threshold met - the first sample showing it met (resolution: the
5 ms sampler).
First with ``memcgWakeups: false`` (the tick alone: what evictd did on v2 before the watch, and what the
kubelet does on v2 without PSI), then with the default ``memcgWakeups: true`` (the memory watch).

    python bench/v2_wakeup_latency.py [--crossings N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "uml"))

from uml_guest import boot_guest  # noqa: E402

BODY = """
export PYTHONPATH="$EVICTD_REPO/tests/uml:$EVICTD_REPO/tests/daemon:$EVICTD_REPO/tests/kube:$EVICTD_REPO/tests"
"$EVICTD_PYTHON" "$EVICTD_REPO/tests/uml/guest_v2_node.py" wakeup cgroupfs > "$UML_OUT/wakeup.log" 2>&1
"""


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crossings", type=int, default=10, help="crossings per mode (default 10)")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="evictd-bench-v2-"))
    # Debian's kernel (no PSI), whatever EVICTD_UML_KERNEL says: this measures the wake-ups without PSI.
    run = boot_guest(BODY, out, timeout_s=60 + args.crossings * 40, env={"V2_WAKEUP_CROSSINGS": str(args.crossings)},
                     kernel="default")
    document = run.json("wakeup-cgroupfs.json")
    if "error" in document:
        print(document["traceback"], run.text("wakeup.log")[-3000:], file=sys.stderr)
        return 1
    print(f"{'mode':<28} {'crossings':>9} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}  wake-ups")
    for mode, label in (("off", "tick alone (memcgWakeups off)"), ("on", "memory watch (default)")):
        data = document["runs"][mode]
        late = [c["decidedLateS"] * 1000 for c in data["crossings"] if c["decidedLateS"] is not None]
        wakeups = {cause: int(n) for cause, n in data["wakeups"].items() if n}
        print(f"{label:<28} {len(late):>9} {statistics.median(late):>9.0f} {percentile(late, 0.99):>9.0f} "
              f"{max(late):>9.0f}  {wakeups}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

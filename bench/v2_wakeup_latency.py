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

At the margin (issue 37 item 3; tests/uml/guest_v2_margin.py: only hard thresholds, the pods cgroup held
15 MiB above ``allocatableMemory.available<60Mi``):

* ``--margin-cost``: evictd's CPU seconds per minute (its process's utime + stime in the guest) with the memory
  held there, watch on and off interleaved in one boot (``--rounds`` pairs of ``--segment-s`` seconds), and what
  one look's reads cost;
* ``--margin-latency``: bursts (40 MiB at once) and ramps (1 MiB every 20 ms) that start from that steady
  margin, decided by the watch (``--crossings`` of each); ``--crossing-hold`` sets evictd's ``memoryCrossingHold``
  (a ramp of 50 MiB/s is 8 MiB past the level only ~160 ms on: as shipped its crossing waits out the 100 ms hold).

`--vm qemu` runs the same in the qemu guest (tests/qemu: Debian's stock kernel, 2 vCPUs, preemptible, with PSI,
under QEMU's emulator, whose CPU is 10-16x slower than the host's) instead of the user-mode guest; its time
limits are 3x the user-mode guest's.

    python bench/v2_wakeup_latency.py [--crossings N] [--watch-only] [--vm qemu]
    python bench/v2_wakeup_latency.py --margin-cost [--segment-s 30] [--rounds 2] [--vm qemu]
    python bench/v2_wakeup_latency.py --margin-latency [--crossings N] [--crossing-hold 0s] [--vm qemu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "uml"), str(REPO / "tests" / "qemu")]

import qemu_guest  # noqa: E402
import uml_guest  # noqa: E402
from uml_guest import GuestRun  # noqa: E402

# The qemu guest's emulated CPU is several times slower: its runs get this many times the user-mode guest's time.
QEMU_TIME_FACTOR = 3.0

BODY = """
T="$EVICTD_REPO/tests"
export PYTHONPATH="$EVICTD_REPO/src:$T/uml:$T/daemon:$T/kube:$T"
"$EVICTD_PYTHON" "$EVICTD_REPO/tests/uml/guest_v2_node.py" wakeup cgroupfs > "$UML_OUT/wakeup.log" 2>&1
"""


def boot_guest(body: str, out: Path, timeout_s: float, env: dict[str, str], vm: str) -> GuestRun:
    """Boot the user-mode guest on Debian's kernel (no PSI), or the qemu guest (`vm` "qemu"), to run `body`."""
    if vm == "qemu":
        return qemu_guest.boot_guest(body, out, timeout_s=timeout_s * QEMU_TIME_FACTOR, env=env)
    return uml_guest.boot_guest(body, out, timeout_s=timeout_s, env=env, kernel="default")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


MARGIN_BODY = """
T="$EVICTD_REPO/tests"
export PYTHONPATH="$EVICTD_REPO/src:$T/uml:$T/daemon:$T/kube:$T"
"$EVICTD_PYTHON" "$EVICTD_REPO/tests/uml/guest_v2_margin.py" {scenario} > "$UML_OUT/margin.log" 2>&1
"""


def margin_document(scenario: str, timeout_s: float, env: dict[str, str], vm: str) -> dict[str, Any] | None:
    out = Path(tempfile.mkdtemp(prefix=f"evictd-bench-v2-margin-{scenario}-"))
    run = boot_guest(MARGIN_BODY.format(scenario=scenario), out, timeout_s, env, vm)
    document: dict[str, Any] = run.json(f"margin-{scenario}.json")
    if "error" in document:
        print(document["traceback"], run.text("margin.log")[-3000:], file=sys.stderr)
        return None
    return document


def margin_cost(segment_s: float, rounds: int, vm: str) -> int:
    env = {"V2_MARGIN_SEGMENT_S": str(segment_s), "V2_MARGIN_ROUNDS": str(rounds)}
    document = margin_document("cost", 120 + rounds * 2 * (segment_s + 30), env, vm)
    if document is None:
        return 1
    print(f"margin held: {document['marginMiB']:.1f} MiB above allocatableMemory.available<60Mi")
    print(f"{'segment':<8} {'watch':<6} {'CPU s':>7} {'wall s':>7} {'CPU s/min':>10} {'wakes/s':>8} {'margin MiB':>12}"
          "  wake-ups")
    for index, segment in enumerate(document["segments"]):
        wakeups = {cause: int(n) for cause, n in segment["wakeups"].items() if n}
        margins = "-".join(f"{m:.1f}" for m in segment["marginMiB"])
        print(f"{index:<8} {'on' if segment['watch'] else 'off':<6} {segment['cpuS']:>7.2f} {segment['wallS']:>7.1f} "
              f"{segment['cpuSPerMin']:>10.2f} {segment.get('threadWakeupsPerS', 0):>8.1f} "
              f"{margins:>12}  {wakeups} met={segment['thresholdsMet']}")
        busiest = segment.get("busiestThread")
        if busiest:
            print(f"{'':<8} the thread that woke most often: {busiest['cpuSPerMin']:.2f} CPU s/min, "
                  f"{busiest['wakeupsPerS']:.1f} wake-ups/s")
    for watch in (True, False):
        rates = [s["cpuSPerMin"] for s in document["segments"] if s["watch"] is watch]
        print(f"watch {'on' if watch else 'off'}: CPU s/min mean {statistics.mean(rates):.2f} "
              f"({', '.join(f'{r:.2f}' for r in rates)})")
    print("one look's reads, CPU us per call in the guest:",
          ", ".join(f"{name} {cost:.0f}" for name, cost in document["lookCostsUs"].items()))
    return 0


def margin_latency(crossings: int, vm: str, crossing_hold: str | None) -> int:
    env = {"V2_MARGIN_CROSSINGS": str(crossings)}
    if crossing_hold:
        env["V2_MARGIN_CROSSING_HOLD"] = crossing_hold
    document = margin_document("latency", 120 + crossings * 2 * 15, env, vm)
    if document is None:
        return 1
    margins = document["marginsBeforeMiB"]
    print(f"margin before the crossings: {min(margins):.1f}-{max(margins):.1f} MiB above the level; "
          f"memoryCrossingHold {crossing_hold or 'as shipped'}")
    print(f"{'kind':<8} {'crossings':>9} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for kind in ("burst", "ramp"):
        late = [c["decidedLateS"] * 1000 for c in document["crossings"]
                if c["kind"] == kind and c["decidedLateS"] is not None]
        print(f"{kind:<8} {len(late):>9} {statistics.median(late):>9.0f} {percentile(late, 0.99):>9.0f} "
              f"{max(late):>9.0f}  " + " ".join(f"{v:.0f}" for v in late))
    print("wake-ups:", {cause: int(n) for cause, n in document["wakeups"].items() if n})
    decided = [ms for ms in document.get("decidedAfterMs", []) if ms is not None]
    if decided:
        print(f"evictd's share, wake-up to decision: p50 {statistics.median(decided):.0f} ms, max {max(decided):.0f} "
              "ms: " + " ".join(f"{ms:.0f}" for ms in decided))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crossings", type=int, default=10, help="crossings per mode or kind (default 10)")
    parser.add_argument("--watch-only", action="store_true", help="bursts: the memory watch's run alone (no tick run)")
    parser.add_argument("--margin-cost", action="store_true", help="evictd's CPU at the margin, watch on and off")
    parser.add_argument("--margin-latency", action="store_true", help="bursts and ramps from a steady margin")
    parser.add_argument("--segment-s", type=float, default=30.0, help="--margin-cost: seconds per segment")
    parser.add_argument("--rounds", type=int, default=2, help="--margin-cost: on/off pairs")
    parser.add_argument("--crossing-hold", metavar="DURATION",
                        help="--margin-latency: evictd's memoryCrossingHold (e.g. 0s; default: as shipped)")
    parser.add_argument("--vm", choices=("uml", "qemu"), default="uml",
                        help="the guest: uml (Debian's user-mode kernel, no PSI, 1 CPU) or qemu (make qemu-node: "
                             "2 vCPUs, preemptible, PSI)")
    args = parser.parse_args()
    if args.margin_cost:
        return margin_cost(args.segment_s, args.rounds, args.vm)
    if args.margin_latency:
        return margin_latency(args.crossings, args.vm, args.crossing_hold)
    out = Path(tempfile.mkdtemp(prefix="evictd-bench-v2-"))
    # Debian's kernel (no PSI), whatever EVICTD_UML_KERNEL says: this measures the wake-ups without PSI.
    modes = ("on",) if args.watch_only else ("off", "on")
    run = boot_guest(BODY, out, 60 + args.crossings * 20 * len(modes),
                     {"V2_WAKEUP_CROSSINGS": str(args.crossings), "V2_WAKEUP_MODES": ",".join(modes)}, args.vm)
    document = run.json("wakeup-cgroupfs.json")
    if "error" in document:
        print(document["traceback"], run.text("wakeup.log")[-3000:], file=sys.stderr)
        return 1
    print(f"{'mode':<28} {'crossings':>9} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}  wake-ups")
    for mode, label in (("off", "tick alone (memcgWakeups off)"), ("on", "memory watch (default)")):
        if mode not in modes:
            continue
        data = document["runs"][mode]
        late = [c["decidedLateS"] * 1000 for c in data["crossings"] if c["decidedLateS"] is not None]
        wakeups = {cause: int(n) for cause, n in data["wakeups"].items() if n}
        print(f"{label:<28} {len(late):>9} {statistics.median(late):>9.0f} {percentile(late, 0.99):>9.0f} "
              f"{max(late):>9.0f}  {wakeups}\n  " + " ".join(f"{v:.0f}" for v in late))
    return 0


if __name__ == "__main__":
    sys.exit(main())

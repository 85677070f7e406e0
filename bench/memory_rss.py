"""Daemon RSS after 100 housekeeping cycles at 250 pods, beside the floor of merely importing its libraries.

A fresh Python process (so nothing the benchmark itself imported counts) reports VmRSS from
/proc/self/status at each step:

1. bare interpreter;
2. the import floor: evictd.daemon, evictd.composition, prometheus_client, structlog, kubernetes and grpc
   (each "not installed" if missing) imported, nothing built;
3. the daemon built by `evictd.composition.build_daemon` from a configuration pointing at a synthetic
   250-pod node (`synthetic_node.py`), with its /metrics endpoint on a loopback port, JSON logs to
   /dev/null and memory wake-ups off (the synthetic tree is not a real cgroupfs);
4. every 10 cycles while `Daemon.run()` runs 100 cycles back to back (the daemon records metrics and logs
   each cycle as it always does; /metrics is scraped at each sample, as Prometheus would).

Target: at most 64 MiB after 100 cycles, and no growth over the cycles (last sample - sample at cycle 10).

    .venv/bin/python bench/memory_rss.py [--pods 250] [--cycles 100]
"""

from __future__ import annotations

# Only os and sys at the top: the child's first sample is the bare interpreter, so anything imported here
# would be counted in it. The parent imports what it needs inside its functions.
import os
import sys

TARGET_MIB = 64.0
LIBRARIES = ("evictd.daemon", "evictd.composition", "prometheus_client", "structlog", "kubernetes", "grpc")
SAMPLE_EVERY = 10
# Growth below one page table's worth of noise is not growth; anything at or above this is reported as such.
GROWTH_TOLERANCE_MIB = 0.5


def status_mib(*fields: str) -> dict[str, float]:
    """Return the named fields of /proc/self/status (kB figures) in MiB."""
    found = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in fields:
                found[name] = int(rest.split()[0]) / 1024
    return found


def rss_mib() -> float:
    return status_mib("VmRSS")["VmRSS"]


def child(config_path: str, cycles: int, out_path: str) -> None:
    """Run in the fresh process: import, build, run, and write the samples as JSON to `out_path`."""
    result: dict[str, object] = {"bare_mib": rss_mib()}
    import importlib
    import json
    import urllib.request  # (ssl, http.client: counted in the floor, which the daemon's libraries need anyway)

    missing = []
    for name in LIBRARIES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    result["missing"] = missing
    result["floor_mib"] = rss_mib()

    from evictd.composition import build_daemon
    from evictd.config import load_configuration

    config = load_configuration([config_path])
    with open(os.devnull, "w") as devnull:
        daemon, endpoint = build_daemon(config, max_cycles=cycles, stdout=devnull)
        result["built_mib"] = rss_mib()
        samples: list[tuple[int, float]] = []
        pods_seen: list[int] = []
        original = daemon.on_cycle

        def on_cycle(number: int, report: object) -> None:
            if original is not None:
                original(number, report)  # type: ignore[arg-type]
            if number == 1 or number % SAMPLE_EVERY == 0:
                if endpoint is not None:
                    with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=5) as answer:
                        answer.read()
                summary = getattr(report, "summary", None)
                pods_seen.append(len(summary.pods) if summary is not None else -1)
                samples.append((number, rss_mib()))

        daemon.on_cycle = on_cycle
        status = daemon.run()
        if endpoint is not None:
            endpoint.close()
    result.update(samples=samples, status=status, pods_seen=sorted(set(pods_seen)),
                  split=status_mib("RssAnon", "RssFile", "VmHWM"))
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(result, out)


def measure(pods: int, cycles: int) -> dict[str, object]:
    """Build the node, run the child, return its samples."""
    import json
    import subprocess
    import tempfile

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from synthetic_node import build_node, write_config

    with build_node(pods) as node, tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        config = write_config(node, evictd={"housekeepingInterval": "1ms", "metricsBindAddress": "127.0.0.1:0"})
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(config), "--cycles", str(cycles),
                        "--out", out.name], check=True, stdout=subprocess.DEVNULL)
        result: dict[str, object] = json.load(out)
    if result["pods_seen"] != [pods]:
        raise SystemExit(f"the daemon did not see the synthetic pods: {result['pods_seen']}")
    return result


def report(result: dict[str, object], pods: int) -> tuple[list[str], bool]:
    samples = [(int(n), float(r)) for n, r in result["samples"]]  # type: ignore[attr-defined]
    missing = result["missing"]
    floor_label = "import floor (" + ", ".join(
        f"{name} not installed" if name in missing else name  # type: ignore[operator]
        for name in ("kubernetes", "grpc")) + ")"
    after = samples[-1][1]
    growth = after - next(r for n, r in samples if n >= SAMPLE_EVERY)
    ok = after <= TARGET_MIB and growth < GROWTH_TOLERANCE_MIB
    lines = [
        f"RSS, MiB: bare python {result['bare_mib']:.1f}; {floor_label} {result['floor_mib']:.1f}; "
        f"daemon built {result['built_mib']:.1f}",
        "  after cycle " + ", ".join(f"{n}: {r:.1f}" for n, r in samples) + f"  ({pods} pods)",
        f"  after {samples[-1][0]} cycles {after:.1f} MiB = floor + {after - float(result['floor_mib']):.1f}; "  # type: ignore[arg-type]
        f"growth cycles {SAMPLE_EVERY}-{samples[-1][0]}: {growth:+.2f} MiB "
        f"(target <= {TARGET_MIB:g} MiB, no growth: {'met' if ok else 'NOT met'})",
        "  of which private (RssAnon) {RssAnon:.1f}, shared library and file pages (RssFile) {RssFile:.1f}; "
        "peak (VmHWM) {VmHWM:.1f}".format(**result["split"]),  # type: ignore[arg-type]
    ]
    return lines, ok


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    lines, ok = report(measure(args.pods, args.cycles), args.pods)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # the fresh process: no argparse, so the bare sample stays bare
        _, _, config_arg, _, cycles_arg, _, out_arg = sys.argv
        child(config_arg, int(cycles_arg), out_arg)
        sys.exit(0)
    sys.exit(main())

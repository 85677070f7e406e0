"""Daemon RSS after 100 housekeeping cycles at 250 pods, beside the floor of merely importing its libraries.

Two variants of the daemon, each measured in a fresh Python process (so nothing the benchmark itself imported
counts), on the same synthetic 250-pod node (`synthetic_node.py`):

- without the Kubernetes API: pods discovered on the node, evictions reported only;
- with the Kubernetes API, as deployed: `kubeconfig` points at the test API server (tests/kube/apiserver.py),
  run in a process of its own by `apiserver_process.py` (so its memory is not counted) and seeded with the
  node and its 250 pods; pods come from the daemon's list+watch, node conditions and events are written.

Each process reports VmRSS from /proc/self/status at each step:

1. bare interpreter;
2. the import floor: evictd.daemon, evictd.composition, prometheus_client, structlog and grpc (each "not
   installed" if missing) and, with the API, the modules of the `kubernetes` package the daemon uses
   (`kubernetes.client.configuration`, `.rest`, `.exceptions`, `kubernetes.config.kube_config`, imported
   as the daemon imports them: `evictd.kube.lean_import`), nothing built;
3. the daemon built by `evictd.composition.build_daemon` from a configuration pointing at the synthetic
   node, with its /metrics endpoint on a loopback port, JSON logs to /dev/null and memory wake-ups off (the
   synthetic tree is not a real cgroupfs);
4. every 10 cycles while `Daemon.run()` runs 100 cycles back to back (the daemon records metrics and logs
   each cycle as it always does; /metrics is scraped at each sample, as Prometheus would).

Target, for both: at most 64 MiB after 100 cycles, and no growth over the cycles (last sample - sample at
cycle 10).

    .venv/bin/python bench/memory_rss.py [--pods 250] [--cycles 100]
"""

from __future__ import annotations

# Only os and sys at the top: the child's first sample is the bare interpreter, so anything imported here
# would be counted in it. The parent imports what it needs inside its functions.
import os
import sys

TARGET_MIB = 64.0
LIBRARIES = ("evictd.daemon", "evictd.composition", "prometheus_client", "structlog", "grpc")
# The modules of the kubernetes package the daemon imports when a kubeconfig is configured.
KUBERNETES_MODULES = ("kubernetes.client.configuration", "kubernetes.client.rest", "kubernetes.client.exceptions",
                      "kubernetes.config.kube_config")
# Loaded by `import kubernetes` or the generated API client; the daemon must never load them.
KUBERNETES_HEAVY = ("kubernetes.client.api_client", "kubernetes.client.models", "kubernetes.watch", "pydantic")
SAMPLE_EVERY = 10
VARIANTS = (
    ("no-api", "without the Kubernetes API (pods discovered on the node, evictions reported):"),
    ("api", "with the Kubernetes API, as deployed (kubeconfig to the test API server in its own process; "
            "pods from the watch):"),
)
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


def child(config_path: str, cycles: int, out_path: str, api: bool) -> None:
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
    if api:
        from evictd.kube.lean_import import import_module

        for name in KUBERNETES_MODULES:
            import_module(name)
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
                  split=status_mib("RssAnon", "RssFile", "VmHWM"),
                  kubernetes_modules=sum(name.split(".")[0] == "kubernetes" for name in sys.modules),
                  heavy_loaded=[name for name in KUBERNETES_HEAVY if name in sys.modules])
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(result, out)


def run_child(config: object, cycles: int, pods: int, api: bool) -> dict[str, object]:
    """Run the fresh process on `config`; return its samples."""
    import json
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(config), "--cycles", str(cycles),
                        "--out", out.name, "--api", str(int(api))], check=True, stdout=subprocess.DEVNULL)
        result: dict[str, object] = json.load(out)
    if result["pods_seen"] != [pods]:
        raise SystemExit(f"the daemon did not see the synthetic pods: {result['pods_seen']}")
    return result


def measure(pods: int, cycles: int) -> dict[str, dict[str, object]]:
    """Build the node, run both variants' children, return their samples by variant."""
    import json
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from synthetic_node import build_node, write_config

    common = {"housekeepingInterval": "1ms", "metricsBindAddress": "127.0.0.1:0"}
    with build_node(pods) as node:
        results = {"no-api": run_child(write_config(node, evictd=common), cycles, pods, api=False)}
        pods_json = node.base / "pods.json"
        pods_json.write_text(json.dumps(node.pod_docs), encoding="utf-8")
        # The stand-in serves until its stdin closes: leaving this block (or dying) ends it.
        with subprocess.Popen([sys.executable, os.path.join(here, "apiserver_process.py"), str(node.base / "apiserver"),
                               "bench-node", str(pods_json)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) as server:
            assert server.stdout is not None and server.stdin is not None
            kubeconfig = server.stdout.readline().strip()
            if not kubeconfig:
                raise SystemExit("the test API server did not start")
            config = write_config(node, evictd={**common, "kubeconfig": kubeconfig,
                                                "stateDir": str(node.base / "state")}, name="evictd-api.yaml")
            results["api"] = run_child(config, cycles, pods, api=True)
            server.stdin.close()
    return results


def report(result: dict[str, object], pods: int, api: bool) -> tuple[list[str], bool]:
    samples = [(int(n), float(r)) for n, r in result["samples"]]  # type: ignore[attr-defined]
    missing = result["missing"]
    imported = ["evictd", "prometheus_client", "structlog"] + [
        f"{name} not installed" if name in missing else name for name in ("grpc",)]  # type: ignore[operator]
    if api:
        imported.append("kubernetes: client.configuration/rest/exceptions, config.kube_config")
    floor_label = "import floor (" + ", ".join(imported) + ")"
    after = samples[-1][1]
    growth = after - next(r for n, r in samples if n >= SAMPLE_EVERY)
    heavy = result["heavy_loaded"]
    ok = after <= TARGET_MIB and growth < GROWTH_TOLERANCE_MIB and not heavy
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
    if api:
        lines.append(f"  kubernetes modules loaded: {result['kubernetes_modules']}; "
                     + (f"LOADED: {', '.join(heavy)}" if heavy  # type: ignore[arg-type]
                        else "no ApiClient, models, pydantic or package __init__ imports"))
    return lines, ok


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    results = measure(args.pods, args.cycles)
    all_ok = True
    for variant, title in VARIANTS:
        lines, ok = report(results[variant], args.pods, api=variant == "api")
        print(title)
        print("\n".join(lines))
        all_ok = all_ok and ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # the fresh process: no argparse, so the bare sample stays bare
        _, _, config_arg, _, cycles_arg, _, out_arg, _, api_arg = sys.argv
        child(config_arg, int(cycles_arg), out_arg, api_arg == "1")
        sys.exit(0)
    sys.exit(main())

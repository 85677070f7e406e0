"""Daemon RSS after 100 housekeeping cycles at 250 pods (or several sizes), beside the floor of merely importing its
libraries, and the memory of evictd with everything it runs (the disk walker process) against the shipped limit.

Three variants of the daemon, each measured in a fresh Python process (so nothing the benchmark itself
imported counts), on the same synthetic 250-pod node (`synthetic_node.py`):

- without the Kubernetes API: pods discovered on the node, evictions reported only;
- with the Kubernetes API through a kubeconfig (a systemd service): `kubeconfig` points at the test API
  server (tests/kube/apiserver.py), run in a process of its own by `apiserver_process.py` (so its memory is
  not counted) and seeded with the node and its 250 pods; pods come from the daemon's list+watch, node
  conditions and events are written;
- with the Kubernetes API in-cluster (the DaemonSet): no kubeconfig; the process runs in a mount namespace of
  its own (`unshare --mount`, so the host is not touched) where a tmpfs on /run holds the service-account
  files at /var/run/secrets/kubernetes.io/serviceaccount (the test API server's token and CA), with
  KUBERNETES_SERVICE_HOST/PORT naming the test API server, as the kubelet sets up a pod. Needs root.

Each process reports VmRSS from /proc/self/status at each step:

1. bare interpreter;
2. the import floor: evictd.run.daemon, evictd.run.composition, prometheus_client, structlog and grpc (each "not
   installed" if missing) and, with the API, the modules of the `kubernetes` package the daemon uses
   (`kubernetes.client.configuration`, `.rest`, `.exceptions`, and the credential loader:
   `kubernetes.config.kube_config` or `.incluster_config`, imported as the daemon imports them:
   `evictd.kube.lean_import`), nothing built;
3. the daemon built by `evictd.run.composition.build_daemon` from a configuration pointing at the synthetic
   node, with its /metrics endpoint on a loopback port, JSON logs to /dev/null and memory wake-ups off (the
   synthetic tree is not a real cgroupfs);
4. every 10 cycles while the daemon runs 100 cycles back to back, served as `evictd run` serves it
   (`evictd.run.daemon.serve`: its parts started, start-up objects frozen out of the garbage collector's sight,
   then `Daemon.run()`; the daemon records metrics and logs each cycle as it always does; /metrics is
   scraped at each sample, as Prometheus would); beside it, the RSS of the disk walker process the daemon
   runs (reported on its own line, not in the daemon's figures);
5. at the same samples, evictd and all its descendants (found through /proc's parent links: the disk walker, and
   anything else it would start), as a memory limit on their cgroup counts them: the sum of their VmRSS, of their
   PSS (shared pages divided), the highest RSS sum sampled, and the sum of each process's peak (VmHWM): an upper
   bound of what they held together at any moment. The summary table at the end gives, per pod count and daemon,
   the margin to the DaemonSet's memory limit as shipped (deploy/kubernetes/daemonset.yaml), from the larger of
   the highest sample and the peaks added. (The cgroup also charges page cache and kernel memory; page cache is
   reclaimed before the limit kills anything.)

Shared libraries count in RSS by the pages mapped, and a fault maps the neighbouring pages that are already
in the page cache: with the libraries' files just written by `pip install` (still in the cache as written) the
same daemon measured about 3 MiB more than once they had been dropped from the cache and read again (2026-11-23:
grpc's import alone 20 MiB, then 14 MiB after `posix_fadvise(DONTNEED)` of its shared objects). Compare runs
made in the same state.

Target, for each: at most 64 MiB after 100 cycles, and no growth over the cycles (last sample - sample at
cycle 10).

    .venv/bin/python bench/memory_rss.py [--pods 250[,1000,5000]] [--cycles 100]
"""

from __future__ import annotations

# Only os and sys at the top: the child's first sample is the bare interpreter, so anything imported here
# would be counted in it. The parent imports what it needs inside its functions.
import os
import sys

TARGET_MIB = 64.0
LIBRARIES = ("evictd.run.daemon", "evictd.run.composition", "prometheus_client", "structlog", "grpc")
# The modules of the kubernetes package the daemon imports to reach the API, and the credential loader of each
# way of reaching it.
KUBERNETES_MODULES = ("kubernetes.client.configuration", "kubernetes.client.rest", "kubernetes.client.exceptions")
CREDENTIAL_LOADERS = {"kubeconfig": "kubernetes.config.kube_config", "in-cluster": "kubernetes.config.incluster_config"}
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Loaded by `import kubernetes` or the generated API client; the daemon must never load them.
KUBERNETES_HEAVY = ("kubernetes.client.api_client", "kubernetes.client.models", "kubernetes.watch", "pydantic")
# What the kubeconfig loader imports for OIDC token refreshes alone; evictd defers them until a refresh.
OIDC_MODULES = ("requests", "requests_oauthlib.oauth2_session", "oauthlib.oauth2.rfc6749")
SAMPLE_EVERY = 10
VARIANTS = (
    ("none", "without the Kubernetes API (pods discovered on the node, evictions reported):"),
    ("kubeconfig", "with the Kubernetes API through a kubeconfig, as a systemd service (the test API server in "
                   "its own process; pods from the watch):"),
    ("in-cluster", "with the Kubernetes API in-cluster, as the DaemonSet (service-account token and CA in a "
                   "private mount namespace; pods from the watch):"),
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


def process_rss_mib(pid: int) -> float:
    """Return VmRSS of another process (the disk walker), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def family_pids(root: int) -> list[int]:
    """Return `root` and every process descended from it (the disk walker and anything it starts), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                # The command may hold spaces and parentheses: the fields after its last ")" are fixed.
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, ()))
    return found


def family_mib(root: int) -> dict[str, float]:
    """Memory of `root` and all its descendants together, MiB: `rss` and `hwm` (each process's VmRSS and VmHWM,
    summed: what a memory limit on their cgroup must hold, shared library pages counted once per process), `pss`
    (proportional set size, summed from smaps_rollup: shared pages divided among the processes sharing them) and
    `processes`, how many there were. A process that ends between the listing and the reading counts 0."""
    totals = {"rss": 0.0, "hwm": 0.0, "pss": 0.0, "processes": 0.0}
    for pid in family_pids(root):
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith(("VmRSS:", "VmHWM:")):
                        totals["rss" if line.startswith("VmRSS") else "hwm"] += int(line.split()[1]) / 1024
            with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        totals["pss"] += int(line.split()[1]) / 1024
        except OSError:
            continue
        totals["processes"] += 1
    return totals


def child(config_path: str, cycles: int, out_path: str, credentials: str) -> None:
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
    if credentials in CREDENTIAL_LOADERS:
        from evictd.kube.lean_import import import_module

        for name in (*KUBERNETES_MODULES, CREDENTIAL_LOADERS[credentials]):
            import_module(name)
    result["missing"] = missing
    result["floor_mib"] = rss_mib()

    from evictd.adapters.disk_walker_process import DiskWalkerProcess
    from evictd.config import load_configuration
    from evictd.cycle.finished import Cycle
    from evictd.observe.http_endpoint import HttpEndpoint
    from evictd.run.composition import build_daemon
    from evictd.run.daemon import serve

    config = load_configuration([config_path])
    with open(os.devnull, "w") as devnull:
        daemon = build_daemon(config, max_cycles=cycles, stdout=devnull)
        result["built_mib"] = rss_mib()
        samples: list[tuple[int, float]] = []
        walker_samples: list[tuple[int, float]] = []
        family_samples: list[tuple[int, dict[str, float]]] = []
        pods_seen: list[int] = []
        http = next((part for part in daemon.parts if isinstance(part, HttpEndpoint)), None)
        walker = next((part for part in daemon.parts if isinstance(part, DiskWalkerProcess)), None)

        def sample(cycle: Cycle) -> None:
            number = cycle.number
            if number == 1 or number % SAMPLE_EVERY == 0:
                if http is not None:
                    url = f"http://127.0.0.1:{http.port}/metrics"
                    with urllib.request.urlopen(url, timeout=5) as answer:
                        answer.read()
                summary = cycle.report.observed.summary
                pods_seen.append(len(summary.pods) if summary is not None else -1)
                samples.append((number, rss_mib()))
                pid = walker.child_pid() if walker is not None else None
                if pid is not None:
                    walker_samples.append((number, process_rss_mib(pid)))
                family_samples.append((number, family_mib(os.getpid())))

        daemon.after_cycle = (*daemon.after_cycle, sample)
        status = serve(daemon)  # as `evictd run` does (start the parts, stop on SIGTERM, gc.freeze(), run)
    result.update(samples=samples, walker_samples=walker_samples, family_samples=family_samples, status=status,
                  pods_seen=sorted(set(pods_seen)),
                  split=status_mib("RssAnon", "RssFile", "VmHWM"),
                  kubernetes_modules=sum(name.split(".")[0] == "kubernetes" for name in sys.modules),
                  heavy_loaded=[name for name in KUBERNETES_HEAVY if name in sys.modules],
                  loaders_loaded=sorted(name for name in CREDENTIAL_LOADERS.values() if name in sys.modules),
                  oauthlib_or_requests=any(name in sys.modules for name in OIDC_MODULES))
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(result, out)


def in_cluster_wrapper(server: dict[str, object]) -> tuple[list[str], dict[str, str]]:
    """Return the command prefix and environment that run a process as the kubelet runs a pod's: the test API
    server's service-account token and CA at SERVICE_ACCOUNT_DIR (a tmpfs on /run in a mount namespace of the
    process's own, so nothing on the host changes) and KUBERNETES_SERVICE_HOST/PORT set."""
    import shlex

    folder = shlex.quote(SERVICE_ACCOUNT_DIR)
    script = (f"mount -t tmpfs -o mode=0755 evictd-bench /run && mkdir -p {folder}"
              f" && cp {shlex.quote(str(server['token']))} {folder}/token"
              f" && cp {shlex.quote(str(server['ca']))} {folder}/ca.crt"
              f" && echo kube-system > {folder}/namespace && exec \"$@\"")
    environment = {**os.environ, "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server["port"])}
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"], environment


def run_child(config: object, cycles: int, pods: int, credentials: str,
              wrapper: tuple[list[str], dict[str, str]] | None = None) -> dict[str, object]:
    """Run the fresh process on `config` (under `wrapper`'s command prefix and environment); return its samples."""
    import json
    import subprocess
    import tempfile

    prefix, environment = wrapper if wrapper is not None else ([], None)
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        subprocess.run([*prefix, sys.executable, os.path.abspath(__file__), "--child", str(config), "--cycles",
                        str(cycles), "--out", out.name, "--credentials", credentials], check=True,
                       stdout=subprocess.DEVNULL, env=environment)
        result: dict[str, object] = json.load(out)
    # With the API, the first sample (cycle 1) may come before the pod list synced (0 pods at 5,000 pods).
    if result["pods_seen"] not in ([pods], [0, pods]):
        raise SystemExit(f"the daemon did not see the synthetic pods: {result['pods_seen']}")
    return result


def measure(pods: int, cycles: int) -> dict[str, dict[str, object]]:
    """Build the node, run the three variants' children, return their samples by variant."""
    import json
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from synthetic_node import build_node, write_config

    common = {"housekeepingInterval": "1ms", "metricsBindAddress": "127.0.0.1:0"}
    with build_node(pods) as node:
        results = {"none": run_child(write_config(node, evictd=common), cycles, pods, "none")}
        pods_json = node.base / "pods.json"
        pods_json.write_text(json.dumps(node.pod_docs), encoding="utf-8")
        # The stand-in serves until its stdin closes: leaving this block (or dying) ends it.
        with subprocess.Popen([sys.executable, os.path.join(here, "apiserver_process.py"), str(node.base / "apiserver"),
                               "bench-node", str(pods_json)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) as server:
            assert server.stdout is not None and server.stdin is not None
            started = server.stdout.readline().strip()
            if not started:
                raise SystemExit("the test API server did not start")
            credentials = json.loads(started)
            config = write_config(node, evictd={**common, "kubeconfig": credentials["kubeconfig"],
                                                "stateDir": str(node.base / "state")}, name="evictd-kubeconfig.yaml")
            results["kubeconfig"] = run_child(config, cycles, pods, "kubeconfig")
            config = write_config(node, evictd={**common, "stateDir": str(node.base / "state-in-cluster")},
                                  name="evictd-in-cluster.yaml")
            results["in-cluster"] = run_child(config, cycles, pods, "in-cluster", in_cluster_wrapper(credentials))
            server.stdin.close()
    return results


def report(result: dict[str, object], pods: int, credentials: str) -> tuple[list[str], bool]:
    samples = [(int(n), float(r)) for n, r in result["samples"]]  # type: ignore[attr-defined]
    missing = result["missing"]
    imported = ["evictd", "prometheus_client", "structlog"] + [
        f"{name} not installed" if name in missing else name for name in ("grpc",)]  # type: ignore[operator]
    if credentials in CREDENTIAL_LOADERS:
        loader = CREDENTIAL_LOADERS[credentials].removeprefix("kubernetes.")
        imported.append(f"kubernetes: client.configuration/rest/exceptions, {loader}")
    floor_label = "import floor (" + ", ".join(imported) + ")"
    after = samples[-1][1]
    growth = after - next(r for n, r in samples if n >= SAMPLE_EVERY)
    heavy = result["heavy_loaded"]
    # The daemon must have loaded the loader of its own credentials and no other.
    loaders_ok = result["loaders_loaded"] == ([CREDENTIAL_LOADERS[credentials]] if credentials in CREDENTIAL_LOADERS
                                              else [])
    ok = after <= TARGET_MIB and growth < GROWTH_TOLERANCE_MIB and not heavy and loaders_ok
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
    walker = [(int(n), float(r)) for n, r in result["walker_samples"]]  # type: ignore[attr-defined]
    if walker:
        lines.append("  the disk walker process beside it (its own RSS, not in the figures above): "
                     + ", ".join(f"{n}: {r:.1f}" for n, r in walker)
                     + f"; daemon + walker after {samples[-1][0]} cycles {after + walker[-1][1]:.1f} MiB")
    family = family_summary(result)
    if family is not None:
        lines.append(f"  evictd and all its children ({family['processes']:.0f} processes): RSS together after "
                     f"{samples[-1][0]} cycles {family['rss']:.1f} MiB (PSS {family['pss']:.1f}), highest sample "
                     f"{family['highest']:.1f}; peaks added (VmHWM of each) {family['hwm']:.1f} MiB; shipped limit "
                     f"{shipped_limit_mib():.0f} MiB")
    if credentials in CREDENTIAL_LOADERS:
        lines.append(f"  kubernetes modules loaded: {result['kubernetes_modules']}; "
                     + (f"LOADED: {', '.join(heavy)}" if heavy  # type: ignore[arg-type]
                        else "no ApiClient, models, pydantic or package __init__ imports")
                     + f"; credential loaders: {', '.join(result['loaders_loaded'])}"  # type: ignore[arg-type]
                     + ("" if loaders_ok else " (WRONG)")
                     + f"; requests or oauthlib.oauth2 loaded: {'yes' if result['oauthlib_or_requests'] else 'no'}")
    return lines, ok


def family_summary(result: dict[str, object]) -> dict[str, float] | None:
    """The last family sample (`rss`, `pss`, `hwm`, `processes`) and `highest`, the largest RSS sum sampled."""
    family = [(int(n), dict(f)) for n, f in result.get("family_samples", [])]  # type: ignore[attr-defined]
    if not family:
        return None
    return {**family[-1][1], "highest": max(f["rss"] for _, f in family)}


def shipped_limit_mib() -> float:
    """The memory limit of the DaemonSet as shipped (deploy/kubernetes/daemonset.yaml), MiB."""
    import re

    manifest = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "kubernetes", "daemonset.yaml")
    with open(manifest, encoding="utf-8") as text:
        found = re.search(r"limits:\n(?:\s*#.*\n)*\s*memory: (\d+)Mi", text.read())
    if found is None:
        raise SystemExit(f"no memory limit found in {manifest}")
    return float(found.group(1))


def summary_table(by_pods: dict[int, dict[str, dict[str, object]]]) -> list[str]:
    """A Markdown table: per pod count and daemon, the daemon's RSS, the walker's, both together and their peaks."""
    limit = shipped_limit_mib()
    lines = ["| pods | daemon | evictd after the cycles | disk walker | together (RSS) | highest sample together | "
             "peaks added (VmHWM) | margin to the limit |",
             "|---|---|---|---|---|---|---|---|"]
    for pods, results in by_pods.items():
        for variant, _ in VARIANTS:
            result = results[variant]
            daemon = float(result["samples"][-1][1])  # type: ignore[index]
            walker = result["walker_samples"]
            walker_mib = float(walker[-1][1]) if walker else 0.0  # type: ignore[index]
            family = family_summary(result) or {"rss": daemon, "highest": daemon, "hwm": daemon}
            worst = max(family["highest"], family["hwm"])
            lines.append(f"| {pods:,} | {variant} | {daemon:.1f} | {walker_mib:.1f} | {family['rss']:.1f} | "
                         f"{family['highest']:.1f} | {family['hwm']:.1f} | {limit - worst:+.1f} MiB "
                         f"({(limit - worst) / limit:+.0%}) of {limit:.0f} |")
    return lines


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", default="250",
                        help="pod counts, comma-separated (250,1000,5000): a synthetic node and three daemons each")
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    all_ok = True
    by_pods = {}
    for pods in (int(word) for word in args.pods.split(",")):
        results = by_pods[pods] = measure(pods, args.cycles)
        print(f"== {pods} pods ==")
        for variant, title in VARIANTS:
            lines, ok = report(results[variant], pods, variant)
            print(title)
            print("\n".join(lines))
            all_ok = all_ok and ok
        sys.stdout.flush()
    print("\nevictd with all its children, MiB after the cycles (the margin: the shipped limit less the larger of "
          "the highest sample and the peaks added):")
    print("\n".join(summary_table(by_pods)))
    return 0 if all_ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # the fresh process: no argparse, so the bare sample stays bare
        _, _, config_arg, _, cycles_arg, _, out_arg, _, credentials_arg = sys.argv
        child(config_arg, int(cycles_arg), out_arg, credentials_arg)
        sys.exit(0)
    sys.exit(main())

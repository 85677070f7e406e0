"""`evictd run` beside a tenant's pods as large as the API stores them: RSS and CPU per pod, by shape.

A tenant may bind Pending pods of about 1.3 MB to a node (the API server's request limit is 3 MiB, etcd's value
limit 1.5 MiB): 13,650 tolerations each, or as many volumes, containers, init containers, environment variables
or labels. This benchmark seeds the test API server (tests/kube/apiserver.py, in a process of its own:
`apiserver_process.py`) with a node and N pods of one shape bound to it (distinct per pod), runs the real
`evictd run` (kubeconfig to that server: the `kubernetes` package's REST client, the pod list and watch as
shipped; the flight recorder on, no container runtime, memory wake-ups off, a cycle every second) for S seconds
and until its flight recording names every pod (at most 300 s), and reports for the evictd process its settled
RSS (VmRSS, the mean of the last 2 s of samples every 100 ms), its peak (VmHWM) and its CPU time (utime +
stime). A run with no pod at all is the baseline: per pod, the RSS and CPU above it divided by N. Then the same
at 110 and 250 ordinary pods (a Deployment's pod with a sidecar, about 3 KB as the API returns it): the memory
evictd needs at the kubelet's default and largest usual maxPods, against the DaemonSet's memory limit (read
from deploy/kubernetes/daemonset.yaml) with MARGIN of it left free, and how
many of the costliest hostile pods fit beside 250 ordinary ones within that.

    .venv/bin/python bench/hostile_pods.py [--pods 40] [--seconds 20] [--label after] \
        [--record bench/results/hostile_pods.jsonl]

`--record` appends one JSON line per run and one for the summary. Run it once with PYTHONPATH naming another
checkout's src (`--label before`) to compare two versions of the code: the daemon runs with this environment.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from tenant_annotations import cpu_s, metrics, proc_status_kib

ROOT = Path(__file__).resolve().parents[1]
NODE = "bench-node"
MIB = 1 << 20
SAMPLE_EVERY_S = 0.1
SETTLED_WINDOW_S = 2.0
# The recording is looked at this often for the pods the daemon holds; a run lasts until it holds them all (and
# the settled window after), at most MAX_SECONDS.
LOOK_EVERY_S = 1.0
MAX_SECONDS = 300.0
# The part of the DaemonSet's memory limit that must stay free at the figures measured here: the pod list's
# relist (a second copy while the new one is parsed), the disk walker and the recorder's bursts are not all in
# these runs.
MARGIN = 0.25
# As many entries as make a pod of about 1.3 MB (each entry 90-100 bytes of JSON).
ENTRIES = 13_650
SHAPES = ("tolerations", "volumes", "containers", "initContainers", "env", "labels")
SIZING_PODS = (110, 250)


def _metadata(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "tenant", "uid": f"uid-{name}", **extra}


def hostile_pod(shape: str, index: int, entries: int = ENTRIES, node: str = NODE) -> dict[str, Any]:
    """A Pending pod bound to `node` with `entries` entries of `shape` (distinct per pod: no sharing between pods)."""
    app = {"name": "app", "image": "busybox", "resources": {"requests": {"memory": "16Mi"}}}
    spec: dict[str, Any] = {"nodeName": node, "containers": [app]}
    metadata = _metadata(f"{shape.lower()}-{index}")
    if shape == "tolerations":
        spec["tolerations"] = [{"key": f"example.com/key-{index}-{j}", "operator": "Exists", "effect": "NoSchedule"}
                               for j in range(entries)]
    elif shape == "volumes":
        spec["volumes"] = [{"name": f"cfg-{index}-{j}", "configMap": {"name": f"tenant-config-{j:05d}",
                                                                       "defaultMode": 420}} for j in range(entries)]
    elif shape in ("containers", "initContainers"):
        spec[shape] = [{"name": f"c-{index}-{j}", "image": "busybox",
                        "resources": {"requests": {"cpu": f"{j % 97 + 1}m", "memory": f"{j % 89 + 1}Mi"}}}
                       for j in range(entries)]
        if shape == "containers":
            spec["containers"][0] = app
    elif shape == "env":
        spec["containers"] = [{**app, "env": [{"name": f"VAR_{index}_{j}", "value": "x" * 64}
                                              for j in range(entries)]}]
    elif shape == "labels":
        metadata["labels"] = {f"tenant.example.com/label-{index}-{j}": "v" * 63 for j in range(entries)}
    else:
        raise ValueError(shape)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


def ordinary_pod(index: int) -> dict[str, Any]:
    """A running pod of a Deployment with a sidecar, as the API returns it (about 3 KB)."""
    name = f"web-7d9c8f6b5-{index:05d}"
    containers = [
        {"name": "web", "image": "registry.example.com/shop/web:1.42.0", "ports": [{"containerPort": 8080}],
         "env": [{"name": f"SETTING_{j}", "value": f"value-{j}"} for j in range(10)],
         "resources": {"requests": {"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "1Gi"},
                       "limits": {"memory": "512Mi", "ephemeral-storage": "2Gi"}},
         "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}, {"name": "cache", "mountPath": "/cache"},
                          {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]},
        {"name": "proxy", "image": "registry.example.com/mesh/proxy:1.20.1",
         "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}},
    ]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": _metadata(name, labels={"app": "web", "pod-template-hash": "7d9c8f6b5", "tier": "frontend"},
                              annotations={"kubectl.kubernetes.io/restartedAt": "2026-11-01T10:00:00Z"},
                              ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c8f6b5",
                                                "uid": "rs-uid", "controller": True}]),
        "spec": {"nodeName": NODE, "containers": containers, "priorityClassName": "", "priority": 0,
                 "volumes": [{"name": "config", "configMap": {"name": "web-config"}},
                             {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}},
                             {"name": "kube-api-access", "projected": {"sources": [
                                 {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "podIP": "10.0.0.1", "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": "2026-11-01T10:00:05Z"}
            for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"],
                                   "containerID": f"containerd://{index:064d}",
                                   "state": {"running": {"startedAt": "2026-11-01T10:00:04Z"}}}
                                  for c in containers]},
    }


def hostile_pods(shape: str, count: int) -> list[dict[str, Any]]:
    return [hostile_pod(shape, i) for i in range(count)]


def ordinary_pods(count: int) -> list[dict[str, Any]]:
    return [ordinary_pod(i) for i in range(count)]


def daemonset_memory_limit_mib() -> int:
    """The memory limit the shipped DaemonSet gives evictd (its only `memory:` under `limits:`)."""
    text = (ROOT / "deploy" / "kubernetes" / "daemonset.yaml").read_text(encoding="utf-8")
    limits = text.split("limits:", 1)[1]
    found = re.search(r"^\s*memory:\s*(\d+)Mi\s*$", limits, re.MULTILINE)
    assert found is not None, "no memory limit in deploy/kubernetes/daemonset.yaml"
    return int(found.group(1))


def run_one(work: Path, pods: list[dict[str, Any]], seconds: float, extra: str = "") -> dict[str, Any]:
    """Run `evictd run` beside `pods` for `seconds`; return its RSS, CPU and what it says it dropped."""
    work.mkdir()
    pods_json = work / "pods.json"
    pods_json.write_text(json.dumps(pods), encoding="utf-8")
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "apiserver_process.py"), str(work / "api"), NODE,
                               str(pods_json)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        credentials = json.loads(server.stdout.readline())
        port = 20000 + (os.getpid() + len(pods)) % 20000
        config = work / "evictd.yaml"
        config.write_text(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
            "evictionHard: {memory.available: 1Mi}\nenforceNodeAllocatable: []\n---\n"
            "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
            f"nodeName: {NODE}\nkubeconfig: {credentials['kubeconfig']}\nstateDir: {work / 'state'}\n"
            f"metricsBindAddress: 127.0.0.1:{port}\ncontainerRuntimeEndpoint: unix://{work}/no-runtime.sock\n"
            "housekeepingInterval: 1s\npsiWakeups: false\nmemcgWakeups: false\nlogFormat: json\n" + extra,
            encoding="utf-8")
        with open(work / "evictd.log", "wb") as log:
            # A node lock of its own: an evictd of another benchmark or test on this machine must not hold it up.
            daemon = subprocess.Popen([sys.executable, "-m", "evictd", "run", "--config", str(config)], cwd=ROOT,
                                      stdout=log, stderr=subprocess.STDOUT,
                                      env={**os.environ, "EVICTD_NODE_LOCK": str(work / "node.lock")})
            try:
                result = _sample(daemon, pods, seconds, work, port)
            finally:
                if daemon.poll() is None:
                    daemon.kill()  # interrupted: the daemon never outlives the benchmark
                    daemon.wait()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)
    warnings = sum(1 for line in (work / "evictd.log").read_text(encoding="utf-8", errors="replace").splitlines()
                   if "pod fields dropped" in line)
    return {**result, "dropped_warnings": warnings}


def _sample(daemon: subprocess.Popen[bytes], pods: list[dict[str, Any]], seconds: float, work: Path,
            port: int) -> dict[str, Any]:
    """Sample the daemon until it holds every pod and the settled window passed; stop it; return the figures."""
    samples: list[tuple[float, int]] = []
    cpu_samples: list[tuple[float, float]] = []
    figures: dict[str, float] = {}
    status: dict[str, int] = {}
    cpu = 0.0
    started = time.monotonic()
    waiting = {pod["metadata"]["uid"] for pod in pods}
    listed_all_s = None if waiting else 0.0
    next_look = started + LOOK_EVERY_S
    while daemon.poll() is None:
        try:
            status = proc_status_kib(daemon.pid, "VmRSS", "VmHWM")
            cpu = cpu_s(daemon.pid)
            samples.append((time.monotonic() - started, status["VmRSS"]))
            cpu_samples.append((time.monotonic() - started, cpu))
        except (OSError, KeyError):
            pass
        if waiting and time.monotonic() >= next_look:
            waiting -= recorded_uids(work / "state" / "recording", waiting)
            next_look = time.monotonic() + LOOK_EVERY_S
            if not waiting:
                listed_all_s = time.monotonic() - started
        # Every pod held, then the settled window; at most MAX_SECONDS.
        stop_at = started + (MAX_SECONDS if listed_all_s is None else
                             max(seconds, listed_all_s + SETTLED_WINDOW_S + LOOK_EVERY_S))
        if time.monotonic() >= stop_at:
            break
        time.sleep(SAMPLE_EVERY_S)
    with contextlib.suppress(OSError):
        figures = metrics(port)
    exited = daemon.poll()
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=60)
    end_sample = samples[-1][0] if samples else 0.0
    settled = [rss for moment, rss in samples if moment >= end_sample - SETTLED_WINDOW_S] or [0]
    return {
        "exited_during_run": exited, "listed_all_s": listed_all_s, "ran_s": end_sample,
        "cpu_at_listed_all_s": cpu_at(cpu_samples, listed_all_s) if listed_all_s is not None else None,
        "cpu_samples": [(round(moment, 2), round(value, 2)) for moment, value in cpu_samples[::10]],
        "settled_rss_mib": sum(settled) / len(settled) / 1024, "peak_rss_mib": status.get("VmHWM", 0) / 1024,
        "cpu_s": cpu, "cycles": figures.get("evictd_cycles_total", 0.0),
        "fields_dropped": {name.split('"')[1]: value for name, value in figures.items()
                           if name.startswith("evictd_pod_fields_dropped_total{")},
    }


def cpu_at(samples: list[tuple[float, float]], moment: float) -> float:
    """The CPU time at `moment` (s since the start) from (moment, CPU time) samples: the last one not later, or
    past the end the last one plus the run's mean rate over its last 10 s."""
    if not samples:
        return 0.0
    before = [value for at, value in samples if at <= moment]
    if moment <= samples[-1][0]:
        return before[-1] if before else samples[0][1]
    last_at, last = samples[-1]
    early = [(at, value) for at, value in samples if at <= last_at - 10.0] or [samples[0]]
    rate = (last - early[-1][1]) / max(last_at - early[-1][0], 1e-9)
    return last + rate * (moment - last_at)


def recorded_uids(folder: Path, uids: set[str]) -> set[str]:
    """Which of `uids` the flight recording names so far (a pod is recorded once the daemon holds it)."""
    if not folder.is_dir():
        return set()
    found: set[str] = set()
    for path in sorted(folder.iterdir()):
        try:
            raw = path.read_bytes()
            data = gzip.decompress(raw) if path.name.endswith(".gz") else raw
        except (OSError, EOFError):
            continue  # a segment being closed: looked at again next time
        found |= {uid for uid in uids if f'"{uid}"'.encode() in data}
    return found


def evictd_source() -> dict[str, str]:
    """Where the daemon's `evictd` package comes from (this environment's PYTHONPATH) and its commit."""
    found = subprocess.run([sys.executable, "-c", "import evictd; print(evictd.__file__)"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.strip()
    commit = subprocess.run(["git", "-C", str(Path(found).parent), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    return {"evictd": str(Path(found).parent), "commit": commit}


def loadavg() -> float:
    with open("/proc/loadavg", encoding="ascii") as file:
        return float(file.read().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=40, help="hostile pods of each shape (the issue: 30 and 40)")
    parser.add_argument("--seconds", type=float, default=20.0, help="each run's length")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--sizing", default=",".join(map(str, SIZING_PODS)), help="ordinary pod counts ('' none)")
    parser.add_argument("--label", default="", help="a name for this version of the code in the record")
    parser.add_argument("--config-lines", default="", help="EvictdConfiguration lines added (\\n between)")
    parser.add_argument("--record", type=Path, help="append the runs and the summary here (JSON lines)")
    args = parser.parse_args()
    source = evictd_source()
    limit_mib = daemonset_memory_limit_mib()
    common = {"bench": "hostile_pods", "label": args.label, **source, "config_lines": args.config_lines,
              "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "cpus": os.cpu_count()}
    print(f"evictd from {source['evictd']} ({source['commit']}); {os.cpu_count()} CPUs, load {loadavg():.2f}")
    records: list[dict[str, Any]] = []
    # Each run's pods are made when it starts (all of them at once are gigabytes of Python objects).
    plan: list[tuple[str, Callable[[], list[dict[str, Any]]]]] = [("none", list)]
    plan += [(shape, partial(hostile_pods, shape, args.pods)) for shape in args.shapes.split(",") if shape]
    plan += [("ordinary", partial(ordinary_pods, int(count))) for count in args.sizing.split(",") if count]
    with tempfile.TemporaryDirectory(prefix="evictd-hostile-bench-") as folder:
        for number, (shape, make) in enumerate(plan):
            pods = make()
            pod_bytes = len(json.dumps(pods[0])) if pods else 0
            load = loadavg()
            result = run_one(Path(folder) / f"run-{number}", pods, args.seconds,
                             args.config_lines.replace("\\n", "\n") + "\n" if args.config_lines else "")
            record = {**common, "shape": shape, "pods": len(pods), "pod_bytes": pod_bytes, "seconds": args.seconds,
                      "load_before": load, **result}
            records.append(record)
            del pods
            print(f"  {shape:>14} x {record['pods']:>3} ({pod_bytes / 1024:7.1f} KiB each): RSS settled "
                  f"{result['settled_rss_mib']:6.1f} MiB, peak {result['peak_rss_mib']:6.1f} MiB, CPU "
                  f"{result['cpu_s']:5.2f} s, "
                  + (f"all pods held after {result['listed_all_s']:.1f} s" if result["listed_all_s"] is not None
                     else f"NOT ALL PODS HELD in {MAX_SECONDS:g} s")
                  + f"{'' if result['exited_during_run'] is None else ' EXITED'}"
                  f"{'; dropped ' + json.dumps(result['fields_dropped']) if result['fields_dropped'] else ''}",
                  flush=True)
    base = records[0]
    base_cpu = [(float(at), float(value)) for at, value in base["cpu_samples"]]
    per_pod = {}
    for record in records[1:]:
        if record["shape"] == "ordinary":
            continue
        per_pod[record["shape"]] = {
            "rss_kib": (record["settled_rss_mib"] - base["settled_rss_mib"]) * 1024 / record["pods"],
            "peak_kib": (record["peak_rss_mib"] - base["peak_rss_mib"]) * 1024 / record["pods"],
            # CPU until the daemon held every pod, less the baseline's at the same moment (start-up and cycles).
            "cpu_ms": (record["cpu_at_listed_all_s"] - cpu_at(base_cpu, record["listed_all_s"])) * 1000
            / record["pods"] if record["listed_all_s"] is not None else None}
    budget_mib = limit_mib * (1 - MARGIN)
    sizing = {str(r["pods"]): {"peak_rss_mib": r["peak_rss_mib"], "settled_rss_mib": r["settled_rss_mib"],
                               "fits": r["peak_rss_mib"] <= budget_mib} for r in records if r["shape"] == "ordinary"}
    summary: dict[str, Any] = {**common, "shape": "summary", "per_hostile_pod": per_pod, "limit_mib": limit_mib,
                               "margin": MARGIN, "budget_mib": budget_mib, "ordinary": sizing}
    print(f"per hostile pod above the baseline (settled RSS {base['settled_rss_mib']:.1f} MiB, peak "
          f"{base['peak_rss_mib']:.1f} MiB, CPU {base['cpu_s']:.2f} s):")
    for shape, figures in per_pod.items():
        print(f"  {shape:>14}: RSS {figures['rss_kib']:8.1f} KiB settled, {figures['peak_kib']:8.1f} KiB peak, "
              f"CPU {figures['cpu_ms'] or 0:6.1f} ms to hold it")
    print(f"DaemonSet memory limit {limit_mib} MiB, {MARGIN:.0%} kept free: {budget_mib:.0f} MiB to use")
    for count, figures in sizing.items():
        print(f"  {count} ordinary pods: peak {figures['peak_rss_mib']:.1f} MiB, settled "
              f"{figures['settled_rss_mib']:.1f} MiB: {'fits' if figures['fits'] else 'DOES NOT FIT'}")
    if per_pod and str(max(SIZING_PODS)) in sizing:
        costliest = max(per_pod, key=lambda shape: per_pod[shape]["peak_kib"])
        room_mib = budget_mib - sizing[str(max(SIZING_PODS))]["peak_rss_mib"]
        per_pod_kib = max(per_pod[costliest]["peak_kib"], 1.0)
        summary["hostile_pods_beside_250"] = {"shape": costliest, "fit": int(room_mib * 1024 // per_pod_kib)}
        print(f"  beside 250 ordinary pods, {room_mib:.0f} MiB left: room for "
              f"{summary['hostile_pods_beside_250']['fit']} {costliest} pods at their peak cost")
    print(f"load at end {loadavg():.2f}")
    if args.record is not None:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        with open(args.record, "a", encoding="utf-8") as out:
            for record in (*records, summary):
                out.write(json.dumps(record, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

"""`evictd run` beside pods whose annotations are as large as the API allows: memory, loop time and recording.

A tenant may give each of its pods up to 256 KiB of annotations (the API server's limit for the total). This
benchmark seeds the test API server (tests/kube/apiserver.py, in a process of its own: `apiserver_process.py`)
with a node and N pods bound to it, each carrying one annotation of K KiB of random base64 text (distinct per
pod, barely compressible), and runs the real `evictd run` (kubeconfig to that server, the flight recorder on
unless `--no-recorder`, no container runtime, memory wake-ups off, observing this machine) for S seconds at one
cycle every I. It reports, for the evictd process:

- peak and last RSS (VmHWM, VmRSS of /proc/<pid>/status, sampled every 100 ms; VmHWM is the kernel's own peak),
  against the DaemonSet's memory limit (128 MiB, deploy/);
- CPU time (utime + stime: the loop, the pod watch and the recorder, which runs on the loop's thread) and the
  cycles run, with the mean cycle duration from /metrics (the cycle alone, without the after-cycle hooks);
- the recording: bytes per cycle as written and as gzip keeps them (every line of the recording folder read
  back, closed segments decompressed; the open segment gzipped as closing it would), and how long the default
  64 MiB `recorderMaxBytes` lasts at one cycle every 10 s (the shipped housekeeping interval) at that gzip size.

    .venv/bin/python bench/tenant_annotations.py [--pods 100] [--annotation-kib 250] [--seconds 30]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODE = "bench-node"
MIB = 1 << 20
DAEMONSET_LIMIT_MIB = 128
RECORDER_MAX_BYTES = 64 * MIB
SHIPPED_INTERVAL_S = 10.0
SAMPLE_EVERY_S = 0.1


def blob(seed: int, size: int) -> str:
    """`size` characters of base64 text that gzip cannot shrink much (a tenant's data, compressed or random)."""
    return base64.b64encode(random.Random(seed).randbytes(size))[:size].decode()


def tenant_pods(count: int, annotation_bytes: int) -> list[dict[str, object]]:
    """`count` running pods on NODE, each with one annotation of `annotation_bytes` (distinct per pod)."""
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"tenant-{i}", "namespace": "tenant", "uid": f"uid-tenant-{i}",
                     "annotations": {"tenant.example.com/blob": blob(i, annotation_bytes)}},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox",
                                                   "resources": {"requests": {"memory": "64Mi"}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable"},
    } for i in range(count)]


def proc_status_kib(pid: int, *fields: str) -> dict[str, int]:
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in fields:
                found[name] = int(rest.split()[0])
    return found


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        page = response.read().decode()
    return {name: float(value) for name, _, value in (line.rpartition(" ") for line in page.splitlines())
            if name and not name.startswith("#")}


def recording(folder: Path) -> tuple[list[bytes], int]:
    """Every line of the recording, and its size once every segment is closed (the open one gzipped as the
    recorder closes it)."""
    lines: list[bytes] = []
    closed_bytes = 0
    for path in sorted(folder.iterdir()):
        raw = path.read_bytes()
        data = gzip.decompress(raw) if path.name.endswith(".gz") else raw
        closed_bytes += len(raw) if path.name.endswith(".gz") else len(gzip.compress(raw))
        lines += [line for line in data.split(b"\n") if line]
    return lines, closed_bytes


def run(args: argparse.Namespace, work: Path) -> dict[str, object]:
    pods_json = work / "pods.json"
    pods_json.write_text(json.dumps(tenant_pods(args.pods, args.annotation_kib * 1024)), encoding="utf-8")
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "apiserver_process.py"), str(work / "api"), NODE,
                               str(pods_json)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        credentials = json.loads(server.stdout.readline())
        port = 20000 + os.getpid() % 20000
        state = work / "state"
        config = work / "evictd.yaml"
        config.write_text(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
            "evictionHard: {memory.available: 1Mi}\nenforceNodeAllocatable: []\n---\n"
            "apiVersion: evictd.io/v1alpha1\nkind: EvictdConfiguration\n"
            f"nodeName: {NODE}\nkubeconfig: {credentials['kubeconfig']}\nstateDir: {state}\n"
            f"metricsBindAddress: 127.0.0.1:{port}\ncontainerRuntimeEndpoint: unix://{work}/no-runtime.sock\n"
            f"recorder: {'true' if args.recorder else 'false'}\n"
            f"housekeepingInterval: {args.interval}\npsiWakeups: false\nmemcgWakeups: false\nlogFormat: json\n",
            encoding="utf-8")
        with open(work / "evictd.log", "wb") as log:
            daemon = subprocess.Popen([sys.executable, "-m", "evictd", "run", "--config", str(config)], cwd=ROOT,
                                      stdout=log, stderr=subprocess.STDOUT)
            peak_rss_kib = 0
            status: dict[str, int] = {}
            cpu, figures = 0.0, {}
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline and daemon.poll() is None:
                try:
                    status = proc_status_kib(daemon.pid, "VmRSS", "VmHWM")
                    peak_rss_kib = max(peak_rss_kib, status["VmHWM"])
                    cpu = cpu_s(daemon.pid)
                    figures = metrics(port)
                except (OSError, KeyError):
                    pass
                time.sleep(SAMPLE_EVERY_S)
            exited = daemon.poll()
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
    lines, gzipped = recording(state / "recording") if (state / "recording").is_dir() else ([], 0)
    written = sum(len(line) + 1 for line in lines)
    cycles = figures.get("evictd_cycles_total", 0.0)
    per_cycle_gz = gzipped / len(lines) if lines else 0.0
    return {
        "exited_during_run": exited,
        "peak_rss_mib": peak_rss_kib / 1024, "last_rss_mib": status.get("VmRSS", 0) / 1024,
        "cpu_s": cpu, "cycles": cycles,
        "cycle_mean_ms": 1000 * figures.get("evictd_cycle_duration_seconds_sum", 0.0) / max(cycles, 1.0),
        "recorded_cycles": len(lines),
        "written_kib_per_cycle": written / len(lines) / 1024 if lines else 0.0,
        "gzip_kib_per_cycle": per_cycle_gz / 1024,
        "hours_64mib_lasts": RECORDER_MAX_BYTES / per_cycle_gz * SHIPPED_INTERVAL_S / 3600 if per_cycle_gz else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--annotation-kib", type=int, default=250)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", default="1s", help="evictd's housekeepingInterval during the run")
    parser.add_argument("--no-recorder", dest="recorder", action="store_false", help="run with `recorder: false`")
    args = parser.parse_args()
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        print(f"load average at start: {loadavg.read().split()[0]}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="evictd-tenant-bench-") as folder:
        result = run(args, Path(folder))
    print(f"{args.pods} pods x {args.annotation_kib} KiB annotation, {args.seconds:g} s at one cycle every "
          f"{args.interval}, recorder {'on' if args.recorder else 'off'}:")
    if result["exited_during_run"] is not None:
        print(f"  evictd EXITED during the run with status {result['exited_during_run']}")
    under = float(str(result["peak_rss_mib"])) < DAEMONSET_LIMIT_MIB
    print(f"  RSS peak {result['peak_rss_mib']:.1f} MiB, last {result['last_rss_mib']:.1f} MiB "
          f"(DaemonSet limit {DAEMONSET_LIMIT_MIB} MiB: {'under' if under else 'OVER'})")
    print(f"  CPU {result['cpu_s']:.2f} s over {result['cycles']:.0f} cycles, "
          f"cycle mean {result['cycle_mean_ms']:.1f} ms")
    print(f"  recording: {result['recorded_cycles']} cycles kept, {result['written_kib_per_cycle']:.1f} KiB written "
          f"and {result['gzip_kib_per_cycle']:.2f} KiB gzipped per cycle; 64 MiB lasts "
          f"{result['hours_64mib_lasts']:.2f} h at one cycle every {SHIPPED_INTERVAL_S:g} s")
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        print(f"load average at end: {loadavg.read().split()[0]}")


if __name__ == "__main__":
    main()

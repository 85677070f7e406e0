"""The node-survival arena's two nodes (backends), inside a cgroup v2 guest: the same pods, the same records.

Both lay pods out as the kubelet's cgroupfs driver does (``kubepods/{besteffort,burstable}/pod<uid>/<id>``,
Guaranteed ``kubepods/pod<uid>/<id>``), start the same workload script (bench/node_survival_workloads.py
`GROWER`, or a page-cache workload's reader) in every pod, and show the arena the pods' API objects and their cgroups.

* `StandIn`: no kube binaries. tests/uml/guest_v2_node.py's `Node`: the project's test API server holds the
  Node and the pods, a stand-in kubelet carries a deletion out (``cgroup.kill``, then the deletion finished with
  grace 0), pods are processes of this guest placed in their cgroups with the oom_score_adj the kubelet gives
  their QoS class. The arena's own process plays the kubelet (``system.slice/kubelet.service``, -999).
* `Real`: tests/cluster/real_cluster.py's `RealCluster` started in the guest (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler, containerd, the kubelet v1.36.2, binaries from EVICTD_K8S_BIN).
  Pods are created through the real API server with ``spec.nodeName`` and started by the real kubelet through
  containerd (busybox image, ``chroot`` into the guest's root through a hostPath volume to run the same Python
  script; ``restartPolicy: Never``), QoS classes as declared (the kubelet sets their cgroups and
  oom_score_adj). The kubelet runs with the protector's eviction settings (`KUBELET_EVICTION`); it is moved
  into ``system.slice/kubelet.service``, containerd into ``system.slice/containerd.service`` (both -999, their
  units' value), the control plane (which a worker node would not run) into ``system.slice/control-plane.service``
  (-999: it stands for nothing on the node, so the OOM killer should not pick it), the arena into
  ``system.slice/arena.service``. With the guest's own disk mounted (/run/disk) the kubelet's root folder and
  its pod logs folder are on it (``/run/disk/kubelet``, ``/run/disk/pod-logs``, where evictd looks on both
  backends): nodefs is the guest disk, as on the stand-in; etcd and containerd's root stay on the guest's /run
  (containerd's root is the node's imagefs, apart). A pod spec's volumes (the disk fill's ``scratch``) are
  emptyDir volumes of the pod, so the kubelet measures them. Between runs the kubelet is restarted when its own
  eviction is on, so that its MemoryPressure (5 min transition period) does not make it reject the next run's
  BestEffort pod at admission.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from guest_v2_node import CGROUP, NODE, Node, PodLayout, make_cgroup, meminfo
from node_survival_controls_guest import KUBELET_ROOT, PID_THRESHOLD, POD_LOGS, has_disk
from node_survival_pagecache import pod_script
from node_survival_workloads import PodSpec, oom_score_adj

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20
POD_RUNNING_TIMEOUT_S = 180.0
POD_GONE_TIMEOUT_S = 120.0
# How long the end of a run waits for a real API server that stopped answering in the run (a thrashed node's).
API_BACK_TIMEOUT_S = 180.0
# How long the real API server may take to be ready at the guest's boot: in the one-CPU guest it took more than the
# tests' 120 s in 2 of 4 boots on 2026-11-25 18:00-18:40 UTC (etcd's reads 0.1-0.6 s), within it earlier that day.
APISERVER_START_TIMEOUT_S = 300.0
UNITS_OOM_SCORE_ADJ = -999  # kubelet.service, containerd.service (their units' OOMScoreAdjust=)
# The kubelet's eviction per protector: `None` keeps the harness's default (every evictionHard signal 0%: the
# kubelet evicts nothing, the hand-over of README). kubelet-defaults: the kubelet's own defaults
# (pkg/kubelet/apis/config/v1beta1/defaults_linux.go). kubelet-same: evictd's shipped thresholds.
KUBELET_DEFAULTS = {"evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%",
                                     "nodefs.inodesFree": "5%", "imagefs.available": "15%"}}
KUBELET_PID = "kubelet-pid"  # kubelet-same plus evictd-pid's pid.available threshold (the fork bomb's comparison)


def mebibytes(quantity: str) -> int:
    """A memory threshold of the kubelet's config as whole MiB ("100Mi", "1Gi"; what the arena's configs use)."""
    units = {"Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    raise ValueError(f"a memory.available threshold the arena does not size pods by: {quantity!r}")


# What ships for a node (the systemd unit's file; the DaemonSet's ConfigMap and the chart hold the same settings:
# tests/deploy/test_manifests.py): the arena runs it as it is, but for dryRun (false: the hand-over's last step).
SHIPPED = REPO / "deploy/systemd/config.yaml"


def shipped_documents() -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped KubeletConfiguration and EvictdConfiguration, the latter acting (dryRun false)."""
    kubelet, evictd = yaml.safe_load_all(SHIPPED.read_text())
    return kubelet, {**evictd, "dryRun": False}


def kubelet_same() -> dict[str, Any]:
    """The eviction keys of the shipped KubeletConfiguration, as the kubelet takes them."""
    shipped, _ = shipped_documents()
    return {k: v for k, v in shipped.items() if k.startswith("eviction") or k == "mergeDefaultEvictionSettings"}


def kubelet_pid() -> dict[str, Any]:
    """kubelet-same with ``pid.available`` added to evictionHard, as evictd-pid adds it to evictd's."""
    settings = kubelet_same()
    settings["evictionHard"] = {**settings.get("evictionHard", {}), "pid.available": PID_THRESHOLD}
    return settings


@dataclass
class PodHandle:
    """A started pod: its name, UID, pod cgroup and container cgroup (both relative to /sys/fs/cgroup)."""

    name: str
    uid: str
    cgroup: str
    container: str
    stand_in: Any = None  # guest_v2_node.Pod (its process) on the stand-in backend


def grower_argv(head_mib: float, spec: PodSpec, control: Path) -> tuple[str, ...]:
    return (f"{head_mib:.1f}", str(spec.rate_mib_s), str(spec.cap_mib), str(control), spec.name)


def join_unit(unit: str, oom_adj: int) -> str:
    """A shell prefix that puts the shell in `unit`'s cgroup with `oom_adj`, before it execs what follows."""
    make_cgroup(unit)
    return f"echo $$ > {CGROUP / unit / 'cgroup.procs'} && echo {oom_adj} > /proc/self/oom_score_adj && "


def move_to_unit(pid: int, unit: str, oom_adj: int) -> None:
    make_cgroup(unit)
    (CGROUP / unit / "cgroup.procs").write_text(str(pid))
    Path(f"/proc/{pid}/oom_score_adj").write_text(str(oom_adj))


class StandIn:
    name = "stand-in"
    own_unit = "system.slice/kubelet.service"  # this process is the stand-in kubelet

    def __init__(self, work: Path) -> None:
        # The pods cgroup's memory.max as a kubelet enforcing node allocatable sets it (`enforceNodeAllocatable:
        # [pods]`) with nothing reserved: the node's capacity. Without it allocatableMemory.available has no
        # capacity (its threshold copies, evictd's and the kubelet's alike, are never observed).
        self.node = Node("cgroupfs", work, allocatable_bytes=meminfo()["MemTotal"], sample=False)

    def requests_fit_mib(self, mem_total_mib: int) -> int:
        """What the pods' memory requests may add up to: nothing admits them here, so the node's capacity."""
        return mem_total_mib

    def use_protector(self, protector: str) -> None:
        if protector.startswith("kubelet"):
            raise KeyError(f"protector {protector!r} needs the real kubelet (--backend real)")

    def new_run(self, namespace: str) -> None:
        self.node.remove_pods()
        self.node.namespace = namespace

    def start_pod(self, spec: PodSpec, argv: tuple[str, ...], mem_total: int) -> PodHandle:
        pod = self.node.add_pod(spec.name, spec.request_mib, script=spec.script or pod_script(spec), args=argv,
                                qos=spec.qos, limit_mib=spec.limit_mib, oom_score_adj=oom_score_adj(spec, mem_total),
                                volumes=spec.volumes)
        return PodHandle(pod.name, pod.uid, pod.cgroup, pod.container, pod)

    def exit_code(self, pod: PodHandle) -> int | None:
        return pod.stand_in.proc.poll() if pod.stand_in is not None else None

    def delete_pod(self, pod: PodHandle) -> None:
        """Delete a pod as a rollout does (a grace period: the stand-in kubelet kills it and finishes the deletion)."""
        self.node.api.store.delete_pod(self.node.namespace, pod.name, 1)

    def api_pods(self) -> list[dict[str, Any]]:
        return self.node.api.store.pods(self.node.namespace)

    def evictd_documents(self, kubelet: dict[str, Any], evictd: dict[str, Any]) -> None:
        kubelet["cgroupDriver"] = "cgroupfs"
        evictd.update({"nodeName": NODE, "kubeconfig": str(self.node.api.kubeconfig_path),
                       "containerRuntimeEndpoint": "unix:///run/no-runtime.sock"})

    def node_health(self) -> dict[str, Any] | None:
        return None  # no Lease, no kubelet heartbeat: the stand-in has none to show

    def errors(self) -> list[str]:
        return self.node.kubelet_errors[:5]

    def end_run(self) -> None:
        self.node.remove_pods()

    def close(self) -> None:
        self.node.close()


class Real:
    name = "real"
    own_unit = "system.slice/arena.service"

    def __init__(self, work: Path) -> None:
        from real_cluster import RealCluster, k8s_bin_dir

        self.extra: dict[str, Any] | None = None
        self.cluster = RealCluster(work / "rk", k8s_bin_dir(), pod_network=False,
                                   apiserver_start_timeout_s=APISERVER_START_TIMEOUT_S)
        if has_disk():  # nodefs on the guest disk, where evictd looks (node_survival_controls_guest)
            self.cluster.kubelet_root, self.cluster.pod_logs_dir = KUBELET_ROOT, POD_LOGS
        self.cluster.start()
        self._place_components()
        self.layout = PodLayout("cgroupfs")
        self.namespace = ""
        self.fresh = True  # the kubelet has seen no pressure since it started
        self.identity = "evictd-identity"

    def requests_fit_mib(self, mem_total_mib: int) -> int:
        """What the pods' memory requests may add up to: the kubelet admits a pod only if the requests fit its
        allocatable memory, MemTotal less the hard `memory.available` threshold (nothing reserved). The largest
        of the kubelet protectors' thresholds, so that every protector runs the same pods."""
        hard = [settings["evictionHard"].get("memory.available", "0Mi")
                for settings in (KUBELET_DEFAULTS, kubelet_same())]
        return mem_total_mib - max(mebibytes(value) for value in hard)

    def use_protector(self, protector: str) -> None:
        """The kubelet restarted with the protector's eviction settings (when they differ from the running
        kubelet's): one cluster serves every protector of a boot."""
        extra = {"kubelet-defaults": KUBELET_DEFAULTS, "kubelet-same": kubelet_same(),
                 "kubelet-same-dryrun": kubelet_same(), KUBELET_PID: kubelet_pid()}.get(protector)
        if extra != self.extra:
            self.cluster.restart_kubelet(yaml.safe_dump(extra) if extra is not None else "")
            self._place_components()
            self.fresh = True
        self.extra = extra

    def _place_components(self) -> None:
        for name, process in self.cluster.processes.items():
            unit = "system.slice/kubelet.service" if name == "kubelet" else "system.slice/control-plane.service"
            with contextlib.suppress(OSError):
                move_to_unit(process.pid, unit, UNITS_OOM_SCORE_ADJ)
        containerd = self.cluster.containerd.process
        if containerd is not None:
            move_to_unit(containerd.pid, "system.slice/containerd.service", UNITS_OOM_SCORE_ADJ)

    def new_run(self, namespace: str) -> None:
        if not self.fresh and self.extra is not None:
            self.cluster.restart_kubelet(yaml.safe_dump(self.extra))
            self._place_components()
        self.fresh = False
        self.namespace = namespace
        self.cluster.ensure_namespace(namespace)

    def _create(self, body: dict[str, Any], name: str) -> None:
        """Create the pod; a request that timed out (the guest's API server starting ten pods on one CPU: 3 runs
        lost so on 2026-11-25) is asked again until the pod exists, within POD_RUNNING_TIMEOUT_S."""
        deadline = time.monotonic() + POD_RUNNING_TIMEOUT_S
        while True:
            try:
                self.cluster.api.create(f"/api/v1/namespaces/{self.namespace}/pods", body)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
            with contextlib.suppress(OSError):
                if self.cluster.pod(name, self.namespace) is not None:
                    return  # the timed-out request created it
            time.sleep(2.0)

    def start_pod(self, spec: PodSpec, argv: tuple[str, ...], mem_total: int) -> PodHandle:
        requests: dict[str, str] = {"memory": f"{spec.request_mib}Mi"} if spec.request_mib is not None else {}
        limits: dict[str, str] = {"memory": f"{spec.limit_mib}Mi"} if spec.limit_mib is not None else {}
        if spec.qos == "guaranteed":
            requests["cpu"] = limits["cpu"] = "100m"
        python = os.path.realpath(os.environ["EVICTD_PYTHON"])
        body = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": spec.name, "namespace": self.namespace},
            "spec": {
                "nodeName": self.cluster.node_name, "hostNetwork": True, "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "app", "image": self.cluster.busybox_image, "imagePullPolicy": "Never",
                                "command": ["chroot", "/host", python, "-c", spec.script or pod_script(spec), *argv],
                                "resources": {"requests": requests, "limits": limits},
                                "volumeMounts": [{"name": "host", "mountPath": "/host"},
                                                 *({"name": v, "mountPath": f"/{v}"} for v in spec.volumes)]}],
                "volumes": [{"name": "host", "hostPath": {"path": "/"}},
                            *({"name": v, "emptyDir": {}} for v in spec.volumes)],
            },
        }
        self._create(body, spec.name)
        pod = self.cluster.wait_pod_running(spec.name, self.namespace, timeout_s=POD_RUNNING_TIMEOUT_S)
        uid = pod["metadata"]["uid"]
        container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        root = self.cluster.cgroup_root.strip("/")
        qos = pod["status"].get("qosClass", "").lower()
        return PodHandle(spec.name, uid, f"{root}/{self.layout.pod(uid, qos)}",
                         f"{root}/{self.layout.container(uid, container_id, qos)}")

    def exit_code(self, pod: PodHandle) -> int | None:
        return None  # the arena reads the container cgroup's pids and the pod's status instead

    def delete_pod(self, pod: PodHandle) -> None:
        """Delete a pod as a rollout does (its grace period, 1 s: the kubelet stops it)."""
        self.cluster.api.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{pod.name}",
                                 {"gracePeriodSeconds": 1})

    def api_pods(self) -> list[dict[str, Any]]:
        answer = self.cluster.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        items: list[dict[str, Any]] = answer.get("items") or []
        return items

    def evictd_documents(self, kubelet: dict[str, Any], evictd: dict[str, Any]) -> None:
        kubelet["cgroupDriver"] = "cgroupfs"
        kubelet["cgroupRoot"] = self.cluster.cgroup_root
        self.cluster.ensure_identity_pod(self.identity)
        evictd.update({"nodeName": self.cluster.node_name,
                       "kubeconfig": str(self.cluster.evictd_kubeconfig(self.identity)),
                       "containerRuntimeEndpoint": self.cluster.containerd_endpoint,
                       "kubeletRootDir": str(self.cluster.kubelet_root),
                       "podLogsDir": str(self.cluster.pod_logs_dir)})

    def node_health(self) -> dict[str, Any]:
        """The node Lease's renewTime and the Node's Ready condition, now."""
        node = self.cluster.node_name
        lease = self.cluster.api.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")
        ready = None
        for condition in ((self.cluster.api.get(f"/api/v1/nodes/{node}") or {}).get("status") or {}).get(
                "conditions") or []:
            if condition.get("type") == "Ready":
                ready = condition.get("status")
        renew = ((lease or {}).get("spec") or {}).get("renewTime")
        return {"renew": datetime.fromisoformat(renew.replace("Z", "+00:00")).timestamp() if renew else None,
                "ready": ready}

    def errors(self) -> list[str]:
        return []

    def end_run(self) -> None:
        """Every pod of the run deleted (grace 0) and gone, its cgroups with it. The API server of a node that
        thrashed may not answer for a while after the run (the control plane shares the guest): it is given
        `API_BACK_TIMEOUT_S` to answer again before the run fails."""
        deadline = time.monotonic() + API_BACK_TIMEOUT_S
        while True:
            try:
                pods = self.api_pods()
                break
            except OSError:  # urllib's URLError and timeouts
                if time.monotonic() > deadline:
                    raise
                time.sleep(2.0)
        for pod in pods:
            with contextlib.suppress(Exception):
                self.cluster.api.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/"
                                         f"{pod['metadata']['name']}", {"gracePeriodSeconds": 0})
        deadline = time.monotonic() + POD_GONE_TIMEOUT_S
        while self.api_pods() and time.monotonic() < deadline:
            time.sleep(0.5)
        self._wait_pods_gone_from_node([pod["metadata"]["uid"] for pod in pods],
                                       {pod["metadata"]["uid"]: (pod.get("status") or {}).get("qosClass", "").lower()
                                        for pod in pods})

    def _wait_pods_gone_from_node(self, uids: list[str], qos: dict[str, str]) -> None:
        """Wait until the kubelet stopped the run's pods and removed their folders: a pod deleted with grace 0 is gone
        from the API at once while its containers still run. The next run's kubelet, restarted with other settings,
        otherwise starts beside the last run's memory (it saw MemoryPressure and refused the next run's pods) or its
        full disk (a disk fill's emptyDir the kubelet had not removed yet). What is still there after
        `POD_GONE_TIMEOUT_S` is cleared here: the pod cgroup's processes killed (`cgroup.kill`), the emptyDir
        volumes' files removed (their folders are the kubelet's to remove)."""
        root = self.cluster.cgroup_root.strip("/")
        cgroups = {uid: CGROUP / root / self.layout.pod(uid, qos[uid]) for uid in uids if qos.get(uid)}
        folders = {uid: Path(self.cluster.kubelet_root) / "pods" / uid for uid in uids}

        def left() -> list[Path]:
            return [path for path in (*cgroups.values(), *folders.values()) if path.exists()]

        deadline = time.monotonic() + POD_GONE_TIMEOUT_S
        while left() and time.monotonic() < deadline:
            time.sleep(0.5)
        for uid, cgroup in cgroups.items():
            if cgroup.exists():
                print(f"end of run: pod {uid}'s cgroup still there; killing what is left in it", flush=True)
                with contextlib.suppress(OSError):
                    (cgroup / "cgroup.kill").write_text("1")
        for uid, folder in folders.items():
            volumes = folder / "volumes" / "kubernetes.io~empty-dir"
            if volumes.is_dir():
                print(f"end of run: pod {uid}'s emptyDir volumes still there; removing their files", flush=True)
                for volume in volumes.iterdir():
                    for entry in volume.iterdir() if volume.is_dir() else ():
                        with contextlib.suppress(OSError):
                            if entry.is_dir() and not entry.is_symlink():
                                shutil.rmtree(entry)
                            else:
                                entry.unlink()

    def close(self) -> None:
        self.cluster.stop(remove_base=False)
        root = self.cluster.kubelet_root
        if not root.is_relative_to(self.cluster.base):  # its bind mount and what is left below it (stop's is base's)
            from containerd_harness import unmount_under

            unmount_under(root)
            subprocess.run(["umount", "-l", str(root)], capture_output=True, check=False)


BACKENDS = {"stand-in": StandIn, "real": Real}


def root_working_set() -> int:
    """The root's working set as the kubelet computes it on cgroup v2: anon + file - inactive_file of memory.stat."""
    stat = {k: int(v) for k, v in (line.split() for line in (CGROUP / "memory.stat").read_text().splitlines())}
    return stat["anon"] + stat["file"] - stat["inactive_file"]


def pod_cgroup_figures(pod: PodHandle) -> tuple[int, int]:
    """(the pod cgroup's working set bytes, its container cgroup's pids.current); (0, 0) once gone."""
    try:
        current = int((CGROUP / pod.cgroup / "memory.current").read_text())
        stat = (CGROUP / pod.cgroup / "memory.stat").read_text()
        inactive = next(int(line.split()[1]) for line in stat.splitlines() if line.startswith("inactive_file "))
        return max(0, current - inactive), int((CGROUP / pod.container / "pids.current").read_text())
    except (FileNotFoundError, OSError):
        return 0, 0

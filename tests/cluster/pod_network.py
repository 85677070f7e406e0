"""A pod network for the real cluster's one node: a Linux bridge, Debian's CNI plugins, the API server's Service IP.

Job: what a CNI set-up and kube-proxy give a node, reduced to what a pod off the host network needs here (the
DaemonSet's: deploy/kubernetes runs evictd on the pod network): an address on a bridge of its own, the node
reaching it (the kubelet's probes, a scrape of /metrics), and the `kubernetes` Service (10.0.0.1:443, what
in-cluster clients are told through KUBERNETES_SERVICE_HOST/PORT) leading to the API server, which listens on
127.0.0.1 only. Created at start and removed at stop:

* the bridge ``evrk<tag>`` with the gateway address of ``10.251.<n>.0/24`` (``n`` from the tag, so that two
  clusters on one machine get different ones); ``route_localnet`` on it, and only on it, so that a packet from a
  pod may be sent on to 127.0.0.1;
* one DNAT rule in the nat table's PREROUTING (commented with the bridge's name): from the bridge, to
  10.0.0.1:443 -> 127.0.0.1:<API server port> (what kube-proxy's rule for the Service does);
* the conflist the private containerd loads: Debian's ``bridge`` plugin (containernetworking-plugins) on that
  bridge, ``host-local`` addresses kept under the cluster's base folder. No masquerading: pods reach the node
  and the Service only.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CNI_PACKAGE = "containernetworking-plugins"
SERVICE_IP = "10.0.0.1"  # the first address of the API server's --service-cluster-ip-range
SERVICE_PORT = 443
SUBNET_PREFIX = "10.251"
BRIDGE_PREFIX = "evrk"  # interface names have at most 15 characters


class PodNetworkError(Exception):
    """The bridge or the Service rule could not be set up."""


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)


class PodNetwork:
    """The bridge ``evrk<tag>`` and its Service rule; ``tag`` is up to 8 hexadecimal characters; ``octet``, the
    subnet's third (default: from the tag), given when several nodes of one cluster each have a network."""

    def __init__(self, tag: str, ipam_dir: Path, octet: int | None = None) -> None:
        self.bridge = f"{BRIDGE_PREFIX}{tag[:8]}"
        octet = int(tag[:2], 16) if octet is None else octet
        if not 0 <= octet <= 255:
            raise PodNetworkError(f"subnet octet {octet} is not 0-255")
        self.octet = octet
        self.subnet = f"{SUBNET_PREFIX}.{octet}.0/24"
        self.gateway = f"{SUBNET_PREFIX}.{octet}.1"
        self.ipam_dir = ipam_dir
        self._rule: list[str] = []

    def conflist(self) -> str:
        """The CNI configuration list for containerd."""
        return json.dumps({
            "cniVersion": "0.4.0",
            "name": self.bridge,
            "plugins": [{
                "type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet, "gateway": self.gateway}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.ipam_dir)},
            }],
        })

    def start(self, api_port: int) -> None:
        """Create the bridge and the Service rule to the API server on 127.0.0.1:``api_port``."""
        if not (CNI_BIN_DIR / "bridge").is_file():
            raise PodNetworkError(f"no CNI bridge plugin in {CNI_BIN_DIR}: apt-get install {CNI_PACKAGE}")
        self.ipam_dir.mkdir(parents=True, exist_ok=True)
        for argv in (["ip", "link", "add", "name", self.bridge, "type", "bridge"],
                     ["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge],
                     ["ip", "link", "set", self.bridge, "up"]):
            done = _run(argv)
            if done.returncode != 0:
                raise PodNetworkError(f"{shlex.join(argv)}: {done.stderr.strip()}")
        Path(f"/proc/sys/net/ipv4/conf/{self.bridge}/route_localnet").write_text("1\n")
        self._rule = ["PREROUTING", "-i", self.bridge, "-d", f"{SERVICE_IP}/32", "-p", "tcp", "--dport",
                      str(SERVICE_PORT), "-m", "comment", "--comment", self.bridge, "-j", "DNAT",
                      "--to-destination", f"127.0.0.1:{api_port}"]
        done = _run(["iptables", "-t", "nat", "-A", *self._rule])
        if done.returncode != 0:
            raise PodNetworkError(f"iptables -t nat -A {shlex.join(self._rule)}: {done.stderr.strip()}")

    def stop(self) -> list[str]:
        """Remove the rule and the bridge (what is not there is fine); return what could not be removed."""
        problems: list[str] = []
        if self._rule:
            done = _run(["iptables", "-t", "nat", "-D", *self._rule])
            if done.returncode != 0 and "does a matching rule exist" not in done.stderr:
                problems.append(f"iptables rule for {self.bridge} not removed: {done.stderr.strip()}")
            self._rule = []
        if Path(f"/sys/class/net/{self.bridge}").exists():
            done = _run(["ip", "link", "delete", self.bridge])
            if done.returncode != 0:
                problems.append(f"bridge {self.bridge} not removed: {done.stderr.strip()}")
        return problems

"""A real OCI registry for tests: Debian's `docker-registry` (distribution 2.8), loopback only, plain HTTP.

`RegistryServer(base)` writes a config.yml whose storage is `base`/storage and whose address is 127.0.0.1:0, runs
`/usr/bin/docker-registry serve config.yml` (never the package's systemd service), reads the port it was given from
its log ("listening on 127.0.0.1:PORT": no free-port race), and waits until `/v2/` answers. `blobs_served` lists the
blobs a client fetched whole (its access log), so a test can tell a pull from the registry from a local copy.
`stop` ends it by its PID. A missing binary fails the test with how to install it (`make system-deps`), never skips.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml

REGISTRY = "docker-registry"
READY_TIMEOUT_S = 30.0
LISTENING = re.compile(r"listening on 127\.0\.0\.1:([0-9]+)")
# Its access log, one line per request in the combined format:
# 127.0.0.1 - - [date] "GET /v2/evictd/evictd/blobs/sha256:...?ns=... HTTP/1.1" 200 55266357 "" "containerd/1.6.20~ds1"
BLOB_GET = re.compile(r'"GET /v2/(\S+?)/blobs/(sha256:[0-9a-f]{64})(?:\?\S*)? HTTP/[0-9.]+" 200 [0-9]+ "[^"]*" "([^"]*)"')


def registry_binary() -> str:
    path = shutil.which(REGISTRY)
    assert path is not None, f"{REGISTRY} not found: install Debian's docker-registry package (make system-deps)"
    return path


class RegistryServer:
    """One registry serving `base`/storage on 127.0.0.1; `address` is its host:port."""

    def __init__(self, base: Path) -> None:
        self.storage = base / "storage"
        config = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}},
            # A fixed secret: the registry warns about a random one on every start.
            "http": {"addr": "127.0.0.1:0", "secret": "evictd-tests"},
        }
        self.config_path = base / "config.yml"
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log_path = base / "registry.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen([registry_binary(), "serve", str(self.config_path)], stdout=self._log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.address = self._wait_ready()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"docker-registry exited: {self.log()[-2000:]}"
            found = LISTENING.search(self.log())
            if found is not None:
                address = f"127.0.0.1:{found.group(1)}"
                try:
                    with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as response:
                        if response.status == 200:
                            return address
                except OSError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"docker-registry not ready within {READY_TIMEOUT_S} s: {self.log()[-2000:]}")

    def blobs_served(self, repository: str, user_agent: str) -> set[str]:
        """The digests of the blobs of `repository` (e.g. evictd/evictd) served whole (200) to a client whose
        User-Agent starts with `user_agent` (e.g. "containerd/")."""
        return {digest for name, digest, agent in BLOB_GET.findall(self.log())
                if name == repository and agent.startswith(user_agent)}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def running_registry(base: Path) -> Iterator[RegistryServer]:
    """A registry in `base` for a fixture's life: stopped and its storage (the image's layers, ~94 MB) removed after."""
    server = RegistryServer(base)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.storage, ignore_errors=True)


def helm_home_env(home: Path) -> dict[str, str]:
    """The environment with helm's configuration, cache and data (its registry logins) in `home`, not root's."""
    return {**os.environ, "HELM_CONFIG_HOME": str(home / "config"), "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data")}

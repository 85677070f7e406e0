"""A real Prometheus server (Debian's `prometheus` package) for tests: loopback only, a temporary data folder.

`PrometheusServer` writes a prometheus.yml scraping the given targets every second under job "evictd" (with the
node's name as instance, as deploy/monitoring/podmonitor.yaml relabels it) and evaluating the given rule files
every second, starts the server on a free loopback port, waits until it is ready, and answers PromQL queries
and the alert list through its HTTP API. `stop` ends it by its PID. `PROMETHEUS` and `PROMTOOL` name the Debian
binaries; a missing one fails the test with how to install it (`make system-deps`), never skips it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from evictd_process import free_port

PROMETHEUS = "prometheus"
PROMTOOL = "promtool"
READY_TIMEOUT_S = 30.0
SCRAPE_INTERVAL = "1s"


def debian_binary(name: str) -> str:
    """Return the path of a binary of Debian's prometheus package; fail the test if it is not installed."""
    path = shutil.which(name)
    assert path is not None, f"{name} not found: install Debian's prometheus package (make system-deps)"
    return path


class PrometheusServer:
    """One Prometheus server scraping `targets` (host:port) as job "evictd", instance `instance`."""

    def __init__(self, base: Path, targets: list[str], rule_files: list[Path], instance: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL,
                       "scrape_timeout": SCRAPE_INTERVAL},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{
                "job_name": "evictd",
                "static_configs": [{"targets": targets}],
                "relabel_configs": [{"target_label": "instance", "replacement": instance}],
            }],
        }
        self.config_path = base / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log_path = base / "prometheus.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [debian_binary(PROMETHEUS), f"--config.file={self.config_path}", f"--storage.tsdb.path={base / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"prometheus exited: {self.log_path.read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready within {READY_TIMEOUT_S} s: {self.log_path.read_text()[-2000:]}")

    def api(self, path: str, **params: str) -> Any:
        """Return the `data` of a successful API answer (fail the test on an error answer)."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:  # 400/422: a query Prometheus refuses; say which and why
            raise AssertionError(f"{path} {params}: {exc.code} {exc.read().decode()}") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Return the instant vector (or scalar as one sample) of `expr` now."""
        data = self.api("query", query=expr)
        if data["resultType"] == "vector":
            return list(data["result"])
        return [{"metric": {}, "value": data["result"]}]

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

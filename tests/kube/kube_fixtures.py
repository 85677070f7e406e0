"""Fixtures for tests against the test Kubernetes API server (`apiserver.py`).

A pytest plugin, registered for the whole suite by tests/conftest.py (``pytest_plugins``), so any test folder
(tests/kube, tests/e2e, ...) can ask for these fixtures. If the server cannot start, the test fails (never skips).

* ``kube_pki`` (session): one CA with server and client certificates, made once with openssl.
* ``apiserver``: a started `ApiServer` on 127.0.0.1 with empty storage, stopped after the test.
* ``core_v1``: a real `kubernetes.client.CoreV1Api` built from the server's kubeconfig (mutual TLS).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apiserver import ApiServer
from kube_pki import Pki


@pytest.fixture(scope="session")
def kube_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("kube-pki"))


@pytest.fixture
def apiserver(tmp_path: Path, kube_pki: Pki) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path / "apiserver", kube_pki)
    try:
        server.start()
    except (OSError, ValueError) as exc:  # socket, TLS material (ssl.SSLError is an OSError)
        server.stop()
        pytest.fail(f"could not start the test API server: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def api_client(apiserver: ApiServer) -> Iterator[Any]:
    client = apiserver.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def core_v1(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)

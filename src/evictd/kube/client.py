"""Building evictd's Kubernetes API client (`api.KubeApi`) from credentials, with the `kubernetes` package's own
loaders (imported lean: see `lean_import.py`), and which API failures are worth retrying."""

from __future__ import annotations

import os

import yaml

from evictd.core.errors import ConfigError, KubeError
from evictd.kube.api import KubeApi
from evictd.kube.kubeconfig_shape import kubeconfig_problem
from evictd.kube.lean_import import import_module

# Statuses after which the same request may succeed later: throttling, server errors, no answer.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


def is_retryable(error: KubeError) -> bool:
    """True when the API may accept the same request later (no answer, throttled, or a server error)."""
    return error.status is None or error.status in RETRYABLE_STATUSES


def build_api_client(kubeconfig: str = "") -> KubeApi:
    """Return the API client for `kubeconfig`, or for the in-cluster service account when empty, without urllib3's
    retries (evictd's journal decides what to retry). Raises ConfigError when the credentials cannot be loaded."""
    if kubeconfig:
        # The loader calls a missing or unreadable file "Invalid kube-config file. No configuration found.".
        try:
            with open(os.path.expanduser(kubeconfig), "rb") as file:
                text = file.read()
        except OSError as exc:
            raise ConfigError(f"cannot read {kubeconfig}: {exc.strerror}", key="kubeconfig", value=kubeconfig) from None
        try:
            problem = kubeconfig_problem(yaml.safe_load(text))
        except yaml.YAMLError as exc:
            problem = f"not YAML: {str(exc).splitlines()[0]}"
        if problem:
            raise ConfigError(f"malformed kubeconfig: {problem}", key="kubeconfig", value=kubeconfig)
    configuration = import_module("kubernetes.client.configuration").Configuration()
    loaders = import_module("kubernetes.config.kube_config" if kubeconfig else "kubernetes.config.incluster_config")
    try:
        if kubeconfig:
            loaders.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            loaders.load_incluster_config(client_configuration=configuration)
    except Exception as exc:  # the loaders raise assorted types for unreadable or missing credentials
        key = "kubeconfig" if kubeconfig else "in-cluster credentials"
        raise ConfigError(f"cannot load Kubernetes credentials: {exc}", key=key, value=kubeconfig or None) from None
    configuration.retries = False
    return KubeApi(configuration)
